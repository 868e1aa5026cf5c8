/* Data-parallel training over MPI: attn_dp (include/attn_mpi.h; docs/distributed.md,
 * "Data-parallel training").  Built only with -DATTN_MPI=ON.
 *
 * The gradient arena of a module is cut into buckets of consecutive elements.  A bucket is
 * summed over the ranks by a reduction of our own, so that the result is the same bits on
 * every rank whatever MPI's collective algorithms do:
 *   phase 1  the bucket is cut into N chunks; rank r sends chunk p to rank p (for every
 *            p != r) and receives the N - 1 contributions to its own chunk r;
 *   reduce   rank r sums chunk r over the ranks in rank order 0, 1, .., N-1 (in double, one
 *            rounding to float at the end): only rank r computes chunk r;
 *   phase 2  rank r sends its summed chunk to every other rank and receives theirs.
 * Each rank sends and receives 2 (N-1)/N of the bucket, as a ring all-reduce does.  A bucket
 * starts as soon as its elements are reported final by the model's backward (the context's
 * gradient-ready hook, attn_ctx_set_grad_ready), and every report also advances the buckets
 * in flight (MPI_Testall), so the transfers overlap the rest of the backward; attn_dp_end
 * starts the buckets never reported and completes them all.  Every wait polls against a
 * deadline (ATTN_E_TIMEOUT, as ring.c does): nothing blocks forever. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "attn_mpi.h"
#include "dist.h"
#include "../layers/layers.h"

#define DP_TAG0 0x4200          /* bucket b: tags DP_TAG0 + 2b (phase 1), + 1 (phase 2) */
#define DP_MAX_BUCKETS 4096     /* keeps the tags under MPI's guaranteed 32767 */
#define DP_MAX_BUCKET ((int64_t)1 << 28) /* floats: a chunk count fits an int */
#define DP_DEFAULT_BUCKET ((int64_t)1 << 18)

enum { B_IDLE = 0, B_PHASE1, B_PHASE2, B_DONE };

typedef struct dp_bucket {
    int64_t lo, n;     /* arena elements [lo, lo + n) */
    int64_t ready;     /* elements reported final in this backward */
    int state;
    MPI_Request *req;  /* [2 (N-1)] */
    float *tmp;        /* [N-1][chunk max]: the other ranks' contributions to our chunk */
} dp_bucket;

struct attn_dp {
    MPI_Comm comm; /* our own duplicate */
    int rank, size;
    double timeout;
    int64_t bucket_floats;
    int overlap;
    /* the module the buckets were cut for */
    const attn_module *m;
    int64_t numel;
    float *grad;
    int nb;
    dp_bucket *b;
    /* the current step */
    attn_ctx *ctx;
    int armed;
    attn_status err; /* a failure inside the hook, reported by attn_dp_end */
    int leak;        /* requests abandoned: their buffers stay allocated */
    attn_dp_stats stats;
};

/* Buffers that MPI may still write after a timeout (a cancelled receive, a collective that
 * cannot be cancelled): never freed, but kept reachable here so that leak checkers tell them
 * from real leaks.  Touched only after a timeout, from the MPI thread. */
typedef struct dp_grave {
    struct dp_grave *next;
    void *p;
} dp_grave;
static dp_grave *graveyard;
static void bury(void *p) {
    dp_grave *g = p ? malloc(sizeof *g) : NULL;
    if (!g) return; /* then p is left unreachable: still never freed, as it must be */
    g->p = p, g->next = graveyard, graveyard = g;
}

attn_dp_options attn_dp_defaults(void) {
    attn_dp_options o;
    memset(&o, 0, sizeof o);
    o.overlap = 1;
    return o;
}

static attn_status mpi_fail(attn_ctx *ctx, int rank, int rc, const char *what) {
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) strcpy(s, "unknown error");
    return attn__fail(ctx, ATTN_E_IO, "attn_dp: %s failed on rank %d: %s", what, rank, s);
}

