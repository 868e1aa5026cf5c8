/* The incremental JSON acceptor and its schemas (serve_jsa.h): a pushdown automaton over
 * bytes, and a schema compiled into nodes that the automaton consults at each value, key and
 * container boundary. */
#include "serve_jsa.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- compiled schemas ------------------------------------------------------------------- */
/* The first characters of values (a node allows a set of them). */
enum { C_OBJ = 1, C_ARR = 2, C_STR = 4, C_NUM = 8, C_TRUE = 16, C_FALSE = 32, C_NULL = 64,
       C_ALL = 127 };

typedef struct jnode {
    uint8_t cls;     /* the values allowed, by first character */
    uint8_t ion;     /* numbers: integers only */
    int32_t br0, nbr; /* anyOf: branches br[br0 ..), each with its own first characters */
    int32_t p0, np;  /* object: properties pr[p0 ..) */
    uint64_t req;    /* object: the required ones (bits of p0 ..) */
    int32_t addl;    /* object: the node of other properties' values; -1: none allowed */
    int32_t items;   /* array: the node of the items */
    int64_t imin, imax;
    int32_t e0, ne;  /* enum members en[e0 ..) (the values' texts) */
} jnode;

typedef struct jtext {
    uint32_t off;
    uint32_t len;
} jtext;

typedef struct jprop {
    jtext name;
    int32_t node;
} jprop;

typedef struct jref {
    const sj *def;
    int32_t node;
} jref;

struct attn__jss {
    jnode *n;
    int32_t nn, capn;
    jprop *pr;
    int32_t npr, cappr;
    jtext *en;
    int32_t nen, capen;
    int32_t *br;
    int32_t nbr, capbr;
    char *pool;
    size_t npool, cappool;
    jref *refs;
    int32_t nrefs, caprefs;
    const sj *root;
};

#define MAX_NODES 1024
#define MAX_PROPS 64
#define MAX_ENUM 256
#define MAX_TEXT 62

void attn__jss_free(attn__jss *s) {
    if (!s) return;
    free(s->n), free(s->pr), free(s->en), free(s->br), free(s->pool), free(s->refs);
    free(s);
}

/* Grows *p (elements of size sz) to hold one more; 0 when out of memory. */
static int grow(void **p, int32_t n, int32_t *cap, size_t sz) {
    if (n < *cap) return 1;
    const int32_t c = *cap ? 2 * *cap : 16;
    void *q = realloc(*p, (size_t)c * sz);
    if (!q) return 0;
    *p = q, *cap = c;
    return 1;
}

static int pool_add(attn__jss *s, const char *t, size_t n, jtext *out) {
    if (s->npool + n > s->cappool) {
        const size_t c = (s->cappool + n) * 2;
        char *q = realloc(s->pool, c);
        if (!q) return 0;
        s->pool = q, s->cappool = c;
    }
    memcpy(s->pool + s->npool, t, n);
    out->off = (uint32_t)s->npool, out->len = (uint32_t)n;
    s->npool += n;
    return 1;
}

typedef struct cctx {
    attn__jss *s;
    int strict; /* an object without additionalProperties takes no other keys */
    char *err;
    size_t ecap;
} cctx;

static int fail(cctx *c, const char *msg, const char *what) {
    snprintf(c->err, c->ecap, "response_format json_schema: %s%s%s", msg, what ? " " : "",
             what ? what : "");
    return -1;
}

static int new_node(cctx *c) {
    attn__jss *s = c->s;
    if (s->nn >= MAX_NODES) return fail(c, "more than 1024 schema nodes", NULL);
    if (!grow((void **)&s->n, s->nn, &s->capn, sizeof *s->n)) return fail(c, "out of memory", NULL);
    jnode *n = &s->n[s->nn];
    memset(n, 0, sizeof *n);
    n->cls = C_ALL, n->addl = 0, n->items = 0, n->imin = 0, n->imax = INT64_MAX;
    return s->nn++;
}

