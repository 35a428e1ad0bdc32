#!/bin/sh
# ppr_checkpoints.sh BUILD_DIR - checkpoints as Hugging Face keeps them, end to end with a tiny
# GPT-2 from `ppc --from-hf tests/hf/gpt2` (its .pdl declares checkpoint { optional_prefix }):
# the listing's checkpoint_prefix and hf_config lines; --save FOLDER (model.safetensors and
# config.json; shards and their index with --save-shard-size; --save-tied-head); --init of a
# folder, an index, a file whose names lack "transformer." and which holds buffers to skip, F64
# and F16 tensors; tp 2 x pp 2 writes the one-rank folder; the errors. Python 3 (standard library
# only) rewrites safetensors files; without it those cases are skipped. Last line: "N passed, M failed".
set -u
build=${1:?usage: ppr_checkpoints.sh BUILD_DIR}
. tests/scripts/lib/common.sh
export PPC_CACHE="$tmp/cache"

"$build/ppc" --from-hf tests/hf/gpt2 -o "$tmp/g.pdl" >"$tmp/ppc.txt" 2>&1 &&
  "$build/ppc" "$tmp/g.pdl" --seq 16 -o "$tmp/one" >>"$tmp/ppc.txt" 2>&1 &&
  "$build/ppc" "$tmp/g.pdl" --seq 16 --tp 2 --pp 2 --microbatches 2 -o "$tmp/mesh" >>"$tmp/ppc.txt" 2>&1 || {
  cat "$tmp/ppc.txt"
  bad "ppc --from-hf tests/hf/gpt2"
  echo "$pass passed, $fail failed"
  exit 1
}
if grep -q '^checkpoint_prefix transformer\.$' "$tmp/one/rank0.prog" &&
  grep -q '^hf_config {"activation_function":"gelu_new","architectures":\["GPT2LMHeadModel"\]' "$tmp/one/rank0.prog" &&
  grep -q '^checkpoint_prefix transformer\.$' "$tmp/mesh/rank3.prog"; then
  ok "the listings carry checkpoint_prefix and hf_config"
else bad "the listings carry checkpoint_prefix and hf_config"; fi

# --save FOLDER: model.safetensors and config.json; sharded; one file
expect "--save FOLDER" "$ppr" "$tmp/one" --steps 0 --quiet --save "$tmp/ck"
# files: what a folder holds, trainer/'s too
files() { (cd "$1" && find . -type f | sort | tr '\n' ' '); }
state="./trainer/optimizer.safetensors ./trainer/trainer_state.json "
if [ "$(files "$tmp/ck")" = "./config.json ./model.safetensors $state" ] && grep -q '"torch_dtype": "float32"' "$tmp/ck/config.json" &&
  grep -q '"architectures": \[' "$tmp/ck/config.json"; then ok "--save FOLDER writes model.safetensors and config.json (and the training state)"
else bad "--save FOLDER writes model.safetensors and config.json ($(files "$tmp/ck"))"; fi
expect "--save FOLDER --save-shard-size 100kB" "$ppr" "$tmp/one" --steps 0 --quiet --save "$tmp/ck2" --save-shard-size 100kB
if [ -f "$tmp/ck2/model.safetensors.index.json" ] && [ -f "$tmp/ck2/model-00007-of-00007.safetensors" ] &&
  grep -q '"total_size": 564224' "$tmp/ck2/model.safetensors.index.json"; then ok "--save-shard-size: 7 shards and their index"
else bad "--save-shard-size: 7 shards and their index ($(ls "$tmp/ck2" | tr '\n' ' '))"; fi
expect "--save W.safetensors" "$ppr" "$tmp/one" --steps 0 --quiet --save "$tmp/w.safetensors"
# --init a folder, an index, the sharded folder: the same weights back
expect "--init FOLDER" "$ppr" "$tmp/one" --init "$tmp/ck" --steps 0 --quiet --save "$tmp/w1.safetensors"
expect "--init INDEX" "$ppr" "$tmp/one" --init "$tmp/ck2/model.safetensors.index.json" --steps 0 --quiet --save "$tmp/w2.safetensors"
expect "--init SHARDED-FOLDER" "$ppr" "$tmp/one" --init "$tmp/ck2" --steps 0 --quiet --save "$tmp/w3.safetensors"
if cmp -s "$tmp/w.safetensors" "$tmp/w1.safetensors" && cmp -s "$tmp/w.safetensors" "$tmp/w2.safetensors" &&
  cmp -s "$tmp/w.safetensors" "$tmp/w3.safetensors" && cmp -s "$tmp/w.safetensors" "$tmp/ck/model.safetensors"; then
  ok "a folder, an index and a sharded folder give the weights back, byte for byte"
