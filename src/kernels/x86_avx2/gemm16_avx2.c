/* The int16 GEMM of plain AVX2 (quant.h, attn__gemm16): gemm16_body.h on 256-bit vectors
 * (gemm16_256.h), the pairs of products by VPMADDWD and summed by VPADDD (16 multiply-adds
 * per two instructions, the int32 lanes of VPDPWSSD).  Built with AVX2, FMA and F16C
 * (CMakeLists.txt); dispatch.c takes it with the plain AVX2 int16 table. */
#include "../quant.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#define MR 4
/* acc + VPMADDWD(a, b); the empty asm keeps each sum in its accumulator (unrolled, the
 * compiler would otherwise regroup the integer sums as a tree of products held on the
 * stack) */
static inline __attribute__((always_inline)) __m256i dpw(__m256i acc, __m256i a, __m256i b) {
    __m256i r = _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
    __asm__("" : "+x"(r));
    return r;
}
#define DPW dpw
#define GEMM16_NAME "avx2_int16_gemm"
#define GEMM16_FN attn__gemm16_avx2
#include "../gemm16_256.h"

#else
const attn__gemm16 *attn__gemm16_avx2(void) { return NULL; }
#endif
