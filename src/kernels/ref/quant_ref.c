/* Reference dequantization and quantization of the GGML block formats (quant.h): plain C, the
 * float operations of the gguf package's numpy code (gguf/quants.py) in the same order, so
 * the results agree bit for bit (tests/test_quant.c against tests/fixtures/quant/, written by
 * tests/gen_quant.py).  Built with -ffp-contract=off: fl(fl(d q) + m) is two roundings.
 *
 * Where numpy converts a float outside the integer type's range (a block whose scale
 * overflows or underflows float: |x| < ~4e-37 or NaN), its result is undefined; here the
 * quantized value is clamped (NaN to 0), which decodes to the same floats in those blocks
 * (their half scale is 0 or not finite). */
#include "../quant.h"

/* ---- half precision ---------------------------------------------------------------------- */
uint16_t attn__float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t s = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u) { /* NaN: the top 10 payload bits, never 0 */
        uint16_t m = (uint16_t)((a >> 13) & 0x3ffu);
        return (uint16_t)(s | 0x7c00u | (m ? m : 1u));
    }
    if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00u); /* >= 65520: infinity */
    if (a < 0x38800000u) {                                 /* below 2^-14: subnormal half */
        float v;
        memcpy(&v, &a, 4);
        v *= 0x1p24f;                      /* exact: the half's integer mantissa, unrounded */
        v = (v + 0x1p23f) - 0x1p23f;       /* to the nearest integer, ties to even */
        return (uint16_t)(s | (uint16_t)v); /* 1024 is the smallest normal, correctly */
    }
    a += 0xfffu + ((a >> 13) & 1u); /* round the 13 dropped bits to nearest even */
    return (uint16_t)(s | (uint16_t)((a >> 13) - (112u << 10)));
}

/* ---- dequantization ---------------------------------------------------------------------- */
static float f32_at(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}
static uint32_t u32_at(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void dq_q4_0(const uint8_t *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b += 18, y += 32) {
        const float d = attn__load_half(b);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)((b[2 + j] & 15) - 8);
            y[j + 16] = d * (float)((b[2 + j] >> 4) - 8);
        }
    }
}

static void dq_q4_1(const uint8_t *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b += 20, y += 32) {
        const float d = attn__load_half(b), m = attn__load_half(b + 2);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)(b[4 + j] & 15) + m;
            y[j + 16] = d * (float)(b[4 + j] >> 4) + m;
        }
    }
}

