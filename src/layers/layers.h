/* Internal layer structures.  A module owns one parameter arena; layer structs hold pointers
 * into it, registered by name at create time (the state_dict).  Internal forward functions
 * take contiguous row-major buffers with the shapes written beside them; public wrappers in
 * the same files validate attn_tensor arguments and call them. */
#ifndef ATTN_LAYERS_H
#define ATTN_LAYERS_H
#include <string.h>

#include "../kernels/kernels.h"
#include "../kernels/quant.h"

typedef struct attn__param {
    char *name;
    int ndim;
    int64_t shape[ATTN_MAX_DIMS];
    int64_t numel;
    float **slot; /* where the layer struct wants the data pointer (or NULL) */
    struct {      /* further places for it (attn__param_to_weight): data + off goes to an
                     attn__weight's data or bias */
        struct attn__weight *w;
        int bias;
        int64_t off;
    } to[4];
    int nto;
    float init;     /* value at create time */
    int init_kind;  /* attn__init: how attn_module_init fills it */
    float init_a;   /* its bound or standard deviation */
    float *data;
} attn__param;

/* PyTorch's default initialisations (attn_module_init). */
enum attn__init {
    ATTN__INIT_CONST = 0,   /* the create-time value (0, or 1 for norm weights) */
    ATTN__INIT_UNIFORM,     /* U(-a, a) */
    ATTN__INIT_UNIFORM01,   /* U[0, 1) (torch.rand) */
    ATTN__INIT_NORMAL       /* N(0, a^2) */
};
/* Sets the init rule of the most recently registered parameter. */
ATTN__HIDDEN void attn__param_init_last(attn_module *m, int kind, double a);
/* The xavier_uniform bound and xavier_normal std of a [fan_out, fan_in] matrix. */
static inline double attn__xavier_bound(int64_t fan_in, int64_t fan_out) {
    return sqrt(6.0 / (double)(fan_in + fan_out));
}

typedef enum attn__kind {
    ATTN__LINEAR, ATTN__LAYER_NORM, ATTN__EMBEDDING, ATTN__SEED, ATTN__MHA, ATTN__GENERAL,
    ATTN__ADDITIVE, ATTN__FFN, ATTN__ENC_LAYER, ATTN__DEC_LAYER, ATTN__ENCODER, ATTN__DECODER,
    ATTN__TRANSFORMER, ATTN__GPT, ATTN__VIT_EMBED, ATTN__SEQ2SEQ, ATTN__BERT,
    ATTN__VIT, ATTN__LLAMA_MLP, ATTN__LLAMA_ATTN, ATTN__LLAMA_LAYER, ATTN__LLM
} attn__kind;

struct attn_module {
    attn__kind kind;
    attn_alloc_fn alloc;
    attn_free_fn free;
    void *alloc_user;
    attn__param *params;
    size_t nparams, capparams;
    float *arena;
    int64_t numel;
    void *impl;  /* the layer struct (one allocation, freed with the module) */
    void *extra; /* optional second allocation (layer arrays of stacks), freed with it */
    float *grad; /* gradients, parallel to arena (attn_module_enable_grad), or NULL */
    void *owner; /* the object this module belongs to (a trainable attn_llm), which frees it;
                    attn_module_free ignores the module while set.  NULL: the caller's */
};

/* Maps a parameter pointer (inside the arena) to its gradient.  Backward functions take one
 * and accumulate parameter gradients through it. */
typedef struct attn__gmap {
    const float *arena;
    float *grad;
} attn__gmap;
static inline float *attn__g(const attn__gmap *g, const float *p) {
    return p ? g->grad + (p - g->arena) : NULL;
}
/* The module's map; fails with a message when gradients are not enabled. */
ATTN__HIDDEN attn_status attn__module_gmap(attn_ctx *ctx, const attn_module *m,
                                           attn__gmap *out);

/* Dropout stream state for one forward call: every dropout site takes the next offset, so
 * each site draws independent bits and results do not depend on threads. */
typedef struct attn__rng {
    int training;
    uint64_t seed, offset;
    int64_t b0, nb; /* the call's first sample in the whole batch (attn_run.batch_first), and
                       its number of samples: a tensor of n elements draws indices
                       b0 (n / nb) + i, the whole batch's for those samples */
} attn__rng;
/* The stream of a call; its caller sets nb (the call's number of samples) once it knows it. */
ATTN__HIDDEN attn__rng attn__rng_from(const attn_run *run);
/* The first dropout index of a tensor of n elements over the call's samples. */
static inline uint64_t attn__rng_base(const attn__rng *r, int64_t n) {
    return r && r->b0 > 0 && r->nb > 0 ? (uint64_t)r->b0 * (uint64_t)(n / r->nb) : 0;
}
/* In-place dropout of x[n] with probability p (no-op unless training and p > 0). */
ATTN__HIDDEN void attn__dropout(attn__rng *rng, float p, float *x, int64_t n);

/* ---- saved activations ---------------------------------------------------------------------
 * A training forward records what its backward needs (a record per layer, below), and the
 * backward reads it instead of running the forward again.  Records live in a tape owned by an
 * attn_saved (attn_*_forward_train) or, for the recomputing backwards (attn_*_backward), in the
 * workspace frame of the caller.  Rule: whoever holds the frame allocates a record (the
 * *_saved_alloc functions); forwards only fill the records they are given, so that their own
 * workspace marks never release one. */

/* The tape: a growable arena of 64-byte aligned buffers, allocated with the hooks it was given.
 * Buffers stay where they are until the tape is reset or freed.  attn__tape_reset hands the
 * memory out again; when the last pass spilled into several blocks they are freed, and the
 * next allocation takes one block of that pass's size plus a quarter. */
typedef struct attn__tape_block {
    unsigned char *ptr;
    size_t size, used, start; /* start: the first 64-byte aligned offset */
} attn__tape_block;
typedef struct attn__tape {
    attn_alloc_fn alloc;
    attn_free_fn free;
    void *user;
    attn__tape_block *blocks;
    size_t nblocks, capblocks, cur;
    size_t bytes; /* handed out since the last reset */
    size_t want;  /* size of the next block (0: the default rule) */
} attn__tape;
ATTN__HIDDEN attn_status attn__tape_alloc(attn_ctx *ctx, attn__tape *t, size_t n, size_t elem,
                                          void **out);
