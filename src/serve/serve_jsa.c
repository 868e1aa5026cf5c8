/* The incremental JSON acceptor (serve_jsa.h): a pushdown automaton over bytes. */
#include "serve_jsa.h"

#include <string.h>

enum {
    S_TOP,    /* before the top-level object */
    S_VAL,    /* a value */
    S_ARR0,   /* after '[': a value or ']' */
    S_OBJ0,   /* after '{': a key or '}' */
    S_KEY,    /* after ',' in an object: a key */
    S_COLON,  /* after a key */
    S_AFTER,  /* after a value in a container: ',' or its closer */
    S_STR,    /* in a string (key: an object's key) */
    S_ESC,    /* after '\' in a string */
    S_UHEX,   /* in \uXXXX (aux: digits left) */
    S_LOWBS,  /* after a high surrogate's escape: '\' */
    S_LOWU,   /* then 'u' */
    S_LIT,    /* in true, false or null (lit, aux: the literal and its next byte) */
    S_NEG,    /* a number: after '-' */
    S_ZERO,   /* a leading 0 */
    S_INT,    /* integer digits */
    S_DOT,    /* after '.' */
    S_FRAC,   /* fraction digits */
    S_E,      /* after 'e' or 'E' */
    S_ESIGN,  /* after the exponent's sign */
    S_EXP,    /* exponent digits */
    S_DONE    /* the top-level object is closed */
};

#define MAX_WS 16
#define MAX_NUM 64

static const char *const lits[3] = {"true", "false", "null"};

void attn__jsa_init(attn__jsa *s) {
    memset(s, 0, sizeof *s);
    s->st = S_TOP;
}

int attn__jsa_done(const attn__jsa *s) { return s->st == S_DONE; }

