/* attn_eval's internals (src/eval/): the framework (eval.c) and the op families beside it
 * (ops_basic.c, ops_attention.c, ops_layers.c, ops_models.c, ops_llm.c).
 *
 * The framework reads the attributes the op declares (strictly: unknown names are refused),
 * hands the op its tensors (converted to F32 or ids, masks in the op's PyTorch polarity),
 * binds modules to the file's parameters, checks that every tensor was consumed, and writes
 * outputs and gradients.  An op is a function `attn_status op_NAME(ev *e)` in its family's file
 * with its attribute and input lists beside it, registered there with EV_OP; EV_OPS below is
 * the table, in the order `attn eval --list-ops` prints it.  Ops call only the public API.
 *
 * The framework's functions are spelled ev_* in this folder and are attn__ev_* in the library
 * (the #defines below), like every other internal symbol. */
#ifndef ATTN_EVAL_EVAL_H
#define ATTN_EVAL_EVAL_H

#include "internal.h"

#define EV_MAX_ATTRS 32
#define EV_MAX_MODS 4

#define ev_new attn__ev_new
#define ev_claim attn__ev_claim
#define ev_reshape attn__ev_reshape
#define ev_has attn__ev_has
#define ev_i attn__ev_i
#define ev_f attn__ev_f
#define ev_b attn__ev_b
#define ev_e attn__ev_e
#define ev_find attn__ev_find
#define ev_present attn__ev_present
#define ev_dims attn__ev_dims
#define ev_to_f32 attn__ev_to_f32
#define ev_input attn__ev_input
#define ev_mask attn__ev_mask
#define ev_ids attn__ev_ids
#define ev_module attn__ev_module
#define ev_ready attn__ev_ready
#define ev_write attn__ev_write
#define ev_write_as attn__ev_write_as
#define ev_grad_out attn__ev_grad_out
#define ev_grad_out_like attn__ev_grad_out_like
#define ev_grad_like attn__ev_grad_like
#define ev_write_grad attn__ev_write_grad
#define ev_write_grad_as attn__ev_write_grad_as
#define ev_write_param_grads attn__ev_write_param_grads
#define ev_tf_config attn__ev_tf_config
#define ev_hint_needs_mask attn__ev_hint_needs_mask
#define ev_make_causal attn__ev_make_causal
#define ev_heads_divide attn__ev_heads_divide
#define ev_new_like attn__ev_new_like
#define ev_num_layers attn__ev_num_layers
#define ev_optional attn__ev_optional
#define ev_acts attn__ev_acts
#define A_NONE attn__ev_a_none
#define A_TF_LAYER attn__ev_a_tf_layer

/* ---- op descriptions ------------------------------------------------------------------- */

/* An attribute: name, type ('b' bool, 'i' int, 'f' float, 'e' one of `choices` "a|b|c") and
 * default text.  def == EV_REQ: required; def == EV_OPT: optional with no default. */
typedef struct ev_attr {
    const char *name;
    char type;
    const char *def;
    const char *choices;
} ev_attr;

ATTN__HIDDEN extern const char ev_optional[];
#define EV_REQ NULL
#define EV_OPT ev_optional

typedef struct ev_val {
    int present; /* given in the file, or by a default */
    int64_t i;
    double f;
    int b;
    int e; /* index into choices */
} ev_val;

typedef struct ev ev;
typedef struct ev_op {
    const char *name;
    const ev_attr *attrs[2];   /* up to two lists (shared + op-specific), NULL-terminated */
    const char *const *inputs; /* tensor names that are inputs (not module parameters) */
    attn_status (*run)(ev *e);
} ev_op;

struct ev {
    attn_ctx *ctx;
    const attn_st *in;
    attn_st_writer *out;
    const ev_op *op;
    size_t nt;
    unsigned char *used; /* per tensor of `in`: consumed as an input or a parameter */
    void **bufs;         /* every allocation, freed at the end */
    size_t nbufs, capbufs;
    attn_module *mods[EV_MAX_MODS];
    const char *pfx[EV_MAX_MODS];
    int nmods;
    attn_llm *llm; /* the op's model (llama_for_causal_lm), freed at the end */
    int ready;
    const ev_attr *defs[EV_MAX_ATTRS];
    ev_val vals[EV_MAX_ATTRS];
    int nattrs;
    int bwd;      /* metadata backward = true: also compute gradients from grad.out */
    int bwd_done; /* set by the op once it has written its gradients */
};

