#!/bin/sh
# ppr_resume.sh BUILD_DIR - --save writes the training state (optimizer.safetensors and trainer_state.json
# in the folder's trainer/) and --resume continues from it: 6 steps straight and 3 + 3 resumed give the same
# losses and byte-identical weights and moments, on one rank and on tp 2 x pp 2; a checkpoint saved at
# pp 2 resumed on one rank agrees within 1e-5; a one-file --save; the errors (before any step, nothing
# written; a model from a Hugging Face config refuses text); a folder of an older ppr (the state beside
# the weights); hub folders (--init's tokenizer files and generation config copied, the state in
# trainer/, --model-name). A tiny GPT-2 from `ppc --from-hf tests/hf/gpt2`. Last line: "N passed, M failed".
set -u
build=${1:?usage: ppr_resume.sh BUILD_DIR}
. tests/scripts/lib/common.sh
export PPC_CACHE="$tmp/cache"
# expect_fail (common.sh) also wants no step run and no $tmp/never written
fail_also() { [ ! -e "$tmp/never" ] && ! grep -q '^step ' "$tmp/out.txt"; }
fail_also_says=", no step, nothing saved"
losses() { grep -o '"loss":[^,]*' "$@"; }
# same_state A B SAVE: two trainer_state.json equal but for their options' --save (B's is SAVE) and --log
same_state() {
  python3 - "$@" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
drop = lambda args: [x for x in args if not x.startswith(("--save=", "--log="))]
sys.exit(not (drop(a.pop("args")) == drop(b["args"]) and "--save=" + sys.argv[3] in b.pop("args") and a == b))
PY
}

"$build/ppc" --from-hf tests/hf/gpt2 -o "$tmp/g.pdl" >"$tmp/ppc.txt" 2>&1 &&
  "$build/ppc" "$tmp/g.pdl" --seq 16 --microbatches 2 -o "$tmp/one" >>"$tmp/ppc.txt" 2>&1 &&
  "$build/ppc" "$tmp/g.pdl" --seq 16 --pp 2 --microbatches 2 -o "$tmp/pp2" >>"$tmp/ppc.txt" 2>&1 &&
  "$build/ppc" "$tmp/g.pdl" --seq 16 --tp 2 --pp 2 --microbatches 2 -o "$tmp/mesh" >>"$tmp/ppc.txt" 2>&1 || {
  cat "$tmp/ppc.txt"
  bad "ppc --from-hf tests/hf/gpt2"
  echo "$pass passed, $fail failed"
  exit 1
}
# tokens FILE N: an llm.c token file (uint16) of README's first N bytes as ids (a model from a
# Hugging Face config trains on token files, not on the built-in text)
tokens() {
  python3 -c '
import struct, sys
b = open("README.md", "rb").read()[:int(sys.argv[2])]
open(sys.argv[1], "wb").write(struct.pack("<256i", *([20240520, 1, len(b)] + [0] * 253)) + struct.pack("<%dH" % len(b), *b))' "$@"
}
tokens "$tmp/text.bin" 20000
# a schedule whose lr changes every step, clipping on: the resumed steps must use the saved run's
opts="--quiet --lr-schedule cosine --warmup 2 --clip 1.0 --data $tmp/text.bin"

