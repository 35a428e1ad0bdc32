#!/usr/bin/python3
"""Generate the reference training-step fixtures for ppc/ppr.

    /usr/bin/python3 tests/reference/gen_fixtures.py --out tests/fixtures [--model minimind|gpt2|all]
    /usr/bin/python3 tests/reference/gen_fixtures.py --selfcheck

Writes DIR/<model>/{weights,grads,updated,updated5}.safetensors, tokens.bin and
expected.json for tiny_minimind and tiny_gpt2.  See README.md for the conventions.
Everything is float32 on CPU and deterministic (the --selfcheck finite differences
run in float64).
"""

import argparse
import json
import math
import os
import struct
import sys

import torch

sys.dont_write_bytecode = True  # keep tests/reference free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import safetensors_io  # noqa: E402

# The model configurations.  They MUST match examples/tiny.pdl (tiny_minimind) and
# tests/models/tiny_gpt2.pdl (tiny_gpt2): the C side compiles those files and checks
# its step against the fixtures generated from these numbers.
CONFIGS = {
    "tiny_minimind": {
        "family": "minimind",
        "config": {
            "vocab": 256, "hidden": 64, "layers": 4, "heads": 4, "kv_heads": 2,
            "head_dim": 16, "ffn": 128, "eps": 1e-6, "theta": 1e6,
        },
        "weight_seed": 1234,
        "token_seed": 5678,
    },
    "tiny_gpt2": {
        "family": "gpt2",
        "config": {
            "vocab": 256, "n_pos": 64, "hidden": 64, "layers": 2, "heads": 4, "eps": 1e-5,
        },
        "weight_seed": 4321,
        "token_seed": 8765,
    },
    # tiny_gpt2 over more rows a step (256: more than the compiler's 64-row parts of a column sum,
    # where a norm's input and weight gradients share one pass)
    "tiny_gpt2_long": {
        "family": "gpt2",
        "config": {
            "vocab": 256, "n_pos": 64, "hidden": 64, "layers": 2, "heads": 4, "eps": 1e-5,
        },
        "weight_seed": 4321,
        "token_seed": 8765,
        "step": {"micro_batch": 4, "seq": 64, "microbatches": 1},
        "n_tokens": 1400,
    },
}

# Step shape (a fixture's "step" replaces it): micro-batch size B, sequence length S, M micro-batches;
# tokens in a fixture's data ("n_tokens" replaces it).
STEP = {"micro_batch": 2, "seq": 16, "microbatches": 2}
N_TOKENS = 600
N_STEPS = 5

# Optimizer: global-norm clipping then AdamW (decay only on rank >= 2 parameters).
HP = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "wd": 0.1, "clip": 1.0}

MODEL_ARG = {"minimind": ["tiny_minimind"], "gpt2": ["tiny_gpt2"], "gpt2_long": ["tiny_gpt2_long"],
             "all": ["tiny_minimind", "tiny_gpt2", "tiny_gpt2_long"]}

TOKEN_MAGIC = 20240520
TOKEN_VERSION = 1


# ----------------------------------------------------------------------- data

def make_tokens(vocab, n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n,), generator=g, dtype=torch.int64)


def write_tokens(path, toks):
    header = [0] * 256
    header[0] = TOKEN_MAGIC
    header[1] = TOKEN_VERSION
    header[2] = len(toks)
    vals = toks.tolist()
    assert all(0 <= t < 65536 for t in vals)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(vals), *vals))


def get_batch(toks, step, micro, B, S, M):
    """Row b of micro-batch `micro` in step `step` reads S+1 consecutive tokens starting
    at ((step*M + micro)*B + b)*S, wrapping modulo the number of tokens."""
    n = toks.shape[0]
    rows = []
    for b in range(B):
        start = ((step * M + micro) * B + b) * S
        idx = (start + torch.arange(S + 1)) % n
        rows.append(toks[idx])
    chunk = torch.stack(rows)  # [B, S+1]
    return chunk[:, :S].contiguous(), chunk[:, 1:].contiguous()


