/* The kernel layer: plain C reference kernels (src/kernels/ref) are the definition and the
 * test oracle.  They work on raw pointers with explicit sizes and strides, do no validation
 * (callers in src/ops and src/layers validate) and never allocate: scratch comes from the
 * caller.  Shapes are written next to every pointer. */
#ifndef ATTN_KERNELS_H
#define ATTN_KERNELS_H
#include "bf16.h"
#include "internal.h"

/* Dropout multipliers of n consecutive elements of the attn_dropout_keep stream starting at
 * index idx: out[j] = keep(idx + j) ? scale : 0 (the attn__dropout_row_fn of internal.h; a
 * context calls ctx->kern.dropout_row).  Bit-identical to attn_dropout_keep in every version
 * (src/kernels/dropout.c): the plain C one, one Philox block at a time, and the one of the
 * AVX-512 set, eight blocks at a time where the build compiled it (else the plain C one). */
ATTN__HIDDEN void attn__dropout_row_c(uint64_t seed, uint64_t offset, uint64_t idx, int64_t n,
                                      float p, float scale, float *out);
ATTN__HIDDEN void attn__dropout_row_simd(uint64_t seed, uint64_t offset, uint64_t idx,
                                         int64_t n, float p, float scale, float *out);

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
    uint64_t drop_base;  /* dropout index of element (0,0,0,0); element (b,h,i,j) draws index
                            drop_base + ((b*H + h)*L + i)*S + j (packed sequences offset it) */
    /* Score features of attn_sdpa_options; a zeroed struct has all three off.  Per element:
     *   x = scale q.k;  x = softcap tanh(x / softcap) if softcap > 0;
     *   x += -alibi[h] |i + S - L - j| if alibi;  x += masks;  -inf outside the causal mask
     *   and, when window is set, outside i + S - L - window_left <= j <= i + S - L +
     *   window_right (a negative side is unlimited).  attn__sdpa_range gives the visible keys. */
    int window;                          /* 0: no sliding window (window_left/right ignored) */
    int64_t window_left, window_right;
    const float *alibi;                  /* [H] ALiBi slopes or NULL */
    float softcap;                       /* 0: off */
    int rows; /* 1: the forward runs the row kernels (sdpa_fast.c) even without a weights
                 output: a forward that wrote weights, recomputed, gives the same bits */
    int fused; /* 1: never the split-KV decode kernels, however few the queries: a prompt's
                  last row alone gets the bits it gets among the prompt's rows */
} attn__sdpa_args;

/* The keys query row i may see under the causal mode and the sliding window (masks aside):
 * [*lo, *hi] within [0, S); empty when *lo > *hi.  Shared by every SDPA kernel so that they
 * agree on the window edges.  The window is aligned bottom-right, like
 * ATTN_CAUSAL_BOTTOM_RIGHT: row i is centred on key i + S - L. */
static inline void attn__sdpa_range(attn_causal causal, int window, int64_t wl, int64_t wr,
                                    int64_t L, int64_t S, int64_t i, int64_t *lo, int64_t *hi) {
    int64_t l = 0, h = S - 1, off = S - L;
    if (causal == ATTN_CAUSAL_TOP_LEFT) h = i;
    else if (causal == ATTN_CAUSAL_BOTTOM_RIGHT) h = i + off;
    /* a side wider than S + L reaches past every key: unlimited (and no overflow) */
    if (window && wl >= 0 && wl < S + L && i + off - wl > l) l = i + off - wl;
    if (window && wr >= 0 && wr < S + L && i + off + wr < h) h = i + off + wr;
    *lo = l;
    *hi = h < S - 1 ? h : S - 1;
}

/* The soft cap (with its derivative into dt when not NULL), ALiBi and masks of row i of head
 * (b, h) on the scores s[lo..hi] (scale q.k there, -inf elsewhere) (sdpa_fast.c). */
ATTN__HIDDEN void attn__sdpa_row_features(const attn__sdpa_args *a, int64_t b, int64_t h,
                                          int64_t i, int64_t lo, int64_t hi, float *s,
                                          float *dt);

