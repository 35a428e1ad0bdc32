"""dropout.py - the PyTorch reference of dropout as ppc compiles it, fed ppr's masks.

ppr draws dropout's mask with Philox4x32-10 (the kernel preludes' ppk_rand): element i of the
value (its flat index in the [S, B, H] activation of one micro-batch, the same on every mesh) of
dropout call `id` (its number in the model's source) in layer l is kept when

    u = (philox(counter = (i + stream * 2^40, rngctr), key = seed)[0] >> 8) * 2^-24 >= float32(p)

with stream = (l + 1) * 128 + id (l = -1 outside the repeated layer) and rngctr = step * 2^32 +
the step's global micro-batch; a kept element is multiplied by float32(1 / (1 - p)). This file
draws the same masks (philox() below, in int64 torch arithmetic: products split in 16-bit halves)
and trains tests/models/tiny_dropout.pdl's model on the tiny_minimind fixture -- dropout after the
attention's output projection (id 0) and after the MLP's down projection (id 1) -- writing into
--out: reference.json (the losses of --steps clipped AdamW steps and their gradient norms),
grads.safetensors (the first step's gradients), updated.safetensors (the weights after).
--selfcheck compares philox() with the scalar Philox4x32-10 of Random123's known-answer test.

    /usr/bin/python3 tests/reference/dropout.py --fixture tests/fixtures/tiny_minimind \\
        --out tests/fixtures/tiny_minimind_dropout --microbatches 4 --steps 5 --seed 7
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_fixtures as gf  # noqa: E402
import models  # noqa: E402
import safetensors_io as sio  # noqa: E402

M32 = 0xFFFFFFFF
STREAMS = 128  # PP_DROPOUT_MAX


def mulhilo(m, c):
    """(hi, lo) 32-bit words of the constant m times the int64 tensor c (< 2^32), exactly."""
    ch, cl = c >> 16, c & 0xFFFF
    ph, pl = m * ch, m * cl  # each < 2^48
    low = pl + ((ph & 0xFFFF) << 16)  # < 2^49
    return ((ph >> 16) + (low >> 32)) & M32, low & M32


def philox(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 of int64 tensors holding 32-bit words; returns the four result words."""
    for _ in range(10):
        h0, l0 = mulhilo(0xD2511F53, c0)
        h1, l1 = mulhilo(0xCD9E8D57, c2)
        c0, c1, c2, c3 = h1 ^ c1 ^ k0, l1, h0 ^ c3 ^ k1, l0
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


def keep_mask(shape_sbh, seed, step, gmb, layer, op, p):
    """float32 [S, B, H] factors: float32(1/(1-p)) where kept, 0 where dropped"""
    n = 1
    for d in shape_sbh:
        n *= d
    idx = torch.arange(n, dtype=torch.int64) + (((layer + 1) * STREAMS + op) << 40)
    ctr = ((step & M32) << 32) | (gmb & M32)
    full = lambda v: torch.full((n,), v, dtype=torch.int64)  # noqa: E731
    w0, _, _, _ = philox(idx & M32, idx >> 32, full(ctr & M32), full(ctr >> 32), full(seed & M32),
                         full((seed >> 32) & M32))
    u = (w0 >> 8).to(torch.float32) * 2.0 ** -24
    scale = torch.tensor(1.0 / (1.0 - p), dtype=torch.float32)
    return torch.where(u >= torch.tensor(p, dtype=torch.float32), scale, torch.zeros(())).reshape(shape_sbh)


