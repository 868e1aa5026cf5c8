/* gemm16_body.h on 256-bit vectors: panels of 16 weight rows (pack_256, ukr_256).  The
 * includer (x86_avx2/gemm16_avx2.c, x86_avxvnni/gemm16_avxvnni.c) defines MR, DPW(acc, a,
 * b) (the int32 lanes acc + the pairwise products of the int16 lanes of a and b), GEMM16_NAME
 * and GEMM16_FN (the table's name and accessor), then includes this file once.  With 16 YMM
 * registers, MR rows keep 2 MR integer accumulators in the group loop and the float ones
 * wait in memory (one load and store per group). */
#define NP 16
#define SFX _256
#define VI __m256i
#define VF __m256
#define ZEROI _mm256_setzero_si256
#define ZEROF _mm256_setzero_ps
#define LOADI(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define LOADF _mm256_loadu_ps
#define STOREF _mm256_storeu_ps
#define SET1I _mm256_set1_epi32
#define SET1F _mm256_set1_ps
#define CVT _mm256_cvtepi32_ps
#define MUL _mm256_mul_ps
#define FMA _mm256_fmadd_ps
#define FNMA _mm256_fnmadd_ps
#include "gemm16_body.h"

static const attn__gemm16 G256 = {GEMM16_NAME, MR, NP, pack_256, ukr_256};
const attn__gemm16 *GEMM16_FN(void) { return &G256; }