ATTN__HIDDEN void attn__tape_reset(attn__tape *t);
ATTN__HIDDEN void attn__tape_free(attn__tape *t);
/* Record memory: from t, or from the workspace (the caller's frame) when t is NULL.  Sizes are
 * overflow-checked (ATTN_E_OVERFLOW). */
ATTN__HIDDEN attn_status attn__rec_alloc(attn_ctx *ctx, attn__tape *t, size_t n, size_t elem,
                                         void **out);
ATTN__HIDDEN attn_status attn__rec_f32(attn_ctx *ctx, attn__tape *t, float **out, int64_t n0,
                                       int64_t n1, int64_t n2, int64_t n3);

struct attn_saved {
    attn_alloc_fn alloc; /* the creating context's hooks */
    attn_free_fn free;
    void *alloc_user;
    unsigned flags;      /* ATTN_SAVED_* */
    attn__tape tape;
    const attn_module *m; /* the module of the recorded forward; NULL: nothing recorded */
    attn__kind kind;      /* its kind and size, checked again by the backward */
    int64_t numel;
    void *rec;            /* the model's record, in the tape */
};
/* Starts a recording: forgets the last one and rewinds the tape. */
ATTN__HIDDEN void attn__saved_begin(attn_saved *s);
/* Marks rec (in s's tape) as the record of m's training forward. */
ATTN__HIDDEN void attn__saved_end(attn_saved *s, const attn_module *m, void *rec);
/* m's record; fails, naming fn, when s holds none for m. */
ATTN__HIDDEN attn_status attn__saved_get(attn_ctx *ctx, const attn_saved *s,
                                         const attn_module *m, const char *fn, void **rec);
/* A copy of mask m (NULL or NONE: out->kind NONE) in t, so that the backward does not read
 * the caller's memory: contiguous, broadcast (stride 0) dimensions kept broadcast.  Validates
 * the kind and dtype (the shape is checked where the mask is bound). */
ATTN__HIDDEN attn_status attn__saved_mask(attn_ctx *ctx, attn__tape *t, const attn_mask *m,
                                          const char *what, attn_mask *out);
static inline const attn_mask *attn__mask_opt(const attn_mask *m) {
    return m->kind != ATTN_MASK_NONE ? m : NULL;
}

/* ---- module construction ------------------------------------------------------------- */
ATTN__HIDDEN attn_status attn__module_new(attn_ctx *ctx, attn__kind kind, size_t impl_size,
                                          attn_module **out);
/* Registers prefix+name with a shape (ndim <= 4; dims > 0) whose data pointer goes to *slot. */
ATTN__HIDDEN attn_status attn__param_reg(attn_ctx *ctx, attn_module *m, const char *prefix,
                                         const char *name, float **slot, float init, int ndim,
                                         int64_t d0, int64_t d1, int64_t d2);
/* The data of the last registered parameter, from element off on, also becomes w's data (bias
 * 0) or its bias (bias 1); at most four such places per parameter (ignored beyond). */
ATTN__HIDDEN void attn__param_to_weight(attn_module *m, struct attn__weight *w, int bias,
                                        int64_t off);
/* Allocates the arena and fills the slots.  On failure frees m. */
ATTN__HIDDEN attn_status attn__module_finish(attn_ctx *ctx, attn_module *m);
/* The end of a create: st (the registrations' status) failed: frees m and returns st;
 * otherwise finishes m (attn__module_finish) and stores it in *out. */
ATTN__HIDDEN attn_status attn__module_done(attn_ctx *ctx, attn_module *m, attn_status st,
                                           attn_module **out);
ATTN__HIDDEN attn_status attn__module_expect(attn_ctx *ctx, const attn_module *m,
                                             attn__kind kind, const char *fn);

/* ---- building blocks ------------------------------------------------------------------- */
/* ---- one weight, one door (weight.c, matmul.c) -----------------------------------------
 * Every weight matrix W [N, K] (y = x W^T + b) of every layer and model is an attn__weight,
 * whatever its storage, and every product with one goes through attn__matmul: the one place
 * that chooses a kernel from the storage type, the rows per sequence and the context.
 *
 * Storage types are the GGML numbers of attn_qtype (ATTN_Q_F32: row-major float; ATTN_Q_F16,
 * ATTN_Q_BF16 and the quantized block types: rows of blocks as GGUF files store them, read in
 * place), plus the packed panels of the 16-bit GEMMs (gemm_bf16.h, gemm_f16.h: their arithmetic
 * and error are stated there) and of the float GEMM (attn__f32p below), which only a float
 * weight packed by attn__weight_pack has.
 * Their traits (attn__wtype_of) are kernels/qtypes.c's one table. */
typedef struct attn__weight {
    int type;          /* an attn_qtype number, ATTN__W_BF16P, ATTN__W_F16P or ATTN__W_F32P */
    const void *data;  /* NULL: not set */
    int64_t N, K;      /* output and input features */
    const float *bias; /* [N] or NULL */
    int act;           /* ATTN__QACT_* of its matrix-vector products on GGML rows (0: default) */
} attn__weight;

/* ATTN__W_F32P, a float weight for inference: its float rows (which must outlive it) and
 * the float GEMM's B panels packed once for one kernel set (attn__gemm_pack_weight), so that
 * no product packs it again.  It gives the F32 weight's bits on every path: the GEMM on
 * contexts of that set reads the panels, everything else (a few rows per sequence, bf16
 * products, another set) reads the rows.  data points at this header. */
typedef struct attn__f32p {
    const float *rows;  /* W [N, K] */
    const float *panels;
    const void *kernel; /* the attn__gemm_kernel it was packed for */
} attn__f32p;

