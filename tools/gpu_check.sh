#!/usr/bin/env bash
# pelab — one-call GPU check (docs/cuda.md, "One-call GPU check").
#
#   tools/gpu_check.sh prepare [DIR]     on the build machine (nvcc, Debian -dev packages): a CUDA
#                                        build (build-gpu/) and a self-contained bundle in DIR
#                                        (default .gpu/): run.sh, gpu_check.sh, pelab-gpu.tar.xz
#                                        (binaries, every non-system shared library, the source tree's
#                                        data), MANIFEST.txt
#   DIR/run.sh [OUT] [--only STEPS]      on the GPU host: unpacks the bundle to a temporary folder
#                                        and runs every check, its results in OUT/results.txt
#   tools/gpu_check.sh run [--bundle DIR | --tree DIR] [--only STEPS] OUT
#                                        the same (--tree: an already unpacked bundle, or any folder
#                                        with bin/ (pelab, pelab_tests, bench_cuda) and src/)
#
# Run steps, in order (--only takes a comma-separated subset; the device probe always runs):
#   host, libs, device, tests_cuda, train, memcheck, racecheck, overhead, bench_cuda, bench_torch,
#   compare, tests_rest
# Each step has its own time limit (`timeout`), and all of them share one budget (PELAB_GPU_BUDGET
# seconds, default 480: the whole check takes at most 8 minutes); a step that would start with too
# little budget left is skipped and reported. The results are one text file, OUT/results.txt (under
# 1 MB: the summary, then each step's figures and, for a failure, its messages), always written (one
# that cannot be written is a failure);
# the full logs are kept under OUT/logs/ only with PELAB_GPU_KEEP_LOGS=1. The exit status is 0 only
# if no step failed. Without a usable CUDA device it stops after the probe, printing one line
# "gpu_check: no CUDA device: ..." (exit 1).
set -uo pipefail
# A `cd` that finds its folder through an exported CDPATH prints the folder, and "$(cd X && pwd)"
# would capture two lines: no cd here consults CDPATH, and none prints.
unset CDPATH

SCRIPT_DIR="$(cd -- "$(dirname "${BASH_SOURCE[0]}")" >/dev/null && pwd)"
BUNDLE_NAME=pelab-gpu.tar.xz

die() { echo "gpu_check: $*" >&2; exit 1; }

# ------------------------------------------------------------------------------------------------
# prepare
# ------------------------------------------------------------------------------------------------

# Libraries a GPU host is assumed to have: glibc's own (libc, libm, ...), the CUDA driver, and cuBLAS
# (54 MiB + 542 MiB for cublasLt: far over the bundle's size budget; taken from the host's CUDA 13
# toolkit or PyTorch's nvidia-cublas wheel, see `libs`).
HOST_LIBS_RE='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libcuda\.so|libcublas\.so|libcublasLt\.so)'

