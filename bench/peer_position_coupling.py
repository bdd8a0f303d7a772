#!/usr/bin/env python3
"""pelab bench — the authors' own code for position coupling (Cho et al. 2024,
github HanseulJo/position-coupling) run at the lab's scale, as calibration rows for
configs/compare/addition.yaml (docs/experiments.md, "Addition: the authors' code as calibration").

    bench/peer_position_coupling.py --checkout DIR --out DIR [--variants learned,relative]
        [--seeds 1,2,3] [--steps 8000] [--lengths 5,10,15,20,25,30] [--eval-examples 1000]
        [--jobs 2] [--buckets 64]

DIR is a local git checkout of the authors' repository (nothing is fetched: clone it first). The
environment is bench/.venv-peer (made once by bench/peer_venv.sh; PELAB_PEER_VENV overrides). Each
run is the authors' run.py (training) then their evaluate_model.py (test), unchanged, in its own
process and working folder under OUT/work/, with their config overrides set to the lab's scale:

  task        their addition_coupled (answer reversed, zero-padded, coupled IDs, the units digit
              lowest, a random starting ID per example drawn each time it is read), operands of
              1-5 digits, task.max_position 32 (pelab's task.max_position_id: the IDs of a
              30-digit test are trained ones); 8000 x 64 = 512000 training examples (each seen once)
  model       their CustomT5DecoderOnly (RMSNorm pre+post, gated GELU), 1 layer, d_model 64,
              4 heads (d_kv 16), d_ff 256; position_encoding_type abs_learned (variant "learned",
              a table of 33 rows) or coupled_relative_bias (variant "relative": a bias per head for
              each coupled-ID distance, clipped to --buckets buckets)
  training    8000 steps, batch 64, AdamW lr 1e-3 (betas 0.9/0.95, no weight decay), warmup 200
              steps (their warmup_ratio 0.025) then their cosine to 0.1 lr, grad clip 1
  validation  during training only at 1-5 digits (their val and val_long splits both in range);
              the model tested is the last one (their ++best=False), so no test length selects
  test        their evaluate_model.py: --eval-examples additions at each test length, both
              operands of that length, IDs from 1 (their val_long), instance-wise exact match

Two CPU-only adaptations, neither touching the arithmetic: their scripts call
torch.cuda.is_bf16_supported(), which torch 1.13 without CUDA answers by raising, so it answers
False (the dtype it picks is used only under CUDA autocast); torch.compile is off (model.compile
False; torch 1.13 has none). Every run uses one thread (torch.set_num_threads(1),
OMP_NUM_THREADS=1) under `nice -n 10`, --jobs at a time.

Writes OUT/raw/<variant>_seed<S>/{cfg.json,performances_EVAL_last.json,train.log,eval.log},
OUT/results.csv (variant, seed, length, exact_match, token_accuracy, train_wall_s) and
OUT/summary.md (mean [95 % t-interval] over seeds per length, the machine, torch, the checkout's
commit, wall times), both rewritten after every finished run. The same command into the same OUT
reuses the runs that finished (OUT/work/<variant>_seed<S>/done.json, with the settings they ran
under; other settings are refused) and starts the others afresh. Bad input: one line on stderr and
exit 2; a failed run: exit 1.
"""
import argparse
import csv
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NEEDED = ["run.py", "evaluate_model.py", "configs/config.yaml", "configs/task/addition_coupled.yaml",
          "configs/model/CustomT5DecoderOnly.yaml", "src/data/addition.py"]
VARIANTS = {"learned": "abs_learned", "relative": "coupled_relative_bias"}
MAX_POSITION = 32          # pelab's task.max_position_id for addition.yaml (30-digit tests)
# Student t quantiles t_{0.975, df}, df = 1..30 (pelab's CI: mean +- t * sd / sqrt(n), clipped).
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060,
        2.056, 2.052, 2.048, 2.045, 2.042]


class Refused(Exception):
    pass


def int_list(text, what, lo, hi):
    try:
        vals = [int(x) for x in text.split(",") if x.strip() != ""]
    except ValueError:
        raise Refused(f"{what} must be comma-separated integers, got '{text}'")
    if not vals or any(v < lo or v > hi for v in vals) or len(set(vals)) != len(vals):
        raise Refused(f"{what} must be distinct integers in [{lo}, {hi}], got '{text}'")
    return vals


