/* BERT's WordPiece tokenizer, its text side (see wordpiece.h): the BertNormalizer and
 * BertPreTokenizer of the Hugging Face tokenizers library, as sentence-transformers runs them,
 * one code point at a time, and attn_bpe_load_wordpiece, a BERT folder's vocab.txt and
 * tokenizer_config.json as transformers converts them.  The WordPiece model (greedy
 * longest-match with "##" continuations) runs in bpe.c, on the attn_bpe vocabulary. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/json.h"
#include "file.h"
#include "bpe.h"
#include "wordpiece.h"

/* ---- Unicode -------------------------------------------------------------------------------
 * The character classes and mappings of the Hugging Face tokenizers library's BertNormalizer
 * and BertPreTokenizer (what sentence-transformers runs), measured one code point at a time by
 * tools/gen_unicode_tables.py into unicode_tables.inc:
 *  - control_ranges: dropped by clean_text (categories Cc, Cf, Co, ... as that library has them);
 *  - ws_ranges: turned into ' ' by clean_text; split_ranges: where the pre-tokenizer splits;
 *  - cjk_ranges: ideographs padded with spaces (tokenize_chinese_chars);
 *  - punct_ranges: split off as single tokens (ASCII symbols and its category P);
 *  - lower_map / strip_map: lowercase and strip_accents (NFD, marks dropped) per code point;
 *    Hangul syllables decompose algorithmically.  The library strips accents before it
 *    lower-cases; so does this code.
 */
typedef struct range { uint32_t lo, hi; } range;
typedef struct cpmap { uint32_t cp, to[4]; } cpmap; /* to: up to 4 code points, 0-terminated */

#include "unicode_tables.inc"

#define NR(a) (sizeof(a) / sizeof((a)[0]))

static int in_ranges(uint32_t c, const range *r, size_t n) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < r[mid].lo) hi = mid;
        else if (c > r[mid].hi) lo = mid + 1;
        else return 1;
    }
    return 0;
}
static const cpmap *map_find(const cpmap *m, size_t n, uint32_t c) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < m[mid].cp) hi = mid;
        else if (c > m[mid].cp) lo = mid + 1;
        else return &m[mid];
    }
    return NULL;
}

static int is_ws(uint32_t c) { return in_ranges(c, ws_ranges, NR(ws_ranges)); }
static int is_control(uint32_t c) { return in_ranges(c, control_ranges, NR(control_ranges)); }
static int is_cjk(uint32_t c) { return in_ranges(c, cjk_ranges, NR(cjk_ranges)); }

/* Lower-casing of one code point (Rust's char::to_lowercase, no final-sigma rule); up to 4. */
static int to_lower(uint32_t c, uint32_t *o) {
    const cpmap *m = map_find(lower_map, NR(lower_map), c);
    if (!m) {
        o[0] = c;
        return 1;
    }
    int n = 0;
    while (n < 4 && m->to[n]) o[n] = m->to[n], n++;
    return n;
}

/* strip_accents: NFD with nonspacing marks removed; writes up to 4 code points (0: dropped). */
static int strip_accent(uint32_t c, uint32_t *o) {
    if (c >= 0xAC00 && c <= 0xD7A3) { /* Hangul syllable -> L V (T) */
        uint32_t s = c - 0xAC00;
        o[0] = 0x1100 + s / 588;
        o[1] = 0x1161 + (s % 588) / 28;
        if (s % 28) {
            o[2] = 0x11A7 + s % 28;
            return 3;
        }
        return 2;
    }
    const cpmap *m = map_find(strip_map, NR(strip_map), c);
    if (!m) {
        o[0] = c;
        return 1;
    }
    int n = 0;
    while (n < 4 && m->to[n]) o[n] = m->to[n], n++;
    return n; /* 0: a combining mark, dropped */
}

/* ---- the normalizer and the pre-tokenizer ------------------------------------------------- */
int attn__wp_is_split(uint32_t c) {
    if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
    return in_ranges(c, split_ranges, NR(split_ranges));
}

int attn__wp_is_punct(uint32_t c) { return in_ranges(c, punct_ranges, NR(punct_ranges)); }

/* strip_accents, then lowercase, of one code point: appended to out at *k */
static void strip_lower(const attn__wp_norm *o, uint32_t c, uint32_t *out, int *k) {
    uint32_t a[4], l[4];
    int na = o->strip ? strip_accent(c, a) : (a[0] = c, 1);
    for (int x = 0; x < na; x++) {
        int nl = o->lower ? to_lower(a[x], l) : (l[0] = a[x], 1);
        for (int y = 0; y < nl; y++) out[(*k)++] = l[y];
    }
}