static void nap(long ns) {
    struct timespec ts = {0, ns};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

attn_status attn_dp_create(attn_ctx *ctx, MPI_Comm comm, const attn_dp_options *opt,
                           attn_dp **out) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!out, ctx, ATTN_E_INVALID, "attn_dp_create: out is NULL");
    *out = NULL;
    attn_dp_options o = opt ? *opt : attn_dp_defaults();
    int init = 0, fin = 0, inter = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    ATTN_FAIL_IF(!init || fin, ctx, ATTN_E_INVALID,
                 "attn_dp_create: MPI is not initialised (MPI_Init_thread) or already finalised");
    ATTN_FAIL_IF(comm == MPI_COMM_NULL, ctx, ATTN_E_INVALID, "attn_dp_create: comm is MPI_COMM_NULL");
    int rc = MPI_Comm_test_inter(comm, &inter);
    if (rc != MPI_SUCCESS) return mpi_fail(ctx, -1, rc, "MPI_Comm_test_inter");
    ATTN_FAIL_IF(inter, ctx, ATTN_E_INVALID, "attn_dp_create: comm is an inter-communicator");
    double timeout;
    if (o.timeout_s == 0) {
        ATTN_TRY(attn__mpi_env_timeout(ctx, "attn_dp", &timeout));
    } else {
        ATTN_FAIL_IF(!(o.timeout_s > 0) || !isfinite(o.timeout_s), ctx, ATTN_E_INVALID,
                     "attn_dp_create: timeout_s must be a positive number of seconds (0: the "
                     "default), got %g", o.timeout_s);
        timeout = o.timeout_s;
    }
    ATTN_FAIL_IF(o.bucket_floats < 0 || o.bucket_floats > DP_MAX_BUCKET, ctx, ATTN_E_INVALID,
                 "attn_dp_create: bucket_floats must be in [0, 2^28] (0: the default), got %lld",
                 (long long)o.bucket_floats);
    attn_dp *dp = calloc(1, sizeof *dp);
    ATTN_FAIL_IF(!dp, ctx, ATTN_E_NOMEM, "attn_dp_create: out of memory");
    dp->timeout = timeout;
    dp->bucket_floats = o.bucket_floats ? o.bucket_floats : DP_DEFAULT_BUCKET;
    dp->overlap = o.overlap != 0;
    rc = MPI_Comm_dup(comm, &dp->comm);
    if (rc != MPI_SUCCESS) {
        free(dp);
        return mpi_fail(ctx, -1, rc, "MPI_Comm_dup");
    }
    MPI_Comm_rank(dp->comm, &dp->rank);
    MPI_Comm_size(dp->comm, &dp->size);
    *out = dp;
    return ATTN_OK;
}

static void free_buckets(attn_dp *dp) {
    for (int i = 0; i < dp->nb; i++) { /* the request handles were completed or released */
        free(dp->b[i].req);
        if (dp->leak) bury(dp->b[i].tmp);
        else free(dp->b[i].tmp);
    }
    free(dp->b);
    dp->b = NULL, dp->nb = 0, dp->m = NULL;
}

static void abandon(attn_dp *dp);

void attn_dp_free(attn_dp *dp) {
    if (!dp) return;
    if (dp->ctx && dp->armed) attn_ctx_set_grad_ready(dp->ctx, NULL, NULL);
    for (int i = 0; i < dp->nb; i++) /* freed mid-step: transfers in flight are abandoned */
        if (dp->b[i].state == B_PHASE1 || dp->b[i].state == B_PHASE2) {
            abandon(dp);
            break;
        }
    free_buckets(dp);
    /* after a timeout the communicator may hold requests that never complete: freeing it
     * would wait for them, so it is left to MPI_Finalize / MPI_Abort */
    if (!dp->leak && dp->comm != MPI_COMM_NULL) MPI_Comm_free(&dp->comm);
    free(dp);
}

int attn_dp_rank(const attn_dp *dp) { return dp ? dp->rank : 0; }
int attn_dp_size(const attn_dp *dp) { return dp ? dp->size : 1; }

void attn_dp_stats_get(const attn_dp *dp, attn_dp_stats *s) {
    if (!s) return;
    if (dp) *s = dp->stats;
    else memset(s, 0, sizeof *s);
}

