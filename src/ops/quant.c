/* Quantized tensors, the public functions (attn.h "Quantized tensors"): argument checks, then
 * the kernels of src/kernels/quant.c (contract in quant.h). */
#include "../kernels/quant.h"

/* Block sizes of a known type, else a message. */
static attn_status block_of(attn_ctx *ctx, const char *fn, int type, int64_t *be, int64_t *bb) {
    if (attn_qtype_block(type, be, bb) != ATTN_OK)
        return attn__fail(ctx, ATTN_E_UNSUPPORTED, "%s: unknown quantized type %d", fn, type);
    return ATTN_OK;
}

/* Bytes of n elements of a type (n a multiple of its block), overflow-checked. */
static attn_status bytes_of(attn_ctx *ctx, const char *fn, const char *what, int type,
                            int64_t n, int64_t be, int64_t bb, size_t *out) {
    ATTN_FAIL_IF(n < 0, ctx, ATTN_E_INVALID, "%s: %s is negative (%lld)", fn, what, (long long)n);
    ATTN_FAIL_IF(n % be != 0, ctx, ATTN_E_SHAPE,
                 "%s: %s (%lld) is not a multiple of %s's block of %lld elements", fn, what,
                 (long long)n, attn_qtype_name(type), (long long)be);
    ATTN_FAIL_IF(!attn__mul_size((size_t)(n / be), (size_t)bb, out), ctx, ATTN_E_OVERFLOW,
                 "%s: %lld elements of %s overflow size_t", fn, (long long)n,
                 attn_qtype_name(type));
    return ATTN_OK;
}

static int overlap(const void *a, size_t na, const void *b, size_t nb) {
    const char *p = a, *q = b;
    return na && nb && p < q + nb && q < p + na;
}

attn_status attn_dequantize(attn_ctx *ctx, int type, const void *src, size_t src_bytes,
                            int64_t n, float *dst) {
    static const char *fn = "attn_dequantize";
    if (!ctx) return ATTN_E_INVALID;
    int64_t be, bb;
    size_t need = 0, nf = 0;
    ATTN_TRY(block_of(ctx, fn, type, &be, &bb));
    ATTN_TRY(bytes_of(ctx, fn, "n", type, n, be, bb, &need));
    if (n == 0) return ATTN_OK;
    ATTN_FAIL_IF(!src || !dst, ctx, ATTN_E_INVALID, "%s: src or dst is NULL", fn);
    ATTN_FAIL_IF(src_bytes < need, ctx, ATTN_E_INVALID,
                 "%s: src holds %zu bytes, %lld elements of %s need %zu", fn, src_bytes,
                 (long long)n, attn_qtype_name(type), need);
    ATTN_FAIL_IF(!attn__mul_size((size_t)n, sizeof(float), &nf), ctx, ATTN_E_OVERFLOW,
                 "%s: %lld floats overflow size_t", fn, (long long)n);
    ATTN_FAIL_IF(overlap(src, need, dst, nf), ctx, ATTN_E_INVALID, "%s: dst overlaps src", fn);
    attn__dequantize(ctx, type, src, n, dst);
    return ATTN_OK;
}

attn_status attn_quantize(attn_ctx *ctx, int type, const float *src, int64_t n, void *dst,
                          size_t dst_bytes) {
    static const char *fn = "attn_quantize";
    if (!ctx) return ATTN_E_INVALID;
    int64_t be, bb;
    size_t need = 0, nf = 0;
    ATTN_TRY(block_of(ctx, fn, type, &be, &bb));
    ATTN_FAIL_IF(!attn__quant_supported(type), ctx, ATTN_E_UNSUPPORTED,
                 "%s: no quantizer for %s (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0)", fn,
                 attn_qtype_name(type));
    ATTN_TRY(bytes_of(ctx, fn, "n", type, n, be, bb, &need));
    if (n == 0) return ATTN_OK;
    ATTN_FAIL_IF(!src || !dst, ctx, ATTN_E_INVALID, "%s: src or dst is NULL", fn);
    ATTN_FAIL_IF(dst_bytes < need, ctx, ATTN_E_INVALID,
                 "%s: dst holds %zu bytes, %lld elements of %s need %zu", fn, dst_bytes,
                 (long long)n, attn_qtype_name(type), need);
    ATTN_FAIL_IF(!attn__mul_size((size_t)n, sizeof(float), &nf), ctx, ATTN_E_OVERFLOW,
                 "%s: %lld floats overflow size_t", fn, (long long)n);
    ATTN_FAIL_IF(overlap(src, nf, dst, need), ctx, ATTN_E_INVALID, "%s: dst overlaps src", fn);
    attn_tensor t = attn_tensor_make((void *)(uintptr_t)src, ATTN_F32, 1, &n);
    ATTN_TRY(attn__check_finite(ctx, &t, "attn_quantize: src", 0));
    attn__quantize(ctx, type, src, n, dst);
    return ATTN_OK;
}