static int type_cls(const sj *t, uint8_t *cls, uint8_t *ion) {
    static const char *const names[] = {"object", "array", "string", "number", "integer",
                                        "boolean", "null"};
    static const uint8_t bits[] = {C_OBJ, C_ARR, C_STR, C_NUM, C_NUM, C_TRUE | C_FALSE, C_NULL};
    int num = 0, integer = 0;
    *cls = 0;
    for (const sj *e = t->kind == SJ_ARR ? t->first : t; e; e = t->kind == SJ_ARR ? e->next : NULL) {
        if (e->kind != SJ_STR) return 0;
        int k = 0;
        while (k < 7 && strcmp(e->s, names[k]) != 0) k++;
        if (k == 7) return 0;
        *cls |= bits[k];
        num |= k == 3, integer |= k == 4;
    }
    *ion = integer && !num;
    return *cls != 0;
}

static uint8_t first_cls(const char *t) {
    switch (t[0]) {
    case '{': return C_OBJ;
    case '[': return C_ARR;
    case '"': return C_STR;
    case 't': return C_TRUE;
    case 'f': return C_FALSE;
    case 'n': return C_NULL;
    default: return C_NUM;
    }
}

static int compile(cctx *c, const sj *v, int depth);

/* The node of $ref r (compiled once: recursion ends at the node being compiled). */
static int ref_node(cctx *c, const sj *r, int depth) {
    attn__jss *s = c->s;
    if (r->kind != SJ_STR) return fail(c, "a $ref that is not a string", NULL);
    const sj *def = NULL;
    if (!strcmp(r->s, "#")) {
        def = s->root;
    } else if (!strncmp(r->s, "#/$defs/", 8) || !strncmp(r->s, "#/definitions/", 14)) {
        const int dl = r->s[2] == '$' ? 8 : 14;
        const sj *defs = sj_get(s->root, dl == 8 ? "$defs" : "definitions");
        def = defs && defs->kind == SJ_OBJ ? sj_get(defs, r->s + dl) : NULL;
    }
    if (!def) return fail(c, "a $ref it cannot resolve:", r->s);
    for (int32_t i = 0; i < s->nrefs; i++)
        if (s->refs[i].def == def) return s->refs[i].node;
    return compile(c, def, depth + 1);
}

