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

/* A SentencePiece BPE vocabulary (a GGUF file's tokenizer.ggml.model "llama"): tokens[i] of
 * lens[i] bytes, gguf_types (NULL: all normal) as GGUF numbers them (1 normal, 2 unknown,
 * 3 control, 4 user-defined, 5 unused, 6 byte), add_prefix: a U+2581 before the text, unk: the
 * unknown piece or -1.  Pairs merge in the order of the merged piece's id (docs/bpe.md).  what
 * names the source. */
ATTN__HIDDEN attn_status attn__bpe_create_spm(attn_ctx *ctx, const char *const *tokens,
                                              const size_t *lens, int64_t n_tokens,
                                              const int32_t *gguf_types, int add_prefix,
                                              int32_t unk, const char *what, attn_bpe **out);

#endif
