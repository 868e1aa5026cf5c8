/* The library's random numbers: Philox-4x32-10 blocks (Salmon et al., "Parallel random numbers:
 * as easy as 1, 2, 3") and the dropout stream built on them.  Counter-based, so any element's
 * draw is a pure function of (seed, offset, index): the same bits for any thread count, in any
 * order.  Used by the dropout kernels (src/kernels/dropout.c and its AVX-512 twin, which produce
 * exactly these words), parameter initialisation (src/layers/module.c) and sampling
 * (src/models/llm_sample.c). */
#include "internal.h"

void attn__philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

int attn_dropout_keep(uint64_t seed, uint64_t offset, uint64_t index, float p) {
    if (!(p > 0.0f)) return 1;
    uint64_t blk = index >> 2;
    uint32_t ctr[4] = {(uint32_t)blk, (uint32_t)(blk >> 32), (uint32_t)offset,
                       (uint32_t)(offset >> 32)};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, out[4];
    attn__philox(ctr, key, out);
    float u = (float)(out[index & 3] >> 8) * (1.0f / 16777216.0f); /* [0, 1) on 24 bits */
    return u >= p;
}