static int compile(cctx *c, const sj *v, int depth) {
    attn__jss *s = c->s;
    if (depth > 64) return fail(c, "nested more than 64 deep", NULL);
    if (v->kind == SJ_BOOL && v->b) return 0; /* true: anything */
    if (v->kind != SJ_OBJ) return fail(c, "a schema that is not an object", NULL);
    const sj *ref = sj_get(v, "$ref");
    if (ref) return ref_node(c, ref, depth);
    static const char *const refused[] = {"allOf", "not", "if", "then", "else", "prefixItems",
                                          "patternProperties", "dependentSchemas"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (sj_get(v, refused[i])) return fail(c, refused[i], "is not supported");
    const int id = new_node(c);
    if (id < 0) return -1;
    if (!grow((void **)&s->refs, s->nrefs, &s->caprefs, sizeof *s->refs))
        return fail(c, "out of memory", NULL);
    s->refs[s->nrefs++] = (jref){v, id};
    const sj *any = sj_get(v, "anyOf");
    if (!any) any = sj_get(v, "oneOf");
    if (any) {
        if (any->kind != SJ_ARR || any->n == 0) return fail(c, "anyOf is not a list", NULL);
        int32_t ids[64], nb = 0;
        uint8_t cls = 0;
        for (const sj *b = any->first; b; b = b->next) {
            if (nb == 64) return fail(c, "anyOf of more than 64 branches", NULL);
            const int bid = compile(c, b, depth + 1);
            if (bid < 0) return -1;
            const uint8_t bc = s->n[bid].cls;
            if (bc & cls)
                return fail(c, "anyOf branches that can start with the same character (the "
                               "answer could not tell them apart)", NULL);
            cls |= bc, ids[nb++] = bid;
        }
        for (int32_t i = 0; i < nb; i++) {
            if (!grow((void **)&s->br, s->nbr, &s->capbr, sizeof *s->br))
                return fail(c, "out of memory", NULL);
            s->br[s->nbr++] = ids[i];
        }
        jnode *n = &s->n[id];
        n->br0 = s->nbr - nb, n->nbr = nb, n->cls = cls;
        return id;
    }
    uint8_t cls = C_ALL, ion = 0;
    const sj *t = sj_get(v, "type");
    if (t && !type_cls(t, &cls, &ion)) return fail(c, "a type it does not know", NULL);
    const sj *props = sj_get(v, "properties"), *req = sj_get(v, "required"),
             *addl = sj_get(v, "additionalProperties"), *items = sj_get(v, "items");
    if (!t && (props || req || addl)) cls = C_OBJ;
    else if (!t && items) cls = C_ARR;
    /* enum and const: their values' texts */
    const sj *en = sj_get(v, "enum"), *cn = sj_get(v, "const");
    if (en || cn) {
        if (en && (en->kind != SJ_ARR || en->n == 0)) return fail(c, "enum is not a list", NULL);
        uint8_t ec = 0;
        const int32_t e0 = s->nen;
        for (const sj *e = en ? en->first : cn; e; e = en ? e->next : NULL) {
            if (e->kind == SJ_OBJ || e->kind == SJ_ARR)
                return fail(c, "an enum or const member that is an object or an array", NULL);
            if (e->rawlen > MAX_TEXT || s->nen - e0 >= MAX_ENUM)
                return fail(c, "more than 256 enum members, or one over 62 bytes", NULL);
            if (!grow((void **)&s->en, s->nen, &s->capen, sizeof *s->en) ||
                !pool_add(s, e->raw, e->rawlen, &s->en[s->nen]))
                return fail(c, "out of memory", NULL);
            s->nen++;
            ec |= first_cls(e->raw);
        }
        jnode *n = &s->n[id];
        n->e0 = e0, n->ne = s->nen - e0, n->cls = ec & cls, n->ion = 0;
        if (!n->cls) return fail(c, "an enum none of whose members has the type", NULL);
        return id;
    }
    s->n[id].cls = cls, s->n[id].ion = ion;
    if (cls & C_OBJ) {
        if (props && props->kind != SJ_OBJ) return fail(c, "properties is not an object", NULL);
        if (props && props->n > MAX_PROPS) return fail(c, "more than 64 properties", NULL);
        const int32_t np = props ? (int32_t)props->n : 0;
        int32_t p0 = s->npr;
        for (int32_t i = 0; i < np; i++) {
            if (!grow((void **)&s->pr, s->npr, &s->cappr, sizeof *s->pr))
                return fail(c, "out of memory", NULL);
            s->npr++;
        }
        int32_t i = 0;
        for (const sj *p = props ? props->first : NULL; p; p = p->next, i++) {
            const size_t kl = p->klen;
            int plain = kl > 0 && kl <= MAX_TEXT && strlen(p->key) == kl;
            for (size_t k = 0; plain && k < kl; k++)
                plain = (unsigned char)p->key[k] >= 0x20 && p->key[k] != '"' && p->key[k] != '\\';
            if (!plain)
                return fail(c, "a property name that is empty, over 62 bytes or needs an escape:",
                            p->key);
            jtext nm;
            if (!pool_add(s, p->key, kl, &nm)) return fail(c, "out of memory", NULL);
            const int cid = compile(c, p, depth + 1);
            if (cid < 0) return -1;
            s->pr[p0 + i] = (jprop){nm, cid};
        }
        uint64_t rq = 0;
        if (req) {
            if (req->kind != SJ_ARR) return fail(c, "required is not a list", NULL);
            for (const sj *r = req->first; r; r = r->next) {
                int32_t k = 0;
                while (k < np && (r->kind != SJ_STR || s->pr[p0 + k].name.len != r->len ||
                                  memcmp(s->pool + s->pr[p0 + k].name.off, r->s, r->len)))
                    k++;
                if (k == np)
                    return fail(c, "a required name that is not among the properties:",
                                r->kind == SJ_STR ? r->s : "?");
                rq |= (uint64_t)1 << k;
            }
        }
        int32_t an = c->strict ? -1 : 0;
        if (addl && addl->kind == SJ_BOOL) an = addl->b ? 0 : -1;
        else if (addl && (an = compile(c, addl, depth + 1)) < 0) return -1;
        jnode *n = &s->n[id];
        n->p0 = p0, n->np = np, n->req = rq, n->addl = an;
    }
    if (cls & C_ARR) {
        int32_t it = 0;
        if (items && (it = compile(c, items, depth + 1)) < 0) return -1;
        long long lo = 0, hi = LLONG_MAX;
        const sj *mn = sj_get(v, "minItems"), *mx = sj_get(v, "maxItems");
        if ((mn && !sj_int(mn, 0, 1 << 20, &lo)) || (mx && !sj_int(mx, 0, LLONG_MAX, &hi)) ||
            lo > hi)
            return fail(c, "minItems or maxItems out of range", NULL);
        jnode *n = &s->n[id];
        n->items = it, n->imin = lo, n->imax = hi;
    }
    return id;
}

int attn__jss_compile(const sj *schema, int strict, attn__jss **out, char *err, size_t ecap) {
    *out = NULL;
    attn__jss *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, ecap, "response_format json_schema: out of memory");
        return 0;
    }
    s->root = schema;
    cctx c = {s, strict, err, ecap};
    int ok = new_node(&c) == 0; /* node 0: anything */
    const int root = ok ? compile(&c, schema, 0) : -1;
    ok = root >= 0;
    if (ok && (s->n[root].cls != C_OBJ || s->n[root].nbr)) {
        fail(&c, "the root must be an object schema", NULL);
        ok = 0;
    }
    if (ok && root != 1) { /* the root is node 1 */
        fail(&c, "internal: the root node", NULL);
        ok = 0;
    }
    free(s->refs);
    s->refs = NULL, s->nrefs = s->caprefs = 0, s->root = NULL;
    if (!ok) {
        attn__jss_free(s);
        return 0;
    }
    *out = s;
    return 1;
}

