/* The byte-level BPE tokenizer (attn_bpe_*) against the Hugging Face tokenizers library:
 * fixtures/bpe/ from tests/gen_bpe.py (small tokenizers of the three pre-tokenizers and two
 * hand-built edge cases, each loaded from its tokenizer.json and, where a GGUF file could hold
 * it, built from arrays; the ids of a fuzzed corpus with and without special-token parsing,
 * decode of id sequences), round trips, hostile texts and files, refusals; and, when
 * ATTN_SMOLLM2_GGUF names SmolLM2-135M-Instruct's GGUF file, its real vocabulary read from the
 * file against fixtures/bpe/smollm2_expected.txt.  The WordPiece kind (BERT's) against
 * fixtures/wordpiece/ from tests/gen_wordpiece.py (three tokenizer.json files and a BERT
 * folder, and all-MiniLM-L6-v2's tokenizer.json and vocab.txt when ATTN_MINILM_DIR names its
 * folder); SentencePiece's add_space_prefix rule against fixtures/bpe/spm_prefix.txt. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../text/bpe.h" /* attn__bpe_pretokens */
#include "testutil.h"

#define DIR "fixtures/bpe/"

/* ---- fixture files ------------------------------------------------------------------------- */
typedef struct buf {
    unsigned char *p;
    size_t n;
} buf;

