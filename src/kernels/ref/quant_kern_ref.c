/* The plain C kernels of the quantized linear product (quant.h): the fallback of every set
 * and the int8 path where the CPU has no VNNI.
 *
 *   mv  (float activations): per row, each block is dequantized by the reference (the exact
 *       values of attn__dequant_ref) and multiplied with x into 8 float partial sums
 *       (element k into sum k mod 8, multiply then add), folded at the end of the row as
 *       ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7)).
 *   mv8 (int8 activations, attn__q8act): exact integer dot products per group of the weight's
 *       scale, then one float term per group, summed in order into one float:
 *         Q8_0        (dw dx) sum(qw qx)
 *         Q4_0, Q5_0  (dw dx) (sum(q qx) - o sum(qx)),  q the unsigned 4 / 5 bits, o = 8 / 16
 *         Q4_1, Q5_1  (dw dx) sum(q qx) + mw sx
 *         Q4_K, Q5_K  per group of 32: ((d sc) dx) sum(q qx) - (dmin m) sx
 *         Q6_K        per group of 16: ((d sc) dx) (sum(q qx) - 32 sum(qx)),  q in [0, 63]
 *         IQ4_NL      (dw dx) sum(T[q] qx),  T the int8 table of levels (attn__iq4_values)
 *         IQ4_XS      per group of 32: ((d ls) dx) sum(T[q] qx),  ls the signed 6-bit scale
 *         Q2_K        per block of 32 of x (the weight's groups 2 j and 2 j + 1 of 16):
 *                     (d dx) (sc0 sum0(q qx) + sc1 sum1(q qx)) - (dmin dx) (m0 sum0(qx) + m1 sum1(qx)),
 *                     sc = the low 4 bits of a group's scale byte, m the high 4, q in [0, 3],
 *                     sum0 / sum1 over the block's first / last 16 elements (the mins through
 *                     the integer sums of x's quants: a group of 16 has no float sum of x)
 *         Q3_K        per block of 32 of x: (d dx) (s0 sum0(q qx) + s1 sum1(q qx)),  s the
 *                     signed 6-bit group scales (- 32), q = ql - 4 (1 - h) in [-4, 3]
 *       The integer brackets are exact in int32 and in float (|.| < 2^24).
 *       The SIMD kernels evaluate the same terms (the products in brackets rounded to float)
 *       and add them in their own order. */
#include "../quant.h"

#define CHUNK 256 /* elements dequantized at a time */

static void mv_generic(int type, const uint8_t *w, size_t rb, int64_t rows, int64_t K,
                       const float *x, int64_t ldx, int64_t m, float *y, int64_t ldy) {
    int64_t be = 1, bb = 4;
    attn_qtype_block(type, &be, &bb);
    const attn__qdq_fn dq = attn__dequant_ref_fn(type);
    const int64_t per = be >= CHUNK ? be : CHUNK / be * be; /* elements per dq call */
    float t[CHUNK];
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *row = w + (size_t)r * rb;
        float s[ATTN__QMV_MAX][8];
        memset(s, 0, sizeof s);
        for (int64_t k0 = 0; k0 < K; k0 += per) {
            const int64_t n = K - k0 < per ? K - k0 : per;
            dq(row + (size_t)(k0 / be * bb), n / be, t);
            /* k0 is a multiple of 8 (per is 256 for every type): element k goes to sum k & 7;
             * 8 at a time, each sum in its own lane (the same operations in the same order,
             * which the compiler may run as one vector) */
            for (int64_t i = 0; i < m; i++) {
                const float *xi = x + i * ldx + k0;
                float a[8];
                memcpy(a, s[i], sizeof a);
                int64_t k = 0;
                for (; k + 8 <= n; k += 8)
                    for (int j = 0; j < 8; j++) a[j] += t[k + j] * xi[k + j];
                for (; k < n; k++) a[k & 7] += t[k] * xi[k];
                memcpy(s[i], a, sizeof a);
            }
        }
        for (int64_t i = 0; i < m; i++)
            y[i * ldy + r] = ((s[i][0] + s[i][4]) + (s[i][2] + s[i][6])) +
                             ((s[i][1] + s[i][5]) + (s[i][3] + s[i][7]));
    }
}

#define MV_FN(name, type)                                                                     \
    static void name(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x,   \
                     int64_t ldx, int64_t m, float *y, int64_t ldy) {                         \
        int64_t be = 1;                                                                       \
        attn_qtype_block(type, &be, NULL);                                                    \
        mv_generic(type, w, rb, rows, nb * be, x, ldx, m, y, ldy);                            \
    }
