#!/usr/bin/env python3
"""pelab — an independent PyTorch reference of the pelab transformer, for golden tests.

Written from the specification in docs/model.md (not from the C++): both architectures (seq2seq,
decoder-only), pre-/post-LN, gelu/relu, optional biases, tied embeddings and every positional
encoding scheme (sinusoidal, learned, shaw, t5, rope with both pairings and partial rotary, alibi,
none, kerple, fire, xpos, cope). Everything is computed in float64 from the float32 values stored in
a pelab checkpoint.

    tools/torch_reference.py IN.input.h5 OUT.golden.h5

IN is a pelab checkpoint (docs/checkpoint.md: /config YAML, /vocab, /param_names, /params/<name>)
with an extra group /golden_input holding the batch as attributes (tests/test_golden.cpp writes
it): int64 arrays tgt, tgt_mask, tgt_pos, targets (and src, src_mask, src_pos for seq2seq; a
position array is [L], shared by the batch, or [B, L], one ID row per batch row) and
the scalars ignore_index, label_smoothing, adamw_steps, adamw_lr, adamw_beta1, adamw_beta2,
adamw_eps, adamw_weight_decay. OUT gets: logits [B, T, V] and loss (float64), grad_names
(= /param_names; tied tables once), grads (every parameter's gradient flattened row-major and
concatenated in that order, rounded to float32) and adamw_losses [steps + 1] (float64: the loss
before each of `steps` AdamW steps and after the last).
"""
import argparse
import math
import sys

import numpy as np
import torch

DT = torch.float64  # the goldens' dtype (main); the classes compute in the dtype of their inputs


# ---------------------------------------------------------------- config
def as_float(x):
    return float(x)  # PyYAML reads "1e-05" (no dot) as a string


def as_bool(x):
    if isinstance(x, bool):
        return x
    return str(x).lower() in ("true", "yes", "on", "1")


class Cfg:
    """A pelab config: `c` is its parsed YAML (a dict with "model" and "pe" sections). A scheme
    reads its pe keys when it is built (and its params() inits when they draw), so a checkpoint
    written before an init key existed still loads."""

    def __init__(self, c, vocab):
        m, p = c["model"], c["pe"]
        self.arch = m["arch"]
        self.vocab = vocab
        self.d_model = int(m["d_model"])
        self.heads = int(m["heads"])
        self.d_ff = int(m["d_ff"])
        self.encoder_layers = int(m["encoder_layers"])
        self.decoder_layers = int(m["decoder_layers"])
        self.dropout = as_float(m["dropout"])
        self.norm = m["norm"]
        self.norm_eps = as_float(m["norm_eps"])
        self.activation = m["activation"]
        self.bias = as_bool(m["bias"])
        self.tie = as_bool(m["tie_embeddings"])
        self.embed_scale = m["embed_scale"]
        # absent from a resolved config while it is "off" (docs/model.md §3.1)
        self.length_scale = m.get("attention_length_scale", "off")
        assert self.length_scale in ("off", "log_n", "ssmax"), self.length_scale
        self.pe = p
        self.scheme = p["scheme"]
        assert self.d_model % self.heads == 0
        self.dh = self.d_model // self.heads
        if self.dropout != 0.0:
            raise SystemExit("torch_reference.py: dropout must be 0 (got %g)" % self.dropout)
        assert self.norm in ("pre", "post"), self.norm
        assert self.activation in ("gelu", "relu"), self.activation


# ---------------------------------------------------------------- positional encodings
# docs/model.md §7. Each PE object implements the four hooks; `site` is a dict with kind
# ("enc_self" | "dec_self" | "cross"), layer, q_pos, k_pos (LongTensors) and causal. A scheme object
# reads its parameters from P (name -> tensor, pelab's checkpoint names "<stack>.pe.<name>") and
# computes in the dtype and on the device of its inputs (the goldens: float64 on the CPU).
#
# params(cfg, stack) declares the parameters pelab's scheme creates for a stack ("encoder" or
# "decoder"): a list of (name under "<stack>.pe.", shape, init) with init(shape) -> a new float64
# tensor drawn as pelab initialises it (models/pe/<scheme>.cpp; torch's generator, not pelab's).
# main() checks the names and shapes against every golden input's checkpoint; bench/bench_torch.py
# creates its trainable parameters from them.
def normal_init(std):
    return lambda shape: torch.randn(shape, dtype=DT) * std


def uniform_init(a):
    return lambda shape: (torch.rand(shape, dtype=DT) * 2.0 - 1.0) * a


