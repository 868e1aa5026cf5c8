/* Chat formatting: the ChatML family of chat templates, recognised without a Jinja engine.
 *
 * A model's chat template (GGUF tokenizer.chat_template, tokenizer_config.json chat_template) is
 * a Jinja program.  attn does not run Jinja: it recognises the one family it formats, ChatML
 * (<|im_start|>ROLE\nCONTENT<|im_end|>\n per message), in the shapes its templates are written
 * in, and refuses everything else with a message naming what it did not recognise.  Accepted:
 *
 *   {% for message in messages %}
 *     [{% if loop.first and messages[0]['role'] != 'system' %}{{ 'DEFAULT SYSTEM' }}{% endif %}]
 *     {{ 'A' + message['role'] + 'B' + message['content'] + 'C' }}
 *   {% endfor %}
 *   [{% if add_generation_prompt %}{{ 'GENERATION PROMPT' }}{% endif %}]
 *
 * with A ending in "<|im_start|>", C starting with "<|im_end|>", string literals in ' or "
 * (escapes \n \t \' \" \\), + or ~ concatenation, message.role / message['role'], {#
 * comments #}, and the whitespace rules Hugging Face renders templates with (trim_blocks,
 * lstrip_blocks, and the - markers).  Text the rules leave inside the loop and the two if
 * blocks is written as it is (a newline after {{ ... }} on its own line); text outside them
 * is refused.  The output is what Jinja would print, byte for byte
 * (tests/test_chat.c compares with transformers' apply_chat_template). */
#include <string.h>

#include "internal.h"

#define CHAT_MAX_NODES 64
#define CHAT_MAX_PIECES 16

typedef enum { N_TEXT, N_STMT, N_EXPR } node_kind;

typedef struct node {
    node_kind kind;
    const char *s; /* the text, or the tag's inside (without the delimiters and - markers) */
    size_t n;
    int trim_left, trim_right; /* tags: a '-' after the opening / before the closing delimiter */
} node;

typedef enum { P_LIT, P_ROLE, P_CONTENT } piece_kind;

typedef struct piece {
    piece_kind kind;
    char *lit; /* P_LIT: the decoded literal (allocated) */
    size_t n;
} piece;

typedef struct expr {
    piece p[CHAT_MAX_PIECES];
    int np;
} expr;

