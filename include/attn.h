/*
 * attn.h -- attention and Transformer layers in C.  This header is the manual.
 *
 * attn is a C11 library with no dependency beyond libc, libm and threads.  Every layer matches
 * the PyTorch module of the same name: same mathematics, same parameter names as its
 * state_dict, so weights move across directly (see attn_module_load).
 *
 * A first program (scaled dot-product attention, B=1, H=2, L=S=3, D=4):
 *
 *     #include <attn.h>
 *     #include <stdio.h>
 *     int main(void) {
 *         attn_ctx *ctx;
 *         if (attn_ctx_create(NULL, &ctx) != ATTN_OK) return 1;
 *         float q[24], k[24], v[24], o[24];
 *         for (int i = 0; i < 24; i++) q[i] = k[i] = v[i] = (float)i / 24;
 *         attn_tensor Q = attn_view4(q, 1, 2, 3, 4), K = attn_view4(k, 1, 2, 3, 4),
 *                     V = attn_view4(v, 1, 2, 3, 4), O = attn_view4(o, 1, 2, 3, 4);
 *         attn_sdpa_options opt = attn_sdpa_defaults();
 *         opt.causal = ATTN_CAUSAL_TOP_LEFT;
 *         attn_status st = attn_sdpa(ctx, &Q, &K, &V, NULL, &opt, &O, NULL, NULL);
 *         if (st != ATTN_OK) fprintf(stderr, "%s\n", attn_ctx_errmsg(ctx));
 *         else printf("o[0][0][2] = %f\n", o[8]);
 *         attn_ctx_free(ctx);
 *         return st != ATTN_OK;
 *     }
 *
 * Build with `cc prog.c $(pkg-config --cflags --libs attn)`.
 *
 * API tiers (as zstd.h has them).  The CORE tier (status, context, tensors, ops, attention,
 * modules, safetensors, backward, training primitives) is stable.  The EXTRA tier at the end
 * of this header (BERT embeddings, attn eval) is supported but may still change; define
 * ATTN_CORE_ONLY to leave it out.  The demo tasks (dates translator, character-level GPT) are
 * a separate DEMO tier in <attn_tasks.h>: examples of whole training loops that may change
 * at any release.  All three are in the one library.
 *
 * ---------------------------------------------------------------------------------------------
 * Conventions (read once; every declaration below relies on them)
 *
 *  Shape letters.  B batch, H query heads, Hkv key/value heads, L query (target) length,
 *  S key (source) length, E model dimension, D head dimension (query/key), Dv value head
 *  dimension, T tokens, V vocabulary size, F feed-forward dimension.  Layers are batch-first:
 *  sequences are [B, L, E] as PyTorch's batch_first=True.
 *
 *  Ownership.  attn_tensor is a non-owning view: the caller owns the memory it points to, and
 *  it must stay valid for the duration of the call only.  Objects made by attn_*_create are
 *  owned by the caller and released by the matching *_free, which accepts NULL.
 *
 *  Errors.  Every function that can fail returns attn_status; ATTN_OK is 0.  On failure the
 *  context keeps a message with the detail (attn_ctx_errmsg), e.g. which shape did not
 *  broadcast.  Output tensors may have been partly written when a call fails.  The library
 *  never prints, exits or aborts.
 *
 *  Masks.  The C API names the polarity in the type (attn_mask_kind): ATTN_MASK_KEEP means a
 *  nonzero entry may be attended (PyTorch scaled_dot_product_attention's bool mask);
 *  ATTN_MASK_BLOCK means a nonzero entry is masked out (nn.MultiheadAttention and
 *  nn.Transformer's bool masks); ATTN_MASK_ADD is a float mask added to the scores (-inf
 *  blocks).  A query row whose keys are all masked gives an output of zeros (and zero
 *  weights), never NaN.
 *
 *  Memory inside calls.  Compute calls take temporary memory from the context's workspace,
 *  which grows through the context's allocator as needed and is kept for later calls; a
 *  context created with a fixed caller workspace never allocates and returns
 *  ATTN_E_WORKSPACE when it is too small.  Modules allocate their parameters at create time.
 *
 *  Outputs.  An output view may not overlap any input or any other output of the same call:
 *  such a call fails with ATTN_E_INVALID and a message naming both ("attn_sdpa: out overlaps
 *  q").  Where a function states that an output may be an input (the elementwise ops that work
 *  in place), it must be exactly that view (same data, shape and strides); a partial overlap is
 *  refused all the same.  Overlap is judged on each view's memory extent, from its lowest to
 *  its highest addressed byte, so two views that interleave without sharing an element (the
 *  even and the odd columns of one buffer) are refused too; two disjoint slices of one buffer
 *  (its first and second halves, or two blocks of rows) are fine.  An output may not give two
 *  of its elements the same memory either: a stride of 0 on a dimension of size > 1 is refused
 *  (broadcasting is for inputs), as are strides that interleave its own dimensions.  The
 *  outputs of a module call may not overlap the module's parameters or gradients either.  These
 *  checks look at shapes and strides only, never at the data.
 *
 *  Threads.  A context is used by one thread at a time: calls on one context must not overlap
 *  (it holds the workspace, the worker pool and the last error).  A module or an attn_bert may
 *  be shared by several threads at once, each calling with its own context, as long as every
 *  call only reads it (forwards, attn_bert_embed) and no thread changes it meanwhile
 *  (attn_module_load, attn_module_init, the backwards, which accumulate into the module's
 *  gradients, attn_adamw_step, attn_bert_set_dtype).  Results are bit-identical for every
 *  thread count.
 *
 *  Finite inputs.  By default compute calls refuse inputs containing NaN or +-Inf
 *  (ATTN_E_NONFINITE; additive masks may hold -inf).  ATTN_CTX_NO_FINITE_CHECK turns the
 *  check off.  Finite inputs can still overflow float inside a call: attn_sdpa,
 *  attn_sdpa_varlen, their backwards and attn_simple_self_attention check every row of their
 *  result and return ATTN_E_NONFINITE when a score (scale q.k plus bias and mask) overflowed
 *  (see attn_sdpa); ATTN_CTX_NO_FINITE_CHECK turns that check off too.  Module calls do not
 *  make it (their attention runs inside the layer): there an overflowing score gives NaN, or
 *  a row of zeros from the fused kernels, with ATTN_OK, as in PyTorch.
 * ---------------------------------------------------------------------------------------------
 */
#ifndef ATTN_H
#define ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(ATTN_SHARED_BUILD)
#define ATTN_API __declspec(dllexport)
#elif defined(__GNUC__)
#define ATTN_API __attribute__((visibility("default")))
#else
#define ATTN_API
#endif

#define ATTN_VERSION_MAJOR 0
#define ATTN_VERSION_MINOR 1
#define ATTN_VERSION_PATCH 0
#define ATTN_VERSION_STRING "0.1.0"
ATTN_API const char *attn_version(void);

/* ############################################################################################
 * CORE TIER (stable): status codes, context, tensor views, ops, attention, modules, safetensors,
 * backward, training primitives.  Everything from here to the EXTRA TIER banner keeps its
 * names, arguments and meaning within a major version (numbers of status codes are frozen).
 * ######################################################################################### */

/* ============================================================================================
 * Status codes.  One list generates the enum and the messages; numbers are frozen once
 * released.  X(name, value, message)
 * ========================================================================================== */
#define ATTN_STATUS_MAP(X)                                                                    \
    X(OK, 0, "success")                                                                       \
    X(E_INVALID, 1, "invalid argument")                                                       \
    X(E_SHAPE, 2, "shape mismatch")                                                           \
    X(E_BROADCAST, 3, "mask does not broadcast")                                              \
    X(E_DTYPE, 4, "unsupported data type")                                                    \
    X(E_NOMEM, 5, "out of memory")                                                            \
    X(E_OVERFLOW, 6, "size overflow")                                                         \
    X(E_NONFINITE, 7, "NaN or infinity in input")                                             \
    X(E_IO, 8, "input/output error")                                                          \
    X(E_FORMAT, 9, "malformed file or data")                                                  \
    X(E_NOT_FOUND, 10, "not found")                                                           \
    X(E_UNSUPPORTED, 11, "unsupported operation or option")                                   \
    X(E_WORKSPACE, 12, "workspace too small")                                                 \
    X(E_INTERNAL, 13, "internal error")                                                       \
    X(E_TIMEOUT, 14, "timed out waiting for another process")

typedef enum attn_status {
#define ATTN__STATUS_ENUM(name, value, msg) ATTN_##name = value,
    ATTN_STATUS_MAP(ATTN__STATUS_ENUM)
#undef ATTN__STATUS_ENUM
} attn_status;

/* Static text for a status ("shape mismatch"); never NULL. */
ATTN_API const char *attn_strerror(attn_status status);
/* The status's symbolic name ("ATTN_E_SHAPE"); never NULL. */
ATTN_API const char *attn_status_name(attn_status status);

/* ============================================================================================
 * Context: thread count, allocator hooks, workspace, last error message.
 * ========================================================================================== */
typedef struct attn_ctx attn_ctx;

/* Allocator hooks (Lua's lua_Alloc style): alloc returns NULL on failure; free accepts NULL. */
typedef void *(*attn_alloc_fn)(void *user, size_t size);
typedef void (*attn_free_fn)(void *user, void *ptr);

enum {
    ATTN_CTX_NO_FINITE_CHECK = 1u << 0, /* do not scan inputs for NaN/Inf */
    /* Mixed precision: every float linear layer's products (forward and backward, weight
     * gradients included) and the products of attention (attn_sdpa and every layer's: q k^T
     * and the weights times v, and the backward's, for L x S >= 32 x 32 without a weights
     * output) take bfloat16 operands with float accumulation, as
     * torch.autocast(dtype=torch.bfloat16) does for nn.Linear and
     * F.scaled_dot_product_attention; parameters, activations, gradients, softmax, lse and
     * everything else stay float.  Fast where the CPU multiplies bf16 (AMX-BF16, AVX512_BF16);
     * about 2^-8 relative error per product (docs/kernels.md). */
    ATTN_CTX_BF16_MATMUL = 1u << 1,
    /* Precision chosen for this CPU: ATTN_CTX_BF16_MATMUL where this CPU multiplies bf16
     * faster than float (AMX-BF16; AVX512_BF16 on AMD Zen 4/5), else float products with the
     * same results as a context without either flag.  Resolved once by attn_ctx_create from a
     * fixed table of measured facts (the same choice every time on one machine, and under
     * ATTN_ISA the choice of the capped set); attn_ctx_flags tells what it became and
     * attn_ctx_describe why (docs/kernels.md, "Precision per CPU").  With
     * ATTN_CTX_BF16_MATMUL also set, bf16 is used. */
    ATTN_CTX_AUTO_MATMUL = 1u << 2
};                                      /* other bits are refused by attn_ctx_create */

typedef struct attn_ctx_params {
    int threads;            /* threads, the caller's among them: 1 = the calling thread
                             * alone; 0 = attn_cpu_default_threads() (one per physical core
                             * this process may run on, within its cgroup's CPU quota) */
    attn_alloc_fn alloc;    /* NULL = malloc */
    attn_free_fn free;      /* NULL = free; must be set together with alloc */
    void *alloc_user;       /* passed to alloc/free */
    void *workspace;        /* optional caller memory for temporaries; NULL = grow on demand */
    size_t workspace_size;  /* bytes at workspace */
    unsigned flags;         /* ATTN_CTX_* */
} attn_ctx_params;

/* params may be NULL for defaults.  *out receives the context (caller frees it).  Invalid
 * params (threads outside [0, 1024], alloc without free or the reverse, a workspace of size 0,
 * flags with bits other than the ATTN_CTX_* ones) are ATTN_E_INVALID; attn_ctx_errmsg(NULL)
 * then says which ("attn_ctx_create: unknown flags 0x4 ...").
 * Threads: a context serves one thread at a time (never two calls on it at once); give each
 * thread its own.  Modules and attn_bert may then be shared read-only between those threads
 * (see Conventions, Threads).
 * Kernels: chosen here, once per context, from the CPU's features and the environment
 * (ATTN_ISA=ref|avx2|avx512 caps the instruction set; ATTN_BF16, ATTN_F16, ATTN_DECODE:
 * docs/kernels.md); changing the environment later affects only contexts created after. */
ATTN_API attn_status attn_ctx_create(const attn_ctx_params *params, attn_ctx **out /* OUT */);
ATTN_API void attn_ctx_free(attn_ctx *ctx);
/* The message of the last failed call on ctx ("" if none); valid until the next call.  With
 * ctx NULL: why the last attn_ctx_create of the calling thread failed ("no context" if it
 * did not). */
ATTN_API const char *attn_ctx_errmsg(const attn_ctx *ctx);
/* The status of the last failed call on ctx (ATTN_OK if none). */
ATTN_API attn_status attn_ctx_status(const attn_ctx *ctx);
ATTN_API void attn_ctx_clear_error(attn_ctx *ctx);
ATTN_API int attn_ctx_threads(const attn_ctx *ctx);
/* The CPUs this process may run on (its affinity mask on Linux, else the online CPUs), in
 * [1, 1024]. */
ATTN_API int attn_cpu_count(void);
/* The thread count of a context created with threads 0, in [1, 1024]: one thread per physical
 * core among the CPUs this process may run on (the two or more hardware threads of an SMT core
 * share its multiply units, so a second thread there adds no arithmetic; llama.cpp counts
 * physical cores too), and no more than the CPU quota of its cgroup rounded up (a container
 * limited to 2 CPUs on a 64-core host gets 2 threads, not 64 contending for 2 CPUs' time).  Linux reads
 * sysfs (topology/thread_siblings_list) and the cgroup (v2 cpu.max, v1 cpu.cfs_quota_us);
 * elsewhere, or where those cannot be read, attn_cpu_count().  attn_ctx_describe says what it
 * found. */
ATTN_API int attn_cpu_default_threads(void);
/* The context's flags as resolved by attn_ctx_create: ATTN_CTX_AUTO_MATMUL is replaced by
 * ATTN_CTX_BF16_MATMUL or by nothing (0 for ctx NULL). */
ATTN_API unsigned attn_ctx_flags(const attn_ctx *ctx);
/* Sets the precision of the context's products from now on (what torch's
 * set_float32_matmul_precision does): 0 for float, ATTN_CTX_BF16_MATMUL, or
 * ATTN_CTX_AUTO_MATMUL (resolved now, as attn_ctx_create does).  Modules, optimisers and
 * saved records do not depend on it, so a run may switch between steps (a resumed run takes
 * the precision it was started with); not while another thread uses ctx.  Other values:
 * ATTN_E_INVALID. */
ATTN_API attn_status attn_ctx_set_matmul(attn_ctx *ctx, unsigned precision);
/* Writes a description of this machine and of the context's choices as lines of text into
 * buf (at most cap bytes, always 0-terminated when cap > 0): the CPU (CPUID vendor, family,
 * model, name), the instruction-set extensions detected, the set chosen (and the ATTN_ISA cap),
 * the kernels of each kind of product (float, bf16, fp16, quantized, int8) and the precision
 * ATTN_CTX_AUTO_MATMUL picks here, with the reason.  *need (may be NULL) receives the length
 * of the whole text; a buf too small gets a truncated text and ATTN_E_OVERFLOW. */
ATTN_API attn_status attn_ctx_describe(attn_ctx *ctx, char *buf, size_t cap,
                                       size_t *need /* OUT, may be NULL */);
/* Largest workspace use seen so far, in bytes. */
ATTN_API size_t attn_ctx_workspace_peak(const attn_ctx *ctx);

/* Gradient-ready hook (for data-parallel training: start summing a part of the gradients over
 * processes while the backward still runs; attn_mpi.h's attn_dp uses it).  While set, the
 * training backwards of the models (every backward that runs a Transformer stack: GPT,
 * seq2seq, ViT, encoder/decoder stacks; a trainable attn_llm's module) call fn(user, offset, count) from the
 * calling thread once a contiguous range of the module's parameters (offset and count in
 * elements of its flat parameter order, attn_module_param_at's order) has its gradient
 * final for this backward: each layer after its backward, the final norms, an untied head.
 * Parameters never reported (embeddings, which get their gradient last) are final when the
 * backward returns.  A range is reported once per backward call; fn NULL removes the hook. */
typedef void (*attn_grad_ready_fn)(void *user, int64_t offset, int64_t count);
ATTN_API void attn_ctx_set_grad_ready(attn_ctx *ctx, attn_grad_ready_fn fn, void *user);

/* Limits on what input may claim, where a claim cannot be checked against the data that backs
 * it (or where the data itself could be endless).  A loader that meets a claim past a limit
 * refuses it with ATTN_E_UNSUPPORTED and a message naming the field and the limit.  Set per
 * context; values must be positive. */
typedef enum attn_limit {
    ATTN_LIMIT_FILE_BYTES = 0, /* largest file read into memory; default: physical memory */
    ATTN_LIMIT_LAYERS = 1,     /* most layers a model's config may declare; default 1024 */
    ATTN_LIMIT_VOCAB = 2,      /* most entries of a vocabulary file; default 2^24 */
    ATTN_LIMIT_TEXT_BYTES = 3, /* largest text a tokenizer or text reader takes; default 2^30 */
    ATTN_LIMIT_COUNT = 4
} attn_limit;
ATTN_API attn_status attn_ctx_set_limit(attn_ctx *ctx, attn_limit which, int64_t value);
/* The limit in force (0 for an unknown one). */
ATTN_API int64_t attn_ctx_limit(const attn_ctx *ctx, attn_limit which);

/* ============================================================================================
 * Tensor views
 * ========================================================================================== */
typedef enum attn_dtype {
    ATTN_F32 = 0,
    ATTN_F64 = 1,
    ATTN_F16 = 2,
    ATTN_BF16 = 3,
    ATTN_I64 = 4,
    ATTN_I32 = 5,
    ATTN_I8 = 6,
    ATTN_U8 = 7,
    ATTN_BOOL = 8 /* one byte; nonzero is true */
} attn_dtype;

/* Size in bytes of one element (0 for an unknown dtype). */
ATTN_API size_t attn_dtype_size(attn_dtype dtype);
/* Safetensors name of a dtype ("F32", "BOOL", ...), or NULL. */
ATTN_API const char *attn_dtype_name(attn_dtype dtype);

#define ATTN_MAX_DIMS 4

/* A non-owning strided view of up to 4 dimensions.  Strides count elements, not bytes; a
 * stride of 0 repeats (broadcasts) along that dimension.  A view with data == NULL is
 * "absent" (optional arguments).  Compute calls accept F32 data tensors, BOOL/U8 masks and
 * I32/I64 token ids. */
typedef struct attn_tensor {
    void *data;
    attn_dtype dtype;
    int ndim;
    int64_t shape[ATTN_MAX_DIMS];
    int64_t stride[ATTN_MAX_DIMS];
} attn_tensor;

/* Contiguous (row-major) view of ndim <= 4 dimensions; returns an absent view if ndim is out
 * of range. */
ATTN_API attn_tensor attn_tensor_make(void *data, attn_dtype dtype, int ndim,
                                      const int64_t *shape);
/* Number of elements (product of shape), or -1 on overflow. */
ATTN_API int64_t attn_tensor_numel(const attn_tensor *t);
ATTN_API int attn_tensor_is_contiguous(const attn_tensor *t);

static inline attn_tensor attn_view1(float *p, int64_t a) {
    int64_t s[1] = {a};
    return attn_tensor_make(p, ATTN_F32, 1, s);
}
static inline attn_tensor attn_view2(float *p, int64_t a, int64_t b) {
    int64_t s[2] = {a, b};
    return attn_tensor_make(p, ATTN_F32, 2, s);
}
static inline attn_tensor attn_view3(float *p, int64_t a, int64_t b, int64_t c) {
    int64_t s[3] = {a, b, c};
    return attn_tensor_make(p, ATTN_F32, 3, s);
}
static inline attn_tensor attn_view4(float *p, int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t s[4] = {a, b, c, d};
    return attn_tensor_make(p, ATTN_F32, 4, s);
}

/* Masks: the polarity is part of the type (see Conventions). */
typedef enum attn_mask_kind {
    ATTN_MASK_NONE = 0,
    ATTN_MASK_KEEP = 1,  /* BOOL/U8: nonzero = may attend (PyTorch SDPA bool mask) */
    ATTN_MASK_BLOCK = 2, /* BOOL/U8: nonzero = masked out (nn.MultiheadAttention bool mask) */
    ATTN_MASK_ADD = 3    /* F32: added to the scaled scores; -inf blocks */
} attn_mask_kind;

typedef struct attn_mask {
    attn_mask_kind kind;
    attn_tensor t;
} attn_mask;

/* ============================================================================================
 * Elementwise and small ops.  Data tensors are F32 of any shape up to 4-D, any strides;
 * outputs may alias inputs only where stated.
 * ========================================================================================== */

/* y[..., j] = softmax over the last axis of x.  x, y [..., C]; y may be x (in place). */
ATTN_API attn_status attn_softmax(attn_ctx *ctx, const attn_tensor *x, attn_tensor *y);

/* y = x W^T + b (torch.nn.functional.linear).  x [..., IN], W [OUT, IN], b [OUT] or NULL,
 * y [..., OUT] with the same leading dimensions as x; y may not overlap x, W or b. */
ATTN_API attn_status attn_linear(attn_ctx *ctx, const attn_tensor *x, const attn_tensor *W,
                                 const attn_tensor *b, attn_tensor *y);

/* Layer normalisation over the last axis (torch.nn.functional.layer_norm).  x, y [..., E];
 * weight, bias [E] or NULL (NULL weight = 1, NULL bias = 0); eps > 0.  y may be x (in
 * place). */
ATTN_API attn_status attn_layer_norm(attn_ctx *ctx, const attn_tensor *x,
                                     const attn_tensor *weight, const attn_tensor *bias,
                                     float eps, attn_tensor *y);

typedef enum attn_activation {
    ATTN_ACT_RELU = 0,
    ATTN_ACT_GELU = 1,      /* exact: x * Phi(x) (erf) */
    ATTN_ACT_GELU_TANH = 2, /* PyTorch approximate='tanh' */
    ATTN_ACT_TANH = 3
} attn_activation;

/* y = act(x) elementwise; x, y same shape; y may be x (in place). */
ATTN_API attn_status attn_activate(attn_ctx *ctx, attn_activation act, const attn_tensor *x,
                                   attn_tensor *y);

/* out[..., :] = table[ids[...], :] (torch.nn.functional.embedding).  ids I32/I64 of any shape
 * [...] with values in [0, V); table [V, E]; out [..., E]. */
ATTN_API attn_status attn_embedding(attn_ctx *ctx, const attn_tensor *ids,
                                    const attn_tensor *table, attn_tensor *out);

/* Sinusoidal positional encoding ("Attention Is All You Need", section 3.5):
 * pe[pos, 2i] = sin(pos / base^(2i/E)), pe[pos, 2i+1] = cos(pos / base^(2i/E)).
 * pe [L, E]; base is usually 10000; positions start at `start` >= 0.  Every position must
 * be exact in double: start + L - 1 <= 2^53, else ATTN_E_INVALID. */
ATTN_API attn_status attn_sinusoidal_encoding(attn_ctx *ctx, int64_t start, float base,
                                              attn_tensor *pe);

typedef enum attn_pe_mode {
    ATTN_PE_ADD = 0,   /* out [B, L, E]     = x + pe */
    ATTN_PE_CONCAT = 1 /* out [B, L, E + P] = [x, pe] with pe [L, P] */
} attn_pe_mode;

/* Applies a positional table to a sequence batch.  x [B, L, E]; pe [L, P] (P = E for ADD;
 * a sinusoidal table from attn_sinusoidal_encoding or learned rows); out as per mode. */
ATTN_API attn_status attn_positional_apply(attn_ctx *ctx, attn_pe_mode mode,
                                           const attn_tensor *x, const attn_tensor *pe,
                                           attn_tensor *out);

/* ============================================================================================
 * Attention without parameters
 * ========================================================================================== */

typedef enum attn_normalize {
    ATTN_NORM_SOFTMAX = 0, /* weights = softmax(scores) */
    ATTN_NORM_SUM = 1      /* weights = scores / sum(scores): seed 001's first try, for teaching;
                              refused (ATTN_E_INVALID) if a row sums to 0 */
} attn_normalize;

/* Simplified self-attention (seed 001): scores = X X^T (no scaling, no weights), weights =
 * normalize(scores) over the key axis, context = weights X.
 * X [T, E] or [B, T, E]; scores, weights [T, T] or [B, T, T] (each may be NULL);
 * context [T, E] or [B, T, E]. */
ATTN_API attn_status attn_simple_self_attention(attn_ctx *ctx, const attn_tensor *X,
                                                attn_normalize norm, attn_tensor *scores,
                                                attn_tensor *weights, attn_tensor *context);

typedef enum attn_causal {
    ATTN_CAUSAL_NONE = 0,
    ATTN_CAUSAL_TOP_LEFT = 1,    /* query i sees keys j <= i (PyTorch is_causal) */
    ATTN_CAUSAL_BOTTOM_RIGHT = 2 /* query i sees keys j <= i + S - L (FlashAttention) */
} attn_causal;

