#!/usr/bin/python3
"""Benchmark: one full training step of ppr against PyTorch eager, on the same weights and data.

    /usr/bin/python3 bench/bench.py [--warmup 5] [--steps 20] [--rounds 1] [--models tiny,minimind256]

Run it through bench/run.sh, which builds ppc/ppr and sets the thread environment. This is a
benchmark, not a test: `make test` never runs it.

For each model:
  1. weights from the reference code (tests/reference/models.py init_params, fixed seed), written
     once to DIR/<model>/weights.safetensors; random tokens (llm.c token file) long enough that
     no step wraps around;
  2. ppc MODEL.pdl -o DIR/<model>/prog, then ppr --init weights --data tokens --steps W+N --clip 1
     --log ppr.jsonl; ppr's own per-step "ms" of steps W+1..W+N; one core's SGEMM peak measured
     right before, and a PPR_PROFILE=1 run of as many steps right after (the step's GEMM FLOPs and
     its GEMMs' share of the time, the MB its kernels' buffer arguments span and their time),
     beside the memory rate of the threads (torch add_ over 64 MB) measured right before too, and
     torch.mm on the step's own GEMM shapes (from that profile) on as many threads right after;
  3. PyTorch eager on the same weights and batches, in a child process (libgomp reads its
     environment when it loads): per step, time.perf_counter around zero_grad, forward + loss +
     backward per micro-batch, clip_grad_norm_(1.0), AdamW.step. Twice: with the environment as
     it is, and with OMP_WAIT_POLICY=PASSIVE OPENBLAS_THREAD_TIMEOUT=4, which suits PyTorch's two
     thread pools (its OpenMP one and OpenBLAS's); once if OMP_WAIT_POLICY is set. ppr runs with
     the environment as it is (one pool: libgomp's default policy suits it, docs/perf.md);
  4. checks that the first step's losses agree to 1e-4 relative, and prints one row per model;
  5. unless --no-bf16: ppr's --precision bf16 program and PyTorch under torch.autocast("cpu",
     dtype=torch.bfloat16) on the same step (fp32 weights and AdamW on both sides), a second table:
     their step times beside ppr's fp32 one, and each side's step-1 loss against fp32's.
With --rounds R, steps 2 and 3 are repeated R times, alternating ppr and torch, and the timed
steps of all rounds are pooled (on a machine shared with other work, load that comes and goes
then hits both sides alike).

Both sides run the same step: forward and backward of every micro-batch (gradients accumulated,
the loss a mean over the step's tokens), the global gradient norm, clipping to 1.0, AdamW
(lr 1e-3, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on the matrices only). The PyTorch batches
are sliced out of the token tensor before the timed loop (ppr's timed step includes copying its
batch, a few microseconds).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))
import ppr_log  # noqa: E402  (tools/ppr_log.py: a --log's step records)
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

import torch  # noqa: E402

import models  # noqa: E402
import safetensors_io  # noqa: E402
from gen_fixtures import get_batch, make_tokens, write_tokens  # noqa: E402

# The configurations: (pdl file, reference config). They must match the .pdl files.
MODELS = {
    "tiny": {
        "pdl": "examples/tiny.pdl",
        "config": {"vocab": 256, "hidden": 64, "layers": 4, "heads": 4, "kv_heads": 2,
                   "head_dim": 16, "ffn": 128, "eps": 1e-6, "theta": 1e6},
        "step": {"micro_batch": 2, "seq": 16, "microbatches": 2},
    },
    "minimind256": {
        "pdl": "bench/minimind256.pdl",
        "config": {"vocab": 6400, "hidden": 256, "layers": 4, "heads": 4, "kv_heads": 2,
                   "head_dim": 64, "ffn": 704, "eps": 1e-6, "theta": 1e6},
        "step": {"micro_batch": 8, "seq": 128, "microbatches": 1},
    },
    # MiniMind-3 itself (examples/minimind.pdl: 64M parameters) at micro-batch 2, seq 512; about 0.4
    # TFLOP a step, so fewer steps unless --steps says otherwise
    "minimind": {
        "pdl": "examples/minimind.pdl",
        "ppc": ["--micro-batch", "2", "--microbatches", "1"],
        "config": {"vocab": 6400, "hidden": 768, "layers": 8, "heads": 8, "kv_heads": 4,
                   "head_dim": 96, "ffn": 2432, "eps": 1e-6, "theta": 1e6},
        "step": {"micro_batch": 2, "seq": 512, "microbatches": 1},
        "warmup": 2, "steps": 5,
    },
}
HP = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "wd": 0.1, "clip": 1.0}
WEIGHT_SEED = 1234
TOKEN_SEED = 5678
LOSS_RTOL = 1e-4
# ppc --attention for ppr's programs (--attention here): fused by default, ppc's default; with gemm,
# ppc --attention-probs (--attention-probs here): keep by default, as PyTorch's eager attention keeps
# its softmax's output for the backward
ATTENTION = "fused"
ATTENTION_PROBS = "keep"


def write_weights(path, P, names):
    from array import array
    tensors = []
    for n in names:
        a = array("f")
        a.frombytes(P[n].detach().contiguous().numpy().tobytes())
        tensors.append((n, list(P[n].shape), a))
    safetensors_io.write(path, tensors, {"format": "pt", "kind": "bench weights"})


def how(rc):
    return "killed by signal %d" % -rc if rc < 0 else "exit %d" % rc


def compile_prog(build, spec, precision, prog):
    """ppc SPEC's model at PRECISION into PROG (the bench's ppc flags)."""
    r = subprocess.run([os.path.join(build, "ppc"), os.path.join(ROOT, spec["pdl"])] + spec.get("ppc", []) +
                       ["--precision", precision, "--attention", ATTENTION] +
                       (["--attention-probs", ATTENTION_PROBS] if ATTENTION == "gemm" else []) + ["-o", prog],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    if r.returncode != 0:
        sys.exit("bench: ppc %s -o %s failed (%s):\n%s" % (spec["pdl"], prog, how(r.returncode), r.stdout))


COMPILED = set()  # the program directories ppc wrote in this run: each compiled once


def run_ppr(build, work, spec, weights, tokens, nsteps, precision="fp32", flags=(), profile=False):
    """ppc (once a program directory and run), then ppr: (losses, ms per step) from its --log;
    with profile, also its PPR_PROFILE summary (profile_of) of the same run."""
    prog = os.path.join(work, "prog" if precision == "fp32" else "prog_" + precision)
    if prog not in COMPILED:
        compile_prog(build, spec, precision, prog)
        COMPILED.add(prog)
    log = os.path.join(work, "ppr.jsonl")
    if os.path.exists(log):
        os.remove(log)  # each run its own log
    cmd = [os.path.join(build, "ppr"), prog, "--init", weights, "--data", tokens, "--steps", str(nsteps),
           "--lr", str(HP["lr"]), "--beta1", str(HP["beta1"]), "--beta2", str(HP["beta2"]),
           "--eps", str(HP["eps"]), "--wd", str(HP["wd"]), "--clip", str(HP["clip"]), "--log", log, "--quiet"] + list(flags)
    env = dict(os.environ, PPR_PROFILE="1") if profile else os.environ
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, env=env)
    if r.returncode != 0:
        sys.exit("bench: ppr failed (%s):\n%s" % (how(r.returncode), r.stdout))
    if r.stdout.strip() and os.environ.get("PPR_PROFILE"):
        sys.stderr.write(r.stdout)  # the PPR_PROFILE summary, asked for
    rows = ppr_log.records(log)
    res = [row["loss"] for row in rows], [row["ms"] for row in rows]
    return res + (profile_of(r.stdout),) if profile else res


def run_torch(spec, P0, names, toks, nsteps, autocast=False):
    cfg = spec["config"]
    B, S, M = spec["step"]["micro_batch"], spec["step"]["seq"], spec["step"]["microbatches"]
    P = {n: torch.nn.Parameter(P0[n].detach().clone()) for n in names}
    params = [P[n] for n in names]
    opt = torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": HP["wd"]},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=HP["lr"], betas=(HP["beta1"], HP["beta2"]), eps=HP["eps"])
    batches = [[get_batch(toks, s, m, B, S, M) for m in range(M)] for s in range(nsteps)]
    losses, ms = [], []
    for s in range(nsteps):
        t0 = time.perf_counter()
        opt.zero_grad()
        total = 0.0
        for x, y in batches[s]:
            if autocast:  # bf16 matmuls, fp32 where autocast keeps it (softmax, losses, norms' sums)
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    lm = models.cross_entropy(models.forward("minimind", P, cfg, x), y) / M
            else:
                lm = models.cross_entropy(models.forward("minimind", P, cfg, x), y) / M
            lm.backward()
            total += lm.item()
        torch.nn.utils.clip_grad_norm_(params, HP["clip"])
        opt.step()
        ms.append((time.perf_counter() - t0) * 1e3)
        losses.append(total)
    return losses, ms


def read_tokens(path):
    from array import array
    with open(path, "rb") as f:
        raw = f.read()
    head = array("i")
    head.frombytes(raw[:1024])
    toks = array("H")
    toks.frombytes(raw[1024:1024 + 2 * head[2]])
    if sys.byteorder != "little":
        head.byteswap()
        toks.byteswap()
    return torch.tensor(toks.tolist(), dtype=torch.int64)


def torch_child(name, nsteps, work, autocast=False):
    """--torch-child: the PyTorch side of one model, on the weights and tokens the parent wrote to
    work/; writes {"loss": [...], "ms": [...]} to work/torch.json."""
    spec = MODELS[name]
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    st, _ = safetensors_io.read(os.path.join(work, "weights.safetensors"))
    names = [n for n, _, _ in models.param_specs("minimind", spec["config"])]
    P0 = {n: torch.frombuffer(bytearray(st[n][1].tobytes()), dtype=torch.float32).reshape(st[n][0]) for n in names}
    toks = read_tokens(os.path.join(work, "tokens.bin"))
    losses, ms = run_torch(spec, P0, names, toks, nsteps, autocast)
    with open(os.path.join(work, "torch.json"), "w") as f:
        json.dump({"loss": losses, "ms": ms, "threads": torch.get_num_threads()}, f)


def peak_child(sizes=(1024, 2048, 3072), reps=3):
    """--peak-child: the SGEMM rate of OMP_NUM_THREADS threads on large square products (torch.mm
    through the same OpenBLAS, the same OPENBLAS_CORETYPE), the best over the sizes and reps;
    prints GFLOP/s."""
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    best = 0.0
    for n in sizes:
        a, b = torch.rand(n, n), torch.rand(n, n)
        torch.mm(a, b)
        for _ in range(reps):
            t0 = time.perf_counter()
            torch.mm(a, b)
            best = max(best, 2.0 * n ** 3 / (time.perf_counter() - t0) / 1e9)
    print("%.3f" % best)


def stream_child(n=1 << 24, reps=5):
    """--stream-child: the memory rate of OMP_NUM_THREADS threads: a.add_(b) over two arrays of
    64 MB (a read, b read, a written: three times 64 MB moved), the best of reps; prints GB/s."""
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    a, b = torch.rand(n), torch.rand(n)
    a.add_(b, alpha=1e-3)
    best = 0.0
    for _ in range(reps):
        t0 = time.perf_counter()
        a.add_(b, alpha=1e-3)
        best = max(best, 3.0 * 4 * n / (time.perf_counter() - t0) / 1e9)
    print("%.3f" % best)


def shapes_of(out):
    """The GEMM shapes of ppr's PPR_PROFILE summary: (ta, tb, M, N, K, batch, calls a step, ms a
    step, GFLOP a step as ppr counts them: a triangle's products alone)."""
    rows = []
    for m in re.finditer(r"^ +(?:forward|backward|optimizer|zero_grads) +([NT]) +([NT]) +(\d+) +(\d+) +(\d+) +(\d+) +"
                         r"([0-9.]+) +([0-9.]+) +[0-9.]+ +([0-9.]+) +\S+$", out, re.M):
        ta, tb, M, N, K, batch, calls, ms, rate = m.groups()
        rows.append((ta == "T", tb == "T", int(M), int(N), int(K), int(batch), float(calls), float(ms),
                     float(ms) * float(rate) / 1e3))
    return rows


