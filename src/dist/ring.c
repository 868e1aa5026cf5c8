/* Ring (context-parallel) attention over MPI: attn_sdpa_ring and attn_sdpa_ring_backward
 * (include/attn_mpi.h; docs/distributed.md has the algorithm).  Built only with -DATTN_MPI=ON;
 * the only library file that includes mpi.h.
 *
 * Layering: this folder sits beside src/ops: it validates the public arguments, then runs the
 * SDPA kernels (attn__sdpa forward, attn__flash_bwd backward) once per block of keys that
 * reaches this rank and merges the blocks.  No attention arithmetic of its own beyond the
 * exact log-sum-exp merge of partial outputs.
 *
 * Communication: one MPI_Iallreduce (shapes and options, so that every rank refuses a bad call
 * before any work), then N - 1 steps in which the key/value block this rank holds goes to rank
 * r + 1 while the block of rank r - 1 arrives (MPI_Isend / MPI_Irecv posted before the
 * block's compute, completed after it); the backward sends each block's dK/dV accumulator the
 * same way.  Every wait polls MPI_Test against a deadline (ring_wait): nothing blocks forever. */
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
#include "../kernels/flash.h"
#include "../kernels/kernels.h"

#define RING_TAG_KV 0x4154  /* key/value blocks */
#define RING_TAG_DKV 0x4155 /* dK/dV accumulators */
/* floats per message: MPI counts are int; a larger block goes as several messages */
#define RING_CHUNK ((int64_t)1 << 28)

/* The inputs' NaN/infinity scan of both directions (each rank its own rows). */
static attn_status qkv_finite(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v) {
    ATTN_TRY(attn__check_finite(ctx, q, "query", 0));
    ATTN_TRY(attn__check_finite(ctx, k, "key", 0));
    return attn__check_finite(ctx, v, "value", 0);
}

attn_ring_options attn_ring_defaults(void) {
    attn_ring_options o;
    memset(&o, 0, sizeof o);
    o.sdpa = attn_sdpa_defaults();
    o.layout = ATTN_RING_ZIGZAG;
    return o;
}

int64_t attn_ring_row(int64_t L, int nranks, int rank, attn_ring_layout layout, int64_t i) {
    if (nranks < 1 || rank < 0 || rank >= nranks || L < 1 || i < 0) return -1;
    if (layout == ATTN_RING_CONTIGUOUS) {
        if (L % nranks) return -1;
        int64_t n = L / nranks;
        return i < n ? (int64_t)rank * n + i : -1;
    }
    if (layout != ATTN_RING_ZIGZAG || L % (2 * (int64_t)nranks)) return -1;
    int64_t c = L / (2 * (int64_t)nranks);
    if (i < c) return (int64_t)rank * c + i;
    if (i < 2 * c) return (2 * (int64_t)nranks - 1 - rank) * c + (i - c);
    return -1;
}

/* ---- the ring: communicator, deadline, requests ------------------------------------------ */
typedef struct ring {
    attn_ctx *ctx;
    const char *fn;
    MPI_Comm comm;
    int rank, size, prev, next;
    double timeout;
    attn_status local; /* a local refusal found before the agreement (its message is set) */
    int nch;           /* messages per block */
    MPI_Request *req;  /* [kv recv nch][kv send nch][dkv recv nch][dkv send nch] */
    int leak;          /* a request could not be completed: its buffer must stay allocated */
} ring;

static attn_status mpi_fail(ring *R, int rc, const char *what) {
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) strcpy(s, "unknown error");
    return attn__fail(R->ctx, ATTN_E_IO, "%s: %s failed on rank %d: %s", R->fn, what, R->rank, s);
}

