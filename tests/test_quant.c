/* Quantized tensors, the formats: attn_dequantize and attn_quantize against the gguf package's
 * numpy code (tests/fixtures/quant/quant.safetensors, written by tests/gen_quant.py; IQ4_NL and
 * IQ4_XS in iq4.safetensors, tests/gen_quant_iq4.py), bit for
 * bit, on every instruction set this machine runs and on 1 and 2 threads; the half-precision
 * conversions against an independent computation; non-finite scales; argument checks.
 *
 * Bit for bit means memcmp of the float bits (or the bytes): -0.0 against 0.0, or a NaN
 * payload, fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "internal.h"
#include "../src/kernels/dispatch.h"
#include "../src/kernels/quant.h"

static const int DQ_TYPES[] = {ATTN_Q_F32,  ATTN_Q_F16,  ATTN_Q_BF16, ATTN_Q_Q4_0, ATTN_Q_Q4_1,
                               ATTN_Q_Q5_0, ATTN_Q_Q5_1, ATTN_Q_Q8_0, ATTN_Q_Q2_K, ATTN_Q_Q3_K,
                               ATTN_Q_Q4_K, ATTN_Q_Q5_K, ATTN_Q_Q6_K, ATTN_Q_Q8_K};
static const int QZ_TYPES[] = {ATTN_Q_F32,  ATTN_Q_F16,  ATTN_Q_BF16, ATTN_Q_Q4_0,
                               ATTN_Q_Q4_1, ATTN_Q_Q5_0, ATTN_Q_Q5_1, ATTN_Q_Q8_0};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* First index where the 32-bit words differ, or -1. */
static int64_t first_diff(const void *a, const void *b, size_t n, size_t elem) {
    const unsigned char *p = a, *q = b;
    for (size_t i = 0; i < n; i++)
        if (memcmp(p + i * elem, q + i * elem, elem) != 0) return (int64_t)i;
    return -1;
}

static int find(const attn_st *st, const char *name, attn_st_tensor *t, attn_dtype dt) {
    if (attn_st_find(st, name, t) != ATTN_OK) {
        TU_CHECK(0, "fixture has no %s", name);
        return 0;
    }
    TU_CHECK(t->dtype == dt, "%s: dtype %d", name, (int)t->dtype);
    return t->dtype == dt;
}

/* ---- fixtures: dequantize and quantize as gguf ------------------------------------------ */
static void check_dq(attn_ctx *ctx, const char *label, const attn_st_tensor *in,
                     const attn_st_tensor *out, int type) {
    int64_t n = out->numel;
    float *got = malloc((size_t)n * sizeof(float));
    memset(got, 0xa5, (size_t)n * sizeof(float));
    if (TU_STATUS(attn_dequantize(ctx, type, in->data, in->nbytes, n, got), ATTN_OK, ctx)) {
        int64_t i = first_diff(got, out->data, (size_t)n, 4);
        float want = 0.0f;
        if (i >= 0) memcpy(&want, (const char *)out->data + 4 * i, 4);
        TU_CHECK(i < 0, "%s %s: element %lld is %.9g, gguf gives %.9g", label,
                 attn_qtype_name(type), (long long)i, i >= 0 ? got[i] : 0.0, want);
    }
    /* the reference itself (the kernels of every set must equal it: above) */
    int64_t be, bb;
    attn_qtype_block(type, &be, &bb);
    memset(got, 0x5a, (size_t)n * sizeof(float));
    attn__dequant_ref(type, in->data, n / be, got);
    TU_CHECK(first_diff(got, out->data, (size_t)n, 4) < 0, "%s %s: reference differs", label,
             attn_qtype_name(type));
    free(got);
}