static void dq_q5_0(const uint8_t *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b += 22, y += 32) {
        const float d = attn__load_half(b);
        const uint32_t qh = u32_at(b + 2);
        for (int j = 0; j < 16; j++) {
            int lo = (b[6 + j] & 15) | (int)((qh >> j) & 1) << 4;
            int hi = (b[6 + j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = d * (float)(lo - 16);
            y[j + 16] = d * (float)(hi - 16);
        }
    }
}

static void dq_q5_1(const uint8_t *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b += 24, y += 32) {
        const float d = attn__load_half(b), m = attn__load_half(b + 2);
        const uint32_t qh = u32_at(b + 4);
        for (int j = 0; j < 16; j++) {
            int lo = (b[8 + j] & 15) | (int)((qh >> j) & 1) << 4;
            int hi = (b[8 + j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = d * (float)lo + m;
            y[j + 16] = d * (float)hi + m;
        }
    }
}

static void dq_q8_0(const uint8_t *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b += 34, y += 32) {
        const float d = attn__load_half(b);
        for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
    }
}

/* Q2_K and Q3_K by group of 16 (the scale and the 2-bit field's shift fixed per group, so the
 * inner loop vectorizes): element e = 16 g + l, its 2 bits at shift 2 ((e >> 5) & 3) of byte
 * 32 (e >> 7) + (e & 31) of qs, Q3_K's high bit at shift e >> 5 of byte e & 31 of hmask. */
static void dq_q2_k(const uint8_t *restrict b, int64_t nb, float *restrict y) {
    for (int64_t i = 0; i < nb; i++, b += 84, y += 256) {
        const uint8_t *sc = b, *qs = b + 16;
        const float d = attn__load_half(b + 80), dmin = attn__load_half(b + 82);
        for (int g = 0; g < 16; g++) {
            const float dl = d * (float)(sc[g] & 15), ml = dmin * (float)(sc[g] >> 4);
            const uint8_t *q = qs + 32 * (g >> 3) + 16 * (g & 1);
            const int sh = 2 * ((g >> 1) & 3);
            float *yg = y + 16 * g;
            for (int l = 0; l < 16; l++) yg[l] = dl * (float)((q[l] >> sh) & 3) - ml;
        }
    }
}

static void dq_q3_k(const uint8_t *restrict b, int64_t nb, float *restrict y) {
    for (int64_t i = 0; i < nb; i++, b += 110, y += 256) {
        const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
        const float d = attn__load_half(b + 108);
        for (int g = 0; g < 16; g++) {
            const int lo = (sc[g & 7] >> (4 * (g >> 3))) & 15, hi = (sc[8 + (g & 3)] >> (2 * (g >> 2))) & 3;
            const float dl = d * (float)((lo | hi << 4) - 32);
            const uint8_t *q = qs + 32 * (g >> 3) + 16 * (g & 1), *h = hm + 16 * (g & 1);
            const int sh = 2 * ((g >> 1) & 3), hs = g >> 1;
            float *yg = y + 16 * g;
            for (int l = 0; l < 16; l++)
                yg[l] = dl * (float)(((q[l] >> sh) & 3) - ((((h[l] >> hs) & 1) ^ 1) << 2));
        }
    }
}

/* The 6-bit scales and mins of Q4_K and Q5_K (12 bytes, 8 of each). */
static void k4_scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[4 + j] & 63;
    } else {
        *sc = (s[4 + j] & 15) | ((s[j - 4] >> 2) & 0x30);
        *mn = (s[4 + j] >> 4) | ((s[j] >> 2) & 0x30);
    }
}

static void dq_q4_k(const uint8_t *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b += 144, y += 256) {
        const float d = attn__load_half(b), dmin = attn__load_half(b + 2);
        const uint8_t *qs = b + 16;
        for (int s = 0; s < 8; s++) {
            int sc, mn;
            k4_scale_min(b + 4, s, &sc, &mn);
            const float ds = d * (float)sc, dm = dmin * (float)mn;
            const uint8_t *q = qs + (s >> 1) * 32;
            const int sh = 4 * (s & 1);
            for (int j = 0; j < 32; j++) y[s * 32 + j] = ds * (float)((q[j] >> sh) & 15) - dm;
        }
    }
}

static void dq_q5_k(const uint8_t *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b += 176, y += 256) {
        const float d = attn__load_half(b), dmin = attn__load_half(b + 2);
        const uint8_t *qh = b + 16, *qs = b + 48;
        for (int s = 0; s < 8; s++) {
            int sc, mn;
            k4_scale_min(b + 4, s, &sc, &mn);
            const float ds = d * (float)sc, dm = dmin * (float)mn;
            const uint8_t *q = qs + (s >> 1) * 32;
            const int sh = 4 * (s & 1);
            for (int j = 0; j < 32; j++) {
                int v = ((q[j] >> sh) & 15) | ((qh[j] >> s) & 1) << 4;
                y[s * 32 + j] = ds * (float)v - dm;
            }
        }
    }
}

static void dq_q6_k(const uint8_t *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b += 210, y += 256) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        const float d = attn__load_half(b + 208);
        for (int e = 0; e < 256; e++) {
            const int h = e >> 7, r = e & 127;
            const int lo = (ql[h * 64 + (r & 63)] >> (4 * (r >> 6))) & 15;
            const int hi = (qh[h * 32 + (r & 31)] >> (2 * (r >> 5))) & 3;
            y[e] = (d * (float)sc[e >> 4]) * (float)((lo | hi << 4) - 32);
        }
    }
}