static void nap(long ns) {
    struct timespec ts = {0, ns};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Completes n requests, polling MPI_Testall until the deadline: ATTN_E_TIMEOUT (with what was
 * awaited and from whom: peer < 0 is every rank) rather than a hang.  Spins first (a block
 * usually arrives during the compute), then naps 20-200 us between polls so that a waiting
 * rank leaves the CPU to the others. */
static attn_status ring_wait(ring *R, MPI_Request *req, int n, const char *what, int peer) {
    double t0 = MPI_Wtime(), deadline = t0 + R->timeout;
    for (long spin = 0;; spin++) {
        int done = 0, rc = MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(R, rc, "MPI_Testall");
        if (done) return ATTN_OK;
        double now = MPI_Wtime();
        if (now > deadline) {
            if (peer < 0)
                return attn__fail(R->ctx, ATTN_E_TIMEOUT,
                                  "%s: rank %d of %d waited %.3g s for %s: another rank died, "
                                  "hangs or is not in this call (the wait is bounded by "
                                  "attn_ring_options.timeout_s or ATTN_MPI_TIMEOUT)",
                                  R->fn, R->rank, R->size, now - t0, what);
            return attn__fail(R->ctx, ATTN_E_TIMEOUT,
                              "%s: rank %d of %d waited %.3g s for %s from rank %d: that rank "
                              "died, hangs or is not in this call (the wait is bounded by "
                              "attn_ring_options.timeout_s or ATTN_MPI_TIMEOUT)",
                              R->fn, R->rank, R->size, now - t0, what, peer);
        }
        if (spin >= 200) nap(spin < 2000 ? 20000 : 200000);
    }
}

/* Posts one block (n floats) as R->nch messages, in order, on one tag: MPI keeps their order
 * between the same pair of ranks. */
static attn_status ring_post(ring *R, MPI_Request *req, float *buf, int64_t n, int peer, int tag,
                             int recv) {
    for (int c = 0; c < R->nch; c++) {
        int64_t off = (int64_t)c * RING_CHUNK, m = n - off < RING_CHUNK ? n - off : RING_CHUNK;
        int rc = recv ? MPI_Irecv(buf + off, (int)m, MPI_FLOAT, peer, tag, R->comm, &req[c])
                      : MPI_Isend(buf + off, (int)m, MPI_FLOAT, peer, tag, R->comm, &req[c]);
        if (rc != MPI_SUCCESS) return mpi_fail(R, rc, recv ? "MPI_Irecv" : "MPI_Isend");
    }
    return ATTN_OK;
}

/* After a failure: every request still pending is cancelled (receives) or released; one that
 * does not complete leaves its buffer to MPI, so the buffers are then leaked (R->leak). */
static void ring_abandon(ring *R) {
    if (!R->req) return;
    for (int i = 0; i < 4 * R->nch; i++) {
        if (R->req[i] == MPI_REQUEST_NULL) continue;
        int done = 0, is_recv = (i / R->nch) % 2 == 0;
        MPI_Test(&R->req[i], &done, MPI_STATUS_IGNORE);
        if (done) continue;
        if (is_recv) {
            MPI_Cancel(&R->req[i]);
            for (int k = 0; k < 100 && !done; k++) {
                MPI_Test(&R->req[i], &done, MPI_STATUS_IGNORE);
                if (!done) nap(100000);
            }
            if (done) continue;
        }
        MPI_Request_free(&R->req[i]);
        R->leak = 1;
    }
}

static attn_status ring_open(ring *R, attn_ctx *ctx, MPI_Comm comm, const attn_ring_options *o,
                             const char *fn) {
    memset(R, 0, sizeof *R);
    R->ctx = ctx, R->fn = fn, R->comm = comm, R->timeout = ATTN__MPI_DEFAULT_TIMEOUT;
    int init = 0, fin = 0, inter = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    ATTN_FAIL_IF(!init || fin, ctx, ATTN_E_INVALID,
                 "%s: MPI is not initialised (MPI_Init_thread) or already finalised", fn);
    ATTN_FAIL_IF(comm == MPI_COMM_NULL, ctx, ATTN_E_INVALID, "%s: comm is MPI_COMM_NULL", fn);
    int rc = MPI_Comm_test_inter(comm, &inter);
    if (rc != MPI_SUCCESS) return mpi_fail(R, rc, "MPI_Comm_test_inter");
    ATTN_FAIL_IF(inter, ctx, ATTN_E_INVALID, "%s: comm is an inter-communicator", fn);
    MPI_Comm_rank(comm, &R->rank);
    MPI_Comm_size(comm, &R->size);
    R->prev = (R->rank + R->size - 1) % R->size, R->next = (R->rank + 1) % R->size;
    /* a bad timeout is this rank's refusal, told to the others through the agreement (which
     * waits the default meanwhile) */
    if (!o || o->timeout_s == 0) {
        R->local = attn__mpi_env_timeout(ctx, fn, &R->timeout);
    } else if (!(o->timeout_s > 0) || !isfinite(o->timeout_s)) {
        R->local = attn__fail(ctx, ATTN_E_INVALID,
                              "%s: timeout_s must be a positive number of seconds (0: the "
                              "default), got %g", fn, o->timeout_s);
    } else {
        R->timeout = o->timeout_s;
    }
    return ATTN_OK;
}

/* ---- the shapes every rank must agree on ------------------------------------------------- */
enum { F_FAIL, F_OP, F_B, F_H, F_HKV, F_L, F_S, F_D, F_DV, F_CAUSAL, F_LAYOUT, F_SCALE,
       F_SOFTCAP, F_SEQ, F_COUNT };
static const char *const FIELD[F_COUNT] = {
    "status",          "operation",         "batch size",        "query heads",
    "key/value heads", "local query length", "local key length", "head dimension",
    "value head dimension", "causal mode",  "layout",            "scale",
    "softcap",         "seq_len"};

typedef struct spec {
    int64_t B, H, Hkv, L, S, D, Dv;
    int causal, zigzag; /* zigzag: the causal zigzag cut (2 chunks per rank) */
    attn_ring_layout layout;
    float scale, softcap;
    int64_t seq;
    int64_t nk, nv, nkv; /* floats of this rank's K, V, both */
} spec;

static int64_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (int64_t)u;
}
static double bits_float(int64_t b) {
    uint32_t u = (uint32_t)b;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* One MPI_Iallreduce (MIN over the fields and their negations: the minimum and the maximum
 * at once) of every rank's status and shapes.  Returns this rank's own refusal, a refusal of
 * another rank (ATTN_E_INVALID naming it), a disagreement (ATTN_E_SHAPE naming the field), a
 * timeout, or ATTN_OK on every rank alike. */
static attn_status ring_agree(ring *R, const spec *sp, int op, attn_status local) {
    int64_t *buf = attn__malloc(R->ctx, 4 * F_COUNT * sizeof(int64_t));
    if (!buf) return attn__fail(R->ctx, ATTN_E_NOMEM, "%s: out of memory", R->fn);
    int64_t *d = buf, *mn = buf + 2 * F_COUNT;
    memset(d, 0, 2 * F_COUNT * sizeof(int64_t));
    d[F_FAIL] = local != ATTN_OK ? (int64_t)R->rank * 64 + (int64_t)local : INT64_MAX;
    if (local == ATTN_OK) {
        d[F_OP] = op, d[F_B] = sp->B, d[F_H] = sp->H, d[F_HKV] = sp->Hkv, d[F_L] = sp->L;
        d[F_S] = sp->S, d[F_D] = sp->D, d[F_DV] = sp->Dv, d[F_CAUSAL] = sp->causal;
        d[F_LAYOUT] = sp->layout, d[F_SCALE] = float_bits(sp->scale);
        d[F_SOFTCAP] = float_bits(sp->softcap), d[F_SEQ] = sp->seq;
    }
    for (int f = 0; f < F_COUNT; f++) d[F_COUNT + f] = f == F_FAIL ? 0 : -d[f];
    MPI_Request rq = MPI_REQUEST_NULL;
    int rc = MPI_Iallreduce(d, mn, 2 * F_COUNT, MPI_INT64_T, MPI_MIN, R->comm, &rq);
    if (rc != MPI_SUCCESS) {
        attn__free(R->ctx, buf);
        return mpi_fail(R, rc, "MPI_Iallreduce");
    }
    char own[ATTN__MSG_MAX];
    memcpy(own, R->ctx->msg, sizeof own);
    attn_status st = ring_wait(R, &rq, 1, "the other ranks' shapes (the call's agreement)", -1);
    if (st != ATTN_OK) { /* a collective cannot be cancelled: buf stays MPI's */
        if (local != ATTN_OK) /* this rank's own refusal says more than the wait */
            return attn__fail(R->ctx, local, "%s", own);
        return st;
    }
    if (local != ATTN_OK) {
        attn__free(R->ctx, buf);
        return local;
    }
    if (mn[F_FAIL] != INT64_MAX) {
        int who = (int)(mn[F_FAIL] / 64);
        attn_status why = (attn_status)(mn[F_FAIL] % 64);
        attn__free(R->ctx, buf);
        return attn__fail(R->ctx, ATTN_E_INVALID,
                          "%s: rank %d refused the call (%s; its context has the message); "
                          "nothing was computed",
                          R->fn, who, attn_status_name(why));
    }
    for (int f = F_OP; f < F_COUNT; f++) {
        int64_t lo = mn[f], hi = -mn[F_COUNT + f];
        if (lo == hi) continue;
        attn__free(R->ctx, buf);
        if (f == F_OP)
            return attn__fail(R->ctx, ATTN_E_INVALID,
                              "%s: some ranks called attn_sdpa_ring, others "
                              "attn_sdpa_ring_backward", R->fn);
        if (f == F_SCALE || f == F_SOFTCAP)
            return attn__fail(R->ctx, ATTN_E_SHAPE,
                              "%s: the ranks disagree on the %s (%g on some, %g on others); "
                              "every rank must pass the same shapes and options",
                              R->fn, FIELD[f], bits_float(lo), bits_float(hi));
        return attn__fail(R->ctx, ATTN_E_SHAPE,
                          "%s: the ranks disagree on the %s (%lld on some, %lld on others); "
                          "every rank must pass the same shapes and options",
                          R->fn, FIELD[f], (long long)lo, (long long)hi);
    }
    attn__free(R->ctx, buf);
    return ATTN_OK;
}

/* ---- argument checks (this rank's; ring_agree compares them across ranks) ---------------- */
static attn_status check_inputs(ring *R, const attn_tensor *q, const attn_tensor *k,
                                const attn_tensor *v, const attn_ring_options *opt, spec *sp) {
    attn_ctx *ctx = R->ctx;
    const char *fn = R->fn;
    attn_ring_options o = opt ? *opt : attn_ring_defaults();
    ATTN_TRY(attn__check(ctx, q, "query", ATTN_F32, 4, 4));
    ATTN_TRY(attn__check(ctx, k, "key", ATTN_F32, 4, 4));
    ATTN_TRY(attn__check(ctx, v, "value", ATTN_F32, 4, 4));
    memset(sp, 0, sizeof *sp);
    sp->B = q->shape[0], sp->H = q->shape[1], sp->L = q->shape[2], sp->D = q->shape[3];
    sp->Hkv = k->shape[1], sp->S = k->shape[2], sp->Dv = v->shape[3];
    char s1[96], s2[96];
    ATTN_FAIL_IF(k->shape[0] != sp->B || k->shape[3] != sp->D, ctx, ATTN_E_SHAPE,
                 "%s: key %s does not match query %s (batch and head dim must agree)", fn,
                 attn__shape_str(k, s1, sizeof s1), attn__shape_str(q, s2, sizeof s2));
    ATTN_FAIL_IF(v->shape[0] != sp->B || v->shape[1] != sp->Hkv || v->shape[2] != sp->S, ctx,
                 ATTN_E_SHAPE,
                 "%s: value %s does not match key %s (batch, heads and length must agree)", fn,
                 attn__shape_str(v, s1, sizeof s1), attn__shape_str(k, s2, sizeof s2));
    ATTN_FAIL_IF(sp->H % sp->Hkv != 0, ctx, ATTN_E_SHAPE,
                 "%s: query heads (%lld) must be a multiple of key/value heads (%lld)", fn,
                 (long long)sp->H, (long long)sp->Hkv);
    const attn_sdpa_options *so = &o.sdpa;
    ATTN_FAIL_IF((unsigned)so->causal > ATTN_CAUSAL_BOTTOM_RIGHT, ctx, ATTN_E_INVALID,
                 "%s: unknown causal mode %d", fn, (int)so->causal);
    ATTN_FAIL_IF(!isfinite(so->scale), ctx, ATTN_E_INVALID, "%s: scale must be finite", fn);
    ATTN_FAIL_IF(!(isfinite(so->softcap) && so->softcap >= 0.0f), ctx, ATTN_E_INVALID,
                 "%s: softcap must be finite and >= 0 (0 = off), got %g", fn,
                 (double)so->softcap);
    ATTN_FAIL_IF(so->dropout_p != 0.0f, ctx, ATTN_E_UNSUPPORTED,
                 "%s: dropout is not supported (its stream is indexed by global positions)", fn);
    ATTN_FAIL_IF(so->window && (so->window_left >= 0 || so->window_right >= 0), ctx,
                 ATTN_E_UNSUPPORTED, "%s: the sliding window is not supported", fn);
    ATTN_FAIL_IF(so->alibi_slopes != NULL, ctx, ATTN_E_UNSUPPORTED,
                 "%s: ALiBi is not supported (its bias depends on global positions)", fn);
    ATTN_FAIL_IF(o.layout != ATTN_RING_ZIGZAG && o.layout != ATTN_RING_CONTIGUOUS, ctx,
                 ATTN_E_INVALID, "%s: unknown layout %d", fn, (int)o.layout);
    ATTN_FAIL_IF(o.seq_len < 0, ctx, ATTN_E_INVALID, "%s: seq_len must be >= 0 (0: unchecked)",
                 fn);
    sp->causal = so->causal != ATTN_CAUSAL_NONE;
    sp->layout = o.layout;
    sp->zigzag = sp->causal && o.layout == ATTN_RING_ZIGZAG && R->size > 1;
    sp->scale = so->scale != 0.0f ? so->scale : (float)(1.0 / sqrt((double)sp->D));
    sp->softcap = so->softcap;
    sp->seq = o.seq_len;
    ATTN_FAIL_IF(sp->causal && sp->S != sp->L, ctx, ATTN_E_SHAPE,
                 "%s: a causal mask needs as many key rows as query rows on each rank (%lld "
                 "and %lld)", fn, (long long)sp->S, (long long)sp->L);
    int64_t total, N = R->size;
    ATTN_FAIL_IF(!attn__mul_i64(sp->L, N, &total), ctx, ATTN_E_OVERFLOW,
                 "%s: %lld ranks x %lld rows overflows", fn, (long long)N, (long long)sp->L);
    if (sp->seq > 0) {
        ATTN_FAIL_IF(sp->seq % N != 0, ctx, ATTN_E_SHAPE,
                     "%s: %lld ranks do not divide a sequence of %lld rows", fn, (long long)N,
                     (long long)sp->seq);
        ATTN_FAIL_IF(sp->zigzag && sp->seq % (2 * N) != 0, ctx, ATTN_E_SHAPE,
                     "%s: %lld ranks do not cut a sequence of %lld rows into %lld zigzag chunks "
                     "(causal, ATTN_RING_ZIGZAG: L must be divisible by 2N)",
                     fn, (long long)N, (long long)sp->seq, (long long)(2 * N));
        ATTN_FAIL_IF(total != sp->seq, ctx, ATTN_E_SHAPE,
                     "%s: %lld ranks x %lld local rows is %lld rows, not seq_len %lld", fn,
                     (long long)N, (long long)sp->L, (long long)total, (long long)sp->seq);
    }
    ATTN_FAIL_IF(sp->zigzag && sp->L % 2 != 0, ctx, ATTN_E_SHAPE,
                 "%s: the local length %lld is odd: the causal zigzag layout holds two chunks "
                 "of L/(2N) rows per rank (use a length divisible by 2N, or "
                 "ATTN_RING_CONTIGUOUS)", fn, (long long)sp->L);
    /* this rank's key/value block: it travels as floats, and is allocated */
    ATTN_FAIL_IF(!attn__mul_i64(sp->B * sp->Hkv, sp->S, &sp->nk) ||
                     !attn__mul_i64(sp->nk, sp->D + sp->Dv, &sp->nkv) ||
                     (uint64_t)sp->nkv > SIZE_MAX / sizeof(float) ||
                     sp->nkv / RING_CHUNK + 1 > INT_MAX / 4,
                 ctx, ATTN_E_OVERFLOW, "%s: the key/value block size overflows", fn);
    sp->nv = sp->nk * sp->Dv, sp->nk *= sp->D;
    return ATTN_OK;
}

/* ---- blocks: which queries of this rank see which keys of rank src ----------------------- */
typedef struct block {
    int skip;
    int64_t q0, qn, k0, kn;
    attn_causal causal;
} block;

/* Rank r's queries against the keys of rank src (ZIGZAG, c = L/2 rows per chunk: r holds
 * chunks r and 2N-1-r): src == r, the local causal mask over both chunks (the first sees
 * itself, the second the first and itself); src < r, every query sees the first chunk of src
 * only; src > r, the second chunk of queries sees both chunks of src.  Each is L x L/2.
 * CONTIGUOUS: diagonal causal, earlier ranks whole, later ranks nothing. */
static block plan(const spec *sp, int r, int src) {
    block b = {0, 0, sp->L, 0, sp->S, ATTN_CAUSAL_NONE};
    if (!sp->causal) return b;
    if (src == r) {
        b.causal = ATTN_CAUSAL_TOP_LEFT;
    } else if (!sp->zigzag) {
        b.skip = src > r;
    } else if (src < r) {
        b.kn = sp->S / 2;
    } else {
        b.q0 = sp->L / 2, b.qn = sp->L - sp->L / 2;
    }
    return b;
}

/* The kernel arguments of block b: q, and (bwd) o, from the caller's views; K and V from a
 * ring buffer [K: B, Hkv, S, D][V: B, Hkv, S, Dv] (contiguous). */
static void block_args(const spec *sp, const block *b, const attn_tensor *q, const float *kv,
                       const attn_tensor *o, attn__sdpa_args *a) {
    memset(a, 0, sizeof *a);
    a->B = sp->B, a->H = sp->H, a->Hkv = sp->Hkv, a->L = b->qn, a->S = b->kn;
    a->D = sp->D, a->Dv = sp->Dv;
    a->q = (const float *)q->data + b->q0 * q->stride[2];
    memcpy(a->qs, q->stride, sizeof a->qs);
    a->k = kv + b->k0 * sp->D;
    a->ks[0] = sp->Hkv * sp->S * sp->D, a->ks[1] = sp->S * sp->D, a->ks[2] = sp->D, a->ks[3] = 1;
    a->v = kv + sp->nk + b->k0 * sp->Dv;
    a->vs[0] = sp->Hkv * sp->S * sp->Dv, a->vs[1] = sp->S * sp->Dv, a->vs[2] = sp->Dv;
    a->vs[3] = 1;
    if (o) {
        a->o = (float *)o->data + b->q0 * o->stride[2];
        memcpy(a->os, o->stride, sizeof a->os);
    }
    a->mask_ncols[0] = a->mask_ncols[1] = b->kn;
    a->causal = b->causal;
    a->scale = sp->scale;
    a->softcap = sp->softcap;
}

/* dst (contiguous, the shape of t) = t. */
static void pack(const attn_tensor *t, float *dst) {
    const float *p = t->data;
    for (int64_t i0 = 0; i0 < t->shape[0]; i0++)
        for (int64_t i1 = 0; i1 < t->shape[1]; i1++)
            for (int64_t i2 = 0; i2 < t->shape[2]; i2++) {
                const float *r = p + i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2];
                if (t->stride[3] == 1) memcpy(dst, r, (size_t)t->shape[3] * sizeof(float));
                else
                    for (int64_t j = 0; j < t->shape[3]; j++) dst[j] = r[j * t->stride[3]];
                dst += t->shape[3];
            }
}

