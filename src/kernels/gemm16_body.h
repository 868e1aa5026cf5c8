/* The int16 GEMM of prompts (quant.h, attn__gemm16), one body for every vector width:
 *   x86_avx512vnni/gemm16_vnni.c     512-bit VPDPWSSD (AVX512_VNNI), panels of 32, 6 rows;
 *   x86_avxvnni/gemm16_avxvnni.c     256-bit VPDPWSSD (AVX-VNNI, VEX), panels of 16;
 *   x86_avx2/gemm16_avx2.c           256-bit VPMADDWD + VPADDD (plain AVX2), panels of 16.
 *
 * Lanes are columns of Y (weight rows), as in the float GEMM: a panel of NP weight rows holds,
 * for each pair of k, one 32-bit lane per row with its two quants as int16 (pack, after
 * dec_row unpacked each row).  The microkernel broadcasts a row's pair of int16 activations
 * and multiplies it into two vectors of NP / 2 lanes (DPW: VPDPWSSD, or VPMADDWD and VPADDD:
 * the same int32 lanes), summing each group of 32 (Q3_K, Q6_K: 16) k in int32, exactly; then per
 * group one conversion, the product of the group's scales with the row's block scale d, and
 * one FMA into the float accumulators, and the mins times the float block sums of x in
 * another.  Rows of X are read in place from the int16 rows of the activations' quantizer (no
 * packing of A).  Each output is summed in one fixed order whatever the tile holds, the
 * vector width and the rows per tile, so a row gives the same bits alone or among others, for
 * any thread count, and on every set.
 *
 * The includer defines MR (rows per tile), NP (columns per panel: two vectors), SFX (a name
 * suffix), VI / VF (the integer and float vector types) and the operations below, then
 * includes this file once. */
#ifndef ATTN_GEMM16_HELPERS
#define ATTN_GEMM16_HELPERS
#include <string.h>

#include "x86_avx2/tr8_avx2.h"

#define INLINE static inline __attribute__((always_inline))

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

/* Row b (K elements of type) into q[K]; group g's scale to s[ns g], its min to m[ns g] (m
 * NULL: not written) */
