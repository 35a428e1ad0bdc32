#!/usr/bin/env python3
"""tokenize.py - text to the llm.c token files ppr --data reads, with a Hugging Face tokenizer.json.

    python3 tools/tokenize.py --tokenizer tokenizer.json [--val-frac 0.1] [--out-dir DIR]
                              [--name NAME] [--eos] INPUT...

INPUT: text files (each file one document) or JSON Lines files (*.jsonl: one document per line, in
its "text" field). The documents are tokenised in order with the `tokenizers` package (PyPI) and
concatenated (with --eos, the tokenizer's end-of-text token after each). The last --val-frac of the
documents (at least one, when the fraction is above 0 and there are two or more) are the validation
split: NAME_train.bin and NAME_val.bin in DIR (default: NAME "tokens", DIR "."); with --val-frac 0
only NAME_train.bin.

The files are llm.c's token format (docs/stage-format.md, "Data"): a header of 256 little-endian
int32 (magic 20240520, version, token count), then the tokens: version 1, uint16, when the
vocabulary has at most 65536 entries; else version 2, uint32. Each file is written to a temporary
beside it and renamed.
"""
import argparse
import json
import os
import struct
import sys

MAGIC = 20240520


def fail(msg):
    print("tokenize.py: error: " + msg, file=sys.stderr)
    sys.exit(1)


def documents(path):
    """The documents of one input file: the whole text, or each JSONL line's "text"."""
    try:
        with open(path, encoding="utf-8") as f:
            if not path.endswith(".jsonl"):
                yield f.read()
                return
            for no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    fail("%s:%d: not JSON: %s" % (path, no, e))
                if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                    fail('%s:%d: expected a JSON object with a string "text" field' % (path, no))
                yield obj["text"]
    except OSError as e:
        fail("%s: %s" % (path, e.strerror))
    except UnicodeDecodeError as e:
        fail("%s: not UTF-8 text: %s" % (path, e))


def write_tokens(path, toks, vocab):
    """llm.c's token file: version 1 (uint16) for vocab <= 65536, else version 2 (uint32)."""
    if not toks:
        fail("%s: no tokens to write (an llm.c token file holds at least one)" % path)
    if len(toks) > 2**31 - 1:
        fail("%s: %d tokens: an llm.c token file holds at most 2^31-1" % (path, len(toks)))
    ver, fmt = (1, "H") if vocab <= 65536 else (2, "I")
    for i, t in enumerate(toks):
        if not 0 <= t < vocab:
            fail("%s: token %d at position %d is not below the vocabulary's %d" % (path, t, i, vocab))
    hdr = [0] * 256
    hdr[0], hdr[1], hdr[2] = MAGIC, ver, len(toks)
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<256i", *hdr))
            f.write(struct.pack("<%d%s" % (len(toks), fmt), *toks))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        fail("%s: %s" % (path, e.strerror))
    print("%s: %d tokens, version %d (%s tokens, vocabulary %d)" % (path, len(toks), ver,
                                                                    "uint16" if ver == 1 else "uint32", vocab))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", metavar="INPUT", help="text files, or *.jsonl with a \"text\" field")
    ap.add_argument("--tokenizer", required=True, help="a Hugging Face tokenizer.json")
    ap.add_argument("--val-frac", type=float, default=0.0, help="the share of documents for validation (0..1)")
    ap.add_argument("--out-dir", default=".")
    ap.add_argument("--name", default="tokens")
    ap.add_argument("--eos", action="store_true", help="end each document with the end-of-text token")
    a = ap.parse_args()
    if not 0.0 <= a.val_frac < 1.0:
        fail("--val-frac %g: expected a fraction in [0, 1)" % a.val_frac)
    try:
        from tokenizers import Tokenizer
    except ImportError:
        fail("the Python package 'tokenizers' is not installed: pip install tokenizers "
             "(or python3 -m venv ENV && ENV/bin/pip install tokenizers, then run this with ENV/bin/python)")
    try:
        tok = Tokenizer.from_file(a.tokenizer)
    except Exception as e:  # tokenizers raises its own exception type for a bad file
        fail("%s: not a tokenizer.json the tokenizers package reads: %s" % (a.tokenizer, e))
    vocab = tok.get_vocab_size(with_added_tokens=True)
    eos = None
    if a.eos:
        for cand in ("<|endoftext|>", "</s>", "<|im_end|>", "<eos>", "<|end_of_text|>"):
            eos = tok.token_to_id(cand)
            if eos is not None:
                break
        if eos is None:
            fail("%s: --eos: the tokenizer has none of <|endoftext|>, </s>, <|im_end|>, <eos>, <|end_of_text|>"
                 % a.tokenizer)
    docs = []
    for path in a.inputs:
        for text in documents(path):
            ids = tok.encode(text, add_special_tokens=False).ids
            docs.append(ids + ([eos] if eos is not None else []))
    if not docs:
        fail("no documents in %s" % ", ".join(a.inputs))
    nval = 0
    if a.val_frac > 0 and len(docs) >= 2:
        nval = min(len(docs) - 1, max(1, round(len(docs) * a.val_frac)))
    elif a.val_frac > 0:
        fail("--val-frac %g needs two documents or more (found one)" % a.val_frac)
    os.makedirs(a.out_dir, exist_ok=True)
    split = len(docs) - nval
    write_tokens(os.path.join(a.out_dir, a.name + "_train.bin"), [t for d in docs[:split] for t in d], vocab)
    if nval:
        write_tokens(os.path.join(a.out_dir, a.name + "_val.bin"), [t for d in docs[split:] for t in d], vocab)


if __name__ == "__main__":
    main()