/* dst [outer, rows, w] rows [r0, r0 + n) += src [outer, n, w]. */
static void add_rows(float *dst, int64_t rows, int64_t r0, const float *src, int64_t outer,
                     int64_t n, int64_t w) {
    for (int64_t o = 0; o < outer; o++) {
        float *d = dst + (o * rows + r0) * w;
        const float *s = src + o * n * w;
        for (int64_t x = 0; x < n * w; x++) d[x] += s[x];
    }
}

/* The exact merge of two partial attentions of the same queries over disjoint keys: rows
 * [q0, q0 + qn) of (ao [BH, L, Dv], al [BH, L]) and (bo [BH, qn, Dv], bl [BH, qn]):
 * lse = log(e^la + e^lb), out = (e^la ao + e^lb bo) / e^lse, in double. */
static void merge(float *ao, float *al, int64_t L, int64_t q0, const float *bo, const float *bl,
                  int64_t BH, int64_t qn, int64_t Dv) {
    for (int64_t bh = 0; bh < BH; bh++)
        for (int64_t i = 0; i < qn; i++) {
            float *o = ao + (bh * L + q0 + i) * Dv, *l = al + bh * L + q0 + i;
            const float *p = bo + (bh * qn + i) * Dv;
            double la = *l, lb = bl[bh * qn + i];
            if (lb == -INFINITY) continue; /* no visible key in the block */
            if (la == -INFINITY) {
                memcpy(o, p, (size_t)Dv * sizeof(float));
                *l = (float)lb;
                continue;
            }
            double m = la > lb ? la : lb, ea = exp(la - m), eb = exp(lb - m), s = ea + eb;
            double wa = ea / s, wb = eb / s;
            for (int64_t e = 0; e < Dv; e++) o[e] = (float)(wa * o[e] + wb * p[e]);
            *l = (float)(m + log(s));
        }
}

