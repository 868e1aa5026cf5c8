/* Bodies of the reference kernels, included twice by ref.c: once with R = float (the names
 * declared in kernels.h, used by the library) and once with R = double (suffix _f64, declared
 * in ref_f64.h; the finite-difference oracle of the tests).  No include guard on purpose.
 *
 * The including file defines:
 *   R            the real type
 *   RF(name)     the function name with its suffix
 *   R_EXP(x)     exp of an R (expf / exp)
 *   R_TANH(x)    tanh of an R (tanhf / tanh)
 *   SDPA_ARGS    attn__sdpa_args / attn__sdpa_args_f64
 *   SDPA_GRADS   attn__sdpa_grads / attn__sdpa_grads_f64
 *
 * Written so that with R = float every forward expression is the one the library has always
 * evaluated (the fixtures compare those results against PyTorch).  Dot products and sums
 * accumulate in double in both instances. */

/* ---- linear ------------------------------------------------------------------------- */
void RF(attn__linear_ref)(const R *x, int64_t ldx, const R *W, const R *b, R *y, int64_t ldy,
                          int64_t M, int64_t K, int64_t N) {
    for (int64_t m = 0; m < M; m++) {
        const R *xr = x + m * ldx;
        R *yr = y + m * ldy;
        for (int64_t n = 0; n < N; n++) {
            const R *wr = W + n * K;
            double acc = b ? (double)b[n] : 0.0;
            for (int64_t k = 0; k < K; k++) acc += (double)xr[k] * (double)wr[k];
            yr[n] = (R)acc;
        }
    }
}

/* dW and db first: they read x, so dx may then overwrite x. */
void RF(attn__linear_bwd_ref)(const R *x, int64_t ldx, const R *W, const R *dy, int64_t lddy,
                              R *dx, int64_t lddx, R *dW, R *db, int64_t M, int64_t K,
                              int64_t N) {
    if (dW)
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < K; k++) {
                double acc = 0;
                for (int64_t m = 0; m < M; m++)
                    acc += (double)dy[m * lddy + n] * (double)x[m * ldx + k];
                dW[n * K + k] = (R)((double)dW[n * K + k] + acc);
            }
    if (db)
        for (int64_t n = 0; n < N; n++) {
            double acc = 0;
            for (int64_t m = 0; m < M; m++) acc += (double)dy[m * lddy + n];
            db[n] = (R)((double)db[n] + acc);
        }
    if (dx)
        for (int64_t m = 0; m < M; m++) {
            const R *dyr = dy + m * lddy;
            for (int64_t k = 0; k < K; k++) {
                double acc = 0;
                for (int64_t n = 0; n < N; n++) acc += (double)dyr[n] * (double)W[n * K + k];
                dx[m * lddx + k] = (R)acc;
            }
        }
}

/* ---- activations --------------------------------------------------------------------- */
R RF(attn__act1)(attn_activation act, R x) {
    switch (act) {
    case ATTN_ACT_RELU: return x > 0 ? x : (R)0;
    case ATTN_ACT_GELU:
        return (R)(0.5 * (double)x * (1.0 + erf((double)x * 0.70710678118654752440)));
    case ATTN_ACT_GELU_TANH: {
        if (sizeof(R) == sizeof(float)) /* the library's one float tanh-GELU (ew.h) */
            return (R)attn__gelu_tanh_as((float)x);
        double xd = x, inner = 0.7978845608028654 * (xd + 0.044715 * xd * xd * xd);
        return (R)(0.5 * xd * (1.0 + tanh(inner)));
    }
    case ATTN_ACT_TANH: return R_TANH(x);
    }
    return x;
}

void RF(attn__act_ref)(attn_activation act, const R *x, int64_t ldx, R *y, int64_t ldy,
                       int64_t M, int64_t N) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) y[m * ldy + n] = RF(attn__act1)(act, x[m * ldx + n]);
}