/* scratch: 2*S floats. */
ATTN__HIDDEN void attn__sdpa_ref(const attn__sdpa_args *a, float *scratch);

/* ---- backward (reference) ------------------------------------------------------------
 * Parameter gradients (dW, db, dw, dmask) ACCUMULATE (+=); input gradients (dx, dq, dk, dv)
 * are OVERWRITTEN.  Any gradient pointer may be NULL (not wanted). */

/* forward: y[M, N] = x[M, K] W[N, K]^T + b.  dx[M, K] = dy W; dW += dy^T x; db += sum_m dy. */
ATTN__HIDDEN void attn__linear_bwd_ref(const float *x, int64_t ldx, const float *W,
                                       const float *dy, int64_t lddy, float *dx, int64_t lddx,
                                       float *dW, float *db, int64_t M, int64_t K, int64_t N);
/* forward: y = act(x) on n contiguous elements.  dx = act'(x) * dy; dx may alias dy. */
ATTN__HIDDEN void attn__act_bwd_ref(attn_activation act, const float *x, const float *dy,
                                    float *dx, int64_t n);
/* forward: y = layer_norm(x[M, E]) * w + b.  dx (may alias dy); dw, db accumulate. */
ATTN__HIDDEN void attn__layer_norm_bwd_ref(const float *x, int64_t ldx, const float *w,
                                           float eps, const float *dy, int64_t lddy, float *dx,
                                           int64_t lddx, float *dw, float *db, int64_t M,
                                           int64_t E);
/* The same two backwards on the context's kernels and threads (src/kernels/ew_bwd.c): the
 * float row kernels of ctx->kern.ew where it has them (error against the references: a few
 * float ulps of the result's scale), else the references themselves.  Same bits for any thread
 * count.  attn__layer_norm_bwd fails only when its workspace cannot be allocated. */
ATTN__HIDDEN attn_status attn__layer_norm_bwd(attn_ctx *ctx, const float *x, int64_t ldx,
                                              const float *w, float eps, const float *dy,
                                              int64_t lddy, float *dx, int64_t lddx, float *dw,
                                              float *db, int64_t M, int64_t E);
ATTN__HIDDEN void attn__act_bwd(attn_ctx *ctx, attn_activation act, const float *x,
                                const float *dy, float *dx, int64_t n);
/* forward: y = softmax(x[n]).  dx = y * (dy - sum(dy * y)); dx may alias dy. */
ATTN__HIDDEN void attn__softmax_row_bwd(const float *y, const float *dy, float *dx, int64_t n);

typedef struct attn__sdpa_grads {
    const float *dout; int64_t dos[4]; /* [B, H, L, Dv] */
    float *dq; int64_t dqs[4];         /* [B, H, L, D]    overwritten */
    float *dk; int64_t dks[4];         /* [B, Hkv, S, D]  overwritten, GQA heads summed */
    float *dv; int64_t dvs[4];         /* [B, Hkv, S, Dv] overwritten */
    float *dmask; int64_t dms[4];      /* gradient of mask[0] when ATTN_MASK_ADD: accumulates,
                                          strides 0 on broadcast dims */
} attn__sdpa_grads;
/* Recomputes the weights (same dropout stream as the forward).  scratch: 4*S floats. */
ATTN__HIDDEN void attn__sdpa_bwd_ref(const attn__sdpa_args *a, const attn__sdpa_grads *g,
                                     float *scratch);

/* Simplified self-attention (seed 001) on contiguous X [B, T, E]: s = X X^T, w = normalize(s)
 * (each [B, T, T]), c = w X [B, T, E] (c may be NULL).  The backward recomputes s and w and
 * OVERWRITES dX [B, T, E] from dC; scratch: 3*T*T floats.  Both return -1, or the row whose
 * scores sum to zero under ATTN_NORM_SUM (then the outputs are incomplete). */
ATTN__HIDDEN int64_t attn__simple_attn_ref(const float *X, int64_t B, int64_t T, int64_t E,
                                           attn_normalize norm, float *s, float *w, float *c);
