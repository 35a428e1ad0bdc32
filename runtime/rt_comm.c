/* rt_comm.c - the transport of ppr over MPI: start-up, the communicators, the pipeline's messages and the deterministic collectives on device buffers (staged through host memory when the arena is not host memory). */
#if defined(__SANITIZE_ADDRESS__)
#define _GNU_SOURCE /* dl_iterate_phdr, for pin_libraries */
#endif
#include "rt_comm.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef PPR_CUDA
#include <nccl.h>
#endif

#define CHUNK ((size_t)1 << 30) /* the most bytes of one MPI message of a gather or broadcast */
#define MAX_REQ 4

/* A message's host copy: a received one is written to the device after the wait. */
typedef struct {
    void *buf;
    size_t cap;
    int64_t off, bytes; /* recv into the device at off; bytes 0: nothing to write */
} Stage;

struct RtComm {
    int mpi; /* MPI_Init_thread ran */
    int rank, size;
    int local_rank;            /* among the ranks on this machine (MPI_COMM_TYPE_SHARED) */
    MPI_Comm world;            /* a duplicate of MPI_COMM_WORLD: the pipeline's messages */
    MPI_Comm aux;              /* another: checks, sums, gathers, broadcasts */
    MPI_Comm pp, tp, dp, emb;  /* from rt_comm_groups; MPI_COMM_NULL when absent */
    int nsub;                  /* the tp/R groups some rank's listing uses, one communicator per R */
    int *sub_r;
    MPI_Comm *sub;
    MPI_Request req[MAX_REQ];
    int nreq;
    Stage stage[MAX_REQ];      /* per request: the host copy of a device buffer, or none */
    float *red;                /* allreduce scratch: red_cap floats */
    size_t red_cap;
    float *host;               /* an allreduce's host copy of a device buffer: host_cap floats */
    size_t host_cap;
    int *ints;                 /* allreduce counts and displacements: 4 * ints_cap */
    int ints_cap;
    int nccl;                  /* rt_comm_use_device: NCCL carries the messages and collectives */
#ifdef PPR_CUDA
    ncclComm_t npp, ntp, ndp, nemb, *nccl_sub; /* one per MPI group, NULL where the group is absent */
    int prev, next, pp_prev, pp_next;     /* the pipeline neighbours: world ranks, ranks in npp */
#endif
};

/* ---- errors -------------------------------------------------------------------------------- */

_Noreturn static void mpi_fail(int rc, const char *call, const char *file, int line) {
    char s[MPI_MAX_ERROR_STRING];
    int n = 0, rank = -1;
    if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error code %d", rc);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "ppr: error: rank %d: MPI: %s failed: %s [%s:%d]\n", rank, call, s, file, line);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* Every MPI call goes through this: on failure, the call, MPI's message and where, then MPI_Abort. */
#define MPI_CHECK(call)                                                                            \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS) mpi_fail(rc_, #call, __FILE__, __LINE__);                          \
    } while (0)

_Noreturn void rt_comm_internal(const char *what, const char *file, int line) {
    int started = 0, ended = 0;
    fprintf(stderr, "ppr: error: internal: %s [%s:%d]\n", what, file, line);
    fflush(stderr);
    MPI_Initialized(&started);
    MPI_Finalized(&ended);
    if (started && !ended) MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* ---- start and end ------------------------------------------------------------------------- */

static int launched(void) {
    const char *f = getenv("PPR_MPI");
    if (f && !strcmp(f, "1")) return 1;
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

int rt_comm_init(int *argc, char ***argv, RtComm **out, char *err, size_t errlen) {
    *out = NULL;
    RtComm *c = calloc(1, sizeof *c);
    RT_CHECK_ALLOC(c);
    c->size = 1;
    c->world = c->aux = c->pp = c->tp = c->dp = c->emb = MPI_COMM_NULL;
    if (launched()) {
        int provided = 0;
        int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) {
            free(c);
            return RT_FAIL("MPI_Init_thread failed (error code %d)", rc);
        }
        c->mpi = 1;
        /* errors come back to MPI_CHECK (and its message) instead of aborting inside MPI;
         * communicators made from this one inherit it */
        MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
        MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &c->size));
        MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c->world));
        MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c->aux));
        MPI_Comm node;
        MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node));
        MPI_CHECK(MPI_Comm_rank(node, &c->local_rank));
        MPI_CHECK(MPI_Comm_free(&node));
    }
    *out = c;
    return 0;
}

