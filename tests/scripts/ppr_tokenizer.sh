#!/bin/sh
# ppr_tokenizer.sh BUILD_DIR - prompts in the model's vocabulary: `--prompt TEXT --tokenizer
# tokenizer.json` generates the same tokens as the tokenizers package's ids given with --prompt-ids
# (GPT-2-, Llama-3- and SentencePiece-style tokenizer.json of tests/fixtures/tokenizers, a text with
# accents), the text printed through the same tokenizer; a byte prompt on a model whose vocabulary
# is not 256, an llm.c tokenizer file asked to encode, and ids past the model's vocabulary are
# errors that say what to give instead. Last line: "N passed, M failed".
set -u
build=${1:?usage: ppr_tokenizer.sh BUILD_DIR}
. tests/scripts/lib/common.sh
export PPC_CACHE="$tmp/cache"
needs_python3 ppr_tokenizer
fx=tests/fixtures/tokenizers

# a Llama of 1024 tokens, the tokenizers' 1000 and 956 within it; and one of 500
for v in 1024 500; do
  mkdir -p "$tmp/cfg$v"
  cat >"$tmp/cfg$v/config.json" <<EOF
{"architectures": ["LlamaForCausalLM"], "vocab_size": $v, "hidden_size": 32, "intermediate_size": 64,
 "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "rms_norm_eps": 1e-5,
 "max_position_embeddings": 128}
EOF
  "$ppc" --from-hf "$tmp/cfg$v" -o "$tmp/m$v.pdl" >"$tmp/ppc.txt" 2>&1 &&
    "$ppc" "$tmp/m$v.pdl" --seq 64 --generate -o "$tmp/g$v" >>"$tmp/ppc.txt" 2>&1 || {
    cat "$tmp/ppc.txt"
    bad "ppc --from-hf a Llama of $v tokens"
  }
done

text="Größe, Straße und Übermaß: café, naïve, coöperate."
for tk in gpt2 llama3 sp; do
  ids=$(python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["text"] == sys.argv[2]:
        print(",".join(map(str, r[sys.argv[3]])))' "$fx/cases.jsonl" "$text" "$tk")
  gen="--seed 3 --generate 12 --temperature 0 --tokenizer $fx/$tk.json"
  # shellcheck disable=SC2086
  "$ppr" "$tmp/g1024" $gen --prompt "$text" >"$tmp/$tk.text.txt" 2>&1
  # shellcheck disable=SC2086
  "$ppr" "$tmp/g1024" $gen --prompt-ids "$ids" >"$tmp/$tk.ids.txt" 2>&1
  if [ -n "$ids" ] && cmp -s "$tmp/$tk.text.txt" "$tmp/$tk.ids.txt" && grep -q "^$text" "$tmp/$tk.text.txt"; then
    ok "$tk: --prompt through tokenizer.json generates as the package's ids ($(echo "$ids" | tr ',' '\n' | wc -l) tokens); the text printed back"
  else
    bad "$tk: --prompt and --prompt-ids should generate the same"
    tail -n 2 "$tmp/$tk.text.txt" "$tmp/$tk.ids.txt"
  fi
done

expect_fail "a byte prompt on a model of 1024 tokens" \
  "--prompt: this model's vocabulary has 1024 tokens, not the 256 bytes: give its tokenizer.json with --tokenizer" \
  "$ppr" "$tmp/g1024" --generate 4 --prompt "$text"
expect_fail "ids past the model's vocabulary" "is not below the model's vocabulary of 500 (another model's tokenizer?)" \
  "$ppr" "$tmp/g500" --generate 4 --prompt "$text" --tokenizer "$fx/gpt2.json"
printf '{"model": {"type": "Unigram", "vocab": []}}' >"$tmp/uni.json"
expect_fail "a Unigram tokenizer.json" "$tmp/uni.json: model.type 'Unigram': only BPE models are supported" \
  "$ppr" "$tmp/g1024" --generate 4 --prompt "$text" --tokenizer "$tmp/uni.json"
expect_fail "a prompt that is not UTF-8" "the text is not valid UTF-8" \
  "$ppr" "$tmp/g1024" --generate 4 --prompt "$(printf 'a\377b')" --tokenizer "$fx/gpt2.json"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
