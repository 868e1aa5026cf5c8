/* Internals of the Llama-architecture layers (RMSNorm, RoPE, SwiGLU MLP, grouped-query
 * attention, the decoder block) shared by their modules (src/layers/) and by the whole model
 * (src/models/llama.c).  Public contracts: attn.h, "Llama-architecture language models".
 *
 * Weights.  Every matrix of the block is an attn__weight (layers.h) of any storage type, and
 * every product with one goes through the one door, attn__matmul (src/layers/matmul.c). */
#ifndef ATTN_LAYERS_LLM_H
#define ATTN_LAYERS_LLM_H

#include "layers.h"

/* ---- RoPE (src/layers/rope.c) --------------------------------------------------------------
 * inv_freq [D/2] as attn_rope defines it. */
ATTN__HIDDEN void attn__rope_inv_freq(float theta, int64_t D, float *inv_freq);
/* cos and sin [n, D/2] of positions pos[n] (or, pos NULL, of p0, p0 + 1, ...). */
ATTN__HIDDEN void attn__rope_table(const float *inv_freq, int64_t D, const int64_t *pos,
                                   int64_t p0, int64_t n, float *cs, float *sn);
/* In place on rows r < M of x (row stride ldx), nh heads of D each (head h at x + h*D): the
 * rotation of row r with cos/sin row r of the table (cs, sn [M, D/2]).  Pair i of a head is
 * (x[i], x[i + D/2]) (HF's rotate_half layout), or with interleaved (x[2i], x[2i + 1]): the
 * layout of GGUF files, whose converters permute the rows of q_proj and k_proj within each head
 * (new row 2i + j = old row j*D/2 + i) for GGML's rope; the same arithmetic on each pair. */
ATTN__HIDDEN void attn__rope_rows(float *x, int64_t ldx, int64_t M, int64_t nh, int64_t D,
                                  const float *cs, const float *sn, int interleaved);
/* Its backward, in place on the gradient rows d: the rotation by -f. */
ATTN__HIDDEN void attn__rope_rows_bwd(float *d, int64_t ldd, int64_t M, int64_t nh, int64_t D,
                                      const float *cs, const float *sn, int interleaved);

/* ---- RMSNorm backward (src/layers/rmsnorm.c) -------------------------------------------------
 * For y = attn__rms_norm(x; w, eps) (ew.h), x [M, E] (row stride ldx), dy (lddy): dx (lddx)
 * OVERWRITTEN (may be x or dy), dw [E] ACCUMULATES (w NULL: no weight; dx, dw may be NULL).  r
 * recomputed with the forward's arithmetic, every sum in double; the same bits for any thread
 * count.  Fails only when the workspace runs out. */
ATTN__HIDDEN attn_status attn__rms_norm_bwd(attn_ctx *ctx, const float *x, int64_t ldx,
                                            const float *w, float eps, const float *dy,
                                            int64_t lddy, float *dx, int64_t lddx, float *dw,
                                            int64_t M, int64_t E);

/* ---- the gated feed-forward (swiglu.c; its types in layers.h) ------------------------- */
/* out[B*T, E] = r + down(silu(gate(x)) * up(x)) (r may be NULL; may not overlap out). */
ATTN__HIDDEN attn_status attn__llama_mlp_fwd(attn_ctx *ctx, const attn__llama_mlp *p,
                                             const float *x, int64_t B, int64_t T,
                                             const float *r, float *out);

/* ---- training: records of the forwards and the backwards -----------------------------------
 * The forwards below with a record (rec non-NULL) compute what they compute without one (the
 * same bits) and keep what the backward reads; the backwards read the record and the same
 * inputs.  Records hold buffers from attn__rec_f32 (a tape, or the caller's workspace frame,
 * layers.h): the *_saved_alloc functions allocate them, the forwards only fill them.  Parameter
 * gradients ACCUMULATE through g (the module's attn__gmap: the gradient of a weight is found
 * from its address); input gradients are OVERWRITTEN.  Every weight a backward reads must be
 * ATTN_Q_F32 (training runs on F32 master weights): another type is ATTN_E_UNSUPPORTED, naming
 * it.  Sizes as the forwards', M = B*T rows; results are the same for any thread count.
 *
 * MLP: g = gate(x), u = up(x) [M, F] (before the activation); out = down(silu(g) * u) + r.
 * Attention: attn__attn_saved (layers.h): the projections after RoPE (q, k, v of a token side
 * by side), the attention output and its log-sum-exp (the fused backward starts from them). */
/* A Llama-family layer's record (attn__block_saved) holds per token, x0 not counted:
 * E + (H + 2 Hkv) D + H D + H + 2 F floats (with sandwich norms 2 E more). */
ATTN__HIDDEN attn_status attn__llama_mlp_saved_alloc(attn_ctx *ctx, attn__tape *t,
                                                     const attn__llama_mlp *p, int64_t M,
                                                     attn__llama_mlp_saved *rec);
/* attn__llama_mlp_fwd of M rows with a record (NULL: the forward itself); the rows are
 * sequences of T rows, or some of their rows (attn__matmul's M and T). */
ATTN__HIDDEN attn_status attn__llama_mlp_fwd_rec(attn_ctx *ctx, const attn__llama_mlp *p,
                                                 const float *x, int64_t M, int64_t T,
                                                 const float *r, float *out,
                                                 attn__llama_mlp_saved *rec);
/* Backwards: x the forward's input [M, E], dout [M, E], dx [M, E] (may be NULL; not dout). */
ATTN__HIDDEN attn_status attn__llama_mlp_bwd(attn_ctx *ctx, const attn__llama_mlp *p,
                                             const attn__gmap *g, const attn__llama_mlp_saved *rec,
                                             const float *x, int64_t M, const float *dout,
                                             float *dx);