# ----------------------------------------------------------------- train step

def step_loss_and_grads(family, cfg, P, names, toks, step, B, S, M):
    """Loss = sum over micro-batches of (mean CE of the micro-batch) / M; gradients
    accumulate over the micro-batches (one backward per micro-batch)."""
    for n in names:
        P[n].grad = None
    total = None
    for m in range(M):
        x, y = get_batch(toks, step, m, B, S, M)
        logits = models.forward(family, P, cfg, x)
        lm = models.cross_entropy(logits, y) / M
        lm.backward()
        total = lm.detach() if total is None else total + lm.detach()
    grads = {n: P[n].grad.detach().clone() for n in names}
    return total, grads


def global_norm(grads, names):
    """torch.nn.utils.clip_grad_norm_'s formula: norm of the per-tensor L2 norms."""
    return torch.norm(torch.stack([torch.norm(grads[n], 2) for n in names]), 2)


def clip_grads(grads, names, clip):
    norm = global_norm(grads, names)
    coef = clip / (norm + 1e-6)
    clipped = bool(coef < 1.0)
    if clipped:
        grads = {n: grads[n] * coef for n in names}
    return norm, clipped, grads


def adamw_step(P, grads, state, names, t, hp):
    """By-hand AdamW (step number t >= 1), in place on P.
    decay (rank >= 2 only): p *= 1 - lr*wd
    m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2
    p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)"""
    lr, b1, b2, eps, wd = hp["lr"], hp["beta1"], hp["beta2"], hp["eps"], hp["wd"]
    with torch.no_grad():
        for n in names:
            p, g = P[n], grads[n]
            if n not in state:
                state[n] = (torch.zeros_like(p), torch.zeros_like(p))
            m, v = state[n]
            m = b1 * m + (1.0 - b1) * g
            v = b2 * v + (1.0 - b2) * g * g
            state[n] = (m, v)
            if p.dim() >= 2:
                p.mul_(1.0 - lr * wd)
            mhat = m / (1.0 - b1 ** t)
            vhat = v / (1.0 - b2 ** t)
            p.sub_(lr * mhat / (torch.sqrt(vhat) + eps))


def train_reference(P, names, exp, steps, step_loss, out, meta):
    """steps clipped AdamW steps of P (the fixture's hyper-parameters in exp) whose step s's loss
    step_loss(s) computes and backpropagates (returning its value); writes into out the first
    step's gradients (grads.safetensors), the weights after (updated.safetensors) and
    reference.json: the losses, the gradient norms before clipping, and meta."""
    hp = {k: exp[k] for k in ("lr", "beta1", "beta2", "eps", "wd")}
    state, losses, norms = {}, [], []
    for step in range(steps):
        for n in names:
            P[n].grad = None
        total = step_loss(step)
        grads = {n: P[n].grad.detach().clone() for n in names}
        if step == 0:
            safetensors_io.write(os.path.join(out, "grads.safetensors"), to_st(grads, names))
        norm, _, grads = clip_grads(grads, names, exp["clip"])
        adamw_step(P, grads, state, names, step + 1, hp)
        losses.append(total)
        norms.append(float(norm))
    safetensors_io.write(os.path.join(out, "updated.safetensors"), to_st(P, names))
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(dict({"losses": losses, "grad_norms": norms, "steps": steps}, **meta), f, indent=1)


def make_torch_adamw(P, names, hp):
    """torch.optim.AdamW twin on copies of the parameters, for the cross-check."""
    twin = {n: torch.nn.Parameter(P[n].detach().clone()) for n in names}
    decay = [twin[n] for n in names if twin[n].dim() >= 2]
    nodecay = [twin[n] for n in names if twin[n].dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": hp["wd"]},
         {"params": nodecay, "weight_decay": 0.0}],
        lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"])
    return twin, opt