def shapes_child(path, reps=5, iters=10):
    """--shapes-child FILE: torch.mm (torch.bmm for a batch) on OMP_NUM_THREADS threads on each of
    FILE's GEMM shapes (shapes_of, JSON), operands laid out as ppr's (op(X) = X^T a transposed
    view), each product repeated on the same operands (its caches warm: a rate no step reaches in
    place), the best of reps; prints JSON: ms a step each, a triangle's prorated to the products
    ppr counts (as if torch skipped the masked ones at its full product's rate)."""
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    with open(path) as f:
        shapes = json.load(f)
    out = []
    for ta, tb, M, N, K, batch, calls, _, gflop in shapes:
        lead = (batch,) if batch > 1 else ()
        a = torch.rand(lead + ((K, M) if ta else (M, K))).transpose(-1, -2) if ta else torch.rand(lead + (M, K))
        b = torch.rand(lead + ((N, K) if tb else (K, N))).transpose(-1, -2) if tb else torch.rand(lead + (K, N))
        c = torch.empty(lead + (M, N))
        mm = torch.bmm if batch > 1 else torch.mm
        mm(a, b, out=c)
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(iters):
                mm(a, b, out=c)
            best = min(best, (time.perf_counter() - t0) / iters)
        full = 2.0 * M * N * K * batch * calls / 1e9  # GFLOP a step of the whole products
        out.append(best * 1e3 * calls * (gflop / full if full > 0 else 1.0))
    print(json.dumps(out))


