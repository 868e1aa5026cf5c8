/* Test helpers that know the kernel layer's structures (src/kernels/kernels.h); defined in
 * testutil.c beside the public ones. */
#ifndef ATTN_TESTUTIL_SDPA_H
#define ATTN_TESTUTIL_SDPA_H
#include "../src/kernels/kernels.h"
#include "testutil.h"

/* Fills a->mask[0..1] and a->mask_ncols with mask configuration cfg for a problem
 * [B, H, L, S]; *fbuf and *bbuf receive the float and byte buffers (the caller frees them).
 * Configurations: 0 none; 1 KEEP [L, S]; 2 ADD [B, H, L, S] + BLOCK key padding [B, 1, 1, S] in slot 1;
 * 3 ADD [1, H, 1, S] with -inf entries; 4 KEEP [B, 1, L, S] with every third row fully masked
 * and mask_ncols = S - 2; 5 BLOCK [L, S] stored transposed (stride[3] = L); 6 KEEP [S] in
 * slot 1 plus ADD [L, 1] broadcast over keys; 7 BLOCK key padding [B, 1, 1, S] with every key
 * of batch 0 blocked (fully masked rows); 8 KEEP [B, 1, L, S] with rows fully masked. */
void tu_sdpa_masks(int cfg, int64_t B, int64_t H, int64_t L, int64_t S, attn__sdpa_args *a,
                   uint64_t *rs, float **fbuf, unsigned char **bbuf);

/* *a for one batch of H heads, L queries and S keys of size D (Dv = D), q, k, v and o
 * contiguous [1, H, L|S, D], the given causal mode and scale; the rest zero (no mask, window,
 * dropout or lse; a->q, k, v, o left NULL). */
void tu_sdpa_args_bhld(attn__sdpa_args *a, int64_t H, int64_t L, int64_t S, int64_t D,
                       attn_causal causal, float scale);
#endif