#if defined(__SANITIZE_ADDRESS__)
#include <dlfcn.h>
#include <link.h>
/* Under AddressSanitizer only. MPI_Finalize unloads Open MPI's plugins and PMIx; LeakSanitizer
 * reports at exit, and can then not name the library of a leak inside them, so the suppressions
 * by library (tests/lsan-mpi.supp) would not match. Keep every loaded library mapped. */
#define MAX_PIN 1024
static int pin_collect(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    const char **names = data;
    int n = 0;
    while (n < MAX_PIN && names[n]) n++;
    if (n < MAX_PIN - 1 && info->dlpi_name && info->dlpi_name[0]) names[n] = info->dlpi_name;
    return 0;
}
static void pin_libraries(void) {
    static const char *names[MAX_PIN];
    dl_iterate_phdr(pin_collect, names); /* no dlopen while the loader's list is locked */
    for (int i = 0; i < MAX_PIN && names[i]; i++) (void)dlopen(names[i], RTLD_LAZY | RTLD_NOLOAD);
}
#else
static void pin_libraries(void) {}
#endif

static void comm_free(MPI_Comm *m) {
    if (*m != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(m));
}

void rt_comm_finalize(RtComm *c) {
    if (!c) return;
#ifdef PPR_CUDA
    if (c->nccl) {
        ncclComm_t all[4] = {c->npp, c->ntp, c->ndp, c->nemb};
        for (int i = 0; i < 4; i++)
            if (all[i]) ncclCommDestroy(all[i]);
        for (int i = 0; i < c->nsub; i++)
            if (c->nccl_sub[i]) ncclCommDestroy(c->nccl_sub[i]);
        free(c->nccl_sub);
    }
#endif
    if (c->mpi) {
        for (int i = 0; i < c->nsub; i++) comm_free(&c->sub[i]);
        comm_free(&c->emb);
        comm_free(&c->dp);
        comm_free(&c->tp);
        comm_free(&c->pp);
        comm_free(&c->aux);
        comm_free(&c->world);
        pin_libraries();
        MPI_CHECK(MPI_Finalize());
    }
    free(c->sub);
    free(c->sub_r);
    free(c->red);
    free(c->host);
    for (int i = 0; i < MAX_REQ; i++) free(c->stage[i].buf);
    free(c->ints);
    free(c);
}

_Noreturn void rt_comm_abort(RtComm *c, int code) {
    fflush(stdout);
    fflush(stderr);
    if (c && c->mpi) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

int rt_comm_rank(const RtComm *c) { return c ? c->rank : 0; }
int rt_comm_size(const RtComm *c) { return c ? c->size : 1; }
int rt_comm_uses_mpi(const RtComm *c) { return c && c->mpi; }
int rt_comm_local_rank(const RtComm *c) { return c ? c->local_rank : 0; }

/* ---- collectives --------------------------------------------------------------------------- */

int rt_comm_all_ok(RtComm *c, int ok) {
    int v = ok ? 1 : 0, r = v;
    if (c && c->mpi) MPI_CHECK(MPI_Allreduce(&v, &r, 1, MPI_INT, MPI_MIN, c->aux));
    return r;
}

void rt_comm_barrier(RtComm *c) {
    if (c && c->mpi) MPI_CHECK(MPI_Barrier(c->aux));
}

void rt_comm_allgather(RtComm *c, const void *mine, void *all, size_t bytes) {
    if (!c || !c->mpi) {
        memmove(all, mine, bytes);
        return;
    }
    if (bytes > (size_t)INT32_MAX) RT_INTERNAL("allgather of more than 2 GiB per rank");
    MPI_CHECK(MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, c->aux));
}