int attn__wp_normalize(const attn__wp_norm *o, uint32_t c, uint32_t *out) {
    if (c < 0x80) { /* ASCII: the tables' answers, without the searches */
        if (o->clean) {
            if (c == '\t' || c == '\n' || c == '\r') c = ' ';
            else if (c < 0x20 || c == 0x7F) return 0;
        }
        out[0] = o->lower && c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
        return 1;
    }
    if (o->clean) {
        if (c == 0xFFFD || is_control(c)) return 0;
        if (is_ws(c)) {
            out[0] = ' ';
            return 1;
        }
    }
    int k = 0;
    if (o->chinese && is_cjk(c)) {
        out[k++] = ' ';
        strip_lower(o, c, out, &k);
        out[k++] = ' ';
        return k;
    }
    strip_lower(o, c, out, &k);
    return k;
}

/* ---- a BERT folder: vocab.txt and tokenizer_config.json -------------------------------------- */
/* A string, or an AddedToken object's string "content"; null leaves *s as it was (the
 * default).  Anything else is refused naming the key: a token must be text. */
static attn_status json_token(attn__json_reader *r, const char *key, const char **s) {
    attn__json_kind k;
    ATTN_TRY(attn__json_peek(r, &k));
    if (k == ATTN__JSON_NULL) return attn__json_null(r);
    if (k == ATTN__JSON_STRING) return attn__json_string(r, s, NULL);
    if (k != ATTN__JSON_OBJECT)
        return attn__fail(r->ctx, ATTN_E_FORMAT, "%s: %s must be a string or an object with a "
                          "string \"content\", found %s", r->what, key, attn__json_kind_name(k));
    const char *content = NULL;
    ATTN_TRY(attn__json_object_begin(r));
    for (;;) {
        int more;
        const char *mk;
        ATTN_TRY(attn__json_member(r, &more, &mk, NULL));
        if (!more) break;
        if (!strcmp(mk, "content")) {
            ATTN_TRY(attn__json_peek(r, &k));
            ATTN_FAIL_IF(k != ATTN__JSON_STRING, r->ctx, ATTN_E_FORMAT,
                         "%s: %s.content must be a string, found %s", r->what, key,
                         attn__json_kind_name(k));
            ATTN_TRY(attn__json_string(r, &content, NULL));
            continue;
        }
        ATTN_TRY(attn__json_skip(r));
    }
    ATTN_FAIL_IF(!content, r->ctx, ATTN_E_FORMAT, "%s: %s has no string \"content\"", r->what,
                 key);
    *s = content;
    return ATTN_OK;
}

enum { SP_UNK, SP_CLS, SP_SEP, SP_PAD, SP_MASK, SP_N };

/* tokenizer_config.json (absent: the defaults): the normalizer's options and the special
 * tokens' texts (strings in *pool, which the caller frees). */
static attn_status read_config(attn_ctx *ctx, const char *path, attn__wp_spec *s,
                               const char **tok, char **pool) {
    unsigned char *data = NULL;
    size_t len = 0;
    ATTN_TRY(attn__text_file_read(ctx, path, "tokenizer_config.json", 1, &data, &len));
    if (!data) return ATTN_OK;
    attn_status st;
    attn__json_reader r;
    st = attn__json_open(&r, ctx, data, len, "tokenizer_config.json", 0);
    if (st == ATTN_OK) st = attn__json_object_begin(&r);
    while (st == ATTN_OK) {
        int more;
        const char *key;
        if ((st = attn__json_member(&r, &more, &key, NULL)) || !more) break;
        if (!strcmp(key, "do_lower_case")) st = attn__json_flag(&r, &s->lower);
        else if (!strcmp(key, "strip_accents")) st = attn__json_flag(&r, &s->strip_accents);
        else if (!strcmp(key, "tokenize_chinese_chars")) st = attn__json_flag(&r, &s->chinese);
        else if (!strcmp(key, "unk_token")) st = json_token(&r, key, &tok[SP_UNK]);
        else if (!strcmp(key, "cls_token")) st = json_token(&r, key, &tok[SP_CLS]);
        else if (!strcmp(key, "sep_token")) st = json_token(&r, key, &tok[SP_SEP]);
        else if (!strcmp(key, "pad_token")) st = json_token(&r, key, &tok[SP_PAD]);
        else if (!strcmp(key, "mask_token")) st = json_token(&r, key, &tok[SP_MASK]);
        else if (!strcmp(key, "tokenizer_class")) {
            const char *c = NULL;
            attn__json_kind k;
            st = attn__json_peek(&r, &k);
            if (st == ATTN_OK && k == ATTN__JSON_STRING) {
                st = attn__json_string(&r, &c, NULL);
                if (st == ATTN_OK && !strstr(c, "Bert"))
                    st = attn__fail(ctx, ATTN_E_UNSUPPORTED,
                                    "%s: unsupported tokenizer_class \"%s\" (only BERT's "
                                    "WordPiece)", path, c);
            } else if (st == ATTN_OK) {
                st = attn__json_skip(&r);
            }
        } else st = attn__json_skip(&r);
    }
    if (st == ATTN_OK) st = attn__json_finish(&r);
    if (st == ATTN_OK) *pool = attn__json_take_pool(&r);
    attn__json_close(&r);
    attn__free(ctx, data);
    if (s->lower < 0) s->lower = 0;
    if (s->chinese < 0) s->chinese = 1;
    return st;
}

