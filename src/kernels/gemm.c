/* attn__gemm (contract in kernels.h): BLIS/GotoBLAS-style blocked GEMM around the microkernel
 * of the context's kernel set (gemm.h, ctx->kern.gemm).
 *
 *   for jc in N, step nc:                       B block of nc columns
 *     for pc in K, step kc (in order):          K chunk; beta applies to the first chunk only
 *       pack B[pc:pc+kc, jc:jc+nc] into nr-wide micro-panels   (threads split the panels)
 *       for each mr-row micro-panel of A:        (threads split these, or the B panels)
 *         pack A[i:i+mr, pc:pc+kc] (stays in L1)
 *         for each B micro-panel: microkernel on the mr x nr tile of C
 *
 * Determinism.  Every C element is computed by the same microkernel over the same K chunks
 * in the same order, whatever the thread count or which thread owns its tile: threads only
 * decide who computes a tile, never how.  Edge tiles go through a scratch tile and the same
 * microkernel, so they round like interior ones.
 *
 * Memory: the packed B block and one packed A micro-panel per thread come from the context
 * workspace (mark/release); nothing else is allocated.  Like every use of the workspace, a call
 * must not come from inside a parallel_for task of the same context. */
#include <string.h>

#include "gemm.h"
#include "kernels.h"
#include "pool.h"

typedef struct attn__gemm_job {
    const attn__gemm_kernel *kr;
    int transA, transB;
    int64_t M, N, K;
    float alpha;
    const float *A;
    int64_t lda;
    const float *B;
    int64_t ldb;
    float *C;
    int64_t ldc;
    /* the current block */
    int64_t jc, nc, pc, kc;
    float beta;       /* beta for this K chunk */
    int serial;       /* too small to be worth waking the pool */
    int64_t nb_panels; /* B micro-panels in the block */
    int64_t m_panels;  /* A micro-panels in M */
    float *bpack;      /* nb_panels x (kc x nr) */
    const float *bw;   /* or NULL: B packed once (attn__gemm_pack_weight), block by block */
    float *apack;      /* per thread slot (tid): mr x kc */
    int64_t apack_stride;
    const attn__row_epi *epi; /* run by the rows task on finished micro-panels, or NULL */
} attn__gemm_job;

/* Plain C packing (contract in gemm.h). */
static void attn__gemm_pack_c(int contig, int64_t kc, const float *restrict src, int64_t ld,
                              int64_t nv, int w, float *restrict dst) {
    if (contig) {
        for (int64_t k = 0; k < kc; k++) {
            const float *s = src + k * ld;
            float *d = dst + k * w;
            int64_t i = 0;
            for (; i < nv; i++) d[i] = s[i];
            for (; i < w; i++) d[i] = 0.0f;
        }
        return;
    }
    for (int64_t k0 = 0; k0 < kc; k0 += 16) { /* 16 K values of each row at a time */
        int64_t kn = kc - k0 < 16 ? kc - k0 : 16;
        for (int64_t i = 0; i < nv; i++) {
            const float *s = src + i * ld + k0;
            float *d = dst + k0 * w + i;
            for (int64_t k = 0; k < kn; k++) d[k * w] = s[k];
        }
        for (int64_t i = nv; i < w; i++)
            for (int64_t k = 0; k < kn; k++) dst[(k0 + k) * w + i] = 0.0f;
    }
}

void attn__gemm_pack_panel(const attn__gemm_kernel *kr, int a, int contig, int64_t kc,
                           const float *src, int64_t ld, int64_t nv, float *dst) {
    attn__gemm_pack_fn fn = a ? kr->pack_a : kr->pack_b;
    if (fn)
        fn(contig, kc, src, ld, nv, dst);
    else
        attn__gemm_pack_c(contig, kc, src, ld, nv, a ? kr->mr : kr->nr, dst);
}

/* Packs op(B)[pc:pc+kc, j0:j0+nr] (zero beyond column jc+nc) as kc rows of nr values. */
static void attn__gemm_pack_b(const attn__gemm_job *g, int64_t p, float *dst) {
    const int nr = g->kr->nr;
    const int64_t j0 = g->jc + p * nr;
    const int64_t nv = g->jc + g->nc - j0 < nr ? g->jc + g->nc - j0 : nr;
    /* B [K, N]: a panel's columns are contiguous; B [N, K] (transB): its K values are */
    const float *src = g->transB ? g->B + j0 * g->ldb + g->pc : g->B + g->pc * g->ldb + j0;
    if (g->kr->pack_b)
        g->kr->pack_b(!g->transB, g->kc, src, g->ldb, nv, dst);
    else
        attn__gemm_pack_c(!g->transB, g->kc, src, g->ldb, nv, nr, dst);
}

