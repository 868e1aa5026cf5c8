/* Internal declarations shared by the library's source files.  Never installed.
 * Prefix: attn__ (double underscore) for internal symbols, all hidden. */
#ifndef ATTN_INTERNAL_H
#define ATTN_INTERNAL_H

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "attn.h"

#if defined(__GNUC__)
#define ATTN__HIDDEN __attribute__((visibility("hidden")))
#define ATTN__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define ATTN__HIDDEN
#define ATTN__PRINTF(a, b)
#endif

#define ATTN__MSG_MAX 512

typedef struct attn__ws_block {
    unsigned char *ptr;
    size_t size, used;
    size_t start; /* offset of the first 64-byte aligned byte: `used` never goes below it */
} attn__ws_block;

/* Philox-4x32-10 block: ctr[4] under key[2] -> out[4] (src/core/rng.c, with attn_dropout_keep). */
ATTN__HIDDEN void attn__philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* ---- kernel table ----------------------------------------------------------------------
 * The kernels a context calls, one entry per family, chosen once by attn_ctx_create
 * (attn__kernels_init, src/kernels/dispatch.c; docs/kernels.md says how) from the CPU features
 * (cpu.h) and the ATTN_* environment.  Every call site reads ctx->kern: nothing is queried per
 * call.  The tables' types belong to the kernel families (gemm.h, flash.h, decode.h, ew.h,
 * gemm_bf16.h, gemm_f16.h); core only names them. */
typedef void (*attn__dropout_row_fn)(uint64_t seed, uint64_t offset, uint64_t idx, int64_t n,
                                     float p, float scale, float *out); /* kernels.h */
/* 1 when one of the n floats at p (any alignment) is a NaN or an infinity (its exponent bits
 * all ones), else 0 (ew.h: attn__nonfinite_c and its SIMD versions; always set). */
typedef int (*attn__nonfinite_fn)(const float *p, int64_t n);

/* The ATTN_* overrides, read from the environment once, at attn_ctx_create. */
typedef struct attn__kernel_env {
    int isa;    /* ATTN_ISA=ref|avx2|avx512: the highest set allowed, or -1 (unset, unknown) */
    int bf16;   /* ATTN_BF16: 0 for "0" (plain C bf16 kernels), 2 for "dot", else 1 */
    int f16;    /* ATTN_F16: 0 for "0" (the plain C fp16 kernel), else 1 */
    int decode; /* ATTN_DECODE: 0 for "0" (no split-KV decode path), else 1 */
    int amx;    /* ATTN_AMX: 0 for "0" (bf16 GEMMs and attention without AMX tiles), else 1 */
} attn__kernel_env;

typedef struct attn__kernels {
    int isa; /* the SIMD set of the tables below (src/kernels/dispatch.h ATTN__ISA_*) */
    const struct attn__gemm_kernel *gemm;              /* fp32 GEMM (gemm.h) */
    const struct attn__flash_kernels *flash;           /* fused attention (flash.h) */
    const struct attn__flash_bf16_kernels *flash_bf16; /* bf16 storage (flash.h) */
    int flash_bf16_widen; /* bf16 storage multiplies on the fp32 kernels (flash.h) */
    const struct attn__decode_kernels *decode;         /* split-KV decode (decode.h) */
    int decode_on;                                     /* 0: attn__sdpa never decodes */
    const struct attn__ew_kernel *ew;                  /* row epilogues (ew.h) */
    const struct attn__bf16_kernel *gemm_bf16;         /* bf16-weight linear (gemm_bf16.h) */
    const struct attn__f16_kernel *gemm_f16;           /* fp16-weight linear (gemm_f16.h) */
    const struct attn__mixed_kernel *mixed;            /* bf16-operand GEMM (gemm_mixed.h) */
    const struct attn__quant_kernels *quant;  /* quantized weights, float activations (quant.h) */
    const struct attn__quant_kernels *quant8; /* the same with int8 activations (quant.h) */
    const struct attn__quant_kernels *quant16; /* int16 activations, or NULL: float then */
    const struct attn__gemm16 *gemm16; /* int16 GEMM of prompts (quant.h), or NULL: float */
    attn__dropout_row_fn dropout_row;                  /* dropout multipliers (kernels.h) */
    attn__nonfinite_fn nonfinite; /* the scan of the finite checks (ew.h) */
    void (*ce_row)(const float *, int64_t, int64_t, double, double, float *, double *,
                   double *);                          /* cross-entropy row (kernels.h) */
    int has_bf16; /* gemm_bf16 and flash_bf16 are the AVX512_BF16 kernels */
    int has_f16;  /* gemm_f16 is the AVX512_FP16 kernel */
} attn__kernels;