static void test_fixtures(void) {
    attn_ctx *c1 = tu_ctx(1), *c2 = tu_ctx(2);
    attn_st *st = NULL;
    if (!TU_STATUS(attn_st_read_file(c1, "fixtures/quant/quant.safetensors", &st), ATTN_OK, c1)) {
        attn_ctx_free(c1);
        attn_ctx_free(c2);
        return;
    }
    char name[64];
    int reals = 0;
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        if (!tu_set_ok(isa, "test_quant: fixtures")) continue;
        TU_CHECK(attn__isa_set(c1, isa) && attn__isa_set(c2, isa), "isa_set");
        for (int t = 0; t < 2; t++) {
            attn_ctx *ctx = t ? c2 : c1;
            char label[32];
            snprintf(label, sizeof label, "%s/%dt", attn__isa_name(isa), t + 1);
            for (size_t k = 0; k < COUNT(DQ_TYPES); k++) {
                attn_st_tensor in, out;
                const char *tn = attn_qtype_name(DQ_TYPES[k]);
                snprintf(name, sizeof name, "dq.%s.in", tn);
                if (!find(st, name, &in, ATTN_U8)) continue;
                snprintf(name, sizeof name, "dq.%s.out", tn);
                if (!find(st, name, &out, ATTN_F32)) continue;
                check_dq(ctx, label, &in, &out, DQ_TYPES[k]);
            }
            /* real blocks of the SmolLM2 file, when the generator found it */
            for (int r = 0; r < 2; r++) {
                attn_st_tensor in, out;
                const int type = r ? ATTN_Q_Q8_0 : ATTN_Q_Q4_1;
                snprintf(name, sizeof name, "real.%s.in", attn_qtype_name(type));
                if (attn_st_find(st, name, &in) != ATTN_OK) continue;
                snprintf(name, sizeof name, "real.%s.out", attn_qtype_name(type));
                if (!find(st, name, &out, ATTN_F32)) continue;
                check_dq(ctx, label, &in, &out, type);
                reals++;
            }
        }
    }
    for (size_t k = 0; k < COUNT(QZ_TYPES); k++) {
        attn_st_tensor in, out;
        const char *tn = attn_qtype_name(QZ_TYPES[k]);
        snprintf(name, sizeof name, "qz.%s.in", tn);
        if (!find(st, name, &in, ATTN_F32)) continue;
        snprintf(name, sizeof name, "qz.%s.out", tn);
        if (!find(st, name, &out, ATTN_U8)) continue;
        float *x = malloc(in.nbytes);
        memcpy(x, in.data, in.nbytes); /* st data may be unaligned */
        for (int t = 0; t < 2; t++) {
            attn_ctx *ctx = t ? c2 : c1;
            unsigned char *got = malloc(out.nbytes);
            memset(got, 0xa5, out.nbytes);
            if (TU_STATUS(attn_quantize(ctx, QZ_TYPES[k], x, in.numel, got, out.nbytes), ATTN_OK,
                          ctx)) {
                int64_t i = first_diff(got, out.data, out.nbytes, 1);
                TU_CHECK(i < 0, "quantize %s (%d threads): byte %lld is 0x%02x, gguf 0x%02x",
                         tn, t + 1, (long long)i, i >= 0 ? got[i] : 0,
                         i >= 0 ? ((const unsigned char *)out.data)[i] : 0);
            }
            free(got);
        }
        free(x);
    }
    printf("test_quant: gguf fixtures, %d types dequantized, %d quantized, %s real blocks\n",
           (int)COUNT(DQ_TYPES), (int)COUNT(QZ_TYPES), reals ? "with" : "without");
    attn_st_free(st);
    attn_ctx_free(c1);
    attn_ctx_free(c2);
}

/* IQ4_NL and IQ4_XS (tests/fixtures/quant/iq4.safetensors, tests/gen_quant_iq4.py): random
 * blocks and IQ4_NL blocks of a normal weight distribution, dequantized as gguf, bit for bit on
 * every set and 1 and 2 threads; gguf has no quantizer for them, nor has attn. */