#define EV_END {NULL, 0, NULL, NULL}
#define ACTS "relu|gelu|gelu_tanh"

/* ---- shared attribute lists ------------------------------------------------------------- */

ATTN__HIDDEN extern const attn_activation ev_acts[]; /* by index into ACTS */
ATTN__HIDDEN extern const ev_attr A_NONE[];          /* no attributes */
/* torch.nn.TransformerEncoderLayer / DecoderLayer constructor arguments. */
ATTN__HIDDEN extern const ev_attr A_TF_LAYER[];

/* ---- the framework (eval.c) ------------------------------------------------------------- */

/* Memory: every buffer belongs to e and is freed when attn_eval returns. */
/* A new zeroed contiguous F32 tensor. */
ATTN__HIDDEN attn_status ev_new(ev *e, const char *what, int ndim, const int64_t *shape,
                                attn_tensor *t);
/* Output [B, L, E] like x (3-D). */
ATTN__HIDDEN attn_status ev_new_like(ev *e, const attn_tensor *x, attn_tensor *o);
/* An output whose size comes from attributes alone (no data of the file bounds it): at most
 * ATTN_LIMIT_FILE_BYTES, the most a file read back into memory may hold. */
ATTN__HIDDEN attn_status ev_claim(ev *e, const char *what, int ndim, const int64_t *shape);
/* A contiguous view of the same data with another shape (same element count). */
ATTN__HIDDEN attn_tensor ev_reshape(const attn_tensor *t, int ndim, const int64_t *shape);

/* Attributes, parsed and checked before the op runs: whether given (or defaulted), and the
 * value as int, float, bool or the index of an 'e' attribute's choice. */
ATTN__HIDDEN int ev_has(const ev *e, const char *name);
ATTN__HIDDEN int64_t ev_i(const ev *e, const char *name);
ATTN__HIDDEN double ev_f(const ev *e, const char *name);
ATTN__HIDDEN int ev_b(const ev *e, const char *name);
ATTN__HIDDEN int ev_e(const ev *e, const char *name);
/* Refuses E, H unless both are positive and H divides E (en, hn: the attributes' names). */
ATTN__HIDDEN attn_status ev_heads_divide(ev *e, const char *en, int64_t E, const char *hn,
                                         int64_t H);
/* A layer count attribute in [1, 100000]. */
ATTN__HIDDEN attn_status ev_num_layers(ev *e, const char *name, int64_t *n);
/* Fills cfg from the transformer attributes (A_TF_LAYER: d_model/nhead, dim_feedforward, ...). */
ATTN__HIDDEN attn_status ev_tf_config(ev *e, attn_transformer_config *cfg);

/* Tensors of the input file. */
/* The index of tensor name in the file (info: its description), or -1. */
ATTN__HIDDEN long ev_find(const ev *e, const char *name, attn_st_tensor *info);
ATTN__HIDDEN int ev_present(const ev *e, const char *name);
/* Refuses t (named name) unless it has min_nd..max_nd dimensions, none of size 0. */
ATTN__HIDDEN attn_status ev_dims(ev *e, const attn_st_tensor *t, const char *name, int min_nd,
                                 int max_nd);
/* Converts with attn_st_to_f32, naming the tensor in any error. */
ATTN__HIDDEN attn_status ev_to_f32(ev *e, const attn_st_tensor *info, const char *name,
                                   float **out);
/* A floating input as a contiguous F32 tensor; absent -> t->data == NULL (or an error if
 * required). */
ATTN__HIDDEN attn_status ev_input(ev *e, const char *name, int required, int min_nd, int max_nd,
                                  attn_tensor *t);
/* A mask: BOOL/U8 keep their bytes with kind bool_kind (the op's PyTorch polarity); floating
 * dtypes become ADD.  Absent -> kind NONE. */
ATTN__HIDDEN attn_status ev_mask(ev *e, const char *name, attn_mask_kind bool_kind, int max_nd,
                                 attn_mask *m);
/* Token ids (I64/I32), decoded from little-endian bytes into an aligned buffer. */
ATTN__HIDDEN attn_status ev_ids(ev *e, const char *name, int min_nd, int max_nd, attn_tensor *t);
/* Refuses a causal hint that PyTorch would refuse without its mask. */
ATTN__HIDDEN attn_status ev_hint_needs_mask(ev *e, const char *hint, const attn_mask *m,
                                            const char *mask_name);
/* Combines a [..., L, S] mask (our own copy) with the top-left causal mask in place, for hints
 * whose layer call has no causal flag of its own: PyTorch defines the hint only for a causal
 * mask, where this changes nothing.  Other shapes are left for the layer to refuse. */
