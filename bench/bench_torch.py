#!/usr/bin/env python3
"""pelab — PyTorch eager counterpart of bench/bench_train.cpp: the same seq2seq transformer (pre-LN,
exact GELU, dropout 0) as an idiomatic float32 nn.Module, trained with torch.optim.AdamW. Times full
training steps and prints one JSON line (ms/step, peak RSS). Driven by bench/run.sh, one process per
measurement.

    bench_torch.py --pelab build/pelab --scheme rope --d_model 128 --heads 4 --d_ff 512 --layers 2 \
        --batch 32 --len 32

The positional encodings are not written here: every scheme is the class of tools/torch_reference.py
(the float64 reference the golden tests check pelab against), with its parameters created from the
class's params() declaration, so the bench trains every registered scheme the reference has. The
config is pelab's default one (read from `PELAB config-reference`, as bench_train starts from it) with
the sizes of the command line; a scheme pelab does not register, or one without a reference class, is
an error. The nn.Module's parameter names are pelab's checkpoint names.

--check-against-reference runs one forward and backward of this nn.Module and of the reference's Model
on the same float64 parameters and batch and exits non-zero unless logits, loss and gradients agree to
1e-10 (one JSON line).

Every JSON line carries "blas": the BLAS this process ran on (bench/blas_info.py torch_record: the
mapped shared objects, OpenBLAS's config / variant / threads, torch's version, threads and build
settings); --blas-info prints only that record (after setting --threads).

--compile times the same steps with torch.compile(model) (inductor; on the CPU it generates C++ that
g++ compiles) and AdamW(fused=True) where the installed torch has a fused AdamW for the device
(recorded as "optimizer"). The warm-up steps trigger the compilation (at least one is run): their
wall time is reported separately as "compile_s" and is not in the measured steps. torch.compile
needs torch >= 2; with an older one (Debian's 1.13) --compile is one error line.

--device cuda runs the same steps on the GPU (TF32 off, like pelab's float32 GEMMs) and adds the peak
of torch.cuda.max_memory_allocated (tools/gpu_check.sh's bench_torch step).

One process can measure many runs (importing torch once, which takes seconds with CUDA): --scheme
takes a comma-separated list or "all" (every registered scheme) and --modes eager,compile both
modes (every eager run first; each compiled scheme starts from torch._dynamo.reset()), one JSON
line per run; --budget S starts no run after S seconds and prints a "skipped" line for each one it
did not start. --count-ops adds "ops_per_step", one more step counted by torch.profiler: the aten
ops the dispatcher ran, the "leaf" ones that call no other aten op, of them the "kernels" (the leaf
ops that are not views or metadata changes: the counterpart of pelab's backend calls per step) and
on CUDA the kernels launched.
"""
import argparse
import json
import math
import os
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import blas_info
import pelab_config

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import torch_reference as ref  # noqa: E402


def add_param(root, name, value):
    """Registers `value` as root's parameter `name` (dotted: "pe.layers.0.rel_k"), making the
    intermediate modules, so named_parameters() gives pelab's checkpoint names."""
    *path, leaf = name.split(".")
    m = root
    for part in path:
        if part not in m._modules:
            m.add_module(part, nn.Module())
        m = m._modules[part]
    m.register_parameter(leaf, nn.Parameter(value))


class MHA(nn.Module):
    def __init__(self, D, H, bias):
        super().__init__()
        self.H, self.dh = H, D // H
        self.q, self.k, self.v, self.o = (nn.Linear(D, D, bias=bias) for _ in range(4))

    def forward(self, xq, xkv, pe, site, blocked):  # blocked: [1 | B, 1, Lq, Lk] or None
        B, Lq, D = xq.shape
        Lk = xkv.shape[1]
        q = self.q(xq).view(B, Lq, self.H, self.dh).transpose(1, 2)
        k = self.k(xkv).view(B, Lk, self.H, self.dh).transpose(1, 2)
        v = self.v(xkv).view(B, Lk, self.H, self.dh).transpose(1, 2)
        q, k = pe.transform_qk(q, k, site)
        a = q @ k.transpose(-1, -2) / math.sqrt(self.dh)
        st = pe.keyed_score_term(q, k, blocked, site)
        if st is not None:
            a = a + st
        if blocked is not None:
            a = a.masked_fill(blocked, -1e9)
        p = torch.softmax(a, dim=-1)
        o = p @ v
        vt = pe.value_term(p, site)
        if vt is not None:
            o = o + vt
        return self.o(o.transpose(1, 2).reshape(B, Lq, D))


