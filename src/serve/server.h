/* The server's scheduling rules that tests check directly (src/serve/server.c). */
#ifndef ATTN_SERVE_SERVER_H
#define ATTN_SERVE_SERVER_H
#include <stdint.h>

#include "internal.h"
#include "../kernels/decode.h"
#include "../kernels/quant.h"

/* The fewest tokens of a prefill call that runs every row as a long prompt's prefill does:
 * the products on the GEMM path (more than ATTN__QMV_ROWS rows), attention on the fused
 * kernels (more than ATTN__DECODE_MAX_L queries). */
#define ATTN__SERVE_MIN_PIECE                                                                 \
    ((ATTN__QMV_ROWS > ATTN__DECODE_MAX_L ? ATTN__QMV_ROWS : ATTN__DECODE_MAX_L) + 1)

/* The next prefill call's number of tokens, rem > 0 left in the prompt and calls of at most
 * chunk >= 2 ATTN__SERVE_MIN_PIECE tokens: chunk, or rem when it fits, and never a call of
 * fewer than ATTN__SERVE_MIN_PIECE tokens when rem is more, so that the prompt's rows get the
 * bits of the one-shot prefill. */
ATTN__HIDDEN int64_t attn__serve_prefill_chunk(int64_t rem, int64_t chunk);

#endif
