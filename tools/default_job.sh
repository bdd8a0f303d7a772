#!/usr/bin/env bash
# The README's default job, run by its first command and, after the test suite, by .ci/run:
# the quick comparison of the seven seed schemes on copying (every scheme fails past its training
# length), then the positive control on addition (position coupling generalises to 5x; the model's
# own positions do not). Reports in reports/quick/ and reports/addition_quick/. Needs build/pelab.
set -euo pipefail
cd "$(dirname "$0")/.."
build/pelab compare configs/compare/quick.yaml
build/pelab compare configs/compare/addition_quick.yaml
