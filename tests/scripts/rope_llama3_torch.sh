#!/bin/sh
# rope_llama3_torch.sh — rope's Llama-3 frequency scaling against PyTorch: the C kernels ppc
# generates for `rope(x, theta, llama3, factor, low_freq_factor, high_freq_factor,
# original_max_pos)` (--emit c, compiled as a shared library), called on random data, against
# transformers' _compute_llama3_parameters (its formula, line for line) and its rotate-half
# apply_rotary_pos_emb in torch (the table kernel, rope_table: each position's cos and sin, then the
# rotation reading it); the gradient kernel (.rope_dx) against the transpose of the
# rotation. The sizes put frequencies in all three bands (kept, divided by factor, interpolated).
# Skipped (0 passed) without PyTorch for TORCH_PY (default /usr/bin/python3).
#
#   sh tests/scripts/rope_llama3_torch.sh BUILD_DIR     last line: "N passed, M failed"
set -u
build=${1:?usage: rope_llama3_torch.sh BUILD_DIR}
ppc=$(cd "$build" && pwd)/ppc
py=${TORCH_PY:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$py" -c 'import torch' >/dev/null 2>&1; then
  echo "SKIP rope_llama3_torch: no PyTorch for $py"
  echo "0 passed, 0 failed"
  exit 0
fi
cat >"$tmp/m.pdl" <<'PDL'
model "rope_llama3"
dim vocab = 16
dim hidden = 96
train { micro_batch = 2, seq = 64 }
input tokens: i32[B, S]
input labels: i32[B, S]
param E: [vocab, hidden] as "E" init normal(std = 0.3)
x = embedding(tokens, E)
q = rope(split_heads(x, heads = 3), theta = 10000, llama3, factor = 8, low_freq_factor = 1, high_freq_factor = 4, original_max_pos = 64)
logits = transpose_sb(linear(merge_heads(q), E))
loss = cross_entropy(logits, labels)
PDL
if ! "$ppc" "$tmp/m.pdl" --emit c >"$tmp/k.c" 2>"$tmp/err" || ! ${CC:-cc} -shared -fPIC -O1 -o "$tmp/k.so" "$tmp/k.c" -lm 2>>"$tmp/err"; then
  cat "$tmp/err"
  echo "FAIL rope_llama3_torch: the kernels do not compile"
  echo "0 passed, 1 failed"
  exit 1
fi
"$py" - "$tmp/k.c" "$tmp/k.so" <<'PY'
import ctypes, math, re, sys
import torch

src, lib = open(sys.argv[1]).read(), ctypes.CDLL(sys.argv[2])
S, B, H, D = 64, 2, 3, 32
theta, factor, lff, hff, omax = 10000.0, 8.0, 1.0, 4.0, 64
npass = nfail = 0

def check(name, ok, detail=""):
    global npass, nfail
    npass, nfail = npass + ok, nfail + (not ok)
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + detail))

def kernel(kind, params):
    m = re.search(r"void (k\d+_%s)\(%s\)" % (kind, params), src)
    return getattr(lib, m.group(1)) if m else None

def ptr(t):
    return ctypes.c_void_p(t.data_ptr())

table = torch.empty(S, D // 2, 2, dtype=torch.float32)  # each position's and frequency's cos, sin

def run(fn, x):  # rope(y, table, x)
    y = torch.empty_like(x)
    fn(ptr(y), ptr(table), ptr(x))
    return y

# transformers' _compute_llama3_parameters (modeling_rope_utils.py), on its default inv_freq
inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
low_freq_wavelen = omax / lff
high_freq_wavelen = omax / hff
wavelen = 2 * math.pi / inv_freq
inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
smooth_factor = (omax / wavelen - lff) / (hff - lff)
smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
inv_freq_llama = torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)
bands = [int((wavelen < high_freq_wavelen).sum()), int(is_medium_freq.sum()), int((wavelen > low_freq_wavelen).sum())]
check("frequencies in all three bands (kept %d, interpolated %d, divided %d)" % tuple(bands), min(bands) > 0)

def reference(x, inv):  # x [S, B, H, D]; LlamaRotaryEmbedding + apply_rotary_pos_emb
    freqs = torch.arange(S).float()[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None, None, :], emb.sin()[:, None, None, :]
    rot = torch.cat((-x[..., D // 2:], x[..., :D // 2]), dim=-1)
    return x * cos + rot * sin

torch.manual_seed(0)
x = torch.randn(S, B, H, D, dtype=torch.float32)
three = r"float \*restrict p0, const float \*restrict p1, const float \*restrict p2"
tab, fwd, bwd = kernel("rope_table", r"float \*restrict p0"), kernel("rope", three), kernel("rope_dx", three)
check("ppc's C kernels rope_table, rope and rope_dx found", None not in (tab, fwd, bwd))
if None not in (tab, fwd, bwd):
    tab(ptr(table))
    ang = torch.arange(S).float()[:, None] * inv_freq_llama[None, :]
    err = max((table[..., 0] - ang.cos()).abs().max().item(), (table[..., 1] - ang.sin()).abs().max().item())
    check("the table holds cos and sin of s * the scaled frequency (max error %.2e)" % err, err < 1e-5)
    y, want = run(fwd, x), reference(x, inv_freq_llama)
    err = (y - want).abs().max().item()
    check("rope llama3 = transformers' formula (max error %.2e)" % err, err < 1e-4)
    plain = (reference(x, inv_freq) - want).abs().max().item()
    check("the scaling matters here (unscaled differs by %.2f)" % plain, plain > 0.1)
    g = torch.randn(S, B, H, D, dtype=torch.float32)
    lhs, rhs = (y * g).double().sum().item(), (x * run(bwd, g)).double().sum().item()
    check("rope_dx is the transpose of rope (<rope x, g> %.6f, <x, rope_dx g> %.6f)" % (lhs, rhs),
          abs(lhs - rhs) < 1e-3 * max(1.0, abs(lhs)))
print("%d passed, %d failed" % (npass, nfail))
sys.exit(nfail != 0)
PY
