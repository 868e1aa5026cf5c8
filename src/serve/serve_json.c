/* attn serve's JSON: a strict recursive-descent parser into an arena tree, and the writer
 * (serve_json.h).  Hostile input (deep nesting, huge numbers, invalid UTF-8, truncation,
 * wrong escapes) is refused with a message, never read past its end. */
#include "serve_json.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

/* ---- arena ---------------------------------------------------------------------------- */
typedef struct sj_block {
    struct sj_block *next;
    size_t used, cap;
    max_align_t data[];
} sj_block;

static void *arena_alloc(sj_doc *d, size_t n) {
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    sj_block *b = d->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (cap > SIZE_MAX - sizeof *b) return NULL;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->next = d->blocks, b->used = 0, b->cap = cap;
        d->blocks = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    return p;
}

void sj_free(sj_doc *d) {
    if (!d) return;
    for (sj_block *b = d->blocks, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    d->blocks = NULL, d->root = NULL;
}

/* ---- parser --------------------------------------------------------------------------- */
typedef struct parser {
    sj_doc *d;
    const unsigned char *t;
    size_t len, pos;
    char *err;
    size_t errcap;
    int failed;
} parser;

static int fail(parser *p, const char *msg) {
    if (!p->failed) snprintf(p->err, p->errcap, "bad JSON at byte %zu: %s", p->pos, msg);
    p->failed = 1;
    return 0;
}

static void ws(parser *p) {
    while (p->pos < p->len && (p->t[p->pos] == ' ' || p->t[p->pos] == '\t' ||
                               p->t[p->pos] == '\n' || p->t[p->pos] == '\r'))
        p->pos++;
}


size_t sj_utf8_valid_prefix(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t k = attn__utf8_len((const unsigned char *)s + i, n - i);
        if (!k) break;
        i += k;
    }
    return i;
}

static int hex4(parser *p, unsigned *v) {
    if (p->len - p->pos < 4) return fail(p, "truncated \\u escape");
    *v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p->t[p->pos++], h;
        if (c >= '0' && c <= '9') h = c - '0';
        else if (c >= 'a' && c <= 'f') h = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') h = c - 'A' + 10;
        else return fail(p, "bad \\u escape");
        *v = *v * 16 + h;
    }
    return 1;
}


/* A string at p->pos (the opening quote): decoded into the arena.  The decoded text is never
 * longer than its source, so the source's length bounds the copy. */
static int string(parser *p, const char **out, size_t *olen) {
    p->pos++; /* " */
    size_t start = p->pos, end = start;
    while (end < p->len && p->t[end] != '"') end += p->t[end] == '\\' ? 2 : 1;
    if (end >= p->len) return fail(p, "unterminated string");
    unsigned char *o = arena_alloc(p->d, end - start + 1);
    if (!o) return fail(p, "out of memory");
    size_t n = 0;
    while (p->t[p->pos] != '"') {
        unsigned c = p->t[p->pos];
        if (c < 0x20) return fail(p, "control character in a string");
        if (c == '\\') {
            p->pos++;
            unsigned e = p->t[p->pos++];
            switch (e) {
            case '"': o[n++] = '"'; break;
            case '\\': o[n++] = '\\'; break;
            case '/': o[n++] = '/'; break;
            case 'b': o[n++] = '\b'; break;
            case 'f': o[n++] = '\f'; break;
            case 'n': o[n++] = '\n'; break;
            case 'r': o[n++] = '\r'; break;
            case 't': o[n++] = '\t'; break;
            case 'u': {
                unsigned cp, lo;
                if (!hex4(p, &cp)) return 0;
                if (cp >= 0xdc00 && cp <= 0xdfff) return fail(p, "lone low surrogate");
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    if (p->len - p->pos < 6 || p->t[p->pos] != '\\' || p->t[p->pos + 1] != 'u')
                        return fail(p, "high surrogate without its low surrogate");
                    p->pos += 2;
                    if (!hex4(p, &lo)) return 0;
                    if (lo < 0xdc00 || lo > 0xdfff)
                        return fail(p, "high surrogate without its low surrogate");
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                }
                n += attn__utf8_put(cp, o + n); /* \uXXXX is 6 bytes, 12 for a pair: never longer */
                break;
            }
            default: p->pos--; return fail(p, "bad escape");
            }
            continue;
        }
        size_t k = attn__utf8_len(p->t + p->pos, end - p->pos);
        if (!k) return fail(p, "invalid UTF-8 in a string");
        memcpy(o + n, p->t + p->pos, k);
        n += k, p->pos += k;
    }
    p->pos++;
    o[n] = 0;
    *out = (const char *)o, *olen = n;
    return 1;
}