double rt_comm_sum(RtComm *c, double v) {
    if (!c || !c->mpi || c->size == 1) return v;
    double *all = malloc((size_t)c->size * sizeof *all);
    if (!all) RT_INTERNAL("out of memory");
    rt_comm_allgather(c, &v, all, sizeof v);
    double s = 0;
    for (int r = 0; r < c->size; r++) s += all[r];
    free(all);
    return s;
}

void rt_comm_bcast(RtComm *c, void *buf, size_t bytes, int root) {
    if (!c || !c->mpi) return;
    for (size_t off = 0; off < bytes; off += CHUNK) {
        size_t n = bytes - off < CHUNK ? bytes - off : CHUNK;
        MPI_CHECK(MPI_Bcast((unsigned char *)buf + off, (int)n, MPI_BYTE, root, c->aux));
    }
}

int rt_comm_gather(RtComm *c, const void *mine, size_t n, unsigned char **all, size_t *sizes, char *err,
                   size_t errlen) {
    *all = NULL;
    if (!c || !c->mpi || c->size == 1) {
        sizes[0] = n;
        *all = malloc(n ? n : 1);
        RT_CHECK_ALLOC(*all);
        if (n) memcpy(*all, mine, n);
        return 0;
    }
    uint64_t mine_n = n, *ns = NULL;
    if (c->rank == 0) {
        ns = malloc((size_t)c->size * sizeof *ns);
        if (!ns) RT_INTERNAL("out of memory");
    }
    MPI_CHECK(MPI_Gather(&mine_n, 1, MPI_UINT64_T, ns, 1, MPI_UINT64_T, 0, c->aux));
    if (c->rank != 0) {
        for (size_t off = 0; off < n; off += CHUNK) {
            size_t k = n - off < CHUNK ? n - off : CHUNK;
            MPI_CHECK(MPI_Send((const unsigned char *)mine + off, (int)k, MPI_BYTE, 0, 1, c->aux));
        }
        return 0;
    }
    size_t total = 0;
    for (int r = 0; r < c->size; r++) {
        sizes[r] = (size_t)ns[r];
        total += (size_t)ns[r];
    }
    unsigned char *b = malloc(total ? total : 1), *sink = NULL;
    if (!b) sink = malloc(CHUNK); /* still receive everything, so no rank waits forever */
    if (!b && !sink) RT_INTERNAL("out of memory");
    size_t at = 0;
    if (b && n) memcpy(b, mine, n);
    at += n;
    for (int r = 1; r < c->size; r++) {
        for (size_t off = 0; off < sizes[r]; off += CHUNK) {
            size_t k = sizes[r] - off < CHUNK ? sizes[r] - off : CHUNK;
            MPI_CHECK(MPI_Recv(b ? b + at + off : sink, (int)k, MPI_BYTE, r, 1, c->aux, MPI_STATUS_IGNORE));
        }
        at += sizes[r];
    }
    free(ns);
    free(sink);
    if (!b) return RT_FAIL("out of memory gathering %zu bytes on rank 0", total);
    *all = b;
    return 0;
}

/* ---- point to point and the embedding group ------------------------------------------------ */