static inline attn__weight attn__weight_f32(const float *W, const float *b, int64_t N,
                                            int64_t K) {
    attn__weight w = {ATTN_Q_F32, W, N, K, b, 0};
    return w;
}
/* The packed type that runs a float weight as dtype (ATTN_F32: ATTN__W_F32P; ATTN_BF16 and
 * ATTN_F16: the 16-bit panels); -1 for another dtype. */
ATTN__HIDDEN int attn__wtype_packed(attn_dtype dtype);
/* Bytes of W [N, K] stored as type (ATTN_E_OVERFLOW; ATTN_E_UNSUPPORTED for a type that
 * attn__weight_pack cannot write: F32 and the panels can). */
ATTN__HIDDEN attn_status attn__weight_size(attn_ctx *ctx, int type, int64_t N, int64_t K,
                                           size_t *bytes);
/* Writes the float W [N, K] as type into dst (attn__weight_size bytes, on the same context for
 * F32P, whose panels follow ctx's kernel set and which keeps a pointer to W) and describes it
 * in *out (bias NULL, act 0).  F16 panels refuse (ATTN_E_NONFINITE, naming what) a finite
 * weight past the F16 range, which would become an infinity; other types cannot fail. */
ATTN__HIDDEN attn_status attn__weight_pack(attn_ctx *ctx, int type, const float *W, int64_t N,
                                           int64_t K, void *dst, const char *what,
                                           attn__weight *out);
/* Checks that w is set, has shape [N, K], a type with kernels and whole blocks per row (what
 * names it in the message). */
ATTN__HIDDEN attn_status attn__weight_check(attn_ctx *ctx, const attn__weight *w, int64_t N,
                                            int64_t K, const char *what);
/* ATTN_E_UNSUPPORTED unless w is F32 (what names it): what a backward reads. */
ATTN__HIDDEN attn_status attn__weight_trainable(attn_ctx *ctx, const attn__weight *w,
                                                const char *what);
/* Rows of W as float: out[i, :] = W[rows[i], :] (K floats each, contiguous), rows in [0, N)
 * (checked by the caller); a row type.  The embedding lookup of a table stored as a weight. */
ATTN__HIDDEN attn_status attn__weight_rows(attn_ctx *ctx, const attn__weight *w,
                                           const int32_t *rows, int64_t n, float *out);

typedef struct attn__lin {
    float *weight, *bias; /* [out, in], [out] or NULL */
    int64_t in, out;
    attn__weight pw; /* the form the forwards run: data NULL means weight in F32 (set by the
                        owner of a packed copy, for inference only: backwards read weight);
                        its bias and shape are the layer's */
} attn__lin;
/* A norm over rows of E: LayerNorm (weight and bias, each may be NULL) or, rms set, RMSNorm
 * (weight only; Gemma's 1 + w is held as the weight itself). */
typedef struct attn__ln {
    float *weight, *bias; /* [E], [E] or NULL */
    int64_t E;
    float eps;
    int rms;
} attn__ln;

/* What follows the product in one linear call, on each row as soon as it is final (the same
 * bits as separate passes afterwards, and for every thread count).  t = x W^T + b (b may be
 * NULL), then:
 *   NONE    y = t
 *   ACT     y = act(t): GELU is the kernels' GELU (attn__gelu_as, ew.h), the others
 *           attn__act1
 *   RES     y = t + r                       (float adds in this order)
 *   RES_LN  y = layer_norm(t + r) * w + lb  (attn__add_ln's arithmetic, ew.h; r may be NULL)
 * For BF16 / F16 weights the kernel adds b and r itself (its own order, gemm_*.h). */
typedef enum attn__epi_kind {
    ATTN__EPI_NONE = 0,
    ATTN__EPI_ACT,
    ATTN__EPI_RES,
    ATTN__EPI_RES_LN
} attn__epi_kind;
typedef struct attn__epi {
    attn__epi_kind kind;
    attn_activation act; /* ACT */
    const float *r;      /* RES, RES_LN: [M, N] contiguous; must not overlap y */
    const attn__ln *ln;  /* RES_LN: the norm over N */
    const float *xmax;   /* NULL, or [M] max_k |x[m, k]| (NaN if any is NaN): the F16 kernel's
                            row scales, which it otherwise computes (a hint for the others) */
    float *ymax;         /* NULL, or [M] receiving max_n |y[m, n]| (NaN if any is NaN) */
    float *aout;         /* ACT: NULL (y = act(x W^T + b)), or [M, N] contiguous receiving
                            act(y) while y keeps x W^T + b (a training record: both kept) */
    uint16_t *relu_mask; /* ACT with ReLU, aout NULL: NULL, or [M, ceil(N / 16)] receiving the
                            derivative's bits (ew.h relu_mask) */
} attn__epi;

/* The epilogue that adds a residual r [M, N] (NULL: none). */
static inline attn__epi attn__epi_res(const float *r) {
    attn__epi e = {r ? ATTN__EPI_RES : ATTN__EPI_NONE, ATTN_ACT_RELU, r, NULL, NULL, NULL, NULL,
                   NULL};
    return e;
}
/* The one door.  y[M, N] (row stride ldy) = epilogue(x[M, K] (row stride ldx) W^T + b) for w
 * of any storage type, on the context's kernels and threads; e may be NULL (NONE).  x must not
 * overlap y.  The M rows are sequences of T rows each (T divides M), or some rows of such
 * sequences (M < T: a prompt's last rows): the kernel is chosen by T, so that a row gets the
 * same bits alone, in a batch or among its sequence's rows.  T <= ATTN__QMV_ROWS (decoding,
 * short prompts): the matrix-vector kernels (kernels/quant.h), each row on its own, reading the
 * weight in place (F32 too: no packing), with w->act's activation precision; longer (or
 * ATTN__MM_GEMM: rows that are no sequences): the GEMM (F32: the blocked float GEMM, on bf16
 * operands where the context says so; panels: their 16-bit kernels; GGML rows: dequantized
 * panels on the float GEMM).  The two differ in the last bits.  Every epilogue runs for every
 * type: fused into the GEMM where its kernel allows it, else as a pass over the finished rows
 * (the same arithmetic).  The same bits for every thread count.  ATTN_E_UNSUPPORTED for a
 * type without kernels; otherwise fails only when the workspace runs out. */
