/* ppr_cli.c - ppr's command line: the --help text, and the options parsed (getopt_long) and checked, each failure
 * a message naming the option as it was written. */
#include "ppr_cli.h"
#include "ppr_args.h"
#include "rt_comm.h"
#include "rt_dev.h"
#include "rt_dev_cpu.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: ppr DIR [options]\n"
    "       ppr --verify CKPT\n"
    "\n"
    "Runs the programs written by ppc (docs/ppr.md): rank R of the MPI world runs\n"
    "DIR/rankR.prog. A mesh of N = tp*pp*dp*cp ranks: mpirun -np N ppr DIR (as root add\n"
    "--allow-run-as-root, with fewer cores than ranks --oversubscribe). Without mpirun ppr is a\n"
    "1-rank world.\n"
    "\n"
    "An argument @FILE stands for FILE's options: one a line (\"--lr 3e-4\", \"--quiet\"; a value\n"
    "with spaces at its ends in double quotes), DIR alone on a line, '#' starting a comment line.\n"
    "\n"
    "Where it runs:\n"
    "  --device D                  cpu (the default; also PPR_DEVICE), opencl, opencl:N (the N-th\n"
    "                              OpenCL device), cuda, cuda:N\n"
    "  --tf32                      cuda: let GEMMs round their inputs to TF32 (tensor cores)\n"
    "  --lt-epilogues              cuda: run the listing's GEMM epilogues (gemm epi:) inside\n"
    "                              cuBLASLt's GEMMs (not yet run on a GPU; without it the GEMM,\n"
    "                              then the epilogue's kernel)\n"
    "  --onednn                    cpu: GEMMs through oneDNN (bf16 on AVX512-BF16 or AMX, several\n"
    "                              times faster; f32 on AVX-512); their\n"
    "                              values then depend on the thread count and each GEMM's shape\n"
    "                              (without it: OpenBLAS, bf16 widened to f32; on AVX-512 the\n"
    "                              same values at any thread count and on every mesh)\n"
    "\n"
    "Weights and data:\n"
    "  --init W                    initial weights, by checkpoint name (F32, F16, BF16 or F64): a\n"
    "                              .safetensors file, a sharded checkpoint's index (*.json) or a\n"
    "                              model folder (model.safetensors or its index)\n"
    "  --seed N                    initialise each param from its init with seed N (default 1)\n"
    "  --dropout-seed N            the key of dropout's masks, which the step, the micro-batch, the\n"
    "                              op and the element's index pick from (default 1; any mesh)\n"
    "  --resume CKPT               continue a run from a --save: its weights, AdamW moments, step\n"
    "                              count and options (trainer_state.json: what shapes the run, not\n"
    "                              --device, --init, --trace, --timeout...); an option given again\n"
    "                              replaces the checkpoint's, and ppr says so. DIR holds the model\n"
    "                              and batch: the same as the checkpoint's; any mesh. Step k+1 on:\n"
    "                              the run ends at --steps, the total. Not with --init or --seed\n"
    "  --data FILE                 training tokens: an llm.c token file (magic 20240520, version 1\n"
    "                              uint16 or 2 uint32 tokens; a *.bin file must be one; tools/\n"
    "                              tokenize.py writes them), or text whose bytes are the tokens\n"
    "                              (a model of at most 256 tokens; default: a built-in English text)\n"
    "\n"
    "Training (AdamW):\n"
    "  --steps N                   training steps in all, a resumed run's included (default 1)\n"
    "  --lr F                      learning rate, the schedule's peak (default 1e-3)\n"
    "  --lr-schedule S             constant (the default), cosine, linear or wsd (warmup, stable,\n"
    "                              decay); the step line and --log show each step's lr\n"
    "  --warmup N                  first N steps: lr rises linearly, step t (1-based) using lr*t/N\n"
    "  --lr-min F                  cosine, linear, wsd: where the decay ends (default 0)\n"
    "  --decay-steps N             cosine, linear: decay over N steps after the warmup (default the\n"
    "                              rest of the run, reaching --lr-min on the last step); wsd: the\n"
    "                              last N steps decay to --lr-min as 1-sqrt (default steps/5)\n"
    "  --beta1 F                   (default 0.9)\n"
    "  --beta2 F                   (default 0.95)\n"
    "  --eps F                     (default 1e-8)\n"
    "  --wd F                      weight decay of the params marked decay 1 (default 0.1)\n"
    "  --clip F                    clip the global gradient norm to F (default: no clipping)\n"
    "\n"
    "Validation (a forward-only pass on the same mesh; val_loss on the step line and in --log):\n"
    "  --val-data FILE             validation tokens, a file like --data\n"
    "  --val-frac F                or the last fraction F (0 < F < 1) of the training data (--data\n"
    "                              or the built-in text), which is then never trained on\n"
    "  --eval-every N              evaluate after every N steps (default: after the last step only)\n"
    "  --val-batches K             micro-batches per evaluation, the same K every time and on every\n"
    "                              mesh: the first K of the validation data (default 8)\n"
    "\n"
    "Text from the model (needs the generation programs: ppc --generate):\n"
    "  --generate N                N tokens after the prompt from the weights (--init, --resume's\n"
    "                              weights, or --seed), printed on stdout; no training\n"
    "  --sample-every N            while training: a sample after every N steps and after the last\n"
    "  --sample-len N              tokens per --sample-every sample (default 64)\n"
    "  --prompt TEXT               the prompt: through --tokenizer's tokenizer.json, or its bytes\n"
    "                              the tokens on a model of 256 (default: the first 8 tokens of\n"
    "                              the training data)\n"
    "  --prompt-ids LIST           or the prompt as token ids, separated by commas or spaces\n"
    "  --temperature T             sample from softmax(logits/T) (default 0: greedy, the argmax)\n"
    "  --top-k K                   sample among the K likeliest tokens only (default: all)\n"
    "  --sample-seed N             the sampler's seed: the same text for the same seed (default 1)\n"
    "  --tokenizer FILE            the model's tokenizer.json (Hugging Face's: byte-level BPE as\n"
    "                              GPT-2, Llama 3, Qwen; SentencePiece-style BPE with byte fallback):\n"
    "                              it encodes --prompt and prints tokens as text; or an llm.c\n"
    "                              tokenizer file, which prints only. Without it a model of 256\n"
    "                              tokens prints bytes, any other token ids\n"
    "\n"
    "Progress (on the step line and in --log): elapsed time, ETA, tokens/s, and\n"
    "  --peak-flops X              a rank's peak FLOP/s (e.g. 8.3e10): the step line shows the MFU,\n"
    "                              the GEMM FLOPs of every rank's F, B and W per second over\n"
    "                              ranks * X\n"
    "\n"
    "Outputs (checked writable before the first step):\n"
    "  --save W                    the weights after the last step: W.safetensors one file, any\n"
    "                              other path a folder transformers' from_pretrained loads\n"
    "                              (model.safetensors or shards and their index; config.json\n"
    "                              when the program came from ppc --from-hf; the tokenizer's\n"
    "                              files and generation_config.json of --init's folder or\n"
    "                              --tokenizer's); and the training state for --resume: the\n"
    "                              folder's trainer/optimizer.safetensors and\n"
    "                              trainer/trainer_state.json, or W.optimizer.safetensors and\n"
    "                              W.trainer_state.json beside the file\n"
    "  --save-every N              also every N steps: --save X is then a folder of checkpoint\n"
    "                              folders X/step-NNNNNN (the step count, 6 digits), the last\n"
    "                              step's too (0: none, the default)\n"
    "  --keep K                    with --save-every: keep the last K of them (default all)\n"
    "  --save-shard-size SIZE      a folder's shard size: bytes, or with kB, MB, GB (1000s) or\n"
    "                              KiB, MiB, GiB (default 5GB, as transformers)\n"
    "  --save-tied-head            also write a tied embedding as lm_head.weight\n"
    "  --model-name NAME           a folder's config.json _name_or_path (default: the config's,\n"
    "                              else the model's name)\n"
    "  --save-grads G.safetensors  the first step's gradients, accumulated over the micro-batches,\n"
    "                              before clipping\n"
    "  --log FILE.jsonl            one JSON object per step, written as it ends; each start adds\n"
    "                              a line {\"start\": STEP, \"run\": ID, ...}. --resume appends to\n"
    "                              its run's log (the steps after the checkpoint's dropped); a\n"
    "                              log of another run, or any other file, is refused\n"
    "  --log-every N               a step line on stdout every N steps (and the first, the last\n"
    "                              and each evaluation); --log keeps every step\n"
    "  --tensorboard DIR           also the log's scalars (loss, val_loss, lr, grad_norm,\n"
    "                              tokens_per_s, mfu) as TensorBoard event files in DIR, one file\n"
    "                              a run, written again from --log at each start; needs --log\n"
    "  --trace FILE.json           every rank's timeline (Chrome trace events, for Perfetto), the\n"
    "                              last step's drawn as FILE.svg, and each rank's measured bubble\n"
    "  --quiet                     no per-step lines on stdout\n"
    "  --stop-file PATH            stop after the step in which PATH appears, as SIGTERM does (for\n"
    "                              launchers that cannot signal the ranks); absent at the start\n"
    "  --exit-file PATH            rank 0 writes the exit status there at the end (for launchers\n"
    "                              that do not pass it on: mpirun without its abort)\n"
    "  --verify CKPT               check a checkpoint (a file, an index or a folder) and the\n"
    "                              training state beside it against their checksums; no DIR, no run\n"
    "\n"
    "  --timeout SECONDS           the watchdog: a rank whose message or collective makes no\n"
    "                              progress for this long says what it waits for, and the job\n"
    "                              ends (default 300; 0: wait forever)\n"
    "  -h, --help                  this text\n"
    "  --version                   ppr's version and the listing format it reads\n"
    "\n"
    "SIGTERM, SIGINT or SIGUSR1 (to a rank, or to mpirun, which passes SIGTERM on) stops every\n"
    "rank after the current step; --save and --trace are written, and ppr exits with status 75.\n"
    "A second signal ends the rank at once, without saving. pprun starts mpirun so that Ctrl-C\n"
    "does this; docs/reliability.md has the details.\n";