def forward(P, cfg, tokens, masks):
    """models.minimind_forward with the masks (batch-first [B, S, H] factors) on both residual
    branches of each layer: masks[l][0] after o_proj, masks[l][1] after down_proj."""
    H, L = cfg["hidden"], cfg["layers"]
    nh, nkv, hd = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    eps, theta = cfg["eps"], cfg["theta"]
    B, S = tokens.shape
    E = P["model.embed_tokens.weight"]
    x = E[tokens]
    cos, sin = models.rope_tables(S, hd, theta, x.dtype)
    for l in range(L):
        p = "model.layers.%d." % l
        h = models.rmsnorm(x, P[p + "input_layernorm.weight"], eps)
        q = models.linear(h, P[p + "self_attn.q_proj.weight"]).reshape(B, S, nh, hd)
        k = models.linear(h, P[p + "self_attn.k_proj.weight"]).reshape(B, S, nkv, hd)
        v = models.linear(h, P[p + "self_attn.v_proj.weight"]).reshape(B, S, nkv, hd)
        q = models.rope(models.rmsnorm(q, P[p + "self_attn.q_norm.weight"], eps), cos, sin)
        k = models.rope(models.rmsnorm(k, P[p + "self_attn.k_norm.weight"], eps), cos, sin)
        a = models.attention(q, k, v, causal=True).reshape(B, S, nh * hd)
        x = x + models.linear(a, P[p + "self_attn.o_proj.weight"]) * masks[l][0]
        h = models.rmsnorm(x, P[p + "post_attention_layernorm.weight"], eps)
        g = models.linear(h, P[p + "mlp.gate_proj.weight"])
        u = models.linear(h, P[p + "mlp.up_proj.weight"])
        x = x + models.linear(models.silu(g) * u, P[p + "mlp.down_proj.weight"]) * masks[l][1]
    x = models.rmsnorm(x, P["model.norm.weight"], eps)
    return torch.matmul(x, E.t())


def selfcheck():
    """Random123's known answers for philox4x32_10 (kat_vectors): counter, key -> result."""
    kat = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
           ((M32, M32, M32, M32), (M32, M32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
           ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for c, k, want in kat:
        t = [torch.tensor([v], dtype=torch.int64) for v in c + k]
        got = tuple(int(w[0]) for w in philox(*t))
        if got != want:
            print("FAIL philox%s%s = %s, expected %s" % (c, k, [hex(x) for x in got], [hex(x) for x in want]))
            return 1
    print("OK philox4x32_10: Random123's %d known answers" % len(kat))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixture")
    ap.add_argument("--out")
    ap.add_argument("--microbatches", type=int, default=0)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1, help="ppr --dropout-seed")
    ap.add_argument("--p", type=float, default=0.1)
    ap.add_argument("--selfcheck", action="store_true")
    a = ap.parse_args()
    if a.selfcheck:
        sys.exit(selfcheck())
    if not a.fixture or not a.out:
        ap.error("--fixture and --out (or --selfcheck)")
    torch.set_num_threads(1)
    exp = json.load(open(os.path.join(a.fixture, "expected.json")))
    cfg = exp["config"]
    B, S, H, L = exp["micro_batch"], exp["seq"], cfg["hidden"], cfg["layers"]
    M = a.microbatches or exp["microbatches"]
    raw, _ = sio.read(os.path.join(a.fixture, "weights.safetensors"))
    P = {k: torch.tensor(list(v), dtype=torch.float32).reshape(shape).requires_grad_(True)
         for k, (shape, v) in raw.items()}
    names = [n for n in exp["params"] if n in P]
    toks = gf.make_tokens(cfg["vocab"], exp["n_tokens"], exp["token_seed"])
    os.makedirs(a.out, exist_ok=True)
    def step_loss(step):
        total = 0.0
        for m in range(M):
            x, y = gf.get_batch(toks, step, m, B, S, M)
            masks = [[keep_mask((S, B, H), a.seed, step, m, l, op, a.p).transpose(0, 1) for op in (0, 1)]
                     for l in range(L)]
            logits = forward(P, cfg, x, masks)
            lm = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)) / M
            lm.backward()
            total += float(lm.detach())
        return total

    gf.train_reference(P, names, exp, a.steps, step_loss, a.out, {"microbatches": M, "seed": a.seed, "p": a.p})

if __name__ == "__main__":
    main()