def max_rel(a, b):
    d = (a - b).norm().item()
    nb = b.norm().item()
    return d / nb if nb > 0 else d


# ---------------------------------------------------------------------- output

def to_st(P, names):
    return [(n, list(P[n].shape), P[n].detach().contiguous().view(-1).tolist()) for n in names]


def save(path, P, names, meta):
    safetensors_io.write(path, to_st(P, names), meta)


def generate(model, outdir, log=print):
    spec = CONFIGS[model]
    family, cfg = spec["family"], spec["config"]
    step = spec.get("step", STEP)
    B, S, M = step["micro_batch"], step["seq"], step["microbatches"]
    names = [n for n, _, _ in models.param_specs(family, cfg)]

    P0 = models.init_params(family, cfg, spec["weight_seed"])
    toks = make_tokens(cfg["vocab"], spec.get("n_tokens", N_TOKENS), spec["token_seed"])
    d = os.path.join(outdir, model)
    os.makedirs(d, exist_ok=True)
    meta = {"format": "pt", "model": model}
    save(os.path.join(d, "weights.safetensors"), P0, names, dict(meta, kind="weights"))
    write_tokens(os.path.join(d, "tokens.bin"), toks)

    P = {n: P0[n].clone().requires_grad_(True) for n in names}
    twin, opt = make_torch_adamw(P, names, HP)
    state = {}
    losses, norms, clipped_flags = [], [], []
    grads0 = None
    updated1 = None
    worst_opt = 0.0
    for s in range(N_STEPS):
        loss, grads = step_loss_and_grads(family, cfg, P, names, toks, s, B, S, M)
        if s == 0:
            grads0 = grads
        norm, clipped, cg = clip_grads(grads, names, HP["clip"])
        # cross-check the clipping against torch.nn.utils.clip_grad_norm_
        for n in names:
            twin[n].grad = grads[n].clone()
        tnorm = torch.nn.utils.clip_grad_norm_([twin[n] for n in names], HP["clip"])
        assert abs(tnorm.item() - norm.item()) <= 1e-6 * max(1.0, norm.item()), (tnorm, norm)
        for n in names:
            assert torch.allclose(twin[n].grad, cg[n], rtol=1e-6, atol=1e-12), n
        adamw_step(P, cg, state, names, s + 1, HP)
        opt.step()
        # the by-hand AdamW must equal torch.optim.AdamW
        for n in names:
            r = max_rel(P[n].detach(), twin[n].detach())
            worst_opt = max(worst_opt, r)
            assert torch.allclose(P[n].detach(), twin[n].detach(), rtol=1e-5, atol=1e-7), (n, r)
        losses.append(loss.item())
        norms.append(norm.item())
        clipped_flags.append(clipped)
        if s == 0:
            updated1 = {n: P[n].detach().clone() for n in names}

    save(os.path.join(d, "grads.safetensors"), grads0, names, dict(meta, kind="grads", step="0"))
    save(os.path.join(d, "updated.safetensors"), updated1, names, dict(meta, kind="updated", steps="1"))
    save(os.path.join(d, "updated5.safetensors"), P, names, dict(meta, kind="updated", steps=str(N_STEPS)))

    expected = {
        "model": model,
        "family": family,
        "config": cfg,
        "micro_batch": B,
        "seq": S,
        "microbatches": M,
        "n_tokens": spec.get("n_tokens", N_TOKENS),
        "loss": losses[0],
        "grad_norm": norms[0],
        "clipped": clipped_flags[0],
        "lr": HP["lr"], "beta1": HP["beta1"], "beta2": HP["beta2"],
        "eps": HP["eps"], "wd": HP["wd"], "clip": HP["clip"],
        "weight_seed": spec["weight_seed"], "token_seed": spec["token_seed"],
        "params": names,
        "losses5": losses,
        "grad_norms5": norms,
        "clipped5": clipped_flags,
    }
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")
    log("%-14s loss %.6f  grad_norm %.6f%s  losses5 %s  (by-hand AdamW vs torch: max rel %.2e)" % (
        model, losses[0], norms[0], " (clipped)" if clipped_flags[0] else "",
        " ".join("%.6f" % l for l in losses), worst_opt))
    return expected