/* Packs op(A)[i0:i0+mr, pc:pc+kc] (zero beyond row M) as kc columns of mr values. */
static void attn__gemm_pack_a(const attn__gemm_job *g, int64_t i0, float *dst) {
    const int mr = g->kr->mr;
    const int64_t mv = g->M - i0 < mr ? g->M - i0 : mr;
    /* A [M, K]: a panel's K values are contiguous; A [K, M] (transA): its rows are */
    const float *src = g->transA ? g->A + g->pc * g->lda + i0 : g->A + i0 * g->lda + g->pc;
    if (g->kr->pack_a)
        g->kr->pack_a(g->transA, g->kc, src, g->lda, mv, dst);
    else
        attn__gemm_pack_c(g->transA, g->kc, src, g->lda, mv, mr, dst);
}

/* One mr x nr tile of C at (i0, j0); full tiles in place, edge tiles through scratch.  pf
 * (may be NULL): rows [0, pf_rows) of the next A micro-panel's source to fetch meanwhile. */
static void attn__gemm_tile(const attn__gemm_job *g, const float *a, const float *b, int64_t i0,
                            int64_t j0, const float *pf, int64_t pf_rows) {
    const int mr = g->kr->mr, nr = g->kr->nr;
    const int64_t mv = g->M - i0 < mr ? g->M - i0 : mr;
    const int64_t nv = g->N - j0 < nr ? g->N - j0 : nr;
    float *c = g->C + i0 * g->ldc + j0;
    if (mv == mr && nv == nr) {
        if (pf && pf_rows > 0 && g->kr->ukr_pf)
            g->kr->ukr_pf(g->kc, a, b, c, g->ldc, g->alpha, g->beta, pf, pf_rows, g->lda,
                          g->kc);
        else
            g->kr->ukr(g->kc, a, b, c, g->ldc, g->alpha, g->beta);
        return;
    }
    _Alignas(64) float t[ATTN__GEMM_MR_MAX * ATTN__GEMM_NR_MAX];
    if (g->beta != 0.0f) {
        memset(t, 0, sizeof(float) * (size_t)(mr * nr));
        for (int64_t i = 0; i < mv; i++) memcpy(t + i * nr, c + i * g->ldc, sizeof(float) * (size_t)nv);
    }
    g->kr->ukr(g->kc, a, b, t, nr, g->alpha, g->beta);
    for (int64_t i = 0; i < mv; i++) memcpy(c + i * g->ldc, t + i * nr, sizeof(float) * (size_t)nv);
}

/* The packed B micro-panel p of the current block: from the per-call packing, or from the
 * weight packed once in the same order (attn__gemm_pack_weight: the blocks of nc columns, each
 * K chunk of a block as the per-call packing lays it out). */
static const float *attn__gemm_bpanel(const attn__gemm_job *g, int64_t p) {
    const int nr = g->kr->nr;
    const float *block = g->bw ? g->bw + g->jc * g->K + g->pc * g->nb_panels * nr : g->bpack;
    return block + p * g->kc * nr;
}

static void attn__gemm_pack_b_task(void *arg, int64_t begin, int64_t end, int tid) {
    const attn__gemm_job *g = arg;
    (void)tid;
    const int64_t panel = g->kc * g->kr->nr;
    for (int64_t p = begin; p < end; p++) attn__gemm_pack_b(g, p, g->bpack + p * panel);
}

/* Threads split the A micro-panels [begin, end); each sweeps all B panels of the block. */
static void attn__gemm_rows_task(void *arg, int64_t begin, int64_t end, int tid) {
    const attn__gemm_job *g = arg;
    const int mr = g->kr->mr, nr = g->kr->nr;
    float *a = g->apack + tid * g->apack_stride;
    for (int64_t r = begin; r < end; r++) {
        attn__gemm_pack_a(g, r * mr, a);
        /* rows of the next micro-panel (its source is row-major when A is not transposed),
         * a share per tile */
        const int pf = !g->transA && r + 1 < end;
        const int64_t nmv = g->M - (r + 1) * mr < mr ? g->M - (r + 1) * mr : mr;
        const float *nx = pf ? g->A + (r + 1) * mr * g->lda + g->pc : NULL;
        for (int64_t p = 0; p < g->nb_panels; p++) {
            const int64_t r0 = p * nmv / g->nb_panels, r1 = (p + 1) * nmv / g->nb_panels;
            attn__gemm_tile(g, a, attn__gemm_bpanel(g, p), r * mr, g->jc + p * nr,
                            nx ? nx + r0 * g->lda : NULL, r1 - r0);
        }
        if (g->epi) {
            const int64_t i0 = r * mr, mv = g->M - i0 < mr ? g->M - i0 : mr;
            g->epi->fn(g->epi->arg, g->C + i0 * g->ldc, g->ldc, i0, mv);
        }
    }
}

