#!/usr/bin/env python3
"""pelab — side-by-side training benchmark driver (called by bench/run.sh).

For every configuration and scheme it runs bench_train (pelab) and bench_torch.py under every PyTorch
peer (--peers, PEERS below: Debian's torch eager, PyPI's torch eager, PyPI's torch with
torch.compile) ALTERNATELY, each measurement in its own process (so peak RSS is per process), REPS
times, and reports medians: ms/step (wall and CPU), the ratio peer/pelab for each peer, tokens/s,
achieved GFLOP/s of the analytic matmul FLOPs against a cblas_sgemm peak measured in the same run at
the config's thread count, peak RSS, and the compile peer's compile time (its warm-up, not timed).
It also records the conditions (bench/blas_info.py): the BLAS each side actually loaded (every
measurement's process reports its mapped BLAS / OpenMP files and OpenBLAS's config, variant and
threads; each peer's torch version, python, threads, BLAS_INFO / MKL version, ATen CPU kernels and
build settings), Debian's libblas.so.3 alternative, the
thread settings, the CPU model and the load average at the start and end of the run and before
every measurement. Writes a markdown table, a CSV and an xz-compressed JSON with every
measurement.
"""
import argparse
import csv
import datetime
import io
import json
import lzma
import os
import statistics
import subprocess
import sys

import blas_info
import pelab_config


def registered_schemes(bin_dir):  # bin_dir: the build directory (bench_train and pelab)
    """The registered PE schemes (pelab_config.py: from pelab's config reference), so a new
    models/pe/ file is benchmarked without an edit."""
    return pelab_config.registered_schemes(os.path.join(bin_dir, "pelab"))


def train_flops(V, D, H, Fd, layers, B, L):
    """Analytic matmul FLOPs of one training step (forward x 3: forward + two backward GEMMs).
    Projections, FF, attention QK^T and PV, lm head; PE extras and elementwise ops not counted."""
    N = B * L
    proj = 2 * N * D * D
    ff = 2 * 2 * N * D * Fd
    attn = 2 * 2 * B * L * L * D
    enc = layers * (4 * proj + attn + ff)
    dec = layers * (4 * proj + attn + 4 * proj + attn + ff)
    head = 2 * N * D * V
    return 3 * (enc + dec + head)


# OpenMP wait settings tried for both sides; each side is reported under the one that is fastest
# for it (median over the reps). libgomp reads these at start-up, so each run is its own process.
POLICIES = {
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},  # sleep at once (futex)
    "spin1000": {"GOMP_SPINCOUNT": "1000"},     # spin ~20 us, then sleep (pelab's CLI default)
    "default": {},                              # libgomp's default: spin 300000 iterations
}


# The PyTorch peers: name -> (which python runs bench_torch.py, its extra arguments). "debian" is
# --python (Debian's python3-torch); the PyPI ones are --venv-python (bench/torch_venv.sh's venv).
PEERS = {
    "debian": ("python", []),
    "pypi-eager": ("venv_python", []),
    "pypi-compile": ("venv_python", ["--compile"]),
}


def col(peer):
    """A peer's column prefix in the CSV / JSON rows (pypi-eager -> pypi_eager)."""
    return peer.replace("-", "_")


def policy_env(name):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(POLICIES[name])
    return env


def size_args(c):
    """A config's sizes as bench_train / bench_torch.py options (--d_model 128 ...)."""
    return [x for k, v in c.items() for x in ("--" + k, str(v))]


