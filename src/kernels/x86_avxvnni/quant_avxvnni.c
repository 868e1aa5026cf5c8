/* AVX-VNNI kernels of the quantized linear product on int8 activations (quant.h, mv8) for the
 * AVX2 set: the VEX-encoded VPDPBUSD on 256 bits, one 32-element block (or group) per
 * instruction; the kernels themselves are quant8_256.h's, shared with the plain AVX2 ones
 * (x86_avx2/quant8_avx2.c), with the same bits.  Built with AVX2, FMA, F16C and AVX-VNNI
 * (CMakeLists.txt); chosen where CPUID reports AVX-VNNI. */
#include "../quant.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && defined(__AVXVNNI__)
#include <immintrin.h>

static inline __attribute__((always_inline)) __m256i dp(__m256i u, __m256i s) {
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
}
#define Q8_256_NAME "avx_vnni"
#include "../quant8_256.h"

const attn__quant_kernels *attn__quant_kernels_avxvnni(void) { return &TABLE; }

#else
const attn__quant_kernels *attn__quant_kernels_avxvnni(void) { return NULL; }
#endif