typedef struct attn_sdpa_options {
    attn_causal causal;
    float scale;        /* 0 = 1/sqrt(D) (so PyTorch's scale=0.0, all-equal scores, has no
                         * equivalent: use a tiny scale such as 1e-30 instead) */
    float dropout_p;    /* probability of zeroing a weight, in [0, 1); kept ones scale 1/(1-p) */
    uint64_t seed;      /* dropout: Philox key */
    uint64_t offset;    /* dropout: Philox counter offset (advance between calls) */
    /* Sliding window (local attention, FlashAttention's window_size), used when window != 0:
     * query i sees key j only when  i + S - L - window_left <= j <= i + S - L + window_right.
     * The window is aligned bottom-right whatever `causal` is (the last query is centred on the
     * last key, so decoding with a KV cache, L = 1, sees the last window_left + 1 keys); with
     * L = S it is the usual |i - j| window.  A negative side is unlimited.  Combined with
     * `causal` and the mask as an intersection: e.g. window = 1, window_left = W - 1,
     * window_right = 0 is a causal window of W keys.  (The flag keeps a zeroed struct free of
     * windows: 0 and 0 is a real, one-key window.) */
    int window;
    int64_t window_left, window_right;
    /* ALiBi (Press et al.; FlashAttention-2's definition): NULL, or [H] finite per-head slopes;
     * adds  -alibi_slopes[h] * |i + S - L - j|  to the score (after the soft cap, before the
     * mask). */
    const float *alibi_slopes;
    /* Logit soft-capping (Gemma 2): > 0 replaces the scaled score x = scale q.k by
     * softcap * tanh(x / softcap) before ALiBi and the mask are added; 0 (default) is off. */
    float softcap;
} attn_sdpa_options;

/* causal NONE, scale 0, no dropout, no window (window 0, sides -1), no ALiBi, softcap 0: the
 * same as a zeroed struct apart from the unlimited window sides. */
ATTN_API attn_sdpa_options attn_sdpa_defaults(void);

/* Scaled dot-product attention with torch.nn.functional.scaled_dot_product_attention
 * semantics:  out = dropout(softmax(scale * Q K^T + mask)) V,  extended with a sliding window,
 * ALiBi and soft-capping (see attn_sdpa_options): score(i, j) = cap(scale q_i . k_j) + alibi(i,
 * j) + mask(i, j), -inf outside the causal mask and the window.
 *
 *  q       [B, H, L, D]
 *  k       [B, Hkv, S, D]     H must be a multiple of Hkv (GQA/MQA: head h uses h / (H/Hkv))
 *  v       [B, Hkv, S, Dv]
 *  mask    NULL or a mask broadcastable to [B, H, L, S] (1-D to 4-D, aligned on the right)
 *  out     [B, H, L, Dv]
 *  weights NULL or [B, H, L, S]: the attention weights after dropout
 *  lse     NULL or [B, H, L]: log-sum-exp of the masked, scaled scores (-inf for a row with
 *          every key masked)
 * The causal mask, if any, is combined with `mask`. Dropout element (b,h,i,j) is dropped iff
 * attn_dropout_keep(seed, offset, ((b*H + h)*L + i)*S + j, p) is 0.
 *
 * bf16 storage (forward only): q, k and v may be ATTN_BF16, all three (a mix with F32 is
 * ATTN_E_DTYPE); out and lse stay F32; weights are refused (ATTN_E_UNSUPPORTED), and so is
 * attn_sdpa_backward.  Numerics: the scores accumulate in fp32 from the exact products of the
 * bf16 values, the online softmax runs in fp32, and each weight exp(s - m) (m: the running row
 * maximum; times its dropout multiplier) is rounded to bf16 before its product with V, as
 * FlashAttention does; out accumulates in fp32, divided by the sum of the unrounded weights.
 * So out is within 2^-8 max|v| (2^-8 max|v| / (1-p) with dropout) of the F32 result on the
 * same values, and lse is as accurate as with F32.  Decoding against a bf16 KV cache (few
 * queries, the conditions of the split-KV path in docs/kernels.md) reads K and V in place as
 * bf16, with the same numerics (m: the maximum over a chunk of 512 keys): half the bytes of
 * F32, so about twice as fast where memory bandwidth is the limit.
 *
 * Overflow: finite q and k can still give a score past the float range (|scale q.k| above
 * about 3.4e38, or a score plus an additive mask value).  PyTorch returns NaN there; attn_sdpa
 * checks each row of the result (one value of lse and of out per row, whether or not lse was
 * asked for; nothing is added to the L x S work) and returns ATTN_E_NONFINITE ("attn_sdpa:
 * scores overflow float (row max is infinite ...) at (b, h, i) = ...; scale the inputs") when
 * a row's log-sum-exp is not finite although the row has keys that neither the causal mode,
 * the window nor the mask hides, or when out is not finite (the weighted sum of huge values
 * overflowed).  On AVX-512 the fused and decode kernels compute exp(s - max) in a base-2 form
 * whose rounding error grows with the row maximum: from a maximum score of about 3e9 it can
 * overflow the exponential and lose the row (measured: lost at 3e9 and 1e10, not at 2e9 or
 * below); such rows are reported the same way.  A score that overflows to
 * -inf counts as masked (its weight is 0, as the limit is).  out and lse hold the computed
 * values (NaN or zeros in the rows concerned) when the call fails.
 *
 * out, weights and lse may not overlap each other or q, k, v, the mask or alibi_slopes. */
ATTN_API attn_status attn_sdpa(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *k,
                               const attn_tensor *v, const attn_mask *mask,
                               const attn_sdpa_options *opt, attn_tensor *out,
                               attn_tensor *weights, attn_tensor *lse);

/* The dropout stream: Philox-4x32-10 keyed by seed, counter (index/4, offset).  Returns 1 if
 * element `index` is kept at drop probability p. Exposed so tests and other kernels agree. */
ATTN_API int attn_dropout_keep(uint64_t seed, uint64_t offset, uint64_t index, float p);

/* Attention over variable-length sequences packed back to back, without padding
 * (FlashAttention's "varlen"): sequence b has the query rows cu_seqlens_q[b] ..
 * cu_seqlens_q[b+1]-1 and the key/value rows cu_seqlens_k[b] .. cu_seqlens_k[b+1]-1, and
 * attends only within itself.
 *
 *  q             [Tq, H, D]      the B query sequences, one after the other
 *  k             [Tk, Hkv, D]    H a multiple of Hkv, as in attn_sdpa
 *  v             [Tk, Hkv, Dv]
 *  cu_seqlens_q  I32 or I64 [B + 1]: 0, then the running total of query lengths, ending at Tq
 *  cu_seqlens_k  I32 or I64 [B + 1]: likewise for keys, ending at Tk
 *  out           [Tq, H, Dv]
 *  lse           NULL or [H, Tq]
 * Every option of attn_sdpa applies to each sequence on its own lengths Lb, Sb (causal
 * alignments use Lb and Sb; a sequence may have zero queries, or zero keys: then its rows are
 * zeros and lse -inf).  Dropout: element (h, i, j) of sequence b draws index
 *   sum_{c<b} H*Lc*Sc + (h*Lb + i)*Sb + j
 * of the attn_dropout_keep stream.  Each sequence runs as one attn_sdpa call on views into the
 * packed tensors (so packed sequences cost what their lengths cost, and any strides work), with
 * attn_sdpa's overflow check (ATTN_E_NONFINITE).  out and lse may not overlap each other or any
 * input (q, k, v, the offsets, alibi_slopes). */
ATTN_API attn_status attn_sdpa_varlen(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *k,
                                      const attn_tensor *v, const attn_tensor *cu_seqlens_q,
                                      const attn_tensor *cu_seqlens_k,
                                      const attn_sdpa_options *opt, attn_tensor *out,
                                      attn_tensor *lse);

/* ============================================================================================
 * Modules: layers that own parameters.
 *
 * Every layer below is an attn_module.  Its parameters are named exactly as the state_dict
 * of the PyTorch module it mirrors ("in_proj_weight", "out_proj.weight",
 * "layers.0.self_attn.in_proj_weight", ...), are stored contiguously as F32 and may be read
 * and written through the views returned by attn_module_param.  Parameters start at zero
 * (layer-norm weights at one); load real ones with attn_module_load.
 * ========================================================================================== */
typedef struct attn_module attn_module;

ATTN_API void attn_module_free(attn_module *m);
/* A short name of the module's kind ("multihead_attention", ...). */
ATTN_API const char *attn_module_kind(const attn_module *m);
ATTN_API size_t attn_module_param_count(const attn_module *m);
/* i-th parameter in state_dict order; *name and *view stay valid while m lives. */
ATTN_API attn_status attn_module_param_at(const attn_module *m, size_t i,
                                          const char **name /* OUT */,
                                          attn_tensor *view /* OUT */);
/* Parameter by state_dict name; ATTN_E_NOT_FOUND if m has none of that name. */
ATTN_API attn_status attn_module_param(attn_ctx *ctx, const attn_module *m, const char *name,
                                       attn_tensor *view /* OUT */);
/* Total number of scalar parameters. */
ATTN_API int64_t attn_module_numel(const attn_module *m);

/* Options shared by every module forward call. */
typedef struct attn_run {
    int training;     /* 1 = apply dropout (with the module's dropout probabilities) */
    uint64_t seed;    /* dropout stream */
    uint64_t offset;  /* dropout counter offset */
    /* The first sample of this call in a larger batch (0: the call is the whole batch).  A
     * share of a batch (gradient accumulation's micro-batches, a data-parallel rank's rows)
     * run with batch_first = its first sample's index draws exactly the dropout masks that
     * the whole batch's call gives those samples. */
    int64_t batch_first;
} attn_run;

/* Saved activations, for training.  Every module's *_backward recomputes what it needs of the
 * forward (see Backward below).  The models used for training also have a pair that runs the
 * forward once per step: *_forward_train computes what the forward computes (the same bits)
 * and records in an attn_saved what the backward will read; *_backward_saved then reads it
 * instead of running the forward again:
 *
 *     attn_saved *sv;
 *     attn_saved_create(ctx, 0, &sv);
 *     for (each step) {
 *         attn_gpt_forward_train(ctx, m, &ids, &run, &logits, sv);
 *         attn_cross_entropy(ctx, &logits2, &targets, -100, 0.0f, &loss, &dlogits2);
 *         attn_module_zero_grad(m);
 *         attn_gpt_backward_saved(ctx, m, sv, &dlogits);
 *         attn_adamw_step(ctx, opt, m, lr);
 *     }
 *     attn_saved_free(sv);
 *
 * Recorded, per layer: the layer's input, its residual streams and layer-norm inputs and
 * outputs, the attention's projected q, k, v, its output and log-sum-exp (the fused backward
 * starts from them), the feed-forward's values before and after the activation (ReLU: after
 * it only, with its derivative as one bit per value), and the dropout stream at each dropout
 * site (masks are drawn again from it, never stored); per model, the inputs the backward needs
 * (token ids, a copy of the masks and of the memory).  In floats per token and layer:
 * 8E + 2F + H for an encoder or GPT layer (ReLU: 8E + F + F/32 + H); 12E + 2F + 2H for a
 * decoder layer (ReLU: F + F/32 for the 2F), plus 2E per memory token.  The inputs are copied, so the caller's tensors may
 * change after the forward; the module's parameters must not (the record belongs to the
 * forward of those parameters).
 *
 * *_backward_saved gives the same bits as *_backward with the arguments of the forward; it
 * leaves the record as it is, so it may run more than once.  A *_forward_train replaces what
 * sv held; if it fails, sv holds nothing.  The memory is kept for the next step (allocated with
 * the hooks of the context that created sv; from the second step on in one block, a quarter
 * larger than the largest step so far, for batches of varying length).
 *
 * flags: ATTN_SAVED_CHECKPOINT (activation checkpointing, for long sequences) records only each
 * layer's input and dropout stream, E floats per token and layer, and the backward runs each
 * layer's forward again just before that layer's backward, holding one layer's full record at
 * a time: less memory for one more forward pass of time, and the same bits. */
typedef struct attn_saved attn_saved;
enum {
    ATTN_SAVED_CHECKPOINT = 1u << 0
};
/* Empty; nothing is allocated until the first training forward.  ATTN_E_INVALID for unknown
 * flags. */
ATTN_API attn_status attn_saved_create(attn_ctx *ctx, unsigned flags,
                                       attn_saved **out /* OUT */);
ATTN_API void attn_saved_free(attn_saved *s);
/* Bytes the last training forward recorded (0 when s holds none). */
ATTN_API size_t attn_saved_bytes(const attn_saved *s);

/* --- Linear (torch.nn.Linear): weight [OUT, IN], bias [OUT] ------------------------------ */
ATTN_API attn_status attn_linear_create(attn_ctx *ctx, int64_t in_features,
                                        int64_t out_features, int bias,
                                        attn_module **out /* OUT */);
/* x [..., IN] -> y [..., OUT] */
ATTN_API attn_status attn_linear_forward(attn_ctx *ctx, const attn_module *m,
                                         const attn_tensor *x, attn_tensor *y);

/* --- LayerNorm (torch.nn.LayerNorm): weight [E], bias [E] -------------------------------- */
ATTN_API attn_status attn_layer_norm_create(attn_ctx *ctx, int64_t E, float eps, int bias,
                                            attn_module **out /* OUT */);
ATTN_API attn_status attn_layer_norm_forward(attn_ctx *ctx, const attn_module *m,
                                             const attn_tensor *x, attn_tensor *y);

/* --- Embedding (torch.nn.Embedding): weight [V, E] ---------------------------------------- */
ATTN_API attn_status attn_embedding_create(attn_ctx *ctx, int64_t num_embeddings, int64_t E,
                                           attn_module **out /* OUT */);
ATTN_API attn_status attn_embedding_forward(attn_ctx *ctx, const attn_module *m,
                                            const attn_tensor *ids, attn_tensor *out);

/* --- Seed 000 self-attention ---------------------------------------------------------------
 * SelfAttention_v1: raw matrices W_query, W_key, W_value [d_in, d_out];
 *   out = softmax((x Wq)(x Wk)^T / sqrt(d_out)) (x Wv).
 * SelfAttention_v2: nn.Linear W_query, W_key, W_value (weight [d_out, d_in], bias if
 *   qkv_bias), same formula.
 * CausalAttention: as v2 plus a causal mask before softmax and dropout on the weights.
 * MultiHeadAttention (the seed's): as CausalAttention split into num_heads heads of
 *   d_out/num_heads, plus out_proj (nn.Linear(d_out, d_out) with bias).
 * x [B, T, d_in] (or [T, d_in]) -> out [B, T, d_out]; weights NULL or [B, heads, T, T]. */
typedef enum attn_seed_attention_kind {
    ATTN_SEED_SELF_V1 = 0,
    ATTN_SEED_SELF_V2 = 1,
    ATTN_SEED_CAUSAL = 2,
    ATTN_SEED_MULTIHEAD = 3
} attn_seed_attention_kind;

typedef struct attn_seed_attention_config {
    attn_seed_attention_kind kind;
    int64_t d_in, d_out;
    int qkv_bias;        /* v2, causal, multihead */
    float dropout;       /* causal, multihead */
    int64_t num_heads;   /* multihead: must divide d_out (refused otherwise, not rounded) */
} attn_seed_attention_config;

ATTN_API attn_status attn_seed_attention_create(attn_ctx *ctx,
                                                const attn_seed_attention_config *cfg,
                                                attn_module **out /* OUT */);
ATTN_API attn_status attn_seed_attention_forward(attn_ctx *ctx, const attn_module *m,
                                                 const attn_tensor *x, const attn_run *run,
                                                 attn_tensor *out, attn_tensor *weights);

/* --- torch.nn.MultiheadAttention (batch_first=True) ---------------------------------------
 * Parameters: in_proj_weight [3E, E] and in_proj_bias [3E] when kdim == vdim == E, otherwise
 * q_proj_weight [E, E], k_proj_weight [E, kdim], v_proj_weight [E, vdim] (+ in_proj_bias);
 * bias_k, bias_v [1, 1, E] when add_bias_kv; out_proj.weight [E, E], out_proj.bias [E]. */
typedef struct attn_mha_config {
    int64_t embed_dim, num_heads;
    int64_t kdim, vdim; /* 0 = embed_dim */
    int bias;           /* in_proj_bias and out_proj.bias (PyTorch default: 1) */
    int add_bias_kv;
    int add_zero_attn;
    float dropout;      /* on the attention weights, when run->training */
} attn_mha_config;

ATTN_API attn_mha_config attn_mha_defaults(int64_t embed_dim, int64_t num_heads);
ATTN_API attn_status attn_mha_create(attn_ctx *ctx, const attn_mha_config *cfg,
                                     attn_module **out /* OUT */);

typedef struct attn_mha_options {
    int need_weights;         /* fill `weights` */
    int average_attn_weights; /* weights [B, L, S'] averaged over heads, else [B, H, L, S'] */
    int is_causal;            /* apply a causal (top-left) mask */
} attn_mha_options;

/*  query [B, L, E], key [B, S, kdim], value [B, S, vdim]
 *  key_padding_mask  NULL or [B, S] (BLOCK/KEEP bool or ADD float)
 *  attn_mask         NULL or [L, S] or [B*H, L, S]
 *  out [B, L, E]; weights [B, L, S'] or [B, H, L, S'] (S' = S + add_bias_kv + add_zero_attn)
 *  or NULL.  run may be NULL (inference). */
ATTN_API attn_status attn_mha_forward(attn_ctx *ctx, const attn_module *m,
                                      const attn_tensor *query, const attn_tensor *key,
                                      const attn_tensor *value,
                                      const attn_mask *key_padding_mask,
                                      const attn_mask *attn_mask,
                                      const attn_mha_options *opt, const attn_run *run,
                                      attn_tensor *out, attn_tensor *weights);

/* --- General attention layer (seed 002) ---------------------------------------------------
 * Queries are given; keys and values come from the inputs: K = X Wk^T, V = X Wv^T (nn.Linear
 * W_key [Dq, Dx], W_value [Dv, Dx], biases if bias); out = softmax(Q K^T / sqrt(Dq)) V.
 * With self_attention = 1 the queries are also projected: Q = X Wq^T (W_query [Dq, Dx]).
 * q [B, L, Dq] (ignored for self-attention), x [B, S, Dx]; out [B, L, Dv]; weights [B, L, S]. */
typedef struct attn_general_config {
    int64_t query_dim, input_dim, value_dim;
    int bias;
    int self_attention;
} attn_general_config;
ATTN_API attn_status attn_general_attention_create(attn_ctx *ctx,
                                                   const attn_general_config *cfg,
                                                   attn_module **out /* OUT */);
ATTN_API attn_status attn_general_attention_forward(attn_ctx *ctx, const attn_module *m,
                                                    const attn_tensor *q,
                                                    const attn_tensor *x,
                                                    const attn_mask *mask, attn_tensor *out,
                                                    attn_tensor *weights);

/* --- Additive (Bahdanau) attention --------------------------------------------------------
 * score[b,i,j] = w_v . tanh(W_q q_i + W_k k_j); weights = softmax over j (with mask);
 * out = weights V.  Parameters W_q.weight [A, Dq], W_k.weight [A, Dk], w_v.weight [1, A].
 * q [B, L, Dq], k [B, S, Dk], v [B, S, Dv], mask NULL or broadcastable to [B, L, S];
 * out [B, L, Dv]; weights NULL or [B, L, S]. */
ATTN_API attn_status attn_additive_attention_create(attn_ctx *ctx, int64_t query_dim,
                                                    int64_t key_dim, int64_t hidden_dim,
                                                    attn_module **out /* OUT */);
ATTN_API attn_status attn_additive_attention_forward(attn_ctx *ctx, const attn_module *m,
                                                     const attn_tensor *q,
                                                     const attn_tensor *k,
                                                     const attn_tensor *v,
                                                     const attn_mask *mask, attn_tensor *out,
                                                     attn_tensor *weights);

/* --- Transformer layers (torch.nn.TransformerEncoderLayer / DecoderLayer / Transformer) ---- */
typedef struct attn_transformer_config {
    int64_t d_model, nhead;
    int64_t dim_feedforward;   /* PyTorch default 2048 */
    float dropout;             /* PyTorch default 0.1 (applied only when run->training) */
    attn_activation activation;/* RELU (default), GELU or GELU_TANH */
    float layer_norm_eps;      /* PyTorch default 1e-5 */
    int norm_first;            /* pre-norm when 1 */
    int bias;                  /* biases in linears and layer norms (PyTorch default 1) */
    int64_t num_encoder_layers, num_decoder_layers; /* stacks and nn.Transformer */
} attn_transformer_config;

ATTN_API attn_transformer_config attn_transformer_defaults(int64_t d_model, int64_t nhead);

/* Position-wise feed-forward network (seed 004): out = w_2(dropout(act(w_1(x)))).
 * Parameters w_1.weight [F, E], w_1.bias [F], w_2.weight [E, F], w_2.bias [E] (uses
 * d_model, dim_feedforward, activation, dropout, bias of cfg). x, out [..., E]. */
ATTN_API attn_status attn_ffn_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                                     attn_module **out /* OUT */);
ATTN_API attn_status attn_ffn_forward(attn_ctx *ctx, const attn_module *m,
                                      const attn_tensor *x, const attn_run *run,
                                      attn_tensor *out);

/* The masks of the Transformer family, with nn.Transformer's names and meaning: one pointer
 * to this struct is the mask argument of every encoder / decoder layer, stack and
 * nn.Transformer forward, backward and _forward_train.  A NULL member (or one of kind
 * ATTN_MASK_NONE), or a NULL pointer to the whole struct, means "no mask".  Each function
 * reads only the members its comment names and ignores the others.  S is the source (encoder)
 * length, T the target (decoder) length, H the number of heads; masks are BLOCK/KEEP bool or
 * ADD float, as attn_mha_forward's.  A _forward_train copies the masks it reads into saved:
 * they need not outlive the call. */
typedef struct attn_transformer_masks {
    const attn_mask *src_mask;                /* encoder self-attention: [S, S] or [B*H, S, S] */
    const attn_mask *tgt_mask;                /* decoder self-attention: [T, T] or [B*H, T, T] */
    const attn_mask *memory_mask;             /* decoder cross-attention: [T, S] or [B*H, T, S] */
    const attn_mask *src_key_padding_mask;    /* [B, S] */
    const attn_mask *tgt_key_padding_mask;    /* [B, T] */
    const attn_mask *memory_key_padding_mask; /* [B, S] (cross-attention keys) */
    int src_is_causal; /* add a causal (top-left) mask to the encoder's self-attention */
    int tgt_is_causal; /* add a causal (top-left) mask to the decoder's self-attention */
} attn_transformer_masks;

/* Encoder layer: self_attn.*, linear1.*, linear2.*, norm1.*, norm2.*.
 * src [B, S, E] -> out [B, S, E].  masks (may be NULL): reads src_mask, src_key_padding_mask
 * and src_is_causal. */
ATTN_API attn_status attn_encoder_layer_create(attn_ctx *ctx,
                                               const attn_transformer_config *cfg,
                                               attn_module **out /* OUT */);
ATTN_API attn_status attn_encoder_layer_forward(attn_ctx *ctx, const attn_module *m,
                                                const attn_tensor *src,
                                                const attn_transformer_masks *masks,
                                                const attn_run *run, attn_tensor *out);

/* Decoder layer: self_attn.*, multihead_attn.*, linear1.*, linear2.*, norm1-3.*.
 * tgt [B, T, E], memory [B, S, E] -> out [B, T, E].  masks (may be NULL): reads tgt_mask,
 * memory_mask, tgt_key_padding_mask, memory_key_padding_mask and tgt_is_causal. */
ATTN_API attn_status attn_decoder_layer_create(attn_ctx *ctx,
                                               const attn_transformer_config *cfg,
                                               attn_module **out /* OUT */);
ATTN_API attn_status attn_decoder_layer_forward(attn_ctx *ctx, const attn_module *m,
                                                const attn_tensor *tgt,
                                                const attn_tensor *memory,
                                                const attn_transformer_masks *masks,
                                                const attn_run *run, attn_tensor *out);

/* Stacks (torch.nn.TransformerEncoder / TransformerDecoder): layers.N.* and, when
 * final_norm, norm.*.  num_layers from cfg->num_encoder_layers / num_decoder_layers.  Every
 * layer gets the same masks: the encoder stack reads the members the encoder layer reads
 * (src_*; nn.TransformerEncoder's `mask` is src_mask), the decoder stack those the decoder
 * layer reads (tgt_*, memory_*). */
ATTN_API attn_status attn_encoder_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                                         int final_norm, attn_module **out /* OUT */);
ATTN_API attn_status attn_encoder_forward(attn_ctx *ctx, const attn_module *m,
                                          const attn_tensor *src,
                                          const attn_transformer_masks *masks,
                                          const attn_run *run, attn_tensor *out);
