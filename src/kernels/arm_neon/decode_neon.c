/* Decode microkernels for AArch64 Advanced SIMD (NEON), contract in decode.h.
 *
 * qk: blocks of 4 keys against up to 4 query rows: 16 accumulators (one per row and key) gather
 *   the products over D four lanes at a time, K read in place (each K vector serves all the
 *   rows of the block, each Q vector all four keys), then pairwise additions (FADDP twice) turn
 *   a row's four accumulators into one vector of its 4 dot products.  The D tail (D % 4) loads
 *   the last K values into a zeroed vector (nothing past a K row is read; Q rows are zero padded
 *   by contract).  Keys past the last full block are done one at a time.
 * pv: a register block of rb <= 4 rows x nv vectors of Dv (nv <= 4 with several rows: at most
 *   16 accumulators; one row takes up to 8); each key loads its V row's vectors once and
 *   multiplies them by rb weights (FMLA by element).  The Dv tail (Dv % 4) is a block of its
 *   own, one vector wide, loaded lane by lane.
 * bf16 K and V (qk_bf16, pv_bf16): the same kernels, each load of 4 values widened in registers
 *   (USHLL #16: exact); written once over `const void *` with a constant bf flag.
 * Cost on paper in docs/kernels.md ("ARM64").  Compiled wherever the compiler targets AArch64;
 * elsewhere the table is NULL. */
#include <string.h>

#include "../decode.h"

#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>

#define AI static inline __attribute__((always_inline))

/* Element i of p, fp32 (bf = 0) or bf16 (bf = 1). */
AI const void *at(const void *p, int64_t i, int bf) { return (const char *)p + i * (bf ? 2 : 4); }

/* 4 values at p as fp32: bf16 widened exactly. */
AI float32x4_t ld4(const void *p, int bf) {
    if (!bf) return vld1q_f32((const float *)p);
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)p), 16));
}

/* The first cnt values of p (cnt in [1, 3]), zeros above; nothing past them is read. */
AI float32x4_t ld4_tail(const void *p, int64_t cnt, int bf) {
    if (!bf) {
        float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        memcpy(t, p, sizeof(float) * (size_t)cnt);
        return vld1q_f32(t);
    }
    uint16_t t[4] = {0, 0, 0, 0};
    memcpy(t, p, sizeof(uint16_t) * (size_t)cnt);
    return ld4(t, 1);
}

/* s[r*lds + u] = q_r . k_u for r < RB, the 4 keys k_u = kj + u ldk.  The accumulators are
 * named variables, not an array: GCC 12 kept an array of them in registers but also stored it
 * to the stack on every step. */