static void dq_q8_k(const uint8_t *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b += 292, y += 256) {
        const float d = f32_at(b);
        for (int j = 0; j < 256; j++) y[j] = d * (float)(int8_t)b[4 + j];
    }
}

const int8_t attn__iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

/* 16 bytes of nibbles into 32 values dl * table[nibble] (low nibbles first), as numpy's
 * d * take(kvalues, q).astype(float32) */
static void iq4_32(const uint8_t *qs, float dl, float *y) {
    for (int j = 0; j < 16; j++) {
        y[j] = dl * (float)attn__iq4_values[qs[j] & 15];
        y[j + 16] = dl * (float)attn__iq4_values[qs[j] >> 4];
    }
}

static void dq_iq4_nl(const uint8_t *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b += 18, y += 32) iq4_32(b + 2, attn__load_half(b), y);
}

static void dq_iq4_xs(const uint8_t *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b += 136, y += 256) {
        const float d = attn__load_half(b);
        for (int ib = 0; ib < 8; ib++)
            iq4_32(b + 8 + 16 * ib, d * (float)attn__iq4xs_scale(b, ib), y + 32 * ib);
    }
}

static void dq_f32(const uint8_t *b, int64_t n, float *y) { memcpy(y, b, (size_t)n * 4); }
static void dq_f16(const uint8_t *b, int64_t n, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = attn__load_half(b + 2 * i);
}
static void dq_bf16(const uint8_t *b, int64_t n, float *y) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)attn__load_u16(b + 2 * i) << 16;
        memcpy(&y[i], &u, 4);
    }
}

static const attn__qdq_fn DQ[ATTN__QT_MAX] = {
    [ATTN_Q_F32] = dq_f32,   [ATTN_Q_F16] = dq_f16,   [ATTN_Q_BF16] = dq_bf16,
    [ATTN_Q_Q4_0] = dq_q4_0, [ATTN_Q_Q4_1] = dq_q4_1, [ATTN_Q_Q5_0] = dq_q5_0,
    [ATTN_Q_Q5_1] = dq_q5_1, [ATTN_Q_Q8_0] = dq_q8_0, [ATTN_Q_Q2_K] = dq_q2_k,
    [ATTN_Q_Q3_K] = dq_q3_k, [ATTN_Q_Q4_K] = dq_q4_k, [ATTN_Q_Q5_K] = dq_q5_k,
    [ATTN_Q_Q6_K] = dq_q6_k, [ATTN_Q_Q8_K] = dq_q8_k, [ATTN_Q_IQ4_NL] = dq_iq4_nl,
    [ATTN_Q_IQ4_XS] = dq_iq4_xs,
};

attn__qdq_fn attn__dequant_ref_fn(int type) {
    return type >= 0 && type < ATTN__QT_MAX ? DQ[type] : NULL;
}

void attn__dequant_ref(int type, const void *src, int64_t nb, float *dst) {
    if (type >= 0 && type < ATTN__QT_MAX && DQ[type]) DQ[type](src, nb, dst);
}

/* ---- quantization ------------------------------------------------------------------------ */
/* numpy's trunc(v).astype(uint8).clip(0, hi) where that is defined; NaN and negative give 0 */
static int trunc_clip(float v, int hi) {
    if (!(v >= 0.0f)) return 0;
    if (v >= (float)hi) return hi;
    return (int)v;
}