ATTN__HIDDEN int64_t attn__simple_attn_bwd_ref(const float *X, int64_t B, int64_t T, int64_t E,
                                               attn_normalize norm, const float *dC,
                                               float *dX, float *scratch);
/* Cross-entropy of logits [N, C] (row stride ld) against targets [N] (each in [0, C) or
 * ignore_index), PyTorch's mean reduction and label smoothing; returns the loss (0 when every
 * target is ignored).  dlogits [N, C] (row stride ldd; may be NULL) is OVERWRITTEN with the
 * gradient of that mean.  Evaluated in double. */
ATTN__HIDDEN float attn__cross_entropy_ref(const float *logits, int64_t ld,
                                           const int64_t *targets, int64_t N, int64_t C,
                                           int64_t ignore_index, float label_smoothing,
                                           float *dlogits, int64_t ldd);
/* Its row: a target t not ignored; dr (may be NULL) = the row's gradient times inv, and the
 * row's terms added to *nll (lse - x_t) and *smooth (C lse - sum_c x_c). */
ATTN__HIDDEN void attn__cross_entropy_row_ref(const float *xr, int64_t t, int64_t C, double eps,
                                              double inv, float *dr, double *nll,
                                              double *smooth);
/* The row kernel of a context (ctx->kern.ce_row): attn__cross_entropy_row_ref (in double: the
 * oracle), or on AVX-512 attn__ce_row_avx512 (x86_avx512/loss_avx512.c), on NEON
 * attn__ce_row_neon (arm_neon/loss_neon.c): exponentials in float
 * by a polynomial, sums in double; the row's terms within 1e-6 of the reference's relative to
 * |lse| + 1, each gradient value within 4e-6 relative + 1e-7 absolute of it (times inv);
 * rows whose maximum is not finite go to the reference. */
typedef void (*attn__ce_row_fn)(const float *xr, int64_t t, int64_t C, double eps, double inv,
                                float *dr, double *nll, double *smooth);
/* NULL when not compiled with AVX-512. */
ATTN__HIDDEN attn__ce_row_fn attn__ce_row_avx512(void);
/* NULL off AArch64 (arm_neon/loss_neon.c: the AVX-512 one's method and bounds on 4 lanes). */
ATTN__HIDDEN attn__ce_row_fn attn__ce_row_neon(void);
/* attn__cross_entropy_ref's loss and gradient with the rows spread over the context's threads
 * (src/kernels/loss.c), each row by ctx->kern.ce_row: bit for bit the reference's on the plain
 * C kernels, within the row kernel's bounds on the others, and the same bits for every thread
 * count.  ATTN_E_NOMEM when the per-row terms find no workspace. */
ATTN__HIDDEN attn_status attn__cross_entropy(attn_ctx *ctx, const float *logits, int64_t ld,
                                             const int64_t *targets, int64_t N, int64_t C,
                                             int64_t ignore_index, float label_smoothing,
                                             float *dlogits, int64_t ldd, float *loss);

/* ---- SDPA for the ops and the layers: the contracts of attn__sdpa_ref / attn__sdpa_bwd_ref
 * (and attn__sdpa_bf16_ref for bf16 storage, flash.h), parallel over heads, deterministic for
 * every thread count (src/kernels/sdpa_fast.c).  Which kernel runs is decided in one place,
 * attn__sdpa_path (forward, fp32 and bf16 storage) and attn__sdpa_bwd_path (backward):
 *   DECODE  the split-KV decode kernels (decode.h) where attn__decode_eligible: a few queries
 *           over many keys, no weights output, no dropout, not under ATTN_DECODE=0;
 *   FLASH   the fused kernels (flash.h, tiles, no L x S matrix): bf16 storage always, fp32
 *           without a weights output from 4 x 4 scores on (forward), without a mask gradient
 *           from 12 x 12 on (backward; sdpa_fast.c has the measurements);
 *   ROWS    the row kernels of sdpa_fast.c (one row of scores at a time): smaller problems
 *           and the weights output;
 *   REF     the reference: views whose last dimension is strided, and the mask gradient. */