/* ---- the acceptor ------------------------------------------------------------------------ */
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

void attn__jsa_init(attn__jsa *s, const attn__jss *sc) {
    memset(s, 0, sizeof *s);
    s->sc = sc, s->st = S_TOP, s->vnode = sc ? 1 : 0, s->prop = -1;
}

int attn__jsa_done(const attn__jsa *s) { return s->st == S_DONE; }

void attn__jsa_copy(attn__jsa *d, const attn__jsa *s) {
    memcpy(d, s, offsetof(attn__jsa, stack));
    const size_t k = (size_t)s->depth;
    memcpy(d->stack, s->stack, k);
    memcpy(d->node, s->node, k * sizeof *s->node);
    memcpy(d->seen, s->seen, k * sizeof *s->seen);
    memcpy(d->count, s->count, k * sizeof *s->count);
    memcpy(&d->vnode, &s->vnode, offsetof(attn__jsa, buf) - offsetof(attn__jsa, vnode));
    memcpy(d->buf, s->buf, s->blen);
}

static int is_ws(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_hex(int c) {
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static const jnode *nd(const attn__jsa *s, int32_t i) { return &s->sc->n[i]; }
static const jnode *top_node(const attn__jsa *s) { return nd(s, s->node[s->depth - 1]); }

/* An enum member (or, for a key, an unseen property of the open object) starting with the
 * bytes in buf; whole: equal to them.  Returns the property index for keys. */
static int match(const attn__jsa *s, int whole) {
    const attn__jss *sc = s->sc;
    if (s->key) {
        const jnode *o = top_node(s);
        for (int32_t i = 0; i < o->np; i++) {
            const jtext t = sc->pr[o->p0 + i].name;
            if (!(s->seen[s->depth - 1] >> i & 1) && (whole ? t.len == s->blen : t.len >= s->blen) &&
                !memcmp(sc->pool + t.off, s->buf, s->blen))
                return i;
        }
        return -1;
    }
    const jnode *n = nd(s, s->vnode);
    for (int32_t i = 0; i < n->ne; i++) {
        const jtext t = sc->en[n->e0 + i];
        if ((whole ? t.len == s->blen : t.len >= s->blen) && !memcmp(sc->pool + t.off, s->buf, s->blen))
            return i;
    }
    return -1;
}

/* A byte of a key or an enum value (not the key's quotes) */
static int en_byte(attn__jsa *s, int c) {
    if (!s->en) return 1;
    if (s->blen >= MAX_TEXT) { /* longer than every name: a free key, or no member */
        if (s->key && top_node(s)->addl >= 0) {
            s->en = 0;
            return 1;
        }
        return 0;
    }
    s->buf[s->blen++] = (char)c;
    if (match(s, 0) >= 0) return 1;
    if (s->key && top_node(s)->addl >= 0) { /* not a property's name: another key */
        s->en = 0;
        return 1;
    }
    return 0;
}

/* A value ended: its enum checked, then back to its container, or done. */
static int value_end(attn__jsa *s) {
    if (s->en && !s->key) {
        if (match(s, 1) < 0) return 0;
        s->en = 0;
    }
    s->st = s->depth > 0 ? S_AFTER : S_DONE;
    return 1;
}

static int open_container(attn__jsa *s, int c) {
    if (s->depth >= ATTN__JSA_DEPTH) return 0;
    s->node[s->depth] = s->vnode, s->seen[s->depth] = 0, s->count[s->depth] = 0;
    s->stack[s->depth++] = (uint8_t)c;
    s->st = c == '{' ? S_OBJ0 : S_ARR0;
    return 1;
}

/* The open object may close: every required property written. */
static int obj_may_close(const attn__jsa *s) {
    if (!s->sc) return 1;
    const jnode *o = top_node(s);
    return (s->seen[s->depth - 1] & o->req) == o->req;
}

/* Another key may come: an unseen property, or other keys allowed. */
static int obj_may_add(const attn__jsa *s) {
    if (!s->sc) return 1;
    const jnode *o = top_node(s);
    const uint64_t all = o->np >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << o->np) - 1;
    return o->addl >= 0 || (s->seen[s->depth - 1] & all) != all;
}

static int close_container(attn__jsa *s, int c) {
    if (s->depth == 0 || s->stack[s->depth - 1] != (c == '}' ? '{' : '[')) return 0;
    if (s->sc) {
        if (c == '}' && !obj_may_close(s)) return 0;
        if (c == ']' && (int64_t)s->count[s->depth - 1] < top_node(s)->imin) return 0;
    }
    s->depth--;
    s->en = 0;
    return value_end(s);
}

static uint8_t cls_of(int c) {
    if (c == '{') return C_OBJ;
    if (c == '[') return C_ARR;
    if (c == '"') return C_STR;
    if (c == '-' || is_digit(c)) return C_NUM;
    if (c == 't') return C_TRUE;
    if (c == 'f') return C_FALSE;
    if (c == 'n') return C_NULL;
    return 0;
}

/* The first byte of a value: with a schema, the value's node (an array's item, a property's
 * value) must allow it. */
static int value_start(attn__jsa *s, int c) {
    s->aux = 0, s->en = 0, s->ion = 0, s->key = 0;
    if (s->sc) {
        if (s->depth > 0 && s->stack[s->depth - 1] == '[') { /* an array's item */
            const jnode *a = top_node(s);
            if ((int64_t)++s->count[s->depth - 1] > a->imax) return 0;
            s->vnode = a->items;
        }
        const uint8_t k = cls_of(c);
        for (int hop = 0; hop < 8 && nd(s, s->vnode)->nbr; hop++) { /* anyOf: by first byte */
            const jnode *n = nd(s, s->vnode);
            int32_t b = 0;
            while (b < n->nbr && !(nd(s, s->sc->br[n->br0 + b])->cls & k)) b++;
            if (b == n->nbr) return 0;
            s->vnode = s->sc->br[n->br0 + b];
        }
        const jnode *n = nd(s, s->vnode);
        if (!(n->cls & k)) return 0;
        s->ion = n->ion;
        if (n->ne) {
            s->en = 1, s->blen = 0;
            if (!en_byte(s, c)) return 0;
        }
    }
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
            s->st = S_LIT, s->lit = (uint8_t)i, s->aux = 1;
            return 1;
        }
    return 0;
}