static int hexval(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* hex digits up to a space or the end -> bytes (NUL-terminated, not counted) */
static buf unhex(const char *s) {
    size_t n = 0;
    while (s[n] && s[n] != ' ') n++;
    buf b = {malloc(n / 2 + 1), n / 2};
    for (size_t i = 0; i < n / 2; i++)
        b.p[i] = (unsigned char)(hexval(s[2 * i]) * 16 + hexval(s[2 * i + 1]));
    b.p[n / 2] = 0;
    return b;
}

/* "X n id id ..." -> ids */
static int32_t *parse_ids(const char *s, int64_t *n) {
    char *p = (char *)s + 2;
    *n = strtoll(p, &p, 10);
    int32_t *ids = malloc(sizeof *ids * (size_t)(*n + 1));
    for (int64_t i = 0; i < *n; i++) ids[i] = (int32_t)strtol(p, &p, 10);
    return ids;
}

typedef struct corpus {
    int n;
    buf raw[512], clean[512];
} corpus;

static int load_corpus_from(corpus *c, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    c->n = 0;
    char *t, *u;
    while (c->n < 512 && (t = tu_read_line(f)) && (u = tu_read_line(f))) {
        c->raw[c->n] = unhex(t + 2);
        c->clean[c->n] = unhex(u + 2);
        c->n++;
        free(t), free(u);
    }
    fclose(f);
    return c->n > 0;
}

static int load_corpus(corpus *c) { return load_corpus_from(c, DIR "corpus.txt"); }

static void free_corpus(corpus *c) {
    for (int i = 0; i < c->n; i++) free(c->raw[i].p), free(c->clean[i].p);
}

typedef struct expect {
    int n, nr;
    int32_t *ids[2][512]; /* [0]: parsed (I), [1]: not parsed (J) */
    int64_t nids[2][512];
    int32_t *seq[64];
    int64_t nseq[64];
    buf dec[2][64]; /* [0]: decode (D), [1]: skipping special tokens (S) */
} expect;

static int load_expect(const char *path, expect *e) {
    memset(e, 0, sizeof *e);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char *l;
    while ((l = tu_read_line(f))) {
        if (l[0] == 'I' && e->n < 512) {
            e->ids[0][e->n] = parse_ids(l, &e->nids[0][e->n]);
        } else if (l[0] == 'J' && e->n < 512) {
            if (l[2] == '=') {
                int64_t k = e->nids[1][e->n] = e->nids[0][e->n];
                e->ids[1][e->n] = malloc(sizeof(int32_t) * (size_t)(k + 1));
                memcpy(e->ids[1][e->n], e->ids[0][e->n], sizeof(int32_t) * (size_t)k);
            } else {
                e->ids[1][e->n] = parse_ids(l, &e->nids[1][e->n]);
            }
            e->n++;
        } else if (l[0] == 'R' && e->nr < 64) {
            e->seq[e->nr] = parse_ids(l, &e->nseq[e->nr]);
        } else if ((l[0] == 'D' || l[0] == 'S') && e->nr < 64) {
            e->dec[l[0] == 'S'][e->nr] = unhex(l + 2);
            if (l[0] == 'S') e->nr++;
        }
        free(l);
    }
    fclose(f);
    return e->n > 0;
}

static void free_expect(expect *e) {
    for (int i = 0; i < e->n; i++) free(e->ids[0][i]), free(e->ids[1][i]);
    for (int i = 0; i < e->nr; i++) free(e->seq[i]), free(e->dec[0][i].p), free(e->dec[1][i].p);
}

/* A vocabulary as arrays (what a GGUF file holds). */
typedef struct arrays {
    int64_t n, nm;
    char **tok, **merge;
    int32_t *type;
    char pre[32];
} arrays;

static void free_arrays(arrays *a) {
    for (int64_t i = 0; i < a->n; i++) free(a->tok[i]);
    for (int64_t i = 0; i < a->nm; i++) free(a->merge[i]);
    free(a->tok), free(a->merge), free(a->type);
    memset(a, 0, sizeof *a);
}

static int load_arrays(const char *path, arrays *a) {
    memset(a, 0, sizeof *a);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t tcap = 0, mcap = 0;
    char *l;
    while ((l = tu_read_line(f))) {
        if (l[0] == 'P') {
            snprintf(a->pre, sizeof a->pre, "%s", l + 2);
        } else if (l[0] == 'V') {
            if ((size_t)a->n == tcap) {
                tcap = tcap ? 2 * tcap : 256;
                a->tok = realloc(a->tok, sizeof *a->tok * tcap);
                a->type = realloc(a->type, sizeof *a->type * tcap);
            }
            char *p = l + 2;
            a->type[a->n] = (int32_t)strtol(p, &p, 10);
            a->tok[a->n++] = (char *)unhex(p + 1).p;
        } else if (l[0] == 'M') {
            if ((size_t)a->nm == mcap) {
                mcap = mcap ? 2 * mcap : 256;
                a->merge = realloc(a->merge, sizeof *a->merge * mcap);
            }
            buf x = unhex(l + 2), y = unhex(strchr(l + 2, ' ') + 1);
            char *m = malloc(x.n + y.n + 2);
            memcpy(m, x.p, x.n);
            m[x.n] = ' ';
            memcpy(m + x.n + 1, y.p, y.n + 1);
            a->merge[a->nm++] = m;
            free(x.p), free(y.p);
        }
        free(l);
    }
    fclose(f);
    return a->n > 0;
}

static attn_bpe *from_arrays(attn_ctx *ctx, const arrays *a) {
    attn_bpe *b = NULL;
    TU_STATUS(attn_bpe_create(ctx, (const char *const *)a->tok, a->n, a->type,
                              (const char *const *)a->merge, a->nm, a->pre, &b),
              ATTN_OK, ctx);
    return b;
}

/* ---- checks -------------------------------------------------------------------------------- */
static int same_ids(const int32_t *a, int64_t na, const int32_t *b, int64_t nb) {
    if (na != nb) return 0;
    for (int64_t i = 0; i < na; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

static void show_diff(const char *name, int k, int flags, const int32_t *got, int64_t ng,
                      const int32_t *want, int64_t nw) {
    fprintf(stderr, "%s: text %d (flags %d): %lld ids, the library %lld:", name, k, flags,
            (long long)ng, (long long)nw);
    int64_t i = 0;
    while (i < ng && i < nw && got[i] == want[i]) i++;
    fprintf(stderr, " first difference at %lld:", (long long)i);
    for (int64_t j = i; j < i + 8 && (j < ng || j < nw); j++)
        fprintf(stderr, " %d/%d", j < ng ? got[j] : -1, j < nw ? want[j] : -1);
    fprintf(stderr, "\n");
}

/* 1 when every byte of t has a token (its GPT-2 byte character is in the vocabulary), so
 * that nothing is dropped and decode(encode(t)) must be t. */
static int covered(const attn_bpe *b, const buf *t) {
    for (size_t i = 0; i < t->n; i++) {
        unsigned c = t->p[i], n = 0, u = c;
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE)) {
            for (unsigned x = 0; x < c; x++) /* the bytes before c that are not themselves */
                n += !((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
            u = 256 + n;
        }
        char ch[3] = {(char)u, 0, 0};
        if (u >= 0x80) ch[0] = (char)(0xC0 | u >> 6), ch[1] = (char)(0x80 | (u & 0x3F));
        if (attn_bpe_token_id(b, ch) < 0) return 0;
    }
    return 1;
}

/* Every corpus text's ids, both flags, against the library; decode(encode(x)) == x (after
 * the U+FFFD replacement) when roundtrip; the count without room for ids. */
static void check_corpus(attn_ctx *ctx, const attn_bpe *b, const corpus *c, const expect *e,
                         const char *name, int roundtrip) {
    int bad = 0, rt_bad = 0;
    size_t ocap = 1 << 16;
    char *out = malloc(ocap);
    int32_t *ids = malloc(sizeof *ids * (1 << 16));
    for (int k = 0; k < c->n && k < e->n; k++) {
        for (int fl = 0; fl < 2; fl++) {
            unsigned flags = fl == 0 ? ATTN_BPE_PARSE_SPECIAL : 0;
            int64_t n = -1;
            if (!TU_STATUS(attn_bpe_encode(ctx, b, (const char *)c->raw[k].p, c->raw[k].n, flags,
                                           ids, 1 << 16, &n),
                           ATTN_OK, ctx))
                continue;
            if (!same_ids(ids, n, e->ids[fl][k], e->nids[fl][k])) {
                if (bad++ < 4) show_diff(name, k, (int)flags, ids, n, e->ids[fl][k],
                                         e->nids[fl][k]);
                continue;
            }
            int64_t n0 = -1; /* the count alone, then half the ids */
            TU_STATUS(attn_bpe_encode(ctx, b, (const char *)c->raw[k].p, c->raw[k].n, flags,
                                      NULL, 0, &n0),
                      ATTN_OK, ctx);
            TU_CHECK(n0 == n, "%s: text %d: count %lld without room, %lld with", name, k,
                     (long long)n0, (long long)n);
            if (n > 1) {
                int32_t half[1 << 10];
                int64_t h = n / 2 < (1 << 10) ? n / 2 : (1 << 10), n1 = -1;
                TU_STATUS(attn_bpe_encode(ctx, b, (const char *)c->raw[k].p, c->raw[k].n,
                                          flags, half, h, &n1),
                          ATTN_OK, ctx);
                TU_CHECK(n1 == n && !memcmp(half, ids, sizeof *ids * (size_t)h),
                         "%s: text %d: a short id buffer changed the ids", name, k);
            }
            if (!roundtrip || !covered(b, &c->clean[k])) continue;
            size_t len = 0;
            TU_STATUS(attn_bpe_decode(ctx, b, ids, n, 0, out, ocap, &len), ATTN_OK, ctx);
            if (len != c->clean[k].n || memcmp(out, c->clean[k].p, len)) {
                if (rt_bad++ < 3)
                    fprintf(stderr, "%s: text %d: decode(encode(x)) != x (%zu vs %zu bytes)\n",
                            name, k, len, c->clean[k].n);
            } else {
                TU_CHECK(len < ocap && out[len] == 0, "%s: decode did not end with a NUL", name);
            }
        }
    }
    TU_CHECK(bad == 0, "%s: %d of %d encodings differ from the library", name, bad, 2 * c->n);
    TU_CHECK(rt_bad == 0, "%s: %d round trips differ", name, rt_bad);
    free(out), free(ids);
}

/* The streamed pieces of ids, ended: must be the library's decode. */
static void check_stream(attn_ctx *ctx, const attn_bpe *b, const int32_t *ids, int64_t n,
                         unsigned flags, const buf *want, const char *name, int k) {
    attn_bpe_stream st;
    memset(&st, 0, sizeof st);
    attn_bpe_info info;
    attn_bpe_get_info(b, &info);
    size_t cap = (size_t)(3 * (info.max_token_bytes + 3)) + 1, total = 0, len;
    char *piece = malloc(cap);
    char *all = malloc(cap * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) {
        /* too small a buffer first: refused with the size needed, the state unchanged */
        attn_bpe_stream before = st;
        size_t need = 0;
        attn_status s = attn_bpe_decode_stream(ctx, b, &st, ids[i], flags, piece, 0, &need);
        if (need == 0) { /* nothing comes out: done, with no room */
            TU_CHECK(s == ATTN_OK, "%s: sequence %d: an empty piece refused", name, k);
            continue;
        }
        TU_CHECK(s == ATTN_E_INVALID && !memcmp(&before, &st, sizeof st),
                 "%s: sequence %d: a small buffer was not refused cleanly", name, k);
        attn_ctx_clear_error(ctx);
        TU_STATUS(attn_bpe_decode_stream(ctx, b, &st, ids[i], flags, piece, cap, &len), ATTN_OK,
                  ctx);
        TU_CHECK(len == need && len < cap, "%s: sequence %d: piece of %zu bytes, %zu announced",
                 name, k, len, need);
        memcpy(all + total, piece, len);
        total += len;
    }
    TU_STATUS(attn_bpe_decode_stream_end(ctx, &st, piece, cap, &len), ATTN_OK, ctx);
    memcpy(all + total, piece, len);
    total += len;
    TU_CHECK(st.npending == 0, "%s: the stream's end left bytes", name);
    if (total != want->n || memcmp(all, want->p, total))
        TU_CHECK(0, "%s: sequence %d (flags %u): streamed %zu bytes, the library %zu", name, k,
                 flags, total, want->n);
    free(piece), free(all);
}

static void check_decode(attn_ctx *ctx, const attn_bpe *b, const expect *e, const char *name) {
    char *out = malloc(1 << 16);
    for (int k = 0; k < e->nr; k++) {
        for (int skip = 0; skip < 2; skip++) {
            unsigned flags = skip ? ATTN_BPE_SKIP_SPECIAL : 0;
            check_stream(ctx, b, e->seq[k], e->nseq[k], flags, &e->dec[skip][k], name, k);
            /* the exact bytes: the library's text wherever that has no U+FFFD */
            size_t len = 0;
            TU_STATUS(attn_bpe_decode(ctx, b, e->seq[k], e->nseq[k], flags, out, 1 << 16, &len),
                      ATTN_OK, ctx);
            const buf *w = &e->dec[skip][k];
            int lossy = 0;
            for (size_t i = 0; i + 2 < w->n; i++)
                lossy |= w->p[i] == 0xEF && w->p[i + 1] == 0xBF && w->p[i + 2] == 0xBD;
            if (!lossy)
                TU_CHECK(len == w->n && !memcmp(out, w->p, len),
                         "%s: sequence %d: decode differs from the library", name, k);
            /* a short buffer: the count is the same, the prefix too */
            size_t len2 = 0;
            char small[5];
            TU_STATUS(attn_bpe_decode(ctx, b, e->seq[k], e->nseq[k], flags, small, 5, &len2),
                      ATTN_OK, ctx);
            TU_CHECK(len2 == len && !memcmp(small, out, len < 5 ? len : 5),
                     "%s: sequence %d: decode into 5 bytes differs", name, k);
        }
    }
    free(out);
}

/* The vocabulary's own queries. */
static void check_queries(const attn_bpe *b, const char *name) {
    int64_t n = attn_bpe_vocab_size(b);
    attn_bpe_info info;
    TU_STATUS(attn_bpe_get_info(b, &info), ATTN_OK, NULL);
    TU_CHECK(info.vocab_size == n && n > 0, "%s: vocab size", name);
    int bad = 0;
    for (int32_t id = 0; id < n; id++) {
        const char *t = attn_bpe_token_text(b, id);
        if (!t || attn_bpe_token_id(b, t) != id) bad++;
        int ty = attn_bpe_token_type(b, id);
        if (ty != ATTN_BPE_TOKEN_NORMAL && ty != ATTN_BPE_TOKEN_CONTROL &&
            ty != ATTN_BPE_TOKEN_USER_DEFINED)
            bad++;
    }
    TU_CHECK(bad == 0, "%s: %d ids whose text does not look up to them", name, bad);
    TU_CHECK(!attn_bpe_token_text(b, -1) && !attn_bpe_token_text(b, (int32_t)n) &&
                 attn_bpe_token_type(b, (int32_t)n) == 0 &&
                 attn_bpe_token_id(b, "no such token \x01") == -1,
             "%s: out-of-range queries", name);
}

static void check_fixture(attn_ctx *ctx, const corpus *c, const char *name, int roundtrip) {
    char path[256];
    expect e;
    snprintf(path, sizeof path, DIR "%s.expected", name);
    if (!load_expect(path, &e)) {
        TU_CHECK(0, "cannot read %s", path);
        return;
    }
    snprintf(path, sizeof path, DIR "%s.json", name);
    attn_bpe *b = NULL;
    if (TU_STATUS(attn_bpe_load_json(ctx, path, &b), ATTN_OK, ctx)) {
        check_corpus(ctx, b, c, &e, name, roundtrip);
        check_decode(ctx, b, &e, name);
        check_queries(b, name);
    }
    arrays a;
    snprintf(path, sizeof path, DIR "%s.arrays", name);
    if (load_arrays(path, &a)) { /* the same tokenizer from arrays: the same ids */
        attn_bpe *b2 = from_arrays(ctx, &a);
        char nm[64];
        snprintf(nm, sizeof nm, "%s (arrays)", name);
        if (b2) {
            check_corpus(ctx, b2, c, &e, nm, roundtrip);
            check_decode(ctx, b2, &e, nm);
            attn_bpe_info i1, i2;
            attn_bpe_get_info(b, &i1), attn_bpe_get_info(b2, &i2);
            TU_CHECK(i1.vocab_size == i2.vocab_size && i1.n_added == i2.n_added &&
                         i1.ignore_merges == i2.ignore_merges && !strcmp(i1.pre, i2.pre),
                     "%s: the arrays' tokenizer differs from the file's", name);
        }
        attn_bpe_free(b2);
        free_arrays(&a);
    }
    printf("%s: %d texts x 2 flags, %d decodes checked\n", name, c->n, e.nr);
    attn_bpe_free(b);
    free_expect(&e);
}

/* The four pre-tokenizers alone: every word's end, against the library's. */
static void test_pretokens(attn_ctx *ctx, const corpus *c) {
    FILE *f = fopen(DIR "pretok.expected", "r");
    if (!f) {
        TU_CHECK(0, "cannot read " DIR "pretok.expected");
        return;
    }
    const char *names[4] = {"gpt2", "llama-bpe", "smollm", "qwen2"};
    int bad[4] = {0, 0, 0, 0}, k = 0;
    int64_t *ends = malloc(sizeof *ends * (1 << 16));
    char *l;
    for (int line = 0; (l = tu_read_line(f)); line++, free(l)) {
        int p = line % 4;
        k = line / 4;
        if (k >= c->n) break;
        int64_t nw;
        int32_t *w = parse_ids(l, &nw); /* offsets fit int32 here */
        int64_t n = -1;
        TU_STATUS(attn__bpe_pretokens(ctx, names[p], (const char *)c->raw[k].p, c->raw[k].n,
                                      ends, 1 << 16, &n),
                  ATTN_OK, ctx);
        int same = n == nw;
        for (int64_t i = 0; same && i < n; i++) same = ends[i] == w[i];
        if (!same && bad[p]++ < 3) {
            int64_t i = 0;
            while (i < n && i < nw && ends[i] == w[i]) i++;
            fprintf(stderr, "%s: text %d: %lld words, the library %lld; first difference at "
                    "word %lld: ends %lld vs %lld\n", names[p], k, (long long)n, (long long)nw,
                    (long long)i, i < n ? (long long)ends[i] : -1LL,
                    i < nw ? (long long)w[i] : -1LL);
        }
        free(w);
    }
    fclose(f);
    for (int p = 0; p < 4; p++)
        TU_CHECK(bad[p] == 0, "pre-tokenizer %s: %d of %d texts cut differently", names[p],
                 bad[p], c->n);
    TU_CHECK(k + 1 >= c->n, "pretok.expected: %d texts", k + 1);
    free(ends);
}

static size_t put_utf8(uint32_t cp, char *t) {
    if (cp < 0x80) return t[0] = (char)cp, 1;
    if (cp < 0x800) return t[0] = (char)(0xC0 | cp >> 6), t[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000) {
        t[0] = (char)(0xE0 | cp >> 12), t[1] = (char)(0x80 | ((cp >> 6) & 63));
        t[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    t[0] = (char)(0xF0 | cp >> 18), t[1] = (char)(0x80 | ((cp >> 12) & 63));
    t[2] = (char)(0x80 | ((cp >> 6) & 63)), t[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* Text k of pretok_all.expected (gen_bpe.py chunk_text): the code points of
 * [4096 k, 4096 (k + 1)), no surrogates, each followed by a probe. */
static size_t chunk_text(int k, char *t) {
    static const char *probe[8] = {" ", "a", "1", "'", "\n", "  ", "x ", "'s"};
    size_t n = 0;
    for (uint32_t c = 4096u * (uint32_t)k; c < 4096u * (uint32_t)(k + 1); c++) {
        if (c >= 0xD800 && c <= 0xDFFF) continue;
        n += put_utf8(c, t + n);
        size_t pl = strlen(probe[c % 8]);
        memcpy(t + n, probe[c % 8], pl);
        n += pl;
    }
    return n;
}

/* Every code point through the four pre-tokenizers: word counts and hashes of their ends. */
static void test_pretokens_all(attn_ctx *ctx) {
    FILE *f = fopen(DIR "pretok_all.expected", "r");
    if (!f) {
        TU_CHECK(0, "cannot read " DIR "pretok_all.expected");
        return;
    }
    char *t = malloc(4096 * 6);
    int64_t *ends = malloc(sizeof *ends * 4096 * 3);
    int bad = 0, lines = 0, k = -1;
    size_t tn = 0;
    char tag;
    int kk;
    long long nw;
    unsigned long long hw;
    while (fscanf(f, " %c %d %lld %llx", &tag, &kk, &nw, &hw) == 4) {
        const char *pre = tag == 'G'   ? "gpt2"
                          : tag == 'L' ? "llama-bpe"
                          : tag == 'Q' ? "qwen2"
                                       : "smollm";
        if (kk != k) tn = chunk_text(k = kk, t);
        int64_t n = -1;
        TU_STATUS(attn__bpe_pretokens(ctx, pre, t, tn, ends, 4096 * 3, &n), ATTN_OK, ctx);
        uint64_t h = 0xcbf29ce484222325ull;
        for (int64_t i = 0; i < n && i < 4096 * 3; i++)
            for (int b = 0; b < 8; b++)
                h = (h ^ (((uint64_t)ends[i] >> (8 * b)) & 0xFF)) * 0x100000001b3ull;
        if (n != nw || h != hw) {
            if (bad++ < 5)
                fprintf(stderr, "%s: code points U+%04X..U+%04X: %lld words, the library %lld "
                        "(or other ends)\n", pre, 4096 * k, 4096 * k + 4095, (long long)n, nw);
        }
        lines++;
    }
    fclose(f);
    TU_CHECK(lines == 4 * 272, "pretok_all.expected: %d lines", lines);
    TU_CHECK(bad == 0, "%d of %d blocks of code points cut differently from the library", bad,
             lines);
    free(t), free(ends);
}

/* ---- hostile texts ------------------------------------------------------------------------- */
static void check_roundtrip(attn_ctx *ctx, const attn_bpe *b, const char *text, size_t len,
                            const char *what) {
    int64_t n = -1;
    if (!TU_STATUS(attn_bpe_encode(ctx, b, text, len, 0, NULL, 0, &n), ATTN_OK, ctx)) return;
    int32_t *ids = malloc(sizeof *ids * (size_t)(n + 1));
    int64_t n2 = -1;
    TU_STATUS(attn_bpe_encode(ctx, b, text, len, 0, ids, n, &n2), ATTN_OK, ctx);
    size_t cap = 3 * len + 16, got = 0;
    char *out = malloc(cap);
    TU_STATUS(attn_bpe_decode(ctx, b, ids, n, 0, out, cap, &got), ATTN_OK, ctx);
    TU_CHECK(n2 == n && got == len && !memcmp(out, text, len),
             "%s: decode(encode(x)) != x (%zu -> %lld ids -> %zu bytes)", what, len,
             (long long)n, got);
    free(ids), free(out);
}

static void test_hostile(attn_ctx *ctx) {
    attn_bpe *b = NULL;
    if (!TU_STATUS(attn_bpe_load_json(ctx, DIR "smollm.json", &b), ATTN_OK, ctx)) return;
    char one[1];
    for (int c = 0; c < 128; c++) { /* every ASCII byte alone (the others are invalid alone) */
        one[0] = (char)c;
        check_roundtrip(ctx, b, one, 1, "one byte");
    }
    for (int c = 128; c < 256; c++) { /* an invalid byte alone: U+FFFD */
        one[0] = (char)c;
        int32_t ids[8];
        int64_t n = -1;
        size_t len = 0;
        char out[16];
        TU_STATUS(attn_bpe_encode(ctx, b, one, 1, 0, ids, 8, &n), ATTN_OK, ctx);
        TU_STATUS(attn_bpe_decode(ctx, b, ids, n < 8 ? n : 8, 0, out, 16, &len), ATTN_OK, ctx);
        TU_CHECK(len == 3 && !memcmp(out, "\xEF\xBF\xBD", 3), "byte 0x%02x alone: not U+FFFD",
                 c);
    }
    /* every valid code point, 4096 at a time (all of UTF-8's lengths and the classes) */
    char *t = malloc(4 * 4096);
    for (uint32_t base = 0; base < 0x110000; base += 4096) {
        size_t k = 0;
        for (uint32_t cp = base; cp < base + 4096; cp++)
            if (cp < 0xD800 || cp > 0xDFFF) k += put_utf8(cp, t + k);
        check_roundtrip(ctx, b, t, k, "code points");
    }
    free(t);
    /* long runs: one word, one whitespace run, digits, contractions, near-special tokens */
    size_t L = 1 << 18;
    char *s = malloc(L + 64);
    const char *pat[] = {"a", " ", "7", "'s", "<|im_end|", "ab ", "\r\n", "\xF0\x9F\x98\x80"};
    for (size_t p = 0; p < sizeof pat / sizeof *pat; p++) {
        size_t pl = strlen(pat[p]), k = 0;
        while (k + pl <= L) memcpy(s + k, pat[p], pl), k += pl;
        clock_t t0 = clock();
        check_roundtrip(ctx, b, s, k, pat[p]);
        double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
        TU_CHECK(secs < 20, "a run of %zu bytes of \"%s\" took %.1f s", k, pat[p], secs);
    }
    uint64_t rs = 42; /* random bytes, mostly invalid UTF-8 */
    for (size_t i = 0; i < L; i++) s[i] = (char)(tu_rand(&rs) >> 24);
    int64_t n = -1;
    TU_STATUS(attn_bpe_encode(ctx, b, s, L, ATTN_BPE_PARSE_SPECIAL, NULL, 0, &n), ATTN_OK, ctx);
    TU_CHECK(n > 0, "random bytes: no ids");
    free(s);
    /* the text limit, flags, arguments */
    int32_t ids[4];
    TU_STATUS(attn_ctx_set_limit(ctx, ATTN_LIMIT_TEXT_BYTES, 3), ATTN_OK, ctx);
    TU_STATUS(attn_bpe_encode(ctx, b, "abcd", 4, 0, ids, 4, &n), ATTN_E_UNSUPPORTED, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "ATTN_LIMIT_TEXT_BYTES") != NULL, "limit message: %s",
             attn_ctx_errmsg(ctx));
    TU_STATUS(attn_bpe_encode(ctx, b, "abc", 3, 0, ids, 4, &n), ATTN_OK, ctx);
    TU_STATUS(attn_ctx_set_limit(ctx, ATTN_LIMIT_TEXT_BYTES, (int64_t)1 << 30), ATTN_OK, ctx);
    TU_STATUS(attn_bpe_encode(ctx, b, "a", 1, 4, ids, 4, &n), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_bpe_encode(ctx, b, NULL, 1, 0, ids, 4, &n), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_bpe_encode(ctx, b, NULL, 0, 0, ids, 4, &n), ATTN_OK, ctx);
    TU_CHECK(n == 0, "the empty text gave ids");
    TU_STATUS(attn_bpe_encode(ctx, b, "a", 1, 0, NULL, 4, &n), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_bpe_encode(ctx, b, "a", 1, 0, ids, -1, &n), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_bpe_encode(ctx, NULL, "a", 1, 0, ids, 4, &n), ATTN_E_INVALID, ctx);
    int32_t badid[2] = {0, (int32_t)attn_bpe_vocab_size(b)};
    size_t len;
    char out[8];
    TU_STATUS(attn_bpe_decode(ctx, b, badid, 2, 0, out, 8, &len), ATTN_E_INVALID, ctx);
    badid[1] = -1;
    TU_STATUS(attn_bpe_decode(ctx, b, badid, 2, 0, out, 8, &len), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_bpe_decode(ctx, b, badid, 1, 8, out, 8, &len), ATTN_E_INVALID, ctx);
    attn_bpe_stream st = {{0}, 7};
    TU_STATUS(attn_bpe_decode_stream(ctx, b, &st, 0, 0, out, 8, &len), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_bpe_decode_stream_end(ctx, &st, out, 8, &len), ATTN_E_INVALID, ctx);
    /* a stream left with a cut character ends with U+FFFD */
    int32_t e9 = attn_bpe_token_id(b, "\xC3\x83"); /* "Ã": the byte 0xC3 */
    memset(&st, 0, sizeof st);
    TU_CHECK(e9 >= 0, "no token for the byte 0xC3");
    if (e9 >= 0) {
        TU_STATUS(attn_bpe_decode_stream(ctx, b, &st, e9, 0, out, 8, &len), ATTN_OK, ctx);
        TU_CHECK(len == 0 && st.npending == 1, "a lead byte came out");
        TU_STATUS(attn_bpe_decode_stream_end(ctx, &st, out, 2, &len), ATTN_E_INVALID, ctx);
        TU_STATUS(attn_bpe_decode_stream_end(ctx, &st, out, 8, &len), ATTN_OK, ctx);
        TU_CHECK(len == 3 && !memcmp(out, "\xEF\xBF\xBD", 3) && st.npending == 0,
                 "the stream's end did not give U+FFFD");
    }
    attn_bpe_free(b);
    attn_bpe_free(NULL);
}

/* attn_bpe_merges: the merges by rank, a pair listed twice at its later rank only */
static void test_merges(attn_ctx *ctx) {
    const char *tok[] = {"a", "b", "c", "ab", "bc", "abc"};
    const char *merges[] = {"a b", "b c", "ab c", "a b"};
    attn_bpe *b = NULL;
    if (!TU_STATUS(attn_bpe_create(ctx, tok, 6, NULL, merges, 4, "gpt2", &b), ATTN_OK, ctx))
        return;
    int32_t pairs[8];
    TU_STATUS(attn_bpe_merges(b, pairs, 3), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_bpe_merges(b, NULL, 4), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_bpe_merges(NULL, pairs, 4), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_bpe_merges(b, pairs, 4), ATTN_OK, ctx);
    const int32_t want[8] = {-1, -1, 1, 2, 3, 2, 0, 1};
    TU_CHECK(same_ids(pairs, 8, want, 8), "merges by rank: %d %d  %d %d  %d %d  %d %d",
             pairs[0], pairs[1], pairs[2], pairs[3], pairs[4], pairs[5], pairs[6], pairs[7]);
    attn_bpe_free(b);
}

/* ---- refusals ------------------------------------------------------------------------------ */
static void test_create(attn_ctx *ctx) {
    const char *tok[] = {"a", "b", "ab", "<|x|>", "\xC4\xA0", "c", "a"};
    int32_t types[] = {1, 1, 1, 3, 1, 4, 1};
    const char *merges[] = {"a b"};
    attn_bpe *b = (attn_bpe *)&b;
    TU_STATUS(attn_bpe_create(ctx, tok, 6, types, merges, 1, "gpt-4o", &b), ATTN_E_UNSUPPORTED,
              ctx);
    TU_CHECK(b == NULL && strstr(attn_ctx_errmsg(ctx), "gpt-4o"), "unknown pre: %s",
             attn_ctx_errmsg(ctx));
    TU_STATUS(attn_bpe_create(ctx, tok, 6, types, merges, 1, NULL, &b), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_bpe_create(ctx, NULL, 6, types, merges, 1, "gpt2", &b), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_bpe_create(ctx, tok, 6, types, NULL, 1, "gpt2", &b), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_bpe_create(ctx, tok, -1, types, merges, 1, "gpt2", &b), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_bpe_create(ctx, tok, 0, types, merges, 0, "gpt2", &b), ATTN_E_INVALID, ctx);
    const char *m_bad[][1] = {{"ab"}, {"a  b"}, {" a"}, {"a "}, {"a b c"}, {"a x"}, {"b a"}};
    for (size_t i = 0; i < sizeof m_bad / sizeof *m_bad; i++) {
        TU_STATUS(attn_bpe_create(ctx, tok, 6, types, m_bad[i], 1, "gpt2", &b), ATTN_E_FORMAT,
                  ctx);
        TU_CHECK(b == NULL, "refused, yet a tokenizer");
    }
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "not in the vocabulary") != NULL, "%s",
             attn_ctx_errmsg(ctx));
    const char *bad_utf8[] = {"a", "\xE2\x82"};
    int32_t ctl[] = {1, 3};
    TU_STATUS(attn_bpe_create(ctx, bad_utf8, 2, ctl, NULL, 0, "gpt2", &b), ATTN_E_FORMAT, ctx);
    TU_STATUS(attn_ctx_set_limit(ctx, ATTN_LIMIT_VOCAB, 5), ATTN_OK, ctx);
    TU_STATUS(attn_bpe_create(ctx, tok, 6, types, merges, 1, "gpt2", &b), ATTN_E_UNSUPPORTED,
              ctx);
    TU_STATUS(attn_ctx_set_limit(ctx, ATTN_LIMIT_VOCAB, 1 << 24), ATTN_OK, ctx);
    /* a text listed twice: looked up as its last id, both ids decode to it; "<|x|>" a control
     * token, "c" a user-defined one; the byte characters missing from the vocabulary are
     * dropped */
    if (!TU_STATUS(attn_bpe_create(ctx, tok, 7, types, merges, 1, "gpt2", &b), ATTN_OK, ctx))
        return;
    TU_CHECK(attn_bpe_token_id(b, "a") == 6 && attn_bpe_token_id(b, "<|x|>") == 3,
             "duplicate lookups");
    int32_t ids[16];
    int64_t n;
    TU_STATUS(attn_bpe_encode(ctx, b, "ab<|x|> cab", 11, ATTN_BPE_PARSE_SPECIAL, ids, 16, &n),
              ATTN_OK, ctx);
    int32_t want[] = {2, 3, 4, 5, 2};
    TU_CHECK(same_ids(ids, n, want, 5), "small vocabulary: %lld ids", (long long)n);
    TU_STATUS(attn_bpe_encode(ctx, b, "ab<|x|> cab", 11, 0, ids, 16, &n), ATTN_OK, ctx);
    int32_t want2[] = {2, 4, 5, 2}; /* '<', '|', 'x' have no tokens: dropped */
    TU_CHECK(same_ids(ids, n, want2, 4), "without special tokens: %lld ids", (long long)n);
    int32_t d[] = {0, 6, 3, 4};
    char out[32];
    size_t len;
    TU_STATUS(attn_bpe_decode(ctx, b, d, 4, 0, out, 32, &len), ATTN_OK, ctx);
    TU_CHECK(len == 8 && !memcmp(out, "aa<|x|> ", 8), "decode: %.*s", (int)len, out);
    TU_STATUS(attn_bpe_decode(ctx, b, d, 4, ATTN_BPE_SKIP_SPECIAL, out, 32, &len), ATTN_OK, ctx);
    TU_CHECK(len == 3 && !memcmp(out, "aa ", 3), "decode skipping: %.*s", (int)len, out);
    attn_bpe_info info;
    attn_bpe_get_info(b, &info);
    TU_CHECK(info.n_added == 2 && info.unk_id == -1 && info.ignore_merges == 0 &&
                 !strcmp(info.pre, "gpt2") && info.n_merges == 1,
             "info");
    attn_bpe_free(b);
}

static char tmpdir[256];

static attn_status load_text(attn_ctx *ctx, const char *text, attn_bpe **b) {
    char path[320];
    snprintf(path, sizeof path, "%s/tokenizer.json", tmpdir);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return attn_bpe_load_json(ctx, path, b);
}

/* A small tokenizer.json with parts replaced: vocab a, b, ab, c, "a b" merges. */
static char *doc(const char *added, const char *norm, const char *pre, const char *dec,
                 const char *model_extra, const char *vocab, const char *merges) {
    const char *bl = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
                     "\"use_regex\":true}";
    size_t n = 4096 + (vocab ? strlen(vocab) : 0) + (merges ? strlen(merges) : 0);
    char *s = malloc(n);
    snprintf(s, n,
             "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":%s,"
             "\"normalizer\":%s,\"pre_tokenizer\":%s,\"post_processor\":null,\"decoder\":%s,"
             "\"model\":{\"type\":\"BPE\",%s\"vocab\":%s,\"merges\":%s}}",
             added ? added : "[]", norm ? norm : "null", pre ? pre : bl, dec ? dec : bl,
             model_extra ? model_extra : "",
             vocab ? vocab : "{\"a\":0,\"b\":1,\"ab\":2,\"c\":3}",
             merges ? merges : "[\"a b\"]");
    return s;
}

typedef struct jcase {
    const char *what;
    char *text;
    attn_status want;
    const char *msg;
} jcase;

static void test_json(attn_ctx *ctx) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/attn-test-bpe-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        TU_CHECK(0, "mkdtemp");
        return;
    }
    const char *split_l3 =
        "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
        "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "
        "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
        "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":"
        "false,\"trim_offsets\":true,\"use_regex\":false}]}";
    const char *added_ok = "[{\"id\":4,\"content\":\"<s>\",\"single_word\":false,\"lstrip\":false,"
                           "\"rstrip\":false,\"normalized\":false,\"special\":true}]";
    jcase cs[] = {
        {"valid", doc(NULL, NULL, NULL, NULL, NULL, NULL, NULL), ATTN_OK, NULL},
        {"Llama 3 split", doc(NULL, NULL, split_l3, NULL, NULL, NULL, NULL), ATTN_OK, NULL},
        {"pairs", doc(NULL, NULL, NULL, NULL, NULL, NULL, "[[\"a\",\"b\"]]"), ATTN_OK, NULL},
        {"added", doc(added_ok, NULL, NULL, NULL, NULL, NULL, NULL), ATTN_OK, NULL},
        {"dropout 0.0", doc(NULL, NULL, NULL, NULL, "\"dropout\":0.0,", NULL, NULL), ATTN_OK,
         NULL},
        {"type last", doc(NULL, NULL, "{\"pretokenizers\":[{\"type\":\"Digits\","
                          "\"individual_digits\":true},{\"type\":\"ByteLevel\","
                          "\"add_prefix_space\":false}],\"type\":\"Sequence\"}", NULL, NULL,
                          NULL, NULL), ATTN_OK, NULL},
        {"four", doc(NULL, NULL, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":"
                     "\"Digits\"},{\"type\":\"Digits\"},{\"type\":\"Digits\"},{\"type\":"
                     "\"ByteLevel\",\"add_prefix_space\":false}]}", NULL, NULL, NULL, NULL),
         ATTN_E_UNSUPPORTED, "Sequence[Digits"},
        {"five", doc(NULL, NULL, "{\"type\":\"Sequence\",\"pretokenizers\":[{},{},{},{},{}]}",
                     NULL, NULL, NULL, NULL), ATTN_E_UNSUPPORTED, "more than"},
        {"empty sequence", doc(NULL, NULL, "{\"type\":\"Sequence\",\"pretokenizers\":[]}",
                               NULL, NULL, NULL, NULL), ATTN_E_UNSUPPORTED, "Sequence[]"},
        {"list, no Sequence", doc(NULL, NULL, "{\"type\":\"ByteLevel\",\"pretokenizers\":[]}",
                                  NULL, NULL, NULL, NULL), ATTN_E_UNSUPPORTED, "pre_tokenizer"},
        {"NFKC", doc(NULL, "{\"type\":\"NFKC\"}", NULL, NULL, NULL, NULL, NULL),
         ATTN_E_UNSUPPORTED, "NFKC"},
        {"Metaspace", doc(NULL, NULL, "{\"type\":\"Metaspace\",\"replacement\":\"_\"}", NULL,
                          NULL, NULL, NULL), ATTN_E_UNSUPPORTED, "Metaspace"},
        {"prefix space", doc(NULL, NULL, "{\"type\":\"ByteLevel\",\"add_prefix_space\":true}",
                             NULL, NULL, NULL, NULL), ATTN_E_UNSUPPORTED,
         "add_prefix_space=true"},
        {"digits", doc(NULL, NULL, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":"
                       "\"Digits\",\"individual_digits\":false},{\"type\":\"ByteLevel\","
                       "\"add_prefix_space\":false}]}", NULL, NULL, NULL, NULL),
         ATTN_E_UNSUPPORTED, "individual_digits=false"},
        {"other regex", doc(NULL, NULL, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":"
                            "\"Split\",\"pattern\":{\"Regex\":\"\\\\s+\"},\"behavior\":"
                            "\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
                            "\"add_prefix_space\":false,\"use_regex\":false}]}", NULL, NULL,
                            NULL, NULL), ATTN_E_UNSUPPORTED, "another pattern"},
        {"null pre", doc(NULL, NULL, "null", NULL, NULL, NULL, NULL), ATTN_E_UNSUPPORTED,
         "pre_tokenizer"},
        {"WordPiece decoder", doc(NULL, NULL, NULL, "{\"type\":\"WordPiece\"}", NULL, NULL,
                                  NULL), ATTN_E_UNSUPPORTED, "WordPiece"},
        {"null decoder", doc(NULL, NULL, NULL, "null", NULL, NULL, NULL), ATTN_E_UNSUPPORTED,
         "decoder"},
        {"byte_fallback", doc(NULL, NULL, NULL, NULL, "\"byte_fallback\":true,", NULL, NULL),
         ATTN_E_UNSUPPORTED, "byte_fallback"},
        {"dropout", doc(NULL, NULL, NULL, NULL, "\"dropout\":0.1,", NULL, NULL),
         ATTN_E_UNSUPPORTED, "dropout"},
        {"prefix", doc(NULL, NULL, NULL, NULL, "\"continuing_subword_prefix\":\"##\",", NULL,
                       NULL), ATTN_E_UNSUPPORTED, "continuing_subword_prefix"},
        {"lstrip", doc("[{\"id\":4,\"content\":\"<s>\",\"lstrip\":true,\"special\":true}]", NULL,
                       NULL, NULL, NULL, NULL, NULL), ATTN_E_UNSUPPORTED, "lstrip"},
        {"added id", doc("[{\"id\":9,\"content\":\"<s>\",\"special\":true}]", NULL, NULL, NULL,
                         NULL, NULL, NULL), ATTN_E_FORMAT, "id 9"},
        {"added twice", doc("[{\"id\":4,\"content\":\"<s>\"},{\"id\":4,\"content\":\"<s>\"}]",
                            NULL, NULL, NULL, NULL, NULL, NULL), ATTN_E_FORMAT, "repeated"},
        {"added no id", doc("[{\"content\":\"<s>\"}]", NULL, NULL, NULL, NULL, NULL, NULL),
         ATTN_E_FORMAT, "id"},
        {"model WordPiece", doc(NULL, NULL, NULL, NULL, "\"type\":\"WordPiece\",", NULL, NULL),
         ATTN_E_UNSUPPORTED, "WordPiece"},
        {"id repeated", doc(NULL, NULL, NULL, NULL, NULL, "{\"a\":0,\"b\":0,\"ab\":2}", NULL),
         ATTN_E_FORMAT, "repeated"},
        {"id hole", doc(NULL, NULL, NULL, NULL, NULL, "{\"a\":0,\"b\":1,\"ab\":5}", NULL),
         ATTN_E_FORMAT, "outside"},
        {"key repeated", doc(NULL, NULL, NULL, NULL, NULL, "{\"a\":0,\"b\":1,\"a\":2}", "[]"),
         ATTN_E_FORMAT, "repeated"},
        {"NUL token", doc(NULL, NULL, NULL, NULL, NULL, "{\"a\\u0000\":0}", "[]"),
         ATTN_E_FORMAT, "NUL"},
        {"merge 3", doc(NULL, NULL, NULL, NULL, NULL, NULL, "[\"a b c\"]"), ATTN_E_FORMAT,
         "one space"},
        {"merge number", doc(NULL, NULL, NULL, NULL, NULL, NULL, "[[1,2]]"), ATTN_E_FORMAT,
         "string"},
        {"merge one", doc(NULL, NULL, NULL, NULL, NULL, NULL, "[[\"a\"]]"), ATTN_E_FORMAT,
         "two"},
        {"merge unknown", doc(NULL, NULL, NULL, NULL, NULL, NULL, "[\"a x\"]"), ATTN_E_FORMAT,
         "\"x\""},
        {"merge result", doc(NULL, NULL, NULL, NULL, NULL, NULL, "[\"b a\"]"), ATTN_E_FORMAT,
         "makes"},
        {"unk", doc(NULL, NULL, NULL, NULL, "\"unk_token\":\"<unk>\",", NULL, NULL),
         ATTN_E_FORMAT, "unk_token"},
        {"truncated", strdup("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0"), ATTN_E_FORMAT,
         "JSON"},
        {"array", strdup("[]"), ATTN_E_FORMAT, "object"},
        {"no model", strdup("{\"pre_tokenizer\":null}"), ATTN_E_UNSUPPORTED, "pre_tokenizer"},
        {"empty", strdup("{}"), ATTN_E_FORMAT, "model"},
    };
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        attn_bpe *b = (attn_bpe *)&b;
        attn_status s = load_text(ctx, cs[i].text, &b);
        TU_CHECK(s == cs[i].want, "%s: %s, wanted %s (%s)", cs[i].what, attn_status_name(s),
                 attn_status_name(cs[i].want), attn_ctx_errmsg(ctx));
        if (cs[i].msg)
            TU_CHECK(strstr(attn_ctx_errmsg(ctx), cs[i].msg) != NULL,
                     "%s: the message does not name \"%s\": %s", cs[i].what, cs[i].msg,
                     attn_ctx_errmsg(ctx));
        TU_CHECK((s == ATTN_OK) == (b != NULL), "%s: the output pointer", cs[i].what);
        if (s == ATTN_OK) {
            int32_t ids[8];
            int64_t n = 0;
            TU_STATUS(attn_bpe_encode(ctx, b, "ab", 2, 0, ids, 8, &n), ATTN_OK, ctx);
            TU_CHECK(n == 1 && ids[0] == 2, "%s: \"ab\" is not [2]", cs[i].what);
        }
        attn_bpe_free(b);
        attn_ctx_clear_error(ctx);
        free(cs[i].text);
    }
    /* the vocabulary limit, files that are not there or not files */
    char *v = doc(NULL, NULL, NULL, NULL, NULL, NULL, NULL);
    attn_bpe *b = NULL;
    TU_STATUS(attn_ctx_set_limit(ctx, ATTN_LIMIT_VOCAB, 3), ATTN_OK, ctx);
    TU_STATUS(load_text(ctx, v, &b), ATTN_E_UNSUPPORTED, ctx);
    TU_STATUS(attn_ctx_set_limit(ctx, ATTN_LIMIT_VOCAB, 1 << 24), ATTN_OK, ctx);
    free(v);
    char path[320];
    snprintf(path, sizeof path, "%s/missing.json", tmpdir);
    TU_STATUS(attn_bpe_load_json(ctx, path, &b), ATTN_E_NOT_FOUND, ctx);
    TU_STATUS(attn_bpe_load_json(ctx, tmpdir, &b), ATTN_E_IO, ctx);
    TU_STATUS(attn_bpe_load_json(ctx, NULL, &b), ATTN_E_INVALID, ctx);
    tu_rm_tree(tmpdir);
}

/* Every allocation through the context's hooks; all of it freed. */
static long live;
static void *count_alloc(void *u, size_t n) {
    (void)u;
    void *p = malloc(n + 16);
    if (!p) return NULL;
    *(size_t *)p = n;
    live++;
    return (char *)p + 16;
}
static void count_free(void *u, void *p) {
    (void)u;
    if (!p) return;
    live--;
    free((char *)p - 16);
}

static void test_allocator(const corpus *c) {
    attn_ctx_params p = {0};
    p.threads = 1, p.alloc = count_alloc, p.free = count_free;
    attn_ctx *ctx;
    if (attn_ctx_create(&p, &ctx) != ATTN_OK) return;
    long base = live;
    attn_bpe *b = NULL;
    TU_STATUS(attn_bpe_load_json(ctx, DIR "edge.json", &b), ATTN_OK, ctx);
    int64_t n;
    for (int k = 0; k < c->n; k++)
        attn_bpe_encode(ctx, b, (const char *)c->raw[k].p, c->raw[k].n, 1, NULL, 0, &n);
    TU_CHECK(live > base, "the tokenizer did not use the context's allocator");
    attn_bpe_free(b);
    TU_CHECK(live == base, "%ld allocations left", live - base);
    attn_ctx_free(ctx);
}

/* ---- SmolLM2-135M-Instruct ------------------------------------------------------------------
 * The tokenizer arrays of its GGUF file, read with the library's GGUF reader, as a C string
 * each. */
static char *gguf_strdup(const char *s, size_t n) {
    char *c = malloc(n + 1);
    memcpy(c, s, n);
    c[n] = 0;
    return c;
}

static int gguf_vocab(attn_ctx *ctx, const char *path, arrays *a) {
    memset(a, 0, sizeof *a);
    attn_gguf *g = NULL;
    if (!TU_STATUS(attn_gguf_open(ctx, path, &g), ATTN_OK, ctx)) return 0;
    int et, ok = 1;
    uint64_t n = 0, nm = 0, nt = 0;
    ok &= attn_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, NULL) == ATTN_OK &&
          et == ATTN_GGUF_STRING;
    ok &= attn_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &nt, NULL) == ATTN_OK &&
          nt == n;
    ok &= attn_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &nm, NULL) == ATTN_OK &&
          et == ATTN_GGUF_STRING;
    ok &= attn_gguf_get_str_copy(g, "tokenizer.ggml.pre", a->pre, sizeof a->pre, NULL) ==
          ATTN_OK;
    if (ok) {
        a->tok = calloc(n + 1, sizeof *a->tok);
        a->type = calloc(n + 1, sizeof *a->type);
        a->merge = calloc(nm + 1, sizeof *a->merge);
        for (uint64_t i = 0; i < n && ok; i++) {
            const char *s;
            size_t len;
            int64_t v;
            ok = attn_gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s, &len) == ATTN_OK &&
                 attn_gguf_arr_int(g, "tokenizer.ggml.token_type", i, INT32_MIN, INT32_MAX,
                                   &v) == ATTN_OK;
            if (ok) a->tok[a->n++] = gguf_strdup(s, len), a->type[i] = (int32_t)v;
        }
        for (uint64_t i = 0; i < nm && ok; i++) {
            const char *s;
            size_t len;
            ok = attn_gguf_arr_str(g, "tokenizer.ggml.merges", i, &s, &len) == ATTN_OK;
            if (ok) a->merge[a->nm++] = gguf_strdup(s, len);
        }
    }
    TU_CHECK(ok, "%s: the tokenizer arrays: %s", path, attn_ctx_errmsg(ctx));
    attn_gguf_free(g);
    return ok && a->n > 0;
}