/* Derivatives as PyTorch's backward kernels (evaluated in double):
 *  relu       dy where x > 0, else 0 (threshold_backward)
 *  gelu       Phi(x) + x phi(x)
 *  gelu tanh  0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2),
 *             t = tanh(sqrt(2/pi) (x + 0.044715 x^3))
 *  tanh       1 - y^2 with y = tanh(x) as the forward computes it */
void RF(attn__act_bwd_ref)(attn_activation act, const R *x, const R *dy, R *dx, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double xd = (double)x[i], d = 1.0;
        switch (act) {
        case ATTN_ACT_RELU: d = x[i] > 0 ? 1.0 : 0.0; break;
        case ATTN_ACT_GELU: {
            double cdf = 0.5 * (1.0 + erf(xd * 0.70710678118654752440));
            double pdf = exp(-0.5 * xd * xd) * 0.39894228040143267794; /* 1/sqrt(2 pi) */
            d = cdf + xd * pdf;
            break;
        }
        case ATTN_ACT_GELU_TANH: {
            const double kBeta = 0.7978845608028654, kKappa = 0.044715;
            double x_sq = xd * xd, x_cube = x_sq * xd;
            double inner = kBeta * (xd + kKappa * x_cube), t = tanh(inner);
            double left = 0.5 * xd, right = 1.0 + t;
            double left_derivative = 0.5 * right;
            double tanh_derivative = 1.0 - t * t;
            double inner_derivative = kBeta * (1.0 + 3.0 * kKappa * x_sq);
            double right_derivative = left * tanh_derivative * inner_derivative;
            d = left_derivative + right_derivative;
            break;
        }
        case ATTN_ACT_TANH: {
            double y = (double)R_TANH(x[i]);
            d = 1.0 - y * y;
            break;
        }
        }
        dx[i] = act == ATTN_ACT_RELU ? (d != 0.0 ? dy[i] : (R)0) : (R)(d * (double)dy[i]);
    }
}

/* ---- layer norm ---------------------------------------------------------------------- */
/* mean and 1/sqrt(biased variance + eps) of one row, as the forward computes them */
static void RF(attn__ln_stats)(const R *xr, int64_t E, R eps, double *mean_out,
                               double *rstd_out) {
    double mean = 0, var = 0;
    for (int64_t e = 0; e < E; e++) mean += xr[e];
    mean /= (double)E;
    for (int64_t e = 0; e < E; e++) var += ((double)xr[e] - mean) * ((double)xr[e] - mean);
    var /= (double)E; /* biased, as PyTorch */
    *mean_out = mean;
    *rstd_out = 1.0 / sqrt(var + (double)eps);
}

