/* ppr.c - the runtime's command line: load DIR/rank0.prog, initialise, train for N steps, report, save. */
#include "rt_prog.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ERRLEN 65536

static const char usage[] =
    "usage: ppr DIR [options]\n"
    "\n"
    "Runs the program DIR/rank0.prog written by ppc (docs/stage-format.md).\n"
    "\n"
    "  --init W.safetensors        initial weights, by checkpoint name (F32, F16 or BF16)\n"
    "  --seed N                    initialise each param from its init with seed N (default 1)\n"
    "  --data FILE                 training tokens: an llm.c token file, or text whose bytes are\n"
    "                              the tokens (default: a built-in English text)\n"
    "  --steps N                   training steps (default 1)\n"
    "  --lr F                      AdamW learning rate (default 1e-3)\n"
    "  --beta1 F                   (default 0.9)\n"
    "  --beta2 F                   (default 0.95)\n"
    "  --eps F                     (default 1e-8)\n"
    "  --wd F                      weight decay of the params marked decay 1 (default 0.1)\n"
    "  --clip F                    clip the global gradient norm to F (default: no clipping)\n"
    "  --save-grads G.safetensors  the first step's gradients, accumulated over the micro-batches,\n"
    "                              before clipping\n"
    "  --save W.safetensors        the weights after the last step\n"
    "  --log FILE.jsonl            one JSON object per step\n"
    "  --quiet                     no per-step lines on stdout\n"
    "  --help                      this text\n"
    "  --version                   ppr's version and the listing format it reads\n";

typedef struct {
    const char *dir, *init, *data, *save_grads, *save, *log;
    uint64_t seed;
    int have_seed, quiet;
    int64_t steps;
    RtHyper h;
} Cli;

static char err[ERRLEN];

static void bad_usage(const char *fmt, ...) RT_FMT(1, 2);
static void bad_usage(const char *fmt, ...) {
    va_list ap;
    fputs("ppr: error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n", stderr);
    fputs(usage, stderr);
    exit(1);
}

/* Every line of the message gets the prefix. */
static void die(const char *msg) {
    const char *p = msg;
    do {
        const char *nl = strchr(p, '\n');
        int n = nl ? (int)(nl - p) : (int)strlen(p);
        fprintf(stderr, "ppr: error: %.*s\n", n, p);
        p = nl ? nl + 1 : NULL;
    } while (p && *p);
    exit(1);
}

#define CHECK_IO(cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            rt_fail_at(err, sizeof err, __FILE__, __LINE__, __VA_ARGS__);                          \
            die(err);                                                                              \
        }                                                                                          \
    } while (0)

static double num(const char *flag, const char *v, double lo, double hi, int lo_open, int hi_open) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (!*v || *end || errno == ERANGE || !isfinite(x) || x < lo || x > hi || (lo_open && x == lo) ||
        (hi_open && x == hi))
        bad_usage("%s: expected a number in %s%g, %g%s, found '%s'", flag, lo_open ? "(" : "[", lo, hi,
                  hi_open ? ")" : "]", v);
    return x;
}

static uint64_t count(const char *flag, const char *v, uint64_t hi) {
    uint64_t x = 0;
    if (!*v) bad_usage("%s: expected an integer, found ''", flag);
    for (const char *q = v; *q; q++) {
        if (*q < '0' || *q > '9' || x > (UINT64_MAX - 9) / 10) bad_usage("%s: expected an integer in [0, %llu], found '%s'", flag, (unsigned long long)hi, v);
        x = x * 10 + (uint64_t)(*q - '0');
    }
    if (x > hi) bad_usage("%s: expected an integer in [0, %llu], found '%s'", flag, (unsigned long long)hi, v);
    return x;
}

