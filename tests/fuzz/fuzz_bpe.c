/* libFuzzer target: the tokenizer object attn_bpe, byte-level BPE and WordPiece
 * (attn_bpe_load_json, attn_bpe_create, attn_bpe_encode, attn_bpe_decode,
 * attn_bpe_decode_stream).
 *
 * An input is two parts separated by FZ_SEP ("\x1e\x1e"): a tokenizer, then a text.  A
 * tokenizer that starts with '{' is a tokenizer.json, loaded from a file; any other is arrays
 * for attn_bpe_create, one item a line: the pre-tokenizer's name, the tokens (a leading '!'
 * makes a control token, '?' a user-defined one), an empty line, the merges ("a b").
 *
 * Promises checked: no sanitizer report, leak or hang; a failure is a proper status with a
 * message; on a loaded tokenizer, with and without special-token parsing, every id is in the
 * vocabulary, the count does not depend on the capacity and the first ids are the same; when
 * the text is valid UTF-8, every byte has a token and every added token decodes to its own
 * text, decode(encode(text)) is the text; the streamed decode of the ids is the full decode
 * when that is valid UTF-8, and is always valid UTF-8. */
#include "fuzz_util.h"

/* files up to 1 MB, 4096 tokens (and merges), texts up to 4 KB */
static attn_ctx *ctx_get(void) { return fz_ctx(1 << 20, 4, 4096, 4096); }

static const char *dir;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    dir = fz_make_dir("bpe");
    return 0;
}

/* 1 if s[0, n) is well-formed UTF-8 (the target's own check). */
static int utf8_ok(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                   : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!len || i + len > n) return 0;
        uint32_t cp = len == 1 ? c : c & (0xFFu >> (len + 1));
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3Fu);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += len;
    }
    return 1;
}

