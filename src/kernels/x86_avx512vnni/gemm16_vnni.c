/* The int16 GEMM of AVX512_VNNI (quant.h, attn__gemm16): prompts on int16 activations, the
 * body of gemm16_body.h on 512-bit vectors, panels of 32 weight rows, 6 x 32 tiles (32
 * multiply-adds per VPDPWSSD; a float FMA of the same width does 16).  Built with the
 * AVX512_VNNI flags (CMakeLists.txt); dispatch.c takes it with the AVX512_VNNI int16 table. */
#include "../quant.h"

#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && defined(__FMA__) && \
    defined(__F16C__)
#include <immintrin.h>

/* 512-bit: panels of 32 columns.  The 256-bit instance (panels of 16) ran as fast on AMD Zen
 * 4, which splits a 512-bit operation in two (512 x 2816 x 1024, one thread: Q4_K 17.5 against
 * 17.6 ms, Q6_K 18.4 / 18.3, Q8_0 16.6 / 16.6), and Intel's 512-bit units do twice its work
 * per instruction. */
#define MR 6
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
#include "../gemm16_body.h"

static const attn__gemm16 G512 = {"avx512_vnni_int16_gemm", MR, 32, pack_512, ukr_512};
const attn__gemm16 *attn__gemm16_vnni(void) { return &G512; }

#else
const attn__gemm16 *attn__gemm16_vnni(void) { return NULL; }
#endif