def run_json(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        raise SystemExit("failed: " + " ".join(cmd))
    return json.loads(out.stdout.strip().splitlines()[-1])


def write_atomic(path, data):
    """Writes `data` (text or bytes) to `path` through a temporary file and a rename (a crash leaves
    the old file)."""
    tmp = path + ".tmp"
    with open(tmp, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def labels(records):
    """The distinct BLAS labels of some measurements' records, joined (one, when all agree)."""
    seen = []
    for r in records:
        d = blas_info.describe(r["blas"])
        if d not in seen:
            seen.append(d)
    return " | ".join(seen)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--python", default="/usr/bin/python3", help="the debian peer's python")
    ap.add_argument("--venv-python", default="",
                    help="the pypi-* peers' python (bench/torch_venv.sh prints it)")
    ap.add_argument("--peers", default="debian",
                    help="comma-separated PyTorch peers: " + ",".join(PEERS))
    ap.add_argument("--out", required=True, help="output prefix (.md, .csv.xz and .json.xz)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="threads (the tiny config uses 1)")
    ap.add_argument("--schemes", default="", help="comma-separated; default: every registered scheme")
    ap.add_argument("--configs", default="ref,tiny,large,sweep")
    ap.add_argument("--policies", default="passive,spin1000,default",
                    help="OpenMP wait settings to try for both sides: " + ",".join(POLICIES))
    ap.add_argument("--sweep", default="32,64,128,256,512")
    ap.add_argument("--sweep_tokens", type=int, default=1024,
                    help="sweep batch = sweep_tokens / L (0: keep batch 32)")
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    bin_dir = os.path.dirname(os.path.abspath(a.bin))
    pelab = os.path.join(bin_dir, "pelab")  # bench_torch.py reads pelab's default config from it
    schemes = a.schemes.split(",") if a.schemes else registered_schemes(bin_dir)
    policies = a.policies.split(",")
    for p in policies:
        if p not in POLICIES:
            raise SystemExit("unknown policy %s (known: %s)" % (p, ", ".join(POLICIES)))
    peers = a.peers.split(",")
    for p in peers:
        if p not in PEERS:
            raise SystemExit("run_bench.py: unknown peer '%s' in --peers (known: %s)"
                             % (p, ", ".join(PEERS)))
        if PEERS[p][0] == "venv_python" and not a.venv_python:
            raise SystemExit("run_bench.py: peer %s needs --venv-python (bench/torch_venv.sh "
                             "makes the venv and prints its python; bench/run.sh --peers does both)"
                             % p)
    config_names = a.configs.split(",")
    for n in config_names:
        if n not in ("ref", "tiny", "large", "sweep"):
            raise SystemExit("run_bench.py: unknown config '%s' in --configs (known: ref, tiny, "
                             "large, sweep)" % n)

    def peer_cmd(peer):
        return [getattr(a, PEERS[peer][0]), os.path.join(here, "bench_torch.py"),
                "--pelab", pelab] + PEERS[peer][1]

    conditions = {"command": sys.argv, "python": a.python, "threads": a.threads,
                  "thread_env": blas_info.thread_env(), "policies": {p: POLICIES[p] for p in policies},
                  "libblas_alternative": blas_info.libblas_alternative(),
                  "peers": {p: {"python": getattr(a, PEERS[p][0]), "args": PEERS[p][1]}
                            for p in peers},
                  "start": blas_info.host_state()}
    measurements = []  # every process's JSON line, with what was run and the load before it

    configs = []  # (name, dict)
    ref = dict(d_model=128, heads=4, d_ff=512, layers=2, batch=32, len=32, vocab=32)
    if "ref" in config_names:
        configs += [("ref", dict(ref))]
    if "tiny" in config_names:  # the size of the lab's own comparisons, one thread
        configs += [("tiny", dict(ref, d_model=64, d_ff=256, len=8, threads=1))]
    if "large" in config_names:
        configs += [("large", dict(ref, d_model=256, d_ff=1024, len=128, batch=16))]
    if "sweep" in config_names:
        for L in [int(x) for x in a.sweep.split(",")]:
            b = max(1, a.sweep_tokens // L) if a.sweep_tokens > 0 else 32
            configs += [("L%d" % L, dict(ref, len=L, batch=b))]

    sg = {}  # threads -> cblas_sgemm GFLOP/s samples

    def sgemm(threads):
        m = run_json([a.bin, "--sgemm", "1024", "--threads", str(threads)])
        measurements.append(dict(m, impl="pelab", what="sgemm", threads=threads))
        sg.setdefault(threads, []).append(m["gflops"])

    pr = {}  # config -> GFLOP/s samples of the step's products alone (bench_train --products)

    def products(cname, c, threads):
        """The step's matrix products alone, through pelab's product path: the ceiling of the
        step's share of the sgemm peak (what the share would be if nothing else took time)."""
        m = run_json([a.bin, "--products", "--steps", "10", "--warmup", "2", "--threads",
                      str(threads)] + size_args(c))
        measurements.append(dict(m, what="products", config=cname, threads=threads))
        pr.setdefault(cname, []).append(m["gflops_median"])  # its median rep, as a step's

    sides = ["pelab"] + peers
    rows = []
    for cname, c in configs:
        c = dict(c)
        threads = c.pop("threads", a.threads)
        if threads not in sg:
            sgemm(threads)
        for s in schemes:
            args = ["--scheme", s, "--steps", str(a.steps), "--warmup", str(a.warmup),
                    "--threads", str(threads)] + size_args(c)
            res = {(i, p): [] for i in sides for p in policies}
            for r in range(a.reps):  # alternate implementations and policies
                order = [(i, p) for p in policies for i in sides]
                if r % 2 == 1:
                    order.reverse()
                for impl, pol in order:
                    cmd = [a.bin] + args if impl == "pelab" else peer_cmd(impl) + args
                    load = blas_info.loadavg()[0]
                    m = run_json(cmd, policy_env(pol))
                    m.update(impl="pelab" if impl == "pelab" else "torch", peer=impl,
                             what="train", config=cname, policy=pol, rep=r, load1=load,
                             threads=threads, thread_env=blas_info.thread_env(policy_env(pol)))
                    measurements.append(m)
                    res[(impl, pol)].append(m)
            sgemm(threads)
            products(cname, c, threads)
            allmed = {k: {m: statistics.median(x[m] for x in v)
                          for m in ("median_ms", "cpu_ms", "peak_rss_kb")} for k, v in res.items()}
            med, best_pol = {}, {}
            for impl in sides:
                pol = min(policies, key=lambda p: allmed[(impl, p)]["median_ms"])
                med[impl], best_pol[impl] = allmed[(impl, pol)], pol
            loads = [m["load1"] for v in res.values() for m in v]
            fl = train_flops(c["vocab"], c["d_model"], c["heads"], c["d_ff"], c["layers"],
                             c["batch"], c["len"])
            tokens = c["batch"] * c["len"] * 2  # source + target tokens
            p = med["pelab"]
            row = dict(config=cname, scheme=s, B=c["batch"], L=c["len"], D=c["d_model"],
                       threads=threads, pelab_ms=p["median_ms"], pelab_cpu_ms=p["cpu_ms"],
                       pelab_tok_s=tokens / p["median_ms"] * 1e3,
                       pelab_gflops=fl / p["median_ms"] / 1e6,
                       pelab_rss_mb=p["peak_rss_kb"] / 1024, pelab_policy=best_pol["pelab"],
                       pelab_blas=labels(res[("pelab", q)][i] for q in policies
                                         for i in range(a.reps)))
            for peer in peers:
                t, k = med[peer], col(peer)
                # Paired speedup: within each rep the sides ran back to back, so the host's slow
                # and fast phases (minutes long on a shared VM) hit both; the median of the
                # per-rep ratios (each side under its chosen setting) is the steadier figure.
                per_rep = [res[(peer, best_pol[peer])][r]["median_ms"] /
                           res[("pelab", best_pol["pelab"])][r]["median_ms"] for r in range(a.reps)]
                runs = [m for q in policies for m in res[(peer, q)]]
                row.update({
                    k + "_ms": t["median_ms"], k + "_speedup": t["median_ms"] / p["median_ms"],
                    k + "_paired_speedup": statistics.median(per_rep),
                    k + "_paired_min": min(per_rep), k + "_paired_max": max(per_rep),
                    k + "_cpu_ms": t["cpu_ms"], k + "_cpu_speedup": t["cpu_ms"] / p["cpu_ms"],
                    k + "_tok_s": tokens / t["median_ms"] * 1e3,
                    k + "_gflops": fl / t["median_ms"] / 1e6,
                    k + "_rss_mb": t["peak_rss_kb"] / 1024,
                    k + "_rss_ratio": p["peak_rss_kb"] / t["peak_rss_kb"],
                    k + "_policy": best_pol[peer],
                    k + "_compile_s": statistics.median(m.get("compile_s", 0.0) for m in runs),
                    k + "_torch": runs[0]["blas"].get("torch_version"),
                    k + "_optimizer": runs[0].get("optimizer", "AdamW"),
                    k + "_blas": labels(runs)})
            row.update(load_min=min(loads), load_max=max(loads))
            for (impl, pol), m in sorted(allmed.items()):
                row["%s_ms_%s" % (col(impl), pol)] = m["median_ms"]
            rows.append(row)
            print("%-6s %-10s pelab %8.1f ms (cpu %8.1f, rss %.0f MB, wait %s)  %s  load %.1f-%.1f" % (
                cname, s, row["pelab_ms"], row["pelab_cpu_ms"], row["pelab_rss_mb"],
                row["pelab_policy"],
                "  ".join("%s %.1f ms x%.2f (paired x%.2f, cpu x%.2f, rss %.0f MB, wait %s%s)" % (
                    peer, row[col(peer) + "_ms"], row[col(peer) + "_speedup"],
                    row[col(peer) + "_paired_speedup"], row[col(peer) + "_cpu_speedup"],
                    row[col(peer) + "_rss_mb"], row[col(peer) + "_policy"],
                    (", compile %.1f s" % row[col(peer) + "_compile_s"])
                    if row[col(peer) + "_compile_s"] else "") for peer in peers),
                row["load_min"], row["load_max"]), flush=True)

    peak = {th: max(v) for th, v in sg.items()}
    for r in rows:
        r["sgemm_peak"] = peak[r["threads"]]
        r["pelab_pct_peak"] = 100.0 * r["pelab_gflops"] / peak[r["threads"]]
        # the products' median over the run, against the same peak as the step's median: the
        # share the step would have if nothing but its products took time (a best sample of
        # either can land in a fast phase of a shared host that the other missed)
        r["products_gflops"] = statistics.median(pr[r["config"]])
        r["products_pct_peak"] = 100.0 * r["products_gflops"] / peak[r["threads"]]
    conditions["end"] = blas_info.host_state()
    pelab_blas = labels(m for m in measurements if m["impl"] == "pelab")
    keys = list(rows[0].keys()) if rows else []
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(keys)
    for r in rows:
        w.writerow([("%.4g" % r[k]) if isinstance(r[k], float) else str(r[k]) for k in keys])
    # The table's rows as xz-compressed CSV, and every measurement as xz-compressed JSON (a sixth and
    # a twentieth of their sizes: bench/results is part of the source tree, which must stay small
    # enough to travel to a GPU machine); read them with `xz -dc` or Python's lzma.open(PATH, "rt").
    write_atomic(a.out + ".csv.xz",
                 lzma.compress(buf.getvalue().encode(), preset=9 | lzma.PRESET_EXTREME))
    write_atomic(a.out + ".json.xz", lzma.compress((json.dumps(
        {"conditions": conditions, "sgemm_gflops": sg, "products_gflops": pr, "rows": rows,
         "measurements": measurements}, indent=1) + "\n").encode(),
        preset=9 | lzma.PRESET_EXTREME))
    st, en = conditions["start"], conditions["end"]

    def peer_facts(peer):
        ms = [m for m in measurements if m.get("peer") == peer]
        b = ms[0]["blas"] if ms else {}
        return ("PyTorch %s (%s): %s (torch %s, python %s, %s intra-op threads, BLAS_INFO=%s, "
                "ATen CPU kernels %s, parallel backend %s, optimizer %s)" % (
                    peer, "torch.compile" if "--compile" in PEERS[peer][1] else "eager", labels(ms),
                    b.get("torch_version"), b.get("torch_python"), b.get("torch_threads"),
                    b.get("torch_blas_info"), b.get("torch_cpu_capability") or "not reported",
                    b.get("torch_parallel_backend"),
                    ms[0].get("optimizer", "AdamW") if ms else None))
    cond = ("Command: `%s`. BLAS loaded (from each process's /proc/self/maps, OpenBLAS itself and "
            "torch.__config__): pelab: %s; %s; libblas.so.3 alternative: %s. Thread settings in "
            "the environment: %s (each measurement adds its wait setting; threads per config in "
            "the table). CPU: %s (%s CPUs) at the start, %s at the end. "
            "Load average (1/5/15 min): %s at %s, %s at %s; 1-min load before the measurements: "
            "%.2f-%.2f.\n\n" % (
                " ".join(["bench/run_bench.py"] + sys.argv[1:]), pelab_blas,
                "; ".join(peer_facts(p) for p in peers), conditions["libblas_alternative"],
                ", ".join("%s=%s" % kv for kv in conditions["thread_env"].items() if kv[1]) or "none set",
                st["cpu_model"], st["cpus"], en["cpu_model"],
                " ".join("%.2f" % x for x in st["loadavg"]), st["time"],
                " ".join("%.2f" % x for x in en["loadavg"]), en["time"],
                min(m["load1"] for m in measurements if "load1" in m),
                max(m["load1"] for m in measurements if "load1" in m)))
    f = io.StringIO()
    f.write("Measured %s, %d reps x %d steps (after %d warm-up; the compile peer's warm-up "
            "compiles, its time is the `compile s` column), alternating pelab / %s. OpenMP wait "
            "settings tried for all: %s; each side is shown under its fastest (every setting's time "
            "and wait are in the CSV). Speedup = peer / pelab of those medians (> 1: pelab is "
            "faster); paired = median over reps of the same ratio within each rep (the sides ran "
            "back to back, so slow phases of the host hit all), with its range over the reps.\n\n" % (
                datetime.datetime.now().isoformat(timespec="minutes"), a.reps, a.steps, a.warmup,
                " / ".join(peers), ", ".join(policies)))
    f.write(cond)
    f.write("cblas_sgemm peak (1024^3, best of the run): %s\n\n" % "; ".join(
        "%d threads %.1f GFLOP/s (samples: %s)" % (th, peak[th], ", ".join("%.1f" % x for x in v))
        for th, v in sorted(sg.items())))
    firsts = [next(q for q in rows if q["config"] == cn)  # one row per config
              for cn in dict.fromkeys(q["config"] for q in rows)]
    f.write("The step's products alone (`bench_train --products`: the matrix products that the "
            "GFLOP/s count, through pelab's own product path with nothing else of the step; each "
            "sample the median of 10 repetitions, and the median of the samples, as for the step; "
            "by kind of product in the JSON), the "
            "ceiling of the `%% sgemm peak` column: %s\n\n" % (
                "; ".join("%s %.1f GFLOP/s = %.0f%% of the peak (samples: %s)" % (
                    r["config"], r["products_gflops"], r["products_pct_peak"],
                    ", ".join("%.1f" % x for x in pr[r["config"]])) for r in firsts)))
    head = ["config", "scheme", "B", "L", "threads", "pelab ms/step"]
    for peer in peers:
        head += ["%s ms/step" % peer, "%s / pelab (paired, range)" % peer]
        if "--compile" in PEERS[peer][1]:
            head += ["%s compile s" % peer]
    head += ["pelab GFLOP/s", "% sgemm peak", "products alone: % peak", "pelab RSS MB"] + \
        ["%s RSS MB" % peer for peer in peers] + ["load"]
    f.write("| " + " | ".join(head) + " |\n")
    f.write("|" + "---|" * len(head) + "\n")
    for r in rows:
        cells = [r["config"], r["scheme"], "%d" % r["B"], "%d" % r["L"], "%d" % r["threads"],
                 "%.1f" % r["pelab_ms"]]
        for peer in peers:
            k = col(peer)
            cells += ["%.1f" % r[k + "_ms"], "%.2f (%.2f, %.2f-%.2f)" % (
                r[k + "_speedup"], r[k + "_paired_speedup"], r[k + "_paired_min"],
                r[k + "_paired_max"])]
            if "--compile" in PEERS[peer][1]:
                cells += ["%.1f" % r[k + "_compile_s"]]
        cells += ["%.1f" % r["pelab_gflops"], "%.0f%%" % r["pelab_pct_peak"],
                  "%.0f%%" % r["products_pct_peak"],
                  "%.0f" % r["pelab_rss_mb"]] + ["%.0f" % r[col(peer) + "_rss_mb"] for peer in peers]
        cells += ["%.1f-%.1f" % (r["load_min"], r["load_max"])]
        f.write("| " + " | ".join(cells) + " |\n")
    write_atomic(a.out + ".md", f.getvalue())
    print(cond.strip())
    for peer in peers if rows else []:
        k = col(peer)
        print("%s / pelab: %.2f-%.2f, paired per rep %.2f-%.2f, RSS pelab/%s %.2f-%.2f over %d rows"
              % (peer, min(r[k + "_speedup"] for r in rows), max(r[k + "_speedup"] for r in rows),
                 min(r[k + "_paired_min"] for r in rows), max(r[k + "_paired_max"] for r in rows),
                 peer, min(r[k + "_rss_ratio"] for r in rows),
                 max(r[k + "_rss_ratio"] for r in rows), len(rows)))
    print("wrote %s.md, %s.csv.xz and %s.json.xz (sgemm peak %s)" % (
        a.out, a.out, a.out, ", ".join("%.1f GFLOP/s at %d threads" % (peak[th], th)
                                       for th in sorted(peak))))


if __name__ == "__main__":
    main()
