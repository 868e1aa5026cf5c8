/* The int16 GEMM of AVX512_VNNI (quant.h, attn__gemm16): prompts on int16 activations.
 *
 * Lanes are columns of Y (weight rows), as in the float GEMM: a panel of 16 weight rows holds,
 * for each pair of k, one 32-bit lane per row with its two quants as int16 (pack).  The
 * microkernel broadcasts a row's pair of int16 activations and multiplies it into two vectors
 * of 8 lanes with VPDPWSSD (256-bit, AVX512VL: 16 multiply-adds per instruction, a float FMA of
 * the same width does 8), summing each group of 32 (or 16) k in int32, exactly; then per group
 * one conversion, the product of the group's scales with the row's block scale d, and one FMA
 * into the float accumulators, and the mins times the float block sums of x in another.  Rows
 * of X are read in place from attn__q16act_quantize's int16 rows (no packing of A).  Each
 * output is summed in one fixed order whatever the tile holds, so a row gives the same bits
 * alone or among others, and for any thread count.
 *
 * Built with the AVX512_VNNI flags (CMakeLists.txt); quant16_vnni.c's table points here. */
#include "../quant.h"

#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && defined(__FMA__) && \
    defined(__F16C__)
#include <immintrin.h>
#include <string.h>

#include "../x86_avx2/tr8_avx2.h"

#define INLINE static inline __attribute__((always_inline))
enum { MR = 6 };

/* ---- packing: one weight row to int16 quants, scales and mins ------------------------------ */
/* The 6-bit scale and min of group j of Q4_K / Q5_K (as quant_ref.c) */
INLINE void k4_scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[4 + j] & 63;
    } else {
        *sc = (s[4 + j] & 15) | ((s[j - 4] >> 2) & 0x30);
        *mn = (s[4 + j] >> 4) | ((s[j] >> 2) & 0x30);
    }
}

/* 32 elements from 16 bytes of nibbles (low then high) and an optional fifth bit per element
 * (h: bit j for element j), minus off */
INLINE void nib32(const uint8_t *qs, uint32_t h, int off, int16_t *q) {
    for (int j = 0; j < 16; j++) {
        q[j] = (int16_t)(((qs[j] & 15) | (int)((h >> j) & 1) << 4) - off);
        q[j + 16] = (int16_t)(((qs[j] >> 4) | (int)((h >> (j + 16)) & 1) << 4) - off);
    }
}
INLINE uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Row b (K elements of type) into q[K]; group g's scale to s[16 g], its min to m[16 g] (m
 * NULL: not written) */
