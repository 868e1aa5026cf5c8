/* BERT's BasicTokenizer + WordPiece: text -> token ids (see wordpiece.h).  What the Hugging
 * Face tokenizers library's BertNormalizer, BertPreTokenizer and WordPiece model do, as
 * sentence-transformers runs them; attn_bert_load in attn.h states the limits of the tables. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wordpiece.h"

/* ---- vocabulary ----------------------------------------------------------------------------- */
static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

int32_t attn__wp_find(const attn__wordpiece *wp, const char *s, size_t n) {
    uint64_t i = hash_bytes(s, n) & (wp->tcap - 1);
    for (;;) {
        int32_t id = wp->table[i];
        if (id < 0) return -1;
        const char *t = wp->text + wp->off[id];
        if (strlen(t) == n && !memcmp(t, s, n)) return id;
        i = (i + 1) & (wp->tcap - 1);
    }
}

attn_status attn__wp_index(attn_ctx *ctx, attn__wordpiece *wp, size_t len, const char *path) {
    int64_t n = 0;
    for (size_t i = 0; i < len; i++) {
        /* a NUL would cut a token short in the NUL-separated table */
        ATTN_FAIL_IF(!wp->text[i], ctx, ATTN_E_FORMAT, "%s: line %lld holds a NUL byte", path,
                     (long long)n + 1);
        n += wp->text[i] == '\n';
    }
    if (len && wp->text[len - 1] != '\n') n++;
    ATTN_FAIL_IF(n == 0, ctx, ATTN_E_FORMAT, "%s is empty", path);
    ATTN_FAIL_IF(n > attn_ctx_limit(ctx, ATTN_LIMIT_VOCAB), ctx, ATTN_E_UNSUPPORTED,
                 "%s has %lld lines, over ATTN_LIMIT_VOCAB (%lld)", path, (long long)n,
                 (long long)attn_ctx_limit(ctx, ATTN_LIMIT_VOCAB));
    wp->off = attn__malloc(ctx, (size_t)n * sizeof *wp->off);
    wp->tcap = 16;
    while (wp->tcap < (uint64_t)n * 2) wp->tcap *= 2;
    wp->table = attn__malloc(ctx, wp->tcap * sizeof *wp->table);
    ATTN_FAIL_IF(!wp->off || !wp->table, ctx, ATTN_E_NOMEM, "out of memory (vocabulary)");
    memset(wp->table, 0xff, wp->tcap * sizeof *wp->table);
    wp->nvocab = n;
    size_t start = 0;
    for (int64_t id = 0; id < n; id++) {
        size_t e = start;
        while (e < len && wp->text[e] != '\n') e++;
        size_t te = e;
        if (te > start && wp->text[te - 1] == '\r') te--;
        wp->text[te] = 0;
        if (e < len) wp->text[e] = 0;
        wp->off[id] = (int64_t)start;
        size_t tl = te - start;
        if (attn__wp_find(wp, wp->text + start, tl) < 0) { /* first occurrence wins, as HF */
            uint64_t i = hash_bytes(wp->text + start, tl) & (wp->tcap - 1);
            while (wp->table[i] >= 0) i = (i + 1) & (wp->tcap - 1);
            wp->table[i] = (int32_t)id;
        }
        start = e + 1;
    }
    return ATTN_OK;
}

void attn__wp_release(attn__wordpiece *wp, attn_free_fn free_fn, void *user) {
    if (wp->text) free_fn(user, wp->text);
    if (wp->off) free_fn(user, wp->off);
    if (wp->table) free_fn(user, wp->table);
    memset(wp, 0, sizeof *wp);
}

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
static int is_punct(uint32_t c) { return in_ranges(c, punct_ranges, NR(punct_ranges)); }
static int is_split(uint32_t c) { return in_ranges(c, split_ranges, NR(split_ranges)); }
static int is_cjk(uint32_t c) { return in_ranges(c, cjk_ranges, NR(cjk_ranges)); }

/* Decodes one UTF-8 sequence at s[0, n); invalid bytes give U+FFFD one byte at a time. */
static uint32_t utf8_next(const unsigned char *s, size_t n, size_t *adv) {
    unsigned char c = s[0];
    *adv = 1;
    if (c < 0x80) return c;
    int len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? (c <= 0xEF ? 3 : 0) : c >= 0xC2 ? 2 : 0;
    if (!len || (size_t)len > n) return 0xFFFD;
    uint32_t cp = c & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0xFFFD;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0xFFFD;
    *adv = (size_t)len;
    return cp;
}

static size_t utf8_put(uint32_t c, char *o) {
    if (c < 0x80) return o[0] = (char)c, 1;
    if (c < 0x800) return o[0] = (char)(0xC0 | c >> 6), o[1] = (char)(0x80 | (c & 0x3F)), 2;
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | c >> 12), o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | c >> 18), o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F)), o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

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