attn_status attn_qlinear(attn_ctx *ctx, int type, const void *w, size_t w_bytes, int64_t N,
                         int64_t K, const float *x, int64_t ldx, int64_t M, const float *bias,
                         float *y, int64_t ldy, attn_qact act) {
    static const char *fn = "attn_qlinear";
    if (!ctx) return ATTN_E_INVALID;
    int64_t be, bb;
    size_t rb = 0, need = 0, xf = 0, yf = 0;
    ATTN_TRY(block_of(ctx, fn, type, &be, &bb));
    ATTN_FAIL_IF(act != ATTN_QACT_DEFAULT && act != ATTN_QACT_F32 && act != ATTN_QACT_Q8 &&
                     act != ATTN_QACT_Q16,
                 ctx,
                 ATTN_E_INVALID, "%s: unknown activation precision %d", fn, (int)act);
    ATTN_FAIL_IF(N < 0 || M < 0, ctx, ATTN_E_INVALID, "%s: negative size (N %lld, M %lld)", fn,
                 (long long)N, (long long)M);
    ATTN_TRY(bytes_of(ctx, fn, "K", type, K, be, bb, &rb));
    ATTN_FAIL_IF(!attn__mul_size(rb, (size_t)N, &need), ctx, ATTN_E_OVERFLOW,
                 "%s: %lld rows of %zu bytes overflow size_t", fn, (long long)N, rb);
    if (M == 0 || N == 0) return ATTN_OK;
    ATTN_FAIL_IF(ldx < K || ldy < N, ctx, ATTN_E_INVALID,
                 "%s: ldx (%lld) below K (%lld) or ldy (%lld) below N (%lld)", fn,
                 (long long)ldx, (long long)K, (long long)ldy, (long long)N);
    ATTN_FAIL_IF(!y || (K > 0 && (!w || !x)), ctx, ATTN_E_INVALID, "%s: w, x or y is NULL", fn);
    ATTN_FAIL_IF(w_bytes < need, ctx, ATTN_E_INVALID,
                 "%s: w holds %zu bytes, %lld rows of %lld %s elements need %zu", fn, w_bytes,
                 (long long)N, (long long)K, attn_qtype_name(type), need);
    /* extents in floats: (M - 1) ld + width, overflow-checked */
    int64_t xe, ye;
    ATTN_FAIL_IF(!attn__mul_i64(M - 1, ldx, &xe) || xe > INT64_MAX - K ||
                     !attn__mul_i64(M - 1, ldy, &ye) || ye > INT64_MAX - N ||
                     !attn__mul_size((size_t)(xe + K), sizeof(float), &xf) ||
                     !attn__mul_size((size_t)(ye + N), sizeof(float), &yf),
                 ctx, ATTN_E_OVERFLOW, "%s: the extent of x or y overflows", fn);
    ATTN_FAIL_IF(overlap(y, yf, x, xf) || overlap(y, yf, w, need) ||
                     overlap(y, yf, bias, bias ? (size_t)N * sizeof(float) : 0),
                 ctx, ATTN_E_INVALID, "%s: y overlaps x, w or bias", fn);
    if (K > 0) {
        int64_t sh[2] = {M, K};
        attn_tensor t = attn_tensor_make((void *)(uintptr_t)x, ATTN_F32, 2, sh);
        t.stride[0] = ldx;
        ATTN_TRY(attn__check_finite(ctx, &t, "attn_qlinear: x", 0));
    }
    if (bias) {
        attn_tensor t = attn_tensor_make((void *)(uintptr_t)bias, ATTN_F32, 1, &N);
        ATTN_TRY(attn__check_finite(ctx, &t, "attn_qlinear: bias", 0));
    }
    attn_status st = attn__qlinear(ctx, type, w, N, K, x, ldx, M, bias, NULL, y, ldy, (int)act);
    ATTN_FAIL_IF(st != ATTN_OK, ctx, st, "%s: the workspace ran out", fn);
    return ATTN_OK;
}
