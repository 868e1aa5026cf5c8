/* Mixed-precision GEMM (contract, error bound and layout in gemm_mixed.h): plain C packing
 * and microkernel (the fallback and the oracle), and the driver. */
#include <string.h>

#include "gemm_mixed.h"
#include "pool.h"

/* ---- plain C packing and microkernel ------------------------------------------------------ */
static void pack_a_c(int trans, const float *src, int64_t ld, int64_t mv, int mr, int64_t K,
                     int64_t kp, attn__bf16 *dst, int64_t lda, float *sum) {
    if (sum && trans)
        for (int64_t k = 0; k < K; k++)
            for (int64_t i = 0; i < mv; i++) sum[i] += src[k * ld + i];
    if (trans) { /* op(A)[i, k] = src[k * ld + i]: read along i, 16 values of k at a time */
        for (int64_t k0 = 0; k0 < K; k0 += 16) {
            const int64_t kn = K - k0 < 16 ? K - k0 : 16;
            for (int64_t k = 0; k < kn; k++) {
                const float *s = src + (k0 + k) * ld;
                for (int64_t i = 0; i < mv; i++) dst[i * lda + k0 + k] = attn__f32_to_bf16_daz(s[i]);
            }
        }
    } else {
        for (int64_t i = 0; i < mv; i++)
            for (int64_t k = 0; k < K; k++)
                dst[i * lda + k] = attn__f32_to_bf16_daz(src[i * ld + k]);
    }
    for (int64_t i = 0; i < mv; i++)
        memset(dst + i * lda + K, 0, sizeof(attn__bf16) * (size_t)(kp - K));
    for (int64_t i = mv; i < mr; i++) memset(dst + i * lda, 0, sizeof(attn__bf16) * (size_t)kp);
}

static void pack_b_c(int trans, const float *src, int64_t ld, int64_t nv, int nr, int64_t K,
                     int64_t kp, attn__bf16 *dst) {
    const int64_t np = (nv + nr - 1) / nr;
    memset(dst, 0, sizeof(attn__bf16) * (size_t)(kp * nr * np));
    for (int64_t jj = 0; jj < nv; jj++) {
        attn__bf16 *d = dst + jj / nr * nr * kp;
        const int64_t j = jj % nr;
        for (int64_t k = 0; k < K; k++) {
            const float v = trans ? src[jj * ld + k] : src[k * ld + jj];
            d[((k >> 1) * nr + j) * 2 + (k & 1)] = attn__f32_to_bf16_daz(v);
        }
    }
}

void attn__mixed_pack_a_c(int trans, const float *src, int64_t ld, int64_t mv, int mr, int64_t K,
                          int64_t kp, attn__bf16 *dst, int64_t lda, float *sum) {
    pack_a_c(trans, src, ld, mv, mr, K, kp, dst, lda, sum);
}

void attn__mixed_pack_b_c(int trans, const float *src, int64_t ld, int64_t nv, int nr, int64_t K,
                          int64_t kp, attn__bf16 *dst) {
    pack_b_c(trans, src, ld, nv, nr, K, kp, dst);
}

#define REF_MR 16
#define REF_NR 16

static void ukr_ref(int64_t kh, const attn__bf16 *a, int64_t lda, const attn__bf16 *b, float *c,
                    int64_t ldc, int acc) {
    for (int64_t i = 0; i < REF_MR; i++) {
        float s[REF_NR];
        for (int64_t j = 0; j < REF_NR; j++) s[j] = acc ? c[i * ldc + j] : 0.0f;
        const attn__bf16 *ar = a + i * lda;
        for (int64_t q = 0; q < kh; q++) {
            /* products of two bf16 values are exact in float: only the sums round */
            const float a0 = attn__bf16_to_f32(ar[2 * q]), a1 = attn__bf16_to_f32(ar[2 * q + 1]);
            const attn__bf16 *bq = b + q * REF_NR * 2;
            for (int64_t j = 0; j < REF_NR; j++) {
                s[j] += a0 * attn__bf16_to_f32(bq[2 * j]);
                s[j] += a1 * attn__bf16_to_f32(bq[2 * j + 1]);
            }
        }
        for (int64_t j = 0; j < REF_NR; j++) c[i * ldc + j] = s[j];
    }
}

