/* Quantized tensors: the GGML block formats of GGUF files (sizes in qtypes.c, layouts below).
 *
 *   ref/quant_ref.c   dequantization and quantization in plain C: the definition, bit for bit
 *                     the float operations of the gguf package's numpy code (gguf.quants)
 *   quant.c           the public functions (attn_dequantize, attn_quantize, attn_qlinear) and
 *                     the linear product on quantized weights, attn__qlinear: matrix-vector
 *                     kernels for a few rows of activations, dequantized panels on the float
 *                     GEMM microkernels for more
 *   x86_avx2/quant_avx2.c, x86_avx512/quant_avx512.c (float activations),
 *   x86_avxvnni/quant_avxvnni.c, x86_avx512vnni/quant_vnni.c (int8 activations)
 *                     the kernels per instruction set (attn__quant_kernels: ctx->kern.quant,
 *                     ctx->kern.quant8)
 *
 * Every file here is built with -ffp-contract=off (CMakeLists.txt): the dequantized value of
 * Q4_1 is fl(fl(d q) + m), two roundings, as numpy computes it, never one fused rounding.
 *
 * Layouts (little-endian; "f16" an IEEE half scale; element e of a block):
 *   Q4_0  32: d f16, qs[16]          q = (e < 16 ? qs[e] & 15 : qs[e-16] >> 4) - 8;  d q
 *   Q4_1  32: d, m f16, qs[16]       q as Q4_0 without the - 8;                  d q + m
 *   Q5_0  32: d, qh u32, qs[16]      q = nibble | bit e of qh << 4, - 16;         d q
 *   Q5_1  32: d, m, qh, qs[16]       the same without the - 16;                   d q + m
 *   Q8_0  32: d, int8 qs[32]                                                       d q
 *   Q2_K 256: sc[16], qs[64], d, dmin      16 groups of 16: (d (sc & 15)) q - dmin (sc >> 4)
 *   Q3_K 256: hmask[32], qs[64], sc[12], d 16 groups of 16, 6-bit signed scales - 32
 *   Q4_K 256: d, dmin, sc[12], qs[128]     8 groups of 32, 6-bit scale and min: (d s) q - dmin m
 *   Q5_K 256: d, dmin, sc[12], qh[32], qs[128]   as Q4_K with a fifth bit
 *   Q6_K 256: ql[128], qh[64], int8 sc[16], d   16 groups of 16: (d s) (q - 32)
 *   Q8_K 256: d f32, int8 qs[256], int16 bsums[16] (the sums are not read)      d q
 *   IQ4_NL 32: d f16, qs[16]         v = T[q], q the nibble as Q4_0;               d v
 *   IQ4_XS 256: d f16, sh u16, sl[4], qs[128]   8 groups of 32, each 16 bytes of qs as IQ4_NL,
 *             scale ls = (sl[g/2] >> 4 (g%2) & 15 | (sh >> 2 g & 3) << 4) - 32;  (d ls) T[q]
 *   T = attn__iq4_values: the 16 non-linear int8 levels of IQ4_NL.
 *   F32, F16, BF16: one value per element.
 * Products in parentheses are rounded to float first, as in numpy. */
#ifndef ATTN_QUANT_H
#define ATTN_QUANT_H
#include <string.h>

#include "dispatch.h"

#define ATTN__QT_MAX 31 /* type numbers are below this (ATTN_Q_BF16 = 30) */

/* ---- storage types: one traits table (qtypes.c) ------------------------------------------
 * The weight storage types of attn__weight (layers.h): the GGML numbers of attn_qtype (rows of
 * blocks, as GGUF files store them) and the packed panels of the 16-bit GEMMs (gemm_bf16.h,
 * gemm_f16.h), which no file holds and the public attn_qtype_* calls do not name. */
enum { ATTN__W_BF16P = 40, ATTN__W_F16P = 41, ATTN__W_F32P = 42 };
typedef struct attn__wtype {
    int type;
    const char *name;
    int64_t elems, bytes; /* one block (1 and 4 for F32) */
    int panels;           /* 1: packed for a GEMM (no row access, no file type) */
} attn__wtype;
/* The traits of a storage type; NULL for a number that is none. */
ATTN__HIDDEN const attn__wtype *attn__wtype_of(int type);

