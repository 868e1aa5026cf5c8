/* Philox-4x32-10 for eight blocks at once (AVX-512F): each 64-bit lane carries one 32-bit word
 * of one block, so _mm512_mul_epu32 gives the full 32x32 -> 64-bit products the rounds need.
 * Produces exactly the words of attn__philox (kernels.h), hence the same dropout masks. */
#include "../kernels.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#define G 4 /* groups of eight blocks in flight: independent chains hide the multiply latency */

/* Keep bits of the 32 G elements of blocks blk .. blk+8G-1, 32 per group: bit 4*i + w of
 * bits[g] is word w of block blk+8g+i, set when word >> 8 >= thr, i.e. (word >> 8) / 2^24 >= p. */
static void keep_bits(uint64_t blk, uint64_t offset, uint64_t seed, uint32_t thr,
                      uint32_t bits[G]) {
    const __m512i lo32 = _mm512_set1_epi64(0xffffffffll);
    const __m512i m0 = _mm512_set1_epi64(0xD2511F53ll), m1 = _mm512_set1_epi64(0xCD9E8D57ll);
    __m512i c0[G], c1[G], c2[G], c3[G];
    for (int g = 0; g < G; g++) {
        __m512i b = _mm512_add_epi64(_mm512_set1_epi64((long long)(blk + 8 * (uint64_t)g)),
                                     _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
        c0[g] = _mm512_and_si512(b, lo32), c1[g] = _mm512_srli_epi64(b, 32);
        c2[g] = _mm512_set1_epi64((long long)(uint32_t)offset);
        c3[g] = _mm512_set1_epi64((long long)(uint32_t)(offset >> 32));
    }
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        const __m512i kk0 = _mm512_set1_epi64((long long)k0), kk1 = _mm512_set1_epi64((long long)k1);
        for (int g = 0; g < G; g++) {
            __m512i p0 = _mm512_mul_epu32(c0[g], m0), p1 = _mm512_mul_epu32(c2[g], m1);
            __m512i n0 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), c1[g], kk0, 0x96);
            __m512i n2 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), c3[g], kk1, 0x96);
            c1[g] = _mm512_and_si512(p1, lo32);
            c3[g] = _mm512_and_si512(p0, lo32);
            c0[g] = n0;
            c2[g] = n2;
        }
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    const __m512i t = _mm512_set1_epi64((long long)thr);
    for (int g = 0; g < G; g++) {
        __m512i w[4] = {c0[g], c1[g], c2[g], c3[g]};
        uint32_t acc = 0;
        for (int j = 0; j < 4; j++) {
            unsigned m = (unsigned)_mm512_cmpge_epu64_mask(_mm512_srli_epi64(w[j], 8), t);
            /* bit i of m -> bit 4*i + j: spread the nibbles, then the bits within them */
            uint32_t x = (m & 0x0fu) | ((m & 0xf0u) << 12);
            x = (x | (x << 6)) & 0x03030303u;
            x = (x | (x << 3)) & 0x11111111u;
            acc |= x << j;
        }
        bits[g] = acc;
    }
}

int attn__dropout_row_avx512(uint64_t seed, uint64_t offset, uint64_t idx, int64_t n, float p,
                             float scale, float *out) {
    /* u >= p with u = (w >> 8) / 2^24 exactly: (w >> 8) >= ceil(p * 2^24) */
    double tp = (double)p * 16777216.0;
    uint32_t thr = (uint32_t)tp;
    if ((double)thr < tp) thr++;
    const __m512 sv = _mm512_set1_ps(scale);
    uint64_t e = idx & ~(uint64_t)31; /* first element of the first group of 8 blocks */
    int64_t j = 0;
    uint32_t group[G];
    int gi = G;
    while (j < n) {
        if (gi == G) keep_bits(e >> 2, offset, seed, thr, group), gi = 0;
        uint32_t bits = group[gi++];
        int64_t first = (int64_t)(idx + (uint64_t)j - e); /* position in the group, 0..31 */
        int64_t cnt = 32 - first < n - j ? 32 - first : n - j;
        uint64_t sel = bits >> first;
        if (cnt == 32) {
            _mm512_storeu_ps(out + j, _mm512_maskz_mov_ps((__mmask16)sel, sv));
            _mm512_storeu_ps(out + j + 16, _mm512_maskz_mov_ps((__mmask16)(sel >> 16), sv));
        } else {
            for (int64_t q = 0; q < cnt; q++) out[j + q] = (sel >> q) & 1 ? scale : 0.0f;
        }
        j += cnt;
        e += 32;
    }
    return 1;
}
#else
int attn__dropout_row_avx512(uint64_t seed, uint64_t offset, uint64_t idx, int64_t n, float p,
                             float scale, float *out) {
    (void)seed, (void)offset, (void)idx, (void)n, (void)p, (void)scale, (void)out;
    return 0;
}
#endif