void RF(attn__layer_norm_ref)(const R *x, int64_t ldx, const R *w, const R *b, R eps, R *y,
                              int64_t ldy, int64_t M, int64_t E) {
    for (int64_t m = 0; m < M; m++) {
        const R *xr = x + m * ldx;
        R *yr = y + m * ldy;
        double mean, rstd;
        RF(attn__ln_stats)(xr, E, eps, &mean, &rstd);
        for (int64_t e = 0; e < E; e++) {
            double v = ((double)xr[e] - mean) * rstd;
            if (w) v *= w[e];
            if (b) v += b[e];
            yr[e] = (R)v;
        }
    }
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w;  dw += sum_m dy xhat, db += sum_m dy.
 * dw and db are summed in double over all rows, a block of columns at a time (the row
 * statistics are recomputed per block), before dx is written: dx may alias dy. */
void RF(attn__layer_norm_bwd_ref)(const R *x, int64_t ldx, const R *w, R eps, const R *dy,
                                  int64_t lddy, R *dx, int64_t lddx, R *dw, R *db, int64_t M,
                                  int64_t E) {
    enum { CH = 128 };
    if (dw || db)
        for (int64_t e0 = 0; e0 < E; e0 += CH) {
            int64_t ne = E - e0 < CH ? E - e0 : CH;
            double aw[CH], ab[CH];
            for (int64_t c = 0; c < ne; c++) aw[c] = ab[c] = 0.0;
            for (int64_t m = 0; m < M; m++) {
                const R *xr = x + m * ldx, *dyr = dy + m * lddy;
                double mean, rstd;
                RF(attn__ln_stats)(xr, E, eps, &mean, &rstd);
                for (int64_t c = 0; c < ne; c++) {
                    double g = (double)dyr[e0 + c];
                    aw[c] += g * (((double)xr[e0 + c] - mean) * rstd);
                    ab[c] += g;
                }
            }
            for (int64_t c = 0; c < ne; c++) {
                if (dw) dw[e0 + c] = (R)((double)dw[e0 + c] + aw[c]);
                if (db) db[e0 + c] = (R)((double)db[e0 + c] + ab[c]);
            }
        }
    if (dx)
        for (int64_t m = 0; m < M; m++) {
            const R *xr = x + m * ldx, *dyr = dy + m * lddy;
            R *dxr = dx + m * lddx;
            double mean, rstd, s1 = 0, s2 = 0;
            RF(attn__ln_stats)(xr, E, eps, &mean, &rstd);
            for (int64_t e = 0; e < E; e++) {
                double g = (double)dyr[e] * (w ? (double)w[e] : 1.0);
                s1 += g;
                s2 += g * (((double)xr[e] - mean) * rstd);
            }
            s1 /= (double)E;
            s2 /= (double)E;
            for (int64_t e = 0; e < E; e++) {
                double g = (double)dyr[e] * (w ? (double)w[e] : 1.0);
                double xhat = ((double)xr[e] - mean) * rstd;
                dxr[e] = (R)(rstd * (g - s1 - xhat * s2));
            }
        }
}

/* ---- softmax ------------------------------------------------------------------------- */
R RF(attn__softmax_row)(const R *x, R *y, int64_t n) {
    R mx = -INFINITY;
    for (int64_t j = 0; j < n; j++)
        if (x[j] > mx) mx = x[j];
    if (mx == -INFINITY) { /* every entry masked: zeros, never NaN */
        for (int64_t j = 0; j < n; j++) y[j] = (R)0;
        return -INFINITY;
    }
    double sum = 0;
    for (int64_t j = 0; j < n; j++) {
        R e = x[j] == -INFINITY ? (R)0 : R_EXP(x[j] - mx);
        y[j] = e;
        sum += e;
    }
    R inv = (R)(1.0 / sum);
    for (int64_t j = 0; j < n; j++) y[j] *= inv;
    return mx + (R)log(sum);
}

void RF(attn__softmax_row_bwd)(const R *y, const R *dy, R *dx, int64_t n) {
    double dot = 0;
    for (int64_t j = 0; j < n; j++) dot += (double)dy[j] * (double)y[j];
    for (int64_t j = 0; j < n; j++) dx[j] = (R)((double)y[j] * ((double)dy[j] - dot));
}

/* ---- scaled dot-product attention ------------------------------------------------------ */
/* scale q_i . k_j of row (b, h, i), soft-capped when a->softcap > 0: softcap tanh(x / softcap)
 * (Gemma 2); *t (may be NULL) receives that tanh (0 without a cap) for the backward. */
static R RF(attn__sdpa_dot)(const SDPA_ARGS *a, int64_t b, int64_t h, int64_t i, int64_t j,
                            R *t) {
    int64_t hk = h / (a->H / a->Hkv);
    const R *kj = a->k + b * a->ks[0] + hk * a->ks[1] + j * a->ks[2];
    const R *qi = a->q + b * a->qs[0] + h * a->qs[1] + i * a->qs[2];
    double acc = 0;
    for (int64_t d = 0; d < a->D; d++) acc += (double)qi[d * a->qs[3]] * (double)kj[d * a->ks[3]];
    R sc = (R)acc * a->scale, th = (R)0;
    if (a->softcap > 0) {
        th = R_TANH(sc / (R)a->softcap);
        sc = (R)a->softcap * th;
    }
    if (t) *t = th;
    return sc;
}

/* Masked, scaled scores of query row (b, h, i) into s[S]; the forward and the backward both
 * call this, so the backward recomputes exactly the forward's scores.  Keys outside the causal
 * mask and the sliding window are -inf; ALiBi adds -slope |i + S - L - j| to the (capped)
 * score, then the masks are added. */
static void RF(attn__sdpa_scores)(const SDPA_ARGS *a, int64_t b, int64_t h, int64_t i, R *s) {
    int64_t lo, hi;
    attn__sdpa_range(a->causal, a->window, a->window_left, a->window_right, a->L, a->S, i, &lo,
                     &hi);
    for (int64_t j = 0; j < a->S; j++) {
        if (j < lo || j > hi) {
            s[j] = -INFINITY;
            continue;
        }
        R sc = RF(attn__sdpa_dot)(a, b, h, i, j, NULL);
        if (a->alibi) {
            int64_t dist = i + a->S - a->L - j;
            sc -= a->alibi[h] * (R)(dist < 0 ? -dist : dist);
        }
        for (int m = 0; m < 2; m++)
            if (a->mask[m].kind != ATTN_MASK_NONE && j < a->mask_ncols[m])
                sc += attn__mask_at(&a->mask[m], b, h, i, j);
        s[j] = sc;
    }
}

/* Dropout multiplier of every key of row (b, h, i): 0 (dropped) or 1/(1-p); 1 without
 * dropout. */
static void RF(attn__sdpa_keep)(const SDPA_ARGS *a, int64_t b, int64_t h, int64_t i, R *keep) {
    R keep_scale = a->dropout_p > 0.0f ? (R)1 / ((R)1 - (R)a->dropout_p) : (R)1;
    uint64_t base = a->drop_base + (uint64_t)(((b * a->H + h) * a->L + i) * a->S);
    for (int64_t j = 0; j < a->S; j++)
        keep[j] = a->dropout_p > 0.0f && !attn_dropout_keep(a->seed, a->offset, base + (uint64_t)j,
                                                             a->dropout_p)
                      ? (R)0
                      : keep_scale;
}

void RF(attn__sdpa_ref)(const SDPA_ARGS *a, R *scratch) {
    R *s = scratch, *p = scratch + a->S;
    int64_t group = a->H / a->Hkv;
    R keep_scale = a->dropout_p > 0.0f ? (R)1 / ((R)1 - (R)a->dropout_p) : (R)1;
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t h = 0; h < a->H; h++) {
            int64_t hk = h / group;
            const R *vb = a->v + b * a->vs[0] + hk * a->vs[1];
            for (int64_t i = 0; i < a->L; i++) {
                RF(attn__sdpa_scores)(a, b, h, i, s);
                R lse = RF(attn__softmax_row)(s, p, a->S);
                if (a->lse) a->lse[b * a->ls[0] + h * a->ls[1] + i * a->ls[2]] = lse;
                if (a->dropout_p > 0.0f) {
                    uint64_t base = a->drop_base + (uint64_t)(((b * a->H + h) * a->L + i) * a->S);
                    for (int64_t j = 0; j < a->S; j++)
                        p[j] = attn_dropout_keep(a->seed, a->offset, base + (uint64_t)j,
                                                 a->dropout_p)
                                   ? p[j] * keep_scale
                                   : (R)0;
                }
                if (a->w) {
                    R *wr = a->w + b * a->ws[0] + h * a->ws[1] + i * a->ws[2];
                    for (int64_t j = 0; j < a->S; j++) wr[j * a->ws[3]] = p[j];
                }
                R *oi = a->o + b * a->os[0] + h * a->os[1] + i * a->os[2];
                for (int64_t e = 0; e < a->Dv; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < a->S; j++)
                        if (p[j] != 0)
                            acc += (double)p[j] * (double)vb[j * a->vs[2] + e * a->vs[3]];
                    oi[e * a->os[3]] = (R)acc;
                }
            }
        }
}

