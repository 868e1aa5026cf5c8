/* fp16 linear layer (contract, scaling and arithmetic in gemm_f16.h): half conversions,
 * weight packing, the plain C microkernel (fallback and oracle) and the driver.
 * The driver is the one of gemm_bf16.c: threads split row micro-panels of x; each stages its
 * MR rows (scaled, rounded, duplicated into 32-bit words for broadcasting) in its own scratch
 * and runs the microkernel over every packed panel, one K chunk at a time, in order. */
#include <math.h>
#include <string.h>

#include "ew.h"
#include "gemm_f16.h"
#include "pool.h"

#define MR ATTN__F16_MR
#define NR ATTN__F16_NR
#define KB ATTN__F16_KB
#define KC ATTN__F16_KC /* MR x 512 words = 28 KiB of staged x per chunk */
#define LDA ATTN__F16_LDA

float attn__f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 31u, f = h & 1023u, u;
    if (e == 0) { /* zero or subnormal: f 2^-24, exact */
        float v = (float)f * 0x1p-24f;
        return s ? -v : v;
    }
    if (e == 31)
        u = s | 0x7f800000u | (f << 13);
    else
        u = s | ((e + 112u) << 23) | (f << 13);
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* Integer rounding of the double's significand (no libm: this also packs the weights). */
uint16_t attn__f64_to_f16(double x) {
    uint64_t u;
    memcpy(&u, &x, 8);
    const uint16_t sign = (uint16_t)((u >> 48) & 0x8000u);
    u &= 0x7fffffffffffffffull;
    if (u >= 0x7ff0000000000000ull) /* infinity or NaN (quiet) */
        return (uint16_t)(sign | (u > 0x7ff0000000000000ull ? 0x7e00u : 0x7c00u));
    const int e = (int)(u >> 52) - 1023; /* x = m 2^(e - 52), m of 53 bits */
    if (e >= 16) return (uint16_t)(sign | 0x7c00u);
    if (e < -25) return sign; /* below half the smallest subnormal (2^-25): zero */
    const uint64_t m = (u & 0x000fffffffffffffull) | 0x0010000000000000ull;
    /* keep 11 bits (normal halves) or the bits above 2^-24 (subnormal ones) */
    const int shift = e >= -14 ? 42 : 42 + (-14 - e); /* 42..53 */
    uint64_t q = m >> shift;
    const uint64_t rem = m & ((1ull << shift) - 1), half = 1ull << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++; /* nearest, ties to even */
    if (e < -14) return (uint16_t)(sign | q); /* 1024 is the smallest normal's encoding */
    int E = e + 15;
    if (q == 2048) q = 1024, E++;
    if (E >= 31) return (uint16_t)(sign | 0x7c00u);
    return (uint16_t)(sign | (uint16_t)(E << 10) | (uint16_t)(q - 1024));
}

float attn__f16_pow2_scale(float max) {
    if (!(max > 0.0f) || !isfinite(max)) return 1.0f;
    int e;
    frexpf(max, &e);
    e = e < -126 ? -126 : e > 127 ? 127 : e; /* 2^e and 2^-e both normal floats */
    return ldexpf(1.0f, e);
}

size_t attn__f16_packed_size(int64_t K, int64_t N) {
    int64_t np, e;
    if (K < 0 || N < 0 || N > INT64_MAX / 8) return 0;
    np = (N + NR - 1) / NR * NR;
    if (!attn__mul_i64(np, K, &e) || !attn__mul_i64(e, 2, &e) || e > INT64_MAX - 4 * np - 64)
        return 0;
    e += 4 * np;
    if ((uint64_t)e > SIZE_MAX - 64) return 0;
    return (size_t)((e + 63) / 64 * 64);
}

void attn__f16_pack_weight(const float *W, int64_t K, int64_t N, void *dst) {
    const int64_t panels = (N + NR - 1) / NR, np = panels * NR;
    float *cs = dst;
    uint16_t *w = (uint16_t *)(cs + np);
    for (int64_t n = 0; n < np; n++) {
        float mx = 0.0f;
        for (int64_t k = 0; n < N && k < K; k++) mx = fmaxf(mx, fabsf(W[n * K + k]));
        cs[n] = n < N ? attn__f16_pow2_scale(mx) : 1.0f;
    }
    for (int64_t p = 0; p < panels; p++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < NR; j++) {
                int64_t n = p * NR + j;
                w[(p * K + k) * NR + j] =
                    n < N ? attn__f64_to_f16((double)(W[n * K + k] / cs[n])) : 0;
            }
}