# straight_vs_resumed NAME DIR LAUNCH...: 6 steps saving every 3 (NAME-a/step-000003, NAME-a/step-000006), then
# --resume NAME-a/step-000003 for steps 4 to 6, on the mesh of the program DIR
straight_vs_resumed() {
  name=$1 dir=$2
  shift 2
  expect "$name: 6 steps, --save-every 3" "$@" "$ppr" "$tmp/$dir" --steps 6 $opts --save "$tmp/$name-a" --save-every 3 \
    --log "$tmp/$name-a.jsonl"
  # the resumed run keeps the checkpoint's --save-every 3: NAME-b/step-000006
  expect "$name: --resume step-000003, steps 4 to 6" "$@" "$ppr" "$tmp/$dir" --steps 6 $opts \
    --resume "$tmp/$name-a/step-000003" --save "$tmp/$name-b" --log "$tmp/$name-b.jsonl"
  if cmp -s "$tmp/$name-a/step-000006/model.safetensors" "$tmp/$name-b/step-000006/model.safetensors" &&
    cmp -s "$tmp/$name-a/step-000006/trainer/optimizer.safetensors" "$tmp/$name-b/step-000006/trainer/optimizer.safetensors" &&
    same_state "$tmp/$name-a/step-000006/trainer/trainer_state.json" "$tmp/$name-b/step-000006/trainer/trainer_state.json" "$tmp/$name-b"; then
    ok "$name: 3 + resumed 3 steps: the weights and the moments byte-identical to 6 steps, trainer_state.json the same but --save and --log"
  else bad "$name: 3 + resumed 3 steps: the weights, the moments and trainer_state.json as 6 steps'"; fi
  losses "$tmp/$name-b.jsonl" >"$tmp/$name-b.loss"
  losses "$tmp/$name-a.jsonl" >"$tmp/$name-a.loss"
  if [ "$(wc -l <"$tmp/$name-a.loss")" -eq 6 ] && tail -n 3 "$tmp/$name-a.loss" | cmp -s - "$tmp/$name-b.loss" &&
    grep -q '^{"step":4,' "$tmp/$name-b.jsonl" && ! grep -q '^{"step":3,' "$tmp/$name-b.jsonl"; then
    ok "$name: the resumed run logs steps 4 to 6 with the uninterrupted run's losses"
  else bad "$name: the resumed run logs steps 4 to 6 with the uninterrupted run's losses"; fi
}
straight_vs_resumed one one
straight_vs_resumed mesh mesh $MPIRUN -np 4

if [ "$(ls "$tmp/one-a" | tr '\n' ' ')" = "step-000003 step-000006 " ] &&
  [ "$(cd "$tmp/one-b/step-000006" && find . -type f | sort | tr '\n' ' ')" = "./config.json ./model.safetensors ./trainer/optimizer.safetensors ./trainer/trainer_state.json " ] &&
  grep -q '"step": 6' "$tmp/one-b/step-000006/trainer/trainer_state.json" && grep -q '"exp_avg_sq.transformer.wte.weight"' "$tmp/one-b/step-000006/trainer/optimizer.safetensors"
then ok "--save FOLDER: the weights, trainer/optimizer.safetensors (exp_avg.NAME, exp_avg_sq.NAME) and trainer/trainer_state.json"
else bad "--save FOLDER: the weights, trainer/optimizer.safetensors (exp_avg.NAME, exp_avg_sq.NAME) and trainer/trainer_state.json"; fi
# the state folder is still a weights checkpoint
expect "--init a folder holding the training state" "$ppr" "$tmp/one" --init "$tmp/one-b/step-000006" --steps 0 --quiet \
  --save "$tmp/init.safetensors"
if cmp -s "$tmp/init.safetensors" "$tmp/one-b/step-000006/model.safetensors"; then ok "--init reads the weights alone"
else bad "--init reads the weights alone"; fi

# a changed mesh: saved at pp 2, resumed on one rank (another summation order: close, not identical)
expect "pp 2: 3 steps" $MPIRUN -np 2 "$ppr" "$tmp/pp2" --steps 6 $opts --save "$tmp/pp" --save-every 3
expect "one rank: --resume the pp 2 checkpoint" "$ppr" "$tmp/one" --steps 6 $opts --resume "$tmp/pp/step-000003" \
  --save "$tmp/pp-b" --log "$tmp/pp-b.jsonl"
losses "$tmp/pp-b.jsonl" | sed 's/^[^:]*://' >"$tmp/pp-b.loss"
tail -n 3 "$tmp/one-a.loss" | sed 's/^[^:]*://' >"$tmp/one-a3.loss"
if [ "$(wc -l <"$tmp/pp-b.loss")" -eq 3 ] &&
  paste "$tmp/one-a3.loss" "$tmp/pp-b.loss" | awk '{d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * ($1 < 0 ? -$1 : $1)) bad = 1} END {exit bad}'
