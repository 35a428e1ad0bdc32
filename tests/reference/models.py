"""From-scratch PyTorch reference models for the ppc/ppr test fixtures.

Everything here is written out explicitly (no F.rms_norm / F.layer_norm / F.gelu /
F.scaled_dot_product_attention) so that the semantics match the C compiler's ops
exactly; see README.md in this directory.

A model is a pure function of a dict {checkpoint name: tensor}; the dtype of the
computation follows the dtype of the parameters (float32 for fixtures, float64 for
the finite-difference self-check).

Requires PyTorch (1.13 is enough).  Import with /usr/bin/python3.
"""

import math

import torch


# --------------------------------------------------------------------------- ops

def rmsnorm(x, w, eps):
    """x * rsqrt(mean(x^2, last dim) + eps) * w"""
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


def layernorm(x, w, b, eps):
    """(x - mean) / sqrt(biased var + eps) * w + b"""
    mu = x.mean(dim=-1, keepdim=True)
    xc = x - mu
    var = (xc * xc).mean(dim=-1, keepdim=True)
    return xc / torch.sqrt(var + eps) * w + b


def silu(x):
    return x * torch.sigmoid(x)


def relu(x):
    """max(x, 0); the gradient is 0 where x <= 0"""
    return torch.clamp_min(x, 0.0)


def gelu_tanh(x):
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * x * x * x)))


def rope_tables(seq, head_dim, theta, dtype):
    """cos, sin of shape [seq, head_dim/2]; angle[s, i] = s * theta^(-2i/d)."""
    half = head_dim // 2
    i = torch.arange(half, dtype=dtype)
    inv_freq = torch.pow(torch.tensor(theta, dtype=dtype), -2.0 * i / head_dim)
    s = torch.arange(seq, dtype=dtype)
    ang = s[:, None] * inv_freq[None, :]
    return torch.cos(ang), torch.sin(ang)


