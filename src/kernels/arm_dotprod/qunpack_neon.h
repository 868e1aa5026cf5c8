/* The integer quants of the 4- and 5-bit, the K and the IQ4 types as bytes in NEON vectors,
 * shared by the SDOT (quant_dotprod.c) and SMMLA (../arm_i8mm/quant_i8mm.c) int8 kernels and
 * the float NEON kernels (../arm_neon/quant_neon.c): every value fits a signed byte (at most
 * 63, the IQ4 levels -127 .. 113, Q2_K / Q3_K quants times their group scale -128 .. 124),
 * and the int8 kernels' float terms of Q2_K and Q3_K (attn__k23_acc).
 * Layouts in ../quant.h; plain NEON, no extension needed. */
#ifndef ATTN_QUNPACK_NEON_H
#define ATTN_QUNPACK_NEON_H
#include <arm_neon.h>

#include "../quant.h"

/* Q4_0 / Q4_1: the 32 unsigned nibbles of qs[16] (0-15, without Q4_0's - 8), elements 0-15
 * (the low nibbles) in a0, 16-31 (the high ones) in a1 */
static inline void attn__unpack_q4(const uint8_t *qs, int8x16_t *a0, int8x16_t *a1) {
    const uint8x16_t q = vld1q_u8(qs);
    *a0 = vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(15)));
    *a1 = vreinterpretq_s8_u8(vshrq_n_u8(q, 4));
}

/* Q5_0 / Q5_1: the 32 unsigned 5-bit quants (0-31, without Q5_0's - 16): the nibbles as
 * attn__unpack_q4 and bit e of the little-endian 32-bit qh above them as bit 4.  The 4 bytes
 * of qh in one register, TBL spreads them: lane j of the first half gets byte j / 8 (bits
 * 0-15: elements 0-15), of the second byte 2 + j / 8; CMTST against 1 << (j mod 8). */
static inline void attn__unpack_q5(const uint8_t *qs, const uint8_t *qh, int8x16_t *a0,
                                   int8x16_t *a1) {
    static const uint8_t SEL[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    static const uint8_t SPREAD[2][16] = {{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
                                          {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3}};
    const uint64_t h = (uint64_t)qh[0] | (uint64_t)qh[1] << 8 | (uint64_t)qh[2] << 16 |
                       (uint64_t)qh[3] << 24; /* vcreate: lane i = bits 8i .. 8i + 7 */
    const uint8x16_t t = vcombine_u8(vcreate_u8(h), vdup_n_u8(0));
    const uint8x16_t sel = vld1q_u8(SEL), sixteen = vdupq_n_u8(16);
    const uint8x16_t h0 = vqtbl1q_u8(t, vld1q_u8(SPREAD[0]));
    const uint8x16_t h1 = vqtbl1q_u8(t, vld1q_u8(SPREAD[1]));
    attn__unpack_q4(qs, a0, a1);
    *a0 = vreinterpretq_s8_u8(
        vorrq_u8(vreinterpretq_u8_s8(*a0), vandq_u8(vtstq_u8(h0, sel), sixteen)));
    *a1 = vreinterpretq_s8_u8(
        vorrq_u8(vreinterpretq_u8_s8(*a1), vandq_u8(vtstq_u8(h1, sel), sixteen)));
}

/* IQ4_NL (and each group of 32 of IQ4_XS): the 32 int8 levels attn__iq4_values[q] of the
 * nibbles of qs[16] in the order of attn__unpack_q4 (low nibbles: elements 0-15 in a0, high:
 * 16-31 in a1), each nibble mapped by TBL on the 16-byte table (levels -127 .. 113: signed
 * bytes, as SDOT and SMMLA take them) */
static inline void attn__unpack_iq4(const uint8_t *qs, int8x16_t *a0, int8x16_t *a1) {
    const int8x16_t t = vld1q_s8(attn__iq4_values);
    int8x16_t n0, n1;
    attn__unpack_q4(qs, &n0, &n1);
    *a0 = vqtbl1q_s8(t, vreinterpretq_u8_s8(n0));
    *a1 = vqtbl1q_s8(t, vreinterpretq_u8_s8(n1));
}

/* IQ4_XS: the 256 levels of a block as 16 vectors, group s of 32 in a[2 s] (elements 0-15)
 * and a[2 s + 1] (16-31); the group's 16 bytes of nibbles at b + 8 + 16 s */
static inline void attn__unpack_iq4xs(const uint8_t *b, int8x16_t *a) {
    for (int s = 0; s < 8; s++) attn__unpack_iq4(b + 8 + 16 * s, &a[2 * s], &a[2 * s + 1]);
}

/* The 6-bit scale and min of group j of Q4_K / Q5_K (as ref/quant_ref.c). */
static inline void attn__k4_scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[4 + j] & 63;
    } else {
        *sc = (s[4 + j] & 15) | ((s[j - 4] >> 2) & 0x30);
        *mn = (s[4 + j] >> 4) | ((s[j] >> 2) & 0x30);
    }
}

