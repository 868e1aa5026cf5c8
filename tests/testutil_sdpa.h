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

/* The rows-alone problem of test_flash and test_flash_bf16: H = 2 heads, L = 161 queries,
 * S = 1100 keys (past the short-key forward: key-tile groups involved), D = 64, q, k, v
 * random in [-2, 2], [-2, 2], [-1, 1] ([1, H, L|S, D] contiguous); o and o1 receive the whole
 * problem's and the last rows' outputs.  tu_rows_alone_lasts: how many last rows to run alone. */
enum { TU_RA_H = 2, TU_RA_L = 161, TU_RA_S = 1100, TU_RA_D = 64, TU_RA_NL = 3 };
extern const int tu_rows_alone_lasts[TU_RA_NL];
typedef struct tu_rows_alone {
    float *q, *k, *v, *o, *o1;
} tu_rows_alone;
void tu_rows_alone_init(tu_rows_alone *r);
void tu_rows_alone_free(tu_rows_alone *r);
/* 1 when o1 (the last n rows of each head run alone) differs in any bit from those rows of o */
int tu_rows_alone_differ(const tu_rows_alone *r, int64_t n);
#endif
