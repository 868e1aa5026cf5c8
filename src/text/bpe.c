/* The tokenizer object attn_bpe: byte-level BPE, SentencePiece BPE and WordPiece (attn.h
 * "Tokenizer: byte-level BPE, SentencePiece BPE and WordPiece"; docs/bpe.md says what each
 * kind does and where it differs from the Hugging Face tokenizers library it follows).  The
 * WordPiece kind's normalizer and pre-tokenizer classes and its folder reader are in
 * wordpiece.c; its model (wp_word), added tokens and decoder here.
 *
 * Encoding a text (byte-level BPE; the SentencePiece and WordPiece kinds differ at 3 and 4):
 *   1. invalid UTF-8 becomes U+FFFD, one per maximal invalid subpart (Python's
 *      bytes.decode('utf-8', errors='replace'));
 *   2. added tokens are split off, leftmost-longest, in two passes as the library does: first
 *      the tokens matched on the raw text (normalized=false), then, in the gaps, the others
 *      (with no normalizer the text is the same); control tokens are taken only with
 *      ATTN_BPE_PARSE_SPECIAL, but a control token's match still covers its span;
 *   3. each gap is pre-tokenized by the hand-written matcher of one of three patterns
 *      (GPT-2, Llama 3, SmolLM's digits-then-GPT-2), on classes measured from the library
 *      (bpe_tables.inc, tools/gen_bpe_tables.py);
 *   4. each pre-token's bytes are symbols (the vocabulary ids of their GPT-2 byte characters),
 *      merged lowest rank first, leftmost among equal ranks, with a binary heap of candidate
 *      pairs that are checked when they come out (the library's algorithm, so the same ids even
 *      when a merge list is not in training order).
 * A built attn_bpe is never written again: calls only read it (each call's scratch memory
 * comes from its context), so threads may share one. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/json.h"
#include "file.h"
#include "utf8.h"
#include "bpe.h"
#include "wordpiece.h"

enum { PRE_GPT2 = 0, PRE_LLAMA3 = 1, PRE_SMOLLM = 2, PRE_QWEN2 = 3,
       PRE_SPM = 4 /* SentencePiece BPE */, PRE_WORDPIECE = 5 /* BERT's WordPiece */ };
/* GGUF's tokenizer.ggml.pre names (the last two: attn_bpe_info's names of SentencePiece BPE
 * and WordPiece) */
static const char *const pre_names[6] = {"gpt2", "llama-bpe", "smollm", "qwen2",
                                         "sentencepiece", "wordpiece"};

/* ---- Unicode classes ------------------------------------------------------------------------- */
enum { C_L = 1, C_N = 2, C_S = 4, C_D = 8 };
typedef struct crange {
    uint32_t lo, hi;
    unsigned char bits;
} crange;
typedef struct cfold {
    uint32_t cp;
    char letter;
} cfold;

#include "bpe_tables.inc"

#define NR(a) (sizeof(a) / sizeof((a)[0]))

static unsigned cls_of(uint32_t c) {
    if (c < 256) return cls_latin1[c];
    size_t lo = 0, hi = NR(cls_ranges);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < cls_ranges[mid].lo) hi = mid;
        else if (c > cls_ranges[mid].hi) lo = mid + 1;
        else return cls_ranges[mid].bits;
    }
    return 0;
}

/* The letter a contraction's (?i:...) sees in c (ASCII either case, and the measured extras),
 * or 0. */
static int fold_letter(uint32_t c) {
    if (c >= 'A' && c <= 'Z') return (int)(c - 'A' + 'a');
    if (c < 0x80) return (int)c;
    for (size_t i = 0; i < NR(fold_extra); i++)
        if (fold_extra[i].cp == c) return fold_extra[i].letter;
    return 0;
}

/* ---- UTF-8 ----------------------------------------------------------------------------------- */

/* The code point at s[i] of well-formed UTF-8; *next: the byte after it. */
static uint32_t u8_at(const unsigned char *s, size_t i, size_t *next) {
    uint32_t c = s[i];
    if (c < 0x80) {
        *next = i + 1;
        return c;
    }
    if (c < 0xE0) {
        *next = i + 2;
        return (c & 0x1F) << 6 | (s[i + 1] & 0x3Fu);
    }
    if (c < 0xF0) {
        *next = i + 3;
        return (c & 0x0F) << 12 | (s[i + 1] & 0x3Fu) << 6 | (s[i + 2] & 0x3Fu);
    }
    *next = i + 4;
    return (c & 0x07) << 18 | (s[i + 1] & 0x3Fu) << 12 | (s[i + 2] & 0x3Fu) << 6 |
           (s[i + 3] & 0x3Fu);
}


static unsigned cls_at(const unsigned char *s, size_t i, size_t *next) {
    return cls_of(u8_at(s, i, next));
}

/* ---- the tokenizer --------------------------------------------------------------------------- */
typedef struct skey {
    const char *p;
    size_t n;
} skey;

typedef struct mslot {
    uint64_t key; /* a << 32 | b, or UINT64_MAX when empty */
    uint32_t rank;
    int32_t id;
} mslot;

typedef struct tnode {
    int32_t child, sib; /* first child, next sibling (-1: none) */
    int32_t id[2];      /* token ending here, matched in pass 0 (raw) or 1 (normalised); -1 */
    unsigned char c, special[2];
} tnode;

struct attn_bpe {
    attn_free_fn free;
    void *alloc_user;
    int64_t n;            /* ids 0 .. n-1 */
    char *arena;          /* the tokens' texts, each followed by a NUL */
    skey *key;            /* [n] text of each id (into arena) */
    unsigned char *dec;   /* the bytes each token decodes to, back to back */
    size_t *doff;         /* [n + 1] */
    unsigned char *type;  /* [n] ATTN_BPE_TOKEN_* */
    int32_t *vtab;        /* [vmask + 1] open addressing: id or -1 */
    uint64_t vmask;
    mslot *mtab;          /* [mmask + 1] merges: pair -> rank, id */
    uint64_t mmask;
    int64_t nmerges;
    tnode *trie;          /* added tokens; node 0 is the root */
    int32_t root[256];    /* the root's child for each first byte, or -1 */
    int has_norm;         /* some added token is matched in pass 1 */
    int64_t nadded;
    int32_t byte_id[256]; /* id of each byte's character, or -1 */
    uint16_t b2u[256];    /* GPT-2's byte -> character map */
    int pre, ignore_merges, fuse_unk;
    int32_t unk;          /* -1: bytes without a token are dropped */
    size_t max_dec;       /* longest decoded token */
    /* SentencePiece BPE (pre == PRE_SPM): pieces merged by id, spaces as U+2581 */
    int32_t byte_tok[256];/* the <0xNN> byte-fallback piece of each byte, or -1 */
    int add_prefix;       /* a U+2581 before the text (tokenizer.ggml.add_space_prefix); and
                           * decoding drops the space at the text's start */
    /* WordPiece (pre == PRE_WORDPIECE) */
    attn__wp_norm wn;     /* the normalizer */
    attn__wp_spec wps;    /* the settings as given (prefix, dprefix: the copies below) */
    char *wprefix;        /* continuing_subword_prefix, then the decoder's prefix */
    unsigned char *dec2;  /* the bytes each token decodes to after the first token */
    size_t *doff2;        /* [n + 1] */
    size_t maxkey;        /* the longest token text */
};

static void bfree(const attn_bpe *b, void *p) {
    if (p) b->free(b->alloc_user, p);
}

void attn_bpe_free(attn_bpe *b) {
    if (!b) return;
    bfree(b, b->arena), bfree(b, b->key), bfree(b, b->dec), bfree(b, b->doff);
    bfree(b, b->type), bfree(b, b->vtab), bfree(b, b->mtab), bfree(b, b->trie);
    bfree(b, b->wprefix), bfree(b, b->dec2), bfree(b, b->doff2);
    b->free(b->alloc_user, b);
}

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}
static uint64_t hash_pair(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    return k ^ (k >> 33);
}

/* Open-addressing string table over keys[]: slot[] holds indexes or -1. */
static int32_t stab_find(const int32_t *slot, uint64_t mask, const skey *keys, const char *s,
                         size_t n) {
    for (uint64_t i = hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        int32_t id = slot[i];
        if (id < 0) return -1;
        if (keys[id].n == n && !memcmp(keys[id].p, s, n)) return id;
    }
}
/* Inserts id (keys[id]); an equal key's slot is taken over (the last one wins).  Returns the
 * index it replaced, or -1. */
static int32_t stab_put(int32_t *slot, uint64_t mask, const skey *keys, int32_t id) {
    for (uint64_t i = hash_bytes(keys[id].p, keys[id].n) & mask;; i = (i + 1) & mask) {
        int32_t o = slot[i];
        if (o < 0 || (keys[o].n == keys[id].n && !memcmp(keys[o].p, keys[id].p, keys[id].n))) {
            slot[i] = id;
            return o;
        }
    }
}
/* A table of 2^k >= 2n slots, all -1. */
static int32_t *stab_new(attn_ctx *ctx, int64_t n, uint64_t *mask) {
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2) cap *= 2;
    size_t bytes;
    if (!attn__mul_size((size_t)cap, sizeof(int32_t), &bytes)) return NULL;
    int32_t *t = attn__malloc(ctx, bytes);
    if (t) memset(t, 0xff, bytes);
    *mask = cap - 1;
    return t;
}

static int merge_find(const attn_bpe *b, int32_t x, int32_t y, uint32_t *rank, int32_t *id) {
    uint64_t key = (uint64_t)(uint32_t)x << 32 | (uint32_t)y;
    for (uint64_t i = hash_pair(key) & b->mmask;; i = (i + 1) & b->mmask) {
        const mslot *m = &b->mtab[i];
        if (m->key == UINT64_MAX) return 0;
        if (m->key == key) {
            *rank = m->rank;
            *id = m->id;
            return 1;
        }
    }
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes are themselves, the other 68 bytes take
 * U+0100.. in byte order (space is U+0120 'Ġ', newline U+010A 'Ċ'). */
static void byte_map(uint16_t *b2u) {
    unsigned n = 0;
    for (unsigned c = 0; c < 256; c++) {
        int keep = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE);
        b2u[c] = (uint16_t)(keep ? c : 256 + n++);
    }
}
#define BPE_ALPHA 324 /* the characters of the map are below U+0144 */

/* The UTF-8 of byte c's character into o; returns its length (1 or 2). */
static size_t byte_char(const attn_bpe *b, unsigned char c, char *o) {
    unsigned u = b->b2u[c];
    if (u < 0x80) {
        o[0] = (char)u;
        return 1;
    }
    o[0] = (char)(0xC0 | u >> 6);
    o[1] = (char)(0x80 | (u & 0x3F));
    return 2;
}

/* What the ByteLevel decoder makes of one token: its characters' bytes when every character is
 * in the map, else the token's own bytes.  Writes at most n bytes to o; returns the count. */
static size_t token_bytes(const int16_t *u2b, const char *t, size_t n, unsigned char *o) {
    const unsigned char *s = (const unsigned char *)t;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t bad;
        int cut;
        size_t l = attn__utf8_check(s + i, n - i, &bad, &cut);
        size_t nx;
        uint32_t c = l ? u8_at(s, i, &nx) : 0;
        if (!l || c >= BPE_ALPHA || u2b[c] < 0) {
            memcpy(o, t, n);
            return n;
        }
        o[k++] = (unsigned char)u2b[c];
        i = nx;
    }
    return k;
}

/* ---- building -------------------------------------------------------------------------------- */
/* A SentencePiece byte-fallback piece (GGUF token type 6) in a spec's type array; stored as a
 * normal token. */
#define BPE_TYPE_BYTE 6
static int is_added(unsigned char t) {
    return t == ATTN_BPE_TOKEN_CONTROL || t == ATTN_BPE_TOKEN_USER_DEFINED;
}