/* Layer i's settings from the config as a block (pre-norm RMSNorm, sandwich norms, the
 * attention's sizes, window and RoPE table, the gated feed-forward's activation) into l, whose
 * weights and norm weights are kept. */
ATTN__HIDDEN void attn__llm_block_cfg(const attn_llm_config *c, int64_t i, attn__block *l);
/* inv_freq [D/2] of the global layers (rope_theta, then the config's RoPE scaling: div the file's
 * divisors with rope_scaling 3) and, inv_local not NULL, of the local layers
 * (rope_theta_local). */
ATTN__HIDDEN void attn__llm_inv_freq(const attn_llm_config *c, const float *div, float *inv,
                                     float *inv_local);

/* The largest size a config field may have (hidden_size, heads, head_dim, intermediate_size). */
#define ATTN__LLM_MAX_DIM 16777216
/* Validates the fields of cfg that a block part reads (hidden_size; intermediate_size with mlp;
 * the heads, head_dim and rope_theta with attn; rms_norm_eps with both) and resolves
 * num_kv_heads and head_dim into *out.  ATTN_E_INVALID naming the field; `what` names the
 * caller in messages. */
/* ATTN_E_UNSUPPORTED, naming what, when cfg sets a family setting beyond Llama's (qk_norm ...
 * rope_theta_local): the trainable modules run Llama's block only. */
ATTN__HIDDEN attn_status attn__llm_cfg_llama(attn_ctx *ctx, const attn_llm_config *cfg,
                                             const char *what);
ATTN__HIDDEN attn_status attn__llm_cfg_block(attn_ctx *ctx, const attn_llm_config *cfg,
                                             int mlp, int attn, const char *what,
                                             attn_llm_config *out);

/* ---- the modules' shared pieces -------------------------------------------------------------
 * Registration of a block's linears under prefix with HF's names (attn__lin: nn.Linear's init)
 * and, once the module is finished, their binding as F32 weights. */
ATTN__HIDDEN attn_status attn__llama_attn_reg(attn_ctx *ctx, attn_module *m, const char *prefix,
                                              const attn_llm_config *c, attn__lin l[4]);
ATTN__HIDDEN void attn__llama_attn_bind(attn__attention *a, const attn_llm_config *c,
                                        const attn__lin l[4]);
ATTN__HIDDEN attn_status attn__llama_mlp_reg(attn_ctx *ctx, attn_module *m, const char *prefix,
                                             const attn_llm_config *c, attn__lin l[3]);
ATTN__HIDDEN void attn__llama_mlp_bind(attn__llama_mlp *p, const attn__lin l[3]);
/* Checks x ([B, T, E] or [T, E], F32) and out (its shape; not overlapping x or m's parameters)
 * and gives both as 3-D views. */
ATTN__HIDDEN attn_status attn__llm_seq_views(attn_ctx *ctx, const attn_tensor *x,
                                             const attn_tensor *out, const attn_module *m,
                                             const char *fn, attn_tensor *xv, attn_tensor *ov);
/* The forward of the attention module (blk NULL: a) or of the layer module (blk) on x with
 * positions (attn_llama_attention_forward's arguments); c the resolved config. */
ATTN__HIDDEN attn_status attn__llm_module_run(attn_ctx *ctx, const attn_module *m,
                                              const attn__block *blk,
                                              const attn__attention *a, const attn_llm_config *c,
                                              const attn_tensor *x, const attn_tensor *positions,
                                              attn_tensor *out, const char *fn);

/* ---- the modules' backward and training forward (src/layers/llama_layer.c) ----------------
 * One of the three modules' parts (exactly one of blk, a, p set; c the resolved config, read
 * for the RoPE rows: NULL for the MLP) behind the public entry points of the three modules. */
typedef struct attn__llm_part {
    const attn__block *blk;
    const attn__attention *a;
    const attn__llama_mlp *p;
    const attn_llm_config *c;
} attn__llm_part;
/* The recomputing backward: the forward again with a record in the workspace, then its
 * backward; x, positions as the forward's, dout and dx the shape of x (dx may be NULL). */
ATTN__HIDDEN attn_status attn__llm_part_bwd(attn_ctx *ctx, const attn_module *m,
                                            const attn__llm_part *pt, const attn_tensor *x,
                                            const attn_tensor *positions,
                                            const attn_tensor *dout, attn_tensor *dx,
                                            const char *fn);
/* The training forward into saved (x copied, the RoPE rows and the part's record) and its
 * backward. */
ATTN__HIDDEN attn_status attn__llm_part_fwd_train(attn_ctx *ctx, const attn_module *m,
                                                  const attn__llm_part *pt, const attn_tensor *x,
                                                  const attn_tensor *positions,
                                                  attn_tensor *out, attn_saved *saved,
                                                  const char *fn);
ATTN__HIDDEN attn_status attn__llm_part_bwd_saved(attn_ctx *ctx, const attn_module *m,
                                                  const attn__llm_part *pt,
                                                  const attn_saved *saved,
                                                  const attn_tensor *dout, attn_tensor *dx,
                                                  const char *fn);
/* The RoPE layout of a module's attention (attn_llama_set_rope_interleaved, which lives with
 * the whole model in src/models/llama_lm.c). */
ATTN__HIDDEN void attn__llama_attn_mod_interleave(attn_module *m, int on);
ATTN__HIDDEN void attn__llama_layer_mod_interleave(attn_module *m, int on);

#endif
