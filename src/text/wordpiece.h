/* BERT's WordPiece tokenizer, its text side (internal): the Hugging Face tokenizers library's
 * BertNormalizer and BertPreTokenizer one code point at a time, on the generated tables of
 * unicode_tables.inc, and the reader of a BERT folder's vocab.txt + tokenizer_config.json
 * (attn_bpe_load_wordpiece, attn.h).  The tokenizer object is attn_bpe's WordPiece kind
 * (bpe.c): attn_bpe_encode normalizes with attn__wp_normalize, cuts words at
 * attn__wp_is_split / attn__wp_is_punct and runs the greedy longest-match WordPiece model. */
#ifndef ATTN_TEXT_WORDPIECE_H
#define ATTN_TEXT_WORDPIECE_H

#include "internal.h"

/* BertNormalizer's options. */
typedef struct attn__wp_norm {
    int clean;   /* clean_text: NUL, U+FFFD and control characters dropped, whitespace -> ' ' */
    int chinese; /* handle_chinese_chars: a CJK ideograph c -> ' ' c ' ' */
    int strip;   /* strip_accents (resolved: the library's null follows lowercase) */
    int lower;   /* lowercase */
} attn__wp_norm;

/* The most code points one code point normalizes to: ' ' c ' ' with c decomposed (up to 4)
 * and each part lower-cased (up to 4). */
#define ATTN__WP_NORM_MAX 18

/* What BertNormalizer makes of code point c, in the library's order: clean_text, then the
 * CJK padding, then strip_accents (NFD, nonspacing marks dropped), then lowercase.  Writes
 * 0 to ATTN__WP_NORM_MAX code points to out; returns their count. */
ATTN__HIDDEN int attn__wp_normalize(const attn__wp_norm *o, uint32_t c, uint32_t *out);

/* BertPreTokenizer on normalized text: whitespace splits words (and is dropped); punctuation
 * (ASCII symbols and the library's category P) is a word of its own. */
ATTN__HIDDEN int attn__wp_is_split(uint32_t c);
ATTN__HIDDEN int attn__wp_is_punct(uint32_t c);

#endif