static void test_iq4_fixtures(void) {
    attn_ctx *c1 = tu_ctx(1), *c2 = tu_ctx(2);
    attn_st *st = NULL;
    if (!TU_STATUS(attn_st_read_file(c1, "fixtures/quant/iq4.safetensors", &st), ATTN_OK, c1)) {
        attn_ctx_free(c1);
        attn_ctx_free(c2);
        return;
    }
    const int types[2] = {ATTN_Q_IQ4_NL, ATTN_Q_IQ4_XS};
    int runs = 0;
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        if (!tu_set_ok(isa, "test_quant: IQ4 fixtures")) continue;
        TU_CHECK(attn__isa_set(c1, isa) && attn__isa_set(c2, isa), "isa_set");
        for (int t = 0; t < 2; t++) {
            attn_ctx *ctx = t ? c2 : c1;
            char label[32], name[64];
            snprintf(label, sizeof label, "%s/%dt", attn__isa_name(isa), t + 1);
            for (int k = 0; k < 3; k++) {
                attn_st_tensor in, out;
                if (k < 2)
                    snprintf(name, sizeof name, "dq.%s.in", attn_qtype_name(types[k]));
                else
                    snprintf(name, sizeof name, "nl_real.in");
                if (!find(st, name, &in, ATTN_U8)) continue;
                memcpy(name + strlen(name) - 2, "out", 4);
                if (!find(st, name, &out, ATTN_F32)) continue;
                check_dq(ctx, label, &in, &out, types[k & 1 ? 1 : 0]);
                runs++;
            }
        }
    }
    /* no quantizer; whole blocks only */
    float x[256] = {0}, y[256];
    unsigned char q[136] = {0};
    for (int k = 0; k < 2; k++) {
        TU_STATUS(attn_quantize(c1, types[k], x, 256, q, sizeof q), ATTN_E_UNSUPPORTED, c1);
        TU_CHECK(!attn__quant_supported(types[k]), "%s: a quantizer", attn_qtype_name(types[k]));
    }
    TU_STATUS(attn_dequantize(c1, ATTN_Q_IQ4_XS, q, sizeof q, 128, y), ATTN_E_SHAPE, c1);
    TU_STATUS(attn_dequantize(c1, ATTN_Q_IQ4_NL, q, 17, 32, y), ATTN_E_INVALID, c1);
    printf("test_quant: IQ4 fixtures, %d dequantizations\n", runs);
    attn_st_free(st);
    attn_ctx_free(c1);
    attn_ctx_free(c2);
}

/* ---- half precision --------------------------------------------------------------------- */
/* The value of a half from its fields, in double (independent of the bit manipulation). */
static double half_value(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static void test_half(void) {
    /* widening: every half */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = attn__half_to_float((uint16_t)h);
        double v = half_value((uint16_t)h);
        if (isnan(v)) {
            uint32_t u;
            memcpy(&u, &f, 4);
            /* NaN: payload kept (numpy's astype: the 10 bits at the top of the mantissa) */
            bad += !isnan(f) || (u >> 31) != (h >> 15) || ((u >> 13) & 1023) != (h & 1023) ||
                   (u & 8191) != 0;
        } else {
            bad += (double)f != v || !signbit(f) != !signbit(v);
        }
        /* narrowing gives the half back */
        if (!isnan(v)) bad += attn__float_to_half(f) != h;
    }
    TU_CHECK(bad == 0, "half <-> float: %d of 65536 halves wrong", bad);

    /* narrowing of random floats: the nearest half (ties to the even mantissa), found by
     * search over the positive halves in double */
    static double pos[31 * 1024 + 1]; /* halves 0x0000 .. 0x7c00 (the last is infinity) */
    for (int h = 0; h <= 0x7c00; h++) pos[h] = half_value((uint16_t)h);
    uint64_t rs = 99;
    bad = 0;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = (uint32_t)tu_rand(&rs);
        /* a third of them near the half range */
        if (i % 3 == 0) u = (u & 0x80000000u) | (0x33000000u + u % 0x14800000u);
        float f;
        memcpy(&f, &u, 4);
        if (isnan(f)) continue;
        double a = fabs((double)f);
        int lo = 0, hi = 0x7c00; /* largest half <= a */
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (pos[mid] <= a) lo = mid; else hi = mid - 1;
        }
        int want;
        if (lo == 0x7c00 || a == pos[lo])
            want = lo;
        else if (lo == 0x7bff) /* above 65504: infinity from 65520 on */
            want = a >= 65520.0 ? 0x7c00 : 0x7bff;
        else {
            double dl = a - pos[lo], dh = pos[lo + 1] - a;
            want = dl < dh ? lo : dh < dl ? lo + 1 : (lo & 1 ? lo + 1 : lo);
        }
        want |= (u >> 31) << 15;
        uint16_t got = attn__float_to_half(f);
        if (got != want && bad++ < 5)
            TU_CHECK(0, "half(%.9g) = 0x%04x, want 0x%04x", (double)f, got, want);
    }
    TU_CHECK(bad == 0, "float -> half: %d wrong", bad);
    /* NaN stays NaN */
    float qn = NAN;
    TU_CHECK((attn__float_to_half(qn) & 0x7c00) == 0x7c00 && (attn__float_to_half(qn) & 0x3ff),
             "NaN -> half");
}