static const attn__mixed_kernel ref_table = {"ref", REF_MR, REF_NR, (size_t)1 << 20, ukr_ref,
                                             NULL, NULL, pack_a_c, pack_b_c, 0, 0};

const attn__mixed_kernel *attn__mixed_kernel_ref(void) { return &ref_table; }

/* ---- driver ---------------------------------------------------------------------------- */
typedef struct mixed_job {
    const attn__mixed_kernel *k;
    attn__mixed_pack_a_fn pack_a;
    attn__mixed_pack_b_fn pack_b;
    int transA, transB, acc;
    int64_t M, N, K, kp, kc; /* kc: the K' slice of a microkernel call in rows_task */
    const float *A, *B;
    int64_t lda, ldb;
    float *C;
    int64_t ldc;
    attn__bf16 *ap, *bp; /* packed panels: A panel r at ap + r mr kp, B panel p at bp + p nr kp */
    int64_t m_panels, n_panels;
    int64_t p0, p1; /* the current block of B panels */
    const attn__row_epi *epi; /* on each finished row panel (in the last block of B panels) */
    float *suma;              /* NULL, or the row sums of op(A) (transA) */
} mixed_job;

/* Panels packed per call: a transposed A or an untransposed B is read PACK_GROUP panels wide
 * per source row (long segments instead of one 128-byte piece per row and page). */
#define PACK_GROUP 8

static void pack_a_task(void *arg, int64_t begin, int64_t end, int tid) {
    const mixed_job *g = arg;
    const int64_t mr = g->k->mr;
    (void)tid;
    for (int64_t r = begin; r < end; r += PACK_GROUP) {
        const int64_t nr = end - r < PACK_GROUP ? end - r : PACK_GROUP;
        const int64_t i0 = r * mr, rows = nr * mr, mv = g->M - i0 < rows ? g->M - i0 : rows;
        const float *src = g->transA ? g->A + i0 : g->A + i0 * g->lda;
        g->pack_a(g->transA, src, g->lda, mv, (int)rows, g->K, g->kp, g->ap + i0 * g->kp,
                  g->kp, g->suma ? g->suma + i0 : NULL);
    }
}

static void pack_b_task(void *arg, int64_t begin, int64_t end, int tid) {
    const mixed_job *g = arg;
    const int64_t nr = g->k->nr;
    (void)tid;
    for (int64_t p = begin; p < end; p += PACK_GROUP) {
        const int64_t np = end - p < PACK_GROUP ? end - p : PACK_GROUP;
        const int64_t j0 = p * nr, cols = np * nr, nv = g->N - j0 < cols ? g->N - j0 : cols;
        const float *src = g->transB ? g->B + j0 * g->ldb : g->B + j0;
        g->pack_b(g->transB, src, g->ldb, nv, (int)nr, g->K, g->kp, g->bp + p * nr * g->kp);
    }
}

/* Tile (r, p) of C over the K' slice [k0, k1): full tiles in place; edge tiles through a
 * scratch tile, all of K' at once (at k0 = 0; nothing for the later slices). */
static void tile(const mixed_job *g, int64_t r, int64_t p, int64_t k0, int64_t k1) {
    const int mr = g->k->mr, nr = g->k->nr;
    const int64_t i0 = r * mr, j0 = p * nr;
    const int64_t mv = g->M - i0 < mr ? g->M - i0 : mr, nv = g->N - j0 < nr ? g->N - j0 : nr;
    const attn__bf16 *a = g->ap + r * mr * g->kp, *b = g->bp + p * nr * g->kp;
    float *c = g->C + i0 * g->ldc + j0;
    if (mv == mr && nv == nr) {
        g->k->ukr((k1 - k0) / 2, a + k0, g->kp, b + k0 * nr, c, g->ldc, g->acc || k0 > 0);
        return;
    }
    if (k0 > 0) return;
    _Alignas(64) float t[32 * 32];
    if (g->acc)
        for (int64_t i = 0; i < mv; i++) memcpy(t + i * nr, c + i * g->ldc, sizeof(float) * (size_t)nv);
    g->k->ukr(g->kp / 2, a, g->kp, b, t, nr, g->acc);
    for (int64_t i = 0; i < mv; i++) memcpy(c + i * g->ldc, t + i * nr, sizeof(float) * (size_t)nv);
}