static void bad_usage(const char *fmt, ...) RT_FMT(1, 2);
static void bad_usage(const char *fmt, ...) {
  va_list ap;
  fputs("ppr: error: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\nusage: ppr DIR [options]  ('ppr --help' lists them)\n", stderr);
  exit(1);
}

static double num(const char *flag, const char *v, double lo, double hi, int lo_open, int hi_open) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (!*v || *end || errno == ERANGE || !isfinite(x) || x < lo || x > hi || (lo_open && x == lo) ||
      (hi_open && x == hi))
    bad_usage("%s: expected a number in %s%g, %g%s, found '%s'", flag, lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]",
              v);
  return x;
}

static uint64_t count(const char *flag, const char *v, uint64_t hi) {
  uint64_t x = 0;
  if (!*v) bad_usage("%s: expected an integer, found ''", flag);
  for (const char *q = v; *q; q++) {
    if (*q < '0' || *q > '9' || x > (UINT64_MAX - 9) / 10)
      bad_usage("%s: expected an integer in [0, %llu], found '%s'", flag, (unsigned long long)hi, v);
    x = x * 10 + (uint64_t)(*q - '0');
  }
  if (x > hi) bad_usage("%s: expected an integer in [0, %llu], found '%s'", flag, (unsigned long long)hi, v);
  return x;
}

