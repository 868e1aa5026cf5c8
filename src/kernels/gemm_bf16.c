/* bf16 linear layer (contract and rounding in gemm_bf16.h): weight packing, the plain C
 * microkernel (fallback and oracle) and the driver.
 *
 * Driver.  Threads split the rows of x into micro-panels of MR rows.  For each micro-panel a
 * thread rounds its MR x K slice of x to bf16 into its own scratch (rows beyond M zero), then,
 * one K chunk of KCH pairs at a time (in order; the staged slice of a chunk stays in L1), runs
 * the microkernel over every packed panel of W.  The packed weights (K x N bf16: 0.3 to 1.2 MB
 * for MiniLM) stay in L2 across micro-panels.  Every output element is the same sequence of
 * operations whoever computes it: bit-identical for every thread count. */
#include <string.h>

#include "gemm_bf16.h"
#include "pool.h"

#define MR ATTN__BF16_MR
#define NR ATTN__BF16_NR
#define KCH 256 /* pairs per K chunk: MR x 512 bf16 = 14 KiB of staged x */

void attn__bf16_round_row(const float *x, int64_t n, attn__bf16 *dst) {
    for (int64_t i = 0; i < n; i++) dst[i] = attn__f32_to_bf16_daz(x[i]);
}

size_t attn__bf16_packed_size(int64_t K, int64_t N) {
    int64_t kp, np, e;
    if (K < 0 || N < 0 || K > INT64_MAX - 1 || N > INT64_MAX - NR) return 0;
    kp = (K + 1) / 2 * 2;
    np = (N + NR - 1) / NR * NR;
    if (!attn__mul_i64(kp, np, &e) || (uint64_t)e > SIZE_MAX / 4) return 0;
    return (size_t)e;
}

void attn__bf16_pack_weight(const float *W, int64_t K, int64_t N, attn__bf16 *dst) {
    const int64_t kh = (K + 1) / 2, panels = (N + NR - 1) / NR;
    for (int64_t p = 0; p < panels; p++)
        for (int64_t q = 0; q < kh; q++) {
            attn__bf16 *d = dst + (p * kh + q) * NR * 2;
            for (int64_t j = 0; j < NR; j++) {
                int64_t n = p * NR + j;
                for (int t = 0; t < 2; t++) {
                    int64_t k = 2 * q + t;
                    d[2 * j + t] = n < N && k < K ? attn__f32_to_bf16_daz(W[n * K + k]) : 0;
                }
            }
        }
}

/* ---- plain C microkernel (contract in gemm_bf16.h) --------------------------------------- */
static void ukr_ref(int64_t kh, const attn__bf16 *a, int64_t lda, int64_t mv,
                    const attn__bf16 *b, float *c, int64_t ldc, int64_t nv, const float *bias,
                    int first, const float *r, int64_t ldr) {
    for (int64_t i = 0; i < mv; i++) {
        float acc[NR];
        float *ci = c + i * ldc;
        for (int64_t j = 0; j < NR; j++)
            acc[j] = j >= nv ? 0.0f : !first ? ci[j] : bias ? bias[j] : 0.0f;
        const attn__bf16 *ar = a + i * lda;
        for (int64_t q = 0; q < kh; q++) {
            /* each product of two bf16 values is exact in float: only the adds round */
            const float a0 = attn__bf16_to_f32(ar[2 * q]), a1 = attn__bf16_to_f32(ar[2 * q + 1]);
            const attn__bf16 *bq = b + q * NR * 2;
            for (int64_t j = 0; j < NR; j++) {
                acc[j] += a1 * attn__bf16_to_f32(bq[2 * j + 1]);
                acc[j] += a0 * attn__bf16_to_f32(bq[2 * j]);
            }
        }
        if (r)
            for (int64_t j = 0; j < nv; j++) acc[j] += r[i * ldr + j];
        for (int64_t j = 0; j < nv; j++) ci[j] = acc[j];
    }
}

static void cvt_ref(const float *x, int64_t n, attn__bf16 *dst, int64_t np) {
    attn__bf16_round_row(x, n, dst);
    for (int64_t i = n; i < np; i++) dst[i] = 0;
}

static const attn__bf16_kernel attn__bf16_ref_table = {"ref", ukr_ref, cvt_ref};

const attn__bf16_kernel *attn__bf16_kernel_ref(void) { return &attn__bf16_ref_table; }