MV_FN(mv_f32, ATTN_Q_F32)
MV_FN(mv_f16, ATTN_Q_F16)
MV_FN(mv_bf16, ATTN_Q_BF16)
MV_FN(mv_q4_0, ATTN_Q_Q4_0)
MV_FN(mv_q4_1, ATTN_Q_Q4_1)
MV_FN(mv_q5_0, ATTN_Q_Q5_0)
MV_FN(mv_q5_1, ATTN_Q_Q5_1)
MV_FN(mv_q8_0, ATTN_Q_Q8_0)
MV_FN(mv_q2_k, ATTN_Q_Q2_K)
MV_FN(mv_q3_k, ATTN_Q_Q3_K)
MV_FN(mv_q4_k, ATTN_Q_Q4_K)
MV_FN(mv_q5_k, ATTN_Q_Q5_K)
MV_FN(mv_q6_k, ATTN_Q_Q6_K)
MV_FN(mv_q8_k, ATTN_Q_Q8_K)
MV_FN(mv_iq4_nl, ATTN_Q_IQ4_NL)
MV_FN(mv_iq4_xs, ATTN_Q_IQ4_XS)

/* ---- int8 activations -------------------------------------------------------------------- */
/* The unsigned 4- or 5-bit values of a 32-element block: nibbles of qs (elements 0-15 low,
 * 16-31 high), the fifth bit from qh (NULL: none). */
static void unpack32(const uint8_t *qs, const uint8_t *qh, int q[32]) {
    uint32_t h = qh ? (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 |
                          (uint32_t)qh[3] << 24
                    : 0;
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 15) | (int)((h >> j) & 1) << 4;
        q[j + 16] = (qs[j] >> 4) | (int)((h >> (j + 16)) & 1) << 4;
    }
}

/* the table levels of 16 bytes of IQ4 nibbles, in element order */
static void iq4_unpack32(const uint8_t *qs, int q[32]) {
    for (int j = 0; j < 16; j++) {
        q[j] = attn__iq4_values[qs[j] & 15];
        q[j + 16] = attn__iq4_values[qs[j] >> 4];
    }
}

static int32_t idot(const int *q, const int8_t *x, int n) {
    int32_t s = 0;
    for (int j = 0; j < n; j++) s += q[j] * x[j];
    return s;
}

/* Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL: one term per block */
static void mv8_32(int type, const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                   const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < m; i++) {
            const int8_t *xq = xa->q + i * xa->ldq;
            const float *xd = xa->dsx + i * 2 * xa->ldb, *xs = xd + 1;
            const int32_t *xsq = xa->sq + i * 2 * xa->ldb;
            const uint8_t *b = w + (size_t)r * rb;
            float acc = 0.0f;
            for (int64_t k = 0; k < nb; k++) {
                int q[32];
                const int8_t *xb = xq + 32 * k;
                const int32_t sq = xsq[2 * k] + xsq[2 * k + 1];
                switch (type) {
                case ATTN_Q_Q8_0:
                    for (int j = 0; j < 32; j++) q[j] = (int8_t)b[2 + j];
                    acc += (attn__load_half(b) * xd[2 * k]) * (float)idot(q, xb, 32);
                    b += 34;
                    break;
                case ATTN_Q_Q4_0:
                    unpack32(b + 2, NULL, q);
                    acc += (attn__load_half(b) * xd[2 * k]) * (float)(idot(q, xb, 32) - 8 * sq);
                    b += 18;
                    break;
                case ATTN_Q_Q5_0:
                    unpack32(b + 6, b + 2, q);
                    acc += (attn__load_half(b) * xd[2 * k]) * (float)(idot(q, xb, 32) - 16 * sq);
                    b += 22;
                    break;
                case ATTN_Q_IQ4_NL:
                    iq4_unpack32(b + 2, q);
                    acc += (attn__load_half(b) * xd[2 * k]) * (float)idot(q, xb, 32);
                    b += 18;
                    break;
                case ATTN_Q_Q4_1:
                    unpack32(b + 4, NULL, q);
                    acc += (attn__load_half(b) * xd[2 * k]) * (float)idot(q, xb, 32) +
                           attn__load_half(b + 2) * xs[2 * k];
                    b += 20;
                    break;
                default: /* Q5_1 */
                    unpack32(b + 8, b + 4, q);
                    acc += (attn__load_half(b) * xd[2 * k]) * (float)idot(q, xb, 32) +
                           attn__load_half(b + 2) * xs[2 * k];
                    b += 24;
                    break;
                }
            }
            y[i * ldy + r] = acc;
        }
    }
}