class FF(nn.Module):
    def __init__(self, D, Fd, bias):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(D, Fd, bias=bias), nn.Linear(Fd, D, bias=bias)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class EncLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        D = c.d_model
        self.self_attn, self.ff = MHA(D, c.heads, c.bias), FF(D, c.d_ff, c.bias)
        self.norm1, self.norm2 = nn.LayerNorm(D, c.norm_eps), nn.LayerNorm(D, c.norm_eps)

    def forward(self, x, pe, site):
        h = self.norm1(x)
        x = x + self.self_attn(h, h, pe, site, None)
        return x + self.ff(self.norm2(x))


class DecLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        D = c.d_model
        self.self_attn, self.cross_attn = MHA(D, c.heads, c.bias), MHA(D, c.heads, c.bias)
        self.ff = FF(D, c.d_ff, c.bias)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(D, c.norm_eps) for _ in range(3))

    def forward(self, x, mem, pe, site, cross_site, causal):
        h = self.norm1(x)
        x = x + self.self_attn(h, h, pe, site, causal)
        x = x + self.cross_attn(self.norm2(x), mem, pe, cross_site, None)
        return x + self.ff(self.norm3(x))


class Stack(nn.Module):
    """encoder or decoder: embed.weight, pe.<the scheme's parameters>, layers, norm."""

    def __init__(self, c, stack, layer):
        super().__init__()
        add_param(self, "embed.weight", torch.randn(c.vocab, c.d_model) * 0.02)
        for name, shape, init in ref.SCHEMES[c.scheme].params(c, stack):
            add_param(self, "pe." + name, init(shape).float())
        self.layers = nn.ModuleList([layer(c) for _ in range(ref.stack_layers(c, stack))])
        self.norm = nn.LayerNorm(c.d_model, c.norm_eps)


class Seq2Seq(nn.Module):
    def __init__(self, c):
        super().__init__()
        if c.arch != "seq2seq" or c.norm != "pre" or c.activation != "gelu" or c.tie:
            raise SystemExit("bench_torch.py: the bench model is seq2seq, pre-LN, gelu, untied")
        self.c = c
        self.encoder, self.decoder = Stack(c, "encoder", EncLayer), Stack(c, "decoder", DecLayer)
        add_param(self, "lm_head.weight", torch.randn(c.vocab, c.d_model) * 0.02)
        self.scale = ref.embed_scale(c)
        self.pe_enc = self.pe_dec = None

    def bind(self):
        """Builds the scheme objects on the parameters (after .to() / .double())."""
        P = dict(self.named_parameters())
        self.pe_enc = ref.SCHEMES[self.c.scheme](self.c, P, "encoder")
        self.pe_dec = ref.SCHEMES[self.c.scheme](self.c, P, "decoder")
        return self

    def forward(self, src, tgt):
        S, T = src.shape[1], tgt.shape[1]
        spos, tpos = torch.arange(S, device=src.device), torch.arange(T, device=src.device)
        x = self.pe_enc.embed(self.encoder.embed.weight[src] * self.scale, spos)
        for l, layer in enumerate(self.encoder.layers):
            x = layer(x, self.pe_enc, dict(kind="enc_self", layer=l, q_pos=spos, k_pos=spos,
                                           causal=False))
        mem = self.encoder.norm(x)
        causal = torch.ones(T, T, dtype=torch.bool, device=src.device).triu(1)[None, None]
        y = self.pe_dec.embed(self.decoder.embed.weight[tgt] * self.scale, tpos)
        for l, layer in enumerate(self.decoder.layers):
            y = layer(y, mem, self.pe_dec,
                      dict(kind="dec_self", layer=l, q_pos=tpos, k_pos=tpos, causal=True),
                      dict(kind="cross", layer=l, q_pos=tpos, k_pos=spos, causal=False), causal)
        return self.decoder.norm(y) @ self.lm_head.weight.t()


def check_scheme(scheme, registered):
    """An error line unless pelab registers `scheme` and tools/torch_reference.py has its class."""
    if scheme not in registered:
        raise SystemExit("bench_torch.py: unknown scheme '%s' (pelab registers: %s)"
                         % (scheme, ", ".join(registered)))
    if scheme not in ref.SCHEMES:
        raise SystemExit("bench_torch.py: scheme '%s' has no class in tools/torch_reference.py "
                         "(add its reference there)" % scheme)


def make_config(a, scheme):
    """pelab's default config (as bench_train's) with the command line's sizes, or an error line."""
    c = pelab_config.defaults(a.pelab)
    check_scheme(scheme, pelab_config.registered_schemes(a.pelab))
    c["model"].update(arch="seq2seq", d_model=a.d_model, heads=a.heads, d_ff=a.d_ff,
                      encoder_layers=a.layers, decoder_layers=a.layers, dropout=0.0, norm="pre",
                      activation="gelu")
    c["pe"].update(scheme=scheme, max_positions=max(512, a.len))
    return ref.Cfg(c, a.vocab)