prepare() {
  local root dest build stage t0 tmp
  root="$(cd "$SCRIPT_DIR/.." && pwd)"
  [ -f "$root/CMakeLists.txt" ] || die "prepare runs from a source checkout (no CMakeLists.txt in $root)"
  dest="${1:-$root/.gpu}"
  build="${PELAB_GPU_BUILD:-$root/build-gpu}"
  t0=$(date +%s)
  for tool in cmake ninja patchelf ldd xz tar strip; do
    command -v "$tool" >/dev/null || die "prepare needs '$tool' (apt-get install cmake ninja-build patchelf xz-utils)"
  done
  local launcher=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  # shellcheck disable=SC2086  # PELAB_GPU_CMAKE_ARGS is a list of extra cmake arguments
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPELAB_CUDA=ON \
    "-DCMAKE_CUDA_ARCHITECTURES=${PELAB_GPU_ARCHS:-80;90}" "${launcher[@]}" \
    ${PELAB_GPU_CMAKE_ARGS:-} >/dev/null || die "cmake configure of $build failed"
  grep -q 'PELAB_WITH_CUDA=1' "$build/build.ninja" || die "$build is not a CUDA build (PELAB_WITH_CUDA unset)"
  local targets=(pelab pelab_tests)
  local b
  for b in "$root"/bench/*.cpp; do targets+=("$(basename "$b" .cpp)"); done
  nice ninja -C "$build" "${targets[@]}" || die "build failed ($build)"

  stage="$build/bundle"
  rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/lib" "$stage/src" || die "cannot create $stage"
  for b in "${targets[@]}"; do
    cp "$build/$b" "$stage/bin/" || die "cannot copy $build/$b"
  done

  # Every shared library the binaries load that is not a host library, under its soname.
  local lib name path missing=""
  while read -r name path; do
    if [[ "$name" =~ $HOST_LIBS_RE ]]; then continue; fi
    if [ "$path" = "not" ] || [ ! -f "$path" ]; then missing+=" $name"; continue; fi
    cp -L "$path" "$stage/lib/$name" || die "cannot copy $path"
  done < <(for b in "$stage"/bin/*; do ldd "$b"; done |
           awk '$2 == "=>" { print $1, $3 }' | sort -u)
  [ -z "$missing" ] || die "libraries not found on this machine:$missing"
  # No check needs the static symbol tables (the executables export theirs dynamically, which a
  # backtrace and compute-sanitizer still name functions by): stripped before patchelf edits them.
  for b in "$stage"/bin/* "$stage"/lib/*; do
    strip --strip-unneeded "$b" || die "strip failed on $b"
  done
  # The binaries look in ../lib first (DT_RPATH, which, unlike RUNPATH, also serves the libraries'
  # own dependencies and comes before LD_LIBRARY_PATH); the libraries look next to themselves.
  for b in "$stage"/bin/*; do
    patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$b" || die "patchelf failed on $b"
  done
  for lib in "$stage"/lib/*; do
    patchelf --force-rpath --set-rpath '$ORIGIN' "$lib" || die "patchelf failed on $lib"
  done
  # libstdc++ and libgcc_s need this machine's glibc (2.36 for GCC 12's), the rest of the bundle an
  # older one: they go to lib/cxx/, which the run mode uses only if the host's own are too old.
  mkdir -p "$stage/lib/cxx" || die "cannot create $stage/lib/cxx"
  for lib in "$stage"/lib/libstdc++.so.* "$stage"/lib/libgcc_s.so.*; do
    [ -f "$lib" ] && { mv "$lib" "$stage/lib/cxx/" || die "cannot move $lib"; }
  done

  # The source tree's files (tests/golden, tests/data, configs, docs/*.md, tools, bench
  # scripts): everything git tracks or would track, as it is in the working tree, but the
  # published results (docs/results/, bench/results/), which no check reads.
  if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$root" && git ls-files -co --exclude-standard -z -- . ':!docs/results' ':!bench/results' |
       xargs -0 -r cp --parents -t "$stage/src") ||
      die "cannot copy the source tree"
  else
    cp -r "$root"/{configs,docs,tests,tools,bench} "$stage/src/" || die "cannot copy the source tree"
  fi

  # The lm task's default corpus (Debian's fortunes; a GPU host rarely has the package): the text
  # files only (data/lm.h reads no others); the run mode sets PELAB_FORTUNES_DIR to the copy.
  if [ -d /usr/share/games/fortunes ]; then
    mkdir -p "$stage/share/fortunes" || die "cannot create $stage/share/fortunes"
    find -L /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.*' -exec cp -L -t "$stage/share/fortunes" {} + ||
      die "cannot copy the fortunes corpus"
  fi

  # Check: with only lib/cxx on LD_LIBRARY_PATH, nothing but host libraries resolves outside the
  # bundle.
  local outside
  outside=$(for b in "$stage"/bin/* "$stage"/lib/*.so*; do LD_LIBRARY_PATH="$stage/lib/cxx" ldd "$b"; done |
            awk '$2 == "=>" { print $1, $3 }' | sort -u |
            while read -r name path; do
              case "$path" in "$stage"/*) continue ;; esac
              [[ "$name" =~ $HOST_LIBS_RE ]] || echo "$name -> $path"
            done)
  [ -z "$outside" ] || die "bundled binaries still resolve outside the bundle: $outside"

  tmp="$dest.tmp.$$"
  rm -rf "$tmp" && mkdir -p "$tmp" || die "cannot create $tmp"
  write_manifest "$root" "$build" "$stage" > "$tmp/MANIFEST.txt" || die "cannot write the manifest"
  cp "$tmp/MANIFEST.txt" "$stage/MANIFEST.txt" || die "cannot copy the manifest"
  # One xz block with a 64 MiB dictionary over name-sorted files: the six binaries, which share
  # most of their code, sit side by side in one window (xz -6 -T2's 8 MiB blocks saw one at a time).
  XZ_OPT="${XZ_OPT:--9e -T1}" tar --sort=name -C "$stage" -cJf "$tmp/$BUNDLE_NAME" . ||
    die "cannot pack $tmp/$BUNDLE_NAME"
  cp "$SCRIPT_DIR/gpu_check.sh" "$tmp/gpu_check.sh" || die "cannot copy gpu_check.sh"
  cat > "$tmp/run.sh" <<'EOF' || die "cannot write run.sh"
#!/usr/bin/env bash
# pelab GPU check bundle (made by tools/gpu_check.sh prepare; see MANIFEST.txt and docs/cuda.md).
#   ./run.sh [OUT] [--only STEPS]    unpacks to a temporary folder and runs every check; results
#                                    in OUT/results.txt (default ./gpu-check); exit 0 only if all passed
here="$(unset CDPATH; cd -- "$(dirname "${BASH_SOURCE[0]}")" >/dev/null && pwd)"
out="$PWD/gpu-check"
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then out="$1"; shift; fi
exec bash "$here/gpu_check.sh" run --bundle "$here" "$@" "$out"
EOF
  chmod +x "$tmp/run.sh" "$tmp/gpu_check.sh"
  rm -rf "$dest" && mv "$tmp" "$dest" || die "cannot move $tmp to $dest"
  local secs=$(( $(date +%s) - t0 ))
  echo "gpu_check: bundle $dest ready in ${secs} s: $(du -sh --apparent-size "$dest" | cut -f1) packed" \
       "($(du -sh --apparent-size "$stage" | cut -f1) unpacked, $(find "$stage/lib" -type f | wc -l) bundled libraries)"
  echo "gpu_check: on the GPU host: $dest/run.sh OUT"
  # The device tool carries the bundle beside the working tree, 64 MiB in all.
  bash "$root/tools/device_size.sh" "$dest" ||
    die "the working tree and this bundle would not travel to a GPU (above)"
}

write_manifest() {
  local root="$1" build="$2" stage="$3" f glibc glibcxx
  echo "pelab GPU bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "source: $(git -C "$root" describe --always --dirty 2>/dev/null || echo 'not a git checkout')"
  echo "nvcc: $(sed -n 's/^set(CMAKE_CUDA_COMPILER_VERSION "\(.*\)")/\1/p' "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake)"
  echo "cuda architectures: $(grep -m1 '^CMAKE_CUDA_ARCHITECTURES:' "$build/CMakeCache.txt" | cut -d= -f2)"
  echo "C++ flags: PELAB_NATIVE=$(grep -m1 '^PELAB_NATIVE:' "$build/CMakeCache.txt" | cut -d= -f2)" \
       "(-march=native is $(gcc -march=native -Q --help=target 2>/dev/null | awk '$1 == "-march=" { print $2 }') here)," \
       "CMAKE_CXX_FLAGS='$(grep -m1 '^CMAKE_CXX_FLAGS:' "$build/CMakeCache.txt" | cut -d= -f2)'"
  glibc=$(for f in "$stage"/bin/* "$stage"/lib/*.so*; do objdump -T "$f" 2>/dev/null; done |
          grep -o 'GLIBC_[0-9][0-9.]*' | sort -uV | tail -1)
  glibcxx=$(for f in "$stage"/bin/* "$stage"/lib/*.so*; do objdump -T "$f" 2>/dev/null; done |
            grep -o 'GLIBCXX_[0-9][0-9.]*' | sort -uV | tail -1)
  echo "needs from the host: glibc >= ${glibc#GLIBC_}, the NVIDIA driver (libcuda.so.1) for CUDA" \
       "$(ls "$stage"/lib/libcudart.so.* 2>/dev/null | sed 's/.*libcudart.so.//'), libcublas.so.13 + libcublasLt.so.13"
  echo "libstdc++: needs $glibcxx; the bundled one (lib/cxx, used if the host's is older) needs glibc >=" \
       "$(objdump -T "$stage"/lib/cxx/* 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sort -uV | tail -1 | sed 's/GLIBC_//')"
  echo "bundled libraries:"
  for f in "$stage"/lib/*.so* "$stage"/lib/cxx/*; do
    printf '  %-28s %10s bytes\n' "${f#"$stage"/lib/}" "$(stat -c %s "$f")"
  done
  echo "binaries: $(cd "$stage/bin" && ls | tr '\n' ' ')"
}

# ------------------------------------------------------------------------------------------------
# run
# ------------------------------------------------------------------------------------------------

ALL_STEPS="host libs device tests_cuda train memcheck racecheck overhead bench_cuda bench_torch compare tests_rest"
declare -A STATUS DETAIL SECS LIMIT
LIMIT=([host]=30 [libs]=30 [device]=60 [tests_cuda]=150 [train]=60 [memcheck]=60 [racecheck]=45
       [overhead]=45 [bench_cuda]=75 [bench_torch]=120 [compare]=150 [tests_rest]=120)
RESULTS_CAP=900000  # bytes of OUT/results.txt (each step's section is capped below it)
ORDER=()
RUN_T0=0
OUT=""
SUMMARY_DONE=0

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
budget_left() { awk -v t0="$RUN_T0" -v b="$BUDGET" -v n="$(now)" 'BEGIN { printf "%d", b - (n - t0) }'; }

record() {  # step status detail seconds
  ORDER+=("$1")
  STATUS[$1]="$2"
  DETAIL[$1]="$3"
  SECS[$1]="$4"
  printf 'gpu_check: %-12s %-4s %6s s  %s\n' "$1" "$2" "$4" "$3"
}

# The step's time limit: its own, capped by what is left of the budget (minus 10 s for the summary).
step_limit() {
  local left=$(( $(budget_left) - 10 )) own=${LIMIT[$1]}
  [ "$left" -lt "$own" ] && own=$left
  echo "$own"
}

wanted() { [[ ",$ONLY," == *",$1,"* ]]; }

# The summary block: the device line, one line per step (PASS/FAIL/SKIP, seconds, counts from the
# gtest XML or the reason), the counts and the wall time, and `result: PASS` only if no step failed.
summary_block() {
  local s pass=0 fail=0 skip=0
  echo "pelab GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), host $(uname -n)"
  [ -f "$TREE/MANIFEST.txt" ] && sed -n '1,2p' "$TREE/MANIFEST.txt" | sed 's/^/bundle: /'
  local dev="${DEVICE_LINE:-unknown}"
  echo "device: ${dev#device: }"
  printf '%-12s %-4s %8s  %s\n' step stat seconds detail
  for s in "${ORDER[@]}"; do
    printf '%-12s %-4s %8s  %s\n' "$s" "${STATUS[$s]}" "${SECS[$s]}" "${DETAIL[$s]}"
    case "${STATUS[$s]}" in PASS) pass=$((pass + 1)) ;; FAIL) fail=$((fail + 1)) ;; *) skip=$((skip + 1)) ;; esac
  done
  echo "steps: $pass passed, $fail failed, $skip skipped; wall time $(elapsed "$RUN_T0") s"
  if [ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]; then echo "result: PASS"; else echo "result: FAIL"; fi
}

# gtest failures in a log: each failure's assertion text and the FAILED lines.
gtest_failures() {
  grep -E -A12 '(: Failure$|^\[  FAILED  \]|ERROR SUMMARY|RACECHECK SUMMARY|^=+ (ERROR|Invalid|Race))' "$1" 2>/dev/null |
    head -c 60000
}

# The part of a step's output that goes into results.txt.
excerpt() {
  local step="$1" f
  case "$step" in
    host) grep -v '^$' "$LOGS/host.log" 2>/dev/null | head -60 ;;
    libs|device) [ "${STATUS[$step]}" = PASS ] || tail -40 "$LOGS/$step.log" 2>/dev/null ;;
    tests_cuda|memcheck|racecheck)
      grep -h 'device-parametrized tests run on' "$LOGS/$step.log" 2>/dev/null | head -1
      gtest_failures "$LOGS/$step.log" ;;
    tests_rest) for f in "$LOGS"/tests_rest_*.log; do gtest_failures "$f"; done ;;
    train) [ "${STATUS[$step]}" = PASS ] || tail -60 "$LOGS/train.log" 2>/dev/null ;;
    overhead) cat "$LOGS/overhead.txt" 2>/dev/null ;;
    bench_cuda) grep -v '^$' "$LOGS/bench_cuda.log" 2>/dev/null | head -80 ;;
    bench_torch) cat "$LOGS/bench_torch.txt" 2>/dev/null; tail -30 "$LOGS/bench_torch.log" 2>/dev/null ;;
    compare) cat "$LOGS/compare.txt" 2>/dev/null ;;
  esac
}

# OUT/results.txt, the check's one result file: the summary, then a section per step.
write_results() {
  [ "$SUMMARY_DONE" = 1 ] && return
  SUMMARY_DONE=1
  local s tmp="$OUT/results.txt.tmp"
  {
    summary_block
    for s in "${ORDER[@]}"; do
      echo
      echo "==== $s: ${STATUS[$s]} (${SECS[$s]} s) ${DETAIL[$s]}"
      [ -n "${LOGS:-}" ] && excerpt "$s" | head -c 150000
    done
  } | head -c "$RESULTS_CAP" > "$tmp"  # (an excerpt's missing log is not an error)
  summary_block 2>/dev/null
  # No results.txt is a failure, whatever the steps said.
  [ -s "$tmp" ] && mv -T "$tmp" "$OUT/results.txt" || {
    echo "gpu_check: cannot write $OUT/results.txt: result: FAIL" >&2; return 1; }
}

# gtest XML counts: "tests failures skipped" summed over files (missing files count as nothing).
gtest_counts() {
  local tests=0 fails=0 skips=0 f t
  for f in "$@"; do
    [ -f "$f" ] || continue
    t=$(grep -m1 -o '<testsuites [^>]*' "$f")
    tests=$((tests + $(sed -n 's/.* tests="\([0-9]*\)".*/\1/p' <<< "$t")))
    fails=$((fails + $(sed -n 's/.* failures="\([0-9]*\)".*/\1/p' <<< "$t") + $(sed -n 's/.* errors="\([0-9]*\)".*/\1/p' <<< "$t")))
    skips=$((skips + $(grep -c 'result="skipped"' "$f")))
  done
  echo "$tests $fails $skips"
}

