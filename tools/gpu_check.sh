#!/usr/bin/env bash
# pelab — one-call GPU check (docs/cuda.md, "One-call GPU check").
#
#   tools/gpu_check.sh prepare [DIR]     on the build machine (nvcc, Debian -dev packages): a CUDA
#                                        build (build-gpu/) and a self-contained bundle in DIR
#                                        (default .gpu/): run.sh, gpu_check.sh, pelab-gpu.tar.xz
#                                        (binaries, every non-system shared library, the source tree's
#                                        data), MANIFEST.txt
#   DIR/run.sh [OUT] [--only STEPS]      on the GPU host: unpacks the bundle to a temporary folder
#                                        and runs every check, writing every result under OUT
#   tools/gpu_check.sh run [--bundle DIR | --tree DIR] [--only STEPS] OUT
#                                        the same (--tree: an already unpacked bundle, or any folder
#                                        with bin/ (pelab, pelab_tests, bench_cuda) and src/)
#
# Run steps, in order (--only takes a comma-separated subset; the device probe always runs):
#   host, libs, device, tests_cuda, memcheck, racecheck, train, bench_cuda, bench_torch, tests_rest
# Each step has its own time limit (`timeout`), and all of them share one budget (PELAB_GPU_BUDGET
# seconds, default 540, so the whole check fits a 10-minute session); a step that would start with
# too little budget left is skipped and reported. OUT/summary.txt is always written (one that cannot
# be written is a failure); the exit status is 0 only if no step failed. Without a usable CUDA device
# it stops after the probe, printing one line "gpu_check: no CUDA device: ..." (exit 1).
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
#                                    under OUT (default ./gpu-check); exit 0 only if all passed
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

ALL_STEPS="host libs device tests_cuda memcheck racecheck train bench_cuda bench_torch tests_rest"
declare -A STATUS DETAIL SECS LIMIT
LIMIT=([host]=30 [libs]=30 [device]=60 [tests_cuda]=240 [memcheck]=150 [racecheck]=150 [train]=150
       [bench_cuda]=150 [bench_torch]=150 [tests_rest]=300)
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