# ------------------------------------------------------------------ self-check

def check_ops():
    """The explicit ops against torch's built-ins (float64)."""
    F = torch.nn.functional
    g = torch.Generator().manual_seed(0)
    dt = torch.float64
    x = torch.randn(3, 5, 8, generator=g, dtype=dt)
    w = torch.randn(8, generator=g, dtype=dt)
    b = torch.randn(8, generator=g, dtype=dt)
    errs = {
        "layernorm": (models.layernorm(x, w, b, 1e-5) - F.layer_norm(x, (8,), w, b, 1e-5)).abs().max(),
        "gelu_tanh": (models.gelu_tanh(x) - F.gelu(x, approximate="tanh")).abs().max(),
        "silu": (models.silu(x) - F.silu(x)).abs().max(),
        "relu": (models.relu(x) - F.relu(x)).abs().max(),
    }
    lg = torch.randn(7, 11, generator=g, dtype=dt)
    lb = torch.randint(0, 11, (7,), generator=g)
    errs["cross_entropy"] = (models.cross_entropy(lg, lb) - F.cross_entropy(lg, lb)).abs()
    # attention against a per-head loop with explicit GQA grouping
    Bq, Sq, hq, hk, dd = 2, 5, 4, 2, 6
    q = torch.randn(Bq, Sq, hq, dd, generator=g, dtype=dt)
    k = torch.randn(Bq, Sq, hk, dd, generator=g, dtype=dt)
    v = torch.randn(Bq, Sq, hk, dd, generator=g, dtype=dt)
    out = models.attention(q, k, v)
    ref = torch.zeros_like(out)
    for bi in range(Bq):
        for h in range(hq):
            kh = h // (hq // hk)
            for i in range(Sq):
                sc = torch.stack([(q[bi, i, h] * k[bi, j, kh]).sum() / math.sqrt(dd) for j in range(i + 1)])
                p = torch.softmax(sc, 0)
                ref[bi, i, h] = sum(p[j] * v[bi, j, kh] for j in range(i + 1))
    errs["attention"] = (out - ref).abs().max()
    # rope against the per-element formula
    cos, sin = models.rope_tables(Sq, dd, 1e6, dt)
    r = models.rope(q, cos, sin)
    half = dd // 2
    rr = torch.zeros_like(q)
    for s in range(Sq):
        for i in range(half):
            ang = s * 1e6 ** (-2.0 * i / dd)
            c, sn = math.cos(ang), math.sin(ang)
            rr[:, s, :, i] = q[:, s, :, i] * c - q[:, s, :, i + half] * sn
            rr[:, s, :, i + half] = q[:, s, :, i + half] * c + q[:, s, :, i] * sn
    errs["rope"] = (r - rr).abs().max()
    ok = True
    for k_, e in errs.items():
        good = e.item() < 1e-10
        ok &= good
        print("  op %-14s max abs err %.2e  %s" % (k_, e.item(), "OK" if good else "FAIL"))
    return ok