struct attn_ctx {
    int threads;
    attn_alloc_fn alloc;
    attn_free_fn free;
    void *alloc_user;
    unsigned flags;
    attn_status status;
    char msg[ATTN__MSG_MAX];
    /* workspace: a stack of blocks; marks record (block, offset) */
    attn__ws_block *blocks;
    size_t nblocks, capblocks, cur;
    int fixed;        /* caller workspace: never grows */
    size_t in_use, peak;
    struct attn__pool *pool; /* worker threads (src/core/pool.c); NULL when threads == 1 */
    attn__kernels kern;      /* the kernels of this context (attn__kernels_init) */
    attn__kernel_env env;    /* the ATTN_* overrides it was chosen under */
    int64_t limit[ATTN_LIMIT_COUNT]; /* attn_ctx_set_limit */
    /* parameter source (attn__param_source): while st is set, every parameter registered
     * must exist in it under prefix + name, so a module built from a file's claims never
     * grows past the tensors the file holds */
    const attn_st *psrc;
    const char *psrc_prefix;
    /* attn_ctx_set_grad_ready: told by the models' backwards which parameter gradients are
     * final (attn__grad_ready) */
    attn_grad_ready_fn grad_ready;
    void *grad_ready_user;
};

/* Tells the context's gradient-ready hook (if any) that the gradients of the arena elements
 * [offset, offset + count) of the module whose backward runs are final for this backward. */
static inline void attn__grad_ready(attn_ctx *ctx, int64_t offset, int64_t count) {
    if (ctx && ctx->grad_ready && count > 0) ctx->grad_ready(ctx->grad_ready_user, offset, count);
}

/* Reads the ATTN_* environment into ctx->env and chooses ctx->kern from it and the CPU
 * features (src/kernels/dispatch.c); attn_ctx_create calls it once.  Declared here so that
 * core includes no header of the kernel layer. */
ATTN__HIDDEN void attn__kernels_init(attn_ctx *ctx);

/* ---- errors ---------------------------------------------------------------------------- */
/* Records status and a formatted message in ctx (if not NULL); returns status. */
ATTN__HIDDEN attn_status attn__fail(attn_ctx *ctx, attn_status st, const char *fmt, ...)
    ATTN__PRINTF(3, 4);

#define ATTN_TRY(expr)                                                                        \
    do {                                                                                      \
        attn_status attn__s = (expr);                                                         \
        if (attn__s != ATTN_OK) return attn__s;                                               \
    } while (0)

/* RETURN_ERROR_IF (zstd): fail with status and message when cond holds. */
#define ATTN_FAIL_IF(cond, ctx, st, ...)                                                      \
    do {                                                                                      \
        if (cond) return attn__fail((ctx), (st), __VA_ARGS__);                                \
    } while (0)

/* TRY that jumps to a cleanup label (variable `st` must exist). */
#define ATTN_TRYG(expr)                                                                       \
    do {                                                                                      \
        st = (expr);                                                                          \
        if (st != ATTN_OK) goto done;                                                         \
    } while (0)

/* ATTN_FAIL_IF that jumps to the cleanup label (variables `st` and `ctx` must exist). */
#define ATTN_FAIL_IFG(cond, ...)                                                              \
    do {                                                                                      \
        if (cond) {                                                                           \
            st = attn__fail(ctx, __VA_ARGS__);                                                \
            goto done;                                                                        \
        }                                                                                     \
    } while (0)

/* ---- memory ---------------------------------------------------------------------------- */
ATTN__HIDDEN void *attn__malloc(attn_ctx *ctx, size_t size);
ATTN__HIDDEN void *attn__calloc(attn_ctx *ctx, size_t n, size_t size);
ATTN__HIDDEN void attn__free(attn_ctx *ctx, void *p);
ATTN__HIDDEN char *attn__strdup(attn_ctx *ctx, const char *s);
/* Makes room for element n of a growing array of `elem`-byte items (the allocator hooks have
 * no realloc): doubles *cap when n reaches it.  Returns 0 on overflow or out of memory. */
ATTN__HIDDEN int attn__grow(attn_ctx *ctx, void **arr, size_t *cap, size_t n, size_t elem);