/* ---- forward ------------------------------------------------------------------------------ */
attn_status attn_sdpa_ring(attn_ctx *ctx, MPI_Comm comm, const attn_tensor *q,
                           const attn_tensor *k, const attn_tensor *v,
                           const attn_ring_options *opt, attn_tensor *out, attn_tensor *lse) {
    if (!ctx) return ATTN_E_INVALID;
    const char *fn = "attn_sdpa_ring";
    ring R;
    ATTN_TRY(ring_open(&R, ctx, comm, opt, fn));
    spec sp;
    memset(&sp, 0, sizeof sp);
    attn_status local = R.local;
    if (local == ATTN_OK) local = check_inputs(&R, q, k, v, opt, &sp);
    if (local == ATTN_OK) {
        int64_t oshape[4] = {sp.B, sp.H, sp.L, sp.Dv};
        local = attn__check(ctx, out, "output", ATTN_F32, 4, 4);
        if (local == ATTN_OK) local = attn__check_shape(ctx, out, "output", 4, oshape);
        if (local == ATTN_OK && lse && lse->data) {
            local = attn__check(ctx, lse, "lse", ATTN_F32, 3, 3);
            if (local == ATTN_OK) local = attn__check_shape(ctx, lse, "lse", 3, oshape);
        }
        if (local == ATTN_OK) {
            attn__arg o[] = {{out, "out", 0}, {lse, "lse", 0}},
                      in[] = {{q, "q", 0}, {k, "k", 0}, {v, "v", 0}};
            local = attn__check_outputs(ctx, fn, o, 2, in, 3);
        }
        if (local == ATTN_OK) local = qkv_finite(ctx, q, k, v);
    }
    ATTN_TRY(ring_agree(&R, &sp, 0, local));

    int N = R.size;
    attn_status st = ATTN_OK;
    attn__mark mk = attn__ws_mark(ctx);
    float *kvb[2] = {NULL, NULL}, *acc_o, *acc_l, *tmp_o, *tmp_l;
    int64_t BH = sp.B * sp.H;
    R.nch = (int)((sp.nkv + RING_CHUNK - 1) / RING_CHUNK);
    ATTN_TRYG(attn__ws_f32(ctx, &acc_o, BH, sp.L, sp.Dv, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &acc_l, BH, sp.L, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &tmp_o, BH, sp.L, sp.Dv, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &tmp_l, BH, sp.L, 1, 1));
    /* the blocks MPI reads and writes live outside the workspace: after a timeout they may
     * have to outlive the call */
    for (int i = 0; i < (N > 1 ? 2 : 1); i++)
        if (!(kvb[i] = attn__malloc(ctx, (size_t)sp.nkv * sizeof(float)))) {
            st = attn__fail(ctx, ATTN_E_NOMEM, "%s: out of memory for the key/value blocks", fn);
            goto done;
        }
    if (!(R.req = attn__malloc(ctx, 4 * (size_t)R.nch * sizeof(MPI_Request)))) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "%s: out of memory", fn);
        goto done;
    }
    for (int i = 0; i < 4 * R.nch; i++) R.req[i] = MPI_REQUEST_NULL;
    {
        attn_tensor kc = *k, vc = *v;
        pack(&kc, kvb[0]);
        pack(&vc, kvb[0] + sp.nk);
    }
    for (int t = 0; t < N; t++) {
        int src = (R.rank - t + N) % N;
        float *cur = kvb[t % 2];
        if (t < N - 1) {
            ATTN_TRYG(ring_post(&R, R.req, kvb[(t + 1) % 2], sp.nkv, R.prev, RING_TAG_KV, 1));
            ATTN_TRYG(ring_post(&R, R.req + R.nch, cur, sp.nkv, R.next, RING_TAG_KV, 0));
        }
        block b = plan(&sp, R.rank, src);
        if (!b.skip) {
            attn__sdpa_args a;
            block_args(&sp, &b, q, cur, NULL, &a);
            /* the first block (this rank's own keys) covers every query row */
            float *o = t == 0 ? acc_o : tmp_o, *l = t == 0 ? acc_l : tmp_l;
            a.o = o, a.os[0] = sp.H * b.qn * sp.Dv, a.os[1] = b.qn * sp.Dv, a.os[2] = sp.Dv;
            a.os[3] = 1;
            a.lse = l, a.ls[0] = sp.H * b.qn, a.ls[1] = b.qn, a.ls[2] = 1;
            ATTN_TRYG(attn__sdpa(ctx, &a));
            if (t > 0) merge(acc_o, acc_l, sp.L, b.q0, tmp_o, tmp_l, BH, b.qn, sp.Dv);
        }
        if (t < N - 1) {
            char what[96];
            snprintf(what, sizeof what, "the key/value block of rank %d",
                     (R.rank - t - 1 + 2 * N) % N);
            ATTN_TRYG(ring_wait(&R, R.req, 2 * R.nch, what, R.prev));
        }
    }
    /* overflow (see attn_sdpa): every row has a visible key, so its lse must be finite */
    if (!(ctx->flags & ATTN_CTX_NO_FINITE_CHECK))
        for (int64_t r = 0; r < BH * sp.L; r++)
            if (!isfinite(acc_l[r]) || !isfinite(acc_o[r * sp.Dv])) {
                st = attn__fail(ctx, ATTN_E_NONFINITE,
                                "%s: scores (or the weighted sum of the values) overflow float "
                                "at (b, h, i) = (%lld, %lld, %lld) of rank %d; scale the inputs",
                                fn, (long long)(r / sp.L / sp.H), (long long)(r / sp.L % sp.H),
                                (long long)(r % sp.L), R.rank);
                break;
            }
    attn__store(acc_o, out);
    if (lse && lse->data) attn__store(acc_l, lse);