/* Per query row: P = softmax(scores) recomputed, W = P * keep (dropout), out = W V.
 *   dW_j = dout . v_j,  dP_j = dW_j keep_j,  dS_j = P_j (dP_j - sum_k P_k dP_k)
 *   dq = scale dS' K,  dk += scale dS'^T q,  dv += W^T dout,  dmask += dS,
 * with dS' = dS (1 - t^2) under a soft cap (t = the cap's tanh, recomputed), else dS.
 * A row with every key masked has P = 0 and contributes nothing (dq row = 0). */
void RF(attn__sdpa_bwd_ref)(const SDPA_ARGS *a, const SDPA_GRADS *g, R *scratch) {
    R *s = scratch, *p = scratch + a->S, *dp = p + a->S, *keep = dp + a->S;
    int64_t group = a->H / a->Hkv;
    int want_dmask = g->dmask && a->mask[0].kind == ATTN_MASK_ADD;
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t hk = 0; hk < a->Hkv; hk++)
            for (int64_t j = 0; j < a->S; j++) {
                if (g->dk) {
                    R *r = g->dk + b * g->dks[0] + hk * g->dks[1] + j * g->dks[2];
                    for (int64_t d = 0; d < a->D; d++) r[d * g->dks[3]] = (R)0;
                }
                if (g->dv) {
                    R *r = g->dv + b * g->dvs[0] + hk * g->dvs[1] + j * g->dvs[2];
                    for (int64_t e = 0; e < a->Dv; e++) r[e * g->dvs[3]] = (R)0;
                }
            }
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t h = 0; h < a->H; h++) {
            int64_t hk = h / group;
            const R *kb = a->k + b * a->ks[0] + hk * a->ks[1];
            const R *vb = a->v + b * a->vs[0] + hk * a->vs[1];
            for (int64_t i = 0; i < a->L; i++) {
                const R *qi = a->q + b * a->qs[0] + h * a->qs[1] + i * a->qs[2];
                const R *doi = g->dout + b * g->dos[0] + h * g->dos[1] + i * g->dos[2];
                R *dqi = g->dq ? g->dq + b * g->dqs[0] + h * g->dqs[1] + i * g->dqs[2] : NULL;
                RF(attn__sdpa_scores)(a, b, h, i, s);
                R lse = RF(attn__softmax_row)(s, p, a->S);
                if (lse == -INFINITY) { /* every key masked: no gradient flows */
                    if (dqi)
                        for (int64_t d = 0; d < a->D; d++) dqi[d * g->dqs[3]] = (R)0;
                    continue;
                }
                RF(attn__sdpa_keep)(a, b, h, i, keep);
                double delta = 0;
                for (int64_t j = 0; j < a->S; j++) {
                    dp[j] = (R)0;
                    if (p[j] == 0 || keep[j] == 0) continue;
                    const R *vj = vb + j * a->vs[2];
                    double acc = 0;
                    for (int64_t e = 0; e < a->Dv; e++)
                        acc += (double)doi[e * g->dos[3]] * (double)vj[e * a->vs[3]];
                    dp[j] = (R)(acc * (double)keep[j]);
                    delta += (double)p[j] * (double)dp[j];
                }
                /* dv += W^T dout, with W exactly the forward's (dropped) weights */
                if (g->dv)
                    for (int64_t j = 0; j < a->S; j++) {
                        if (p[j] == 0 || keep[j] == 0) continue;
                        R wj = a->dropout_p > 0.0f ? p[j] * keep[j] : p[j];
                        R *dvj = g->dv + b * g->dvs[0] + hk * g->dvs[1] + j * g->dvs[2];
                        for (int64_t e = 0; e < a->Dv; e++)
                            dvj[e * g->dvs[3]] = (R)((double)dvj[e * g->dvs[3]] +
                                                     (double)wj * (double)doi[e * g->dos[3]]);
                    }
                /* dS into s */
                for (int64_t j = 0; j < a->S; j++)
                    s[j] = p[j] == 0 ? (R)0 : (R)((double)p[j] * ((double)dp[j] - delta));
                if (want_dmask) {
                    int64_t ncol = a->mask_ncols[0] < a->S ? a->mask_ncols[0] : a->S;
                    R *dm = g->dmask + b * g->dms[0] + h * g->dms[1] + i * g->dms[2];
                    for (int64_t j = 0; j < ncol; j++)
                        if (s[j] != 0)
                            dm[j * g->dms[3]] = (R)((double)dm[j * g->dms[3]] + (double)s[j]);
                }
                /* through the soft cap: d(c tanh(x / c))/dx = 1 - tanh^2, recomputed */
                if (a->softcap > 0)
                    for (int64_t j = 0; j < a->S; j++) {
                        if (s[j] == 0) continue;
                        R t;
                        RF(attn__sdpa_dot)(a, b, h, i, j, &t);
                        s[j] = (R)((double)s[j] * (1.0 - (double)t * (double)t));
                    }
                if (g->dk)
                    for (int64_t j = 0; j < a->S; j++) {
                        if (s[j] == 0) continue;
                        double f = (double)a->scale * (double)s[j];
                        R *dkj = g->dk + b * g->dks[0] + hk * g->dks[1] + j * g->dks[2];
                        for (int64_t d = 0; d < a->D; d++)
                            dkj[d * g->dks[3]] = (R)((double)dkj[d * g->dks[3]] +
                                                     f * (double)qi[d * a->qs[3]]);
                    }
                if (dqi)
                    for (int64_t d = 0; d < a->D; d++) {
                        double acc = 0;
                        for (int64_t j = 0; j < a->S; j++)
                            if (s[j] != 0)
                                acc += (double)s[j] * (double)kb[j * a->ks[2] + d * a->ks[3]];
                        dqi[d * g->dqs[3]] = (R)(acc * (double)a->scale);
                    }
            }
        }
}