/* an mv8 kernel: fn(arg, ...), fn a kernel of several types */
#define MV8_FN(name, fn, arg)                                                                 \
    static void name(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,                   \
                     const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {               \
        fn(arg, w, rb, rows, nb, xa, m, y, ldy);                                              \
    }
MV8_FN(mv8_q4_0, mv8_32, ATTN_Q_Q4_0)
MV8_FN(mv8_q4_1, mv8_32, ATTN_Q_Q4_1)
MV8_FN(mv8_q5_0, mv8_32, ATTN_Q_Q5_0)
MV8_FN(mv8_q5_1, mv8_32, ATTN_Q_Q5_1)
MV8_FN(mv8_q8_0, mv8_32, ATTN_Q_Q8_0)
MV8_FN(mv8_iq4_nl, mv8_32, ATTN_Q_IQ4_NL)

static void mv8_iq4_xs(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                       const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < m; i++) {
            const int8_t *xq = xa->q + i * xa->ldq;
            const float *xd = xa->dsx + i * 2 * xa->ldb;
            float acc = 0.0f;
            for (int64_t k = 0; k < nb; k++) {
                const uint8_t *b = w + (size_t)r * rb + (size_t)k * 136;
                const float d = attn__load_half(b);
                for (int s = 0; s < 8; s++) {
                    int q[32];
                    iq4_unpack32(b + 8 + 16 * s, q);
                    const int64_t g = 8 * k + s;
                    acc += ((d * (float)attn__iq4xs_scale(b, s)) * xd[2 * g]) *
                           (float)idot(q, xq + 32 * g, 32);
                }
            }
            y[i * ldy + r] = acc;
        }
}

/* The 6-bit scale and min of group j of Q4_K / Q5_K (as quant_ref.c). */
static void k4_scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[4 + j] & 63;
    } else {
        *sc = (s[4 + j] & 15) | ((s[j - 4] >> 2) & 0x30);
        *mn = (s[4 + j] >> 4) | ((s[j] >> 2) & 0x30);
    }
}

/* Q4_K (qh NULL) and Q5_K */
static void mv8_k45(int five, const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                    const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    const size_t bb = five ? 176 : 144;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < m; i++) {
            const int8_t *xq = xa->q + i * xa->ldq;
            const float *xd = xa->dsx + i * 2 * xa->ldb, *xs = xd + 1;
            float acc = 0.0f;
            for (int64_t k = 0; k < nb; k++) {
                const uint8_t *b = w + (size_t)r * rb + (size_t)k * bb;
                const float d = attn__load_half(b), dmin = attn__load_half(b + 2);
                const uint8_t *qh = five ? b + 16 : NULL, *qs = b + (five ? 48 : 16);
                for (int s = 0; s < 8; s++) {
                    int sc, mn, q[32];
                    k4_scale_min(b + 4, s, &sc, &mn);
                    for (int j = 0; j < 32; j++)
                        q[j] = ((qs[(s >> 1) * 32 + j] >> (4 * (s & 1))) & 15) |
                               (qh ? ((qh[j] >> s) & 1) << 4 : 0);
                    const int64_t g = 8 * k + s;
                    acc += ((d * (float)sc) * xd[2 * g]) * (float)idot(q, xq + 32 * g, 32) -
                           (dmin * (float)mn) * xs[2 * g];
                }
            }
            y[i * ldy + r] = acc;
        }
}

MV8_FN(mv8_q4_k, mv8_k45, 0)
MV8_FN(mv8_q5_k, mv8_k45, 1)

static void mv8_q6_k(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                     const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < m; i++) {
            const int8_t *xq = xa->q + i * xa->ldq;
            const float *xd = xa->dsx + i * 2 * xa->ldb;
            const int32_t *xsq = xa->sq + i * 2 * xa->ldb;
            float acc = 0.0f;
            for (int64_t k = 0; k < nb; k++) {
                const uint8_t *b = w + (size_t)r * rb + (size_t)k * 210;
                const uint8_t *ql = b, *qh = b + 128;
                const int8_t *sc = (const int8_t *)(b + 192);
                const float d = attn__load_half(b + 208);
                int q[256];
                for (int e = 0; e < 256; e++) {
                    const int h = e >> 7, rr = e & 127;
                    q[e] = ((ql[h * 64 + (rr & 63)] >> (4 * (rr >> 6))) & 15) |
                           ((qh[h * 32 + (rr & 31)] >> (2 * (rr >> 5))) & 3) << 4;
                }
                for (int g = 0; g < 16; g++) {
                    const int64_t gx = 16 * k + g; /* the 16-element group in x */
                    const int32_t s = idot(q + 16 * g, xq + 16 * gx, 16) - 32 * xsq[gx];
                    acc += ((d * (float)sc[g]) * xd[2 * (gx >> 1)]) * (float)s;
                }
            }
            y[i * ldy + r] = acc;
        }
}

