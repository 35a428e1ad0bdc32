#!/usr/bin/env python3
"""tokenize.py - text to the llm.c token files ppr --data reads, with a Hugging Face tokenizer.json.

    python3 tools/tokenize.py --tokenizer tokenizer.json [--val-frac 0.1] [--out-dir DIR]
                              [--name NAME] [--eos] [--tokenizer-out FILE] INPUT...
    python3 tools/tokenize.py --train-tokenizer tokenizer.json [--vocab-size N] INPUT...

INPUT: text files (each file one document) or JSON Lines files (*.jsonl: one document per line, in
its "text" field, or a supervised fine-tuning pair in its "prompt" and "completion" fields). The documents are tokenised in order with the `tokenizers` package (PyPI) and
concatenated (with --eos, the tokenizer's end-of-text token after each). The last --val-frac of the
documents (at least one, when the fraction is above 0 and there are two or more) are the validation
split: NAME_train.bin and NAME_val.bin in DIR (default: NAME "tokens", DIR "."); with --val-frac 0
only NAME_train.bin.

A prompt/completion document is the prompt's tokens then the completion's (then the end-of-text
token with --eos), and only the completion's count in the loss: when the inputs hold any such
document, the files carry a loss mask (header int32 3 = 1, then a byte per token, 0 for a prompt's
tokens and 1 for every other), which a model with cross_entropy(..., ignore_index = -100) trains on
(docs/language.md); a "text" document's tokens all count.

--tokenizer-out FILE also writes the tokenizer's id-to-bytes table as llm.c's tokenizer file (magic
20240328, version 1, the count of tokens, then each token as a length byte and its bytes), which ppr
--tokenizer reads to print generated tokens as text. A byte-level tokenizer's tokens (GPT-2, Llama 3,
Qwen: a ByteLevel decoder) are mapped back to their bytes; SentencePiece-style ones turn the
meta-space into a space and <0xNN> fallback tokens into byte NN; others are their UTF-8 text. With
--tokenizer-out no INPUT is needed.

--train-tokenizer OUT.json trains a byte-level BPE tokenizer (GPT-2's: ByteLevel with its regex, the
256 bytes as the first tokens, <|endoftext|> added) of --vocab-size tokens (default 8192) on the
INPUT documents and writes it as a tokenizer.json, for people who have none; then --tokenizer OUT.json
tokenizes with it, and ppr --tokenizer OUT.json encodes prompts and prints text with it.

The files are llm.c's token format (docs/ppr.md, "Data"): a header of 256 little-endian
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
TOKENIZER_MAGIC = 20240328


def fail(msg):
    print("tokenize.py: error: " + msg, file=sys.stderr)
    sys.exit(1)


def documents(path):
    """The documents of one input file: the whole text, or each JSONL line's "text" (a string), or
    its "prompt" and "completion" (a pair of strings)."""
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
                if isinstance(obj, dict) and isinstance(obj.get("prompt"), str) and \
                        isinstance(obj.get("completion"), str) and "text" not in obj:
                    yield (obj["prompt"], obj["completion"])
                    continue
                if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                    fail('%s:%d: expected a JSON object with a string "text" field, or string "prompt" and '
                         '"completion" fields' % (path, no))
                yield obj["text"]
    except OSError as e:
        fail("%s: %s" % (path, e.strerror))
    except UnicodeDecodeError as e:
        fail("%s: not UTF-8 text: %s" % (path, e))


def write_llmc(path, magic, version, count, body, masked=0):
    """An llm.c file: a header of 256 little-endian int32 (magic, version, count, the loss-mask
    flag), then body; through a temporary beside it and a rename."""
    hdr = [0] * 256
    hdr[0], hdr[1], hdr[2], hdr[3] = magic, version, count, masked
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<256i", *hdr))
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        fail("%s: %s" % (path, e.strerror))


def write_tokens(path, toks, vocab, mask=None):
    """llm.c's token file: version 1 (uint16) for vocab <= 65536, else version 2 (uint32); with a
    mask (0/1 per token) the loss mask after the tokens."""
    if not toks:
        fail("%s: no tokens to write (an llm.c token file holds at least one)" % path)
    if len(toks) > 2**31 - 1:
        fail("%s: %d tokens: an llm.c token file holds at most 2^31-1" % (path, len(toks)))
    ver, fmt = (1, "H") if vocab <= 65536 else (2, "I")
    for i, t in enumerate(toks):
        if not 0 <= t < vocab:
            fail("%s: token %d at position %d is not below the vocabulary's %d" % (path, t, i, vocab))
    body = struct.pack("<%d%s" % (len(toks), fmt), *toks)
    if mask is not None:
        body += bytes(mask)
    write_llmc(path, MAGIC, ver, len(toks), body, 1 if mask is not None else 0)
    print("%s: %d tokens, version %d (%s tokens, vocabulary %d)%s" % (
        path, len(toks), ver, "uint16" if ver == 1 else "uint32", vocab,
        "" if mask is None else ", a loss mask: %d of them count" % sum(mask)))


def gpt2_byte_decoder():
    """The inverse of GPT-2's bytes_to_unicode: the printable character standing for each byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def decoder_types(spec):
    """The types of a tokenizer.json's decoder, a Sequence's members included."""
    d = spec.get("decoder") or {}
    out = [d.get("type")]
    for m in d.get("decoders") or []:
        out.append(m.get("type"))
    return set(t for t in out if t)