/* A device failure inside the transport ends the job, as a failed MPI call does. */
_Noreturn static void dev_fail(RtComm *c, RtDev *d) {
    fprintf(stderr, "ppr: error: rank %d: %s\n", c ? c->rank : 0, rt_dev_error(d));
    fflush(stderr);
    if (c && c->mpi) MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* A host buffer of at least n bytes in *buf (capacity *cap). */
static void *room(void **buf, size_t *cap, size_t n) {
    if (n > *cap) {
        free(*buf);
        *buf = malloc(n ? n : 1);
        if (!*buf) RT_INTERNAL("out of memory");
        *cap = n;
    }
    return *buf;
}

#ifdef PPR_CUDA
/* Every NCCL call: on failure the call, where, NCCL's message, then the job ends. */
#define NCCL_CHECK(call)                                                                                                \
    do {                                                                                                                \
        ncclResult_t rc_ = (call);                                                                                      \
        if (rc_ != ncclSuccess && rc_ != ncclInProgress) nccl_fail(rc_, #call, __FILE__, __LINE__);                     \
    } while (0)

_Noreturn static void nccl_fail(ncclResult_t rc, const char *call, const char *file, int line) {
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "ppr: error: rank %d: NCCL: %s failed: %s [%s:%d]\n", rank, call, ncclGetErrorString(rc), file, line);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* One NCCL communicator over the members of an MPI one: the id made by its rank 0, broadcast. */
static ncclComm_t nccl_over(MPI_Comm g) {
    if (g == MPI_COMM_NULL) return NULL;
    int n = 0, me = 0;
    MPI_CHECK(MPI_Comm_size(g, &n));
    MPI_CHECK(MPI_Comm_rank(g, &me));
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (me == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, g));
    ncclComm_t comm = NULL;
    NCCL_CHECK(ncclCommInitRank(&comm, n, id, me));
    return comm;
}

/* rank's place in the MPI group g (MPI_UNDEFINED when not a member) */
static int rank_in(RtComm *c, MPI_Comm g, int rank) {
    MPI_Group wg, gg;
    int r = MPI_UNDEFINED;
    MPI_CHECK(MPI_Comm_group(c->world, &wg));
    MPI_CHECK(MPI_Comm_group(g, &gg));
    MPI_CHECK(MPI_Group_translate_ranks(wg, 1, &rank, gg, &r));
    MPI_CHECK(MPI_Group_free(&wg));
    MPI_CHECK(MPI_Group_free(&gg));
    return r;
}

static void nccl_p2p(RtComm *c, RtDev *d, int n, const RtP2p *ops) {
    NCCL_CHECK(ncclGroupStart()); /* a comm entry's send and receive go together */
    for (int i = 0; i < n; i++) {
        const RtP2p *o = &ops[i];
        void *stream = NULL, *buf = rt_dev_native(d, o->off, &stream);
        int peer = o->peer == c->prev ? c->pp_prev : o->peer == c->next ? c->pp_next : -1;
        if (peer < 0) RT_INTERNAL("a pipeline message to a rank that is not a neighbour");
        if (o->send) NCCL_CHECK(ncclSend(buf, (size_t)(o->bytes / 4), ncclFloat, peer, c->npp, (cudaStream_t)stream));
        else NCCL_CHECK(ncclRecv(buf, (size_t)(o->bytes / 4), ncclFloat, peer, c->npp, (cudaStream_t)stream));
    }
    NCCL_CHECK(ncclGroupEnd());
}
#endif

void rt_comm_use_device(RtComm *c, RtDev *d, const RtProg *p) {
    (void)p;
    if (!c || !c->mpi || !d->uid[0]) return;
#ifdef PPR_CUDA
    /* NCCL takes one rank per GPU: ranks that share one go through host-staged MPI */
    char(*uids)[sizeof d->uid] = malloc((size_t)c->size * sizeof *uids);
    if (!uids) RT_INTERNAL("out of memory");
    MPI_CHECK(MPI_Allgather(d->uid, (int)sizeof d->uid, MPI_BYTE, uids, (int)sizeof d->uid, MPI_BYTE, c->aux));
    int shared = 0;
    for (int a = 0; a < c->size && !shared; a++)
        for (int b = a + 1; b < c->size && !shared; b++) shared = !strncmp(uids[a], uids[b], sizeof d->uid);
    free(uids);
    if (shared) {
        if (c->rank == 0)
            printf("ppr: ranks share a GPU, and NCCL takes one rank per GPU: messages and collectives go through MPI, staged "
                   "through host memory\n");
        return;
    }
    c->npp = nccl_over(c->pp);
    c->ntp = nccl_over(c->tp);
    c->ndp = nccl_over(c->dp);
    c->nemb = nccl_over(c->emb);
    c->nccl_sub = calloc((size_t)(c->nsub ? c->nsub : 1), sizeof *c->nccl_sub);
    if (!c->nccl_sub) RT_INTERNAL("out of memory");
    for (int i = 0; i < c->nsub; i++) c->nccl_sub[i] = nccl_over(c->sub[i]);
    c->prev = p->prev, c->next = p->next;
    c->pp_prev = p->prev >= 0 ? rank_in(c, c->pp, p->prev) : -1;
    c->pp_next = p->next >= 0 ? rank_in(c, c->pp, p->next) : -1;
    c->nccl = 1;
#endif
}

/* Waits for the device's queued work; with NCCL, watching for its asynchronous errors meanwhile,
 * so that a dead or failed peer ends the job instead of hanging it. */
int rt_comm_wait(RtComm *c, RtDev *d) {
#ifdef PPR_CUDA
    if (c && c->nccl) {
        struct timespec nap = {0, 100000}; /* 0.1 ms */
        for (;;) {
            int q = rt_dev_query(d);
            if (q <= 0) return q;
            ncclComm_t all[4] = {c->npp, c->ntp, c->ndp, c->nemb};
            for (int i = 0; i < 4 + c->nsub; i++) {
                ncclComm_t m = i < 4 ? all[i] : c->nccl_sub[i - 4];
                ncclResult_t e = ncclSuccess;
                if (m) NCCL_CHECK(ncclCommGetAsyncError(m, &e));
                if (e != ncclSuccess && e != ncclInProgress) {
                    ncclCommAbort(m);
                    nccl_fail(e, "a collective or message (ncclCommGetAsyncError)", __FILE__, __LINE__);
                }
            }
            nanosleep(&nap, NULL);
        }
    }
#else
    (void)c;
#endif
    return rt_dev_sync(d);
}

void rt_comm_p2p_post(RtComm *c, RtDev *d, int n, const RtP2p *ops) {
    if (!c || !c->mpi) RT_INTERNAL("a pipeline message in a one-rank world");
#ifdef PPR_CUDA
    if (c->nccl) {
        nccl_p2p(c, d, n, ops); /* on the device's stream: what follows it there waits for it */
        return;
    }
#endif
    if (c->nreq + n > MAX_REQ) RT_INTERNAL("too many messages in flight");
    for (int i = 0; i < n; i++) {
        const RtP2p *o = &ops[i];
        if (o->bytes / 4 > INT32_MAX) RT_INTERNAL("a message of more than 2^31 floats");
        Stage *st = &c->stage[c->nreq];
        st->bytes = 0;
        void *buf = rt_dev_host(d, o->off);
        if (!buf) { /* host staging: the device's bytes go out of, or come into, a host copy */
            buf = room(&st->buf, &st->cap, (size_t)o->bytes);
            if (o->send && rt_dev_read(d, o->off, buf, o->bytes)) dev_fail(c, d);
            if (!o->send) st->off = o->off, st->bytes = o->bytes;
        }
        MPI_Request *rq = &c->req[c->nreq++];
        if (o->send) MPI_CHECK(MPI_Isend(buf, (int)(o->bytes / 4), MPI_FLOAT, o->peer, o->tag, c->world, rq));
        else MPI_CHECK(MPI_Irecv(buf, (int)(o->bytes / 4), MPI_FLOAT, o->peer, o->tag, c->world, rq));
    }
}

void rt_comm_p2p_wait(RtComm *c, RtDev *d) {
    if (!c || !c->nreq) return; /* NCCL's messages: ordered on the device's stream, waited for there */
    MPI_CHECK(MPI_Waitall(c->nreq, c->req, MPI_STATUSES_IGNORE));
    for (int i = 0; i < c->nreq; i++)
        if (c->stage[i].bytes && rt_dev_write(d, c->stage[i].off, c->stage[i].buf, c->stage[i].bytes)) dev_fail(c, d);
    c->nreq = 0;
}

/* ---- deterministic allreduce ----------------------------------------------------------------- */

static float *red_scratch(RtComm *c, size_t n) {
    if (n > c->red_cap) {
        free(c->red);
        c->red = malloc(n * sizeof *c->red);
        if (!c->red) RT_INTERNAL("out of memory");
        c->red_cap = n;
    }
    return c->red;
}

/* dst[i] = src[0][i] op src[1][i] op ... op src[n-1][i], left to right (src[q] = all + q * stride) */
static void reduce_rows(float *dst, const float *all, int64_t stride, int n, int64_t len, int op) {
    for (int64_t i = 0; i < len; i++) {
        float v = all[i];
        for (int q = 1; q < n; q++) {
            float w = all[q * stride + i];
            if (op == RT_OP_MAX) v = w > v ? w : v;
            else v = v + w;
        }
        dst[i] = v;
    }
}

/* The totals of small buffers: every member gathers all of them (MPI_Allgather) and reduces them
 * itself. Larger ones: member q reduces elements [count·q/n, count·(q+1)/n) of every member
 * (MPI_Alltoallv), then every member gets every part (MPI_Allgatherv). Either way each element is
 * reduced in the group's rank order, and every member ends with the same bits (MPI_Allreduce does
 * not promise either). */
#define SMALL_REDUCE ((int64_t)1 << 16) /* floats gathered from all members at most */
#define SEGMENT ((int64_t)1 << 24)      /* floats reduced at a time (64 MiB): bounds the scratch */
static void reduce_part(RtComm *c, MPI_Comm g, int n, int me, int op, float *buf, int64_t count);
static void det_allreduce(RtComm *c, MPI_Comm g, int op, float *buf, int64_t count) {
    int n = 1, me = 0;
    MPI_CHECK(MPI_Comm_size(g, &n));
    MPI_CHECK(MPI_Comm_rank(g, &me));
    if (n == 1 || count == 0) return;
    for (int64_t off = 0; off < count; off += SEGMENT)
        reduce_part(c, g, n, me, op, buf + off, count - off < SEGMENT ? count - off : SEGMENT);
}

static void reduce_part(RtComm *c, MPI_Comm g, int n, int me, int op, float *buf, int64_t count) {
    if (count * n <= SMALL_REDUCE) {
        float *all = red_scratch(c, (size_t)(count * n));
        MPI_CHECK(MPI_Allgather(buf, (int)count, MPI_FLOAT, all, (int)count, MPI_FLOAT, g));
        reduce_rows(buf, all, count, n, count, op);
        return;
    }
    if (n > c->ints_cap) {
        free(c->ints);
        c->ints = malloc((size_t)n * 4 * sizeof *c->ints);
        if (!c->ints) RT_INTERNAL("out of memory");
        c->ints_cap = n;
    }
    int *counts = c->ints, *displs = counts + n, *rcounts = displs + n, *rdispls = rcounts + n;
    for (int q = 0; q < n; q++) {
        int64_t a = count * q / n, e = count * (q + 1) / n;
        displs[q] = (int)a;
        counts[q] = (int)(e - a);
    }
    int len = counts[me];
    for (int q = 0; q < n; q++) {
        rcounts[q] = len;
        rdispls[q] = q * len; /* <= count */
    }
    float *parts = red_scratch(c, (size_t)len * (size_t)n + 1);
    MPI_CHECK(MPI_Alltoallv(buf, counts, displs, MPI_FLOAT, parts, rcounts, rdispls, MPI_FLOAT, g));
    reduce_rows(buf + displs[me], parts, len, n, len, op);
    MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT, g));
}