AI void qk_blk(const int RB, const float *q, int64_t ldq, const void *kj, int64_t ldk,
               int64_t dfull, int64_t tail, float *s, int64_t lds, int bf) {
    const float32x4_t z = vdupq_n_f32(0.0f);
    float32x4_t c00 = z, c01 = z, c02 = z, c03 = z;
    float32x4_t c10 = z, c11 = z, c12 = z, c13 = z;
    float32x4_t c20 = z, c21 = z, c22 = z, c23 = z;
    float32x4_t c30 = z, c31 = z, c32 = z, c33 = z;
    const float *q0 = q, *q1 = q + ldq, *q2 = q + 2 * ldq, *q3 = q + 3 * ldq;
#define QROWS(d)                                                                              \
    if (RB > 0) {                                                                          \
        const float32x4_t qv = vld1q_f32(q0 + (d));                                        \
        c00 = vfmaq_f32(c00, qv, k0), c01 = vfmaq_f32(c01, qv, k1);                  \
        c02 = vfmaq_f32(c02, qv, k2), c03 = vfmaq_f32(c03, qv, k3);                  \
    }                                                                                     \
    if (RB > 1) {                                                                          \
        const float32x4_t qv = vld1q_f32(q1 + (d));                                        \
        c10 = vfmaq_f32(c10, qv, k0), c11 = vfmaq_f32(c11, qv, k1);                  \
        c12 = vfmaq_f32(c12, qv, k2), c13 = vfmaq_f32(c13, qv, k3);                  \
    }                                                                                     \
    if (RB > 2) {                                                                          \
        const float32x4_t qv = vld1q_f32(q2 + (d));                                        \
        c20 = vfmaq_f32(c20, qv, k0), c21 = vfmaq_f32(c21, qv, k1);                  \
        c22 = vfmaq_f32(c22, qv, k2), c23 = vfmaq_f32(c23, qv, k3);                  \
    }                                                                                     \
    if (RB > 3) {                                                                          \
        const float32x4_t qv = vld1q_f32(q3 + (d));                                        \
        c30 = vfmaq_f32(c30, qv, k0), c31 = vfmaq_f32(c31, qv, k1);                  \
        c32 = vfmaq_f32(c32, qv, k2), c33 = vfmaq_f32(c33, qv, k3);                  \
    }
    for (int64_t d = 0; d < dfull; d += 4) {
        const float32x4_t k0 = ld4(at(kj, d, bf), bf), k1 = ld4(at(kj, ldk + d, bf), bf);
        const float32x4_t k2 = ld4(at(kj, 2 * ldk + d, bf), bf),
                          k3 = ld4(at(kj, 3 * ldk + d, bf), bf);
        QROWS(d)
    }
    if (tail) {
        const float32x4_t k0 = ld4_tail(at(kj, dfull, bf), tail, bf),
                          k1 = ld4_tail(at(kj, ldk + dfull, bf), tail, bf);
        const float32x4_t k2 = ld4_tail(at(kj, 2 * ldk + dfull, bf), tail, bf),
                          k3 = ld4_tail(at(kj, 3 * ldk + dfull, bf), tail, bf);
        QROWS(dfull)
    }
#undef QROWS
    if (RB > 0)
        vst1q_f32(s + 0 * lds, vpaddq_f32(vpaddq_f32(c00, c01), vpaddq_f32(c02, c03)));
    if (RB > 1)
        vst1q_f32(s + 1 * lds, vpaddq_f32(vpaddq_f32(c10, c11), vpaddq_f32(c12, c13)));
    if (RB > 2)
        vst1q_f32(s + 2 * lds, vpaddq_f32(vpaddq_f32(c20, c21), vpaddq_f32(c22, c23)));
    if (RB > 3)
        vst1q_f32(s + 3 * lds, vpaddq_f32(vpaddq_f32(c30, c31), vpaddq_f32(c32, c33)));
}

#define QK_INST(R, SUF, BF)                                                                   \
    static void qk_##R##SUF(const float *q, int64_t ldq, const void *kj, int64_t ldk,          \
                            int64_t dfull, int64_t tail, float *s, int64_t lds) {              \
        qk_blk(R, q, ldq, kj, ldk, dfull, tail, s, lds, BF);                                  \
    }
QK_INST(1, , 0) QK_INST(2, , 0) QK_INST(3, , 0) QK_INST(4, , 0)
QK_INST(1, b, 1) QK_INST(2, b, 1) QK_INST(3, b, 1) QK_INST(4, b, 1)
typedef void (*qk_fn)(const float *, int64_t, const void *, int64_t, int64_t, int64_t, float *,
                      int64_t);
static const qk_fn qk_table[2][4] = {{qk_1, qk_2, qk_3, qk_4}, {qk_1b, qk_2b, qk_3b, qk_4b}};

static void qk_any(int64_t rows, int64_t n, int64_t D, const float *q, int64_t ldq,
                   const void *k, int64_t ldk, float *s, int64_t lds, int bf) {
    int64_t dfull = D & ~(int64_t)3, tail = D - dfull;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const void *kj = at(k, j * ldk, bf);
        for (int64_t r0 = 0; r0 < rows; r0 += 4) {
            int rb = (int)(rows - r0 < 4 ? rows - r0 : 4);
            qk_table[bf][rb - 1](q + r0 * ldq, ldq, kj, ldk, dfull, tail, s + r0 * lds + j, lds);
        }
    }
    for (; j < n; j++) {
        const void *kj = at(k, j * ldk, bf);
        for (int64_t r = 0; r < rows; r++) {
            const float *qr = q + r * ldq;
            float32x4_t acc = vdupq_n_f32(0.0f);
            for (int64_t d = 0; d < dfull; d += 4)
                acc = vfmaq_f32(acc, vld1q_f32(qr + d), ld4(at(kj, d, bf), bf));
            if (tail)
                acc = vfmaq_f32(acc, vld1q_f32(qr + dfull), ld4_tail(at(kj, dfull, bf), tail, bf));
            s[r * lds + j] = vaddvq_f32(acc);
        }
    }
}

