/* The dropout stream for the fast kernels (kernels.h attn__dropout_row): the same bits as
 * attn_dropout_keep.  Eight Philox blocks at a time with AVX-512 where the CPU has it, else
 * one block (four elements) at a time in plain C.  Both draw the identical mask. */
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

void attn__dropout_row(uint64_t seed, uint64_t offset, uint64_t idx, int64_t n, float p,
                       float scale, float *out) {
#if defined(__GNUC__) && defined(__x86_64__)
    /* the instruction set only changes speed, never the bits, so no context is needed */
    if (n >= 32 && __builtin_cpu_supports("avx512f") &&
        attn__dropout_row_avx512(seed, offset, idx, n, p, scale, out))
        return;
#endif
    attn__dropout_row_c(seed, offset, idx, n, p, scale, out);
}
