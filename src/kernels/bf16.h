/* bfloat16 storage: the top 16 bits of an IEEE float (1 sign, 8 exponent, 7 mantissa bits).
 * Conversion from float rounds to nearest, ties to even (as VCVTNEPS2BF16 does); NaN stays
 * NaN (quiet).  Conversion to float is exact.  Arithmetic on bf16 data accumulates in float. */
#ifndef ATTN_BF16_H
#define ATTN_BF16_H
#include <stdint.h>
#include <string.h>

typedef uint16_t attn__bf16;

static inline attn__bf16 attn__f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (attn__bf16)((u >> 16) | 0x40u); /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (attn__bf16)(u >> 16);
}

static inline float attn__bf16_to_f32(attn__bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* The same with subnormal inputs taken as (signed) zero, as VCVTNE2PS2BF16 rounds: the
 * rounding of every bf16 kernel's operands. */
static inline attn__bf16 attn__f32_to_bf16_daz(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0 && (u & 0x007fffffu) != 0) return (attn__bf16)((u >> 16) & 0x8000u);
    return attn__f32_to_bf16(x);
}

/* x rounded to the nearest bf16 value, as a float. */
static inline float attn__bf16_round(float x) { return attn__bf16_to_f32(attn__f32_to_bf16(x)); }

#endif