ATTN_API attn_status attn_decoder_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                                         int final_norm, attn_module **out /* OUT */);
ATTN_API attn_status attn_decoder_forward(attn_ctx *ctx, const attn_module *m,
                                          const attn_tensor *tgt, const attn_tensor *memory,
                                          const attn_transformer_masks *masks,
                                          const attn_run *run, attn_tensor *out);

/* torch.nn.Transformer: encoder.layers.N.*, encoder.norm.*, decoder.layers.N.*,
 * decoder.norm.*.  src [B, S, E], tgt [B, T, E] -> out [B, T, E].  masks (may be NULL): reads
 * every member (the encoder the src_* ones, the decoder the tgt_* and memory_* ones). */
ATTN_API attn_status attn_transformer_create(attn_ctx *ctx,
                                             const attn_transformer_config *cfg,
                                             attn_module **out /* OUT */);
ATTN_API attn_status attn_transformer_forward(attn_ctx *ctx, const attn_module *m,
                                              const attn_tensor *src, const attn_tensor *tgt,
                                              const attn_transformer_masks *masks,
                                              const attn_run *run, attn_tensor *out);

/* Decoder-only (GPT) language model: tok_emb.weight [V, E], pos_emb.weight [P, E],
 * layers.N.* (encoder layers run with a causal mask; norm_first as configured),
 * norm.* (final layer norm), lm_head.weight [V, E].  ids [B, T] (I32/I64, T <= P)
 * -> logits [B, T, V]. */
ATTN_API attn_status attn_gpt_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                                     int64_t vocab_size, int64_t max_positions,
                                     attn_module **out /* OUT */);
/* The same with flags: ATTN_GPT_TIED ties the LM head to the token embedding (GPT-2's and
 * most LLMs' weight tying): there is no lm_head.weight, logits = x tok_emb.weight^T, and the
 * head's weight gradient adds into tok_emb.weight's.  Other bits are refused. */
enum { ATTN_GPT_TIED = 1u << 0 };
ATTN_API attn_status attn_gpt_create_ex(attn_ctx *ctx, const attn_transformer_config *cfg,
                                        int64_t vocab_size, int64_t max_positions,
                                        unsigned flags, attn_module **out /* OUT */);
ATTN_API attn_status attn_gpt_forward(attn_ctx *ctx, const attn_module *m,
                                      const attn_tensor *ids, const attn_run *run,
                                      attn_tensor *logits);

/* Encoder-decoder translator (the PyTorch translation tutorial's Seq2SeqTransformer):
 *   s = dropout(src_emb(src) * sqrt(E) + pe[:S]);  t = dropout(tgt_emb(tgt) * sqrt(E) + pe[:T])
 *   logits = generator(transformer(s, t, tgt_mask = causal, src_key_padding_mask = src == pad,
 *                                  tgt_key_padding_mask = tgt == pad,
 *                                  memory_key_padding_mask = src == pad))
 * with pe the sinusoidal table (not a parameter).  Parameters: src_emb.weight [Vs, E],
 * tgt_emb.weight [Vt, E], transformer.* (nn.Transformer's names: transformer.encoder.layers.0.
 * self_attn.in_proj_weight, ...), generator.weight [Vt, E], generator.bias [Vt].
 * attn_module_init draws the embeddings from N(0, 1/E), so that scaled by sqrt(E) they are the
 * size of the positional encoding; the rest as the PyTorch modules. */
typedef struct attn_seq2seq_config {
    attn_transformer_config tf; /* d_model, nhead, layer counts, feed-forward, dropout, ... */
    int64_t src_vocab, tgt_vocab;
    int64_t max_len;            /* longest source or target sequence */
    int64_t pad_id;             /* padding token id (in both vocabularies) */
} attn_seq2seq_config;
ATTN_API attn_status attn_seq2seq_create(attn_ctx *ctx, const attn_seq2seq_config *cfg,
                                         attn_module **out /* OUT */);
/* src [B, S], tgt [B, T] ids (I32/I64; tgt starts with BOS) -> logits [B, T, Vt].  cross: NULL or
 * [B, T, S], the last decoder layer's cross-attention weights averaged over heads. */
ATTN_API attn_status attn_seq2seq_forward(attn_ctx *ctx, const attn_module *m,
                                          const attn_tensor *src, const attn_tensor *tgt,
                                          const attn_run *run, attn_tensor *logits,
                                          attn_tensor *cross);
/* Accumulates the parameter gradients for dlogits [B, T, Vt] (see the Backward section). */
ATTN_API attn_status attn_seq2seq_backward(attn_ctx *ctx, const attn_module *m,
                                           const attn_tensor *src, const attn_tensor *tgt,
                                           const attn_run *run, const attn_tensor *dlogits);
/* Training forward (see attn_saved): logits [B, T, Vt] as attn_seq2seq_forward, recording
 * into saved (the ids, padding masks, embeddings, both stacks and the memory).  Its backward
 * accumulates the parameter gradients for dlogits [B, T, Vt], the same as
 * attn_seq2seq_backward. */
ATTN_API attn_status attn_seq2seq_forward_train(attn_ctx *ctx, const attn_module *m,
                                                const attn_tensor *src, const attn_tensor *tgt,
                                                const attn_run *run, attn_tensor *logits,
                                                attn_saved *saved /* IN/OUT */);
ATTN_API attn_status attn_seq2seq_backward_saved(attn_ctx *ctx, const attn_module *m,
                                                 const attn_saved *saved,
                                                 const attn_tensor *dlogits);
/* Greedy decoding: out [B, T] (I64) receives up to T tokens after bos_id, then eos_id, then
 * pad_id.  cross: NULL or [B, T, S], the cross-attention weights that chose each token. */
ATTN_API attn_status attn_seq2seq_greedy(attn_ctx *ctx, const attn_module *m,
                                         const attn_tensor *src, int64_t bos_id, int64_t eos_id,
                                         attn_tensor *out, attn_tensor *cross);

/* ViT-style input (seed 003): patches [B, N, P] -> z [B, N+1, E] = [cls_token; proj(patches)]
 * + pos_embed.  Parameters cls_token [1, 1, E], proj.weight [E, P], proj.bias [E],
 * pos_embed [1, N_max+1, E] (N <= N_max). */
ATTN_API attn_status attn_vit_embed_create(attn_ctx *ctx, int64_t patch_dim, int64_t E,
                                           int64_t max_patches, attn_module **out /* OUT */);
ATTN_API attn_status attn_vit_embed_forward(attn_ctx *ctx, const attn_module *m,
                                            const attn_tensor *patches, attn_tensor *z);

/* Vision Transformer classifier (ViT, Dosovitskiy et al. 2020), square images [B, C, H, W]
 * (H = W = image_size), p = patch, G = image_size / p, N = G*G patches, E = tf.d_model:
 *   patches = patchify(images)                           [B, N, C*p*p]
 *   x = dropout([embed.cls_token; embed.proj(patches)] + embed.pos_embed)   [B, N+1, E]
 *   x = layers(x)       (tf.num_encoder_layers encoder layers, no mask; pre-norm when
 *                        tf.norm_first = 1, as a ViT is: nn.TransformerEncoderLayer(E, nhead,
 *                        dim_feedforward, dropout, activation (GELU), layer_norm_eps,
 *                        batch_first=True, norm_first=True))
 *   logits = head(norm(x)[:, 0])                         [B, num_classes]
 * Patchify: patch n = py*G + px (row-major over the grid); its vector is [c][dy][dx], pixel
 * (py*p + dy, px*p + dx) of channel c (torch: x.unfold(2, p, p).unfold(3, p, p) permuted to
 * [B, G, G, C, p, p], or a Conv2d with kernel = stride = p whose weight is
 * embed.proj.weight.view(E, C, p, p)).  Parameters: embed.cls_token [1, 1, E],
 * embed.proj.weight [E, C*p*p], embed.proj.bias [E], embed.pos_embed [1, N+1, E],
 * layers.N.* (encoder layer names), norm.weight, norm.bias (when tf.bias), head.weight
 * [num_classes, E], head.bias [num_classes].  attn_module_init: the cls token and positions
 * N(0, 0.02^2), the linears and layers as PyTorch's modules.  images must be finite; patch
 * must divide image_size. */
typedef struct attn_vit_config {
    attn_transformer_config tf; /* d_model, nhead, dim_feedforward, num_encoder_layers, dropout,
                                   activation, layer_norm_eps, norm_first, bias */
    int64_t image_size;         /* H = W */
    int64_t channels;
    int64_t patch;              /* patch side p */
    int64_t num_classes;
} attn_vit_config;
ATTN_API attn_status attn_vit_create(attn_ctx *ctx, const attn_vit_config *cfg,
                                     attn_module **out /* OUT */);
/* images [B, C, H, W] F32 -> logits [B, num_classes]. */
ATTN_API attn_status attn_vit_forward(attn_ctx *ctx, const attn_module *m,
                                      const attn_tensor *images, const attn_run *run,
                                      attn_tensor *logits);
/* The [CLS] query's attention in every layer: cls_attn [num_layers, B, nhead, N+1] receives
 * row 0 of each head's attention probabilities (after the softmax, before the attention
 * dropout) over the tokens [CLS, patch 0, ..., patch N-1], in the forward of images with run
 * (dropout between layers as attn_vit_forward). */
ATTN_API attn_status attn_vit_attention(attn_ctx *ctx, const attn_module *m,
                                        const attn_tensor *images, const attn_run *run,
                                        attn_tensor *cls_attn);
/* Accumulates the parameter gradients for dlogits [B, num_classes], running the forward again
 * (see the Backward section); dimages [B, C, H, W] (NULL, or a view without data: not
 * wanted) is overwritten with the images' gradient. */
ATTN_API attn_status attn_vit_backward(attn_ctx *ctx, const attn_module *m,
                                       const attn_tensor *images, const attn_run *run,
                                       const attn_tensor *dlogits, attn_tensor *dimages);
/* Training forward and backward (see attn_saved): logits as attn_vit_forward, recording into
 * saved; the backward gives what attn_vit_backward gives (the same bits). */
ATTN_API attn_status attn_vit_forward_train(attn_ctx *ctx, const attn_module *m,
                                            const attn_tensor *images, const attn_run *run,
                                            attn_tensor *logits, attn_saved *saved /* IN/OUT */);
ATTN_API attn_status attn_vit_backward_saved(attn_ctx *ctx, const attn_module *m,
                                             const attn_saved *saved,
                                             const attn_tensor *dlogits, attn_tensor *dimages);

/* ============================================================================================
 * Safetensors files (https://github.com/huggingface/safetensors): 8-byte little-endian header
 * length N, N bytes of JSON header, then the data.  Reading is bounds-checked: a malformed,
 * truncated or hostile file gives ATTN_E_FORMAT and a message, never an out-of-bounds read.
 * ========================================================================================== */
typedef struct attn_st attn_st;

#define ATTN_ST_MAX_DIMS 8

typedef struct attn_st_tensor {
    const char *name;   /* valid while the attn_st lives */
    attn_dtype dtype;
    int ndim;
    int64_t shape[ATTN_ST_MAX_DIMS];
    int64_t numel;
    const void *data;   /* little-endian raw bytes inside the file image; may be unaligned */
    size_t nbytes;
} attn_st_tensor;

/* Parses a file image.  The bytes are copied; data may be freed after the call.  The JSON
 * header may be at most 100,000,000 bytes.  Gaps between tensors and trailing bytes are
 * tolerated (they cannot cause an out-of-bounds read); overlapping tensors are refused.  The
 * attn_st keeps a pointer to ctx for its allocator: ctx must outlive it. */
ATTN_API attn_status attn_st_read_memory(attn_ctx *ctx, const void *data, size_t size,
                                         attn_st **out /* OUT */);
/* Reads a regular file (sized with fstat before it is read, and at most
 * ATTN_LIMIT_FILE_BYTES).  A missing file is ATTN_E_NOT_FOUND; a directory, FIFO, pipe, socket
 * or device is ATTN_E_IO ("not a regular file"), so nothing endless is read and nothing
 * blocks waiting for a writer. */
ATTN_API attn_status attn_st_read_file(attn_ctx *ctx, const char *path,
                                       attn_st **out /* OUT */);
/* A sharded checkpoint as one attn_st: path is its index (model.safetensors.index.json, as
 * transformers' save_pretrained writes it), whose weight_map names each tensor's shard, a file
 * in the index's folder.  Every shard is read (attn_st_read_file) and every tensor the index
 * names must be in its shard; a name in two shards, a shard name with a path in it, more than
 * 4096 shards or an index over ATTN_LIMIT_TEXT_BYTES is refused.  The tensors are listed shard
 * by shard (shards sorted by name), each in its file's order; the shards' __metadata__ are not
 * kept (attn_st_meta_count is 0). */
ATTN_API attn_status attn_st_read_index(attn_ctx *ctx, const char *path,
                                        attn_st **out /* OUT */);
ATTN_API void attn_st_free(attn_st *st);
/* Tensors in file order (the order of the JSON header). */
ATTN_API size_t attn_st_count(const attn_st *st);
ATTN_API attn_status attn_st_at(const attn_st *st, size_t i, attn_st_tensor *info /* OUT */);
/* ATTN_E_NOT_FOUND (no message set) if absent. */
ATTN_API attn_status attn_st_find(const attn_st *st, const char *name,
                                  attn_st_tensor *info /* OUT */);
/* __metadata__ entries (string to string). Value of key, or NULL. */
ATTN_API const char *attn_st_meta(const attn_st *st, const char *key);
ATTN_API size_t attn_st_meta_count(const attn_st *st);
ATTN_API attn_status attn_st_meta_at(const attn_st *st, size_t i, const char **key /* OUT */,
                                     const char **value /* OUT */);
/* Converts a tensor of any floating or integer dtype to F32 into dst (n = info->numel
 * elements, else ATTN_E_INVALID).  ATTN_E_DTYPE for BOOL.  A zero-element tensor's data
 * pointer may point one past the end of the image; it is never read. */
ATTN_API attn_status attn_st_to_f32(attn_ctx *ctx, const attn_st_tensor *info, float *dst,
                                    size_t n);

typedef struct attn_st_writer attn_st_writer;
ATTN_API attn_status attn_st_writer_create(attn_ctx *ctx, attn_st_writer **out /* OUT */);
ATTN_API void attn_st_writer_free(attn_st_writer *w);
/* Adds (or replaces) a __metadata__ entry; strings are copied. */
ATTN_API attn_status attn_st_writer_meta(attn_st_writer *w, const char *key,
                                         const char *value);
/* Adds a tensor; data (nbytes = numel * dtype size, little-endian) is copied.  Duplicate
 * names are refused (ATTN_E_INVALID). */
ATTN_API attn_status attn_st_writer_add(attn_st_writer *w, const char *name, attn_dtype dtype,
                                        int ndim, const int64_t *shape, const void *data);
/* Adds an F32 tensor from a (possibly strided) view. */
ATTN_API attn_status attn_st_writer_add_view(attn_st_writer *w, const char *name,
                                             const attn_tensor *t);
/* Serialises: to a file, or to a buffer allocated with the context allocator that the caller
 * releases with attn_buffer_free.  Layout (as the reference implementation requires): the
 * header, __metadata__ first and tensors sorted by name, padded with spaces to a multiple of
 * 8 bytes; then the tensors back to back with no gaps, 8-byte dtypes first, then 4-, 2- and
 * 1-byte ones (by name within a size), so each starts aligned to its element size.  Writing
 * the same content twice gives identical bytes.  The file is written beside path and renamed
 * into place once complete (a symbolic link is followed), so on error an existing file at path
 * is left as it was; a character device or FIFO at path (/dev/null) is written in place and
 * never removed; a directory is refused. */
ATTN_API attn_status attn_st_writer_save(attn_st_writer *w, const char *path);
ATTN_API attn_status attn_st_writer_to_memory(attn_st_writer *w, void **data /* OUT */,
                                              size_t *size /* OUT */);
/* Frees a buffer from attn_st_writer_to_memory; attn_buffer_free(NULL, p) does nothing. */
ATTN_API void attn_buffer_free(attn_ctx *ctx, void *data);

/* --- Output files: whole or not at all --------------------------------------------------
 * Every file attn writes (safetensors, GGUF, pictures, logs, configs) goes through these, and
 * applications may use them too.  The target at path:
 *   - missing, or a regular file: the bytes go to a new file ".NAME.tmp-PID-RANDOM" beside it
 *     (created exclusively: a file or link planted under any name is never opened), which
 *     replaces the target by rename() at commit, after fsync (and the directory is synced
 *     after the rename).  Until then, and after any error, the target is as it was, and the
 *     temporary file is removed.  Temporary files of the same target left by processes that no
 *     longer exist (killed during a write) are removed at the next open.  A replaced file keeps
 *     its permissions; a new one gets 0666 less the umask;
 *   - a symbolic link: followed, and the file it names replaced as above (the link stays); a
 *     link to a missing file is refused;
 *   - a character device or FIFO (/dev/null, /dev/stdout, a pipe): written in place, never
 *     created, replaced or removed; a FIFO with no reader is refused (no wait); errors such as
 *     /dev/full's are reported;
 *   - a directory, block device or socket: refused.
 * Errors (ENOSPC, EFBIG, EROFS, EACCES, EIO, ...) are ATTN_E_IO with the path and the reason.
 * A process that writes past RLIMIT_FSIZE gets SIGXFSZ, which ends it unless it ignores the
 * signal (the attn program does, and reports EFBIG). */
typedef struct attn_file_out attn_file_out;
ATTN_API attn_status attn_file_out_open(attn_ctx *ctx, const char *path,
                                        attn_file_out **out /* OUT */);
/* Appends n bytes (buffered).  After a failure every later write and the commit fail too. */
ATTN_API attn_status attn_file_out_write(attn_file_out *f, const void *data, size_t n);
/* Completes the file (flush, fsync, rename) and frees f, whatever the result. */
ATTN_API attn_status attn_file_out_commit(attn_file_out *f);
/* Abandons the file: the temporary file is removed, the target untouched; frees f (NULL is
 * fine). */
ATTN_API void attn_file_out_abort(attn_file_out *f);
/* The whole file in one call: open, write, commit. */
ATTN_API attn_status attn_file_write(attn_ctx *ctx, const char *path, const void *data,
                                     size_t n);

/* Loads the module's parameters from tensors named prefix + state_dict name (prefix may be
 * NULL); any floating dtype is converted to F32.  strict = 1: every parameter must be present
 * (else ATTN_E_NOT_FOUND); strict = 0 skips missing ones.  Tensors of the file that are not
 * parameters are ignored in both modes.  A wrong shape is ATTN_E_SHAPE (naming the tensor and
 * both shapes), an integer or BOOL tensor ATTN_E_DTYPE, a NaN or infinity (or an F64 value
 * past the float range) ATTN_E_NONFINITE naming the tensor and element, unless the context has
 * ATTN_CTX_NO_FINITE_CHECK.  Every tensor is checked before any is copied, so a failed load
 * leaves the module unchanged.  The library's own loaders (checkpoints, model folders,
 * attn_eval) also build their modules only from tensors present in the file, so a size a file
 * claims is never allocated unless its tensor is there. */
ATTN_API attn_status attn_module_load(attn_ctx *ctx, attn_module *m, const attn_st *st,
                                      const char *prefix, int strict);
/* Adds every parameter as prefix + name. */
ATTN_API attn_status attn_module_save(attn_ctx *ctx, const attn_module *m, attn_st_writer *w,
                                      const char *prefix);

/* ============================================================================================
 * Backward.  Every op and layer above has a backward function beside it, following
 * PyTorch autograd exactly.
 *
 *  - Stateless ops (attn_softmax, attn_linear, ..., attn_sdpa): *_backward takes the forward's
 *    inputs and dout (the gradient of the loss with respect to the forward's output) and
 *    OVERWRITES the gradients it is given; any gradient output may be NULL (not wanted).
 *    The gradients may not overlap the inputs or each other (see Conventions, Outputs), except
 *    the in-place cases stated below (softmax, activation, layer norm, positional ADD).
 *  - Modules: gradients of the parameters live in the module, allocated once by
 *    attn_module_enable_grad, named as the parameters.  *_backward ADDS into them (as
 *    PyTorch's .grad accumulates; clear them with attn_module_zero_grad) and OVERWRITES the
 *    gradients of the inputs (each may be NULL).
 *  - Backward recomputes what it needs of the forward (activation recomputation): pass the
 *    same inputs, masks, options and attn_run (seed and offset) as the forward call, so that
 *    dropout draws the same mask.  Nothing is kept between calls.
 *  - For training, multi-head attention, the Transformer layers, stacks and nn.Transformer,
 *    GPT, seq2seq, the Llama modules and attn_llm also have *_forward_train /
 *    *_backward_saved, which keep the forward's activations in an attn_saved instead (see
 *    attn_saved: one forward pass per step, the same gradients).
 * ========================================================================================== */

/* Allocates the gradient buffers (zeroed); idempotent. */
ATTN_API attn_status attn_module_enable_grad(attn_ctx *ctx, attn_module *m);
ATTN_API int attn_module_has_grad(const attn_module *m);
/* Sets every gradient to zero (no-op without gradients). */
ATTN_API void attn_module_zero_grad(attn_module *m);
/* Gradient of the i-th parameter / of the named parameter (ATTN_E_INVALID without
 * attn_module_enable_grad). */
ATTN_API attn_status attn_module_grad_at(const attn_module *m, size_t i,
                                         const char **name /* OUT */,
                                         attn_tensor *view /* OUT */);
ATTN_API attn_status attn_module_grad(attn_ctx *ctx, const attn_module *m, const char *name,
                                      attn_tensor *view /* OUT */);

/* ---- stateless ops ------------------------------------------------------------------- */
/* y = softmax(x) (last axis): dx = y * (dy - sum(dy * y)).  y, dy, dx [..., C]; dx may be
 * y or dy (in place). */
ATTN_API attn_status attn_softmax_backward(attn_ctx *ctx, const attn_tensor *y,
                                           const attn_tensor *dy, attn_tensor *dx);
/* y = x W^T + b: dx = dy W [..., IN], dW = dy^T x [OUT, IN], db = sum dy [OUT]. */
ATTN_API attn_status attn_linear_backward(attn_ctx *ctx, const attn_tensor *x,
                                          const attn_tensor *W, const attn_tensor *dy,
                                          attn_tensor *dx, attn_tensor *dW, attn_tensor *db);
/* y = layer_norm(x) * weight + bias: dx [..., E], dweight [E], dbias [E].  dx may be x or dy
 * (in place). */
ATTN_API attn_status attn_layer_norm_backward(attn_ctx *ctx, const attn_tensor *x,
                                              const attn_tensor *weight, float eps,
                                              const attn_tensor *dy, attn_tensor *dx,
                                              attn_tensor *dweight, attn_tensor *dbias);
/* y = act(x): dx = act'(x) dy; dx may be x or dy (in place). */
ATTN_API attn_status attn_activate_backward(attn_ctx *ctx, attn_activation act,
                                            const attn_tensor *x, const attn_tensor *dy,
                                            attn_tensor *dx);
/* out = table[ids]: dtable [V, E] = scatter-add of dout rows (rows not used are zero). */
ATTN_API attn_status attn_embedding_backward(attn_ctx *ctx, const attn_tensor *ids,
                                             const attn_tensor *dout, attn_tensor *dtable);
/* out = x + pe (ADD) or [x, pe] (CONCAT): dx [B, L, E]; dpe [L', P] receives the sum over the
 * batch in its first L rows (other rows zero).  ADD: dx may be dout (in place). */
ATTN_API attn_status attn_positional_apply_backward(attn_ctx *ctx, attn_pe_mode mode,
                                                    const attn_tensor *dout, attn_tensor *dx,
                                                    attn_tensor *dpe);
/* Gradient of the context vectors of attn_simple_self_attention with respect to X. */
ATTN_API attn_status attn_simple_self_attention_backward(attn_ctx *ctx, const attn_tensor *X,
                                                         attn_normalize norm,
                                                         const attn_tensor *dcontext,
                                                         attn_tensor *dX);
/* Scaled dot-product attention backward: dq [B,H,L,D], dk [B,Hkv,S,D], dv [B,Hkv,S,Dv] (GQA
 * heads summed), dmask (ATTN_MASK_ADD masks only; the mask's shape, broadcast dimensions
 * summed) — each may be NULL.  Same q, k, v, mask and options (incl. dropout seed/offset) as
 * the forward.  Overflow (see attn_sdpa) is ATTN_E_NONFINITE: from 12 x 12 up the rows of the
 * forward are checked as attn_sdpa checks them; below, a gradient row that comes out NaN or
 * infinite is (a row all of whose scores overflow to -inf counts as fully masked there: zero
 * gradients). */
ATTN_API attn_status attn_sdpa_backward(attn_ctx *ctx, const attn_tensor *q,
                                        const attn_tensor *k, const attn_tensor *v,
                                        const attn_mask *mask, const attn_sdpa_options *opt,
                                        const attn_tensor *dout, attn_tensor *dq,
                                        attn_tensor *dk, attn_tensor *dv, attn_tensor *dmask);