/* A size: an integer of bytes, or with a unit (kB, MB, GB, TB: powers of 1000; KiB, MiB, GiB, TiB:
 * of 1024; B alone), at least 1. */
static uint64_t size_arg(const char *flag, const char *v) {
  static const struct {
    const char *unit;
    uint64_t mult;
  } units[] = {{"", 1},
               {"B", 1},
               {"kB", 1000},
               {"KB", 1000},
               {"MB", 1000000},
               {"GB", 1000000000},
               {"TB", 1000000000000},
               {"KiB", 1ull << 10},
               {"MiB", 1ull << 20},
               {"GiB", 1ull << 30},
               {"TiB", 1ull << 40}};
  size_t digits = strspn(v, "0123456789");
  for (size_t k = 0; digits > 0 && digits <= 15 && k < sizeof units / sizeof units[0]; k++)
    if (!strcmp(v + digits, units[k].unit)) {
      uint64_t x = strtoull(v, NULL, 10) * units[k].mult;
      if (x >= 1 && x <= (1ull << 50)) return x;
    }
  bad_usage("%s: expected a size of 1 byte to 2^50: an integer with an optional unit (B, kB, MB, GB, TB, KiB, MiB, "
            "GiB, TiB), found '%s'",
            flag, v);
  return 0;
}

/* The long options: getopt_long's table and the codes its switch takes. */
typedef enum {
  O_INIT = 256,
  O_SEED,
  O_DATA,
  O_STEPS,
  O_LR,
  O_BETA1,
  O_BETA2,
  O_EPS,
  O_WD,
  O_CLIP,
  O_SAVE_GRADS,
  O_SAVE,
  O_LOG,
  O_TRACE,
  O_DEVICE,
  O_TIMEOUT,
  O_QUIET,
  O_TF32,
  O_LT_EPILOGUES,
  O_ONEDNN,
  O_VERSION,
  O_SHARD_SIZE,
  O_TIED_HEAD,
  O_LR_SCHEDULE,
  O_WARMUP,
  O_LR_MIN,
  O_DECAY_STEPS,
  O_VAL_DATA,
  O_VAL_FRAC,
  O_EVAL_EVERY,
  O_VAL_BATCHES,
  O_PEAK_FLOPS,
  O_RESUME,
  O_SAVE_EVERY,
  O_KEEP,
  O_GENERATE,
  O_SAMPLE_EVERY,
  O_SAMPLE_LEN,
  O_PROMPT,
  O_PROMPT_IDS,
  O_TOKENIZER,
  O_TEMPERATURE,
  O_TOP_K,
  O_SAMPLE_SEED,
  O_DROPOUT_SEED,
  O_VERIFY,
  O_STOP_FILE,
  O_EXIT_FILE,
  O_LOG_EVERY,
  O_TENSORBOARD,
  O_MODEL_NAME,
  O_END /* the count's end: not an option */
} OptCode;

#define NOPT (O_END - O_INIT)
_Static_assert(NOPT <= 64, "PprCli.given holds a bit per option");

/* Whether a --resume takes option o from its checkpoint when the command line does not give it: what
 * shapes the run does; where it runs, where its weights come from and one run's own outputs do not.
 * A --generate takes only the data (its default prompt) and the tokenizer. */
static int inherited(OptCode o, int generating) {
  switch (o) {
  case O_DATA:
  case O_TOKENIZER: return 1;
  case O_STEPS:
  case O_LR:
  case O_BETA1:
  case O_BETA2:
  case O_EPS:
  case O_WD:
  case O_CLIP:
  case O_SAVE:
  case O_LOG:
  case O_QUIET:
  case O_SHARD_SIZE:
  case O_TIED_HEAD:
  case O_MODEL_NAME:
  case O_LR_SCHEDULE:
  case O_WARMUP:
  case O_LR_MIN:
  case O_DECAY_STEPS:
  case O_VAL_DATA:
  case O_VAL_FRAC:
  case O_EVAL_EVERY:
  case O_VAL_BATCHES:
  case O_PEAK_FLOPS:
  case O_SAVE_EVERY:
  case O_KEEP:
  case O_SAMPLE_EVERY:
  case O_SAMPLE_LEN:
  case O_PROMPT:
  case O_PROMPT_IDS:
  case O_TEMPERATURE:
  case O_TOP_K:
  case O_SAMPLE_SEED:
  case O_DROPOUT_SEED:
  case O_LOG_EVERY:
  case O_TENSORBOARD: return !generating;
  case O_INIT:
  case O_SEED:
  case O_RESUME:
  case O_VERIFY:
  case O_GENERATE:
  case O_DEVICE:
  case O_TF32:
  case O_LT_EPILOGUES:
  case O_ONEDNN:
  case O_TIMEOUT:
  case O_STOP_FILE:
  case O_EXIT_FILE:
  case O_SAVE_GRADS:
  case O_TRACE:
  case O_VERSION:
  case O_END: return 0;
  }
  return 0;
}