then ok "pp 2 -> one rank: steps 4 to 6 within 1e-5 of the one-rank run"
else bad "pp 2 -> one rank: steps 4 to 6 within 1e-5 of the one-rank run ($(paste "$tmp/one-a3.loss" "$tmp/pp-b.loss" | tr '\n' ' '))"; fi

# one file: W.optimizer.safetensors and W.trainer_state.json beside W.safetensors
expect "--save W.safetensors" "$ppr" "$tmp/one" --steps 6 $opts --resume "$tmp/one-a/step-000003" --steps 6 \
  --save "$tmp/w.safetensors" --save-every 0
if [ -f "$tmp/w.optimizer.safetensors" ] && [ -f "$tmp/w.trainer_state.json" ] &&
  cmp -s "$tmp/w.safetensors" "$tmp/one-b/step-000006/model.safetensors"; then
  ok "--save W.safetensors: W.optimizer.safetensors and W.trainer_state.json beside it"
else bad "--save W.safetensors: W.optimizer.safetensors and W.trainer_state.json beside it"; fi
expect "--resume W.safetensors at the last step: nothing to run" "$ppr" "$tmp/one" --steps 6 $opts \
  --resume "$tmp/w.safetensors" --save "$tmp/wb"
if cmp -s "$tmp/wb/model.safetensors" "$tmp/one-b/step-000006/model.safetensors" &&
  cmp -s "$tmp/wb/trainer/optimizer.safetensors" "$tmp/one-b/step-000006/trainer/optimizer.safetensors" &&
  cmp -s "$tmp/wb/trainer/optimizer.safetensors" "$tmp/w.optimizer.safetensors"; then
  ok "--resume W.safetensors at --steps: the weights and moments as saved"
