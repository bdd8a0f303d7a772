#!/usr/bin/env bash
# The README's default job, run by its first command and, after the test suite, by .ci/run:
# the quick comparison of the seven seed schemes on copying (every scheme fails past its training
# length), then the positive control on addition (position coupling generalises to 5x; the model's
# own positions do not). Reports in reports/quick/ and reports/addition_quick/. Needs build/pelab.
# The control's claim is then checked on this machine's own BLAS kernels: every seed of
# coupled+shaw at >= 95 % exact match at 5x (20 digits) and every one of them met its criterion;
# otherwise the job fails naming the seeds (a control that holds on one lucky machine is not a
# control). OPENBLAS_CORETYPE=Haswell (or SkylakeX on a CPU with AVX-512) before the command checks
# it under another kernel set.
set -euo pipefail
cd "$(dirname "$0")/.."
build/pelab compare configs/compare/quick.yaml
build/pelab compare configs/compare/addition_quick.yaml
bash tools/check_control.sh reports/addition_quick/results.csv coupled+shaw 20 0.95