/* "<0xNN>" (two upper-case hex digits): the byte, else -1. */
static int byte_piece(const char *t, size_t n) {
    if (n != 6 || memcmp(t, "<0x", 3) != 0 || t[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = t[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* What SentencePiece's decoding makes of a piece: U+2581 as a space, a byte piece as its byte,
 * anything else as it is.  Writes at most n bytes to o; returns the count. */
static size_t spm_piece_bytes(const char *t, size_t n, int is_byte, unsigned char *o) {
    int v = is_byte ? byte_piece(t, n) : -1;
    if (v >= 0) {
        o[0] = (unsigned char)v;
        return 1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && !memcmp(t + i, "\xE2\x96\x81", 3)) {
            o[k++] = ' ';
            i += 3;
        } else {
            o[k++] = (unsigned char)t[i++];
        }
    }
    return k;
}

typedef struct mpair {
    skey a, b;
} mpair;

/* What both constructors hand to build(). */
typedef struct bspec {
    const char *what; /* names the source in messages */
    int64_t n;
    const skey *tok;            /* [n] token texts (no NUL inside) */
    const unsigned char *type;  /* [n] ATTN_BPE_TOKEN_*: control and user-defined are added */
    const unsigned char *norm;  /* [n] or NULL: 1 = an added token matched in pass 1 */
    int64_t nm;
    const mpair *m;
    int pre, ignore_merges, fuse_unk;
    int32_t unk;
    int add_prefix; /* PRE_SPM */
    const attn__wp_spec *wp; /* PRE_WORDPIECE */
} bspec;

/* ---- WordPiece -------------------------------------------------------------------------------
 * The decoder's cleanup (the library's, on each token's text once the prefix rule is applied):
 * these replacements in this order, each of every occurrence, left to right. */
static const char *const wp_clean[11][2] = {
    {" .", "."},   {" ?", "?"},     {" !", "!"},           {" ,", ","},
    {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},         {" do not", " don't"},
    {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};

/* o[0, n) cleaned up in place (no replacement lengthens it); tmp: n bytes.  Returns the new
 * length. */
static size_t wp_cleanup(char *o, size_t n, char *tmp) {
    for (int r = 0; r < 11; r++) {
        const char *a = wp_clean[r][0], *z = wp_clean[r][1];
        size_t la = strlen(a), lz = strlen(z), k = 0;
        for (size_t i = 0; i < n;) {
            if (i + la <= n && !memcmp(o + i, a, la)) {
                memcpy(tmp + k, z, lz);
                k += lz, i += la;
            } else {
                tmp[k++] = o[i++];
            }
        }
        memcpy(o, tmp, k);
        n = k;
    }
    return n;
}

/* What the WordPiece decoder makes of token t[0, n): first (the first token of a text) the
 * token as it is; after it, the token without the decoder's prefix when it starts with it,
 * else a space and the token; then the cleanup when the decoder asks for it.  o has room for
 * n + 1 bytes, tmp too.  Returns the length. */
static size_t wp_piece(const attn_bpe *b, const char *t, size_t n, int first, char *o,
                       char *tmp) {
    const char *dp = b->wps.dprefix;
    size_t np = b->wps.ndprefix, k = 0;
    if (first) {
        memcpy(o, t, n), k = n;
    } else if (n >= np && !memcmp(t, dp, np)) {
        memcpy(o, t + np, n - np), k = n - np;
    } else {
        o[0] = ' ';
        memcpy(o + 1, t, n), k = n + 1;
    }
    return b->wps.cleanup ? wp_cleanup(o, k, tmp) : k;
}

/* BertNormalizer's output for valid UTF-8 s[0, n) into o (NULL: counted only); returns its
 * length in bytes. */
static size_t wp_normalize_text(const attn__wp_norm *wn, const unsigned char *s, size_t n,
                                unsigned char *o) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c = u8_at(s, i, &i), cp[ATTN__WP_NORM_MAX];
        int m = attn__wp_normalize(wn, c, cp);
        for (int j = 0; j < m; j++) {
            char u[4];
            size_t l = attn__utf8_put(cp[j], (unsigned char *)u);
            if (o) memcpy(o + k, u, l);
            k += l;
        }
    }
    return k;
}

static attn_status trie_add(attn_ctx *ctx, attn_bpe *b, size_t *nnodes, const skey *t,
                            int32_t id, int pass, int special, const char *what) {
    ATTN_FAIL_IF(!attn__json_utf8_valid(t->p, t->n), ctx, ATTN_E_FORMAT,
                 "%s: added token %d is not valid UTF-8", what, (int)id);
    int32_t node = 0;
    for (size_t i = 0; i < t->n; i++) {
        unsigned char c = (unsigned char)t->p[i];
        int32_t k = node == 0 ? b->root[c] : b->trie[node].child;
        if (node != 0)
            while (k >= 0 && b->trie[k].c != c) k = b->trie[k].sib;
        if (k < 0) {
            k = (int32_t)(*nnodes)++;
            tnode *nd = &b->trie[k];
            nd->child = -1, nd->id[0] = nd->id[1] = -1, nd->c = c;
            nd->special[0] = nd->special[1] = 0;
            if (node == 0) {
                nd->sib = -1;
                b->root[c] = k;
            } else {
                nd->sib = b->trie[node].child;
                b->trie[node].child = k;
            }
        }
        node = k;
    }
    b->trie[node].id[pass] = id; /* a repeated text: the last id wins, as in the vocabulary */
    b->trie[node].special[pass] = (unsigned char)special;
    return ATTN_OK;
}

static attn_status build(attn_ctx *ctx, const bspec *s, attn_bpe **out) {
    const char *what = s->what;
    int64_t lim = attn_ctx_limit(ctx, ATTN_LIMIT_VOCAB);
    ATTN_FAIL_IF(s->n < 1, ctx, ATTN_E_FORMAT, "%s: empty vocabulary", what);
    ATTN_FAIL_IF(s->n > lim || s->n > INT32_MAX, ctx, ATTN_E_UNSUPPORTED,
                 "%s: %lld tokens, over ATTN_LIMIT_VOCAB (%lld)", what, (long long)s->n,
                 (long long)lim);
    ATTN_FAIL_IF(s->nm > lim || s->nm >= INT32_MAX, ctx, ATTN_E_UNSUPPORTED,
                 "%s: %lld merges, over ATTN_LIMIT_VOCAB (%lld)", what, (long long)s->nm,
                 (long long)lim);
    attn_bpe *b = attn__calloc(ctx, 1, sizeof *b);
    ATTN_FAIL_IF(!b, ctx, ATTN_E_NOMEM, "out of memory (tokenizer)");
    b->free = ctx->free;
    b->alloc_user = ctx->alloc_user;
    b->n = s->n;
    b->pre = s->pre;
    b->add_prefix = s->add_prefix;
    b->ignore_merges = s->ignore_merges;
    b->fuse_unk = s->fuse_unk;
    b->unk = s->unk;
    b->nmerges = s->nm;
    byte_map(b->b2u);
    attn_status st = ATTN_OK;
    int wp = s->pre == PRE_WORDPIECE;
    skey *tkey = NULL;   /* WordPiece: the trie's spelling of the normalized added tokens */
    char *nkeys = NULL;  /* (their bytes) */
    char *scratch = NULL;
    if (wp) { /* the settings; the two prefixes copied */
        const attn__wp_spec *w = s->wp;
        int strip = w->strip_accents < 0 ? w->lower : w->strip_accents;
        b->wps = *w;
        b->wn.clean = w->clean != 0, b->wn.chinese = w->chinese != 0;
        b->wn.strip = strip != 0, b->wn.lower = w->lower != 0;
        size_t np;
        if (!attn__add_size(w->nprefix, w->ndprefix, &np) || !attn__add_size(np, 1, &np)) {
            st = attn__fail(ctx, ATTN_E_OVERFLOW, "%s: the prefixes' size overflows", what);
            goto done;
        }
        if (!(b->wprefix = attn__malloc(ctx, np))) {
            st = attn__fail(ctx, ATTN_E_NOMEM, "out of memory (tokenizer)");
            goto done;
        }
        if (w->nprefix) memcpy(b->wprefix, w->prefix, w->nprefix);
        if (w->ndprefix) memcpy(b->wprefix + w->nprefix, w->dprefix, w->ndprefix);
        b->wps.prefix = b->wprefix;
        b->wps.dprefix = b->wprefix + w->nprefix;
    }
    size_t n = (size_t)s->n, total = 0, added_bytes = 0, maxlen = 0, nkbytes = 0;
    for (size_t i = 0; i < n; i++) {
        if (!attn__add_size(total, s->tok[i].n, &total) || !attn__add_size(total, 1, &total)) {
            st = attn__fail(ctx, ATTN_E_OVERFLOW, "%s: the tokens' size overflows", what);
            goto done;
        }
        if (s->tok[i].n > maxlen) maxlen = s->tok[i].n;
        if (is_added(s->type[i]) && s->tok[i].n) {
            size_t k = s->tok[i].n;
            if (wp && s->norm && s->norm[i]) { /* matched on the normalized text, normalized */
                if (!attn__json_utf8_valid(s->tok[i].p, s->tok[i].n)) {
                    st = attn__fail(ctx, ATTN_E_FORMAT, "%s: added token %lld is not valid "
                                    "UTF-8", what, (long long)i);
                    goto done;
                }
                /* a byte normalizes to at most 4 * ATTN__WP_NORM_MAX bytes */
                if (k > SIZE_MAX / (4 * ATTN__WP_NORM_MAX) ||
                    !attn__add_size(nkbytes,
                                    k = wp_normalize_text(&b->wn, (const unsigned char *)
                                                          s->tok[i].p, k, NULL),
                                    &nkbytes)) {
                    st = attn__fail(ctx, ATTN_E_OVERFLOW, "%s: the tokens' size overflows",
                                    what);
                    goto done;
                }
            }
            if (!attn__add_size(added_bytes, k, &added_bytes)) {
                st = attn__fail(ctx, ATTN_E_OVERFLOW, "%s: the tokens' size overflows", what);
                goto done;
            }
            b->nadded++;
        }
    }
    size_t nodes, nn = 1, ksz, dsz, tsz;
    if (!attn__add_size(added_bytes, 1, &nodes) || !attn__mul_size(n, sizeof *b->key, &ksz) ||
        !attn__mul_size(n + 1, sizeof(size_t), &dsz) ||
        !attn__mul_size(nodes, sizeof *b->trie, &tsz)) {
        st = attn__fail(ctx, ATTN_E_OVERFLOW, "%s: the vocabulary's size overflows", what);
        goto done;
    }
    b->arena = attn__malloc(ctx, total);
    b->key = attn__malloc(ctx, ksz);
    /* a token never decodes to more bytes than it has (WordPiece's after the first: one more,
     * a space, and the arena counts a NUL per token) */
    b->dec = attn__malloc(ctx, total);
    b->doff = attn__malloc(ctx, dsz);
    b->type = attn__malloc(ctx, n);
    b->trie = attn__malloc(ctx, tsz);
    b->vtab = stab_new(ctx, s->n, &b->vmask);
    if (wp) {
        b->dec2 = attn__malloc(ctx, total);
        b->doff2 = attn__malloc(ctx, dsz);
        scratch = attn__malloc(ctx, total); /* maxlen + 1 <= total */
        if (nkbytes) {
            nkeys = attn__malloc(ctx, nkbytes);
            tkey = attn__calloc(ctx, n, sizeof *tkey);
        }
    }
    if (!b->arena || !b->key || !b->dec || !b->doff || !b->type || !b->trie || !b->vtab ||
        (wp && (!b->dec2 || !b->doff2 || !scratch || (nkbytes && (!nkeys || !tkey))))) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "out of memory (vocabulary of %lld tokens)",
                        (long long)s->n);
        goto done;
    }
    /* texts, the table, decoded bytes */
    int16_t u2b[BPE_ALPHA];
    for (int c = 0; c < BPE_ALPHA; c++) u2b[c] = -1;
    for (int c = 0; c < 256; c++) u2b[b->b2u[c]] = (int16_t)c;
    size_t at = 0, dat = 0, dat2 = 0, nat = 0;
    b->maxkey = maxlen;
    for (size_t i = 0; i < n; i++) {
        const skey *t = &s->tok[i];
        memcpy(b->arena + at, t->p, t->n);
        b->arena[at + t->n] = 0;
        b->key[i].p = b->arena + at;
        b->key[i].n = t->n;
        at += t->n + 1;
        stab_put(b->vtab, b->vmask, b->key, (int32_t)i);
        b->doff[i] = dat;
        size_t k;
        if (s->pre == PRE_SPM) {
            k = spm_piece_bytes(t->p, t->n, s->type[i] == BPE_TYPE_BYTE, b->dec + dat);
        } else if (wp) { /* the first token's form, and the form after it */
            k = wp_piece(b, t->p, t->n, 1, (char *)b->dec + dat, scratch);
            b->doff2[i] = dat2;
            size_t k2 = wp_piece(b, t->p, t->n, 0, (char *)b->dec2 + dat2, scratch);
            if (k2 > b->max_dec) b->max_dec = k2;
            dat2 += k2;
        } else {
            k = token_bytes(u2b, t->p, t->n, b->dec + dat);
        }
        if (k > b->max_dec) b->max_dec = k;
        dat += k;
        b->type[i] = is_added(s->type[i]) ? s->type[i] : ATTN_BPE_TOKEN_NORMAL;
        if (tkey && is_added(s->type[i]) && t->n && s->norm[i]) {
            tkey[i].p = nkeys + nat;
            tkey[i].n = wp_normalize_text(&b->wn, (const unsigned char *)t->p, t->n,
                                          (unsigned char *)nkeys + nat);
            nat += tkey[i].n;
        }
    }
    b->doff[n] = dat;
    if (wp) b->doff2[n] = dat2;
    /* added tokens: the trie */
    for (int c = 0; c < 256; c++) b->root[c] = -1;
    b->trie[0].child = b->trie[0].sib = -1;
    b->trie[0].id[0] = b->trie[0].id[1] = -1;
    for (size_t i = 0; i < n; i++) {
        int pass = s->norm && s->norm[i];
        const skey *t = tkey && pass ? &tkey[i] : &s->tok[i];
        if (!is_added(s->type[i]) || !s->tok[i].n || !t->n) continue;
        b->has_norm |= pass;
        ATTN_TRYG(trie_add(ctx, b, &nn, t, (int32_t)i, pass,
                           s->type[i] == ATTN_BPE_TOKEN_CONTROL, what));
    }
    if (wp) goto done; /* no byte pieces, no merges */
    if (s->pre == PRE_SPM) { /* the byte pieces; no merge list */
        for (int c = 0; c < 256; c++) b->byte_tok[c] = -1;
        for (size_t i = 0; i < n; i++) {
            int v = s->type[i] == BPE_TYPE_BYTE ? byte_piece(s->tok[i].p, s->tok[i].n) : -1;
            if (v >= 0 && b->byte_tok[v] < 0) b->byte_tok[v] = (int32_t)i;
        }
        goto done;
    }
    /* the bytes' symbols */
    for (int c = 0; c < 256; c++) {
        char ch[2];
        size_t l = byte_char(b, (unsigned char)c, ch);
        b->byte_id[c] = stab_find(b->vtab, b->vmask, b->key, ch, l);
    }
    /* merges: (a, b) -> rank, id of a + b; a later repeat of a pair replaces the earlier */
    {
        uint64_t cap = 16;
        while (cap < (uint64_t)s->nm * 2) cap *= 2;
        size_t msz;
        char *cat = NULL;
        if (!attn__mul_size((size_t)cap, sizeof *b->mtab, &msz) ||
            !attn__mul_size(maxlen, 2, &ksz)) {
            st = attn__fail(ctx, ATTN_E_OVERFLOW, "%s: the merges' size overflows", what);
            goto done;
        }
        b->mtab = attn__malloc(ctx, msz);
        cat = attn__malloc(ctx, ksz);
        if (!b->mtab || !cat) {
            attn__free(ctx, cat);
            st = attn__fail(ctx, ATTN_E_NOMEM, "out of memory (%lld merges)", (long long)s->nm);
            goto done;
        }
        for (uint64_t i = 0; i <= cap - 1; i++) b->mtab[i].key = UINT64_MAX;
        b->mmask = cap - 1;
        for (int64_t r = 0; r < s->nm && st == ATTN_OK; r++) {
            const mpair *m = &s->m[r];
            int32_t x = stab_find(b->vtab, b->vmask, b->key, m->a.p, m->a.n);
            int32_t y = stab_find(b->vtab, b->vmask, b->key, m->b.p, m->b.n);
            int32_t z = -1;
            if (x >= 0 && y >= 0 && m->a.n <= maxlen && m->b.n <= maxlen) {
                memcpy(cat, m->a.p, m->a.n);
                memcpy(cat + m->a.n, m->b.p, m->b.n);
                z = stab_find(b->vtab, b->vmask, b->key, cat, m->a.n + m->b.n);
            }
            if (z < 0) { /* (the halves of an "a b" string are not NUL-terminated) */
                const skey *w = x < 0 ? &m->a : y < 0 ? &m->b : NULL;
                int la = m->a.n < 40 ? (int)m->a.n : 40, lb = m->b.n < 40 ? (int)m->b.n : 40;
                if (w)
                    st = attn__fail(ctx, ATTN_E_FORMAT, "%s: merge %lld (\"%.*s %.*s\") names "
                                    "\"%.*s\", which is not in the vocabulary", what,
                                    (long long)r, la, m->a.p, lb, m->b.p, w == &m->a ? la : lb,
                                    w->p);
                else
                    st = attn__fail(ctx, ATTN_E_FORMAT, "%s: merge %lld (\"%.*s %.*s\") makes "
                                    "a token that is not in the vocabulary", what, (long long)r,
                                    la, m->a.p, lb, m->b.p);
                break;
            }
            uint64_t key = (uint64_t)(uint32_t)x << 32 | (uint32_t)y;
            uint64_t j = hash_pair(key) & b->mmask;
            while (b->mtab[j].key != UINT64_MAX && b->mtab[j].key != key)
                j = (j + 1) & b->mmask;
            b->mtab[j].key = key;
            b->mtab[j].rank = (uint32_t)r;
            b->mtab[j].id = z;
        }
        attn__free(ctx, cat);
    }
done:
    attn__free(ctx, tkey), attn__free(ctx, nkeys), attn__free(ctx, scratch);
    if (st != ATTN_OK) {
        attn_bpe_free(b);
        return st;
    }
    *out = b;
    return ATTN_OK;
}

static int pre_from_name(const char *pre) {
    for (int i = 0; i < PRE_SPM; i++)
        if (!strcmp(pre, pre_names[i])) return i;
    return -1;
}

