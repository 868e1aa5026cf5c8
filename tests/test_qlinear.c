/* The linear product on quantized weights (attn__qlinear, attn_qlinear) for every type, on
 * every instruction set this machine runs, on 1 and 2 threads (bit-identical), for shapes that
 * are not multiples of any tile (K not a multiple of 256 for the 32-element types, odd N, M =
 * 1, 2, 3, 4, 6 on the matrix-vector kernels, 9, 17, 64 on the GEMM path).
 *
 * Oracles (all computed here from the reference dequantization attn__dequant_ref, which
 * test_quant.c holds to gguf bit for bit):
 *   float activations: the exact sum in double of deq(W)[n, k] x[m, k]; the kernels multiply
 *     the exact float weights, or (x86, the types of row_min) sum s_g sum_e q_e x_e -
 *     m_g sum_e x_e per group, the weights s_g q_e - m_g unrounded; only the order of the
 *     float sums (with or without FMA) differs, so |y - ref| <= (K + 48) 2^-24 sum_k
 *     (|deq(W)[n, k] + m_k| + |m_k|) |x[m, k]| (Higham 3.1; m_k the factored min of element k,
 *     else 0; the 48 covers a group's sums, the weight's rounding in deq, the bias add and the
 *     final folding of partial sums).  A wrong or missing term is ~|w x| ~ 1/K of the scale,
 *     above the bound for the K used here (<= 1024: 6e-5 of the terms' magnitudes).
 *   GEMM path (M > 8): additionally bit for bit attn__gemm(X, deq(W)^T) on the same context
 *     (then + bias, + residual).
 *   matrix-vector path (M <= 8, or any M with ATTN__QLIN_ROWWISE): each row bit for bit the
 *     row computed alone (M = 1).
 *   int8 activations: x rounded here, independently of the library, as documented (blocks of
 *     32, d = max|x| / 127, q = roundf(x / d)); the documented terms summed in double.  The
 *     integer sums are exact, each scale product (d_w d_x, (d sc) d_x) one rounding, and the
 *     kernels may split a group's sum over SIMD lanes that are scaled and added separately
 *     (partial sums that can cancel), so the bound is taken over the element products:
 *     |y - ref8| <= (n + 16) 2^-24 (sum_groups |scale| sum_j |(q_j - o) qx_j| + sum |min
 *     terms|), n the row's number of terms.  And against the float result:
 *     |y8 - ref| <= sum_b (d_b / 2) sum_{k in b} |deq(W)[n, k]| (the rounding of x) + the
 *     float bound, which the test also checks (it shows the int8 path's real error).
 * NaN in x gives NaN in every output of its row (for both paths). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "internal.h"
#include "cpu.h"
#include "../src/kernels/dispatch.h"
#include "../src/kernels/kernels.h"
#include "../src/kernels/quant.h"

#define U24 (1.0 / 16777216.0)

static const int TYPES[] = {ATTN_Q_Q4_0, ATTN_Q_Q4_1, ATTN_Q_Q5_0, ATTN_Q_Q5_1, ATTN_Q_Q8_0,
                            ATTN_Q_Q2_K, ATTN_Q_Q3_K, ATTN_Q_Q4_K, ATTN_Q_Q5_K, ATTN_Q_Q6_K,
                            ATTN_Q_Q8_K, ATTN_Q_F32,  ATTN_Q_F16,  ATTN_Q_BF16, ATTN_Q_IQ4_NL,
                            ATTN_Q_IQ4_XS};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* byte offsets of the fp16 scales of a block (the K and IQ4 types: random bytes otherwise) */
static void scale_fields(int type, int off[2], int *n) {
    *n = 0;
    switch (type) {
    case ATTN_Q_Q2_K: off[0] = 80, off[1] = 82, *n = 2; break;
    case ATTN_Q_Q3_K: off[0] = 108, *n = 1; break;
    case ATTN_Q_Q4_K: case ATTN_Q_Q5_K: off[0] = 0, off[1] = 2, *n = 2; break;
    case ATTN_Q_Q6_K: off[0] = 208, *n = 1; break;
    case ATTN_Q_IQ4_NL: case ATTN_Q_IQ4_XS: off[0] = 0, *n = 1; break;
    default: break;
    }
}

/* N rows of K elements of type: quantized random floats where attn_quantize knows the type,
 * else random bytes with scales ~0.003-0.03 (Q8_K: a float d). */
static unsigned char *make_weights(attn_ctx *ctx, int type, int64_t N, int64_t K, uint64_t seed,
                                   size_t *bytes) {
    int64_t be, bb;
    attn_qtype_block(type, &be, &bb);
    *bytes = (size_t)(N * K / be * bb);
    unsigned char *w = malloc(*bytes + 64);
    if (attn__quant_supported(type)) {
        float *f = malloc((size_t)(N * K) * sizeof(float));
        tu_fill(f, (size_t)(N * K), seed, -1, 1);
        TU_STATUS(attn_quantize(ctx, type, f, N * K, w, *bytes), ATTN_OK, ctx);
        free(f);
        return w;
    }
    uint64_t s = seed;
    for (size_t i = 0; i < *bytes; i++) w[i] = (unsigned char)(tu_rand(&s) >> 17);
    int off[2], nf;
    scale_fields(type, off, &nf);
    for (int64_t b = 0; b < N * K / be; b++) {
        unsigned char *blk = w + b * bb;
        for (int f = 0; f < nf; f++) {
            float v = (float)(0.003 + 0.027 * (double)(tu_rand(&s) >> 11) / 9007199254740992.0);
            uint16_t h = attn__float_to_half(v);
            blk[off[f]] = (unsigned char)h;
            blk[off[f] + 1] = (unsigned char)(h >> 8);
        }
        if (type == ATTN_Q_Q8_K) {
            float d = 0.01f;
            memcpy(blk, &d, 4);
        }
    }
    return w;
}

/* ---- int8 oracle -------------------------------------------------------------------------- */
typedef struct q8x {
    int8_t q[32];
    float d, sx;
    int32_t s16[2];
} q8x;

static void q8_block(const float *x, q8x *o) {
    float amax = 0, s = 0;
    for (int j = 0; j < 32; j++) {
        amax = fmaxf(amax, fabsf(x[j]));
        s += x[j];
    }
    o->d = amax / 127.0f;
    float id = o->d != 0 ? 1.0f / o->d : 0.0f;
    o->sx = s;
    o->s16[0] = o->s16[1] = 0;
    for (int j = 0; j < 32; j++) {
        o->q[j] = (int8_t)roundf(x[j] * id);
        o->s16[j / 16] += o->q[j];
    }
}

/* the unsigned 4/5/6-bit (or int8) quant of element e of a block, the way the int8 path
 * multiplies it, and the scale/min arithmetic of its group: term = a * sum(q qx) + b * ...
 * (returns 0 when the type has no int8 path) */
static int has_q8(int type) {
    return type == ATTN_Q_Q4_0 || type == ATTN_Q_Q4_1 || type == ATTN_Q_Q5_0 ||
           type == ATTN_Q_Q5_1 || type == ATTN_Q_Q8_0 || type == ATTN_Q_Q4_K ||
           type == ATTN_Q_Q5_K || type == ATTN_Q_Q6_K || type == ATTN_Q_IQ4_NL ||
           type == ATTN_Q_IQ4_XS || type == ATTN_Q_Q2_K || type == ATTN_Q_Q3_K;
}

/* IQ4_NL's levels, written out here from the format (not the library's table) */
static const int IQ4[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                            1,    13,   25,  38,  53,  69,  89,  113};

static double h2d(const unsigned char *p) { return attn__half_to_float((uint16_t)(p[0] | p[1] << 8)); }