def const_init(v):
    return lambda shape: torch.full(shape, float(v), dtype=DT)


def stack_layers(cfg, stack):
    return cfg.encoder_layers if stack == "encoder" else cfg.decoder_layers


class PE:
    additive = False

    @staticmethod
    def params(cfg, stack):
        return []

    def embed(self, x, pos):
        return x

    def transform_qk(self, q, k, site):
        return q, k

    def score_term(self, q, site):
        return None

    def keyed_score_term(self, q, k, blocked, site):  # hook 3 with the keys and the mask
        return self.score_term(q, site)

    def value_term(self, probs, site):
        return None


class Sinusoidal(PE):  # Vaswani et al. 2017, §3.5
    additive = True

    def __init__(self, cfg, P, stack):
        self.base = as_float(cfg.pe["sinusoidal_base"])

    def table(self, pos, D, dtype):
        p = pos.to(dtype)[:, None]
        i = torch.arange(D, device=pos.device)
        pair = (i // 2).to(dtype)
        omega = torch.exp(-2.0 * pair * math.log(self.base) / D)
        ang = p * omega[None, :]
        return torch.where((i % 2 == 0)[None, :], torch.sin(ang), torch.cos(ang))

    def embed(self, x, pos):
        return x + self.table(pos, x.shape[-1], x.dtype)[None]


class Learned(PE):
    additive = True

    def __init__(self, cfg, P, stack):
        self.w = P[stack + ".pe.weight"]
        self.max_positions = int(cfg.pe["max_positions"])
        assert self.w.shape[0] == self.max_positions

    @staticmethod
    def params(cfg, stack):
        return [("weight", (int(cfg.pe["max_positions"]), cfg.d_model), normal_init(0.02))]

    def embed(self, x, pos):
        assert int(pos.max()) < self.max_positions, "learned PE: position out of range"
        return x + self.w[pos][None]


class Shaw(PE):  # Shaw et al. 2018: a^K inside the 1/sqrt(dh) scale, a^V added to the output
    def __init__(self, cfg, P, stack):
        self.k = int(cfg.pe["shaw_k"])
        self.keys = as_bool(cfg.pe["shaw_keys"])
        self.values = as_bool(cfg.pe["shaw_values"])
        self.per_head = as_bool(cfg.pe["shaw_per_head"])
        self.dh = cfg.dh
        self.P_heads = cfg.heads
        self.P, self.stack = P, stack

    @staticmethod
    def params(cfg, stack):
        R = 2 * int(cfg.pe["shaw_k"]) + 1
        shape = (cfg.heads, R, cfg.dh) if as_bool(cfg.pe["shaw_per_head"]) else (R, cfg.dh)
        which = [w for w, on in (("rel_k", cfg.pe["shaw_keys"]), ("rel_v", cfg.pe["shaw_values"]))
                 if as_bool(on)]
        return [("layers.%d.%s" % (l, w), shape, normal_init(0.02))
                for l in range(stack_layers(cfg, stack)) for w in which]

    def rel(self, site):
        d = site["k_pos"][None, :] - site["q_pos"][:, None]  # p_j - p_i
        return torch.clamp(d, -self.k, self.k) + self.k  # [Lq, Lk]

    def table(self, site, which):
        """[H, Lq, Lk, dh] per head, else [Lq, Lk, dh] (shared by the heads: not expanded)."""
        t = self.P["%s.pe.layers.%d.%s" % (self.stack, site["layer"], which)]
        r = self.rel(site)
        return t[:, r] if self.per_head else t[r]

    def score_term(self, q, site):
        if site["kind"] == "cross" or not self.keys:
            return None
        a = self.table(site, "rel_k")
        return torch.einsum("bhid,hijd->bhij" if self.per_head else "bhid,ijd->bhij", q, a) / \
            math.sqrt(self.dh)

    def value_term(self, probs, site):
        if site["kind"] == "cross" or not self.values:
            return None
        a = self.table(site, "rel_v")
        return torch.einsum("bhij,hijd->bhid" if self.per_head else "bhij,ijd->bhid", probs, a)


def t5_bucket(rel, bidirectional, num_buckets, max_distance):
    """HF transformers T5Attention._relative_position_bucket (rel = memory - context)."""
    buckets = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (rel > 0).to(torch.long) * num_buckets
        rel = torch.abs(rel)
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    max_exact = num_buckets // 2
    is_small = rel < max_exact
    large = max_exact + (
        torch.log(rel.float() / max_exact) / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, rel, large)


class T5(PE):  # Raffel et al. 2020: a learned scalar per (bucket, head), added unscaled
    def __init__(self, cfg, P, stack):
        self.N = int(cfg.pe["t5_num_buckets"])
        self.M = int(cfg.pe["t5_max_distance"])
        self.per_layer = as_bool(cfg.pe["t5_per_layer"])
        self.P, self.stack = P, stack

    @staticmethod
    def params(cfg, stack):
        shape, init = (int(cfg.pe["t5_num_buckets"]), cfg.heads), normal_init(cfg.d_model ** -0.5)
        if not as_bool(cfg.pe["t5_per_layer"]):
            return [("rel_bias", shape, init)]
        return [("layers.%d.rel_bias" % l, shape, init) for l in range(stack_layers(cfg, stack))]

    def score_term(self, q, site):
        if site["kind"] == "cross":
            return None
        name = ("%s.pe.layers.%d.rel_bias" % (self.stack, site["layer"]) if self.per_layer
                else "%s.pe.rel_bias" % self.stack)
        table = self.P[name]  # [N, H]
        rel = site["k_pos"][None, :] - site["q_pos"][:, None]
        b = t5_bucket(rel, site["kind"] == "enc_self", self.N, self.M)  # [Lq, Lk]
        return table[b].permute(2, 0, 1)[None]  # [1, H, Lq, Lk]


class RoPE(PE):  # Su et al. 2021 (interleaved pairs) / GPT-NeoX (half pairs, partial rotary)
    def __init__(self, cfg, P, stack):
        dh = cfg.dh
        self.rot = int(math.floor(dh * as_float(cfg.pe["rope_fraction"]) + 0.5))
        assert self.rot % 2 == 0 and 2 <= self.rot <= dh
        self.base = as_float(cfg.pe["rope_base"])
        self.pairing = cfg.pe["rope_pairing"]
        assert self.pairing in ("half", "interleaved")
        # Eval-time scaling (pe.rope_scaling) is not applied: the reference runs in training mode.

    def rotate(self, x, pos):
        half = self.rot // 2
        m = torch.arange(half, device=x.device).to(x.dtype)
        theta = self.base ** (-2.0 * m / self.rot)  # [rot/2]
        ang = pos.to(x.dtype)[:, None] * theta[None, :]  # [L, rot/2]
        cos, sin = torch.cos(ang), torch.sin(ang)
        if self.pairing == "half":  # pairs (i, i + rot/2)
            xa, xb = x[..., :half], x[..., half:self.rot]
        else:  # pairs (2i, 2i + 1)
            xa, xb = x[..., 0:self.rot:2], x[..., 1:self.rot:2]
        ya = xa * cos - xb * sin
        yb = xb * cos + xa * sin
        if self.pairing == "half":
            y = torch.cat([ya, yb], dim=-1)
        else:
            y = torch.stack([ya, yb], dim=-1).flatten(-2)
        return y if self.rot == x.shape[-1] else torch.cat([y, x[..., self.rot:]], dim=-1)

    def transform_qk(self, q, k, site):
        if site["kind"] == "cross":
            return q, k
        return self.rotate(q, site["q_pos"]), self.rotate(k, site["k_pos"])


def alibi_slopes(n):
    """The official ALiBi get_slopes (Press et al. 2022)."""
    def pow2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return pow2(n)
    c = 2 ** math.floor(math.log2(n))
    return pow2(c) + alibi_slopes(2 * c)[0::2][: n - c]


class ALiBi(PE):
    def __init__(self, cfg, P, stack):
        self.slopes = alibi_slopes(cfg.heads)
        self.m = {}  # (dtype, device) -> the slopes as a tensor
        self.symmetric = as_bool(cfg.pe["alibi_symmetric"])

    def score_term(self, q, site):
        if site["kind"] == "cross":
            return None
        d = (site["q_pos"][:, None] - site["k_pos"][None, :]).to(q.dtype)  # p_i - p_j
        key = (q.dtype, q.device)
        if key not in self.m:
            self.m[key] = torch.tensor(self.slopes, dtype=q.dtype, device=q.device)
        m = self.m[key][:, None, None]
        if site["causal"]:
            return (-m * torch.where(d >= 0, d, torch.zeros_like(d)))[None]
        if not self.symmetric:
            return None
        return (-m * d.abs())[None]


class CoPE(PE):  # Golovneva et al. 2024: gated counts, interpolated embeddings, inside 1/sqrt(dh)
    def __init__(self, cfg, P, stack):
        self.p_max = int(cfg.pe["cope_p_max"])
        self.offset = self.p_max if stack == "encoder" else 0  # encoder rows: counts -p_max..p_max
        self.dh = cfg.dh
        self.P, self.stack = P, stack

    @staticmethod
    def params(cfg, stack):
        p = int(cfg.pe["cope_p_max"])
        rows = 2 * p + 1 if stack == "encoder" else p + 1
        return [("layers.%d.pos_emb" % l, (rows, cfg.dh), normal_init(0.02))
                for l in range(stack_layers(cfg, stack))]

    def keyed_score_term(self, q, k, blocked, site):  # blocked: None when nothing is masked
        if site["kind"] == "cross":
            return None
        e = self.P["%s.pe.layers.%d.pos_emb" % (self.stack, site["layer"])]  # [rows, dh]
        s = 1.0 / math.sqrt(self.dh)
        g = torch.sigmoid(q @ k.transpose(-1, -2) * s)  # gates
        if blocked is not None:
            g = g.masked_fill(blocked, 0.0)
        qp, kp = site["q_pos"], site["k_pos"]
        before = kp[None, :] <= qp[:, None]  # [Lq, Lk]: key at or before the query
        # sum of the gates from key j up to the query: a reversed cumulative sum
        back = torch.flip(torch.cumsum(torch.flip(g * before, [-1]), -1), [-1])
        if site["causal"]:
            c = torch.clamp(back, max=self.p_max)
        else:  # keys after the query: minus the sum from the query up to key j
            fwd = torch.cumsum(g * (kp[None, :] >= qp[:, None]), -1)
            c = torch.clamp(torch.where(before, back, -fwd), -self.p_max, self.p_max)
        u = c + self.offset
        lo = torch.floor(u).long()
        hi = torch.clamp(lo + 1, max=e.shape[0] - 1)
        w = u - lo
        z = q @ e.t() * s  # q_i . e[n] / sqrt(dh) for every integer n: [B, H, Lq, rows]
        return w * z.gather(-1, hi) + (1 - w) * z.gather(-1, lo)


class NoPE(PE):
    def __init__(self, cfg, P, stack):
        pass


def site_distance(site, dtype):
    """d[i, j]: p_i - p_j at and before the query in causal sites (0 after it), else |p_i - p_j|."""
    d = (site["q_pos"][:, None] - site["k_pos"][None, :]).to(dtype)
    return torch.clamp(d, min=0.0) if site["causal"] else d.abs()


class Kerple(PE):  # Chi et al. 2022: -r1 log(1 + r2 d) or -r1 d^r2, per head and layer
    def __init__(self, cfg, P, stack):
        self.power = cfg.pe["kerple_variant"] == "power"
        assert cfg.pe["kerple_variant"] in ("log", "power")
        self.P, self.stack = P, stack

    @staticmethod
    def params(cfg, stack):
        def inv_softplus(r):
            return torch.where(r > 30, r, torch.log(torch.expm1(r)))

        def r2_raw(r):  # 2 sigmoid^-1 (power), else softplus^-1
            return torch.log(r / (2.0 - r)) if cfg.pe["kerple_variant"] == "power" else inv_softplus(r)

        def init(key, raw):  # each head and layer: init * (1 + spread * u), u ~ U[-1, 1)
            def draw(shape):
                u = 2 * torch.rand(shape, dtype=DT) - 1
                return raw(as_float(cfg.pe[key]) * (1 + as_float(cfg.pe["kerple_init_spread"]) * u))
            return draw

        shape = (stack_layers(cfg, stack), cfg.heads)
        return [("r1_raw", shape, init("kerple_r1_init", inv_softplus)),
                ("r2_raw", shape, init("kerple_r2_init", r2_raw))]

    def score_term(self, q, site):
        if site["kind"] == "cross":
            return None
        l = site["layer"]
        r1 = torch.nn.functional.softplus(self.P[self.stack + ".pe.r1_raw"][l])[:, None, None]
        raw2 = self.P[self.stack + ".pe.r2_raw"][l][:, None, None]
        d = site_distance(site, q.dtype)[None]  # [1, Lq, Lk]
        if self.power:
            r2 = 2.0 * torch.sigmoid(raw2)
            # d^r2 with 0^r2 = 0 (r2 > 0), written so that d = 0 has a finite gradient
            dp = torch.where(d > 0, torch.exp(r2 * torch.log(torch.clamp(d, min=1.0))),
                             torch.zeros_like(d))
            return (-r1 * dp)[None]
        r2 = torch.nn.functional.softplus(raw2)
        return (-r1 * torch.log1p(r2 * d))[None]


class Fire(PE):  # Li et al. 2023: f(psi(d) / psi(max(L, p_i))), psi(x) = log(|c| x + 1)
    def __init__(self, cfg, P, stack):
        self.L0 = as_float(cfg.pe["fire_threshold"])
        self.learn = as_bool(cfg.pe["fire_learn_threshold"])
        self.P, self.stack = P, stack

    @staticmethod
    def params(cfg, stack):
        Ly, W, H = stack_layers(cfg, stack), int(cfg.pe["fire_mlp_width"]), cfg.heads
        a2 = 1.0 / math.sqrt(W)
        p = [("w1", (Ly, W), uniform_init(1.0)), ("b1", (Ly, W), uniform_init(1.0)),
             ("w2", (Ly, H, W), uniform_init(a2)), ("b2", (Ly, H), uniform_init(a2)),
             ("c", (Ly,), lambda shape: const_init(as_float(cfg.pe["fire_c_init"]))(shape))]
        if as_bool(cfg.pe["fire_learn_threshold"]):
            p.append(("threshold_scale", (Ly,), const_init(1.0)))
        return p

    def score_term(self, q, site):
        if site["kind"] == "cross":
            return None
        l = site["layer"]
        g = lambda n: self.P["%s.pe.%s" % (self.stack, n)][l]
        c = g("c").abs()
        L = (g("threshold_scale").abs() * self.L0) if self.learn else \
            torch.tensor(self.L0, dtype=q.dtype, device=q.device)
        p = site["q_pos"].to(q.dtype)[:, None]  # [Lq, 1]
        norm = torch.maximum(L.expand_as(p), p)
        x = torch.log(c * site_distance(site, q.dtype) + 1) / (torch.log(c * norm + 1) + 1e-6)
        h = torch.relu(x[..., None] * g("w1") + g("b1"))  # [Lq, Lk, W]
        f = h @ g("w2").t() + g("b2")  # [Lq, Lk, H]
        bias = f.permute(2, 0, 1)
        if site["causal"]:
            later = site["k_pos"][None, :] > site["q_pos"][:, None]
            bias = torch.where(later[None], torch.zeros_like(bias), bias)
        return bias[None]


class XPos(PE):  # Sun et al. 2022: RoPE (interleaved pairs) with q * zeta^(n/B), k * zeta^(-m/B)
    def __init__(self, cfg, P, stack):
        self.d = cfg.dh
        self.base = as_float(cfg.pe["xpos_base"])
        self.B = as_float(cfg.pe["xpos_scale_base"])
        self.gamma = as_float(cfg.pe["xpos_gamma"])

    def apply(self, x, pos, sign):
        half = self.d // 2
        i = torch.arange(half, device=x.device).to(x.dtype)
        theta = self.base ** (-2.0 * i / self.d)
        zeta = (2.0 * i / self.d + self.gamma) / (1.0 + self.gamma)
        n = pos.to(x.dtype)[:, None]
        scale = zeta[None, :] ** (sign * n / self.B)  # [L, d/2]
        ang = n * theta[None, :]
        xa, xb = x[..., 0::2], x[..., 1::2]
        ya = (xa * torch.cos(ang) - xb * torch.sin(ang)) * scale
        yb = (xb * torch.cos(ang) + xa * torch.sin(ang)) * scale
        return torch.stack([ya, yb], dim=-1).flatten(-2)

    def transform_qk(self, q, k, site):
        if site["kind"] == "cross":
            return q, k
        return self.apply(q, site["q_pos"], 1.0), self.apply(k, site["k_pos"], -1.0)


SCHEMES = {"sinusoidal": Sinusoidal, "learned": Learned, "shaw": Shaw, "t5": T5, "rope": RoPE,
           "alibi": ALiBi, "none": NoPE, "kerple": Kerple, "fire": Fire, "xpos": XPos, "cope": CoPE}


# ---------------------------------------------------------------- the model (docs/model.md §2-3)
def embed_scale(cfg):
    """The token embedding multiplier (model.embed_scale; auto: sqrt(d_model) for additive PE)."""
    D = cfg.d_model
    return {"auto": math.sqrt(D) if SCHEMES[cfg.scheme].additive else 1.0, "sqrt_d": math.sqrt(D),
            "none": 1.0}[cfg.embed_scale]


class Model:
    def __init__(self, cfg, P):
        self.cfg, self.P = cfg, P
        if cfg.scheme not in SCHEMES:
            raise SystemExit("torch_reference.py: no reference for pe.scheme '%s'" % cfg.scheme)
        s2s = cfg.arch == "seq2seq"
        if cfg.tie:
            shared = P["encoder.embed.weight" if s2s else "decoder.embed.weight"]
            for n in (["decoder.embed.weight"] if s2s else []) + ["lm_head.weight"]:
                assert n not in P, "tied checkpoint lists %s" % n
            self.E_enc = shared if s2s else None
            self.E_dec = shared
            self.W_out = shared
        else:
            self.E_enc = P["encoder.embed.weight"] if s2s else None
            self.E_dec = P["decoder.embed.weight"]
            self.W_out = P["lm_head.weight"]
        self.pe_enc = SCHEMES[cfg.scheme](cfg, P, "encoder") if s2s else None
        self.pe_dec = SCHEMES[cfg.scheme](cfg, P, "decoder")
        self.scale = embed_scale(cfg)

    # -- building blocks
    def linear(self, x, name):
        y = x @ self.P[name + ".weight"].t()
        if self.cfg.bias:
            y = y + self.P[name + ".bias"]
        return y

    def ln(self, x, name):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.cfg.norm_eps) * self.P[name + ".weight"] + \
            self.P[name + ".bias"]

    def ff(self, x, name):
        h = self.linear(x, name + ".fc1")
        if self.cfg.activation == "gelu":
            h = 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))
        else:
            h = torch.clamp(h, min=0.0)
        return self.linear(h, name + ".fc2")

    def attention(self, xq, xkv, name, site, pe, key_mask):
        c = self.cfg
        B, Lq, D = xq.shape
        Lk = xkv.shape[1]

        def split(t, L):
            return t.reshape(B, L, c.heads, c.dh).permute(0, 2, 1, 3)

        q = split(self.linear(xq, name + ".q"), Lq)
        k = split(self.linear(xkv, name + ".k"), Lk)
        v = split(self.linear(xkv, name + ".v"), Lk)
        q, k = pe.transform_qk(q, k, site)
        blocked = (key_mask == 0)[:, None, None, :].expand(B, 1, Lq, Lk)
        if site["causal"]:
            i = torch.arange(Lq, device=xq.device)[:, None]
            j = torch.arange(Lk, device=xq.device)[None, :]
            blocked = blocked | (j > Lk - Lq + i)[None, None]
        a = q @ k.transpose(-1, -2) / math.sqrt(c.dh)
        st = pe.keyed_score_term(q, k, blocked, site)
        if st is not None:
            a = a + st
        if c.length_scale != "off":  # every logit of row i times log n_i (ssmax: s_h log n_i),
            # n_i = the keys the row may attend, at least 1 (Chiang & Cholak 2022; Nakanishi 2025)
            n = (~blocked).sum(-1, keepdim=True).clamp(min=1).to(a.dtype)  # [B, 1, Lq, 1]
            f = torch.log(n)
            if c.length_scale == "ssmax":
                f = self.P[name + ".length_scale"].reshape(1, c.heads, 1, 1) * f
            a = a * f
        a = a.masked_fill(blocked, -1e9)
        p = torch.softmax(a, dim=-1)
        o = p @ v
        vt = pe.value_term(p, site)
        if vt is not None:
            o = o + vt
        o = o.permute(0, 2, 1, 3).reshape(B, Lq, D)
        return self.linear(o, name + ".o")

    def block(self, x, f, norm):
        if self.cfg.norm == "pre":
            return x + f(self.ln(x, norm))
        return self.ln(x + f(x), norm)

    # -- stacks
    def encode(self, src, src_mask, pos):
        c = self.cfg
        x = self.pe_enc.embed(self.E_enc[src] * self.scale, pos)
        for l in range(c.encoder_layers):
            pre = "encoder.layers.%d" % l
            site = dict(kind="enc_self", layer=l, q_pos=pos, k_pos=pos, causal=False)
            x = self.block(x, lambda h: self.attention(h, h, pre + ".self_attn", site, self.pe_enc,
                                                       src_mask), pre + ".norm1")
            x = self.block(x, lambda h: self.ff(h, pre + ".ff"), pre + ".norm2")
        if c.norm == "pre":
            x = self.ln(x, "encoder.norm")
        return x

    def decode(self, tgt, tgt_mask, pos, memory=None, src_mask=None, src_pos=None):
        c = self.cfg
        cross = memory is not None
        x = self.pe_dec.embed(self.E_dec[tgt] * self.scale, pos)
        for l in range(c.decoder_layers):
            pre = "decoder.layers.%d" % l
            site = dict(kind="dec_self", layer=l, q_pos=pos, k_pos=pos, causal=True)
            x = self.block(x, lambda h: self.attention(h, h, pre + ".self_attn", site, self.pe_dec,
                                                       tgt_mask), pre + ".norm1")
            if cross:
                xs = dict(kind="cross", layer=l, q_pos=pos, k_pos=src_pos, causal=False)
                x = self.block(x, lambda h: self.attention(h, memory, pre + ".cross_attn", xs,
                                                           self.pe_dec, src_mask), pre + ".norm2")
            x = self.block(x, lambda h: self.ff(h, pre + ".ff"),
                           pre + (".norm3" if cross else ".norm2"))
        if c.norm == "pre":
            x = self.ln(x, "decoder.norm")
        return x

    def forward(self, batch):
        # Position IDs per batch row (tgt_pos / src_pos [B, L], docs/model.md 3.4): every row's
        # result is that row's alone with its IDs as the shared vector.
        if any(batch[k].dim() == 2 for k in ("src_pos", "tgt_pos") if k in batch):
            rows = []
            for r in range(batch["tgt"].shape[0]):
                one = {k: (v[r] if v.dim() == 2 else v) if k in ("src_pos", "tgt_pos")
                       else v[r:r + 1] for k, v in batch.items()}
                rows.append(self.forward(one))
            return torch.cat(rows, 0)
        if self.cfg.arch == "seq2seq":
            memory = self.encode(batch["src"], batch["src_mask"], batch["src_pos"])
            h = self.decode(batch["tgt"], batch["tgt_mask"], batch["tgt_pos"], memory,
                            batch["src_mask"], batch["src_pos"])
        else:
            h = self.decode(batch["tgt"], batch["tgt_mask"], batch["tgt_pos"])
        return h @ self.W_out.t()


