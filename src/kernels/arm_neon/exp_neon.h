/* exp2 of 4 floats with NEON for t <= 0 (softmax-like weights, the GELU density), shared by
 * ew_neon.c and loss_neon.c; include only on AArch64. */
#ifndef ATTN_EXP_NEON_H
#define ATTN_EXP_NEON_H
#include <arm_neon.h>

#include "../ew.h"

/* 2^t for t in [-127, 126] (t already clamped): n = rint(t) (to nearest even, as rintf),
 * 2^(t - n) by the degree-6 Taylor polynomial of ew.h in Horner form with FMLA, times 2^n
 * built in the exponent field.  The one polynomial of the NEON exponentials. */
static inline float32x4_t attn__exp2_core4(float32x4_t t) {
    const float32x4_t n = vrndnq_f32(t);
    const float32x4_t f = vsubq_f32(t, n);
    float32x4_t p = vdupq_n_f32(ATTN__EXP2_P6);
    p = vfmaq_f32(vdupq_n_f32(ATTN__EXP2_P5), p, f);
    p = vfmaq_f32(vdupq_n_f32(ATTN__EXP2_P4), p, f);
    p = vfmaq_f32(vdupq_n_f32(ATTN__EXP2_P3), p, f);
    p = vfmaq_f32(vdupq_n_f32(ATTN__EXP2_P2), p, f);
    p = vfmaq_f32(vdupq_n_f32(ATTN__EXP2_P1), p, f);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, f);
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

/* 2^t (relative error < 1.3e-7 on [-1/2, 1/2] before the scaling).  Below t = -126 the result
 * is exactly 0 (no subnormal); a NaN stays NaN.  For t up to 126. */
static inline float32x4_t attn__exp2_neg4(float32x4_t t) {
    const uint32x4_t normal = vmvnq_u32(vcltq_f32(t, vdupq_n_f32(-126.0f))); /* NaN: kept */
    const float32x4_t r = attn__exp2_core4(vmaxq_f32(t, vdupq_n_f32(-127.0f)));
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(r), normal));
}

#endif
