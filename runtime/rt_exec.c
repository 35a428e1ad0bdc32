/* rt_exec.c - the executor: one aligned arena, the kernel object (dlopen), gemm via OpenBLAS, the step schedule. */
#include "rt_prog.h"
#include "rt_comm.h"

#include <cblas.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

typedef void (*KernelFn)(void **args);

/* PPR_PROFILE=1 (any value but empty or 0): time every instruction and schedule entry of every
 * step but the first (warm-up), by kind, gemm shape and kernel, and print a per-step summary on
 * stderr when the executor is closed. Off: one branch per instruction. */
#define PROF_KINDS 16 /* instruction kinds; a larger RtInstrKind counts as the last */
typedef struct {
    int blk, ta, tb, m, n, k, batch;
    int64_t calls;
    double ms;
} ProfGemm;
typedef struct {
    int on;
    int64_t steps;
    double step_ms, zero_grads_ms, blk_ms[RT_NBLK], kind_ms[PROF_KINDS];
    int64_t kind_n[PROF_KINDS];
    double *kern_ms; /* per RtProg.kernels */
    int64_t *kern_n;
    ProfGemm *gemm;
    int ngemm, capgemm;
} Prof;

/* --trace: the timeline of every step (rt_exec_trace). */
typedef struct {
    int on, oom;
    double t0;         /* rt_now_ms at the trace's start */
    RtEvent *ev;
    int64_t n, cap;
    double wall_ms, compute_ms; /* the last step's */
} Trace;

struct RtExec {
    const RtProg *p;
    unsigned char *arena;
    void *so;
    KernelFn *fn; /* per RtProg.kernels */
    Prof prof;
    RtComm *comm; /* NULL: one rank */
    Trace tr;
};

/* The value an args[] entry points to (a pointer variable, a float or an int64). */
typedef union {
    void *ptr;
    float f;
    int64_t i;
} ArgVal;

static void set_err(char *err, size_t errlen, const char *fmt, ...) RT_FMT(3, 4);
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* One step's state. */
typedef struct {
    RtExec *x;
    const RtData *d;
    int64_t step;
    const RtHyper *h;
    float scal[RT_NSCALAR];
    double loss, grad_norm;
    int prof; /* PPR_PROFILE and not the first step */
    RtHook hook; /* before grad_norm, once per step */
    void *ctx;
    char *err;
    size_t errlen;
    double hook_ms, coll_ms; /* --trace: time in the hook, and in collectives inside OPT */
} Step;

double rt_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Record [t0, t1) (rt_now_ms values) as an event of the trace. */
static void trace_add(RtExec *x, int kind, int64_t step, double t0, double t1, const char *fmt, ...) RT_FMT(6, 7);
static void trace_add(RtExec *x, int kind, int64_t step, double t0, double t1, const char *fmt, ...) {
    Trace *t = &x->tr;
    if (!t->on || t->oom) return;
    if (t->n == t->cap) {
        int64_t cap = t->cap ? 2 * t->cap : 1024;
        RtEvent *ne = realloc(t->ev, (size_t)cap * sizeof *ne);
        if (!ne) {
            t->oom = 1;
            return;
        }
        t->ev = ne;
        t->cap = cap;
    }
    RtEvent *e = &t->ev[t->n++];
    memset(e, 0, sizeof *e);
    e->ts = (t0 - t->t0) * 1e3;
    e->dur = (t1 - t0) * 1e3;
    e->kind = kind;
    e->step = (int32_t)(step + 1);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->name, sizeof e->name, fmt, ap);
    va_end(ap);
}

void rt_exec_set_comm(RtExec *x, RtComm *c) { x->comm = c; }

void rt_exec_trace(RtExec *x, double t0_ms) {
    x->tr.on = 1;
    x->tr.t0 = t0_ms;
}

const RtEvent *rt_exec_events(const RtExec *x, int64_t *n, int *oom) {
    *n = x->tr.on ? x->tr.n : 0;
    *oom = x->tr.oom;
    return x->tr.on ? x->tr.ev : NULL;
}