def cross_entropy(logits, targets, ignore_index, label_smoothing):
    """Mean over non-ignored targets of (1-e)·(-log p_t) + e·mean_c(-log p_c) (PyTorch semantics)."""
    V = logits.shape[-1]
    lp = torch.log_softmax(logits.reshape(-1, V), dim=-1)
    t = targets.reshape(-1)
    keep = t != ignore_index
    nll = -lp[keep, t[keep]]
    smooth = -lp[keep].mean(-1)
    per = (1.0 - label_smoothing) * nll + label_smoothing * smooth
    return per.sum() / keep.sum().clamp(min=1)


def adamw_manual(params, grads_fn, lr, b1, b2, eps, wd, steps):
    """AdamW as framework/include/pelab/optim.h: p -= lr·wd·p, then the bias-corrected Adam step."""
    ps = [p.detach().clone() for p in params]
    m = [torch.zeros_like(p) for p in ps]
    v = [torch.zeros_like(p) for p in ps]
    losses = []
    for t in range(1, steps + 1):
        loss, gs = grads_fn(ps)
        losses.append(loss)
        for i, (p, g) in enumerate(zip(ps, gs)):
            p.mul_(1.0 - lr * wd)
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            mhat = m[i] / (1 - b1 ** t)
            vhat = v[i] / (1 - b2 ** t)
            p.sub_(lr * mhat / (vhat.sqrt() + eps))
    losses.append(grads_fn(ps)[0])
    return losses