/* ---- simplified self-attention (seed 001) --------------------------------------------- */
/* scores = X X^T and weights = normalize(scores) of one batch element (X [T, E]).  Returns
 * the first row whose scores sum to zero under ATTN_NORM_SUM, else -1. */
static int64_t RF(attn__simple_weights)(const R *xb, int64_t T, int64_t E, attn_normalize norm,
                                        R *sb, R *wb) {
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++) {
            double acc = 0;
            for (int64_t e = 0; e < E; e++) acc += (double)xb[i * E + e] * xb[j * E + e];
            sb[i * T + j] = (R)acc;
        }
    for (int64_t i = 0; i < T; i++) {
        if (norm == ATTN_NORM_SOFTMAX) {
            RF(attn__softmax_row)(sb + i * T, wb + i * T, T);
            continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < T; j++) sum += sb[i * T + j];
        if (sum == 0.0) return i;
        for (int64_t j = 0; j < T; j++) wb[i * T + j] = (R)(sb[i * T + j] / sum);
    }
    return -1;
}

int64_t RF(attn__simple_attn_ref)(const R *X, int64_t B, int64_t T, int64_t E,
                                  attn_normalize norm, R *s, R *w, R *c) {
    for (int64_t b = 0; b < B; b++) {
        int64_t bad = RF(attn__simple_weights)(X + b * T * E, T, E, norm, s + b * T * T,
                                               w + b * T * T);
        if (bad >= 0) return bad;
    }
    if (c)
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < T; i++)
                for (int64_t e = 0; e < E; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < T; j++)
                        acc += (double)w[(b * T + i) * T + j] * X[(b * T + j) * E + e];
                    c[(b * T + i) * E + e] = (R)acc;
                }
    return -1;
}