/* ---- tokenizer ------------------------------------------------------------------------------ */
typedef struct tok_out {
    int32_t *ids;
    int64_t n, cap; /* cap: content tokens allowed (max_seq_length - 2) */
} tok_out;

static void emit(tok_out *t, int32_t id) {
    if (t->n < t->cap) t->ids[t->n] = id;
    t->n++;
}

/* WordPiece of one word w[0, n) (code points); buf has room for 4 * n + 3 bytes. */
static void wordpiece(const attn__wordpiece *wp, const uint32_t *w, size_t n, char *buf,
                      size_t *pos, tok_out *t) {
    if (n == 0) return;
    if (n > 100) {
        emit(t, wp->unk);
        return;
    }
    size_t nb = 0;
    for (size_t i = 0; i < n; i++) {
        pos[i] = nb;
        nb += utf8_put(w[i], buf + nb);
    }
    pos[n] = nb;
    int64_t first = t->n;
    size_t start = 0;
    char sub[4 * 100 + 3];
    while (start < n) {
        int32_t id = -1;
        size_t end = n;
        for (; end > start; end--) {
            size_t len = pos[end] - pos[start], o = 0;
            if (start > 0) sub[o++] = '#', sub[o++] = '#';
            memcpy(sub + o, buf + pos[start], len);
            id = attn__wp_find(wp, sub, len + o);
            if (id >= 0) break;
        }
        if (id < 0) {
            t->n = first;
            emit(t, wp->unk);
            return;
        }
        emit(t, id);
        start = end;
    }
}

/* Content token ids of text (no [CLS]/[SEP]); t->n may exceed t->cap (truncated). */
static attn_status tokenize(attn_ctx *ctx, const attn__wordpiece *wp, const attn__wp_opts *o,
                            const char *text, tok_out *t) {
    size_t len = strlen(text);
    size_t cap = 16 * len + 8; /* NFD (4) x lower (4) per code point, bounded */
    uint32_t *cp = attn__malloc(ctx, cap * sizeof *cp);
    uint32_t *word = attn__malloc(ctx, cap * sizeof *word);
    size_t *pos = attn__malloc(ctx, (cap + 1) * sizeof *pos);
    char *buf = attn__malloc(ctx, 4 * cap + 8);
    if (!cp || !word || !pos || !buf) {
        attn__free(ctx, cp), attn__free(ctx, word), attn__free(ctx, pos), attn__free(ctx, buf);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (tokenizer)");
    }
    /* clean: drop NUL, U+FFFD and controls; whitespace -> ' '; CJK -> ' ' c ' ' */
    size_t n = 0;
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        size_t adv;
        uint32_t c = utf8_next(s + i, len - i, &adv);
        i += adv;
        if (c == 0 || c == 0xFFFD || is_control(c)) continue;
        if (is_ws(c)) cp[n++] = ' ';
        else if (o->chinese && is_cjk(c)) {
            cp[n++] = ' ';
            cp[n++] = c;
            cp[n++] = ' ';
        } else cp[n++] = c;
    }
    int lower = o->lower, strip = o->strip_accents;
    int do_strip = lower ? strip != 0 : strip == 1;
    for (size_t i = 0; i < n && t->n < t->cap;) {
        if (cp[i] == ' ') {
            i++;
            continue;
        }
        size_t j = i, wn = 0;
        while (j < n && cp[j] != ' ') j++;
        /* normalise the whitespace token: strip accents, then lower-case */
        for (size_t k = i; k < j; k++) {
            uint32_t a[4], l[4];
            int na = do_strip ? strip_accent(cp[k], a) : (a[0] = cp[k], 1);
            for (int x = 0; x < na; x++) {
                int nl = lower ? to_lower(a[x], l) : (l[0] = a[x], 1);
                for (int y = 0; y < nl; y++) word[wn++] = l[y];
            }
        }
        /* split on punctuation, WordPiece each piece */
        size_t ps = 0;
        for (size_t k = 0; k <= wn && t->n < t->cap; k++) {
            int sp = k < wn && is_split(word[k]);
            if (k == wn || sp || is_punct(word[k])) {
                wordpiece(wp, word + ps, k - ps, buf, pos, t);
                if (k < wn && !sp) wordpiece(wp, word + k, 1, buf, pos, t);
                ps = k + 1;
            }
        }
        i = j;
    }
    attn__free(ctx, cp), attn__free(ctx, word), attn__free(ctx, pos), attn__free(ctx, buf);
    return ATTN_OK;
}

attn_status attn__wp_tokenize(attn_ctx *ctx, const attn__wordpiece *wp, const attn__wp_opts *o,
                              const char *text, int32_t *ids, int64_t cap, int64_t *n) {
    tok_out t = {ids, 0, cap};
    attn_status st = tokenize(ctx, wp, o, text, &t);
    *n = t.n;
    return st;
}