static void qk(int64_t rows, int64_t n, int64_t D, const float *q, int64_t ldq, const float *k,
               int64_t ldk, float *s, int64_t lds) {
    qk_any(rows, n, D, q, ldq, k, ldk, s, lds, 0);
}

static void qk_bf16(int64_t rows, int64_t n, int64_t D, const float *q, int64_t ldq,
                    const attn__bf16 *k, int64_t ldk, float *s, int64_t lds) {
    qk_any(rows, n, D, q, ldq, k, ldk, s, lds, 1);
}

/* o[r][0 .. 4 NV) = sum_j p[r][j] v[j][0 .. 4 NV) for r < RB, j in order (RB <= 4, NV <= 8
 * for one row, NV <= 4 for several); with tail (NV = 1), only the first tail values of each V
 * row are read (the vector's other lanes are 0).  Named accumulators, as in qk_blk. */
AI void pv_blk(const int RB, const int NV, int64_t tail, int64_t n, const float *p, int64_t ldp,
               const void *v, int64_t ldv, float *o, int64_t ldo, int bf) {
    const float32x4_t z = vdupq_n_f32(0.0f);
    float32x4_t c00 = z, c01 = z, c02 = z, c03 = z, c04 = z, c05 = z, c06 = z, c07 = z;
    float32x4_t c10 = z, c11 = z, c12 = z, c13 = z;
    float32x4_t c20 = z, c21 = z, c22 = z, c23 = z;
    float32x4_t c30 = z, c31 = z, c32 = z, c33 = z;
    for (int64_t j = 0; j < n; j++) {
        float32x4_t v0 = z, v1 = z, v2 = z, v3 = z, v4 = z, v5 = z, v6 = z, v7 = z;
        if (tail) v0 = ld4_tail(v, tail, bf);
        else {
            if (NV > 0) v0 = ld4(at(v, 0, bf), bf);
            if (NV > 1) v1 = ld4(at(v, 4, bf), bf);
            if (NV > 2) v2 = ld4(at(v, 8, bf), bf);
            if (NV > 3) v3 = ld4(at(v, 12, bf), bf);
            if (NV > 4) v4 = ld4(at(v, 16, bf), bf);
            if (NV > 5) v5 = ld4(at(v, 20, bf), bf);
            if (NV > 6) v6 = ld4(at(v, 24, bf), bf);
            if (NV > 7) v7 = ld4(at(v, 28, bf), bf);
        }
        if (RB > 0) {
            const float x = p[0 * ldp + j];
            if (NV > 0) c00 = vfmaq_n_f32(c00, v0, x);
            if (NV > 1) c01 = vfmaq_n_f32(c01, v1, x);
            if (NV > 2) c02 = vfmaq_n_f32(c02, v2, x);
            if (NV > 3) c03 = vfmaq_n_f32(c03, v3, x);
            if (NV > 4) c04 = vfmaq_n_f32(c04, v4, x);
            if (NV > 5) c05 = vfmaq_n_f32(c05, v5, x);
            if (NV > 6) c06 = vfmaq_n_f32(c06, v6, x);
            if (NV > 7) c07 = vfmaq_n_f32(c07, v7, x);
        }
        if (RB > 1) {
            const float x = p[1 * ldp + j];
            if (NV > 0) c10 = vfmaq_n_f32(c10, v0, x);
            if (NV > 1) c11 = vfmaq_n_f32(c11, v1, x);
            if (NV > 2) c12 = vfmaq_n_f32(c12, v2, x);
            if (NV > 3) c13 = vfmaq_n_f32(c13, v3, x);
        }
        if (RB > 2) {
            const float x = p[2 * ldp + j];
            if (NV > 0) c20 = vfmaq_n_f32(c20, v0, x);
            if (NV > 1) c21 = vfmaq_n_f32(c21, v1, x);
            if (NV > 2) c22 = vfmaq_n_f32(c22, v2, x);
            if (NV > 3) c23 = vfmaq_n_f32(c23, v3, x);
        }
        if (RB > 3) {
            const float x = p[3 * ldp + j];
            if (NV > 0) c30 = vfmaq_n_f32(c30, v0, x);
            if (NV > 1) c31 = vfmaq_n_f32(c31, v1, x);
            if (NV > 2) c32 = vfmaq_n_f32(c32, v2, x);
            if (NV > 3) c33 = vfmaq_n_f32(c33, v3, x);
        }
        v = at(v, ldv, bf);
    }
    if (RB > 0 && NV > 0) vst1q_f32(o + 0 * ldo + 0, c00);
    if (RB > 0 && NV > 1) vst1q_f32(o + 0 * ldo + 4, c01);
    if (RB > 0 && NV > 2) vst1q_f32(o + 0 * ldo + 8, c02);
    if (RB > 0 && NV > 3) vst1q_f32(o + 0 * ldo + 12, c03);
    if (RB > 0 && NV > 4) vst1q_f32(o + 0 * ldo + 16, c04);
    if (RB > 0 && NV > 5) vst1q_f32(o + 0 * ldo + 20, c05);
    if (RB > 0 && NV > 6) vst1q_f32(o + 0 * ldo + 24, c06);
    if (RB > 0 && NV > 7) vst1q_f32(o + 0 * ldo + 28, c07);
    if (RB > 1 && NV > 0) vst1q_f32(o + 1 * ldo + 0, c10);
    if (RB > 1 && NV > 1) vst1q_f32(o + 1 * ldo + 4, c11);
    if (RB > 1 && NV > 2) vst1q_f32(o + 1 * ldo + 8, c12);
    if (RB > 1 && NV > 3) vst1q_f32(o + 1 * ldo + 12, c13);
    if (RB > 2 && NV > 0) vst1q_f32(o + 2 * ldo + 0, c20);
    if (RB > 2 && NV > 1) vst1q_f32(o + 2 * ldo + 4, c21);
    if (RB > 2 && NV > 2) vst1q_f32(o + 2 * ldo + 8, c22);
    if (RB > 2 && NV > 3) vst1q_f32(o + 2 * ldo + 12, c23);
    if (RB > 3 && NV > 0) vst1q_f32(o + 3 * ldo + 0, c30);
    if (RB > 3 && NV > 1) vst1q_f32(o + 3 * ldo + 4, c31);
    if (RB > 3 && NV > 2) vst1q_f32(o + 3 * ldo + 8, c32);
    if (RB > 3 && NV > 3) vst1q_f32(o + 3 * ldo + 12, c33);
}

