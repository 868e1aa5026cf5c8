/* Rotary position embedding (HF LlamaRotaryEmbedding, "default" type, with
 * apply_rotary_pos_emb and rotate_half): the tables, the in-place rotation of projected rows,
 * and the public op attn_rope.  Every float operation is HF's, in its order (attn.h); the
 * statements hold one operation each so that no compiler fuses a multiply-add.  Backward: not
 * yet (it is the rotation by -f). */
#include <math.h>

#include "llm.h"

void attn__rope_inv_freq(float theta, int64_t D, float *inv_freq) {
    /* 1.0 / (base ** (torch.arange(0, D, 2, dtype=float) / D)), all in float */
    for (int64_t i = 0; i < D / 2; i++) {
        const float e = (float)(2 * i) / (float)D;
        const float p = (float)pow((double)theta, (double)e);
        inv_freq[i] = 1.0f / p;
    }
}

void attn__rope_table(const float *inv_freq, int64_t D, const int64_t *pos, int64_t p0,
                      int64_t n, float *cs, float *sn) {
    const int64_t h = D / 2;
    for (int64_t r = 0; r < n; r++) {
        const float p = (float)(pos ? pos[r] : p0 + r);
        for (int64_t i = 0; i < h; i++) {
            const float f = p * inv_freq[i];
            cs[r * h + i] = (float)cos((double)f);
            sn[r * h + i] = (float)sin((double)f);
        }
    }
}

void attn__rope_rows(float *x, int64_t ldx, int64_t M, int64_t nh, int64_t D, const float *cs,
                     const float *sn, int interleaved) {
    const int64_t h = D / 2;
    /* element i of a pair is at lo + i*step, its partner at hi + i*step */
    const int64_t step = interleaved ? 2 : 1, off = interleaved ? 1 : h;
    for (int64_t r = 0; r < M; r++) {
        const float *c = cs + r * h, *s = sn + r * h;
        for (int64_t k = 0; k < nh; k++) {
            float *lo = x + r * ldx + k * D, *hi = lo + off;
            for (int64_t i = 0; i < h; i++) {
                const float a = lo[i * step], b = hi[i * step];
                const float ac = a * c[i], bs = b * s[i], bc = b * c[i], as = a * s[i];
                lo[i * step] = ac - bs; /* q * cos + (-q_hi) * sin */
                hi[i * step] = bc + as; /* q_hi * cos + q_lo * sin */
            }
        }
    }
}

void attn__rope_rows_bwd(float *d, int64_t ldd, int64_t M, int64_t nh, int64_t D,
                         const float *cs, const float *sn, int interleaved) {
    const int64_t h = D / 2;
    const int64_t step = interleaved ? 2 : 1, off = interleaved ? 1 : h;
    for (int64_t r = 0; r < M; r++) {
        const float *c = cs + r * h, *s = sn + r * h;
        for (int64_t k = 0; k < nh; k++) {
            float *lo = d + r * ldd + k * D, *hi = lo + off;
            for (int64_t i = 0; i < h; i++) {
                const float a = lo[i * step], b = hi[i * step];
                const float ac = a * c[i], bs = b * s[i], bc = b * c[i], as = a * s[i];
                lo[i * step] = ac + bs;
                hi[i * step] = bc - as;
            }
        }
    }
}

/* ---- the public ops ------------------------------------------------------------------------ */
#define ROPE_MAX_POS 16777216 /* 2^24: every position exact in float */

