/* JSON values of chat formatting, read with the library's JSON reader and written as Python's
 * json.dumps writes them (see chat_json.h). */
#define _POSIX_C_SOURCE 200809L
#include "chat_json.h"

#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/json.h"

#define CJ_BLOCK 256
#define CJ_MAX_MEMBERS 4096

typedef struct attn__cj_block {
    struct attn__cj_block *next;
    size_t used;
    attn__cj nodes[CJ_BLOCK];
} cj_block;

static attn__cj *new_node(attn_ctx *ctx, attn__cj_doc *d) {
    if (!d->blocks || d->blocks->used == CJ_BLOCK) {
        cj_block *b = attn__malloc(ctx, sizeof *b);
        if (!b) return NULL;
        b->next = d->blocks, b->used = 0;
        d->blocks = b;
    }
    attn__cj *v = &d->blocks->nodes[d->blocks->used++];
    memset(v, 0, sizeof *v);
    return v;
}

/* One value at the reader's position into *out (depth bounded by the reader: 64). */
static attn_status build(attn__json_reader *r, attn_ctx *ctx, attn__cj_doc *d, attn__cj **out) {
    attn__json_kind k;
    ATTN_TRY(attn__json_peek(r, &k));
    attn__cj *v = new_node(ctx, d);
    ATTN_FAIL_IF(!v, ctx, ATTN_E_NOMEM, "%s: out of memory", r->what);
    *out = v;
    switch (k) {
    case ATTN__JSON_NULL: v->kind = CJ_NULL; return attn__json_null(r);
    case ATTN__JSON_BOOL: v->kind = CJ_BOOL; return attn__json_bool(r, &v->b);
    case ATTN__JSON_NUMBER: {
        size_t at = r->pos;
        ATTN_TRY(attn__json_skip(r));
        v->s = (const char *)r->text + at, v->n = r->pos - at;
        v->kind = CJ_INT;
        for (size_t i = 0; i < v->n; i++)
            if (v->s[i] == '.' || v->s[i] == 'e' || v->s[i] == 'E') v->kind = CJ_FLOAT;
        return ATTN_OK;
    }
    case ATTN__JSON_STRING:
        v->kind = CJ_STR;
        ATTN_TRY(attn__json_string(r, &v->s, &v->n));
        ATTN_FAIL_IF(memchr(v->s, 0, v->n), ctx, ATTN_E_INVALID,
                     "%s: a string holds U+0000", r->what);
        return ATTN_OK;
    case ATTN__JSON_ARRAY: {
        v->kind = CJ_ARR;
        ATTN_TRY(attn__json_array_begin(r));
        attn__cj **tail = &v->first;
        for (;;) {
            int more;
            ATTN_TRY(attn__json_element(r, &more));
            if (!more) break;
            ATTN_TRY(build(r, ctx, d, tail));
            tail = &(*tail)->next;
            v->count++;
        }
        return ATTN_OK;
    }
    case ATTN__JSON_OBJECT: {
        v->kind = CJ_OBJ;
        ATTN_TRY(attn__json_object_begin(r));
        attn__cj **tail = &v->first;
        for (;;) {
            int more;
            const char *key;
            size_t klen;
            ATTN_TRY(attn__json_member(r, &more, &key, &klen));
            if (!more) break;
            ATTN_FAIL_IF(memchr(key, 0, klen), ctx, ATTN_E_INVALID,
                         "%s: a key holds U+0000", r->what);
            ATTN_FAIL_IF(v->count >= CJ_MAX_MEMBERS, ctx, ATTN_E_INVALID,
                         "%s: an object of more than %d members", r->what, CJ_MAX_MEMBERS);
            for (const attn__cj *c = v->first; c; c = c->next)
                ATTN_FAIL_IF(c->klen == klen && !memcmp(c->key, key, klen), ctx, ATTN_E_INVALID,
                             "%s: the key \"%.60s\" twice in one object", r->what, key);
            ATTN_TRY(build(r, ctx, d, tail));
            (*tail)->key = key, (*tail)->klen = klen;
            tail = &(*tail)->next;
            v->count++;
        }
        return ATTN_OK;
    }
    }
    return attn__fail(ctx, ATTN_E_INTERNAL, "%s: unknown JSON kind", r->what);
}

attn_status attn__cj_parse(attn_ctx *ctx, const char *text, const char *what,
                           attn__cj_doc *doc) {
    memset(doc, 0, sizeof *doc);
    attn__json_reader r;
    attn_status st = attn__json_open(&r, ctx, text, strlen(text), what, 0);
    if (st == ATTN_OK) st = build(&r, ctx, doc, &doc->root);
    if (st == ATTN_OK) st = attn__json_finish(&r);
    doc->pool = attn__json_take_pool(&r);
    attn__json_close(&r);
    if (st == ATTN_E_FORMAT) { /* the reader's status: the caller's text is what is wrong */
        char msg[ATTN__MSG_MAX];
        snprintf(msg, sizeof msg, "%s", attn_ctx_errmsg(ctx));
        st = attn__fail(ctx, ATTN_E_INVALID, "%s", msg);
    }
    if (st != ATTN_OK) doc->root = NULL;
    return st;
}

