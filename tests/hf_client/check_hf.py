#!/usr/bin/env python3
"""check_hf.py - ppr against Hugging Face transformers (make test-hf).

For small Llama (Llama-3.1 RoPE scaling), Qwen2, GPT-2, Mistral (a sliding window shorter than the
sequence), Phi-3 (fused projections), Gemma (scaled embeddings, (1 + w) norms, GeGLU), Gemma 2
(soft caps, alternating windows, extra norms; its eager attention) and, when this transformers
has it, Qwen3 models built from the configs in tests/hf/ with
random weights:

  save_pretrained -> ppc --from-hf -> one ppr step with lr 0 on one rank, pp 2 and tp 2 x pp 2
  (mpirun)
  -> the loss (LOSS_TOL) and every gradient (GRAD_TOL, --save-grads) against transformers
  -> ppr --save FOLDER (sharded for one model): config.json, the weights, the init folder's
     generation_config.json and tokenizer.json, trainer/ -> from_pretrained loads it with no
     missing or unexpected keys and the same weights, bit for bit
  -> 20 greedy tokens of ppr --generate (one rank, tp 2 x pp 2) = transformers' generate(do_sample=False).

GPT-2 also starts from a GPT2Model checkpoint (the hub's names, without "transformer."), which the
.pdl's checkpoint { optional_prefix } block lets --init read.

    python3 tests/hf_client/check_hf.py BUILD_DIR [NAME...]     last line: "N passed, M failed"
    (NAME: the configs of tests/hf/ to check, all of them and the tokenizer by default)
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import torch
import transformers
from safetensors.torch import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
B, S, M = 2, 16, 4  # micro-batch, sequence, micro-batches of the step
MPIRUN = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-x", "OMP_NUM_THREADS=1", "-np", "4"]

passed = failed = 0
# Both sides sum in float32 in their own orders: the losses (near 6, an ulp 4.8e-7) differ by up to
# 4.7e-7 and the gradients by up to 8.2e-8 (absolute, Gemma 2's; entries up to ~1e-2); each limit
# is 4-6x that.
LOSS_TOL, GRAD_TOL = 2e-6, 5e-7


def report(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    return ok


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        print("  $ " + " ".join(cmd) + "\n" + r.stdout)
    return r


def write_tokens(path, toks, vocab):
    """An llm.c token file: version 1 (uint16) for a vocabulary up to 65536, else 2 (uint32)."""
    ver, fmt = (1, "H") if vocab <= 65536 else (2, "I")
    hdr = [0] * 256
    hdr[0], hdr[1], hdr[2] = 20240520, ver, len(toks)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *hdr))
        f.write(struct.pack("<%d%s" % (len(toks), fmt), *toks))


def reference(model, toks):
    """The step's mean loss and the gradients of it, as ppr reads the batches (docs/ppr.md, "Data")."""
    model.zero_grad()
    model.train(False)  # no dropout: ppc does not model it
    total = 0.0
    for m in range(M):
        rows = [toks[(m * B + b) * S:(m * B + b) * S + S + 1] for b in range(B)]
        x = torch.tensor([r[:S] for r in rows])
        y = torch.tensor([r[1:] for r in rows])
        logits = model(input_ids=x, use_cache=False).logits  # (no cache: Gemma 2's needs torch 2)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)) / M
        loss.backward()
        total += loss.item()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    return total, grads


def compare_grads(label, path, ref):
    got = load_file(path)
    worst, where = 0.0, ""
    missing = [n for n in ref if n not in got]
    extra = [n for n in got if n not in ref]
    for n, g in ref.items():
        if n in got:
            d = (got[n] - g).abs().max().item()
            if d > worst:
                worst, where = d, n
    report(not missing and not extra and worst <= GRAD_TOL,
           "%s: %d gradients, max |diff| %.3g (%s)%s" % (label, len(ref), worst, where,
                                                         " missing %s extra %s" % (missing, extra)
                                                         if missing or extra else ""))
    return worst