/* A number's next byte: into next_state, or (-1) the number ends before c. */
static int number_next(attn__jsa *s, int c, int next_state) {
    if (next_state >= 0) {
        if (s->ion && (next_state == S_DOT || next_state == S_E)) return 0;
        if (++s->aux > MAX_NUM || !en_byte(s, c)) return 0;
        s->st = (uint8_t)next_state;
        return 1;
    }
    return value_end(s) ? -1 : 0; /* reprocess c */
}

/* A key's opening quote. */
static int key_start(attn__jsa *s) {
    if (!obj_may_add(s)) return 0;
    s->st = S_STR, s->key = 1;
    s->en = s->sc != NULL, s->blen = 0, s->prop = -1;
    return 1;
}

/* A key's closing quote: its property's node is the value's. */
static int key_end(attn__jsa *s) {
    s->st = S_COLON;
    if (!s->sc) return 1;
    const jnode *o = top_node(s);
    const int p = s->en ? match(s, 1) : -1;
    s->en = 0;
    if (p >= 0) {
        s->seen[s->depth - 1] |= (uint64_t)1 << p;
        s->vnode = s->sc->pr[o->p0 + p].node;
        return 1;
    }
    if (o->addl < 0) return 0;
    /* another key: not one of the properties (written or not) */
    for (int32_t i = 0; i < o->np; i++) {
        const jtext t = s->sc->pr[o->p0 + i].name;
        if (s->blen < MAX_TEXT && t.len == s->blen && !memcmp(s->sc->pool + t.off, s->buf, s->blen))
            return 0;
    }
    s->vnode = o->addl;
    return 1;
}

