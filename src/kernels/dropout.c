/* The dropout stream for the fast kernels (kernels.h attn__dropout_row_c / _simd): the same
 * bits as attn_dropout_keep.  Eight Philox blocks at a time with AVX-512 (the version of the
 * AVX-512 kernel set, dispatch.c), else one block (four elements) at a time in plain C.  Both
 * draw the identical mask. */
#include "kernels.h"

/* x86_avx512/dropout_avx512.c: returns 0 when not compiled with AVX-512. */
ATTN__HIDDEN int attn__dropout_row_avx512(uint64_t seed, uint64_t offset, uint64_t idx,
                                          int64_t n, float p, float scale, float *out);

void attn__dropout_row_c(uint64_t seed, uint64_t offset, uint64_t idx, int64_t n, float p,
                         float scale, float *out) {
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    int64_t j = 0;
    while (j < n) {
        uint64_t blk = idx >> 2;
        uint32_t ctr[4] = {(uint32_t)blk, (uint32_t)(blk >> 32), (uint32_t)offset,
                           (uint32_t)(offset >> 32)},
                 r[4];
        attn__philox(ctr, key, r);
        for (unsigned lane = (unsigned)(idx & 3); lane < 4 && j < n; lane++, j++, idx++) {
            float u = (float)(r[lane] >> 8) * (1.0f / 16777216.0f);
            out[j] = u >= p ? scale : 0.0f;
        }
    }
}

void attn__dropout_row_simd(uint64_t seed, uint64_t offset, uint64_t idx, int64_t n, float p,
                            float scale, float *out) {
    /* rows of fewer than 32 elements are not worth the setup */
    if (n >= 32 && attn__dropout_row_avx512(seed, offset, idx, n, p, scale, out)) return;
    attn__dropout_row_c(seed, offset, idx, n, p, scale, out);
}