static void test_smollm2(attn_ctx *ctx, const corpus *c) {
    const char *path = getenv("ATTN_SMOLLM2_GGUF");
    if (!path || !*path) {
        printf("SmolLM2: skipped (set ATTN_SMOLLM2_GGUF to SmolLM2-135M-Instruct's GGUF "
               "file)\n");
        return;
    }
    arrays a;
    if (!gguf_vocab(ctx, path, &a)) {
        free_arrays(&a);
        return;
    }
    expect e;
    TU_CHECK(load_expect(DIR "smollm2_expected.txt", &e), "cannot read smollm2_expected.txt");
    clock_t t0 = clock();
    attn_bpe *b = from_arrays(ctx, &a);
    double build = (double)(clock() - t0) / CLOCKS_PER_SEC;
    if (b) {
        check_corpus(ctx, b, c, &e, "SmolLM2", 1);
        check_decode(ctx, b, &e, "SmolLM2");
        check_queries(b, "SmolLM2");
        TU_CHECK(attn_bpe_token_id(b, "<|im_start|>") == 1 &&
                     attn_bpe_token_id(b, "<|im_end|>") == 2 &&
                     attn_bpe_token_type(b, 2) == ATTN_BPE_TOKEN_CONTROL,
                 "SmolLM2: the chat tokens");
        /* speed, for the record: the corpus over and over */
        size_t total = 0, at = 0;
        for (int k = 0; k < c->n; k++) total += c->raw[k].n;
        size_t reps = (4u << 20) / (total + 1) + 1;
        char *big = malloc(total * reps);
        for (size_t r = 0; r < reps; r++)
            for (int k = 0; k < c->n; k++) memcpy(big + at, c->raw[k].p, c->raw[k].n),
                                           at += c->raw[k].n;
        int64_t n = 0;
        t0 = clock();
        TU_STATUS(attn_bpe_encode(ctx, b, big, at, 0, NULL, 0, &n), ATTN_OK, ctx);
        double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
        printf("SmolLM2: %d texts x 2 flags and %d decodes as the library; built in %.3f s; "
               "%.1f MB -> %lld tokens in %.2f s (%.1f MB/s)\n", c->n, e.nr, build,
               (double)at / 1e6, (long long)n, secs, (double)at / 1e6 / (secs + 1e-9));
        free(big);
    }
    attn_bpe_free(b);
    free_expect(&e);
    free_arrays(&a);
}

