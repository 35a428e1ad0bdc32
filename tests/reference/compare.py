#!/usr/bin/env python3
"""Compare two safetensors files tensor by tensor.

    python3 tests/reference/compare.py A.safetensors B.safetensors [--tol 1e-4]

B is the reference.  For every tensor prints
    OK    name  rel=...   or   FAIL  name  rel=...  (or the reason)
with rel = ||a - b|| / ||b|| (plain ||a - b|| when ||b|| = 0), then a last line
"N passed, M failed".  A tensor missing from either file, a shape mismatch or a
non-finite value counts as a failure; the exit status is non-zero on any failure.
Pure Python (no numpy / torch).
"""

import argparse
import math
import os
import sys

sys.dont_write_bytecode = True  # keep tests/reference free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402


def rel_err(a, b):
    num = 0.0
    den = 0.0
    maxabs = 0.0
    for x, y in zip(a, b):
        d = x - y
        num += d * d
        den += y * y
        if abs(d) > maxabs:
            maxabs = abs(d)
    num = math.sqrt(num)
    den = math.sqrt(den)
    return (num / den if den > 0 else num), maxabs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="safetensors file to check")
    ap.add_argument("b", help="reference safetensors file")
    ap.add_argument("--tol", type=float, default=1e-4, help="max allowed rel (default 1e-4)")
    ap.add_argument("-q", "--quiet", action="store_true", help="print only failures and the summary")
    args = ap.parse_args()

    try:
        A, _ = safetensors_io.read(args.a)
        B, _ = safetensors_io.read(args.b)
    except (OSError, ValueError) as e:
        print("FAIL  cannot read: %s" % e)
        print("0 passed, 1 failed")
        return 1

    passed = failed = 0
    for name in B:
        if name not in A:
            print("FAIL  %s  missing from %s" % (name, args.a))
            failed += 1
            continue
        sa, va = A[name]
        sb, vb = B[name]
        if sa != sb:
            print("FAIL  %s  shape %s != %s" % (name, sa, sb))
            failed += 1
            continue
        if not all(math.isfinite(x) for x in va):
            print("FAIL  %s  non-finite values" % name)
            failed += 1
            continue
        rel, maxabs = rel_err(va, vb)
        if rel <= args.tol:
            passed += 1
            if not args.quiet:
                print("OK    %s  rel=%.3e  maxabs=%.3e" % (name, rel, maxabs))
        else:
            failed += 1
            print("FAIL  %s  rel=%.3e  maxabs=%.3e  (tol %.1e)" % (name, rel, maxabs, args.tol))
    for name in A:
        if name not in B:
            print("FAIL  %s  extra tensor (not in %s)" % (name, args.b))
            failed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