attn_status attn_dp_split(attn_ctx *ctx, const attn_dp *dp, int64_t global, const char *what,
                          int64_t *first, int64_t *count) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!first || !count || !what, ctx, ATTN_E_INVALID, "attn_dp_split: NULL argument");
    int n = dp ? dp->size : 1, r = dp ? dp->rank : 0;
    ATTN_FAIL_IF(global < 1, ctx, ATTN_E_INVALID, "attn_dp_split: %s must be >= 1, got %lld",
                 what, (long long)global);
    ATTN_FAIL_IF(global % n != 0, ctx, ATTN_E_INVALID,
                 "the global %s of %lld is not divisible by the %d ranks: every rank takes an "
                 "equal share (use a multiple of %d, or another number of ranks)",
                 what, (long long)global, n, n);
    *count = global / n;
    *first = (int64_t)r * *count;
    return ATTN_OK;
}

/* ---- waiting ---------------------------------------------------------------------------- */
/* Polls the requests until done or the deadline; peer names who is awaited (-1: all). */
static attn_status wait_all(attn_dp *dp, attn_ctx *ctx, MPI_Request *req, int n, const char *what,
                            double t0) {
    double deadline = t0 + dp->timeout;
    for (long spin = 0;; spin++) {
        int done = 0, rc = MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(ctx, dp->rank, rc, "MPI_Testall");
        if (done) return ATTN_OK;
        double now = MPI_Wtime();
        if (now > deadline)
            return attn__fail(ctx, ATTN_E_TIMEOUT,
                              "attn_dp: rank %d of %d waited %.3g s for %s: another rank died, "
                              "hangs or is not in this step (the wait is bounded by "
                              "attn_dp_options.timeout_s or ATTN_MPI_TIMEOUT)",
                              dp->rank, dp->size, now - t0, what);
        if (spin >= 200) nap(spin < 2000 ? 20000 : 200000);
    }
}

/* ---- the ranks' agreement on the module (once per module) -------------------------------- */
/* A 64-bit hash of the parameters' bits, eight bytes at a time (fast enough for a 135M-parameter
 * model at the first step: a few hundred ms): every word is mixed by a multiply and a rotation
 * into a running value that depends on the order, so a changed or moved value changes it. */
static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t arena_hash(const attn_module *m) {
    uint64_t h = 0x27d4eb2f165667c5ull ^ (uint64_t)m->numel;
    const unsigned char *p = (const unsigned char *)m->arena;
    size_t n = m->arena ? (size_t)m->numel * sizeof(float) : 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = rotl64(h ^ (w * 0xc2b2ae3d27d4eb4full), 31) * 0x9e3779b97f4a7c15ull + 0x165667b19e3779f9ull;
    }
    for (; i < n; i++) h = rotl64(h ^ (p[i] * 0xc2b2ae3d27d4eb4full), 31) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33;
    return h;
}

static attn_status agree(attn_dp *dp, attn_ctx *ctx, const attn_module *m) {
    /* on the heap: after a timeout the collective still owns both (it cannot be cancelled),
     * so they are leaked then.  Each value and its negation, so that one MIN gives the
     * smallest and the largest over the ranks; the hash as two 32-bit halves (no overflow). */
    int64_t *v = malloc(16 * sizeof *v), *r = v ? v + 8 : NULL;
    ATTN_FAIL_IF(!v, ctx, ATTN_E_NOMEM, "attn_dp: out of memory");
    const int64_t numel = m->numel;
    const uint64_t h = arena_hash(m);
    v[0] = numel, v[1] = -numel, v[2] = dp->bucket_floats, v[3] = -dp->bucket_floats;
    v[4] = (int64_t)(h >> 32), v[5] = -v[4], v[6] = (int64_t)(h & 0xffffffffu), v[7] = -v[6];
    MPI_Request q;
    int rc = MPI_Iallreduce(v, r, 8, MPI_INT64_T, MPI_MIN, dp->comm, &q);
    if (rc != MPI_SUCCESS) {
        free(v);
        return mpi_fail(ctx, dp->rank, rc, "MPI_Iallreduce");
    }
    attn_status st = wait_all(dp, ctx, &q, 1, "the agreement on the model's size", MPI_Wtime());
    if (st != ATTN_OK) {
        dp->leak = 1;
        bury(v);
        return st;
    }
    int64_t r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
    int same = r[4] == -r[5] && r[6] == -r[7];
    free(v);
    ATTN_FAIL_IF(r0 != -r1, ctx, ATTN_E_SHAPE,
                 "attn_dp: the ranks disagree on the model's parameter count (%lld on some, "
                 "%lld on others)", (long long)r0, (long long)-r1);
    ATTN_FAIL_IF(r2 != -r3, ctx, ATTN_E_INVALID,
                 "attn_dp: the ranks disagree on bucket_floats (%lld on some, %lld on others)",
                 (long long)r2, (long long)-r3);
    ATTN_FAIL_IF(!same, ctx, ATTN_E_INVALID,
                 "attn_dp: the ranks start from different parameters (rank %d of %d hashes "
                 "%016llx): every rank must start from the same weights (the same initial "
                 "model or checkpoint, the same seed and shape)",
                 dp->rank, dp->size, (unsigned long long)h);
    return ATTN_OK;
}

