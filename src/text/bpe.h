/* Byte-level BPE tokenizer (internal): what the tests reach beyond attn.h's attn_bpe_*. */
#ifndef ATTN_TEXT_BPE_H
#define ATTN_TEXT_BPE_H

#include "internal.h"

/* The pre-tokenizer named pre ("gpt2", "llama-bpe", "smollm") alone on text[0, len) (after the
 * U+FFFD replacement of invalid UTF-8; no added tokens): the byte offset, in that replaced
 * text, where each word ends.  *n is their count, the first min(*n, cap) are written. */
ATTN__HIDDEN attn_status attn__bpe_pretokens(attn_ctx *ctx, const char *pre, const char *text,
                                             size_t len, int64_t *ends, int64_t cap,
                                             int64_t *n);

#endif