def token_bytes(tok, types, bytemap, i):
    """Token i as the bytes it stands for."""
    s = tok.id_to_token(i)
    if s is None:
        return b""
    if "ByteLevel" in types and all(ch in bytemap for ch in s):
        return bytes(bytemap[ch] for ch in s)
    if "ByteFallback" in types and len(s) == 6 and s.startswith("<0x") and s.endswith(">"):
        try:
            return bytes([int(s[3:5], 16)])
        except ValueError:
            pass
    if types & {"Metaspace", "Replace"}:
        s = s.replace("\u2581", " ")
    return s.encode("utf-8")


def write_tokenizer(path, tok, spec, vocab):
    """llm.c's tokenizer file: a header of 256 int32 (magic, version 1, count), then per token a
    length byte and its bytes (at most 255; longer ones are refused)."""
    types = decoder_types(spec)
    bytemap = gpt2_byte_decoder()
    body = bytearray()
    for i in range(vocab):
        b = token_bytes(tok, types, bytemap, i)
        if len(b) > 255:
            fail("%s: token %d is %d bytes: llm.c's tokenizer file holds at most 255 a token" % (path, i, len(b)))
        body += bytes([len(b)]) + b
    write_llmc(path, TOKENIZER_MAGIC, 1, vocab, bytes(body))
    print("%s: llm.c tokenizer file of %d tokens (%s)" % (path, vocab, ", ".join(sorted(types)) or "no decoder"))


def train_tokenizer(a):
    """--train-tokenizer: a GPT-2-style byte-level BPE trained on the INPUT documents."""
    if not a.inputs:
        fail("--train-tokenizer: no INPUT (text files or *.jsonl) to train on")
    if not 257 <= a.vocab_size <= 1 << 20:
        fail("--vocab-size %d: expected 257 to 1048576 (the 256 bytes, <|endoftext|>, the merges)" % a.vocab_size)
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        fail("the Python package 'tokenizers' is not installed: pip install tokenizers")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    texts = [d if isinstance(d, str) else d[0] + d[1] for p in a.inputs for d in documents(p)]
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=a.vocab_size, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                       special_tokens=["<|endoftext|>"]))
    tok.save(a.train_tokenizer)
    print("%s: a byte-level BPE of %d tokens, trained on %d documents" % (a.train_tokenizer, tok.get_vocab_size(),
                                                                         len(texts)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="*", metavar="INPUT", help="text files, or *.jsonl with a \"text\" field")
    ap.add_argument("--tokenizer", help="a Hugging Face tokenizer.json")
    ap.add_argument("--train-tokenizer", metavar="OUT", help="train a byte-level BPE tokenizer.json on INPUT")
    ap.add_argument("--vocab-size", type=int, default=8192, help="--train-tokenizer's tokens (default 8192)")
    ap.add_argument("--val-frac", type=float, default=0.0, help="the share of documents for validation (0..1)")
    ap.add_argument("--out-dir", default=".")
    ap.add_argument("--name", default="tokens")
    ap.add_argument("--eos", action="store_true", help="end each document with the end-of-text token")
    ap.add_argument("--tokenizer-out", metavar="FILE", help="also write llm.c's tokenizer file (ppr --tokenizer)")
    a = ap.parse_args()
    if a.train_tokenizer:
        return train_tokenizer(a)
    if not a.tokenizer:
        fail("--tokenizer tokenizer.json is needed (or --train-tokenizer OUT.json to make one)")
    if not a.inputs and not a.tokenizer_out:
        fail("no INPUT (text files or *.jsonl) to tokenize")
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
    if a.tokenizer_out:
        try:
            with open(a.tokenizer, encoding="utf-8") as f:
                spec = json.load(f)
        except (OSError, ValueError) as e:
            fail("%s: %s" % (a.tokenizer, e))
        write_tokenizer(a.tokenizer_out, tok, spec, vocab)
        if not a.inputs:
            return
    eos = None
    if a.eos:
        for cand in ("<|endoftext|>", "</s>", "<|im_end|>", "<eos>", "<|end_of_text|>"):
            eos = tok.token_to_id(cand)
            if eos is not None:
                break
        if eos is None:
            fail("%s: --eos: the tokenizer has none of <|endoftext|>, </s>, <|im_end|>, <eos>, <|end_of_text|>"
                 % a.tokenizer)
    docs, masks = [], []
    for path in a.inputs:
        for doc in documents(path):
            prompt, text = doc if isinstance(doc, tuple) else ("", doc)
            p = tok.encode(prompt, add_special_tokens=False).ids if prompt else []
            ids = tok.encode(text, add_special_tokens=False).ids + ([eos] if eos is not None else [])
            docs.append(p + ids)
            masks.append([0] * len(p) + [1] * len(ids) if isinstance(doc, tuple) else None)
    if not docs:
        fail("no documents in %s" % ", ".join(a.inputs))
    nval = 0
    if a.val_frac > 0 and len(docs) >= 2:
        nval = min(len(docs) - 1, max(1, round(len(docs) * a.val_frac)))
    elif a.val_frac > 0:
        fail("--val-frac %g needs two documents or more (found one)" % a.val_frac)
    os.makedirs(a.out_dir, exist_ok=True)
    split = len(docs) - nval
    masked = any(m is not None for m in masks)

    def mask_of(lo, hi):
        if not masked:
            return None
        return [b for d, m in zip(docs[lo:hi], masks[lo:hi]) for b in (m if m is not None else [1] * len(d))]

    write_tokens(os.path.join(a.out_dir, a.name + "_train.bin"), [t for d in docs[:split] for t in d], vocab,
                 mask_of(0, split))
    if nval:
        write_tokens(os.path.join(a.out_dir, a.name + "_val.bin"), [t for d in docs[split:] for t in d], vocab,
                     mask_of(split, len(docs)))


if __name__ == "__main__":
    main()
