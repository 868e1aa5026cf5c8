/* exp2 of 16 floats with AVX-512F and AVX512DQ (the AVX-512 set needs both), shared by the
 * attention kernels' softmax, the GELU backward and the cross-entropy row kernel; include only
 * from files compiled with the AVX-512 set's flags. */
#ifndef ATTN_EXP_AVX512_H
#define ATTN_EXP_AVX512_H
#include <immintrin.h>

/* 2^t for t <= 0: f = t - floor(t) in [0, 1) by VREDUCEPS (AVX512DQ), 2^f by a degree-6
 * polynomial fitted for the least maximum relative error on [0, 1] with its constant term 1
 * (1.0 exactly at t = 0; 3.9e-9 in exact arithmetic, 6.2e-8 at most evaluated in float over
 * t in [-126, 0], against 2.2e-7 for the Taylor polynomial about round(t) used before), and
 * scalef by floor(t) (VSCALEFPS takes the floor of its second operand itself).  Below t = -126
 * the result is exactly 0, so -inf (a masked score) gives 0 and no result is subnormal:
 * subnormal weights cost microcode assists in the products that follow (ALiBi's long linear
 * tails made the forward 6x slower).  9 instructions where the clamp, the rounding and the
 * subtraction made 11 (the exponentials of a 24 x 512 score strip 1.18x faster, one thread,
 * Intel family 6 model 207). */
static inline __m512 attn__exp2_16(__m512 t) {
    /* NaN stays NaN (NLT_UQ is true for it; VREDUCEPS and VSCALEFPS pass it on): a NaN score
     * must reach the output, not turn into a weight of 0 */
    const __mmask16 normal = _mm512_cmp_ps_mask(t, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
    const __m512 f = _mm512_maskz_reduce_ps(normal, t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512 p = _mm512_set1_ps(2.1877505e-4f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.2401354e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6812043e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5483371e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022946e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314706e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(normal, p, t);
}

#endif