/* ---- SentencePiece BPE on a vocabulary small enough to work out by hand ---------------------
 * Each expectation follows from the rules: the pair whose text is the piece of the lowest id
 * merges first, leftmost among equals; a symbol that is no piece becomes its bytes' <0xNN>
 * pieces, else the unknown piece; user-defined pieces are matched on the raw text (a tab run),
 * but one with spaces is a piece spelled with U+2581 that merges reach; control pieces only
 * with ATTN_BPE_PARSE_SPECIAL. */
static void spm_case(attn_ctx *ctx, attn_bpe *b, const char *text, unsigned flags,
                     const int32_t *want, int64_t nwant, const char *what) {
    int32_t got[64];
    int64_t n = 0;
    TU_STATUS(attn_bpe_encode(ctx, b, text, strlen(text), flags, got, 64, &n), ATTN_OK, ctx);
    int same = n == nwant && !memcmp(got, want, sizeof *got * (size_t)n);
    TU_CHECK(same, "SentencePiece %s: \"%s\": %lld ids (first %d), want %lld (first %d)", what,
             text, (long long)n, n ? got[0] : -1, (long long)nwant, nwant ? want[0] : -1);
}

static void test_spm_small(attn_ctx *ctx) {
    /*                          0        1      2                 3     4    5     6    */
    const char *tok[] = {"<unk>", "<s>", "\xE2\x96\x81", "\t\t", "  ", "ba", "aa",
                         /* 7  8    9     10                    11        12        13 */
                         "a", "b", "ab", "\xE2\x96\x81" "ab", "<0x63>", "<0xC3>", "<0xA9>",
                         /* 14       15 */
                         "<0x41>", "\t"};
    const int32_t ty[] = {2, 3, 1, 4, 4, 1, 1, 1, 1, 1, 1, 6, 6, 6, 6, 1};
    size_t lens[16];
    for (int i = 0; i < 16; i++) lens[i] = strlen(tok[i]);
    attn_bpe *b = NULL, *bp = NULL;
    if (!TU_STATUS(attn__bpe_create_spm(ctx, tok, lens, 16, ty, 0, 0, "small", &b), ATTN_OK,
                   ctx) ||
        !TU_STATUS(attn__bpe_create_spm(ctx, tok, lens, 16, ty, 1, 0, "small", &bp), ATTN_OK,
                   ctx)) {
        attn_bpe_free(b), attn_bpe_free(bp);
        return;
    }
    /* a b _ b a: "ba" (5) before "ab" (9); "ab_", "_ba", "_b" are no pieces */
    spm_case(ctx, b, "ab ba", 0, (const int32_t[]){9, 2, 5}, 3, "id order");
    /* a b a: "ba" (5) outranks "ab" (9): a + ba */
    spm_case(ctx, b, "aba", 0, (const int32_t[]){7, 5}, 2, "id order 2");
    /* a a a: two "aa" candidates: the leftmost */
    spm_case(ctx, b, "aaa", 0, (const int32_t[]){6, 7}, 2, "leftmost tie");
    /* c: no piece, its byte piece; d: no byte piece either, the unknown piece; é: two bytes */
    spm_case(ctx, b, "cd\xC3\xA9", 0, (const int32_t[]){11, 0, 12, 13}, 4, "byte fallback");
    /* "\t\t" is added, matched on the raw text, longest first: 3 tabs = "\t\t" + "\t" */
    spm_case(ctx, b, "a\t\t\tb", 0, (const int32_t[]){7, 3, 15, 8}, 4, "raw user-defined");
    /* "  " is the piece "__" (4) reached by merging: before "_ab" (10) */
    spm_case(ctx, b, "  ab", 0, (const int32_t[]){4, 9}, 2, "spaces piece");
    spm_case(ctx, b, "a b", 0, (const int32_t[]){7, 2, 8}, 3, "a space");
    /* control pieces: parsed only on request */
    spm_case(ctx, b, "<s>ab", ATTN_BPE_PARSE_SPECIAL, (const int32_t[]){1, 9}, 2, "control");
    /* the prefix: "ab" is "_ab" */
    spm_case(ctx, bp, "ab", 0, (const int32_t[]){10}, 1, "prefix");
    spm_case(ctx, b, "ab", 0, (const int32_t[]){9}, 1, "no prefix");
    /* "<0x41>" written in a text is text, not the byte A (no byte piece for '<' etc.) */
    spm_case(ctx, b, "<0x41>", 0, (const int32_t[]){0}, 1, "byte piece as text");
    TU_CHECK(!strcmp(attn_bpe_token_text(b, 4), "\xE2\x96\x81\xE2\x96\x81"),
             "SentencePiece: the spaces piece's spelling");
    /* decoding: U+2581 as a space, byte pieces as bytes */
    char out[32];
    size_t len = 0;
    const int32_t ids[] = {9, 2, 5, 12, 13, 14, 4};
    TU_STATUS(attn_bpe_decode(ctx, b, ids, 7, 0, out, sizeof out, &len), ATTN_OK, ctx);
    TU_CHECK(len == 10 && !memcmp(out, "ab ba\xC3\xA9" "A  ", 10), "SentencePiece decode: %.*s",
             (int)len, out);
    attn_bpe *x = NULL;
    TU_STATUS(attn__bpe_create_spm(ctx, tok, lens, 16, ty, 0, 16, "small", &x), ATTN_E_FORMAT,
              ctx);
    TU_CHECK(x == NULL, "SentencePiece: a refused vocabulary returned an object");
    attn_bpe_free(b), attn_bpe_free(bp);
}