static void attn__gemm_epi_task(void *arg, int64_t begin, int64_t end, int tid) {
    const attn__gemm_job *g = arg;
    (void)tid;
    g->epi->fn(g->epi->arg, g->C + begin * g->ldc, g->ldc, begin, end - begin);
}

/* Threads split the B micro-panels [begin, end) (few rows, wide N); each packs all of A. */
static void attn__gemm_cols_task(void *arg, int64_t begin, int64_t end, int tid) {
    const attn__gemm_job *g = arg;
    const int mr = g->kr->mr, nr = g->kr->nr;
    float *a = g->apack + tid * g->apack_stride;
    for (int64_t r = 0; r < g->m_panels; r++) {
        attn__gemm_pack_a(g, r * mr, a);
        for (int64_t p = begin; p < end; p++)
            attn__gemm_tile(g, a, attn__gemm_bpanel(g, p), r * mr, g->jc + p * nr, NULL, 0);
    }
}

static float *attn__align64(float *p) {
    uintptr_t a = (uintptr_t)p;
    return (float *)(void *)(p + ((64 - (a & 63)) & 63) / sizeof(float));
}

static void attn__gemm_run(attn_ctx *ctx, attn__gemm_job *g, int64_t n, attn__task_fn fn) {
    if (g->serial)
        fn(g, 0, n, 0);
    else
        attn__parallel_for(ctx, n, fn, g);
}

/* C = beta * C (K == 0 or alpha == 0: A and B are not read). */
static void attn__gemm_scale(float *C, int64_t ldc, int64_t M, int64_t N, float beta) {
    if (beta == 1.0f) return;
    for (int64_t i = 0; i < M; i++) {
        float *c = C + i * ldc;
        if (beta == 0.0f)
            memset(c, 0, sizeof(float) * (size_t)N);
        else
            for (int64_t j = 0; j < N; j++) c[j] *= beta;
    }
}

attn_status attn__gemm(attn_ctx *ctx, int transA, int transB, int64_t M, int64_t N, int64_t K,
                       float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float beta, float *C, int64_t ldc) {
    return attn__gemm_epi(ctx, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                          NULL);
}

/* The epilogue as a pass over the rows of C (when it could not run inside the GEMM). */
static void attn__gemm_epi_pass(attn_ctx *ctx, attn__gemm_job *g, int64_t M) {
    if (g->serial)
        attn__gemm_epi_task(g, 0, M, 0);
    else
        attn__parallel_for(ctx, M, attn__gemm_epi_task, g);
}