def measure(child, threads):
    """This script's --CHILD-child (peak: the SGEMM peak, stream: the memory rate) on `threads`
    threads: the number it prints."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--%s-child" % child], env=env,
                       stdout=subprocess.PIPE, universal_newlines=True, check=True)
    return float(r.stdout.strip().splitlines()[-1])


def torch_shapes(shapes, threads, work):
    """shapes_child's ms a step for each of shapes, on `threads` threads."""
    path = os.path.join(work, "shapes.json")
    with open(path, "w") as f:
        json.dump(shapes, f)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--shapes-child", path], env=env,
                       stdout=subprocess.PIPE, universal_newlines=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def profile_of(out):
    """ppr's PPR_PROFILE summary (steps 2.. of its run): (GFLOP of GEMMs a step, ms a step, of
    which GEMMs ms, MB a step its kernels' buffer arguments span, of which kernels ms, its GEMM
    shapes: shapes_of)."""
    step = re.search(r"per step: ([0-9.]+) ms", out)
    gemm = re.search(r" gemm ([0-9.]+) ms \(", out)
    flops = re.search(r"gemm: ([0-9.]+) GFLOP per step", out)
    kern = re.search(r" kernel ([0-9.]+) ms \(", out)
    span = re.search(r"kernels: ([0-9.]+) MB per step spanned", out)
    if not (step and gemm and flops and kern and span):
        sys.exit("bench: no PPR_PROFILE summary from ppr:\n" + out)
    shapes = shapes_of(out)
    if not shapes:
        sys.exit("bench: no GEMM shapes in ppr's PPR_PROFILE summary:\n" + out)
    return (float(flops.group(1)), float(step.group(1)), float(gemm.group(1)), float(span.group(1)),
            float(kern.group(1)), shapes)