done:
    if (st != ATTN_OK) ring_abandon(&R);
    if (!R.leak) {
        for (int i = 0; i < 2; i++) attn__free(ctx, kvb[i]);
        attn__free(ctx, R.req);
    }
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- backward ----------------------------------------------------------------------------- */
/* An error (NONFINITE) when element 0 of a row of p [rows, w] is not finite. */
static attn_status rows_finite(ring *R, const char *what, const float *p, int64_t rows,
                               int64_t w) {
    if (R->ctx->flags & ATTN_CTX_NO_FINITE_CHECK) return ATTN_OK;
    for (int64_t r = 0; r < rows; r++)
        ATTN_FAIL_IF(!isfinite(p[r * w]), R->ctx, ATTN_E_NONFINITE,
                     "%s: %s row %lld of rank %d is %s: the scores (or a sum of products) "
                     "overflow float; scale the inputs",
                     R->fn, what, (long long)r, R->rank, isnan(p[r * w]) ? "NaN" : "infinite");
    return ATTN_OK;
}

attn_status attn_sdpa_ring_backward(attn_ctx *ctx, MPI_Comm comm, const attn_tensor *q,
                                    const attn_tensor *k, const attn_tensor *v,
                                    const attn_ring_options *opt, const attn_tensor *out,
                                    const attn_tensor *lse, const attn_tensor *dout,
                                    attn_tensor *dq, attn_tensor *dk, attn_tensor *dv) {
    if (!ctx) return ATTN_E_INVALID;
    const char *fn = "attn_sdpa_ring_backward";
    ring R;
    ATTN_TRY(ring_open(&R, ctx, comm, opt, fn));
    spec sp;
    memset(&sp, 0, sizeof sp);
    attn_status local = R.local;
    if (local == ATTN_OK) local = check_inputs(&R, q, k, v, opt, &sp);
    if (local == ATTN_OK && (!out || !out->data || !lse || !lse->data))
        local = attn__fail(ctx, ATTN_E_INVALID, "%s needs the forward's out and lse", fn);
    if (local == ATTN_OK) {
        int64_t oshape[4] = {sp.B, sp.H, sp.L, sp.Dv}, qshape[4] = {sp.B, sp.H, sp.L, sp.D},
                kshape[4] = {sp.B, sp.Hkv, sp.S, sp.D}, vshape[4] = {sp.B, sp.Hkv, sp.S, sp.Dv};
        const attn_tensor *ins[3] = {out, lse, dout};
        const char *inames[3] = {"out", "lse", "dout"};
        for (int i = 0; i < 3 && local == ATTN_OK; i++) {
            int nd = i == 1 ? 3 : 4;
            local = attn__check(ctx, ins[i], inames[i], ATTN_F32, nd, nd);
            if (local == ATTN_OK) local = attn__check_shape(ctx, ins[i], inames[i], nd, oshape);
        }
        attn_tensor *outs[3] = {dq, dk, dv};
        const char *onames[3] = {"dq", "dk", "dv"};
        const int64_t *shapes[3] = {qshape, kshape, vshape};
        for (int i = 0; i < 3 && local == ATTN_OK; i++)
            if (outs[i] && outs[i]->data) {
                local = attn__check(ctx, outs[i], onames[i], ATTN_F32, 4, 4);
                if (local == ATTN_OK)
                    local = attn__check_shape(ctx, outs[i], onames[i], 4, shapes[i]);
            }
        if (local == ATTN_OK) {
            attn__arg o[] = {{dq, "dq", 0}, {dk, "dk", 0}, {dv, "dv", 0}},
                      in[] = {{q, "q", 0},     {k, "k", 0},       {v, "v", 0},
                              {out, "out", 0}, {lse, "lse", 0},   {dout, "dout", 0}};
            local = attn__check_outputs(ctx, fn, o, 3, in, 6);
        }
        if (local == ATTN_OK) local = qkv_finite(ctx, q, k, v);
        if (local == ATTN_OK) local = attn__check_finite(ctx, out, "out", 0);
        /* every row sees a key: a saved -inf is a row the forward lost to overflow */
        if (local == ATTN_OK) local = attn__check_finite(ctx, lse, "lse", 0);
        if (local == ATTN_OK) local = attn__check_finite(ctx, dout, "dout", 0);
    }
    ATTN_TRY(ring_agree(&R, &sp, 1, local));

    int N = R.size;
    attn_status st = ATTN_OK;
    attn__mark mk = attn__ws_mark(ctx);
    float *kvb[2] = {NULL, NULL}, *dkvb[2] = {NULL, NULL};
    float *lse_all, *lse_hi = NULL, *dq_acc, *tmp_dq, *tmp_dkv;
    int64_t BH = sp.B * sp.H, half = sp.L / 2;
    R.nch = (int)((sp.nkv + RING_CHUNK - 1) / RING_CHUNK);
    ATTN_TRYG(attn__ws_f32(ctx, &lse_all, BH, sp.L, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dq_acc, BH, sp.L, sp.D, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &tmp_dq, BH, sp.L, sp.D, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &tmp_dkv, sp.nkv, 1, 1, 1));
    for (int i = 0; i < (N > 1 ? 2 : 1); i++) {
        kvb[i] = attn__malloc(ctx, (size_t)sp.nkv * sizeof(float));
        dkvb[i] = attn__malloc(ctx, (size_t)sp.nkv * sizeof(float));
        if (!kvb[i] || !dkvb[i]) {
            st = attn__fail(ctx, ATTN_E_NOMEM, "%s: out of memory for the key/value blocks", fn);
            goto done;
        }
    }
    if (!(R.req = attn__malloc(ctx, 4 * (size_t)R.nch * sizeof(MPI_Request)))) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "%s: out of memory", fn);
        goto done;
    }
    for (int i = 0; i < 4 * R.nch; i++) R.req[i] = MPI_REQUEST_NULL;
    {
        attn_tensor kc = *k, vc = *v, lc = *lse;
        pack(&kc, kvb[0]);
        pack(&vc, kvb[0] + sp.nk);
        /* the fused backward reads lse contiguous [B, H, rows]: all rows, and the second
         * chunk's rows alone (zigzag) */
        lc.ndim = 4, lc.shape[3] = 1, lc.stride[3] = 1;
        pack(&lc, lse_all);
        if (sp.zigzag) {
            ATTN_TRYG(attn__ws_f32(ctx, &lse_hi, BH, sp.L - half, 1, 1));
            for (int64_t bh = 0; bh < BH; bh++)
                memcpy(lse_hi + bh * (sp.L - half), lse_all + bh * sp.L + half,
                       (size_t)(sp.L - half) * sizeof(float));
        }
    }
    MPI_Request *kv_req = R.req, *dkv_recv = R.req + 2 * R.nch, *dkv_send = R.req + 3 * R.nch;
    for (int t = 0; t < N; t++) {
        int src = (R.rank - t + N) % N;
        float *cur = kvb[t % 2];
        if (t < N - 1) {
            ATTN_TRYG(ring_post(&R, kv_req, kvb[(t + 1) % 2], sp.nkv, R.prev, RING_TAG_KV, 1));
            ATTN_TRYG(ring_post(&R, kv_req + R.nch, cur, sp.nkv, R.next, RING_TAG_KV, 0));
        }
        block b = plan(&sp, R.rank, src);
        if (!b.skip) {
            attn__sdpa_args a;
            attn__sdpa_grads g;
            block_args(&sp, &b, q, cur, out, &a);
            memset(&g, 0, sizeof g);
            g.dout = (const float *)dout->data + b.q0 * dout->stride[2];
            memcpy(g.dos, dout->stride, sizeof g.dos);
            /* the first block (own keys, every query row) writes the accumulators directly */
            float *gq = t == 0 ? dq_acc : tmp_dq, *gk = t == 0 ? dkvb[0] : tmp_dkv;
            float *gv = t == 0 ? dkvb[0] + sp.nk : tmp_dkv + sp.B * sp.Hkv * b.kn * sp.D;
            g.dq = gq, g.dqs[0] = sp.H * b.qn * sp.D, g.dqs[1] = b.qn * sp.D, g.dqs[2] = sp.D;
            g.dk = gk, g.dks[0] = sp.Hkv * b.kn * sp.D, g.dks[1] = b.kn * sp.D, g.dks[2] = sp.D;
            g.dv = gv, g.dvs[0] = sp.Hkv * b.kn * sp.Dv, g.dvs[1] = b.kn * sp.Dv;
            g.dvs[2] = sp.Dv;
            g.dqs[3] = g.dks[3] = g.dvs[3] = 1;
            ATTN_TRYG(attn__flash_bwd(ctx, &a, &g, b.q0 ? lse_hi : lse_all));
            if (t > 0) add_rows(dq_acc, sp.L, b.q0, tmp_dq, BH, b.qn, sp.D);
        }
        if (N > 1) {
            if (t == 0) {
                ATTN_TRYG(ring_post(&R, dkv_send, dkvb[0], sp.nkv, R.next, RING_TAG_DKV, 0));
            } else {
                char what[96];
                snprintf(what, sizeof what, "the dK/dV accumulator of rank %d's keys", src);
                ATTN_TRYG(ring_wait(&R, dkv_recv, R.nch, what, R.prev));
                float *acc = dkvb[t % 2];
                if (!b.skip) {
                    int64_t BK = sp.B * sp.Hkv;
                    add_rows(acc, sp.S, b.k0, tmp_dkv, BK, b.kn, sp.D);
                    add_rows(acc + sp.nk, sp.S, b.k0, tmp_dkv + BK * b.kn * sp.D, BK, b.kn,
                             sp.Dv);
                }
                ATTN_TRYG(ring_wait(&R, dkv_send, R.nch, "the dK/dV accumulator's delivery",
                                    R.next));
                ATTN_TRYG(ring_post(&R, dkv_send, acc, sp.nkv, R.next, RING_TAG_DKV, 0));
            }
            /* the accumulator of the next step's keys (after the last step: this rank's own,
             * complete) */
            ATTN_TRYG(ring_post(&R, dkv_recv, dkvb[(t + 1) % 2], sp.nkv, R.prev, RING_TAG_DKV,
                                1));
        }
        if (t < N - 1) {
            char what[96];
            snprintf(what, sizeof what, "the key/value block of rank %d",
                     (R.rank - t - 1 + 2 * N) % N);
            ATTN_TRYG(ring_wait(&R, kv_req, 2 * R.nch, what, R.prev));
        }
    }
    float *own = dkvb[0];
    if (N > 1) {
        ATTN_TRYG(ring_wait(&R, dkv_recv, R.nch, "the dK/dV accumulator of this rank's keys",
                            R.prev));
        ATTN_TRYG(ring_wait(&R, dkv_send, R.nch, "the dK/dV accumulator's delivery", R.next));
        own = dkvb[N % 2];
    }
    ATTN_TRYG(rows_finite(&R, "dq", dq_acc, BH * sp.L, sp.D));
    ATTN_TRYG(rows_finite(&R, "dk", own, sp.B * sp.Hkv * sp.S, sp.D));
    ATTN_TRYG(rows_finite(&R, "dv", own + sp.nk, sp.B * sp.Hkv * sp.S, sp.Dv));
    if (dq && dq->data) attn__store(dq_acc, dq);
    if (dk && dk->data) attn__store(own, dk);
    if (dv && dv->data) attn__store(own + sp.nk, dv);
done:
    if (st != ATTN_OK) ring_abandon(&R);
    if (!R.leak) {
        for (int i = 0; i < 2; i++) attn__free(ctx, kvb[i]), attn__free(ctx, dkvb[i]);
        attn__free(ctx, R.req);
    }
    attn__ws_release(ctx, mk);
    return st;
}