/* The float scales of the 8 groups of 32 of a K block, rounded as the plain C kernels do:
 * Q4_K / Q5_K (iq4 0) ds[s] = d sc, dm[s] = dmin m; IQ4_XS (iq4 1) ds[s] = d ls (the signed
 * 6-bit scale), dm untouched */
static inline void attn__group32_scales(int iq4, const uint8_t *b, float *ds, float *dm) {
    const float d = attn__load_half(b);
    if (iq4) {
        for (int s = 0; s < 8; s++) ds[s] = d * (float)attn__iq4xs_scale(b, s);
        return;
    }
    const float dmin = attn__load_half(b + 2);
    for (int s = 0; s < 8; s++) {
        int sc, mn;
        attn__k4_scale_min(b + 4, s, &sc, &mn);
        ds[s] = d * (float)sc, dm[s] = dmin * (float)mn;
    }
}

/* Q4_K (five 0) and Q5_K: the 256 quants of a block (0-15, 0-31) as 16 vectors, group s of 32
 * in a[2 s] (its elements 0-15) and a[2 s + 1] (16-31) */
static inline void attn__unpack_k45(const uint8_t *b, int five, int8x16_t *a) {
    const uint8_t *qs = b + (five ? 48 : 16);
    const uint8x16_t h0 = vld1q_u8(b + 16), h1 = vld1q_u8(b + 32), sixteen = vdupq_n_u8(16);
    for (int p = 0; p < 4; p++) {
        const uint8x16_t l0 = vld1q_u8(qs + 32 * p), l1 = vld1q_u8(qs + 32 * p + 16);
        uint8x16_t q[4] = {vandq_u8(l0, vdupq_n_u8(15)), vandq_u8(l1, vdupq_n_u8(15)),
                           vshrq_n_u8(l0, 4), vshrq_n_u8(l1, 4)};
        if (five)
            for (int t = 0; t < 2; t++) { /* bit 2p + t of qh[j] as bit 4 */
                const uint8x16_t bit = vdupq_n_u8((uint8_t)(1u << (2 * p + t)));
                q[2 * t] = vorrq_u8(q[2 * t], vandq_u8(vtstq_u8(h0, bit), sixteen));
                q[2 * t + 1] = vorrq_u8(q[2 * t + 1], vandq_u8(vtstq_u8(h1, bit), sixteen));
            }
        for (int t = 0; t < 4; t++) a[4 * p + t] = vreinterpretq_s8_u8(q[t]);
    }
}

/* Q4_K, Q5_K (iq4 0, five 0 / 1: attn__unpack_k45) or IQ4_XS (iq4 1: attn__unpack_iq4xs) */
static inline void attn__unpack_group32(int iq4, int five, const uint8_t *b, int8x16_t *a) {
    if (iq4) attn__unpack_iq4xs(b, a);
    else attn__unpack_k45(b, five, a);
}

/* The plain C kernel's float term of a group of 32 (ds, dm: attn__group32_scales; xd: the
 * activations' d and sum of x of the group; dot: the exact sum(q qx)):
 * ((d sc) dx) dot - (dmin m) sx for Q4_K / Q5_K, ((d ls) dx) dot for IQ4_XS (iq4 1) */
static inline float attn__group32_term(int iq4, float ds, float dm, const float *xd,
                                       int32_t dot) {
    if (iq4) return (ds * xd[0]) * (float)dot;
    return (ds * xd[0]) * (float)dot - dm * xd[1];
}

/* Q6_K: the 256 quants (0-63, without the - 32) as 16 vectors, a[g] the group of 16 elements
 * 16 g .. 16 g + 15: element e = 128 h + 32 c + j has the low (c < 2) or high (c >= 2) nibble
 * of ql[64 h + 32 (c & 1) + j] and bits 2c, 2c + 1 of qh[32 h + j] above it */
