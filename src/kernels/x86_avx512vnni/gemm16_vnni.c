/* The int16 GEMM of AVX512_VNNI (quant.h, attn__gemm16): prompts on int16 activations.
 *
 * Lanes are columns of Y (weight rows), as in the float GEMM: a panel of 32 weight rows holds,
 * for each pair of k, one 32-bit lane per row with its two quants as int16 (pack, after
 * dec_row unpacked each row).  The 6 x 32 microkernel (gemm16_body.h) broadcasts a row's pair
 * of int16 activations and multiplies it into two vectors of 16 lanes with VPDPWSSD (32
 * multiply-adds per instruction, a float FMA of the same width does 16), summing each group of
 * 32 (Q6_K: 16) k in int32, exactly; then per group one conversion, the product of the group's
 * scales with the row's block scale d, and one FMA into the float accumulators, and the mins
 * times the float block sums of x in another.  Rows of X are read in place from the int16 rows
 * of the activations' quantizer (no packing of A).  Each output is summed in one fixed order
 * whatever the tile holds, so a row gives the same bits alone or among others, and for any
 * thread count.
 *
 * Built with the AVX512_VNNI flags (CMakeLists.txt); dispatch.c takes it with the AVX512_VNNI
 * int16 table. */
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

/* 512-bit: panels of 32 columns.  The same body at 256 bits (panels of 16) ran as fast on AMD
 * Zen 4, which splits a 512-bit operation in two (512 x 2816 x 1024, one thread: Q4_K 17.5
 * against 17.6 ms, Q6_K 18.4 / 18.3, Q8_0 16.6 / 16.6), and Intel's 512-bit units do twice
 * its work per instruction; the body's macros leave room for a 256-bit AVX-VNNI one. */
#define NP 32
#define SFX _512
#define VI __m512i
#define VF __m512
#define ZEROI _mm512_setzero_si512
#define ZEROF _mm512_setzero_ps
#define LOADI(p) _mm512_loadu_si512((const void *)(p))
#define LOADF _mm512_loadu_ps
#define STOREF _mm512_storeu_ps
#define SET1I _mm512_set1_epi32
#define SET1F _mm512_set1_ps
#define DPW _mm512_dpwssd_epi32
#define CVT _mm512_cvtepi32_ps
#define MUL _mm512_mul_ps
#define FMA _mm512_fmadd_ps
#define FNMA _mm512_fnmadd_ps
#include "gemm16_body.h"

static const attn__gemm16 G512 = {"avx512_vnni_int16_gemm", MR, 32, pack_512, ukr_512};
const attn__gemm16 *attn__gemm16_vnni(void) { return &G512; }

#else
const attn__gemm16 *attn__gemm16_vnni(void) { return NULL; }
#endif