static const struct option longs[] = {
    {"verify", required_argument, NULL, O_VERIFY},
    {"stop-file", required_argument, NULL, O_STOP_FILE},
    {"exit-file", required_argument, NULL, O_EXIT_FILE},
    {"log-every", required_argument, NULL, O_LOG_EVERY},
    {"tensorboard", required_argument, NULL, O_TENSORBOARD},
    {"init", required_argument, NULL, O_INIT},
    {"seed", required_argument, NULL, O_SEED},
    {"data", required_argument, NULL, O_DATA},
    {"steps", required_argument, NULL, O_STEPS},
    {"lr", required_argument, NULL, O_LR},
    {"beta1", required_argument, NULL, O_BETA1},
    {"beta2", required_argument, NULL, O_BETA2},
    {"eps", required_argument, NULL, O_EPS},
    {"wd", required_argument, NULL, O_WD},
    {"clip", required_argument, NULL, O_CLIP},
    {"save-grads", required_argument, NULL, O_SAVE_GRADS},
    {"save", required_argument, NULL, O_SAVE},
    {"log", required_argument, NULL, O_LOG},
    {"trace", required_argument, NULL, O_TRACE},
    {"device", required_argument, NULL, O_DEVICE},
    {"timeout", required_argument, NULL, O_TIMEOUT},
    {"quiet", no_argument, NULL, O_QUIET},
    {"tf32", no_argument, NULL, O_TF32},
    {"lt-epilogues", no_argument, NULL, O_LT_EPILOGUES},
    {"onednn", no_argument, NULL, O_ONEDNN},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, O_VERSION},
    {"save-shard-size", required_argument, NULL, O_SHARD_SIZE},
    {"save-tied-head", no_argument, NULL, O_TIED_HEAD},
    {"model-name", required_argument, NULL, O_MODEL_NAME},
    {"lr-schedule", required_argument, NULL, O_LR_SCHEDULE},
    {"warmup", required_argument, NULL, O_WARMUP},
    {"lr-min", required_argument, NULL, O_LR_MIN},
    {"decay-steps", required_argument, NULL, O_DECAY_STEPS},
    {"val-data", required_argument, NULL, O_VAL_DATA},
    {"val-frac", required_argument, NULL, O_VAL_FRAC},
    {"eval-every", required_argument, NULL, O_EVAL_EVERY},
    {"val-batches", required_argument, NULL, O_VAL_BATCHES},
    {"peak-flops", required_argument, NULL, O_PEAK_FLOPS},
    {"resume", required_argument, NULL, O_RESUME},
    {"save-every", required_argument, NULL, O_SAVE_EVERY},
    {"keep", required_argument, NULL, O_KEEP},
    {"generate", required_argument, NULL, O_GENERATE},
    {"sample-every", required_argument, NULL, O_SAMPLE_EVERY},
    {"sample-len", required_argument, NULL, O_SAMPLE_LEN},
    {"prompt", required_argument, NULL, O_PROMPT},
    {"prompt-ids", required_argument, NULL, O_PROMPT_IDS},
    {"tokenizer", required_argument, NULL, O_TOKENIZER},
    {"temperature", required_argument, NULL, O_TEMPERATURE},
    {"top-k", required_argument, NULL, O_TOP_K},
    {"sample-seed", required_argument, NULL, O_SAMPLE_SEED},
    {"dropout-seed", required_argument, NULL, O_DROPOUT_SEED},
    {NULL, 0, NULL, 0},
};

/* The positional DIR, the defaults that depend on other options, and the options checked against
 * each other. */
