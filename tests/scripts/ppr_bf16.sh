#!/bin/sh
# ppr_bf16.sh BUILD_DIR - --precision bf16 against fp32: on the PyTorch fixtures (tiny MiniMind,
# tiny GPT-2: their weights and tokens) and on minimind256 (seeded weights, the built-in text) the
# first step's loss of the bf16 program is within 1e-2 of the fp32 program's and of PyTorch's fp32
# loss, and is not the fp32 loss itself (the listing holds bf16 buffers and GEMMs); the opencl
# device gives the cpu's bf16 loss, and so (to 1e-3) does the cpu with oneDNN (and an fp32 program's
# three losses to 1e-5 with oneDNN's f32 GEMMs); the checkpoint a bf16 run saves is F32 (the master weights);
# --init from a BF16 checkpoint trains as from the F32 one it was rounded from. Python 3
# (standard library) reads the logs and writes the BF16 file. Last line: "N passed, M failed".
set -u
build=${1:?usage: ppr_bf16.sh BUILD_DIR}
. tests/scripts/lib/common.sh
export PPC_CACHE="$tmp/cache"
needs_python3 ppr_bf16

# loss LOG: the first step's loss of a --log file
loss() { python3 tools/ppr_log.py "$1" loss | head -n 1; }
# near A B LIMIT: |A - B| <= LIMIT |B|
near() { python3 -c 'import sys; a,b,l=map(float,sys.argv[1:]); sys.exit(0 if abs(a-b)<=l*abs(b) else 1)' "$@"; }

for fx in "tiny_minimind examples/tiny.pdl" "tiny_gpt2 tests/models/tiny_gpt2.pdl"; do
  set -- $fx
  name=$1 model=$2 d=tests/fixtures/$1
  torch=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["loss"])' "$d/expected.json")
  for p in fp32 bf16; do
    "$ppc" "$model" --precision $p -o "$tmp/$name.$p" >"$tmp/ppc.txt" 2>&1 || cat "$tmp/ppc.txt"
    $ppr "$tmp/$name.$p" --init "$d/weights.safetensors" --data "$d/tokens.bin" --steps 1 --quiet \
      --log "$tmp/$name.$p.jsonl" >"$tmp/out.txt" 2>&1 || cat "$tmp/out.txt"
  done
  f=$(loss "$tmp/$name.fp32.jsonl") b=$(loss "$tmp/$name.bf16.jsonl")
  if near "$b" "$f" 1e-2 && near "$b" "$torch" 1e-2 && [ "$b" != "$f" ]; then
    ok "$name: step-1 loss bf16 $b, fp32 $f, PyTorch fp32 $torch: within 1e-2, and not fp32's bits"
  else bad "$name: step-1 loss bf16 $b, fp32 $f, PyTorch fp32 $torch (limit 1e-2; bf16 must differ from fp32)"; fi
  if grep -q '^buffer .* bf16 ' "$tmp/$name.bf16/rank0.prog" && grep -q '^  gemm .* bf16 bf16 bf16 ' "$tmp/$name.bf16/rank0.prog" &&
    ! grep -q ' bf16' "$tmp/$name.fp32/rank0.prog"; then
    ok "$name: the bf16 listing has bf16 buffers and GEMMs, the fp32 listing none"
  else bad "$name: bf16 buffers and GEMMs in the bf16 listing alone"; fi
done

# minimind256: seeded weights, the built-in text
for p in fp32 bf16; do
  "$ppc" bench/minimind256.pdl --precision $p -o "$tmp/m256.$p" >"$tmp/ppc.txt" 2>&1 || cat "$tmp/ppc.txt"
  $ppr "$tmp/m256.$p" --seed 3 --steps 1 --quiet --log "$tmp/m256.$p.jsonl" >"$tmp/out.txt" 2>&1 || cat "$tmp/out.txt"
done
f=$(loss "$tmp/m256.fp32.jsonl") b=$(loss "$tmp/m256.bf16.jsonl")
if near "$b" "$f" 1e-2 && [ "$b" != "$f" ]; then ok "minimind256: step-1 loss bf16 $b, fp32 $f: within 1e-2"; else
  bad "minimind256: step-1 loss bf16 $b, fp32 $f (limit 1e-2)"
fi

# the opencl device: the cpu's bf16 loss (the same kernels' bits; CLBlast's sums in f32)
d=tests/fixtures/tiny_minimind
$ppr "$tmp/tiny_minimind.bf16" --device opencl --init "$d/weights.safetensors" --data "$d/tokens.bin" --steps 1 \
  --quiet --log "$tmp/cl.jsonl" >"$tmp/out.txt" 2>&1 || cat "$tmp/out.txt"
c=$(loss "$tmp/cl.jsonl") b=$(loss "$tmp/tiny_minimind.bf16.jsonl")
if near "$c" "$b" 1e-6; then ok "tiny bf16 on opencl: loss $c, on cpu $b"; else bad "tiny bf16 on opencl: loss $c, on cpu $b"; fi

# --onednn: the cpu's bf16 GEMMs through oneDNN (summed in another order: the loss within 1e-3)
if $ppr --help 2>&1 | grep -q -- --onednn && $ppr "$tmp/tiny_minimind.bf16" --onednn --init "$d/weights.safetensors" \
  --data "$d/tokens.bin" --steps 1 --quiet --log "$tmp/dnnl.jsonl" >"$tmp/out.txt" 2>&1; then
  o=$(loss "$tmp/dnnl.jsonl")
  if near "$o" "$b" 1e-3; then ok "tiny bf16 --onednn: loss $o, without $b"; else bad "tiny bf16 --onednn: loss $o, without $b"; fi
