#!/bin/sh
# ppr_generate.sh BUILD_DIR - text from a model: the generation programs of `ppc --generate`
# (forward only, one sequence) against the training program's own logits (PPR_GENERATE_PROGRAM=train:
# the same sampler over the `logits` its loss reads), greedily and with temperature and top-k, on one
# rank and on pp 2, tp 2, tp 2 x pp 2, dp 2, interleaved and zbv; every mesh the one-rank text;
# greedy decoding against PyTorch (tests/reference/models.py) over a window that slides past the
# sequence; greedy and the text alone on stdout by default; --sample-every while training; the
# errors. tiny.pdl trained a little, saved and loaded with --init. Last line: "N passed, M failed".
set -u
build=${1:?usage: ppr_generate.sh BUILD_DIR}
. tests/scripts/lib/common.sh
export PPC_CACHE="$tmp/cache"
py=${TORCH_PY:-/usr/bin/python3}

# same WHAT A B: files A and B are equal and not empty
same() {
  if [ -s "$2" ] && cmp -s "$2" "$3"; then ok "$1"; else
    bad "$1"
    diff "$2" "$3" | head -n 6
  fi
}

# the meshes: NAME, then ppc's options
cat >"$tmp/meshes" <<'EOF'
one
pp2 --pp 2
tp2 --tp 2
tp2pp2 --tp 2 --pp 2
dp2 --pp 2 --dp 2 --microbatches 4
interleaved --pp 2 --schedule interleaved --vpp 2
zbv --pp 2 --schedule zbv --vpp 2 --microbatches 4
EOF
while read -r name opts; do
  # shellcheck disable=SC2086
  "$ppc" examples/tiny.pdl $opts --generate -o "$tmp/$name" >"$tmp/ppc.txt" 2>&1 || {
    cat "$tmp/ppc.txt"
    bad "ppc examples/tiny.pdl $opts --generate"
  }
done <"$tmp/meshes"
[ -f "$tmp/one/rank0.gen.prog" ] && [ -f "$tmp/one/gen_s0.so" ] && ok "ppc --generate: rank0.gen.prog and gen_s0.*" ||
  bad "ppc --generate writes rank0.gen.prog and gen_s0.*"

# weights with something to say: 80 steps on the built-in text
if "$ppr" "$tmp/one" --steps 80 --lr 1e-2 --clip 1 --quiet --save "$tmp/w.safetensors" >"$tmp/train.txt" 2>&1; then
  ok "train tiny and --save"
else
  cat "$tmp/train.txt"
  bad "train tiny and --save"
fi

# run NAME ENGINE OUT ARGS...: --generate on mesh NAME through ENGINE (generate, train)
run() {
  name=$1 engine=$2 out=$3
  shift 3
  n=$(ls "$tmp/$name"/rank*.gen.prog | wc -l)
  launch=""
  [ "$n" -gt 1 ] && launch="$MPIRUN -np $n"
  # shellcheck disable=SC2086
  PPR_GENERATE_PROGRAM=$engine $launch "$ppr" "$tmp/$name" --init "$tmp/w.safetensors" --quiet "$@" >"$out" 2>&1 </dev/null ||
    { echo "exit $?" >>"$out"; }
}
greedy="--generate 24 --prompt-ids 84,104,101,32,99,108 --temperature 0"
sampled="--generate 24 --prompt The --temperature 0.9 --top-k 12 --sample-seed 7"
while read -r name opts; do
  # shellcheck disable=SC2086
  run "$name" generate "$tmp/$name.g.txt" $greedy
  # shellcheck disable=SC2086
  run "$name" train "$tmp/$name.t.txt" $greedy
  same "$name: greedy through the generation program = the argmax of the training program's logits" \
    "$tmp/$name.g.txt" "$tmp/$name.t.txt"
  # shellcheck disable=SC2086
  run "$name" generate "$tmp/$name.gs.txt" $sampled
  # shellcheck disable=SC2086
  run "$name" train "$tmp/$name.ts.txt" $sampled
  same "$name: temperature 0.9, top-k 12: the same draw from both programs" "$tmp/$name.gs.txt" "$tmp/$name.ts.txt"
  if [ "$name" != one ]; then
    same "$name: greedy = the one-rank text" "$tmp/one.g.txt" "$tmp/$name.g.txt"
    same "$name: sampled = the one-rank text" "$tmp/one.gs.txt" "$tmp/$name.gs.txt"
  fi
done <"$tmp/meshes"
# the defaults: greedy, and stdout the prompt and its continuation alone (what ran on stderr)
"$ppr" "$tmp/one" --init "$tmp/w.safetensors" --generate 24 --prompt-ids 84,104,101,32,99,108 >"$tmp/plain.txt" \
  2>"$tmp/plain.err" </dev/null
same "--generate without --temperature: greedy, the prompt and the tokens alone on stdout" "$tmp/one.g.txt" \
  "$tmp/plain.txt"
if grep -q '24 tokens after a prompt of 6, greedy' "$tmp/plain.err"; then ok "what ran on stderr: greedy"
else bad "what ran on stderr: $(head -c 300 "$tmp/plain.err")"; fi
# a draw depends on its seed: another seed, another text (24 tokens of 12 candidates each)
run one generate "$tmp/seed8.txt" --generate 24 --prompt The --temperature 0.9 --top-k 12 --sample-seed 8
if [ -s "$tmp/seed8.txt" ] && ! cmp -s "$tmp/seed8.txt" "$tmp/one.gs.txt"; then ok "--sample-seed 8 draws another text"
else bad "--sample-seed 8 draws another text"; fi