static void expr_free(attn_ctx *ctx, expr *e) {
    for (int i = 0; i < e->np; i++) attn__free(ctx, e->p[i].lit);
    e->np = 0;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Splits the template into text, {% statement %}, {{ expression }}; {# comments #} vanish. */
static attn_status lex(attn_ctx *ctx, const char *t, node *nodes, int *count) {
    int nn = 0;
    size_t i = 0, len = strlen(t);
    while (i < len) {
        ATTN_FAIL_IF(nn >= CHAT_MAX_NODES, ctx, ATTN_E_UNSUPPORTED,
                     "chat template: more than %d tags and texts (not a ChatML template)",
                     CHAT_MAX_NODES);
        if (t[i] == '{' && i + 1 < len && (t[i + 1] == '%' || t[i + 1] == '{' || t[i + 1] == '#')) {
            char open = t[i + 1], close = open == '{' ? '}' : open;
            size_t b = i + 2;
            int tl = b < len && t[b] == '-';
            if (tl || (b < len && t[b] == '+')) b++;
            size_t e = b;
            while (e + 1 < len && !(t[e] == close && t[e + 1] == '}')) {
                if (open != '#' && (t[e] == '\'' || t[e] == '"')) { /* skip a literal */
                    char q = t[e++];
                    while (e < len && t[e] != q) e += t[e] == '\\' && e + 1 < len ? 2 : 1;
                }
                if (e < len) e++;
            }
            ATTN_FAIL_IF(e + 1 >= len, ctx, ATTN_E_UNSUPPORTED,
                         "chat template: a tag opened at byte %zu is not closed", i);
            int tr = e > b && t[e - 1] == '-';
            size_t in_end = tr || (e > b && t[e - 1] == '+') ? e - 1 : e;
            /* the inside without surrounding whitespace; a comment becomes an empty statement
             * (the whitespace rules treat it as a block tag) */
            size_t ib = b, ie = in_end;
            while (ib < ie && is_ws(t[ib])) ib++;
            while (ie > ib && is_ws(t[ie - 1])) ie--;
            node *nd = &nodes[nn++];
            nd->kind = open == '{' ? N_EXPR : N_STMT;
            nd->s = open == '#' ? "" : t + ib, nd->n = open == '#' ? 0 : ie - ib;
            nd->trim_left = tl, nd->trim_right = tr;
            i = e + 2;
        } else {
            size_t e = i;
            while (e < len && !(t[e] == '{' && e + 1 < len &&
                                (t[e + 1] == '%' || t[e + 1] == '{' || t[e + 1] == '#')))
                e++;
            node *nd = &nodes[nn++];
            nd->kind = N_TEXT, nd->s = t + i, nd->n = e - i;
            nd->trim_left = nd->trim_right = 0;
            i = e;
        }
    }
    *count = nn;
    return ATTN_OK;
}

/* What remains of text node k under the whitespace rules (HF: trim_blocks, lstrip_blocks). */
static void text_left(const node *nodes, int nn, int k, size_t *b, size_t *e) {
    const node *t = &nodes[k];
    size_t lo = 0, hi = t->n;
    const node *prev = k > 0 ? &nodes[k - 1] : NULL, *next = k + 1 < nn ? &nodes[k + 1] : NULL;
    if (prev && prev->trim_right)
        while (lo < hi && is_ws(t->s[lo])) lo++;
    else if (prev && prev->kind == N_STMT && lo < hi && t->s[lo] == '\n')
        lo++; /* trim_blocks */
    else if (prev && prev->kind == N_STMT && lo + 1 < hi && t->s[lo] == '\r' &&
             t->s[lo + 1] == '\n')
        lo += 2;
    if (next && next->trim_left) {
        while (hi > lo && is_ws(t->s[hi - 1])) hi--;
    } else if (next && next->kind == N_STMT) { /* lstrip_blocks: blanks from a line's start */
        size_t h = hi;
        while (h > lo && (t->s[h - 1] == ' ' || t->s[h - 1] == '\t')) h--;
        if (h == 0 ? k == 0 || lo == 0 : t->s[h - 1] == '\n') hi = h;
    }
    *b = lo, *e = hi;
}

/* The statement without whitespace outside quotes, double quotes as single: "ifadd_gen..." */
static int norm_stmt(const node *nd, char *out, size_t cap) {
    size_t o = 0;
    char q = 0;
    for (size_t i = 0; i < nd->n; i++) {
        char c = nd->s[i];
        if (!q && is_ws(c)) continue;
        if (c == '"' || c == '\'') {
            if (!q) q = c;
            else if (q == c) q = 0;
            c = '\'';
        }
        if (o + 1 >= cap) return 0;
        out[o++] = c;
    }
    out[o] = 0;
    return 1;
}

typedef enum { S_FOR, S_ENDFOR, S_IF_GEN, S_IF_FIRST, S_ENDIF, S_EMPTY, S_OTHER } stmt_kind;

static stmt_kind stmt_of(const node *nd) {
    char s[160];
    if (!norm_stmt(nd, s, sizeof s)) return S_OTHER;
    static const char *const firsts[] = {
        "ifloop.firstandmessages[0]['role']!='system'",
        "ifloop.firstandmessages[0].role!='system'",
        "ifloop.index0==0andmessages[0]['role']!='system'",
        "ifloop.index0==0andmessages[0].role!='system'",
    };
    if (!s[0]) return S_EMPTY;
    if (!strcmp(s, "formessageinmessages")) return S_FOR;
    if (!strcmp(s, "endfor")) return S_ENDFOR;
    if (!strcmp(s, "ifadd_generation_prompt")) return S_IF_GEN;
    if (!strcmp(s, "endif")) return S_ENDIF;
    for (size_t i = 0; i < sizeof firsts / sizeof firsts[0]; i++)
        if (!strcmp(s, firsts[i])) return S_IF_FIRST;
    return S_OTHER;
}

static int match_kw(const char *s, size_t n, size_t *i, const char *kw) {
    size_t k = strlen(kw);
    if (*i + k > n || memcmp(s + *i, kw, k) != 0) return 0;
    *i += k;
    return 1;
}

/* Appends literal text to e, merged with a literal before it. */
static attn_status add_lit(attn_ctx *ctx, expr *e, const char *s, size_t n, int unescape) {
    piece *last = e->np ? &e->p[e->np - 1] : NULL;
    size_t have = last && last->kind == P_LIT ? last->n : 0;
    ATTN_FAIL_IF(!have && e->np >= CHAT_MAX_PIECES, ctx, ATTN_E_UNSUPPORTED,
                 "chat template: more than %d pieces in one message", CHAT_MAX_PIECES);
    ATTN_FAIL_IF(n > SIZE_MAX - have - 1, ctx, ATTN_E_OVERFLOW, "chat template: too long");
    char *lit = attn__malloc(ctx, have + n + 1);
    ATTN_FAIL_IF(!lit, ctx, ATTN_E_NOMEM, "chat template: out of memory");
    if (have) memcpy(lit, last->lit, have);
    size_t o = have;
    for (size_t k = 0; k < n; k++) {
        char c = s[k];
        if (unescape && c == '\\' && k + 1 < n) {
            char d = s[++k];
            if (d != 'n' && d != 't' && d != 'r' && d != '\\' && d != '\'' && d != '"') {
                attn__free(ctx, lit);
                return attn__fail(ctx, ATTN_E_UNSUPPORTED,
                                  "chat template: the escape \\%c in a string is not one attn "
                                  "knows", d);
            }
            c = d == 'n' ? '\n' : d == 't' ? '\t' : d == 'r' ? '\r' : d;
        }
        lit[o++] = c;
    }
    lit[o] = 0;
    if (have) {
        attn__free(ctx, last->lit);
        last->lit = lit, last->n = o;
    } else {
        e->p[e->np++] = (piece){P_LIT, lit, o};
    }
    return ATTN_OK;
}

/* Appends an expression's pieces to e: literals, message.role / message['role'],
 * message.content / message['content'], joined by + or ~. */
static attn_status parse_expr(attn_ctx *ctx, const node *nd, expr *e) {
    const char *s = nd->s;
    size_t n = nd->n, i = 0;
    int want_item = 1, items = 0;
    attn_status st;
    for (;;) {
        while (i < n && is_ws(s[i])) i++;
        if (i >= n) break;
        if (!want_item) {
            if (s[i] != '+' && s[i] != '~') goto bad;
            i++, want_item = 1;
            continue;
        }
        if (s[i] == '\'' || s[i] == '"') {
            char q = s[i++];
            size_t b = i;
            while (i < n && s[i] != q) i += s[i] == '\\' && i + 1 < n ? 2 : 1;
            if (i >= n) goto bad;
            if ((st = add_lit(ctx, e, s + b, i - b, 1)) != ATTN_OK) return st;
            i++;
        } else if (match_kw(s, n, &i, "message")) {
            piece_kind k;
            if (match_kw(s, n, &i, ".role") || match_kw(s, n, &i, "['role']") ||
                match_kw(s, n, &i, "[\"role\"]"))
                k = P_ROLE;
            else if (match_kw(s, n, &i, ".content") || match_kw(s, n, &i, "['content']") ||
                     match_kw(s, n, &i, "[\"content\"]"))
                k = P_CONTENT;
            else
                goto bad;
            if (e->np >= CHAT_MAX_PIECES) goto bad;
            e->p[e->np++] = (piece){k, NULL, 0};
        } else {
            goto bad;
        }
        want_item = 0, items++;
    }
    if (want_item || !items) goto bad;
    return ATTN_OK;
bad:
    return attn__fail(ctx, ATTN_E_UNSUPPORTED,
                      "chat template: the expression {{ %.*s }} is not one attn formats (string "
                      "literals and message['role'] / message['content'] joined by +)",
                      (int)(nd->n > 120 ? 120 : nd->n), nd->s);
}

typedef struct chatml {
    expr sys, msg, gen; /* sys, gen: literal only, np 0 when absent */
} chatml;

static int lit_only(const expr *e) { return e->np == 1 && e->p[0].kind == P_LIT; }

/* The pieces of the nodes seq[*i...] that are text or expressions, appended to e. */
static attn_status body(attn_ctx *ctx, node *const *seq, int ns, int *i, expr *e) {
    for (; *i < ns && seq[*i]->kind != N_STMT; (*i)++)
        ATTN_TRY(seq[*i]->kind == N_TEXT ? add_lit(ctx, e, seq[*i]->s, seq[*i]->n, 0)
                                         : parse_expr(ctx, seq[*i], e));
    return ATTN_OK;
}

static attn_status parse_template(attn_ctx *ctx, const char *tmpl, chatml *c) {
    node nodes[CHAT_MAX_NODES], *seq[CHAT_MAX_NODES];
    int nn = 0, ns = 0;
    memset(c, 0, sizeof *c);
    ATTN_FAIL_IF(!tmpl || !tmpl[0], ctx, ATTN_E_UNSUPPORTED, "the model has no chat template");
    ATTN_TRY(lex(ctx, tmpl, nodes, &nn));
    /* texts cut to what the whitespace rules leave (dropped when nothing is left) */
    size_t tb[CHAT_MAX_NODES], te[CHAT_MAX_NODES];
    for (int k = 0; k < nn; k++)
        if (nodes[k].kind == N_TEXT) text_left(nodes, nn, k, &tb[k], &te[k]);
    for (int k = 0; k < nn; k++) {
        if (nodes[k].kind == N_TEXT) {
            if (te[k] == tb[k]) continue;
            nodes[k].s += tb[k], nodes[k].n = te[k] - tb[k];
        } else if (nodes[k].kind == N_STMT && stmt_of(&nodes[k]) == S_EMPTY) {
            continue;
        }
        seq[ns++] = &nodes[k];
    }
    attn_status st = ATTN_OK;
    int i = 0, saw_loop = 0;
    node *nd = NULL;
#define KIND(j) ((j) < ns && seq[j]->kind == N_STMT ? stmt_of(seq[j]) : S_OTHER)
    while (i < ns) {
        nd = seq[i];
        if (nd->kind == N_TEXT) {
            st = attn__fail(ctx, ATTN_E_UNSUPPORTED,
                            "chat template: it writes the text \"%.*s\" outside its message "
                            "loop (not a ChatML template attn recognises)",
                            (int)(nd->n > 60 ? 60 : nd->n), nd->s);
            goto fail;
        }
        stmt_kind k = KIND(i);
        if (k == S_FOR && !saw_loop) {
            saw_loop = 1, i++;
            if (KIND(i) == S_IF_FIRST) {
                i++;
                if ((st = body(ctx, seq, ns, &i, &c->sys)) != ATTN_OK) goto fail;
                if (KIND(i) != S_ENDIF || !lit_only(&c->sys)) goto unrecognised_at_i;
                i++;
            }
            if ((st = body(ctx, seq, ns, &i, &c->msg)) != ATTN_OK) goto fail;
            if (KIND(i) != S_ENDFOR || !c->msg.np) goto unrecognised_at_i;
            i++;
        } else if (k == S_IF_GEN && saw_loop && !c->gen.np) {
            i++;
            if ((st = body(ctx, seq, ns, &i, &c->gen)) != ATTN_OK) goto fail;
            if (KIND(i) != S_ENDIF || !lit_only(&c->gen)) goto unrecognised_at_i;
            i++;
        } else {
            goto unrecognised;
        }
    }
#undef KIND
    if (!saw_loop) {
        st = attn__fail(ctx, ATTN_E_UNSUPPORTED, "chat template: no {%% for message in messages "
                                                 "%%} loop (not a ChatML template)");
        goto fail;
    }
    /* ChatML: '...<|im_start|>' + role + '...' + content + '<|im_end|>...' */
    {
        const expr *m = &c->msg;
        static const char st_tag[] = "<|im_start|>", end_tag[] = "<|im_end|>";
        const size_t ls = sizeof st_tag - 1, le = sizeof end_tag - 1;
        int ok = m->np == 5 && m->p[0].kind == P_LIT && m->p[1].kind == P_ROLE &&
                 m->p[2].kind == P_LIT && m->p[3].kind == P_CONTENT && m->p[4].kind == P_LIT &&
                 m->p[0].n >= ls && !memcmp(m->p[0].lit + m->p[0].n - ls, st_tag, ls) &&
                 m->p[4].n >= le && !memcmp(m->p[4].lit, end_tag, le);
        if (!ok) {
            st = attn__fail(ctx, ATTN_E_UNSUPPORTED,
                            "chat template: the message is not written as ChatML "
                            "('<|im_start|>' + role + ... + content + '<|im_end|>')");
            goto fail;
        }
    }
    return ATTN_OK;
unrecognised_at_i:
    if (i < ns) nd = seq[i];
    if (i >= ns) {
        st = attn__fail(ctx, ATTN_E_UNSUPPORTED,
                        "chat template: it ends inside a {%% for %%} or {%% if %%} block");
        goto fail;
    }
unrecognised:
    st = attn__fail(ctx, ATTN_E_UNSUPPORTED,
                    "chat template: %s %s%.*s%s is not part of a ChatML template attn recognises",
                    nd->kind == N_STMT ? "the statement" : "the expression",
                    nd->kind == N_STMT ? "{% " : "{{ ", (int)(nd->n > 120 ? 120 : nd->n), nd->s,
                    nd->kind == N_STMT ? " %}" : " }}");
fail:
    expr_free(ctx, &c->sys), expr_free(ctx, &c->msg), expr_free(ctx, &c->gen);
    return st;
}

typedef struct out_buf {
    char *buf;
    size_t cap, len;
    int overflow;
} out_buf;

static void put(out_buf *o, const char *s, size_t n) {
    if (n > SIZE_MAX - o->len) {
        o->overflow = 1;
        return;
    }
    if (o->len < o->cap) {
        size_t k = o->cap - o->len < n ? o->cap - o->len : n;
        memcpy(o->buf + o->len, s, k);
    }
    o->len += n;
}

static void put_expr(out_buf *o, const expr *e, const attn_chat_message *m) {
    for (int i = 0; i < e->np; i++) {
        const piece *p = &e->p[i];
        if (p->kind == P_LIT) put(o, p->lit, p->n);
        else if (p->kind == P_ROLE) put(o, m->role, strlen(m->role));
        else put(o, m->content, strlen(m->content));
    }
}

attn_status attn_chat_template_check(attn_ctx *ctx, const char *tmpl) {
    ATTN_FAIL_IF(!ctx, ctx, ATTN_E_INVALID, "attn_chat_template_check: ctx is NULL");
    chatml c;
    ATTN_TRY(parse_template(ctx, tmpl, &c));
    expr_free(ctx, &c.sys), expr_free(ctx, &c.msg), expr_free(ctx, &c.gen);
    return ATTN_OK;
}

attn_status attn_chat_format(attn_ctx *ctx, const char *tmpl, const attn_chat_message *msgs,
                             int64_t n, int add_generation_prompt, char *buf, size_t cap,
                             size_t *len) {
    ATTN_FAIL_IF(!ctx, ctx, ATTN_E_INVALID, "attn_chat_format: ctx is NULL");
    ATTN_FAIL_IF(n < 0 || (n > 0 && !msgs) || !len || (cap > 0 && !buf), ctx, ATTN_E_INVALID,
                 "attn_chat_format: %s",
                 n < 0 ? "n is negative" : !len ? "len is NULL" : cap > 0 && !buf ?
                 "buf is NULL with cap > 0" : "msgs is NULL");
    for (int64_t i = 0; i < n; i++)
        ATTN_FAIL_IF(!msgs[i].role || !msgs[i].content, ctx, ATTN_E_INVALID,
                     "attn_chat_format: message %lld has a NULL %s", (long long)i,
                     msgs[i].role ? "content" : "role");
    chatml c;
    ATTN_TRY(parse_template(ctx, tmpl, &c));
    out_buf o = {buf, cap, 0, 0};
    for (int64_t i = 0; i < n; i++) {
        if (i == 0 && c.sys.np && strcmp(msgs[0].role, "system") != 0)
            put(&o, c.sys.p[0].lit, c.sys.p[0].n);
        put_expr(&o, &c.msg, &msgs[i]);
    }
    if (add_generation_prompt && c.gen.np) put(&o, c.gen.p[0].lit, c.gen.p[0].n);
    expr_free(ctx, &c.sys), expr_free(ctx, &c.msg), expr_free(ctx, &c.gen);
    ATTN_FAIL_IF(o.overflow || o.len == SIZE_MAX, ctx, ATTN_E_OVERFLOW,
                 "attn_chat_format: the conversation is too long");
    *len = o.len;
    if (cap > 0) buf[o.len < cap ? o.len : cap - 1] = 0;
    return ATTN_OK;
}
