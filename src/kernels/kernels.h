/* The kernel layer: plain C reference kernels (src/kernels/ref) are the definition and the
 * test oracle.  They work on raw pointers with explicit sizes and strides, do no validation
 * (callers in src/ops and src/layers validate) and never allocate: scratch comes from the
 * caller.  Shapes are written next to every pointer. */
#ifndef ATTN_KERNELS_H
#define ATTN_KERNELS_H
#include "internal.h"

/* Philox-4x32-10 block: ctr[4] under key[2] -> out[4]. */
ATTN__HIDDEN void attn__philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* y[M, N] = x[M, K] W[N, K]^T + b[N] (b may be NULL).  Row strides ldx, ldy (elements). */
ATTN__HIDDEN void attn__linear_ref(const float *x, int64_t ldx, const float *W, const float *b,
                                   float *y, int64_t ldy, int64_t M, int64_t K, int64_t N);

/* y[M, N] = act(x[M, N]) row-wise with row strides; may alias. */
ATTN__HIDDEN void attn__act_ref(attn_activation act, const float *x, int64_t ldx, float *y,
                                int64_t ldy, int64_t M, int64_t N);
ATTN__HIDDEN float attn__act1(attn_activation act, float x);

/* y[M, E] = layer_norm(x[M, E]) * w[E] + b[E]; w, b may be NULL; may alias. */
ATTN__HIDDEN void attn__layer_norm_ref(const float *x, int64_t ldx, const float *w,
                                       const float *b, float eps, float *y, int64_t ldy,
                                       int64_t M, int64_t E);

/* Softmax over x[0..n) (stride 1) into y; -inf entries get weight 0; if every entry is -inf
 * the row becomes zeros and the function returns -inf, else the log-sum-exp. */
ATTN__HIDDEN float attn__softmax_row(const float *x, float *y, int64_t n);

/* Scaled dot-product attention, reference.  Strides are in elements, ordered (b, h, row,
 * col).  Two masks (e.g. attn_mask and key_padding_mask) are added to the scaled scores;
 * mask columns j >= mask[m].ncols contribute nothing (columns appended by add_bias_kv). */
typedef struct attn__sdpa_args {
    int64_t B, H, Hkv, L, S, D, Dv;
    const float *q; int64_t qs[4];   /* [B, H, L, D]    */
    const float *k; int64_t ks[4];   /* [B, Hkv, S, D]  */
    const float *v; int64_t vs[4];   /* [B, Hkv, S, Dv] */
    float *o; int64_t os[4];         /* [B, H, L, Dv]   */
    float *w; int64_t ws[4];         /* [B, H, L, S] or NULL */
    float *lse; int64_t ls[3];       /* [B, H, L] or NULL */
    attn__mask4 mask[2];
    int64_t mask_ncols[2];
    attn_causal causal;
    float scale;
    float dropout_p;
    uint64_t seed, offset;
} attn__sdpa_args;

/* scratch: 2*S floats. */
ATTN__HIDDEN void attn__sdpa_ref(const attn__sdpa_args *a, float *scratch);

#endif