/* sum of terms and of |terms| of one row against one activation vector (int8 path) */
static void ref8_row(int type, const unsigned char *row, int64_t K, const q8x *xb, double *sum,
                     double *abs_sum, int64_t *nterms) {
    int64_t be, bb;
    attn_qtype_block(type, &be, &bb);
    double s = 0, a = 0;
    int64_t n = 0;
    for (int64_t k = 0; k < K / be; k++) {
        const unsigned char *b = row + k * bb;
        if (type == ATTN_Q_IQ4_XS) {
            const int sh = b[2] | b[3] << 8;
            for (int g = 0; g < 8; g++) {
                const q8x *x = &xb[8 * k + g];
                const int ls = (((b[4 + g / 2] >> (4 * (g % 2))) & 15) | ((sh >> (2 * g)) & 3) << 4) - 32;
                int64_t dot = 0, adot = 0;
                for (int j = 0; j < 32; j++) {
                    const unsigned char c = b[8 + 16 * g + j % 16];
                    const int64_t p = (int64_t)IQ4[j < 16 ? c & 15 : c >> 4] * x->q[j];
                    dot += p, adot += llabs(p);
                }
                const double sc = h2d(b) * ls * x->d;
                s += sc * (double)dot, a += fabs(sc) * (double)adot, n++;
            }
        } else if (be == 32) {
            const q8x *x = &xb[k];
            int q[32];
            const unsigned char *qs = b + (type == ATTN_Q_Q4_0 ? 2 : type == ATTN_Q_Q4_1 ? 4 :
                                           type == ATTN_Q_Q5_0 ? 6 : 8);
            uint32_t qh = 0;
            if (type == ATTN_Q_Q5_0) memcpy(&qh, b + 2, 4);
            if (type == ATTN_Q_Q5_1) memcpy(&qh, b + 4, 4);
            for (int j = 0; j < 32; j++) {
                if (type == ATTN_Q_Q8_0)
                    q[j] = (int8_t)b[2 + j];
                else if (type == ATTN_Q_IQ4_NL)
                    q[j] = IQ4[j < 16 ? b[2 + j] & 15 : b[2 + j - 16] >> 4];
                else
                    q[j] = (j < 16 ? qs[j] & 15 : qs[j - 16] >> 4) | (int)((qh >> j) & 1) << 4;
            }
            const int off = type == ATTN_Q_Q4_0 ? 8 : type == ATTN_Q_Q5_0 ? 16 : 0;
            int64_t dot = 0, adot = 0;
            for (int j = 0; j < 32; j++) {
                dot += (int64_t)(q[j] - off) * x->q[j];
                adot += llabs((int64_t)(q[j] - off) * x->q[j]);
            }
            const double sc = h2d(b) * x->d;
            if (type == ATTN_Q_Q4_1 || type == ATTN_Q_Q5_1) {
                double t2 = h2d(b + 2) * x->sx;
                s += t2, a += fabs(t2), n++;
            }
            s += sc * (double)dot, a += fabs(sc) * (double)adot, n++;
        } else if (type == ATTN_Q_Q2_K || type == ATTN_Q_Q3_K) {
            /* per block of 32 of x: the weight's two groups of 16, integer sums (Q2_K's mins
             * through the activation quants' sums), element e = 32 z + l from the format:
             * 2 bits at shift 2 (z % 4) of qs byte 32 (z / 4) + l, Q3_K's high bit z of hmask
             * byte l (clear: - 4) */
            const int three = type == ATTN_Q_Q3_K;
            const unsigned char *qs = b + (three ? 32 : 16);
            const double d = h2d(b + (three ? 108 : 80));
            for (int z = 0; z < 8; z++) {
                const q8x *x = &xb[8 * k + z];
                int64_t dot = 0, adot = 0, mdot = 0, amdot = 0;
                for (int l = 0; l < 32; l++) {
                    const int g = 2 * z + l / 16;
                    int q = (qs[32 * (z / 4) + l] >> (2 * (z % 4))) & 3, scale, mn = 0;
                    if (three) {
                        q -= ((b[l] >> z) & 1) ? 0 : 4;
                        const int lo = (b[96 + g % 8] >> (4 * (g / 8))) & 15;
                        const int hi = (b[104 + g % 4] >> (2 * (g / 4))) & 3;
                        scale = (lo | hi << 4) - 32;
                    } else {
                        scale = b[g] & 15, mn = b[g] >> 4;
                    }
                    const int64_t p = (int64_t)scale * q * x->q[l], pm = (int64_t)mn * x->q[l];
                    dot += p, adot += llabs(p), mdot += pm, amdot += llabs(pm);
                }
                const double f = d * x->d, fm = three ? 0.0 : h2d(b + 82) * x->d;
                s += f * (double)dot - fm * (double)mdot;
                a += fabs(f) * (double)adot + fabs(fm) * (double)amdot, n += 2;
            }
        } else if (type == ATTN_Q_Q6_K) {
            for (int g = 0; g < 16; g++) {
                const q8x *x = &xb[8 * k + g / 2];
                int64_t dot = 0, adot = 0;
                for (int t = 0; t < 16; t++) {
                    int e = 16 * g + t, hh = e / 128, r = e % 128;
                    int lo = (b[hh * 64 + r % 64] >> (4 * (r / 64))) & 15;
                    int hi = (b[128 + hh * 32 + r % 32] >> (2 * (r / 32))) & 3;
                    const int64_t p = (int64_t)((lo | hi << 4) - 32) * x->q[16 * (g % 2) + t];
                    dot += p, adot += llabs(p);
                }
                const double sc = h2d(b + 208) * (int8_t)b[192 + g] * x->d;
                s += sc * (double)dot, a += fabs(sc) * (double)adot, n++;
            }
        } else { /* Q4_K, Q5_K */
            const int five = type == ATTN_Q_Q5_K;
            const unsigned char *sc = b + 4, *qh = b + 16, *qs = b + (five ? 48 : 16);
            for (int g = 0; g < 8; g++) {
                const q8x *x = &xb[8 * k + g];
                int scv = g < 4 ? sc[g] & 63 : (sc[4 + g] & 15) | ((sc[g - 4] >> 2) & 0x30);
                int mn = g < 4 ? sc[4 + g] & 63 : (sc[4 + g] >> 4) | ((sc[g] >> 2) & 0x30);
                int64_t dot = 0, adot = 0;
                for (int j = 0; j < 32; j++) {
                    int q = (qs[(g / 2) * 32 + j] >> (4 * (g % 2))) & 15;
                    if (five) q |= ((qh[j] >> g) & 1) << 4;
                    dot += (int64_t)q * x->q[j];
                    adot += llabs((int64_t)q * x->q[j]);
                }
                const double f = h2d(b) * scv * x->d, t2 = -h2d(b + 2) * mn * x->sx;
                s += f * (double)dot + t2, a += fabs(f) * (double)adot + fabs(t2), n += 2;
            }
        }
    }
    *sum = s, *abs_sum = a, *nterms = n;
}

/* The min subtracted from element k of a row, m of w = s q - m, for the types whose x86
 * matrix-vector kernels factor it out of each group's sum (sum_g s_g sum q x - sum_g m_g sum x):
 * Q4_K, Q5_K dmin mn_g; Q4_0 8 d (q the unsigned nibble); Q4_1, Q5_1 minus the block's m;
 * from the format.  0 for the others (no min, or not factored). */
static double row_min(int type, const unsigned char *row, int64_t k) {
    if (type == ATTN_Q_Q4_0) return 8 * h2d(row + (k / 32) * 18);
    if (type == ATTN_Q_Q4_1 || type == ATTN_Q_Q5_1)
        return -h2d(row + (k / 32) * (type == ATTN_Q_Q4_1 ? 20 : 24) + 2);
    if (type != ATTN_Q_Q4_K && type != ATTN_Q_Q5_K) return 0;
    const unsigned char *b = row + (k / 256) * (type == ATTN_Q_Q4_K ? 144 : 176), *sc = b + 4;
    const int g = (int)(k % 256) / 32;
    const int mn = g < 4 ? sc[4 + g] & 63 : (sc[4 + g] >> 4) | ((sc[g] >> 2) & 0x30);
    return h2d(b + 2) * mn;
}

/* ---- int16 oracle -------------------------------------------------------------------------- */
/* block of 32: d = max|x| / 32767, q = x / d rounded (halves away from zero); x^ = d q */
static void q16_block(const float *x, double *xh) {
    float amax = 0;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 32767.0f, id = d != 0 ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) xh[j] = (double)d * roundf(x[j] * id);
}
/* the types with int16 kernels, and the min m of w = s q - m that they take times the
 * unrounded x (Q4_1, Q5_1: minus the block's m; Q4_K, Q5_K: dmin mn); the other offsets are
 * part of the integer quants */
static int has_q16(const attn_ctx *c, int type) {
    return c->kern.quant16 && c->kern.quant16->mv16[type];
}
/* the int16 GEMM (prompts) for type on c's set */
static int has_g16(const attn_ctx *c, int type) {
    return c->kern.gemm16 && attn__gemm16_group(type) && has_q16(c, type);
}
static double row_min16(int type, const unsigned char *row, int64_t k) {
    return type == ATTN_Q_Q4_0 ? 0.0 : row_min(type, row, k);
}

/* ---- one case ----------------------------------------------------------------------------- */
typedef struct qcase {
    int type;
    int64_t M, N, K;
    int bias, res; /* a bias, a residual */
} qcase;