/* As attn_sdpa_backward, starting from the forward's saved results instead of recomputing
 * them (as FlashAttention's backward does): out [B, H, L, Dv] and lse [B, H, L] exactly as
 * attn_sdpa wrote them for the same q, k, v, mask and options.  From 12 x 12 up this skips a
 * whole forward pass (about 30% of the backward's time); the gradients agree with
 * attn_sdpa_backward's to rounding (the same bits when the forward ran the fused kernels).
 * A saved lse of -inf on a row that has visible keys (a forward that lost the row to
 * overflow) is ATTN_E_NONFINITE. */
ATTN_API attn_status attn_sdpa_backward_saved(attn_ctx *ctx, const attn_tensor *q,
                                              const attn_tensor *k, const attn_tensor *v,
                                              const attn_mask *mask,
                                              const attn_sdpa_options *opt,
                                              const attn_tensor *out, const attn_tensor *lse,
                                              const attn_tensor *dout, attn_tensor *dq,
                                              attn_tensor *dk, attn_tensor *dv,
                                              attn_tensor *dmask);
/* Backward of attn_sdpa_varlen: dq [Tq, H, D], dk [Tk, Hkv, D], dv [Tk, Hkv, Dv] (each may be
 * NULL), overwritten; rows of sequences without keys or queries get zeros. */
ATTN_API attn_status attn_sdpa_varlen_backward(attn_ctx *ctx, const attn_tensor *q,
                                               const attn_tensor *k, const attn_tensor *v,
                                               const attn_tensor *cu_seqlens_q,
                                               const attn_tensor *cu_seqlens_k,
                                               const attn_sdpa_options *opt,
                                               const attn_tensor *dout, attn_tensor *dq,
                                               attn_tensor *dk, attn_tensor *dv);

/* Cross-entropy (torch.nn.functional.cross_entropy, mean over the targets that are not
 * ignore_index).  logits [N, C], targets [N] I32/I64 in [0, C) or ignore_index;
 * label_smoothing in [0, 1).  *loss receives the mean; dlogits [N, C] (may be NULL) the
 * gradient of that mean.  With every target ignored the loss is 0 (not NaN). */
ATTN_API attn_status attn_cross_entropy(attn_ctx *ctx, const attn_tensor *logits,
                                        const attn_tensor *targets, int64_t ignore_index,
                                        float label_smoothing, float *loss /* OUT */,
                                        attn_tensor *dlogits);

/* ---- modules: same arguments as the forward, then dout and the input gradients -------- */
ATTN_API attn_status attn_seed_attention_backward(attn_ctx *ctx, const attn_module *m,
                                                  const attn_tensor *x, const attn_run *run,
                                                  const attn_tensor *dout, attn_tensor *dx);
ATTN_API attn_status attn_mha_backward(attn_ctx *ctx, const attn_module *m,
                                       const attn_tensor *query, const attn_tensor *key,
                                       const attn_tensor *value,
                                       const attn_mask *key_padding_mask,
                                       const attn_mask *attn_mask, const attn_mha_options *opt,
                                       const attn_run *run, const attn_tensor *dout,
                                       attn_tensor *dquery, attn_tensor *dkey,
                                       attn_tensor *dvalue);
/* Training forward and backward of multi-head attention (see attn_saved): out and weights as
 * attn_mha_forward (query, key and value are copied into saved, once when they are the same
 * view); the backward overwrites dquery, dkey, dvalue (each may be NULL). */
ATTN_API attn_status attn_mha_forward_train(attn_ctx *ctx, const attn_module *m,
                                            const attn_tensor *query, const attn_tensor *key,
                                            const attn_tensor *value,
                                            const attn_mask *key_padding_mask,
                                            const attn_mask *attn_mask,
                                            const attn_mha_options *opt, const attn_run *run,
                                            attn_tensor *out, attn_tensor *weights,
                                            attn_saved *saved /* IN/OUT */);
ATTN_API attn_status attn_mha_backward_saved(attn_ctx *ctx, const attn_module *m,
                                             const attn_saved *saved, const attn_tensor *dout,
                                             attn_tensor *dquery, attn_tensor *dkey,
                                             attn_tensor *dvalue);
ATTN_API attn_status attn_general_attention_backward(attn_ctx *ctx, const attn_module *m,
                                                     const attn_tensor *q,
                                                     const attn_tensor *x,
                                                     const attn_mask *mask,
                                                     const attn_tensor *dout, attn_tensor *dq,
                                                     attn_tensor *dx);
ATTN_API attn_status attn_additive_attention_backward(attn_ctx *ctx, const attn_module *m,
                                                      const attn_tensor *q,
                                                      const attn_tensor *k,
                                                      const attn_tensor *v,
                                                      const attn_mask *mask,
                                                      const attn_tensor *dout,
                                                      attn_tensor *dq, attn_tensor *dk,
                                                      attn_tensor *dv);
ATTN_API attn_status attn_ffn_backward(attn_ctx *ctx, const attn_module *m,
                                       const attn_tensor *x, const attn_run *run,
                                       const attn_tensor *dout, attn_tensor *dx);
/* The layer, stack and nn.Transformer backwards and _forward_train read the same members of
 * masks (attn_transformer_masks) as their forward: src_mask, src_key_padding_mask and
 * src_is_causal for an encoder layer or stack; tgt_mask, memory_mask, tgt_key_padding_mask,
 * memory_key_padding_mask and tgt_is_causal for a decoder layer or stack; all of them for
 * nn.Transformer.  Encoder layer backward, masks as attn_encoder_layer_forward's: */
ATTN_API attn_status attn_encoder_layer_backward(attn_ctx *ctx, const attn_module *m,
                                                 const attn_tensor *src,
                                                 const attn_transformer_masks *masks,
                                                 const attn_run *run, const attn_tensor *dout,
                                                 attn_tensor *dsrc);
/* Training forward and backward of the encoder layer (see attn_saved): out [B, L, E] as
 * attn_encoder_layer_forward (masks: the src_* members); the backward takes dout [B, L, E]
 * and overwrites dsrc [B, L, E] (may be NULL), as attn_encoder_layer_backward with the
 * forward's arguments. */
ATTN_API attn_status attn_encoder_layer_forward_train(attn_ctx *ctx, const attn_module *m,
                                                      const attn_tensor *src,
                                                      const attn_transformer_masks *masks,
                                                      const attn_run *run, attn_tensor *out,
                                                      attn_saved *saved /* IN/OUT */);
ATTN_API attn_status attn_encoder_layer_backward_saved(attn_ctx *ctx, const attn_module *m,
                                                       const attn_saved *saved,
                                                       const attn_tensor *dout,
                                                       attn_tensor *dsrc);
/* Decoder layer backward; masks: the tgt_* and memory_* members. */
ATTN_API attn_status attn_decoder_layer_backward(attn_ctx *ctx, const attn_module *m,
                                                 const attn_tensor *tgt,
                                                 const attn_tensor *memory,
                                                 const attn_transformer_masks *masks,
                                                 const attn_run *run, const attn_tensor *dout,
                                                 attn_tensor *dtgt, attn_tensor *dmemory);
/* Training forward and backward of the decoder layer (see attn_saved): out [B, T, E] as
 * attn_decoder_layer_forward (masks: the tgt_* and memory_* members; memory is copied into
 * saved); the backward overwrites dtgt [B, T, E] and dmemory [B, S, E] (each may be NULL). */
ATTN_API attn_status attn_decoder_layer_forward_train(attn_ctx *ctx, const attn_module *m,
                                                      const attn_tensor *tgt,
                                                      const attn_tensor *memory,
                                                      const attn_transformer_masks *masks,
                                                      const attn_run *run, attn_tensor *out,
                                                      attn_saved *saved /* IN/OUT */);
ATTN_API attn_status attn_decoder_layer_backward_saved(attn_ctx *ctx, const attn_module *m,
                                                       const attn_saved *saved,
                                                       const attn_tensor *dout,
                                                       attn_tensor *dtgt, attn_tensor *dmemory);
/* Encoder stack backward; masks: the src_* members. */
ATTN_API attn_status attn_encoder_backward(attn_ctx *ctx, const attn_module *m,
                                           const attn_tensor *src,
                                           const attn_transformer_masks *masks,
                                           const attn_run *run, const attn_tensor *dout,
                                           attn_tensor *dsrc);
/* The same pair for the encoder stack (attn_encoder_forward / attn_encoder_backward; masks:
 * the src_* members). */
ATTN_API attn_status attn_encoder_forward_train(attn_ctx *ctx, const attn_module *m,
                                                const attn_tensor *src,
                                                const attn_transformer_masks *masks,
                                                const attn_run *run, attn_tensor *out,
                                                attn_saved *saved /* IN/OUT */);
ATTN_API attn_status attn_encoder_backward_saved(attn_ctx *ctx, const attn_module *m,
                                                 const attn_saved *saved,
                                                 const attn_tensor *dout, attn_tensor *dsrc);
/* Decoder stack backward; masks: the tgt_* and memory_* members. */
ATTN_API attn_status attn_decoder_backward(attn_ctx *ctx, const attn_module *m,
                                           const attn_tensor *tgt, const attn_tensor *memory,
                                           const attn_transformer_masks *masks,
                                           const attn_run *run, const attn_tensor *dout,
                                           attn_tensor *dtgt, attn_tensor *dmemory);
/* The same pair for the decoder stack (attn_decoder_forward / attn_decoder_backward; masks:
 * the tgt_* and memory_* members). */
ATTN_API attn_status attn_decoder_forward_train(attn_ctx *ctx, const attn_module *m,
                                                const attn_tensor *tgt,
                                                const attn_tensor *memory,
                                                const attn_transformer_masks *masks,
                                                const attn_run *run, attn_tensor *out,
                                                attn_saved *saved /* IN/OUT */);
ATTN_API attn_status attn_decoder_backward_saved(attn_ctx *ctx, const attn_module *m,
                                                 const attn_saved *saved,
                                                 const attn_tensor *dout, attn_tensor *dtgt,
                                                 attn_tensor *dmemory);
/* nn.Transformer backward; masks: every member. */
ATTN_API attn_status attn_transformer_backward(attn_ctx *ctx, const attn_module *m,
                                               const attn_tensor *src, const attn_tensor *tgt,
                                               const attn_transformer_masks *masks,
                                               const attn_run *run, const attn_tensor *dout,
                                               attn_tensor *dsrc, attn_tensor *dtgt);
/* The same pair for nn.Transformer: out [B, T, E] as attn_transformer_forward (masks: every
 * member); the backward overwrites dsrc [B, S, E] and dtgt [B, T, E] (each may be NULL). */
ATTN_API attn_status attn_transformer_forward_train(attn_ctx *ctx, const attn_module *m,
                                                    const attn_tensor *src,
                                                    const attn_tensor *tgt,
                                                    const attn_transformer_masks *masks,
                                                    const attn_run *run, attn_tensor *out,
                                                    attn_saved *saved /* IN/OUT */);
ATTN_API attn_status attn_transformer_backward_saved(attn_ctx *ctx, const attn_module *m,
                                                     const attn_saved *saved,
                                                     const attn_tensor *dout, attn_tensor *dsrc,
                                                     attn_tensor *dtgt);
/* ids have no gradient: only the parameter gradients are accumulated. */
ATTN_API attn_status attn_gpt_backward(attn_ctx *ctx, const attn_module *m,
                                       const attn_tensor *ids, const attn_run *run,
                                       const attn_tensor *dlogits);
/* Training forward and backward of the GPT (see attn_saved): logits [B, T, V] as
 * attn_gpt_forward; the backward accumulates the parameter gradients for dlogits [B, T, V]. */
ATTN_API attn_status attn_gpt_forward_train(attn_ctx *ctx, const attn_module *m,
                                            const attn_tensor *ids, const attn_run *run,
                                            attn_tensor *logits, attn_saved *saved /* IN/OUT */);
ATTN_API attn_status attn_gpt_backward_saved(attn_ctx *ctx, const attn_module *m,
                                             const attn_saved *saved,
                                             const attn_tensor *dlogits);
ATTN_API attn_status attn_vit_embed_backward(attn_ctx *ctx, const attn_module *m,
                                             const attn_tensor *patches,
                                             const attn_tensor *dz, attn_tensor *dpatches);

/* ============================================================================================
 * Training: initialisation, optimiser, clipping, learning-rate schedule.
 * ========================================================================================== */

/* Fills every parameter as PyTorch initialises the module it mirrors, from a Philox stream
 * keyed by seed (same distributions as PyTorch, not the same numbers): nn.Linear weights and
 * biases U(-1/sqrt(in), 1/sqrt(in)); nn.MultiheadAttention in-projections xavier_uniform,
 * in_proj_bias and out_proj.bias 0, bias_k/bias_v xavier_normal; LayerNorm 1 and 0;
 * nn.Embedding N(0, 1); nn.Transformer xavier_uniform on every matrix (its
 * _reset_parameters); SelfAttention_v1 U[0, 1) (torch.rand).  Modules without a PyTorch
 * counterpart: GPT token/position embeddings N(0, 0.02), ViT cls_token and pos_embed
 * N(0, 0.02). */
ATTN_API attn_status attn_module_init(attn_ctx *ctx, attn_module *m, uint64_t seed);

/* Global L2 norm of all gradients (torch.nn.utils.clip_grad_norm_): if max_norm > 0 and the
 * norm exceeds it, every gradient is scaled by max_norm / (norm + 1e-6).  *norm (may be NULL)
 * receives the norm before clipping. */
ATTN_API attn_status attn_module_clip_grad_norm(attn_ctx *ctx, attn_module *m, float max_norm,
                                               float *norm /* OUT */);

/* torch.optim.AdamW: decoupled weight decay, bias-corrected moments. */
typedef struct attn_adamw_config {
    float lr;           /* default 1e-3 */
    float beta1, beta2; /* 0.9, 0.999 */
    float eps;          /* 1e-8 */
    float weight_decay; /* 1e-2 (applied to every parameter, as PyTorch's single group) */
} attn_adamw_config;
ATTN_API attn_adamw_config attn_adamw_defaults(void);

typedef struct attn_adamw attn_adamw;
/* The optimiser keeps m's parameter count; m must have gradients enabled. */
ATTN_API attn_status attn_adamw_create(attn_ctx *ctx, const attn_module *m,
                                       const attn_adamw_config *cfg, attn_adamw **out /* OUT */);
ATTN_API void attn_adamw_free(attn_adamw *opt);
/* One update of m's parameters from its gradients with learning rate lr (<= 0: cfg->lr). */
ATTN_API attn_status attn_adamw_step(attn_ctx *ctx, attn_adamw *opt, attn_module *m, float lr);
ATTN_API int64_t attn_adamw_step_count(const attn_adamw *opt);
/* Optimiser state as tensors "<prefix>exp_avg.<param>", "<prefix>exp_avg_sq.<param>" and
 * metadata "<prefix>step", for checkpoints and resume. */
ATTN_API attn_status attn_adamw_save(attn_ctx *ctx, const attn_adamw *opt, const attn_module *m,
                                     attn_st_writer *w, const char *prefix);
ATTN_API attn_status attn_adamw_load(attn_ctx *ctx, attn_adamw *opt, const attn_module *m,
                                     const attn_st *st, const char *prefix);

/* Learning rate at `step` (from 0): lr_max * (step + 1) / warmup for the first `warmup` steps,
 * then a cosine decay from lr_max to lr_min reached at `total`, lr_min after. */
ATTN_API float attn_lr_warmup_cosine(int64_t step, int64_t warmup, int64_t total, float lr_max,
                                     float lr_min);

/* ############################################################################################
 * EXTRA TIER: BERT sentence embeddings and attn eval.  Whole applications built on the core:
 * supported and tested, but their interfaces may still change between minor versions.
 * Define ATTN_CORE_ONLY before including attn.h to leave them out (and check that a program
 * uses the stable core only).  The demo tasks (dates, charlm) are in attn_tasks.h.
 * ######################################################################################### */
#ifndef ATTN_CORE_ONLY

/* ============================================================================================
 * BERT sentence embeddings (sentence-transformers compatible).
 *
 * attn_bert_load reads a Hugging Face / sentence-transformers model folder as it is:
 *   config.json              model_type "bert", hidden_act "gelu", absolute positions; sizes
 *                            and layer_norm_eps from it (other model types are refused by name)
 *   model.safetensors        HF BertModel state_dict names (an optional "bert." prefix; pooler.*
 *                            and buffers ignored), any float dtype
 *   vocab.txt                WordPiece vocabulary (one token a line; id = line number)
 *   tokenizer_config.json    optional: do_lower_case (default true), strip_accents,
 *                            tokenize_chinese_chars, unk/cls/sep/pad/mask tokens
 *                            (vocab.txt and tokenizer_config.json: attn_bpe_load_wordpiece)
 *   sentence_bert_config.json optional: max_seq_length (default min(512, max_position))
 *   modules.json             optional: Transformer, Pooling (its folder's config.json:
 *                            pooling_mode_mean_tokens / cls_token / max_tokens, exactly one) and
 *                            Normalize; other modules (Dense, ...) are refused by name.  Without
 *                            modules.json: mean pooling, no normalisation.
 * A missing file is ATTN_E_NOT_FOUND and an unsupported setting ATTN_E_UNSUPPORTED, with a
 * message naming it.
 *
 * Tokenisation is BERT's normaliser, pre-tokeniser and WordPiece as the Hugging Face tokenizers
 * library runs them (BertTokenizerFast, what sentence-transformers uses): the WordPiece kind of
 * the tokenizer object (attn_bpe_load_wordpiece; attn_bert_tokenizer returns it): invalid
 * UTF-8 bytes are dropped, control/format/private-use characters removed, whitespace splits,
 * CJK ideographs become single-character words, accents stripped (NFD, nonspacing marks
 * dropped) and lower-cased as configured, punctuation split off, then greedy longest-match
 * WordPiece with "##" continuations (a word over 100 characters is [UNK]); truncation to
 * max_seq_length - 2 then [CLS] ... [SEP].  The Unicode tables are measured from that library
 * one code point at a time (tools/gen_unicode_tables.py).  Limits: texts are NUL-terminated
 * (an embedded NUL ends the text); special-token strings inside a text ("[SEP]") are tokenised
 * as ordinary text (attn_bpe_encode with ATTN_BPE_PARSE_SPECIAL takes them as tokens);
 * token_type_ids are all 0.

 * attn_bert_embed tokenises, batches (32 texts, sorted by length; a batch's tokens packed back
 * to back, each text attending to its own tokens alone: no padding is computed), runs the
 * encoder, pools over the tokens and normalises when configured: out [n, hidden_size]
 * row-major.  A text's embedding has the same bits whatever the other texts of the call and
 * whatever the thread count.  GELU's erf is Abramowitz &
 * Stegun 7.1.28 (|error| <= 3e-7), vectorisable; against sentence-transformers the
 * all-MiniLM-L6-v2 embeddings differ by under 3e-7 (tests/test_bert.c).  A loaded attn_bert is
 * read-only: several contexts may use it at once, one per thread.
 * ========================================================================================== */
typedef struct attn_bert attn_bert;

typedef enum attn_bert_pooling {
    ATTN_BERT_POOL_MEAN = 0,
    ATTN_BERT_POOL_CLS = 1,
    ATTN_BERT_POOL_MAX = 2
} attn_bert_pooling;

typedef struct attn_bert_info {
    int64_t hidden_size, num_layers, num_heads, intermediate_size, vocab_size;
    int64_t max_position_embeddings, max_seq_length;
    double layer_norm_eps;
    int pooling;                /* attn_bert_pooling */
    int normalize;              /* 1: L2-normalised output */
    int do_lower_case;          /* 0 / 1 */
    int strip_accents;          /* -1: follow do_lower_case (HF's None), 0, 1 */
    int tokenize_chinese_chars; /* 0 / 1 */
} attn_bert_info;

ATTN_API attn_status attn_bert_load(attn_ctx *ctx, const char *dir, attn_bert **out /* OUT */);
ATTN_API void attn_bert_free(attn_bert *b);
ATTN_API attn_status attn_bert_get_info(const attn_bert *b, attn_bert_info *info /* OUT */);
/* Token ids of one text with [CLS]/[SEP], truncated to max_seq_length: *n is their count;
 * the first min(*n, cap) are written to ids.  The ids between [CLS] and [SEP] are
 * attn_bpe_encode's (flags 0) with the model's tokenizer (attn_bert_tokenizer). */
ATTN_API attn_status attn_bert_tokenize(attn_ctx *ctx, const attn_bert *b, const char *text,
                                        int32_t *ids, int64_t cap, int64_t *n /* OUT */);
/* The model's tokenizer (attn_bpe_load_wordpiece of its folder), owned by b: valid as long as
 * b; NULL for NULL. */
ATTN_API const struct attn_bpe *attn_bert_tokenizer(const attn_bert *b);
/* Sentence embeddings of n NUL-terminated UTF-8 texts into out [n, hidden_size]. */
ATTN_API attn_status attn_bert_embed(attn_ctx *ctx, const attn_bert *b,
                                     const char *const *texts, int64_t n, float *out);
/* Precision of the encoder's matrix products (the four nn.Linear of each layer, ~95% of the
 * arithmetic); everything else (embeddings, attention, layer norm, GELU, pooling) stays float.
 * The weights are packed once, here (a copy kept next to the float matrices) in the layout the
 * products read: half their size rounded for the 16-bit types; for ATTN_F32 the float GEMM's
 * panels at their full size (attn_bert_load does this: the float products then skip packing
 * the weights on each call, with the same bits; where that copy cannot be allocated the float
 * matrices serve alone).  Each product rounds its activations the same way.
 *   ATTN_F32 (the default): float weights and products, the accuracy stated above.
 *   ATTN_F16: the fast one where the CPU has AVX512_FP16 (Sapphire Rapids and later): rows of
 *     x and columns of W scaled by powers of two into [0.5, 1), rounded to IEEE half, fp16
 *     fused multiply-adds summed in fp16 over blocks of 128 terms, blocks summed in float (no
 *     overflow whatever the data).  ~1.7-1.9x the float GEMM speed.  all-MiniLM-L6-v2 on the
 *     50 sentences of tests/test_bert.c: max abs error 8.0e-4, min cosine 0.99998 against
 *     sentence-transformers' float embeddings.
 *   ATTN_BF16: weights and activations rounded to bfloat16, products exact, float sums
 *     (VDPBF16PS where the CPU has AVX512_BF16).  Max abs error 1.3e-3, min cosine 0.99996 on
 *     the same sentences.  VDPBF16PS issues at half the float FMA rate on Sapphire Rapids, so
 *     there it is slower than ATTN_F32: it trades accuracy for memory traffic, not for speed.
 * Without the instructions a plain C kernel gives the same bits (up to subnormal partial sums
 * for bf16), far more slowly for f16 (each fp16 operation emulated); environment ATTN_F16=0 /
 * ATTN_BF16=0 forces it.  Results are bit-identical across thread counts.  Call before sharing
 * b between threads (it changes b).  ATTN_E_UNSUPPORTED for other dtypes; ATTN_E_NOMEM leaves
 * b as it was. */
ATTN_API attn_status attn_bert_set_dtype(attn_ctx *ctx, attn_bert *b, attn_dtype dtype);
/* ATTN_F32, ATTN_F16 or ATTN_BF16 (ATTN_F32 for NULL). */
ATTN_API attn_dtype attn_bert_get_dtype(const attn_bert *b);

/* ============================================================================================
 * attn eval: run one op described by a safetensors file (docs/eval-format.md).
 * The input's __metadata__ names the op ("op") and its attributes; tensors carry PyTorch's
 * argument and state_dict names.  Outputs ("out", "attn_weights", ...) are added to `out`.
 * Unknown ops, attributes or tensors are refused with a message naming them.
 * ========================================================================================== */
ATTN_API attn_status attn_eval(attn_ctx *ctx, const attn_st *in, attn_st_writer *out);
/* Names of the ops attn_eval knows, NULL-terminated. */
ATTN_API const char *const *attn_eval_ops(void);

/* ============================================================================================
 * Quantized tensors: the GGML block formats of GGUF files (values are GGML's type numbers).
 * A tensor of n elements (n a multiple of the block's element count) is n / block_elems blocks
 * of block_bytes each, stored back to back.
 * ========================================================================================== */
typedef enum attn_qtype {
    ATTN_Q_F32 = 0, ATTN_Q_F16 = 1, ATTN_Q_Q4_0 = 2, ATTN_Q_Q4_1 = 3, ATTN_Q_Q5_0 = 6,
    ATTN_Q_Q5_1 = 7, ATTN_Q_Q8_0 = 8, ATTN_Q_Q2_K = 10, ATTN_Q_Q3_K = 11,
    ATTN_Q_Q4_K = 12, ATTN_Q_Q5_K = 13, ATTN_Q_Q6_K = 14, ATTN_Q_Q8_K = 15, ATTN_Q_IQ4_NL = 20,
    ATTN_Q_IQ4_XS = 23, ATTN_Q_BF16 = 30
} attn_qtype;

/* GGML's name of a type number ("Q4_K"), or NULL for a number attn does not know. */
ATTN_API const char *attn_qtype_name(int type);
/* Elements and bytes per block of a type number; ATTN_E_UNSUPPORTED (no message: there is no
 * context) for a number attn does not know. */
