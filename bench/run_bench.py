#!/usr/bin/env python3
"""pelab — side-by-side training benchmark driver (called by bench/run.sh).

For every configuration and scheme it runs bench_train (pelab) and bench_torch.py (PyTorch eager)
ALTERNATELY, each measurement in its own process (so peak RSS is per process), REPS times, and
reports medians: ms/step (wall and CPU), the ratio torch/pelab, tokens/s, achieved GFLOP/s of the
analytic matmul FLOPs against a cblas_sgemm peak measured in the same run, and peak RSS.
It also records the conditions (bench/blas_info.py): the BLAS each side actually loaded (every
measurement's process reports its mapped BLAS / OpenMP files and OpenBLAS's config, variant and
threads; PyTorch's version, threads and build settings), Debian's libblas.so.3 alternative, the
thread settings, the CPU model and the load average at the start and end of the run and before
every measurement. Writes a markdown table, a CSV and a JSON with every measurement.
"""
import argparse
import csv
import datetime
import io
import json
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


def policy_env(name):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(POLICIES[name])
    return env


def run_json(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        raise SystemExit("failed: " + " ".join(cmd))
    return json.loads(out.stdout.strip().splitlines()[-1])


def write_atomic(path, text):
    """Writes `text` to `path` through a temporary file and a rename (a crash leaves the old file)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
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
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--out", required=True, help="output prefix (.md and .csv)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--schemes", default="", help="comma-separated; default: every registered scheme")
    ap.add_argument("--configs", default="ref,large,sweep")
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

    conditions = {"command": sys.argv, "python": a.python, "threads": a.threads,
                  "thread_env": blas_info.thread_env(), "policies": {p: POLICIES[p] for p in policies},
                  "libblas_alternative": blas_info.libblas_alternative(),
                  "start": blas_info.host_state()}
    measurements = []  # every process's JSON line, with what was run and the load before it

    configs = []  # (name, dict)
    ref = dict(d_model=128, heads=4, d_ff=512, layers=2, batch=32, len=32, vocab=32)
    if "ref" in a.configs:
        configs += [("ref", dict(ref))]
    if "large" in a.configs:
        configs += [("large", dict(ref, d_model=256, d_ff=1024, len=128, batch=16))]
    if "sweep" in a.configs:
        for L in [int(x) for x in a.sweep.split(",")]:
            b = max(1, a.sweep_tokens // L) if a.sweep_tokens > 0 else 32
            configs += [("L%d" % L, dict(ref, len=L, batch=b))]

    def sgemm():
        m = run_json([a.bin, "--sgemm", "1024", "--threads", str(a.threads)])
        measurements.append(dict(m, impl="pelab", what="sgemm"))
        return m["gflops"]

    sg = [sgemm()]
    rows = []
    for cname, c in configs:
        for s in schemes:
            args = ["--scheme", s, "--steps", str(a.steps), "--warmup", str(a.warmup),
                    "--threads", str(a.threads)]
            for k, v in c.items():
                args += ["--" + k, str(v)]
            res = {(i, p): [] for i in ("pelab", "torch") for p in policies}
            for r in range(a.reps):  # alternate implementations and policies
                order = [(i, p) for p in policies for i in ("pelab", "torch")]
                if r % 2 == 1:
                    order.reverse()
                for impl, pol in order:
                    cmd = [a.bin] + args if impl == "pelab" else \
                        [a.python, os.path.join(here, "bench_torch.py"), "--pelab", pelab] + args
                    load = blas_info.loadavg()[0]
                    m = run_json(cmd, policy_env(pol))
                    m.update(impl=impl, what="train", config=cname, policy=pol, rep=r, load1=load,
                             thread_env=blas_info.thread_env(policy_env(pol)))
                    measurements.append(m)
                    res[(impl, pol)].append(m)
            sg.append(sgemm())
            allmed = {k: {m: statistics.median(x[m] for x in v)
                          for m in ("median_ms", "cpu_ms", "peak_rss_kb")} for k, v in res.items()}
            med, best_pol = {}, {}
            for impl in ("pelab", "torch"):
                pol = min(policies, key=lambda p: allmed[(impl, p)]["median_ms"])
                med[impl], best_pol[impl] = allmed[(impl, pol)], pol
            # Paired speedup: within each rep the two sides ran back to back, so the host's slow
            # and fast phases (minutes long on a shared VM) hit both; the median of the per-rep
            # ratios (each side under its chosen setting) is the steadier figure.
            per_rep = [res[("torch", best_pol["torch"])][r]["median_ms"] /
                       res[("pelab", best_pol["pelab"])][r]["median_ms"] for r in range(a.reps)]
            paired = statistics.median(per_rep)
            loads = [m["load1"] for v in res.values() for m in v]
            fl = train_flops(c["vocab"], c["d_model"], c["heads"], c["d_ff"], c["layers"],
                             c["batch"], c["len"])
            tokens = c["batch"] * c["len"] * 2  # source + target tokens
            p, t = med["pelab"], med["torch"]
            row = dict(config=cname, scheme=s, B=c["batch"], L=c["len"], D=c["d_model"],
                       pelab_ms=p["median_ms"], torch_ms=t["median_ms"],
                       speedup=t["median_ms"] / p["median_ms"], paired_speedup=paired,
                       paired_min=min(per_rep), paired_max=max(per_rep),
                       pelab_cpu_ms=p["cpu_ms"], torch_cpu_ms=t["cpu_ms"],
                       cpu_speedup=t["cpu_ms"] / p["cpu_ms"],
                       pelab_tok_s=tokens / p["median_ms"] * 1e3,
                       torch_tok_s=tokens / t["median_ms"] * 1e3,
                       pelab_gflops=fl / p["median_ms"] / 1e6,
                       torch_gflops=fl / t["median_ms"] / 1e6,
                       pelab_rss_mb=p["peak_rss_kb"] / 1024, torch_rss_mb=t["peak_rss_kb"] / 1024,
                       rss_ratio=p["peak_rss_kb"] / t["peak_rss_kb"],
                       pelab_policy=best_pol["pelab"], torch_policy=best_pol["torch"],
                       load_min=min(loads), load_max=max(loads),
                       pelab_blas=labels(v for (i, _), vs in res.items() if i == "pelab" for v in vs),
                       torch_blas=labels(v for (i, _), vs in res.items() if i == "torch" for v in vs))
            for (impl, pol), m in sorted(allmed.items()):
                row["%s_ms_%s" % (impl, pol)] = m["median_ms"]
            rows.append(row)
            print("%-6s %-10s pelab %8.1f ms (cpu %8.1f)  torch %8.1f ms (cpu %8.1f)  x%.2f (paired x%.2f) "
                  "(cpu x%.2f)  rss %.0f/%.0f MB  wait %s/%s  load %.1f-%.1f  [%s]" % (
                      cname, s, row["pelab_ms"], row["pelab_cpu_ms"], row["torch_ms"],
                      row["torch_cpu_ms"], row["speedup"], row["paired_speedup"], row["cpu_speedup"], row["pelab_rss_mb"],
                      row["torch_rss_mb"], row["pelab_policy"], row["torch_policy"],
                      row["load_min"], row["load_max"],
                      " ".join("%s/%s %.1f" % (i, p, m["median_ms"])
                               for (i, p), m in sorted(allmed.items()))),
                  flush=True)

    peak = max(sg)
    for r in rows:
        r["pelab_pct_peak"] = 100.0 * r["pelab_gflops"] / peak
    conditions["end"] = blas_info.host_state()
    pelab_blas = labels(m for m in measurements if m["impl"] == "pelab")
    torch_blas = labels(m for m in measurements if m["impl"] == "torch")
    keys = list(rows[0].keys()) if rows else []
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(keys)
    for r in rows:
        w.writerow([("%.4g" % r[k]) if isinstance(r[k], float) else str(r[k]) for k in keys])
    write_atomic(a.out + ".csv", buf.getvalue())
    write_atomic(a.out + ".json", json.dumps(
        {"conditions": conditions, "sgemm_gflops": sg, "rows": rows,
         "measurements": measurements}, indent=1) + "\n")
    st, en = conditions["start"], conditions["end"]
    cond = ("Command: `%s`. BLAS loaded (from each process's /proc/self/maps and OpenBLAS itself): "
            "pelab: %s; PyTorch: %s (torch %s, %s intra-op threads, BLAS_INFO=%s, parallel backend "
            "%s); libblas.so.3 alternative: %s. Thread settings in the environment: %s (each "
            "measurement adds its wait setting). CPU: %s (%s CPUs) at the start, %s at the end. "
            "Load average (1/5/15 min): %s at %s, %s at %s; 1-min load before the measurements: "
            "%.2f-%.2f.\n\n" % (
                " ".join(["bench/run_bench.py"] + sys.argv[1:]), pelab_blas, torch_blas,
                *(next((m["blas"].get(k) for m in measurements if m["impl"] == "torch"), None)
                  for k in ("torch_version", "torch_threads", "torch_blas_info",
                            "torch_parallel_backend")),
                conditions["libblas_alternative"],
                ", ".join("%s=%s" % kv for kv in conditions["thread_env"].items() if kv[1]) or "none set",
                st["cpu_model"], st["cpus"], en["cpu_model"],
                " ".join("%.2f" % x for x in st["loadavg"]), st["time"],
                " ".join("%.2f" % x for x in en["loadavg"]), en["time"],
                min(m["load1"] for m in measurements if "load1" in m),
                max(m["load1"] for m in measurements if "load1" in m)))
    f = io.StringIO()
    f.write("Measured %s, %d threads, %d reps x %d steps (after %d warm-up), alternating "
            "pelab / PyTorch %s. OpenMP wait settings tried for both: %s; each side is shown under its "
            "fastest (the `wait` columns; every setting's time is in the CSV). Speedup = torch / pelab "
            "of those medians; paired speedup = median over reps of the same ratio within each rep "
            "(both sides ran back to back, so slow phases of the host hit both), with its range over "
            "the reps.\n\n" % (
                datetime.datetime.now().isoformat(timespec="minutes"), a.threads, a.reps,
                a.steps, a.warmup, "eager", ", ".join(policies)))
    f.write(cond)
    f.write("cblas_sgemm peak (1024^3, best of the run): %.1f GFLOP/s (samples: %s)\n\n"
            % (peak, ", ".join("%.1f" % x for x in sg)))
    f.write("| config | scheme | B | L | pelab ms/step | torch ms/step | speedup | paired speedup "
            "(range) | pelab cpu-ms | torch cpu-ms | cpu speedup | pelab tok/s | torch tok/s | "
            "pelab GFLOP/s | % sgemm peak | pelab RSS MB | torch RSS MB | RSS ratio | pelab wait | "
            "torch wait | load |\n")
    f.write("|" + "---|" * 21 + "\n")
    for r in rows:
        f.write("| %s | %s | %d | %d | %.1f | %.1f | %.2f | %.2f (%.2f-%.2f) | %.1f | %.1f | %.2f | "
                "%.0f | %.0f | %.1f | %.0f%% | %.0f | %.0f | %.2f | %s | %s | %.1f-%.1f |\n" % (
                    r["config"], r["scheme"], r["B"], r["L"], r["pelab_ms"], r["torch_ms"],
                    r["speedup"], r["paired_speedup"], r["paired_min"], r["paired_max"],
                    r["pelab_cpu_ms"], r["torch_cpu_ms"], r["cpu_speedup"],
                    r["pelab_tok_s"], r["torch_tok_s"], r["pelab_gflops"], r["pelab_pct_peak"],
                    r["pelab_rss_mb"], r["torch_rss_mb"], r["rss_ratio"], r["pelab_policy"],
                    r["torch_policy"], r["load_min"], r["load_max"]))
    write_atomic(a.out + ".md", f.getvalue())
    print(cond.strip())
    if rows:
        print("speedup %.2f-%.2f, paired per rep %.2f-%.2f, RSS ratio %.2f-%.2f over %d schemes" % (
            min(r["speedup"] for r in rows), max(r["speedup"] for r in rows),
            min(r["paired_min"] for r in rows), max(r["paired_max"] for r in rows),
            min(r["rss_ratio"] for r in rows), max(r["rss_ratio"] for r in rows), len(rows)))
    print("wrote %s.md, %s.csv and %s.json (sgemm peak %.1f GFLOP/s)" % (a.out, a.out, a.out, peak))


if __name__ == "__main__":
    main()
