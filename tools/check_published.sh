#!/usr/bin/env bash
# pelab — do the published results reproduce from their run records alone? Every study under
# docs/results that keeps its records as records.tar.xz (a comparison: STUDY/records.tar.xz; a
# suite: STUDY/<task>/records.tar.xz) is reported twice from its archives, into a scratch folder,
# and the published text compared with the new one byte for byte:
#   1. `pelab compare CONFIG --merge STUDY --out T1 [--task ...] --no-plots` (the archives read in
#      place, in memory);
#   2. the archives alone copied into T2, then `pelab compare CONFIG --out T2 --report-only
#      [--task ...] --no-plots` (unpacked into T2's runs/, as a reader regenerating the plots does).
# Compared: each folder's results.csv, table_*.csv and compare.yaml, and for a whole suite its
# summary.csv and literature.csv, where the study publishes them. CONFIG is the one its report.md's
# command names (the last "pelab compare CONFIG ..." line). Nothing is written outside the scratch
# folder.
#
#   tools/check_published.sh PELAB [FOLDER...]
#
# PELAB is the pelab binary; FOLDER a study or one suite task (default: every study with an
# archive under docs/results). Prints one line per check; exits 1 on the first difference or
# failure (the command's output and `diff` shown), 2 on bad usage.
#   tools/check_published.sh build/pelab                                    # all (~2 min)
#   tools/check_published.sh build/pelab docs/results/suite_kazemnejad/parity  # one task (~5 s)
set -uo pipefail

die() { echo "check_published: $*" >&2; exit 1; }
[ $# -ge 1 ] || { echo "usage: tools/check_published.sh PELAB [FOLDER...]" >&2; exit 2; }
pelab="$(realpath -e -- "$1" 2>/dev/null)" && [ -x "$pelab" ] || { echo "check_published: no pelab binary '$1'" >&2; exit 2; }
shift
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
folders=()
for f in "$@"; do
  [ -d "$f" ] || { echo "check_published: no folder '$f'" >&2; exit 2; }
  folders+=("$(realpath -e -- "$f")")
done
cd "$root" || die "cannot enter $root"
if [ ${#folders[@]} -eq 0 ]; then
  # Every study with an archive: the comparison folder, or the suite (each of whose tasks has one).
  while IFS= read -r a; do
    d="$(dirname "$a")"
    [ -f "$d/report.md" ] || continue  # not a comparison's records (e.g. a suite's pilots)
    if [ -f "$(dirname "$d")/summary.md" ]; then d="$(dirname "$d")"; fi
    folders+=("$root/$d")
  done < <(find docs/results -name records.tar.xz | sort)
  mapfile -t folders < <(printf '%s\n' "${folders[@]}" | sort -u)
  [ ${#folders[@]} -gt 0 ] || die "no records.tar.xz under docs/results"
fi

t="$(mktemp -d)" || die "no scratch folder"
trap 'rm -rf "$t"' EXIT

# The config a folder's report was made from: its report.md's last `pelab compare CONFIG` line.
config_of() {
  local c
  c="$(grep -o '^pelab compare [^ ]*' "$1/report.md" 2>/dev/null | tail -1 | cut -d' ' -f3)"
  [ -n "$c" ] && [ -f "$c" ] || die "$1/report.md names no config file of this tree ('$c')"
  printf '%s\n' "$c"
}

same() {  # same PUBLISHED NEW: byte for byte
  cmp -s -- "$1" "$2" && return 0
  echo "check_published: $1 does not reproduce from its records ($3):" >&2
  if [ -f "$2" ]; then diff -- "$1" "$2" | head -20 >&2; else echo "  (not written)" >&2; fi
  exit 1
}

n=0
for f in "${folders[@]}"; do
  # A suite task (its parent has the suite's summary), a suite, or a comparison.
  task=() study="$f" tasks=()
  if [ -f "$f/records.tar.xz" ] && [ -f "$(dirname "$f")/summary.md" ]; then
    study="$(dirname "$f")" task=(--task "$(basename "$f")") tasks=("$(basename "$f")")
    config="$(config_of "$f")"
  elif [ -f "$f/records.tar.xz" ]; then
    config="$(config_of "$f")" tasks=(.)
  else
    for a in "$f"/*/records.tar.xz; do
      [ -f "$a" ] && tasks+=("$(basename "$(dirname "$a")")")
    done
    [ ${#tasks[@]} -gt 0 ] || die "$f holds no records.tar.xz"
    config="$(config_of "$f/${tasks[0]}")"
  fi
  rm -rf "$t"/* && mkdir -p "$t/merge" "$t/report" || die "cannot clear $t"
  for k in "${tasks[@]}"; do
    mkdir -p "$t/report/$k" && cp -- "$study/$k/records.tar.xz" "$t/report/$k/" ||
      die "cannot copy $study/$k/records.tar.xz"
  done
  start=$(date +%s)
  for mode in merge report; do
    if [ "$mode" = merge ]; then
      args=(--merge "$study" --out "$t/merge")
    else
      args=(--out "$t/report" --report-only --progress none)
    fi
    if ! "$pelab" compare "$config" "${args[@]}" "${task[@]}" --no-plots > "$t/log" 2>&1; then
      tail -20 "$t/log" >&2
      die "pelab compare $config ${args[*]} ${task[*]} failed"
    fi
    for k in "${tasks[@]}"; do
      for p in "$study/$k"/results.csv "$study/$k"/table_*.csv "$study/$k"/compare.yaml; do
        [ -f "$p" ] && same "$p" "$t/$mode/$k/$(basename "$p")" "$mode"
      done
      [ -f "$study/$k/results.csv" ] || die "$study/$k has no results.csv"
    done
    if [ ${#task[@]} -eq 0 ] && [ "${tasks[0]}" != . ]; then
      for p in "$study"/summary.csv "$study"/literature.csv; do
        [ -f "$p" ] && same "$p" "$t/$mode/$(basename "$p")" "$mode"
      done
    fi
  done
  n=$((n + 1))
  echo "check_published: ${f#"$root"/}: ${#tasks[@]} results.csv with their tables reproduce from the" \
       "records (--merge and --report-only, $config) in $(( $(date +%s) - start )) s"
done
echo "check_published: $n of $n studies reproduce"