static void parse_cli(int argc, char **argv, Cli *c) {
    memset(c, 0, sizeof *c);
    c->seed = 1;
    c->steps = 1;
    c->h = (RtHyper){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .wd = 0.1, .clip = 0, .use_clip = 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            exit(0);
        }
        if (!strcmp(a, "--version")) {
            printf("ppr %s (reads ppr-program %d)\n", RT_PPR_VERSION, RT_PROG_VERSION);
            exit(0);
        }
        if (!strcmp(a, "--quiet")) {
            c->quiet = 1;
            continue;
        }
        if (a[0] != '-' || !a[1]) {
            if (c->dir) bad_usage("more than one DIR ('%s' and '%s')", c->dir, a);
            c->dir = a;
            continue;
        }
        /* --flag VALUE or --flag=VALUE */
        char flag[32];
        const char *v;
        const char *eq = strchr(a, '=');
        if (eq && (size_t)(eq - a) < sizeof flag) {
            memcpy(flag, a, (size_t)(eq - a));
            flag[eq - a] = 0;
            v = eq + 1;
        } else {
            snprintf(flag, sizeof flag, "%s", a);
            v = NULL;
        }
        static const char *const with_value[] = {"--init", "--seed", "--data", "--steps", "--lr", "--beta1", "--beta2",
                                                 "--eps", "--wd", "--clip", "--save-grads", "--save", "--log"};
        int known = 0;
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++) known |= !strcmp(flag, with_value[k]);
        if (!known) bad_usage("unknown option '%s'", a);
        if (!v) {
            if (i + 1 >= argc) bad_usage("%s needs a value", flag);
            v = argv[++i];
        }
        if (!strcmp(flag, "--init")) c->init = v;
        else if (!strcmp(flag, "--seed")) {
            c->seed = count(flag, v, UINT64_MAX);
            c->have_seed = 1;
        } else if (!strcmp(flag, "--data")) c->data = v;
        else if (!strcmp(flag, "--steps")) c->steps = (int64_t)count(flag, v, 1000000000);
        else if (!strcmp(flag, "--lr")) c->h.lr = num(flag, v, 0, 1e9, 0, 0);
        else if (!strcmp(flag, "--beta1")) c->h.beta1 = num(flag, v, 0, 1, 0, 1);
        else if (!strcmp(flag, "--beta2")) c->h.beta2 = num(flag, v, 0, 1, 0, 1);
        else if (!strcmp(flag, "--eps")) c->h.eps = num(flag, v, 0, 1e9, 1, 0);
        else if (!strcmp(flag, "--wd")) c->h.wd = num(flag, v, 0, 1e9, 0, 0);
        else if (!strcmp(flag, "--clip")) {
            c->h.clip = num(flag, v, 0, 1e30, 1, 0);
            c->h.use_clip = 1;
        } else if (!strcmp(flag, "--save-grads")) c->save_grads = v;
        else if (!strcmp(flag, "--save")) c->save = v;
        else if (!strcmp(flag, "--log")) c->log = v;
        if (!*v) bad_usage("%s: empty value", flag);
    }
    if (!c->dir) bad_usage("no program directory DIR");
    if (c->init && c->have_seed) bad_usage("--init and --seed exclude each other");
    if (c->save_grads && c->steps < 1) bad_usage("--save-grads needs at least one step");
}

static int save_params(const RtProg *p, RtExec *x, const char *path, int grads, char *e, size_t elen) {
    int n = p->nparams;
    const char **names = calloc((size_t)n + 1, sizeof *names);
    int *ndims = calloc((size_t)n + 1, sizeof *ndims);
    const int64_t **shapes = calloc((size_t)n + 1, sizeof *shapes);
    const float **data = calloc((size_t)n + 1, sizeof *data);
    int rc;
    if (!names || !ndims || !shapes || !data) {
        rc = rt_fail_at(e, elen, __FILE__, __LINE__, "out of memory");
    } else {
        for (int i = 0; i < n; i++) {
            names[i] = p->params[i].name;
            ndims[i] = p->params[i].ndim;
            shapes[i] = p->params[i].dims;
            data[i] = grads ? rt_exec_grad(x, i) : rt_exec_param(x, i);
        }
        rc = rt_st_write(path, n, names, ndims, shapes, data, e, elen);
    }
    free(names);
    free(ndims);
    free(shapes);
    free(data);
    return rc;
}

typedef struct {
    const RtProg *p;
    const char *path;
    int done;
} GradSave;

static int save_grads_hook(void *ctx, RtExec *x, char *e, size_t elen) {
    GradSave *g = ctx;
    if (g->done) return 0;
    g->done = 1;
    return save_params(g->p, x, g->path, 1, e, elen);
}

