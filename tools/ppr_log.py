#!/usr/bin/env python3
"""ppr_log.py - read a ppr --log (JSONL): its step records, without the start lines.

    tools/ppr_log.py LOG                    every step record, one JSON object a line
    tools/ppr_log.py LOG loss grad_norm     those fields of each step that has them, tab-separated
    tools/ppr_log.py LOG loss --step 3      step 3's
    tools/ppr_log.py LOG --starts           the start lines ({"start": STEP, "run": ID, ...})

A ppr log holds one JSON object a line: {"start": STEP, "run": ID, "model": ..., "tokens_per_step":
..., "time": ..., "args": [...]} where a run starts or resumes, and {"step": N, "loss": ..., ...}
after each step (docs/ppr.md). Importable: records(path) and starts(path).
"""
import argparse
import json
import sys


def lines(path):
    """Every object of the log, in order; a last line the run did not finish is left out."""
    out = []
    with open(path) as f:
        text = f.read()
    for k, line in enumerate(text.split("\n")):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            if k == len(text.split("\n")) - 1:  # no newline after it: a write cut short
                break
            raise SystemExit("%s:%d: not a line of a ppr log" % (path, k + 1))
    return out


def records(path):
    """The step records (each has "step")."""
    return [o for o in lines(path) if "step" in o]


def starts(path):
    """The start lines (each has "start" and "run")."""
    return [o for o in lines(path) if "start" in o]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log")
    ap.add_argument("fields", nargs="*", help="print these fields of each step that has them")
    ap.add_argument("--step", type=int, help="that step's record alone")
    ap.add_argument("--starts", action="store_true", help="the start lines instead of the steps")
    a = ap.parse_args()
    objs = starts(a.log) if a.starts else records(a.log)
    if a.step is not None:
        objs = [o for o in objs if o.get("step") == a.step]
    for o in objs:
        if not a.fields:
            print(json.dumps(o))
        elif all(f in o for f in a.fields):
            print("\t".join(repr(o[f]) if isinstance(o[f], float) else str(o[f]) for f in a.fields))
    return 0


if __name__ == "__main__":
    sys.exit(main())
