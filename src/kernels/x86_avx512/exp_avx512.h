/* exp2 of 16 floats with AVX-512F, shared by the attention kernels' softmax and the
 * cross-entropy row kernel; include only from files compiled with AVX-512. */
#ifndef ATTN_EXP_AVX512_H
#define ATTN_EXP_AVX512_H
#include <immintrin.h>

/* 2^t for t <= 0: n = round(t), 2^(t-n) by its degree-6 Taylor polynomial (relative error
 * < 1.3e-7 on [-1/2, 1/2]), scalef by n.  Below t = -126 the result is exactly 0, so -inf (a
 * masked score) gives 0 and no result is subnormal: subnormal weights cost microcode assists
 * in the products that follow (ALiBi's long linear tails made the forward 6x slower). */
static inline __m512 attn__exp2_16(__m512 t) {
    /* NaN stays NaN (NLT_UQ is true for it, and maxps returns its second operand): a NaN score
     * must reach the output, not turn into a weight of 0 */
    __mmask16 normal = _mm512_cmp_ps_mask(t, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
    t = _mm512_max_ps(_mm512_set1_ps(-127.0f), t);
    __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_set1_ps(1.5403530393381606e-4f);  /* ln2^6/720 */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f)); /* ln2^5/120 */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-3f)); /* ln2^4/24 */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-2f)); /* ln2^3/6 */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-1f)); /* ln2^2/2 */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-1f)); /* ln2 */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(normal, p, n);
}

#endif