elif grep -q "built without oneDNN" "$tmp/out.txt"; then
  echo "SKIP --onednn: ppr was built without oneDNN"
else
  cat "$tmp/out.txt"
  bad "tiny bf16 --onednn ran"
fi

# --onednn on an fp32 program: its f32 GEMMs through oneDNN (at least one not its reference
# loops), three steps' losses within 1e-5 of OpenBLAS's
if $ppr --help 2>&1 | grep -q -- --onednn && PPR_DNNL_TRACE=1 $ppr "$tmp/tiny_minimind.fp32" --onednn --init \
  "$d/weights.safetensors" --data "$d/tokens.bin" --steps 3 --quiet --log "$tmp/dnnl32.jsonl" >"$tmp/out.txt" 2>&1 &&
  $ppr "$tmp/tiny_minimind.fp32" --init "$d/weights.safetensors" --data "$d/tokens.bin" --steps 3 --quiet \
    --log "$tmp/blas32.jsonl" >"$tmp/out2.txt" 2>&1; then
  if grep -v ': ref' "$tmp/out.txt" | grep -q '^onednn: gemm' && python3 -c '
import sys
sys.path.insert(0, "tools"); import ppr_log
a = [o["loss"] for o in ppr_log.records(sys.argv[1])]; b = [o["loss"] for o in ppr_log.records(sys.argv[2])]
sys.exit(0 if len(a) == 3 and len(b) == 3 and all(abs(x - y) <= 1e-5 * y for x, y in zip(a, b)) else 1)' \
    "$tmp/dnnl32.jsonl" "$tmp/blas32.jsonl"; then
    ok "tiny fp32 --onednn: oneDNN's f32 GEMMs, three losses within 1e-5 of OpenBLAS's"
  else bad "tiny fp32 --onednn: oneDNN f32 kernels and losses within 1e-5 of OpenBLAS's"; fi
elif grep -q "built without oneDNN" "$tmp/out.txt"; then
  echo "SKIP --onednn fp32: ppr was built without oneDNN"
else
  cat "$tmp/out.txt"
  bad "tiny fp32 --onednn ran"
fi

# checkpoints stay fp32; a BF16 checkpoint initialises as the F32 one it rounds
$ppr "$tmp/tiny_minimind.bf16" --init "$d/weights.safetensors" --data "$d/tokens.bin" --steps 2 --quiet \
  --save "$tmp/saved.safetensors" >"$tmp/out.txt" 2>&1 || cat "$tmp/out.txt"
if python3 - "$tmp/saved.safetensors" <<'PY'; then
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n, = struct.unpack("<Q", raw[:8])
h = json.loads(raw[8:8 + n])
h.pop("__metadata__", None)
sys.exit(0 if h and all(v["dtype"] == "F32" for v in h.values()) else 1)
PY
  ok "a bf16 run saves F32 weights (the master copies)"
else bad "a bf16 run saves F32 weights (the master copies)"; fi
python3 - "$d/weights.safetensors" "$tmp/w16.safetensors" "$tmp/w32.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n, = struct.unpack("<Q", raw[:8])
h = json.loads(raw[8:8 + n])
meta = h.pop("__metadata__", None)
data = raw[8 + n:]
def bf16(u):  # round to nearest even on the dropped 16 bits
    return (u + 0x7FFF + ((u >> 16) & 1)) >> 16
h16, h32, b16, b32 = {}, {}, bytearray(), bytearray()
for name, v in h.items():
    b, e = v["data_offsets"]
    f = struct.unpack(f"<{(e - b) // 4}I", data[b:e])
    r = [bf16(u) for u in f]
    h16[name] = {"dtype": "BF16", "shape": v["shape"], "data_offsets": [len(b16), len(b16) + 2 * len(r)]}
    b16 += struct.pack(f"<{len(r)}H", *r)
    h32[name] = {"dtype": "F32", "shape": v["shape"], "data_offsets": [len(b32), len(b32) + 4 * len(r)]}
    b32 += struct.pack(f"<{len(r)}I", *[x << 16 for x in r])
for path, hd, body in ((sys.argv[2], h16, b16), (sys.argv[3], h32, b32)):
    j = json.dumps(hd).encode()
    j += b" " * (-len(j) % 8)
    open(path, "wb").write(struct.pack("<Q", len(j)) + j + body)
PY
for w in w16 w32; do
  $ppr "$tmp/tiny_minimind.bf16" --init "$tmp/$w.safetensors" --data "$d/tokens.bin" --steps 2 --quiet \
    --log "$tmp/$w.jsonl" >"$tmp/out.txt" 2>&1 || cat "$tmp/out.txt"
done
steps() { python3 tools/ppr_log.py "$1" loss grad_norm; }
if [ -s "$tmp/w16.jsonl" ] && [ "$(steps "$tmp/w16.jsonl")" = "$(steps "$tmp/w32.jsonl")" ]; then
  ok "--init from a BF16 checkpoint: the same two steps as from its values in F32"
else bad "--init from a BF16 checkpoint: the same two steps as from its values in F32"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