# --tokenizer: an llm.c tokenizer file whose token i is "[i]": the greedy text, token by token
"$py" - "$tmp/brackets.bin" <<'EOF'
import struct, sys
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *([20240328, 1, 256] + [0] * 253)))
    for i in range(256):
        b = ("[%d]" % i).encode()
        f.write(bytes([len(b)]) + b)
EOF
# shellcheck disable=SC2086
run one generate "$tmp/brackets.txt" $greedy --tokenizer "$tmp/brackets.bin"
"$py" -c 'import sys; print("".join("[%d]" % b for b in open(sys.argv[1], "rb").read().rstrip(b"\n")))' \
  "$tmp/one.g.txt" >"$tmp/brackets.want"
same "--tokenizer FILE: each token its bytes from an llm.c tokenizer file" "$tmp/brackets.want" "$tmp/brackets.txt"

# greedy decoding in PyTorch from the same weights: 6 prompt tokens + 24 past the 16 of a sequence
if "$py" -c 'import torch' >/dev/null 2>&1; then
  cat >"$tmp/greedy.py" <<'EOF'
import sys
sys.path.insert(0, "tests/reference")
import torch
import models
import safetensors_io
P = {k: torch.tensor(list(a), dtype=torch.float32).reshape(shape) for k, (shape, a) in safetensors_io.read(sys.argv[1])[0].items()}
cfg = dict(vocab=256, hidden=64, layers=4, heads=4, kv_heads=2, head_dim=16, ffn=128, eps=1e-6, theta=1e6)
tok = [84, 104, 101, 32, 99, 108]
with torch.no_grad():
    for _ in range(24):
        w = tok[-16:]
        logits = models.minimind_forward(P, cfg, torch.tensor([w]))
        tok.append(int(torch.argmax(logits[0, len(w) - 1])))
sys.stdout.write("".join(chr(t) for t in tok) + "\n")
EOF
  if "$py" "$tmp/greedy.py" "$tmp/w.safetensors" >"$tmp/torch.txt" 2>"$tmp/torch.err"; then
    same "greedy decoding = PyTorch's (a window sliding past seq 16)" "$tmp/torch.txt" "$tmp/one.g.txt"
  else
    cat "$tmp/torch.err"
    bad "the PyTorch greedy reference runs"
  fi
else
  echo "SKIP the PyTorch greedy reference: no PyTorch for $py"
fi

# --sample-every while training: after steps 2 and 4 and the last; both programs alike
for engine in generate train; do
  PPR_GENERATE_PROGRAM=$engine $MPIRUN -np 2 "$ppr" "$tmp/pp2" --init "$tmp/w.safetensors" --steps 5 --quiet \
    --sample-every 2 --sample-len 10 --temperature 0 --prompt The >"$tmp/every.$engine.txt" 2>&1
done
if [ "$(grep -c '^sample after step [245]: The' "$tmp/every.generate.txt")" = 3 ]; then
  ok "--sample-every 2 of 5 steps: samples after steps 2, 4 and 5"
else
  bad "--sample-every 2 of 5 steps: samples after steps 2, 4 and 5"
  head -n 5 "$tmp/every.generate.txt"
fi
same "--sample-every: the generation program = the training program" "$tmp/every.generate.txt" "$tmp/every.train.txt"

# the errors
"$ppc" examples/tiny.pdl -o "$tmp/nogen" >/dev/null 2>&1
expect_fail "no generation programs" "compile with ppc --generate" "$ppr" "$tmp/nogen" --generate 4 --prompt ab
expect_fail "--sample-every without them" "compile with ppc --generate" "$ppr" "$tmp/nogen" --steps 2 --sample-every 1
expect_fail "--generate with --steps" "drop --steps" "$ppr" "$tmp/one" --generate 4 --steps 3
expect_fail "--generate with --save" "--save is an option of training" "$ppr" "$tmp/one" --generate 4 --save "$tmp/x"
expect_fail "a sampling option alone" "go with --generate N or --sample-every N" "$ppr" "$tmp/one" --top-k 5
expect_fail "--top-k without --temperature" "--top-k draws samples: give --temperature T too" "$ppr" "$tmp/one" \
  --generate 4 --top-k 5
expect_fail "--sample-seed without --temperature" "--sample-seed draws samples: give --temperature T too" "$ppr" \
  "$tmp/one" --generate 4 --sample-seed 3
expect_fail "--prompt-ids past the vocabulary" "--prompt-ids: '256' is not a token id below the vocabulary's 256" \
  "$ppr" "$tmp/one" --generate 4 --prompt-ids 1,256
expect_fail "--prompt-ids not a number" "--prompt-ids: 'x' is not a token id" "$ppr" "$tmp/one" --generate 4 \
  --prompt-ids 3,x
expect_fail "--prompt and --prompt-ids" "exclude each other" "$ppr" "$tmp/one" --generate 4 --prompt a --prompt-ids 1
printf 'not a tokenizer' >"$tmp/tok.bin"
expect_fail "--tokenizer not llm.c's" "shorter than llm.c's 1024-byte header" "$ppr" "$tmp/one" --generate 4 \
  --tokenizer "$tmp/tok.bin"
expect_fail "PPR_GENERATE_PROGRAM unknown" "expected generate (the default) or train" env PPR_GENERATE_PROGRAM=x \
  "$ppr" "$tmp/one" --generate 4
expect_fail "a generation program is not trained" "ppr trains with DIR/rankR.prog" sh -c \
  "mkdir -p '$tmp/swap' && cp '$tmp/one'/* '$tmp/swap/' && cp '$tmp/one/rank0.gen.prog' '$tmp/swap/rank0.prog' && \
   '$ppr' '$tmp/swap' --steps 1"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
