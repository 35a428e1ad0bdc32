"""masked.py - the PyTorch reference of a masked loss (cross_entropy with ignore_index).

From a fixture (tests/fixtures/<model>: weights, tokens, expected.json) writes into --out:

  masked.bin          the fixture's tokens as an llm.c token file with a loss mask (header[3] = 1,
                      then a byte per token: 1 when the token counts as a label). The mask is
                      random (--keep of the tokens), with --zero-row a whole row of step 0's first
                      micro-batch masked, so that a micro-batch holds rows that count nothing.
  reference.json      losses of --steps steps and their gradient norms (before clipping)
  grads.safetensors   the first step's gradients
  updated.safetensors the weights after the steps (clipped AdamW, the fixture's hyper-parameters)

The step's loss is the sum over its micro-batches of F.cross_entropy(logits, labels,
ignore_index=-100, reduction="sum") divided by the step's count of labels other than -100 (all
micro-batches): torch's mean over the counted tokens of the whole step. The micro-batches and the
batch rows are ppr's (gen_fixtures.get_batch); with --microbatches M the step has M of them.

The committed tests/fixtures/tiny_minimind_masked (tests/scripts/ppr_masked.sh reads it):

    /usr/bin/python3 tests/reference/masked.py --fixture tests/fixtures/tiny_minimind \\
        --out tests/fixtures/tiny_minimind_masked --microbatches 4 --steps 5 --zero-row
"""
import argparse
import json
import os
import random
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_fixtures as gf  # noqa: E402
import models  # noqa: E402
import safetensors_io as sio  # noqa: E402

IGNORE = -100


def read_tokens(path):
    with open(path, "rb") as f:
        data = f.read()
    head = struct.unpack("<256i", data[:1024])
    assert head[0] == gf.TOKEN_MAGIC and head[1] == 1, path
    n = head[2]
    return torch.tensor(struct.unpack("<%dH" % n, data[1024:1024 + 2 * n]), dtype=torch.int64)


def write_masked(path, toks, mask):
    header = [0] * 256
    header[0], header[1], header[2], header[3] = gf.TOKEN_MAGIC, 1, len(toks), 1
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(toks), *toks.tolist()))
        f.write(bytes(int(m) for m in mask.tolist()))


def masked_batch(toks, mask, step, micro, B, S, M):
    """gen_fixtures.get_batch, the labels of masked tokens IGNORE"""
    n = toks.shape[0]
    x, y = gf.get_batch(toks, step, micro, B, S, M)
    for b in range(B):
        start = ((step * M + micro) * B + b) * S
        idx = (start + 1 + torch.arange(S)) % n
        y[b][mask[idx] == 0] = IGNORE
    return x, y


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--microbatches", type=int, default=0, help="M (default: the fixture's)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--keep", type=float, default=0.6, help="the fraction of tokens that count")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--zero-row", action="store_true", help="mask every label of step 0's first row")
    a = ap.parse_args()
    torch.set_num_threads(1)
    exp = json.load(open(os.path.join(a.fixture, "expected.json")))
    cfg, family = exp["config"], exp["family"]
    B, S = exp["micro_batch"], exp["seq"]
    M = a.microbatches or exp["microbatches"]
    names = exp["params"]
    raw, _ = sio.read(os.path.join(a.fixture, "weights.safetensors"))
    P = {k: torch.tensor(list(v), dtype=torch.float32).reshape(shape).requires_grad_(True) for k, (shape, v) in raw.items()}
    names = [n for n in names if n in P]
    toks = read_tokens(os.path.join(a.fixture, "tokens.bin"))
    rng = random.Random(a.seed)
    mask = torch.tensor([1 if rng.random() < a.keep else 0 for _ in range(toks.shape[0])], dtype=torch.uint8)
    if a.zero_row:
        mask[1:S + 1] = 0  # step 0, micro-batch 0, row 0: its labels are tokens 1 .. S
    os.makedirs(a.out, exist_ok=True)
    write_masked(os.path.join(a.out, "masked.bin"), toks, mask)

    def step_loss(step):
        batches = [masked_batch(toks, mask, step, m, B, S, M) for m in range(M)]
        count = sum(int((y != IGNORE).sum()) for _, y in batches)
        total = 0.0
        for x, y in batches:
            logits = models.forward(family, P, cfg, x)
            lm = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=IGNORE,
                                 reduction="sum") / max(count, 1)
            lm.backward()
            total += float(lm.detach())
        return total

    gf.train_reference(P, names, exp, a.steps, step_loss, a.out, {"microbatches": M, "counted": int(mask.sum())})

if __name__ == "__main__":
    main()
