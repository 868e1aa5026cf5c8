/* The int16 GEMM of AVX-VNNI (quant.h, attn__gemm16; Intel Core 12th generation and later,
 * AMD Zen 5): gemm16_body.h on 256-bit vectors (gemm16_256.h), VPDPWSSD in its VEX form (16
 * multiply-adds per instruction; a float FMA of the same width does 8).  The same bits as the
 * plain AVX2 instance, which the tests run where this CPU lacks AVX-VNNI.  Built with AVX2,
 * FMA, F16C and AVX-VNNI (CMakeLists.txt); dispatch.c takes it with the AVX-VNNI int16 table. */
#include "../quant.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && defined(__AVXVNNI__)
#include <immintrin.h>

#define MR 4
#define DPW _mm256_dpwssd_avx_epi32
#define GEMM16_NAME "avxvnni_int16_gemm"
#define GEMM16_FN attn__gemm16_avxvnni
#include "../gemm16_256.h"

#else
const attn__gemm16 *attn__gemm16_avxvnni(void) { return NULL; }
#endif