def step_loss(log):
    with open(log) as f:  # the first step's record, after the start line
        return [o for o in map(json.loads, f) if "step" in o][0]["loss"]


def check_generate(name, model, hf, pdl, prompt, build, d):
    """20 greedy tokens of ppr --generate (one rank, and tp 2 x pp 2) = generate(do_sample=False).
    The generation programs' sequence holds the prompt and the 20 (no window slides past them)."""
    ppc, ppr = os.path.join(build, "ppc"), os.path.join(build, "ppr")
    with torch.no_grad():
        want = model.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False, min_new_tokens=20,
                              pad_token_id=0, attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                              use_cache=name != "gemma2")[0].tolist()  # Gemma 2's cache needs torch 2
    ids = ",".join(map(str, prompt))
    # an llm.c tokenizer file printing token i as " i": ids whatever the vocabulary (a model of 256
    # tokens would print bytes)
    numbers = os.path.join(d, "numbers.bin")
    with open(numbers, "wb") as f:
        f.write(struct.pack("<256i", *([20240328, 1, model.config.vocab_size] + [0] * 253)))
        for i in range(model.config.vocab_size):
            f.write(bytes([len(" %d" % i)]) + (" %d" % i).encode())
    for label, opts, pre in (("one rank", [], []), ("tp 2 x pp 2", ["--tp", "2", "--pp", "2"], MPIRUN)):
        gen = os.path.join(d, "gen-" + label.replace(" ", ""))
        ok = run([ppc, pdl, "--seq", "32", "--generate", "-o", gen] + opts).returncode == 0
        r = subprocess.run(pre + [ppr, gen, "--init", hf, "--generate", "20", "--prompt-ids", ids,
                                 "--tokenizer", numbers],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) if ok else None
        got = [int(t) for t in r.stdout.split()] if r and r.returncode == 0 else []
        report(got == want, "%s, %s: 20 greedy tokens of ppr --generate = generate(do_sample=False)%s" %
               (name, label, "" if got == want else " (ppr %s, transformers %s%s)" %
                (got[len(prompt):], want[len(prompt):], "; " + r.stderr[-300:] if r else "")))