static int run_case(attn_ctx *c1, attn_ctx *c2, const qcase *qc, int act, uint64_t seed) {
    const int quick = tu_quick(NULL);
    const int64_t M = qc->M, N = qc->N, K = qc->K, ldx = K + 3, ldy = N + 5;
    size_t wb;
    unsigned char *w = make_weights(c1, qc->type, N, K, seed, &wb);
    float *deq = malloc((size_t)(N * K) * sizeof(float));
    int64_t be, bb;
    attn_qtype_block(qc->type, &be, &bb);
    attn__dequant_ref(qc->type, w, N * K / be, deq);
    float *x = malloc((size_t)(M * ldx) * sizeof(float)), *bias = malloc((size_t)N * sizeof(float));
    float *res = malloc((size_t)(M * N) * sizeof(float));
    tu_fill(x, (size_t)(M * ldx), seed + 1, -1, 1);
    tu_fill(bias, (size_t)N, seed + 2, -1, 1);
    tu_fill(res, (size_t)(M * N), seed + 3, -1, 1);
    float *y1 = malloc((size_t)(M * ldy) * sizeof(float)), *y2 = malloc((size_t)(M * ldy) * sizeof(float));
    for (int64_t i = 0; i < M * ldy; i++) y1[i] = y2[i] = -777.0f;
    const float *b = qc->bias ? bias : NULL, *R = qc->res ? res : NULL;
    TU_STATUS(attn__qlinear(c1, qc->type, w, N, K, x, ldx, M, b, R, y1, ldy, act), ATTN_OK, c1);
    TU_STATUS(attn__qlinear(c2, qc->type, w, N, K, x, ldx, M, b, R, y2, ldy, act), ATTN_OK, c2);
    int fails = 0;
    char what[160];
    snprintf(what, sizeof what, "%s %s M=%lld N=%lld K=%lld%s%s%s%s", attn__isa_name(c1->kern.isa),
             attn_qtype_name(qc->type), (long long)M, (long long)N, (long long)K,
             qc->bias ? " bias" : "", qc->res ? " residual" : "",
             (act & 15) == ATTN__QACT_Q8 ? " int8" : (act & 15) == ATTN__QACT_Q16 ? " int16" : "", act & ATTN__QLIN_ROWWISE ? " rowwise" : "");
    /* 1 vs 2 threads, and the padding untouched */
    int64_t d12 = -1, pad = -1;
    for (int64_t i = 0; i < M && d12 < 0; i++)
        for (int64_t n = 0; n < ldy; n++) {
            if (memcmp(&y1[i * ldy + n], &y2[i * ldy + n], 4) != 0) d12 = i * ldy + n;
            if (n >= N && y1[i * ldy + n] != -777.0f) pad = i * ldy + n;
        }
    TU_CHECK(d12 < 0, "%s: 1 and 2 threads differ at %lld", what, (long long)d12);
    TU_CHECK(pad < 0, "%s: wrote outside y at %lld", what, (long long)pad);
    fails += d12 >= 0 || pad >= 0;
    const int rowwise = M <= ATTN__QMV_ROWS || (act & ATTN__QLIN_ROWWISE);
    const int int8 = (act & 15) == ATTN__QACT_Q8 && rowwise && has_q8(qc->type) && K % 32 == 0;
    q8x *xq = int8 ? malloc((size_t)(K / 32) * sizeof(q8x)) : NULL;
    /* int16: the matrix-vector kernels, or for more rows the int16 GEMM (VNNI sets) */
    const int int16 = ((act & 15) == ATTN__QACT_Q16 || (act & 15) == ATTN__QACT_DEFAULT) &&
                      (rowwise ? has_q16(c1, qc->type) : has_g16(c1, qc->type)) && K % 32 == 0;
    double *xh = int16 ? malloc((size_t)K * sizeof(double)) : NULL;
    float *hd = int16 ? malloc((size_t)(K / 32) * sizeof(float)) : NULL;
    double worst = 0, worst8 = 0;
    for (int64_t i = 0; i < M; i++) {
        if (xq)
            for (int64_t k = 0; k < K / 32; k++) q8_block(x + i * ldx + 32 * k, &xq[k]);
        if (xh)
            for (int64_t k = 0; k < K / 32; k++) {
                q16_block(x + i * ldx + 32 * k, xh + 32 * k);
                /* the block's step d_b = amax / 32767 (the bound below) */
                float amax = 0;
                for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[i * ldx + 32 * k + j]));
                hd[k] = amax / 32767.0f;
            }
        for (int64_t n = 0; n < N; n++) {
            /* ATTN_TEST_QUICK (an emulator, whose double arithmetic is in software): a quarter
             * of the outputs against the references (every output's bits are compared with
             * the other thread count and the rows alone above and below; the native suite,
             * ATTN_ISA=avx2 included, checks each against them) */
            if (quick && (n + i) % 4 != 0) continue;
            double s = 0, a = 0;
            const unsigned char *wrow = w + n * (K / be * bb);
            for (int64_t k = 0; k < K; k++) {
                const double xk = x[i * ldx + k], mk = row_min(qc->type, wrow, k);
                s += (double)deq[n * K + k] * xk;
                a += (fabs((double)deq[n * K + k] + mk) + fabs(mk)) * fabs(xk);
            }
            if (b) s += b[n], a += fabs(b[n]);
            if (R) s += R[i * N + n], a += fabs(R[i * N + n]);
            const double got = y1[i * ldy + n];
            double tol = (double)(K + 48) * U24 * a;
            if (xq) {
                /* the int8 terms in double */
                double s8, a8;
                int64_t nt;
                ref8_row(qc->type, w + n * (K / be * bb), K, xq, &s8, &a8, &nt);
                if (b) s8 += b[n], a8 += fabs(b[n]);
                if (R) s8 += R[i * N + n], a8 += fabs(R[i * N + n]);
                const double tol8 = (double)(nt + 16) * U24 * a8;
                const double e8 = fabs(got - s8);
                worst8 = fmax(worst8, e8 / fmax(tol8, 1e-300));
                if (!(e8 <= tol8) && fails++ < 3)
                    TU_CHECK(0, "%s: y[%lld][%lld] = %.9g, int8 terms give %.9g (tol %.3g)", what,
                             (long long)i, (long long)n, got, s8, tol8);
                /* the rounding of x: sum_b d_b / 2 sum |w| */
                double rx = 0;
                for (int64_t k = 0; k < K; k++) rx += xq[k / 32].d * 0.5 * fabs(deq[n * K + k]);
                tol += rx + tol8;
            }
            if (xh) {
                /* the int16 terms in double: (w + m) x^ - m x, the rounding of x apart */
                double s16 = 0, a16 = 0, rx = 0;
                for (int64_t k = 0; k < K; k++) {
                    const double mk = row_min16(qc->type, wrow, k), wk = (double)deq[n * K + k] + mk;
                    const double xk = x[i * ldx + k];
                    s16 += wk * xh[k] - mk * xk;
                    a16 += (fabs(wk) + fabs(mk)) * (fabs(xh[k]) + fabs(xk));
                    rx += fabs(xh[k] - xk) * fabs(wk);
                }
                if (b) s16 += b[n], a16 += fabs(b[n]);
                if (R) s16 += R[i * N + n], a16 += fabs(R[i * N + n]);
                const double tol16 = (double)(K + 48) * U24 * a16, e16 = fabs(got - s16);
                if (!(e16 <= tol16) && fails++ < 3)
                    TU_CHECK(0, "%s: y[%lld][%lld] = %.9g, int16 terms give %.9g (tol %.3g)", what,
                             (long long)i, (long long)n, got, s16, tol16);
                /* against the float product: the rounding of x, at most d_b / 2 per element */
                double rb = 0;
                for (int64_t k = 0; k < K; k++)
                    rb += (double)hd[k / 32] * 0.5 *
                          fabs((double)deq[n * K + k] + row_min16(qc->type, wrow, k));
                TU_CHECK(rx <= rb * (1 + 1e-6), "%s: x rounded by more than d / 2", what);
                tol += rb + tol16;
            }
            const double e = fabs(got - s);
            worst = fmax(worst, e / fmax(tol, 1e-300));
            if (!(e <= tol) && fails++ < 3)
                TU_CHECK(0, "%s: y[%lld][%lld] = %.9g, reference %.9g (tol %.3g)", what,
                         (long long)i, (long long)n, got, s, tol);
        }
    }
    /* the float GEMM path is attn__gemm on the dequantized weights, bit for bit */
    if (!rowwise && !int16) {
        float *yg = malloc((size_t)(M * ldy) * sizeof(float));
        TU_STATUS(attn__gemm(c1, 0, 1, M, N, K, 1.0f, x, ldx, deq, K, 0.0f, yg, ldy), ATTN_OK, c1);
        int64_t dg = -1;
        for (int64_t i = 0; i < M && dg < 0; i++)
            for (int64_t n = 0; n < N; n++) {
                float v = b ? yg[i * ldy + n] + b[n] : yg[i * ldy + n];
                if (R) v += R[i * N + n];
                if (memcmp(&v, &y1[i * ldy + n], 4) != 0) {
                    dg = i * ldy + n;
                    break;
                }
            }
        TU_CHECK(dg < 0, "%s: differs from attn__gemm on the dequantized weights at %lld", what,
                 (long long)dg);
        fails += dg >= 0;
        free(yg);
    }
    /* the matrix-vector path and the int16 GEMM: each row as computed alone (M = 1; on the
     * GEMM, as the last row of a prompt is: ATTN__QLIN_GEMM) */
    if (rowwise || int16) {
        int64_t dr = -1;
        float *y0 = malloc((size_t)N * sizeof(float));
        for (int64_t i = 0; i < M && dr < 0; i++) {
            TU_STATUS(attn__qlinear(c2, qc->type, w, N, K, x + i * ldx, ldx, 1, b,
                                    R ? R + i * N : NULL, y0, N,
                                    rowwise ? act : act | ATTN__QLIN_GEMM),
                      ATTN_OK, c2);
            if (memcmp(y0, y1 + i * ldy, (size_t)N * sizeof(float)) != 0) dr = i;
        }
        TU_CHECK(dr < 0, "%s: row %lld differs from the same row alone", what, (long long)dr);
        fails += dr >= 0;
        free(y0);
    }
    /* NaN in x: its row of y is NaN everywhere */
    x[(M - 1) * ldx + K / 2] = NAN;
    TU_STATUS(attn__qlinear(c2, qc->type, w, N, K, x, ldx, M, b, R, y2, ldy, act), ATTN_OK, c2);
    int64_t fin = 0;
    for (int64_t n = 0; n < N; n++) fin += !isnan(y2[(M - 1) * ldy + n]);
    TU_CHECK(fin == 0, "%s: NaN in x, %lld outputs of its row are not NaN", what, (long long)fin);
    fails += fin != 0;
    (void)worst;
    (void)worst8;
    free(xq);
    free(xh);
    free(hd);
    free(w);
    free(deq);
    free(x);
    free(bias);
    free(res);
    free(y1);
    free(y2);
    return fails;
}

static void test_kernels(void) {
    attn_ctx *c1 = tu_ctx(1), *c2 = tu_ctx(2);
    const int64_t Ms[] = {1, 2, 3, 4, 6, 8, 9, 17, 64};
    /* ATTN_TEST_QUICK (an emulator): M of 1, 3, 8 (the matrix-vector kernels: one row, odd
     * rows, the widest pass) and 17 (the GEMM), each K with one row and one K with each other
     * M, no plain C set (tu_each_set) */
    const int quick = tu_quick("test_qlinear");
    int ncases = 0;
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        if (!tu_each_set(isa, "test_qlinear: quantized kernels")) continue;
        TU_CHECK(attn__isa_set(c1, isa) && attn__isa_set(c2, isa), "isa_set");
        for (size_t t = 0; t < COUNT(TYPES); t++) {
            const int type = TYPES[t];
            int64_t be;
            attn_qtype_block(type, &be, NULL);
            /* K: several blocks, not a multiple of 256 for the 32-element types; odd for the
             * one-element ones */
            const int64_t Ks[3] = {be == 256 ? 256 : be == 32 ? 96 : 17,
                                   be == 256 ? 768 : be == 32 ? 576 : 100,
                                   be == 256 ? 1024 : be == 32 ? 1056 : 1000};
            const int64_t Ns[3] = {1, 37, 100};
            for (size_t mi = 0; mi < COUNT(Ms); mi++)
                for (int ki = 0; ki < 3; ki++) {
                    if (quick && Ms[mi] != 1 && Ms[mi] != 3 && Ms[mi] != 8 && Ms[mi] != 17)
                        continue;
                    /* quick: every K with one row; 3 rows the middle K, 8 the longest, 17 the
                     * shortest */
                    if (quick && Ms[mi] != 1 && ki != (Ms[mi] == 3 ? 1 : Ms[mi] == 8 ? 2 : 0))
                        continue;
                    /* big K only with small M, to keep the test short */
                    if (ki == 2 && Ms[mi] > ATTN__QMV_ROWS) continue;
                    const int64_t N = Ns[(mi + ki) % 3];
                    qcase qc = {type, Ms[mi], N, Ks[ki], (int)((mi + ki) & 1), (int)(mi % 3 == 1)};
                    uint64_t seed = 1000 * t + 10 * mi + ki;
                    run_case(c1, c2, &qc, ATTN__QACT_F32, seed);
                    ncases++;
                    if (Ms[mi] <= ATTN__QMV_ROWS && has_q8(type)) {
                        run_case(c1, c2, &qc, ATTN__QACT_Q8, seed);
                        ncases++;
                    }
                    if (Ms[mi] <= ATTN__QMV_ROWS ? has_q16(c1, type) : has_g16(c1, type)) {
                        run_case(c1, c2, &qc, ATTN__QACT_Q16, seed);
                        ncases++;
                    }
                    if (Ms[mi] == 17 && ki == 0) { /* every M on the matrix-vector kernels */
                        run_case(c1, c2, &qc, ATTN__QACT_F32 | ATTN__QLIN_ROWWISE, seed);
                        ncases++;
                        if (has_q8(type)) {
                            run_case(c1, c2, &qc, ATTN__QACT_Q8 | ATTN__QLIN_ROWWISE, seed);
                            ncases++;
                        }
                        if (has_q16(c1, type)) {
                            run_case(c1, c2, &qc, ATTN__QACT_Q16 | ATTN__QLIN_ROWWISE, seed);
                            ncases++;
                        }
                    }
                }
        }
    }
    printf("test_qlinear: %d cases\n", ncases);
    attn_ctx_free(c1);
    attn_ctx_free(c2);
}