def run_torch_child(name, nsteps, work, extra_env, autocast=False):
    out = os.path.join(work, "torch.json")
    env = dict(os.environ, **extra_env)
    subprocess.run([sys.executable, os.path.abspath(__file__), "--torch-child", name, "--steps", str(nsteps),
                    "--warmup", "0", "--work", work] + (["--autocast"] if autocast else []), env=env, check=True)
    with open(out) as f:
        r = json.load(f)
    return r["loss"], r["ms"]


def cpu_core():
    """OpenBLAS's core for this CPU's instructions, as runtime/dev/rt_dev_cpu.c chooses it."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next(l for l in f if l.startswith("flags")).split(":", 1)[1].split())
    except (OSError, StopIteration):
        return None
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return None


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def main():
    global ATTENTION, ATTENTION_PROBS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20, help="timed steps (after the warm-up)")
    ap.add_argument("--rounds", type=int, default=1, help="alternate ppr and torch runs this many times, pooling the steps")
    ap.add_argument("--models", default="tiny,minimind256,minimind")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "bench"))
    ap.add_argument("--torch-child", metavar="MODEL", help=argparse.SUPPRESS)
    ap.add_argument("--peak-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--stream-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shapes-child", metavar="FILE", help=argparse.SUPPRESS)
    ap.add_argument("--autocast", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-bf16", action="store_true", help="skip the bf16 runs (ppr --precision bf16, torch.autocast)")
    ap.add_argument("--attention", choices=("fused", "gemm"), default="fused",
                    help="ppc --attention for ppr (fused: ppc's default)")
    ap.add_argument("--attention-probs", choices=("keep", "recompute"), default="keep",
                    help="with --attention gemm: ppc --attention-probs for ppr (keep: as PyTorch's eager attention)")
    a = ap.parse_args()
    if a.torch_child:
        torch_child(a.torch_child, a.steps, a.work, a.autocast)
        return 0
    if a.peak_child:
        peak_child()
        return 0
    if a.stream_child:
        stream_child()
        return 0
    if a.shapes_child:
        shapes_child(a.shapes_child)
        return 0
    steps_given = "--steps" in sys.argv or any(x.startswith("--steps=") for x in sys.argv)
    warmup_given = "--warmup" in sys.argv or any(x.startswith("--warmup=") for x in sys.argv)

    # OpenBLAS picks its kernels from the CPU's model; on a virtual machine that hides it, it falls
    # back to a generic core (Prescott, SSE3). ppr then sets OPENBLAS_CORETYPE from the CPU's
    # instructions (runtime/dev/rt_dev_cpu.c); both sides get the same here, unless it is set already.
    if "OPENBLAS_CORETYPE" not in os.environ and cpu_core():
        os.environ["OPENBLAS_CORETYPE"] = cpu_core()
        print("OPENBLAS_CORETYPE set to %s for both sides (from /proc/cpuinfo's flags, as ppr does)" % cpu_core())
    threads = os.environ.get("OMP_NUM_THREADS")
    if not threads or threads != os.environ.get("OPENBLAS_NUM_THREADS"):
        sys.exit("bench: set OMP_NUM_THREADS and OPENBLAS_NUM_THREADS to the same count (bench/run.sh does)")
    nthreads = int(threads)
    torch.set_num_threads(nthreads)
    nsteps = a.warmup + a.steps
    print("threads: OMP_NUM_THREADS=%s OPENBLAS_NUM_THREADS=%s, torch.set_num_threads(%d) (torch %s)"
          % (threads, os.environ["OPENBLAS_NUM_THREADS"], nthreads, torch.__version__))
    for v in ("OPENBLAS_CORETYPE", "OPENBLAS_THREAD_TIMEOUT", "GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OMP_PROC_BIND"):
        print("%s: %s" % (v, os.environ[v] if v in os.environ else "not set"))
    print("steps: %d warm-up + %d timed per run, %d round(s), medians of the timed; load average before: %s"
          % (a.warmup, a.steps, a.rounds, loadavg()))
    ATTENTION, ATTENTION_PROBS = a.attention, a.attention_probs
    if ATTENTION == "fused":
        print("ppr's attention: ppc --attention fused (no S x S scores; ppc's default)")
    else:
        print("ppr's attention: ppc --attention gemm --attention-probs %s%s" % (a.attention_probs,
              " (saved for the backward, as PyTorch's eager attention saves its softmax's output)"
              if a.attention_probs == "keep" else " (recomputed in the backward)"))

    # PyTorch runs twice unless OMP_WAIT_POLICY is set: as the environment is (the same policy as
    # ppr's), and with OMP_WAIT_POLICY=PASSIVE and OPENBLAS_THREAD_TIMEOUT=4, so that its OpenMP
    # threads and OpenBLAS's do not spin against each other (ppr has one pool and runs with the
    # environment as it is; it sets OPENBLAS_THREAD_TIMEOUT=4 when unset, runtime/dev/rt_dev_cpu.c).
    if "OMP_WAIT_POLICY" in os.environ:
        variants = [("OMP_WAIT_POLICY=%s" % os.environ["OMP_WAIT_POLICY"], {})]
    else:
        mine = {"OMP_WAIT_POLICY": "PASSIVE"}
        if "OPENBLAS_THREAD_TIMEOUT" not in os.environ:
            mine["OPENBLAS_THREAD_TIMEOUT"] = "4"
        variants = [("OMP_WAIT_POLICY unset", {}), (" ".join("%s=%s" % kv for kv in mine.items()), mine)]
    # the roofline's peak: one core's SGEMM on large squares, measured now and again before each of
    # ppr's runs (a model's bound takes the median of its own)
    peak = measure("peak", 1)
    print("single-core SGEMM peak: %.1f GFLOP/s at the start (torch.mm of 1024, 2048 and 3072 square, the best of 3 "
          "each; measured again before each of ppr's runs, and a model's GEMM lower bound is its GEMM FLOPs / (threads "
          "x the median of those))" % peak)
    rows, brows, ok = [], [], True
    for name in a.models.split(","):
        if name not in MODELS:
            sys.exit("bench: unknown model '%s' (%s)" % (name, ", ".join(MODELS)))
        spec = MODELS[name]
        cfg = spec["config"]
        warmup = a.warmup if warmup_given else spec.get("warmup", a.warmup)
        nsteps = warmup + (a.steps if steps_given else spec.get("steps", a.steps))
        B, S, M = spec["step"]["micro_batch"], spec["step"]["seq"], spec["step"]["microbatches"]
        work = os.path.join(a.work, name)
        os.makedirs(work, exist_ok=True)
        names = [n for n, _, _ in models.param_specs("minimind", cfg)]
        P0 = models.init_params("minimind", cfg, WEIGHT_SEED)
        weights = os.path.join(work, "weights.safetensors")
        write_weights(weights, P0, names)
        toks = make_tokens(cfg["vocab"], nsteps * M * B * S + 1, TOKEN_SEED)  # no wrap-around
        tokens = os.path.join(work, "tokens.bin")
        write_tokens(tokens, toks)

        nparams = sum(P0[n].numel() for n in names)
        print("%s: %d params, %d tokens/step; %d warm-up + %d timed steps a run"
              % (name, nparams, B * S * M, warmup, nsteps - warmup))
        pm, tm, peaks, ratios, profs, tpeaks, tratios, streams = [], [[] for _ in variants], [], [], [], [], [], []
        tshapes, sratios = [], []
        for r in range(a.rounds):
            peaks.append(measure("peak", 1))  # this host's speed drifts within minutes: the peak beside ppr's run
            # and what the threads together reach now (the bound assumes threads x one core's peak)
            tpeaks.append(measure("peak", nthreads) if nthreads > 1 else peaks[-1])
            streams.append(measure("stream", nthreads))  # and the memory rate the kernels' bytes meet
            pl, ms = run_ppr(a.build, work, spec, weights, tokens, nsteps)
            pm += ms[warmup:]
            # where the time goes: a PPR_PROFILE run of as many steps right after (a clock read an
            # instruction: 6% of tiny's step, so not in the timed run)
            profs.append(run_ppr(a.build, work, spec, weights, tokens, nsteps, profile=True)[2])
            # the same shapes through torch.mm on as many threads, right after: how near the
            # threads' rate on the step's own products ppr's GEMMs are (the bound's peak is one
            # core's on large squares, times the threads)
            tshapes.append(sum(torch_shapes(profs[-1][5], nthreads, work)))
            sratios.append(tshapes[-1] * nthreads * peaks[-1] / (profs[-1][0] * 1e3))
            # this round's step against the bound at the peak measured just before it
            ratios.append(statistics.median(ms[warmup:]) * nthreads * peaks[-1] / (profs[-1][0] * 1e3))
            tratios.append(statistics.median(ms[warmup:]) * tpeaks[-1] / (profs[-1][0] * 1e3))
            for v, (label, extra) in enumerate(variants):
                tl, ms = run_torch_child(name, nsteps, work, extra)
                tm[v] += ms[warmup:]
                if r == 0:
                    rel0 = abs(pl[0] - tl[0]) / abs(tl[0])
                    relmax = max(abs(p - t) / abs(t) for p, t in zip(pl, tl))
                    good = rel0 <= LOSS_RTOL
                    ok &= good
                    print("  step-1 loss ppr %.7f torch (%s) %.7f: rel %.1e %s; max rel over %d steps %.1e"
                          % (pl[0], label, tl[0], rel0, "OK" if good else "MISMATCH (> 1e-4)", nsteps, relmax))
        pmed = statistics.median(pm)
        print("  %-34s ms/step: median %8.2f  min %8.2f  max %8.2f" % ("ppr", pmed, min(pm), max(pm)))
        meds = []
        for v, (label, _) in enumerate(variants):
            meds.append(statistics.median(tm[v]))
            print("  %-34s ms/step: median %8.2f  min %8.2f  max %8.2f" % ("torch, " + label, meds[-1], min(tm[v]), max(tm[v])))
        gflop = profs[0][0]
        mpeak = statistics.median(peaks)
        bound = gflop / (nthreads * mpeak) * 1e3
        ratio, tratio = statistics.median(ratios), statistics.median(tratios)
        pstep, pgemm = sum(p[1] for p in profs), sum(p[2] for p in profs)
        rest = 100 * (pstep - pgemm) / pstep
        print("  roofline: %.2f GFLOP of GEMMs a step, lower bound %.2f ms at %d x %.1f GFLOP/s (the median of the "
              "peaks measured before each of ppr's runs: %s); ppr's step %.2fx its bound (the median over rounds of "
              "each round's median step / the bound at the peak measured just before it: %s); PPR_PROFILE runs "
              "beside them: GEMMs %.2f of %.2f ms a step, the rest %.1f%%"
              % (gflop, bound, nthreads, mpeak, ", ".join("%.1f" % x for x in peaks), ratio,
                 ", ".join("%.2f" % x for x in ratios), pgemm / len(profs), pstep / len(profs), rest))
        kspan, kms = sum(p[3] for p in profs) / len(profs), sum(p[4] for p in profs) / len(profs)
        mstream = statistics.median(streams)
        print("  memory: ppr's kernels span %.1f MB a step (their buffer arguments, PPR_PROFILE), %.1f GB/s over "
              "their %.2f ms; the memory rate beside ppr's runs (torch add_ over 64 MB, %d thread%s: 3 x 64 MB "
              "moved): %s GB/s, at whose median the spans alone take %.2f ms"
              % (kspan, kspan / kms if kms > 0 else 0, kms, nthreads, "" if nthreads == 1 else "s",
                 ", ".join("%.1f" % x for x in streams), kspan / mstream))
        if nthreads > 1:
            print("  the %d threads' own SGEMM peak beside ppr's runs (the same products): %s GFLOP/s, %.2fx one "
                  "core's; ppr's step %.2fx the bound at it (per round: %s)"
                  % (nthreads, ", ".join("%.1f" % x for x in tpeaks), statistics.median(tpeaks) / mpeak, tratio,
                     ", ".join("%.2f" % x for x in tratios)))
        gratio = statistics.median(p[2] / t for p, t in zip(profs, tshapes))
        print("  the step's GEMM shapes through torch.mm (torch.bmm a batch) on %d thread%s, each repeated on its "
              "operands (caches warm), a triangle's prorated to its products: %s ms a step, %s x the bound at the "
              "round's peak (per round); ppr's GEMMs in place %.2fx that (the median over rounds)"
              % (nthreads, "" if nthreads == 1 else "s", ", ".join("%.2f" % x for x in tshapes),
                 ", ".join("%.2f" % x for x in sratios), gratio))
        rows.append((name, pmed, meds, bound, ratio, tratio, rest, gratio))
        if not a.no_bf16:
            # bf16: ppr's --precision bf16 and torch.autocast, the second wait-policy variant for
            # torch (ppr's own settings) when there are two
            label, extra = variants[-1]
            bm, om, am = [], [], []
            dnnl = subprocess.run([os.path.join(a.build, "ppr"), "--help"], stdout=subprocess.PIPE,
                                  universal_newlines=True).stdout.find("--onednn") >= 0
            for r in range(a.rounds):
                bl, ms = run_ppr(a.build, work, spec, weights, tokens, nsteps, precision="bf16")
                bm += ms[warmup:]
                if dnnl:
                    ol, ms = run_ppr(a.build, work, spec, weights, tokens, nsteps, precision="bf16", flags=["--onednn"])
                    om += ms[warmup:]
                al, ms = run_torch_child(name, nsteps, work, extra, autocast=True)
                am += ms[warmup:]
                if r == 0:
                    b1, a1 = abs(bl[0] - pl[0]) / abs(pl[0]), abs(al[0] - pl[0]) / abs(pl[0])
                    print("  bf16 step-1 loss: ppr %.7f (%.1e from ppr fp32)%s, torch.autocast %.7f (%.1e from fp32)"
                          % (bl[0], b1, ", with --onednn %.7f" % ol[0] if dnnl else "", al[0], a1))
            bmed, amed = statistics.median(bm), statistics.median(am)
            omed = statistics.median(om) if om else float("nan")
            print("  %-34s ms/step: median %8.2f  min %8.2f  max %8.2f" % ("ppr bf16", bmed, min(bm), max(bm)))
            if om:
                print("  %-34s ms/step: median %8.2f  min %8.2f  max %8.2f" % ("ppr bf16 --onednn", omed, min(om), max(om)))
            print("  %-34s ms/step: median %8.2f  min %8.2f  max %8.2f"
                  % ("torch.autocast bf16, " + label, amed, min(am), max(am)))
            brows.append((name, pmed, bmed, omed, amed, label, b1, a1))

    print("load average after: %s" % loadavg())
    print()
    head = "| model | threads | ppr ms/step |"
    for label, _ in variants:
        head += " torch ms/step (%s) | torch/ppr |" % label
    head += " GEMM bound ms | ppr/bound | ppr/bound at the threads' peak | non-GEMM % | ppr GEMMs / torch.mm's |"
    print(head)
    print("|---|---|---|" + "---|---|" * len(variants) + "---|---|---|---|---|")
    for name, pmed, meds, bound, ratio, tratio, rest, gratio in rows:
        line = "| %s | %d | %.2f |" % (name, nthreads, pmed)
        for tmed in meds:
            line += " %.2f | %.2f |" % (tmed, tmed / pmed)
        line += " %.2f | %.2f | %.2f | %.1f | %.2f |" % (bound, ratio, tratio, rest, gratio)
        print(line)
    print("(torch/ppr > 1: ppr is faster; medians of %d round(s) of timed steps, each run after its warm-up "
          "steps; the bound: the step's GEMM FLOPs at the single-core peak (the median of those beside ppr's runs) "
          "times the threads; ppr/bound: the median over rounds of each round's median step / the bound at the peak "
          "measured just before it; at the threads' peak: the same with the bound at the SGEMM peak of all the "
          "threads together, measured beside it (one thread: the same); non-GEMM: the share of ppr's step outside "
          "GEMMs, from a PPR_PROFILE run of as many steps after each timed run; ppr GEMMs / torch.mm's: the "
          "GEMMs' time in that run over torch.mm's on the same shapes and threads, each product repeated with its "
          "caches warm)" % a.rounds)
    if brows:
        print()
        print("| model | threads | ppr fp32 ms/step | ppr bf16 ms/step | ppr bf16 --onednn ms/step | "
              "torch.autocast bf16 ms/step (%s) | torch bf16 / ppr bf16 --onednn | step-1 loss vs fp32: ppr bf16 | "
              "torch.autocast |" % brows[0][5])
        print("|---|---|---|---|---|---|---|---|---|")
        for name, pmed, bmed, omed, amed, _, b1, a1 in brows:
            print("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.1e | %.1e |"
                  % (name, nthreads, pmed, bmed, omed, amed, amed / omed, b1, a1))
        print("(bf16: ppr --precision bf16; PyTorch's forward and loss under torch.autocast(\"cpu\", "
              "dtype=torch.bfloat16), its weights, gradients and AdamW fp32 as ppr's)")
    if not ok:
        print("LOSS MISMATCH: the two sides do not compute the same step (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