ATTN_API attn_status attn_qtype_block(int type, int64_t *block_elems /* OUT */,
                                      int64_t *block_bytes /* OUT */);

/* Dequantizes n elements (a multiple of the type's block) stored in src (src_bytes at least
 * n / block_elems * block_bytes) into dst[n]: bit for bit the float arithmetic of the gguf
 * Python package's numpy dequantizers (gguf.quants.dequantize; Q8_K, which it lacks, as d q),
 * e.g. Q4_1 as fl(fl(d q) + m), fp16 scales widened exactly.  Every type of attn_qtype.
 * Scales are not checked: an infinite scale gives infinities (and NaN for a zero quant,
 * inf * 0), a NaN scale NaN for its block or group, as IEEE arithmetic does; F32, F16 and BF16
 * NaN payloads are kept.  Runs over the context's threads; dst may not overlap src. */
ATTN_API attn_status attn_dequantize(attn_ctx *ctx, int type, const void *src, size_t src_bytes,
                                     int64_t n, float *dst);
/* Quantizes n floats (a multiple of the block) into dst (dst_bytes at least n / block_elems *
 * block_bytes): bit for bit gguf.quants.quantize for F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1
 * and Q8_0 (ATTN_E_UNSUPPORTED for the other types).  src must be finite (ATTN_E_NONFINITE)
 * unless the context has ATTN_CTX_NO_FINITE_CHECK. */
ATTN_API attn_status attn_quantize(attn_ctx *ctx, int type, const float *src, int64_t n,
                                   void *dst, size_t dst_bytes);

/* Precision of the activations in attn_qlinear's matrix-vector products (M <= 8). */
typedef enum attn_qact {
    /* the measured default (docs/kernels.md): ATTN_QACT_Q16 where the CPU has its kernels (x86
     * with AVX2: faster than float for every type there), else ATTN_QACT_F32.  Ask for
     * ATTN_QACT_F32 for the dequantized weights' product to float rounding. */
    ATTN_QACT_DEFAULT = 0,
    /* float activations: the activations are not rounded; each weight is taken exactly, as
     * attn_dequantize gives it, and multiplied in float, so only the order of the float sums
     * differs from dequantizing then multiplying: |error| <= ~K 2^-24 sum_k |w_nk x_mk|.  On
     * x86 the kernels apply a block's (group's) scale and min to its sums instead,
     * s sum_k q_k x_mk - m sum_k x_mk (fewer operations per weight), which takes each weight
     * at its value s q - m before attn_dequantize's last rounding: |error| <= ~K 2^-24
     * sum_k (|s q_k| + |m|) |x_mk| (Q4_0, whose m is 8 d, Q4_1, Q5_1, Q4_K, Q5_K; for the
     * types without a min, the bound above). */
    ATTN_QACT_F32 = 1,
    /* activations rounded to int8 per block of 32 (scale max|x| / 127, float), exact integer
     * dot products (AVX512_VNNI or AVX-VNNI where the CPU has them): adds up to
     * sum_b (d_b / 2) sum_{k in b} |w_nk| over the blocks b of the row (d_b the block's
     * scale); measured 0.4% rms of y on uniform activations, 1-2% with outlier channels.
     * 1.2-3x faster where decoding is not memory-bound.  For Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
     * Q4_K, Q5_K, Q6_K; other types use float activations. */
    ATTN_QACT_Q8 = 2,
    /* activations rounded to int16 per block of 32 (scale d = max|x| / 32767, float), exact
     * integer dot products (VPMADDWD): adds up to sum_b (d_b / 2) sum_{k in b} |w_nk|, each
     * element of x moved by at most 2^-16 of its block's largest (measured 3-5e-5 rms of y,
     * 300 times closer to the float product than int8), and on x86 runs at 1.2-2x the float
     * kernels' rate, 0.7-1.1x the int8 ones' (docs/kernels.md).  For Q4_0, Q4_1, Q5_0, Q5_1,
     * Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS on CPUs with AVX2; other types,
     * and CPUs without AVX2, use float activations. */
    ATTN_QACT_Q16 = 3
} attn_qact;

/* Linear layer on quantized weights: y[m * ldy + n] = sum_k x[m * ldx + k] W[n, k] (+ bias[n])
 * for m < M, n < N.  w holds W as GGUF stores a [N, K] weight: N rows of K elements of `type`
 * (K a multiple of the block), rows back to back (w_bytes at least N K / block_elems *
 * block_bytes), read in place: no dequantized copy is made.  bias may be NULL.
 *   M <= 8 (decoding, a few sequences): matrix-vector kernels that read the weights once, at
 *     close to the memory's bandwidth; act chooses the activation precision (above).
 *   M > 8 (prompts): with ATTN_QACT_F32 or ATTN_QACT_Q8, on CPUs without AVX2, and for
 *     F32, F16, BF16 and Q2_K weights, the weights are dequantized panel by panel
 *     (each weight once per call) into the float GEMM's microkernels; the result is that of
 *     the float GEMM on the dequantized matrix, bit for bit, plus the bias.  With
 *     ATTN_QACT_Q16 or ATTN_QACT_DEFAULT on x86 with AVX2, x is rounded to int16 per block of
 *     32 as for M <= 8 and multiplied in integers (VPDPWSSD with AVX512_VNNI or AVX-VNNI,
 *     else VPMADDWD), faster than the float GEMM (docs/kernels.md; the same error bound as
 *     ATTN_QACT_Q16 above; each row's result does not depend on the other rows, nor on the
 *     instructions).
 * Threads split the N outputs only: results are bit-identical for every thread count (and
 * may differ in the last bits between instruction sets, as the float GEMM does).  x and bias
 * must be finite (ATTN_E_NONFINITE) unless ATTN_CTX_NO_FINITE_CHECK; the weights are not
 * scanned.  y may not overlap x, w or bias. */
ATTN_API attn_status attn_qlinear(attn_ctx *ctx, int type, const void *w, size_t w_bytes,
                                  int64_t N, int64_t K, const float *x, int64_t ldx, int64_t M,
                                  const float *bias, float *y, int64_t ldy, attn_qact act);

/* ============================================================================================
 * GGUF files (issue 12, part 1)
 * ========================================================================================== */

/* GGUF is llama.cpp's model file: a header, typed key-value metadata, tensor descriptions,
 * then the tensor data (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md).  attn reads
 * versions 2 and 3 of little-endian files; version 1 and big-endian files are refused with
 * ATTN_E_UNSUPPORTED.  Every count, length, type, dimension and offset is checked against the
 * file before it is used: a truncated, inconsistent or hostile file gives ATTN_E_FORMAT (a
 * valid thing attn does not read, such as a tensor type outside attn_qtype or an array of
 * arrays, ATTN_E_UNSUPPORTED) and a message naming the key or tensor and the byte offset,
 * never an out-of-bounds read, a hang or an allocation larger than a small multiple of the
 * file.  What is checked and the limits: docs/gguf.md.
 *
 * Metadata: keys and tensor names are NUL-terminated copies (one holding a NUL byte is
 * refused); duplicate keys and tensor names are refused; string values are pointers into the
 * file with a length, NOT NUL-terminated (use attn_gguf_get_str_copy for a C string), and
 * their UTF-8 is not checked.  BOOL values must be 0 or 1.  Arrays hold scalars or strings;
 * arrays of arrays are refused (ATTN_E_UNSUPPORTED), so values nest one level at most.
 *
 * Tensors: dims are given in both orders.  ne[] is GGUF's (and GGML's) order: ne[0] is the
 * contiguous, fastest-varying dimension.  shape[] is the same dims reversed, the row-major
 * (PyTorch) shape: token_embd.weight with ne = {576, 49152} is a [49152, 576] matrix, 49152
 * rows of 576.  Rows along ne[0] are stored as ne[0] / block_elems blocks (attn_qtype_block).
 * A dimension may be 0 (an empty tensor: no bytes, never overlaps anything).  Offsets must be
 * multiples of the file's alignment; tensors may leave gaps but may not overlap. */
typedef struct attn_gguf attn_gguf;

/* GGUF's metadata value types (the numbers of the file format). */
typedef enum attn_gguf_type {
    ATTN_GGUF_UINT8 = 0, ATTN_GGUF_INT8 = 1, ATTN_GGUF_UINT16 = 2, ATTN_GGUF_INT16 = 3,
    ATTN_GGUF_UINT32 = 4, ATTN_GGUF_INT32 = 5, ATTN_GGUF_FLOAT32 = 6, ATTN_GGUF_BOOL = 7,
    ATTN_GGUF_STRING = 8, ATTN_GGUF_ARRAY = 9, ATTN_GGUF_UINT64 = 10, ATTN_GGUF_INT64 = 11,
    ATTN_GGUF_FLOAT64 = 12
} attn_gguf_type;
/* "UINT8" ... "FLOAT64", or NULL for another number. */
ATTN_API const char *attn_gguf_type_name(int type);

#define ATTN_GGUF_MAX_DIMS 4
#define ATTN_GGUF_DEFAULT_ALIGNMENT 32 /* without general.alignment */
#define ATTN_GGUF_MAX_ALIGNMENT (1 << 24) /* general.alignment: a UINT32 power of two <= this */

/* One metadata entry. */
typedef struct attn_gguf_kv {
    const char *key;  /* NUL-terminated; valid while the attn_gguf lives */
    int type;         /* attn_gguf_type */
    int elem_type;    /* ARRAY: the elements' type (never ARRAY); otherwise -1 */
    uint64_t n;       /* ARRAY: element count; STRING: byte length; otherwise 1 */
    uint64_t offset;  /* file offset of the entry (its key) */
    const void *data; /* the value's bytes in the file (little-endian, maybe unaligned): a
                       * scalar's, a STRING's characters, an array's first element; NULL for
                       * an array of STRINGs */
} attn_gguf_kv;

/* One tensor. */
typedef struct attn_gguf_tensor {
    const char *name; /* NUL-terminated; valid while the attn_gguf lives */
    int type;         /* attn_qtype (GGML type number) */
    int n_dims;       /* 1 to 4 */
    int64_t ne[ATTN_GGUF_MAX_DIMS];    /* GGUF order, ne[0] contiguous; 1 past n_dims */
    int64_t shape[ATTN_GGUF_MAX_DIMS]; /* row-major order: shape[k] = ne[n_dims-1-k]; 1 past
                                        * n_dims */
    int64_t numel;    /* elements: the product of the dims */
    size_t nbytes;    /* numel / block_elems * block_bytes */
    uint64_t offset;  /* as the file says: from the start of the data section */
    uint64_t file_offset; /* from the start of the file (attn_gguf_data_offset + offset) */
    const void *data; /* the bytes in the mapping (little-endian blocks; never copied) */
} attn_gguf_tensor;

/* Opens a GGUF file: a regular file (the checks of attn_st_read_file, bounded by
 * ATTN_LIMIT_FILE_BYTES), memory-mapped read-only where the system has mmap (else read into
 * memory): tensor data is never copied, and pages are read as they are touched.  While it is
 * mapped the file must not be truncated or rewritten (touching pages cut off by a truncation
 * raises SIGBUS, as for every mapped file).  Errors name the file.  ctx must outlive *out. */
ATTN_API attn_status attn_gguf_open(attn_ctx *ctx, const char *path, attn_gguf **out /* OUT */);
/* attn_gguf_open, but the file is read into memory instead of mapped: it costs the file's size
 * in memory and the time to read it, and the file may then change or be truncated (a mapped
 * file truncated by another process while in use kills the process with SIGBUS when a lost
 * page is touched, as in every memory-mapped reader, llama.cpp's included). */
ATTN_API attn_status attn_gguf_read(attn_ctx *ctx, const char *path, attn_gguf **out /* OUT */);
/* Reads a GGUF image in memory, WITHOUT copying it: data must stay valid and unchanged until
 * attn_gguf_free (keys and names are copied; values, strings and tensors point into data).
 * Tensor pointers are as aligned as data is plus their offsets. */
ATTN_API attn_status attn_gguf_read_memory(attn_ctx *ctx, const void *data, size_t size,
                                           attn_gguf **out /* OUT */);
ATTN_API void attn_gguf_free(attn_gguf *g);
/* 2 or 3; the alignment (ATTN_GGUF_DEFAULT_ALIGNMENT unless general.alignment says); the file
 * offset of the data section (the end of the tensor descriptions rounded up to the alignment).
 * 0 for NULL. */
ATTN_API uint32_t attn_gguf_version(const attn_gguf *g);
ATTN_API uint32_t attn_gguf_alignment(const attn_gguf *g);
ATTN_API uint64_t attn_gguf_data_offset(const attn_gguf *g);

/* Metadata in file order; find is ATTN_E_NOT_FOUND (no message set) when the key is absent. */
ATTN_API size_t attn_gguf_kv_count(const attn_gguf *g);
ATTN_API attn_status attn_gguf_kv_at(const attn_gguf *g, size_t i, attn_gguf_kv *kv /* OUT */);
ATTN_API attn_status attn_gguf_kv_find(const attn_gguf *g, const char *key,
                                       attn_gguf_kv *kv /* OUT */);

/* Typed values by key.  A missing key is ATTN_E_NOT_FOUND and a value of another type
 * ATTN_E_FORMAT, both with a message naming the key (errors go to the attn_gguf's context).
 * get_int takes any of the eight integer types and refuses a value outside [lo, hi]
 * (ATTN_E_FORMAT; pass INT64_MIN, INT64_MAX for any int64); get_float takes FLOAT32, FLOAT64
 * and the integer types (as the nearest double); get_bool takes BOOL (*v 0 or 1). */
ATTN_API attn_status attn_gguf_get_int(const attn_gguf *g, const char *key, int64_t lo,
                                       int64_t hi, int64_t *v /* OUT */);
ATTN_API attn_status attn_gguf_get_float(const attn_gguf *g, const char *key,
                                         double *v /* OUT */);
ATTN_API attn_status attn_gguf_get_bool(const attn_gguf *g, const char *key, int *v /* OUT */);
/* A STRING value: *s points into the file, *len bytes, NOT NUL-terminated (may hold NULs). */
ATTN_API attn_status attn_gguf_get_str(const attn_gguf *g, const char *key,
                                       const char **s /* OUT */, size_t *len /* OUT */);
/* The STRING value copied into buf with a NUL after it; *len (may be NULL) gets its length.
 * ATTN_E_INVALID when cap < length + 1 (buf then holds the first cap - 1 bytes and a NUL). */
ATTN_API attn_status attn_gguf_get_str_copy(const attn_gguf *g, const char *key, char *buf,
                                            size_t cap, size_t *len /* OUT */);
/* An ARRAY: its element type and count, and for numeric and BOOL elements a pointer to them
 * in the file (n little-endian values back to back, possibly unaligned; NULL for strings).
 * Any output may be NULL. */
ATTN_API attn_status attn_gguf_get_arr(const attn_gguf *g, const char *key,
                                       int *elem_type /* OUT */, uint64_t *n /* OUT */,
                                       const void **data /* OUT */);
/* Element i of an ARRAY (i >= n is ATTN_E_INVALID), with the conversions and checks of the
 * scalar getters: integer elements, floating (or integer) elements, string elements. */
ATTN_API attn_status attn_gguf_arr_int(const attn_gguf *g, const char *key, uint64_t i,
                                       int64_t lo, int64_t hi, int64_t *v /* OUT */);
ATTN_API attn_status attn_gguf_arr_float(const attn_gguf *g, const char *key, uint64_t i,
                                         double *v /* OUT */);
ATTN_API attn_status attn_gguf_arr_str(const attn_gguf *g, const char *key, uint64_t i,
                                       const char **s /* OUT */, size_t *len /* OUT */);

/* Tensors in file order; find is ATTN_E_NOT_FOUND (no message set) when the name is absent. */
ATTN_API size_t attn_gguf_tensor_count(const attn_gguf *g);
ATTN_API attn_status attn_gguf_tensor_at(const attn_gguf *g, size_t i,
                                         attn_gguf_tensor *t /* OUT */);
ATTN_API attn_status attn_gguf_tensor_find(const attn_gguf *g, const char *name,
                                           attn_gguf_tensor *t /* OUT */);

/* ============================================================================================
 * Tokenizer: byte-level BPE, SentencePiece BPE and WordPiece (issue 12 part 4, issue 27)
 *
 * One object, attn_bpe, whose kind (attn_bpe_info.kind) is one of three:
 *  - byte-level BPE, the tokenizer of GPT-2-style language models (GPT-2, Llama 3, Qwen2,
 *    SmolLM2, ...), described first below;
 *  - SentencePiece BPE (Gemma, Llama 2, Mistral: a GGUF file's tokenizer.ggml.model "llama"),
 *    attn_bpe_from_gguf; docs/bpe.md;
 *  - WordPiece, BERT's (attn_bpe_load_json of a BERT tokenizer.json, or
 *    attn_bpe_load_wordpiece of a BERT folder), at attn_bpe_load_wordpiece.
 * The ids are those of the Hugging Face tokenizers library for the same tokenizer, without the
 * special tokens a post-processor would add (BOS, [CLS]/[SEP]: attn_bpe_get_info names them);
 * encoding, decoding and the token queries are the same calls for every kind.
 *
 * Byte-level BPE: text -> ids as the Hugging Face tokenizers library runs a tokenizer.json of
 * model type BPE with a ByteLevel pre-tokenizer and decoder, and ids -> text.  Built either
 * from arrays (a GGUF file's tokenizer.ggml.tokens / token_type / merges / pre) or from a
 * tokenizer.json.  Encoding:
 *   1. invalid UTF-8 becomes U+FFFD, one per maximal invalid subpart, as Python's
 *      bytes.decode("utf-8", errors="replace") makes the str that reaches the library;
 *   2. added tokens (control ones only with ATTN_BPE_PARSE_SPECIAL) are split off whole,
 *      leftmost-longest, and the text between them tokenized on its own;
 *   3. the pre-tokenizer cuts that text into words: "gpt2" (GPT-2's pattern 's|'t|'re|'ve|
 *      'm|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+), "llama-bpe" (Llama 3's:
 *      case-insensitive contractions, [^\r\n\p{L}\p{N}]?\p{L}+, \p{N}{1,3}, ...), "qwen2"
 *      (Llama 3's with \p{N}: one digit a word; Qwen2, Qwen2.5, Qwen3) or "smollm" (each
 *      numeric character alone, then GPT-2's); the Unicode classes are measured from
 *      the library's regex engine (tools/gen_bpe_tables.py);
 *   4. each word's bytes, as GPT-2's byte characters ("Ġ" for a space), are merged by rank,
 *      lowest first (leftmost among equals), and the resulting tokens' ids emitted.
 * No BOS/EOS is added (a tokenizer.json's post_processor is ignored).  Decoding maps each
 * token's characters back to bytes; the exact bytes are returned, so decoding the ids of a
 * text gives back the text (after step 1) byte for byte.  docs/bpe.md has the details, the
 * limits and the known differences from the library.  An attn_bpe is read-only once built:
 * several contexts may use it at once, one per thread.
 * ========================================================================================== */
typedef struct attn_bpe attn_bpe;

/* Token types (GGUF's tokenizer.ggml.token_type numbers): control tokens are the special added
 * tokens (<|im_end|>), user-defined ones the added tokens that are not special. */
enum {
    ATTN_BPE_TOKEN_NORMAL = 1,
    ATTN_BPE_TOKEN_CONTROL = 3,
    ATTN_BPE_TOKEN_USER_DEFINED = 4
};

enum {
    /* attn_bpe_encode: control tokens written in the text become their ids (the library's
     * default).  Without it their text is tokenized as ordinary text (the library's
     * encode_special_tokens), so that user text cannot forge a <|im_end|>; user-defined
     * tokens are always matched. */
    ATTN_BPE_PARSE_SPECIAL = 1u << 0,
    /* decoding: control tokens give no text (skip_special_tokens) */
    ATTN_BPE_SKIP_SPECIAL = 1u << 1,
    /* decoding: the ids continue a text already begun (the tokens generated after a prompt),
     * so the first of them is not at the text's start: a SentencePiece tokenizer with
     * add_space_prefix keeps its leading space, a WordPiece one puts a space before it (or
     * joins a "##" piece).  Without it the ids are a whole text, as the library decodes them. */
    ATTN_BPE_CONTINUE = 1u << 2
};

/* From arrays.  tokens[i] is the text of id i in the byte-level spelling ("Ġthe"; control
 * tokens as they are written, "<|im_end|>"), NUL-terminated; n_tokens in
 * [1, ATTN_LIMIT_VOCAB].  token_types (NULL: all normal) marks ATTN_BPE_TOKEN_CONTROL and
 * ATTN_BPE_TOKEN_USER_DEFINED tokens (other values are normal tokens); those are the added
 * tokens, which must be valid UTF-8 (an empty one is not matched).  merges[r] is "a b" (the
 * merge of rank r: two tokens separated by one space; a + b must be a token too; a pair listed
 * twice takes its later rank), at most ATTN_LIMIT_VOCAB of them.  pre: "gpt2", "llama-bpe"
 * (which also takes a word that is a token whole before merging, the library's
 * ignore_merges, as Llama 3's tokenizer.json and llama.cpp do), "qwen2" or "smollm"; any other is
 * ATTN_E_UNSUPPORTED naming it.  A text listed twice is looked up as its last id (both ids
 * decode to it).  Everything is copied: the arrays may be freed after the call. */
ATTN_API attn_status attn_bpe_create(attn_ctx *ctx, const char *const *tokens, int64_t n_tokens,
                                     const int32_t *token_types, const char *const *merges,
                                     int64_t n_merges, const char *pre,
                                     attn_bpe **out /* OUT */);
/* From a Hugging Face tokenizer.json: model type "BPE" or "WordPiece" (below); for "BPE":
 * vocab with ids 0 .. n-1, each once;
 * merges as "a b" strings or ["a", "b"] pairs; unk_token, fuse_unk and ignore_merges honoured;
 * dropout null or 0; byte_fallback false), added_tokens (special ones are control tokens;
 * lstrip, rstrip and single_word must be false; each id must be the one the library gives),
 * normalizer null or NFC (Qwen2's: taken as a no-op, so text not in NFC can get other ids than
 * the library's), decoder ByteLevel, and one of the pre-tokenizers as the library writes them:
 * ByteLevel(add_prefix_space=false, use_regex=true) is "gpt2",
 * Sequence[Split(Llama 3's regex, Isolated), ByteLevel(use_regex=false)] "llama-bpe", the same
 * with Qwen2's regex "qwen2",
 * Sequence[Digits(individual_digits=true), ByteLevel(use_regex=true)] "smollm".
 * Model type "WordPiece" (BERT's tokenizer.json): vocab as for BPE, unk_token (required, in the
 * vocabulary), continuing_subword_prefix (default "##"), max_input_chars_per_word (default
 * 100); normalizer BertNormalizer (clean_text, handle_chinese_chars, strip_accents null / true
 * / false, lowercase) or null; pre_tokenizer BertPreTokenizer; decoder WordPiece (prefix,
 * cleanup); added_tokens as for BPE, a normalized one matched on the normalized text as the
 * library does; post_processor TemplateProcessing ("[CLS] $A [SEP]") or BertProcessing only
 * read for attn_bpe_info's cls_id / sep_id, padding's pad_id for pad_id.  The truncation and
 * padding settings are not applied.  Anything else is ATTN_E_UNSUPPORTED with a message naming
 * what was found; malformed files ATTN_E_FORMAT. */
ATTN_API attn_status attn_bpe_load_json(attn_ctx *ctx, const char *path,
                                        attn_bpe **out /* OUT */);
/* WordPiece (BERT): the tokenizer of a BERT / sentence-transformers folder as transformers
 * builds it from the folder's vocab.txt (one token a line, "\r\n" allowed, id = line number;
 * a line repeated is looked up as its last id) and tokenizer_config.json (optional):
 * do_lower_case (default true), strip_accents (null: follows do_lower_case),
 * tokenize_chinese_chars (default true), unk / cls / sep / pad / mask_token (strings or
 * AddedToken objects; "[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]" by default; the first four
 * must be lines of vocab.txt, and all that are become control tokens); tokenizer_class, when
 * given, must name a Bert tokenizer; clean_text on, "##" continuations, 100 characters a word
 * at most, the WordPiece decoder with cleanup.  attn_bert_load reads its tokenizer with this.
 *
 * Encoding a text with a WordPiece tokenizer (the library's BertNormalizer, BertPreTokenizer
 * and WordPiece model; invalid UTF-8 becomes U+FFFD first, as for BPE):
 *   1. added tokens as for BPE: control ones ([CLS], [SEP], ... written in the text) only with
 *      ATTN_BPE_PARSE_SPECIAL, matched on the raw text;
 *   2. the normalizer, per character: clean_text drops NUL, U+FFFD and control / format /
 *      private-use characters and turns whitespace into ' '; handle_chinese_chars puts spaces
 *      around CJK ideographs; strip_accents decomposes (NFD) and drops the nonspacing marks;
 *      lowercase lower-cases (the library's Unicode tables, measured code point by code point:
 *      tools/gen_unicode_tables.py);
 *   3. words end at whitespace; each punctuation character is a word of its own;
 *   4. each word: the longest prefix that is a token, then the longest continuation
 *      ("##" + the next characters) that is one, and so on; a word with a part no token
 *      matches, or longer than max_input_chars_per_word characters, is the unknown token.
 * No [CLS] / [SEP] is added (attn_bert_tokenize adds them; attn_bpe_get_info gives their ids).
 * Decoding is the library's WordPiece decoder: the first token as it is, each later one with
 * its "##" removed if it has one, else after a space; then, with cleanup (the default), in each
 * token's text " ." " ?" " !" " ," become "." "?" "!" ",", " ' " "'", " n't" "n't", " 'm" "'m",
 * " do not" " don't", " 's" "'s", " 've" "'ve", " 're" "'re" ("don ' t" stays so: the library
 * cleans token by token).  transformers' decode with clean_up_tokenization_spaces=True cleans
 * the whole text once more; that step is the caller's. */