# Runs one step's command under its time limit, output to LOGS/<step>.log; sets RC.
run_logged() {  # step command...
  local step="$1"; shift
  local lim; lim=$(step_limit "$step")
  if [ "$lim" -lt 5 ]; then RC=125; return; fi
  timeout --kill-after=10 "$lim" "$@" > "$LOGS/$step.log" 2>&1
  RC=$?
}

rc_note() {  # rc limit -> text
  case "$1" in
    124|137) echo "timed out after $2 s" ;;
    125) echo "not started: time budget spent" ;;
    *) echo "exit status $1" ;;
  esac
}

find_tool() {  # name: PATH, then the CUDA toolkits
  local c
  c=$(command -v "$1" 2>/dev/null) && { echo "$c"; return 0; }
  for c in /usr/local/cuda/bin/"$1" /usr/local/cuda/"$1"/"$1" /usr/local/cuda-*/bin/"$1" /opt/cuda/bin/"$1"; do
    [ -x "$c" ] && { echo "$c"; return 0; }
  done
  return 1
}

unpack() {  # bundle dir -> prints the unpacked tree
  local bundle="$1" tree
  [ -f "$bundle/$BUNDLE_NAME" ] || die "no bundle at $bundle ($BUNDLE_NAME missing): run tools/gpu_check.sh prepare"
  tree=$(mktemp -d "${TMPDIR:-/tmp}/pelab-gpu.XXXXXX") || die "cannot create a temporary folder"
  if command -v xz >/dev/null; then
    tar -C "$tree" -xJf "$bundle/$BUNDLE_NAME" || die "cannot unpack $bundle/$BUNDLE_NAME"
  else  # no xz-utils: Python's tarfile reads xz too
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$bundle/$BUNDLE_NAME" "$tree" || die "cannot unpack $bundle/$BUNDLE_NAME (no xz, and python3 failed)"
  fi
  echo "$tree"
}