#define ATTN__MM_GEMM INT64_MAX
ATTN__HIDDEN attn_status attn__matmul(attn_ctx *ctx, const attn__weight *w, const float *x,
                                      int64_t ldx, int64_t M, int64_t T, const attn__epi *e,
                                      float *y, int64_t ldy);
/* The backward of y = x W^T + b for an F32 weight (another storage type: ATTN_E_UNSUPPORTED):
 * dx[M, K] (row stride lddx) = dy W, OVERWRITTEN, or with acc ACCUMULATED (dx += dy W: the
 * input gradient of several products of one x); dx_epi (NULL, not with acc) runs on dx's rows
 * as they are finished; dW [N, K] += dy^T x; db [N] += the column sums of dy, rows in order.
 * dx, dW and db may be NULL.  On the context's precision (ATTN_CTX_BF16_MATMUL: bf16 operands,
 * float sums); the same bits for every thread count.  Fails only when the workspace runs out. */
ATTN__HIDDEN attn_status attn__matmul_bwd(attn_ctx *ctx, const attn__weight *w, const float *x,
                                          int64_t ldx, const float *dy, int64_t lddy, float *dx,
                                          int64_t lddx, int acc, const attn__row_epi *dx_epi,
                                          float *dW, float *db, int64_t M);
/* A float W [N, K] with bias b (or NULL) as an attn__weight in place (a compound literal: it
 * lives until the end of the enclosing block). */
#define ATTN__W32(W, b, N, K) (&(attn__weight){ATTN_Q_F32, (W), (N), (K), (b), 0})
/* n (<= ATTN__QLIN_PARTS) products of the same x with weights of the same K, y_i =
 * x W_i^T + b_i (+ r_i where r is not NULL and r[i] is not NULL): each exactly
 * attn__matmul(w[i], ...) with a NONE or RES epilogue, the same bits; for T <= ATTN__QMV_ROWS
 * one pass of the threads over the rows of all of them (a decoder's q, k, v and gate, up). */
ATTN__HIDDEN attn_status attn__matmul_n(attn_ctx *ctx, int n, const attn__weight *const *w,
                                        const float *x, int64_t ldx, int64_t M, int64_t T,
                                        float *const *y, const int64_t *ldy,
                                        const float *const *r);
/* The layer's linear on contiguous rows: y[M, out] = epilogue(x[M, in] W^T + b). */
ATTN__HIDDEN attn_status attn__lin_run(attn_ctx *ctx, const attn__lin *l, const float *x,
                                       const attn__epi *e, float *y, int64_t M);

ATTN__HIDDEN attn_status attn__lin_reg(attn_ctx *ctx, attn_module *m, const char *prefix,
                                       const char *name, attn__lin *l, int64_t in, int64_t out,
                                       int bias);
ATTN__HIDDEN attn_status attn__ln_reg(attn_ctx *ctx, attn_module *m, const char *prefix,
                                      const char *name, attn__ln *l, int64_t E, float eps,
                                      int bias);
/* y[M, out] = x[M, in] W^T + b */
static inline attn_status attn__lin_fwd(attn_ctx *ctx, const attn__lin *l, const float *x,
                                        float *y, int64_t M) {
    return attn__lin_run(ctx, l, x, NULL, y, M);
}
/* y[M, E] = layer_norm(x[M, E]) (the RES_LN arithmetic without a residual), or with l->rms
 * attn__rms_norm (ew.h); y may be x. */
ATTN__HIDDEN void attn__ln_fwd(attn_ctx *ctx, const attn__ln *l, const float *x, float *y,
                               int64_t M);

/* SDPA arguments (kernels.h) over head-blocked row-major buffers, as the layers keep them:
 * head h of query i of batch b at q + (b*L + i)*ldq + h*D, of key / value j at
 * k + (b*S + j)*ldk + h*D / v + (b*S + j)*ldv + h*Dv, of the output at o + (b*L + i)*ldo + h*Dv.
 * Hkv = H, scale 1/sqrt(D), masks counted over all S columns; no mask, causality, dropout,
 * weights or lse until the caller sets them. */
static inline void attn__sdpa_heads(attn__sdpa_args *a, int64_t B, int64_t H, int64_t L,
                                    int64_t S, int64_t D, int64_t Dv, const float *q,
                                    int64_t ldq, const float *k, int64_t ldk, const float *v,
                                    int64_t ldv, float *o, int64_t ldo) {
    memset(a, 0, sizeof *a);
    a->B = B, a->H = H, a->Hkv = H, a->L = L, a->S = S, a->D = D, a->Dv = Dv;
    a->q = q, a->qs[0] = L * ldq, a->qs[1] = D, a->qs[2] = ldq, a->qs[3] = 1;
    a->k = k, a->ks[0] = S * ldk, a->ks[1] = D, a->ks[2] = ldk, a->ks[3] = 1;
    a->v = v, a->vs[0] = S * ldv, a->vs[1] = Dv, a->vs[2] = ldv, a->vs[3] = 1;
    a->o = o, a->os[0] = L * ldo, a->os[1] = Dv, a->os[2] = ldo, a->os[3] = 1;
    a->mask_ncols[0] = a->mask_ncols[1] = S;
    a->causal = ATTN_CAUSAL_NONE;
    a->scale = (float)(1.0 / sqrt((double)D));
}

/* ---- one attention module (src/layers/attention.c) -------------------------------------------
 * Every attention of the library's layers and models is an attn__attention: torch's
 * nn.MultiheadAttention (H = Hkv, in_proj_weight stacked or q/k/v_proj_weight with kdim, vdim,
 * bias_k/bias_v, add_zero_attn, dropout, masks, attention weights) and the Llama family's
 * (grouped-query heads, RoPE, QK-norm, a sliding window, a KV cache) are configurations of it.
 *
 *   out = o(attention(q(query), k(key), v(value)))  (+ the o product's epilogue)
 *
 * where q, k, v, o are attn__weights of any storage type (the backward needs F32), products
 * through the one door (attn__matmul); QK-norm then RoPE on q and k; keys and values with
 * bias_k/bias_v and a zero row appended; attn__sdpa over the head-blocked rows. */