static attn_status setup(attn_dp *dp, attn_ctx *ctx, const attn_module *m) {
    free_buckets(dp);
    int64_t numel = m->numel;
    ATTN_TRY(agree(dp, ctx, m));
    int64_t bs = dp->bucket_floats;
    if ((numel + bs - 1) / bs > DP_MAX_BUCKETS) bs = (numel + DP_MAX_BUCKETS - 1) / DP_MAX_BUCKETS;
    ATTN_FAIL_IF(bs > DP_MAX_BUCKET, ctx, ATTN_E_UNSUPPORTED,
                 "attn_dp: %lld parameters need buckets over 2^28 floats", (long long)numel);
    int nb = (int)((numel + bs - 1) / bs), N = dp->size;
    dp->b = calloc((size_t)nb, sizeof *dp->b);
    ATTN_FAIL_IF(!dp->b, ctx, ATTN_E_NOMEM, "attn_dp: out of memory (buckets)");
    dp->nb = nb;
    for (int i = 0; i < nb; i++) {
        dp_bucket *k = &dp->b[i];
        k->lo = (int64_t)i * bs;
        k->n = numel - k->lo < bs ? numel - k->lo : bs;
        int64_t chunk = (k->n + N - 1) / N; /* the largest chunk */
        k->req = malloc(sizeof *k->req * (size_t)(2 * (N > 1 ? N - 1 : 1)));
        k->tmp = N > 1 ? malloc(sizeof *k->tmp * (size_t)((N - 1) * (chunk ? chunk : 1))) : NULL;
        if (!k->req || (N > 1 && !k->tmp)) {
            free_buckets(dp);
            return attn__fail(ctx, ATTN_E_NOMEM, "attn_dp: out of memory (bucket buffers)");
        }
    }
    dp->m = m, dp->numel = numel, dp->grad = m->grad;
    return ATTN_OK;
}

/* chunk j of bucket k: [c0, c1) */
static void chunk_of(const attn_dp *dp, const dp_bucket *k, int j, int64_t *c0, int64_t *c1) {
    *c0 = k->lo + k->n * j / dp->size;
    *c1 = k->lo + k->n * (j + 1) / dp->size;
}

static attn_status post(attn_dp *dp, attn_ctx *ctx, MPI_Request *rq, float *buf, int64_t n,
                        int peer, int tag, int recv) {
    int rc = recv ? MPI_Irecv(buf, (int)n, MPI_FLOAT, peer, tag, dp->comm, rq)
                  : MPI_Isend(buf, (int)n, MPI_FLOAT, peer, tag, dp->comm, rq);
    if (rc != MPI_SUCCESS) return mpi_fail(ctx, dp->rank, rc, recv ? "MPI_Irecv" : "MPI_Isend");
    return ATTN_OK;
}

