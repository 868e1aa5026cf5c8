/* The dropout stream for the fast kernels (kernels.h attn__dropout_row): the same bits as
 * attn_dropout_keep, one Philox-4x32-10 block per four consecutive elements. */
#include "kernels.h"

void attn__dropout_row(uint64_t seed, uint64_t offset, uint64_t idx, int64_t n, float p,
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