/* ---- several parts at once (attn__qlinear_multi) ------------------------------------------
 * Parts of different types and sizes (q, k, v-like) against one attn__qlinear per part: the
 * same bits, on 1 and 2 threads, float, int8 and int16 activations, with bias and residual, for M on
 * the matrix-vector path and on the GEMM path (X packed once, the parts' units in one loop). */
static void test_multi(void) {
    attn_ctx *c1 = tu_ctx(1), *c2 = tu_ctx(2);
    const int types[3] = {ATTN_Q_Q4_1, ATTN_Q_Q8_0, ATTN_Q_F32};
    const int64_t Ns[3] = {37, 5, 150}, K = 576, Ms[4] = {1, 3, 12, 40};
    const int acts[4] = {ATTN__QACT_F32, ATTN__QACT_Q8, ATTN__QACT_F32 | ATTN__QLIN_ROWWISE,
                         ATTN__QACT_Q16};
    unsigned char *w[3];
    size_t wb;
    float *b[3], *R[3];
    for (int i = 0; i < 3; i++) {
        w[i] = make_weights(c1, types[i], Ns[i], K, 77 + (uint64_t)i, &wb);
        b[i] = malloc(150 * sizeof(float));
        R[i] = malloc(40 * 150 * sizeof(float));
        tu_fill(b[i], 150, 80 + (uint64_t)i, -1, 1);
        tu_fill(R[i], 40 * 150, 90 + (uint64_t)i, -1, 1);
    }
    float *x = malloc(40 * 600 * sizeof(float));
    tu_fill(x, 40 * 600, 99, -1, 1);
    for (int mi = 0; mi < 4; mi++)
        for (int ai = 0; ai < 4; ai++)
            for (int np = 1; np <= 3; np++) {
                const int64_t M = Ms[mi];
                float *y1 = calloc((size_t)(M * 200), sizeof(float));
                float *y2 = calloc((size_t)(M * 200), sizeof(float));
                attn__qlin_part p[3];
                int64_t col = 0;
                for (int i = 0; i < np; i++) { /* parts side by side in rows of 200 */
                    p[i] = (attn__qlin_part){types[i], w[i], Ns[i], i == 1 ? NULL : b[i],
                                             i == 2 ? R[i] : NULL, y2 + col, 200};
                    TU_STATUS(attn__qlinear(c1, types[i], w[i], Ns[i], K, x, 600, M, p[i].bias,
                                            p[i].R, y1 + col, 200, acts[ai]), ATTN_OK, c1);
                    col += Ns[i] + 3;
                }
                for (int t = 0; t < 2; t++) {
                    attn_ctx *c = t ? c2 : c1;
                    memset(y2, 0, (size_t)(M * 200) * sizeof(float));
                    TU_STATUS(attn__qlinear_multi(c, np, p, K, x, 600, M, acts[ai]), ATTN_OK, c);
                    int64_t d = 0;
                    while (d < M * 200 && memcmp(y1 + d, y2 + d, sizeof(float)) == 0) d++;
                    TU_CHECK(d == M * 200, "qlinear_multi M %lld act %d parts %d threads %d: not "
                             "the bits of one call per part (first difference at %lld)",
                             (long long)M, acts[ai], np, t + 1, (long long)d);
                }
                free(y1);
                free(y2);
            }
    for (int i = 0; i < 3; i++) free(w[i]), free(b[i]), free(R[i]);
    free(x);
    attn_ctx_free(c1);
    attn_ctx_free(c2);
}

/* ---- the public function --------------------------------------------------------------------- */
static void test_public(void) {
    attn_ctx *ctx = tu_ctx(2);
    const int64_t N = 40, K = 96, M = 3;
    size_t wb;
    unsigned char *w = make_weights(ctx, ATTN_Q_Q4_1, N, K, 5, &wb);
    float x[3 * 100], y[3 * 40], y2[3 * 40], b[40];
    tu_fill(x, 300, 6, -1, 1);
    tu_fill(b, 40, 7, -1, 1);
    TU_STATUS(attn_qlinear(ctx, ATTN_Q_Q4_1, w, wb, N, K, x, 100, M, b, y, N, ATTN_QACT_DEFAULT),
              ATTN_OK, ctx);
    /* the default: int16 where the CPU has its kernels, else float (as ATTN__QACT_Q16 asks) */
    TU_STATUS(attn__qlinear(ctx, ATTN_Q_Q4_1, w, N, K, x, 100, M, b, NULL, y2, N, ATTN__QACT_Q16),
              ATTN_OK, ctx);
    TU_CHECK(memcmp(y, y2, sizeof y) == 0, "attn_qlinear default != int16 activations");
    TU_STATUS(attn__qlinear(ctx, ATTN_Q_Q4_1, w, N, K, x, 100, M, b, NULL, y2, N, ATTN__QACT_F32),
              ATTN_OK, ctx);
    TU_CHECK(!has_q16(ctx, ATTN_Q_Q4_1) == !memcmp(y, y2, sizeof y),
             "attn_qlinear default: float activations %s", has_q16(ctx, ATTN_Q_Q4_1) ?
             "on a CPU with int16 kernels" : "expected");
    TU_STATUS(attn_qlinear(ctx, ATTN_Q_Q4_1, w, wb, N, K, x, 100, M, b, y, N, ATTN_QACT_Q8),
              ATTN_OK, ctx);
    TU_STATUS(attn_qlinear(ctx, ATTN_Q_Q4_1, w, wb, N, K, x, 100, M, b, y, N, ATTN_QACT_Q16),
              ATTN_OK, ctx);
    TU_STATUS(attn__qlinear(ctx, ATTN_Q_Q4_1, w, N, K, x, 100, M, b, NULL, y2, N, ATTN__QACT_Q16),
              ATTN_OK, ctx);
    TU_CHECK(memcmp(y, y2, sizeof y) == 0, "attn_qlinear ATTN_QACT_Q16 != int16 activations");
    TU_STATUS(attn_qlinear(ctx, ATTN_Q_Q4_1, w, wb, N, K, x, 100, M, b, y, N, (attn_qact)4),
              ATTN_E_INVALID, ctx);
    TU_STATUS(attn_qlinear(NULL, ATTN_Q_Q4_1, w, wb, N, K, x, 100, M, b, y, N, 0), ATTN_E_INVALID,
              NULL);
    TU_STATUS(attn_qlinear(ctx, 4, w, wb, N, K, x, 100, M, b, y, N, 0), ATTN_E_UNSUPPORTED, ctx);
    TU_STATUS(attn_qlinear(ctx, ATTN_Q_Q4_1, w, wb, N, 80, x, 100, M, b, y, N, 0), ATTN_E_SHAPE,
              ctx);
    TU_STATUS(attn_qlinear(ctx, ATTN_Q_Q4_1, w, wb - 1, N, K, x, 100, M, b, y, N, 0),
              ATTN_E_INVALID, ctx);
    TU_STATUS(attn_qlinear(ctx, ATTN_Q_Q4_1, w, wb, N, K, x, 90, M, b, y, N, 0), ATTN_E_INVALID,
              ctx);
    TU_STATUS(attn_qlinear(ctx, ATTN_Q_Q4_1, w, wb, N, K, x, 100, M, b, y, N - 1, 0),
              ATTN_E_INVALID, ctx);
    TU_STATUS(attn_qlinear(ctx, ATTN_Q_Q4_1, w, wb, N, K, x, 100, M, b, y, N, (attn_qact)7),
              ATTN_E_INVALID, ctx);
    TU_STATUS(attn_qlinear(ctx, ATTN_Q_Q4_1, w, wb, N, K, x, 100, -1, b, y, N, 0),
              ATTN_E_INVALID, ctx);
    TU_STATUS(attn_qlinear(ctx, ATTN_Q_Q4_1, w, wb, N, K, x, 100, 0, b, NULL, N, 0), ATTN_OK, ctx);
    TU_STATUS(attn_qlinear(ctx, ATTN_Q_Q4_1, w, wb, N, K, x, 100, M, b, x + 10, N, 0),
              ATTN_E_INVALID, ctx); /* y overlaps x */
    TU_STATUS(attn_qlinear(ctx, ATTN_Q_Q4_1, w, wb, INT64_MAX / 4, K, x, 100, M, b, y, N, 0),
              ATTN_E_OVERFLOW, ctx);
    x[150] = NAN;
    TU_STATUS(attn_qlinear(ctx, ATTN_Q_Q4_1, w, wb, N, K, x, 100, M, b, y, N, 0),
              ATTN_E_NONFINITE, ctx);
    x[150] = 0.5f;
    x[99] = NAN; /* padding between rows: not read, not checked */
    TU_STATUS(attn_qlinear(ctx, ATTN_Q_Q4_1, w, wb, N, K, x, 100, M, b, y, N, 0), ATTN_OK, ctx);
    b[3] = INFINITY;
    TU_STATUS(attn_qlinear(ctx, ATTN_Q_Q4_1, w, wb, N, K, x, 100, M, b, y, N, 0),
              ATTN_E_NONFINITE, ctx);
    free(w);
    attn_ctx_free(ctx);
}

