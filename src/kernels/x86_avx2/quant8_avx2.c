/* Plain AVX2 kernels of the quantized linear product on int8 activations (quant.h, mv8), for
 * CPUs without AVX-VNNI or AVX512_VNNI (AMD Zen 2/3, Intel before Alder Lake): the dot product
 * of unsigned weight bytes with signed activation bytes as VPMADDUBSW (pairs into 16 bits)
 * then VPMADDWD by ones (pairs of those into 32), the same int32 lanes as VPDPBUSD; the
 * kernels are quant8_256.h's, shared with x86_avxvnni/quant_avxvnni.c, with the same bits.
 * Built with AVX2, FMA and F16C (CMakeLists.txt); else the table is NULL. */
#include "../quant.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

static inline __attribute__((always_inline)) __m256i dp(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
#define Q8_256_NAME "avx2_int8"
#include "../quant8_256.h"

const attn__quant_kernels *attn__quant_kernels_avx2_int8(void) { return &TABLE; }

#else
const attn__quant_kernels *attn__quant_kernels_avx2_int8(void) { return NULL; }
#endif