/* ---- Gemma 3 (SentencePiece BPE) -------------------------------------------------------------
 * ATTN_GEMMA3_GGUF names Gemma 3 270M's GGUF file (tokenizer.ggml.model "llama": 262,144
 * pieces with scores, byte fallback, user-defined pieces for runs of newlines, tabs and HTML
 * tags): its tokenizer, read by attn_bpe_from_gguf, against fixtures/bpe/gemma3_expected.txt,
 * the ids and decodings of Hugging Face's tokenizer converted from the same file
 * (tests/gen_gemma3_expected.py): per case "T hex(text)", "I n ids" (encode without BOS, special
 * tokens in the text parsed) and "D hex(decode(ids))". */
static void test_gemma3(attn_ctx *ctx) {
    const char *path = getenv("ATTN_GEMMA3_GGUF");
    if (!path || !*path) {
        printf("Gemma 3: skipped (set ATTN_GEMMA3_GGUF to gemma-3-270m-q4_k_m.gguf)\n");
        return;
    }
    attn_gguf *g = NULL;
    attn_bpe *b = NULL;
    if (!TU_STATUS(attn_gguf_open(ctx, path, &g), ATTN_OK, ctx)) return;
    clock_t t0 = clock();
    int ok = TU_STATUS(attn_bpe_from_gguf(ctx, g, &b), ATTN_OK, ctx);
    double build = (double)(clock() - t0) / CLOCKS_PER_SEC;
    attn_gguf_free(g);
    FILE *f = fopen(DIR "gemma3_expected.txt", "r");
    TU_CHECK(f != NULL, "cannot read " DIR "gemma3_expected.txt");
    if (!ok || !f) {
        if (f) fclose(f);
        attn_bpe_free(b);
        return;
    }
    TU_CHECK(attn_bpe_vocab_size(b) == 262144 && attn_bpe_token_id(b, "<start_of_turn>") == 105 &&
                 attn_bpe_token_type(b, 106) == ATTN_BPE_TOKEN_CONTROL &&
                 attn_bpe_token_type(b, 107) == ATTN_BPE_TOKEN_USER_DEFINED,
             "Gemma 3: vocabulary size, the turn tokens, the newline piece");
    buf text = {NULL, 0};
    int cases = 0, bad = 0, dbad = 0;
    int64_t got_n = 0;
    int32_t *got = NULL;
    char *l;
    while ((l = tu_read_line(f))) {
        if (l[0] == 'T') {
            free(text.p);
            text = unhex(l + 2);
        } else if (l[0] == 'I') {
            int64_t n;
            int32_t *want = parse_ids(l, &n);
            free(got);
            got = malloc(sizeof *got * (text.n * 2 + 8));
            got_n = 0;
            TU_STATUS(attn_bpe_encode(ctx, b, (const char *)text.p, text.n,
                                      ATTN_BPE_PARSE_SPECIAL, got, (int64_t)text.n * 2 + 8,
                                      &got_n), ATTN_OK, ctx);
            int same = got_n == n && !memcmp(got, want, sizeof *got * (size_t)n);
            if (!same && bad++ < 5) {
                printf("Gemma 3: case %d (%zu bytes): %lld ids, HF %lld; first ids:", cases,
                       text.n, (long long)got_n, (long long)n);
                for (int64_t i = 0; i < got_n && i < 12; i++) printf(" %d", got[i]);
                printf(" | HF:");
                for (int64_t i = 0; i < n && i < 12; i++) printf(" %d", want[i]);
                printf("\n");
            }
            free(want);
            cases++;
        } else if (l[0] == 'D' && got) {
            buf want = unhex(l + 2);
            size_t len = 0, cap = want.n + 64;
            char *out = malloc(cap);
            TU_STATUS(attn_bpe_decode(ctx, b, got, got_n, 0, out, cap, &len), ATTN_OK, ctx);
            if ((len != want.n || memcmp(out, want.p, len)) && dbad++ < 5)
                printf("Gemma 3: case %d decodes to %zu bytes, HF %zu\n", cases - 1, len,
                       want.n);
            free(out), free(want.p);
        }
        free(l);
    }
    fclose(f);
    TU_CHECK(cases >= 40, "Gemma 3: only %d cases in the fixture", cases);
    TU_CHECK(bad == 0, "Gemma 3: %d of %d texts tokenized unlike Hugging Face", bad, cases);
    TU_CHECK(dbad == 0, "Gemma 3: %d of %d decodings unlike Hugging Face", dbad, cases);
    printf("Gemma 3: %d texts, ids and decodings as Hugging Face's; built in %.2f s\n", cases,
           build);
    free(got), free(text.p);
    attn_bpe_free(b);
}

