/* Strict JSON pull parser (see json.h).  Every read of text[] is preceded by a bounds check
 * against r->len; the input is never assumed to be NUL-terminated. */
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

/* ---- errors ---------------------------------------------------------------------------- */
static attn_status jfail(attn__json_reader *r, size_t at, const char *msg) {
    /* keep the first failure: later ones are consequences of it */
    if (r->status == ATTN_OK) {
        r->status = ATTN_E_FORMAT;
        attn__fail(r->ctx, ATTN_E_FORMAT, "%s: invalid JSON at byte %zu: %s", r->what,
                   r->base + at, msg);
    }
    return r->status;
}

/* For input that is valid JSON but not what the caller asked for. */
static attn_status jrefuse(attn__json_reader *r, size_t at, const char *msg) {
    if (r->status == ATTN_OK) {
        r->status = ATTN_E_FORMAT;
        attn__fail(r->ctx, ATTN_E_FORMAT, "%s: at byte %zu: %s", r->what, r->base + at, msg);
    }
    return r->status;
}

static attn_status jmisuse(attn__json_reader *r, const char *msg) {
    if (r->status == ATTN_OK) {
        r->status = ATTN_E_INTERNAL;
        attn__fail(r->ctx, ATTN_E_INTERNAL, "%s: JSON reader misused: %s", r->what, msg);
    }
    return r->status;
}

const char *attn__json_kind_name(attn__json_kind kind) {
    switch (kind) {
    case ATTN__JSON_NULL: return "null";
    case ATTN__JSON_BOOL: return "a boolean";
    case ATTN__JSON_NUMBER: return "a number";
    case ATTN__JSON_STRING: return "a string";
    case ATTN__JSON_ARRAY: return "an array";
    case ATTN__JSON_OBJECT: return "an object";
    }
    return "?";
}

/* ---- open / close ---------------------------------------------------------------------- */
attn_status attn__json_open(attn__json_reader *r, attn_ctx *ctx, const void *text, size_t len,
                            const char *what, size_t base) {
    memset(r, 0, sizeof *r);
    r->ctx = ctx;
    r->text = text;
    r->len = len;
    r->what = what ? what : "JSON";
    r->base = base;
    /* decoded strings never outgrow their raw form (quotes included), so len + 1 holds all */
    size_t cap;
    if (!attn__add_size(len, 1, &cap))
        return r->status = attn__fail(ctx, ATTN_E_OVERFLOW, "%s: too large", r->what);
    r->pool = attn__malloc(ctx, cap);
    if (!r->pool)
        return r->status = attn__fail(ctx, ATTN_E_NOMEM,
                                      "%s: out of memory (%zu bytes for strings)", r->what,
                                      cap);
    r->pool_cap = cap;
    return ATTN_OK;
}

void attn__json_close(attn__json_reader *r) {
    if (r->pool) attn__free(r->ctx, r->pool);
    r->pool = NULL;
}

char *attn__json_take_pool(attn__json_reader *r) {
    char *p = r->pool;
    r->pool = NULL;
    return p;
}

/* ---- lexical helpers ------------------------------------------------------------------- */
static void skip_ws(attn__json_reader *r) {
    while (r->pos < r->len) {
        unsigned char c = r->text[r->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        r->pos++;
    }
}

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static int hex_value(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}


int attn__json_utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t k = attn__utf8_len(p + i, n - i);
        if (!k) return 0;
        i += k;
    }
    return 1;
}