typedef struct attn__attention {
    int64_t E, H, Hkv, D;    /* width of queries and output, heads, key/value heads, head dim */
    int64_t kdim, vdim;      /* widths of the key and value inputs (E for self-attention) */
    attn__weight q, k, v, o; /* [H D, E], [Hkv D, kdim], [Hkv D, vdim], [E, H D] */
    attn__weight qkv;        /* q, k, v stacked [(H + 2 Hkv) D, E] for one product of
                                self-attention (data NULL: three products) */
    int seq_rows;            /* 1: the products see sequences of L rows (matrix-vector
                                kernels for a few; attn__matmul's T); 0: plain GEMM rows */
    float *bias_k, *bias_v;  /* [Hkv D] key and value appended to every sequence, or NULL */
    int zero_attn;           /* a zero key and value appended after everything else */
    float dropout;           /* on the attention weights, when the stream trains */
    int rope;                /* RoPE on q and k (the io's rows) */
    int rope_interleaved;    /* 0: HF's q/k rows; 1: rows permuted within each head as GGUF
                                converters store them (attn__rope_rows) */
    int rope_local;          /* 1: the io's second RoPE table (attn__rope_cs: lcs, lsn) */
    const float *q_norm, *k_norm; /* [D] each, or NULL: no QK-norm (RMSNorm before RoPE) */
    float eps;                    /* of the QK-norm */
    int64_t window;               /* > 0: each query sees the last `window` keys (local layers) */
    float softcap;                /* > 0: scores softcap tanh(score / softcap) */
    float scale;                  /* 0: 1/sqrt(D) */
} attn__attention;

/* A self-attention of the Llama family's form: zeroes a and sets the sizes, RoPE, kdim = vdim
 * = E and sequence rows; the caller sets the weights and the family's settings. */
ATTN__HIDDEN void attn__attention_llama(attn__attention *a, int64_t E, int64_t H, int64_t Hkv,
                                        int64_t D);
/* nn.MultiheadAttention's parameters registered under prefix with torch's names and init
 * (in_proj_weight [3E, E] when kdim = vdim = E, else q/k/v_proj_weight; in_proj_bias [3E];
 * bias_k, bias_v [1, 1, E]; out_proj.weight, .bias) and bound to a as F32 weights once the
 * module is finished (attn__param_to_weight). */
ATTN__HIDDEN attn_status attn__attention_mha_reg(attn_ctx *ctx, attn_module *m, const char *prefix,
                                                 attn__attention *a, const attn_mha_config *cfg);
/* a as nn.MultiheadAttention of E, H over given F32 parameters (not registered): in_w [3E, E],
 * in_b [3E] or NULL, out_w [E, E], out_b [E] or NULL. */
ATTN__HIDDEN void attn__attention_mha_bind(attn__attention *a, int64_t E, int64_t H,
                                           const float *in_w, const float *in_b, const float *out_w,
                                           const float *out_b);
/* The extra keys of a (bias_k/bias_v, zero_attn): S' = S + this. */
static inline int64_t attn__attention_extra(const attn__attention *a) {
    return (a->bias_k ? 1 : 0) + (a->zero_attn ? 1 : 0);
}

/* Where the attention finds its keys and values.  Without a cache (kv NULL) they are the
 * current tokens' own.  With one (one per sequence): the layer's slice of a session's cache,
 * k and v [Hkv][cap][D] in dtype (ATTN_F32 or ATTN_BF16), holding pos tokens; the forward
 * appends the T new ones at pos .. pos + T - 1 (pos + T <= cap, the caller checks) and
 * attends over all. */
typedef struct attn__kv {
    attn_dtype dtype;
    void *k, *v;
    int64_t cap, pos;
    int64_t len; /* with attn__attn_io.nkv: this sequence's rows of the call */
} attn__kv;

/* The RoPE rows of a forward: cos, sin [B*T, D/2], row b*T + t for token t of sequence b. */
typedef struct attn__rope_cs {
    const float *cs, *sn;
    const float *lcs, *lsn; /* the local layers' table (another base), or NULL: the same */
} attn__rope_cs;

/* One call's inputs.  query [B L, E], key [B S, kdim], value [B S, vdim] row-major (self-
 * attention: one pointer thrice, L = S: its three projections share one buffer, and one
 * product when a->qkv is set).  Masks (may be NULL; validated and bound before any work):
 * key_padding_mask [B, S], attn_mask [L, S] or [B H, L, S] (nn.MultiheadAttention's); they
 * never cover the appended keys.  rng: the dropout stream (NULL: none; an offset is taken only
 * when it trains and a->dropout > 0).  rope: the positions' rows (with a->rope).  kv: NULL, or
 * B caches, one per sequence (self-attention; not with a record): sequence b's L rows join
 * kv[b] and attend over all of it.  nkv > 0: sequences of different lengths instead (no masks):
 * the B L rows are nkv sequences one after the other, kv[i].len rows each (summing to B L),
 * and B, L only choose the products' kernels (attn__matmul's T is L).  rows: run the row
 * kernels (the recompute of a forward that wrote weights). */
typedef struct attn__attn_io {
    const float *query, *key, *value;
    int64_t B, L, S;
    const attn_mask *kpm, *mask;
    attn_causal causal;
    attn__rng *rng;
    const attn__rope_cs *rope;
    attn__kv *kv;
    int64_t nkv;
    int rows;
    int last_rows; /* with kv: only each sequence's last query row is attended and projected
                    * (out: one row per sequence), its bits as among all its rows (every
                    * sequence of more than ATTN__DECODE_MAX_L rows); the caches get every
                    * row's keys and values */
    /* packed sequences (self-attention without a cache, inference): B = 1, L = S = the sum of
     * seql[0 .. nseq - 1], and sequence i (its seql[i] rows after the previous ones) attends
     * to its own rows alone, with no padding computed; no masks, RoPE, dropout or records */
    const int64_t *seql;
    int64_t nseq;
} attn__attn_io;