write_summary() {
  [ "$SUMMARY_DONE" = 1 ] && return
  SUMMARY_DONE=1
  local s pass=0 fail=0 skip=0 tmp="$OUT/summary.txt.tmp"
  {
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
  } > "$tmp" && mv -T "$tmp" "$OUT/summary.txt" || {
    echo "gpu_check: cannot write $OUT/summary.txt: result: FAIL" >&2; return 1; }
  cat "$OUT/summary.txt" 2>/dev/null
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

# Runs one step's command under its time limit, output to OUT/<step>.log; sets RC.
run_logged() {  # step command...
  local step="$1"; shift
  local lim; lim=$(step_limit "$step")
  if [ "$lim" -lt 5 ]; then RC=125; return; fi
  timeout --kill-after=10 "$lim" "$@" > "$OUT/$step.log" 2>&1
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
  BUDGET="${PELAB_GPU_BUDGET:-540}"
  RUN_T0=$(now)
  mkdir -p "$out" || die "cannot create $out"
  OUT="$(cd -- "$out" >/dev/null && pwd)" && [ -d "$OUT" ] && [ -w "$OUT" ] ||
    die "cannot write to the output folder '$out'"
  CLEANUP=""
  # No summary.txt is a failure, whatever the steps said.
  trap 'exit_rc=$?; write_summary || exit_rc=1; [ -z "$CLEANUP" ] || rm -rf "$CLEANUP"; exit "$exit_rc"' EXIT
  trap 'record interrupted FAIL "interrupted by a signal" 0; exit 1' INT TERM
  if [ -z "$TREE" ]; then
    [ -n "$bundle" ] || { [ -f "$SCRIPT_DIR/$BUNDLE_NAME" ] && bundle="$SCRIPT_DIR"; } || bundle="$SCRIPT_DIR/../.gpu"
    if ! TREE=$(unpack "$bundle"); then record bundle FAIL "cannot unpack the bundle in $bundle" 0; exit 1; fi
    CLEANUP="$TREE"
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
  } > "$OUT/host.log" 2>&1
  local smi="nvidia-smi not found"
  grep -q '^GPU 0:' "$OUT/host.log" && smi=$(grep -m1 '^GPU 0:' "$OUT/host.log")
  sed -n '/NVIDIA-SMI/,$p' "$OUT/host.log" | head -25
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
  for s in "$TREE"/bin/*; do [ -f "$s" ] && [ -x "$s" ] && { echo "== $s"; ldd "$s"; }; done > "$OUT/libs.log" 2>&1
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" >> "$OUT/libs.log"
  if [ -n "$err" ]; then
    record libs FAIL "$err (cuBLAS: install CUDA 13's, or put its folder on LD_LIBRARY_PATH)" "$(elapsed "$t0")"
  else
    record libs PASS "cuBLAS: $(ldd "$TREE/bin/pelab_tests" | awk '$1 == "libcublas.so.13" { print $3 }'); libstdc++: $cxx" "$(elapsed "$t0")"
  fi

  # device: the bundled binary's own probe
  t0=$(now)
  timeout 60 "$TREE/bin/bench_cuda" --check > "$OUT/device.log" 2>&1
  local probe_rc=$?
  DEVICE_LINE=$(head -1 "$OUT/device.log")
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
  local cuda_filter='Cuda*:OpDriver*'
  if wanted tests_cuda; then
    t0=$(now)
    run_logged tests_cuda "$TREE/bin/pelab_tests" "--gtest_filter=$cuda_filter" "--gtest_output=xml:$OUT/tests_cuda.xml"
    read -r tn tf ts < <(gtest_counts "$OUT/tests_cuda.xml")
    if [ "$RC" -eq 0 ] && [ "$ts" -eq 0 ] && [ "$tn" -gt 0 ]; then
      record tests_cuda PASS "$tn run, 0 failed, 0 skipped ($cuda_filter)" "$(elapsed "$t0")"
    else
      record tests_cuda FAIL "$tn run, $tf failed, $ts skipped ($cuda_filter); $(rc_note "$RC" "${LIMIT[tests_cuda]}")" "$(elapsed "$t0")"
    fi
  fi

  # compute-sanitizer on a subset that takes every kernel family: reductions, GEMM, fused softmax/
  # layer norm/cross-entropy, index ops, elementwise, random, optimizers, a whole training step.
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
      filt="${PELAB_GPU_MEMCHECK_FILTER:-CudaKernels.*:CudaTraining.RepeatedStepsAreBitIdentical:CudaCheckpoint.*}"
    else
      filt="${PELAB_GPU_RACECHECK_FILTER:-CudaKernels.ReductionsEveryPathAndFirstArgmax:CudaKernels.SumSquaresMatchesCpuAndIsDeterministic:CudaKernels.FusedSoftmaxLayerNormCrossEntropyLargeRows:CudaKernels.IndexOpsMatchCpuAndAccumulateDeterministically:CudaKernels.OptimizerStepsMatchCpu}"
    fi
    run_logged "$tool" "$san" --tool "$tool" --error-exitcode 99 --print-limit 50 \
      "$TREE/bin/pelab_tests" "--gtest_filter=$filt" "--gtest_output=xml:$OUT/$tool.xml"
    read -r tn tf ts < <(gtest_counts "$OUT/$tool.xml")
    local errs
    errs=$(grep -o '[A-Z]* SUMMARY: .*' "$OUT/$tool.log" | tail -1)
    if [ "$RC" -eq 0 ]; then
      record "$tool" PASS "${errs:-no summary line}; $tn tests ($filt)" "$(elapsed "$t0")"
    else
      record "$tool" FAIL "${errs:-no summary line}; $tn tests, $tf failed; $(rc_note "$RC" "${LIMIT[$tool]}")" "$(elapsed "$t0")"
    fi
  done

  # train: configs/default.yaml for 30 steps on cuda and on cpu, float32 and float64; every logged
  # loss (training rows every step, the evaluation rows at the end) must agree.
  if wanted train; then
    t0=$(now)
    train_compare
  fi

  if wanted bench_cuda; then
    t0=$(now)
    run_logged bench_cuda "$TREE/bin/bench_cuda" --steps "${PELAB_GPU_BENCH_STEPS:-20}"
    if [ "$RC" -eq 0 ]; then
      record bench_cuda PASS "every scheme, ref and large (bench_cuda.log)" "$(elapsed "$t0")"
    else
      record bench_cuda FAIL "$(rc_note "$RC" "${LIMIT[bench_cuda]}") (bench_cuda.log)" "$(elapsed "$t0")"
    fi
  fi

  if wanted bench_torch; then
    t0=$(now)
    bench_torch
  fi

  # The rest of the suite (CPU-side tests, which also use the GPU where a test takes every backend),
  # sharded over the host's cores, 2 threads a shard.
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
          "--gtest_output=xml:$OUT/tests_rest_$i.xml" > "$OUT/tests_rest_$i.log" 2>&1 &
        pids+=($!)
      done
      RC=0
      for i in "${pids[@]}"; do wait "$i"; s=$?; [ "$s" -ne 0 ] && RC=$s && rcs=$((rcs + 1)); done
      read -r tn tf ts < <(gtest_counts "$OUT"/tests_rest_*.xml)
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
  : > "$OUT/train.log"
  for dt in float32 float64; do
    for dev in cuda cpu; do
      lim=$(step_limit train)
      if [ "$lim" -lt 5 ]; then record train SKIP "not finished: time budget spent" "$(elapsed "$t0")"; return; fi
      (cd "$TREE/src" && timeout --kill-after=10 "$lim" "$TREE/bin/pelab" train configs/default.yaml \
        --set train.device="$dev" --set model.dtype="$dt" --set train.steps=30 --set train.warmup=10 \
        --set train.log_every=1 \
        --set train.eval_every=30 --set train.checkpoint_every=30 --set train.run_dir="$OUT/train" \
        --set train.run_name="${dt}_$dev" --overwrite) >> "$OUT/train.log" 2>&1 || {
        rc=1; notes+="pelab train $dt on $dev failed (train.log); "; }
    done
  done
  if [ "$rc" -eq 0 ]; then
    notes=$("$PY" - "$OUT/train" <<'EOF' 2>&1
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

# PyTorch on the same GPU: bench/bench_torch.py --device cuda at bench_cuda's two configs.
bench_torch() {
  if [ -z "$PY" ] || ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
    record bench_torch SKIP "python3 with a CUDA PyTorch not found: not run" "$(elapsed "$t0")"
    return
  fi
  local cfg scheme lim fails=0 args schemes
  : > "$OUT/bench_torch.jsonl"
  : > "$OUT/bench_torch.log"
  # Every registered scheme, as this pelab lists them (`pelab config-reference`'s pe.scheme row).
  schemes=$("$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import pelab_config
print(" ".join(pelab_config.registered_schemes(sys.argv[2])))' "$TREE/src/bench" "$TREE/bin/pelab" \
              2>> "$OUT/bench_torch.log")
  if [ -z "$schemes" ]; then
    record bench_torch FAIL "cannot list the registered schemes from $TREE/bin/pelab config-reference (bench_torch.log)" "$(elapsed "$t0")"
    return
  fi
  for cfg in ref large; do
    if [ "$cfg" = ref ]; then args=(--d_model 128 --heads 4 --d_ff 512 --len 32); else args=(--d_model 512 --heads 8 --d_ff 2048 --len 512); fi
    for scheme in $schemes; do
      lim=$(step_limit bench_torch)
      if [ "$lim" -lt 5 ]; then record bench_torch FAIL "not finished: time budget spent" "$(elapsed "$t0")"; return; fi
      if timeout --kill-after=10 "$lim" "$PY" "$TREE/src/bench/bench_torch.py" --pelab "$TREE/bin/pelab" --device cuda --scheme "$scheme" \
           "${args[@]}" --layers 2 --batch 32 --steps "${PELAB_GPU_BENCH_STEPS:-20}" \
           > "$OUT/bench_torch.tmp" 2>> "$OUT/bench_torch.log"; then
        tail -1 "$OUT/bench_torch.tmp" | sed "s/^{/{\"config\": \"$cfg\", /" >> "$OUT/bench_torch.jsonl"
      else
        fails=$((fails + 1)); echo "$cfg $scheme failed" >> "$OUT/bench_torch.log"
      fi
    done
  done
  rm -f "$OUT/bench_torch.tmp"
  if [ "$fails" -eq 0 ]; then
    record bench_torch PASS "every registered scheme ($schemes), ref and large (bench_torch.jsonl)" "$(elapsed "$t0")"
  else
    record bench_torch FAIL "$fails runs failed (bench_torch.log)" "$(elapsed "$t0")"
  fi
}

case "${1:-}" in
  prepare) shift; prepare "$@" ;;
  run) shift; run "$@" ;;
  *) echo "usage: tools/gpu_check.sh prepare [DIR] | run [--bundle DIR | --tree DIR] [--only STEPS] OUT" >&2; exit 2 ;;
esac