attn_status attn_bpe_create(attn_ctx *ctx, const char *const *tokens, int64_t n_tokens,
                            const int32_t *token_types, const char *const *merges,
                            int64_t n_merges, const char *pre, attn_bpe **out) {
    if (out) *out = NULL;
    if (!ctx || !out || !pre || !tokens || n_tokens < 1 || n_merges < 0 ||
        (n_merges > 0 && !merges))
        return attn__fail(ctx, ATTN_E_INVALID, "attn_bpe_create: NULL argument or no tokens");
    int p = pre_from_name(pre);
    ATTN_FAIL_IF(p < 0, ctx, ATTN_E_UNSUPPORTED,
                 "attn_bpe_create: unsupported pre-tokenizer \"%.64s\" (supported: gpt2, "
                 "llama-bpe, smollm)", pre);
    int64_t lim = attn_ctx_limit(ctx, ATTN_LIMIT_VOCAB);
    ATTN_FAIL_IF(n_tokens > lim || n_merges > lim, ctx, ATTN_E_UNSUPPORTED,
                 "attn_bpe_create: %lld tokens and %lld merges, over ATTN_LIMIT_VOCAB (%lld)",
                 (long long)n_tokens, (long long)n_merges, (long long)lim);
    for (int64_t i = 0; i < n_tokens; i++)
        ATTN_FAIL_IF(!tokens[i], ctx, ATTN_E_INVALID, "attn_bpe_create: token %lld is NULL",
                     (long long)i);
    for (int64_t i = 0; i < n_merges; i++)
        ATTN_FAIL_IF(!merges[i], ctx, ATTN_E_INVALID, "attn_bpe_create: merge %lld is NULL",
                     (long long)i);
    skey *tok = attn__calloc(ctx, (size_t)n_tokens + 1, sizeof *tok);
    unsigned char *type = attn__malloc(ctx, (size_t)n_tokens + 1);
    mpair *m = attn__calloc(ctx, (size_t)n_merges + 1, sizeof *m);
    attn_status st = ATTN_OK;
    if (!tok || !type || !m) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "out of memory (tokenizer)");
        goto done;
    }
    for (int64_t i = 0; i < n_tokens; i++) {
        tok[i].p = tokens[i];
        tok[i].n = strlen(tokens[i]);
        int t = token_types ? token_types[i] : ATTN_BPE_TOKEN_NORMAL;
        type[i] = t == ATTN_BPE_TOKEN_CONTROL || t == ATTN_BPE_TOKEN_USER_DEFINED
                      ? (unsigned char)t
                      : ATTN_BPE_TOKEN_NORMAL;
    }
    for (int64_t i = 0; i < n_merges; i++) {
        const char *s = merges[i], *sp = strchr(s, ' ');
        if (!sp || sp == s || !sp[1] || strchr(sp + 1, ' ')) {
            st = attn__fail(ctx, ATTN_E_FORMAT, "attn_bpe_create: merge %lld (\"%.64s\") is not "
                            "two tokens separated by one space", (long long)i, s);
            goto done;
        }
        m[i].a.p = s, m[i].a.n = (size_t)(sp - s);
        m[i].b.p = sp + 1, m[i].b.n = strlen(sp + 1);
    }
    bspec spec = {"attn_bpe_create", n_tokens, tok, type, NULL, n_merges, m, p,
                  p == PRE_LLAMA3, 0, -1, 0, NULL};
    st = build(ctx, &spec, out);
done:
    attn__free(ctx, tok), attn__free(ctx, type), attn__free(ctx, m);
    return st;
}

attn_status attn__bpe_create_spm(attn_ctx *ctx, const char *const *tokens, const size_t *lens,
                                 int64_t n_tokens, const int32_t *gguf_types, int add_prefix,
                                 int32_t unk, const char *what, attn_bpe **out) {
    if (out) *out = NULL;
    if (!ctx || !out || !tokens || !lens || n_tokens < 1)
        return attn__fail(ctx, ATTN_E_INVALID, "attn__bpe_create_spm: NULL argument or no tokens");
    int64_t lim = attn_ctx_limit(ctx, ATTN_LIMIT_VOCAB);
    ATTN_FAIL_IF(n_tokens > lim, ctx, ATTN_E_UNSUPPORTED,
                 "%s: %lld tokens, over ATTN_LIMIT_VOCAB (%lld)", what, (long long)n_tokens,
                 (long long)lim);
    ATTN_FAIL_IF(unk >= n_tokens, ctx, ATTN_E_FORMAT, "%s: the unknown token %d is not in the "
                 "vocabulary of %lld", what, (int)unk, (long long)n_tokens);
    skey *tok = attn__calloc(ctx, (size_t)n_tokens, sizeof *tok);
    unsigned char *type = attn__malloc(ctx, (size_t)n_tokens);
    char *spelled = NULL; /* user-defined pieces with spaces, spelled with U+2581 */
    size_t extra = 0, at = 0;
    attn_status st = ATTN_OK;
    if (!tok || !type) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "out of memory (tokenizer)");
        goto done;
    }
    for (int64_t i = 0; i < n_tokens; i++)
        if (gguf_types && gguf_types[i] == 4 && memchr(tokens[i], ' ', lens[i]))
            extra += 3 * lens[i]; /* <= 3 x the tokens' bytes: no overflow */
    if (extra && !(spelled = attn__malloc(ctx, extra))) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "out of memory (tokenizer)");
        goto done;
    }
    for (int64_t i = 0; i < n_tokens; i++) {
        tok[i].p = tokens[i], tok[i].n = lens[i];
        if (gguf_types && gguf_types[i] == 4 && memchr(tokens[i], ' ', lens[i])) {
            /* as Hugging Face converts them (Gemma's runs of 2 to 31 spaces): pieces of the
             * vocabulary, spelled as the normalizer writes the text, reached by merges (a run
             * of 32 spaces is 16 + 16, not 31 + 1); not added tokens */
            char *w = spelled + at;
            size_t k = 0;
            for (size_t j = 0; j < lens[i]; j++) {
                if (tokens[i][j] == ' ') memcpy(w + k, "\xE2\x96\x81", 3), k += 3;
                else w[k++] = tokens[i][j];
            }
            tok[i].p = w, tok[i].n = k, at += k;
            type[i] = ATTN_BPE_TOKEN_NORMAL;
            continue;
        }
        /* GGUF: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte; the unknown
         * and unused pieces are special as in SentencePiece (decoding may skip them) */
        int t = gguf_types ? gguf_types[i] : 1;
        type[i] = t == 2 || t == 3 || t == 5 ? ATTN_BPE_TOKEN_CONTROL
                  : t == 4                  ? ATTN_BPE_TOKEN_USER_DEFINED
                  : t == 6                  ? BPE_TYPE_BYTE
                                            : ATTN_BPE_TOKEN_NORMAL;
    }
    bspec spec = {what, n_tokens, tok, type, NULL, 0, NULL, PRE_SPM, 0, 1, unk, add_prefix,
                  NULL};
    st = build(ctx, &spec, out);
done:
    attn__free(ctx, tok), attn__free(ctx, type), attn__free(ctx, spelled);
    return st;
}

attn_status attn__bpe_create_wp(attn_ctx *ctx, const char *const *tokens, const size_t *lens,
                                int64_t n_tokens, const unsigned char *types, int32_t unk,
                                const attn__wp_spec *w, const char *what, attn_bpe **out) {
    if (out) *out = NULL;
    if (!ctx || !out || !tokens || !lens || !w || !what || n_tokens < 1 ||
        (w->nprefix && !w->prefix) || (w->ndprefix && !w->dprefix) || w->max_chars < 0)
        return attn__fail(ctx, ATTN_E_INVALID, "attn__bpe_create_wp: bad argument");
    int64_t lim = attn_ctx_limit(ctx, ATTN_LIMIT_VOCAB);
    ATTN_FAIL_IF(n_tokens > lim, ctx, ATTN_E_UNSUPPORTED,
                 "%s: %lld tokens, over ATTN_LIMIT_VOCAB (%lld)", what, (long long)n_tokens,
                 (long long)lim);
    ATTN_FAIL_IF(unk < 0 || unk >= n_tokens, ctx, ATTN_E_FORMAT,
                 "%s: the unknown token %d is not in the vocabulary of %lld", what, (int)unk,
                 (long long)n_tokens);
    skey *tok = attn__calloc(ctx, (size_t)n_tokens, sizeof *tok);
    unsigned char *type = attn__malloc(ctx, (size_t)n_tokens);
    attn_status st = ATTN_OK;
    if (!tok || !type) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "out of memory (tokenizer)");
        goto done;
    }
    for (int64_t i = 0; i < n_tokens; i++) {
        if (memchr(tokens[i], 0, lens[i])) {
            st = attn__fail(ctx, ATTN_E_FORMAT, "%s: token %lld holds a NUL byte", what,
                            (long long)i);
            goto done;
        }
        tok[i].p = tokens[i], tok[i].n = lens[i];
        int t = types ? types[i] : ATTN_BPE_TOKEN_NORMAL;
        type[i] = t == ATTN_BPE_TOKEN_CONTROL || t == ATTN_BPE_TOKEN_USER_DEFINED
                      ? (unsigned char)t
                      : ATTN_BPE_TOKEN_NORMAL;
    }
    bspec spec = {what, n_tokens, tok, type, NULL, 0, NULL, PRE_WORDPIECE, 0, 0, unk, 0, w};
    st = build(ctx, &spec, out);
done:
    attn__free(ctx, tok), attn__free(ctx, type);
    return st;
}

/* ---- tokenizer.json -------------------------------------------------------------------------- */
typedef struct jvocab {
    skey k;
    int64_t id;
} jvocab;
typedef struct jadded {
    skey k;
    int64_t id;
    int special, normalized, lstrip, rstrip, single_word;
} jadded;

/* One pre-tokenizer object as read (Sequence members are read into their own). */
typedef struct jpre {
    char type[24];
    int aps, use_regex, individual, invert; /* -1: absent */
    int isolated;                           /* behavior "Isolated" */
    int pattern; /* 0 absent, 1 GPT-2's regex, 2 Llama 3's, 4 Qwen2's, 3 other */
} jpre;

#define PRE_MAX 4
typedef struct jload {
    attn_ctx *ctx;
    const char *path;
    jvocab *v;
    size_t nv, vcap;
    jadded *a;
    size_t na, acap;
    mpair *m;
    size_t nm, mcap;
    int have_model, have_vocab, fuse_unk, ignore_merges, have_pre, have_dec;
    skey unk;
    int have_unk;
    jpre top, pre[PRE_MAX]; /* the pre_tokenizer object; a Sequence's members */
    int npre, pre_seq;
    /* what is checked once the model's type is known (the keys come in any order) */
    int mtype;               /* MT_* */
    skey mtype_name;
    int byte_fallback, dropout;
    int csp_state, eows_state; /* continuing_subword_prefix, end_of_word_suffix: 0 absent,
                                * 1 null, 2 a string (csp, eows) */
    skey csp, eows;
    int64_t max_chars;       /* max_input_chars_per_word, or -1 */
    int norm;                /* NORM_* */
    int n_clean, n_chinese, n_strip, n_lower; /* BertNormalizer's (n_strip -1: null) */
    int dec;                 /* DEC_* */
    skey dprefix;
    int have_dprefix, dcleanup;
    skey pp_cls, pp_sep;     /* the post-processor's tokens around a text */
    int have_pp_cls, have_pp_sep;
    int64_t pad_id;          /* padding's pad_id, or -1 */
} jload;

enum { MT_BPE = 0, MT_WORDPIECE = 1, MT_OTHER = 2 };
enum { NORM_NULL = 0, NORM_NFC = 1, NORM_BERT = 2 };
enum { DEC_BYTELEVEL = 0, DEC_WORDPIECE = 1 };