else bad "a folder, an index and a sharded folder give the weights back, byte for byte"; fi
# tp 2 x pp 2 writes the one-rank folder
expect "tp 2 x pp 2: --init SHARDED-FOLDER --save FOLDER" $MPIRUN -np 4 "$ppr" "$tmp/mesh" --init "$tmp/ck2" --steps 0 --quiet \
  --save "$tmp/mck" --save-shard-size 100kB
# (trainer_state.json names the batch: the mesh's --microbatches 2)
if diff -r -x trainer_state.json "$tmp/ck2" "$tmp/mck" >/dev/null; then ok "tp 2 x pp 2 writes the one-rank sharded folder, byte for byte"
else bad "tp 2 x pp 2 writes the one-rank sharded folder, byte for byte"; fi
# the folder is replaced whole (its shards go); a folder with other files is refused
expect "--save over an earlier checkpoint folder" "$ppr" "$tmp/one" --steps 0 --quiet --save "$tmp/mck"
if [ "$(files "$tmp/mck")" = "./config.json ./model.safetensors $state" ]; then ok "an earlier checkpoint folder is replaced whole"
else bad "an earlier checkpoint folder is replaced whole ($(files "$tmp/mck"))"; fi
echo x >"$tmp/mck/trainer/notes.txt"
expect_fail "--save into a folder whose trainer/ holds other files" "holds notes.txt, which is not a checkpoint's training state" \
  "$ppr" "$tmp/one" --steps 1 --quiet --save "$tmp/mck"
rm "$tmp/mck/trainer/notes.txt"
echo x >"$tmp/mck/notes.txt"
expect_fail "--save into a folder with other files" "holds notes.txt, which is not a checkpoint's file" \
  "$ppr" "$tmp/one" --steps 1 --quiet --save "$tmp/mck"
echo x >"$tmp/plain"
expect_fail "--save FOLDER over a file" "exists and is not a folder" "$ppr" "$tmp/one" --steps 1 --quiet --save "$tmp/plain"
expect_fail "--save FOLDER in a missing directory" "--save $tmp/nowhere/ck" "$ppr" "$tmp/one" --steps 1 --quiet --save "$tmp/nowhere/ck"
expect_fail "--save-shard-size with one file" "--save-shard-size: --save" "$ppr" "$tmp/one" --save "$tmp/x.safetensors" --save-shard-size 1MB
expect_fail "--save-shard-size without --save" "--save-shard-size is an option of --save" "$ppr" "$tmp/one" --save-shard-size 1MB
expect_fail "--save-shard-size 5XB" "--save-shard-size: expected a size" "$ppr" "$tmp/one" --save "$tmp/y" --save-shard-size 5XB
expect_fail "--init a folder without a checkpoint" "a folder without model.safetensors or model.safetensors.index.json" \
  "$ppr" "$tmp/one" --init "$tmp" --steps 0

if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP python3 not found: the rewritten checkpoints (stripped names, buffers, F64, F16, lm_head.weight)"
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
  exit
fi
# rewrite IN OUT OPS: a safetensors file's tensors renamed, added, converted (OPS: python below)
rewrite() {
  python3 - "$@" <<'EOF'
import json, struct, sys
src, dst, ops = sys.argv[1], sys.argv[2], sys.argv[3]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
hdr = json.loads(b[8:8 + n])
hdr.pop("__metadata__", None)
data = b[8 + n:]
out = {}
for k, v in hdr.items():
    raw = data[v["data_offsets"][0]:v["data_offsets"][1]]
    out[k] = [v["dtype"], v["shape"], raw]
if "strip" in ops:  # the hub's GPT-2 names
    out = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in out.items()}