static void dec_row(int type, const uint8_t *b, int64_t K, int16_t *q, float *s, float *m) {
    switch (type) {
    case ATTN_Q_Q4_0: case ATTN_Q_Q5_0: case ATTN_Q_IQ4_NL:
        for (int64_t k = 0; k < K / 32; k++) {
            const int five = type == ATTN_Q_Q5_0;
            const uint8_t *blk = b + (size_t)k * (five ? 22 : 18);
            s[16 * k] = attn__load_half(blk);
            if (type == ATTN_Q_IQ4_NL)
                for (int j = 0; j < 16; j++) {
                    q[32 * k + j] = attn__iq4_values[blk[2 + j] & 15];
                    q[32 * k + j + 16] = attn__iq4_values[blk[2 + j] >> 4];
                }
            else
                nib32(blk + (five ? 6 : 2), five ? le32(blk + 2) : 0, five ? 16 : 8, q + 32 * k);
        }
        return;
    case ATTN_Q_Q4_1: case ATTN_Q_Q5_1:
        for (int64_t k = 0; k < K / 32; k++) {
            const int five = type == ATTN_Q_Q5_1;
            const uint8_t *blk = b + (size_t)k * (five ? 24 : 20);
            s[16 * k] = attn__load_half(blk);
            if (m) m[16 * k] = -attn__load_half(blk + 2); /* w = d q + m */
            nib32(blk + (five ? 8 : 4), five ? le32(blk + 4) : 0, 0, q + 32 * k);
        }
        return;
    case ATTN_Q_Q8_0:
        for (int64_t k = 0; k < K / 32; k++) {
            const uint8_t *blk = b + (size_t)k * 34;
            s[16 * k] = attn__load_half(blk);
            for (int j = 0; j < 32; j++) q[32 * k + j] = (int8_t)blk[2 + j];
        }
        return;
    case ATTN_Q_Q4_K: case ATTN_Q_Q5_K:
        for (int64_t k = 0; k < K / 256; k++) {
            const int five = type == ATTN_Q_Q5_K;
            const uint8_t *blk = b + (size_t)k * (five ? 176 : 144);
            const float d = attn__load_half(blk), dmin = attn__load_half(blk + 2);
            const uint8_t *qh = blk + 16, *qs = blk + (five ? 48 : 16);
            for (int g = 0; g < 8; g++) {
                int sc, mn;
                k4_scale_min(blk + 4, g, &sc, &mn);
                s[16 * (8 * k + g)] = d * (float)sc;
                if (m) m[16 * (8 * k + g)] = dmin * (float)mn;
                int16_t *qg = q + 256 * k + 32 * g;
                const int sh = 4 * (g & 1);
                for (int j = 0; j < 32; j++)
                    qg[j] = (int16_t)(((qs[(g >> 1) * 32 + j] >> sh) & 15) |
                                      (five ? ((qh[j] >> g) & 1) << 4 : 0));
            }
        }
        return;
    case ATTN_Q_Q6_K:
        for (int64_t k = 0; k < K / 256; k++) {
            const uint8_t *blk = b + (size_t)k * 210, *ql = blk, *qh = blk + 128;
            const int8_t *sc = (const int8_t *)(blk + 192);
            const float d = attn__load_half(blk + 208);
            for (int g = 0; g < 16; g++) s[16 * (16 * k + g)] = d * (float)sc[g];
            int16_t *qk = q + 256 * k;
            for (int h = 0; h < 2; h++) /* halves of 128: ql 64 bytes, qh 32 */
                for (int r = 0; r < 4; r++) /* quarters of 32 within the half */
                    for (int j = 0; j < 32; j++) {
                        const int l = 32 * (r & 1) + j;
                        qk[128 * h + 32 * r + j] =
                            (int16_t)((((ql[64 * h + l] >> (4 * (r >> 1))) & 15) |
                                       ((qh[32 * h + j] >> (2 * r)) & 3) << 4) - 32);
                    }
        }
        return;
    case ATTN_Q_IQ4_XS:
        for (int64_t k = 0; k < K / 256; k++) {
            const uint8_t *blk = b + (size_t)k * 136;
            const float d = attn__load_half(blk);
            for (int g = 0; g < 8; g++) {
                s[16 * (8 * k + g)] = d * (float)attn__iq4xs_scale(blk, g);
                const uint8_t *qs = blk + 8 + 16 * g;
                int16_t *qg = q + 256 * k + 32 * g;
                for (int j = 0; j < 16; j++) {
                    qg[j] = attn__iq4_values[qs[j] & 15];
                    qg[j + 16] = attn__iq4_values[qs[j] >> 4];
                }
            }
        }
        return;
    default:
        return;
    }
}

static void pack16(int type, const uint8_t *w, size_t rb, int64_t nv, int64_t K, int32_t *wq,
                   float *ws, float *wm, int16_t *tmp) {
    const int G = attn__gemm16_group(type);
    const int64_t ng = K / G;
    memset(ws, 0, sizeof(float) * (size_t)(16 * ng));
    if (wm) memset(wm, 0, sizeof(float) * (size_t)(16 * ng));
    for (int64_t r = 0; r < 16; r++) {
        int16_t *q = tmp + r * K;
        if (r >= nv) {
            memset(q, 0, sizeof(int16_t) * (size_t)K);
            continue;
        }
        dec_row(type, w + (size_t)r * rb, K, q, ws + r, wm ? wm + r : NULL);
    }
    /* the 16 rows of K / 2 int32 pairs, transposed: wq[p][n] = pair p of row n */
    for (int64_t p0 = 0; p0 < K / 2; p0 += 8)
        for (int h = 0; h < 2; h++) {
            __m256 t[8];
            for (int i = 0; i < 8; i++)
                t[i] = _mm256_loadu_ps((const float *)(const void *)(tmp + (8 * h + i) * K + 2 * p0));
            attn__tr8(t);
            for (int c = 0; c < 8; c++)
                _mm256_storeu_ps((float *)(void *)(wq + (p0 + c) * 16 + 8 * h), t[c]);
        }
}