/* C = W X with W = normalize(X X^T):  dW = dC X^T;  dS = W (dW - rowsum(dW W)) (softmax) or
 * (dW - rowsum(dW W)) / rowsum(S) (sum);  dX = W^T dC + (dS + dS^T) X. */
int64_t RF(attn__simple_attn_bwd_ref)(const R *X, int64_t B, int64_t T, int64_t E,
                                      attn_normalize norm, const R *dC, R *dX, R *scratch) {
    R *s = scratch, *w = scratch + T * T, *ds = w + T * T;
    for (int64_t b = 0; b < B; b++) {
        const R *xb = X + b * T * E, *dcb = dC + b * T * E;
        R *dxb = dX + b * T * E;
        int64_t bad = RF(attn__simple_weights)(xb, T, E, norm, s, w);
        if (bad >= 0) return bad;
        for (int64_t i = 0; i < T; i++) {
            double delta = 0, rsum = 0;
            for (int64_t j = 0; j < T; j++) {
                double acc = 0;
                for (int64_t e = 0; e < E; e++)
                    acc += (double)dcb[i * E + e] * (double)xb[j * E + e];
                ds[i * T + j] = (R)acc;
                delta += acc * (double)w[i * T + j];
                rsum += s[i * T + j];
            }
            for (int64_t j = 0; j < T; j++) {
                double dw = (double)ds[i * T + j] - delta;
                ds[i * T + j] = norm == ATTN_NORM_SOFTMAX ? (R)((double)w[i * T + j] * dw)
                                                          : (R)(dw / rsum);
            }
        }
        for (int64_t j = 0; j < T; j++)
            for (int64_t e = 0; e < E; e++) {
                double acc = 0;
                for (int64_t i = 0; i < T; i++)
                    acc += (double)w[i * T + j] * (double)dcb[i * E + e] +
                           ((double)ds[j * T + i] + (double)ds[i * T + j]) * (double)xb[i * E + e];
                dxb[j * E + e] = (R)acc;
            }
    }
    return -1;
}