static attn_status start(attn_dp *dp, attn_ctx *ctx, int i) {
    dp_bucket *k = &dp->b[i];
    int N = dp->size, r = dp->rank, q = 0;
    int64_t chunk = (k->n + N - 1) / N, m0, m1;
    chunk_of(dp, k, r, &m0, &m1);
    for (int p = 0; p < N; p++) {
        if (p == r) continue;
        int64_t c0, c1;
        chunk_of(dp, k, p, &c0, &c1);
        ATTN_TRY(post(dp, ctx, &k->req[q], k->tmp + (int64_t)q * chunk, m1 - m0, p,
                      DP_TAG0 + 2 * i, 1));
        ATTN_TRY(post(dp, ctx, &k->req[N - 1 + q], dp->grad + c0, c1 - c0, p, DP_TAG0 + 2 * i,
                      0));
        q++;
    }
    k->state = B_PHASE1;
    dp->stats.bytes += (int64_t)sizeof(float) * 2 * (k->n - (m1 - m0));
    return ATTN_OK;
}

/* Phase 1 is complete: sum our chunk in rank order, send it, receive the others. */
static attn_status reduce_and_share(attn_dp *dp, attn_ctx *ctx, int i) {
    dp_bucket *k = &dp->b[i];
    int N = dp->size, r = dp->rank, q = 0;
    int64_t chunk = (k->n + N - 1) / N, m0, m1;
    chunk_of(dp, k, r, &m0, &m1);
    float *own = dp->grad + m0;
    for (int64_t e = 0; e < m1 - m0; e++) {
        double acc = 0.0;
        for (int p = 0, t = 0; p < N; p++) acc += p == r ? (double)own[e] : (double)k->tmp[(int64_t)(t++) * chunk + e];
        own[e] = (float)acc;
    }
    for (int p = 0; p < N; p++) {
        if (p == r) continue;
        int64_t c0, c1;
        chunk_of(dp, k, p, &c0, &c1);
        ATTN_TRY(post(dp, ctx, &k->req[q], dp->grad + c0, c1 - c0, p, DP_TAG0 + 2 * i + 1, 1));
        ATTN_TRY(post(dp, ctx, &k->req[N - 1 + q], own, m1 - m0, p, DP_TAG0 + 2 * i + 1, 0));
        q++;
    }
    k->state = B_PHASE2;
    return ATTN_OK;
}

/* Advances bucket i without waiting. */
static attn_status advance(attn_dp *dp, attn_ctx *ctx, int i) {
    dp_bucket *k = &dp->b[i];
    if (k->state != B_PHASE1 && k->state != B_PHASE2) return ATTN_OK;
    int done = 0, rc = MPI_Testall(2 * (dp->size - 1), k->req, &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_fail(ctx, dp->rank, rc, "MPI_Testall");
    if (!done) return ATTN_OK;
    if (k->state == B_PHASE1) return reduce_and_share(dp, ctx, i);
    k->state = B_DONE;
    return ATTN_OK;
}

static attn_status advance_all(attn_dp *dp, attn_ctx *ctx, int *pending) {
    *pending = 0;
    for (int i = 0; i < dp->nb; i++) {
        ATTN_TRY(advance(dp, ctx, i));
        if (dp->b[i].state != B_DONE) (*pending)++;
    }
    return ATTN_OK;
}

/* After a failure: receives still pending are cancelled, sends released; the buffers are then
 * left allocated (a late message could still land in them). */
static void abandon(attn_dp *dp) {
    for (int i = 0; i < dp->nb; i++) {
        dp_bucket *k = &dp->b[i];
        if (k->state != B_PHASE1 && k->state != B_PHASE2) continue;
        for (int j = 0; j < 2 * (dp->size - 1); j++) {
            if (k->req[j] == MPI_REQUEST_NULL) continue;
            int done = 0;
            MPI_Test(&k->req[j], &done, MPI_STATUS_IGNORE);
            if (done) continue;
            if (j < dp->size - 1) MPI_Cancel(&k->req[j]);
            MPI_Request_free(&k->req[j]);
        }
        k->state = B_IDLE;
    }
    dp->leak = 1;
}

/* ---- the hook ----------------------------------------------------------------------------- */
static void dp_hook(void *user, int64_t offset, int64_t count) {
    attn_dp *dp = user;
    if (!dp->armed || dp->err || offset < 0 || count <= 0 || offset >= dp->numel) return;
    if (count > dp->numel - offset) count = dp->numel - offset;
    double t0 = MPI_Wtime();
    int64_t bs = dp->b[0].n;
    for (int64_t i = offset / bs; i < dp->nb && dp->b[i].lo < offset + count; i++) {
        dp_bucket *k = &dp->b[i];
        int64_t lo = k->lo > offset ? k->lo : offset;
        int64_t hi = k->lo + k->n < offset + count ? k->lo + k->n : offset + count;
        k->ready += hi - lo;
        if (k->ready >= k->n && k->state == B_IDLE) {
            dp->err = start(dp, dp->ctx, (int)i);
            if (dp->err) return;
        }
    }
    int pending;
    dp->err = advance_all(dp, dp->ctx, &pending);
    dp->stats.hook_s += MPI_Wtime() - t0;
}

attn_status attn_dp_begin(attn_dp *dp, attn_ctx *ctx, attn_module *m) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!dp || !m, ctx, ATTN_E_INVALID, "attn_dp_begin: NULL argument");
    ATTN_FAIL_IF(dp->leak, ctx, ATTN_E_INVALID,
                 "attn_dp_begin: an earlier step failed (timeout): the communicator is unusable");
    ATTN_FAIL_IF(!attn_module_has_grad(m) || m->numel < 1, ctx, ATTN_E_INVALID,
                 "attn_dp_begin: the module has no gradients (attn_module_enable_grad)");
    ATTN_FAIL_IF(dp->armed, ctx, ATTN_E_INVALID,
                 "attn_dp_begin: the step already began (call attn_dp_end first)");
    if (dp->m != m || dp->numel != m->numel || dp->grad != m->grad) ATTN_TRY(setup(dp, ctx, m));
    for (int i = 0; i < dp->nb; i++) dp->b[i].ready = 0, dp->b[i].state = B_IDLE;
    dp->ctx = ctx, dp->err = ATTN_OK, dp->armed = 1;
    if (dp->overlap && dp->size > 1) attn_ctx_set_grad_ready(ctx, dp_hook, dp);
    return ATTN_OK;
}