static void put_half(uint8_t *p, float f) {
    uint16_t h = attn__float_to_half(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Q8_0: d = max|x| / 127, q = roundf(x / d) (as x * (1 / d)) */
static void qz_q8_0(const float *x, int64_t nb, uint8_t *b) {
    for (int64_t i = 0; i < nb; i++, x += 32, b += 34) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        put_half(b, d);
        for (int j = 0; j < 32; j++) {
            float r = roundf(x[j] * id);
            int q = !(r == r) ? 0 : r >= 127.0f ? 127 : r <= -128.0f ? -128 : (int)r;
            b[2 + j] = (uint8_t)(int8_t)q;
        }
    }
}

/* The first element of largest magnitude, with its sign (Q4_0, Q5_0). */
static float signed_absmax(const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
    return max;
}

static void qz_q4_0(const float *x, int64_t nb, uint8_t *b) {
    for (int64_t i = 0; i < nb; i++, x += 32, b += 18) {
        const float d = signed_absmax(x) / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        put_half(b, d);
        for (int j = 0; j < 16; j++) {
            int lo = trunc_clip(x[j] * id + 8.5f, 15), hi = trunc_clip(x[j + 16] * id + 8.5f, 15);
            b[2 + j] = (uint8_t)(lo | hi << 4);
        }
    }
}

static void min_max(const float *x, float *mn, float *mx) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < 32; j++) {
        lo = x[j] < lo ? x[j] : lo;
        hi = x[j] > hi ? x[j] : hi;
    }
    *mn = lo, *mx = hi;
}

static void qz_q4_1(const float *x, int64_t nb, uint8_t *b) {
    for (int64_t i = 0; i < nb; i++, x += 32, b += 20) {
        float mn, mx;
        min_max(x, &mn, &mx);
        const float d = (mx - mn) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        put_half(b, d);
        put_half(b + 2, mn);
        for (int j = 0; j < 16; j++) {
            int lo = trunc_clip((x[j] - mn) * id + 0.5f, 15);
            int hi = trunc_clip((x[j + 16] - mn) * id + 0.5f, 15);
            b[4 + j] = (uint8_t)(lo | hi << 4);
        }
    }
}

static void qz_q5_0(const float *x, int64_t nb, uint8_t *b) {
    for (int64_t i = 0; i < nb; i++, x += 32, b += 22) {
        const float d = signed_absmax(x) / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        put_half(b, d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int lo = trunc_clip(x[j] * id + 16.5f, 31), hi = trunc_clip(x[j + 16] * id + 16.5f, 31);
            b[6 + j] = (uint8_t)((lo & 15) | (hi & 15) << 4);
            qh |= (uint32_t)(lo >> 4) << j | (uint32_t)(hi >> 4) << (j + 16);
        }
        put_u32(b + 2, qh);
    }
}

static void qz_q5_1(const float *x, int64_t nb, uint8_t *b) {
    for (int64_t i = 0; i < nb; i++, x += 32, b += 24) {
        float mn, mx;
        min_max(x, &mn, &mx);
        const float d = (mx - mn) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        put_half(b, d);
        put_half(b + 2, mn);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int lo = trunc_clip((x[j] - mn) * id + 0.5f, 31);
            int hi = trunc_clip((x[j + 16] - mn) * id + 0.5f, 31);
            b[8 + j] = (uint8_t)((lo & 15) | (hi & 15) << 4);
            qh |= (uint32_t)(lo >> 4) << j | (uint32_t)(hi >> 4) << (j + 16);
        }
        put_u32(b + 4, qh);
    }
}

static void qz_f32(const float *x, int64_t n, uint8_t *b) { memcpy(b, x, (size_t)n * 4); }
static void qz_f16(const float *x, int64_t n, uint8_t *b) {
    for (int64_t i = 0; i < n; i++) put_half(b + 2 * i, x[i]);
}
static void qz_bf16(const float *x, int64_t n, uint8_t *b) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet, as gguf's quantize_blocks */
            u = (u & 0xffff0000u) | 0x00400000u;
        u = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        b[2 * i] = (uint8_t)u;
        b[2 * i + 1] = (uint8_t)(u >> 8);
    }
}

