#!/usr/bin/env python3
"""check_tb.py - ppr --tensorboard read back by the tensorboard package (make test-hf).

tiny trains 6 steps with --log and --tensorboard, then is resumed from step 3 to step 8 (the log's
steps 4..6 dropped and run again) and from step 6 to step 10; TensorBoard's EventAccumulator must
then hold steps 1..10 once each, every scalar equal to the log's number (as a float32).

    python3 tests/hf_client/check_tb.py BUILD_DIR     last line: "N passed, M failed"
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import ppr_log  # noqa: E402

TAGS = ("loss", "val_loss", "lr", "grad_norm", "tokens_per_s")
passed = failed = 0


def report(ok, what):
    global passed, failed
    passed, failed = passed + bool(ok), failed + (not ok)
    print("%s %s" % ("PASS" if ok else "FAIL", what))


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    if r.returncode:
        print(r.stdout)
    return r.returncode == 0


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
    ppr = os.path.join(build, "ppr")
    tmp = tempfile.mkdtemp(prefix="ppr-tb-")
    try:
        prog, log, tb, ck = (os.path.join(tmp, x) for x in ("one", "run.jsonl", "tb", "run"))
        ok = run([os.path.join(build, "ppc"), os.path.join(ROOT, "examples", "tiny.pdl"), "-o", prog])
        ok = ok and run([ppr, prog, "--steps", "6", "--lr", "3e-3", "--lr-schedule", "cosine", "--decay-steps", "10",
                         "--val-frac", "0.1", "--eval-every", "3", "--save", ck, "--save-every", "3", "--log", log,
                         "--tensorboard", tb, "--quiet"])
        ok = ok and run([ppr, prog, "--resume", os.path.join(ck, "step-000003"), "--steps", "8"])
        ok = ok and run([ppr, prog, "--resume", os.path.join(ck, "step-000006"), "--steps", "10"])
        report(ok, "tiny: 6 steps with --tensorboard, resumed from step 3 (to 8) and from step 6 (to 10)")
        ea = EventAccumulator(tb)
        ea.Reload()
        rec = ppr_log.records(log)
        for tag in TAGS:
            want = [(r["step"], f32(r[tag])) for r in rec if tag in r]
            got = [(e.step, e.value) for e in ea.Scalars(tag)] if tag in ea.Tags()["scalars"] else []
            report(len(want) > 0 and got == want,
                   "tensorboard's %s: %d points, the log's steps and values (%s)" % (tag, len(got), got[:3]))
        report([r["step"] for r in rec] == list(range(1, 11)), "the log: steps 1..10 once each")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