/* Overflow-checked arithmetic: return 0 on overflow. */
static inline int attn__mul_size(size_t a, size_t b, size_t *r) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *r = a * b;
    return 1;
}
static inline int attn__add_size(size_t a, size_t b, size_t *r) {
    if (b > SIZE_MAX - a) return 0;
    *r = a + b;
    return 1;
}
static inline int attn__mul_i64(int64_t a, int64_t b, int64_t *r) {
    if (a < 0 || b < 0) return 0;
    if (a != 0 && b > INT64_MAX / a) return 0;
    *r = a * b;
    return 1;
}

/* ---- parameter source ------------------------------------------------------------------ */
/* Sets (st != NULL) or clears (st == NULL) the context's parameter source: while set,
 * attn__param_reg checks each parameter as it is registered (attn__param_match, strict) and
 * refuses a layer count over ATTN_LIMIT_LAYERS, so loaders build a module only from tensors
 * that exist.  Loaders set it around the create call and clear it on every path. */
/* A model folder's weights: dir/model.safetensors, else the sharded checkpoint of
 * dir/model.safetensors.index.json (attn_st_read_index); neither is ATTN_E_NOT_FOUND naming
 * both. */
ATTN__HIDDEN attn_status attn__st_read_folder(attn_ctx *ctx, const char *dir, attn_st **out);
static inline void attn__param_source(attn_ctx *ctx, const attn_st *st, const char *prefix) {
    ctx->psrc = st;
    ctx->psrc_prefix = st ? prefix : NULL;
}
/* The tensor prefix + pname of st for a parameter of ndim dims `shape` (src/io/st_module.c):
 * present (else ATTN_E_NOT_FOUND when strict, *found = 0 otherwise), a floating dtype
 * (ATTN_E_DTYPE) and exactly that shape (ATTN_E_SHAPE), with the strict-load messages. */
ATTN__HIDDEN attn_status attn__param_match(attn_ctx *ctx, const attn_st *st, const char *prefix,
                                           const char *pname, int ndim, const int64_t *shape,
                                           int strict, attn_st_tensor *info, int *found);

/* ---- workspace ------------------------------------------------------------------------- */
typedef struct attn__mark {
    size_t block, used, in_use;
} attn__mark;

ATTN__HIDDEN attn__mark attn__ws_mark(attn_ctx *ctx);
ATTN__HIDDEN void attn__ws_release(attn_ctx *ctx, attn__mark m);
/* 64-byte aligned temporary memory for n elements of elem bytes; valid until release. */
ATTN__HIDDEN attn_status attn__ws_alloc(attn_ctx *ctx, size_t n, size_t elem, void **out);
/* F32 buffer of n0*n1*n2*n3 elements (pass 1 for unused dims), overflow-checked. */
ATTN__HIDDEN attn_status attn__ws_f32(attn_ctx *ctx, float **out, int64_t n0, int64_t n1,
                                      int64_t n2, int64_t n3);

/* ---- tensor checks --------------------------------------------------------------------- */
/* Formats "[2, 3, 4]" into buf: a tensor's shape, or ndim raw dims. */
ATTN__HIDDEN const char *attn__shape_str(const attn_tensor *t, char *buf, size_t n);
ATTN__HIDDEN const char *attn__dims_str(const int64_t *shape, int ndim, char *buf, size_t n);
/* Checks that t is present, of dtype, with ndim in [min_nd, max_nd], positive sizes, valid
 * strides and no overflow.  `what` names the argument in messages. */
ATTN__HIDDEN attn_status attn__check(attn_ctx *ctx, const attn_tensor *t, const char *what,
                                     attn_dtype dtype, int min_nd, int max_nd);
/* Shape must equal the given list (n dims). */
ATTN__HIDDEN attn_status attn__check_shape(attn_ctx *ctx, const attn_tensor *t,
                                           const char *what, int n, const int64_t *shape);
/* The row-major index of the first NaN/+-Inf element of an F32 view (-inf allowed with
 * allow_neg_inf), or -1; contiguous views are scanned in parallel (the same answer for any
 * thread count).  Not subject to ATTN_CTX_NO_FINITE_CHECK. */
ATTN__HIDDEN int64_t attn__find_nonfinite(attn_ctx *ctx, const attn_tensor *t,
                                          int allow_neg_inf);
/* NaN/+-Inf scan of an F32 view (allow_neg_inf for additive masks), unless disabled. */
ATTN__HIDDEN attn_status attn__check_finite(attn_ctx *ctx, const attn_tensor *t,
                                            const char *what, int allow_neg_inf);