void rt_exec_step_times(const RtExec *x, double *wall_ms, double *compute_ms) {
    *wall_ms = x->tr.wall_ms;
    *compute_ms = x->tr.compute_ms;
}

static double prof_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void prof_instr(Prof *pr, int b, const RtInstr *in, double ms) {
    int k = (int)in->kind < PROF_KINDS ? (int)in->kind : PROF_KINDS - 1;
    pr->kind_ms[k] += ms;
    pr->kind_n[k]++;
    pr->blk_ms[b] += ms;
    if (in->kind == RT_I_KERNEL && pr->kern_ms) {
        pr->kern_ms[in->kernel] += ms;
        pr->kern_n[in->kernel]++;
    } else if (in->kind == RT_I_GEMM) {
        ProfGemm *g = NULL;
        for (int i = 0; i < pr->ngemm && !g; i++) {
            ProfGemm *c = &pr->gemm[i];
            if (c->blk == b && c->ta == in->ta && c->tb == in->tb && c->m == in->m && c->n == in->n &&
                c->k == in->k && c->batch == in->batch)
                g = c;
        }
        if (!g) {
            if (pr->ngemm == pr->capgemm) {
                int cap = pr->capgemm ? 2 * pr->capgemm : 64;
                ProfGemm *ng = realloc(pr->gemm, (size_t)cap * sizeof *ng);
                if (!ng) return;
                pr->gemm = ng;
                pr->capgemm = cap;
            }
            g = &pr->gemm[pr->ngemm++];
            *g = (ProfGemm){b, in->ta, in->tb, in->m, in->n, in->k, in->batch, 0, 0};
        }
        g->calls++;
        g->ms += ms;
    }
}

static const char *prof_kind_name(int k) {
    switch (k) {
    case RT_I_BATCH: return "batch";
    case RT_I_ZERO: return "zero";
    case RT_I_KERNEL: return "kernel";
    case RT_I_GEMM: return "gemm";
    case RT_I_SEED: return "seed";
    case RT_I_LOSS: return "loss";
    case RT_I_GRAD_NORM: return "grad_norm";
    case RT_I_ALLREDUCE_TIED: return "allreduce_tied";
    case RT_I_ALLREDUCE: return "allreduce";
    default: return "other";
    }
}

/* A kernel's op: its name without the "kN_" prefix ppc gives it. */
static const char *prof_op(const char *name) {
    const char *u = strchr(name, '_');
    if (name[0] == 'k' && u && u > name + 1 && strspn(name + 1, "0123456789") == (size_t)(u - name - 1)) return u + 1;
    return name;
}