static const char GPT2_RE[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
                              "\\s+(?!\\S)|\\s+";
static const char LLAMA3_RE[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                                "\\s+(?!\\S)|\\s+";
/* Qwen2's (Qwen2.5, Qwen3): Llama 3's with one digit at a time */
static const char QWEN2_RE[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                               "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                               "\\s+(?!\\S)|\\s+";

static attn_status jkind(jload *L, attn__json_reader *r, attn__json_kind want, const char *key) {
    attn__json_kind k;
    ATTN_TRY(attn__json_peek(r, &k));
    ATTN_FAIL_IF(k != want, L->ctx, ATTN_E_FORMAT, "%s: \"%s\" must be %s, found %s", L->path,
                 key, attn__json_kind_name(want), attn__json_kind_name(k));
    return ATTN_OK;
}
static attn_status jbool(jload *L, attn__json_reader *r, const char *key, int *v) {
    ATTN_TRY(jkind(L, r, ATTN__JSON_BOOL, key));
    return attn__json_bool(r, v);
}
static attn_status jstr(jload *L, attn__json_reader *r, const char *key, skey *s) {
    ATTN_TRY(jkind(L, r, ATTN__JSON_STRING, key));
    ATTN_TRY(attn__json_string(r, &s->p, &s->n));
    ATTN_FAIL_IF(memchr(s->p, 0, s->n) != NULL, L->ctx, ATTN_E_FORMAT,
                 "%s: a string of \"%s\" holds a NUL character", L->path, key);
    return ATTN_OK;
}
/* null, or a string that is empty: 1 in *set for a nonempty string */
static attn_status jnullstr(jload *L, attn__json_reader *r, const char *key, skey *s,
                            int *set) {
    attn__json_kind k;
    *set = 0;
    ATTN_TRY(attn__json_peek(r, &k));
    if (k == ATTN__JSON_NULL) return attn__json_null(r);
    ATTN_TRY(jstr(L, r, key, s));
    *set = s->n > 0;
    return ATTN_OK;
}

static attn_status j_vocab(jload *L, attn__json_reader *r) {
    ATTN_TRY(jkind(L, r, ATTN__JSON_OBJECT, "vocab"));
    ATTN_TRY(attn__json_object_begin(r));
    int64_t lim = attn_ctx_limit(L->ctx, ATTN_LIMIT_VOCAB);
    for (;;) {
        int more;
        const char *key;
        size_t kn;
        ATTN_TRY(attn__json_member(r, &more, &key, &kn));
        if (!more) break;
        ATTN_FAIL_IF(memchr(key, 0, kn) != NULL, L->ctx, ATTN_E_FORMAT,
                     "%s: a vocabulary token holds a NUL character", L->path);
        ATTN_FAIL_IF((int64_t)L->nv >= lim, L->ctx, ATTN_E_UNSUPPORTED,
                     "%s: more than ATTN_LIMIT_VOCAB (%lld) vocabulary entries", L->path,
                     (long long)lim);
        int64_t id;
        ATTN_TRY(jkind(L, r, ATTN__JSON_NUMBER, "vocab"));
        ATTN_TRY(attn__json_int(r, &id));
        ATTN_FAIL_IF(!attn__grow(L->ctx, (void **)&L->v, &L->vcap, L->nv, sizeof *L->v),
                     L->ctx, ATTN_E_NOMEM, "out of memory (vocabulary)");
        L->v[L->nv].k.p = key, L->v[L->nv].k.n = kn;
        L->v[L->nv++].id = id;
    }
    L->have_vocab = 1;
    return ATTN_OK;
}

static attn_status j_merges(jload *L, attn__json_reader *r) {
    ATTN_TRY(jkind(L, r, ATTN__JSON_ARRAY, "merges"));
    ATTN_TRY(attn__json_array_begin(r));
    int64_t lim = attn_ctx_limit(L->ctx, ATTN_LIMIT_VOCAB);
    for (;;) {
        int more;
        ATTN_TRY(attn__json_element(r, &more));
        if (!more) break;
        ATTN_FAIL_IF((int64_t)L->nm >= lim, L->ctx, ATTN_E_UNSUPPORTED,
                     "%s: more than ATTN_LIMIT_VOCAB (%lld) merges", L->path, (long long)lim);
        ATTN_FAIL_IF(!attn__grow(L->ctx, (void **)&L->m, &L->mcap, L->nm, sizeof *L->m),
                     L->ctx, ATTN_E_NOMEM, "out of memory (merges)");
        mpair *m = &L->m[L->nm];
        attn__json_kind k;
        ATTN_TRY(attn__json_peek(r, &k));
        if (k == ATTN__JSON_STRING) { /* "a b" */
            skey s;
            ATTN_TRY(jstr(L, r, "merges", &s));
            const char *sp = memchr(s.p, ' ', s.n);
            ATTN_FAIL_IF(!sp || sp == s.p || sp + 1 == s.p + s.n ||
                             memchr(sp + 1, ' ', (size_t)(s.p + s.n - sp - 1)),
                         L->ctx, ATTN_E_FORMAT, "%s: merge %zu (\"%.64s\") is not two tokens "
                         "separated by one space", L->path, L->nm, s.p);
            m->a.p = s.p, m->a.n = (size_t)(sp - s.p);
            m->b.p = sp + 1, m->b.n = s.n - m->a.n - 1;
        } else if (k == ATTN__JSON_ARRAY) { /* ["a", "b"] */
            int more2, cnt = 0;
            ATTN_TRY(attn__json_array_begin(r));
            for (;;) {
                ATTN_TRY(attn__json_element(r, &more2));
                if (!more2) break;
                ATTN_FAIL_IF(cnt == 2, L->ctx, ATTN_E_FORMAT,
                             "%s: merge %zu has more than two tokens", L->path, L->nm);
                ATTN_TRY(jstr(L, r, "merges", cnt ? &m->b : &m->a));
                cnt++;
            }
            ATTN_FAIL_IF(cnt != 2 || !m->a.n || !m->b.n, L->ctx, ATTN_E_FORMAT,
                         "%s: merge %zu is not two nonempty tokens", L->path, L->nm);
        } else {
            return attn__fail(L->ctx, ATTN_E_FORMAT, "%s: merge %zu is %s, not a string or a "
                              "pair", L->path, L->nm, attn__json_kind_name(k));
        }
        L->nm++;
    }
    return ATTN_OK;
}

/* A number that must be absent, null or zero (dropout): 1 in *nonzero otherwise. */
static attn_status j_zero(jload *L, attn__json_reader *r, int *nonzero) {
    attn__json_kind k;
    *nonzero = 0;
    ATTN_TRY(attn__json_peek(r, &k));
    if (k == ATTN__JSON_NULL) return attn__json_null(r);
    ATTN_TRY(jkind(L, r, ATTN__JSON_NUMBER, "dropout"));
    for (size_t p = r->pos; p < r->len && strchr("+-.eE0123456789", r->text[p]); p++) {
        if (r->text[p] == 'e' || r->text[p] == 'E') break;
        if (r->text[p] >= '1' && r->text[p] <= '9') *nonzero = 1;
    }
    return attn__json_skip(r);
}

/* continuing_subword_prefix / end_of_word_suffix: *state 1 for null, 2 for a string */
static attn_status j_affix(jload *L, attn__json_reader *r, const char *key, skey *v,
                           int *state) {
    attn__json_kind k;
    ATTN_TRY(attn__json_peek(r, &k));
    if (k == ATTN__JSON_NULL) {
        *state = 1;
        return attn__json_null(r);
    }
    ATTN_TRY(jstr(L, r, key, v));
    *state = 2;
    return ATTN_OK;
}

/* The model object: everything is recorded, and checked against the type in j_build. */
static attn_status j_model(jload *L, attn__json_reader *r) {
    ATTN_TRY(jkind(L, r, ATTN__JSON_OBJECT, "model"));
    ATTN_TRY(attn__json_object_begin(r));
    attn_ctx *ctx = L->ctx;
    for (;;) {
        int more, v;
        const char *key;
        ATTN_TRY(attn__json_member(r, &more, &key, NULL));
        if (!more) break;
        if (!strcmp(key, "type")) {
            ATTN_TRY(jstr(L, r, key, &L->mtype_name));
            L->mtype = !strcmp(L->mtype_name.p, "BPE")         ? MT_BPE
                       : !strcmp(L->mtype_name.p, "WordPiece") ? MT_WORDPIECE
                                                               : MT_OTHER;
            ATTN_FAIL_IF(L->mtype == MT_OTHER, ctx, ATTN_E_UNSUPPORTED,
                         "%s: model type \"%.40s\" is not supported (only \"BPE\" and "
                         "\"WordPiece\")", L->path, L->mtype_name.p);
        } else if (!strcmp(key, "vocab")) {
            ATTN_FAIL_IF(L->have_vocab, ctx, ATTN_E_FORMAT, "%s: two model vocabularies",
                         L->path);
            ATTN_TRY(j_vocab(L, r));
        } else if (!strcmp(key, "merges")) {
            ATTN_FAIL_IF(L->m, ctx, ATTN_E_FORMAT, "%s: two merge lists", L->path);
            ATTN_TRY(j_merges(L, r));
            if (!L->m) L->m = attn__malloc(ctx, sizeof *L->m), L->mcap = 1; /* seen, empty */
            ATTN_FAIL_IF(!L->m, ctx, ATTN_E_NOMEM, "out of memory (merges)");
        } else if (!strcmp(key, "unk_token")) {
            ATTN_TRY(jnullstr(L, r, key, &L->unk, &L->have_unk));
        } else if (!strcmp(key, "fuse_unk") || !strcmp(key, "ignore_merges")) {
            ATTN_TRY(jbool(L, r, key, key[0] == 'f' ? &L->fuse_unk : &L->ignore_merges));
        } else if (!strcmp(key, "byte_fallback")) {
            ATTN_TRY(jbool(L, r, key, &L->byte_fallback));
        } else if (!strcmp(key, "dropout")) {
            ATTN_TRY(j_zero(L, r, &v));
            L->dropout = v;
        } else if (!strcmp(key, "continuing_subword_prefix")) {
            ATTN_TRY(j_affix(L, r, key, &L->csp, &L->csp_state));
        } else if (!strcmp(key, "end_of_word_suffix")) {
            ATTN_TRY(j_affix(L, r, key, &L->eows, &L->eows_state));
        } else if (!strcmp(key, "max_input_chars_per_word")) {
            ATTN_TRY(jkind(L, r, ATTN__JSON_NUMBER, key));
            ATTN_TRY(attn__json_int(r, &L->max_chars));
            ATTN_FAIL_IF(L->max_chars < 0, ctx, ATTN_E_FORMAT,
                         "%s: max_input_chars_per_word %lld is negative", L->path,
                         (long long)L->max_chars);
        } else {
            ATTN_TRY(attn__json_skip(r));
        }
    }
    L->have_model = 1;
    return ATTN_OK;
}

static attn_status j_added(jload *L, attn__json_reader *r) {
    attn__json_kind k;
    ATTN_TRY(attn__json_peek(r, &k));
    if (k == ATTN__JSON_NULL) return attn__json_null(r);
    ATTN_TRY(jkind(L, r, ATTN__JSON_ARRAY, "added_tokens"));
    ATTN_TRY(attn__json_array_begin(r));
    int64_t lim = attn_ctx_limit(L->ctx, ATTN_LIMIT_VOCAB);
    for (;;) {
        int more;
        ATTN_TRY(attn__json_element(r, &more));
        if (!more) break;
        ATTN_FAIL_IF((int64_t)L->na >= lim, L->ctx, ATTN_E_UNSUPPORTED,
                     "%s: more than ATTN_LIMIT_VOCAB (%lld) added tokens", L->path,
                     (long long)lim);
        ATTN_FAIL_IF(!attn__grow(L->ctx, (void **)&L->a, &L->acap, L->na, sizeof *L->a),
                     L->ctx, ATTN_E_NOMEM, "out of memory (added tokens)");
        jadded *a = &L->a[L->na];
        memset(a, 0, sizeof *a);
        a->id = -1;
        int have_content = 0;
        ATTN_TRY(jkind(L, r, ATTN__JSON_OBJECT, "added_tokens"));
        ATTN_TRY(attn__json_object_begin(r));
        for (;;) {
            const char *key;
            ATTN_TRY(attn__json_member(r, &more, &key, NULL));
            if (!more) break;
            if (!strcmp(key, "content")) {
                ATTN_TRY(jstr(L, r, key, &a->k));
                have_content = 1;
            } else if (!strcmp(key, "id")) {
                ATTN_TRY(jkind(L, r, ATTN__JSON_NUMBER, key));
                ATTN_TRY(attn__json_int(r, &a->id));
            } else if (!strcmp(key, "special")) {
                ATTN_TRY(jbool(L, r, key, &a->special));
            } else if (!strcmp(key, "normalized")) {
                ATTN_TRY(jbool(L, r, key, &a->normalized));
            } else if (!strcmp(key, "lstrip")) {
                ATTN_TRY(jbool(L, r, key, &a->lstrip));
            } else if (!strcmp(key, "rstrip")) {
                ATTN_TRY(jbool(L, r, key, &a->rstrip));
            } else if (!strcmp(key, "single_word")) {
                ATTN_TRY(jbool(L, r, key, &a->single_word));
            } else {
                ATTN_TRY(attn__json_skip(r));
            }
        }
        ATTN_FAIL_IF(!have_content || a->id < 0, L->ctx, ATTN_E_FORMAT,
                     "%s: added token %zu has no \"content\" or no \"id\"", L->path, L->na);
        ATTN_FAIL_IF(a->lstrip || a->rstrip || a->single_word, L->ctx, ATTN_E_UNSUPPORTED,
                     "%s: added token \"%.40s\": %s true is not supported", L->path, a->k.p,
                     a->lstrip ? "lstrip" : a->rstrip ? "rstrip" : "single_word");
        L->na++;
    }
    return ATTN_OK;
}

/* One pre-tokenizer object (not a Sequence) into *p. */
static attn_status j_pre_one(jload *L, attn__json_reader *r, jpre *p, int depth);

static attn_status j_pre_seq(jload *L, attn__json_reader *r) {
    ATTN_TRY(jkind(L, r, ATTN__JSON_ARRAY, "pretokenizers"));
    ATTN_TRY(attn__json_array_begin(r));
    for (;;) {
        int more;
        ATTN_TRY(attn__json_element(r, &more));
        if (!more) break;
        ATTN_FAIL_IF(L->npre == PRE_MAX, L->ctx, ATTN_E_UNSUPPORTED,
                     "%s: unsupported pre_tokenizer: a Sequence of more than %d", L->path,
                     PRE_MAX);
        ATTN_TRY(j_pre_one(L, r, &L->pre[L->npre++], 1));
    }
    return ATTN_OK;
}

static attn_status j_pattern(jload *L, attn__json_reader *r, jpre *p) {
    ATTN_TRY(jkind(L, r, ATTN__JSON_OBJECT, "pattern"));
    ATTN_TRY(attn__json_object_begin(r));
    p->pattern = 3;
    for (;;) {
        int more;
        const char *key;
        ATTN_TRY(attn__json_member(r, &more, &key, NULL));
        if (!more) break;
        if (!strcmp(key, "Regex")) {
            skey s;
            ATTN_TRY(jstr(L, r, key, &s));
            p->pattern = !strcmp(s.p, GPT2_RE)     ? 1
                         : !strcmp(s.p, LLAMA3_RE) ? 2
                         : !strcmp(s.p, QWEN2_RE)  ? 4
                                                   : 3;
        } else {
            ATTN_TRY(attn__json_skip(r));
        }
    }
    return ATTN_OK;
}

static attn_status j_pre_one(jload *L, attn__json_reader *r, jpre *p, int depth) {
    ATTN_TRY(jkind(L, r, ATTN__JSON_OBJECT, "pre_tokenizer"));
    ATTN_TRY(attn__json_object_begin(r));
    memset(p, 0, sizeof *p);
    p->aps = p->use_regex = p->individual = p->invert = -1;
    int seq_read = 0;
    for (;;) {
        int more;
        const char *key;
        ATTN_TRY(attn__json_member(r, &more, &key, NULL));
        if (!more) break;
        if (!strcmp(key, "type")) {
            skey s;
            ATTN_TRY(jstr(L, r, key, &s));
            snprintf(p->type, sizeof p->type, "%s", s.p);
        } else if (!strcmp(key, "add_prefix_space")) {
            ATTN_TRY(jbool(L, r, key, &p->aps));
        } else if (!strcmp(key, "use_regex")) {
            ATTN_TRY(jbool(L, r, key, &p->use_regex));
        } else if (!strcmp(key, "individual_digits")) {
            ATTN_TRY(jbool(L, r, key, &p->individual));
        } else if (!strcmp(key, "invert")) {
            ATTN_TRY(jbool(L, r, key, &p->invert));
        } else if (!strcmp(key, "behavior")) {
            skey s;
            ATTN_TRY(jstr(L, r, key, &s));
            p->isolated = !strcmp(s.p, "Isolated");
        } else if (!strcmp(key, "pattern")) {
            ATTN_TRY(j_pattern(L, r, p));
        } else if (!strcmp(key, "pretokenizers") && depth == 0) {
            ATTN_TRY(j_pre_seq(L, r));
            seq_read = 1;
        } else {
            ATTN_TRY(attn__json_skip(r));
        }
    }
    if (depth == 0) {
        L->pre_seq = !strcmp(p->type, "Sequence");
        ATTN_FAIL_IF(seq_read != L->pre_seq, L->ctx, ATTN_E_UNSUPPORTED,
                     "%s: unsupported pre_tokenizer (a Sequence without its list, or a list "
                     "in a %.24s)", L->path, p->type);
    }
    return ATTN_OK;
}

/* Describes one pre-tokenizer object for a message. */
static void pre_desc(const jpre *p, char *o, size_t n) {
    const char *pat = p->pattern == 1   ? "GPT-2 regex"
                      : p->pattern == 2 ? "Llama 3 regex"
                      : p->pattern == 4 ? "Qwen2 regex"
                      : p->pattern == 3 ? "another pattern"
                                        : "no pattern";
    if (!strcmp(p->type, "ByteLevel"))
        snprintf(o, n, "ByteLevel(add_prefix_space=%s, use_regex=%s)",
                 p->aps < 0 ? "?" : p->aps ? "true" : "false", p->use_regex ? "true" : "false");
    else if (!strcmp(p->type, "Digits"))
        snprintf(o, n, "Digits(individual_digits=%s)", p->individual == 1 ? "true" : "false");
    else if (!strcmp(p->type, "Split"))
        snprintf(o, n, "Split(%s%s%s)", pat, p->isolated ? "" : ", not Isolated",
                 p->invert == 1 ? ", invert" : "");
    else
        snprintf(o, n, "%.23s", p->type[0] ? p->type : "(no type)");
}

/* The pre-tokenizer the objects read describe, or -1. */
static int pre_classify(const jload *L) {
    const jpre *p = L->pre_seq ? L->pre : &L->top;
    int n = L->pre_seq ? L->npre : 1;
    if (n < 1) return -1;
    for (int i = 0; i < n; i++) { /* a ByteLevel must be the last and not add a space */
        int bl = !strcmp(p[i].type, "ByteLevel");
        if (bl != (i == n - 1) || (bl && p[i].aps != 0)) return -1;
    }
    int last_re = p[n - 1].use_regex != 0; /* use_regex defaults to true */
    if (n == 1) return last_re ? PRE_GPT2 : -1;
    if (n != 2) return -1;
    if (!strcmp(p[0].type, "Digits"))
        return p[0].individual == 1 && last_re ? PRE_SMOLLM : -1;
    if (!strcmp(p[0].type, "Split") && !last_re && p[0].isolated && p[0].invert != 1)
        return p[0].pattern == 1   ? PRE_GPT2
               : p[0].pattern == 2 ? PRE_LLAMA3
               : p[0].pattern == 4 ? PRE_QWEN2
                                   : -1;
    return -1;
}

/* The normalizer object: NFC, or BertNormalizer with its options (the library's defaults:
 * all true, strip_accents null). */
static attn_status j_normalizer(jload *L, attn__json_reader *r) {
    ATTN_TRY(jkind(L, r, ATTN__JSON_OBJECT, "normalizer"));
    ATTN_TRY(attn__json_object_begin(r));
    char type[24] = "";
    L->n_clean = L->n_chinese = L->n_lower = 1, L->n_strip = -1;
    for (;;) {
        int more;
        const char *key;
        ATTN_TRY(attn__json_member(r, &more, &key, NULL));
        if (!more) break;
        if (!strcmp(key, "type")) {
            skey t;
            ATTN_TRY(jstr(L, r, key, &t));
            snprintf(type, sizeof type, "%s", t.p);
        } else if (!strcmp(key, "clean_text")) {
            ATTN_TRY(jbool(L, r, key, &L->n_clean));
        } else if (!strcmp(key, "handle_chinese_chars")) {
            ATTN_TRY(jbool(L, r, key, &L->n_chinese));
        } else if (!strcmp(key, "lowercase")) {
            ATTN_TRY(jbool(L, r, key, &L->n_lower));
        } else if (!strcmp(key, "strip_accents")) {
            attn__json_kind k;
            ATTN_TRY(attn__json_peek(r, &k));
            if (k == ATTN__JSON_NULL) ATTN_TRY(attn__json_null(r));
            else ATTN_TRY(jbool(L, r, key, &L->n_strip));
        } else {
            ATTN_TRY(attn__json_skip(r));
        }
    }
    /* NFC (Qwen2's): text in NFC, as nearly all text is, is unchanged by it; attn does not
     * compose decomposed text (nor does llama.cpp) */
    if (!strcmp(type, "NFC")) L->norm = NORM_NFC;
    else if (!strcmp(type, "BertNormalizer")) L->norm = NORM_BERT;
    else
        return attn__fail(L->ctx, ATTN_E_UNSUPPORTED, "%s: normalizer %.24s is not supported "
                          "(only null, NFC and BertNormalizer)", L->path,
                          type[0] ? type : "(no type)");
    return ATTN_OK;
}

/* The decoder object: ByteLevel, or WordPiece with its prefix and cleanup. */
static attn_status j_decoder(jload *L, attn__json_reader *r) {
    ATTN_TRY(jkind(L, r, ATTN__JSON_OBJECT, "decoder"));
    ATTN_TRY(attn__json_object_begin(r));
    char type[24] = "";
    L->dcleanup = 1;
    for (;;) {
        int more;
        const char *key;
        ATTN_TRY(attn__json_member(r, &more, &key, NULL));
        if (!more) break;
        if (!strcmp(key, "type")) {
            skey t;
            ATTN_TRY(jstr(L, r, key, &t));
            snprintf(type, sizeof type, "%s", t.p);
        } else if (!strcmp(key, "prefix")) {
            ATTN_TRY(jstr(L, r, key, &L->dprefix));
            L->have_dprefix = 1;
        } else if (!strcmp(key, "cleanup")) {
            ATTN_TRY(jbool(L, r, key, &L->dcleanup));
        } else {
            ATTN_TRY(attn__json_skip(r));
        }
    }
    if (!strcmp(type, "ByteLevel")) L->dec = DEC_BYTELEVEL;
    else if (!strcmp(type, "WordPiece")) L->dec = DEC_WORDPIECE;
    else
        return attn__fail(L->ctx, ATTN_E_UNSUPPORTED, "%s: decoder %.24s is not supported "
                          "(only ByteLevel and WordPiece)", L->path,
                          type[0] ? type : "(no type)");
    return ATTN_OK;
}

/* {"SpecialToken": {"id": "[CLS]", ...}} in a template: its token's text in *t (1), or a
 * Sequence (0) */
static attn_status j_piece(jload *L, attn__json_reader *r, skey *t, int *special) {
    ATTN_TRY(jkind(L, r, ATTN__JSON_OBJECT, "post_processor"));
    ATTN_TRY(attn__json_object_begin(r));
    *special = 0;
    for (;;) {
        int more;
        const char *key;
        ATTN_TRY(attn__json_member(r, &more, &key, NULL));
        if (!more) break;
        if (strcmp(key, "SpecialToken")) {
            ATTN_TRY(attn__json_skip(r));
            continue;
        }
        ATTN_TRY(jkind(L, r, ATTN__JSON_OBJECT, "SpecialToken"));
        ATTN_TRY(attn__json_object_begin(r));
        for (;;) {
            ATTN_TRY(attn__json_member(r, &more, &key, NULL));
            if (!more) break;
            if (!strcmp(key, "id")) {
                ATTN_TRY(jstr(L, r, "SpecialToken", t));
                *special = 1;
            } else {
                ATTN_TRY(attn__json_skip(r));
            }
        }
    }
    return ATTN_OK;
}

/* The post-processor, for the tokens it puts around one text: TemplateProcessing's "single"
 * of the shape [SpecialToken] $A [SpecialToken], or BertProcessing / RobertaProcessing's
 * "cls" and "sep" ([text, id]).  Anything else is skipped: it names no such tokens. */
static attn_status j_post(jload *L, attn__json_reader *r) {
    attn__json_kind k;
    ATTN_TRY(attn__json_peek(r, &k));
    if (k != ATTN__JSON_OBJECT) return attn__json_skip(r);
    ATTN_TRY(attn__json_object_begin(r));
    for (;;) {
        int more;
        const char *key;
        ATTN_TRY(attn__json_member(r, &more, &key, NULL));
        if (!more) break;
        ATTN_TRY(attn__json_peek(r, &k));
        if (!strcmp(key, "single") && k == ATTN__JSON_ARRAY) {
            skey t[3];
            int sp[3], n = 0;
            ATTN_TRY(attn__json_array_begin(r));
            for (;;) {
                skey x = {NULL, 0};
                int s1;
                ATTN_TRY(attn__json_element(r, &more));
                if (!more) break;
                ATTN_TRY(j_piece(L, r, &x, &s1));
                if (n < 3) t[n] = x, sp[n] = s1;
                n++;
            }
            int a = n >= 1 && n <= 3 && sp[0], z = n >= 1 && n <= 3 && sp[n - 1];
            int seqs = n - a - z;
            if (n <= 3 && seqs == 1 && !sp[a]) {
                if (a) L->pp_cls = t[0], L->have_pp_cls = 1;
                if (z) L->pp_sep = t[n - 1], L->have_pp_sep = 1;
            }
        } else if ((!strcmp(key, "cls") || !strcmp(key, "sep")) && k == ATTN__JSON_ARRAY) {
            int first = 1;
            ATTN_TRY(attn__json_array_begin(r));
            for (;;) {
                ATTN_TRY(attn__json_element(r, &more));
                if (!more) break;
                ATTN_TRY(attn__json_peek(r, &k));
                if (first && k == ATTN__JSON_STRING) {
                    skey *t = key[0] == 'c' ? &L->pp_cls : &L->pp_sep;
                    ATTN_TRY(jstr(L, r, key, t));
                    *(key[0] == 'c' ? &L->have_pp_cls : &L->have_pp_sep) = 1;
                } else {
                    ATTN_TRY(attn__json_skip(r));
                }
                first = 0;
            }
        } else {
            ATTN_TRY(attn__json_skip(r));
        }
    }
    return ATTN_OK;
}

/* padding: its pad_id */
static attn_status j_padding(jload *L, attn__json_reader *r) {
    attn__json_kind k;
    ATTN_TRY(attn__json_peek(r, &k));
    if (k != ATTN__JSON_OBJECT) return attn__json_skip(r);
    ATTN_TRY(attn__json_object_begin(r));
    for (;;) {
        int more;
        const char *key;
        ATTN_TRY(attn__json_member(r, &more, &key, NULL));
        if (!more) break;
        ATTN_TRY(attn__json_peek(r, &k));
        if (!strcmp(key, "pad_id") && k == ATTN__JSON_NUMBER) {
            ATTN_TRY(attn__json_int(r, &L->pad_id));
        } else {
            ATTN_TRY(attn__json_skip(r));
        }
    }
    return ATTN_OK;
}

static attn_status j_top(jload *L, attn__json_reader *r, const char *key) {
    attn_ctx *ctx = L->ctx;
    attn__json_kind k;
    if (!strcmp(key, "model")) return j_model(L, r);
    if (!strcmp(key, "added_tokens")) return j_added(L, r);
    if (!strcmp(key, "post_processor")) return j_post(L, r);
    if (!strcmp(key, "padding")) return j_padding(L, r);
    if (!strcmp(key, "normalizer")) {
        ATTN_TRY(attn__json_peek(r, &k));
        if (k == ATTN__JSON_NULL) return attn__json_null(r);
        return j_normalizer(L, r);
    }
    if (!strcmp(key, "pre_tokenizer")) {
        ATTN_TRY(attn__json_peek(r, &k));
        ATTN_FAIL_IF(k == ATTN__JSON_NULL, ctx, ATTN_E_UNSUPPORTED,
                     "%s: a null pre_tokenizer is not supported (byte-level BPE needs "
                     "ByteLevel)", L->path);
        ATTN_FAIL_IF(L->have_pre, ctx, ATTN_E_FORMAT, "%s: two pre_tokenizers", L->path);
        L->have_pre = 1;
        return j_pre_one(L, r, &L->top, 0);
    }
    if (!strcmp(key, "decoder")) {
        ATTN_TRY(attn__json_peek(r, &k));
        ATTN_FAIL_IF(k == ATTN__JSON_NULL, ctx, ATTN_E_UNSUPPORTED,
                     "%s: a null decoder is not supported (only ByteLevel and WordPiece)",
                     L->path);
        ATTN_FAIL_IF(L->have_dec, ctx, ATTN_E_FORMAT, "%s: two decoders", L->path);
        L->have_dec = 1;
        return j_decoder(L, r);
    }
    return attn__json_skip(r);
}

/* The ids the library gives the added tokens (the file's "id" is only checked against them):
 * a token of the model's vocabulary keeps its id, any other takes the next one after the
 * vocabulary and the added tokens before it; then the whole table in id order. */
/* The settings of a WordPiece model, checked. */
static attn_status j_check_wp(jload *L, attn__wp_spec *w) {
    attn_ctx *ctx = L->ctx;
    const char *path = L->path;
    ATTN_FAIL_IF(!L->have_pre || L->pre_seq || strcmp(L->top.type, "BertPreTokenizer"), ctx,
                 ATTN_E_UNSUPPORTED, "%s: pre_tokenizer %.24s is not supported for a WordPiece "
                 "model (only BertPreTokenizer)", path,
                 !L->have_pre ? "(none)" : L->top.type[0] ? L->top.type : "(no type)");
    ATTN_FAIL_IF(!L->have_dec || L->dec != DEC_WORDPIECE, ctx, ATTN_E_UNSUPPORTED,
                 "%s: decoder %s is not supported for a WordPiece model (only WordPiece)", path,
                 !L->have_dec ? "(none)" : "ByteLevel");
    ATTN_FAIL_IF(L->norm == NORM_NFC, ctx, ATTN_E_UNSUPPORTED, "%s: normalizer NFC is not "
                 "supported for a WordPiece model (only null and BertNormalizer)", path);
    ATTN_FAIL_IF(!L->have_unk, ctx, ATTN_E_FORMAT, "%s: a WordPiece model needs an unk_token",
                 path);
    ATTN_FAIL_IF(L->csp_state == 1, ctx, ATTN_E_FORMAT, "%s: continuing_subword_prefix is "
                 "null (a WordPiece model needs a string)", path);
    memset(w, 0, sizeof *w);
    if (L->norm == NORM_BERT) {
        w->clean = L->n_clean, w->chinese = L->n_chinese, w->lower = L->n_lower;
        w->strip_accents = L->n_strip;
    } /* (null: no normalization at all) */
    w->max_chars = L->max_chars < 0 ? 100 : L->max_chars;
    w->prefix = L->csp_state == 2 ? L->csp.p : "##";
    w->nprefix = L->csp_state == 2 ? L->csp.n : 2;
    w->dprefix = L->have_dprefix ? L->dprefix.p : "##";
    w->ndprefix = L->have_dprefix ? L->dprefix.n : 2;
    w->cleanup = L->dcleanup;
    w->cls = w->sep = w->pad = -1;
    return ATTN_OK;
}

static attn_status j_build(jload *L, attn_bpe **out) {
    attn_ctx *ctx = L->ctx;
    const char *path = L->path;
    int wp = L->mtype == MT_WORDPIECE;
    attn__wp_spec wspec;
    ATTN_FAIL_IF(!L->have_model || !L->have_vocab || (!wp && !L->m), ctx, ATTN_E_FORMAT,
                 "%s: no model with a vocab%s", path, wp ? "" : " and merges");
    int pre = PRE_WORDPIECE;
    if (wp) ATTN_TRY(j_check_wp(L, &wspec));
    else {
        ATTN_FAIL_IF(!L->have_pre, ctx, ATTN_E_UNSUPPORTED,
                     "%s: no pre_tokenizer (byte-level BPE needs ByteLevel)", path);
        ATTN_FAIL_IF(!L->have_dec, ctx, ATTN_E_UNSUPPORTED,
                     "%s: no decoder (only ByteLevel is supported for a BPE model)", path);
        ATTN_FAIL_IF(L->dec != DEC_BYTELEVEL, ctx, ATTN_E_UNSUPPORTED,
                     "%s: decoder WordPiece is not supported for a BPE model (only ByteLevel)",
                     path);
        ATTN_FAIL_IF(L->norm == NORM_BERT, ctx, ATTN_E_UNSUPPORTED, "%s: normalizer "
                     "BertNormalizer is not supported for a BPE model (only null and NFC)",
                     path);
        ATTN_FAIL_IF(L->byte_fallback, ctx, ATTN_E_UNSUPPORTED,
                     "%s: model byte_fallback true is not supported", path);
        ATTN_FAIL_IF(L->dropout, ctx, ATTN_E_UNSUPPORTED,
                     "%s: BPE dropout is not supported (only null or 0)", path);
        const skey *af[2] = {&L->csp, &L->eows};
        const int afs[2] = {L->csp_state, L->eows_state};
        for (int i = 0; i < 2; i++)
            ATTN_FAIL_IF(afs[i] == 2 && af[i]->n, ctx, ATTN_E_UNSUPPORTED, "%s: model %s "
                         "\"%.40s\" is not supported (only null or \"\")", path,
                         i ? "end_of_word_suffix" : "continuing_subword_prefix", af[i]->p);
        pre = pre_classify(L);
    }
    if (pre < 0) {
        char d[320] = "", one[96];
        const jpre *p = L->pre_seq ? L->pre : &L->top;
        int n = L->pre_seq ? L->npre : 1;
        for (int i = 0; i < n; i++) {
            pre_desc(&p[i], one, sizeof one);
            size_t at = strlen(d);
            snprintf(d + at, sizeof d - at, "%s%s", i ? ", " : "", one);
        }
        return attn__fail(ctx, ATTN_E_UNSUPPORTED,
                          "%s: unsupported pre_tokenizer %s%s%s (supported: ByteLevel with the "
                          "GPT-2 regex; Split(Llama 3 or Qwen2 regex) + ByteLevel; Digits(individual) "
                          "+ ByteLevel)", path, L->pre_seq ? "Sequence[" : "", d,
                          L->pre_seq ? "]" : "");
    }
    int64_t nv = (int64_t)L->nv, n = nv;
    attn_status st = ATTN_OK;
    uint64_t mask;
    skey *tok = NULL;
    unsigned char *type = NULL, *norm = NULL, *seen = NULL;
    int32_t *tab = NULL;
    int64_t *aid = NULL;
    size_t nt;
    /* the model's ids must be 0 .. nv-1, each once, and its tokens distinct */
    seen = attn__calloc(ctx, L->nv + 1, 1);
    tok = attn__calloc(ctx, L->nv + L->na + 1, sizeof *tok);
    aid = attn__calloc(ctx, L->na + 1, sizeof *aid);
    tab = stab_new(ctx, (int64_t)(L->nv + L->na), &mask);
    if (!seen || !tok || !aid || !tab) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "out of memory (vocabulary)");
        goto done;
    }
    for (size_t i = 0; i < L->nv; i++) {
        int64_t id = L->v[i].id;
        if (id < 0 || id >= nv || seen[id]) {
            st = attn__fail(ctx, ATTN_E_FORMAT, "%s: vocabulary id %lld of \"%.40s\" %s", path,
                            (long long)id, L->v[i].k.p,
                            id < 0 || id >= nv ? "is outside 0 .. size - 1" : "is repeated");
            goto done;
        }
        seen[id] = 1;
        tok[id] = L->v[i].k;
    }
    for (int64_t id = 0; id < nv; id++) {
        if (stab_put(tab, mask, tok, (int32_t)id) >= 0) {
            st = attn__fail(ctx, ATTN_E_FORMAT, "%s: vocabulary token \"%.40s\" is repeated",
                            path, tok[id].p);
            goto done;
        }
    }
    int64_t maxadd = -1;
    for (size_t i = 0; i < L->na; i++) {
        const jadded *a = &L->a[i];
        aid[i] = -1;
        if (!a->k.n) continue; /* the library ignores an empty added token */
        int32_t have = stab_find(tab, mask, tok, a->k.p, a->k.n);
        if (have >= nv) {
            st = attn__fail(ctx, ATTN_E_FORMAT, "%s: added token \"%.40s\" is repeated", path,
                            a->k.p);
            goto done;
        }
        int64_t id = have >= 0 ? have : maxadd < 0 || maxadd < nv ? nv : maxadd + 1;
        if (id != a->id) {
            st = attn__fail(ctx, ATTN_E_FORMAT, "%s: added token \"%.40s\" has id %lld, but its "
                            "place gives it %lld", path, a->k.p, (long long)a->id,
                            (long long)id);
            goto done;
        }
        if (id > maxadd) maxadd = id;
        aid[i] = id;
        if (have < 0) {
            tok[n] = a->k;
            stab_put(tab, mask, tok, (int32_t)n);
            n++;
        }
    }
    nt = (size_t)n;
    type = attn__malloc(ctx, nt);
    norm = attn__calloc(ctx, nt, 1);
    if (!type || !norm) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "out of memory (vocabulary)");
        goto done;
    }
    memset(type, ATTN_BPE_TOKEN_NORMAL, nt);
    for (size_t i = 0; i < L->na; i++) {
        if (aid[i] < 0) continue;
        type[aid[i]] = L->a[i].special ? ATTN_BPE_TOKEN_CONTROL : ATTN_BPE_TOKEN_USER_DEFINED;
        norm[aid[i]] = (unsigned char)(L->a[i].normalized != 0);
    }
    int32_t unk = -1;
    if (L->have_unk) {
        unk = stab_find(tab, mask, tok, L->unk.p, L->unk.n);
        if (unk < 0 || unk >= nv) {
            st = attn__fail(ctx, ATTN_E_FORMAT, "%s: unk_token \"%.40s\" is not in the model's "
                            "vocabulary", path, L->unk.p);
            goto done;
        }
    }
    if (wp) { /* the tokens the post-processor puts around a text, padding's */
        if (L->have_pp_cls) wspec.cls = stab_find(tab, mask, tok, L->pp_cls.p, L->pp_cls.n);
        if (L->have_pp_sep) wspec.sep = stab_find(tab, mask, tok, L->pp_sep.p, L->pp_sep.n);
        if (L->pad_id >= 0 && L->pad_id < n) wspec.pad = (int32_t)L->pad_id;
    }
    bspec spec = {path, n, tok, type, norm, wp ? 0 : (int64_t)L->nm, wp ? NULL : L->m, pre,
                  !wp && L->ignore_merges != 0, !wp && L->fuse_unk != 0, unk, 0,
                  wp ? &wspec : NULL};
    st = build(ctx, &spec, out);