def git(checkout, *args):
    r = subprocess.run(["git", "-C", checkout, *args], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def check_checkout(checkout):
    if not os.path.isdir(checkout):
        raise Refused(f"--checkout {checkout}: no such folder (clone the authors' repository "
                      "HanseulJo/position-coupling there first; nothing is fetched)")
    missing = [p for p in NEEDED if not os.path.isfile(os.path.join(checkout, p))]
    if missing:
        raise Refused(f"--checkout {checkout}: not a checkout of HanseulJo/position-coupling "
                      f"(no {missing[0]})")
    commit = git(checkout, "rev-parse", "HEAD")
    if not commit:
        raise Refused(f"--checkout {checkout}: not a git checkout (the commit run is recorded: "
                      "clone it, do not copy files)")
    dirty = git(checkout, "status", "--porcelain", "--untracked-files=no")
    if dirty:
        raise Refused(f"--checkout {checkout}: has local changes to tracked files "
                      f"({dirty.splitlines()[0].strip()}); the figures must be of commit {commit[:12]}")
    return commit


def venv_python():
    venv = os.environ.get("PELAB_PEER_VENV", os.path.join(ROOT, "bench", ".venv-peer"))
    py = os.path.join(venv, "bin", "python")
    if not os.access(py, os.X_OK):
        raise Refused(f"no peer environment at {venv}: run bench/peer_venv.sh once first")
    probe = subprocess.run([py, "-c", "import platform, torch, transformers, hydra, omegaconf, "
                            "dotmap, torchinfo, tqdm, matplotlib, wandb; print(torch.__version__, "
                            "transformers.__version__, platform.python_version())"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        raise Refused(f"the peer environment {venv} is incomplete ({last}): run bench/peer_venv.sh")
    return py, probe.stdout.split()


def overrides(variant, seed, steps, buckets):
    o = ["device=cpu", f"seed={seed}", f"seed_data={seed}", "use_wandb=False",
         "group_name=pelab_scale", f"exp_name={variant}",
         f"model.position_encoding_type={VARIANTS[variant]}",
         "model.num_layers=1", "model.num_heads=4", "model.d_model=64", "model.d_kv=16",
         "model.d_ff=256", f"model.n_positions={MAX_POSITION + 1}", "model.compile=False",
         "model.save=True",
         "task=addition_coupled", f"task.max_position={MAX_POSITION}",
         "task.train.min_n_digits=1", "task.train.max_n_digits=5", f"task.train.n_data={steps * 64}",
         "task.val.min_n_digits=1", "task.val.max_n_digits=5", "task.val.n_data=1000",
         "task.val_long.min_n_digits=5", "task.val_long.max_n_digits=5", "task.val_long.n_data=200",
         "training.batch_size_train=64", "training.batch_size_eval=100",
         f"training.n_steps={steps}", "training.optimizer.lr=0.001",
         f"training.scheduler.warmup_ratio={200 / steps if steps > 200 else 0.0}"]
    if variant == "relative":
        o.append(f"model.relative_attention_num_buckets={buckets}")
    return o


# --- the child: one of the authors' scripts, in this process, at one thread ----------------------
def child(kind, checkout, args_json):
    import torch
    torch.set_num_threads(1)
    torch.cuda.is_bf16_supported = lambda: False   # CPU-only torch 1.13 raises here; unused on CPU
    sys.path.insert(0, checkout)
    args = json.loads(args_json)
    if kind == "_train":
        import run
        run.run(args)
    else:
        import evaluate_model
        evaluate_model.evaluate(args)


def last_valid(train_log):
    """Exact match (%) on their 'val' split (1-5 digits) at the end of training: the last
    "Epoch E/N VAL Loss .. TokenAcc .. InstAcc X" line run.py prints; '' when there is none."""
    val = ""
    with open(train_log, errors="replace") as f:
        for line in f:
            w = line.split()
            if len(w) >= 9 and w[0] == "Epoch" and w[2] == "VAL" and w[7] == "InstAcc":
                try:
                    val = round(100 * float(w[8]), 2)
                except ValueError:
                    val = ""
    return val


def machine():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} vCPUs, {platform.system()} {platform.release()}"


def ci(vals):
    n = len(vals)
    mean = sum(vals) / n
    if n < 2:
        return mean, None, None
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
    h = T975[min(n - 1, len(T975)) - 1] * sd / math.sqrt(n)
    return mean, max(0.0, mean - h), min(100.0, mean + h)


def fmt_ci(vals):
    mean, lo, hi = ci(vals)
    return f"{mean:.1f}" if lo is None else f"{mean:.1f} [{lo:.1f}, {hi:.1f}]"


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv):
    if len(argv) >= 1 and argv[0] in ("_train", "_eval"):
        child(argv[0], argv[1], argv[2])
        return 0
    ap = argparse.ArgumentParser(prog="bench/peer_position_coupling.py", allow_abbrev=False,
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkout", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--variants", default="learned,relative")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--steps", type=int, default=8000)
    ap.add_argument("--lengths", default="5,10,15,20,25,30")
    ap.add_argument("--eval-examples", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--buckets", type=int, default=64)
    a = ap.parse_args(argv)
    try:
        variants = [v for v in a.variants.split(",") if v]
        if not variants or any(v not in VARIANTS for v in variants):
            raise Refused(f"--variants must be a comma list of {', '.join(VARIANTS)}; got '{a.variants}'")
        seeds = int_list(a.seeds, "--seeds", 0, 2**31 - 1)
        lengths = int_list(a.lengths, "--lengths", 1, MAX_POSITION - 2)
        if lengths != sorted(lengths) or \
                len({lengths[i + 1] - lengths[i] for i in range(len(lengths) - 1)}) > 1:
            raise Refused("--lengths must be increasing and evenly spaced (their evaluate_model.py "
                          f"takes a first, a last and a step); got '{a.lengths}'")
        if not 1 <= a.steps <= 10**6:
            raise Refused(f"--steps must be in [1, 1000000], got {a.steps}")
        if not 1 <= a.eval_examples <= 100000:
            raise Refused(f"--eval-examples must be in [1, 100000], got {a.eval_examples}")
        if a.jobs not in (1, 2):
            raise Refused(f"--jobs must be 1 or 2 (2 cores shared), got {a.jobs}")
        if not 3 <= a.buckets <= 1024:
            raise Refused(f"--buckets must be in [3, 1024], got {a.buckets}")
        checkout = os.path.abspath(a.checkout)
        commit = check_checkout(checkout)
        out = os.path.abspath(a.out)
        if os.path.exists(out) and not os.path.isdir(out):
            raise Refused(f"--out {out} exists and is not a folder")
        # No link under --out is followed: the clean-up of an interrupted run (rmtree) and the
        # copies into raw/ would reach another folder or file through one.
        runs_here = [f"{v}_seed{s}" for v in variants for s in seeds]
        for p in [out, os.path.join(out, "work"), os.path.join(out, "raw")] + \
                [os.path.join(out, "work", r) for r in runs_here] + \
                [os.path.join(out, "raw", r, f) for r in runs_here
                 for f in ("", "cfg.json", "performances_EVAL_last.json")]:
            if os.path.islink(p.rstrip(os.sep)):
                raise Refused(f"--out: {p.rstrip(os.sep)} is a link; nothing is written or deleted "
                              "through one")
        py, (torch_v, tf_v, py_v) = venv_python()
    except Refused as e:
        print(f"bench/peer_position_coupling.py: {e}", file=sys.stderr)
        return 2

    step = lengths[1] - lengths[0] if len(lengths) > 1 else 1
    work, raw = os.path.join(out, "work"), os.path.join(out, "raw")
    os.makedirs(work, exist_ok=True)
    os.makedirs(raw, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0", WANDB_MODE="disabled",
               TOKENIZERS_PARALLELISM="false")
    me = os.path.abspath(__file__)
    runs = [(v, s) for s in seeds for v in variants]   # every variant gets its first seed first
    pending, active, walls, failed = [], {}, {}, []
    # What decides a run's result: a finished run in OUT is reused only when all of it is the same.
    settings = {"commit": commit, "steps": a.steps, "lengths": lengths,
                "eval_examples": a.eval_examples, "buckets": a.buckets, "torch": torch_v,
                "transformers": tf_v}
    reused = []
    for v, s in runs:
        done = os.path.join(work, f"{v}_seed{s}", "done.json")
        if not os.path.isfile(done):
            pending.append((v, s))
            continue
        try:
            with open(done) as f:
                rec = json.load(f)
            same = rec["settings"] == settings
            tw, ew = float(rec["train_wall_s"]), float(rec["eval_wall_s"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"bench/peer_position_coupling.py: {done}: unreadable ({e}); remove it", file=sys.stderr)
            return 2
        if not same:
            print(f"bench/peer_position_coupling.py: {done}: a run of other settings "
                  f"({rec['settings']}); use another --out", file=sys.stderr)
            return 2
        walls[(v, s, "_train")], walls[(v, s, "_eval")] = tw, ew
        reused.append(f"{v} seed {s}")

    def start(v, s, kind):
        wd = os.path.join(work, f"{v}_seed{s}")
        if kind == "_train" and os.path.isdir(wd):
            shutil.rmtree(wd)   # what an interrupted run of this command left: start it afresh
        os.makedirs(wd, exist_ok=True)
        ov = overrides(v, s, a.steps, a.buckets)
        if kind == "_train":
            args = {"config_path": "./configs", "config_name": "config", "overrides": ov}
        else:
            args = {"config_path": "./configs", "config_name": "config",
                    "overrides": ov + ["++best=False", f"task.val_long.n_data={a.eval_examples}"],
                    "min_n_digits": lengths[0], "max_n_digits": lengths[-1], "step_digits": step,
                    "compile": False}
        log = open(os.path.join(wd, "train.log" if kind == "_train" else "eval.log"), "w")
        p = subprocess.Popen(["nice", "-n", "10", py, me, kind, checkout, json.dumps(args)],
                             cwd=wd, env=env, stdout=log, stderr=subprocess.STDOUT)
        return p, log, time.time()

    def report(final):
        rows = []
        for v, s in runs:
            if (v, s, "_eval") not in walls or any(f.startswith(f"{v} seed {s} ") for f in failed):
                continue
            logdir = os.path.join(work, f"{v}_seed{s}", "log", "pelab_scale", v, f"seed{s}_seedData{s}")
            dest = os.path.join(raw, f"{v}_seed{s}")
            os.makedirs(dest, exist_ok=True)
            for name in ("cfg.json", "performances_EVAL_last.json"):
                shutil.copyfile(os.path.join(logdir, name), os.path.join(dest, name))
            for name in ("train.log", "eval.log"):   # their tqdm bars: keep the lines that say something
                with open(os.path.join(work, f"{v}_seed{s}", name), errors="replace") as f:
                    keep = [ln for part in f.read().split("\n") for ln in [part.split("\r")[-1]]
                            if ln.strip() and "it/s]" not in ln and "s/it]" not in ln]
                write_atomic(os.path.join(dest, name), "\n".join(keep) + "\n")
            with open(os.path.join(logdir, "performances_EVAL_last.json")) as f:
                perf = json.load(f)
            valid = last_valid(os.path.join(dest, "train.log"))
            for L, em, tok in zip(perf["X"], perf["instancewise_accuracies"], perf["tokenwise_accuracies"]):
                rows.append({"variant": v, "seed": s, "length": L, "exact_match": round(100 * em, 2),
                             "token_accuracy": round(100 * tok, 2), "valid_exact_match": valid,
                             "train_wall_s": round(walls[(v, s, "_train")]),
                             "eval_wall_s": round(walls[(v, s, "_eval")])})
        with open(os.path.join(out, "results.csv.tmp"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["variant", "seed", "length", "exact_match",
                                              "token_accuracy", "valid_exact_match",
                                              "train_wall_s", "eval_wall_s"])
            w.writeheader()
            w.writerows(rows)
        os.replace(os.path.join(out, "results.csv.tmp"), os.path.join(out, "results.csv"))

        cmd = "bench/peer_position_coupling.py " + " ".join(argv)
        md = [f"# Position coupling, the authors' code at pelab's scale", "",
              f"    {cmd}", "",
              f"- checkout: HanseulJo/position-coupling commit {commit}",
              f"- torch {torch_v}, transformers {tf_v}, Python {py_v} "
              f"(bench/.venv-peer); one thread per run, {a.jobs} at a time",
              f"- machine: {machine()}; load average at the end "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}",
              f"- {a.steps} steps x 64, lr 1e-3, 1 layer, d_model 64, 4 heads, d_ff 256, "
              f"task.max_position {MAX_POSITION}; relative buckets {a.buckets}",
              f"- test: {a.eval_examples} additions per length (their evaluate_model.py, last model)",
              f"- wall time of this invocation {time.time() - t0:.0f} s (each run's own in results.csv)", ""]
        if failed:
            md += ["**Failed runs** (not in the table): " + "; ".join(failed), ""]
        unfinished = [f"{v} seed {s}" for v, s in runs if (v, s, "_eval") not in walls and
                      not any(f.startswith(f"{v} seed {s} ") for f in failed)]
        if reused:
            md += ["Reused from an earlier invocation of this command into the same --out (same "
                   "settings, wall times as measured then): " + ", ".join(reused), ""]
        if unfinished:
            md += ["**Not finished when this was written** (not in the table): " +
                   ", ".join(unfinished), ""]
        md += [f"Exact match (%), mean [95 % t-interval] over the seeds (n per row):", "",
               "| variant | n | " + " | ".join(f"{L} ({L / 5:g}x)" for L in lengths) +
               " | valid 1-5 digits, last step | train s per run |",
               "|---|---:|" + "---:|" * len(lengths) + "---:|---:|"]
        for v in variants:
            vr = [r for r in rows if r["variant"] == v]
            sd = sorted({r["seed"] for r in vr})
            if not sd:
                continue
            cells = [fmt_ci([r["exact_match"] for r in vr if r["length"] == L]) for L in lengths]
            tw = [walls[(v, s, "_train")] for s in sd]
            va = sorted({r["valid_exact_match"] for r in vr}, key=str)
            md.append(f"| {v} | {len(sd)} | " + " | ".join(cells) +
                      f" | {', '.join(str(x) for x in va)} | {min(tw):.0f}–{max(tw):.0f} |")
        md += ["", "Per seed (exact match %):", "", "| variant | seed | " +
               " | ".join(str(L) for L in lengths) + " |", "|---|---:|" + "---:|" * len(lengths)]
        for v in variants:
            for s in seeds:
                vr = {r["length"]: r["exact_match"] for r in rows if r["variant"] == v and r["seed"] == s}
                if vr:
                    md.append(f"| {v} | {s} | " + " | ".join(f"{vr[L]:g}" for L in lengths) + " |")
        write_atomic(os.path.join(out, "summary.md"), "\n".join(md) + "\n")
        if final:
            print("\n".join(md))

    t0 = time.time()
    while pending or active:
        while pending and len(active) < a.jobs:
            v, s = pending.pop(0)
            active[(v, s)] = ("_train",) + start(v, s, "_train")
        time.sleep(2)
        for key, (kind, p, log, ts) in list(active.items()):
            if p.poll() is None:
                continue
            log.close()
            del active[key]
            walls[key + (kind,)] = time.time() - ts
            v, s = key
            if p.returncode != 0:
                failed.append(f"{v} seed {s} ({kind[1:]}: exit {p.returncode}, "
                              f"{os.path.join(work, f'{v}_seed{s}', kind[1:] + '.log')})")
                continue
            if kind == "_train":
                active[key] = ("_eval",) + start(v, s, "_eval")
            print(f"{v} seed {s}: {kind[1:]} done in {walls[key + (kind,)]:.0f} s", flush=True)
            if kind == "_eval":
                write_atomic(os.path.join(work, f"{v}_seed{s}", "done.json"), json.dumps(
                    {"settings": settings, "train_wall_s": walls[(v, s, "_train")],
                     "eval_wall_s": walls[(v, s, "_eval")]}, indent=1) + "\n")
                report(final=False)   # a run stopped later still leaves what finished

    report(final=True)
    if failed:
        print("bench/peer_position_coupling.py: " + str(len(failed)) + " run(s) failed: " +
              "; ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