static int is_ws(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_hex(int c) {
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A value ended: back to its container, or done. */
static void value_end(attn__jsa *s) { s->st = s->depth > 0 ? S_AFTER : S_DONE; }

static int open_container(attn__jsa *s, int c) {
    if (s->depth >= ATTN__JSA_DEPTH) return 0;
    s->stack[s->depth++] = (uint8_t)c;
    s->st = c == '{' ? S_OBJ0 : S_ARR0;
    return 1;
}

static int close_container(attn__jsa *s, int c) {
    if (s->depth == 0 || s->stack[s->depth - 1] != (c == '}' ? '{' : '[')) return 0;
    s->depth--;
    value_end(s);
    return 1;
}

/* The first byte of a value. */
static int value_start(attn__jsa *s, int c) {
    s->aux = 0;
    if (c == '{' || c == '[') return open_container(s, c);
    if (c == '"') {
        s->st = S_STR, s->key = 0;
        return 1;
    }
    if (c == '-') {
        s->st = S_NEG, s->aux = 1;
        return 1;
    }
    if (is_digit(c)) {
        s->st = c == '0' ? S_ZERO : S_INT, s->aux = 1;
        return 1;
    }
    for (int i = 0; i < 3; i++)
        if (c == lits[i][0]) {
            s->st = S_LIT, s->key = (uint8_t)i, s->aux = 1;
            return 1;
        }
    return 0;
}

/* A byte after a number's accepting state that does not continue it: the number ends there. */
static int number_next(attn__jsa *s, int c, int next_state) {
    if (next_state >= 0) {
        if (++s->aux > MAX_NUM) return 0;
        s->st = (uint8_t)next_state;
        return 1;
    }
    value_end(s);
    return -1; /* reprocess c */
}

static int step(attn__jsa *s, int c) {
    if (is_ws(c)) {
        switch (s->st) {
        case S_TOP: case S_VAL: case S_ARR0: case S_OBJ0: case S_KEY: case S_COLON:
        case S_AFTER: case S_DONE:
            return ++s->ws <= MAX_WS;
        default:
            break;
        }
    } else if (s->st != S_STR && s->st != S_ESC && s->st != S_UHEX) {
        s->ws = 0;
    }
    if (s->need) { /* inside a UTF-8 character of a string */
        if (c < s->lo || c > s->hi) return 0;
        s->need--, s->lo = 0x80, s->hi = 0xbf;
        return 1;
    }
    switch (s->st) {
    case S_TOP:
        return c == '{' && open_container(s, c);
    case S_VAL:
        return value_start(s, c);
    case S_ARR0:
        if (c == ']') return close_container(s, c);
        return value_start(s, c);
    case S_OBJ0:
        if (c == '}') return close_container(s, c);
        /* fall through */
    case S_KEY:
        if (c != '"') return 0;
        s->st = S_STR, s->key = 1;
        return 1;
    case S_COLON:
        if (c != ':') return 0;
        s->st = S_VAL;
        return 1;
    case S_AFTER:
        if (c == '}' || c == ']') return close_container(s, c);
        if (c != ',') return 0;
        s->st = s->stack[s->depth - 1] == '{' ? S_KEY : S_VAL;
        return 1;
    case S_STR:
        if (c == '"') {
            if (s->key) s->st = S_COLON;
            else value_end(s);
            return 1;
        }
        if (c == '\\') s->st = S_ESC;
        if (c < 0x80) return c >= 0x20;
        /* the lead byte of a UTF-8 character: how many follow, the range of the next one
         * (no overlong forms, no UTF-16 surrogates, nothing above U+10FFFF) */
        s->lo = 0x80, s->hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf) s->need = 1;
        else if (c >= 0xe0 && c <= 0xef) {
            s->need = 2;
            if (c == 0xe0) s->lo = 0xa0;
            if (c == 0xed) s->hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            s->need = 3;
            if (c == 0xf0) s->lo = 0x90;
            if (c == 0xf4) s->hi = 0x8f;
        } else
            return 0;
        return 1;
    case S_ESC:
        if (c == 'u') {
            s->st = S_UHEX, s->aux = 4, s->u = 0;
            return 1;
        }
        s->st = S_STR;
        return !s->low && c != 0 && strchr("\"\\/bfnrt", c) != NULL;
    case S_UHEX:
        if (!is_hex(c)) return 0;
        s->u = (uint16_t)(s->u << 4 | (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10));
        if (--s->aux) return 1;
        if (s->low) { /* the low half of a pair */
            s->low = 0, s->st = S_STR;
            return s->u >= 0xdc00 && s->u <= 0xdfff;
        }
        if (s->u >= 0xdc00 && s->u <= 0xdfff) return 0; /* a lone low half */
        s->low = s->u >= 0xd800 && s->u <= 0xdbff;
        s->st = s->low ? S_LOWBS : S_STR;
        return 1;
    case S_LOWBS:
        if (c != '\\') return 0;
        s->st = S_LOWU;
        return 1;
    case S_LOWU:
        if (c != 'u') return 0;
        s->st = S_UHEX, s->aux = 4, s->u = 0;
        return 1;
    case S_LIT: {
        const char *w = lits[s->key];
        if (c != w[s->aux]) return 0;
        if (w[++s->aux] == 0) value_end(s);
        return 1;
    }
    case S_NEG:
        if (!is_digit(c)) return 0;
        return number_next(s, c, c == '0' ? S_ZERO : S_INT);
    case S_ZERO:
        return number_next(s, c, c == '.' ? S_DOT : (c == 'e' || c == 'E') ? S_E : -1);
    case S_INT:
        return number_next(s, c, is_digit(c) ? S_INT : c == '.' ? S_DOT
                                                  : (c == 'e' || c == 'E') ? S_E : -1);
    case S_DOT:
        return is_digit(c) ? number_next(s, c, S_FRAC) : 0;
    case S_FRAC:
        return number_next(s, c, is_digit(c) ? S_FRAC : (c == 'e' || c == 'E') ? S_E : -1);
    case S_E:
        s->u = 0;
        if (c == '+' || c == '-') return number_next(s, c, S_ESIGN);
        /* fall through */
    case S_ESIGN:
    case S_EXP: /* at most two exponent digits: the number stays finite */
        if (!is_digit(c)) return s->st == S_EXP ? number_next(s, c, -1) : 0;
        return ++s->u <= 2 && number_next(s, c, S_EXP);
    default: /* S_DONE: only whitespace, taken above */
        return 0;
    }
}

int attn__jsa_feed(attn__jsa *s, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const int c = (unsigned char)p[i];
        int r = step(s, c);
        if (r < 0) r = step(s, c); /* a number ended at c: c again, after it */
        if (r <= 0) return 0;
    }
    return 1;
}