/* ---- the ARM kernels against the plain C ones, bit for bit ---------------------------------
 * The NEON dq and mv kernels of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
 * IQ4_NL, IQ4_XS, F32, F16, BF16 and the SDOT and SMMLA mv8 kernels of the quantized ones sum
 * in the plain C kernels' order (arm_neon/quant_neon.c, arm_dotprod/quant_dotprod.c,
 * arm_i8mm/quant_i8mm.c), so their outputs are those bits exactly, for every m up to
 * ATTN__QMV_MAX and any row range; and the wide entries (NEON mvw, SDOT and SMMLA mvw8) give
 * each of up to ATTN__QMV_WIDE vectors those bits too (the plain C kernels run on groups of
 * ATTN__QMV_MAX vectors).  K is 3 superblocks of the K types, the row ranges odd and even. */
/* y[i * ldy + r] for m vectors through a kernel that takes ATTN__QMV_MAX at a time */
static void mv_groups(attn__qmv_fn mv, const unsigned char *w, size_t rb, int64_t rows,
                      int64_t nb, const float *x, int64_t ldx, int64_t m, float *y, int64_t ldy) {
    for (int64_t i0 = 0; i0 < m; i0 += ATTN__QMV_MAX)
        mv(w, rb, rows, nb, x + i0 * ldx, ldx, m - i0 < ATTN__QMV_MAX ? m - i0 : ATTN__QMV_MAX,
           y + i0 * ldy, ldy);
}
static void mv8_groups(attn__qmv8_fn mv8, const unsigned char *w, size_t rb, int64_t rows,
                       int64_t nb, const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    for (int64_t i0 = 0; i0 < m; i0 += ATTN__QMV_MAX) {
        attn__q8act g = *xa;
        g.q += i0 * g.ldq, g.dsx += i0 * 2 * g.ldb, g.sq += i0 * 2 * g.ldb;
        mv8(w, rb, rows, nb, &g, m - i0 < ATTN__QMV_MAX ? m - i0 : ATTN__QMV_MAX, y + i0 * ldy,
            ldy);
    }
}

static void test_arm_bits(void) {
    const attn__quant_kernels *ref = attn__quant_kernels_ref(), *nq = attn__quant_kernels_neon(),
                              *dp = attn__quant_kernels_dotprod(),
                              *mm = attn__quant_kernels_i8mm();
    if (!tu_set_ok(ATTN__ISA_NEON, "test_qlinear: NEON kernels against plain C bits")) return;
    if (!nq) return;
    if (dp && !tu_isa_ok(ATTN__CPU_NEON | ATTN__CPU_DOTPROD,
                         "test_qlinear: SDOT kernels against plain C bits"))
        dp = NULL;
    if (mm && (!dp || !tu_isa_ok(ATTN__CPU_NEON | ATTN__CPU_DOTPROD | ATTN__CPU_I8MM,
                                 "test_qlinear: SMMLA kernels against plain C bits")))
        mm = NULL;
    attn_ctx *c = tu_ctx(1);
    const int types[] = {ATTN_Q_Q4_0, ATTN_Q_Q4_1, ATTN_Q_Q5_0,   ATTN_Q_Q5_1,   ATTN_Q_Q8_0,
                         ATTN_Q_Q2_K, ATTN_Q_Q3_K, ATTN_Q_Q4_K,   ATTN_Q_Q5_K,   ATTN_Q_Q6_K,
                         ATTN_Q_F32,  ATTN_Q_F16,  ATTN_Q_BF16,   ATTN_Q_IQ4_NL, ATTN_Q_IQ4_XS};
    const int64_t N = 13, K = 768, nb32 = K / 32, M = ATTN__QMV_WIDE; /* 3 K blocks */
    float *x = malloc(sizeof(float) * (size_t)(M * K)), *d0 = malloc(sizeof(float) * (size_t)(N * K)),
          *d1 = malloc(sizeof(float) * (size_t)(N * K)), y0[ATTN__QMV_WIDE * 13],
          y1[ATTN__QMV_WIDE * 13];
    int8_t *xq = malloc((size_t)(M * K));
    float *dsx = malloc(sizeof(float) * (size_t)(M * 2 * nb32));
    int32_t *sq = malloc(sizeof(int32_t) * (size_t)(M * 2 * nb32));
    tu_fill(x, (size_t)(M * K), 4242, -2, 2);
    attn__q8act_quantize(x, K, M, K, xq, K, dsx, sq, nb32);
    const attn__q8act xa = {xq, dsx, sq, K, nb32};
    int n = 0;
    for (size_t t = 0; t < COUNT(types); t++) {
        const int type = types[t];
        size_t wb;
        int64_t be = 1;
        attn_qtype_block(type, &be, NULL);
        /* the one-element types on 765 = 95 x 8 + 5 columns: the kernels' tail */
        const int64_t Kt = be == 1 ? K - 3 : K, nb = Kt / be;
        unsigned char *w = make_weights(c, type, N, Kt, 31 + t, &wb);
        const size_t rb = wb / (size_t)N;
        TU_CHECK(nq->dq[type] && nq->mv[type], "type %d: no NEON kernels", type);
        if (!nq->dq[type] || !nq->mv[type]) continue;
        attn__dequant_ref_fn(type)(w, N * nb, d0);
        nq->dq[type](w, N * nb, d1);
        TU_CHECK(!memcmp(d0, d1, sizeof(float) * (size_t)(N * Kt)), "type %d: NEON dq bits",
                 type);
        if (type == ATTN_Q_F16) { /* NaN payloads (signalling too), infinities, subnormals */
            const uint16_t h[8] = {0x7c01, 0xfe00, 0x7d55, 0xfc00, 0x0001, 0x83ff, 0x7bff, 0x8000};
            float f0[8], f1[8];
            attn__dequant_ref_fn(type)((const uint8_t *)h, 8, f0);
            nq->dq[type]((const uint8_t *)h, 8, f1);
            TU_CHECK(!memcmp(f0, f1, sizeof f0), "F16: NEON dq bits of NaN, inf, subnormals");
        }
        for (int64_t m = 1; m <= M; m++) {
            /* the wide entries, m up to ATTN__QMV_WIDE, rows 2 .. N - 1 */
            TU_CHECK(nq->mvw[type] != NULL, "type %d: no NEON mvw kernel", type);
            memset(y0, 0, sizeof y0), memset(y1, 0, sizeof y1);
            mv_groups(ref->mv[type], w + 2 * rb, rb, N - 2, nb, x, K, m, y0, N);
            if (nq->mvw[type]) {
                nq->mvw[type](w + 2 * rb, rb, N - 2, nb, x, K, m, y1, N);
                TU_CHECK(!memcmp(y0, y1, sizeof y0), "type %d, m %lld: NEON mvw bits", type,
                         (long long)m);
                n++;
            }
            if (dp && ref->mv8[type]) {
                const attn__quant_kernels *w8[2] = {dp, mm};
                for (int s = 0; s < 2; s++) {
                    if (!w8[s]) continue;
                    TU_CHECK(w8[s]->mvw8[type] != NULL, "type %d: no %s mvw8 kernel", type,
                             w8[s]->name);
                    if (!w8[s]->mvw8[type]) continue;
                    /* rows 2 .. N - 1 (an odd count) and 1 .. N - 1 (even) */
                    for (int64_t r0 = 1; r0 <= 2; r0++) {
                        memset(y0, 0, sizeof y0), memset(y1, 0, sizeof y1);
                        mv8_groups(ref->mv8[type], w + r0 * rb, rb, N - r0, nb, &xa, m, y0, N);
                        w8[s]->mvw8[type](w + r0 * rb, rb, N - r0, nb, &xa, m, y1, N);
                        TU_CHECK(!memcmp(y0, y1, sizeof y0),
                                 "type %d, m %lld, rows %lld..: %s mvw8 bits", type,
                                 (long long)m, (long long)r0, w8[s]->name);
                        n++;
                    }
                }
            }
            if (m > ATTN__QMV_MAX) continue;
            /* rows 2 .. N - 1 only: a row range that does not start at 0 */
            memset(y0, 0, sizeof y0), memset(y1, 0, sizeof y1);
            ref->mv[type](w + 2 * rb, rb, N - 2, nb, x, K, m, y0, N);
            nq->mv[type](w + 2 * rb, rb, N - 2, nb, x, K, m, y1, N);
            TU_CHECK(!memcmp(y0, y1, sizeof y0), "type %d, m %lld: NEON mv bits", type,
                     (long long)m);
            n++;
            if (!dp || !ref->mv8[type]) continue;
            TU_CHECK(dp->mv8[type] != NULL, "type %d: no SDOT kernel", type);
            if (!dp->mv8[type]) continue;
            memset(y0, 0, sizeof y0), memset(y1, 0, sizeof y1);
            ref->mv8[type](w + 2 * rb, rb, N - 2, nb, &xa, m, y0, N);
            dp->mv8[type](w + 2 * rb, rb, N - 2, nb, &xa, m, y1, N);
            TU_CHECK(!memcmp(y0, y1, sizeof y0), "type %d, m %lld: SDOT mv8 bits", type,
                     (long long)m);
            n++;
            if (!mm) continue;
            /* SMMLA: rows 2 .. N - 1 (an odd count: the last row on SDOT), and rows 1 .. N - 1 */
            TU_CHECK(mm->mv8[type] != NULL, "type %d: no SMMLA kernel", type);
            if (!mm->mv8[type]) continue;
            memset(y1, 0, sizeof y1);
            mm->mv8[type](w + 2 * rb, rb, N - 2, nb, &xa, m, y1, N);
            TU_CHECK(!memcmp(y0, y1, sizeof y0), "type %d, m %lld: SMMLA mv8 bits", type,
                     (long long)m);
            memset(y0, 0, sizeof y0), memset(y1, 0, sizeof y1);
            ref->mv8[type](w + rb, rb, N - 1, nb, &xa, m, y0, N);
            mm->mv8[type](w + rb, rb, N - 1, nb, &xa, m, y1, N);
            TU_CHECK(!memcmp(y0, y1, sizeof y0), "type %d, m %lld: SMMLA mv8 bits, even rows",
                     type, (long long)m);
            n += 2;
        }
        free(w);
    }
    printf("test_qlinear: %d ARM kernel runs, the plain C bits\n", n);
    free(x), free(d0), free(d1), free(xq), free(dsx), free(sq);
    attn_ctx_free(c);
}