/* ---- driver -------------------------------------------------------------------------------- */
typedef struct bf16_job {
    const attn__bf16_kernel *k;
    const float *x;
    int64_t ldx;
    const attn__bf16 *Wp;
    const float *b, *r;
    int64_t ldr;
    float *y;
    int64_t ldy, M, K, N, kh, panels;
    attn__bf16 *stage; /* per tid: MR rows of 2*kh */
} bf16_job;

static void bf16_rows_task(void *arg, int64_t begin, int64_t end, int tid) {
    const bf16_job *g = arg;
    const int64_t lda = 2 * g->kh;
    attn__bf16 *a = g->stage + (int64_t)tid * MR * lda;
    for (int64_t rp = begin; rp < end; rp++) {
        const int64_t i0 = rp * MR, mv = g->M - i0 < MR ? g->M - i0 : MR;
        for (int64_t i = 0; i < MR; i++) {
            if (i < mv)
                g->k->cvt(g->x + (i0 + i) * g->ldx, g->K, a + i * lda, lda);
            else
                memset(a + i * lda, 0, sizeof(attn__bf16) * (size_t)lda);
        }
        for (int64_t q0 = 0; q0 < g->kh; q0 += KCH) {
            const int64_t qn = g->kh - q0 < KCH ? g->kh - q0 : KCH;
            const int first = q0 == 0, last = q0 + qn == g->kh;
            for (int64_t p = 0; p < g->panels; p++) {
                const int64_t j0 = p * NR, nv = g->N - j0 < NR ? g->N - j0 : NR;
                g->k->ukr(qn, a + 2 * q0, lda, mv, g->Wp + (p * g->kh + q0) * NR * 2,
                          g->y + i0 * g->ldy + j0, g->ldy, nv, g->b ? g->b + j0 : NULL, first,
                          last && g->r ? g->r + i0 * g->ldr + j0 : NULL, g->ldr);
            }
        }
    }
}

attn_status attn__linear_bf16_k(attn_ctx *ctx, const attn__bf16_kernel *k, const float *x,
                                int64_t ldx, const attn__bf16 *Wp, const float *b,
                                const float *r, int64_t ldr, float *y, int64_t ldy, int64_t M,
                                int64_t K, int64_t N) {
    if (M <= 0 || N <= 0) return ATTN_OK;
    bf16_job g;
    memset(&g, 0, sizeof g);
    g.k = k;
    g.x = x, g.ldx = ldx, g.Wp = Wp, g.b = b, g.r = r, g.ldr = ldr, g.y = y, g.ldy = ldy;
    g.M = M, g.K = K, g.N = N;
    g.kh = (K + 1) / 2;
    g.panels = (N + NR - 1) / NR;
    if (g.kh == 0) { /* no products: y = b (+ r) */
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++)
                y[m * ldy + n] = (b ? b[n] : 0.0f) + (r ? r[m * ldr + n] : 0.0f);
        return ATTN_OK;
    }
    const int64_t rpanels = (M + MR - 1) / MR;
    /* below ~2^18 multiply-adds waking the pool costs more than it saves (same result) */
    const int serial = (double)M * (double)N * (double)K < 262144.0;
    const int width = serial ? 1 : attn__parallel_width(ctx, rpanels);
    attn__mark mark = attn__ws_mark(ctx);
    size_t per = (size_t)(MR * 2 * g.kh), n;
    if (!attn__mul_size(per, (size_t)width, &n))
        return attn__fail(ctx, ATTN_E_NOMEM, "bf16 linear: scratch size overflows");
    ATTN_TRY(attn__ws_alloc(ctx, n, sizeof(attn__bf16), (void **)&g.stage));
    if (serial)
        bf16_rows_task(&g, 0, rpanels, 0);
    else
        attn__parallel_for(ctx, rpanels, bf16_rows_task, &g);
    attn__ws_release(ctx, mark);
    return ATTN_OK;
}

attn_status attn__linear_bf16(attn_ctx *ctx, const float *x, int64_t ldx, const attn__bf16 *Wp,
                              const float *b, const float *r, int64_t ldr, float *y,
                              int64_t ldy, int64_t M, int64_t K, int64_t N) {
    return attn__linear_bf16_k(ctx, ctx->kern.gemm_bf16, x, ldx, Wp, b, r, ldr, y, ldy,
                               M, K, N);
}