/* The GPT-2 byte character of c, UTF-8, NUL-terminated. */
static void byte_char(unsigned c, char *o) {
    unsigned u = c, n = 0;
    if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE)) {
        for (unsigned x = 0; x < c; x++)
            n += !((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
        u = 256 + n;
    }
    if (u < 0x80) o[0] = (char)u, o[1] = 0;
    else o[0] = (char)(0xC0 | u >> 6), o[1] = (char)(0x80 | (u & 0x3F)), o[2] = 0;
}

/* Arrays input -> attn_bpe_create. */
static attn_status from_arrays(attn_ctx *ctx, const fz_seg *s, attn_bpe **b) {
    char *t = malloc(s->n + 1);
    FZ_CHECK(t != NULL);
    memcpy(t, s->p, s->n);
    t[s->n] = 0;
    size_t lines = 1;
    for (size_t i = 0; i < s->n; i++) lines += t[i] == '\n';
    const char **tok = calloc(lines, sizeof *tok), **mer = calloc(lines, sizeof *mer);
    int32_t *type = calloc(lines, sizeof *type);
    FZ_CHECK(tok && mer && type);
    char *p = t, *pre = t;
    int64_t nt = 0, nm = 0;
    int part = 0; /* 0: pre, 1: tokens, 2: merges */
    for (;;) {
        char *e = strchr(p, '\n');
        if (e) *e = 0;
        if (part == 0) {
            pre = p, part = 1;
        } else if (part == 1 && !*p) {
            part = 2;
        } else if (part == 1) {
            int ty = *p == '!' ? ATTN_BPE_TOKEN_CONTROL
                     : *p == '?' ? ATTN_BPE_TOKEN_USER_DEFINED : ATTN_BPE_TOKEN_NORMAL;
            type[nt] = ty;
            tok[nt++] = ty == ATTN_BPE_TOKEN_NORMAL ? p : p + 1;
        } else {
            mer[nm++] = p;
        }
        if (!e) break;
        p = e + 1;
    }
    attn_status st = attn_bpe_create(ctx, tok, nt, type, mer, nm, pre, b);
    free(tok), free(mer), free(type), free(t);
    return st;
}

static int32_t ids[3 * 4096 + 8], ids2[8];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_seg seg[2];
    int k = fz_split(data, size, seg, 2);
    const char *text = k > 1 ? (const char *)seg[1].p : "";
    size_t tn = k > 1 ? seg[1].n : 0;
    attn_ctx *ctx = ctx_get();
    attn_bpe *b = (attn_bpe *)&ctx; /* must come back NULL on failure */
    attn_status s;
    if (seg[0].n && seg[0].p[0] == '{') {
        fz_put(dir, "tokenizer.json", seg[0].p, seg[0].n);
        char path[1024];
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        s = attn_bpe_load_json(ctx, path, &b);
    } else {
        s = from_arrays(ctx, &seg[0], &b);
    }
    if (s != ATTN_OK) {
        fz_failed(ctx, s);
        FZ_CHECK(b == NULL);
        return 0;
    }
    fz_loaded("tokenizer");
    attn_bpe_info info;
    FZ_CHECK(attn_bpe_get_info(b, &info) == ATTN_OK);
    int64_t V = info.vocab_size;
    FZ_CHECK(V >= 1 && V <= 2 * 4096 && V == attn_bpe_vocab_size(b));
    /* can a text come back whole?  every byte needs a token, every added one its own text */
    int whole = info.unk_id < 0;
    for (unsigned c = 0; c < 256 && whole; c++) {
        char ch[3];
        byte_char(c, ch);
        whole = attn_bpe_token_id(b, ch) >= 0;
    }
    size_t pcap = 3 * ((size_t)info.max_token_bytes + 3) + 1;
    char *piece = malloc(pcap);
    FZ_CHECK(piece != NULL);
    for (int32_t id = 0; id < V && whole; id++) {
        if (attn_bpe_token_type(b, id) == ATTN_BPE_TOKEN_NORMAL) continue;
        const char *t = attn_bpe_token_text(b, id);
        size_t len = 0;
        FZ_CHECK(attn_bpe_decode(ctx, b, &id, 1, 0, piece, pcap, &len) == ATTN_OK);
        FZ_CHECK(len <= (size_t)info.max_token_bytes);
        whole = len == strlen(t) && !memcmp(piece, t, len);
    }
    for (int fl = 0; fl < 2; fl++) {
        unsigned flags = fl ? ATTN_BPE_PARSE_SPECIAL : 0;
        int64_t n = -1, n2 = -1;
        s = attn_bpe_encode(ctx, b, text, tn, flags, ids, 3 * 4096 + 8, &n);
        if (s != ATTN_OK) { /* only a text over ATTN_LIMIT_TEXT_BYTES may be refused */
            fz_failed(ctx, s);
            FZ_CHECK(tn > 4096);
            break;
        }
        FZ_CHECK(n >= 0 && n <= 3 * (int64_t)tn); /* at most one id per byte (U+FFFD: 3) */
        for (int64_t i = 0; i < n; i++) FZ_CHECK(ids[i] >= 0 && ids[i] < V);
        FZ_CHECK(attn_bpe_encode(ctx, b, text, tn, flags, ids2, 3, &n2) == ATTN_OK && n2 == n);
        for (int64_t i = 0; i < 3 && i < n; i++) FZ_CHECK(ids2[i] == ids[i]);
        size_t len = 0, total = 0, pl, got;
        FZ_CHECK(attn_bpe_decode(ctx, b, ids, n, 0, NULL, 0, &len) == ATTN_OK);
        char *out = malloc(len + 1), *streamed = malloc(3 * len + 4);
        FZ_CHECK(out && streamed);
        FZ_CHECK(attn_bpe_decode(ctx, b, ids, n, 0, out, len + 1, &got) == ATTN_OK);
        FZ_CHECK(got == len && out[len] == 0);
        if (whole && utf8_ok((const unsigned char *)text, tn))
            FZ_CHECK(len == tn && !memcmp(out, text, tn));
        /* streamed: valid UTF-8, at most 3 bytes a byte, and the full decode when that is
         * valid */
        attn_bpe_stream st;
        memset(&st, 0, sizeof st);
        for (int64_t i = 0; i < n; i++) {
            FZ_CHECK(attn_bpe_decode_stream(ctx, b, &st, ids[i], 0, piece, pcap, &pl) ==
                     ATTN_OK);
            FZ_CHECK(pl < pcap && total + pl <= 3 * len + 3);
            memcpy(streamed + total, piece, pl);
            total += pl;
        }
        FZ_CHECK(attn_bpe_decode_stream_end(ctx, &st, piece, pcap, &pl) == ATTN_OK);
        FZ_CHECK(pl <= 3 && total + pl <= 3 * len + 3);
        memcpy(streamed + total, piece, pl);
        total += pl;
        FZ_CHECK(utf8_ok((const unsigned char *)streamed, total));
        if (utf8_ok((const unsigned char *)out, len))
            FZ_CHECK(total == len && !memcmp(streamed, out, len));
        free(out), free(streamed);
    }
    free(piece);
    attn_bpe_free(b);
    return 0;
}