/* ---- half precision ----------------------------------------------------------------------
 * Widening is exact: subnormals, infinities and NaN payloads are kept (as numpy's astype). */
static inline float attn__half_to_float(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0x1f)
        u = s | 0x7f800000u | (m << 13);
    else if (e != 0)
        u = s | ((e + 112u) << 23) | (m << 13);
    else if (m == 0)
        u = s;
    else {
        float f = (float)m * 0x1p-24f; /* m 2^-24 exactly: a normal float */
        return s ? -f : f;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t attn__load_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline float attn__load_half(const uint8_t *p) {
    return attn__half_to_float(attn__load_u16(p));
}
/* Nearest half, ties to even, overflow to infinity, subnormals rounded as such: numpy's
 * astype(float16).  A NaN gives a NaN with the top payload bits (as numpy's scalar code). */
ATTN__HIDDEN uint16_t attn__float_to_half(float f);

/* ---- reference ---------------------------------------------------------------------------- */
/* IQ4_NL's table of 16 levels (IQ4_XS too), and the signed 6-bit scale (ls - 32, in [-32, 31])
 * of group ib (0..7) of the IQ4_XS block b. */
ATTN__HIDDEN extern const int8_t attn__iq4_values[16];
static inline int attn__iq4xs_scale(const uint8_t *b, int ib) {
    const int lo = (b[4 + ib / 2] >> (4 * (ib % 2))) & 15, hi = (attn__load_u16(b + 2) >> (2 * ib)) & 3;
    return (lo | hi << 4) - 32;
}
/* Dequantizes nb blocks of `type` (a type attn_qtype_block knows) from src into dst
 * (nb * block_elems floats): gguf.quants.dequantize bit for bit (Q8_K: d * q). */
ATTN__HIDDEN void attn__dequant_ref(int type, const void *src, int64_t nb, float *dst);
/* The first of nb blocks of `type` whose scales are not finite (the f16 d and m/dmin of the
 * 32-element and K types, Q8_K's float d; every element of F16, BF16 and F32), or -1 when all
 * are: what the weights' bytes cannot show without being dequantized.  *what (may be NULL)
 * names the field ("d", "m", "dmin", "value"). */
ATTN__HIDDEN int64_t attn__quant_first_nonfinite(int type, const void *src, int64_t nb,
                                                 const char **what);
/* 1 when attn__quant_ref has a quantizer for type: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
 * Q8_0. */
ATTN__HIDDEN int attn__quant_supported(int type);
/* Quantizes nb blocks: gguf.quants.quantize bit for bit for finite input (non-finite input
 * gives some block without undefined behaviour). */
ATTN__HIDDEN void attn__quant_ref(int type, const float *src, int64_t nb, void *dst);

/* ---- activations as int8 (the optional int8 path of the matrix-vector product) ----------
 * Each vector of K values (K a multiple of 32) is cut into blocks of 32: block b has
 * d_b = max|x| / 127 (0 for a zero block, and for max|x| < ~2.9e-37, where 1 / d_b would
 * overflow), q_j = roundf(x_j * (1 / d_b)) in [-127, 127], the float sum of its x (in order)
 * and the integer sums of its q over elements 0-15 and 16-31.  A block holding a NaN or an
 * infinity gets d_b = NaN, so the outputs it touches are NaN.  Vector i: q[i * ldq + j];
 * dsx[i * 2 * ldb + 2 b] = d_b, [... + 2 b + 1] = the sum of x; sq[i * 2 * ldb + 2 b + h]. */
typedef struct attn__q8act {
    const int8_t *q;
    const float *dsx;
    const int32_t *sq;
    int64_t ldq, ldb;
} attn__q8act;
/* Quantizes rows x[i * ldx + k], i < m, k < K (K a multiple of 32) into q (m * ldq bytes),
 * dsx and sq (m * 2 * ldb entries each). */
ATTN__HIDDEN void attn__q8act_quantize(const float *x, int64_t ldx, int64_t m, int64_t K,
                                       int8_t *q, int64_t ldq, float *dsx, int32_t *sq,
                                       int64_t ldb);

/* ---- activations as int16 (the ATTN__QACT_Q16 path) ------------------------------------------
 * Block b of 32 values of a vector: d_b = max|x| / 32767 (0 for a zero block and for max|x| <
 * ~9.6e-35, where 1 / d_b would overflow), q_j = x_j * (1 / d_b) rounded to the nearest
 * integer (halves away from zero) in [-32767, 32767], and the float sum of its x (in order),
 * for the mins of Q4_1, Q5_1, Q4_K and Q5_K.  A block holding a NaN or an infinity gets
 * d_b = NaN.  Vector i: q[i * ldq + k]; d[i * ldb + b], sx[i * ldb + b], with ldb >= K / 32
 * rounded up to a multiple of 8 and the entries past K / 32 zero (kernels read 8 blocks at a
 * time). */
typedef struct attn__q16act {
    const int16_t *q;
    const float *d, *sx;
    int64_t ldq, ldb;
    /* the split form that the Q2_K, Q3_K and Q6_K kernels read (attn__q16act_split; NULL until made): per
     * vector i at qb + 2 i ldq, each block b of 32 quants as the 32 low bytes q & 255
     * (unsigned) then the 32 high bytes q >> 8 (signed, in [-128, 127]): q = 256 hi + lo; at
     * gs + 2 i ldb, each group g of 16 as (float) (sum of its 16 quants) times d of its block
     * (g / 2), one float rounding */
    const uint8_t *qb;
    const float *gs;
} attn__q16act;
ATTN__HIDDEN void attn__q16act_quantize(const float *x, int64_t ldx, int64_t m, int64_t K,
                                        int16_t *q, int64_t ldq, float *d, float *sx,
                                        int64_t ldb);
/* Makes the split form of m vectors of K (a multiple of 32) into qb (m 2 ldq bytes) and gs
 * (m 2 ldb floats) and points xa at them. */
ATTN__HIDDEN void attn__q16act_split(attn__q16act *xa, int64_t m, int64_t K, uint8_t *qb,
                                     float *gs);
/* whether type's int16 kernels read the split form (Q2_K, Q3_K, Q6_K: 16 groups of 16) */
static inline int attn__q16_split_type(int type) {
    return type == ATTN_Q_Q2_K || type == ATTN_Q_Q3_K || type == ATTN_Q_Q6_K;
}

/* ---- kernels per instruction set ----------------------------------------------------------
 * W holds `rows` rows of rb bytes, each nb blocks of the type (K = nb * block_elems).
 *   dq:  dequantizes nb blocks to floats: exactly attn__dequant_ref's bits.
 *   mv:  y[i * ldy + r] = sum_k deq(W_r)[k] x[i * ldx + k] for r < rows, i < m (m <= MV_MAX):
 *        float activations, each weight dequantized in registers as dq does, products and sums
 *        in float in the kernel's own fixed order (per row, the same for every m and every
 *        row range).
 *   mv8: the same on int8 activations (attn__q8act); NULL where the set has none.  attn__qlinear
 *        calls mv and mv8 with m <= ATTN__QMV_MAX; a kernel may take more (the ARM64 SDOT and
 *        SMMLA mv8 take up to ATTN__QMV_WIDE rows and are also their sets' mvw8). */
#define ATTN__QMV_MAX 4
/* CALL(M) with M = m (1 .. ATTN__QMV_MAX; more: ATTN__QMV_MAX) as a constant: the kernels'
 * versions per vector count */
#define ATTN__QMV_SWITCH(m, CALL)                                                            \
    switch (m) {                                                                              \
    case 1: CALL(1); break;                                                                   \
    case 2: CALL(2); break;                                                                   \
    case 3: CALL(3); break;                                                                   \
    default: CALL(4); break;                                                                  \
    }
/* A matrix-vector kernel's entry on activations of type XA (attn__q8act, attn__q16act): the
 * kernel's signature, SETUP (declarations CALL uses; may be empty), then ATTN__QMV_SWITCH */
#define ATTN__QMV_ENTRY(name, XA, SETUP, CALL)                                                \
    static void name(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const XA *xa,     \
                     int64_t m, float *y, int64_t ldy) {                                      \
        SETUP                                                                                 \
        ATTN__QMV_SWITCH(m, CALL)                                                             \
    }
/*   mvw: mv for up to ATTN__QMV_WIDE vectors in one pass over the weights, the same bits per
 *        vector as mv (each weight row dequantized once for all of them; NULL where the set
 *        has none: mv on groups of ATTN__QMV_MAX) */
#define ATTN__QMV_WIDE 8
/* attn__qlinear runs up to this many rows of activations through the matrix-vector kernels
 * (ATTN__QMV_MAX at a time), more through the GEMM (measured: docs/kernels.md) */
#define ATTN__QMV_ROWS 8
typedef void (*attn__qdq_fn)(const uint8_t *src, int64_t nb, float *dst);
typedef void (*attn__qmv_fn)(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                             const float *x, int64_t ldx, int64_t m, float *y, int64_t ldy);
typedef void (*attn__qmv8_fn)(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                              const attn__q8act *xa, int64_t m, float *y, int64_t ldy);
/*   mv16: the same on int16 activations (attn__q16act), up to ATTN__QMV_MAX vectors: integer
 *        dot products of each group's quants with the activation quants (exact), times the
 *        group's scale and the block's d in float, mins times the float sums of x; NULL where
 *        the set has none (float activations then).  The x86 sets' Q2_K, Q3_K and Q6_K
 *        kernels read xa's split form, which the caller makes first (attn__q16act_split;
 *        attn__q16_split_type says which types need it). */
typedef void (*attn__qmv16_fn)(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                               const attn__q16act *xa, int64_t m, float *y, int64_t ldy);

/* The reference dequantizer of one type (NULL for an unknown type). */
ATTN__HIDDEN attn__qdq_fn attn__dequant_ref_fn(int type);

typedef struct attn__quant_kernels {
    const char *name;
    attn__qdq_fn dq[ATTN__QT_MAX];   /* every type */
    attn__qmv_fn mv[ATTN__QT_MAX];   /* every type (the plain C table has them all) */
    attn__qmv8_fn mv8[ATTN__QT_MAX]; /* the 32-element types and the K-quants (Q2_K .. Q6_K,
                                        IQ4_XS), or NULL (attn__qlinear: the plain C one then) */
    attn__qmv_fn mvw[ATTN__QT_MAX];  /* up to ATTN__QMV_WIDE vectors, or NULL */
    attn__qmv8_fn mvw8[ATTN__QT_MAX]; /* mv8 for up to ATTN__QMV_WIDE vectors (the same bits
                                         per vector), or NULL */
    attn__qmv16_fn mv16[ATTN__QT_MAX]; /* int16 activations (ctx->kern.quant16), or NULL */
    /* the int16 tables' attn__q16act_quantize, the same bits (NULL in the others) */
    void (*q16x)(const float *x, int64_t ldx, int64_t m, int64_t K, int16_t *q, int64_t ldq,
                 float *d, float *sx, int64_t ldb);
} attn__quant_kernels;

/* ---- the int16 GEMM: prompts on int16 activations -------------------------------------------
 * More than ATTN__QMV_ROWS rows on int16 activations, where the set has it (AVX512_VNNI:
 * one VPDPWSSD does twice the multiply-adds of a float FMA of the same width).  A panel is
 * np weight rows (np columns of Y) over all of K: wq [K / 2][np] int32, lane n of row p the
 * pair (q_{n,2p}, q_{n,2p+1}) as two int16 (low, high); ws [K / G][np] the groups' float
 * scales and wm [K / G][np] their mins (w = s q - m; NULL where the type has none).  Groups
 * of G = 32 elements (16 for Q6_K, whose scales are per 16), each with its own integer sums.
 *   pack(type, w, rb, nv, K, wq, ws, wm, tmp): the nv <= np rows w, w + rb, ... (the other
 *        lanes zero); tmp holds np K int16
 *   ukr(mr, K, G, wq, ws, wm, xa, y, ldy, nv): rows 0 .. mr - 1 of xa (mr <= the set's mr)
 *        times the panel, columns 0 .. nv - 1 of y: y_in = sum_g (ws_gn d_{i,b(g)}) isum_ign
 *        - wm_gn sx_ig, in group order (isum exact: |q| <= 128, so a group's sum of 32
 *        products stays below 2^31); each y_in is computed the same way whatever mr, the row's
 *        slot and nv, so a row's bits do not depend on the other rows. */
typedef struct attn__gemm16 {
    const char *name;
    int mr, np; /* rows of X and weight rows (columns of Y) per tile */
    void (*pack)(int type, const uint8_t *w, size_t rb, int64_t nv, int64_t K, int32_t *wq,
                 float *ws, float *wm, int16_t *tmp);
    void (*ukr)(int mr, int64_t K, int G, const int32_t *wq, const float *ws, const float *wm,
                const attn__q16act *xa, float *y, int64_t ldy, int64_t nv);
} attn__gemm16;
/* The group length of type's int16 GEMM panels (32, or 16 for Q3_K and Q6_K), 0 for a type
 * without them (Q2_K, whose mins go by groups of 16, and the float types: the float GEMM
 * then); whether they carry mins (by block of 32 of x). */
static inline int attn__gemm16_group(int type) {
    switch (type) {
    case ATTN_Q_Q4_0: case ATTN_Q_Q4_1: case ATTN_Q_Q5_0: case ATTN_Q_Q5_1: case ATTN_Q_Q8_0:
    case ATTN_Q_Q4_K: case ATTN_Q_Q5_K: case ATTN_Q_IQ4_NL: case ATTN_Q_IQ4_XS: return 32;
    case ATTN_Q_Q3_K: case ATTN_Q_Q6_K: return 16;
    default: return 0;
    }
}
static inline int attn__gemm16_mins(int type) {
    return type == ATTN_Q_Q4_1 || type == ATTN_Q_Q5_1 || type == ATTN_Q_Q4_K ||
           type == ATTN_Q_Q5_K;
}
/* The sets' int16 GEMMs (NULL where the build has none; gemm16_body.h, the same bits):
 * ctx->kern.gemm16 follows the int16 table (dispatch.c) */
ATTN__HIDDEN const attn__gemm16 *attn__gemm16_vnni(void);    /* AVX512_VNNI, 512-bit */
ATTN__HIDDEN const attn__gemm16 *attn__gemm16_avxvnni(void); /* AVX-VNNI, 256-bit */
ATTN__HIDDEN const attn__gemm16 *attn__gemm16_avx2(void);    /* VPMADDWD + VPADDD, 256-bit */

/* The plain C table (all types, float and int8 paths) and the SIMD ones: NULL when the build
 * could not compile them; their entries are NULL for types they leave to the plain C ones
 * (dispatch.c fills those in). */
ATTN__HIDDEN const attn__quant_kernels *attn__quant_kernels_ref(void);
ATTN__HIDDEN const attn__quant_kernels *attn__quant_kernels_avx2(void);
ATTN__HIDDEN const attn__quant_kernels *attn__quant_kernels_avx512(void);
/* The AVX-512 set as AMD Zen 4 runs it fastest (attn__quant_pick): Q6_K's matrix-vector
 * product on the AVX2 set's 256-bit kernel, attn__qmv_q6k_avx2 (defined where the AVX2
 * kernels are, which every compiler building the AVX-512 ones builds) */
ATTN__HIDDEN const attn__quant_kernels *attn__quant_kernels_avx512_zen4(void);
ATTN__HIDDEN void attn__qmv_q6k_avx2(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                                     const float *x, int64_t ldx, int64_t m, float *y,
                                     int64_t ldy);
ATTN__HIDDEN const attn__quant_kernels *attn__quant_kernels_vnni(void);
ATTN__HIDDEN const attn__quant_kernels *attn__quant_kernels_avxvnni(void);
ATTN__HIDDEN const attn__quant_kernels *attn__quant_kernels_avx2_int8(void);
/* int16 activations (ctx->kern.quant16) on 256-bit vectors: VPMADDWD (AVX2), VPDPWSSD of
 * AVX512_VNNI (AVX512VL) and of AVX-VNNI; the same bits (quant16_256.h) */
ATTN__HIDDEN const attn__quant_kernels *attn__quant_kernels_avx2_int16(void);
ATTN__HIDDEN const attn__quant_kernels *attn__quant_kernels_vnni_int16(void);
ATTN__HIDDEN const attn__quant_kernels *attn__quant_kernels_avxvnni_int16(void);
/* AArch64: NEON (float activations) and SDOT (int8 activations; needs ATTN__CPU_DOTPROD) */
ATTN__HIDDEN const attn__quant_kernels *attn__quant_kernels_neon(void);
ATTN__HIDDEN const attn__quant_kernels *attn__quant_kernels_dotprod(void);
/* SMMLA for m >= 2 (needs ATTN__CPU_I8MM and ATTN__CPU_DOTPROD; the plain C bits, as SDOT) */
ATTN__HIDDEN const attn__quant_kernels *attn__quant_kernels_i8mm(void);

/* ---- the linear product ------------------------------------------------------------------- */
enum {
    ATTN__QACT_DEFAULT = 0, /* the measured default (docs/kernels.md): int16 where the CPU
                               has the int16 kernels (ctx->kern.quant16), else float */
    ATTN__QACT_F32 = 1,     /* float activations (mv) */
    ATTN__QACT_Q8 = 2,      /* activations rounded to int8 per block of 32 (mv8) */
    ATTN__QACT_Q16 = 3,     /* activations rounded to int16 per block of 32 (mv16; float
                               where the set or the type has none) */
    /* flag, or-ed with one of the above: the matrix-vector kernels for every M, so that a
     * row's result never depends on M (what a KV-cache decoder needs to give the same bits
     * token by token as for a whole prompt); prefill 2-2.5x slower than the GEMM path
     * (docs/kernels.md) */
    ATTN__QLIN_ROWWISE = 16,
    /* the GEMM path on dequantized panels whatever M (the last rows of long prompts: their
     * bits as among all the rows); not with ATTN__QLIN_ROWWISE */
    ATTN__QLIN_GEMM = 32
};

/* Y[i * ldy + n] = (sum_k X[i * ldx + k] deq(W)[n, k] + bias[n]) + R[i * N + n] for i < M,
 * n < N (bias and R may be NULL: no term; R, a residual, is [M, N] contiguous and may not
 * overlap Y): W is N rows of K elements (K a multiple of the block), row-major, rows back to
 * back.  act: ATTN__QACT_*, optionally | ATTN__QLIN_ROWWISE.  M <= ATTN__QMV_ROWS runs the
 * matrix-vector kernels (act chooses the float, int16 or int8 path; float where the type or
 * the CPU has no such kernel), larger M the float GEMM microkernels
 * on dequantized panels: Y is then bit for bit attn__gemm(X, deq(W)^T) (+ bias, rounded once)
 * on the same context.  Threads split the N outputs only (weight rows): the same bits for
 * every thread count.  Workspace (context, released on return): the int8 path M K bytes and
 * 16 M K / 32 bytes of block numbers; the GEMM path the packed X (M rounded up to mr, times K
 * floats) and per thread (1 + U) nr K floats (U <= 4 panels, U nr K floats <= 1 MiB unless one
 * panel is more).  The caller has checked the sizes (row bytes and products fit in size_t /
 * int64_t); fails only when the workspace runs out. */
ATTN__HIDDEN attn_status attn__qlinear(attn_ctx *ctx, int type, const void *W, int64_t N,
                                       int64_t K, const float *X, int64_t ldx, int64_t M,
                                       const float *bias, const float *R, float *Y,
                                       int64_t ldy, int act);

/* Several products of the same X [M, K] with weights that share K (q, k and v of attention;
 * gate and up of a SwiGLU): part i is Y_i = X W_i^T + bias_i + R_i exactly as attn__qlinear
 * computes it, same bits.  On the matrix-vector path (M <= ATTN__QMV_ROWS, or
 * ATTN__QLIN_ROWWISE) the parts run as one loop over all their rows, so the threads meet once
 * instead of n times, and int8 activations are rounded once; on the GEMM path X is packed
 * once and the units of every part run in one loop.  More than ATTN__QLIN_PARTS parts, or an
 * empty one: one attn__qlinear per part. */
#define ATTN__QLIN_PARTS 4
typedef struct attn__qlin_part {
    int type;
    const void *W;
    int64_t N;
    const float *bias, *R;
    float *Y;
    int64_t ldy;
} attn__qlin_part;
ATTN__HIDDEN attn_status attn__qlinear_multi(attn_ctx *ctx, int n, const attn__qlin_part *p,
                                             int64_t K, const float *X, int64_t ldx, int64_t M,
                                             int act);

/* Whole tensors of n elements (a multiple of the block), over the context's threads in pieces
 * of ~64 Ki elements: dequantization on ctx->kern.quant (attn__dequant_ref's bits) and the
 * reference quantization (attn__quant_supported types).  No checks. */
ATTN__HIDDEN void attn__dequantize(attn_ctx *ctx, int type, const void *src, int64_t n,
                                   float *dst);
ATTN__HIDDEN void attn__quantize(attn_ctx *ctx, int type, const float *src, int64_t n,
                                 void *dst);

#endif