typedef enum attn__sdpa_kernel {
    ATTN__SDPA_DECODE,
    ATTN__SDPA_FLASH,
    ATTN__SDPA_ROWS,
    ATTN__SDPA_REF
} attn__sdpa_kernel;
ATTN__HIDDEN attn__sdpa_kernel attn__sdpa_path(const attn_ctx *ctx, const attn__sdpa_args *a,
                                               int bf16);
ATTN__HIDDEN attn__sdpa_kernel attn__sdpa_bwd_path(const attn__sdpa_args *a,
                                                   const attn__sdpa_grads *g);
ATTN__HIDDEN attn_status attn__sdpa(attn_ctx *ctx, const attn__sdpa_args *a);
/* The forward with q, k, v in bf16 storage (a->q, a->k, a->v ignored; the arguments of
 * attn__flash_fwd_bf16, flash.h): no weights output. */
ATTN__HIDDEN attn_status attn__sdpa_bf16(attn_ctx *ctx, const attn__sdpa_args *a,
                                         const attn__bf16 *q, const attn__bf16 *k,
                                         const attn__bf16 *v);
ATTN__HIDDEN attn_status attn__sdpa_bwd(attn_ctx *ctx, const attn__sdpa_args *a,
                                        const attn__sdpa_grads *g);

/* A row epilogue of a GEMM: fn(arg, y, ldy, i0, rows) transforms rows [i0, i0 + rows) of the
 * result (y points at row i0) in place once they are final: a bias, a GELU, a residual add and
 * layer norm.  It must treat each row on its own (nothing read from other rows), so that
 * running it on each row micro-panel as the GEMM finishes it, while the rows are in cache, or
 * in a pass afterwards gives the same bits; the GEMM picks either.  It runs on the pool's
 * threads and must not use the context's workspace. */
typedef struct attn__row_epi {
    void (*fn)(void *arg, float *y, int64_t ldy, int64_t i0, int64_t rows);
    void *arg;
} attn__row_epi;

/* The activation backward as a row epilogue: rows i0.. of y (the gradient after the
 * activation, in place) times act'(x) at the same rows of x [.., n] (row stride ldx): the bits
 * of attn__act_bwd on those elements.  attn__act_bwd_epi fills *st and returns the epilogue. */
typedef struct attn__act_bwd_state {
    void *fn; /* the context's attn__act_bwd_fn, or NULL: the reference */
    attn_activation act;
    const float *x;
    int64_t ldx, n;
} attn__act_bwd_state;
ATTN__HIDDEN attn__row_epi attn__act_bwd_epi(attn_ctx *ctx, attn_activation act, const float *x,
                                             int64_t ldx, int64_t n, attn__act_bwd_state *st);
/* A residual as a row epilogue: rows i0.. of y [.., n] += the same rows of r (row stride ldr),
 * each sum the float y + r (= r + y: a separate add's bits).  attn__res_epi fills *st. */
typedef struct attn__res_state {
    const void *k; /* the context's ew table */
    const float *r;
    int64_t ldr, n;
} attn__res_state;
ATTN__HIDDEN attn__row_epi attn__res_epi(attn_ctx *ctx, const float *r, int64_t ldr, int64_t n,
                                         attn__res_state *st);
/* y[i] = a[i] + b[i] for i < n over the context's threads: the residual stream's gradient
 * sums, with the bits of the plain loop.  In place (y is a or b) it is one pass; otherwise a is
 * copied into y first. */
ATTN__HIDDEN void attn__add_f32(attn_ctx *ctx, const float *a, const float *b, float *y,
                                int64_t n);

/* ---- linear on the fast GEMM (same contracts as attn__linear_ref / attn__linear_bwd_ref) --- */
ATTN__HIDDEN attn_status attn__linear(attn_ctx *ctx, const float *x, int64_t ldx, const float *W,
                                      const float *b, float *y, int64_t ldy, int64_t M,
                                      int64_t K, int64_t N);