/* ---- non-finite scales ------------------------------------------------------------------ */
/* One block of type with its first scale (the d of every type here) set to h and everything
 * else from seed; checks that every set dequantizes it to what the documented formula gives
 * in double arithmetic (NaN, +-inf and finite classes; finite values equal). */
static void special_scale(attn_ctx *ctx, int type, uint16_t h, uint64_t seed) {
    int64_t be, bb;
    attn_qtype_block(type, &be, &bb);
    unsigned char blk[292];
    for (int64_t i = 0; i < bb; i++) blk[i] = (unsigned char)(tu_rand(&seed) >> 11);
    int doff = type == ATTN_Q_Q6_K ? 208 : 0;
    blk[doff] = (unsigned char)h;
    blk[doff + 1] = (unsigned char)(h >> 8);
    if (type == ATTN_Q_Q4_1 || type == ATTN_Q_Q4_K) { /* a finite second scale */
        blk[2] = 0x00;
        blk[3] = 0x3c; /* 1.0 */
    }
    if (type == ATTN_Q_Q4_0) blk[2] = 0x08; /* element 0 has q - 8 = 0: inf * 0 */
    float ref[256], got[256];
    attn__dequant_ref(type, blk, 1, ref);
    /* independent: the formula in double */
    const double d = half_value(h);
    int bad = 0;
    for (int e = 0; e < be; e++) {
        double w;
        if (type == ATTN_Q_Q4_0) {
            int q = (e < 16 ? blk[2 + e] & 15 : blk[2 + e - 16] >> 4) - 8;
            w = d * q;
        } else if (type == ATTN_Q_Q4_1) {
            int q = e < 16 ? blk[4 + e] & 15 : blk[4 + e - 16] >> 4;
            w = d * q + 1.0;
        } else if (type == ATTN_Q_Q8_0) {
            w = d * (int8_t)blk[2 + e];
        } else if (type == ATTN_Q_Q4_K) {
            int s = e / 32, sc, mn;
            const unsigned char *k = blk + 4;
            sc = s < 4 ? k[s] & 63 : (k[4 + s] & 15) | ((k[s - 4] >> 2) & 0x30);
            mn = s < 4 ? k[4 + s] & 63 : (k[4 + s] >> 4) | ((k[s] >> 2) & 0x30);
            int q = (blk[16 + (s / 2) * 32 + e % 32] >> (4 * (s & 1))) & 15;
            w = (d * sc) * q - 1.0 * mn;
        } else { /* Q6_K */
            int hh = e / 128, r = e % 128;
            int lo = (blk[hh * 64 + r % 64] >> (4 * (r / 64))) & 15;
            int hi = (blk[128 + hh * 32 + r % 32] >> (2 * (r / 32))) & 3;
            w = (d * (int8_t)blk[192 + e / 16]) * ((lo | hi << 4) - 32);
        }
        const float r = ref[e];
        if (isnan(w) ? !isnan(r) : isinf(w) ? r != (float)w : !isfinite(r)) bad++;
    }
    TU_CHECK(bad == 0, "%s with scale 0x%04x: %d elements of the wrong class",
             attn_qtype_name(type), h, bad);
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        if (!tu_set_ok(isa, "test_quant: scale classes")) continue;
        TU_CHECK(attn__isa_set(ctx, isa), "isa_set");
        memset(got, 0, sizeof got);
        TU_STATUS(attn_dequantize(ctx, type, blk, (size_t)bb, be, got), ATTN_OK, ctx);
        int diff = 0;
        for (int e = 0; e < be; e++)
            diff += isnan(ref[e]) ? !isnan(got[e]) : memcmp(&got[e], &ref[e], 4) != 0;
        TU_CHECK(diff == 0, "%s %s scale 0x%04x: %d elements differ from the reference",
                 attn__isa_name(isa), attn_qtype_name(type), h, diff);
    }
    attn__isa_set(ctx, ATTN__ISA_DEFAULT);
}