done:
    attn__free(ctx, seen), attn__free(ctx, tok), attn__free(ctx, aid), attn__free(ctx, tab);
    attn__free(ctx, type), attn__free(ctx, norm);
    return st;
}

attn_status attn_bpe_load_json(attn_ctx *ctx, const char *path, attn_bpe **out) {
    if (out) *out = NULL;
    if (!ctx || !path || !out)
        return attn__fail(ctx, ATTN_E_INVALID, "attn_bpe_load_json: NULL argument");
    unsigned char *data = NULL;
    size_t len = 0;
    ATTN_TRY(attn__file_read(ctx, path, "tokenizer.json", 0, &data, &len));
    jload L;
    memset(&L, 0, sizeof L);
    L.ctx = ctx;
    L.path = path;
    L.max_chars = L.pad_id = -1;
    attn__json_reader r;
    attn_status st = attn__json_open(&r, ctx, data, len, path, 0);
    if (st == ATTN_OK) st = jkind(&L, &r, ATTN__JSON_OBJECT, "the document");
    if (st == ATTN_OK) st = attn__json_object_begin(&r);
    while (st == ATTN_OK) {
        int more;
        const char *key;
        if ((st = attn__json_member(&r, &more, &key, NULL)) || !more) break;
        st = j_top(&L, &r, key);
    }
    if (st == ATTN_OK) st = attn__json_finish(&r);
    if (st == ATTN_OK) st = j_build(&L, out);
    attn__json_close(&r);
    attn__free(ctx, L.v), attn__free(ctx, L.a), attn__free(ctx, L.m);
    attn__free(ctx, data);
    return st;
}

