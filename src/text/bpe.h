/* The tokenizer object attn_bpe (internal): what the tests and the other constructors reach
 * beyond attn.h's attn_bpe_*. */
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

/* A WordPiece tokenizer's settings (BERT's; tokenizer.json's BertNormalizer, WordPiece model
 * and WordPiece decoder, or a BERT folder's tokenizer_config.json). */
typedef struct attn__wp_spec {
    int clean, chinese, lower;  /* clean_text, handle_chinese_chars, lowercase: 0 / 1 */
    int strip_accents;          /* 1, 0, or -1: follows lower (the library's null) */
    int64_t max_chars;          /* max_input_chars_per_word: a longer word is the unknown token */
    const char *prefix;         /* continuing_subword_prefix ("##") */
    size_t nprefix;
    const char *dprefix;        /* the decoder's prefix ("##") and cleanup flag */
    size_t ndprefix;
    int cleanup;
    int32_t cls, sep, pad;      /* the ids the file names for them, or -1 */
} attn__wp_spec;

/* A WordPiece vocabulary: tokens[i] of lens[i] bytes (no NUL; a text listed twice is looked up
 * as its last id, as the library's vocabulary), types[i] ATTN_BPE_TOKEN_* (NULL: all normal;
 * control tokens are matched as added tokens on the raw text with ATTN_BPE_PARSE_SPECIAL), unk
 * the unknown token (required), s the settings (copied).  what names the source. */
ATTN__HIDDEN attn_status attn__bpe_create_wp(attn_ctx *ctx, const char *const *tokens,
                                             const size_t *lens, int64_t n_tokens,
                                             const unsigned char *types, int32_t unk,
                                             const attn__wp_spec *s, const char *what,
                                             attn_bpe **out);

/* attn_bpe_encode that may stop early: once cap ids are out, the rest of the text is not
 * tokenized and *n is at least cap (at most the full count).  For a caller that truncates
 * (attn_bert_tokenize). */
ATTN__HIDDEN attn_status attn__bpe_encode_upto(attn_ctx *ctx, const attn_bpe *b,
                                               const char *text, size_t len, unsigned flags,
                                               int32_t *ids, int64_t cap, int64_t *n);

#endif