run() {
  local bundle="" only="$ALL_STEPS" out=""
  TREE=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --bundle) bundle="${2:?--bundle needs a folder}"; shift 2 ;;
      --tree) TREE="${2:?--tree needs a folder}"; shift 2 ;;
      --only) only="${2:?--only needs a list of steps}"; shift 2 ;;
      -*) die "run: unknown option '$1' (see the top of tools/gpu_check.sh)" ;;
      *) [ -z "$out" ] || die "run: more than one output folder ('$out', '$1')"; out="$1"; shift ;;
    esac
  done
  [ -n "$out" ] || die "run: missing the output folder (tools/gpu_check.sh run OUT)"
  local s
  for s in ${only//,/ }; do
    [[ " $ALL_STEPS " == *" $s "* ]] || die "run: unknown step '$s' in --only (steps: $ALL_STEPS)"
  done
  ONLY="${only// /,}"
  BUDGET="${PELAB_GPU_BUDGET:-480}"
  RUN_T0=$(now)
  mkdir -p "$out" || die "cannot create $out"
  OUT="$(cd -- "$out" >/dev/null && pwd)" && [ -d "$OUT" ] && [ -w "$OUT" ] ||
    die "cannot write to the output folder '$out'"
  CLEANUP=""
  rm -f "$OUT/results.txt"
  if [ "${PELAB_GPU_KEEP_LOGS:-0}" = 1 ]; then
    LOGS="$OUT/logs"
    mkdir -p "$LOGS" || die "cannot create $LOGS"
  else
    LOGS=$(mktemp -d "${TMPDIR:-/tmp}/pelab-gpu-logs.XXXXXX") || die "cannot create a temporary folder"
    CLEANUP="$LOGS"
  fi
  # No results.txt is a failure, whatever the steps said.
  trap 'exit_rc=$?; write_results || exit_rc=1; [ -z "$CLEANUP" ] || rm -rf $CLEANUP; exit "$exit_rc"' EXIT
  trap 'record interrupted FAIL "interrupted by a signal" 0; exit 1' INT TERM
  if [ -z "$TREE" ]; then
    [ -n "$bundle" ] || { [ -f "$SCRIPT_DIR/$BUNDLE_NAME" ] && bundle="$SCRIPT_DIR"; } || bundle="$SCRIPT_DIR/../.gpu"
    if ! TREE=$(unpack "$bundle"); then record bundle FAIL "cannot unpack the bundle in $bundle" 0; exit 1; fi
    CLEANUP="$CLEANUP $TREE"
  fi
  if ! TREE="$(cd -- "$TREE" >/dev/null 2>&1 && pwd)" || [ ! -x "$TREE/bin/pelab_tests" ]; then
    echo "gpu_check: no bin/pelab_tests in the tree '$TREE'" >&2
    record bundle FAIL "no bin/pelab_tests in the tree '$TREE'" 0
    exit 1
  fi

  export PELAB_SOURCE_DIR="$TREE/src" PELAB_BINARY="$TREE/bin/pelab"
  [ -d "$TREE/share/fortunes" ] && export PELAB_FORTUNES_DIR="$TREE/share/fortunes"
  export OMP_WAIT_POLICY=PASSIVE
  PY=$(command -v python3 || true)
  [ -n "${PELAB_PYTHON:-}" ] && PY="$PELAB_PYTHON"
  [ -n "$PY" ] && export PELAB_PYTHON="$PY"
  local t0 lim
  local ncpu; ncpu=$(nproc)

  # host: what we run on
  t0=$(now)
  {
    uname -a; echo; cat /etc/os-release 2>/dev/null; echo
    echo "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null)"; echo "cpus: $ncpu"
    grep -m1 'model name' /proc/cpuinfo; echo
    [ -f "$TREE/MANIFEST.txt" ] && cat "$TREE/MANIFEST.txt"; echo
    if s=$(find_tool nvidia-smi); then timeout 30 "$s"; timeout 30 "$s" -L; else echo "nvidia-smi not found"; fi
  } > "$LOGS/host.log" 2>&1
  local smi="nvidia-smi not found"
  grep -q '^GPU 0:' "$LOGS/host.log" && smi=$(grep -m1 '^GPU 0:' "$LOGS/host.log")
  sed -n '/NVIDIA-SMI/,$p' "$LOGS/host.log" | head -25
  local need_glibc have_glibc
  need_glibc=$(sed -n 's/^needs from the host: glibc >= \([0-9.]*\),.*/\1/p' "$TREE/MANIFEST.txt" 2>/dev/null)
  have_glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  if [ -n "$need_glibc" ] && [ -n "$have_glibc" ] &&
     [ "$(printf '%s\n%s\n' "$need_glibc" "$have_glibc" | sort -V | head -1)" != "$need_glibc" ]; then
    record host FAIL "glibc $have_glibc is older than the bundle's $need_glibc (build the bundle on an older system)" "$(elapsed "$t0")"
  elif ! grep -qw avx2 /proc/cpuinfo || ! grep -qw fma /proc/cpuinfo; then
    record host FAIL "this CPU lacks AVX2/FMA, which the bundle's binaries use" "$(elapsed "$t0")"
  else
    record host PASS "$ncpu cpus, glibc $have_glibc; $smi" "$(elapsed "$t0")"
  fi

  # libs: every binary must load. The host's libstdc++ unless it is too old (then the bundled
  # lib/cxx, which needs the build machine's glibc); cuBLAS from the host (see HOST_LIBS_RE), looked
  # for in the CUDA toolkits and PyTorch's nvidia-cublas wheel if the loader does not find it.
  t0=$(now)
  local dir found="" cxx="host" err=""
  load_error() {  # the loader's message for pelab_tests (which links everything), or nothing
    "$TREE/bin/pelab_tests" --gtest_filter=NONE --gtest_list_tests 2>&1 >/dev/null | grep -m1 'error while loading' || true
  }
  err=$(load_error)
  if [[ "$err" == *libstdc++* || "$err" == *libgcc_s* || "$err" == *GLIBCXX* || "$err" == *CXXABI* ]]; then
    export LD_LIBRARY_PATH="$TREE/lib/cxx${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    cxx="bundled (the host's is too old)"
    err=$(load_error)
  fi
  if [[ "$err" == *libcublas* ]]; then
    local dirs=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64
                /usr/local/cuda-13*/lib /usr/local/cuda-13*/targets/x86_64-linux/lib)
    if [ -n "$PY" ]; then
      dir=$("$PY" -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null) && dirs+=("$dir")
      dir=$("$PY" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))' 2>/dev/null) && dirs+=("$dir")
    fi
    for dir in "${dirs[@]}"; do
      if [ -f "$dir/libcublas.so.13" ] && [ -f "$dir/libcublasLt.so.13" ]; then found="$dir"; break; fi
    done
    [ -n "$found" ] && export LD_LIBRARY_PATH="$found${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    err=$(load_error)
  fi
  for s in "$TREE"/bin/*; do [ -f "$s" ] && [ -x "$s" ] && { echo "== $s"; ldd "$s"; }; done > "$LOGS/libs.log" 2>&1
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" >> "$LOGS/libs.log"
  if [ -n "$err" ]; then
    record libs FAIL "$err (cuBLAS: install CUDA 13's, or put its folder on LD_LIBRARY_PATH)" "$(elapsed "$t0")"
  else
    record libs PASS "cuBLAS: $(ldd "$TREE/bin/pelab_tests" | awk '$1 == "libcublas.so.13" { print $3 }'); libstdc++: $cxx" "$(elapsed "$t0")"
  fi

  # device: the bundled binary's own probe
  t0=$(now)
  timeout 60 "$TREE/bin/bench_cuda" --check > "$LOGS/device.log" 2>&1
  local probe_rc=$?
  DEVICE_LINE=$(head -1 "$LOGS/device.log")
  if [ "$probe_rc" -ne 0 ]; then
    case "$DEVICE_LINE" in *"no CUDA device"*) ;; *) DEVICE_LINE="no CUDA device: bench_cuda --check: ${DEVICE_LINE:-exit status $probe_rc}" ;; esac
    DEVICE_LINE="no CUDA device: ${DEVICE_LINE#*no CUDA device: }"
    record device FAIL "$DEVICE_LINE" "$(elapsed "$t0")"
    for s in $ALL_STEPS; do
      case "$s" in host|libs|device) ;; *) wanted "$s" && record "$s" SKIP "no CUDA device" 0 ;; esac
    done
    echo "gpu_check: $DEVICE_LINE" >&2
    exit 1
  fi
  record device PASS "$DEVICE_LINE" "$(elapsed "$t0")"

  local tn tf ts
  # The CUDA kernels' tests, the op driver (every op on every device) and the device-parametrized
  # tests' cuda instances (tests/device_param.h): none may fail or skip, and the cuda instances
  # must exist (they do only where the tests see the device).
  local cuda_filter='Cuda*:OpDriver*:DeviceParam.*:*/cuda'
  if wanted tests_cuda; then
    t0=$(now)
    run_logged tests_cuda "$TREE/bin/pelab_tests" "--gtest_filter=$cuda_filter" "--gtest_output=xml:$LOGS/tests_cuda.xml"
    read -r tn tf ts < <(gtest_counts "$LOGS/tests_cuda.xml")
    local ndev; ndev=$(grep -c '<testcase name="[^"]*/cuda"' "$LOGS/tests_cuda.xml" 2>/dev/null)
    if [ "$RC" -eq 0 ] && [ "$ts" -eq 0 ] && [ "$tn" -gt 0 ] && [ "${ndev:-0}" -gt 0 ]; then
      record tests_cuda PASS "$tn run ($ndev device-parametrized on cuda), 0 failed, 0 skipped ($cuda_filter)" "$(elapsed "$t0")"
    elif [ "$RC" -eq 0 ] && [ "$ts" -eq 0 ] && [ "$tn" -gt 0 ]; then
      record tests_cuda FAIL "$tn run, but no device-parametrized test ran on cuda (the tests did not see the device: see DeviceParam)" "$(elapsed "$t0")"
    else
      record tests_cuda FAIL "$tn run, $tf failed, $ts skipped ($cuda_filter); $(rc_note "$RC" "${LIMIT[tests_cuda]}")" "$(elapsed "$t0")"
    fi
  fi

  # train: configs/default.yaml for 30 steps on cuda and on cpu, float32 and float64; every logged
  # loss (training rows every step, the evaluation rows at the end) must agree.
  if wanted train; then
    t0=$(now)
    train_compare
  fi

  # compute-sanitizer on a subset that takes every kernel family: reductions, GEMM (also the
  # multi-level batches of gemm_outer), fused softmax/layer norm/cross-entropy, index ops,
  # elementwise, random, optimizers (per parameter and the multi-tensor guarded updates), whole
  # training steps and checkpoints.
  local san tool filt
  san=$(find_tool compute-sanitizer || true)
  for tool in memcheck racecheck; do
    wanted "$tool" || continue
    t0=$(now)
    if [ -z "$san" ]; then
      record "$tool" SKIP "compute-sanitizer not found (PATH, /usr/local/cuda/bin): not run" 0
      continue
    fi
    if [ "$tool" = memcheck ]; then
      filt="${PELAB_GPU_MEMCHECK_FILTER:-CudaKernels.*:Devices/DeviceTraining.RepeatedStepsAreBitIdentical/cuda:Devices/DeviceCheckpoint.*/cuda:Devices/DeviceStep.GuardedStep*/cuda:Devices/DeviceErrors.*/cuda}"
    else
      filt="${PELAB_GPU_RACECHECK_FILTER:-CudaKernels.ReductionsEveryPathAndFirstArgmax:CudaKernels.SumSquaresMatchesCpuAndIsDeterministic:CudaKernels.FusedSoftmaxLayerNormCrossEntropyLargeRows:CudaKernels.IndexOpsMatchCpuAndAccumulateDeterministically:CudaKernels.OptimizerStepsMatchCpu:CudaKernels.GuardedUpdatesMatchCpu}"
    fi
    run_logged "$tool" "$san" --tool "$tool" --error-exitcode 99 --print-limit 50 \
      "$TREE/bin/pelab_tests" "--gtest_filter=$filt" "--gtest_output=xml:$LOGS/$tool.xml"
    read -r tn tf ts < <(gtest_counts "$LOGS/$tool.xml")
    local errs
    errs=$(grep -o '[A-Z]* SUMMARY: .*' "$LOGS/$tool.log" | tail -1)
    if [ "$RC" -eq 0 ]; then
      record "$tool" PASS "${errs:-no summary line}; $tn tests ($filt)" "$(elapsed "$t0")"
    else
      record "$tool" FAIL "${errs:-no summary line}; $tn tests, $tf failed; $(rc_note "$RC" "${LIMIT[$tool]}")" "$(elapsed "$t0")"
    fi
  done

  # overhead: a training step's host overhead (bench_train's per-step backend calls, device->host
  # reads, syncs, allocations, and ms) on cuda, and the same counted on this host's CPU with
  # attention composed as on the GPU (they should agree); reads and syncs must be 0.
  if wanted overhead; then
    t0=$(now)
    overhead
  fi

  if wanted bench_cuda; then
    t0=$(now)
    run_logged bench_cuda "$TREE/bin/bench_cuda" --steps "${PELAB_GPU_BENCH_STEPS:-10}"
    if [ "$RC" -eq 0 ]; then
      record bench_cuda PASS "every scheme, ref and large" "$(elapsed "$t0")"
    else
      record bench_cuda FAIL "$(rc_note "$RC" "${LIMIT[bench_cuda]}")" "$(elapsed "$t0")"
    fi
  fi

  if wanted bench_torch; then
    t0=$(now)
    bench_torch
  fi

  # compare: the lab's own job, `pelab compare configs/compare/addition_quick.yaml --jobs <cores>`,
  # with train.device=cpu and =cuda on this host: wall time and runs finished within the limit.
  if wanted compare; then
    t0=$(now)
    compare_devices
  fi

  # The rest of the suite (CPU-side tests, which also use the GPU where a test takes every backend),
  # sharded over the host's cores, 2 threads a shard: last, with what is left of the budget.
  if wanted tests_rest; then
    t0=$(now)
    lim=$(step_limit tests_rest)
    if [ "$lim" -lt 5 ]; then
      record tests_rest SKIP "not started: time budget spent" 0
    else
      local shards=$(( ncpu / 2 )) i pids=() rcs=0
      [ "$shards" -lt 1 ] && shards=1
      [ "$shards" -gt 8 ] && shards=8
      for ((i = 0; i < shards; i++)); do
        GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i OMP_NUM_THREADS=2 \
          timeout --kill-after=10 "$lim" "$TREE/bin/pelab_tests" "--gtest_filter=-$cuda_filter" \
          "--gtest_output=xml:$LOGS/tests_rest_$i.xml" > "$LOGS/tests_rest_$i.log" 2>&1 &
        pids+=($!)
      done
      RC=0
      for i in "${pids[@]}"; do wait "$i"; s=$?; [ "$s" -ne 0 ] && RC=$s && rcs=$((rcs + 1)); done
      read -r tn tf ts < <(gtest_counts "$LOGS"/tests_rest_*.xml)
      if [ "$RC" -eq 0 ]; then
        record tests_rest PASS "$tn run, 0 failed, $ts skipped ($shards shards)" "$(elapsed "$t0")"
      else
        record tests_rest FAIL "$tn run, $tf failed, $ts skipped; $rcs of $shards shards: $(rc_note "$RC" "$lim")" "$(elapsed "$t0")"
      fi
    fi
  fi
  local f
  for f in "${STATUS[@]}"; do [ "$f" = FAIL ] && exit 1; done
  exit 0
}