/* The io of nn.MultiheadAttention's arguments (is_causal: top-left; no RoPE, no cache). */
static inline attn__attn_io attn__attn_io_mha(const float *query, const float *key,
                                              const float *value, int64_t B, int64_t L, int64_t S,
                                              const attn_mask *kpm, const attn_mask *mask,
                                              int is_causal, attn__rng *rng) {
    attn__attn_io io;
    memset(&io, 0, sizeof io);
    io.query = query, io.key = key, io.value = value, io.B = B, io.L = L, io.S = S;
    io.kpm = kpm, io.mask = mask, io.rng = rng;
    io.causal = is_causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    return io;
}

/* The io of a decoder's causal self-attention of x [B T, E] with RoPE rows rope and a cache kv
 * (NULL: none). */
static inline attn__attn_io attn__attn_io_causal(const float *x, int64_t B, int64_t T,
                                                 const attn__rope_cs *rope, attn__kv *kv) {
    attn__attn_io io = attn__attn_io_mha(x, x, x, B, T, T, NULL, NULL, 1, NULL);
    io.rope = rope, io.kv = kv;
    return io;
}

/* What the backward needs of a forward: the projections (after QK-norm and RoPE), the
 * attention output, its log-sum-exp, and the attention call as it ran (masks bound, dropout
 * seed and offset). */
typedef struct attn__attn_saved {
    float *qp, *kp, *vp; /* head h of query row i at qp + i*ldq + h*D, of key row j (S' per
                            sequence) at kp + j*ldk + h*D (vp alike); self-attention keeps the
                            three side by side in one buffer (ldq = ldk = (H + 2 Hkv) D) */
    int64_t ldq, ldk;
    float *ao;         /* [B L, H D] attention output (o's input) */
    float *lse;        /* [B, H, L] log-sum-exp of each row of scores (-inf: all masked) */
    float *qkn;        /* with QK-norm: q and k of each row before it [B L, (H + Hkv) D] */
    attn__sdpa_args s; /* o = ao, lse = lse */
} attn__attn_saved;
/* Allocates rec's buffers (attn__rec_f32) for a forward of B sequences of L queries over S
 * keys; self: that forward will be self-attention (io's one pointer thrice). */
ATTN__HIDDEN attn_status attn__attn_saved_alloc(attn_ctx *ctx, attn__tape *t,
                                                const attn__attention *a, int64_t B, int64_t L,
                                                int64_t S, int self, attn__attn_saved *rec);
/* out [B L, E] = o(attention) with oepi (NULL, or o's epilogue: a residual, a layer norm; its r
 * must not overlap out); out NULL: stops before o (the recomputing backward).  weights NULL or
 * [B, L, S'] (average) / [B, H, L, S'].  rec NULL, or from attn__attn_saved_alloc for these
 * sizes, which the forward fills (mask data must then stay valid until the backward). */
ATTN__HIDDEN attn_status attn__attention_fwd(attn_ctx *ctx, const attn__attention *a,
                                             const attn__attn_io *io, float *out,
                                             const attn__epi *oepi, float *weights, int average,
                                             attn__attn_saved *rec);
/* The backward from rec and the forward's io (query, key, value, sizes, rope): parameter
 * gradients accumulate through g; dquery [B L, E], dkey [B S, kdim], dvalue [B S, vdim] are
 * overwritten (each may be NULL).  Self-attention may ask instead for dx (dquery etc. NULL): the
 * gradient of the one input through all three projections (with a->qkv one product), plus res
 * [B L, E] where res is not NULL (res must not be dx).  Every weight must be F32; the QK-norm
 * weights' gradients accumulate too. */
ATTN__HIDDEN attn_status attn__attention_bwd(attn_ctx *ctx, const attn__attention *a,
                                             const attn__gmap *g, const attn__attn_saved *rec,
                                             const attn__attn_io *io, const float *dout,
                                             float *dquery, float *dkey, float *dvalue, float *dx,
                                             const float *res);
/* The backward recomputing the forward from io (rng at the forward's state; io->rows as that
 * forward wrote weights): the same outputs as the forward with a record and its backward. */
ATTN__HIDDEN attn_status attn__attention_bwd_re(attn_ctx *ctx, const attn__attention *a,
                                                const attn__gmap *g, const attn__attn_io *io,
                                                const float *dout, float *dquery, float *dkey,
                                                float *dvalue);

/* ---- the one block (block.c) ----------------------------------------------------------
 * Every residual layer of the library is one attn__block: the Transformer encoder layer
 * (self-attention, feed-forward), the decoder layer (self-attention, cross-attention,
 * feed-forward), the Llama family's decoder layer (RMSNorm, RoPE, grouped-query attention,
 * SwiGLU or GEGLU, Gemma's sandwich norms), ViT's and BERT's layers.  Its sublayers s run in
 * order SELF, CROSS (when cross), FFN on the stream x:
 *   pre-norm:   x = x + drop(f_s(norm_s(x)))            (sandwich: x + post_s(f_s(norm_s(x))))
 *   post-norm:  x = norm_s(x + drop(f_s(x)))
 * The feed-forward is linear1, activation (ReLU, GELU, tanh-GELU), dropout, linear2 (l1, l2),
 * or gated (glu: down(act(gate(x)) * up(x)), SiLU or tanh-GELU). */
enum { ATTN__SUB_SELF = 0, ATTN__SUB_CROSS = 1, ATTN__SUB_FFN = 2, ATTN__SUB_N = 3 };

/* The gated feed-forward (HF LlamaMLP, Gemma's GEGLU) on the block's weights. */
typedef struct attn__llama_mlp {
    int64_t E, F;
    attn__weight gate, up, down; /* [F, E], [F, E], [E, F] */
    int act;                     /* 0: silu(gate) * up; 1: gelu_tanh(gate) * up */
} attn__llama_mlp;
/* Its record: g = gate(x), u = up(x) [M, F] (before the activation). */
typedef struct attn__llama_mlp_saved {
    float *g, *u;
} attn__llama_mlp_saved;