/* attn_rope_ex (bwd 0: x -> out) and attn_rope_backward (bwd 1: dout -> dx), named fn. */
static attn_status rope_op(attn_ctx *ctx, const char *fn, int bwd, const attn_tensor *x,
                           const attn_tensor *positions, float theta, unsigned flags,
                           attn_tensor *out) {
    if (!ctx) return ATTN_E_INVALID;
    const char *xn = bwd ? "rope_backward dout" : "rope input";
    const char *on = bwd ? "rope_backward dx" : "rope output";
    ATTN_TRY(attn__check(ctx, x, xn, ATTN_F32, 4, 4));
    ATTN_TRY(attn__check(ctx, out, on, ATTN_F32, 4, 4));
    ATTN_TRY(attn__check_shape(ctx, out, on, 4, x->shape));
    ATTN_FAIL_IF(flags & ~(unsigned)ATTN_ROPE_INTERLEAVED, ctx, ATTN_E_INVALID,
                 "%s: unknown flags 0x%x", fn, flags & ~(unsigned)ATTN_ROPE_INTERLEAVED);
    const int il = (flags & ATTN_ROPE_INTERLEAVED) != 0;
    const int64_t B = x->shape[0], H = x->shape[1], T = x->shape[2], D = x->shape[3];
    ATTN_FAIL_IF(D % 2, ctx, ATTN_E_SHAPE, "%s: the head dimension %lld is odd", fn,
                 (long long)D);
    ATTN_FAIL_IF(!(theta >= 1.0f) || !isfinite(theta), ctx, ATTN_E_INVALID,
                 "%s: theta must be at least 1 and finite, got %g", fn, (double)theta);
    ATTN_FAIL_IF(!positions || !positions->data, ctx, ATTN_E_INVALID,
                 "%s: positions are missing", fn);
    ATTN_FAIL_IF(positions->dtype != ATTN_I32 && positions->dtype != ATTN_I64, ctx,
                 ATTN_E_DTYPE, "%s: positions must be I32 or I64", fn);
    ATTN_TRY(attn__check(ctx, positions, "rope positions", positions->dtype, 1, 2));
    const int pb = positions->ndim == 2;
    {
        const int64_t want[2] = {B, T};
        ATTN_TRY(attn__check_shape(ctx, positions, "rope positions", positions->ndim,
                                   pb ? want : want + 1));
        attn__arg o[] = {{out, bwd ? "dx" : "out", 0}},
                  in[] = {{x, bwd ? "dout" : "x", 1u}, {positions, "positions", 0}};
        ATTN_TRY(attn__check_outputs(ctx, fn, o, 1, in, 2));
    }
    ATTN_TRY(attn__check_finite(ctx, x, xn, 0));
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    float *inv, *cs, *sn, *row;
    int64_t *pos;
    const int64_t h = D / 2, PB = pb ? B : 1;
    ATTN_TRYG(attn__ws_f32(ctx, &inv, h, 1, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &cs, PB * T, h, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &sn, PB * T, h, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &row, D, 1, 1, 1));
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)(PB * T), sizeof *pos, (void **)&pos));
    for (int64_t b = 0; b < PB; b++)
        for (int64_t t = 0; t < T; t++) {
            const int64_t o = (pb ? b * positions->stride[0] : 0) +
                              t * positions->stride[positions->ndim - 1];
            const int64_t p = positions->dtype == ATTN_I64 ? ((const int64_t *)positions->data)[o]
                                                           : ((const int32_t *)positions->data)[o];
            if (p < 0 || p > ROPE_MAX_POS) {
                st = attn__fail(ctx, ATTN_E_INVALID, "%s: position %lld at [%lld, %lld] "
                                "is outside [0, 2^24]", fn, (long long)p, (long long)b,
                                (long long)t);
                goto done;
            }
            pos[b * T + t] = p;
        }
    attn__rope_inv_freq(theta, D, inv);
    attn__rope_table(inv, D, pos, 0, PB * T, cs, sn);
    const float *xd = x->data;
    float *od = out->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < H; k++)
            for (int64_t t = 0; t < T; t++) {
                const int64_t xo = b * x->stride[0] + k * x->stride[1] + t * x->stride[2];
                const int64_t oo = b * out->stride[0] + k * out->stride[1] + t * out->stride[2];
                for (int64_t d = 0; d < D; d++) row[d] = xd[xo + d * x->stride[3]];
                const int64_t tr = (pb ? b * T : 0) + t;
                if (bwd) attn__rope_rows_bwd(row, D, 1, 1, D, cs + tr * h, sn + tr * h, il);
                else attn__rope_rows(row, D, 1, 1, D, cs + tr * h, sn + tr * h, il);
                for (int64_t d = 0; d < D; d++) od[oo + d * out->stride[3]] = row[d];
            }
    st = ATTN_OK;
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_rope_ex(attn_ctx *ctx, const attn_tensor *x, const attn_tensor *positions,
                         float theta, unsigned flags, attn_tensor *out) {
    return rope_op(ctx, "attn_rope_ex", 0, x, positions, theta, flags, out);
}

attn_status attn_rope(attn_ctx *ctx, const attn_tensor *x, const attn_tensor *positions,
                      float theta, attn_tensor *out) {
    return rope_op(ctx, "attn_rope", 0, x, positions, theta, 0, out);
}

attn_status attn_rope_backward(attn_ctx *ctx, const attn_tensor *dout,
                               const attn_tensor *positions, float theta, unsigned flags,
                               attn_tensor *dx) {
    return rope_op(ctx, "attn_rope_backward", 1, dout, positions, theta, flags, dx);
}

/* The global layers' RoPE scaling (attn_llm_config.rope_scaling) applied to inv[D/2]: in float,
 * in the order of transformers' float32 tensor arithmetic for "linear" and "llama3", and as
 * llama.cpp divides by a file's factors. */
static void rope_scale(const attn_llm_config *c, const float *div, float *inv) {
    const int64_t n = c->head_dim / 2;
    const float f = (float)c->rope_factor;
    for (int64_t i = 0; i < n; i++) {
        if (c->rope_scaling == 1) {
            inv[i] = inv[i] / f;
        } else if (c->rope_scaling == 3) {
            inv[i] = inv[i] / div[i];
        } else if (c->rope_scaling == 2) {
            /* PyTorch's scalar / tensor is reciprocal(tensor) * scalar */
            const double L = (double)c->rope_original_context, lo = c->rope_low_freq_factor,
                         hi = c->rope_high_freq_factor;
            const float w = 1.0f / inv[i] * (float)6.283185307179586; /* 2 pi */
            if (w > (float)(L / lo)) {
                inv[i] = inv[i] / f;
            } else if (!(w < (float)(L / hi))) {
                const float s = (1.0f / w * (float)L - (float)lo) / (float)(hi - lo);
                inv[i] = (1 - s) * inv[i] / f + s * inv[i];
            }
        }
    }
}

void attn__llm_inv_freq(const attn_llm_config *c, const float *div, float *inv, float *inv_local) {
    attn__rope_inv_freq((float)c->rope_theta, c->head_dim, inv);
    rope_scale(c, div, inv);
    if (inv_local)
        attn__rope_inv_freq((float)c->rope_theta_local, c->head_dim, inv_local);
}