# ---------------------------------------------------------------- I/O
def read_str(f, name):
    v = f[name][()]
    return v.decode() if isinstance(v, bytes) else str(v)


def check_declared(cfg, stored):
    """The schemes' params() declarations against a checkpoint: the same "<stack>.pe." names and
    shapes (so bench/bench_torch.py, which creates its parameters from them, builds pelab's)."""
    stacks = ["encoder", "decoder"] if cfg.arch == "seq2seq" else ["decoder"]
    declared = {"%s.pe.%s" % (st, n): tuple(shape) for st in stacks
                for n, shape, _ in SCHEMES[cfg.scheme].params(cfg, st)}
    found = {n: tuple(v.shape) for n, v in stored.items() if ".pe." in n}
    if declared != found:
        raise SystemExit("torch_reference.py: %s.params() declares %s, the checkpoint holds %s"
                         % (SCHEMES[cfg.scheme].__name__, declared, found))


def main():
    import h5py  # the goldens' I/O only: bench/bench_torch.py imports this file without them
    try:
        import yaml
    except ImportError:  # pragma: no cover
        sys.exit("torch_reference.py: needs PyYAML (apt-get install python3-yaml)")
    torch.set_default_dtype(DT)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input")
    ap.add_argument("output")
    args = ap.parse_args()

    with h5py.File(args.input, "r") as f:
        vocab = [s.decode() if isinstance(s, bytes) else s for s in f["vocab"][()]]
        cfg = Cfg(yaml.safe_load(read_str(f, "config")), len(vocab))
        names = [s.decode() if isinstance(s, bytes) else s for s in f["param_names"][()]]
        stored = {n: np.asarray(f["params"][n][()]) for n in names}
        gi = f["golden_input"]
        batch = {k: torch.from_numpy(np.asarray(gi.attrs[k])).long()
                 for k in ("src", "src_mask", "src_pos", "tgt", "tgt_mask", "tgt_pos", "targets")
                 if k in gi.attrs}
        ignore = int(gi.attrs["ignore_index"])
        ls = float(gi.attrs["label_smoothing"])
        steps = int(gi.attrs["adamw_steps"])
        hp = {k: float(gi.attrs["adamw_" + k]) for k in ("lr", "beta1", "beta2", "eps",
                                                           "weight_decay")}
    if cfg.arch not in ("seq2seq", "decoder"):
        raise SystemExit("torch_reference.py: unknown model.arch '%s'" % cfg.arch)
    if cfg.scheme not in SCHEMES:
        raise SystemExit("torch_reference.py: no reference for pe.scheme '%s'" % cfg.scheme)
    check_declared(cfg, stored)

    # float32 checkpoint values, cast exactly to float64
    leaves = {n: torch.from_numpy(stored[n].astype(np.float64)).requires_grad_(True) for n in names}

    def loss_of(P):
        logits = Model(cfg, P).forward(batch)
        return logits, cross_entropy(logits, batch["targets"], ignore, ls)

    logits, loss = loss_of(leaves)
    # Our cross-entropy against torch's own (same PyTorch semantics, label smoothing included).
    tl = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                           batch["targets"].reshape(-1), ignore_index=ignore,
                                           label_smoothing=ls)
    assert abs(float(tl) - float(loss)) <= 1e-12 * abs(float(loss)), (float(tl), float(loss))
    loss.backward()
    grads = {n: leaves[n].grad if leaves[n].grad is not None else torch.zeros_like(leaves[n])
             for n in names}

    # AdamW: torch.optim.AdamW, checked against the optim.h formula written out by hand.
    params = [torch.from_numpy(stored[n].astype(np.float64)).requires_grad_(True) for n in names]
    opt = torch.optim.AdamW(params, lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"],
                            weight_decay=hp["weight_decay"])
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        l = loss_of(dict(zip(names, params)))[1]
        losses.append(float(l))
        l.backward()
        opt.step()
    losses.append(float(loss_of(dict(zip(names, params)))[1]))

    def grads_fn(ps):
        ls_ = [p.detach().clone().requires_grad_(True) for p in ps]
        l = loss_of(dict(zip(names, ls_)))[1]
        l.backward()
        return float(l), [p.grad if p.grad is not None else torch.zeros_like(p) for p in ls_]

    manual = adamw_manual([torch.from_numpy(stored[n].astype(np.float64)) for n in names],
                          grads_fn, hp["lr"], hp["beta1"], hp["beta2"], hp["eps"],
                          hp["weight_decay"], steps)
    for a, b in zip(losses, manual):
        assert abs(a - b) <= 1e-12 * abs(a), ("torch.optim.AdamW differs from optim.h", a, b)

    with h5py.File(args.output, "w", libver="latest") as g:
        # Fixed-length strings only: variable-length ones cost a 4 KB global heap per file.
        g.attrs["reference"] = np.bytes_("tools/torch_reference.py (docs/model.md), float64")
        g.attrs["torch_version"] = np.bytes_(str(torch.__version__))
        g.attrs["input"] = np.bytes_(args.input.split("/")[-1])
        g.create_dataset("logits", data=logits.detach().numpy())
        g.create_dataset("loss", data=float(loss))
        # One flat array (row-major, in /param_names order) keeps the file small.
        g.create_dataset("grad_names", data=np.array([n.encode() for n in names]))
        # Gradients are stored rounded once to float32 (relative error <= 6e-8, far below the 1e-4
        # tolerance); logits and losses stay float64.
        g.create_dataset("grads", data=np.concatenate([grads[n].numpy().ravel()
                                                       for n in names]).astype(np.float32))
        g.create_dataset("adamw_losses", data=np.array(losses))
    print("%s: loss %.10f, %d grads, adamw %.6f -> %.6f" % (args.output, float(loss), len(names),
                                                            losses[0], losses[-1]))


if __name__ == "__main__":
    main()