static void check_options(PprCli *c, int argc, char **argv, int have_steps) {
  int have_sampling;
  for (int i = optind; i < argc; i++) {
    if (c->dir) bad_usage("more than one DIR ('%s' and '%s')", c->dir, argv[i]);
    c->dir = argv[i];
  }
  if (c->verify && c->dir) bad_usage("--verify checks a checkpoint alone: drop DIR ('%s')", c->dir);
  if (c->verify) return;
  if (!c->dir) bad_usage("no program directory DIR");
  /* (--tokenizer also names the tokenizer a --save folder copies) */
  have_sampling = c->prompt || c->prompt_ids || (c->tokenizer && !c->save) || c->top_k || c->temperature != 0 ||
                  c->sample_seed != 1;
  if (c->generate && c->sample_every) bad_usage("--generate and --sample-every exclude each other");
  if (c->generate && have_steps)
    bad_usage("--generate samples from the weights without training: drop --steps (while training: --sample-every)");
  if (c->generate) c->steps = 0;
  if (c->sample_len && !c->sample_every) bad_usage("--sample-len is an option of --sample-every");
  if (!c->sample_len) c->sample_len = 64;
  if (have_sampling && !c->generate && !c->sample_every)
    bad_usage("the prompt and sampling options go with --generate N or --sample-every N");
  if (c->prompt && c->prompt_ids) bad_usage("--prompt and --prompt-ids exclude each other");
  if ((c->top_k || c->sample_seed != 1) && c->temperature == 0)
    bad_usage("%s draws samples: give --temperature T too (without it the pick is greedy, the likeliest token)",
              c->top_k ? "--top-k" : "--sample-seed");
  if (c->tensorboard && !c->log) bad_usage("--tensorboard draws from the log: give --log FILE.jsonl too");
  if (c->generate && (c->save || c->save_grads || c->log || c->trace || c->val_data || c->val_frac > 0))
    bad_usage("--generate writes text alone: %s is an option of training", c->save         ? "--save"
                                                                           : c->save_grads ? "--save-grads"
                                                                           : c->log        ? "--log"
                                                                           : c->trace      ? "--trace"
                                                                                           : "validation");
  if (c->resume && !c->generate && c->resume_step > c->steps)
    bad_usage("--steps %lld: the checkpoint %s has done %lld steps (--steps counts the total, the resumed run's "
              "steps included)",
              (long long)c->steps, c->resume, c->resume_step);
  c->sched.lr = c->h.lr;
  c->sched.steps = c->steps;
  char m[512];
  if (rt_lr_check(&c->sched, m, sizeof m)) bad_usage("%s", m);
  if (c->val_data && c->val_frac > 0) bad_usage("--val-data and --val-frac exclude each other");
  if (!c->val_data && c->val_frac == 0 && (c->eval_every || c->val_batches))
    bad_usage("%s needs a validation set: --val-data FILE or --val-frac F",
              c->eval_every ? "--eval-every" : "--val-batches");
  if (!c->val_batches) c->val_batches = 8;
  if (!c->device) c->device = getenv("PPR_DEVICE") && *getenv("PPR_DEVICE") ? getenv("PPR_DEVICE") : "cpu";
  RtDevKind kind;
  int index;
  if (rt_dev_parse(c->device, &kind, &index))
    bad_usage("--device: expected cpu, opencl, opencl:N, cuda or cuda:N, found '%s'%s", c->device,
              getenv("PPR_DEVICE") && c->device == getenv("PPR_DEVICE") ? " (from PPR_DEVICE)" : "");
  if (c->tf32 && kind != RT_DEV_CUDA)
    bad_usage("--tf32 is for --device cuda (the %s device's GEMMs are fp32)", c->device);
  if (c->lt_epilogues && kind != RT_DEV_CUDA)
    bad_usage("--lt-epilogues is for --device cuda (the %s device runs each epilogue's kernel)", c->device);
  if (c->onednn && kind != RT_DEV_CPU) bad_usage("--onednn is for --device cpu, not %s", c->device);
  if (c->onednn && !rt_dev_cpu_onednn())
    bad_usage("--onednn: this ppr was built without oneDNN (apt-get install libdnnl-dev, then make)%s", "");
  if (c->init && c->have_seed) bad_usage("--init and --seed exclude each other");
  if (c->resume && (c->init || c->have_seed))
    bad_usage("--resume and %s exclude each other (--resume loads the weights)", c->init ? "--init" : "--seed");
  if (c->save_grads && c->steps < 1) bad_usage("--save-grads needs at least one step");
  if ((c->save_shard_size || c->save_tied_head || c->model_name) && !c->save)
    bad_usage("%s is an option of --save", c->save_shard_size ? "--save-shard-size"
                                           : c->model_name    ? "--model-name"
                                                              : "--save-tied-head");
  if (c->model_name && rt_ckpt_is_file_path(c->save))
    bad_usage("--model-name names a folder's model (config.json): --save %s is one .safetensors file", c->save);
  if (c->save_every && !c->save) bad_usage("--save-every is an option of --save");
  const char *from_ckpt =
      (c->given >> (O_SAVE_EVERY - O_INIT)) & 1 ? "" : " (--resume's checkpoint's; --save-every 0: none)";
  if (c->keep && !c->save_every && !((c->given >> (O_KEEP - O_INIT)) & 1)) c->keep = 0; /* --resume's, off with it */
  if (c->keep && !c->save_every) bad_usage("--keep is an option of --save-every");
  if (c->save_every && rt_ckpt_is_file_path(c->save))
    bad_usage("--save-every%s: --save %s is one .safetensors file; --save-every writes a folder of checkpoint folders",
              from_ckpt, c->save);
  if (c->save_shard_size && c->save && rt_ckpt_is_file_path(c->save))
    bad_usage("--save-shard-size: --save %s is one .safetensors file; a folder (a path without that ending) "
              "has shards",
              c->save);
  /* the files rank 0 writes: not one file for two of them */
  const char *outs[4] = {c->save, c->save_grads, c->log, c->trace};
  static const char *const names[4] = {"--save", "--save-grads", "--log", "--trace"};
  for (int a = 0; a < 4; a++)
    for (int b = a + 1; b < 4; b++)
      if (outs[a] && outs[b] && !strcmp(outs[a], outs[b]))
        bad_usage("%s and %s name the same file '%s'", names[a], names[b], outs[a]);
}