def check_against_reference(model, src, tin, tout):
    """This nn.Module against the reference's Model on the same float64 parameters and batch."""
    model.double().bind()
    params = dict(model.named_parameters())
    logits = model(src, tin)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tout.reshape(-1))
    grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
    ones = torch.ones_like(src)
    batch = dict(src=src, src_mask=ones, src_pos=torch.arange(src.shape[1]), tgt=tin,
                 tgt_mask=torch.ones_like(tin), tgt_pos=torch.arange(tin.shape[1]))
    r_logits = ref.Model(model.c, params).forward(batch)
    r_loss = ref.cross_entropy(r_logits, tout, -100, 0.0)
    r_grads = torch.autograd.grad(r_loss, list(params.values()), allow_unused=True)

    def diff(x, y):
        if x is None or y is None:
            return 0.0 if x is None and y is None else float("inf")
        return float((x - y).abs().max())
    row = {"check": "reference", "scheme": model.c.scheme, "param_tensors": len(params),
           "max_logit_diff": diff(logits, r_logits), "loss_diff": diff(loss, r_loss),
           "max_grad_diff": max(diff(g, h) for g, h in zip(grads, r_grads))}
    ok = max(row["max_logit_diff"], row["loss_diff"], row["max_grad_diff"]) <= 1e-10
    print(json.dumps(row))
    if not ok:
        raise SystemExit("bench_torch.py: the bench model differs from tools/torch_reference.py "
                         "by more than 1e-10 (scheme %s)" % model.c.scheme)


def make_optimizer(model, fused):
    """torch.optim.AdamW; with fused, AdamW(fused=True) when this torch has a fused AdamW for the
    parameters' device (CPU: torch >= 2.4), else the default. Returns it and its description."""
    kw = dict(lr=1e-3, weight_decay=0.01)
    if fused:
        try:
            return torch.optim.AdamW(model.parameters(), fused=True, **kw), "AdamW fused"
        except (TypeError, RuntimeError, ValueError):  # no fused kwarg, or not for this device
            pass
    return torch.optim.AdamW(model.parameters(), **kw), "AdamW"


# aten ops that make a view or change metadata only: no kernel runs (on CUDA nothing is launched).
VIEW_OPS = {"aten::as_strided", "aten::select", "aten::slice", "aten::view", "aten::_reshape_alias",
            "aten::reshape", "aten::transpose", "aten::t", "aten::permute", "aten::expand",
            "aten::unsqueeze", "aten::squeeze", "aten::detach", "aten::alias", "aten::resolve_conj",
            "aten::resolve_neg", "aten::_unsafe_view", "aten::view_as", "aten::unbind",
            "aten::split", "aten::chunk", "aten::narrow", "aten::lift_fresh", "aten::numpy_T"}