ATTN__HIDDEN void ev_make_causal(attn_mask *m, int64_t L, int64_t S);

/* Modules. */
/* Takes ownership of *pm (created with status st) and marks the file's tensors that name its
 * parameters under prefix. */
ATTN__HIDDEN attn_status ev_module(ev *e, attn_status st, attn_module **pm, const char *prefix);
/* Called once inputs and modules are known: refuses leftover tensors, then loads every
 * module strictly (a missing or misshapen parameter is reported by attn_module_load). */
ATTN__HIDDEN attn_status ev_ready(ev *e);

/* Outputs and gradients. */
/* Writes t under name. */
ATTN__HIDDEN attn_status ev_write(ev *e, const char *name, const attn_tensor *t);
/* Writes t under name with another shape (the same elements, contiguous). */
ATTN__HIDDEN attn_status ev_write_as(ev *e, const char *name, const attn_tensor *t, int ndim,
                                     const int64_t *shape);
/* grad.out, the cotangent of "out": required with backward = true, and of the shape that "out"
 * has in the output file (ndim, shape).  Returned contiguous, as F32, in that shape; the op
 * reshapes it as it reshapes its own output. */
ATTN__HIDDEN attn_status ev_grad_out(ev *e, int ndim, const int64_t *shape, attn_tensor *g);
/* grad.out for an output held as t (contiguous) and written as t itself. */
ATTN__HIDDEN attn_status ev_grad_out_like(ev *e, const attn_tensor *t, attn_tensor *g);
/* A new zeroed gradient of the shape of t. */
ATTN__HIDDEN attn_status ev_grad_like(ev *e, const char *name, const attn_tensor *t,
                                      attn_tensor *g);
/* Writes "grad." + name (as t, or with another shape). */
ATTN__HIDDEN attn_status ev_write_grad(ev *e, const char *name, const attn_tensor *t);
ATTN__HIDDEN attn_status ev_write_grad_as(ev *e, const char *name, const attn_tensor *t,
                                          int ndim, const int64_t *shape);
/* Writes the gradient of every parameter of every module as "grad." + prefix + name, and
 * marks the op's backward as done. */
ATTN__HIDDEN attn_status ev_write_param_grads(ev *e);

/* An absent mask (kind NONE) as NULL, as the layer calls take it. */
static inline const attn_mask *opt_mask(const attn_mask *m) { return m->kind ? m : NULL; }

/* ---- the op table ------------------------------------------------------------------------ */

/* Registers op_NAME with its attribute lists (up to two, NULL: none) and input tensor names. */
#define EV_OP(n, a1, a2, in) const ev_op attn__ev_op_##n = {#n, {a1, a2}, in, op_##n}

#define EV_OPS(X)                                                                                  \
    X(sdpa)                                                                                        \
    X(multihead_attention)                                                                         \
    X(transformer_encoder_layer)                                                                   \
    X(transformer_decoder_layer)                                                                   \
    X(transformer_encoder)                                                                         \
    X(transformer_decoder)                                                                         \
    X(transformer)                                                                                 \
    X(simple_self_attention)                                                                       \
    X(self_attention_v1)                                                                           \
    X(self_attention_v2)                                                                           \
    X(causal_attention)                                                                            \
    X(seed_multihead_attention)                                                                    \
    X(general_attention)                                                                           \
    X(additive_attention)                                                                          \
    X(positional_encoding)                                                                         \
    X(learned_positional_encoding)                                                                 \
    X(linear)                                                                                      \
    X(layer_norm)                                                                                  \
    X(relu)                                                                                        \
    X(gelu)                                                                                        \
    X(tanh)                                                                                        \
    X(softmax)                                                                                     \
    X(embedding)                                                                                   \
    X(cross_entropy)                                                                               \
    X(feed_forward)                                                                                \
    X(vit_self_attention)                                                                          \
    X(gpt)                                                                                         \
    X(vit)                                                                                         \
    X(rms_norm)                                                                                    \
    X(rotary_embedding)                                                                            \
    X(llama_mlp)                                                                                   \
    X(llama_attention)                                                                             \
    X(llama_decoder_layer)                                                                         \
    X(llama_for_causal_lm)

#define EV_DECLARE_OP(n) ATTN__HIDDEN extern const ev_op attn__ev_op_##n;
EV_OPS(EV_DECLARE_OP)
#undef EV_DECLARE_OP

#endif