/* ---- cross-entropy --------------------------------------------------------------------- */
/* Mean over the rows whose target is not ignore_index of
 *   (1 - eps) (lse - x_t) + eps / C * sum_c (lse - x_c)     (PyTorch label smoothing);
 * dlogits (may be NULL) = (softmax - (1 - eps) onehot(t) - eps / C) / count, ignored rows 0.
 * Targets are in [0, C) or ignore_index (the caller checks).  No target counted: loss 0. */
/* One row whose target t is not ignored: dr (may be NULL) receives the row's gradient
 * (scaled by inv = 1 / count); *nll += lse - x_t and *smooth += C lse - sum_c x_c. */
void RF(attn__cross_entropy_row_ref)(const R *xr, int64_t t, int64_t C, double eps, double inv,
                                     R *dr, double *nll, double *smooth) {
    double mx = -INFINITY, sum = 0, xsum = 0;
    for (int64_t c = 0; c < C; c++)
        if ((double)xr[c] > mx) mx = (double)xr[c];
    for (int64_t c = 0; c < C; c++) {
        sum += exp((double)xr[c] - mx);
        xsum += (double)xr[c];
    }
    double lse = mx + log(sum);
    *nll += lse - (double)xr[t];
    *smooth += (double)C * lse - xsum;
    if (dr)
        for (int64_t c = 0; c < C; c++) {
            double pc = exp((double)xr[c] - lse);
            dr[c] = (R)((pc - (c == t ? 1.0 - eps : 0.0) - eps / (double)C) * inv);
        }
}

R RF(attn__cross_entropy_ref)(const R *logits, int64_t ld, const int64_t *targets, int64_t N,
                              int64_t C, int64_t ignore_index, R label_smoothing, R *dlogits,
                              int64_t ldd) {
    int64_t count = 0;
    for (int64_t n = 0; n < N; n++) count += targets[n] != ignore_index;
    double eps = (double)label_smoothing, nll = 0, smooth = 0;
    double inv = count ? 1.0 / (double)count : 0.0;
    for (int64_t n = 0; n < N; n++) {
        R *dr = dlogits ? dlogits + n * ldd : NULL;
        if (targets[n] == ignore_index) {
            if (dr)
                for (int64_t c = 0; c < C; c++) dr[c] = (R)0;
            continue;
        }
        RF(attn__cross_entropy_row_ref)(logits + n * ld, targets[n], C, eps, inv, dr, &nll,
                                        &smooth);
    }
    if (!count) return (R)0;
    return (R)(((1.0 - eps) * nll + eps / (double)C * smooth) * inv);
}