/* Element offset of a multi-index (ndim entries). */
static inline int64_t attn__off(const attn_tensor *t, const int64_t *idx) {
    int64_t o = 0;
    for (int d = 0; d < t->ndim; d++) o += idx[d] * t->stride[d];
    return o;
}
/* ---- output aliasing ------------------------------------------------------------------- */
/* Overlap is judged on byte extents: a view covers the bytes from its lowest to its highest
 * addressed element (computed from shape and strides, overflow-checked), and two views
 * overlap when those ranges intersect.  This is conservative: two strided views that
 * interleave without sharing an element (the even and the odd columns of one buffer) are
 * refused too.  An absent view (NULL or NULL data) never overlaps.  Every check is O(ndim):
 * nothing reads the data.  Messages start with `fn` and name both arguments:
 * "attn_sdpa: out overlaps q" (ATTN_E_INVALID). */
ATTN__HIDDEN attn_status attn__check_disjoint(attn_ctx *ctx, const char *fn,
                                              const attn_tensor *out, const char *out_name,
                                              const attn_tensor *in, const char *in_name);
/* An output whose distinct elements all have distinct addresses: no stride 0 on a dimension
 * of size > 1, and, with the dimensions of size > 1 ordered by stride, each stride larger
 * than the extent of the smaller ones (every slice or permutation of a dense buffer
 * qualifies; other self-disjoint layouts are refused as well). */
ATTN__HIDDEN attn_status attn__check_distinct(attn_ctx *ctx, const char *fn,
                                              const attn_tensor *out, const char *out_name);
/* 1 when a and b are the same view: data, dtype, ndim, shape and the strides of the
 * dimensions of size > 1 equal. */
ATTN__HIDDEN int attn__same_view(const attn_tensor *a, const attn_tensor *b);

/* An argument of attn__check_outputs.  same_ok (inputs only): bit i set = output i may be
 * exactly this view (an op documented to work in place); any other overlap is refused. */
typedef struct attn__arg {
    const attn_tensor *t;
    const char *name;
    unsigned same_ok;
} attn__arg;
#define ATTN__NARGS(arr) ((int)(sizeof(arr) / sizeof((arr)[0])))
/* The output checks of one call: each present output attn__check_distinct, the outputs
 * pairwise disjoint, and each output disjoint from each input (or the same view where
 * same_ok allows).  Call after the arguments' attn__check and before anything is written. */
ATTN__HIDDEN attn_status attn__check_outputs(attn_ctx *ctx, const char *fn, const attn__arg *outs,
                                             int nout, const attn__arg *ins, int nin);
/* The tensor of a mask, or NULL when the mask is absent. */
static inline const attn_tensor *attn__mask_t(const attn_mask *m) {
    return m && m->kind != ATTN_MASK_NONE ? &m->t : NULL;
}

/* Contiguous F32 copy (or the data itself if already contiguous). */
ATTN__HIDDEN attn_status attn__contig(attn_ctx *ctx, const attn_tensor *t, const float **out);
/* Copies contiguous src into a (possibly strided) F32 view. */
ATTN__HIDDEN void attn__store(const float *src, attn_tensor *dst);
/* View t as [rows, last] when all but the last dim are contiguous-collapsible; returns 0 if
 * not.  Fills *rows, *row_stride. */
ATTN__HIDDEN int attn__rows(const attn_tensor *t, int64_t *rows, int64_t *row_stride);

/* ---- masks ----------------------------------------------------------------------------- */
/* A mask normalised to 4-D [B?, H?, L, S] broadcast strides (0 where broadcast), with a
 * per-element additive value (0 or -inf for bool kinds). */
typedef struct attn__mask4 {
    attn_mask_kind kind; /* NONE if absent */
    const void *data;
    attn_dtype dtype;
    int64_t stride[4];
} attn__mask4;

/* Validates m and aligns it on the right against target [B, H, L, S]. `what` names it. */
ATTN__HIDDEN attn_status attn__mask_bind(attn_ctx *ctx, const attn_mask *m, const char *what,
                                         const int64_t target[4], attn__mask4 *out);
/* Additive value of mask element (b,h,i,j): 0, -inf, or the float. */
static inline float attn__mask_at(const attn__mask4 *m, int64_t b, int64_t h, int64_t i,
                                  int64_t j) {
    int64_t o = b * m->stride[0] + h * m->stride[1] + i * m->stride[2] + j * m->stride[3];
    switch (m->kind) {
    case ATTN_MASK_ADD: return ((const float *)m->data)[o];
    case ATTN_MASK_KEEP: return ((const unsigned char *)m->data)[o] ? 0.0f : -INFINITY;
    case ATTN_MASK_BLOCK: return ((const unsigned char *)m->data)[o] ? -INFINITY : 0.0f;
    default: return 0.0f;
    }
}

#endif