typedef void (*qz_fn)(const float *, int64_t, uint8_t *);
static const qz_fn QZ[ATTN__QT_MAX] = {
    [ATTN_Q_F32] = qz_f32,   [ATTN_Q_F16] = qz_f16,   [ATTN_Q_BF16] = qz_bf16,
    [ATTN_Q_Q4_0] = qz_q4_0, [ATTN_Q_Q4_1] = qz_q4_1, [ATTN_Q_Q5_0] = qz_q5_0,
    [ATTN_Q_Q5_1] = qz_q5_1, [ATTN_Q_Q8_0] = qz_q8_0,
};

int attn__quant_supported(int type) { return type >= 0 && type < ATTN__QT_MAX && QZ[type]; }

void attn__quant_ref(int type, const float *src, int64_t nb, void *dst) {
    if (attn__quant_supported(type)) QZ[type](src, nb, dst);
}

/* ---- the scales' finiteness (attn__quant_first_nonfinite) ------------------------------------ */
static int half_bad(const unsigned char *p) { /* exponent all ones: Inf or NaN */
    return ((p[0] | p[1] << 8) & 0x7c00) == 0x7c00;
}
static int bf16_bad(const unsigned char *p) { return ((p[0] | p[1] << 8) & 0x7f80) == 0x7f80; }
static int f32_bad(const unsigned char *p) {
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return (u & 0x7f800000u) == 0x7f800000u;
}

int64_t attn__quant_first_nonfinite(int type, const void *src, int64_t nb, const char **what) {
    const unsigned char *b = src;
    /* per type: block bytes, the f16 fields' offsets (-1: none) and their names */
    int bb, o1 = -1, o2 = -1;
    const char *n1 = "d", *n2 = "m";
    switch (type) {
    case ATTN_Q_Q4_0: bb = 18, o1 = 0; break;
    case ATTN_Q_Q4_1: bb = 20, o1 = 0, o2 = 2; break;
    case ATTN_Q_Q5_0: bb = 22, o1 = 0; break;
    case ATTN_Q_Q5_1: bb = 24, o1 = 0, o2 = 2; break;
    case ATTN_Q_Q8_0: bb = 34, o1 = 0; break;
    case ATTN_Q_Q2_K: bb = 84, o1 = 80, o2 = 82, n2 = "dmin"; break;
    case ATTN_Q_Q3_K: bb = 110, o1 = 108; break;
    case ATTN_Q_Q4_K: bb = 144, o1 = 0, o2 = 2, n2 = "dmin"; break;
    case ATTN_Q_Q5_K: bb = 176, o1 = 0, o2 = 2, n2 = "dmin"; break;
    case ATTN_Q_Q6_K: bb = 210, o1 = 208; break;
    case ATTN_Q_IQ4_NL: bb = 18, o1 = 0; break;
    case ATTN_Q_IQ4_XS: bb = 136, o1 = 0; break;
    case ATTN_Q_Q8_K:
        for (int64_t i = 0; i < nb; i++)
            if (f32_bad(b + i * 292)) {
                if (what) *what = "d";
                return i;
            }
        return -1;
    case ATTN_Q_F16:
    case ATTN_Q_BF16:
    case ATTN_Q_F32: {
        const int eb = type == ATTN_Q_F32 ? 4 : 2;
        for (int64_t i = 0; i < nb; i++) {
            const unsigned char *p = b + i * eb;
            if (type == ATTN_Q_F16 ? half_bad(p) : type == ATTN_Q_BF16 ? bf16_bad(p) : f32_bad(p)) {
                if (what) *what = "value";
                return i;
            }
        }
        return -1;
    }
    default: return -1; /* no scales this function knows */
    }
    for (int64_t i = 0; i < nb; i++) {
        const unsigned char *p = b + i * bb;
        if (half_bad(p + o1) || (o2 >= 0 && half_bad(p + o2))) {
            if (what) *what = half_bad(p + o1) ? n1 : n2;
            return i;
        }
    }
    return -1;
}