static int step(attn__jsa *s, int c) {
    if (is_ws(c)) {
        switch (s->st) {
        case S_VAL: case S_ARR0: case S_OBJ0: case S_KEY: case S_COLON: case S_AFTER:
        case S_DONE:
            if (c == '\n' && ++s->nl > 1) return 0;
            return ++s->ws <= MAX_WS;
        default:
            break;
        }
    } else if (s->st != S_STR && s->st != S_ESC && s->st != S_UHEX) {
        s->ws = 0, s->nl = 0;
    }
    if (s->need) { /* inside a UTF-8 character of a string */
        if (c < s->lo || c > s->hi) return 0;
        s->need--, s->lo = 0x80, s->hi = 0xbf;
        return en_byte(s, c);
    }
    switch (s->st) {
    case S_TOP:
        return c == '{' && value_start(s, c);
    case S_VAL:
        return value_start(s, c);
    case S_ARR0:
        if (c == ']') return close_container(s, c);
        return value_start(s, c);
    case S_OBJ0:
        if (c == '}') return close_container(s, c);
        /* fall through */
    case S_KEY:
        return c == '"' && key_start(s);
    case S_COLON:
        if (c != ':') return 0;
        s->st = S_VAL;
        return 1;
    case S_AFTER:
        if (c == '}' || c == ']') return close_container(s, c);
        if (c != ',') return 0;
        if (s->stack[s->depth - 1] == '{') {
            if (!obj_may_add(s)) return 0;
            s->st = S_KEY;
        } else {
            if (s->sc && (int64_t)s->count[s->depth - 1] >= top_node(s)->imax) return 0;
            s->st = S_VAL;
        }
        return 1;
    case S_STR:
        if (c == '"') {
            if (s->key) return key_end(s);
            return en_byte(s, c) && value_end(s);
        }
        if (c == '\\') {
            if (s->key && s->en) return 0; /* property names are matched as written */
            s->st = S_ESC;
        }
        if (c < 0x80) return c >= 0x20 && en_byte(s, c);
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
        return en_byte(s, c);
    case S_ESC:
        if (c == 'u') {
            s->st = S_UHEX, s->aux = 4, s->u = 0;
            return en_byte(s, c);
        }
        s->st = S_STR;
        return !s->low && c != 0 && strchr("\"\\/bfnrt", c) != NULL && en_byte(s, c);
    case S_UHEX:
        if (!is_hex(c) || !en_byte(s, c)) return 0;
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
        return en_byte(s, c);
    case S_LOWU:
        if (c != 'u') return 0;
        s->st = S_UHEX, s->aux = 4, s->u = 0;
        return en_byte(s, c);
    case S_LIT: {
        const char *w = lits[s->lit];
        if (c != w[s->aux] || !en_byte(s, c)) return 0;
        if (w[++s->aux] == 0) return value_end(s);
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
    case S_EXP: /* an exponent of at most 99: the number stays finite */
        if (!is_digit(c)) return s->st == S_EXP ? number_next(s, c, -1) : 0;
        s->u = (uint16_t)(s->u * 10 + (c - '0'));
        return s->u <= 99 && number_next(s, c, S_EXP);
    default: /* S_DONE: only whitespace, taken above */
        return 0;
    }
}

int attn__jsa_feed_upto(attn__jsa *s, const char *p, size_t n, size_t *used) {
    size_t i = 0;
    for (; i < n && s->st != S_DONE; i++) {
        const int c = (unsigned char)p[i];
        int r = step(s, c);
        if (r < 0) r = step(s, c);
        if (r <= 0) return 0;
    }
    *used = i;
    return 1;
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