/* Threads split the A panels; each sweeps the block's B panels (in L2). */
static void rows_task(void *arg, int64_t begin, int64_t end, int tid) {
    const mixed_job *g = arg;
    (void)tid;
    if (g->k->begin) g->k->begin();
    for (int64_t r = begin; r < end; r++) {
        for (int64_t k0 = 0; k0 < g->kp; k0 += g->kc) {
            const int64_t k1 = g->kp - k0 < g->kc ? g->kp : k0 + g->kc;
            for (int64_t p = g->p0; p < g->p1; p++) tile(g, r, p, k0, k1);
        }
        if (g->epi) {
            const int mr = g->k->mr;
            const int64_t i0 = r * mr, mv = g->M - i0 < mr ? g->M - i0 : mr;
            g->epi->fn(g->epi->arg, g->C + i0 * g->ldc, g->ldc, i0, mv);
        }
    }
    if (g->k->end) g->k->end();
}

/* Threads split the block's B panels (few rows, wide N); each sweeps every A panel. */
static void cols_task(void *arg, int64_t begin, int64_t end, int tid) {
    const mixed_job *g = arg;
    (void)tid;
    if (g->k->begin) g->k->begin();
    for (int64_t r = 0; r < g->m_panels; r++)
        for (int64_t p = g->p0 + begin; p < g->p0 + end; p++) tile(g, r, p, 0, g->kp);
    if (g->k->end) g->k->end();
}

static void epi_task(void *arg, int64_t begin, int64_t end, int tid) {
    const mixed_job *g = arg;
    (void)tid;
    g->epi->fn(g->epi->arg, g->C + begin * g->ldc, g->ldc, begin, end - begin);
}

static void run(attn_ctx *ctx, int serial, int64_t n, attn__task_fn fn, mixed_job *g) {
    if (serial || n == 1)
        fn(g, 0, n, 0);
    else
        attn__parallel_for(ctx, n, fn, g);
}

static attn__bf16 *align64(attn__bf16 *p) {
    uintptr_t a = (uintptr_t)p;
    return p + ((64 - (a & 63)) & 63) / sizeof(attn__bf16);
}