ATTN_API attn_status attn_bpe_load_wordpiece(attn_ctx *ctx, const char *dir,
                                             attn_bpe **out /* OUT */);
/* From a GGUF file's tokenizer.ggml.* keys (a model file or a vocabulary-only one):
 * tokenizer.ggml.model "gpt2" (byte-level BPE), tokens (valid UTF-8, no NUL), merges, token
 * types and the pre-tokenizer name as attn_bpe_create takes them.  ATTN_E_NOT_FOUND when the
 * file has no tokenizer.ggml.model; ATTN_E_UNSUPPORTED for another tokenizer model. */
ATTN_API attn_status attn_bpe_from_gguf(attn_ctx *ctx, const attn_gguf *g,
                                        attn_bpe **out /* OUT */);
ATTN_API void attn_bpe_free(attn_bpe *bpe);

/* The ids of text[0, len) (any bytes: NULs and invalid UTF-8 included; len at most
 * ATTN_LIMIT_TEXT_BYTES): *n is their count, the first min(*n, cap) are written to ids.
 * flags: 0 or ATTN_BPE_PARSE_SPECIAL. */
ATTN_API attn_status attn_bpe_encode(attn_ctx *ctx, const attn_bpe *bpe, const char *text,
                                     size_t len, unsigned flags, int32_t *ids, int64_t cap,
                                     int64_t *n /* OUT */);
/* The bytes of ids[0, n) (each in [0, vocab size), else ATTN_E_INVALID): *len is their count;
 * the first min(*len, cap) are written to out, then a NUL if room remains.  The bytes are
 * exact, not necessarily UTF-8 (ids may cut a character; the library would show U+FFFD
 * there).  flags: ATTN_BPE_SKIP_SPECIAL, ATTN_BPE_CONTINUE.  The ids are a whole text unless
 * ATTN_BPE_CONTINUE: a SentencePiece tokenizer whose file sets add_space_prefix (GGUF
 * tokenizer.ggml.add_space_prefix: Llama 2 and Mistral true, Gemma false) drops one space at
 * the start of the text (the one its encoding puts there; the library's Strip decoder: its
 * first byte, when that is a space, after skipped tokens), and a WordPiece one decodes its
 * first token as it is (see attn_bpe_load_wordpiece). */
ATTN_API attn_status attn_bpe_decode(attn_ctx *ctx, const attn_bpe *bpe, const int32_t *ids,
                                     int64_t n, unsigned flags, char *out, size_t cap,
                                     size_t *len /* OUT */);

/* Streaming decode, for generation: one id at a time, only complete UTF-8 characters come
 * out; the bytes of a character cut by a token wait in the state (zero it to start a text).
 * An invalid subpart becomes U+FFFD, so the pieces of a stream, ended by
 * attn_bpe_decode_stream_end, are the library's decode of the ids (valid UTF-8; equal to
 * attn_bpe_decode's bytes, with the same flags, when those are valid).  *len is the piece's
 * length, written to out with a NUL after it if room remains; 3 * (max_token_bytes + 3) bytes
 * always suffice.  Too small a cap is ATTN_E_INVALID with *len the size needed and the state
 * unchanged.  flags: ATTN_BPE_SKIP_SPECIAL, ATTN_BPE_CONTINUE (a stream of generated tokens
 * that continue a prompt passes it, so that no space is dropped). */
typedef struct attn_bpe_stream {
    unsigned char pending[4];
    int npending;
    int started; /* 0 until the text has begun (kept by the calls) */
} attn_bpe_stream;
ATTN_API attn_status attn_bpe_decode_stream(attn_ctx *ctx, const attn_bpe *bpe,
                                            attn_bpe_stream *state, int32_t id, unsigned flags,
                                            char *out, size_t cap, size_t *len /* OUT */);
/* The end of a stream: U+FFFD (3 bytes) if a character was left incomplete, else nothing;
 * the state is zeroed for a new text. */
ATTN_API attn_status attn_bpe_decode_stream_end(attn_ctx *ctx, attn_bpe_stream *state,
                                                char *out, size_t cap, size_t *len /* OUT */);

/* The id of a token's text as stored ("<|im_end|>", "Ġthe"), or -1. */
ATTN_API int32_t attn_bpe_token_id(const attn_bpe *bpe, const char *text);
/* The text of an id as stored (NUL-terminated, valid as long as bpe), or NULL out of range. */
ATTN_API const char *attn_bpe_token_text(const attn_bpe *bpe, int32_t id);
/* ATTN_BPE_TOKEN_NORMAL, _CONTROL or _USER_DEFINED; 0 for an id out of range. */
ATTN_API int attn_bpe_token_type(const attn_bpe *bpe, int32_t id);
/* Ids are in [0, vocab size) (0 for NULL). */
ATTN_API int64_t attn_bpe_vocab_size(const attn_bpe *bpe);

/* attn_bpe_info.kind */
enum {
    ATTN_BPE_KIND_BYTE_LEVEL = 0,    /* byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM2) */
    ATTN_BPE_KIND_SENTENCEPIECE = 1, /* SentencePiece BPE (Gemma, Llama 2, Mistral) */
    ATTN_BPE_KIND_WORDPIECE = 2      /* BERT's WordPiece */
};

typedef struct attn_bpe_info {
    int64_t vocab_size;      /* ids are in [0, vocab_size) */
    int64_t n_merges;        /* as listed (a repeated pair counted each time) */
    int64_t n_added;         /* control and user-defined tokens */
    int64_t max_token_bytes; /* the most bytes one token decodes to */
    const char *pre;         /* "gpt2", "llama-bpe", "qwen2", "smollm"; "sentencepiece" or
                              * "wordpiece" for those kinds */
    int ignore_merges;       /* 1: a word that is a token is taken whole */
    int32_t unk_id;          /* the unknown token (a byte with no token; WordPiece: a word
                              * with no pieces), or -1: dropped */
    int kind;                /* ATTN_BPE_KIND_* */
    int add_space_prefix;    /* SentencePiece: a U+2581 goes before the text, and decoding a
                              * whole text drops the space at its start */
    /* WordPiece (0 for the other kinds): the normalizer's options; strip_accents -1 follows
     * lowercase (the library's null) */
    int clean_text, handle_chinese_chars, strip_accents, lowercase;
    int64_t max_input_chars_per_word;
    int32_t cls_id, sep_id;  /* WordPiece: the tokens the file puts around a text ([CLS] text
                              * [SEP]), or -1 (also for the other kinds) */
    int32_t pad_id;          /* WordPiece: the padding token the file names, or -1 */
} attn_bpe_info;
ATTN_API attn_status attn_bpe_get_info(const attn_bpe *bpe, attn_bpe_info *info /* OUT */);
/* The merges by rank: pairs[2r], pairs[2r + 1] are the ids of the two tokens merge r joins,
 * or -1 -1 where that pair is listed again at a later rank (which it keeps); cap (pairs of
 * room) must be at least attn_bpe_get_info's n_merges, else ATTN_E_INVALID (no context: none
 * is given).  With attn_bpe_token_text, the "a b" strings of a merge list that tokenizes as
 * this one (a GGUF's tokenizer.ggml.merges). */
ATTN_API attn_status attn_bpe_merges(const attn_bpe *bpe, int32_t *pairs, int64_t cap);

/* ============================================================================================
 * Llama-architecture language models and generation (issue 12, parts 3 and 5)
 *
 * The decoder-only architecture of Hugging Face's LlamaForCausalLM (model_type "llama": Llama 2,
 * Llama 3.0, SmolLM2, TinyLlama, ...), float32 activations:
 *
 *   x = embed_tokens[ids]
 *   per layer:  x = x + o_proj(attn(rope(q_proj(n)), rope(k_proj(n)), v_proj(n)))   n = rms1(x)
 *               x = x + down_proj(silu(gate_proj(n)) * up_proj(n))                 n = rms2(x)
 *   logits = lm_head(rms(x))          (lm_head = embed_tokens when tie_word_embeddings)
 *
 * The attention is causal, grouped-query (num_heads query heads share num_kv_heads key/value
 * heads, as HF's repeat_kv), scale 1/sqrt(head_dim), without dropout.  The pieces, each with
 * HF's semantics and parameter names, are public below (attn_rms_norm, attn_rope, the three
 * modules) so that they can be checked and reused one by one; attn_llm is the whole model,
 * attn_llm_session generation with a KV cache, attn_llm_sample the sampler.  Training (issue
 * 14): every piece has its backward (PyTorch autograd's gradients, checked against transformers'
 * modules through attn eval), the modules a training forward that records what the backward
 * reads (attn_saved), and attn_llm is the whole model, for inference and for training (F32
 * master weights in its module; quantized weights are for inference only).
 *
 * Exactness against transformers 5.x in float32 (tests/test_llama.c, docs/llm.md): logits of
 * the tiny test models within 1.1e-6 of max|logit| (full forward), 1.2e-6 (KV-cache session);
 * greedy continuations identical.  Gradients against its autograd (the attn eval fixtures):
 * within 1.6e-6 of max(1, max|grad|) per tensor, for every piece and the whole model.
 * ========================================================================================== */

/* The architecture's sizes and options, with LlamaConfig's names.  A zeroed struct is not
 * valid: the loaders fill it from config.json; the modules below read the fields they use. */
typedef struct attn_llm_config {
    int64_t vocab_size;              /* V */
    int64_t hidden_size;             /* E */
    int64_t intermediate_size;       /* F: the SwiGLU width */
    int64_t num_layers;              /* num_hidden_layers */
    int64_t num_heads;               /* H: num_attention_heads */
    int64_t num_kv_heads;            /* Hkv: num_key_value_heads; 0 = H; must divide H */
    int64_t head_dim;                /* D (even); 0 = E / H.  H must divide E either way */
    int64_t max_position_embeddings; /* the longest context: a session's largest capacity */
    double rms_norm_eps;             /* > 0 (HF default 1e-6; SmolLM2 1e-5) */
    double rope_theta;               /* >= 1: RoPE base (HF default 1e4); used as a float */
    int tie_word_embeddings;         /* 1: lm_head is embed_tokens (no lm_head.weight) */
    int attention_bias;              /* 1: q/k/v/o_proj have biases; 2: q/k/v_proj only (Qwen2) */
    int mlp_bias;                    /* 1: gate/up/down_proj have biases */
    /* Other families' pieces; all 0 is Llama (Gemma 3: qk_norm, sandwich_norm, mlp_act 1,
     * embed_scale sqrt(E), sliding_window 512 every layer but each 6th, rope_theta_local 1e4) */
    int qk_norm;                     /* RMSNorm (weights [D]) of each head's q and k, before RoPE */
    int sandwich_norm;               /* RMSNorm of the attention's and the MLP's outputs too,
                                        before each residual sum */
    int mlp_act;                     /* the gate's activation: 0 SiLU (SwiGLU), 1 tanh-GELU (GEGLU) */
    double embed_scale;              /* token embeddings times this, in float (0: 1) */
    int64_t sliding_window;          /* W > 0: local layers see the last W tokens (0: none) */
    int64_t sliding_period;          /* with W: layers P-1, 2P-1, ... are global (0: all local) */
    double rope_theta_local;         /* RoPE base of the local layers (0: rope_theta) */
    /* RoPE scaling of the global layers' frequencies (HF's rope_type; local layers keep theirs):
     *   0 none;  1 "linear": inv_freq / rope_factor;
     *   2 "llama3": wavelength w = 2 pi / inv_freq against L = rope_original_context:
     *     w < L / high: kept;  w > L / low: inv_freq / factor;  between: with
     *     s = (L / w - low) / (high - low), (1 - s) inv_freq / factor + s inv_freq
     *     (float arithmetic, as transformers' _compute_llama3_parameters);
     *   3 per-frequency divisors stored in the model file (GGUF rope_freqs.weight, llama.cpp's
     *     form of "llama3"): inv_freq[i] / f[i].  A loaded model only. */
    int rope_scaling;
    double rope_factor;              /* 1, 2: > 0 */
    double rope_low_freq_factor;     /* 2: > 0 */
    double rope_high_freq_factor;    /* 2: > low */
    int64_t rope_original_context;   /* 2: original_max_position_embeddings, >= 1 */
} attn_llm_config;

/* RMSNorm (HF LlamaRMSNorm, = T5LayerNorm):  y = weight * (x * rsqrt(mean(x^2) + eps)), over
 * the last axis, in float: x, y [..., E] F32 (any strides); weight [E] or NULL (all ones);
 * eps > 0.  y may be x (in place).  mean(x^2) sums the rounded squares in 16 float lanes
 * (element e into lane e % 16, the lanes folded by halves), then divides by E in float; the
 * reciprocal square root is rounded from double.  PyTorch's reduction order differs: a few
 * ulps. */
ATTN_API attn_status attn_rms_norm(attn_ctx *ctx, const attn_tensor *x,
                                   const attn_tensor *weight, float eps, attn_tensor *y);
/* Backward of attn_rms_norm (same x, weight, eps), dy [..., E] the gradient of y:
 *   dx = r (dy w) - x r^3 sum(dy w x) / E,   dweight = sum over rows of dy * (x r)
 * with r each row's 1/sqrt(mean(x^2) + eps) as the forward computes it; sums in double.
 * dx [..., E] and dweight [E] (each may be NULL) are OVERWRITTEN; dx may be x or dy (in place).
 * weight NULL: all ones (no dweight then). */
ATTN_API attn_status attn_rms_norm_backward(attn_ctx *ctx, const attn_tensor *x,
                                            const attn_tensor *weight, float eps,
                                            const attn_tensor *dy, attn_tensor *dx,
                                            attn_tensor *dweight);

/* Rotary position embedding as HF's LlamaRotaryEmbedding ("default" rope type) with
 * apply_rotary_pos_emb / rotate_half (the "NeoX" layout: dimension i < D/2 pairs with
 * i + D/2):
 *   inv_freq[i] = 1 / theta^(2i / D)               in float (2i/D and the power rounded to
 *                                                  float, the power from double)
 *   f = float(p) * inv_freq[i]                     one float product (p: the position)
 *   out[i]       = x[i] * cos f - x[i + D/2] * sin f        (each product rounded; i < D/2)
 *   out[i + D/2] = x[i + D/2] * cos f + x[i] * sin f
 * cos and sin rounded from double.  x, out [B, H, T, D] F32 (any strides: a [B, T, H, D]
 * buffer permuted is fine), D even; positions I32/I64 [B, T] or [T] (one row for every batch),
 * each in [0, 2^24] (exact in float; HF's position_ids); theta >= 1 (below, angles can
 * overflow float; every model uses 1e4 or more).  out may be x (in place).
 * PyTorch's float pow is not correctly rounded: a handful of (theta, D) pairs get an inv_freq
 * one ulp apart (none for D = 64 with theta 1e4 or 1e5). */
ATTN_API attn_status attn_rope(attn_ctx *ctx, const attn_tensor *x,
                               const attn_tensor *positions, float theta, attn_tensor *out);
/* attn_rope with flags: ATTN_ROPE_INTERLEAVED rotates the pairs (x[2i], x[2i + 1]) instead of
 * (x[i], x[i + D/2]), with the same angles and arithmetic: the layout of q_proj and k_proj rows
 * in GGUF files, whose converters permute each head's rows (row 2i + j of the file is row
 * j*D/2 + i of HF's) for GGML's rope.  flags 0: attn_rope. */
#define ATTN_ROPE_INTERLEAVED 1u
ATTN_API attn_status attn_rope_ex(attn_ctx *ctx, const attn_tensor *x,
                                  const attn_tensor *positions, float theta, unsigned flags,
                                  attn_tensor *out);
/* Backward of attn_rope_ex (same positions, theta, flags): dx = dout rotated by -f,
 *   dx[i] = dout[i] cos f + dout[i + D/2] sin f,  dx[i + D/2] = dout[i + D/2] cos f - dout[i] sin f
 * (each product rounded).  dout, dx [B, H, T, D]; dx OVERWRITTEN, may be dout (in place). */
ATTN_API attn_status attn_rope_backward(attn_ctx *ctx, const attn_tensor *dout,
                                        const attn_tensor *positions, float theta,
                                        unsigned flags, attn_tensor *dx);

/* --- LlamaMLP: gate_proj.weight [F, E], up_proj.weight [F, E], down_proj.weight [E, F] (and
 * their .bias with mlp_bias):  out = down_proj(silu(gate_proj(x)) * up_proj(x)), silu(g) =
 * g / (1 + exp(-g)).  Reads hidden_size, intermediate_size, mlp_bias of cfg.  x, out
 * [B, T, E] (or [T, E]). */
ATTN_API attn_status attn_llama_mlp_create(attn_ctx *ctx, const attn_llm_config *cfg,
                                           attn_module **out /* OUT */);
ATTN_API attn_status attn_llama_mlp_forward(attn_ctx *ctx, const attn_module *m,
                                            const attn_tensor *x, attn_tensor *out);
/* Backward (see "Backward": the parameter gradients ACCUMULATE in m, after
 * attn_module_enable_grad; dx, the shape of x, is OVERWRITTEN and may be NULL): the same x as
 * the forward, dout the gradient of out.  The forward runs again, recorded.  The training pair
 * records instead (see attn_saved: x copied; g = gate_proj(x) and u = up_proj(x), 2F floats a
 * token) and gives the same bits. */
ATTN_API attn_status attn_llama_mlp_backward(attn_ctx *ctx, const attn_module *m,
                                             const attn_tensor *x, const attn_tensor *dout,
                                             attn_tensor *dx);
ATTN_API attn_status attn_llama_mlp_forward_train(attn_ctx *ctx, const attn_module *m,
                                                  const attn_tensor *x, attn_tensor *out,
                                                  attn_saved *saved /* IN/OUT */);
ATTN_API attn_status attn_llama_mlp_backward_saved(attn_ctx *ctx, const attn_module *m,
                                                   const attn_saved *saved,
                                                   const attn_tensor *dout, attn_tensor *dx);

/* --- LlamaAttention: q_proj.weight [H*D, E], k_proj.weight [Hkv*D, E], v_proj.weight
 * [Hkv*D, E], o_proj.weight [E, H*D] (and their .bias with attention_bias).  Causal
 * self-attention of x [B, T, E] (or [T, E]) with RoPE on q and k at positions (NULL: 0 .. T-1;
 * else as attn_rope's, I32/I64 [B, T] or [T]) -> out, the shape of x.  Reads hidden_size,
 * num_heads, num_kv_heads, head_dim, rope_theta, attention_bias of cfg. */
ATTN_API attn_status attn_llama_attention_create(attn_ctx *ctx, const attn_llm_config *cfg,
                                                 attn_module **out /* OUT */);
ATTN_API attn_status attn_llama_attention_forward(attn_ctx *ctx, const attn_module *m,
                                                  const attn_tensor *x,
                                                  const attn_tensor *positions,
                                                  attn_tensor *out);
/* Backward and training pair, as the MLP's (positions as the forward's).  The backward runs the
 * fused SDPA backward from the forward's output and log-sum-exp (the key/value gradients summed
 * over each group of query heads), RoPE's transpose and the projections' GEMMs.  Recorded per
 * token: the projected q, k, v after RoPE, the attention output and one log-sum-exp per head:
 * (2H + 2Hkv) D + H floats, with the RoPE rows and a copy of x. */
ATTN_API attn_status attn_llama_attention_backward(attn_ctx *ctx, const attn_module *m,
                                                   const attn_tensor *x,
                                                   const attn_tensor *positions,
                                                   const attn_tensor *dout, attn_tensor *dx);
ATTN_API attn_status attn_llama_attention_forward_train(attn_ctx *ctx, const attn_module *m,
                                                        const attn_tensor *x,
                                                        const attn_tensor *positions,
                                                        attn_tensor *out,
                                                        attn_saved *saved /* IN/OUT */);
ATTN_API attn_status attn_llama_attention_backward_saved(attn_ctx *ctx, const attn_module *m,
                                                         const attn_saved *saved,
                                                         const attn_tensor *dout,
                                                         attn_tensor *dx);

/* --- LlamaDecoderLayer: input_layernorm.weight [E], self_attn.* (LlamaAttention),
 * post_attention_layernorm.weight [E], mlp.* (LlamaMLP):
 *   h = x + self_attn(input_layernorm(x));  out = h + mlp(post_attention_layernorm(h))
 * Arguments as attn_llama_attention_forward's; also reads intermediate_size, rms_norm_eps,
 * mlp_bias.  attn_module_init: linear weights and biases U(-1/sqrt(in), 1/sqrt(in)) (nn.Linear),
 * norm weights 1. */
ATTN_API attn_status attn_llama_layer_create(attn_ctx *ctx, const attn_llm_config *cfg,
                                             attn_module **out /* OUT */);
ATTN_API attn_status attn_llama_layer_forward(attn_ctx *ctx, const attn_module *m,
                                              const attn_tensor *x,
                                              const attn_tensor *positions, attn_tensor *out);
/* Backward and training pair, as the attention's.  Recorded per token: the attention's and the
 * MLP's records and the first residual sum h = x + self_attn(...) (the norms' outputs are
 * recomputed from x and h): E + (2H + 2Hkv) D + H + 2F floats. */
ATTN_API attn_status attn_llama_layer_backward(attn_ctx *ctx, const attn_module *m,
                                               const attn_tensor *x,
                                               const attn_tensor *positions,
                                               const attn_tensor *dout, attn_tensor *dx);
ATTN_API attn_status attn_llama_layer_forward_train(attn_ctx *ctx, const attn_module *m,
                                                    const attn_tensor *x,
                                                    const attn_tensor *positions,
                                                    attn_tensor *out,
                                                    attn_saved *saved /* IN/OUT */);
ATTN_API attn_status attn_llama_layer_backward_saved(attn_ctx *ctx, const attn_module *m,
                                                     const attn_saved *saved,
                                                     const attn_tensor *dout, attn_tensor *dx);
/* The RoPE layout of the attention of m (attn_llama_attention, attn_llama_layer or
 * a trainable attn_llm's attn_llm_module, every layer): 1 = the interleaved pairs of GGUF files (attn_rope_ex's
 * ATTN_ROPE_INTERLEAVED; q_proj and k_proj rows permuted within each head), 0 = HF's layout
 * (the default).  Forward and backward follow it.  ATTN_E_INVALID for another module. */
ATTN_API attn_status attn_llama_set_rope_interleaved(attn_ctx *ctx, attn_module *m,
                                                     int interleaved);

/* --- The whole model ---------------------------------------------------------------------
 * attn_llm_load_hf reads a Hugging Face model folder as it is:
 *   config.json        architectures ["LlamaForCausalLM"] and/or model_type "llama" (others
 *                      refused by name); hidden_size, intermediate_size, num_hidden_layers,
 *                      num_attention_heads, vocab_size, max_position_embeddings (required);
 *                      num_key_value_heads (default H), head_dim (default E / H),
 *                      rms_norm_eps (1e-6), rope_theta (1e4), tie_word_embeddings (false),
 *                      attention_bias, mlp_bias (false), hidden_act (only "silu").  RoPE
 *                      scaling: rope_scaling null, or rope_scaling / rope_parameters of
 *                      rope_type "default" (rope_theta may be inside); other types ("llama3",
 *                      "linear", "dynamic", "yarn", "longrope", ...) and a partial_rotary_factor
 *                      other than 1 are refused by name (ATTN_E_UNSUPPORTED).
 *   model.safetensors  HF names: model.embed_tokens.weight [V, E], model.layers.N.self_attn.
 *                      {q,k,v,o}_proj.weight, .mlp.{gate,up,down}_proj.weight,
 *                      .input_layernorm.weight, .post_attention_layernorm.weight,
 *                      model.norm.weight, lm_head.weight [V, E] unless tied (ignored if present
 *                      when tied); biases as configured.  Any float dtype, converted to F32;
 *                      other tensors (rotary_emb.inv_freq, ...) ignored.  Sharded checkpoints
 *                      (model.safetensors.index.json) are not read yet.
 *   tokenizer.json     optional: the tokenizer (attn_bpe_load_json)
 *   tokenizer_config.json  optional: chat_template, bos_token, eos_token, add_bos_token
 * Every size is checked before anything is sized from it (num_hidden_layers <=
 * ATTN_LIMIT_LAYERS, vocab_size <= ATTN_LIMIT_VOCAB, the others <= 2^24, H divisible by Hkv,
 * E by H (as LlamaConfig requires), D even) and every tensor against the config, with messages
 * naming the field or the tensor: ATTN_E_FORMAT for a missing or mistyped field or bad JSON,
 * ATTN_E_INVALID for a value out of range or inconsistent with the others, ATTN_E_UNSUPPORTED
 * for a model or option attn does not run (or a count over a limit), ATTN_E_NOT_FOUND for a
 * missing file or tensor, ATTN_E_SHAPE for a tensor of another shape, ATTN_E_NONFINITE for a
 * NaN or infinite weight unless ATTN_CTX_NO_FINITE_CHECK.  Memory: the F32 weights (4 bytes a
 * parameter), allocated once every tensor has been found with its shape, while the file is
 * held in memory (read whole, at most ATTN_LIMIT_FILE_BYTES).  A loaded attn_llm is read-only:
 * contexts on several threads may use it at once (each its own sessions). */