/* ---- encoding -------------------------------------------------------------------------------- */
typedef struct sym {
    int32_t id, prev, next; /* prev/next: positions, -1 at the ends */
    int alive;
} sym;
typedef struct hitem {
    uint32_t rank, pos;
    int32_t id;
} hitem;

typedef struct enc {
    attn_ctx *ctx;
    const attn_bpe *b;
    int pre, parse;
    int32_t *ids;
    int64_t cap, n;
    sym *sy;
    size_t sycap;
    hitem *hp;
    size_t hcap;
    char *buf;
    size_t bufcap;
    attn_status st;
    const unsigned char *base; /* attn__bpe_pretokens: the text, whose words' ends are the */
    int64_t *ends;             /* output instead of ids */
    /* WordPiece */
    uint32_t *wcp;             /* the word being read, normalized code points */
    size_t wcap;
    size_t *pos;               /* [word length + 1]: where each character's bytes start */
    size_t poscap;
    unsigned char *nbuf;       /* a gap normalized, when normalized added tokens are matched */
    size_t nbcap;
    int normed;                /* the text being split is nbuf, normalized already */
    int stop;                  /* attn__bpe_encode_upto: stop once cap ids are out */
} enc;

/* Whether encoding goes on: no failure, and room for more ids unless stopping early. */
#define ENC_GO(e) ((e)->st == ATTN_OK && !((e)->stop && (e)->n >= (e)->cap))

static void emit(enc *e, int32_t id) {
    if (e->n < e->cap) e->ids[e->n] = id;
    e->n++;
}

static int hless(const hitem *x, const hitem *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}
static void hpush(hitem *h, size_t *n, hitem v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hless(&v, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}
static hitem hpop(hitem *h, size_t *n) {
    hitem top = h[0], v = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && hless(&h[c + 1], &h[c])) c++;
        if (!hless(&h[c], &v)) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = v;
    return top;
}

static int grow_to(enc *e, void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 64, bytes;
    while (c < need) {
        if (c > SIZE_MAX / 2) return 0;
        c *= 2;
    }
    if (!attn__mul_size(c, elem, &bytes)) return 0;
    void *q = attn__malloc(e->ctx, bytes);
    if (!q) return 0;
    attn__free(e->ctx, *p);
    *p = q;
    *cap = c;
    return 1;
}

/* Room for the symbols and candidate pairs of a word of n bytes (positions are 32-bit); 0 with
 * e->st set when there is none. */
static int word_scratch(enc *e, size_t n) {
    if (n > INT32_MAX) {
        e->st = attn__fail(e->ctx, ATTN_E_UNSUPPORTED,
                           "attn_bpe_encode: a word of %zu bytes (at most 2^31 - 1)", n);
        return 0;
    }
    size_t hneed;
    if (!grow_to(e, (void **)&e->sy, &e->sycap, n, sizeof *e->sy) ||
        !attn__mul_size(n, 3, &hneed) ||
        !grow_to(e, (void **)&e->hp, &e->hcap, hneed, sizeof *e->hp)) {
        e->st = attn__fail(e->ctx, ATTN_E_NOMEM, "out of memory (tokenizer)");
        return 0;
    }
    return 1;
}

/* One pre-token s[0, n): its ids. */
static void bpe_word(enc *e, const unsigned char *s, size_t n) {
    const attn_bpe *b = e->b;
    if (e->st != ATTN_OK || n == 0) return;
    if (e->ends) {
        if (e->n < e->cap) e->ends[e->n] = (int64_t)(s + n - e->base);
        e->n++;
        return;
    }
    if (b->ignore_merges) { /* a pre-token that is a token is taken whole */
        size_t need;
        if (!attn__mul_size(n, 2, &need) ||
            !grow_to(e, (void **)&e->buf, &e->bufcap, need, 1)) {
            e->st = attn__fail(e->ctx, ATTN_E_NOMEM, "out of memory (tokenizer)");
            return;
        }
        size_t k = 0;
        for (size_t i = 0; i < n; i++) k += byte_char(b, s[i], e->buf + k);
        int32_t id = stab_find(b->vtab, b->vmask, b->key, e->buf, k);
        if (id >= 0) {
            emit(e, id);
            return;
        }
    }
    if (!word_scratch(e, n)) return;
    sym *sy = e->sy;
    size_t m = 0;
    int prev_unk = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = b->byte_id[s[i]];
        if (id < 0) { /* no token for this byte: the unknown token, or nothing */
            if (b->unk < 0 || (b->fuse_unk && prev_unk)) continue;
            id = b->unk;
            prev_unk = 1;
        } else {
            prev_unk = 0;
        }
        sy[m].id = id, sy[m].alive = 1;
        m++;
    }
    if (m == 0) return;
    for (size_t i = 0; i < m; i++) {
        sy[i].prev = (int32_t)i - 1;
        sy[i].next = i + 1 < m ? (int32_t)i + 1 : -1;
    }
    hitem *hp = e->hp;
    size_t hn = 0;
    for (size_t i = 0; i + 1 < m; i++) {
        hitem h;
        if (merge_find(b, sy[i].id, sy[i + 1].id, &h.rank, &h.id)) {
            h.pos = (uint32_t)i;
            hpush(hp, &hn, h);
        }
    }
    while (hn) {
        hitem t = hpop(hp, &hn);
        sym *a = &sy[t.pos];
        if (!a->alive || a->next < 0) continue;
        sym *c = &sy[a->next];
        uint32_t rk;
        int32_t nid;
        if (!merge_find(b, a->id, c->id, &rk, &nid) || nid != t.id) continue; /* stale */
        a->id = t.id;
        c->alive = 0;
        a->next = c->next;
        if (c->next >= 0) sy[c->next].prev = (int32_t)t.pos;
        hitem h;
        if (a->prev >= 0 && merge_find(b, sy[a->prev].id, a->id, &h.rank, &h.id)) {
            h.pos = (uint32_t)a->prev;
            hpush(hp, &hn, h);
        }
        if (a->next >= 0 && merge_find(b, a->id, sy[a->next].id, &h.rank, &h.id)) {
            h.pos = t.pos;
            hpush(hp, &hn, h);
        }
    }
    for (size_t i = 0; i < m; i++)
        if (sy[i].alive) emit(e, sy[i].id);
}

/* runs of one class from s[i]: the end */
static size_t run_of(const unsigned char *s, size_t i, size_t z, unsigned want) {
    while (i < z) {
        size_t nx;
        if (!(cls_at(s, i, &nx) & want)) break;
        i = nx;
    }
    return i;
}
static size_t run_other(const unsigned char *s, size_t i, size_t z) {
    while (i < z) {
        size_t nx;
        if (cls_at(s, i, &nx) & (C_L | C_N | C_S)) break;
        i = nx;
    }
    return i;
}
#define IS_OTHER(k) (!((k) & (C_L | C_N | C_S)))