typedef struct attn__block {
    int64_t E;
    int pre;             /* norms before the sublayers, else after the residual adds */
    int sandwich;        /* pre-norm with each sublayer's output normalised before the add */
    int cross;           /* a cross-attention sublayer over a memory (decoder layers) */
    int glu;             /* the gated feed-forward (mlp), else l1, act, l2 */
    attn_activation act; /* the feed-forward's activation (not glu) */
    float p;             /* dropout of the residuals and the feed-forward */
    attn__ln norm[ATTN__SUB_N]; /* sublayer s's norm (unused slots zero) */
    attn__ln post[ATTN__SUB_N]; /* sandwich: sublayer s's output norm */
    attn__attention at[2];      /* SELF, CROSS */
    attn__lin l1, l2;
    attn__llama_mlp mlp;
} attn__block;

/* A forward's inputs besides the stream x [B T, E]: the self-attention's masks (key padding
 * [B, T], attn_mask) and causality, RoPE rows and KV caches (Llama family; caches not with a
 * record); the cross-attention's memory [B S, E], its masks and (cross_w, NULL or [B, T, S])
 * its weights averaged over heads; the dropout stream (NULL: none). */
typedef struct attn__block_io {
    int64_t B, T, S;
    const attn_mask *mask, *kpm;
    int causal;
    const attn__rope_cs *rope;
    attn__kv *kv;
    int64_t nkv; /* attn__attn_io's: kv holds nkv sequences of kv[i].len rows */
    int last_rows; /* with kv: out holds only each sequence's last row (attn__attn_io's) */
    const int64_t *seql; /* packed sequences (attn__attn_io's): B = 1, T = the sum of seql */
    int64_t nseq;
    const float *mem;
    const attn_mask *mmask, *mkpm;
    float *cross_w;
    attn__rng *rng;
} attn__block_io;

/* The io of a decoder-only model's layer: causal self-attention of B sequences of T rows with
 * RoPE rows rope and caches kv (NULL: none). */
static inline attn__block_io attn__block_io_causal(int64_t B, int64_t T,
                                                   const attn__rope_cs *rope, attn__kv *kv) {
    attn__block_io io;
    memset(&io, 0, sizeof io);
    io.B = B, io.T = T, io.S = T, io.causal = 1, io.rope = rope, io.kv = kv;
    return io;
}

/* Records of the feed-forward: h = linear1(x), a = dropout(act(h)), y = linear2(a). */
typedef struct attn__ffn_saved {
    float *h, *a;  /* [M, F]; ReLU: h = a (relu'(h) is relu'(a): one array, written in place) */
    uint16_t *mask; /* ReLU: [M, ceil(F / 16)] the bits of relu'(h) (ew.h), else NULL */
    attn__rng rng; /* the stream at its dropout */
} attn__ffn_saved;
/* The record of a block's forward ([B T, E] buffers): x0 its input, mem the memory (the
 * caller's: they must stay valid and unchanged); per sublayer s:
 *   in[s]  its input: pre-norm norm_s(stream), kept for LayerNorm (RMSNorm's is recomputed
 *          in the backward: one row pass); post-norm the stream, kept for s > SELF
 *   r[s]   the residual sum: pre-norm kept for s before the last (the next stream); post-norm
 *          always (the norm's backward reads it)
 *   o[s]   sandwich: f_s's output before post_s
 *   d[s]   the dropout stream at its residual dropout. */
typedef struct attn__block_saved {
    const float *x0, *mem;
    float *in[ATTN__SUB_N], *r[ATTN__SUB_N], *o[ATTN__SUB_N];
    attn__attn_saved at[2];
    attn__ffn_saved ff;
    attn__llama_mlp_saved mlp;
    attn__rng d[ATTN__SUB_N];
} attn__block_saved;

/* Allocates sv's buffers (attn__rec_f32 in t, NULL: the workspace frame) for B sequences of T
 * rows (and memories of S). */
ATTN__HIDDEN attn_status attn__block_saved_alloc(attn_ctx *ctx, attn__tape *t,
                                                 const attn__block *b, int64_t B, int64_t T,
                                                 int64_t S, attn__block_saved *sv);
/* x [B T, E] -> out [B T, E]; out may be x without a record.  sv: NULL, or from
 * attn__block_saved_alloc, filled (then out must not be x). */
ATTN__HIDDEN attn_status attn__block_fwd(attn_ctx *ctx, const attn__block *b, const float *x,
                                         float *out, const attn__block_io *io,
                                         attn__block_saved *sv);
/* The backward from sv (io: the sizes and RoPE rows): dx [B T, E] overwritten (NULL: only the
 * parameters' gradients, which accumulate through g); dmem [B S, E] accumulates (cross). */
ATTN__HIDDEN attn_status attn__block_bwd(attn_ctx *ctx, const attn__block *b,
                                         const attn__gmap *g, const attn__block_saved *sv,
                                         const attn__block_io *io, const float *dout, float *dx,
                                         float *dmem);
/* The same recomputing the forward from x0 and io (its rng at the forward's state). */
ATTN__HIDDEN attn_status attn__block_bwd_re(attn_ctx *ctx, const attn__block *b,
                                            const attn__gmap *g, const float *x0,
                                            const attn__block_io *io, const float *dout,
                                            float *dx, float *dmem);

/* A Transformer layer of cfg (nn.TransformerEncoderLayer, or with dec
 * nn.TransformerDecoderLayer) registered under prefix with torch's names, as a block. */
ATTN__HIDDEN attn_status attn__block_tf_reg(attn_ctx *ctx, attn_module *m, const char *prefix,
                                            attn__block *b, const attn_transformer_config *cfg,
                                            int dec);
/* The module of a single Transformer layer (attn_encoder_layer_create, ...). */
typedef struct attn__tf_layer {
    attn__block b;
    attn_transformer_config cfg;
} attn__tf_layer;

/* Encoder and decoder stacks (nn.TransformerEncoder/Decoder and the halves of
 * nn.Transformer); layer arrays live in the module's extra allocation. */