def check(name, cfg_dir, build, tmp):
    with open(os.path.join(cfg_dir, "config.json")) as f:
        arch = json.load(f)["architectures"][0]
    if not hasattr(transformers, arch):
        print("SKIP %s: transformers %s has no %s" % (name, transformers.__version__, arch))
        return
    cfg = transformers.AutoConfig.from_pretrained(cfg_dir)
    if name == "gemma2":  # its soft-capped scores: the eager attention (SDPA would not cap them)
        cfg._attn_implementation = "eager"
    torch.manual_seed(1234)
    model = getattr(transformers, arch)(cfg).float()
    with torch.no_grad():  # nonzero norms and biases, so their gradients and loading are tested too
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    d = os.path.join(tmp, name)
    hf = os.path.join(d, "hf")
    model.save_pretrained(hf, safe_serialization=True)  # with its generation_config.json
    shutil.copy(os.path.join(ROOT, "tests", "fixtures", "tokenizers", "gpt2.json"), os.path.join(hf, "tokenizer.json"))
    ppc, ppr = os.path.join(build, "ppc"), os.path.join(build, "ppr")
    pdl = os.path.join(d, name + ".pdl")
    if not report(run([ppc, "--from-hf", hf, "-o", pdl]).returncode == 0, "%s: ppc --from-hf" % name):
        return
    one, pipe, mesh = os.path.join(d, "one"), os.path.join(d, "p2"), os.path.join(d, "t2p2")
    common = ["--micro-batch", str(B), "--seq", str(S), "--microbatches", str(M)]
    ok = run([ppc, pdl] + common + ["-o", one]).returncode == 0
    ok = ok and run([ppc, pdl] + common + ["--pp", "2", "-o", pipe]).returncode == 0
    ok = ok and run([ppc, pdl] + common + ["--tp", "2", "--pp", "2", "-o", mesh]).returncode == 0
    if not report(ok, "%s: ppc for one rank, pp 2 and tp 2 x pp 2" % name):
        return
    g = torch.Generator().manual_seed(7)
    toks = torch.randint(0, cfg.vocab_size, (M * B * S + 1,), generator=g).tolist()
    data = os.path.join(d, "tokens.bin")
    write_tokens(data, toks, cfg.vocab_size)
    loss, grads = reference(model, toks)
    for label, stages, pre in (("one rank", one, []), ("pp 2", pipe, MPIRUN[:-1] + ["2"]),
                               ("tp 2 x pp 2", mesh, MPIRUN)):
        tag = os.path.basename(stages)
        grad_path, log = os.path.join(d, "grads-%s.safetensors" % tag), os.path.join(d, "log-%s.jsonl" % tag)
        r = run(pre + [ppr, stages, "--init", hf, "--data", data, "--steps", "1", "--lr", "0", "--save-grads",
                       grad_path, "--log", log, "--quiet"])
        if not report(r.returncode == 0, "%s, %s: ppr --init the transformers checkpoint, one step" % (name, label)):
            continue
        got = step_loss(log)
        report(abs(got - loss) <= LOSS_TOL, "%s, %s: loss %.7f, transformers %.7f (|diff| %.2g)" %
               (name, label, got, loss, abs(got - loss)))
        compare_grads("%s, %s" % (name, label), grad_path, grads)
    check_generate(name, model, hf, pdl, toks[:8], build, d)
    # --save as a folder transformers loads (sharded for GPT-2), from the mesh's gathered weights
    out = os.path.join(d, "saved")
    extra = ["--save-shard-size", "100kB"] if name == "gpt2" else []
    r = run(MPIRUN + [ppr, mesh, "--init", hf, "--steps", "0", "--save", out, "--quiet"] + extra)
    if not report(r.returncode == 0, "%s: ppr --save FOLDER from tp 2 x pp 2" % name):
        return
    files = sorted(os.listdir(out))
    weights = [f for f in files if f.startswith("model")]  # model.safetensors, or shards and their index
    hub = sorted(["config.json", "generation_config.json", "tokenizer.json", "trainer"] + weights)
    same = all(open(os.path.join(hf, f), "rb").read() == open(os.path.join(out, f), "rb").read()
               for f in ("generation_config.json", "tokenizer.json"))
    report(files == hub and sorted(os.listdir(os.path.join(out, "trainer"))) ==
           ["optimizer.safetensors", "trainer_state.json"] and same,
           "%s: the saved folder is a hub folder: %s, the init folder's generation config and tokenizer, "
           "the training state in trainer/" % (name, " ".join(files)))
    back, info = transformers.AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    report(not bad and type(back).__name__ == arch,
           "%s: from_pretrained(%s) is a %s with no missing or unexpected keys %s" %
           (name, ", ".join(files), type(back).__name__, bad if bad else ""))
    a, b = model.state_dict(), back.state_dict()
    diff = [k for k in a if k not in b or not torch.equal(a[k], b[k])]
    report(not diff, "%s: the same %d tensors, bit for bit%s" % (name, len(a), " (differ: %s)" % diff[:5] if diff else ""))
    if name == "gpt2":  # the hub's names: GPT2Model's state dict, without "transformer."
        base = os.path.join(d, "base")
        model.transformer.save_pretrained(base, safe_serialization=True)
        r = run([ppr, one, "--init", base, "--data", data, "--steps", "1", "--lr", "0", "--log",
                 os.path.join(d, "log-base.jsonl"), "--quiet"])
        ok = r.returncode == 0 and abs(step_loss(os.path.join(d, "log-base.jsonl")) - loss) <= LOSS_TOL
        report(ok, "gpt2: --init a GPT2Model checkpoint (names without 'transformer.'): the same loss")