/* det_allreduce on the floats at arena offset off, through a host copy where the arena is not host memory. */
static void dev_allreduce(RtComm *c, RtDev *d, MPI_Comm g, int op, int64_t off, int64_t count) {
#ifdef PPR_CUDA
    if (c->nccl) { /* NCCL's reduction: every member gets the same bits, in NCCL's fixed order */
        ncclComm_t m = g == c->tp ? c->ntp : g == c->dp ? c->ndp : g == c->emb ? c->nemb : NULL;
        for (int i = 0; i < c->nsub && !m; i++)
            if (g == c->sub[i]) m = c->nccl_sub[i];
        if (!m) RT_INTERNAL("an allreduce without its NCCL communicator");
        void *stream = NULL, *buf = rt_dev_native(d, off, &stream);
        NCCL_CHECK(ncclAllReduce(buf, buf, (size_t)count, ncclFloat, op == RT_OP_MAX ? ncclMax : ncclSum, m,
                                 (cudaStream_t)stream));
        return;
    }
#endif
    float *buf = rt_dev_host(d, off);
    if (buf) {
        det_allreduce(c, g, op, buf, count);
        return;
    }
    buf = room((void **)&c->host, &c->host_cap, (size_t)count * sizeof *buf);
    if (rt_dev_read(d, off, buf, count * 4)) dev_fail(c, d);
    det_allreduce(c, g, op, buf, count);
    if (rt_dev_write(d, off, buf, count * 4)) dev_fail(c, d);
}