/* The id of the line t (the last line that is t, as the library's vocabulary), or -1. */
static int32_t line_id(char *const *tokens, const size_t *lens, int64_t n, const char *t) {
    size_t tl = strlen(t);
    for (int64_t i = n - 1; i >= 0; i--)
        if (lens[i] == tl && !memcmp(tokens[i], t, tl)) return (int32_t)i;
    return -1;
}

attn_status attn_bpe_load_wordpiece(attn_ctx *ctx, const char *dir, attn_bpe **out) {
    if (out) *out = NULL;
    if (!ctx || !dir || !out)
        return attn__fail(ctx, ATTN_E_INVALID, "attn_bpe_load_wordpiece: NULL argument");
    unsigned char *data = NULL;
    size_t len = 0;
    ATTN_TRY(attn__folder_text_read(ctx, dir, "vocab.txt", "the WordPiece vocabulary", &data,
                                    &len));
    char path[4096]; /* for messages: attn__folder_text_read checked that it fits */
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    attn_status st = ATTN_OK;
    char *text = (char *)data, **tokens = NULL, *pool = NULL;
    size_t *lens = NULL;
    unsigned char *types = NULL;
    /* one token a line ("\r\n" allowed) */
    int64_t n = 0, lim = attn_ctx_limit(ctx, ATTN_LIMIT_VOCAB);
    for (size_t i = 0; i < len; i++) {
        /* a NUL would cut a token short */
        if (!text[i]) {
            st = attn__fail(ctx, ATTN_E_FORMAT, "%s: line %lld holds a NUL byte", path,
                            (long long)n + 1);
            goto done;
        }
        n += text[i] == '\n';
    }
    if (len && text[len - 1] != '\n') n++;
    if (n == 0) {
        st = attn__fail(ctx, ATTN_E_FORMAT, "%s is empty", path);
        goto done;
    }
    if (n > lim) {
        st = attn__fail(ctx, ATTN_E_UNSUPPORTED, "%s has %lld lines, over ATTN_LIMIT_VOCAB "
                        "(%lld)", path, (long long)n, (long long)lim);
        goto done;
    }
    tokens = attn__malloc(ctx, (size_t)n * sizeof *tokens); /* n <= len + 1: no overflow */
    lens = attn__malloc(ctx, (size_t)n * sizeof *lens);
    types = attn__malloc(ctx, (size_t)n);
    if (!tokens || !lens || !types) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "out of memory (vocabulary)");
        goto done;
    }
    memset(types, ATTN_BPE_TOKEN_NORMAL, (size_t)n);
    size_t at = 0;
    for (int64_t id = 0; id < n; id++) {
        size_t e = at;
        while (e < len && text[e] != '\n') e++;
        size_t te = e;
        if (te > at && text[te - 1] == '\r') te--;
        tokens[id] = text + at;
        lens[id] = te - at;
        at = e + 1;
    }
    /* the options: BertTokenizer's defaults, then tokenizer_config.json's */
    attn__wp_spec s = {1, 1, 1, -1, 100, "##", 2, "##", 2, 1, -1, -1, -1};
    const char *tok[SP_N] = {"[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"};
    ATTN_FAIL_IF(snprintf(path, sizeof path, "%s/tokenizer_config.json", dir) >= (int)sizeof path,
                 ctx, ATTN_E_INVALID, "model folder path too long");
    if ((st = read_config(ctx, path, &s, tok, &pool))) goto done;
    int32_t id[SP_N];
    static const char *const role[SP_N] = {"unknown", "CLS", "SEP", "padding", "mask"};
    for (int i = 0; i < SP_N; i++) {
        id[i] = line_id(tokens, lens, n, tok[i]);
        if (id[i] < 0 && i != SP_MASK) { /* [MASK] is not needed to tokenize */
            st = attn__fail(ctx, ATTN_E_FORMAT, "%.300s/vocab.txt has no %s token \"%.64s\"",
                            dir, role[i], tok[i]);
            goto done;
        }
        /* the special tokens, as transformers' conversion adds them */
        if (id[i] >= 0) types[id[i]] = ATTN_BPE_TOKEN_CONTROL;
    }
    s.cls = id[SP_CLS], s.sep = id[SP_SEP], s.pad = id[SP_PAD];
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    st = attn__bpe_create_wp(ctx, (const char *const *)tokens, lens, n, types, id[SP_UNK], &s,
                             path, out);
done:
    attn__free(ctx, tokens), attn__free(ctx, lens), attn__free(ctx, types);
    attn__free(ctx, pool), attn__free(ctx, data);
    return st;
}