/* ---- plain C microkernel (contract in gemm_f16.h) ---------------------------------------- */
static void ukr_ref(int64_t kc, const uint32_t *a, int64_t mv, const uint16_t *b,
                    float *c, int64_t ldc, int64_t nv, int first, int last, const float *rs,
                    const float *cs, const float *bias, const float *r, int64_t ldr, int gelu,
                    float *tmax, const attn__f16_pf *pf) {
    (void)pf;
    for (int64_t i = 0; i < mv; i++) {
        float *ci = c + i * ldc;
        const uint32_t *ai = a + i * LDA;
        for (int64_t j = 0; j < nv; j++) {
            float acc = first ? 0.0f : ci[j];
            for (int64_t k0 = 0; k0 < kc; k0 += KB) {
                const int64_t kn = kc - k0 < KB ? kc - k0 : KB;
                uint16_t h = 0;
                for (int64_t k = k0; k < k0 + kn; k++) {
                    /* the product of two halves is exact in double, and so (within double's
                     * range of exponents) is its sum with a half: one rounding, as the FMA */
                    double p = (double)attn__f16_to_f32((uint16_t)ai[k]) *
                               (double)attn__f16_to_f32(b[k * NR + j]);
                    h = attn__f64_to_f16(p + (double)attn__f16_to_f32(h));
                }
                acc += attn__f16_to_f32(h);
            }
            if (last) {
                acc = acc * (rs[i] * cs[j]);
                if (bias) acc += bias[j];
                if (r) acc += r[i * ldr + j];
                if (gelu) acc = attn__gelu_as(acc);
                if (tmax) tmax[i] = isnan(acc) || isnan(tmax[i]) ? NAN : fmaxf(tmax[i], fabsf(acc));
            }
            ci[j] = acc;
        }
    }
}

static float absmax_ref(const float *x, int64_t n) {
    float mx = 0.0f;
    for (int64_t k = 0; k < n; k++) mx = isnan(x[k]) || isnan(mx) ? NAN : fmaxf(mx, fabsf(x[k]));
    return mx;
}

static void stage_ref(const float *x, int64_t n, float s, uint32_t *dst, int64_t np) {
    for (int64_t k = 0; k < np; k++) {
        uint32_t h = k < n ? attn__f64_to_f16((double)(x[k] / s)) : 0;
        dst[k] = h | h << 16;
    }
}

static const attn__f16_kernel attn__f16_ref_table = {"ref", ukr_ref, absmax_ref, stage_ref};

const attn__f16_kernel *attn__f16_kernel_ref(void) { return &attn__f16_ref_table; }

/* ---- driver -------------------------------------------------------------------------------- */
typedef struct f16_job {
    const attn__f16_kernel *k;
    const float *x;
    int64_t ldx;
    const float *cs;
    const uint16_t *w;
    const float *b, *r;
    int64_t ldr;
    float *y;
    int64_t ldy, M, K, N, panels;
    int gelu;
    const float *xmax;
    float *ymax;
    const attn__f16_rows *rows;
    uint32_t *stage; /* per tid: MR rows of LDA words */
} f16_job;

