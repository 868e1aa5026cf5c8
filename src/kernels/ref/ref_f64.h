/* Double-precision instances of the reference kernels (ref_impl.h, instantiated in ref.c):
 * the same code as the float kernels of kernels.h with every data pointer double, for
 * finite-difference oracles in the tests.  Masks stay as they are (F32 additive, BOOL/U8);
 * attn__philox and attn_dropout_keep are shared, so dropout draws the same mask.  Not used by
 * the library itself. */
#ifndef ATTN_REF_F64_H
#define ATTN_REF_F64_H
#include "../kernels.h"

ATTN__HIDDEN void attn__linear_ref_f64(const double *x, int64_t ldx, const double *W,
                                       const double *b, double *y, int64_t ldy, int64_t M,
                                       int64_t K, int64_t N);
ATTN__HIDDEN void attn__linear_bwd_ref_f64(const double *x, int64_t ldx, const double *W,
                                           const double *dy, int64_t lddy, double *dx,
                                           int64_t lddx, double *dW, double *db, int64_t M,
                                           int64_t K, int64_t N);

ATTN__HIDDEN double attn__act1_f64(attn_activation act, double x);
ATTN__HIDDEN void attn__act_ref_f64(attn_activation act, const double *x, int64_t ldx,
                                    double *y, int64_t ldy, int64_t M, int64_t N);
ATTN__HIDDEN void attn__act_bwd_ref_f64(attn_activation act, const double *x, const double *dy,
                                        double *dx, int64_t n);

ATTN__HIDDEN void attn__layer_norm_ref_f64(const double *x, int64_t ldx, const double *w,
                                           const double *b, double eps, double *y, int64_t ldy,
                                           int64_t M, int64_t E);
ATTN__HIDDEN void attn__layer_norm_bwd_ref_f64(const double *x, int64_t ldx, const double *w,
                                               double eps, const double *dy, int64_t lddy,
                                               double *dx, int64_t lddx, double *dw,
                                               double *db, int64_t M, int64_t E);

ATTN__HIDDEN double attn__softmax_row_f64(const double *x, double *y, int64_t n);
ATTN__HIDDEN void attn__softmax_row_bwd_f64(const double *y, const double *dy, double *dx,
                                            int64_t n);

/* As attn__sdpa_args / attn__sdpa_grads with double data and scale. */
typedef struct attn__sdpa_args_f64 {
    int64_t B, H, Hkv, L, S, D, Dv;
    const double *q; int64_t qs[4];   /* [B, H, L, D]    */
    const double *k; int64_t ks[4];   /* [B, Hkv, S, D]  */
    const double *v; int64_t vs[4];   /* [B, Hkv, S, Dv] */
    double *o; int64_t os[4];         /* [B, H, L, Dv]   */
    double *w; int64_t ws[4];         /* [B, H, L, S] or NULL */
    double *lse; int64_t ls[3];       /* [B, H, L] or NULL */
    attn__mask4 mask[2];
    int64_t mask_ncols[2];
    attn_causal causal;
    double scale;
    float dropout_p; /* float, so that attn_dropout_keep draws the float kernel's mask */
    uint64_t seed, offset;
    uint64_t drop_base;
    int window;                          /* as attn__sdpa_args */
    int64_t window_left, window_right;
    const double *alibi;                 /* [H] or NULL */
    double softcap;
} attn__sdpa_args_f64;

typedef struct attn__sdpa_grads_f64 {
    const double *dout; int64_t dos[4];
    double *dq; int64_t dqs[4];
    double *dk; int64_t dks[4];
    double *dv; int64_t dvs[4];
    double *dmask; int64_t dms[4];
} attn__sdpa_grads_f64;

ATTN__HIDDEN void attn__sdpa_ref_f64(const attn__sdpa_args_f64 *a, double *scratch);
ATTN__HIDDEN void attn__sdpa_bwd_ref_f64(const attn__sdpa_args_f64 *a,
                                         const attn__sdpa_grads_f64 *g, double *scratch);

ATTN__HIDDEN int64_t attn__simple_attn_ref_f64(const double *X, int64_t B, int64_t T, int64_t E,
                                               attn_normalize norm, double *s, double *w,
                                               double *c);
ATTN__HIDDEN int64_t attn__simple_attn_bwd_ref_f64(const double *X, int64_t B, int64_t T,
                                                   int64_t E, attn_normalize norm,
                                                   const double *dC, double *dX,
                                                   double *scratch);

ATTN__HIDDEN void attn__cross_entropy_row_ref_f64(const double *xr, int64_t t, int64_t C,
                                                  double eps, double inv, double *dr,
                                                  double *nll, double *smooth);
ATTN__HIDDEN double attn__cross_entropy_ref_f64(const double *logits, int64_t ld,
                                                const int64_t *targets, int64_t N, int64_t C,
                                                int64_t ignore_index, double label_smoothing,
                                                double *dlogits, int64_t ldd);
#endif