typedef void (*pv_fn)(int64_t, int64_t, const float *, int64_t, const void *, int64_t, float *,
                      int64_t);
#define PV_INST1(R, V, SUF, BF)                                                               \
    static void pv_##R##_##V##SUF(int64_t tail, int64_t n, const float *p, int64_t ldp,        \
                                  const void *v, int64_t ldv, float *o, int64_t ldo) {         \
        pv_blk(R, V, 0, n, p, ldp, v, ldv, o, ldo, BF);                                    \
    }
#define PV_INST(R, V) PV_INST1(R, V, , 0) PV_INST1(R, V, b, 1)
PV_INST(1, 1) PV_INST(1, 2) PV_INST(1, 3) PV_INST(1, 4)
PV_INST(1, 5) PV_INST(1, 6) PV_INST(1, 7) PV_INST(1, 8)
PV_INST(2, 1) PV_INST(2, 2) PV_INST(2, 3) PV_INST(2, 4)
PV_INST(3, 1) PV_INST(3, 2) PV_INST(3, 3) PV_INST(3, 4)
PV_INST(4, 1) PV_INST(4, 2) PV_INST(4, 3) PV_INST(4, 4)
/* the Dv tail: one vector, read lane by lane */
#define PVT_INST1(R, SUF, BF)                                                                 \
    static void pvt_##R##SUF(int64_t tail, int64_t n, const float *p, int64_t ldp,             \
                             const void *v, int64_t ldv, float *o, int64_t ldo) {              \
        pv_blk(R, 1, tail, n, p, ldp, v, ldv, o, ldo, BF);                                     \
    }