/* ---- WordPiece (BERT) ------------------------------------------------------------------------
 * fixtures/wordpiece/ (tests/gen_wordpiece.py): three small tokenizer.json files of the kind
 * (uncased: BertNormalizer's defaults and added tokens of every sort; cased: no clean_text, no
 * CJK padding, accents stripped, 12 characters a word, no cleanup; plain: no normalizer, "@@"
 * continuations, 8 characters a word) and a BERT folder (vocab.txt + tokenizer_config.json),
 * each against the library's ids of the corpus and its decodes. */
#define WPDIR "fixtures/wordpiece/"

static void check_wp(attn_ctx *ctx, const attn_bpe *b, const corpus *c, const char *expected,
                     const char *name) {
    expect e;
    if (!load_expect(expected, &e)) {
        TU_CHECK(0, "cannot read %s", expected);
        return;
    }
    check_corpus(ctx, b, c, &e, name, 0);
    if (e.nr) check_decode(ctx, b, &e, name);
    check_queries(b, name);
    printf("%s: %d texts x 2 flags, %d decodes as the library\n", name, c->n, e.nr);
    free_expect(&e);
}

static int32_t tid(const attn_bpe *b, const char *t) { return attn_bpe_token_id(b, t); }

/* The ids of text; *n their count (at most 64). */
static void enc(attn_ctx *ctx, const attn_bpe *b, const char *text, unsigned flags,
                int32_t *ids, int64_t *n) {
    *n = 0;
    TU_STATUS(attn_bpe_encode(ctx, b, text, strlen(text), flags, ids, 64, n), ATTN_OK, ctx);
}

/* decode(ids) with flags is want, and so is the stream of them */
static void dec_is(attn_ctx *ctx, const attn_bpe *b, const int32_t *ids, int64_t n,
                   unsigned flags, const char *want, const char *what) {
    char out[256];
    size_t len = 0;
    TU_STATUS(attn_bpe_decode(ctx, b, ids, n, flags, out, sizeof out, &len), ATTN_OK, ctx);
    TU_CHECK(len == strlen(want) && !memcmp(out, want, len), "%s: decoded \"%.*s\", want \"%s\"",
             what, (int)len, out, want);
    buf w = {(unsigned char *)(uintptr_t)want, strlen(want)};
    check_stream(ctx, b, ids, n, flags, &w, what, 0);
}

static void test_wordpiece(attn_ctx *ctx) {
    static corpus c;
    if (!load_corpus_from(&c, WPDIR "corpus.txt")) {
        TU_CHECK(0, "cannot read " WPDIR "corpus.txt");
        return;
    }
    static const char *const names[3] = {"uncased", "cased", "plain"};
    attn_bpe *b[4] = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        char path[128], ex[128], nm[64];
        snprintf(path, sizeof path, WPDIR "%s.json", names[i]);
        snprintf(ex, sizeof ex, WPDIR "%s.expected", names[i]);
        snprintf(nm, sizeof nm, "WordPiece %s", names[i]);
        if (TU_STATUS(attn_bpe_load_json(ctx, path, &b[i]), ATTN_OK, ctx))
            check_wp(ctx, b[i], &c, ex, nm);
    }
    if (TU_STATUS(attn_bpe_load_wordpiece(ctx, WPDIR "folder", &b[3]), ATTN_OK, ctx))
        check_wp(ctx, b[3], &c, WPDIR "folder.expected", "WordPiece folder");
    if (!b[0] || !b[1] || !b[2] || !b[3]) goto done;

    /* what attn_bpe_get_info reports: the file's settings */
    attn_bpe_info in[4];
    for (int i = 0; i < 4; i++) {
        TU_STATUS(attn_bpe_get_info(b[i], &in[i]), ATTN_OK, NULL);
        TU_CHECK(in[i].kind == ATTN_BPE_KIND_WORDPIECE && !strcmp(in[i].pre, "wordpiece") &&
                     in[i].n_merges == 0 && in[i].add_space_prefix == 0 && in[i].unk_id >= 0,
                 "WordPiece %d: kind, pre, unk", i);
    }
    TU_CHECK(in[0].clean_text == 1 && in[0].handle_chinese_chars == 1 &&
                 in[0].strip_accents == -1 && in[0].lowercase == 1 &&
                 in[0].max_input_chars_per_word == 100 && in[0].n_added == 8 &&
                 in[0].cls_id == tid(b[0], "[CLS]") && in[0].sep_id == tid(b[0], "[SEP]") &&
                 in[0].cls_id >= 0 && in[0].sep_id >= 0 && in[0].pad_id == -1 &&
                 in[0].unk_id == tid(b[0], "[UNK]"),
             "WordPiece uncased: info");
    TU_CHECK(in[1].clean_text == 0 && in[1].handle_chinese_chars == 0 &&
                 in[1].strip_accents == 1 && in[1].lowercase == 0 &&
                 in[1].max_input_chars_per_word == 12 && in[1].cls_id == tid(b[1], "[CLS]") &&
                 in[1].sep_id == tid(b[1], "[SEP]") && in[1].cls_id >= 0,
             "WordPiece cased: info");
    TU_CHECK(in[2].clean_text == 0 && in[2].lowercase == 0 && in[2].strip_accents == 0 &&
                 in[2].max_input_chars_per_word == 8 && in[2].cls_id == -1 &&
                 in[2].sep_id == -1 && in[2].pad_id == tid(b[2], "<pad>") &&
                 in[2].unk_id == tid(b[2], "<unk>"),
             "WordPiece plain: info");
    TU_CHECK(in[3].clean_text == 1 && in[3].handle_chinese_chars == 0 &&
                 in[3].strip_accents == 1 && in[3].lowercase == 0 &&
                 in[3].max_input_chars_per_word == 100 && in[3].n_added == 5 &&
                 in[3].cls_id == tid(b[3], "[CLS]") && in[3].sep_id == tid(b[3], "[SEP]") &&
                 in[3].pad_id == tid(b[3], "[PAD]") && in[3].cls_id >= 0 &&
                 attn_bpe_token_type(b[3], tid(b[3], "[MASK]")) == ATTN_BPE_TOKEN_CONTROL &&
                 attn_bpe_vocab_size(b[3]) == 1500,
             "WordPiece folder: info");

    /* decoding: the first token as it is, "##" joined, a space before a word, cleanup per
     * token; ATTN_BPE_CONTINUE: the ids follow other text */
    const attn_bpe *u = b[0];
    int32_t ids[64];
    int64_t n;
    enc(ctx, u, "replaying", 0, ids, &n);
    TU_CHECK(n >= 2, "WordPiece: \"replaying\" is one token");
    if (n >= 2) {
        dec_is(ctx, u, ids, n, 0, "replaying", "WordPiece decode");
        const char *second = attn_bpe_token_text(u, ids[1]);
        TU_CHECK(!strncmp(second, "##", 2), "WordPiece: the second piece is %s", second);
        dec_is(ctx, u, ids + 1, 1, 0, second, "WordPiece: a first ## piece as it is");
        dec_is(ctx, u, ids + 1, 1, ATTN_BPE_CONTINUE, second + 2,
               "WordPiece: a ## piece continuing a text");
    }
    enc(ctx, u, "hello world", 0, ids, &n);
    dec_is(ctx, u, ids, n, ATTN_BPE_CONTINUE, " hello world", "WordPiece: continuing a text");
    enc(ctx, u, "[CLS] don't stop . really ! ?", ATTN_BPE_PARSE_SPECIAL, ids, &n);
    dec_is(ctx, u, ids, n, 0, "[CLS] don ' t stop. really!?", "WordPiece: cleanup");
    dec_is(ctx, u, ids, n, ATTN_BPE_SKIP_SPECIAL, "don ' t stop. really!?",
           "WordPiece: cleanup, special skipped");
    enc(ctx, b[1], "stop . now", 0, ids, &n);
    dec_is(ctx, b[1], ids, n, 0, "stop . now", "WordPiece: no cleanup");

    /* attn__bpe_encode_upto (attn_bert_tokenize): the same first ids, stopping early */
    {
        const char *t = "the quick brown fox jumps over the lazy dog again and again";
        int32_t all[64], part[8];
        int64_t na = 0, np = 0;
        enc(ctx, u, t, 0, all, &na);
        TU_STATUS(attn__bpe_encode_upto(ctx, u, t, strlen(t), 0, part, 5, &np), ATTN_OK, ctx);
        TU_CHECK(na > 8 && np >= 5 && np <= na && !memcmp(part, all, 5 * sizeof *part),
                 "WordPiece: encoding up to 5 ids gave %lld (of %lld)", (long long)np,
                 (long long)na);
    }

    /* the normalized added token is matched on the normalized text; the raw one as written;
     * control tokens only with ATTN_BPE_PARSE_SPECIAL */
    enc(ctx, u, "[[TOOL]]QQ<SPECIAL>", ATTN_BPE_PARSE_SPECIAL, ids, &n);
    TU_CHECK(n == 3 && ids[0] == tid(u, "[[Tool]]") && ids[1] == tid(u, "QQ") &&
                 ids[2] == tid(u, "<Special>"),
             "WordPiece: added tokens (%lld ids)", (long long)n);
    enc(ctx, u, "<SPECIAL>", 0, ids, &n);
    TU_CHECK(n > 1, "WordPiece: a control token matched without ATTN_BPE_PARSE_SPECIAL");