static inline void attn__unpack_q6k(const uint8_t *b, int8x16_t *a) {
    const uint8x16_t three = vdupq_n_u8(3), fifteen = vdupq_n_u8(15);
    for (int h = 0; h < 2; h++) {
        const uint8x16_t qh0 = vld1q_u8(b + 128 + 32 * h), qh1 = vld1q_u8(b + 144 + 32 * h);
        for (int c = 0; c < 4; c++) {
            const uint8_t *ql = b + 64 * h + 32 * (c & 1);
            uint8x16_t l0 = vld1q_u8(ql), l1 = vld1q_u8(ql + 16);
            if (c >> 1) l0 = vshrq_n_u8(l0, 4), l1 = vshrq_n_u8(l1, 4);
            else l0 = vandq_u8(l0, fifteen), l1 = vandq_u8(l1, fifteen);
            const int8x16_t sh = vdupq_n_s8((int8_t)(-2 * c)); /* right shift by 2c */
            const uint8x16_t t0 = vandq_u8(vshlq_u8(qh0, sh), three);
            const uint8x16_t t1 = vandq_u8(vshlq_u8(qh1, sh), three);
            a[8 * h + 2 * c] = vreinterpretq_s8_u8(vorrq_u8(l0, vshlq_n_u8(t0, 4)));
            a[8 * h + 2 * c + 1] = vreinterpretq_s8_u8(vorrq_u8(l1, vshlq_n_u8(t1, 4)));
        }
    }
}

/* ---- Q2_K and Q3_K: 16 groups of 16 ------------------------------------------------------
 * Element 32 j + l of a block (l < 32: group 2 j + (l >> 4) of 16, x's block of 32 number j
 * within the superblock) has its 2 low bits at shift 2 (j & 3) of qs[32 (j >> 2) + l] (qs at
 * b + 16 for Q2_K, b + 32 for Q3_K) and, for Q3_K, its high bit h at shift j of hmask[l] (at
 * b): q = ql (Q2_K, 0 .. 3) or ql - 4 (1 - h) (Q3_K, -4 .. 3). */

/* The quants of elements 32 j .. 32 j + 31 as signed bytes: 0-15 (group 2 j) in q0, 16-31
 * (group 2 j + 1) in q1; Q3_K (three 1) subtracts 4 where the high bit is clear (CMTST, BIC) */
static inline void attn__k23_quants(int three, const uint8_t *b, int j, int8x16_t *q0,
                                    int8x16_t *q1) {
    const uint8_t *qs = b + (three ? 32 : 16) + 32 * (j >> 2);
    const int8x16_t sh = vdupq_n_s8((int8_t)(-2 * (j & 3))); /* right shift by 2 (j & 3) */
    const uint8x16_t mask = vdupq_n_u8(3);
    uint8x16_t l0 = vandq_u8(vshlq_u8(vld1q_u8(qs), sh), mask);
    uint8x16_t l1 = vandq_u8(vshlq_u8(vld1q_u8(qs + 16), sh), mask);
    if (three) {
        const uint8x16_t bit = vdupq_n_u8((uint8_t)(1u << j)), four = vdupq_n_u8(4);
        l0 = vsubq_u8(l0, vbicq_u8(four, vtstq_u8(vld1q_u8(b), bit)));
        l1 = vsubq_u8(l1, vbicq_u8(four, vtstq_u8(vld1q_u8(b + 16), bit)));
    }
    *q0 = vreinterpretq_s8_u8(l0);
    *q1 = vreinterpretq_s8_u8(l1);
}

/* Q3_K: the 16 signed 6-bit group scales s - 32 (in [-32, 31]) as bytes, lane g: the low 4
 * bits from byte g & 7 of the 12 at b + 96 (shift 4 (g >> 3)), the high 2 from byte
 * 8 + (g & 3) (shift 2 (g >> 2)); the 12 bytes read without passing the block */
static inline int8x16_t attn__q3k_scales(const uint8_t *b) {
    static const int8_t SH[16] = {0, 0, 0, 0, -2, -2, -2, -2, -4, -4, -4, -4, -6, -6, -6, -6};
    const uint8x8_t l = vld1_u8(b + 96);
    const uint8x16_t lo = vcombine_u8(vand_u8(l, vdup_n_u8(15)), vshr_n_u8(l, 4));
    const uint32_t h = (uint32_t)b[104] | (uint32_t)b[105] << 8 | (uint32_t)b[106] << 16 |
                       (uint32_t)b[107] << 24; /* bytes 8 .. 11, repeated in every 4 lanes */
    const uint8x16_t hi = vandq_u8(vshlq_u8(vreinterpretq_u8_u32(vdupq_n_u32(h)), vld1q_s8(SH)),
                                   vdupq_n_u8(3));
    return vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, vshlq_n_u8(hi, 4))), vdupq_n_s8(32));
}