# Max relative differences of the logged losses: float32 within 1e-3 (30 AdamW steps of float32
# rounding differences: GEMM summation order, libm), float64 within 1e-9.
train_compare() {
  local dt dev rc=0 notes="" lim
  if [ -z "$PY" ]; then record train FAIL "python3 not found (it compares metrics.jsonl)" "$(elapsed "$t0")"; return; fi
  : > "$LOGS/train.log"
  for dt in float32 float64; do
    for dev in cuda cpu; do
      lim=$(step_limit train)
      if [ "$lim" -lt 5 ]; then record train SKIP "not finished: time budget spent" "$(elapsed "$t0")"; return; fi
      (cd "$TREE/src" && timeout --kill-after=10 "$lim" "$TREE/bin/pelab" train configs/default.yaml \
        --set train.device="$dev" --set model.dtype="$dt" --set train.steps=30 --set train.warmup=10 \
        --set train.log_every=1 \
        --set train.eval_every=30 --set train.checkpoint_every=30 --set train.run_dir="$LOGS/train" \
        --set train.run_name="${dt}_$dev" --overwrite) >> "$LOGS/train.log" 2>&1 || {
        rc=1; notes+="pelab train $dt on $dev failed (train.log); "; }
    done
  done
  if [ "$rc" -eq 0 ]; then
    notes=$("$PY" - "$LOGS/train" <<'EOF' 2>&1
import json, sys
root = sys.argv[1]
tol = {"float32": 1e-3, "float64": 1e-9}
out, bad = [], False
for dt, t in tol.items():
    rows = {}
    for dev in ("cuda", "cpu"):
        with open(f"{root}/{dt}_{dev}/metrics.jsonl") as f:
            rows[dev] = [json.loads(l) for l in f if l.strip()]
    a, b = rows["cuda"], rows["cpu"]
    key = lambda r: (r["type"], r["step"], r.get("split"))
    if [key(r) for r in a] != [key(r) for r in b]:
        out.append(f"{dt}: the runs logged different rows"); bad = True; continue
    worst = max((abs(x["loss"] - y["loss"]) / max(1.0, abs(y["loss"])), key(x)) for x, y in zip(a, b))
    if worst[0] > t:
        bad = True
    out.append(f"{dt} max rel loss diff {worst[0]:.2e} (tol {t:.0e}, at {worst[1][0]} step {worst[1][1]})")
print("; ".join(out))
sys.exit(1 if bad else 0)
EOF
)
    rc=$?
  fi
  if [ "$rc" -eq 0 ]; then record train PASS "$notes" "$(elapsed "$t0")"; else record train FAIL "$notes" "$(elapsed "$t0")"; fi
}