def count_ops(step, device):
    """The ops of one step under torch.profiler: every aten op the dispatcher ran ("aten"), those
    that call no other aten op ("leaf"), of them those that are not views or metadata changes
    ("kernels": the kernels run, the counterpart of pelab's backend calls per step; VIEW_OPS), and
    on CUDA the kernels launched ("cuda_kernels")."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=acts) as prof:
        step()
    aten = leaf = kernels = cuda = 0
    for e in prof.events():
        if e.name.startswith("aten::"):
            aten += 1
            if not any(ch.name.startswith("aten::") for ch in e.cpu_children):
                leaf += 1
                kernels += e.name not in VIEW_OPS
        if str(getattr(e, "device_type", "")).endswith("CUDA"):
            cuda += 1
    out = {"aten": aten, "leaf": leaf, "kernels": kernels}
    if device == "cuda":
        out["cuda_kernels"] = cuda
    return out


def run_one(a, scheme, mode, dev):
    """One measurement (one JSON row) of `scheme` in `mode` (eager | compile)."""
    compiled = mode == "compile"
    cfg = make_config(a, scheme)
    torch.manual_seed(1)
    model = Seq2Seq(cfg)
    g = torch.Generator().manual_seed(7)
    src = torch.randint(3, a.vocab, (a.batch, a.len), generator=g)
    tin = torch.randint(3, a.vocab, (a.batch, a.len), generator=g)
    tout = torch.randint(3, a.vocab, (a.batch, a.len), generator=g)
    if a.check_against_reference:
        return check_against_reference(model, src, tin, tout)
    model = model.to(dev).bind()
    src, tin, tout = src.to(dev), tin.to(dev), tout.to(dev)
    opt, optimizer = make_optimizer(model, compiled)
    if compiled:
        if hasattr(torch, "_dynamo"):
            torch._dynamo.reset()  # each scheme compiles afresh (no recompile limit across runs)
        model = torch.compile(model)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(src, tin)
        loss = F.cross_entropy(logits.reshape(-1, a.vocab), tout.reshape(-1))
        loss.backward()
        opt.step()
        return loss.item()

    warmup = max(a.warmup, 1) if compiled else a.warmup  # the first step compiles
    t0 = time.perf_counter()
    for _ in range(warmup):
        step()
    warmup_s = time.perf_counter() - t0
    if a.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, cpu = [], []
    loss = 0.0
    for _ in range(a.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        loss = step()
        times.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    cpu.sort()
    times.sort()
    row = {"impl": "torch", "scheme": scheme, "median_ms": times[len(times) // 2],
           "mean_ms": sum(times) / len(times), "min_ms": times[0], "cpu_ms": cpu[len(cpu) // 2],
           "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "loss": loss,
           "mode": mode, "optimizer": optimizer, "warmup_steps": warmup,
           "blas": blas_info.torch_record(torch)}
    if compiled:  # the warm-up's wall time: compilation (forward, backward) plus those steps
        row["compile_s"] = warmup_s
    if a.device == "cuda":  # loss.item() in step() synchronises, so the times are the GPU's too
        row["device"] = torch.cuda.get_device_name()
        row["peak_cuda_mib"] = torch.cuda.max_memory_allocated() / 2**20
    if a.count_ops:
        row["ops_per_step"] = count_ops(step, a.device)
    print(json.dumps(row), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scheme", help="a registered PE scheme (default: pelab's pe.scheme "
                    "default), a comma-separated list of them, or all (one row each)")
    ap.add_argument("--pelab", help="the pelab binary: its config-reference gives the defaults")
    for k, d in (("d_model", 128), ("heads", 4), ("d_ff", 512), ("layers", 2), ("batch", 32),
                 ("len", 32), ("vocab", 32), ("steps", 20), ("warmup", 3), ("threads", 2)):
        ap.add_argument("--" + k, type=int, default=d)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the model, fused AdamW where available (torch >= 2)")
    ap.add_argument("--modes", help="comma-separated eager and/or compile, every scheme in each "
                    "(default: eager, or compile with --compile); eager runs come first")
    ap.add_argument("--budget", type=float, default=0,
                    help="seconds: no run starts later than this after the start; each run not "
                    "started is one row saying so (0: no limit)")
    ap.add_argument("--count-ops", action="store_true",
                    help="count one more step's ops with torch.profiler (ops_per_step)")
    ap.add_argument("--blas-info", action="store_true", help="print only the BLAS record")
    ap.add_argument("--check-against-reference", action="store_true",
                    help="compare one float64 forward/backward with tools/torch_reference.py's Model")
    a = ap.parse_args()
    t_start = time.perf_counter()
    torch.set_num_threads(a.threads)
    if a.blas_info:
        print(json.dumps(blas_info.torch_record(torch)))
        return
    if not a.pelab:
        raise SystemExit("bench_torch.py: --pelab PATH is needed (the pelab binary whose "
                         "config-reference gives the default config bench_train trains)")
    modes = a.modes.split(",") if a.modes else ["compile" if a.compile else "eager"]
    for m in modes:
        if m not in ("eager", "compile"):
            raise SystemExit("bench_torch.py: --modes takes eager and compile, got '%s'" % m)
    if "compile" in modes and not hasattr(torch, "compile"):
        raise SystemExit("bench_torch.py: --compile needs torch >= 2 (torch.compile); this is "
                         "torch %s from %s (bench/torch_venv.sh makes a PyPI torch 2.x venv)"
                         % (torch.__version__, os.path.dirname(torch.__file__)))
    registered = pelab_config.registered_schemes(a.pelab)
    scheme = a.scheme or pelab_config.defaults(a.pelab)["pe"]["scheme"]
    schemes = registered if scheme == "all" else scheme.split(",")
    for scheme in schemes:
        check_scheme(scheme, registered)
    dev = torch.device(a.device)
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    for mode in modes:
        for scheme in schemes:
            waited = time.perf_counter() - t_start
            if a.budget > 0 and waited > a.budget:
                print(json.dumps({"impl": "torch", "scheme": scheme, "mode": mode,
                                  "skipped": "not started: %.0f s of the %.0f s budget spent"
                                  % (waited, a.budget)}), flush=True)
                continue
            run_one(a, scheme, mode, dev)


if __name__ == "__main__":
    main()