attn_status attn_dp_end(attn_dp *dp, attn_ctx *ctx, attn_module *m) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!dp || !m, ctx, ATTN_E_INVALID, "attn_dp_end: NULL argument");
    ATTN_FAIL_IF(!dp->armed || dp->m != m, ctx, ATTN_E_INVALID,
                 "attn_dp_end: no step of this module began (attn_dp_begin)");
    attn_ctx_set_grad_ready(dp->ctx, NULL, NULL);
    dp->armed = 0;
    if (dp->size == 1) return ATTN_OK;
    attn_status st = dp->err;
    if (st != ATTN_OK) {
        /* the hook's message went to dp->ctx; the caller asks ctx */
        if (ctx != dp->ctx) attn__fail(ctx, st, "%s", attn_ctx_errmsg(dp->ctx));
        abandon(dp);
        return st;
    }
    double t0 = MPI_Wtime();
    int started_here = 0;
    for (int i = 0; i < dp->nb && st == ATTN_OK; i++)
        if (dp->b[i].state == B_IDLE) st = start(dp, ctx, i), started_here++;
    for (long spin = 0; st == ATTN_OK; spin++) {
        int pending;
        st = advance_all(dp, ctx, &pending);
        if (st != ATTN_OK || !pending) break;
        double now = MPI_Wtime();
        if (now > t0 + dp->timeout) {
            int i = 0;
            while (dp->b[i].state == B_DONE) i++;
            st = attn__fail(ctx, ATTN_E_TIMEOUT,
                            "attn_dp: rank %d of %d waited %.3g s for the gradient sum of bucket "
                            "%d of %d (phase %d): another rank died, hangs or is not in this "
                            "step (the wait is bounded by attn_dp_options.timeout_s or "
                            "ATTN_MPI_TIMEOUT)",
                            dp->rank, dp->size, now - t0, i, dp->nb, dp->b[i].state);
            break;
        }
        if (spin >= 200) nap(spin < 2000 ? 20000 : 200000);
    }
    if (st != ATTN_OK) {
        abandon(dp);
        return st;
    }
    dp->stats.steps++;
    dp->stats.buckets += dp->nb;
    dp->stats.late_buckets += started_here;
    dp->stats.exposed_s += MPI_Wtime() - t0;
    return ATTN_OK;
}