static int number(parser *p, double *v) {
    size_t s = p->pos;
    const unsigned char *t = p->t;
    if (p->pos < p->len && t[p->pos] == '-') p->pos++;
    if (p->pos >= p->len) return fail(p, "truncated number");
    if (t[p->pos] == '0') p->pos++;
    else if (t[p->pos] >= '1' && t[p->pos] <= '9')
        while (p->pos < p->len && t[p->pos] >= '0' && t[p->pos] <= '9') p->pos++;
    else return fail(p, "bad number");
    if (p->pos < p->len && t[p->pos] == '.') {
        p->pos++;
        if (p->pos >= p->len || t[p->pos] < '0' || t[p->pos] > '9') return fail(p, "bad number");
        while (p->pos < p->len && t[p->pos] >= '0' && t[p->pos] <= '9') p->pos++;
    }
    if (p->pos < p->len && (t[p->pos] == 'e' || t[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->len && (t[p->pos] == '+' || t[p->pos] == '-')) p->pos++;
        if (p->pos >= p->len || t[p->pos] < '0' || t[p->pos] > '9') return fail(p, "bad number");
        while (p->pos < p->len && t[p->pos] >= '0' && t[p->pos] <= '9') p->pos++;
    }
    size_t n = p->pos - s;
    if (n > 400) return fail(p, "number literal too long");
    char buf[408];
    memcpy(buf, t + s, n);
    buf[n] = 0;
    *v = strtod(buf, NULL);
    if (!isfinite(*v)) return fail(p, "number out of range");
    return 1;
}

static int literal(parser *p, const char *w) {
    size_t n = strlen(w);
    if (p->len - p->pos < n || memcmp(p->t + p->pos, w, n)) return fail(p, "unexpected token");
    p->pos += n;
    return 1;
}

static int value(parser *p, sj *v, int depth);

static int value_at(parser *p, sj *v, int depth) {
    memset(v, 0, sizeof *v);
    ws(p);
    if (p->pos >= p->len) return fail(p, "unexpected end of input");
    unsigned c = p->t[p->pos];
    if (c == '{' || c == '[') {
        if (depth >= SJ_MAX_DEPTH) return fail(p, "nested too deeply");
        const unsigned close = c == '{' ? '}' : ']';
        v->kind = c == '{' ? SJ_OBJ : SJ_ARR;
        p->pos++;
        ws(p);
        if (p->pos < p->len && p->t[p->pos] == close) {
            p->pos++;
            return 1;
        }
        sj **tail = &v->first;
        for (;;) {
            sj *k = arena_alloc(p->d, sizeof *k);
            if (!k) return fail(p, "out of memory");
            const char *key = NULL;
            size_t klen = 0;
            if (v->kind == SJ_OBJ) {
                ws(p);
                if (p->pos >= p->len || p->t[p->pos] != '"') return fail(p, "expected a key");
                if (!string(p, &key, &klen)) return 0;
                ws(p);
                if (p->pos >= p->len || p->t[p->pos] != ':') return fail(p, "expected ':'");
                p->pos++;
            }
            if (!value(p, k, depth + 1)) return 0;
            k->key = key, k->klen = klen;
            *tail = k, tail = &k->next;
            v->n++;
            ws(p);
            if (p->pos >= p->len) return fail(p, "unexpected end of input");
            if (p->t[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if (p->t[p->pos] == close) {
                p->pos++;
                return 1;
            }
            return fail(p, v->kind == SJ_OBJ ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    if (c == '"') {
        v->kind = SJ_STR;
        return string(p, &v->s, &v->len);
    }
    if (c == 't' || c == 'f') {
        v->kind = SJ_BOOL, v->b = c == 't';
        return literal(p, c == 't' ? "true" : "false");
    }
    if (c == 'n') {
        v->kind = SJ_NULL;
        return literal(p, "null");
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        v->kind = SJ_NUM;
        return number(p, &v->num);
    }
    return fail(p, "unexpected character");
}

/* A value with its text (v->raw). */
static int value(parser *p, sj *v, int depth) {
    ws(p);
    size_t at = p->pos;
    int ok = value_at(p, v, depth);
    v->raw = (const char *)p->t + at, v->rawlen = p->pos - at;
    return ok;
}

int sj_parse(sj_doc *d, const char *text, size_t len, char *err, size_t errcap) {
    d->blocks = NULL, d->root = NULL;
    parser p = {d, (const unsigned char *)text, len, 0, err, errcap, 0};
    if (errcap) err[0] = 0;
    sj *root = arena_alloc(d, sizeof *root);
    if (!root) return fail(&p, "out of memory");
    if (!value(&p, root, 0)) return 0;
    ws(&p);
    if (p.pos != len) return fail(&p, "text after the value");
    d->root = root;
    return 1;
}

const sj *sj_get(const sj *o, const char *key) {
    if (!o || o->kind != SJ_OBJ) return NULL;
    const sj *r = NULL;
    size_t kl = strlen(key);
    for (const sj *k = o->first; k; k = k->next)
        if (k->klen == kl && !memcmp(k->key, key, kl)) r = k;
    return r;
}

int sj_int(const sj *v, long long lo, long long hi, long long *out) {
    if (!v || v->kind != SJ_NUM || v->num != floor(v->num)) return 0;
    if (v->num < (double)lo || v->num > (double)hi) return 0;
    *out = (long long)v->num;
    return 1;
}

/* ---- writer --------------------------------------------------------------------------- */
void sb_put(sbuf *b, const void *s, size_t n) {
    if (b->oom || n == 0) return;
    if (b->cap - b->n <= n) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc - b->n <= n) {
            if (nc > SIZE_MAX / 2) {
                b->oom = 1;
                return;
            }
            nc *= 2;
        }
        char *p = realloc(b->p, nc);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p, b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof tmp) {
        sb_put(b, tmp, (size_t)k);
        return;
    }
    char *big = malloc((size_t)k + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    sb_put(b, big, (size_t)k);
    free(big);
}

void sb_json_str(sbuf *b, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    sb_put(b, "\"", 1);
    size_t i = 0, run = 0; /* run: bytes to copy as they are, from i - run */
    while (i < n) {
        unsigned c = u[i];
        const char *esc = NULL;
        char tmp[8];
        size_t k = 1;
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c < 0x20 || c == 0x7f) {
            snprintf(tmp, sizeof tmp, "\\u%04x", c);
            esc = tmp;
        } else if (c >= 0x80) {
            k = attn__utf8_len(u + i, n - i);
            if (!k) esc = "\\ufffd", k = 1;
        }
        if (esc) {
            sb_put(b, u + i - run, run);
            run = 0;
            sb_puts(b, esc);
        } else
            run += k;
        i += k;
    }
    sb_put(b, u + i - run, run);
    sb_put(b, "\"", 1);
}

void sb_json_float(sbuf *b, float f) {
    if (!isfinite(f)) sb_puts(b, "null");
    else sb_printf(b, "%.9g", (double)f);
}

void sb_free(sbuf *b) {
    if (!b) return;
    free(b->p);
    b->p = NULL, b->n = b->cap = 0, b->oom = 0;
}