/* ---- the x86 int8 sets one by one -------------------------------------------------------------
 * attn__qlinear runs the int8 set the CPU's best instructions give (AVX512_VNNI, else AVX-VNNI,
 * else VPMADDUBSW); here every x86 int8 set this machine runs, on every type the plain C table
 * has an int8 kernel for, against the double oracle of the int8 terms (ref8_row, as
 * test_kernels), for m = 1 .. ATTN__QMV_MAX and the wide kernels up to ATTN__QMV_WIDE vectors
 * (each vector the bits of mv8); and the two 256-bit sets (one body, quant8_256.h, two dot
 * products) give the same bits. */
static void test_x86_int8_sets(void) {
    const attn__quant_kernels *sets[3] = {attn__quant_kernels_avx2_int8(),
                                          attn__quant_kernels_avxvnni(),
                                          attn__quant_kernels_vnni()};
    const unsigned need[3] = {ATTN__CPU_AVX2, ATTN__CPU_AVX2 | ATTN__CPU_AVX_VNNI,
                              ATTN__CPU_AVX2 | ATTN__CPU_AVX512F | ATTN__CPU_AVX512BW |
                                  ATTN__CPU_AVX512DQ | ATTN__CPU_AVX512VL | ATTN__CPU_AVX512_VNNI};
    const char *names[3] = {"test_qlinear: AVX2 int8 kernels", "test_qlinear: AVX-VNNI kernels",
                            "test_qlinear: AVX512_VNNI kernels"};
    int any = 0;
    for (int s = 0; s < 3; s++) {
        if (sets[s] && !tu_isa_ok(need[s], names[s])) sets[s] = NULL;
        any |= sets[s] != NULL;
    }
    if (!any) return;
    const attn__quant_kernels *ref = attn__quant_kernels_ref();
    attn_ctx *c = tu_ctx(1);
    const int64_t N = 13, K = 768, nb32 = K / 32, M = ATTN__QMV_WIDE;
    float *x = malloc(sizeof(float) * (size_t)(M * K));
    int8_t *xq = malloc((size_t)(M * K));
    float *dsx = malloc(sizeof(float) * (size_t)(M * 2 * nb32));
    int32_t *sq = malloc(sizeof(int32_t) * (size_t)(M * 2 * nb32));
    q8x *xb = malloc(sizeof(q8x) * (size_t)(M * nb32));
    tu_fill(x, (size_t)(M * K), 4343, -2, 2);
    attn__q8act_quantize(x, K, M, K, xq, K, dsx, sq, nb32);
    for (int64_t i = 0; i < M * nb32; i++) q8_block(x + 32 * i, &xb[i]);
    const attn__q8act xa = {xq, dsx, sq, K, nb32};
    float y[3][ATTN__QMV_WIDE * 13], yw[ATTN__QMV_WIDE * 13];
    int n = 0;
    for (int type = 0; type < ATTN__QT_MAX; type++) {
        if (!ref->mv8[type]) continue;
        size_t wb;
        unsigned char *w = make_weights(c, type, N, K, 57 + (uint64_t)type, &wb);
        const size_t rb = wb / (size_t)N;
        int64_t be = 1;
        attn_qtype_block(type, &be, NULL);
        for (int s = 0; s < 3; s++) {
            if (!sets[s]) continue;
            TU_CHECK(sets[s]->mv8[type] != NULL, "%s: no %s kernel", names[s] + 14,
                     attn_qtype_name(type));
            if (!sets[s]->mv8[type]) continue;
            memset(y[s], 0, sizeof y[s]); /* column N - 1 of each row stays 0 */
            for (int64_t i0 = 0; i0 < M; i0 += ATTN__QMV_MAX) /* rows 1 .. N - 1 */
                sets[s]->mv8[type](w + rb, rb, N - 1, K / be,
                                   &(attn__q8act){xq + i0 * K, dsx + i0 * 2 * nb32,
                                                  sq + i0 * 2 * nb32, K, nb32},
                                   ATTN__QMV_MAX, y[s] + i0 * N, N);
            int bad = 0;
            for (int64_t i = 0; i < M; i++)
                for (int64_t r = 1; r < N; r++) {
                    double s8, a8;
                    int64_t nt;
                    ref8_row(type, w + r * rb, K, xb + i * nb32, &s8, &a8, &nt);
                    const double got = y[s][i * N + r - 1], tol = (double)(nt + 16) * U24 * a8;
                    if (!(fabs(got - s8) <= tol) && bad++ < 3)
                        TU_CHECK(0, "%s %s: y[%lld][%lld] = %.9g, int8 terms give %.9g (tol %.3g)",
                                 names[s] + 14, attn_qtype_name(type), (long long)i, (long long)r,
                                 got, s8, tol);
                }
            for (int64_t m = 1; m <= ATTN__QMV_MAX; m++) { /* fewer vectors: the same bits */
                float y1[ATTN__QMV_MAX * 13] = {0};
                sets[s]->mv8[type](w + rb, rb, N - 1, K / be, &xa, m, y1, N);
                TU_CHECK(!memcmp(y1, y[s], sizeof(float) * (size_t)(m * N - 1)),
                         "%s %s: m = %lld differs from m = 4", names[s] + 14,
                         attn_qtype_name(type), (long long)m);
            }
            if (sets[s]->mvw8[type]) {
                memset(yw, 0, sizeof yw);
                sets[s]->mvw8[type](w + rb, rb, N - 1, K / be, &xa, M, yw, N);
                TU_CHECK(!memcmp(yw, y[s], sizeof(float) * (size_t)(M * N - 1)),
                         "%s %s: the wide kernel differs from mv8", names[s] + 14,
                         attn_qtype_name(type));
            }
            n++;
        }
        if (sets[0] && sets[1] && sets[0]->mv8[type] && sets[1]->mv8[type])
            TU_CHECK(!memcmp(y[0], y[1], sizeof(float) * (size_t)(M * N - 1)),
                     "%s: VPMADDUBSW and AVX-VNNI kernels differ", attn_qtype_name(type));
        free(w);
    }
    printf("test_qlinear: %d x86 int8 kernel runs\n", n);
    free(x), free(xq), free(dsx), free(sq), free(xb);
    attn_ctx_free(c);
}

/* ---- the x86 int16 sets one by one -------------------------------------------------------------
 * attn__qlinear runs the int16 set the CPU's best instructions give (VPDPWSSD of AVX512_VNNI or
 * AVX-VNNI, else VPMADDWD; test_kernels holds it to the oracle); here every x86 int16 set this
 * machine runs, on every type of the plain AVX2 set, m = 1 .. ATTN__QMV_MAX: the same bits as
 * the plain AVX2 set (one body, quant16_256.h; the integer lanes are exact), and fewer vectors
 * the same bits as four. */
/* M rows of K activations (uniform in [-2, 2], every 61st element 20x larger: a few large
 * channels) and their int16 rounding, as the library's quantizer gives it */
typedef struct q16rows {
    float *x, *d, *sx, *gs;
    int16_t *q;
    uint8_t *qb;
    int64_t ldb;
    attn__q16act xa;
} q16rows;
static q16rows q16_rows(int64_t M, int64_t K, uint64_t seed) {
    q16rows r;
    r.ldb = (K / 32 + 7) / 8 * 8;
    r.x = malloc(sizeof(float) * (size_t)(M * K));
    r.q = malloc(sizeof(int16_t) * (size_t)(M * K));
    r.d = malloc(sizeof(float) * (size_t)(M * r.ldb));
    r.sx = malloc(sizeof(float) * (size_t)(M * r.ldb));
    tu_fill(r.x, (size_t)(M * K), seed, -2, 2);
    for (int64_t k = 0; k < M * K; k += 61) r.x[k] *= 20.0f;
    attn__q16act_quantize(r.x, K, M, K, r.q, K, r.d, r.sx, r.ldb);
    r.xa = (attn__q16act){r.q, r.d, r.sx, K, r.ldb, NULL, NULL};
    r.qb = malloc((size_t)(M * K) * 2);
    r.gs = malloc(sizeof(float) * (size_t)(M * 2 * r.ldb));
    attn__q16act_split(&r.xa, M, K, r.qb, r.gs);
    return r;
}
static void q16_rows_free(q16rows *r) {
    free(r->x), free(r->q), free(r->d), free(r->sx), free(r->qb), free(r->gs);
}

/* Y = X W^T through one int16 GEMM's pack and ukr, as quant.c drives it (panels of np rows
 * of W, tiles of mr rows of X) */
static void gemm16_run(const attn__gemm16 *g, int type, const unsigned char *w, size_t rb,
                       int64_t N, int64_t K, const attn__q16act *xa, int64_t M, float *y,
                       int64_t ldy) {
    const int G = attn__gemm16_group(type), np = g->np;
    int32_t *wq = malloc(sizeof(int32_t) * (size_t)(np * K / 2));
    float *ws = malloc(sizeof(float) * (size_t)(np * (K / G))),
          *wm = malloc(sizeof(float) * (size_t)(np * (K / G)));
    int16_t *tmp = malloc(sizeof(int16_t) * (size_t)(np * K));
    float *mins = attn__gemm16_mins(type) ? wm : NULL;
    for (int64_t n0 = 0; n0 < N; n0 += np) {
        const int64_t nv = N - n0 < np ? N - n0 : np;
        g->pack(type, w + (size_t)n0 * rb, rb, nv, K, wq, ws, mins, tmp);
        for (int64_t i0 = 0; i0 < M; i0 += g->mr) {
            attn__q16act xi = *xa;
            xi.q += i0 * xi.ldq, xi.d += i0 * xi.ldb, xi.sx += i0 * xi.ldb;
            const int mr = (int)(M - i0 < g->mr ? M - i0 : g->mr);
            g->ukr(mr, K, G, wq, ws, mins, &xi, y + i0 * ldy + n0, ldy, nv);
        }
    }
    free(wq), free(ws), free(wm), free(tmp);
}

