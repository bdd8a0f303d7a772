#!/usr/bin/env bash
# ctest PeerPositionCoupling.RefusesBadInputAndMatchesPelabCIs: bench/peer_position_coupling.py
# (the authors' position-coupling code at pelab's scale) refuses, before anything runs or is
# written, with one line on stderr and exit 2: a checkout that is not there, a folder that is not
# their repository, their files without git (the commit could not be recorded), a checkout with
# local changes, a link planted under --out, a missing peer environment, and bad options. Its summary's interval is pelab's
# (mean +- t * sd / sqrt(n), clipped to [0, 100]): the published coupled+shaw cells 96.7 [92.9,
# 100.0] and 91.7 [74.8, 100.0] come out of the same seeds; the validation exact match it reports
# is the last VAL line of run.py's log. Needs python3 and git, no torch.
#   tests/peer_position_coupling_test.sh SOURCE_DIR
set -u
src="$1"
script="$src/bench/peer_position_coupling.py"
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
fail() { echo "FAIL: $*"; echo "--- stdout"; cat "$t/out"; echo "--- stderr"; cat "$t/err"; exit 1; }
refused() {  # words-expected-on-stderr, then the arguments
  local want="$1"; shift
  python3 "$script" "$@" > "$t/out" 2> "$t/err"
  local rc=$?
  [ "$rc" -eq 2 ] || fail "exit $rc, expected 2 for: $*"
  [ "$(wc -l < "$t/err")" -eq 1 ] || fail "not one line on stderr for: $*"
  grep -q -- "$want" "$t/err" || fail "stderr does not say '$want' for: $*"
  [ ! -s "$t/out" ] || fail "stdout on a refusal: $*"
  [ ! -e "$t/o" ] || fail "the output folder was made on a refusal: $*"
}
refused "no such folder" --checkout "$t/none" --out "$t/o"
mkdir -p "$t/empty"
refused "not a checkout of HanseulJo/position-coupling (no run.py)" --checkout "$t/empty" --out "$t/o"
# A planted checkout: their file names, no code.
co="$t/co"
for f in run.py evaluate_model.py configs/config.yaml configs/task/addition_coupled.yaml \
         configs/model/CustomT5DecoderOnly.yaml src/data/addition.py; do
  mkdir -p "$co/$(dirname "$f")"; echo "# planted" > "$co/$f"
done
refused "not a git checkout" --checkout "$co" --out "$t/o"
git -C "$co" init -q && git -C "$co" add -A &&
  git -C "$co" -c user.name=t -c user.email=t@t commit -q -m planted || fail "git init"
echo "changed" >> "$co/run.py"
refused "has local changes" --checkout "$co" --out "$t/o"
git -C "$co" checkout -q -- run.py
# A link planted under --out (the run folder an interrupted run's clean-up deletes, a file the
# results are copied onto, the output folder itself) is refused; what it points at is untouched.
mkdir -p "$t/victim" && echo keep > "$t/victim/file"
mkdir -p "$t/o2/work" && ln -s "$t/victim" "$t/o2/work/learned_seed1"
refused "learned_seed1 is a link" --checkout "$co" --out "$t/o2" --variants learned --seeds 1
rm -rf "$t/o2" && mkdir -p "$t/o2/raw/relative_seed2" &&
  ln -s "$t/victim/file" "$t/o2/raw/relative_seed2/cfg.json"
refused "cfg.json is a link" --checkout "$co" --out "$t/o2" --variants relative --seeds 2
rm -rf "$t/o2" && ln -s "$t/victim" "$t/o2"
refused "o2 is a link" --checkout "$co" --out "$t/o2" --variants relative --seeds 2
[ "$(cat "$t/victim/file")" = keep ] && [ "$(ls "$t/victim")" = file ] || fail "the link's target changed"
rm -f "$t/o2"
export PELAB_PEER_VENV="$t/novenv"
refused "run bench/peer_venv.sh once first" --checkout "$co" --out "$t/o"
refused "--variants must be" --checkout "$co" --out "$t/o" --variants learned,rope
refused "--jobs must be 1 or 2" --checkout "$co" --out "$t/o" --jobs 3
refused "--lengths must be increasing and evenly spaced" --checkout "$co" --out "$t/o" --lengths 5,10,25
refused "--lengths must be distinct integers" --checkout "$co" --out "$t/o" --lengths 5,31
refused "--seeds must be" --checkout "$co" --out "$t/o" --seeds 1,x
refused "--steps must be" --checkout "$co" --out "$t/o" --steps 0
python3 - "$script" "$t/train.log" > "$t/out" 2> "$t/err" <<'PY' || fail "interval convention"
import importlib.util, sys
spec = importlib.util.spec_from_file_location("peer", sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
got = [m.fmt_ci([95, 98, 97]), m.fmt_ci([84, 97, 94]), m.fmt_ci([0, 0, 0]), m.fmt_ci([14])]
want = ["96.7 [92.9, 100.0]", "91.7 [74.8, 100.0]", "0.0 [0.0, 0.0]", "14.0"]
assert got == want, (got, want)
# Convergence is read from run.py's own lines: the last VAL (1-5 digits), not VAL_LONG or TRAIN.
log = sys.argv[2]
with open(log, "w") as f:
    f.write("Epoch 1/2 VAL Loss 0.1 TokenAcc 0.9 InstAcc 0.5\n"
            "Epoch 2/2 TRAIN Loss 0.0 TokenAcc 1.0 InstAcc 0.9\n"
            "Epoch 2/2 VAL Loss 0.0 TokenAcc 1.0 InstAcc 0.995\n"
            "Epoch 2/2 VAL_LONG Loss 0.0 TokenAcc 1.0 InstAcc 0.25\n")
assert m.last_valid(log) == 99.5, m.last_valid(log)
with open(log, "w") as f:
    f.write("Traceback (most recent call last):\n")
assert m.last_valid(log) == "", m.last_valid(log)
PY
echo "peer_position_coupling_test: all refusals and the interval as expected"