/* The options of argv into c (from the defaults), each one's value (as written; "" for a switch) in
 * vals and its bit in *set; *have_steps: --steps was given. No check across options. */
static void parse_opts(int argc, char **argv, PprCli *c, const char **vals, uint64_t *set, int *have_steps) {
  memset(c, 0, sizeof *c);
  memset(vals, 0, NOPT * sizeof *vals);
  *set = 0;
  c->seed = 1;
  c->steps = 1;
  c->timeout = RT_COMM_TIMEOUT;
  c->sample_seed = 1;
  *have_steps = 0;
  c->h = (RtHyper){
      .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .wd = 0.1, .clip = 0, .use_clip = 0, .dropout_seed = 1};
  opterr = 0; /* the messages below name the option as it was written */
  optind = 0; /* getopt_long from the start, again for --resume's second pass */
  for (int o, li = -1; (o = getopt_long(argc, argv, ":h", longs, &li)) != -1; li = -1) {
    /* the option as written: argv's last for a missing value or an unknown one, else its name */
    const char *a = argv[optind - 1], *v = optarg;
    char flag[32];
    if (li >= 0) snprintf(flag, sizeof flag, "--%s", longs[li].name);
    else snprintf(flag, sizeof flag, "%.*s", (int)strcspn(a, "="), a);
    if (v && !*v) bad_usage("%s: empty value", flag);
    switch (o) {
    case 'h': fputs(usage, stdout); exit(0);
    case O_VERSION: printf("ppr %s (reads ppr-program %d)\n", RT_PPR_VERSION, RT_PROG_VERSION); exit(0);
    case O_QUIET: c->quiet = 1; break;
    case O_TF32: c->tf32 = 1; break;
    case O_LT_EPILOGUES: c->lt_epilogues = 1; break;
    case O_ONEDNN: c->onednn = 1; break;
    case O_INIT: c->init = v; break;
    case O_RESUME: c->resume = v; break;
    case O_SAVE_EVERY: c->save_every = (int64_t)count(flag, v, 1000000000); break; /* 0: none */
    case O_KEEP:
      c->keep = (int64_t)count(flag, v, 1000000000);
      if (!c->keep) bad_usage("%s: expected at least 1 checkpoint, found '%s'", flag, v);
      break;
    case O_SEED:
      c->seed = count(flag, v, UINT64_MAX);
      c->have_seed = 1;
      break;
    case O_DATA: c->data = v; break;
    case O_STEPS:
      c->steps = (int64_t)count(flag, v, 1000000000);
      *have_steps = 1;
      break;
    case O_LR: c->h.lr = num(flag, v, 0, 1e9, 0, 0); break;
    case O_BETA1: c->h.beta1 = num(flag, v, 0, 1, 0, 1); break;
    case O_BETA2: c->h.beta2 = num(flag, v, 0, 1, 0, 1); break;
    case O_EPS: c->h.eps = num(flag, v, 0, 1e9, 1, 0); break;
    case O_WD: c->h.wd = num(flag, v, 0, 1e9, 0, 0); break;
    case O_CLIP:
      c->h.clip = num(flag, v, 0, 1e30, 1, 0);
      c->h.use_clip = 1;
      break;
    case O_SAVE_GRADS: c->save_grads = v; break;
    case O_SAVE: c->save = v; break;
    case O_SHARD_SIZE: c->save_shard_size = size_arg(flag, v); break;
    case O_TIED_HEAD: c->save_tied_head = 1; break;
    case O_MODEL_NAME: c->model_name = v; break;
    case O_LOG: c->log = v; break;
    case O_TRACE: c->trace = v; break;
    case O_DEVICE: c->device = v; break;
    case O_TIMEOUT: c->timeout = num(flag, v, 0, 1e9, 0, 0); break;
    case O_LR_SCHEDULE: {
      int k = rt_lr_kind(v);
      if (k < 0) bad_usage("%s: expected constant, cosine, linear or wsd, found '%s'", flag, v);
      c->sched.kind = (RtLrKind)k;
      break;
    }
    case O_WARMUP: c->sched.warmup = (int64_t)count(flag, v, 1000000000); break;
    case O_LR_MIN:
      c->sched.lr_min = num(flag, v, 0, 1e9, 0, 0);
      c->sched.have_lr_min = 1;
      break;
    case O_DECAY_STEPS:
      c->sched.decay = (int64_t)count(flag, v, 1000000000);
      if (!c->sched.decay) bad_usage("%s: expected at least 1 step, found '%s'", flag, v);
      break;
    case O_VAL_DATA: c->val_data = v; break;
    case O_VAL_FRAC: c->val_frac = num(flag, v, 0, 1, 1, 1); break;
    case O_EVAL_EVERY:
      c->eval_every = (int64_t)count(flag, v, 1000000000);
      if (!c->eval_every) bad_usage("%s: expected at least 1 step, found '%s'", flag, v);
      break;
    case O_VAL_BATCHES:
      c->val_batches = (int64_t)count(flag, v, 1000000);
      if (!c->val_batches) bad_usage("%s: expected at least 1 micro-batch, found '%s'", flag, v);
      break;
    case O_PEAK_FLOPS: c->peak_flops = num(flag, v, 0, 1e30, 1, 0); break;
    case O_GENERATE:
      c->generate = (int64_t)count(flag, v, 1000000000);
      if (!c->generate) bad_usage("%s: expected at least 1 token, found '%s'", flag, v);
      break;
    case O_SAMPLE_EVERY:
      c->sample_every = (int64_t)count(flag, v, 1000000000);
      if (!c->sample_every) bad_usage("%s: expected at least 1 step, found '%s'", flag, v);
      break;
    case O_SAMPLE_LEN:
      c->sample_len = (int64_t)count(flag, v, 1000000000);
      if (!c->sample_len) bad_usage("%s: expected at least 1 token, found '%s'", flag, v);
      break;
    case O_PROMPT: c->prompt = v; break;
    case O_PROMPT_IDS: c->prompt_ids = v; break;
    case O_TOKENIZER: c->tokenizer = v; break;
    case O_TEMPERATURE: c->temperature = num(flag, v, 0, 1e6, 0, 0); break;
    case O_TOP_K: c->top_k = (int64_t)count(flag, v, INT32_MAX); break;
    case O_SAMPLE_SEED: c->sample_seed = count(flag, v, UINT64_MAX); break;
    case O_DROPOUT_SEED: c->h.dropout_seed = count(flag, v, UINT64_MAX); break;
    case O_VERIFY: c->verify = v; break;
    case O_STOP_FILE: c->stop_file = v; break;
    case O_EXIT_FILE: c->exit_file = v; break;
    case O_TENSORBOARD: c->tensorboard = v; break;
    case O_LOG_EVERY:
      c->log_every = (int64_t)count(flag, v, 1000000000);
      if (!c->log_every) bad_usage("%s: expected at least 1 step, found '%s'", flag, v);
      break;
    case ':': bad_usage("%s needs a value", flag); break;
    default: /* '?': getopt_long's answer for an option it does not know */
      if (optopt && a[0] == '-' && a[1] != '-') bad_usage("unknown option '-%c'", optopt);
      bad_usage("unknown option '%s'", a);
    }
    if (o >= O_INIT && o < O_END) {
      vals[o - O_INIT] = v ? v : "";
      *set |= 1ull << (o - O_INIT);
    }
  }
}