/* \s+(?!\S)|\s+ from s[i] (a whitespace character), or with nl, \s*[\r\n]+ before them */
static size_t m_space(const unsigned char *s, size_t i, size_t z, int nl) {
    size_t e = i, last = i, lastnl = SIZE_MAX;
    while (e < z) {
        size_t nx;
        if (!(cls_at(s, e, &nx) & C_S)) break;
        if (s[e] == '\r' || s[e] == '\n') lastnl = e;
        last = e;
        e = nx;
    }
    if (nl && lastnl != SIZE_MAX) return lastnl + 1;
    if (e == z || last == i) return e;
    return last; /* leave the last whitespace character to the next match */
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * The end of the match at s[i] (i < z); the alternatives in order, as the backtracking engine
 * tries them. */
static size_t m_gpt2(const unsigned char *s, size_t i, size_t z) {
    unsigned char c0 = s[i];
    if (c0 == '\'' && i + 1 < z) {
        unsigned char c1 = s[i + 1];
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return i + 2;
        if (i + 2 < z) {
            unsigned char c2 = s[i + 2];
            if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
                return i + 3;
        }
    }
    size_t j;
    unsigned k0 = cls_at(s, i, &j);
    if (c0 == ' ' && j < z) { /* the optional space, then L+, N+ or other+ */
        size_t j2;
        unsigned k1 = cls_at(s, j, &j2);
        if (k1 & C_L) return run_of(s, j2, z, C_L);
        if (k1 & C_N) return run_of(s, j2, z, C_N);
        if (IS_OTHER(k1)) return run_other(s, j2, z);
    }
    if (k0 & C_L) return run_of(s, j, z, C_L);
    if (k0 & C_N) return run_of(s, j, z, C_N);
    if (IS_OTHER(k0)) return run_other(s, j, z);
    return m_space(s, i, z, 0);
}

/* Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
/* Llama 3's pattern; digits: the longest run of numbers (3; Qwen2's 1). */
static size_t m_llama3(const unsigned char *s, size_t i, size_t z, int digits) {
    unsigned char c0 = s[i];
    if (c0 == '\'' && i + 1 < z) {
        size_t j1, j2;
        int a = fold_letter(u8_at(s, i + 1, &j1));
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return j1;
        if (j1 < z) {
            int c = fold_letter(u8_at(s, j1, &j2));
            if ((a == 'r' && c == 'e') || (a == 'v' && c == 'e') || (a == 'l' && c == 'l'))
                return j2;
        }
    }
    size_t j, j2;
    unsigned k0 = cls_at(s, i, &j);
    if (!(k0 & (C_L | C_N)) && c0 != '\r' && c0 != '\n' && j < z && (cls_at(s, j, &j2) & C_L))
        return run_of(s, j2, z, C_L);
    if (k0 & C_L) return run_of(s, j, z, C_L);
    if (k0 & C_N) {
        for (int k = 1; k < digits && j < z && (cls_at(s, j, &j2) & C_N); k++) j = j2;
        return j;
    }
    size_t p = SIZE_MAX;
    if (c0 == ' ' && j < z && IS_OTHER(cls_at(s, j, &j2))) p = j2;
    else if (IS_OTHER(k0)) p = j;
    if (p != SIZE_MAX) {
        p = run_other(s, p, z);
        while (p < z && (s[p] == '\r' || s[p] == '\n')) p++;
        return p;
    }
    return m_space(s, i, z, 1);
}

/* SentencePiece BPE of t[0, n) (normalized text: spaces are U+2581): the characters are the
 * symbols (sym.id holds a symbol's first byte; it ends where the next one starts); the adjacent
 * pair whose text is the piece of the lowest id is merged, leftmost among equals, until no pair
 * is a piece (the order of the merges Hugging Face generates from a GGUF vocabulary: for normal
 * pieces the order of their scores; llama.cpp goes by score, and so merges the -1000-scored
 * user-defined runs of spaces last); a symbol that is no piece becomes its bytes' <0xNN> pieces (else the
 * unknown piece, else nothing). */
static void spm_word(enc *e, const unsigned char *t, size_t n) {
    const attn_bpe *b = e->b;
    if (e->st != ATTN_OK || n == 0) return;
    if (!word_scratch(e, n)) return;
    sym *sy = e->sy;
    size_t m = 0;
    for (size_t i = 0; i < n;) { /* well-formed UTF-8 (clean_text) */
        size_t nx;
        u8_at(t, i, &nx);
        sy[m].id = (int32_t)i, sy[m].alive = 1;
        sy[m].prev = (int32_t)m - 1;
        sy[m].next = (int32_t)m + 1;
        m++;
        i = nx;
    }
    sy[m - 1].next = -1;
#define SPM_END(k) (sy[k].next >= 0 ? (size_t)sy[sy[k].next].id : n)
    hitem *hp = e->hp;
    size_t hn = 0;
    for (size_t i = 0; i + 1 < m; i++) {
        int32_t id = stab_find(b->vtab, b->vmask, b->key, (const char *)t + sy[i].id,
                               SPM_END(i + 1) - (size_t)sy[i].id);
        if (id >= 0) {
            hitem h = {(uint32_t)id, (uint32_t)i, id};
            hpush(hp, &hn, h);
        }
    }
    while (hn) {
        hitem h = hpop(hp, &hn);
        sym *a = &sy[h.pos];
        if (!a->alive || a->next < 0) continue;
        size_t c = (size_t)a->next, from = (size_t)a->id, to = SPM_END(c);
        if (stab_find(b->vtab, b->vmask, b->key, (const char *)t + from, to - from) != h.id)
            continue; /* stale: a side was merged since */
        sy[c].alive = 0;
        a->next = sy[c].next;
        if (a->next >= 0) sy[a->next].prev = (int32_t)h.pos;
        if (a->prev >= 0) {
            size_t p = (size_t)a->prev;
            int32_t id = stab_find(b->vtab, b->vmask, b->key, (const char *)t + sy[p].id,
                                   SPM_END(h.pos) - (size_t)sy[p].id);
            if (id >= 0) {
                hitem g = {(uint32_t)id, (uint32_t)p, id};
                hpush(hp, &hn, g);
            }
        }
        if (a->next >= 0) {
            int32_t id = stab_find(b->vtab, b->vmask, b->key, (const char *)t + from,
                                   SPM_END((size_t)a->next) - from);
            if (id >= 0) {
                hitem g = {(uint32_t)id, h.pos, id};
                hpush(hp, &hn, g);
            }
        }
    }
    int prev_unk = 0;
    for (size_t i = 0; i < m; i = sy[i].next >= 0 ? (size_t)sy[i].next : m) {
        size_t from = (size_t)sy[i].id, to = SPM_END(i);
        int32_t id = stab_find(b->vtab, b->vmask, b->key, (const char *)t + from, to - from);
        if (id >= 0) {
            emit(e, id);
            prev_unk = 0;
            continue;
        }
        for (size_t k = from; k < to; k++) {
            int32_t bt = b->byte_tok[t[k]];
            if (bt >= 0) {
                emit(e, bt);
                prev_unk = 0;
            } else if (b->unk >= 0 && !(b->fuse_unk && prev_unk)) {
                emit(e, b->unk);
                prev_unk = 1;
            }
        }
    }
#undef SPM_END
}

static void split_added(enc *e, const unsigned char *s, size_t a, size_t z, int pass);

/* WordPiece of one word w[0, n) (normalized code points): the longest prefix that is a token,
 * then the longest continuation (the prefix "##" and the next characters) that is one, and so
 * on; a word with a part no token matches, or longer than max_input_chars_per_word
 * characters, is the unknown token alone.  Candidates longer than the longest token are not
 * looked up (they cannot match), so a word costs O(n * longest token). */
static void wp_word(enc *e, const uint32_t *w, size_t n) {
    const attn_bpe *b = e->b;
    if (n == 0 || !ENC_GO(e)) return;
    if ((uint64_t)n > (uint64_t)b->wps.max_chars) {
        emit(e, b->unk);
        return;
    }
    size_t np = b->wps.nprefix, need;
    /* the word's bytes after np bytes of room: the prefix is written before a continuation,
     * over bytes already used */
    if (!attn__mul_size(n, 4, &need) || !attn__add_size(need, np, &need) ||
        !grow_to(e, (void **)&e->buf, &e->bufcap, need, 1) ||
        !grow_to(e, (void **)&e->pos, &e->poscap, n + 1, sizeof *e->pos)) {
        e->st = attn__fail(e->ctx, ATTN_E_NOMEM, "out of memory (tokenizer)");
        return;
    }
    char *t = e->buf + np;
    size_t *pos = e->pos;
    pos[0] = 0;
    for (size_t i = 0; i < n; i++)
        pos[i + 1] = pos[i] + attn__utf8_put(w[i], (unsigned char *)(t + pos[i]));
    int64_t first = e->n;
    for (size_t start = 0; start < n;) {
        size_t room = b->maxkey, end, lo, hi;
        if (start) room = room > np ? room - np : 0;
        /* the last end whose piece fits in room bytes */
        for (lo = start, hi = n; lo < hi;) {
            size_t mid = lo + (hi - lo + 1) / 2;
            if (pos[mid] - pos[start] <= room) lo = mid;
            else hi = mid - 1;
        }
        int32_t id = -1;
        for (end = lo; end > start; end--) {
            const char *p = t + pos[start];
            size_t l = pos[end] - pos[start];
            if (start) {
                memcpy(t + pos[start] - np, b->wps.prefix, np);
                p -= np, l += np;
            }
            if ((id = stab_find(b->vtab, b->vmask, b->key, p, l)) >= 0) break;
        }
        if (id < 0) {
            e->n = first;
            emit(e, b->unk);
            return;
        }
        emit(e, id);
        start = end;
    }
}

/* BertPreTokenizer and WordPiece on s[a, z) (well-formed UTF-8), normalized on the way unless
 * e->normed: words end at whitespace, punctuation characters are words of their own. */
static void wp_words(enc *e, const unsigned char *s, size_t a, size_t z) {
    const attn_bpe *b = e->b;
    size_t wn = 0;
    for (size_t i = a; i < z && ENC_GO(e);) {
        uint32_t c = u8_at(s, i, &i), cp[ATTN__WP_NORM_MAX];
        int m = e->normed ? (cp[0] = c, 1) : attn__wp_normalize(&b->wn, c, cp);
        for (int j = 0; j < m; j++) {
            uint32_t d = cp[j];
            if (attn__wp_is_split(d)) {
                wp_word(e, e->wcp, wn), wn = 0;
            } else if (attn__wp_is_punct(d)) {
                wp_word(e, e->wcp, wn), wn = 0;
                wp_word(e, &d, 1);
            } else {
                if (!attn__grow(e->ctx, (void **)&e->wcp, &e->wcap, wn, sizeof *e->wcp)) {
                    e->st = attn__fail(e->ctx, ATTN_E_NOMEM, "out of memory (tokenizer)");
                    return;
                }
                e->wcp[wn++] = d;
            }
        }
    }
    wp_word(e, e->wcp, wn);
}

static void pretok(enc *e, const unsigned char *s, size_t a, size_t z) {
    if (e->pre == PRE_WORDPIECE) {
        if (e->normed || !e->b->has_norm) {
            wp_words(e, s, a, z);
            return;
        }
        /* normalized added tokens: they are matched on the normalized gap */
        size_t k;
        if (z - a > SIZE_MAX / (4 * ATTN__WP_NORM_MAX)) {
            e->st = attn__fail(e->ctx, ATTN_E_OVERFLOW, "attn_bpe_encode: text too large");
            return;
        }
        k = wp_normalize_text(&e->b->wn, s + a, z - a, NULL);
        if (!grow_to(e, (void **)&e->nbuf, &e->nbcap, k ? k : 1, 1)) {
            e->st = attn__fail(e->ctx, ATTN_E_NOMEM, "out of memory (tokenizer)");
            return;
        }
        wp_normalize_text(&e->b->wn, s + a, z - a, e->nbuf);
        e->normed = 1;
        if (k) split_added(e, e->nbuf, 0, k, 1);
        e->normed = 0;
        return;
    }
    if (e->pre == PRE_SPM) {
        /* no pre-tokenizer: the text between added tokens (matched on the raw text) is one
         * word, normalized: spaces -> U+2581, and one U+2581 before the text's start where
         * the vocabulary asks for it */
        size_t spaces = 0, n, p = e->b->add_prefix && a == 0 ? 3 : 0;
        for (size_t i = a; i < z; i++) spaces += s[i] == ' ';
        if (!attn__add_size(z - a, 2 * spaces + p, &n) ||
            !grow_to(e, (void **)&e->buf, &e->bufcap, n, 1)) {
            e->st = attn__fail(e->ctx, ATTN_E_NOMEM, "out of memory (tokenizer)");
            return;
        }
        unsigned char *w = (unsigned char *)e->buf;
        size_t o = 0;
        if (p) memcpy(w, "\xE2\x96\x81", 3), o = 3;
        for (size_t i = a; i < z; i++) {
            if (s[i] == ' ') memcpy(w + o, "\xE2\x96\x81", 3), o += 3;
            else w[o++] = s[i];
        }
        spm_word(e, w, o);
        return;
    }
    if (e->pre == PRE_LLAMA3 || e->pre == PRE_QWEN2) {
        for (size_t i = a; i < z && e->st == ATTN_OK;) {
            size_t j = m_llama3(s, i, z, e->pre == PRE_QWEN2 ? 1 : 3);
            bpe_word(e, s + i, j - i);
            i = j;
        }
        return;
    }
    if (e->pre == PRE_SMOLLM) { /* Digits(individual_digits): each numeric character alone */
        size_t r = a;
        for (size_t i = a; i < z && e->st == ATTN_OK;) {
            size_t nx;
            if (cls_at(s, i, &nx) & C_D) {
                for (size_t k = r; k < i && e->st == ATTN_OK;) {
                    size_t j = m_gpt2(s, k, i);
                    bpe_word(e, s + k, j - k);
                    k = j;
                }
                bpe_word(e, s + i, nx - i);
                r = nx;
            }
            i = nx;
        }
        a = r;
    }
    for (size_t i = a; i < z && e->st == ATTN_OK;) {
        size_t j = m_gpt2(s, i, z);
        bpe_word(e, s + i, j - i);
        i = j;
    }
}

/* Added tokens of one pass in s[a, z), leftmost-longest; the gaps go to the next pass or to the
 * pre-tokenizer. */
static void split_added(enc *e, const unsigned char *s, size_t a, size_t z, int pass) {
    const attn_bpe *b = e->b;
    /* (WordPiece's pass 1 runs on the normalized text: pretok normalizes the gap first) */
    int last = pass == 1 || !b->has_norm || b->pre == PRE_WORDPIECE;
    size_t seg = a;
    for (size_t i = a; i < z && ENC_GO(e);) {
        int32_t node = b->root[s[i]], best = -1;
        size_t end = i;
        for (size_t k = i + 1; node >= 0; k++) {
            if (b->trie[node].id[pass] >= 0) best = node, end = k;
            if (k >= z) break;
            int32_t c = b->trie[node].child;
            while (c >= 0 && b->trie[c].c != s[k]) c = b->trie[c].sib;
            node = c;
        }
        if (best < 0) {
            i++;
            continue;
        }
        if (b->trie[best].special[pass] && !e->parse) { /* its span stays text */
            i = end;
            continue;
        }
        if (seg < i) {
            if (last) pretok(e, s, seg, i);
            else split_added(e, s, seg, i, 1);
        }
        emit(e, b->trie[best].id[pass]);
        seg = i = end;
    }
    if (seg < z && ENC_GO(e)) {
        if (last) pretok(e, s, seg, z);
        else split_added(e, s, seg, z, 1);
    }
}

/* text[0, len) as well-formed UTF-8: invalid UTF-8 -> U+FFFD per maximal invalid subpart, as
 * Python's bytes.decode('utf-8', errors='replace').  A valid text is used as it is (*owned
 * NULL), else the copy is *owned (free it). */
static attn_status clean_text(attn_ctx *ctx, const char *text, size_t len,
                              const unsigned char **out, unsigned char **owned, size_t *olen) {
    const unsigned char *s = (const unsigned char *)text;
    size_t clean = 0, bad_total = 0, csz;
    *owned = NULL;
    ATTN_FAIL_IF(!attn__mul_size(len, 3, &csz), ctx, ATTN_E_OVERFLOW, "text too large");
    for (size_t i = 0; i < len;) {
        size_t bad;
        int cut;
        size_t l = attn__utf8_check(s + i, len - i, &bad, &cut);
        if (l) {
            clean += l;
            i += l;
        } else {
            clean += 3; /* clean <= 3 len: no overflow */
            bad_total++;
            i += bad;
        }
    }
    *out = s;
    *olen = clean;
    if (!bad_total) return ATTN_OK;
    unsigned char *u = attn__malloc(ctx, clean);
    ATTN_FAIL_IF(!u, ctx, ATTN_E_NOMEM, "out of memory (tokenizer)");
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t bad;
        int cut;
        size_t l = attn__utf8_check(s + i, len - i, &bad, &cut);
        if (l) {
            memcpy(u + o, s + i, l);
            o += l, i += l;
        } else {
            u[o] = 0xEF, u[o + 1] = 0xBF, u[o + 2] = 0xBD;
            o += 3, i += bad;
        }
    }
    *out = *owned = u;
    return ATTN_OK;
}