attn_status attn_dp_sum(attn_dp *dp, attn_ctx *ctx, double *x, int n) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!dp || (!x && n) || n < 0 || n > (1 << 20), ctx, ATTN_E_INVALID,
                 "attn_dp_sum: NULL argument or n (%d) outside [0, 2^20]", n);
    ATTN_FAIL_IF(dp->leak, ctx, ATTN_E_INVALID,
                 "attn_dp_sum: an earlier step failed (timeout): the communicator is unusable");
    if (dp->size == 1 || n == 0) return ATTN_OK;
    /* [N n] gathered, then this rank's n: both owned by the collective until it completes
     * (leaked after a timeout) */
    double *all = malloc(sizeof *all * (size_t)n * ((size_t)dp->size + 1));
    ATTN_FAIL_IF(!all, ctx, ATTN_E_NOMEM, "attn_dp_sum: out of memory");
    double *mine = all + (size_t)n * (size_t)dp->size;
    memcpy(mine, x, sizeof *x * (size_t)n);
    MPI_Request q;
    int rc = MPI_Iallgather(mine, n, MPI_DOUBLE, all, n, MPI_DOUBLE, dp->comm, &q);
    if (rc != MPI_SUCCESS) {
        free(all);
        return mpi_fail(ctx, dp->rank, rc, "MPI_Iallgather");
    }
    attn_status st = wait_all(dp, ctx, &q, 1, "the other ranks' step totals (loss, stop)",
                              MPI_Wtime());
    if (st != ATTN_OK) {
        dp->leak = 1; /* the collective cannot be cancelled: all stays MPI's */
        bury(all);
        return st;
    }
    for (int i = 0; i < n; i++) { /* in rank order: the same bits on every rank */
        double s = 0.0;
        for (int p = 0; p < dp->size; p++) s += all[(size_t)p * (size_t)n + (size_t)i];
        x[i] = s;
    }
    free(all);
    return ATTN_OK;
}

uint64_t attn_dp_params_hash(const attn_module *m) {
    uint64_t h = 0xcbf29ce484222325ull;
    if (!m || !m->arena) return h;
    const unsigned char *p = (const unsigned char *)m->arena;
    for (size_t i = 0; i < (size_t)m->numel * sizeof(float); i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

attn_status attn_dp_check_same(attn_dp *dp, attn_ctx *ctx, const attn_module *m) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!dp || !m, ctx, ATTN_E_INVALID, "attn_dp_check_same: NULL argument");
    uint64_t h = attn_dp_params_hash(m);
    /* the hash as four 16-bit pieces x and their squares, summed over the ranks (exactly, in
     * double): every rank holds the same x iff N sum(x^2) = (sum x)^2 (Cauchy-Schwarz) */
    double s[8];
    for (int i = 0; i < 4; i++) {
        double x = (double)((h >> (16 * i)) & 0xffffu);
        s[i] = x, s[4 + i] = x * x;
    }
    ATTN_TRY(attn_dp_sum(dp, ctx, s, 8));
    int same = 1;
    for (int i = 0; i < 4; i++) same &= (double)dp->size * s[4 + i] == s[i] * s[i];
    ATTN_FAIL_IF(!same, ctx, ATTN_E_INVALID,
                 "attn_dp_check_same: the ranks' parameters differ (rank %d hashes %016llx)",
                 dp->rank, (unsigned long long)h);
    return ATTN_OK;
}

static attn_status hk_begin(void *u, attn_ctx *ctx, attn_module *m) { return attn_dp_begin(u, ctx, m); }
static attn_status hk_end(void *u, attn_ctx *ctx, attn_module *m) { return attn_dp_end(u, ctx, m); }
static attn_status hk_sum(void *u, attn_ctx *ctx, double *x, int n) { return attn_dp_sum(u, ctx, x, n); }

attn_train_dp attn_dp_train_hooks(attn_dp *dp) {
    attn_train_dp t;
    memset(&t, 0, sizeof t);
    t.rank = attn_dp_rank(dp), t.nranks = attn_dp_size(dp), t.user = dp;
    t.begin = hk_begin, t.end = hk_end, t.sum = hk_sum;
    return t;
}