/* The option named name (without "--"; n bytes of it), or O_END. */
static OptCode code_of(const char *name, size_t n) {
  for (const struct option *l = longs; l->name; l++)
    if (l->val >= O_INIT && strlen(l->name) == n && !strncmp(l->name, name, n)) return (OptCode)l->val;
  return O_END;
}

static const char *name_of(OptCode o) {
  for (const struct option *l = longs; l->name; l++)
    if (l->val == (int)o) return l->name;
  return "?";
}

/* "--name=value" (or "--name" for a switch): malloc'ed, exits when out of memory. */
static char *option_text(OptCode o, const char *v) {
  const char *name = name_of(o);
  char *t = malloc(strlen(name) + strlen(v) + 4);
  if (!t) bad_usage("out of memory");
  sprintf(t, "--%s%s%s", name, *v ? "=" : "", v);
  return t;
}

/* --resume: argv with the checkpoint's options before this command line's (which, later, win), and
 * the line that says what this command line changed. Exits on a damaged list. */
static char **resume_argv(PprCli *c, int argc, char **argv, const char **given, uint64_t given_set, int *oargc) {
  char err[1024], **saved;
  int ns;
  char *run_id;
  long long step;
  if (ppr_args_saved(c->resume, &saved, &ns, &run_id, &step, err, sizeof err)) bad_usage("--resume: %s", err);
  c->resume_step = step;
  c->run_id = run_id;
  char **m = calloc((size_t)(argc + ns + 1), sizeof *m);
  size_t cap = 256;
  for (int k = 0; k < ns; k++) cap += strlen(saved[k]) + 64;
  for (int i = 0; i < argc; i++) cap += strlen(argv[i]) + 64;
  char *notes = calloc(cap, 1);
  if (!m || !notes) bad_usage("out of memory");
  int n = 0, generating = (given_set >> (O_GENERATE - O_INIT)) & 1;
  uint64_t listed = 0; /* the options the checkpoint lists */
  m[n++] = argv[0];
  for (int k = 0; k < ns; k++) {
    const char *eq = strchr(saved[k], '=');
    size_t len = eq ? (size_t)(eq - saved[k] - 2) : strlen(saved[k] + 2);
    OptCode o = code_of(saved[k] + 2, len);
    if (o == O_END || !inherited(o, 0))
      bad_usage("--resume: %s's training state lists '%s', not an option a resumed run takes", c->resume, saved[k]);
    listed |= 1ull << (o - O_INIT);
    if (!inherited(o, generating)) {
      free(saved[k]);
      continue;
    }
    m[n++] = saved[k];
    const char *was = eq ? eq + 1 : "", *now = given[o - O_INIT];
    if (now && strcmp(now, was))
      snprintf(notes + strlen(notes), cap - strlen(notes), "%s --%s %s (was %s)", *notes ? "," : "", name_of(o),
               *now ? now : "on", *was ? was : "on");
  }
  for (int o = O_INIT; o < O_END; o++)
    if (given[o - O_INIT] && !((listed >> (o - O_INIT)) & 1) && inherited((OptCode)o, generating))
      snprintf(notes + strlen(notes), cap - strlen(notes), "%s --%s %s (new)", *notes ? "," : "", name_of((OptCode)o),
               *given[o - O_INIT] ? given[o - O_INIT] : "on");
  for (int i = 1; i < argc; i++) m[n++] = argv[i];
  free(saved); /* its strings are m's now */
  c->resume_notes = *notes ? notes : NULL;
  if (!*notes) free(notes);
  *oargc = n;
  return m;
}