def check_tokenize(build, tmp):
    """tools/tokenize.py: a word-level tokenizer.json of 300 and of 70000 entries; version 1 and 2
    files, the validation split, and ppr's check of the tokens against a model's vocabulary."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    d = os.path.join(tmp, "tok")
    os.makedirs(d)
    docs = os.path.join(d, "docs.jsonl")
    with open(docs, "w") as f:
        for i in range(10):
            f.write(json.dumps({"text": " ".join("w%d" % ((i * 37 + k) % 300) for k in range(50))}) + "\n")
    one = None
    for vocab in (300, 70000):
        t = Tokenizer(models.WordLevel({"w%d" % i: i for i in range(vocab)}, unk_token="w0"))
        t.pre_tokenizer = pre_tokenizers.Whitespace()
        tj = os.path.join(d, "tok%d.json" % vocab)
        t.save(tj)
        r = run([sys.executable, os.path.join(ROOT, "tools", "tokenize.py"), "--tokenizer", tj, "--val-frac", "0.2",
                 "--out-dir", d, "--name", "v%d" % vocab, docs])
        ver = 1 if vocab <= 65536 else 2
        ok = r.returncode == 0
        if ok:
            with open(os.path.join(d, "v%d_train.bin" % vocab), "rb") as f:
                hdr = struct.unpack("<3i", f.read(12))
            ok = hdr == (20240520, ver, 400) and os.path.getsize(os.path.join(d, "v%d_val.bin" % vocab)) == \
                1024 + 100 * 2 * ver
        report(ok, "tools/tokenize.py: vocabulary %d: version %d files, 8 documents to train, 2 to val" % (vocab, ver))
        if vocab == 300:  # --tokenizer-out: llm.c's tokenizer file, ppr --tokenizer's
            tf = os.path.join(d, "tok300.bin")
            r = run([sys.executable, os.path.join(ROOT, "tools", "tokenize.py"), "--tokenizer", tj,
                     "--tokenizer-out", tf])
            ok = r.returncode == 0
            if ok:
                with open(tf, "rb") as f:
                    raw = f.read()
                ok = struct.unpack("<3i", raw[:12]) == (20240328, 1, 300)
                at, toks = 1024, []
                while ok and at < len(raw):
                    n = raw[at]
                    toks.append(raw[at + 1:at + 1 + n])
                    at += 1 + n
                ok = ok and toks == [("w%d" % i).encode() for i in range(300)]
            report(ok, "tools/tokenize.py --tokenizer-out: 300 tokens, each its bytes")
        one = one or os.path.join(tmp, "qwen2", "one")  # vocabulary 512
    # version 2 tokens below the model's vocabulary read; 512 and above refused by position
    ppr = os.path.join(build, "ppr")
    r = run([ppr, one, "--data", os.path.join(d, "v70000_train.bin"), "--steps", "1", "--lr", "0", "--quiet"])
    report(r.returncode == 0, "ppr reads a version 2 (uint32) token file")
    write_tokens(os.path.join(d, "big.bin"), [1, 2, 3, 70000, 4], 70001)
    r = subprocess.run([ppr, one, "--data", os.path.join(d, "big.bin")], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    report(r.returncode == 1 and "big.bin: token 70000 at position 3 is not below the vocabulary's 512" in r.stdout,
           "ppr refuses a token at or above the vocabulary, naming its position: %s" % r.stdout.strip()[-120:])


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
    print("transformers %s, torch %s" % (transformers.__version__, torch.__version__))
    transformers.logging.set_verbosity_error()  # its warnings are not the test's (one of 4.45's fails to format)
    tmp = tempfile.mkdtemp(prefix="ppr-hf-")
    os.environ.setdefault("PPC_CACHE", os.path.join(tmp, "cache"))
    try:
        names = sys.argv[2:] or ["llama3", "qwen2", "gpt2", "qwen3", "mistral", "phi3", "gemma", "gemma2"]
        for name in names:
            os.makedirs(os.path.join(tmp, name))
            check(name, os.path.join(ROOT, "tests", "hf", name), build, tmp)
        if not sys.argv[2:]:
            check_tokenize(build, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