if "buffers" in ops:  # buffers a transformers state dict may hold
    out["h.0.attn.bias"] = ["F32", [1, 1, 2, 2], struct.pack("<4f", 1, 0, 1, 1)]
    out["h.0.attn.masked_bias"] = ["F32", [], struct.pack("<f", -1e4)]
    out["model.rotary_emb.inv_freq"] = ["F32", [2], struct.pack("<2f", 1, 0.01)]
if "extra" in ops:
    out["h.0.attn.foo"] = ["F32", [1], struct.pack("<f", 1)]
if "drop" in ops:
    out.pop("ln_f.bias", None)
for k, (dt, shape, raw) in out.items():
    if dt == "F32" and ("f64" in ops or "f16" in ops):
        vals = struct.unpack("<%df" % (len(raw) // 4), raw)
        out[k] = ["F64", shape, struct.pack("<%dd" % len(vals), *vals)] if "f64" in ops else \
                 ["F16", shape, struct.pack("<%de" % len(vals), *vals)]
h, blob = {}, b""
for k, (dt, shape, raw) in out.items():
    h[k] = {"dtype": dt, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
    blob += raw
hj = json.dumps(h).encode()
hj += b" " * (-len(hj) % 8)
open(dst, "wb").write(struct.pack("<Q", len(hj)) + hj + blob)
EOF
}
w=$tmp/w.safetensors
rewrite "$w" "$tmp/hub.safetensors" strip,buffers
expect "--init names without 'transformer.', with buffers" "$ppr" "$tmp/one" --init "$tmp/hub.safetensors" --steps 0 --save "$tmp/w4.safetensors"
if grep -qF "ppr: --init: skipped 3 non-parameter buffers (rotary inv_freq, attention masks)" "$tmp/out.txt" &&
  grep -qF "names the params without the prefix 'transformer.'" "$tmp/out.txt" && cmp -s "$w" "$tmp/w4.safetensors"; then
  ok "the hub's names load the same weights; 3 buffers skipped, said in one line"
else
  bad "the hub's names load the same weights; 3 buffers skipped, said in one line"
  cat "$tmp/out.txt"
fi
rewrite "$w" "$tmp/extra.safetensors" strip,extra
expect_fail "--init: an unknown tensor" "1 tensor the program has no param for: h.0.attn.foo" "$ppr" "$tmp/one" --init "$tmp/extra.safetensors" --steps 0
rewrite "$w" "$tmp/drop.safetensors" strip,drop
expect_fail "--init: a missing tensor" "1 tensor missing: transformer.ln_f.bias (looked up without the prefix 'transformer.'" \
  "$ppr" "$tmp/one" --init "$tmp/drop.safetensors" --steps 0
rewrite "$w" "$tmp/f64.safetensors" f64
expect "--init F64" "$ppr" "$tmp/one" --init "$tmp/f64.safetensors" --steps 0 --quiet --save "$tmp/w5.safetensors"
if cmp -s "$w" "$tmp/w5.safetensors"; then ok "F64 tensors load exactly (float -> double -> float)"; else bad "F64 tensors load exactly"; fi
rewrite "$w" "$tmp/f16.safetensors" f16
expect "--init F16" "$ppr" "$tmp/one" --init "$tmp/f16.safetensors" --steps 0 --quiet
# --save-tied-head: lm_head.weight too, and --init takes the file back
expect "--save-tied-head" "$ppr" "$tmp/one" --steps 0 --quiet --save "$tmp/tied" --save-tied-head
if python3 -c 'import json, struct, sys
b = open(sys.argv[1], "rb").read(); h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
sys.exit(h["lm_head.weight"]["shape"] != h["transformer.wte.weight"]["shape"])' "$tmp/tied/model.safetensors"; then
  ok "--save-tied-head writes lm_head.weight beside transformer.wte.weight"
else bad "--save-tied-head writes lm_head.weight beside transformer.wte.weight"; fi
expect "--init of a tied head written under both names" "$ppr" "$tmp/one" --init "$tmp/tied" --steps 0 --quiet
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