void ppr_cli_parse(int argc, char **argv, PprCli *c) {
  char err[1024], **av;
  int ac, have_steps;
  if (ppr_args_expand(argc, argv, &ac, &av, err, sizeof err)) bad_usage("%s", err);
  const char *given[NOPT], *vals[NOPT];
  uint64_t given_set, set;
  parse_opts(ac, av, c, given, &given_set, &have_steps);
  memcpy(vals, given, sizeof vals);
  set = given_set;
  const char *run_id = NULL, *notes = NULL;
  long long resume_step = -1;
  if (c->resume) {
    int mc;
    char **mv = resume_argv(c, ac, av, given, given_set, &mc);
    run_id = c->run_id;
    notes = c->resume_notes;
    resume_step = c->resume_step;
    parse_opts(mc, mv, c, vals, &set, &have_steps);
    free(av); /* its strings are mv's now */
    ac = mc;
    av = mv;
  }
  c->argv = av; /* the options point into it for the whole run */
  c->given = given_set;
  c->resume_step = resume_step;
  check_options(c, ac, av, have_steps);
  c->run_id = run_id ? run_id : ppr_args_new_run_id();
  c->resume_notes = notes;
  /* the run's options as trainer_state.json keeps them, for the next --resume */
  int n = 0;
  c->args = calloc(NOPT + 1, sizeof *c->args);
  if (!c->args || !c->run_id) bad_usage("out of memory");
  for (int o = O_INIT; o < O_END; o++)
    if (((set >> (o - O_INIT)) & 1) && inherited((OptCode)o, 0))
      c->args[n++] = option_text((OptCode)o, vals[o - O_INIT]);
}

int ppr_cli_given(const PprCli *c, const char *flag) {
  OptCode o = strncmp(flag, "--", 2) ? O_END : code_of(flag + 2, strlen(flag + 2));
  return o != O_END && ((c->given >> (o - O_INIT)) & 1);
}

/* One line "--NAME VALUE" of the agreed text (NULL strings as "-"). */
static void agreed_str(char *b, size_t n, const char *name, const char *v) {
  size_t l = strlen(b);
  snprintf(b + l, n - l, "--%s %s\n", name, v ? v : "-");
}

static void agreed_num(char *b, size_t n, const char *name, double v) {
  char t[40];
  snprintf(t, sizeof t, "%.17g", v);
  agreed_str(b, n, name, t);
}

char *ppr_cli_agreed(const PprCli *c) {
  size_t n = 8192 + (c->prompt ? strlen(c->prompt) : 0) + (c->prompt_ids ? strlen(c->prompt_ids) : 0);
  char *b = calloc(n, 1);
  if (!b) return NULL;
  const char *strs[][2] = {{"init", c->init},
                           {"resume", c->resume},
                           {"data", c->data},
                           {"val-data", c->val_data},
                           {"save", c->save},
                           {"save-grads", c->save_grads},
                           {"prompt", c->prompt},
                           {"prompt-ids", c->prompt_ids},
                           {"lr-schedule", rt_lr_name(c->sched.kind)}};
  for (size_t k = 0; k < sizeof strs / sizeof strs[0]; k++) agreed_str(b, n, strs[k][0], strs[k][1]);
  const struct {
    const char *name;
    double v;
  } nums[] = {{"steps", (double)c->steps},
              {"lr", c->h.lr},
              {"beta1", c->h.beta1},
              {"beta2", c->h.beta2},
              {"eps", c->h.eps},
              {"wd", c->h.wd},
              {"clip", c->h.use_clip ? c->h.clip : -1},
              {"warmup", (double)c->sched.warmup},
              {"lr-min", c->sched.lr_min},
              {"decay-steps", (double)c->sched.decay},
              {"seed", (double)c->seed},
              {"dropout-seed", (double)c->h.dropout_seed},
              {"val-frac", c->val_frac},
              {"eval-every", (double)c->eval_every},
              {"val-batches", (double)c->val_batches},
              {"save-every", (double)c->save_every},
              {"keep", (double)c->keep},
              {"generate", (double)c->generate},
              {"sample-every", (double)c->sample_every},
              {"sample-len", (double)c->sample_len},
              {"temperature", c->temperature},
              {"top-k", (double)c->top_k},
              {"sample-seed", (double)c->sample_seed},
              {"tf32", c->tf32},
              {"lt-epilogues", c->lt_epilogues},
              {"onednn", c->onednn}};
  for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++) agreed_num(b, n, nums[k].name, nums[k].v);
  return b;
}
