/* BERT's BasicTokenizer + WordPiece (internal): text -> token ids, knowing nothing of a model.
 * The vocabulary is one text of tokens, one a line, indexed by an open-addressing hash table;
 * the Unicode classes and mappings are the generated tables of unicode_tables.inc.  The BERT
 * loader (src/models/bert.c) reads vocab.txt and the tokenizer's options, then calls this. */
#ifndef ATTN_TEXT_WORDPIECE_H
#define ATTN_TEXT_WORDPIECE_H

#include "internal.h"

typedef struct attn__wordpiece {
    char *text;     /* tokens NUL-separated (vocab.txt's bytes, rewritten in place) */
    int64_t *off;   /* [nvocab] byte offset of each token */
    int64_t nvocab;
    int32_t *table; /* [tcap] id or -1 */
    uint64_t tcap;
    int32_t unk;    /* id of the unknown token (set by the caller once the vocabulary is in) */
} attn__wordpiece;

/* The normaliser's options (tokenizer_config.json): do_lower_case; strip_accents 1, 0 or -1
 * (unset: follows do_lower_case); tokenize_chinese_chars (pad CJK ideographs with spaces). */
typedef struct attn__wp_opts {
    int lower, strip_accents, chinese;
} attn__wp_opts;

/* Indexes wp->text[0, len) (allocated on ctx; wp owns it from now on, also on failure): one token
 * a line, "\r\n" allowed, the first occurrence of a duplicate wins.  Refuses NUL bytes, an empty
 * file and more lines than ATTN_LIMIT_VOCAB; path names the file in messages. */
ATTN__HIDDEN attn_status attn__wp_index(attn_ctx *ctx, attn__wordpiece *wp, size_t len,
                                        const char *path);

/* The id of token s[0, n), or -1. */
ATTN__HIDDEN int32_t attn__wp_find(const attn__wordpiece *wp, const char *s, size_t n);

/* The content token ids of text (no [CLS]/[SEP]) into ids[0, cap); *n is the full count, which
 * may exceed cap (the text was truncated; tokenising stops soon after cap). */
ATTN__HIDDEN attn_status attn__wp_tokenize(attn_ctx *ctx, const attn__wordpiece *wp,
                                           const attn__wp_opts *o, const char *text,
                                           int32_t *ids, int64_t cap, int64_t *n);

/* Frees what wp holds with the given hook (the allocator that made it) and clears it. */
ATTN__HIDDEN void attn__wp_release(attn__wordpiece *wp, attn_free_fn free_fn, void *user);

#endif
