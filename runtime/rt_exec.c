/* rt_exec.c - the executor: one aligned arena, the kernel object (dlopen), gemm via OpenBLAS, the step schedule. */
#include "rt_prog.h"

#include <cblas.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef void (*KernelFn)(void **args);

struct RtExec {
    const RtProg *p;
    unsigned char *arena;
    void *so;
    KernelFn *fn; /* per RtProg.kernels */
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
} Step;

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

static double grad_norm(RtExec *x) {
    double sum = 0;
    for (int i = 0; i < x->p->nparams; i++) {
        const float *g = rt_exec_grad(x, i);
        double t = 0;
        for (int64_t j = 0; j < x->p->params[i].numel; j++) t += (double)g[j] * g[j];
        sum += t;
    }
    return sqrt(sum);
}

static void run_block(Step *s, int b, int mb, int slot) {
    const RtProg *g = s->x->p;
    const RtBlock *bk = &g->blk[b];
    for (int n = 0; n < bk->n; n++) {
        const RtInstr *in = &bk->ins[n];
        switch (in->kind) {
        case RT_I_BATCH:
            rt_data_batch(s->d, s->step, mb, g->microbatches, g->micro_batch, g->seq,
                          in->p[0].present ? (int32_t *)at(s, &in->p[0], slot) : NULL,
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
        case RT_I_GRAD_NORM:
            s->grad_norm = grad_norm(s->x);
            s->scal[RT_S_CLIP] = 1.0f;
            if (s->h->use_clip) {
                double c = s->h->clip / (s->grad_norm + 1e-6);
                if (c < 1.0) s->scal[RT_S_CLIP] = (float)c;
            }
            break;
        }
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
    int hooked = 0;
    for (int e = 0; e < g->nentries; e++) {
        const RtEntry *en = &g->sched[e];
        switch (en->kind) {
        case RT_E_ZERO_GRADS:
            memset(x->arena + g->reg[RT_REG_GRADS].base, 0, (size_t)g->reg[RT_REG_GRADS].bytes);
            break;
        case RT_E_F: run_block(&s, RT_BLK_FORWARD, en->mb, en->slot); break;
        case RT_E_B: run_block(&s, RT_BLK_BACKWARD, en->mb, en->slot); break;
        case RT_E_OPT:
            if (before_opt && !hooked) {
                hooked = 1;
                if (before_opt(ctx, x, err, errlen)) return -1;
            }
            run_block(&s, RT_BLK_OPTIMIZER, -1, -1);
            break;
        }
    }
    if (before_opt && !hooked && before_opt(ctx, x, err, errlen)) return -1;
    *loss = s.loss;
    *gnorm = s.grad_norm;
    return 0;
}