PVT_INST1(1, , 0) PVT_INST1(2, , 0) PVT_INST1(3, , 0) PVT_INST1(4, , 0)
PVT_INST1(1, b, 1) PVT_INST1(2, b, 1) PVT_INST1(3, b, 1) PVT_INST1(4, b, 1)

/* [bf][rows - 1][nv - 1] */
#define PV_TABLE(S)                                                                           \
    {{pv_1_1##S, pv_1_2##S, pv_1_3##S, pv_1_4##S, pv_1_5##S, pv_1_6##S, pv_1_7##S, pv_1_8##S}, \
     {pv_2_1##S, pv_2_2##S, pv_2_3##S, pv_2_4##S, NULL, NULL, NULL, NULL},                     \
     {pv_3_1##S, pv_3_2##S, pv_3_3##S, pv_3_4##S, NULL, NULL, NULL, NULL},                     \
     {pv_4_1##S, pv_4_2##S, pv_4_3##S, pv_4_4##S, NULL, NULL, NULL, NULL}}
static const pv_fn pv_table[2][4][8] = {PV_TABLE(), PV_TABLE(b)};
static const pv_fn pvt_table[2][4] = {{pvt_1, pvt_2, pvt_3, pvt_4},
                                      {pvt_1b, pvt_2b, pvt_3b, pvt_4b}};

static void pv_any(int64_t rows, int64_t n, int64_t Dv, const float *p, int64_t ldp,
                   const void *v, int64_t ldv, float *o, int64_t ldo, int bf) {
    int64_t nfull = Dv / 4, tail = Dv - 4 * nfull;
    /* one row: blocks of 8 vectors (32 values); several rows: 4 rows of at most 4 vectors */
    int bw = rows == 1 ? 8 : 4;
    for (int64_t e0 = 0; e0 < nfull; e0 += bw) {
        int nv = (int)(nfull - e0 < bw ? nfull - e0 : bw);
        for (int64_t r0 = 0; r0 < rows; r0 += 4) {
            int rb = (int)(rows - r0 < 4 ? rows - r0 : 4);
            pv_table[bf][rb - 1][nv - 1](0, n, p + r0 * ldp, ldp, at(v, 4 * e0, bf), ldv,
                                         o + r0 * ldo + 4 * e0, ldo);
        }
    }
    if (tail)
        for (int64_t r0 = 0; r0 < rows; r0 += 4) {
            int rb = (int)(rows - r0 < 4 ? rows - r0 : 4);
            pvt_table[bf][rb - 1](tail, n, p + r0 * ldp, ldp, at(v, 4 * nfull, bf), ldv,
                                  o + r0 * ldo + 4 * nfull, ldo);
        }
}

static void pv(int64_t rows, int64_t n, int64_t Dv, const float *p, int64_t ldp, const float *v,
               int64_t ldv, float *o, int64_t ldo) {
    pv_any(rows, n, Dv, p, ldp, v, ldv, o, ldo, 0);
}

static void pv_bf16(int64_t rows, int64_t n, int64_t Dv, const float *p, int64_t ldp,
                    const attn__bf16 *v, int64_t ldv, float *o, int64_t ldo) {
    pv_any(rows, n, Dv, p, ldp, v, ldv, o, ldo, 1);
}

static const attn__decode_kernels kernels = {3 /* ATTN__ISA_NEON */, qk, pv, qk_bf16, pv_bf16};

const attn__decode_kernels *attn__decode_kernels_neon(void) { return &kernels; }

#else
const attn__decode_kernels *attn__decode_kernels_neon(void) { return NULL; }
#endif