def selfcheck(model, n_random=2, h=1e-4, seed=99):
    """Finite differences in float64 of random gradient entries (plus the largest
    entry) of every parameter tensor, against autograd; also reports how far the
    float32 gradients are from the float64 ones."""
    spec = CONFIGS[model]
    family, cfg = spec["family"], spec["config"]
    step = spec.get("step", STEP)
    B, S, M = step["micro_batch"], step["seq"], step["microbatches"]
    names = [n for n, _, _ in models.param_specs(family, cfg)]
    P32 = models.init_params(family, cfg, spec["weight_seed"])
    toks = make_tokens(cfg["vocab"], spec.get("n_tokens", N_TOKENS), spec["token_seed"])

    P = {n: P32[n].double().requires_grad_(True) for n in names}
    loss64, g64 = step_loss_and_grads(family, cfg, P, names, toks, 0, B, S, M)
    Pf = {n: P32[n].clone().requires_grad_(True) for n in names}
    loss32, g32 = step_loss_and_grads(family, cfg, Pf, names, toks, 0, B, S, M)

    def f():
        with torch.no_grad():
            tot = 0.0
            for m in range(M):
                x, y = get_batch(toks, 0, m, B, S, M)
                tot += models.cross_entropy(models.forward(family, P, cfg, x), y).item() / M
            return tot

    gen = torch.Generator().manual_seed(seed)
    worst, worst_at = 0.0, "-"
    n_checked = 0
    ok = True
    for n in names:
        numel = P[n].numel()
        idxs = [int(torch.randint(0, numel, (1,), generator=gen)) for _ in range(n_random)]
        idxs.append(int(g64[n].abs().view(-1).argmax()))
        for i in idxs:
            flat = P[n].data.view(-1)
            old = flat[i].item()
            flat[i] = old + h
            fp = f()
            flat[i] = old - h
            fm = f()
            flat[i] = old
            fd = (fp - fm) / (2 * h)
            an = g64[n].view(-1)[i].item()
            err = abs(fd - an)
            rel = err / max(abs(an), abs(fd), 1e-12)
            good = err <= 1e-9 or rel <= 1e-5
            ok &= good
            if abs(an) > 1e-7 and rel > worst:
                worst, worst_at = rel, "%s[%d]" % (n, i)
            n_checked += 1
            if not good:
                print("  FD FAIL %s[%d]: autograd %.10e  fd %.10e  rel %.2e" % (n, i, an, fd, rel))
    r32 = max(max_rel(g32[n].double(), g64[n]) for n in names)
    print("  %-14s float64 loss %.8f (float32 %.8f); %d FD entries over %d tensors, worst rel err %.2e "
          "at %s (entries with |g|>1e-7); float32 vs float64 grads: worst per-tensor rel %.2e  %s" % (
              model, loss64.item(), loss32.item(), n_checked, len(names), worst, worst_at, r32,
              "OK" if ok else "FAIL"))
    return ok


def selfcheck_io(tmpdir):
    """Round-trip through the safetensors writer/reader."""
    import tempfile
    t = torch.randn(3, 4)
    with tempfile.TemporaryDirectory(dir=tmpdir) as d:
        p = os.path.join(d, "x.safetensors")
        safetensors_io.write(p, [("a", [3, 4], t.view(-1).tolist()), ("b", [1], [2.5])], {"k": "v"})
        got, meta = safetensors_io.read(p)
        with open(p, "rb") as fh:
            (hn,) = struct.unpack("<Q", fh.read(8))
    ok = (list(got["a"][1]) == t.view(-1).tolist() and list(got["b"][1]) == [2.5]
          and meta == {"k": "v"} and hn % 8 == 0)
    print("  safetensors round trip %s" % ("OK" if ok else "FAIL"))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output directory (e.g. tests/fixtures)")
    ap.add_argument("--model", choices=sorted(MODEL_ARG), default="all")
    ap.add_argument("--selfcheck", action="store_true",
                    help="check the ops and float64 finite differences of the gradients")
    a = ap.parse_args()
    if not a.out and not a.selfcheck:
        ap.error("give --out DIR and/or --selfcheck")
    torch.set_num_threads(1)  # summation order fixed -> bit-reproducible output
    ok = True
    if a.selfcheck:
        print("self-check:")
        ok &= check_ops()
        ok &= selfcheck_io(None)
        for m in MODEL_ARG[a.model]:
            ok &= selfcheck(m)
        print("self-check %s" % ("PASSED" if ok else "FAILED"))
    if a.out:
        for m in MODEL_ARG[a.model]:
            generate(m, a.out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