static void test_special(void) {
    attn_ctx *ctx = tu_ctx(1);
    const int types[] = {ATTN_Q_Q4_0, ATTN_Q_Q4_1, ATTN_Q_Q8_0, ATTN_Q_Q4_K, ATTN_Q_Q6_K};
    const uint16_t scales[] = {0x7c00, 0xfc00, 0x7e00, 0x7c01, 0x0001, 0x8000};
    for (size_t t = 0; t < COUNT(types); t++)
        for (size_t s = 0; s < COUNT(scales); s++) special_scale(ctx, types[t], scales[s], 7 + s);
    attn_ctx_free(ctx);
}

/* ---- quantize round trips and edge inputs ------------------------------------------------- */
static void test_roundtrip(void) {
    attn_ctx *ctx = tu_ctx(2);
    enum { N = 4096 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    unsigned char *q = malloc(N * 4);
    tu_fill(x, N, 5, -2, 2);
    /* error of one round trip, per block, as a fraction of max|x| (Q4_1, Q5_1: of max - min):
     * Q8_0 d/2 with d = max|x| / 127; Q4_0, Q5_0 |d| (max|x| / 8, / 16: the side opposite the
     * largest value is clipped one step short); Q4_1, Q5_1 d/2 with d = (max - min) / 15, / 31;
     * plus the rounding of d and m to half (2^-11 relative: 2^-11 max|x| here, data in
     * [-2, 2]) */
    const struct { int type; double frac; } cases[] = {
        {ATTN_Q_Q8_0, 0.5 / 127 + 1.0 / 1024}, {ATTN_Q_Q4_0, 1.0 / 8 + 1.0 / 512},
        {ATTN_Q_Q4_1, 0.5 / 15 + 1.0 / 256},   {ATTN_Q_Q5_0, 1.0 / 16 + 1.0 / 512},
        {ATTN_Q_Q5_1, 0.5 / 31 + 1.0 / 256},
    };
    for (size_t c = 0; c < COUNT(cases); c++) {
        int64_t be, bb;
        attn_qtype_block(cases[c].type, &be, &bb);
        TU_STATUS(attn_quantize(ctx, cases[c].type, x, N, q, N * 4), ATTN_OK, ctx);
        TU_STATUS(attn_dequantize(ctx, cases[c].type, q, N * 4, N, y), ATTN_OK, ctx);
        double worst = 0;
        for (int b = 0; b < N / 32; b++) {
            double amax = 0, lo = x[32 * b], hi = x[32 * b];
            for (int j = 0; j < 32; j++) {
                amax = fmax(amax, fabs(x[32 * b + j]));
                lo = fmin(lo, x[32 * b + j]);
                hi = fmax(hi, x[32 * b + j]);
            }
            const double range = cases[c].type == ATTN_Q_Q4_1 || cases[c].type == ATTN_Q_Q5_1
                                     ? hi - lo : amax;
            for (int j = 0; j < 32; j++)
                worst = fmax(worst, fabs(y[32 * b + j] - x[32 * b + j]) / (range * cases[c].frac));
        }
        TU_CHECK(worst <= 1.0, "%s round trip: error %.3g of the bound",
                 attn_qtype_name(cases[c].type), worst);
    }
    /* NaN refused, unless the finite check is off (then it does not crash) */
    x[77] = NAN;
    TU_STATUS(attn_quantize(ctx, ATTN_Q_Q8_0, x, N, q, N * 4), ATTN_E_NONFINITE, ctx);
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.threads = 1;
    p.flags = ATTN_CTX_NO_FINITE_CHECK;
    attn_ctx *nc = NULL;
    if (TU_STATUS(attn_ctx_create(&p, &nc), ATTN_OK, NULL)) {
        for (size_t c = 0; c < COUNT(QZ_TYPES); c++)
            TU_STATUS(attn_quantize(nc, QZ_TYPES[c], x, N, q, N * 4), ATTN_OK, nc);
        attn_ctx_free(nc);
    }
    free(x);
    free(y);
    free(q);
    attn_ctx_free(ctx);
}

/* ---- argument checks ------------------------------------------------------------------------ */
static void test_args(void) {
    attn_ctx *ctx = tu_ctx(1);
    unsigned char buf[1024];
    float f[512];
    memset(buf, 0, sizeof buf);
    TU_STATUS(attn_dequantize(NULL, ATTN_Q_Q8_0, buf, 34, 32, f), ATTN_E_INVALID, NULL);
    TU_STATUS(attn_dequantize(ctx, 5, buf, 34, 32, f), ATTN_E_UNSUPPORTED, ctx);
    TU_STATUS(attn_dequantize(ctx, 99, buf, 34, 32, f), ATTN_E_UNSUPPORTED, ctx);
    TU_STATUS(attn_dequantize(ctx, ATTN_Q_Q8_0, buf, 34, 33, f), ATTN_E_SHAPE, ctx);
    TU_STATUS(attn_dequantize(ctx, ATTN_Q_Q8_0, buf, 34, -32, f), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_dequantize(ctx, ATTN_Q_Q8_0, buf, 33, 32, f), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_dequantize(ctx, ATTN_Q_Q8_0, NULL, 34, 32, f), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_dequantize(ctx, ATTN_Q_Q8_0, buf, 0, 0, NULL), ATTN_OK, ctx);
    TU_STATUS(attn_dequantize(ctx, ATTN_Q_Q8_0, buf, 34, INT64_MAX - 31, f), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_dequantize(ctx, ATTN_Q_Q8_0, buf, sizeof buf, 32, (float *)(void *)(buf + 8)),
              ATTN_E_INVALID, ctx); /* dst overlaps src */
    TU_STATUS(attn_dequantize(ctx, ATTN_Q_Q4_K, buf, 144, 256, f), ATTN_OK, ctx);
    TU_STATUS(attn_dequantize(ctx, ATTN_Q_Q4_K, buf, 143, 256, f), ATTN_E_INVALID, ctx);
    tu_fill(f, 64, 1, -1, 1);
    TU_STATUS(attn_quantize(ctx, ATTN_Q_Q4_K, f, 256, buf, sizeof buf), ATTN_E_UNSUPPORTED, ctx);
    TU_STATUS(attn_quantize(ctx, 5, f, 32, buf, sizeof buf), ATTN_E_UNSUPPORTED, ctx);
    TU_STATUS(attn_quantize(ctx, ATTN_Q_Q8_0, f, 48, buf, sizeof buf), ATTN_E_SHAPE, ctx);
    TU_STATUS(attn_quantize(ctx, ATTN_Q_Q8_0, f, 64, buf, 67), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_quantize(ctx, ATTN_Q_Q8_0, f, 64, buf, 68), ATTN_OK, ctx);
    TU_STATUS(attn_quantize(ctx, ATTN_Q_F16, f, 64, (unsigned char *)f + 4, 128), ATTN_E_INVALID,
              ctx);
    attn_ctx_free(ctx);
}

int main(void) {
    test_half();
    test_fixtures();
    test_iq4_fixtures();
    test_special();
    test_roundtrip();
    test_args();
    return tu_finish("test_quant");
}