/* Every int16 GEMM this CPU runs (the plain AVX2 one always with AVX2: it carries the AVX-VNNI
 * one's logic, whose VPDPWSSD gives the same int32 lanes) gives the same bits on every type,
 * for M = 9 and N = 37 (partial tiles and panels); test_kernels holds the picked one to the
 * int16 oracle. */
static void gemm16_sets(attn_ctx *c, int64_t K) {
    const attn__gemm16 *gs[3] = {attn__gemm16_avx2(), attn__gemm16_avxvnni(), attn__gemm16_vnni()};
    const unsigned need[3] = {ATTN__CPU_AVX2, ATTN__CPU_AVX2 | ATTN__CPU_AVX_VNNI,
                              TU_CPU_AVX512_WIDE | ATTN__CPU_AVX512_VNNI};
    const char *names[3] = {"test_qlinear: AVX2 int16 GEMM", "test_qlinear: AVX-VNNI int16 GEMM",
                            "test_qlinear: AVX512_VNNI int16 GEMM"};
    TU_CHECK(gs[0] != NULL, "no plain AVX2 int16 GEMM in an x86 build with AVX2");
    if (!gs[0]) return;
    for (int s = 1; s < 3; s++)
        if (gs[s] && !tu_isa_ok(need[s], names[s])) gs[s] = NULL;
    const int64_t M = 9, N = 37, ldy = N + 3;
    q16rows r = q16_rows(M, K, 4345);
    const attn__q16act xa = r.xa;
    float *y0 = malloc(sizeof(float) * (size_t)(M * ldy)), *y1 = malloc(sizeof(float) * (size_t)(M * ldy));
    int n = 0;
    for (int type = 0; type < ATTN__QT_MAX; type++) {
        if (!attn__gemm16_group(type)) continue;
        size_t wb;
        unsigned char *w = make_weights(c, type, N, K, 77 + (uint64_t)type, &wb);
        const size_t rb = wb / (size_t)N;
        for (int64_t i = 0; i < M * ldy; i++) y0[i] = -7.0f;
        gemm16_run(gs[0], type, w, rb, N, K, &xa, M, y0, ldy);
        int finite = 1;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                finite &= isfinite(y0[i * ldy + j]) && y0[i * ldy + j] != -7.0f;
            }
        TU_CHECK(finite, "%s %s: an output not written or not finite", names[0] + 14,
                 attn_qtype_name(type));
        for (int s = 1; s < 3; s++) {
            if (!gs[s]) continue;
            for (int64_t i = 0; i < M * ldy; i++) y1[i] = -7.0f;
            gemm16_run(gs[s], type, w, rb, N, K, &xa, M, y1, ldy);
            int64_t bad = -1;
            for (int64_t i = 0; i < M && bad < 0; i++)
                if (memcmp(y1 + i * ldy, y0 + i * ldy, sizeof(float) * (size_t)N)) bad = i;
            TU_CHECK(bad < 0, "%s %s: row %lld differs from the AVX2 GEMM's", names[s] + 14,
                     attn_qtype_name(type), (long long)bad);
            n++;
        }
        free(w);
    }
    printf("test_qlinear: %d x86 int16 GEMM comparisons\n", n);
    q16_rows_free(&r);
    free(y0), free(y1);
}

/* The int16 kernels on the split activations (Q2_K, Q3_K, Q6_K) on a long row (257
 * superblocks: the split activations and their group sums indexed past 256 superblocks, where
 * an earlier version summed per row): a row whose last 256 superblocks are zero (d = dmin = 0:
 * exact zero terms) gives the bits of its first superblock alone. */
static void k16_long_rows(attn_ctx *c, const attn__quant_kernels *const *sets,
                          const char *const *names) {
    const int64_t N = 5, nb = 257, K = 256 * nb;
    q16rows x = q16_rows(ATTN__QMV_MAX, K, 4243);
    const int types[] = {ATTN_Q_Q2_K, ATTN_Q_Q3_K, ATTN_Q_Q6_K};
    for (int ti = 0; ti < 3; ti++) {
        const int type = types[ti];
        size_t wb;
        unsigned char *w1 = make_weights(c, type, N, 256, 4242, &wb);
        const size_t rb1 = wb / (size_t)N, rb = rb1 * (size_t)nb;
        unsigned char *wl = calloc((size_t)N, rb);
        for (int64_t r = 0; r < N; r++) memcpy(wl + (size_t)r * rb, w1 + (size_t)r * rb1, rb1);
        for (int s = 0; s < 3; s++) {
            if (!sets[s] || !sets[s]->mv16[type]) continue;
            for (int64_t m = 1; m <= ATTN__QMV_MAX; m++) {
                float y0[ATTN__QMV_MAX * 5], y1[ATTN__QMV_MAX * 5];
                sets[s]->mv16[type](w1, rb1, N, 1, &x.xa, m, y0, N);
                sets[s]->mv16[type](wl, rb, N, nb, &x.xa, m, y1, N);
                int finite = 1;
                for (int64_t i = 0; i < m * N; i++) finite &= isfinite(y0[i]) != 0;
                TU_CHECK(finite, "%s %s: an output not finite (m = %lld)", names[s] + 14,
                         attn_qtype_name(type), (long long)m);
                TU_CHECK(!memcmp(y0, y1, sizeof(float) * (size_t)(m * N)),
                         "%s %s: a row of 257 superblocks differs from its first alone (m = %lld)",
                         names[s] + 14, attn_qtype_name(type), (long long)m);
            }
        }
        free(w1), free(wl);
    }
    q16_rows_free(&x);
}

static void test_x86_int16_sets(void) {
    const attn__quant_kernels *sets[3] = {attn__quant_kernels_avx2_int16(),
                                          attn__quant_kernels_avxvnni_int16(),
                                          attn__quant_kernels_vnni_int16()};
    const unsigned need[3] = {ATTN__CPU_AVX2, ATTN__CPU_AVX2 | ATTN__CPU_AVX_VNNI,
                              ATTN__CPU_AVX2 | ATTN__CPU_AVX512F | ATTN__CPU_AVX512BW |
                                  ATTN__CPU_AVX512DQ | ATTN__CPU_AVX512VL | ATTN__CPU_AVX512_VNNI};
    const char *names[3] = {"test_qlinear: AVX2 int16 kernels", "test_qlinear: AVX-VNNI int16 kernels",
                            "test_qlinear: AVX512_VNNI int16 kernels"};
    if (!sets[0] || !tu_isa_ok(need[0], names[0])) return;
    for (int s = 1; s < 3; s++)
        if (sets[s] && !tu_isa_ok(need[s], names[s])) sets[s] = NULL;
    attn_ctx *c = tu_ctx(1);
    const int64_t N = 13, K = 1280, M = ATTN__QMV_MAX;
    q16rows r = q16_rows(M, K, 4344);
    const attn__q16act xa = r.xa;
    float *x = r.x, *d = r.d, *sx = r.sx;
    int16_t *xq = r.q;
    const int64_t ldb = r.ldb;
    int n = 0;
    for (int type = 0; type < ATTN__QT_MAX; type++) {
        if (!sets[0]->mv16[type]) continue;
        size_t wb;
        unsigned char *w = make_weights(c, type, N, K, 91 + (uint64_t)type, &wb);
        const size_t rb = wb / (size_t)N;
        int64_t be = 1;
        attn_qtype_block(type, &be, NULL);
        float y0[ATTN__QMV_MAX * 13] = {0};
        sets[0]->mv16[type](w + rb, rb, N - 1, K / be, &xa, M, y0, N); /* rows 1 .. N - 1 */
        for (int s = 0; s < 3; s++) {
            if (!sets[s]) continue;
            TU_CHECK(sets[s]->mv16[type] != NULL, "%s: no %s kernel", names[s] + 14,
                     attn_qtype_name(type));
            if (!sets[s]->mv16[type]) continue;
            for (int64_t m = 1; m <= M; m++) {
                float y1[ATTN__QMV_MAX * 13] = {0};
                sets[s]->mv16[type](w + rb, rb, N - 1, K / be, &xa, m, y1, N);
                TU_CHECK(!memcmp(y1, y0, sizeof(float) * (size_t)(m * N - 1)),
                         "%s %s: m = %lld differs from the AVX2 set's m = 4", names[s] + 14,
                         attn_qtype_name(type), (long long)m);
                n++;
            }
        }
        free(w);
    }
    printf("test_qlinear: %d x86 int16 kernel runs\n", n);
    k16_long_rows(c, sets, names);
    gemm16_sets(c, K);
    /* each set's quantizer (q16x) against attn__q16act_quantize, bit for bit: these rows, and
     * blocks of edge values (zeros of both signs, tiny, +-inf, NaN, halves to round) */
    for (int64_t k = 0; k < 32; k++) {
        x[k] = k % 2 ? -0.0f : 0.0f;
        x[32 + k] = (float)(k - 16) * 1e-36f;
        x[64 + k] = k == 3 ? INFINITY : k == 9 ? -INFINITY : (float)k;
        x[96 + k] = k == 30 ? NAN : (float)k * 0.5f - 7.75f;
        x[128 + k] = (float)k * 0.5f - 8.0f; /* ties: y = +-(n + 1/2) d^-1 scaled */
        x[160 + k] = k == 0 ? 1e30f : 1e-30f;
    }
    int16_t *q2 = malloc(sizeof(int16_t) * (size_t)(M * K));
    float *d2 = malloc(sizeof(float) * (size_t)(M * ldb)), *s2 = malloc(sizeof(float) * (size_t)(M * ldb));
    attn__q16act_quantize(x, K, M, K, xq, K, d, sx, ldb);
    for (int s = 0; s < 3; s++) {
        if (!sets[s]) continue;
        TU_CHECK(sets[s]->q16x != NULL, "%s: no quantizer", names[s] + 14);
        if (!sets[s]->q16x) continue;
        memset(q2, 0x5a, sizeof(int16_t) * (size_t)(M * K));
        for (int64_t i = 0; i < M * ldb; i++) d2[i] = s2[i] = -3.0f;
        sets[s]->q16x(x, K, M, K, q2, K, d2, s2, ldb);
        TU_CHECK(!memcmp(q2, xq, sizeof(int16_t) * (size_t)(M * K)) &&
                     !memcmp(d2, d, sizeof(float) * (size_t)(M * ldb)) &&
                     !memcmp(s2, sx, sizeof(float) * (size_t)(M * ldb)),
                 "%s: the quantizer's bits differ from attn__q16act_quantize's", names[s] + 14);
    }
    free(q2), free(d2), free(s2);
    q16_rows_free(&r);
    attn_ctx_free(c);
}