typedef struct attn__stack {
    attn_transformer_config cfg;
    int64_t nenc, ndec;
    int enc_norm, dec_norm;
    attn__block *enc, *dec;
    attn__ln enc_final, dec_final;
    /* arena offsets (elements) for attn__grad_ready: layer i of the encoder spans
     * [enc_at + i enc_len, + enc_len) (every layer has the same parameters), its final norm
     * [encn_at, + encn_len); the same for the decoder */
    int64_t enc_at, enc_len, encn_at, encn_len, dec_at, dec_len, decn_at, decn_len;
} attn__stack;
/* Forward in place: x [B, L, E] (encoder) / x [B, T, E] with memory [B, S, E] (decoder).
 * cross_w: NULL or [B, T, S], the last decoder layer's cross-attention weights (head mean). */
ATTN__HIDDEN attn_status attn__enc_run(attn_ctx *ctx, const attn__stack *s, float *x, int64_t B,
                                       int64_t L, const attn_mask *mask, const attn_mask *kpm,
                                       int is_causal, attn__rng *rng);
ATTN__HIDDEN attn_status attn__dec_run(attn_ctx *ctx, const attn__stack *s, float *x,
                                       const float *mem, int64_t B, int64_t T, int64_t S,
                                       const attn_mask *tm, const attn_mask *mm,
                                       const attn_mask *tk, const attn_mask *mk,
                                       int tgt_is_causal, attn__rng *rng, float *cross_w);

/* The record of a stack's forward: an encoder stack (dec = 0; x [B, T, E]; m1 = mask,
 * m2 = key padding mask) or a decoder stack (dec = 1; x [B, T, E] over mem [B, S, E];
 * m1 = tgt_mask, m2 = tgt key padding mask, mm = memory_mask, mk = memory key padding mask).
 * With ckpt (activation checkpointing) only each layer's input and dropout stream are kept,
 * and the backward runs each layer's forward again, one layer at a time. */
typedef struct attn__stack_saved {
    int decoder, ckpt, is_causal;
    int64_t N, B, T, S;
    attn_mask m1, m2, mm, mk; /* kind NONE when absent; their data must outlive the record */
    const float *mem;         /* decoder: the caller's buffer */
    float *xs;                /* [N + 1, B, T, E]: layer i's input, then the last output
                                 ([N, ...] where the caller's out holds that) */
    float *out;               /* the stack's output: the final norm's, xs + N*B*T*E, or out */
    attn__block_saved *ls;    /* [N] records (not with ckpt) */
    attn__rng *rs;            /* [N] the stream entering each layer */
} attn__stack_saved;
/* Runs the stack forward from x (copied; not changed) and fills *rec, its buffers from t
 * (NULL: the caller's workspace frame).  Masks may be NULL.  out: NULL, or a [B, T, E] buffer
 * of the caller's, disjoint from x, into which a stack without a final norm writes its output
 * directly (the backward does not read it; rec->out then points there, for the call only). */
ATTN__HIDDEN attn_status attn__stack_fwd_rec(attn_ctx *ctx, const attn__stack *s, int dec,
                                             int ckpt, attn__tape *t, const float *x,
                                             const float *mem, int64_t B, int64_t T, int64_t S,
                                             const attn_mask *m1, const attn_mask *m2,
                                             const attn_mask *mm, const attn_mask *mk,
                                             int is_causal, attn__rng *rng,
                                             attn__stack_saved *rec, float *out);
/* Backward from rec: dx [B, T, E] overwritten; dmem [B, S, E] (decoder) accumulates.  Parameter
 * gradients accumulate through g in the order of the recomputing backwards (the same bits). */
ATTN__HIDDEN attn_status attn__stack_bwd_rec(attn_ctx *ctx, const attn__stack *s,
                                             const attn__gmap *g, const attn__stack_saved *rec,
                                             const float *dout, float *dx, float *dmem);
/* Registers a stack's layers and final norms under the given prefixes (NULL norm = none).
 * tail_bytes of zeroed memory for the caller follow the layers in m->extra (*tail). */
ATTN__HIDDEN attn_status attn__stack_reg(attn_ctx *ctx, attn_module *m, attn__stack *s,
                                         const attn_transformer_config *cfg, int64_t nenc,
                                         int64_t ndec, const char *enc_prefix,
                                         const char *dec_prefix, const char *enc_norm,
                                         const char *dec_norm, size_t tail_bytes, void **tail);
ATTN__HIDDEN attn_status attn__check_tcfg(attn_ctx *ctx, const attn_transformer_config *cfg);

/* Validates an F32 sequence tensor [B, L, E] (E fixed, B/L from the tensor, or checked when
 * *B / *L are nonzero) and returns a contiguous pointer (maybe a workspace copy). */
ATTN__HIDDEN attn_status attn__seq_in(attn_ctx *ctx, const attn_tensor *t, const char *what,
                                      int64_t E, int64_t *B, int64_t *L, const float **p);
/* Validates an output sequence [B, L, E] and gives a contiguous buffer to fill (the tensor's
 * memory or workspace); finish with attn__seq_out_end. */
ATTN__HIDDEN attn_status attn__seq_out(attn_ctx *ctx, attn_tensor *t, const char *what,
                                       int64_t B, int64_t L, int64_t E, float **p);
ATTN__HIDDEN void attn__seq_out_end(float *p, attn_tensor *t);
/* An optional input-gradient output (NULL or no data: not wanted, ATTN_OK): F32 [B, L, E]. */
ATTN__HIDDEN attn_status attn__seq_grad_out(attn_ctx *ctx, const attn_tensor *t,
                                            const char *what, int64_t B, int64_t L, int64_t E);
/* Where a sequence gradient is computed: t's own memory when t (checked by attn__seq_grad_out
 * and attn__check_outputs) is contiguous, else a workspace [B, L, E]; attn__store(p, t) then
 * copies nothing, or the result into t. */
ATTN__HIDDEN attn_status attn__seq_grad_buf(attn_ctx *ctx, const attn_tensor *t, int64_t B,
                                            int64_t L, int64_t E, float **p);

#endif