attn_status attn__gemm_mixed_k(attn_ctx *ctx, const attn__mixed_kernel *k, int transA,
                               int transB, int64_t M, int64_t N, int64_t K, const float *A,
                               int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                               int64_t ldc, const attn__row_epi *epi, float *suma) {
    if (M <= 0 || N <= 0) return ATTN_OK;
    if (suma && !transA)
        return attn__fail(ctx, ATTN_E_INVALID, "internal: mixed GEMM row sums need op(A) = A^T");
    mixed_job g;
    memset(&g, 0, sizeof g);
    g.k = k;
    g.pack_a = k->pack_a ? k->pack_a : pack_a_c;
    g.pack_b = k->pack_b ? k->pack_b : pack_b_c;
    g.transA = transA != 0, g.transB = transB != 0, g.acc = beta != 0.0f;
    g.M = M, g.N = N, g.K = K < 0 ? 0 : K;
    g.kp = (g.K + ATTN__MIXED_KALIGN - 1) / ATTN__MIXED_KALIGN * ATTN__MIXED_KALIGN;
    if (g.kp == 0) g.kp = ATTN__MIXED_KALIGN; /* K = 0: zero panels, C = beta C */
    g.A = A, g.lda = lda, g.B = B, g.ldb = ldb, g.C = C, g.ldc = ldc, g.suma = suma;
    g.kc = g.kp;
    if (k->kc > 0 && g.kp <= k->kc_upto) { /* slices of about kc, multiples of the K' unit */
        const int64_t ns = (g.kp + k->kc - 1) / k->kc, u = ATTN__MIXED_KALIGN;
        g.kc = ((g.kp + ns - 1) / ns + u - 1) / u * u;
    }
    g.m_panels = (M + k->mr - 1) / k->mr;
    g.n_panels = (N + k->nr - 1) / k->nr;
    size_t na, nb, n;
    if (!attn__mul_size((size_t)g.m_panels * (size_t)k->mr, (size_t)g.kp, &na) ||
        !attn__mul_size((size_t)g.n_panels * (size_t)k->nr, (size_t)g.kp, &nb) ||
        !attn__add_size(na, nb, &n) || !attn__add_size(n, 64, &n))
        return attn__fail(ctx, ATTN_E_NOMEM, "mixed GEMM: packed operands overflow size_t");
    attn__mark mark = attn__ws_mark(ctx);
    attn__bf16 *buf;
    ATTN_TRY(attn__ws_alloc(ctx, n, sizeof(attn__bf16), (void **)&buf));
    g.ap = align64(buf);
    g.bp = align64(g.ap + na);
    /* below ~2^18 multiply-adds waking the pool costs more than it saves (same result) */
    const int serial = (double)M * (double)N * (double)g.kp < 262144.0;
    run(ctx, serial, g.m_panels, pack_a_task, &g);
    run(ctx, serial, g.n_panels, pack_b_task, &g);
    /* blocks of B panels sized for L2; the epilogue runs on each row panel right after its
     * tiles of the last block (rows split between the threads there), while they are warm */
    const size_t panel_bytes = (size_t)k->nr * (size_t)g.kp * sizeof(attn__bf16);
    int64_t per = (int64_t)(k->block_bytes / panel_bytes);
    if (per < 1) per = 1;
    for (g.p0 = 0; g.p0 < g.n_panels; g.p0 = g.p1) {
        g.p1 = g.n_panels - g.p0 < per ? g.n_panels : g.p0 + per;
        const int64_t nb_panels = g.p1 - g.p0;
        const int64_t w_rows = serial ? 1 : attn__parallel_width(ctx, g.m_panels);
        const int64_t w_cols = serial ? 1 : attn__parallel_width(ctx, nb_panels);
        const int64_t cost_rows = (g.m_panels + w_rows - 1) / w_rows * nb_panels;
        const int64_t cost_cols = (nb_panels + w_cols - 1) / w_cols * g.m_panels;
        const int cols = cost_cols * 10 < cost_rows * 9;
        /* the last block: the epilogue inside, unless the columns are split (few rows) */
        g.epi = epi && g.p1 == g.n_panels && (!cols || g.n_panels <= per) ? epi : NULL;
        if (cols && !g.epi)
            run(ctx, serial, nb_panels, cols_task, &g);
        else
            run(ctx, serial, g.m_panels, rows_task, &g);
        if (epi && g.p1 == g.n_panels && !g.epi) { /* after a column split: its own pass */
            g.epi = epi;
            run(ctx, (double)M * (double)N < 262144.0, M, epi_task, &g);
        }
    }
    attn__ws_release(ctx, mark);
    return ATTN_OK;
}

attn_status attn__gemm_mixed(attn_ctx *ctx, int transA, int transB, int64_t M, int64_t N,
                             int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                             float beta, float *C, int64_t ldc, const attn__row_epi *epi) {
    return attn__gemm_mixed_k(ctx, ctx->kern.mixed, transA, transB, M, N, K, A, lda, B, ldb,
                              beta, C, ldc, epi, NULL);
}

attn_status attn__gemm_mixed_suma(attn_ctx *ctx, int64_t M, int64_t N, int64_t K, const float *A,
                                  int64_t lda, int transB, const float *B, int64_t ldb,
                                  float beta, float *C, int64_t ldc, float *suma) {
    return attn__gemm_mixed_k(ctx, ctx->kern.mixed, 1, transB, M, N, K, A, lda, B, ldb, beta, C,
                              ldc, NULL, suma);
}