/* Q2_K and Q3_K: one term per block of 32 of x (two groups of 16 of the weight); the row at b
 * against activation vector i */
static float k23_row(int three, const uint8_t *b, int64_t nb, const attn__q8act *xa, int64_t i) {
    const int8_t *xq = xa->q + i * xa->ldq;
    const float *xd = xa->dsx + i * 2 * xa->ldb;
    const int32_t *xsq = xa->sq + i * 2 * xa->ldb;
    float acc = 0.0f;
    for (int64_t k = 0; k < nb; k++, b += three ? 110 : 84) {
        const uint8_t *qs = b + (three ? 32 : 16);
        int sc[16];
        for (int g = 0; g < 16; g++)
            sc[g] = three ? (((b[96 + (g & 7)] >> (4 * (g >> 3))) & 15) |
                             (((b[104 + (g & 3)] >> (2 * (g >> 2))) & 3) << 4)) - 32
                          : b[g];
        const float d = attn__load_half(b + (three ? 108 : 80));
        for (int j = 0; j < 8; j++) { /* elements 32 j .. 32 j + 31 */
            const int64_t gx = 8 * k + j;
            const int8_t *xj = xq + 32 * gx;
            const uint8_t *qj = qs + 32 * (j >> 2);
            const int sh = 2 * (j & 3);
            int32_t dot[2];
            for (int h = 0; h < 2; h++) { /* exact integer sums: any order */
                int32_t t = 0;
                for (int l = 16 * h; l < 16 * h + 16; l++)
                    t += (((qj[l] >> sh) & 3) - (three ? (((b[l] >> j) & 1) ^ 1) << 2 : 0)) * xj[l];
                dot[h] = t;
            }
            if (three) {
                acc += (d * xd[2 * gx]) * (float)(sc[2 * j] * dot[0] + sc[2 * j + 1] * dot[1]);
            } else {
                const int32_t is = (sc[2 * j] & 15) * dot[0] + (sc[2 * j + 1] & 15) * dot[1];
                const int32_t im = (sc[2 * j] >> 4) * xsq[2 * gx] + (sc[2 * j + 1] >> 4) * xsq[2 * gx + 1];
                acc += (d * xd[2 * gx]) * (float)is - (attn__load_half(b + 82) * xd[2 * gx]) * (float)im;
            }
        }
    }
    return acc;
}

static void mv8_k23(int three, const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                    const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < m; i++) y[i * ldy + r] = k23_row(three, w + (size_t)r * rb, nb, xa, i);
}

MV8_FN(mv8_q2_k, mv8_k23, 0)
MV8_FN(mv8_q3_k, mv8_k23, 1)

static const attn__quant_kernels REF = {
    "ref",
    {0},
    {[ATTN_Q_F32] = mv_f32, [ATTN_Q_F16] = mv_f16, [ATTN_Q_BF16] = mv_bf16,
     [ATTN_Q_Q4_0] = mv_q4_0, [ATTN_Q_Q4_1] = mv_q4_1, [ATTN_Q_Q5_0] = mv_q5_0,
     [ATTN_Q_Q5_1] = mv_q5_1, [ATTN_Q_Q8_0] = mv_q8_0, [ATTN_Q_Q2_K] = mv_q2_k,
     [ATTN_Q_Q3_K] = mv_q3_k, [ATTN_Q_Q4_K] = mv_q4_k, [ATTN_Q_Q5_K] = mv_q5_k,
     [ATTN_Q_Q6_K] = mv_q6_k, [ATTN_Q_Q8_K] = mv_q8_k, [ATTN_Q_IQ4_NL] = mv_iq4_nl,
     [ATTN_Q_IQ4_XS] = mv_iq4_xs},
    {[ATTN_Q_Q4_0] = mv8_q4_0, [ATTN_Q_Q4_1] = mv8_q4_1, [ATTN_Q_Q5_0] = mv8_q5_0,
     [ATTN_Q_Q5_1] = mv8_q5_1, [ATTN_Q_Q8_0] = mv8_q8_0, [ATTN_Q_Q2_K] = mv8_q2_k,
     [ATTN_Q_Q3_K] = mv8_q3_k, [ATTN_Q_Q4_K] = mv8_q4_k,
     [ATTN_Q_Q5_K] = mv8_q5_k, [ATTN_Q_Q6_K] = mv8_q6_k, [ATTN_Q_IQ4_NL] = mv8_iq4_nl,
     [ATTN_Q_IQ4_XS] = mv8_iq4_xs},
    {0},
    {0},
    {0},
    NULL, /* q16x */
};

const attn__quant_kernels *attn__quant_kernels_ref(void) { return &REF; }