/* Reads the 4 hex digits of a \u escape at text[i]; -1 if absent or malformed. */
static long read_hex4(const attn__json_reader *r, size_t i) {
    if (r->len - i < 4) return -1; /* i <= len always holds here */
    long v = 0;
    for (size_t k = 0; k < 4; k++) {
        int h = hex_value(r->text[i + k]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* Parses the string at r->pos (which holds '"').  With keep, decodes it into the pool and
 * returns it; otherwise only validates. */
static attn_status parse_string(attn__json_reader *r, int keep, const char **out,
                                size_t *out_len) {
    const unsigned char *t = r->text;
    size_t i = r->pos + 1, n = 0;
    unsigned char *dst = keep ? (unsigned char *)r->pool + r->pool_used : NULL;
    size_t room = keep ? r->pool_cap - r->pool_used : 0;
    unsigned char buf[4];
    for (;;) {
        if (i >= r->len) return jfail(r, r->pos, "unterminated string");
        unsigned char c = t[i];
        size_t k;
        if (c == '"') {
            i++;
            break;
        }
        if (c < 0x20) return jfail(r, i, "unescaped control character in string");
        if (c == '\\') {
            if (i + 1 >= r->len) return jfail(r, r->pos, "unterminated string");
            unsigned char e = t[i + 1];
            size_t at = i;
            i += 2;
            k = 1;
            switch (e) {
            case '"': buf[0] = '"'; break;
            case '\\': buf[0] = '\\'; break;
            case '/': buf[0] = '/'; break;
            case 'b': buf[0] = '\b'; break;
            case 'f': buf[0] = '\f'; break;
            case 'n': buf[0] = '\n'; break;
            case 'r': buf[0] = '\r'; break;
            case 't': buf[0] = '\t'; break;
            case 'u': {
                long u = read_hex4(r, i);
                if (u < 0) return jfail(r, at, "\\u needs four hexadecimal digits");
                i += 4;
                uint32_t cp = (uint32_t)u;
                if (cp >= 0xDC00 && cp <= 0xDFFF)
                    return jfail(r, at, "unpaired low surrogate in \\u escape");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    /* a high surrogate must be followed at once by \u and a low one */
                    long lo = -1;
                    if (r->len - i >= 2 && t[i] == '\\' && t[i + 1] == 'u')
                        lo = read_hex4(r, i + 2);
                    if (lo < 0xDC00 || lo > 0xDFFF)
                        return jfail(r, at, "unpaired high surrogate in \\u escape");
                    i += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
                }
                k = attn__utf8_put(cp, buf);
                break;
            }
            default: return jfail(r, at, "invalid escape sequence in string");
            }
            if (keep) {
                if (room - n < k + 1) return jmisuse(r, "string pool overflow");
                memcpy(dst + n, buf, k);
            }
            n += k;
            continue;
        }
        k = c < 0x80 ? 1 : attn__utf8_len(t + i, r->len - i);
        if (!k) return jfail(r, i, "invalid UTF-8 in string");
        if (keep) {
            if (room - n < k + 1) return jmisuse(r, "string pool overflow");
            memcpy(dst + n, t + i, k);
        }
        n += k;
        i += k;
    }
    if (keep) {
        if (room - n < 1) return jmisuse(r, "string pool overflow");
        dst[n] = 0;
        r->pool_used += n + 1;
        *out = (const char *)dst;
        if (out_len) *out_len = n;
    }
    r->pos = i;
    return ATTN_OK;
}

/* Scans the number at r->pos per the JSON grammar.  *is_int: no fraction or exponent;
 * *v and *range_ok describe its value as an int64 when it is an integer. */
static attn_status scan_number(attn__json_reader *r, int *is_int, int64_t *v, int *range_ok) {
    const unsigned char *t = r->text;
    size_t i = r->pos, start = r->pos;
    int neg = 0, big = 0;
    uint64_t mag = 0;
    if (i < r->len && t[i] == '-') {
        neg = 1;
        i++;
    }
    if (i >= r->len || !is_digit(t[i])) return jfail(r, start, "invalid number");
    if (t[i] == '0') {
        i++;
        if (i < r->len && is_digit(t[i]))
            return jfail(r, start, "number with a leading zero");
    } else {
        while (i < r->len && is_digit(t[i])) {
            unsigned d = (unsigned)(t[i] - '0');
            if (mag > (UINT64_MAX - d) / 10) big = 1;
            else mag = mag * 10 + d;
            i++;
        }
    }
    int frac = 0, exp = 0;
    if (i < r->len && t[i] == '.') {
        frac = 1;
        i++;
        if (i >= r->len || !is_digit(t[i])) return jfail(r, start, "number with an empty fraction");
        while (i < r->len && is_digit(t[i])) i++;
    }
    if (i < r->len && (t[i] == 'e' || t[i] == 'E')) {
        exp = 1;
        i++;
        if (i < r->len && (t[i] == '+' || t[i] == '-')) i++;
        if (i >= r->len || !is_digit(t[i])) return jfail(r, start, "number with an empty exponent");
        while (i < r->len && is_digit(t[i])) i++;
    }
    *is_int = !frac && !exp;
    *range_ok = 0;
    *v = 0;
    if (!big) {
        if (!neg && mag <= (uint64_t)INT64_MAX) {
            *v = (int64_t)mag;
            *range_ok = 1;
        } else if (neg && mag <= (uint64_t)INT64_MAX + 1) {
            /* -(mag - 1) - 1 reaches INT64_MIN without overflowing */
            *v = mag == 0 ? 0 : -(int64_t)(mag - 1) - 1;
            *range_ok = 1;
        }
    }
    r->pos = i;
    return ATTN_OK;
}

static int literal_at(const attn__json_reader *r, const char *lit) {
    size_t n = strlen(lit);
    return r->len - r->pos >= n && memcmp(r->text + r->pos, lit, n) == 0;
}

/* ---- values ---------------------------------------------------------------------------- */
attn_status attn__json_peek(attn__json_reader *r, attn__json_kind *kind) {
    if (r->status) return r->status;
    skip_ws(r);
    if (r->pos >= r->len) return jfail(r, r->pos, "unexpected end, expected a value");
    unsigned char c = r->text[r->pos];
    switch (c) {
    case '{': *kind = ATTN__JSON_OBJECT; return ATTN_OK;
    case '[': *kind = ATTN__JSON_ARRAY; return ATTN_OK;
    case '"': *kind = ATTN__JSON_STRING; return ATTN_OK;
    case 't':
    case 'f': *kind = ATTN__JSON_BOOL; return ATTN_OK;
    case 'n': *kind = ATTN__JSON_NULL; return ATTN_OK;
    default:
        if (c == '-' || is_digit(c)) {
            *kind = ATTN__JSON_NUMBER;
            return ATTN_OK;
        }
        return jfail(r, r->pos, "expected a value");
    }
}

/* Peeks and requires a kind; `want` names it for the message. */
static attn_status expect_kind(attn__json_reader *r, attn__json_kind want) {
    attn__json_kind k;
    attn_status st = attn__json_peek(r, &k);
    if (st) return st;
    if (k != want) {
        char msg[64];
        snprintf(msg, sizeof msg, "expected %s, found %s", attn__json_kind_name(want),
                 attn__json_kind_name(k));
        return jrefuse(r, r->pos, msg);
    }
    return ATTN_OK;
}

static attn_status push(attn__json_reader *r, unsigned char open) {
    if (r->depth >= ATTN__JSON_MAX_DEPTH)
        return jfail(r, r->pos, "nesting deeper than 64 levels");
    r->stack[r->depth] = open;
    r->fresh[r->depth] = 1;
    r->depth++;
    r->pos++;
    return ATTN_OK;
}

attn_status attn__json_object_begin(attn__json_reader *r) {
    attn_status st = expect_kind(r, ATTN__JSON_OBJECT);
    return st ? st : push(r, '{');
}

attn_status attn__json_array_begin(attn__json_reader *r) {
    attn_status st = expect_kind(r, ATTN__JSON_ARRAY);
    return st ? st : push(r, '[');
}

attn_status attn__json_member(attn__json_reader *r, int *more, const char **key,
                              size_t *key_len) {
    *more = 0;
    if (r->status) return r->status;
    if (r->depth == 0 || r->stack[r->depth - 1] != '{') return jmisuse(r, "not in an object");
    skip_ws(r);
    if (r->pos >= r->len) return jfail(r, r->pos, "unexpected end inside an object");
    int d = r->depth - 1;
    if (r->text[r->pos] == '}') {
        r->pos++;
        r->depth--;
        return ATTN_OK;
    }
    if (!r->fresh[d]) {
        if (r->text[r->pos] != ',') return jfail(r, r->pos, "expected ',' or '}' in an object");
        r->pos++;
        skip_ws(r);
    }
    r->fresh[d] = 0;
    if (r->pos >= r->len || r->text[r->pos] != '"')
        return jfail(r, r->pos, "expected a string key in an object");
    attn_status st = parse_string(r, key != NULL, key, key_len);
    if (st) return st;
    skip_ws(r);
    if (r->pos >= r->len || r->text[r->pos] != ':')
        return jfail(r, r->pos, "expected ':' after an object key");
    r->pos++;
    *more = 1;
    return ATTN_OK;
}

attn_status attn__json_element(attn__json_reader *r, int *more) {
    *more = 0;
    if (r->status) return r->status;
    if (r->depth == 0 || r->stack[r->depth - 1] != '[') return jmisuse(r, "not in an array");
    skip_ws(r);
    if (r->pos >= r->len) return jfail(r, r->pos, "unexpected end inside an array");
    int d = r->depth - 1;
    if (r->text[r->pos] == ']') {
        /* after a ',' the caller parses a value first, so "[1,]" fails there */
        r->pos++;
        r->depth--;
        return ATTN_OK;
    }
    if (!r->fresh[d]) {
        if (r->text[r->pos] != ',') return jfail(r, r->pos, "expected ',' or ']' in an array");
        r->pos++;
    }
    r->fresh[d] = 0;
    *more = 1;
    return ATTN_OK;
}

attn_status attn__json_string(attn__json_reader *r, const char **s, size_t *len) {
    attn_status st = expect_kind(r, ATTN__JSON_STRING);
    return st ? st : parse_string(r, 1, s, len);
}

attn_status attn__json_int(attn__json_reader *r, int64_t *v) {
    attn_status st = expect_kind(r, ATTN__JSON_NUMBER);
    if (st) return st;
    size_t at = r->pos;
    int is_int, ok;
    st = scan_number(r, &is_int, v, &ok);
    if (st) return st;
    if (!is_int) return jrefuse(r, at, "expected an integer, found a fraction or exponent");
    if (!ok) return jrefuse(r, at, "integer out of the 64-bit range");
    return ATTN_OK;
}

attn_status attn__json_flag(attn__json_reader *r, int *v) {
    attn__json_kind k;
    attn_status st = attn__json_peek(r, &k);
    if (st) return st;
    if (k == ATTN__JSON_NULL) {
        *v = -1;
        return attn__json_null(r);
    }
    return attn__json_bool(r, v);
}

attn_status attn__json_bool(attn__json_reader *r, int *v) {
    attn_status st = expect_kind(r, ATTN__JSON_BOOL);
    if (st) return st;
    if (literal_at(r, "true")) {
        r->pos += 4;
        *v = 1;
    } else if (literal_at(r, "false")) {
        r->pos += 5;
        *v = 0;
    } else {
        return jfail(r, r->pos, "invalid literal");
    }
    return ATTN_OK;
}

attn_status attn__json_null(attn__json_reader *r) {
    attn_status st = expect_kind(r, ATTN__JSON_NULL);
    if (st) return st;
    if (!literal_at(r, "null")) return jfail(r, r->pos, "invalid literal");
    r->pos += 4;
    return ATTN_OK;
}

attn_status attn__json_skip(attn__json_reader *r) {
    /* iterative, so hostile nesting costs no C stack; push() enforces the depth limit */
    int base = r->depth;
    for (;;) {
        attn__json_kind k;
        attn_status st = attn__json_peek(r, &k);
        if (st) return st;
        switch (k) {
        case ATTN__JSON_OBJECT: st = push(r, '{'); break;
        case ATTN__JSON_ARRAY: st = push(r, '['); break;
        case ATTN__JSON_STRING: st = parse_string(r, 0, NULL, NULL); break;
        case ATTN__JSON_NULL: st = attn__json_null(r); break;
        case ATTN__JSON_BOOL: {
            int b;
            st = attn__json_bool(r, &b);
            break;
        }
        case ATTN__JSON_NUMBER: {
            int is_int, ok;
            int64_t v;
            st = scan_number(r, &is_int, &v, &ok);
            break;
        }
        }
        if (st) return st;
        /* close finished containers until another value is due */
        for (;;) {
            if (r->depth == base) return ATTN_OK;
            int more;
            if (r->stack[r->depth - 1] == '{') st = attn__json_member(r, &more, NULL, NULL);
            else st = attn__json_element(r, &more);
            if (st) return st;
            if (more) break;
        }
    }
}

attn_status attn__json_finish(attn__json_reader *r) {
    if (r->status) return r->status;
    if (r->depth != 0) return jmisuse(r, "containers left open");
    skip_ws(r);
    if (r->pos != r->len) return jfail(r, r->pos, "unexpected data after the JSON value");
    return ATTN_OK;
}

attn_status attn__json_double(attn__json_reader *r, const char *key, double *v) {
    attn__json_kind k;
    ATTN_TRY(attn__json_peek(r, &k));
    if (k != ATTN__JSON_NUMBER)
        return attn__fail(r->ctx, ATTN_E_FORMAT, "%s: %s must be a number, found %s", r->what,
                          key ? key : "the value", attn__json_kind_name(k));
    char buf[64];
    size_t i = 0, p = r->pos;
    while (p < r->len && i + 1 < sizeof buf && strchr("+-.eE0123456789", r->text[p]))
        buf[i++] = (char)r->text[p++];
    buf[i] = 0;
    *v = strtod(buf, NULL);
    return attn__json_skip(r);
}
