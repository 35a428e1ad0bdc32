#!/usr/bin/env python3
"""make_tokenizers.py - the tokenizer fixtures of ppr's BPE encoder (tests/unit/test_bpe.c), made with
the tokenizers package (PyPI):

  OUT/gpt2.json    byte-level BPE as GPT-2: ByteLevel with its regex
  OUT/llama3.json  as Llama-3: Split by its regex (Isolated), ByteLevel without one, ignore_merges
  OUT/qwen2.json   as Qwen2: NFC, Split by its regex, ByteLevel
  OUT/sp.json      SentencePiece-style BPE as Llama-2 / Mistral: Prepend and Replace "▁", byte fallback
  OUT/meta.json    the same model behind a Metaspace pre-tokenizer (prepend "first", split)
  OUT/cases.jsonl  1000 strings (ASCII, accents, Cyrillic, Greek, CJK, emoji, digits, whitespace runs,
                   contractions in both cases) and each tokenizer's ids:
                   {"text": ..., "gpt2": [...], "llama3": [...], ...}, encode(text, add_special_tokens=False)

Each is trained on the Debian licenses and a few lines in other scripts, small (1000 tokens), so
the files stay small; the encoder's rules are what is under test, not the vocabulary.

    python3 tests/reference/make_tokenizers.py OUT_DIR      (make test-hf runs it into a temporary
                                                            folder and test_bpe against that)
"""
import glob
import json
import os
import random
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
         r"\s+(?!\S)|\s+")
OTHER = ["Größe, Straße und Übermaß: café, naïve, coöperate.", "Съешь же ещё этих мягких французских булок.",
         "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.", "東京は日本の首都です。北京是中国的首都。", "emoji 🙂🚀 and ✓ marks",
         "e\u0301 (a combining accent) and é", "ﬁ ligature, Ⅻ numeral, ½ fraction", "tabs\tand\nnewlines\r\n"]


def corpus():
    text = [open(p, errors="replace").read() for p in sorted(glob.glob("/usr/share/common-licenses/*"))
            if os.path.isfile(p)]
    return text + OTHER * 20


def cases():
    rnd = random.Random(0)
    lines = [l.strip()[:60] for t in corpus()[:8] for l in t.splitlines() if l.strip()]
    out = lines[:400] + OTHER
    pool = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") * 3 +
            list(" \t\n\r.,;:!?'\"()-_/") * 2 + list("éüñçøßЖжλΩ東京中国🙂🚀✓") +
            ["'s", "'LL", "'ve", "'T", "  ", "   ", "1234567", "e\u0301"])
    while len(out) < 1000:
        s = "".join(rnd.choice(pool) for _ in range(rnd.randint(1, 30)))
        out.append(s)
    return out


def byte_level(pre, norm=None, ignore_merges=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if norm:
        tok.normalizer = norm
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus(), trainers.BpeTrainer(vocab_size=1000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                          special_tokens=["<|endoftext|>"], show_progress=False))
    return tok


def sentencepiece(metaspace):
    # the merges learnt on "▁"-joined text, then a model with the 256 byte tokens <0xXX> in its vocabulary
    base = Tokenizer(models.BPE())
    base.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    base.train_from_iterator(corpus(), trainers.BpeTrainer(vocab_size=700, limit_alphabet=80, show_progress=False,
                                                           special_tokens=["<unk>", "<s>", "</s>"]))
    m = json.loads(base.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for t in sorted(m["vocab"], key=m["vocab"].get):
        vocab.setdefault(t, len(vocab))
    merges = [tuple(x.split(" ")) if isinstance(x, str) else tuple(x) for x in m["merges"]]
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True))
    if metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    return tok


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    toks = {
        "gpt2": byte_level(pre_tokenizers.ByteLevel(add_prefix_space=False)),
        "llama3": byte_level(pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), "isolated"),
                                                      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
                             ignore_merges=True),
        "qwen2": byte_level(pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2), "isolated"),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
                            norm=normalizers.NFC()),
        "sp": sentencepiece(False),
        "meta": sentencepiece(True),
    }
    for name, tok in toks.items():
        tok.save(os.path.join(out, name + ".json"))
    with open(os.path.join(out, "cases.jsonl"), "w") as f:
        for s in cases():
            row = {"text": s}
            for name, tok in toks.items():
                row[name] = tok.encode(s, add_special_tokens=False).ids
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print("%s: %s and cases.jsonl (%d strings)" % (out, ", ".join(n + ".json" for n in toks), len(cases())))


if __name__ == "__main__":
    main()
