/* AVX512_VNNI kernels of the quantized linear product on int16 activations (quant.h, mv16) on
 * 256-bit vectors (AVX512VL): dp2 as two VPDPWSSD; the kernels are quant16_256.h's, shared
 * with the plain AVX2 ones (the same bits).  Built with the AVX512_VNNI flags (CMakeLists.txt);
 * chosen where CPUID reports AVX512_VNNI with AVX512BW/DQ/VL. */
#include "../quant.h"

#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && defined(__FMA__) && \
    defined(__F16C__)
#include <immintrin.h>

static inline __attribute__((always_inline)) __m256i dp2(__m256i a, __m256i x, __m256i b,
                                                         __m256i y) {
    return _mm256_dpwssd_epi32(_mm256_dpwssd_epi32(_mm256_setzero_si256(), a, x), b, y);
}
#define Q16_256_NAME "avx512_vnni_int16"
#include "../quant16_256.h"

const attn__quant_kernels *attn__quant_kernels_vnni_int16(void) { return &TABLE; }

#else
const attn__quant_kernels *attn__quant_kernels_vnni_int16(void) { return NULL; }
#endif