def rope(x, cos, sin):
    """Rotate-half RoPE.  x: [B, S, n, d]; cos, sin: [S, d/2]."""
    half = x.shape[-1] // 2
    x1 = x[..., :half]
    x2 = x[..., half:]
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def attention(q, k, v, causal=True):
    """q: [B, S, hq, d]; k, v: [B, S, hk, d]; returns [B, S, hq, d].

    Causal softmax(q k^T / sqrt(d)) v.  Grouped query: query head h reads kv head
    h // (hq / hk) (HF repeat_kv grouping)."""
    B, S, hq, d = q.shape
    hk = k.shape[2]
    assert hq % hk == 0
    rep = hq // hk
    if rep > 1:
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
    q = q.transpose(1, 2)  # [B, h, S, d]
    k = k.transpose(1, 2)
    v = v.transpose(1, 2)
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
    if causal:
        mask = torch.ones(S, S, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    p = torch.softmax(scores, dim=-1)
    out = torch.matmul(p, v)  # [B, h, S, d]
    return out.transpose(1, 2)


def linear(x, w, b=None):
    """PyTorch/HF Linear layout: W[out, in], y = x W^T (+ b)."""
    y = torch.matmul(x, w.t())
    return y if b is None else y + b


def conv1d(x, w, b):
    """HF Conv1D layout: W[in, out], y = x W + b."""
    return torch.matmul(x, w) + b


def cross_entropy(logits, labels):
    """Mean cross entropy over all tokens.  logits [..., V], labels [...]."""
    V = logits.shape[-1]
    lg = logits.reshape(-1, V)
    lb = labels.reshape(-1)
    m = lg.max(dim=-1, keepdim=True).values.detach()
    lse = torch.log(torch.exp(lg - m).sum(dim=-1)) + m[:, 0]
    picked = lg.gather(1, lb[:, None])[:, 0]
    return (lse - picked).mean()


# --------------------------------------------------------------------- MiniMind

def minimind_param_specs(cfg):
    """Ordered list of (name, shape, kind); kind in {"matrix", "norm", "bias"}."""
    V, H, L = cfg["vocab"], cfg["hidden"], cfg["layers"]
    nh, nkv, F = cfg["heads"], cfg["kv_heads"], cfg["ffn"]
    hd = cfg["head_dim"]
    assert hd * nh == H
    specs = [("model.embed_tokens.weight", [V, H], "matrix")]
    for l in range(L):
        p = "model.layers.%d." % l
        specs += [
            (p + "input_layernorm.weight", [H], "norm"),
            (p + "self_attn.q_proj.weight", [nh * hd, H], "matrix"),
            (p + "self_attn.k_proj.weight", [nkv * hd, H], "matrix"),
            (p + "self_attn.v_proj.weight", [nkv * hd, H], "matrix"),
            (p + "self_attn.o_proj.weight", [H, nh * hd], "matrix"),
            (p + "self_attn.q_norm.weight", [hd], "norm"),
            (p + "self_attn.k_norm.weight", [hd], "norm"),
            (p + "post_attention_layernorm.weight", [H], "norm"),
            (p + "mlp.gate_proj.weight", [F, H], "matrix"),
            (p + "mlp.up_proj.weight", [F, H], "matrix"),
            (p + "mlp.down_proj.weight", [H, F], "matrix"),
        ]
    specs.append(("model.norm.weight", [H], "norm"))
    return specs


def minimind_forward(P, cfg, tokens):
    """tokens [B, S] int64 -> logits [B, S, V]."""
    H, L = cfg["hidden"], cfg["layers"]
    nh, nkv, hd = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    eps, theta = cfg["eps"], cfg["theta"]
    B, S = tokens.shape
    E = P["model.embed_tokens.weight"]
    x = E[tokens]  # [B, S, H]
    cos, sin = rope_tables(S, hd, theta, x.dtype)
    for l in range(L):
        p = "model.layers.%d." % l
        h = rmsnorm(x, P[p + "input_layernorm.weight"], eps)
        q = linear(h, P[p + "self_attn.q_proj.weight"]).reshape(B, S, nh, hd)
        k = linear(h, P[p + "self_attn.k_proj.weight"]).reshape(B, S, nkv, hd)
        v = linear(h, P[p + "self_attn.v_proj.weight"]).reshape(B, S, nkv, hd)
        q = rmsnorm(q, P[p + "self_attn.q_norm.weight"], eps)
        k = rmsnorm(k, P[p + "self_attn.k_norm.weight"], eps)
        q = rope(q, cos, sin)
        k = rope(k, cos, sin)
        a = attention(q, k, v, causal=True).reshape(B, S, nh * hd)
        x = x + linear(a, P[p + "self_attn.o_proj.weight"])
        h = rmsnorm(x, P[p + "post_attention_layernorm.weight"], eps)
        g = linear(h, P[p + "mlp.gate_proj.weight"])
        u = linear(h, P[p + "mlp.up_proj.weight"])
        x = x + linear(silu(g) * u, P[p + "mlp.down_proj.weight"])
    x = rmsnorm(x, P["model.norm.weight"], eps)
    return torch.matmul(x, E.t())  # tied head


# ------------------------------------------------------------------------ GPT-2

def gpt2_param_specs(cfg):
    V, NP, H, L = cfg["vocab"], cfg["n_pos"], cfg["hidden"], cfg["layers"]
    specs = [
        ("transformer.wte.weight", [V, H], "matrix"),
        ("transformer.wpe.weight", [NP, H], "matrix"),
    ]
    for l in range(L):
        p = "transformer.h.%d." % l
        specs += [
            (p + "ln_1.weight", [H], "norm"),
            (p + "ln_1.bias", [H], "bias"),
            (p + "attn.c_attn.weight", [H, 3 * H], "matrix"),
            (p + "attn.c_attn.bias", [3 * H], "bias"),
            (p + "attn.c_proj.weight", [H, H], "matrix"),
            (p + "attn.c_proj.bias", [H], "bias"),
            (p + "ln_2.weight", [H], "norm"),
            (p + "ln_2.bias", [H], "bias"),
            (p + "mlp.c_fc.weight", [H, 4 * H], "matrix"),
            (p + "mlp.c_fc.bias", [4 * H], "bias"),
            (p + "mlp.c_proj.weight", [4 * H, H], "matrix"),
            (p + "mlp.c_proj.bias", [H], "bias"),
        ]
    specs += [
        ("transformer.ln_f.weight", [H], "norm"),
        ("transformer.ln_f.bias", [H], "bias"),
    ]
    return specs


def gpt2_forward(P, cfg, tokens):
    H, L, nh, eps = cfg["hidden"], cfg["layers"], cfg["heads"], cfg["eps"]
    hd = H // nh
    B, S = tokens.shape
    assert S <= cfg["n_pos"]
    wte = P["transformer.wte.weight"]
    x = wte[tokens] + P["transformer.wpe.weight"][:S][None, :, :]
    for l in range(L):
        p = "transformer.h.%d." % l
        h = layernorm(x, P[p + "ln_1.weight"], P[p + "ln_1.bias"], eps)
        qkv = conv1d(h, P[p + "attn.c_attn.weight"], P[p + "attn.c_attn.bias"])
        q = qkv[..., 0 * H:1 * H].reshape(B, S, nh, hd)
        k = qkv[..., 1 * H:2 * H].reshape(B, S, nh, hd)
        v = qkv[..., 2 * H:3 * H].reshape(B, S, nh, hd)
        a = attention(q, k, v, causal=True).reshape(B, S, H)
        x = x + conv1d(a, P[p + "attn.c_proj.weight"], P[p + "attn.c_proj.bias"])
        h = layernorm(x, P[p + "ln_2.weight"], P[p + "ln_2.bias"], eps)
        h = gelu_tanh(conv1d(h, P[p + "mlp.c_fc.weight"], P[p + "mlp.c_fc.bias"]))
        x = x + conv1d(h, P[p + "mlp.c_proj.weight"], P[p + "mlp.c_proj.bias"])
    x = layernorm(x, P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], eps)
    return torch.matmul(x, wte.t())  # tied head, no bias


# ---------------------------------------------------------------------- registry

FAMILIES = {
    "minimind": (minimind_param_specs, minimind_forward),
    "gpt2": (gpt2_param_specs, gpt2_forward),
}


def param_specs(family, cfg):
    return FAMILIES[family][0](cfg)


def forward(family, P, cfg, tokens):
    return FAMILIES[family][1](P, cfg, tokens)


def init_params(family, cfg, seed):
    """Deterministic initial weights (float32), in checkpoint order.

    matrices / embeddings: normal(0, 0.02); norm weights: 1 + 0.1 * normal;
    biases: normal(0, 0.02).  One torch.Generator seeded with `seed`, drawn in
    parameter order."""
    g = torch.Generator().manual_seed(seed)
    P = {}
    for name, shape, kind in param_specs(family, cfg):
        n = torch.randn(shape, generator=g, dtype=torch.float32)
        if kind == "matrix":
            t = 0.02 * n
        elif kind == "norm":
            t = 1.0 + 0.1 * n
        elif kind == "bias":
            t = 0.02 * n
        else:
            raise ValueError(kind)
        P[name] = t.contiguous()
    return P
