/* AVX-VNNI kernels of the quantized linear product on int16 activations (quant.h, mv16) for
 * the AVX2 set: dp2 as two VEX VPDPWSSD; the kernels are quant16_256.h's, shared with the plain
 * AVX2 ones (the same bits).  Built with AVX2, FMA, F16C and AVX-VNNI (CMakeLists.txt); chosen
 * where CPUID reports AVX-VNNI. */
#include "../quant.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && defined(__AVXVNNI__)
#include <immintrin.h>

static inline __attribute__((always_inline)) __m256i dp2(__m256i a, __m256i x, __m256i b,
                                                         __m256i y) {
    return _mm256_dpwssd_avx_epi32(_mm256_dpwssd_avx_epi32(_mm256_setzero_si256(), a, x), b, y);
}
#define Q16_256_NAME "avx_vnni_int16"
#include "../quant16_256.h"

const attn__quant_kernels *attn__quant_kernels_avxvnni_int16(void) { return &TABLE; }

#else
const attn__quant_kernels *attn__quant_kernels_avxvnni_int16(void) { return NULL; }
#endif