typedef struct attn_llm attn_llm;

ATTN_API attn_status attn_llm_load_hf(attn_ctx *ctx, const char *dir, attn_llm **out /* OUT */);
/* attn_llm_load_gguf reads a llama.cpp GGUF file (attn_gguf_open: memory-mapped, never copied)
 * of general.architecture "llama" or "gemma3" (the keys below under gemma3.*; Gemma 3 adds
 * blk.N.{attn_q_norm, attn_k_norm, post_attention_norm, post_ffw_norm}.weight, ffn_norm being
 * its pre-feedforward norm, and .attention.sliding_window; its family settings are fixed as in
 * transformers' Gemma3TextConfig: see attn_llm_config; inference only): the config from llama.block_count, .embedding_length,
 * .feed_forward_length, .attention.head_count, .attention.head_count_kv (default head_count),
 * .attention.key_length / .value_length (default E / H; equal), .context_length,
 * .attention.layer_norm_rms_epsilon (required), .rope.freq_base (default 1e4), .vocab_size
 * (default: token_embd.weight's rows); .rope.dimension_count other than the head size (partial
 * rotary), rope scaling and experts are refused (ATTN_E_UNSUPPORTED).  Tensors (GGUF names):
 * token_embd.weight, output_norm.weight, output.weight (absent: tied to token_embd),
 * blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up,
 * ffn_down}.weight (and .bias of the attention when blk.0.attn_q.bias exists, of the MLP when
 * blk.0.ffn_up.bias does), every shape checked.  The matrices are read in place in the
 * file's types (F32, F16, BF16 and the quantized types of attn_qlinear), norms converted to
 * F32.  GGUF converters store q_proj and k_proj with their rows permuted within each head for
 * GGML's rope: attn runs them as they are with the matching rotation of pairs (x[2i],
 * x[2i+1]), the same numbers as HF's rotate_half on the original rows.  flags:
 * ATTN_LLM_LOAD_F32 dequantizes every matrix to F32 at load (attn_dequantize: 4 bytes a
 * parameter; the exact reference of the quantized path).  Errors as attn_llm_load_hf's, naming
 * the file and the key or tensor.  The file is read into memory (blocks that ask for huge
 * pages), unless ATTN_LLM_LOAD_MMAP maps it; a mapped file must stay unchanged while the model
 * lives. */
#define ATTN_LLM_LOAD_F32 1u
/* How a GGUF file's bytes are held.  By default (and with ATTN_LLM_LOAD_NO_MMAP) the file is
 * read into memory (attn_gguf_read): the model no longer depends on the file, and on Linux its
 * matrices sit in transparent huge pages, so the matrix-vector products of generation stream
 * them with far fewer TLB misses than through a mapping of 4 KiB page-cache pages (Gemma 3
 * 270M: 77-80 against 66-67 tokens/s on an Intel Xeon under KVM, docs/llm.md).
 * ATTN_LLM_LOAD_MMAP maps the file instead (attn_gguf_open): loading touches only what is
 * used and processes share the pages, but a mapped file truncated while in use raises SIGBUS.
 * Both flags at once: ATTN_E_INVALID.  ATTN_LLM_LOAD_VOCAB_ONLY maps unless _NO_MMAP is given
 * (it reads the text side alone).  Nothing changes for a folder (its safetensors files are
 * read). */
#define ATTN_LLM_LOAD_NO_MMAP 2u
#define ATTN_LLM_LOAD_MMAP 8u
/* ATTN_LLM_LOAD_VOCAB_ONLY reads the text side alone (tokenizer, chat template, special ids),
 * of any architecture, as llama.cpp's vocab_only: a GGUF file with tokenizer.ggml.* keys
 * (model files and vocabulary-only files) or a folder with tokenizer.json.  The model has no
 * weights: attn_llm_get_info gives the vocabulary size alone, and attn_llm_forward,
 * attn_llm_session_create and attn_llm_make_trainable refuse it (ATTN_E_INVALID). */
#define ATTN_LLM_LOAD_VOCAB_ONLY 4u
ATTN_API attn_status attn_llm_load_gguf(attn_ctx *ctx, const char *path, unsigned flags,
                                        attn_llm **out /* OUT */);
/* A folder: attn_llm_load_hf (flags: ATTN_LLM_LOAD_F32, _NO_MMAP and _MMAP, which change
 * nothing there: its weights are F32); anything else: attn_llm_load_gguf. */
ATTN_API attn_status attn_llm_load(attn_ctx *ctx, const char *path, unsigned flags,
                                   attn_llm **out /* OUT */);
ATTN_API void attn_llm_free(attn_llm *m);
/* The model's text side, read with it: the tokenizer (GGUF tokenizer.ggml.* with model "gpt2",
 * or the folder's tokenizer.json; NULL when the source has none), the chat template
 * (tokenizer.chat_template, or tokenizer_config.json's chat_template; NULL without one), and
 * the special ids (-1 when absent): bos and eos (tokenizer.ggml.bos/eos_token_id, or
 * tokenizer_config.json's bos_token / eos_token looked up in the vocabulary), eot the first
 * end-of-turn token the vocabulary has of "<|im_end|>" (ChatML), "<end_of_turn>" (Gemma),
 * "<|eot_id|>" and "<|eom_id|>" (Llama 3); add_bos (tokenizer.ggml.
 * add_bos_token; 0 when absent) says whether a prompt starts with bos.  Owned by the model. */
typedef struct attn_llm_special {
    int32_t bos, eos, eot;
    int add_bos;
} attn_llm_special;
ATTN_API const attn_bpe *attn_llm_tokenizer(const attn_llm *m);
ATTN_API const char *attn_llm_chat_template(const attn_llm *m);
ATTN_API attn_status attn_llm_get_special(const attn_llm *m, attn_llm_special *sp /* OUT */);
/* Bytes of the weight matrices one generated token reads: every layer's projections and the
 * output head (the tied embedding counted once), in their stored types. */
ATTN_API int64_t attn_llm_weight_bytes(const attn_llm *m);
/* Precision of the activations in the model's matrix-vector products (decoding and prompts of
 * at most 8 tokens), as attn_qlinear's act: ATTN_QACT_DEFAULT (what a loaded model has:
 * ATTN_QACT_Q16 where the CPU has its kernels, x86 with AVX2, else ATTN_QACT_F32),
 * ATTN_QACT_F32 (exact: every quantized weight dequantized exactly, float sums; the logits
 * agree with the F32-dequantized model to rounding), ATTN_QACT_Q16 (activations rounded to
 * int16 per block of 32: on x86 1.1-1.3x faster decoding than F32, logits within ~1e-3 of
 * max|logit| on SmolLM2-135M) or ATTN_QACT_Q8 (activations rounded to int8 per block of 32, integer dot
 * products, llama.cpp's precision: ~10% faster decoding with VNNI, but on SmolLM2-135M the
 * logits move by up to 9% of max|logit| and greedy continuations leave the float path's
 * within 2-20 tokens; docs/llm.md).  F32, F16 and BF16 weights always use float
 * activations; longer prompts run attn_qlinear's GEMM path: int16 with ATTN_QACT_Q16 or the default
 * where the CPU has AVX512_VNNI, else float.  Set it between calls, not while a
 * session of the model is in use on another thread.  ATTN_E_INVALID for NULL or an unknown
 * value (no context: the model has none). */
ATTN_API attn_status attn_llm_set_activations(attn_llm *m, attn_qact act);
/* 1 when id ends a generation: eos or any of the end-of-turn tokens above. */
ATTN_API int attn_llm_is_end(const attn_llm *m, int32_t id);
/* The configuration the model runs (head_dim and num_kv_heads resolved). */
ATTN_API attn_status attn_llm_get_info(const attn_llm *m, attn_llm_config *info /* OUT */);
/* The Hugging Face family of a configuration, as attn_llm_load_hf reads config.json:
 * *model_type ("llama", "mistral", "qwen2", "qwen3" or "gemma3_text") and *architecture
 * (its class, "LlamaForCausalLM" ...), static strings.  Gemma 3 by its sandwich norms, Qwen3 by
 * QK-norm, Qwen2 by q/k/v biases without o_proj's, Mistral by a sliding window, else Llama.
 * ATTN_E_INVALID for NULL arguments. */
ATTN_API attn_status attn_llm_family(const attn_llm_config *c, const char **model_type /* OUT */,
                                     const char **architecture /* OUT */);

/* Perplexity of a token stream ids [n] (the text tokenized whole, BOS first where the model
 * adds one), with llama.cpp's method: cut into chunks of `chunk` tokens (3 ..
 * max_position_embeddings), each run alone with its first token replaced by BOS where the
 * model adds one; the second half of each chunk is scored (positions chunk/2 .. chunk-2, each
 * predicting the next token, log-softmax in double).  At most max_chunks chunks (0: all n /
 * chunk).  progress (NULL: none) is called after each chunk with the running figures; a
 * nonzero return stops there (the result so far stays in *out, ATTN_OK).  The logits of one
 * chunk ([chunk, V] floats) are the memory it takes.  ATTN_E_INVALID for fewer than one
 * chunk of tokens, an id out of range or a chunk outside its bounds; ATTN_E_NONFINITE for
 * logits that are not finite. */
typedef struct attn_llm_ppl {
    double nll;     /* the scored tokens' negative log-likelihoods summed (nats) */
    int64_t count;  /* tokens scored */
    int64_t chunks; /* chunks run */
    double ppl;     /* exp(nll / count) */
    double err;     /* its standard error: ppl * sd(nll) / sqrt(count) (llama.cpp's) */
} attn_llm_ppl;
typedef int (*attn_llm_ppl_fn)(void *user, const attn_llm_ppl *r);
ATTN_API attn_status attn_llm_perplexity(attn_ctx *ctx, const attn_llm *m, const int32_t *ids,
                                         int64_t n, int64_t chunk, int64_t max_chunks,
                                         attn_llm_ppl_fn progress, void *user,
                                         attn_llm_ppl *out);

/* Full-sequence forward, causal, no cache: ids [B, T] row-major (B sequences of T tokens, no
 * padding; each id in [0, V)), positions 0 .. T-1 in each, T <= max_position_embeddings ->
 * logits [B, T, V] row-major.  Same bits for any thread count; the batch rows are independent
 * (a sequence gives the same logits alone or in a batch). */
ATTN_API attn_status attn_llm_forward(attn_ctx *ctx, const attn_llm *m, const int32_t *ids,
                                      int64_t B, int64_t T, float *logits);

/* --- Training: the same object ------------------------------------------------------------
 * One attn_llm serves inference and training.  Its weights become trainable when they are F32
 * master parameters held in a module (attn_llm_module): a model made by attn_llm_create, or a
 * loaded one after attn_llm_make_trainable.  The module names the parameters as HF's
 * *ForCausalLM state_dict does: model.embed_tokens.weight [V, E], per layer
 * model.layers.N.self_attn.{q,k,v,o}_proj.weight (and .bias with attention_bias),
 * model.layers.N.mlp.{gate,up,down}_proj.weight (.bias with mlp_bias),
 * model.layers.N.input_layernorm.weight, model.layers.N.post_attention_layernorm.weight,
 * model.norm.weight, and lm_head.weight [V, E] unless tie_word_embeddings (the head is then
 * embed_tokens, whose gradient receives both uses).  The other families add their tensors under
 * their own names: attention_bias 2 (Qwen2) q/k/v biases only; qk_norm
 * model.layers.N.self_attn.{q,k}_norm.weight [head_dim]; sandwich_norm (Gemma 3)
 * post_attention_layernorm after the attention, and pre_feedforward_layernorm and
 * post_feedforward_layernorm around the MLP.  Gemma's norm weights are held as 1 + w, the form
 * GGUF files store (HF files store w).  The module's parameters are the model's weights: the
 * attn_module_* functions work on them (attn_module_load / attn_module_save as a
 * model.safetensors, attn_module_enable_grad, attn_module_zero_grad, the grad-ready hook, data
 * parallelism), and so do attn_adamw_* and attn_module_clip_grad_norm.  Every attn_llm_*
 * function (attn_llm_forward, sessions, sampling, the text side) keeps working on a trainable
 * model, at every step.  A trainable model is not read-only: no other thread may use it while
 * its weights change. */

/* A new model of configuration cfg (every field attn_llm_load_hf reads, checked as there),
 * trainable, with no text side (attn_llm_tokenizer NULL, special ids -1).  The parameters start
 * as zeros, norm weights as ones; attn_module_init(ctx, attn_llm_module(m), seed) gives HF's
 * _init_weights: matrices and the embedding N(0, 0.02^2) (initializer_range), biases 0, norm
 * weights 1.  rope_scaling 3 (a file's own divisors) is ATTN_E_UNSUPPORTED. */
ATTN_API attn_status attn_llm_create(attn_ctx *ctx, const attn_llm_config *cfg,
                                     attn_llm **out /* OUT */);
/* Makes a loaded model trainable, in place: its weights are copied into the module's F32
 * parameters and bound there (the file's memory, a GGUF mapping included, is released).  Weights
 * stored in another type than F32 (a GGUF file's F16, BF16 or quantized blocks) are
 * ATTN_E_UNSUPPORTED naming the tensor unless flags has ATTN_LLM_DEQUANTIZE: they are then
 * dequantized into the parameters (attn_dequantize's numbers).  The layout of q_proj and k_proj
 * stays the source's (a GGUF file's interleaved rows: attn_llama_set_rope_interleaved on the
 * module reads 1).  Refused before anything changes: a vocabulary-only model, a file's own RoPE
 * divisors (rope_scaling 3).  A model that is trainable already: ATTN_OK, nothing done.  Not
 * while a session of the model is in use. */
#define ATTN_LLM_DEQUANTIZE 1u
ATTN_API attn_status attn_llm_make_trainable(attn_ctx *ctx, attn_llm *m, unsigned flags);
/* The module of a trainable model's parameters (NULL when m is not trainable).  Owned by m:
 * attn_module_free does nothing to it; attn_llm_free frees it.  Its kind is "llm". */
ATTN_API attn_module *attn_llm_module(attn_llm *m);
/* The training pair (see attn_saved): ids [B, T] as attn_llm_forward's -> logits [B, T, V]
 * (the same bits as attn_llm_forward); recorded, per token: every layer's input and record
 * (E + E + (2H + 2Hkv) D + H + 2F floats a layer), the final norm's input, the ids and the RoPE
 * rows; with ATTN_SAVED_CHECKPOINT only each layer's input (E floats a layer), the backward
 * running each layer's forward again just before its backward (the same bits).  Then
 * backward_saved from dlogits [B, T, V] (e.g. attn_cross_entropy's gradient; HF's causal LM loss
 * is the cross-entropy of logits row t against label t + 1, the last row of each sequence
 * ignored; finite): accumulates the gradients of every parameter (after
 * attn_module_enable_grad on attn_llm_module(m)).  ATTN_E_INVALID for a model that is not
 * trainable. */
ATTN_API attn_status attn_llm_forward_train(attn_ctx *ctx, const attn_llm *m, const int32_t *ids,
                                            int64_t B, int64_t T, float *logits,
                                            attn_saved *saved /* IN/OUT */);
ATTN_API attn_status attn_llm_backward_saved(attn_ctx *ctx, const attn_llm *m,
                                             const attn_saved *saved, const float *dlogits);
/* The backward without a record: runs the forward of ids again, keeping each layer's input
 * only (activation checkpointing), then backward_saved's gradients (the same bits). */
ATTN_API attn_status attn_llm_backward(attn_ctx *ctx, const attn_llm *m, const int32_t *ids,
                                       int64_t B, int64_t T, const float *dlogits);

/* --- Writing a model out (a trainable model: attn_llm_create, or attn_llm_make_trainable) ----
 * attn_llm_save_hf writes m as a Hugging Face folder dir (created if missing; existing files of
 * the same names replaced): model.safetensors (F32, HF's state_dict names, q_proj and k_proj
 * rows in HF's order: a GGUF source's interleaved rows are put back; Gemma's norm weights, held
 * as 1 + w, written as w), config.json (the family's keys as transformers writes them:
 * architectures, model_type, sizes, rope_parameters, Gemma's layer_types, sliding_window, the
 * bos/eos ids), and, when tokenizer_dir is not NULL, that folder's tokenizer.json,
 * tokenizer_config.json, chat_template.jinja, generation_config.json and
 * special_tokens_map.json copied byte for byte where they exist.  attn_llm_load_hf reads the
 * folder back as the same model.  Each file is written whole or not at all (attn_file_out);
 * a failure may leave the files written before it. */
ATTN_API attn_status attn_llm_save_hf(attn_ctx *ctx, const attn_llm *m, const char *tokenizer_dir,
                                      const char *dir);
/* 1 when attn_llm_save_gguf can write m: the llama family (attn_llm_family's "llama"), no
 * RoPE scaling (GGUF architecture llama, as llama.cpp's converter writes it); else 0. */
ATTN_API int attn_llm_gguf_writable(const attn_llm *m);
/* attn_llm_save_gguf writes m as a GGUF v3 file of general.architecture llama at path (whole
 * or not at all): the llama.* keys, q_proj and k_proj rows in the converter's interleaved
 * order, tensors aligned to 32 bytes; type ATTN_Q_F32, or ATTN_Q_Q8_0 for the matrices whose
 * rows are a multiple of 32 (norms and the rest stay F32; attn_quantize's blocks).  The
 * tokenizer.* keys: tokenizer's (a GGUF file's, whose keys must make a tokenizer:
 * attn_bpe_from_gguf), copied byte for byte; tokenizer NULL: m's own tokenizer (a byte-level
 * BPE from a tokenizer.json) converted as llama.cpp's converter writes it (model gpt2, pre,
 * tokens, token types, merges, special ids, add_bos, the chat template).  ATTN_E_UNSUPPORTED
 * for a model attn_llm_gguf_writable refuses, another type, or a tokenizer that is not
 * byte-level BPE; ATTN_E_INVALID for a model without a tokenizer and tokenizer NULL. */
ATTN_API attn_status attn_llm_save_gguf(attn_ctx *ctx, const attn_llm *m,
                                        const attn_gguf *tokenizer, int type, const char *path);

/* --- Generation: one sequence with a KV cache ------------------------------------------------
 * A session holds the keys and values of every token it has seen, per layer and kv head
 * ([layers][Hkv][capacity][D], F32 or BF16: 2 * layers * Hkv * capacity * D values, allocated
 * once here with ctx's allocator), and its position count pos (the next token's position).
 *   prefill: n tokens in one batched pass (the GEMMs see n rows), their keys and values appended;
 *            callable again to append more (the new tokens attend to all before them); writes the
 *            logits of the last one (NULL: not wanted).
 *   decode:  one token, attending to the cache (on the split-KV decode kernel from 32 cached
 *            tokens on), its logits.
 * Results: prefill of a whole sequence then decode of further tokens give the logits of
 * attn_llm_forward on the whole sequence, up to float rounding (the attention summed in other
 * orders): measured within 1.2e-6 of max|logit| on the tiny models (F32 cache).  A BF16 cache
 * rounds keys, values and the queries to bfloat16 in the attention (attn_sdpa's bf16
 * numerics): half the memory and traffic; logits within 1.1e-2 of max|logit| on the tiny
 * models, 2.6e-3 on a SmolLM2-shaped one (docs/llm.md).
 * Context full: a prefill or decode that would take pos past the capacity returns
 * ATTN_E_OVERFLOW ("context full ...": the one meaning of that status for these two calls) and
 * changes nothing; the session stays usable (reset it, or stop).  Any failure leaves pos as
 * it was.  A session belongs to its model (which must outlive it) and is used by one thread at a
 * time. */
typedef struct attn_llm_session attn_llm_session;

/* capacity in [1, max_position_embeddings]; cache_dtype ATTN_F32 or ATTN_BF16. */
ATTN_API attn_status attn_llm_session_create(attn_ctx *ctx, const attn_llm *m, int64_t capacity,
                                             attn_dtype cache_dtype,
                                             attn_llm_session **out /* OUT */);
ATTN_API void attn_llm_session_free(attn_llm_session *s);
/* Forgets every token (pos = 0); the cache memory is kept. */
ATTN_API void attn_llm_session_reset(attn_llm_session *s);
/* Forgets the tokens from position pos on (0 <= pos <= the current pos, else ATTN_E_INVALID):
 * the next prefill or decode continues at pos (a chat that re-tokenised its history
 * differently keeps the common prefix). */
ATTN_API attn_status attn_llm_session_rewind(attn_llm_session *s, int64_t pos);
/* The keys and values of src's first n tokens (0 <= n <= src's pos, n <= dst's capacity) into
 * dst, whose earlier tokens are forgotten: dst's pos becomes n, and it continues exactly as src
 * would from position n (the same bits: its cache rows are src's).  A server's prompt-prefix
 * reuse across sequences: a new request whose prompt starts with another session's tokens
 * copies them instead of computing them again.  Both sessions of one model and one cache
 * dtype, dst not src; else ATTN_E_INVALID (nothing changed).  Not while either is in use on
 * another thread. */
ATTN_API attn_status attn_llm_session_copy(attn_llm_session *dst, const attn_llm_session *src,
                                           int64_t n);
/* Tokens in the cache (0 for NULL). */
ATTN_API int64_t attn_llm_session_pos(const attn_llm_session *s);
ATTN_API int64_t attn_llm_session_capacity(const attn_llm_session *s);
/* ids [n], n >= 1; logits_last [V] or NULL. */
ATTN_API attn_status attn_llm_session_prefill(attn_ctx *ctx, attn_llm_session *s,
                                              const int32_t *ids, int64_t n,
                                              float *logits_last);
/* attn_llm_session_prefill with every token's next-token logits: logits [n, V] (a scorer's
 * call: the log-likelihood of a text, a server's prompt logprobs).  Row i is the same pass's;
 * its output product runs over all n rows, so the last row may differ from
 * attn_llm_session_prefill's logits_last in the last bits when n > 8. */
ATTN_API attn_status attn_llm_session_prefill_logits(attn_ctx *ctx, attn_llm_session *s,
                                                     const int32_t *ids, int64_t n,
                                                     float *logits);
/* logits [V]. */
ATTN_API attn_status attn_llm_session_decode(attn_ctx *ctx, attn_llm_session *s, int32_t id,
                                             float *logits);
/* One decoding step of n sessions of one model at once (continuous batching): session i takes
 * ids[i]; logits [n, V], row i session i's.  The weights are read once for the whole batch (up
 * to 8 rows per pass of the matrix-vector kernels), each session attends over its own cache
 * (their lengths and cache types may differ), and every row is bit for bit what
 * attn_llm_session_decode gives that session alone.  Sessions must be distinct, of one model,
 * each with room for a token; n in [1, ATTN_LLM_BATCH_MAX].  Everything is checked before any
 * cache changes (ATTN_E_INVALID, ATTN_E_OVERFLOW for a full one). */
#define ATTN_LLM_BATCH_MAX 4096
ATTN_API attn_status attn_llm_session_decode_batch(attn_ctx *ctx, attn_llm_session *const *s,
                                                   const int32_t *ids, int64_t n, float *logits);
/* The prompts of n sessions of one model at once: session i takes lens[i] >= 1 tokens, ids
 * holding them one session after the other (sum of lens); logits_last [n, V] (row i: session
 * i's last token's) or NULL.  The sessions of more than 8 tokens run as one pass of the model
 * (the weights read once, one GEMM for all their rows), those of 8 or fewer as another; every
 * session's cache rows and logits are bit for bit what attn_llm_session_prefill gives it alone
 * with its lens[i] tokens.  Sessions distinct, of one model, each with room for its tokens, n
 * in [1, ATTN_LLM_BATCH_MAX]: all checked before any cache changes (ATTN_E_INVALID,
 * ATTN_E_OVERFLOW); a later failure (the workspace) may leave the first pass's sessions
 * advanced (attn_llm_session_pos tells). */
ATTN_API attn_status attn_llm_session_prefill_batch(attn_ctx *ctx, attn_llm_session *const *s,
                                                    const int32_t *ids, const int64_t *lens,
                                                    int64_t n, float *logits_last);