static void f16_rows_task(void *arg, int64_t begin, int64_t end, int tid) {
    const f16_job *g = arg;
    uint32_t *a = g->stage + (int64_t)tid * MR * LDA;
    const attn__row_epi *epi = g->rows ? g->rows->epi : NULL;
    float rs[MR], tmax[MR];
    for (int64_t rp = begin; rp < end; rp++) {
        const int64_t i0 = rp * MR, mv = g->M - i0 < MR ? g->M - i0 : MR;
        const int64_t nchunk = (g->K + KC - 1) / KC;
        const int64_t nmv = g->M - i0 - MR < MR ? g->M - i0 - MR : MR; /* rows of the next */
        for (int64_t i = 0; i < MR; i++) {
            float mx = i >= mv ? 0.0f
                       : g->xmax ? g->xmax[i0 + i]
                                 : g->k->absmax(g->x + (i0 + i) * g->ldx, g->K);
            rs[i] = attn__f16_pow2_scale(mx);
            tmax[i] = 0.0f;
        }
        for (int64_t k0 = 0; k0 < g->K; k0 += KC) {
            const int64_t kn = g->K - k0 < KC ? g->K - k0 : KC;
            const int first = k0 == 0, last = k0 + kn == g->K;
            for (int64_t i = 0; i < MR; i++) {
                if (i < mv)
                    g->k->stage(g->x + (i0 + i) * g->ldx + k0, kn, rs[i], a + i * LDA, kn);
                else
                    memset(a + i * LDA, 0, sizeof(uint32_t) * (size_t)kn);
            }
            for (int64_t p = 0; p < g->panels; p++) {
                const int64_t j0 = p * NR, nv = g->N - j0 < NR ? g->N - j0 : NR;
                /* call c of the micro-panel's C calls fetches rows [c * R / C, (c+1) * R / C)
                 * of the next micro-panel (R rows) */
                attn__f16_pf pf = {NULL, 0, g->ldx, g->K};
                const int64_t c = (k0 / KC) * g->panels + p, C = nchunk * g->panels;
                if (rp + 1 < end) {
                    const int64_t r0 = c * nmv / C, r1 = (c + 1) * nmv / C;
                    pf.x = g->x + (i0 + MR + r0) * g->ldx, pf.rows = r1 - r0;
                }
                g->k->ukr(kn, a, mv, g->w + (p * g->K + k0) * NR,
                          g->y + i0 * g->ldy + j0, g->ldy, nv, first, last, rs, g->cs + j0,
                          g->b ? g->b + j0 : NULL, last && g->r ? g->r + i0 * g->ldr + j0 : NULL,
                          g->ldr, g->gelu, g->ymax && last ? tmax : NULL,
                          pf.rows > 0 ? &pf : NULL);
            }
        }
        if (epi) epi->fn(epi->arg, g->y + i0 * g->ldy, g->ldy, i0, mv);
        if (g->ymax)
            memcpy(g->ymax + i0, tmax, sizeof(float) * (size_t)mv);
    }
}

attn_status attn__linear_f16_k(attn_ctx *ctx, const attn__f16_kernel *k, const float *x,
                               int64_t ldx, const void *Wp, const float *b, const float *r,
                               int64_t ldr, int gelu, float *y, int64_t ldy, int64_t M,
                               int64_t K, int64_t N, const attn__f16_rows *rows) {
    if (M <= 0 || N <= 0) return ATTN_OK;
    f16_job g;
    memset(&g, 0, sizeof g);
    g.k = k;
    g.x = x, g.ldx = ldx, g.b = b, g.r = r, g.ldr = ldr, g.y = y, g.ldy = ldy;
    g.M = M, g.K = K, g.N = N, g.gelu = gelu;
    g.xmax = rows ? rows->xmax : NULL, g.rows = rows;
    g.ymax = rows && !rows->epi ? rows->ymax : NULL; /* with an epilogue, its business */
    g.panels = (N + NR - 1) / NR;
    g.cs = Wp;
    g.w = (const uint16_t *)(g.cs + g.panels * NR);
    if (K == 0) {
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                float v = (b ? b[n] : 0.0f) + (r ? r[m * ldr + n] : 0.0f);
                y[m * ldy + n] = gelu ? attn__gelu_as(v) : v;
            }
        if (rows && rows->epi) rows->epi->fn(rows->epi->arg, y, ldy, 0, M);
        if (g.ymax)
            for (int64_t m = 0; m < M; m++) g.ymax[m] = k->absmax(y + m * ldy, N);
        return ATTN_OK;
    }
    const int64_t rpanels = (M + MR - 1) / MR;
    const int serial = (double)M * (double)N * (double)K < 262144.0;
    const int width = serial ? 1 : attn__parallel_width(ctx, rpanels);
    attn__mark mark = attn__ws_mark(ctx);
    size_t n;
    if (!attn__mul_size((size_t)(MR * LDA), (size_t)width, &n))
        return attn__fail(ctx, ATTN_E_NOMEM, "f16 linear: scratch size overflows");
    ATTN_TRY(attn__ws_alloc(ctx, n, sizeof(uint32_t), (void **)&g.stage));
    if (serial)
        f16_rows_task(&g, 0, rpanels, 0);
    else
        attn__parallel_for(ctx, rpanels, f16_rows_task, &g);
    attn__ws_release(ctx, mark);
    return ATTN_OK;
}

attn_status attn__linear_f16(attn_ctx *ctx, const float *x, int64_t ldx, const void *Wp,
                             const float *b, const float *r, int64_t ldr, int gelu, float *y,
                             int64_t ldy, int64_t M, int64_t K, int64_t N,
                             const attn__f16_rows *rows) {
    return attn__linear_f16_k(ctx, ctx->kern.gemm_f16, x, ldx, Wp, b, r, ldr, gelu, y,
                              ldy, M, K, N, rows);
}