attn_status attn__cj_parse_prefix(attn_ctx *ctx, const char *text, size_t len, const char *what,
                                  attn__cj_doc *doc, size_t *end) {
    memset(doc, 0, sizeof *doc);
    *end = 0;
    attn__json_reader r;
    attn_status st = attn__json_open(&r, ctx, text, len, what, 0);
    if (st == ATTN_OK) st = build(&r, ctx, doc, &doc->root);
    if (st == ATTN_OK) *end = r.pos;
    doc->pool = attn__json_take_pool(&r);
    attn__json_close(&r);
    if (st == ATTN_E_FORMAT) st = ATTN_E_INVALID;
    if (st != ATTN_OK) doc->root = NULL;
    return st;
}

void attn__cj_free(attn_ctx *ctx, attn__cj_doc *doc) {
    while (doc->blocks) {
        cj_block *b = doc->blocks;
        doc->blocks = b->next;
        attn__free(ctx, b);
    }
    attn__free(ctx, doc->pool);
    memset(doc, 0, sizeof *doc);
}

const attn__cj *attn__cj_get(const attn__cj *v, const char *key) {
    if (!v || v->kind != CJ_OBJ) return NULL;
    size_t k = strlen(key);
    for (const attn__cj *c = v->first; c; c = c->next)
        if (c->klen == k && !memcmp(c->key, key, k)) return c;
    return NULL;
}

/* strtod in the C locale (the host program's LC_NUMERIC may use a decimal comma). */
static double strtod_c(const char *s) {
    locale_t c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    locale_t old = c ? uselocale(c) : (locale_t)0;
    double d = strtod(s, NULL);
    if (c) uselocale(old), freelocale(c);
    return d;
}

int attn__cj_truthy(const attn__cj *v) {
    if (!v) return 0;
    switch (v->kind) {
    case CJ_NULL: return 0;
    case CJ_BOOL: return v->b;
    case CJ_INT:
        for (size_t i = 0; i < v->n; i++)
            if (v->s[i] >= '1' && v->s[i] <= '9') return 1;
        return 0;
    case CJ_FLOAT: return strtod_c(v->s) != 0.0;
    case CJ_STR: return v->n > 0;
    case CJ_ARR:
    case CJ_OBJ: return v->count > 0;
    }
    return 0;
}

size_t attn__cj_strlen_cp(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xc0) != 0x80;
    return k;
}

/* ---- Python's repr of a float ----------------------------------------------------------
 * The shortest digit string that reads back as the same double (and of those, the nearest):
 * for p = 1, 2, ... 17 digits the correctly rounded one (%.*e), and where it misses, its two
 * neighbours on the p-digit grid (the interval of a power of two is lopsided).  Written as
 * Python's float_repr_style 'short' does: exponent form when the decimal point is 4 or more
 * places left of the first digit or more than 16 right of it, else fixed with ".0". */

/* digits d[0, nd) times 10^(e - nd + 1) (d[0] != 0) as text that strtod reads: "d.ddde<e>" */
static int reads_back(int neg, const char *d, int nd, int e, double want) {
    char buf[48];
    int k = 0;
    if (neg) buf[k++] = '-';
    buf[k++] = d[0];
    if (nd > 1) {
        buf[k++] = '.';
        memcpy(buf + k, d + 1, (size_t)nd - 1);
        k += nd - 1;
    }
    snprintf(buf + k, sizeof buf - (size_t)k, "e%d", e);
    return strtod(buf, NULL) == want;
}