/* --- Sampling ----------------------------------------------------------------------------
 * attn_llm_sample picks the next token from logits [vocab] with HF's logits processors, in
 * HF's order (generate with do_sample):
 *   1. repetition_penalty (RepetitionPenaltyLogitsProcessor), when != 1: for every id that occurs
 *      in history, a logit l becomes l * penalty if l < 0, else l / penalty;
 *   1b. presence_penalty and frequency_penalty (OpenAI's, not HF's), when not 0: for every id j
 *      that occurs among the generated ids (history after its first n_prompt ids:
 *      attn_llm_sample_ex; attn_llm_sample counts the whole history), count[j] times, a logit
 *      l becomes l - (count[j] * frequency_penalty + presence_penalty), in double, rounded to
 *      float (clamped to +-FLT_MAX; -inf stays -inf).  Like OpenAI's and vLLM's, the count is
 *      over the whole completion so far, and the prompt is not counted (llama.cpp counts the
 *      last 64 tokens, prompt included); positive values make repeats less likely, negative
 *      more;
 *   2. temperature == 0: greedy, the largest logit (the lowest id among equal ones); no random
 *      draw, *step unchanged.  Otherwise l / temperature (TemperatureLogitsWarper);
 *   3. top_k > 0 (TopKLogitsWarper): keeps the logits >= the k-th largest (ties at the edge all
 *      kept);
 *   4. top_p < 1 (TopPLogitsWarper): in ascending order of the logits, removes the tokens whose
 *      cumulative probability is <= 1 - top_p, always keeping the largest;
 *   5. min_p > 0 (MinPLogitsWarper): removes the tokens whose probability is < min_p times the
 *      largest probability;
 *   6. a draw from the softmax of what is left: u = the next uniform in [0, 1) of the Philox
 *      stream (key seed, counter *step; 53 bits of one Philox-4x32-10 block), then the first
 *      token, in order of decreasing logit (increasing id among equal ones), at which the
 *      running probability sum passes u.  *step then advances by one.
 * Probabilities in double.  Equal logits are ordered by id everywhere, so the result depends
 * only on the arguments: the same seed and step give the same token on every machine and thread
 * count (it runs on the calling thread alone).  HF's defaults differ (GenerationConfig has
 * top_k 50); HF draws with torch.multinomial, so sampled tokens are not HF's tokens, only their
 * distribution is.  logits may hold -inf (never chosen) but not NaN or +inf, and not only -inf
 * (ATTN_E_NONFINITE); history ids outside [0, vocab) are ignored (as HF's clamp). */
typedef struct attn_llm_sampler {
    float temperature;        /* 0 = greedy; > 0 */
    int64_t top_k;            /* 0 = off */
    float top_p;              /* in (0, 1]; 1 = off */
    float min_p;              /* in [0, 1]; 0 = off */
    float repetition_penalty; /* > 0; 1 = off */
    uint64_t seed;            /* Philox key of the draws */
    float presence_penalty;   /* finite (OpenAI: [-2, 2]); 0 = off */
    float frequency_penalty;  /* finite (OpenAI: [-2, 2]); 0 = off */
} attn_llm_sampler;

/* temperature 1, top_k 0, top_p 1, min_p 0, repetition_penalty 1, seed 0, presence and
 * frequency penalties 0: plain sampling. */
ATTN_API attn_llm_sampler attn_llm_sampler_defaults(void);
/* history [n_hist] (may be NULL when n_hist is 0): the ids the repetition penalty sees (HF: the
 * prompt and what was generated).  step: the stream position, advanced by each draw (start at
 * 0; NULL only for greedy). */
ATTN_API attn_status attn_llm_sample(attn_ctx *ctx, const attn_llm_sampler *cfg,
                                     const float *logits, int64_t vocab, const int32_t *history,
                                     int64_t n_hist, uint64_t *step, int32_t *out_id /* OUT */);
/* attn_llm_sample with history = the prompt's n_prompt ids (in [0, n_hist]) then the ids
 * generated so far: the repetition penalty sees them all, the presence and frequency penalties
 * only the generated ones (OpenAI's semantics). */
ATTN_API attn_status attn_llm_sample_ex(attn_ctx *ctx, const attn_llm_sampler *cfg,
                                        const float *logits, int64_t vocab,
                                        const int32_t *history, int64_t n_hist, int64_t n_prompt,
                                        uint64_t *step, int32_t *out_id /* OUT */);

/* ============================================================================================
 * Chat formatting (src/text/chat.c)
 *
 * attn writes the chat formats of the families it runs without a Jinja engine.  A model's chat
 * template (GGUF tokenizer.chat_template, tokenizer_config.json's chat_template) is recognised
 * as one of them:
 *   chatml          any template of the ChatML shape (<|im_start|>ROLE\nCONTENT<|im_end|>\n per
 *                   message, an optional default system message, the generation prompt), parsed
 *                   with Hugging Face's whitespace rules: SmolLM2 and simple Qwen templates;
 *   qwen            Qwen2.5's published template (its default system message read from it),
 *                   with tools;
 *   qwen3           Qwen3's: <think> blocks (an answer's reasoning kept only after the last user
 *                   message, as the template does), enable_thinking, tools;
 *   gemma           Gemma 2 (no system message) and Gemma 3 (the system message opens the first
 *                   user turn): <start_of_turn>user / model, trimmed contents, <end_of_turn>;
 *   llama3          Llama 3.0's headers;
 *   llama3.1        Llama 3.1, 3.2 and 3.3: the system block with its date line (the template's
 *                   date_string, or today's date where it calls strftime_now, as transformers
 *                   gives it), tools in the first user message, ipython tool results;
 *   mistral-v3, mistral-tekken  [INST] formats of Mistral 7B v0.3 and Mistral Nemo (the system
 *                   message joins the last user message), with tools;
 *   mistral-v7      [SYSTEM_PROMPT] / [INST] of Mistral Large 2411 (spaces after the tags);
 *   mistral-small3  Mistral Small 3's (24B-Instruct-2501) [SYSTEM_PROMPT] / [INST] (its default
 *                   system message, with today's date, read from the template), no tools;
 *   mistral-small3.2  Mistral Small 3.2's [SYSTEM_PROMPT] (its default system message, with
 *                   today's date, read from the template), with tools;
 *   ministral3      Ministral 3's [SYSTEM_PROMPT] (its default system message read from the
 *                   template), with tools.
 * A template is one of these when it is the family's published template: the ChatML shape is
 * parsed; the others are compared with the published templates as Jinja reads them (the text
 * the whitespace rules leave, each tag without the spaces Jinja ignores), their default system
 * messages and date strings apart.  Anything else -- a modified copy of a family's template,
 * another model's (Zephyr, Hermes, QwQ, ...), NULL or "" ("no chat template") -- is
 * ATTN_E_UNSUPPORTED with a message naming what was not recognised: attn never guesses a
 * format.  The text is what transformers' apply_chat_template(messages, tokenize=False,
 * add_generation_prompt=..., tools=..., enable_thinking=...) gives, byte for byte
 * (tests/test_chat.c, against the families' published templates).  Conversations a template
 * refuses (raise_exception: Gemma and Mistral want alternating user/assistant turns, Mistral
 * tool call ids of 9 characters, Llama 3.1 one tool call per message, ...) are ATTN_E_INVALID,
 * as are roles a template would silently drop (Qwen: other than system, user, assistant and
 * tool).  Tool definitions or tool calls for a format whose template does not write them
 * (chatml, gemma, llama3, mistral-v7, mistral-small3) are ATTN_E_UNSUPPORTED, not dropped.  The text holds the
 * special tokens (a bos token where the template writes one): tokenize it with special tokens
 * parsed and without adding bos again, as transformers does. */
typedef struct attn_chat_message {
    const char *role;    /* "system", "user", "assistant", "tool" (a tool's result), ... */
    const char *content; /* UTF-8, NUL-terminated; "" for an assistant turn that only calls
                          * tools (an OpenAI client's null content) */
    /* The fields below are NULL when absent (zero the struct: {"user", "hi"} is a message). */
    const char *reasoning_content; /* assistant: its reasoning kept apart from content (Qwen3
                                    * writes it in a <think> block; transformers' name) */
    const char *tool_calls; /* assistant: the calls it made, a JSON array as transformers takes
                             * them: [{"id": "call12345", "type": "function", "function":
                             * {"name": "get_weather", "arguments": {"city": "Paris"}}}] --
                             * arguments an object (an OpenAI client's string holds one: parse
                             * it first), or a string the template writes as it is (Qwen3) */
    const char *tool_call_id; /* tool: the id of the call it answers (Mistral's templates
                               * write it) */
} attn_chat_message;

/* How a conversation is written (zero = the defaults; NULL options: all defaults). */
#define ATTN_CHAT_THINKING_DEFAULT 0 /* enable_thinking not passed (Qwen3: thinking on) */
#define ATTN_CHAT_THINKING_ON 1      /* enable_thinking=True */
#define ATTN_CHAT_THINKING_OFF 2     /* enable_thinking=False (Qwen3: an empty <think>\n\n
                                      * </think>\n\n after the generation prompt) */
typedef struct attn_chat_options {
    int add_generation_prompt; /* 1: end with the opening of the assistant's turn */
    int thinking;              /* ATTN_CHAT_THINKING_*; templates without it ignore it */
    const char *tools;         /* the tool definitions, a JSON array of objects (OpenAI's
                                * [{"type": "function", "function": {"name": ..., "description":
                                * ..., "parameters": {...}}}]), as the template's tojson writes
                                * them; NULL: none ("[]" is an empty list, which some templates
                                * write) */
    const char *bos_token;     /* the texts the template's bos_token and eos_token stand for */
    const char *eos_token;     /* (NULL: a format that writes one is ATTN_E_INVALID) */
} attn_chat_options;

/* ATTN_OK when attn can format conversations for this template. */
ATTN_API attn_status attn_chat_template_check(attn_ctx *ctx, const char *tmpl);
/* The format the template is recognised as ("chatml", "qwen", "qwen3", "gemma", "llama3",
 * "llama3.1", "mistral-v3", "mistral-tekken", "mistral-v7", "mistral-small3", "mistral-small3.2",
 * "ministral3"; static), or NULL with ctx's message saying why. */
ATTN_API const char *attn_chat_template_name(attn_ctx *ctx, const char *tmpl);
/* A template text for a format by its name, for a model whose file has none (or another one):
 * "gemma2", "gemma3", "llama3", "llama3.2", "mistral-v3", "mistral-nemo", "mistral-v7",
 * "qwen3" (the formats whose published templates hold no default system message or date to
 * take from the file); NULL for any other name.  The text is a Jinja comment naming the format
 * ("{# attn chat format: gemma3 #}"): attn formats conversations with it exactly as with the
 * published template (attn_chat_apply, attn_llm_set_chat_template), other Jinja engines as
 * nothing, so attn_llm_save_gguf writes no chat template for it.  Static. */
ATTN_API const char *attn_chat_template_named(const char *name);
/* The conversation msgs[0, n) as the template writes it with the options opt, NUL-terminated
 * into buf[0, cap) (snprintf-style: *len receives the full length without the NUL, also when
 * cap was too small and the text was cut; cap 0 (buf may be NULL) asks for the length only).
 * JSON texts (opt->tools, a message's tool_calls) that are not JSON, or not of the shape the
 * template reads, are ATTN_E_INVALID (a tool call's name must be a string; a key may not be
 * repeated in one object). */
ATTN_API attn_status attn_chat_apply(attn_ctx *ctx, const char *tmpl,
                                     const attn_chat_message *msgs, int64_t n,
                                     const attn_chat_options *opt, char *buf, size_t cap,
                                     size_t *len /* OUT */);
/* attn_chat_apply with add_generation_prompt and the token texts alone. */
ATTN_API attn_status attn_chat_render(attn_ctx *ctx, const char *tmpl, const char *bos_token,
                                      const char *eos_token, const attn_chat_message *msgs,
                                      int64_t n, int add_generation_prompt, char *buf,
                                      size_t cap, size_t *len /* OUT */);
/* attn_chat_render without token texts (ChatML and Qwen formats need none). */
ATTN_API attn_status attn_chat_format(attn_ctx *ctx, const char *tmpl,
                                      const attn_chat_message *msgs, int64_t n,
                                      int add_generation_prompt, char *buf, size_t cap,
                                      size_t *len /* OUT */);
/* attn_chat_apply with the model's template and its bos and eos tokens' texts (opt's
 * bos_token and eos_token, where not NULL, instead). */
ATTN_API attn_status attn_llm_chat_apply(attn_ctx *ctx, const attn_llm *m,
                                         const attn_chat_message *msgs, int64_t n,
                                         const attn_chat_options *opt, char *buf, size_t cap,
                                         size_t *len /* OUT */);
/* attn_llm_chat_apply with add_generation_prompt alone. */
ATTN_API attn_status attn_llm_chat_format(attn_ctx *ctx, const attn_llm *m,
                                          const attn_chat_message *msgs, int64_t n,
                                          int add_generation_prompt, char *buf, size_t cap,
                                          size_t *len /* OUT */);
/* Replaces the model's chat template by a copy of tmpl (a template file's text: attn chat
 * --template), which must be one attn recognises (attn_chat_template_check; otherwise
 * ATTN_E_UNSUPPORTED and the model keeps its own).  Not while other threads use m. */
ATTN_API attn_status attn_llm_set_chat_template(attn_ctx *ctx, attn_llm *m, const char *tmpl);

/* Tool calls in an answer.  attn_chat_parse_tool_calls reads the calls a model wrote at the end
 * of its answer text[0, len), in the form its chat format's template writes an assistant's
 * calls (format: a name attn_chat_template_name gives):
 *   qwen, qwen3       <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, one or more
 *                     (qwen3: after the last </think>, which stays in the content);
 *   llama3.1          the whole answer one {"name": ..., "parameters": {...}} (an optional
 *                     <|python_tag|> first; "arguments" is taken for "parameters");
 *   mistral-v3, mistral-tekken  [TOOL_CALLS] [{"name": ..., "arguments": {...}, "id": ...}, ...];
 *   mistral-small3.2  [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}, one or more ([CALL_ID] optional);
 *   ministral3        [TOOL_CALLS]NAME[ARGS]{...}, one or more;
 *   chatml, gemma, llama3, mistral-v7: none (their templates write no calls).
 * The calls must run to the end of the text (whitespace between and after them allowed), each
 * with a non-empty name and arguments that are a JSON object; otherwise -- JSON that does not
 * parse, text after the calls, a call cut short by max_tokens -- there are no calls and the
 * whole text is the content: a malformed call is never an error.  Tags must be in the text:
 * Mistral's [TOOL_CALLS] and Llama's <|python_tag|> are control tokens, which a decode with
 * ATTN_BPE_SKIP_SPECIAL drops (keep their texts when reading an answer for calls).
 * On success *out (free it with attn_chat_parse_free) holds:
 *   content     the text before the calls with its trailing whitespace removed, or the whole
 *               text, unchanged, when there are none (NUL-terminated; content_len bytes, which
 *               may hold a NUL of the text);
 *   calls       n_calls of them (NULL when 0), in order: name (UTF-8), arguments (the object's
 *               JSON text as Python's json.dumps writes it: ", " and ": " separators, members in
 *               the model's order), id (the id the model wrote: Mistral's forms, else NULL).
 * ATTN_E_INVALID for an unknown format or a NULL text with len > 0; ATTN_E_UNSUPPORTED for
 * a text over ATTN_LIMIT_TEXT_BYTES; ATTN_E_NOMEM.  ctx's message is left as it was on success. */
typedef struct attn_chat_tool_call {
    const char *name;
    const char *arguments;
    const char *id;
} attn_chat_tool_call;

typedef struct attn_chat_parse {
    const char *content;
    size_t content_len;
    int64_t n_calls;
    const attn_chat_tool_call *calls;
} attn_chat_parse;

ATTN_API attn_status attn_chat_parse_tool_calls(attn_ctx *ctx, const char *format,
                                                const char *text, size_t len,
                                                attn_chat_parse **out /* OUT */);
ATTN_API void attn_chat_parse_free(attn_chat_parse *p);
/* For streaming an answer as it is generated: the offset in text[0, len) (the answer so far)
 * from which it might be, or become, tool calls of the format (the opening tag, a part of it
 * at the end, the whitespace before it; llama3.1: 0 while the answer is blank or begins with
 * "{" or <|python_tag|>), len when nothing there can be.  The bytes before it are content
 * whatever follows, and it never decreases as the text grows; the content
 * attn_chat_parse_tool_calls finds in the whole answer is at least that long.  len for a
 * format without calls or unknown. */
ATTN_API size_t attn_chat_tool_call_start(const char *format, const char *text, size_t len);
/* For streaming the calls themselves (OpenAI's tool_calls deltas): what text[0, len), an answer
 * not yet ended, settles of its calls.  *out holds the calls whose name is known (JSON forms:
 * once the key of the arguments follows the name; Mistral Small 3.2 and Ministral 3: once
 * [ARGS] follows it), each with the start of its arguments as attn_chat_parse_tool_calls would
 * write them on the whole answer (json.dumps' form: a string's characters as they come, a
 * number or a literal once something follows it) -- a prefix of the final arguments whenever
 * the answer ends with these calls well formed -- and an id where the form wrote one before
 * the arguments; content is text[0, attn_chat_tool_call_start).  A call whose text stops being
 * of its form (keys in another order, a Mistral id before the arguments, JSON errors) ends the
 * calls reported there.  Errors as attn_chat_parse_tool_calls; free with attn_chat_parse_free. */
ATTN_API attn_status attn_chat_parse_tool_calls_partial(attn_ctx *ctx, const char *format,
                                                        const char *text, size_t len,
                                                        attn_chat_parse **out /* OUT */);
/* The text an answer of the format begins with to make a call (a server forcing a call writes
 * it after the generation prompt and lets the model go on): with name, the call's head up to
 * its arguments' opening brace (qwen: <tool_call>\n{"name": "NAME", "arguments": {; llama3.1:
 * {"name": "NAME", "parameters": {; mistral-v3: [TOOL_CALLS] [{"name": "NAME", "arguments": {;
 * mistral-tekken the same without the blank; mistral-small3.2, ministral3:
 * [TOOL_CALLS]NAME[ARGS]{); name NULL: up to where the name begins.  snprintf-style into
 * buf[0, cap) (cap 0: the length only).  ATTN_E_INVALID for a format without tool calls, an
 * empty name or one the form cannot hold (not UTF-8; Mistral's plain forms: blanks, brackets). */
ATTN_API attn_status attn_chat_tool_call_prefix(attn_ctx *ctx, const char *format,
                                                const char *name, char *buf, size_t cap,
                                                size_t *len /* OUT */);


/* ---- The OpenAI-compatible server's core (docs/serve.md) -----------------------------------
 * Everything of `attn serve` but HTTP: the request bodies of /v1/chat/completions,
 * /v1/completions (streamed as server-sent events or not), /v1/embeddings, /v1/models,
 * /tokenize, /detokenize, /health, /metrics and the chat page at /, validated and answered,
 * and a scheduler thread that owns the model and its session slots and batches the running
 * sequences (continuous batching over attn_llm_session_decode_batch).  An HTTP layer (the
 * attn program's cli/serve.c uses GNU libmicrohttpd) passes each request to
 * attn_server_handle and sends back the reply it gets; the library prints nothing: its log
 * lines go to the options' log callback. */
typedef struct attn_server attn_server;
typedef struct attn_server_reply attn_server_reply;

typedef struct attn_server_options {
    int64_t parallel;       /* session slots, sequences decoded together: [1, 256]; 0 = 4 */
    int64_t ctx;            /* each slot's context in tokens; 0 = the model's, at most 4096;
                             * above the model's it is cut to it */
    int64_t queue;          /* requests waiting for a slot at most, more get 503:
                             * [1, 2^20]; 0 = 64 */
    int cache_bf16;         /* 1: the KV caches in bfloat16 */
    int log_requests;       /* 1: one log line per request ("POST /v1/completions 200 12
                             * 3.4 ms") when its reply is freed */
    const char *model_name; /* the name /v1/models and the answers give (NULL = "model") */
    const char *embed_name; /* the embedding model's (NULL = "embed") */
    const char *api_key;    /* NULL: none; else every path but / and /health needs the
                             * authorization "Bearer KEY" (401 without) */
    size_t max_body;        /* request bodies above it get 413; 0 = 1 MiB */
    void (*log)(void *user, const char *line); /* NULL: no log; called from any thread of the
                                                * server, one line without its newline */
    void *log_user;
} attn_server_options;

/* The defaults (every field 0 or NULL, log_requests 1). */
ATTN_API attn_server_options attn_server_options_defaults(void);
/* A server over llm (which needs a tokenizer) and, optionally, embed (NULL: /v1/embeddings is
 * 404).  ctx becomes the scheduler thread's: the caller must not use it until attn_server_free
 * (its thread count is the server's); the models must outlive the server and not be used
 * elsewhere meanwhile.  The scheduler thread starts here (it inherits the calling thread's
 * signal mask).  ATTN_E_INVALID for options out of range, ATTN_E_NOMEM. */
ATTN_API attn_status attn_server_create(attn_ctx *ctx, attn_llm *llm, attn_bert *embed,
                                        const attn_server_options *options,
                                        attn_server **out /* OUT */);
/* Stops the server (as attn_server_stop with 0 seconds when that was not called), frees it;
 * NULL accepted.  Every reply must have been freed before. */
ATTN_API void attn_server_free(attn_server *srv);
/* Each slot's context in tokens (the options' ctx as the model allows it); 0 for NULL. */
ATTN_API int64_t attn_server_context(const attn_server *srv);
/* Stops accepting generation requests (503 "shutting_down", /health 503), finishes the running
 * and queued ones, ends the scheduler thread, then waits up to wait_s seconds for the replies
 * not yet freed (the HTTP layer sending the last answers). */
ATTN_API void attn_server_stop(attn_server *srv, double wait_s);

/* One request: method ("GET", "POST", "OPTIONS"), path ("/v1/chat/completions"), the value of
 * its Authorization header (NULL: none) and its body body[0, len).  A len above max_body is
 * answered 413 without reading body (which may then be NULL: an HTTP layer gives the declared
 * Content-Length before reading the body); body NULL with len in [1, max_body] says that the
 * caller could not hold the body (500 out of memory).  *out receives the reply (free it with
 * attn_server_reply_free): every error of the request is a reply (4xx, 5xx with OpenAI's error
 * object); ATTN_E_NOMEM or ATTN_E_INVALID (NULL arguments) only when no reply could be made.
 * Thread-safe: one call per connection thread at once is the intended use.  Never blocks on
 * generation: a generation reply is a stream or a deferred reply (attn_server_reply_wait). */
ATTN_API attn_status attn_server_handle(attn_server *srv, const char *method, const char *path,
                                        const char *authorization, const char *body,
                                        size_t len, attn_server_reply **out /* OUT */);

typedef struct attn_server_reply_info {
    int status;               /* the HTTP status */
    const char *content_type; /* NULL: none (204) */
    int64_t n_headers;        /* extra headers (Access-Control-*, Retry-After, Cache-Control) */
    const char *header_names[6], *header_values[6];
    int stream;               /* 1: the body comes by attn_server_reply_read (server-sent
                               * events); 0: body[0, body_len) */
    const char *body;
    size_t body_len;
} attn_server_reply_info;

/* A non-streamed generation's reply is ready only when the generation ended: waits up to
 * timeout_ms (0: does not wait) and returns 1 when the reply is ready (always 1 for the
 * others), 0 when not yet (an HTTP layer polls, watching for a client that left:
 * attn_server_reply_cancel).  NULL: 1. */
ATTN_API int attn_server_reply_wait(attn_server_reply *reply, int timeout_ms);
/* The reply's status, headers and body (a ready reply; valid until it is freed).  A deferred
 * reply not ready yet, or a cancelled one, reads status 0. */
ATTN_API void attn_server_reply_get(const attn_server_reply *reply,
                                    attn_server_reply_info *info /* OUT */);
/* The next bytes of a stream, at most cap of them, into buf: blocks until there are some, the
 * stream ended (*done 1; -1 when it ended by a failure, which an HTTP layer reports by closing
 * the connection) or timeout_ms passed (then a comment ": ping\n\n" is given when cap allows,
 * which keeps the connection alive and finds a client that left).  A complete body reads the
 * same way.  ATTN_E_INVALID for NULL arguments or cap 0. */
ATTN_API attn_status attn_server_reply_read(attn_server_reply *reply, char *buf, size_t cap,
                                            size_t *n /* OUT */, int *done /* OUT */,
                                            int timeout_ms);
/* The client left: its generation ends at the next scheduler step (its slot is free for the
 * next request) and the log line says "(client left)".  NULL accepted. */
ATTN_API void attn_server_reply_cancel(attn_server_reply *reply);
/* Frees the reply (a generation still running is cancelled) and logs its line; NULL
 * accepted. */
ATTN_API void attn_server_reply_free(attn_server_reply *reply);

#endif /* ATTN_CORE_ONLY: end of the extra tier */

#ifdef __cplusplus
}
#endif
#endif /* ATTN_H */