void rt_comm_allreduce_emb(RtComm *c, RtDev *d, int64_t off, int64_t count) {
    if (!c || c->emb == MPI_COMM_NULL) RT_INTERNAL("allreduce_tied without an embedding group");
    dev_allreduce(c, d, c->emb, RT_OP_SUM, off, count);
}

void rt_comm_allreduce(RtComm *c, RtDev *d, int group, int sub, int op, int64_t off, int64_t count) {
    if (!c || !c->mpi) return; /* a one-rank world: every group is this rank alone */
    MPI_Comm g = MPI_COMM_NULL;
    if (group == RT_G_TP) g = c->tp;
    else if (group == RT_G_DP) g = c->dp;
    else
        for (int i = 0; i < c->nsub; i++)
            if (c->sub_r[i] == sub) g = c->sub[i];
    if (g == MPI_COMM_NULL) RT_INTERNAL("an allreduce without its group");
    int n = 1;
    MPI_CHECK(MPI_Comm_size(g, &n));
    if (n > 1) dev_allreduce(c, d, g, op, off, count);
}

int rt_comm_tag_ub(RtComm *c) {
    if (!c || !c->mpi) return INT32_MAX;
    int *ub = NULL, flag = 0;
    MPI_CHECK(MPI_Comm_get_attr(c->world, MPI_TAG_UB, &ub, &flag));
    return flag && ub ? *ub : 32767; /* the least MPI promises */
}