/* attn__gemm_epi, or with bw (transB) B's panels packed once instead of packing B. */
static attn_status attn__gemm_run_all(attn_ctx *ctx, int transA, int transB, int64_t M,
                                      int64_t N, int64_t K, float alpha, const float *A,
                                      int64_t lda, const float *B, int64_t ldb, const float *bw,
                                      float beta, float *C, int64_t ldc,
                                      const attn__row_epi *epi) {
    if (M <= 0 || N <= 0) return ATTN_OK;
    if (K <= 0 || alpha == 0.0f) {
        attn__gemm_scale(C, ldc, M, N, beta);
        if (epi) {
            attn__gemm_job e;
            memset(&e, 0, sizeof e);
            e.C = C, e.ldc = ldc, e.epi = epi, e.serial = (double)M * (double)N < 262144.0;
            attn__gemm_epi_pass(ctx, &e, M);
        }
        return ATTN_OK;
    }
    const attn__gemm_kernel *kr = ctx->kern.gemm;
    attn__gemm_job g;
    memset(&g, 0, sizeof g);
    g.kr = kr;
    g.transA = transA != 0;
    g.transB = transB != 0;
    g.M = M, g.N = N, g.K = K;
    g.alpha = alpha;
    g.A = A, g.lda = lda, g.B = B, g.ldb = ldb, g.C = C, g.ldc = ldc, g.bw = bw;
    g.m_panels = (M + kr->mr - 1) / kr->mr;
    /* below ~2^18 multiply-adds (a few microseconds) two pool dispatches per block cost more
     * than they save; the result is the same either way */
    g.serial = (double)M * (double)N * (double)K < 262144.0;

    const int64_t kc_max = K < kr->kc ? K : kr->kc;
    const int64_t nc_max = N < kr->nc ? (N + kr->nr - 1) / kr->nr * kr->nr : kr->nc;
    const int threads = ctx->threads > 0 ? ctx->threads : 1;
    attn__mark mark = attn__ws_mark(ctx);
    attn_status st;
    float *bpack, *apack;
    g.apack_stride = (kr->mr * kc_max + 15) / 16 * 16; /* keep each 64-byte aligned */
    /* 16 spare floats: the pointers are re-aligned to 64 bytes here rather than trusting the
     * workspace's alignment after a release */
    st = attn__ws_alloc(ctx, bw ? 16 : (size_t)(kc_max * nc_max + 16), sizeof(float),
                        (void **)&bpack);
    if (st == ATTN_OK)
        st = attn__ws_alloc(ctx, (size_t)(g.apack_stride * threads + 16), sizeof(float),
                            (void **)&apack);
    if (st != ATTN_OK) {
        attn__ws_release(ctx, mark);
        return st;
    }
    g.bpack = attn__align64(bpack);
    g.apack = attn__align64(apack);
    int fused = 0;

    for (int64_t jc = 0; jc < N; jc += kr->nc) {
        g.jc = jc;
        g.nc = N - jc < kr->nc ? N - jc : kr->nc;
        g.nb_panels = (g.nc + kr->nr - 1) / kr->nr;
        /* Split rows unless that leaves threads idle or badly balanced and columns do not;
         * either way every tile is computed the same way. */
        int64_t w_rows = g.serial ? 1 : attn__parallel_width(ctx, g.m_panels);
        int64_t w_cols = g.serial ? 1 : attn__parallel_width(ctx, g.nb_panels);
        int64_t cost_rows = (g.m_panels + w_rows - 1) / w_rows * g.nb_panels;
        int64_t cost_cols = (g.nb_panels + w_cols - 1) / w_cols * g.m_panels;
        int split_cols = cost_cols * 10 < cost_rows * 9;
        /* the epilogue inside: in the last block of columns when rows are split (a row panel
         * is then final once its last K chunk is done, the earlier blocks' columns too) */
        if (epi && jc + g.nc == N && !split_cols) fused = 1;
        for (int64_t pc = 0; pc < K; pc += kr->kc) {
            g.pc = pc;
            g.kc = K - pc < kr->kc ? K - pc : kr->kc;
            g.beta = pc == 0 ? beta : 1.0f;
            g.epi = fused && pc + g.kc == K ? epi : NULL;
            if (!bw) attn__gemm_run(ctx, &g, g.nb_panels, attn__gemm_pack_b_task);
            if (split_cols)
                attn__gemm_run(ctx, &g, g.nb_panels, attn__gemm_cols_task);
            else
                attn__gemm_run(ctx, &g, g.m_panels, attn__gemm_rows_task);
        }
    }
    if (epi && !fused) {
        g.epi = epi;
        attn__gemm_epi_pass(ctx, &g, M);
    }
    attn__ws_release(ctx, mark);
    return ATTN_OK;
}

attn_status attn__gemm_epi(attn_ctx *ctx, int transA, int transB, int64_t M, int64_t N,
                           int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                           int64_t ldb, float beta, float *C, int64_t ldc,
                           const attn__row_epi *epi) {
    return attn__gemm_run_all(ctx, transA, transB, M, N, K, alpha, A, lda, B, ldb, NULL, beta, C,
                              ldc, epi);
}

int64_t attn__gemm_weight_floats(const attn__gemm_kernel *kr, int64_t N, int64_t K) {
    if (N <= 0 || K <= 0) return 0;
    const int64_t panels = N / kr->nr + (N % kr->nr != 0);
    return panels > INT64_MAX / kr->nr / K ? -1 : panels * kr->nr * K;
}

void attn__gemm_pack_weight(const attn__gemm_kernel *kr, const float *W, int64_t N, int64_t K,
                            float *dst) {
    const int nr = kr->nr;
    for (int64_t jc = 0; jc < N; jc += kr->nc) { /* as attn__gemm_epi's blocks and chunks */
        const int64_t nc = N - jc < kr->nc ? N - jc : kr->nc, np = (nc + nr - 1) / nr;
        for (int64_t pc = 0; pc < K; pc += kr->kc) {
            const int64_t kc = K - pc < kr->kc ? K - pc : kr->kc;
            for (int64_t p = 0; p < np; p++) { /* W [N, K]: a panel's K values are contiguous */
                const int64_t j0 = jc + p * nr;
                attn__gemm_pack_panel(kr, 0, 0, kc, W + j0 * K + pc, K,
                                      N - j0 < nr ? N - j0 : nr,
                                      dst + jc * K + pc * np * nr + p * kc * nr);
            }
        }
    }
}

attn_status attn__gemm_packed(attn_ctx *ctx, int64_t M, int64_t N, int64_t K, const float *A,
                              int64_t lda, const float *bw, float beta, float *C, int64_t ldc,
                              const attn__row_epi *epi) {
    return attn__gemm_run_all(ctx, 0, 1, M, N, K, 1.0f, A, lda, NULL, K, bw, beta, C, ldc, epi);
}