/* The int8 kernels' weights of a Q2_K / Q3_K block: the 256 quants times their group's scale
 * as 16 vectors of signed bytes, a[g] the group of 16 elements 16 g .. 16 g + 15: Q2_K
 * q (sc & 15) in [0, 45]; Q3_K -(q s) in [-128, 124] (q s itself reaches 128 at q = -4,
 * s = -32, beyond a signed byte; its negation fits).  So a dot product of a[2 j], a[2 j + 1]
 * with x's block j is the plain C kernel's integer bracket sc0 sum0(q qx) + sc1 sum1(q qx),
 * exactly (negated for Q3_K).  Q2_K's group mins sc >> 4 go to mn (4 vectors of int32, lanes
 * the groups in order); Q3_K leaves mn untouched. */
static inline void attn__unpack_k23(int three, const uint8_t *b, int8x16_t *a, int32x4_t *mn) {
    int8_t s[16]; /* the multipliers, one per group, broadcast by LD1R */
    if (three) {
        vst1q_s8(s, vnegq_s8(attn__q3k_scales(b)));
    } else {
        const uint8x16_t sc = vld1q_u8(b);
        vst1q_s8(s, vreinterpretq_s8_u8(vandq_u8(sc, vdupq_n_u8(15))));
        const uint8x16_t m = vshrq_n_u8(sc, 4);
        const uint16x8_t m0 = vmovl_u8(vget_low_u8(m)), m1 = vmovl_u8(vget_high_u8(m));
        mn[0] = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(m0)));
        mn[1] = vreinterpretq_s32_u32(vmovl_u16(vget_high_u16(m0)));
        mn[2] = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(m1)));
        mn[3] = vreinterpretq_s32_u32(vmovl_u16(vget_high_u16(m1)));
    }
    for (int j = 0; j < 8; j++) {
        int8x16_t q0, q1;
        attn__k23_quants(three, b, j, &q0, &q1);
        a[2 * j] = vmulq_s8(q0, vld1q_dup_s8(s + 2 * j));
        a[2 * j + 1] = vmulq_s8(q1, vld1q_dup_s8(s + 2 * j + 1));
    }
}

/* The plain C kernel's 8 float terms of a Q2_K / Q3_K block against one row of x, added to acc
 * in order (j = 0 .. 7, x's blocks of 32 in the superblock):
 *   Q2_K  (d dx_j) is_j - (dmin dx_j) (m_2j sq_2j + m_2j+1 sq_2j+1)
 *   Q3_K  (d dx_j) is_j
 * is_j the integer brackets in lanes j (is0: j = 0 .. 3, is1: 4 .. 7; Q3_K's negated, as
 * attn__unpack_k23 gives them), xd the row's dsx at the block's first block of 32 (d and sum
 * of x pairs: LD2 takes the 8 d), sq its sq there (the 16 sums of x's quants per group of 16),
 * mn the Q2_K mins.  The products and the subtraction on 4 lanes are the plain C kernel's
 * roundings (each is one IEEE operation, commutative), then the 8 serial adds. */
static inline float attn__k23_acc(int three, float d, float dmin, const int32x4_t *mn,
                                  int32x4_t is0, int32x4_t is1, const float *xd,
                                  const int32_t *sq, float acc) {
    const float32x4_t dx0 = vld2q_f32(xd).val[0], dx1 = vld2q_f32(xd + 8).val[0];
    if (three) is0 = vnegq_s32(is0), is1 = vnegq_s32(is1);
    float32x4_t t0 = vmulq_f32(vmulq_n_f32(dx0, d), vcvtq_f32_s32(is0));
    float32x4_t t1 = vmulq_f32(vmulq_n_f32(dx1, d), vcvtq_f32_s32(is1));
    if (!three) {
        int32x4_t p[4]; /* m_g sq_g, then pairs added: m_2j sq_2j + m_2j+1 sq_2j+1 in lane j */
        for (int v = 0; v < 4; v++) p[v] = vmulq_s32(mn[v], vld1q_s32(sq + 4 * v));
        const int32x4_t im0 = vpaddq_s32(p[0], p[1]), im1 = vpaddq_s32(p[2], p[3]);
        t0 = vsubq_f32(t0, vmulq_f32(vmulq_n_f32(dx0, dmin), vcvtq_f32_s32(im0)));
        t1 = vsubq_f32(t1, vmulq_f32(vmulq_n_f32(dx1, dmin), vcvtq_f32_s32(im1)));
    }
    acc += vgetq_lane_f32(t0, 0);
    acc += vgetq_lane_f32(t0, 1);
    acc += vgetq_lane_f32(t0, 2);
    acc += vgetq_lane_f32(t0, 3);
    acc += vgetq_lane_f32(t1, 0);
    acc += vgetq_lane_f32(t1, 1);
    acc += vgetq_lane_f32(t1, 2);
    acc += vgetq_lane_f32(t1, 3);
    return acc;
}

#endif