static attn_status encode(attn_ctx *ctx, const attn_bpe *b, const char *text, size_t len,
                         unsigned flags, int32_t *ids, int64_t cap, int64_t *n, int stop) {
    if (!ctx || !b || !n || (len && !text) || cap < 0 || (cap > 0 && !ids))
        return attn__fail(ctx, ATTN_E_INVALID, "attn_bpe_encode: NULL or negative argument");
    ATTN_FAIL_IF(flags & ~(unsigned)ATTN_BPE_PARSE_SPECIAL, ctx, ATTN_E_INVALID,
                 "attn_bpe_encode: unknown flags 0x%x", flags);
    int64_t lim = attn_ctx_limit(ctx, ATTN_LIMIT_TEXT_BYTES);
    ATTN_FAIL_IF((uint64_t)len > (uint64_t)lim, ctx, ATTN_E_UNSUPPORTED,
                 "attn_bpe_encode: a text of %zu bytes is over ATTN_LIMIT_TEXT_BYTES (%lld)",
                 len, (long long)lim);
    *n = 0;
    const unsigned char *s;
    unsigned char *u;
    size_t clean;
    ATTN_TRY(clean_text(ctx, text, len, &s, &u, &clean));
    enc e;
    memset(&e, 0, sizeof e);
    e.ctx = ctx, e.b = b, e.pre = b->pre, e.parse = (flags & ATTN_BPE_PARSE_SPECIAL) != 0;
    e.ids = ids, e.cap = cap, e.stop = stop;
    if (clean) {
        if (b->nadded) split_added(&e, s, 0, clean, 0);
        else pretok(&e, s, 0, clean);
    }
    attn__free(ctx, u), attn__free(ctx, e.sy), attn__free(ctx, e.hp), attn__free(ctx, e.buf);
    attn__free(ctx, e.wcp), attn__free(ctx, e.pos), attn__free(ctx, e.nbuf);
    if (e.st == ATTN_OK) *n = e.n;
    return e.st;
}

attn_status attn_bpe_encode(attn_ctx *ctx, const attn_bpe *b, const char *text, size_t len,
                            unsigned flags, int32_t *ids, int64_t cap, int64_t *n) {
    return encode(ctx, b, text, len, flags, ids, cap, n, 0);
}

attn_status attn__bpe_encode_upto(attn_ctx *ctx, const attn_bpe *b, const char *text,
                                  size_t len, unsigned flags, int32_t *ids, int64_t cap,
                                  int64_t *n) {
    return encode(ctx, b, text, len, flags, ids, cap, n, 1);
}

attn_status attn__bpe_pretokens(attn_ctx *ctx, const char *pre, const char *text, size_t len,
                                int64_t *ends, int64_t cap, int64_t *n) {
    int p = pre ? pre_from_name(pre) : -1;
    if (!ctx || !n || (len && !text) || p < 0 || cap < 0 || (cap > 0 && !ends))
        return attn__fail(ctx, ATTN_E_INVALID, "attn__bpe_pretokens: bad argument");
    const unsigned char *s;
    unsigned char *u;
    size_t clean;
    ATTN_TRY(clean_text(ctx, text, len, &s, &u, &clean));
    enc e;
    memset(&e, 0, sizeof e);
    e.ctx = ctx, e.pre = p, e.ends = ends, e.cap = cap, e.base = s;
    pretok(&e, s, 0, clean);
    attn__free(ctx, u);
    *n = e.n;
    return e.st;
}

/* ---- decoding -------------------------------------------------------------------------------- */
static attn_status check_ids(attn_ctx *ctx, const attn_bpe *b, const int32_t *ids, int64_t n,
                             const char *fn) {
    for (int64_t i = 0; i < n; i++)
        ATTN_FAIL_IF(ids[i] < 0 || ids[i] >= b->n, ctx, ATTN_E_INVALID,
                     "%s: id %d (at %lld) is outside the vocabulary [0, %lld)", fn, (int)ids[i],
                     (long long)i, (long long)b->n);
    return ATTN_OK;
}

/* The bytes token id decodes to, at the start of a text (at_start) or after other tokens:
 * WordPiece's two forms; SentencePiece's with add_space_prefix drops the space the normalizer
 * put before the text (the library's Strip decoder: one leading space of the whole text).
 * *started: whether, after this token, the text has begun (a WordPiece token, or a token with
 * bytes). */
static const unsigned char *tok_bytes(const attn_bpe *b, int32_t id, int at_start, size_t *l,
                                      int *started) {
    if (b->dec2 && !at_start) {
        *l = b->doff2[id + 1] - b->doff2[id];
        *started = 1;
        return b->dec2 + b->doff2[id];
    }
    const unsigned char *p = b->dec + b->doff[id];
    *l = b->doff[id + 1] - b->doff[id];
    *started = b->dec2 || *l > 0;
    if (at_start && b->pre == PRE_SPM && b->add_prefix && *l && p[0] == ' ') p++, (*l)--;
    return p;
}

#define DECODE_FLAGS (ATTN_BPE_SKIP_SPECIAL | ATTN_BPE_CONTINUE)

attn_status attn_bpe_decode(attn_ctx *ctx, const attn_bpe *b, const int32_t *ids, int64_t n,
                            unsigned flags, char *out, size_t cap, size_t *len) {
    if (!ctx || !b || !len || n < 0 || (n > 0 && !ids) || (cap > 0 && !out))
        return attn__fail(ctx, ATTN_E_INVALID, "attn_bpe_decode: NULL or negative argument");
    ATTN_FAIL_IF(flags & ~(unsigned)DECODE_FLAGS, ctx, ATTN_E_INVALID,
                 "attn_bpe_decode: unknown flags 0x%x", flags);
    ATTN_TRY(check_ids(ctx, b, ids, n, "attn_bpe_decode"));
    int skip = (flags & ATTN_BPE_SKIP_SPECIAL) != 0, started = (flags & ATTN_BPE_CONTINUE) != 0;
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (skip && b->type[id] == ATTN_BPE_TOKEN_CONTROL) continue;
        size_t l;
        int now;
        const unsigned char *p = tok_bytes(b, id, !started, &l, &now);
        started |= now;
        ATTN_FAIL_IF(!attn__add_size(total, l, &total), ctx, ATTN_E_OVERFLOW,
                     "attn_bpe_decode: the text's size overflows");
        if (total - l < cap) {
            size_t k = cap - (total - l) < l ? cap - (total - l) : l;
            memcpy(out + (total - l), p, k);
        }
    }
    if (total < cap) out[total] = 0;
    *len = total;
    return ATTN_OK;
}

/* The lossy UTF-8 of p[0, n) (a pending start and a token's bytes) into o (NULL: count only):
 * complete characters as they are, U+FFFD per maximal invalid subpart; a valid start cut short
 * by the end is left out unless flush.  Returns the bytes written; *used: the bytes consumed. */
static size_t lossy(const unsigned char *p, size_t n, int flush, unsigned char *o,
                    size_t *used) {
    size_t k = 0, i = 0;
    while (i < n) {
        size_t bad;
        int cut;
        size_t l = attn__utf8_check(p + i, n - i, &bad, &cut);
        if (l) {
            if (o) memcpy(o + k, p + i, l);
            k += l, i += l;
            continue;
        }
        if (cut && !flush) break;
        if (o) o[k] = 0xEF, o[k + 1] = 0xBF, o[k + 2] = 0xBD;
        k += 3, i += bad;
    }
    *used = i;
    return k;
}

/* One token's bytes t[0, tl) after the pending start pend[0, pn) (a valid start cut short,
 * pn <= 3): writes the complete characters (U+FFFD per invalid subpart) to o (NULL: count
 * only), the new pending start to np[0, *npn); returns the bytes written. */
static size_t stream_step(const unsigned char *pend, size_t pn, const unsigned char *t,
                          size_t tl, unsigned char *o, unsigned char *np, size_t *npn) {
    size_t k = 0, from = 0, used;
    if (pn) { /* settle the character the pending bytes start: it needs at most 4 bytes */
        unsigned char x[4];
        size_t xn = pn + (tl < 4 - pn ? tl : 4 - pn), bad;
        int cut;
        memcpy(x, pend, pn);
        memcpy(x + pn, t, xn - pn);
        size_t l = attn__utf8_check(x, xn, &bad, &cut);
        if (!l && cut) { /* still incomplete: every byte so far stays pending */
            memcpy(np, x, xn);
            *npn = xn;
            return 0;
        }
        if (l) {
            if (o) memcpy(o, x, l);
            k = l;
        } else {
            if (o) o[0] = 0xEF, o[1] = 0xBF, o[2] = 0xBD;
            k = 3, l = bad; /* the subpart holds every pending byte: they were a valid start */
        }
        from = l - pn;
    }
    k += lossy(t + from, tl - from, 0, o ? o + k : NULL, &used);
    *npn = tl - from - used;
    memcpy(np, t + from + used, *npn);
    return k;
}

attn_status attn_bpe_decode_stream(attn_ctx *ctx, const attn_bpe *b, attn_bpe_stream *st,
                                   int32_t id, unsigned flags, char *out, size_t cap,
                                   size_t *len) {
    if (!ctx || !b || !st || !len || (cap > 0 && !out))
        return attn__fail(ctx, ATTN_E_INVALID, "attn_bpe_decode_stream: NULL argument");
    ATTN_FAIL_IF(flags & ~(unsigned)DECODE_FLAGS, ctx, ATTN_E_INVALID,
                 "attn_bpe_decode_stream: unknown flags 0x%x", flags);
    ATTN_FAIL_IF(st->npending < 0 || st->npending > 3, ctx, ATTN_E_INVALID,
                 "attn_bpe_decode_stream: the stream state is corrupt (%d pending bytes)",
                 st->npending);
    ATTN_TRY(check_ids(ctx, b, &id, 1, "attn_bpe_decode_stream"));
    *len = 0;
    if ((flags & ATTN_BPE_SKIP_SPECIAL) && b->type[id] == ATTN_BPE_TOKEN_CONTROL) {
        if (cap) out[0] = 0;
        return ATTN_OK;
    }
    size_t tl, npn;
    int now;
    const unsigned char *t =
        tok_bytes(b, id, !st->started && !(flags & ATTN_BPE_CONTINUE), &tl, &now);
    unsigned char np[4];
    size_t need = stream_step(st->pending, (size_t)st->npending, t, tl, NULL, np, &npn);
    *len = need;
    ATTN_FAIL_IF(need > cap, ctx, ATTN_E_INVALID,
                 "attn_bpe_decode_stream: the output needs %zu bytes, has %zu", need, cap);
    stream_step(st->pending, (size_t)st->npending, t, tl, (unsigned char *)out, np, &npn);
    memcpy(st->pending, np, npn);
    st->npending = (int)npn;
    st->started |= now | ((flags & ATTN_BPE_CONTINUE) != 0);
    if (need < cap) out[need] = 0;
    return ATTN_OK;
}

attn_status attn_bpe_decode_stream_end(attn_ctx *ctx, attn_bpe_stream *st, char *out,
                                       size_t cap, size_t *len) {
    if (!ctx || !st || !len || (cap > 0 && !out))
        return attn__fail(ctx, ATTN_E_INVALID, "attn_bpe_decode_stream_end: NULL argument");
    ATTN_FAIL_IF(st->npending < 0 || st->npending > 3, ctx, ATTN_E_INVALID,
                 "attn_bpe_decode_stream_end: the stream state is corrupt (%d pending bytes)",
                 st->npending);
    size_t used, need = lossy(st->pending, (size_t)st->npending, 1, NULL, &used);
    *len = need;
    ATTN_FAIL_IF(need > cap, ctx, ATTN_E_INVALID,
                 "attn_bpe_decode_stream_end: the output needs %zu bytes, has %zu", need, cap);
    lossy(st->pending, (size_t)st->npending, 1, (unsigned char *)out, &used);
    st->npending = 0;
    st->started = 0;
    if (need < cap) out[need] = 0;
    return ATTN_OK;
}

/* ---- queries --------------------------------------------------------------------------------- */
int32_t attn_bpe_token_id(const attn_bpe *b, const char *text) {
    if (!b || !text) return -1;
    return stab_find(b->vtab, b->vmask, b->key, text, strlen(text));
}

const char *attn_bpe_token_text(const attn_bpe *b, int32_t id) {
    if (!b || id < 0 || id >= b->n) return NULL;
    return b->key[id].p;
}

int attn_bpe_token_type(const attn_bpe *b, int32_t id) {
    if (!b || id < 0 || id >= b->n) return 0;
    return b->type[id];
}

int64_t attn_bpe_vocab_size(const attn_bpe *b) { return b ? b->n : 0; }

attn_status attn_bpe_merges(const attn_bpe *b, int32_t *pairs, int64_t cap) {
    if (!b || cap < b->nmerges || (b->nmerges > 0 && !pairs)) return ATTN_E_INVALID;
    for (int64_t r = 0; r < 2 * b->nmerges; r++) pairs[r] = -1;
    for (uint64_t i = 0; b->mtab && i <= b->mmask; i++) {
        const mslot *m = &b->mtab[i];
        if (m->key == UINT64_MAX) continue;
        pairs[2 * (int64_t)m->rank] = (int32_t)(m->key >> 32);
        pairs[2 * (int64_t)m->rank + 1] = (int32_t)(uint32_t)m->key;
    }
    return ATTN_OK;
}

attn_status attn_bpe_get_info(const attn_bpe *b, attn_bpe_info *info) {
    if (!b || !info) return ATTN_E_INVALID;
    memset(info, 0, sizeof *info);
    info->vocab_size = b->n;
    info->n_merges = b->nmerges;
    info->n_added = b->nadded;
    info->max_token_bytes = (int64_t)b->max_dec;
    info->pre = pre_names[b->pre];
    info->ignore_merges = b->ignore_merges;
    info->unk_id = b->unk;
    info->kind = b->pre == PRE_SPM         ? ATTN_BPE_KIND_SENTENCEPIECE
                 : b->pre == PRE_WORDPIECE ? ATTN_BPE_KIND_WORDPIECE
                                           : ATTN_BPE_KIND_BYTE_LEVEL;
    info->add_space_prefix = b->pre == PRE_SPM && b->add_prefix;
    info->cls_id = info->sep_id = info->pad_id = -1;
    if (b->pre == PRE_WORDPIECE) {
        info->clean_text = b->wps.clean != 0;
        info->handle_chinese_chars = b->wps.chinese != 0;
        info->strip_accents = b->wps.strip_accents < 0 ? -1 : b->wps.strip_accents != 0;
        info->lowercase = b->wps.lower != 0;
        info->max_input_chars_per_word = b->wps.max_chars;
        info->cls_id = b->wps.cls, info->sep_id = b->wps.sep, info->pad_id = b->wps.pad;
    }
    return ATTN_OK;
}