/* ---- the microkernel ----------------------------------------------------------------------- */
INLINE int32_t pair(const int16_t *x) {
    int32_t v;
    memcpy(&v, x, 4);
    return v;
}

INLINE void kern(const int R, const int G, const int MINS, int64_t K, const int32_t *wq,
                 const float *ws, const float *wm, const attn__q16act *xa, float *y,
                 int64_t ldy, int64_t nv) {
    enum { NP = 16 };
    const int gp = G / 2;
    __m256 acc[MR][2];
    for (int i = 0; i < R; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t g = 0; g < K / G; g++) {
        __m256i ia[MR][2];
        for (int i = 0; i < R; i++) ia[i][0] = ia[i][1] = _mm256_setzero_si256();
        const int32_t *w = wq + g * gp * NP;
        const int16_t *x0 = xa->q + g * G;
#pragma GCC unroll 16
        for (int p = 0; p < gp; p++) {
            const __m256i b0 = _mm256_loadu_si256((const __m256i *)(const void *)(w + p * NP));
            const __m256i b1 = _mm256_loadu_si256((const __m256i *)(const void *)(w + p * NP + 8));
            for (int i = 0; i < R; i++) {
                const __m256i xb = _mm256_set1_epi32(pair(x0 + i * xa->ldq + 2 * p));
                ia[i][0] = _mm256_dpwssd_epi32(ia[i][0], xb, b0);
                ia[i][1] = _mm256_dpwssd_epi32(ia[i][1], xb, b1);
            }
        }
        const __m256 s0 = _mm256_loadu_ps(ws + g * NP), s1 = _mm256_loadu_ps(ws + g * NP + 8);
        const int64_t bx = g * G / 32;
        for (int i = 0; i < R; i++) {
            const __m256 f = _mm256_set1_ps(xa->d[i * xa->ldb + bx]);
            acc[i][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[i][0]), _mm256_mul_ps(s0, f), acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[i][1]), _mm256_mul_ps(s1, f), acc[i][1]);
        }
        if (MINS) {
            const __m256 m0 = _mm256_loadu_ps(wm + g * NP), m1 = _mm256_loadu_ps(wm + g * NP + 8);
            for (int i = 0; i < R; i++) {
                const __m256 sv = _mm256_set1_ps(xa->sx[i * xa->ldb + g]);
                acc[i][0] = _mm256_fnmadd_ps(m0, sv, acc[i][0]);
                acc[i][1] = _mm256_fnmadd_ps(m1, sv, acc[i][1]);
            }
        }
    }
    for (int i = 0; i < R; i++) {
        if (nv == NP) {
            _mm256_storeu_ps(y + i * ldy, acc[i][0]);
            _mm256_storeu_ps(y + i * ldy + 8, acc[i][1]);
        } else {
            float t[NP];
            _mm256_storeu_ps(t, acc[i][0]);
            _mm256_storeu_ps(t + 8, acc[i][1]);
            memcpy(y + i * ldy, t, sizeof(float) * (size_t)nv);
        }
    }
}

#define KCALL(R)                                                                              \
    do {                                                                                      \
        if (G == 16)                                                                          \
            kern(R, 16, 0, K, wq, ws, wm, xa, y, ldy, nv);                                    \
        else if (wm)                                                                          \
            kern(R, 32, 1, K, wq, ws, wm, xa, y, ldy, nv);                                    \
        else                                                                                  \
            kern(R, 32, 0, K, wq, ws, wm, xa, y, ldy, nv);                                    \
    } while (0)

static void ukr16(int mr, int64_t K, int G, const int32_t *wq, const float *ws, const float *wm,
                  const attn__q16act *xa, float *y, int64_t ldy, int64_t nv) {
    switch (mr) {
    case 1: KCALL(1); break;
    case 2: KCALL(2); break;
    case 3: KCALL(3); break;
    case 4: KCALL(4); break;
    case 5: KCALL(5); break;
    default: KCALL(6); break;
    }
}

static const attn__gemm16 GEMM16 = {"avx512_vnni_int16_gemm", MR, pack16, ukr16};
const attn__gemm16 *attn__gemm16_vnni(void) { return &GEMM16; }

#else
const attn__gemm16 *attn__gemm16_vnni(void) { return NULL; }
#endif