static double now_ms(void) {
    struct timespec ts;
    CHECK_IO(clock_gettime(CLOCK_MONOTONIC, &ts) == 0, "clock_gettime: %s", strerror(errno));
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void json_num(FILE *fp, const char *key, double v, const char *fmt) {
    fprintf(fp, ",\"%s\":", key);
    if (isfinite(v)) fprintf(fp, fmt, v);
    else fputs("null", fp);
}

int main(int argc, char **argv) {
    Cli c;
    parse_cli(argc, argv, &c);

    char *path = malloc(strlen(c.dir) + 16);
    CHECK_IO(path != NULL, "out of memory");
    size_t dl = strlen(c.dir);
    sprintf(path, "%s%srank0.prog", c.dir, dl && c.dir[dl - 1] == '/' ? "" : "/");

    RtProg *p = NULL;
    if (rt_prog_load(path, &p, err, sizeof err)) die(err);
    if (p->tp * p->pp * p->dp != 1) {
        snprintf(err, sizeof err,
                 "%s: mesh tp %d pp %d dp %d: this ppr runs single-rank programs only (tp 1 pp 1 dp 1)", path, p->tp,
                 p->pp, p->dp);
        die(err);
    }
    RtExec *x = NULL;
    if (rt_exec_open(p, c.dir, &x, err, sizeof err)) die(err);

    if (c.init) {
        if (rt_init_load(p, x, c.init, err, sizeof err)) die(err);
    } else {
        rt_init_seed(p, x, c.seed);
    }

    /* the data, unless no step reads it */
    RtData *d = NULL;
    const char *data_name = c.steps == 0 ? "none (0 steps)" : c.data ? c.data : "the built-in text";
    if (c.steps == 0) {
    } else if (c.data) {
        if (rt_data_open(c.data, &d, err, sizeof err)) die(err);
    } else if (rt_data_from_memory((const unsigned char *)rt_default_text, rt_default_text_len, &d, err, sizeof err)) {
        die(err);
    }
    if (d && rt_data_max_token(d) >= p->vocab) {
        snprintf(err, sizeof err, "%s: token id %d is not below the model's vocab %lld (%s)%s", data_name,
                 rt_data_max_token(d), (long long)p->vocab, path, c.data ? "" : "; pass --data");
        die(err);
    }

    FILE *log = NULL;
    if (c.log) {
        log = fopen(c.log, "w");
        CHECK_IO(log != NULL, "%s: cannot open for writing: %s", c.log, strerror(errno));
    }

    int64_t tokens = (int64_t)p->micro_batch * p->seq * p->microbatches;
    if (!c.quiet)
        printf("ppr: %s: model %s, %d params, arena %lld bytes; data %s (%lld tokens); %lld steps of %lld tokens\n",
               path, p->model, p->nparams, (long long)p->arena, data_name, (long long)rt_data_len(d),
               (long long)c.steps, (long long)tokens);
    GradSave gs = {p, c.save_grads, 0};
    for (int64_t s = 0; s < c.steps; s++) {
        double t0 = now_ms(), loss = 0, gnorm = 0;
        if (rt_exec_step(x, d, s, &c.h, c.save_grads ? save_grads_hook : NULL, &gs, &loss, &gnorm, err, sizeof err))
            die(err);
        double ms = now_ms() - t0;
        double tps = ms > 0 ? (double)tokens / (ms * 1e-3) : 0;
        if (!c.quiet) {
            printf("step %lld/%lld  loss %.4f  grad_norm %.4g  lr %.2e  %.1f ms  %.0f tok/s\n", (long long)(s + 1),
                   (long long)c.steps, loss, gnorm, c.h.lr, ms, tps);
            fflush(stdout);
        }
        if (log) {
            fprintf(log, "{\"step\":%lld", (long long)(s + 1));
            json_num(log, "loss", loss, "%.9g");
            json_num(log, "grad_norm", gnorm, "%.9g");
            json_num(log, "lr", c.h.lr, "%.9g");
            json_num(log, "ms", ms, "%.3f");
            json_num(log, "tokens_per_s", tps, "%.1f");
            fputs("}\n", log);
            CHECK_IO(fflush(log) == 0, "%s: write failed: %s", c.log, strerror(errno));
        }
        if (!isfinite(loss)) {
            snprintf(err, sizeof err, "step %lld: the loss is %g; stopping (nothing saved)", (long long)(s + 1), loss);
            die(err);
        }
    }
    if (log) CHECK_IO(fclose(log) == 0, "%s: close failed: %s", c.log, strerror(errno));
    if (c.save && save_params(p, x, c.save, 0, err, sizeof err)) die(err);

    rt_data_close(d);
    rt_exec_close(x);
    rt_prog_free(p);
    free(path);
    return 0;
}