else bad "--resume W.safetensors at --steps: the weights and moments as saved"; fi
# a folder of an older ppr: the training state beside the weights, not in trainer/
cp -r "$tmp/one-a/step-000003" "$tmp/older" && mv "$tmp/older/trainer"/* "$tmp/older/" && rmdir "$tmp/older/trainer"
expect "--resume a folder with the training state beside the weights" "$ppr" "$tmp/one" --steps 6 $opts \
  --resume "$tmp/older" --save "$tmp/older-b" --save-every 0
if cmp -s "$tmp/older-b/model.safetensors" "$tmp/one-b/step-000006/model.safetensors"; then
  ok "--resume the older layout: the weights of the straight 6 steps"
else bad "--resume the older layout: the weights of the straight 6 steps"; fi

# a hub folder: --init's tokenizer files and generation config copied, the state in trainer/, --model-name
mkdir -p "$tmp/hub" && cp "$tmp/one-b/step-000006/model.safetensors" "$tmp/one-b/step-000006/config.json" "$tmp/hub/"
cp tests/fixtures/tokenizers/gpt2.json "$tmp/hub/tokenizer.json"
echo '{"bos_token_id": 50256}' >"$tmp/hub/generation_config.json"
echo '{"model_max_length": 1024}' >"$tmp/hub/tokenizer_config.json"
echo '{"eos_token": "<|endoftext|>"}' >"$tmp/hub/special_tokens_map.json"
expect "--init a hub folder, --save a folder" "$ppr" "$tmp/one" --init "$tmp/hub" --steps 3 $opts --save "$tmp/hubout"
if [ "$(cd "$tmp/hubout" && find . -type f | sort | tr '\n' ' ')" = "./config.json ./generation_config.json ./model.safetensors ./special_tokens_map.json ./tokenizer.json ./tokenizer_config.json ./trainer/optimizer.safetensors ./trainer/trainer_state.json " ] &&
  cmp -s "$tmp/hub/tokenizer.json" "$tmp/hubout/tokenizer.json" &&
  cmp -s "$tmp/hub/generation_config.json" "$tmp/hubout/generation_config.json" &&
  grep -q '"_name_or_path": "gpt2"' "$tmp/hubout/config.json"; then
  ok "--save FOLDER: config.json (named after the model), the weights, --init's tokenizer files and generation config; the state in trainer/"
else bad "--save FOLDER's files: $(cd "$tmp/hubout" && find . -type f | sort | tr '\n' ' ')"; fi
expect "--resume it, --model-name" "$ppr" "$tmp/one" --resume "$tmp/hubout" --steps 4 --decay-steps 3 --save "$tmp/hubout2" \
  --model-name me/gpt2-tiny
if cmp -s "$tmp/hub/tokenizer_config.json" "$tmp/hubout2/tokenizer_config.json" &&
  grep -q '"_name_or_path": "me/gpt2-tiny"' "$tmp/hubout2/config.json"; then
  ok "--resume's folder's tokenizer files carried on; --model-name as config.json's _name_or_path"
else bad "--resume's folder's tokenizer files carried on; --model-name as config.json's _name_or_path"; fi
# --keep removes the folder the files came from: the later saves have them still
expect "--resume, --save-every 1" "$ppr" "$tmp/one" --resume "$tmp/hubout" --steps 4 --decay-steps 3 \
  --save "$tmp/hubkeep" --save-every 1
expect "--resume hubkeep/step-000004 --keep 1" "$ppr" "$tmp/one" --resume "$tmp/hubkeep/step-000004" --steps 6 --keep 1
if [ "$(ls "$tmp/hubkeep" | tr '\n' ' ')" = "step-000006 " ] &&
  cmp -s "$tmp/hub/tokenizer.json" "$tmp/hubkeep/step-000006/tokenizer.json" &&
  cmp -s "$tmp/hub/generation_config.json" "$tmp/hubkeep/step-000006/generation_config.json"; then
  ok "--keep 1 removed the folder the hub files came from; the last save has them"
else bad "--keep 1 removed the folder the hub files came from; the last save has them: $(ls -R "$tmp/hubkeep" | tr '\n' ' ')"; fi
expect "--tokenizer FILE.json: its folder's tokenizer files" "$ppr" "$tmp/one" --init "$tmp/hub" --steps 3 $opts \
  --save "$tmp/hubtok" --tokenizer tests/fixtures/tokenizers/llama3.json
if cmp -s tests/fixtures/tokenizers/llama3.json "$tmp/hubtok/tokenizer.json" && [ ! -e "$tmp/hubtok/tokenizer_config.json" ] &&
  cmp -s "$tmp/hub/generation_config.json" "$tmp/hubtok/generation_config.json"; then
  ok "--tokenizer: its tokenizer.json (and nothing of --init's tokenizer), --init's generation config"
else bad "--tokenizer: its tokenizer.json (and nothing of --init's tokenizer), --init's generation config"; fi
expect_fail "--tokenizer that cannot be read, with --save" "--tokenizer $tmp/nothere.json: cannot read it" \
  "$ppr" "$tmp/one" --steps 3 $opts --save "$tmp/never" --tokenizer "$tmp/nothere.json"
expect_fail "--model-name without a --save folder" "--model-name names a folder's model" \
  "$ppr" "$tmp/one" --steps 3 $opts --save "$tmp/never.safetensors" --model-name x

# --keep K: the last K step folders
expect "--save-every 1 --keep 2" "$ppr" "$tmp/one" --steps 4 $opts --save "$tmp/kept" --save-every 1 --keep 2
if [ "$(ls "$tmp/kept" | tr '\n' ' ')" = "step-000003 step-000004 " ]; then ok "--keep 2 keeps the last two"
else bad "--keep 2 keeps the last two ($(ls "$tmp/kept" | tr '\n' ' '))"; fi

# errors: before any step, nothing written
ck=$tmp/one-a/step-000003
expect_fail "--resume --init" "--resume and --init exclude each other" "$ppr" "$tmp/one" --resume "$ck" --init "$ck" \
  --save "$tmp/never"
expect_fail "--resume --seed" "--resume and --seed exclude each other" "$ppr" "$tmp/one" --resume "$ck" --seed 3 \
  --save "$tmp/never"
expect_fail "--steps that moves a cosine's decay" \
  "the checkpoint's lr_schedule.decay_steps is 4, this run's would be 6: give --decay-steps 4 to go on with the checkpoint's" \
  "$ppr" "$tmp/one" --steps 8 --resume "$ck" --save "$tmp/never"
tokens "$tmp/data.bin" 3000
expect "a run on --data FILE, saved" "$ppr" "$tmp/one" --steps 2 --quiet --data "$tmp/data.bin" --save "$tmp/dck"
tokens "$tmp/data.bin" 4000
expect_fail "--data changed since the checkpoint" "the data changed since; give --data again to go on with it as it is now" \
  "$ppr" "$tmp/one" --steps 3 --resume "$tmp/dck" --save "$tmp/never"
expect_fail "text as --data of a model from a Hugging Face config" \
  "--data README.md is text, whose bytes would be the tokens, but $tmp/one/rank0.prog was compiled from a Hugging Face config" \
  "$ppr" "$tmp/one" --steps 1 --data README.md --save "$tmp/never"
expect_fail "no --data for a model from a Hugging Face config" \
  "no --data: the built-in text's bytes would be the tokens, but $tmp/one/rank0.prog was compiled from a Hugging Face config" \
  "$ppr" "$tmp/one" --steps 1 --save "$tmp/never"
python3 -c 'import struct, sys
open(sys.argv[1], "wb").write(struct.pack("<256i", *([20240520, 1, 40] + [0] * 253)) + struct.pack("<40H", *([7] * 39 + [512])))' \
  "$tmp/big.bin"
expect_fail "a token file of ids past the vocabulary" \
  "token 512 at position 39 is not below the vocabulary's 512 (--data $tmp/one/rank0.prog); a file of other ids than the model's tokenizer's? python3 tools/tokenize.py --tokenizer DIR/tokenizer.json" \
  "$ppr" "$tmp/one" --steps 1 --data "$tmp/big.bin" --save "$tmp/never"
expect_fail "--steps below the checkpoint's" "--steps 2: the checkpoint $tmp/one-a/step-000003 has done 3 steps" "$ppr" "$tmp/one" --steps 2 \
  --quiet --resume "$ck" --save "$tmp/never"
expect_fail "--keep without --save-every" "--keep is an option of --save-every" "$ppr" "$tmp/one" --save "$tmp/never" \
  --keep 2
"$build/ppc" tests/models/tiny_gpt2.pdl --microbatches 2 -o "$tmp/other" >"$tmp/ppc2.txt" 2>&1 || cat "$tmp/ppc2.txt"
expect_fail "another model" "the checkpoint's model is" "$ppr" "$tmp/other" --steps 6 $opts --resume "$ck" \
  --save "$tmp/never"
cp -r "$ck" "$tmp/cut"
head -c 100000 "$ck/trainer/optimizer.safetensors" >"$tmp/cut/trainer/optimizer.safetensors"
expect_fail "a truncated optimizer file" "$tmp/cut/trainer/optimizer.safetensors" "$ppr" "$tmp/one" --steps 6 $opts \
  --resume "$tmp/cut" --save "$tmp/never"
cp -r "$ck" "$tmp/noopt"
rm "$tmp/noopt/trainer/optimizer.safetensors"
expect_fail "a missing optimizer file" "$tmp/noopt/trainer/optimizer.safetensors: No such file" "$ppr" "$tmp/one" --steps 6 $opts \
  --resume "$tmp/noopt" --save "$tmp/never"
cp -r "$ck" "$tmp/nostate"
rm "$tmp/nostate/trainer/trainer_state.json"
expect_fail "a missing trainer_state.json" "$tmp/nostate/trainer/trainer_state.json: No such file" "$ppr" "$tmp/one" --steps 6 \
  $opts --resume "$tmp/nostate" --save "$tmp/never"
cp -r "$ck" "$tmp/badjson"
echo '{"format": 1' >"$tmp/badjson/trainer/trainer_state.json"
expect_fail "a broken trainer_state.json" "$tmp/badjson/trainer/trainer_state.json: not valid JSON" "$ppr" "$tmp/one" --steps 6 \
  $opts --resume "$tmp/badjson" --save "$tmp/never"
expect_fail "tp 2 x pp 2: a truncated optimizer file" "$tmp/cut/trainer/optimizer.safetensors" $MPIRUN -np 4 "$ppr" "$tmp/mesh" \
  --steps 6 $opts --resume "$tmp/cut" --save "$tmp/never"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