/* ---- the int16 rounding of activations at its edges ------------------------------------------
 * attn__q16act_quantize on blocks whose largest value is tiny (below ~9.6e-35 a zero block:
 * 1 / d would overflow), normal, +-32767 d exactly, infinite or NaN (d NaN), and the padding
 * of d and sx past K / 32 zero; then attn__qlinear on such rows: finite where x is, NaN in the
 * rows that hold a NaN or an infinity. */
static void test_q16_edges(void) {
    const int64_t K = 5 * 32, ldb = 8;
    float x[5 * 32], d[8], sx[8];
    int16_t q[5 * 32];
    for (int j = 0; j < 32; j++) {
        x[j] = (j - 16) * 1e-36f;      /* tiny: a zero block */
        x[32 + j] = (j - 16) * 1e-30f; /* small but normal */
        x[64 + j] = (float)(j - 16);   /* max 16: x = q d to rounding */
        x[96 + j] = j == 5 ? INFINITY : 1.0f;
        x[128 + j] = j == 7 ? NAN : 1.0f;
    }
    for (int b = 0; b < 8; b++) d[b] = sx[b] = -1.0f;
    attn__q16act_quantize(x, K, 1, K, q, K, d, sx, ldb);
    int zero = 1;
    for (int j = 0; j < 32; j++) zero &= q[j] == 0;
    TU_CHECK(d[0] == 0.0f && zero, "tiny block: d %g, not a zero block", d[0]);
    TU_CHECK(d[1] > 0.0f && q[32] == -32767 && q[32 + 31] == (int16_t)lrint(15.0 / 16.0 * 32767),
             "1e-30 block: d %g q %d %d", d[1], q[32], q[63]);
    TU_CHECK(d[2] == 16.0f / 32767.0f && q[64] == -32767 && q[64 + 16] == 0, "block of max 16");
    TU_CHECK(isnan(d[3]) && isnan(d[4]), "inf / NaN blocks: d %g %g", d[3], d[4]);
    TU_CHECK(d[5] == 0.0f && d[6] == 0.0f && d[7] == 0.0f && sx[5] == 0.0f && sx[7] == 0.0f,
             "padding past K / 32 not zero");
    /* through attn__qlinear: rows of x with these blocks, Q8_0 weights of 5 blocks */
    attn_ctx *c = tu_ctx(2);
    size_t wb;
    unsigned char *w = make_weights(c, ATTN_Q_Q8_0, 7, K, 3, &wb);
    float xs[3 * 5 * 32], y[3 * 7];
    for (int64_t k = 0; k < K; k++) {
        xs[k] = k < 64 ? x[k] : 0.5f;                        /* tiny and small blocks */
        xs[K + k] = x[k] == x[k] && k < 96 ? x[k] : 0.25f;   /* finite */
        xs[2 * K + k] = x[k];                                 /* with inf and NaN */
    }
    TU_STATUS(attn__qlinear(c, ATTN_Q_Q8_0, w, 7, K, xs, K, 3, NULL, NULL, y, 7, ATTN__QACT_Q16),
              ATTN_OK, c);
    int fin = 1, nan = 1;
    for (int n = 0; n < 7; n++) fin &= isfinite(y[n]) && isfinite(y[7 + n]), nan &= isnan(y[14 + n]);
    TU_CHECK(fin && nan, "int16 rows: finite x must give finite y, inf / NaN rows NaN");
    free(w);
    attn_ctx_free(c);
}

/* ---- a type a SIMD set leaves out ---------------------------------------------------------------
 * The context's own sets with the IQ4 (and Q4_0) entries removed, as on a set that lacks a
 * type: attn__qlinear must take the plain C kernels, float and int8, so the matrix-vector
 * results are the bits of the plain C set (an ATTN__ISA_REF context) for M = 1 .. 8, and the
 * GEMM path (M = 17) dequantizes with the plain C dq (the bits of attn__gemm on attn__dequant_ref's
 * weights, as run_case checks). */
static void test_fallback(void) {
    attn_ctx *c = tu_ctx(1), *r = tu_ctx(1);
    if (!c || !r) return;
    TU_CHECK(attn__isa_set(r, ATTN__ISA_REF), "isa_set ref");
    attn__quant_kernels q = *c->kern.quant, q8 = *c->kern.quant8;
    const int types[3] = {ATTN_Q_IQ4_NL, ATTN_Q_IQ4_XS, ATTN_Q_Q4_0};
    for (int t = 0; t < 3; t++) {
        q.dq[types[t]] = NULL, q.mv[types[t]] = NULL, q.mvw[types[t]] = NULL;
        q8.mv8[types[t]] = NULL, q8.mvw8[types[t]] = NULL;
    }
    c->kern.quant = &q, c->kern.quant8 = &q8;
    const int64_t N = 21, K = 512, Ms[3] = {1, 6, 8};
    float *x = malloc(sizeof(float) * 8 * K), y0[8 * 21], y1[8 * 21];
    tu_fill(x, (size_t)(8 * K), 777, -1, 1);
    int n = 0;
    for (int t = 0; t < 3; t++) {
        size_t wb;
        unsigned char *w = make_weights(c, types[t], N, K, 880 + (uint64_t)t, &wb);
        for (int a = 0; a < 2; a++)
            for (int mi = 0; mi < 3; mi++) {
                const int act = a ? ATTN__QACT_Q8 : ATTN__QACT_F32;
                memset(y0, 0, sizeof y0), memset(y1, 0, sizeof y1);
                TU_STATUS(attn__qlinear(r, types[t], w, N, K, x, K, Ms[mi], NULL, NULL, y0, N, act),
                          ATTN_OK, r);
                TU_STATUS(attn__qlinear(c, types[t], w, N, K, x, K, Ms[mi], NULL, NULL, y1, N, act),
                          ATTN_OK, c);
                TU_CHECK(!memcmp(y0, y1, sizeof y0), "%s %s M=%lld: entries removed, not the plain "
                         "C bits", attn_qtype_name(types[t]), a ? "int8" : "float",
                         (long long)Ms[mi]);
                n++;
            }
        free(w);
        qcase qc = {types[t], 17, N, K, 1, 0};
        run_case(c, c, &qc, ATTN__QACT_F32, 990 + (uint64_t)t);
    }
    printf("test_qlinear: %d runs with the SIMD entries removed (%s / %s sets)\n", n, q.name,
           q8.name);
    free(x);
    attn_ctx_free(c);
    attn_ctx_free(r);
}

/* ---- no read past the weights or the activations -------------------------------------------
 * A model file mapped read-only (--mmap) can end right after its last block, and a caller's
 * activations right after their last row: every kernel set, every type, float and int8
 * activations, M on the matrix-vector kernels (1, 3, 5, 8: mv, the wide kernels) and on the
 * GEMM path (9: the whole matrix dequantized), with W and X each ending where an inaccessible
 * page starts (tu_guarded_alloc; readable under qemu-x86_64, tu_guard_ok).  A read past either
 * faults (the test dies). */
static void test_guard_pages(void) {
    const int guard = tu_guard_ok("test_qlinear: no guard page (qemu-x86_64's masked loads)");
    attn_ctx *c = tu_ctx(1);
    const int64_t Ms[] = {1, 3, 5, 8, 9}, N = 7;
    int cases = 0;
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        if (!tu_set_ok(isa, "test_qlinear: reads against a guard page")) continue;
        TU_CHECK(attn__isa_set(c, isa), "isa_set");
        for (size_t t = 0; t < COUNT(TYPES); t++) {
            const int type = TYPES[t];
            int64_t be;
            attn_qtype_block(type, &be, NULL);
            const int64_t K = be == 256 ? 512 : be == 32 ? 96 : 37; /* odd for F32/F16/BF16 */
            size_t wb;
            unsigned char *w0 = make_weights(c, type, N, K, 600 + (uint64_t)t, &wb);
            tu_guarded gw, gx;
            unsigned char *w = tu_guarded_alloc(&gw, wb, guard);
            float *x = tu_guarded_alloc(&gx, sizeof(float) * (size_t)(9 * K), guard);
            TU_CHECK(w && x, "guarded_alloc");
            if (!w || !x) {
                free(w0), tu_guarded_free(&gw), tu_guarded_free(&gx);
                continue;
            }
            memcpy(w, w0, wb);
            tu_fill(x, (size_t)(9 * K), 61 + (uint64_t)t, -1, 1);
            float y[9 * 7];
            for (size_t mi = 0; mi < COUNT(Ms); mi++)
                for (int a = 0; a < 2; a++) {
                    const int act = a ? ATTN__QACT_Q8 : ATTN__QACT_F32;
                    if (a && !has_q8(type)) continue;
                    /* the last M rows of x: its end is the guard page's start */
                    const float *xm = x + (9 - Ms[mi]) * K;
                    TU_STATUS(attn__qlinear(c, type, w, N, K, xm, K, Ms[mi], NULL, NULL, y, N, act),
                              ATTN_OK, c);
                    for (int64_t i = 0; i < Ms[mi] * N; i++)
                        TU_CHECK(isfinite(y[i]), "guard pages: type %d M %lld: non-finite output",
                                 type, (long long)Ms[mi]);
                    cases++;
                }
            free(w0);
            tu_guarded_free(&gw), tu_guarded_free(&gx);
        }
    }
    printf("test_qlinear: %d cases against guard pages%s\n", cases, guard ? "" : " (unguarded)");
    attn_ctx_free(c);
}

int main(void) {
    test_guard_pages();
    test_arm_bits();
    test_fallback();
    test_x86_int8_sets();
    test_x86_int16_sets();
    test_q16_edges();
    test_kernels();
    test_multi();
    test_public();
    return tu_finish("test_qlinear");
}