done:
    for (int i = 0; i < 4; i++) attn_bpe_free(b[i]);
    free_corpus(&c);
}

/* A BERT folder that is not right: refused with a status and a message naming the problem. */
static void wp_folder_refusal(attn_ctx *ctx, const char *dir, const char *vocab,
                              size_t vocab_len, const char *config, attn_status want,
                              const char *needle) {
    char p[512];
    snprintf(p, sizeof p, "%s/vocab.txt", dir);
    remove(p);
    if (vocab) {
        FILE *f = fopen(p, "wb");
        fwrite(vocab, 1, vocab_len, f);
        fclose(f);
    }
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    remove(p);
    if (config) {
        FILE *f = fopen(p, "wb");
        fputs(config, f);
        fclose(f);
    }
    attn_bpe *b = (attn_bpe *)&b;
    attn_status st = attn_bpe_load_wordpiece(ctx, dir, &b);
    TU_CHECK(st == want, "WordPiece folder (%s): %s, wanted %s (%s)", needle,
             attn_status_name(st), attn_status_name(want), attn_ctx_errmsg(ctx));
    if (want != ATTN_OK)
        TU_CHECK(strstr(attn_ctx_errmsg(ctx), needle) != NULL && b == NULL,
                 "WordPiece folder: the message \"%s\" does not name \"%s\"",
                 attn_ctx_errmsg(ctx), needle);
    attn_bpe_free(b);
    attn_ctx_clear_error(ctx);
}

static attn_status load_wp_text(attn_ctx *ctx, const char *dir, const char *text,
                                attn_bpe **b) {
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return attn_bpe_load_json(ctx, path, b);
}

/* A small WordPiece tokenizer.json with parts replaced. */
static char *wpdoc(const char *norm, const char *pre, const char *dec, const char *model_extra) {
    char *s = malloc(4096);
    snprintf(s, 4096,
             "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[],"
             "\"normalizer\":%s,\"pre_tokenizer\":%s,\"post_processor\":null,\"decoder\":%s,"
             "\"model\":{\"type\":\"WordPiece\",%s\"vocab\":{\"[UNK]\":0,\"ab\":1,\"##c\":2,"
             "\"a\":3,\"##b\":4}}}",
             norm ? norm : "{\"type\":\"BertNormalizer\"}",
             pre ? pre : "{\"type\":\"BertPreTokenizer\"}",
             dec ? dec : "{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":true}",
             model_extra ? model_extra : "\"unk_token\":\"[UNK]\",");
    return s;
}

static void test_wordpiece_refusals(attn_ctx *ctx) {
    char dir[] = "/tmp/attn-test-wp-XXXXXX";
    if (!mkdtemp(dir)) {
        TU_CHECK(0, "mkdtemp");
        return;
    }
    const char *v = "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n";
    wp_folder_refusal(ctx, dir, v, strlen(v), NULL, ATTN_OK, "defaults");
    wp_folder_refusal(ctx, dir, "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]", 26, NULL, ATTN_OK, "CRLF");
    wp_folder_refusal(ctx, dir, NULL, 0, NULL, ATTN_E_NOT_FOUND, "vocab.txt");
    wp_folder_refusal(ctx, dir, "", 0, NULL, ATTN_E_FORMAT, "empty");
    wp_folder_refusal(ctx, dir, "[UNK]\n[CLS]\n[S\0EP]\n[PAD]\n", 25, NULL, ATTN_E_FORMAT, "NUL");
    wp_folder_refusal(ctx, dir, "[PAD]\n[CLS]\n[SEP]\n", 18, NULL, ATTN_E_FORMAT,
                      "unknown token \"[UNK]\"");
    wp_folder_refusal(ctx, dir, v, strlen(v), "{\"unk_token\": \"<unk>\"}", ATTN_E_FORMAT,
                      "\"<unk>\"");
    wp_folder_refusal(ctx, dir, v, strlen(v), "{\"tokenizer_class\": \"GPT2Tokenizer\"}",
                      ATTN_E_UNSUPPORTED, "GPT2Tokenizer");
    wp_folder_refusal(ctx, dir, v, strlen(v), "{\"unk_token\": 7}", ATTN_E_FORMAT,
                      "unk_token");
    wp_folder_refusal(ctx, dir, v, strlen(v), "{\"do_lower_case\": ", ATTN_E_FORMAT,
                      "tokenizer_config.json");
    TU_STATUS(attn_ctx_set_limit(ctx, ATTN_LIMIT_VOCAB, 4), ATTN_OK, ctx);
    wp_folder_refusal(ctx, dir, v, strlen(v), NULL, ATTN_E_UNSUPPORTED, "ATTN_LIMIT_VOCAB");
    TU_STATUS(attn_ctx_set_limit(ctx, ATTN_LIMIT_VOCAB, 1 << 24), ATTN_OK, ctx);
    attn_bpe *b = NULL;
    TU_STATUS(attn_bpe_load_wordpiece(ctx, NULL, &b), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_bpe_load_wordpiece(ctx, dir, NULL), ATTN_E_INVALID, ctx);
    attn_ctx_clear_error(ctx);
    TU_CHECK(attn_bert_tokenizer(NULL) == NULL, "attn_bert_tokenizer(NULL)");

    /* tokenizer.json files of model type WordPiece */
    struct {
        const char *what;
        char *text;
        attn_status want;
        const char *msg;
    } cs[] = {
        {"valid", wpdoc(NULL, NULL, NULL, NULL), ATTN_OK, NULL},
        {"null normalizer", wpdoc("null", NULL, NULL, NULL), ATTN_OK, NULL},
        {"no unk", wpdoc(NULL, NULL, NULL, ""), ATTN_E_FORMAT, "unk_token"},
        {"unk missing", wpdoc(NULL, NULL, NULL, "\"unk_token\":\"<unk>\","), ATTN_E_FORMAT,
         "unk_token"},
        {"ByteLevel pre", wpdoc(NULL, "{\"type\":\"ByteLevel\"}", NULL, NULL),
         ATTN_E_UNSUPPORTED, "BertPreTokenizer"},
        {"Sequence pre", wpdoc(NULL, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":"
                                     "\"BertPreTokenizer\"}]}", NULL, NULL),
         ATTN_E_UNSUPPORTED, "BertPreTokenizer"},
        {"ByteLevel decoder", wpdoc(NULL, NULL, "{\"type\":\"ByteLevel\"}", NULL),
         ATTN_E_UNSUPPORTED, "decoder"},
        {"NFC", wpdoc("{\"type\":\"NFC\"}", NULL, NULL, NULL), ATTN_E_UNSUPPORTED, "NFC"},
        {"Sequence normalizer", wpdoc("{\"type\":\"Sequence\",\"normalizers\":[]}", NULL, NULL,
                                      NULL), ATTN_E_UNSUPPORTED, "Sequence"},
        {"null prefix", wpdoc(NULL, NULL, NULL, "\"unk_token\":\"[UNK]\","
                                                "\"continuing_subword_prefix\":null,"),
         ATTN_E_FORMAT, "continuing_subword_prefix"},
        {"negative max", wpdoc(NULL, NULL, NULL, "\"unk_token\":\"[UNK]\","
                                                 "\"max_input_chars_per_word\":-1,"),
         ATTN_E_FORMAT, "max_input_chars_per_word"},
        {"Bert normalizer, BPE", strdup("{\"normalizer\":{\"type\":\"BertNormalizer\"},"
                                        "\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":"
                                        "{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
                                        "\"vocab\":{\"a\":0},\"merges\":[]}}"),
         ATTN_E_UNSUPPORTED, "BertNormalizer"},
        {"Bert pre, BPE", strdup("{\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},"
                                 "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":"
                                 "\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}"),
         ATTN_E_UNSUPPORTED, "BertPreTokenizer"},
        {"Unigram", strdup("{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}"),
         ATTN_E_UNSUPPORTED, "Unigram"},
    };
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        attn_bpe *x = (attn_bpe *)&x;
        attn_status st = load_wp_text(ctx, dir, cs[i].text, &x);
        TU_CHECK(st == cs[i].want, "WordPiece json %s: %s, wanted %s (%s)", cs[i].what,
                 attn_status_name(st), attn_status_name(cs[i].want), attn_ctx_errmsg(ctx));
        if (cs[i].msg)
            TU_CHECK(strstr(attn_ctx_errmsg(ctx), cs[i].msg) != NULL,
                     "WordPiece json %s: the message does not name \"%s\": %s", cs[i].what,
                     cs[i].msg, attn_ctx_errmsg(ctx));
        TU_CHECK((st == ATTN_OK) == (x != NULL), "WordPiece json %s: the output", cs[i].what);
        if (st == ATTN_OK) { /* "abc" is ab ##c; "ABD" is [UNK] (no piece for d) */
            int32_t ids[8];
            int64_t n = 0;
            TU_STATUS(attn_bpe_encode(ctx, x, "abc ABD", 7, 0, ids, 8, &n), ATTN_OK, ctx);
            TU_CHECK(n == 3 && ids[0] == 1 && ids[1] == 2 && ids[2] == 0,
                     "WordPiece json %s: \"abc ABD\" gave %lld ids", cs[i].what, (long long)n);
        }
        attn_bpe_free(x);
        attn_ctx_clear_error(ctx);
        free(cs[i].text);
    }
    tu_rm_tree(dir);
}

/* all-MiniLM-L6-v2 (ATTN_MINILM_DIR): its tokenizer.json and its vocab.txt folder, both against
 * the library's ids of the WordPiece corpus (fixtures/wordpiece/minilm_expected.txt). */
