/* Inline helpers of the AVX-512 quantized kernels (x86_avx512/quant_avx512.c and
 * x86_avx512vnni/quant_vnni.c): AVX512F and F16C only, included by files built with at least
 * those flags. */
#ifndef ATTN_QUANT_AVX512_H
#define ATTN_QUANT_AVX512_H
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

/* the half at p as a float (exact) */
INLINE float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

INLINE __m128i ld128(const uint8_t *p) { return _mm_loadu_si128((const __m128i *)(const void *)p); }
INLINE __m256i ld256(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)(const void *)p); }

/* the 16 bytes at p as 16 int32 lanes */
INLINE __m512i bytes16(const uint8_t *p) { return _mm512_cvtepu8_epi32(ld128(p)); }

/* The 6-bit scales and mins of Q4_K / Q5_K, multiplied as the reference does: lanes 2 s and
 * 2 s + 1 hold d sc_s and dmin mn_s.  Bytes 4..19 of the block as lanes, then for lane 2 j + t
 * (t = 1: the min)  ((A >> sa) & ma) | ((B >> 2) & mb)  with
 *   j < 4:   A = s[j] (scale) or s[4 + j] (min), ma = 63, mb = 0
 *   j >= 4:  A = s[4 + j], sa = 0 (scale) or 4 (min), ma = 15;  B = s[j - 4] or s[j], mb = 48 */
INLINE __m512 k4_sdm(const uint8_t *b) {
    const __m512i s = bytes16(b + 4);
    const __m512i ia = _mm512_set_epi32(11, 11, 10, 10, 9, 9, 8, 8, 7, 3, 6, 2, 5, 1, 4, 0);
    const __m512i sa = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i ma = _mm512_set_epi32(15, 15, 15, 15, 15, 15, 15, 15, 63, 63, 63, 63, 63, 63, 63, 63);
    const __m512i ib = _mm512_set_epi32(7, 3, 6, 2, 5, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i mb = _mm512_set_epi32(48, 48, 48, 48, 48, 48, 48, 48, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i a = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(ia, s), sa), ma);
    const __m512i c = _mm512_and_si512(_mm512_srli_epi32(_mm512_permutexvar_epi32(ib, s), 2), mb);
    const __m512 q = _mm512_cvtepi32_ps(_mm512_or_si512(a, c));
    /* [d, dmin] repeated */
    const __m512 dd = _mm512_set_ps(h2f(b + 2), h2f(b), h2f(b + 2), h2f(b), h2f(b + 2), h2f(b),
                                    h2f(b + 2), h2f(b), h2f(b + 2), h2f(b), h2f(b + 2), h2f(b),
                                    h2f(b + 2), h2f(b), h2f(b + 2), h2f(b));
    return _mm512_mul_ps(dd, q);
}

/* The 8 group scales of an IQ4_XS block, d (ls_j - 32) in lane j as the reference multiplies
 * them: lane j's low 4 bits are bits 4 j.. of the 4 bytes at b + 4, its high 2 bits bits 2 j..
 * of the u16 at b + 2. */
INLINE __m256 iq4xs_ds(const uint8_t *b) {
    uint32_t sl;
    memcpy(&sl, b + 4, 4);
    const __m256i j = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)sl), _mm256_slli_epi32(j, 2)),
                                        _mm256_set1_epi32(15));
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b[2] | b[3] << 8), _mm256_slli_epi32(j, 1)),
                                        _mm256_set1_epi32(3));
    const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
    return _mm256_mul_ps(_mm256_set1_ps(h2f(b)), _mm256_cvtepi32_ps(ls));
}

#endif