static void dec_row(int type, const uint8_t *b, int64_t K, int16_t *q, float *s, float *m,
                    const int64_t ns) {
    switch (type) {
    case ATTN_Q_Q4_0: case ATTN_Q_Q5_0: case ATTN_Q_IQ4_NL:
        for (int64_t k = 0; k < K / 32; k++) {
            const int five = type == ATTN_Q_Q5_0;
            const uint8_t *blk = b + (size_t)k * (five ? 22 : 18);
            s[ns * k] = attn__load_half(blk);
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
            s[ns * k] = attn__load_half(blk);
            if (m) m[ns * k] = -attn__load_half(blk + 2); /* w = d q + m */
            nib32(blk + (five ? 8 : 4), five ? le32(blk + 4) : 0, 0, q + 32 * k);
        }
        return;
    case ATTN_Q_Q8_0:
        for (int64_t k = 0; k < K / 32; k++) {
            const uint8_t *blk = b + (size_t)k * 34;
            s[ns * k] = attn__load_half(blk);
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
                s[ns * (8 * k + g)] = d * (float)sc;
                if (m) m[ns * (8 * k + g)] = dmin * (float)mn;
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
            for (int g = 0; g < 16; g++) s[ns * (16 * k + g)] = d * (float)sc[g];
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
    case ATTN_Q_Q3_K: /* 16 groups of 16: d (6-bit scale - 32), q = 2 low bits - 4 (1 - high) */
        for (int64_t k = 0; k < K / 256; k++) {
            const uint8_t *blk = b + (size_t)k * 110, *hm = blk, *qs = blk + 32, *sc = blk + 96;
            const float d = attn__load_half(blk + 108);
            for (int g = 0; g < 16; g++) {
                const int lo = (sc[g & 7] >> (4 * (g >> 3))) & 15;
                const int hi = (sc[8 + (g & 3)] >> (2 * (g >> 2))) & 3;
                s[ns * (16 * k + g)] = d * (float)((lo | hi << 4) - 32);
                const uint8_t *ql = qs + 32 * (g >> 3) + 16 * (g & 1), *h = hm + 16 * (g & 1);
                const int sh = 2 * ((g >> 1) & 3), hs = g >> 1;
                for (int l = 0; l < 16; l++)
                    q[256 * k + 16 * g + l] =
                        (int16_t)(((ql[l] >> sh) & 3) - ((((h[l] >> hs) & 1) ^ 1) << 2));
            }
        }
        return;
    case ATTN_Q_IQ4_XS:
        for (int64_t k = 0; k < K / 256; k++) {
            const uint8_t *blk = b + (size_t)k * 136;
            const float d = attn__load_half(blk);
            for (int g = 0; g < 8; g++) {
                s[ns * (8 * k + g)] = d * (float)attn__iq4xs_scale(blk, g);
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

INLINE int32_t pair(const int16_t *x) {
    int32_t v;
    memcpy(&v, x, 4);
    return v;
}
#endif

#define FN2(a, b) a##b
#define FN(a, b) FN2(a, b)

static void FN(pack, SFX)(int type, const uint8_t *w, size_t rb, int64_t nv, int64_t K,
                          int32_t *wq, float *ws, float *wm, int16_t *tmp) {
    const int G = attn__gemm16_group(type);
    const int64_t ng = K / G;
    memset(ws, 0, sizeof(float) * (size_t)(NP * ng));
    if (wm) memset(wm, 0, sizeof(float) * (size_t)(NP * ng));
    for (int64_t r = 0; r < NP; r++) {
        int16_t *q = tmp + r * K;
        if (r >= nv) {
            memset(q, 0, sizeof(int16_t) * (size_t)K);
            continue;
        }
        dec_row(type, w + (size_t)r * rb, K, q, ws + r, wm ? wm + r : NULL, NP);
    }
    /* the NP rows of K / 2 int32 pairs, transposed: wq[p][n] = pair p of row n */
    for (int64_t p0 = 0; p0 < K / 2; p0 += 8)
        for (int h = 0; h < NP / 8; h++) {
            __m256 t[8];
            for (int i = 0; i < 8; i++)
                t[i] = _mm256_loadu_ps((const float *)(const void *)(tmp + (8 * h + i) * K + 2 * p0));
            attn__tr8(t);
            for (int c = 0; c < 8; c++)
                _mm256_storeu_ps((float *)(void *)(wq + (p0 + c) * NP + 8 * h), t[c]);
        }
}

INLINE void FN(kern, SFX)(const int R, const int G, const int MINS, int64_t K, const int32_t *wq,
                          const float *ws, const float *wm, const attn__q16act *xa, float *y,
                          int64_t ldy, int64_t nv) {
    enum { H = NP / 2 }; /* lanes per vector */
    const int gp = G / 2;
    VF acc[MR][2];
    for (int i = 0; i < R; i++) acc[i][0] = acc[i][1] = ZEROF();
    for (int64_t g = 0; g < K / G; g++) {
        VI ia[MR][2];
        for (int i = 0; i < R; i++) ia[i][0] = ia[i][1] = ZEROI();
        const int32_t *wg = wq + g * gp * NP;
        const int16_t *x0 = xa->q + g * G;
#pragma GCC unroll 16
        for (int p = 0; p < gp; p++) {
            const VI b0 = LOADI(wg + p * NP), b1 = LOADI(wg + p * NP + H);
            for (int i = 0; i < R; i++) {
                const VI xb = SET1I(pair(x0 + i * xa->ldq + 2 * p));
                ia[i][0] = DPW(ia[i][0], xb, b0);
                ia[i][1] = DPW(ia[i][1], xb, b1);
            }
        }
        const VF s0 = LOADF(ws + g * NP), s1 = LOADF(ws + g * NP + H);
        const int64_t bx = g * G / 32;
        for (int i = 0; i < R; i++) {
            const VF f = SET1F(xa->d[i * xa->ldb + bx]);
            acc[i][0] = FMA(CVT(ia[i][0]), MUL(s0, f), acc[i][0]);
            acc[i][1] = FMA(CVT(ia[i][1]), MUL(s1, f), acc[i][1]);
        }
        if (MINS) {
            const VF m0 = LOADF(wm + g * NP), m1 = LOADF(wm + g * NP + H);
            for (int i = 0; i < R; i++) {
                const VF sv = SET1F(xa->sx[i * xa->ldb + g]);
                acc[i][0] = FNMA(m0, sv, acc[i][0]);
                acc[i][1] = FNMA(m1, sv, acc[i][1]);
            }
        }
    }
    for (int i = 0; i < R; i++) {
        if (nv == NP) {
            STOREF(y + i * ldy, acc[i][0]);
            STOREF(y + i * ldy + H, acc[i][1]);
        } else {
            float t[NP];
            STOREF(t, acc[i][0]);
            STOREF(t + H, acc[i][1]);
            memcpy(y + i * ldy, t, sizeof(float) * (size_t)nv);
        }
    }
}

#define KCALL(R)                                                                              \
    do {                                                                                      \
        if (G == 16)                                                                          \
            FN(kern, SFX)(R, 16, 0, K, wq, ws, wm, xa, y, ldy, nv);                           \
        else if (wm)                                                                          \
            FN(kern, SFX)(R, 32, 1, K, wq, ws, wm, xa, y, ldy, nv);                           \
        else                                                                                  \
            FN(kern, SFX)(R, 32, 0, K, wq, ws, wm, xa, y, ldy, nv);                           \
    } while (0)

static void FN(ukr, SFX)(int mr, int64_t K, int G, const int32_t *wq, const float *ws,
                         const float *wm, const attn__q16act *xa, float *y, int64_t ldy,
                         int64_t nv) {
    switch (mr < MR ? mr : MR) { /* MR is 3 to 6 */
    case 1: KCALL(1); break;
    case 2: KCALL(2); break;
#if MR > 3
    case 3: KCALL(3); break;
#endif
#if MR > 4
    case 4: KCALL(4); break;
#endif
#if MR > 5
    case 5: KCALL(5); break;
#endif
    default: KCALL(MR); break;
    }
}
#undef KCALL
#undef FN
#undef FN2