static int prof_gemm_cmp(const void *a, const void *b) {
    double x = ((const ProfGemm *)a)->ms, y = ((const ProfGemm *)b)->ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

typedef struct {
    const char *op;
    int kernels;
    int64_t calls;
    double ms;
} ProfOp;

static int prof_op_cmp(const void *a, const void *b) {
    double x = ((const ProfOp *)a)->ms, y = ((const ProfOp *)b)->ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void prof_report(const RtExec *x) {
    const Prof *pr = &x->prof;
    const RtProg *p = x->p;
    FILE *o = stderr;
    if (pr->steps < 1) {
        fprintf(o, "ppr profile: no step counted (the first step is warm-up): run 2 or more steps\n");
        return;
    }
    double n = (double)pr->steps, step = pr->step_ms / n, sum = 0;
    for (int k = 0; k < PROF_KINDS; k++) sum += pr->kind_ms[k];
    fprintf(o, "ppr profile: %s, %lld steps counted (not the first), per step: %.3f ms, %.3f ms in instructions\n",
            p->model, (long long)pr->steps, step, sum / n);
    fprintf(o, "  by block:    ");
    for (int b = 0; b < RT_NBLK; b++) fprintf(o, " %s %.3f ms", rt_block_name(b), pr->blk_ms[b] / n);
    fprintf(o, "  zero_grads %.3f ms\n", pr->zero_grads_ms / n);
    fprintf(o, "  by instruction:");
    for (int k = 0; k < PROF_KINDS; k++)
        if (pr->kind_n[k])
            fprintf(o, " %s %.3f ms (%.1f%%, %lld calls)", prof_kind_name(k), pr->kind_ms[k] / n,
                    step > 0 ? 100 * pr->kind_ms[k] / pr->step_ms : 0, (long long)(pr->kind_n[k] / pr->steps));
    fprintf(o, "\n");

    ProfGemm *g = malloc((size_t)(pr->ngemm ? pr->ngemm : 1) * sizeof *g);
    if (g) {
        if (pr->ngemm) memcpy(g, pr->gemm, (size_t)pr->ngemm * sizeof *g);
        qsort(g, (size_t)pr->ngemm, sizeof *g, prof_gemm_cmp);
        double fl = 0;
        for (int i = 0; i < pr->ngemm; i++) fl += 2.0 * g[i].m * g[i].n * g[i].k * g[i].batch * (double)g[i].calls;
        double gms = pr->kind_ms[RT_I_GEMM];
        fprintf(o, "  gemm: %.2f GFLOP per step at %.1f GFLOP/s; shapes by time (C[M,N] = op(A)[M,K] op(B)[K,N], BATCH "
                   "of them per call):\n", fl / n * 1e-9, gms > 0 ? fl / (gms * 1e6) : 0);
        fprintf(o, "    %-9s %-5s %6s %6s %6s %6s %10s %9s %6s %8s\n", "block", "TA TB", "M", "N", "K", "BATCH",
                "calls/step", "ms/step", "%", "GFLOP/s");
        for (int i = 0; i < pr->ngemm; i++) {
            double fl = 2.0 * g[i].m * g[i].n * g[i].k * g[i].batch * (double)g[i].calls;
            fprintf(o, "    %-9s %c  %c  %6d %6d %6d %6d %10.1f %9.3f %6.1f %8.2f\n", rt_block_name(g[i].blk),
                    g[i].ta ? 'T' : 'N', g[i].tb ? 'T' : 'N', g[i].m, g[i].n, g[i].k, g[i].batch, g[i].calls / n,
                    g[i].ms / n, 100 * g[i].ms / pr->step_ms, g[i].ms > 0 ? fl / (g[i].ms * 1e6) : 0);
        }
        free(g);
    }

    ProfOp *ops = calloc((size_t)(p->nkernels ? p->nkernels : 1), sizeof *ops);
    if (ops && pr->kern_ms) {
        int nops = 0;
        for (int k = 0; k < p->nkernels; k++) {
            const char *op = prof_op(p->kernels[k]);
            int i = 0;
            while (i < nops && strcmp(ops[i].op, op)) i++;
            if (i == nops) ops[nops++] = (ProfOp){op, 0, 0, 0};
            ops[i].kernels++;
            ops[i].calls += pr->kern_n[k];
            ops[i].ms += pr->kern_ms[k];
        }
        qsort(ops, (size_t)nops, sizeof *ops, prof_op_cmp);
        fprintf(o, "  kernels by op (all kernels kN_OP of one OP together):\n");
        fprintf(o, "    %-22s %7s %10s %9s %6s\n", "op", "kernels", "calls/step", "ms/step", "%");
        for (int i = 0; i < nops; i++)
            fprintf(o, "    %-22s %7d %10.1f %9.3f %6.1f\n", ops[i].op, ops[i].kernels, ops[i].calls / n, ops[i].ms / n,
                    100 * ops[i].ms / pr->step_ms);
    }
    free(ops);
}

int rt_exec_open(const RtProg *p, const char *dir, RtExec **out, char *err, size_t errlen) {
    *out = NULL;
    RtExec *x = calloc(1, sizeof *x);
    RT_CHECK_ALLOC(x);
    x->p = p;
    size_t bytes = (size_t)((p->arena + 63) / 64 * 64);
    x->arena = aligned_alloc(64, bytes);
    if (!x->arena) {
        free(x);
        return RT_FAIL("%s: cannot allocate the arena (%zu bytes)", p->path, bytes);
    }
    memset(x->arena, 0, bytes);
    if (p->nkernels) {
        x->fn = calloc((size_t)p->nkernels, sizeof *x->fn);
        if (!x->fn) {
            rt_exec_close(x);
            return RT_FAIL("out of memory");
        }
    }
    const char *pe = getenv("PPR_PROFILE");
    if (pe && *pe && strcmp(pe, "0")) {
        x->prof.on = 1;
        if (p->nkernels) {
            x->prof.kern_ms = calloc((size_t)p->nkernels, sizeof *x->prof.kern_ms);
            x->prof.kern_n = calloc((size_t)p->nkernels, sizeof *x->prof.kern_n);
            if (!x->prof.kern_ms || !x->prof.kern_n) {
                rt_exec_close(x);
                return RT_FAIL("out of memory");
            }
        }
    }
    size_t plen = strlen(dir) + strlen(p->kernels_file) + 2;
    char *path = malloc(plen);
    if (!path) {
        rt_exec_close(x);
        return RT_FAIL("out of memory");
    }
    size_t dl = strlen(dir);
    snprintf(path, plen, "%s%s%s", dir, dl && dir[dl - 1] == '/' ? "" : "/", p->kernels_file);
    int rc = 0;
    struct stat st;
    if (stat(path, &st) != 0) {
        rc = RT_FAIL("%s: cannot open the kernel object named by %s: %s", path, p->path, strerror(errno));
        goto done;
    }
    x->so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!x->so) {
        const char *e = dlerror();
        rc = RT_FAIL("%s: cannot load the kernel object: %s", path, e ? e : "unknown dlopen error");
        goto done;
    }
    const char *h = dlsym(x->so, "ppk_source_hash");
    if (!h) {
        rc = RT_FAIL("%s: exports no ppk_source_hash: not a ppc kernel object", path);
        goto done;
    }
    if (strncmp(h, p->kernels_hash, 17) != 0) {
        char found[41];
        size_t n = strnlen(h, 40);
        for (size_t i = 0; i < n; i++) found[i] = (h[i] >= ' ' && h[i] < 127) ? h[i] : '?';
        found[n] = 0;
        set_err(err, errlen,
                 "%s: its ppk_source_hash is '%s', %s expects '%s': the kernels and the listing come from different "
                 "ppc runs",
                 path, found, p->path, p->kernels_hash);
        rc = -1;
        goto done;
    }
    /* every kernel the program calls; all missing ones in one message */
    size_t used = 0;
    int missing = 0;
    for (int k = 0; k < p->nkernels; k++) {
        char sym[256];
        snprintf(sym, sizeof sym, "%s__call", p->kernels[k]);
        void *f = dlsym(x->so, sym);
        if (f) {
            memcpy(&x->fn[k], &f, sizeof f);
            continue;
        }
        if (!missing++ && err && errlen) used = (size_t)snprintf(err, errlen, "%s: no kernel", path);
        if (err && used < errlen) used += (size_t)snprintf(err + used, errlen - used, "%s %s (symbol %s)", missing > 1 ? "," : "", p->kernels[k], sym);
    }
    if (missing) {
        if (err && used < errlen) snprintf(err + used, errlen - used, " called by %s", p->path);
        rc = -1;
    }
done:
    free(path);
    if (rc) {
        rt_exec_close(x);
        return rc;
    }
    *out = x;
    return 0;
}

void rt_exec_close(RtExec *x) {
    if (!x) return;
    /* The kernel object is never dlclose'd: it may have started OpenMP worker threads (libgomp,
     * loaded with it), and unloading their code under them crashes at exit. It stays mapped
     * until the process ends; a second rt_exec_open of the same file reuses it. */
    x->so = NULL;
    if (x->prof.on) prof_report(x);
    free(x->prof.kern_ms);
    free(x->prof.kern_n);
    free(x->prof.gemm);
    free(x->tr.ev);
    free(x->fn);
    free(x->arena);
    free(x);
}

float *rt_exec_param(RtExec *x, int i) {
    if (!x || i < 0 || i >= x->p->nparams) return NULL;
    return (float *)(void *)(x->arena + x->p->params[i].off);
}

float *rt_exec_grad(RtExec *x, int i) {
    if (!x || i < 0 || i >= x->p->nparams) return NULL;
    const RtProg *p = x->p;
    return (float *)(void *)(x->arena + p->params[i].off + (p->reg[RT_REG_GRADS].base - p->reg[RT_REG_PARAMS].base));
}

static void *at(const Step *s, const RtPtr *p, int slot) {
    const RtProg *g = s->x->p;
    int64_t off = p->off;
    if (p->in_slot) off += g->reg[RT_REG_SLOTS].base + (int64_t)slot * g->reg[RT_REG_SLOTS].bytes;
    return s->x->arena + off;
}

/* The sum of squares of the gradients of the params this rank owns (not the copies). */
static double grad_sumsq(RtExec *x) {
    double sum = 0;
    for (int i = 0; i < x->p->nparams; i++) {
        if (!x->p->params[i].owned) continue;
        const float *g = rt_exec_grad(x, i);
        double t = 0;
        for (int64_t j = 0; j < x->p->params[i].numel; j++) t += (double)g[j] * g[j];
        sum += t;
    }
    return sum;
}

static int run_block(Step *s, int b, int mb, int slot) {
    const RtProg *g = s->x->p;
    const RtBlock *bk = &g->blk[b];
    for (int n = 0; n < bk->n; n++) {
        const RtInstr *in = &bk->ins[n];
        double t0 = s->prof ? prof_now() : 0;
        switch (in->kind) {
        case RT_I_BATCH: /* local micro-batch mb of replica d is the step's d * (M / dp) + mb */
            rt_data_batch(s->d, s->step, g->dp_rank * g->local_microbatches + mb, g->microbatches, g->micro_batch,
                          g->seq, in->p[0].present ? (int32_t *)at(s, &in->p[0], slot) : NULL,
                          in->p[1].present ? (int32_t *)at(s, &in->p[1], slot) : NULL);
            break;
        case RT_I_ZERO: memset(at(s, &in->p[0], slot), 0, (size_t)in->bytes); break;
        case RT_I_KERNEL: {
            ArgVal val[RT_MAX_KARGS];
            void *args[RT_MAX_KARGS + 1];
            for (int a = 0; a < in->nargs; a++) {
                const RtArg *r = &in->args[a];
                switch (r->kind) {
                case RT_A_PTR: val[a].ptr = at(s, &r->ptr, slot); break;
                case RT_A_F32: val[a].f = r->f; break;
                case RT_A_I64: val[a].i = r->i; break;
                case RT_A_SCALAR: val[a].f = s->scal[r->scalar]; break;
                }
                args[a] = &val[a];
            }
            args[in->nargs] = NULL;
            s->x->fn[in->kernel](args);
            break;
        }
        case RT_I_GEMM: {
            const float *A = at(s, &in->p[0], slot), *B = at(s, &in->p[1], slot);
            float *C = at(s, &in->p[2], slot);
            for (int i = 0; i < in->batch; i++)
                cblas_sgemm(CblasRowMajor, in->ta ? CblasTrans : CblasNoTrans, in->tb ? CblasTrans : CblasNoTrans, in->m,
                            in->n, in->k, in->alpha, A + i * in->sa, in->lda, B + i * in->sb, in->ldb, in->beta,
                            C + i * in->sc, in->ldc);
            break;
        }
        case RT_I_SEED: memcpy(at(s, &in->p[0], slot), &in->value, sizeof in->value); break;
        case RT_I_LOSS: {
            float v;
            memcpy(&v, at(s, &in->p[0], slot), sizeof v);
            s->loss += (double)v / g->microbatches;
            break;
        }
        case RT_I_ALLREDUCE_TIED: {
            double c0 = s->x->tr.on ? rt_now_ms() : 0;
            rt_comm_allreduce_emb(s->x->comm, (float *)at(s, &in->p[0], slot), in->bytes / 4);
            if (s->x->tr.on) {
                double c1 = rt_now_ms();
                s->coll_ms += c1 - c0;
                trace_add(s->x, RT_EV_COLL, s->step, c0, c1, "allreduce_tied");
            }
            break;
        }
        case RT_I_ALLREDUCE: {
            double c0 = s->x->tr.on ? rt_now_ms() : 0;
            rt_comm_allreduce(s->x->comm, in->group, in->sub, in->op, (float *)at(s, &in->p[0], slot), in->bytes / 4);
            if (s->x->tr.on) {
                double c1 = rt_now_ms();
                if (b == RT_BLK_OPTIMIZER) s->coll_ms += c1 - c0;
                const char *op = in->op == RT_OP_MAX ? "max" : "sum";
                if (in->group == RT_G_TP_SUB)
                    trace_add(s->x, RT_EV_COLL, s->step, c0, c1, "allreduce tp/%d %s", in->sub, op);
                else
                    trace_add(s->x, RT_EV_COLL, s->step, c0, c1, "allreduce %s %s", in->group == RT_G_DP ? "dp" : "tp", op);
            }
            break;
        }
        case RT_I_GRAD_NORM: {
            if (s->hook) { /* --save-grads: the gradients now are the summed, unclipped ones */
                double h0 = s->x->tr.on ? rt_now_ms() : 0;
                RtHook hook = s->hook;
                s->hook = NULL;
                if (hook(s->ctx, s->x, s->err, s->errlen)) return -1;
                if (s->x->tr.on) {
                    double h1 = rt_now_ms();
                    s->hook_ms += h1 - h0;
                    trace_add(s->x, RT_EV_HOOK, s->step, h0, h1, "save-grads");
                }
            }
            double local = grad_sumsq(s->x);
            double c0 = s->x->tr.on ? rt_now_ms() : 0;
            s->grad_norm = sqrt(rt_comm_sum(s->x->comm, local));
            if (s->x->tr.on && rt_comm_size(s->x->comm) > 1) {
                double c1 = rt_now_ms();
                s->coll_ms += c1 - c0;
                trace_add(s->x, RT_EV_COLL, s->step, c0, c1, "grad_norm sum");
            }
            s->scal[RT_S_CLIP] = 1.0f;
            if (s->h->use_clip) {
                double c = s->h->clip / (s->grad_norm + 1e-6);
                if (c < 1.0) s->scal[RT_S_CLIP] = (float)c;
            }
            break;
        }
        }
        if (s->prof) prof_instr(&s->x->prof, b, in, prof_now() - t0);
    }
    return 0;
}

/* A comm entry: post its messages, then wait for them. */
static void run_comm(Step *s, const RtEntry *en) {
    RtExec *x = s->x;
    const RtProg *g = x->p;
    RtP2p ops[2];
    char name[40] = "";
    size_t k = 0;
    for (int i = 0; i < en->nops; i++) {
        const RtCommOp *o = &en->op[i];
        const RtBoundary *b = &g->bnd[o->kind];
        int fwd = o->kind == RT_BND_RECV_FWD || o->kind == RT_BND_SEND_FWD;
        int to_next = o->kind == RT_BND_SEND_FWD || o->kind == RT_BND_RECV_BWD;
        ops[i].send = o->kind == RT_BND_SEND_FWD || o->kind == RT_BND_SEND_BWD;
        ops[i].peer = to_next ? g->next : g->prev;
        ops[i].tag = 2 * o->mb + (fwd ? 0 : 1);
        ops[i].buf = at(s, &b->ptr, o->slot);
        ops[i].count = b->bytes / 4;
        if (x->tr.on && k < sizeof name)
            k += (size_t)snprintf(name + k, sizeof name - k, "%s%s %d", i ? " + " : "", rt_boundary_name(o->kind), o->mb);
    }
    double t0 = x->tr.on ? rt_now_ms() : 0;
    rt_comm_p2p_post(x->comm, en->nops, ops);
    double t1 = x->tr.on ? rt_now_ms() : 0;
    rt_comm_p2p_wait(x->comm);
    if (x->tr.on) {
        double t2 = rt_now_ms();
        trace_add(x, RT_EV_POST, s->step, t0, t1, "%s: post", name);
        trace_add(x, RT_EV_WAIT, s->step, t1, t2, "%s: wait", name);
    }
}

int rt_exec_step(RtExec *x, const RtData *d, int64_t step, const RtHyper *h, RtHook before_opt, void *ctx,
                 double *loss, double *gnorm, char *err, size_t errlen) {
    const RtProg *g = x->p;
    Step s;
    memset(&s, 0, sizeof s);
    s.x = x;
    s.d = d;
    s.step = step;
    s.h = h;
    double t = (double)step + 1.0;
    s.scal[RT_S_LR] = (float)h->lr;
    s.scal[RT_S_BETA1] = (float)h->beta1;
    s.scal[RT_S_BETA2] = (float)h->beta2;
    s.scal[RT_S_EPS] = (float)h->eps;
    s.scal[RT_S_WD] = (float)h->wd;
    s.scal[RT_S_BC1] = (float)(1.0 - pow(h->beta1, t));
    s.scal[RT_S_BC2] = (float)(1.0 - pow(h->beta2, t));
    s.scal[RT_S_CLIP] = 1.0f;
    s.grad_norm = NAN;
    s.prof = x->prof.on && step > 0;
    s.hook = before_opt;
    s.ctx = ctx;
    s.err = err;
    s.errlen = errlen;
    double t_step = s.prof ? prof_now() : 0;
    int tr = x->tr.on;
    double step_t0 = tr ? rt_now_ms() : 0, compute = 0;
    for (int e = 0; e < g->nentries; e++) {
        const RtEntry *en = &g->sched[e];
        double t0 = tr ? rt_now_ms() : 0;
        int rc = 0;
        switch (en->kind) {
        case RT_E_ZERO_GRADS: {
            double z0 = s.prof ? prof_now() : 0;
            memset(x->arena + g->reg[RT_REG_GRADS].base, 0, (size_t)g->reg[RT_REG_GRADS].bytes);
            if (s.prof) x->prof.zero_grads_ms += prof_now() - z0;
            if (tr) trace_add(x, RT_EV_ZERO, step, t0, rt_now_ms(), "zero_grads");
            break;
        }
        case RT_E_F:
        case RT_E_B: {
            int fwd = en->kind == RT_E_F;
            rc = run_block(&s, fwd ? RT_BLK_FORWARD : RT_BLK_BACKWARD, en->mb, en->slot);
            if (tr) {
                double t1 = rt_now_ms();
                compute += t1 - t0;
                trace_add(x, fwd ? RT_EV_F : RT_EV_B, step, t0, t1, "%c %d", fwd ? 'F' : 'B', en->mb);
            }
            break;
        }
        case RT_E_COMM: run_comm(&s, en); break;
        case RT_E_OPT: {
            double inner = s.coll_ms + s.hook_ms;
            rc = run_block(&s, RT_BLK_OPTIMIZER, -1, -1);
            if (tr) {
                double t1 = rt_now_ms();
                compute += (t1 - t0) - (s.coll_ms + s.hook_ms - inner);
                trace_add(x, RT_EV_OPT, step, t0, t1, "OPT");
            }
            break;
        }
        }
        if (rc) return -1;
    }
    /* without an OPT entry (a program always has one) the hook still sees the gradients */
    if (s.hook && s.hook(ctx, x, err, errlen)) return -1;
    /* the loss: the last stage's, summed over its tp_rank 0 ranks of every replica (each loss value
     * is divided by the global M already); the same everywhere */
    double t0 = tr ? rt_now_ms() : 0;
    double mine = g->stage == g->pp - 1 && g->tp_rank == 0 ? s.loss : 0.0;
    s.loss = rt_comm_sum(x->comm, mine);
    if (tr) {
        double t1 = rt_now_ms();
        if (rt_comm_size(x->comm) > 1) trace_add(x, RT_EV_COLL, step, t0, t1, "loss sum");
        trace_add(x, RT_EV_STEP, step, step_t0, t1, "step %lld", (long long)(step + 1));
        x->tr.wall_ms = t1 - step_t0 - s.hook_ms;
        x->tr.compute_ms = compute;
    }
    if (s.prof) {
        x->prof.step_ms += prof_now() - t_step;
        x->prof.steps++;
    }
    *loss = s.loss;
    *gnorm = s.grad_norm;
    return 0;
}