# One line per bench_torch.py row: config, scheme, mode and the figures (the BLAS record left out).
torch_rows() {  # config jsonl
  "$PY" - "$1" "$2" <<'EOF'
import json, sys
cfg = sys.argv[1]
for line in open(sys.argv[2]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if "skipped" in r:
        print("%-5s %-10s %-7s %s" % (cfg, r["scheme"], r["mode"], r["skipped"]))
        continue
    ops = r.get("ops_per_step", {})
    print("%-5s %-10s %-7s median %8.3f ms  cpu %8.3f ms  compile %6s s  peak %7.1f MiB  ops %s" % (
        cfg, r["scheme"], r["mode"], r["median_ms"], r["cpu_ms"],
        "%.1f" % r["compile_s"] if "compile_s" in r else "-", r.get("peak_cuda_mib", 0),
        " ".join("%s=%s" % kv for kv in sorted(ops.items())) or "-"))
EOF
}

# PyTorch on the same GPU: bench/bench_torch.py --device cuda at bench_cuda's two configs, one
# Python process per config (torch is imported once) for every registered scheme (the list comes
# from this pelab's config-reference), eager first, then torch.compile, each process within its
# share of the step's limit (--budget: the runs it cannot start are rows saying so).
bench_torch() {
  if [ -z "$PY" ] || ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
    record bench_torch SKIP "python3 with a CUDA PyTorch not found: not run" "$(elapsed "$t0")"
    return
  fi
  local cfg lim share rc fails=0 args rows=0 skipped=0 modes="eager,compile"
  "$PY" -c 'import torch, sys; sys.exit(0 if hasattr(torch, "compile") else 1)' || modes="eager"
  : > "$LOGS/bench_torch.txt"
  : > "$LOGS/bench_torch.log"
  for cfg in ref large; do
    lim=$(step_limit bench_torch)
    if [ "$lim" -lt 20 ]; then echo "$cfg   all        -       not started: time budget spent" >> "$LOGS/bench_torch.txt"; continue; fi
    # ref gets 55 % of what is left, large the rest; the run a process starts last may overrun
    # its --budget (two thirds of its share) until the share's timeout
    if [ "$cfg" = ref ]; then share=$(( lim * 55 / 100 )); else share=$lim; fi
    if [ "$cfg" = ref ]; then args=(--d_model 128 --heads 4 --d_ff 512 --len 32); else args=(--d_model 512 --heads 8 --d_ff 2048 --len 512); fi
    timeout --kill-after=10 "$share" "$PY" "$TREE/src/bench/bench_torch.py" --pelab "$TREE/bin/pelab" \
      --device cuda --scheme all --modes "$modes" --budget $(( share * 2 / 3 )) --count-ops \
      "${args[@]}" --layers 2 --batch 32 --steps "${PELAB_GPU_BENCH_STEPS:-10}" \
      > "$LOGS/bench_torch_$cfg.jsonl" 2>> "$LOGS/bench_torch.log"
    rc=$?
    if [ "$rc" -ne 0 ]; then
      fails=$((fails + 1))
      echo "$cfg: $(rc_note "$rc" "$share")" >> "$LOGS/bench_torch.log"
    fi
    torch_rows "$cfg" "$LOGS/bench_torch_$cfg.jsonl" >> "$LOGS/bench_torch.txt"
  done
  rows=$(grep -c ' median ' "$LOGS/bench_torch.txt")
  skipped=$(grep -vc ' median ' "$LOGS/bench_torch.txt")
  if [ "$fails" -eq 0 ] && [ "$rows" -gt 0 ]; then
    record bench_torch PASS "$rows runs ($modes), $skipped not run; one process per config" "$(elapsed "$t0")"
  else
    record bench_torch FAIL "$rows runs, $skipped not run, $fails processes failed" "$(elapsed "$t0")"
  fi
}

# bench_train's per-step host overhead at the ref config for every registered scheme (the list from
# this pelab's config-reference), on cuda and (attention composed, as the CUDA backend runs it) on
# this host's CPU.
overhead() {
  local scheme side lim schemes bad=0 n=0
  : > "$LOGS/overhead.jsonl"
  schemes=$("$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import pelab_config
print(" ".join(pelab_config.registered_schemes(sys.argv[2])))' "$TREE/src/bench" "$TREE/bin/pelab" \
              2>> "$LOGS/overhead.err")
  for scheme in $schemes; do
    for side in cuda cpu; do
      lim=$(step_limit overhead)
      if [ "$lim" -lt 5 ]; then break 2; fi
      local extra=(--device cuda --steps 10 --warmup 3)
      [ "$side" = cpu ] && extra=(--device cpu --attention composite --threads "$ncpu" --steps 5 --warmup 2)
      if timeout --kill-after=10 "$lim" "$TREE/bin/bench_train" --scheme "$scheme" \
           "${extra[@]}" >> "$LOGS/overhead.jsonl" 2>> "$LOGS/overhead.err"; then
        n=$((n + 1))
      else
        bad=$((bad + 1))
      fi
    done
  done
  "$PY" - "$LOGS/overhead.jsonl" > "$LOGS/overhead.txt" 2>&1 <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    c = r["per_step"]
    print("%-10s %-6s %-9s median %8.3f ms  cpu %8.3f ms  per step: calls %g reads %g syncs %g "
          "writes %g allocs %g (raw %g)" % (r["scheme"], r["device"], r["attention"], r["median_ms"],
          r["cpu_ms"], c["calls"], c["reads"], c["syncs"], c["writes"], c["allocs"], c["raw_allocs"]))
EOF
  tail -5 "$LOGS/overhead.err" >> "$LOGS/overhead.txt" 2>/dev/null
  local round_trips
  round_trips=$(grep -c 'reads [1-9]\|syncs [1-9]' "$LOGS/overhead.txt")
  if [ -z "$schemes" ]; then
    record overhead FAIL "cannot list the registered schemes from $TREE/bin/pelab config-reference" "$(elapsed "$t0")"
  elif [ "$bad" -eq 0 ] && [ "$n" -gt 0 ] && [ "$round_trips" -eq 0 ]; then
    record overhead PASS "$n bench_train runs (ref config); no step reads back or waits" "$(elapsed "$t0")"
  else
    record overhead FAIL "$n runs, $bad failed; $round_trips with reads or syncs per step" "$(elapsed "$t0")"
  fi
}

# addition_quick on cpu and cuda, --jobs = this host's cores: wall seconds, runs finished.
compare_devices() {
  local dev lim start secs finished total rc
  : > "$LOGS/compare.txt"
  total=$(cd "$TREE/src" && "$TREE/bin/pelab" compare configs/compare/addition_quick.yaml --plan \
            --out "$LOGS/compare_plan" 2>/dev/null | grep -c 'to train')
  for dev in cpu cuda; do
    lim=$(step_limit compare)
    if [ "$dev" = cpu ]; then lim=$(( lim * 2 / 5 )); fi  # cuda gets the rest
    if [ "$lim" -lt 10 ]; then echo "$dev: not started: time budget spent" >> "$LOGS/compare.txt"; continue; fi
    start=$(now)
    (cd "$TREE/src" && timeout --kill-after=10 "$lim" "$TREE/bin/pelab" compare \
       configs/compare/addition_quick.yaml --set train.device="$dev" --jobs "$ncpu" \
       --out "$LOGS/compare_$dev" --progress lines --no-plots) > "$LOGS/compare_$dev.log" 2>&1
    rc=$?
    secs=$(elapsed "$start")
    finished=$(find "$LOGS/compare_$dev/runs" -name record.json 2>/dev/null | wc -l)
    if [ "$rc" -eq 0 ]; then
      echo "$dev: $secs s for all $total runs (--jobs $ncpu)" >> "$LOGS/compare.txt"
      grep '^|' "$LOGS/compare_$dev/report.md" 2>/dev/null | head -12 >> "$LOGS/compare.txt"
    else
      echo "$dev: $(rc_note "$rc" "$lim"): $finished of $total runs finished in $secs s (--jobs $ncpu)" >> "$LOGS/compare.txt"
      tail -5 "$LOGS/compare_$dev.log" >> "$LOGS/compare.txt"
    fi
  done
  local line
  line=$(grep -E '^(cpu|cuda): ' "$LOGS/compare.txt" | sed 's/ (--jobs.*//' | paste -sd ';' | sed 's/;/; /g')
  # a device whose runs do not finish within its share is measured as slower than that, not failed
  record compare PASS "$line" "$(elapsed "$t0")"
}

case "${1:-}" in
  prepare) shift; prepare "$@" ;;
  run) shift; run "$@" ;;
  *) echo "usage: tools/gpu_check.sh prepare [DIR] | run [--bundle DIR | --tree DIR] [--only STEPS] OUT" >&2; exit 2 ;;
esac