static void test_minilm(attn_ctx *ctx) {
    const char *dir = getenv("ATTN_MINILM_DIR");
    if (!dir || !*dir) {
        printf("all-MiniLM-L6-v2: skipped (set ATTN_MINILM_DIR to the model folder)\n");
        return;
    }
    static corpus c;
    if (!load_corpus_from(&c, WPDIR "corpus.txt")) {
        TU_CHECK(0, "cannot read " WPDIR "corpus.txt");
        return;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    attn_bpe *j = NULL, *f = NULL;
    if (TU_STATUS(attn_bpe_load_json(ctx, path, &j), ATTN_OK, ctx))
        check_wp(ctx, j, &c, WPDIR "minilm_expected.txt", "all-MiniLM-L6-v2 tokenizer.json");
    if (TU_STATUS(attn_bpe_load_wordpiece(ctx, dir, &f), ATTN_OK, ctx))
        check_wp(ctx, f, &c, WPDIR "minilm_expected.txt", "all-MiniLM-L6-v2 vocab.txt");
    if (j && f) {
        attn_bpe_info a, b;
        attn_bpe_get_info(j, &a), attn_bpe_get_info(f, &b);
        TU_CHECK(a.vocab_size == 30522 && b.vocab_size == 30522 && a.cls_id == 101 &&
                     b.cls_id == 101 && a.sep_id == 102 && b.sep_id == 102 && a.pad_id == 0 &&
                     b.pad_id == 0 && a.unk_id == 100 && b.unk_id == 100 &&
                     a.lowercase == 1 && b.lowercase == 1,
                 "all-MiniLM-L6-v2: the two tokenizers' settings");
    }
    attn_bpe_free(j), attn_bpe_free(f);
    free_corpus(&c);
}

/* ---- SentencePiece's add_space_prefix (Llama 2, Mistral) -----------------------------------
 * fixtures/bpe/spm_prefix.txt (tests/gen_spm_prefix.py): a small vocabulary and what
 * transformers' tokenizer converted from a GGUF file with add_space_prefix true makes of it:
 * ids of texts, and the decode of id sequences, whose leading space (the one the encoding puts
 * before the text) its Strip decoder drops.  The vocabulary goes through a GGUF image written
 * here, so attn_bpe_from_gguf reads tokenizer.ggml.add_space_prefix itself. */
typedef struct gbuf {
    unsigned char *p;
    size_t n, cap;
} gbuf;

static void g_put(gbuf *w, const void *d, size_t n) {
    if (w->n + n > w->cap) {
        w->cap = (w->n + n) * 2 + 64;
        w->p = realloc(w->p, w->cap);
    }
    memcpy(w->p + w->n, d, n);
    w->n += n;
}
static void g_u32(gbuf *w, uint32_t v) {
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    g_put(w, b, 4);
}
static void g_u64(gbuf *w, uint64_t v) {
    g_u32(w, (uint32_t)v);
    g_u32(w, (uint32_t)(v >> 32));
}
static void g_str(gbuf *w, const char *s, size_t n) {
    g_u64(w, n);
    g_put(w, s, n);
}
static void g_key(gbuf *w, const char *k, uint32_t type) {
    g_str(w, k, strlen(k));
    g_u32(w, type);
}

/* A GGUF v3 image with only the tokenizer keys of a SentencePiece vocabulary. */
static gbuf spm_gguf(const arrays *a, int add_space_prefix) {
    gbuf w = {NULL, 0, 0};
    g_put(&w, "GGUF", 4);
    g_u32(&w, 3);
    g_u64(&w, 0);                            /* tensors */
    g_u64(&w, add_space_prefix >= 0 ? 5 : 4); /* keys */
    g_key(&w, "general.architecture", ATTN_GGUF_STRING);
    g_str(&w, "llama", 5);
    g_key(&w, "tokenizer.ggml.model", ATTN_GGUF_STRING);
    g_str(&w, "llama", 5);
    g_key(&w, "tokenizer.ggml.tokens", ATTN_GGUF_ARRAY);
    g_u32(&w, ATTN_GGUF_STRING);
    g_u64(&w, (uint64_t)a->n);
    for (int64_t i = 0; i < a->n; i++) g_str(&w, a->tok[i], strlen(a->tok[i]));
    g_key(&w, "tokenizer.ggml.token_type", ATTN_GGUF_ARRAY);
    g_u32(&w, ATTN_GGUF_INT32);
    g_u64(&w, (uint64_t)a->n);
    for (int64_t i = 0; i < a->n; i++) g_u32(&w, (uint32_t)a->type[i]);
    if (add_space_prefix >= 0) {
        unsigned char v = (unsigned char)add_space_prefix;
        g_key(&w, "tokenizer.ggml.add_space_prefix", ATTN_GGUF_BOOL);
        g_put(&w, &v, 1);
    }
    return w;
}

static attn_bpe *spm_from(attn_ctx *ctx, const arrays *a, int add_space_prefix, gbuf *img) {
    *img = spm_gguf(a, add_space_prefix);
    attn_gguf *g = NULL;
    attn_bpe *b = NULL;
    if (TU_STATUS(attn_gguf_read_memory(ctx, img->p, img->n, &g), ATTN_OK, ctx))
        TU_STATUS(attn_bpe_from_gguf(ctx, g, &b), ATTN_OK, ctx);
    attn_gguf_free(g);
    return b;
}

static void test_spm_prefix(attn_ctx *ctx) {
    FILE *f = fopen(DIR "spm_prefix.txt", "r");
    if (!f) {
        TU_CHECK(0, "cannot read " DIR "spm_prefix.txt");
        return;
    }
    arrays a;
    memset(&a, 0, sizeof a);
    size_t cap = 0;
    expect e;
    memset(&e, 0, sizeof e);
    buf text[64];
    int nt = 0;
    char *l;
    while ((l = tu_read_line(f))) {
        if (l[0] == 'V') {
            if ((size_t)a.n == cap) {
                cap = cap ? 2 * cap : 512;
                a.tok = realloc(a.tok, sizeof *a.tok * cap);
                a.type = realloc(a.type, sizeof *a.type * cap);
            }
            char *p = l + 2;
            a.type[a.n] = (int32_t)strtol(p, &p, 10);
            a.tok[a.n++] = (char *)unhex(p + 1).p;
        } else if (l[0] == 'T' && nt < 64) {
            text[nt] = unhex(l + 2);
        } else if (l[0] == 'I' && nt < 64) {
            e.ids[0][nt] = parse_ids(l, &e.nids[0][nt]);
            nt++;
        } else if (l[0] == 'R' && e.nr < 64) {
            e.seq[e.nr] = parse_ids(l, &e.nseq[e.nr]);
        } else if ((l[0] == 'D' || l[0] == 'S') && e.nr < 64) {
            e.dec[l[0] == 'S'][e.nr] = unhex(l + 2);
            if (l[0] == 'S') e.nr++;
        }
        free(l);
    }
    fclose(f);
    gbuf img, img0, img1;
    attn_bpe *b = spm_from(ctx, &a, 1, &img);
    attn_bpe *b0 = spm_from(ctx, &a, 0, &img0);
    attn_bpe *b1 = spm_from(ctx, &a, -1, &img1); /* no key: SentencePiece's default, true */
    if (b && b0 && b1) {
        attn_bpe_info i, i0, i1;
        attn_bpe_get_info(b, &i), attn_bpe_get_info(b0, &i0), attn_bpe_get_info(b1, &i1);
        TU_CHECK(i.kind == ATTN_BPE_KIND_SENTENCEPIECE && i.add_space_prefix == 1 &&
                     i0.add_space_prefix == 0 && i1.add_space_prefix == 1 &&
                     !strcmp(i.pre, "sentencepiece"),
                 "SentencePiece: add_space_prefix as the file says");
        int bad = 0;
        for (int k = 0; k < nt; k++) {
            int32_t ids[256];
            int64_t n = 0;
            TU_STATUS(attn_bpe_encode(ctx, b, (const char *)text[k].p, text[k].n,
                                      ATTN_BPE_PARSE_SPECIAL, ids, 256, &n), ATTN_OK, ctx);
            if (!same_ids(ids, n, e.ids[0][k], e.nids[0][k]) && bad++ < 4)
                show_diff("spm_prefix", k, 1, ids, n, e.ids[0][k], e.nids[0][k]);
        }
        TU_CHECK(bad == 0 && nt >= 10, "SentencePiece add_space_prefix: %d of %d encodings "
                 "differ from the library", bad, nt);
        check_decode(ctx, b, &e, "SentencePiece add_space_prefix");
        check_decode(ctx, b1, &e, "SentencePiece add_space_prefix (default)");
        /* by hand: the space is dropped only at a text's start, once */
        int32_t hello = attn_bpe_token_id(b, "\xE2\x96\x81hello");
        int32_t sp = attn_bpe_token_id(b, "\xE2\x96\x81"), bos = 1;
        int32_t s1[] = {hello, hello}, s2[] = {bos, hello}, s3[] = {sp, hello};
        dec_is(ctx, b, s1, 2, 0, "hello hello", "SentencePiece: the text's start");
        dec_is(ctx, b, s1, 2, ATTN_BPE_CONTINUE, " hello hello", "SentencePiece: continuing");
        dec_is(ctx, b, s2, 2, 0, "<s> hello", "SentencePiece: after a control token");
        dec_is(ctx, b, s2, 2, ATTN_BPE_SKIP_SPECIAL, "hello",
               "SentencePiece: after a skipped control token");
        dec_is(ctx, b, s3, 2, 0, " hello", "SentencePiece: one space only");
        /* add_space_prefix false (Gemma): no U+2581 added, none dropped */
        dec_is(ctx, b0, s1, 2, 0, " hello hello", "SentencePiece without add_space_prefix");
        int32_t ids[16];
        int64_t n = 0;
        enc(ctx, b0, "hello", 0, ids, &n);
        TU_CHECK(n >= 1 && ids[0] != hello && strncmp(attn_bpe_token_text(b0, ids[0]),
                                                      "\xE2\x96\x81", 3) != 0,
                 "SentencePiece without add_space_prefix: a U+2581 was added");
        enc(ctx, b, "hello", 0, ids, &n);
        TU_CHECK(n >= 1 && !strncmp(attn_bpe_token_text(b, ids[0]), "\xE2\x96\x81", 3),
                 "SentencePiece with add_space_prefix: no U+2581 added");
        printf("SentencePiece add_space_prefix: %d texts and %d decodes as the library\n", nt,
               e.nr);
    }
    attn_bpe_free(b), attn_bpe_free(b0), attn_bpe_free(b1);
    free(img.p), free(img0.p), free(img1.p);
    for (int k = 0; k < nt; k++) free(text[k].p), free(e.ids[0][k]);
    for (int k = 0; k < e.nr; k++) free(e.seq[k]), free(e.dec[0][k].p), free(e.dec[1][k].p);
    a.nm = 0;
    free_arrays(&a);
}

int main(void) {
    attn_ctx *ctx = tu_ctx(1);
    if (!ctx) return 1;
    static corpus c;
    if (!load_corpus(&c)) {
        fprintf(stderr, "cannot read " DIR "corpus.txt\n");
        return 1;
    }
    check_fixture(ctx, &c, "gpt2", 1);
    check_fixture(ctx, &c, "llama", 1);
    check_fixture(ctx, &c, "smollm", 1);
    check_fixture(ctx, &c, "edge", 0);
    check_fixture(ctx, &c, "edge_nofuse", 0);
    test_pretokens(ctx, &c);
    test_pretokens_all(ctx);
    test_create(ctx);
    test_merges(ctx);
    test_json(ctx);
    test_hostile(ctx);
    test_allocator(&c);
    test_smollm2(ctx, &c);
    test_spm_small(ctx);
    test_gemma3(ctx);
    test_wordpiece(ctx);
    test_wordpiece_refusals(ctx);
    test_minilm(ctx);
    test_spm_prefix(ctx);
    free_corpus(&c);
    attn_ctx_free(ctx);
    return tu_finish("test_bpe");
}