/* ---- the program's communicators -------------------------------------------------------------- */

void rt_comm_groups(RtComm *c, const RtProg *p) {
    if (c && c->mpi) {
        int tp = p->tp, pp = p->pp;
        MPI_CHECK(MPI_Comm_split(c->world, p->dp_rank * tp + p->tp_rank, p->stage, &c->pp));
        MPI_CHECK(MPI_Comm_split(c->world, p->dp_rank * pp + p->stage, p->tp_rank, &c->tp));
        MPI_CHECK(MPI_Comm_split(c->world, p->stage * tp + p->tp_rank, p->dp_rank, &c->dp));
        MPI_CHECK(MPI_Comm_split(c->world, p->nshared > 0 ? p->dp_rank * tp + p->tp_rank : MPI_UNDEFINED, p->stage,
                                 &c->emb));
        /* the tp/R groups any rank uses (every rank takes part in each split: they are collective) */
        int ndiv = 0;
        for (int r = 1; r <= tp; r++) ndiv += tp % r == 0;
        int *div = calloc((size_t)ndiv, sizeof *div), *used = calloc((size_t)ndiv, sizeof *used),
            *any = calloc((size_t)ndiv, sizeof *any);
        c->sub_r = calloc((size_t)ndiv, sizeof *c->sub_r);
        c->sub = calloc((size_t)ndiv, sizeof *c->sub);
        if (!div || !used || !any || !c->sub_r || !c->sub) RT_INTERNAL("out of memory");
        for (int r = 1, k = 0; r <= tp; r++)
            if (tp % r == 0) div[k++] = r;
        for (int b = 0; b < RT_NBLK; b++)
            for (int i = 0; i < p->blk[b].n; i++) {
                const RtInstr *x = &p->blk[b].ins[i];
                if (x->kind != RT_I_ALLREDUCE || x->group != RT_G_TP_SUB) continue;
                for (int k = 0; k < ndiv; k++) used[k] |= div[k] == x->sub;
            }
        MPI_CHECK(MPI_Allreduce(used, any, ndiv, MPI_INT, MPI_MAX, c->world));
        for (int k = 0; k < ndiv; k++) {
            if (!any[k]) continue;
            int r = div[k], group = (p->dp_rank * pp + p->stage) * (tp / r) + p->tp_rank / r;
            c->sub_r[c->nsub] = r;
            MPI_CHECK(MPI_Comm_split(c->world, group, p->tp_rank, &c->sub[c->nsub]));
            c->nsub++;
        }
        free(div);
        free(used);
        free(any);
    }
}
