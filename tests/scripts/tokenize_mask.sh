#!/bin/sh
# tokenize_mask.sh BUILD_DIR - tools/tokenize.py's supervised fine-tuning files: JSON Lines documents
# with "prompt" and "completion" give a token file with a loss mask (header[3] = 1, a byte per
# token: 0 for the prompt's tokens, 1 for the completion's and the end-of-text token), "text"
# documents count whole, the validation split carries its own mask, and ppr trains a model with
# ignore_index on it. The tokenizer is a stand-in `tokenizers` module (a word-level vocabulary, on
# PYTHONPATH): what is under test is the tool's own layout of tokens and mask, which the tokenizers
# package does not touch (tests/hf_client covers the tool with the real package). Last line:
# "N passed, M failed".
set -u
build=${1:?usage: tokenize_mask.sh BUILD_DIR}
. tests/scripts/lib/common.sh
export PPC_CACHE="$tmp/cache"
needs_python3 tokenize_mask
mkdir -p "$tmp/stub/tokenizers"
cat >"$tmp/stub/tokenizers/__init__.py" <<'PY'
import json


class _Enc:
    def __init__(self, ids):
        self.ids = ids


class Tokenizer:
    def __init__(self, vocab):
        self.vocab = vocab

    @staticmethod
    def from_file(path):
        return Tokenizer(json.load(open(path))["vocab"])

    def encode(self, text, add_special_tokens=True):
        return _Enc([self.vocab[w] for w in text.split()])

    def get_vocab_size(self, with_added_tokens=True):
        return len(self.vocab)

    def token_to_id(self, t):
        return self.vocab.get(t)
PY
python3 -c '
import json, sys
v = {"w%d" % i: i for i in range(200)}
v["<|endoftext|>"] = 200
json.dump({"vocab": v}, open(sys.argv[1], "w"))
with open(sys.argv[2], "w") as f:
    for i in range(12):
        if i % 4 == 3:
            f.write(json.dumps({"text": " ".join("w%d" % ((i * 11 + k) % 200) for k in range(30))}) + "\n")
        else:
            f.write(json.dumps({"prompt": " ".join("w%d" % ((i * 7 + k) % 200) for k in range(20)),
                                "completion": " ".join("w%d" % ((i * 5 + k) % 200) for k in range(10))}) + "\n")
' "$tmp/tok.json" "$tmp/sft.jsonl"
if PYTHONPATH="$tmp/stub" python3 tools/tokenize.py --tokenizer "$tmp/tok.json" --eos --val-frac 0.25 \
  --out-dir "$tmp" --name sft "$tmp/sft.jsonl" >"$tmp/tok.txt" 2>&1; then
  ok "tokenize.py writes prompt/completion documents ($(tr '\n' ' ' <"$tmp/tok.txt"))"
else
  bad "tokenize.py on prompt/completion documents"
  cat "$tmp/tok.txt"
fi
# the expected layout: documents 0..8 train, 9..11 validation
if python3 - "$tmp/sft_train.bin" "$tmp/sft_val.bin" <<'PY'; then
import struct, sys
def doc(i):
    if i % 4 == 3:
        return [(i * 11 + k) % 200 for k in range(30)] + [200], [1] * 31
    return [(i * 7 + k) % 200 for k in range(20)] + [(i * 5 + k) % 200 for k in range(10)] + [200], [0] * 20 + [1] * 11
for path, docs in ((sys.argv[1], range(9)), (sys.argv[2], range(9, 12))):
    raw = open(path, "rb").read()
    h = struct.unpack("<4i", raw[:16])
    toks = [t for i in docs for t in doc(i)[0]]
    mask = [m for i in docs for m in doc(i)[1]]
    n = len(toks)
    assert h == (20240520, 1, n, 1), (path, h)
    assert list(struct.unpack("<%dH" % n, raw[1024:1024 + 2 * n])) == toks, path
    assert list(raw[1024 + 2 * n:]) == mask, path
PY
  ok "the files: each prompt's tokens masked 0, the completion's and the end-of-text token 1, text documents 1, in train and validation"
else bad "token and mask layout of tokenize.py's files"; fi
sed 's/cross_entropy(logits, labels)/cross_entropy(logits, labels, ignore_index = -100)/' examples/tiny.pdl >"$tmp/tiny.pdl"
"$ppc" "$tmp/tiny.pdl" -o "$tmp/m" >"$tmp/ppc.txt" 2>&1 || cat "$tmp/ppc.txt"
expect "ppr trains a masked model on them, with their validation split" \
  $ppr "$tmp/m" --data "$tmp/sft_train.bin" --val-data "$tmp/sft_val.bin" --eval-every 2 --steps 2 --quiet
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
