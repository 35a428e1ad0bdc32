#!/usr/bin/env python3
"""lang_errors.py - every error message docs/language.md quotes is one ppc can print: each quoted span
of a paragraph about errors that reads like a message (a quoted name, "expected", "must", "twice",
"unknown", "ppc: error:") must match a message format of the compiler's sources (compiler/,
grammar/, common/: C string literals, adjacent ones and string macros joined), a printf conversion
standing for any value. In the quote, a quoted name or a number may stand for a conversion, an
upper-case word (PATH, X, N) for any value, and "..." for any text. Bison's own syntax-error text is
not in our sources and is left out. Prints a line per quote; last line "N passed, M failed".

The --from-hf examples (a field of a config.json) are composed of several literals: those are
produced instead, by ppc --from-hf on the repository's test configs with that field changed.

    python3 tests/scripts/lang_errors.py BUILD_DIR
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

LIT = r'"(?:[^"\\\n]|\\.)*"'
SPEC = re.compile(r'%[-+ #0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|z|j|t|L)?[diouxXeEfgGcsp]')


def sources():
    text = ""
    for f in sorted(glob.glob("compiler/*.[ch]") + glob.glob("grammar/*.[yl]") + glob.glob("common/*.[ch]")):
        text += open(f, errors="replace").read() + "\n"
    # string macros (#define NAME "..." ...) into their literals, so "a " NAME " b" joins
    macros = dict(re.findall(r'#define\s+([A-Z_][A-Z0-9_]*)\s+((?:%s\s*)+)' % LIT, text))
    for name, val in macros.items():
        text = re.sub(r'(?<=")(\s*)\b%s\b(\s*)(?=")' % name, lambda m: m.group(1) + val.strip() + m.group(2), text)
    formats = []
    for m in re.finditer(r'%s(?:\s*%s)*' % (LIT, LIT), text):
        s = "".join(re.findall(r'"((?:[^"\\\n]|\\.)*)"', m.group(0)))
        formats.append(SPEC.sub("\x01", s.replace('\\"', '"').replace("\\'", "'").replace("\\n", "\n")).strip())
    return formats


def pattern(quote):
    """The quote as a regex over the formats: its values may be conversions (\\x01)."""
    out = ""
    for tok in re.split(r"('[^']*'|\"[^\"]*\"|\{[a-z]+\}|\b\d+(?:\.\d+)?\b|\b[A-Z]{1,}\b|\.\.\.|…)", quote):
        if not tok:
            continue
        if tok[0] == "{":
            out += r"\{(?:%s|\x01)\}" % re.escape(tok[1:-1])
        elif tok in ("...", "…"):
            out += r"[^\n]*?"
        elif tok[0] in "'\"" and len(tok) >= 2:
            out += re.escape(tok[0]) + r"(?:[^\n]*?|\x01)" + re.escape(tok[-1])
        elif tok[0].isdigit():
            out += r"(?:%s|\x01)" % re.escape(tok)
        elif tok.isupper() and len(tok) >= 1 and tok not in ("A", "B"):
            out += r"(?:[^\n]*?|\x01)"
        else:
            out += re.escape(tok)
    return out


def matches(quote, fmts, joined):
    """The quote is a part of a format's text, its values standing for conversions; or a whole message
    of a format, each conversion any text, the format's own text at least half of it."""
    body = re.sub(r"^\S+:\d+:\d+: error: ", "", re.sub(r"^ppc: error: ", "", quote))
    if re.search(pattern(body), joined):
        return True
    for f in fmts:
        fixed = len(f) - f.count("\x01")  # a format of conversions alone ("%s: %s") says nothing
        if "\x01" in f and fixed >= 12 and 2 * fixed >= len(body):
            rx = "".join(".+?" if c == "\x01" else re.escape(c) for c in f)
            if re.fullmatch(rx, quote) or re.fullmatch(rx, body):
                return True
    return False


# ppc --from-hf's examples: the field, the test config it changes, and how
HF_PROBES = {
    "rope_scaling.rope_type": ("llama3", lambda c: c.update(rope_scaling={"rope_type": "yarn", "factor": 2.0})),
    "hidden_size": ("llama3", lambda c: c.pop("hidden_size")),
    "use_sliding_window": ("qwen2", lambda c: c.update(use_sliding_window=True)),
}


def produced(quote, ppc):
    """A quoted --from-hf error, as ppc prints it for the config the quote describes."""
    m = re.match(r"ppc: error: (\w+)/config\.json: field '([^']+)'", quote)
    if not m or m.group(2) not in HF_PROBES:
        return False
    base, change = HF_PROBES[m.group(2)]
    tmp = tempfile.mkdtemp()
    try:
        cfg = json.load(open(os.path.join("tests", "hf", base, "config.json")))
        change(cfg)
        os.makedirs(os.path.join(tmp, m.group(1)))
        json.dump(cfg, open(os.path.join(tmp, m.group(1), "config.json"), "w"))
        r = subprocess.run([os.path.abspath(ppc), "--from-hf", m.group(1)], cwd=tmp, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True)
        return r.returncode != 0 and quote in r.stderr.splitlines()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def quotes(doc):
    out = []
    for para in re.split(r"\n\s*\n", doc):
        if "error" not in para:
            continue
        flat = " ".join(para.split())
        for m in re.finditer(r"`([^`]+)`", flat):
            s = m.group(1).strip()
            if " " not in s or not re.search(r"'|expected|must|twice|unknown|ppc: error:", s):
                continue
            if s.startswith("syntax error, unexpected"):  # bison's own message
                continue
            # a block of several messages: each one
            out += [("ppc: error: " + x).strip() if i else x.strip()
                    for i, x in enumerate(s.split("ppc: error: ")) if x.strip()]
    return out


def main():
    ppc = os.path.join(sys.argv[1] if len(sys.argv) > 1 else "build", "ppc")
    fmts = sources()
    joined = "\n".join(fmts)
    passed = failed = 0
    for q in quotes(open("docs/language.md").read()):
        ok = matches(q, fmts, joined) or produced(q, ppc)
        passed, failed = passed + ok, failed + (not ok)
        print("%s docs/language.md quotes %r%s" % ("PASS" if ok else "FAIL", q, "" if ok else
                                                    ": no message of ppc's sources reads so"))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