size_t attn__cj_float_repr(const char *s, size_t n, char *out) {
    (void)n; /* s is followed by a character that ends the number (JSON text) */
    locale_t c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    locale_t old = c ? uselocale(c) : (locale_t)0;
    double v = strtod(s, NULL);
    size_t len = 0;
    if (isinf(v) || v == 0.0) {
        const char *t = isinf(v) ? (v < 0 ? "-Infinity" : "Infinity")
                                 : (signbit(v) ? "-0.0" : "0.0");
        len = strlen(t);
        memcpy(out, t, len + 1);
        goto done;
    }
    int neg = v < 0, nd = 0, e = 0;
    char d[24];
    for (int p = 1; p <= 17; p++) {
        char buf[48];
        snprintf(buf, sizeof buf, "%.*e", p - 1, fabs(v));
        /* buf: D[.DDD]e[+-]XX; the decimal point as the C locale writes it */
        nd = 0;
        const char *q = buf;
        for (; *q && *q != 'e'; q++)
            if (*q >= '0' && *q <= '9') d[nd++] = *q;
        e = atoi(q + 1);
        if (reads_back(neg, d, nd, e, v)) break;
        int found = 0;
        for (int dir = 1; dir >= -1 && !found; dir -= 2) {
            char t[24];
            int tn = nd, te = e;
            memcpy(t, d, (size_t)nd);
            int i = tn - 1;
            if (dir > 0) {
                while (i >= 0 && t[i] == '9') t[i--] = '0';
                if (i < 0) {
                    t[0] = '1', te++; /* 99..9 + 1 = 100..0: one more decade */
                } else {
                    t[i]++;
                }
            } else {
                while (i >= 0 && t[i] == '0') t[i--] = '9';
                if (i < 0) continue; /* cannot be: d[0] != 0 */
                t[i]--;
                if (t[0] == '0') { /* 100..0 - 1 = 99..9: one decade less */
                    if (tn == 1) continue;
                    memmove(t, t + 1, (size_t)tn - 1);
                    tn--, te--;
                }
            }
            if (reads_back(neg, t, tn, te, v)) {
                memcpy(d, t, (size_t)tn);
                nd = tn, e = te, found = 1;
            }
        }
        if (found) break;
    }
    while (nd > 1 && d[nd - 1] == '0') nd--;
    int decpt = e + 1; /* the value is 0.d[0]d[1]... times 10^decpt */
    if (neg) out[len++] = '-';
    if (decpt <= -4 || decpt > 16) {
        out[len++] = d[0];
        if (nd > 1) {
            out[len++] = '.';
            memcpy(out + len, d + 1, (size_t)nd - 1);
            len += (size_t)nd - 1;
        }
        len += (size_t)snprintf(out + len, 32 - len, "e%c%02d", e < 0 ? '-' : '+', abs(e));
    } else if (decpt <= 0) {
        out[len++] = '0', out[len++] = '.';
        for (int i = 0; i < -decpt; i++) out[len++] = '0';
        memcpy(out + len, d, (size_t)nd);
        len += (size_t)nd;
    } else if (decpt >= nd) {
        memcpy(out + len, d, (size_t)nd);
        len += (size_t)nd;
        for (int i = nd; i < decpt; i++) out[len++] = '0';
        out[len++] = '.', out[len++] = '0';
    } else {
        memcpy(out + len, d, (size_t)decpt);
        len += (size_t)decpt;
        out[len++] = '.';
        memcpy(out + len, d + decpt, (size_t)(nd - decpt));
        len += (size_t)(nd - decpt);
    }
    out[len] = 0;
done:
    if (c) uselocale(old), freelocale(c);
    return len;
}

/* ---- json.dumps --------------------------------------------------------------------------- */
void attn__cj_dump_str(const char *s, size_t n, attn__cj_put put, void *o) {
    put(o, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (!esc) continue;
        if (i > run) put(o, s + run, i - run);
        put(o, esc, strlen(esc));
        run = i + 1;
    }
    if (n > run) put(o, s + run, n - run);
    put(o, "\"", 1);
}

static void newline(int indent, int level, attn__cj_put put, void *o) {
    put(o, "\n", 1);
    for (int i = 0; i < indent * level; i++) put(o, " ", 1);
}

static void dump(const attn__cj *v, int indent, int level, attn__cj_put put, void *o) {
    switch (v->kind) {
    case CJ_NULL: put(o, "null", 4); return;
    case CJ_BOOL: put(o, v->b ? "true" : "false", v->b ? 4 : 5); return;
    case CJ_INT:
        if (v->n == 2 && v->s[0] == '-' && v->s[1] == '0') put(o, "0", 1); /* int("-0") */
        else put(o, v->s, v->n);
        return;
    case CJ_FLOAT: {
        char b[32];
        size_t k = attn__cj_float_repr(v->s, v->n, b);
        put(o, b, k);
        return;
    }
    case CJ_STR: attn__cj_dump_str(v->s, v->n, put, o); return;
    case CJ_ARR:
    case CJ_OBJ: {
        const int obj = v->kind == CJ_OBJ;
        if (!v->count) {
            put(o, obj ? "{}" : "[]", 2);
            return;
        }
        put(o, obj ? "{" : "[", 1);
        for (const attn__cj *c = v->first; c; c = c->next) {
            if (c != v->first) put(o, indent < 0 ? ", " : ",", indent < 0 ? 2 : 1);
            if (indent >= 0) newline(indent, level + 1, put, o);
            if (obj) {
                attn__cj_dump_str(c->key, c->klen, put, o);
                put(o, ": ", 2);
            }
            dump(c, indent, level + 1, put, o);
        }
        if (indent >= 0) newline(indent, level, put, o);
        put(o, obj ? "}" : "]", 1);
        return;
    }
    }
}

void attn__cj_dump(const attn__cj *v, int indent, attn__cj_put put, void *o) {
    dump(v, indent, 0, put, o);
}
