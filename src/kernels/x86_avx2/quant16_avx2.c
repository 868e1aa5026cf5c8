/* Plain AVX2 kernels of the quantized linear product on int16 activations (quant.h, mv16):
 * dp2 as two VPMADDWD and an add; the kernels are quant16_256.h's, shared with the VNNI sets
 * (the same bits).  The int16 set of every AVX2 or AVX-512 context without VNNI.  Built with
 * AVX2, FMA and F16C (CMakeLists.txt); else the table is NULL. */
#include "../quant.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

static inline __attribute__((always_inline)) __m256i dp2(__m256i a, __m256i x, __m256i b,
                                                         __m256i y) {
    return _mm256_add_epi32(_mm256_madd_epi16(a, x), _mm256_madd_epi16(b, y));
}
#define Q16_256_NAME "avx2_int16"
#include "../quant16_256.h"

const attn__quant_kernels *attn__quant_kernels_avx2_int16(void) { return &TABLE; }

#else
const attn__quant_kernels *attn__quant_kernels_avx2_int16(void) { return NULL; }
#endif