/* y = x W^T, then epi (may be NULL) on its rows: the bias, or whatever follows the product. */
ATTN__HIDDEN attn_status attn__linear_epi(attn_ctx *ctx, const float *x, int64_t ldx,
                                          const float *W, const attn__row_epi *epi, float *y,
                                          int64_t ldy, int64_t M, int64_t K, int64_t N);
ATTN__HIDDEN attn_status attn__linear_bwd(attn_ctx *ctx, const float *x, int64_t ldx,
                                          const float *W, const float *dy, int64_t lddy,
                                          float *dx, int64_t lddx, float *dW, float *db,
                                          int64_t M, int64_t K, int64_t N);
/* The same with dx_epi (NULL, or a row epilogue) run on dx's rows once they are final. */
ATTN__HIDDEN attn_status attn__linear_bwd_epi(attn_ctx *ctx, const float *x, int64_t ldx,
                                              const float *W, const float *dy, int64_t lddy,
                                              float *dx, int64_t lddx,
                                              const attn__row_epi *dx_epi, float *dW, float *db,
                                              int64_t M, int64_t K, int64_t N);
/* attn__linear_bwd with dx ACCUMULATED (dx += dy W): the input gradient of several products
 * of the same x (the Llama blocks' q/k/v and gate/up projections). */
ATTN__HIDDEN attn_status attn__linear_bwd_acc(attn_ctx *ctx, const float *x, int64_t ldx,
                                              const float *W, const float *dy, int64_t lddy,
                                              float *dx, int64_t lddx, float *dW, float *db,
                                              int64_t M, int64_t K, int64_t N);

/* ---- GEMM (fast path, chosen at run time; falls back to a plain C kernel) ---------------
 * C[M, N] = alpha * op(A) op(B) + beta * C, row-major.  op(A) is A [M, K] (row stride lda) or,
 * with transA, A^T where A is stored [K, M]; likewise B ([K, N] or, with transB, [N, K]).
 * beta = 0 never reads C.  Uses the context's threads; the result is bit-identical for every
 * thread count (threads split M and N, never K).  Fails only on workspace exhaustion. */
ATTN__HIDDEN attn_status attn__gemm(attn_ctx *ctx, int transA, int transB, int64_t M, int64_t N,
                                    int64_t K, float alpha, const float *A, int64_t lda,
                                    const float *B, int64_t ldb, float beta, float *C,
                                    int64_t ldc);
/* attn__gemm, then epi (may be NULL) on the rows of C. */
ATTN__HIDDEN attn_status attn__gemm_epi(attn_ctx *ctx, int transA, int transB, int64_t M,
                                        int64_t N, int64_t K, float alpha, const float *A,
                                        int64_t lda, const float *B, int64_t ldb, float beta,
                                        float *C, int64_t ldc, const attn__row_epi *epi);

/* B packed once: a weight W [N, K] (C = A W^T) as the float GEMM's B micro-panels of the kernel
 * set kr (gemm.h) in the order attn__gemm_epi packs them per call (blocks of nc rows of W, each
 * K chunk of kc steps of a block as its panels of nr, zeros past N).  attn__gemm_packed on a
 * context whose set is kr gives the same bits as attn__gemm_epi(ctx, 0, 1, ...) on W, for
 * every thread count, without packing B per call (an inference weight).
 * Floats of the packed form: ceil(N / nr) nr K; 0 for an empty W, -1 when that overflows. */
struct attn__gemm_kernel;
ATTN__HIDDEN int64_t attn__gemm_weight_floats(const struct attn__gemm_kernel *kr, int64_t N,
                                              int64_t K);
ATTN__HIDDEN void attn__gemm_pack_weight(const struct attn__gemm_kernel *kr, const float *W,
                                         int64_t N, int64_t K, float *dst);
/* C[M, N] = A[M, K] W^T + beta C, then epi, with bw = W packed for ctx->kern.gemm (the caller
 * checks that the set is the one it was packed for). */
ATTN__HIDDEN attn_status attn__gemm_packed(attn_ctx *ctx, int64_t M, int64_t N, int64_t K,
                                           const float *A, int64_t lda, const float *bw,
                                           float beta, float *C, int64_t ldc,
                                           const attn__row_epi *epi);

#endif
