/* Chat formatting: the chat templates of the families attn runs, recognised without a Jinja
 * engine (contract: include/attn.h, "Chat formatting").
 *
 * A model's chat template (GGUF tokenizer.chat_template, tokenizer_config.json chat_template) is
 * a Jinja program.  attn does not run Jinja.  It reads the template as Jinja's lexer does under
 * transformers (newlines normalised, one trailing newline dropped, trim_blocks, lstrip_blocks,
 * the - and + markers) and recognises it two ways, refusing everything else with a message:
 *
 *  - the ChatML shape, parsed (any default system message, any generation prompt):
 *      {% for message in messages %}
 *        [{% if loop.first and messages[0]['role'] != 'system' %}{{ 'DEFAULT SYSTEM' }}{% endif %}]
 *        {{ 'A' + message['role'] + 'B' + message['content'] + 'C' }}
 *      {% endfor %}
 *      [{% if add_generation_prompt %}{{ 'GENERATION PROMPT' }}{% endif %}]
 *    with A ending in "<|im_start|>", C starting with "<|im_end|>", string literals in ' or "
 *    (escapes \n \t \r \' \" \\), + or ~ concatenation, message.role / message['role'],
 *    {# comments #}.  Text the whitespace rules leave inside the loop and the two if blocks is
 *    written as it is; text outside them is refused.
 *
 *  - the families' published templates (Qwen2.5, Qwen3, Gemma 2 and 3, Llama 3.0 to 3.3,
 *    Mistral v0.3, Nemo, Large 2411, Small 3.2, Ministral 3), compared as Jinja reads them:
 *    the program's items in order -- each text as the whitespace rules leave it, each
 *    {% statement %} and {{ expression }} with the whitespace Jinja ignores taken out (a space
 *    kept only between two names), comments dropped -- hashed (64-bit FNV-1a) and looked up in
 *    the table of published templates (KNOWN below).  The items a family's models change (the
 *    default system message of Qwen2.5 and of Mistral's [SYSTEM_PROMPT] templates, Llama 3.1's
 *    date_string) are holes: left out of the hash and read from the template.  So a template
 *    is recognised when it is one of them to the byte of what Jinja acts on, and a modified
 *    copy (another model's template with the same markers) is refused: attn never guesses.
 *    Each family's text is then written by its own code below, a transcription of the
 *    template's logic, tested byte for byte against transformers (tests/test_chat.c). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "chat.h"
#include "chat_json.h"

#define CHAT_MAX_PIECES 16

/* ---- Jinja's lexing ------------------------------------------------------------------------ */
typedef enum { N_TEXT, N_STMT, N_EXPR } node_kind;

typedef struct node {
    node_kind kind;
    const char *s; /* the text, or the tag's inside (without the delimiters and markers) */
    size_t n;
    int trim_left, trim_right; /* tags: a '-' after the opening / before the closing delimiter */
    int keep_left, keep_right; /* tags: a '+' there (no lstrip_blocks / trim_blocks) */
    int comment;               /* a {# comment #} (kind N_STMT for the whitespace rules) */
    size_t tb, te;             /* texts: what the whitespace rules leave, s[tb, te) */
} node;

typedef struct prog {
    char *src; /* the template as Jinja's lexer sees it (allocated) */
    node *nodes;
    size_t nn, cap;
} prog;

static void prog_free(attn_ctx *ctx, prog *p) {
    attn__free(ctx, p->src);
    attn__free(ctx, p->nodes);
    memset(p, 0, sizeof *p);
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Python's str.isspace() of the code point at s[0..n): its length in bytes, else 0 (what
 * Jinja's \s and rstrip() and the templates' trim take away). */
static size_t space_at(const unsigned char *s, size_t n) {
    if (n >= 1 && ((s[0] >= 9 && s[0] <= 13) || (s[0] >= 0x1c && s[0] <= 0x20))) return 1;
    if (n >= 2 && s[0] == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0)) return 2;
    if (n >= 3 && s[0] == 0xe1 && s[1] == 0x9a && s[2] == 0x80) return 3; /* U+1680 */
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x80 &&
        (s[2] <= 0x8a || s[2] == 0xa8 || s[2] == 0xa9 || s[2] == 0xaf) && s[2] >= 0x80)
        return 3; /* U+2000..200A, 2028, 2029, 202F */
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x81 && s[2] == 0x9f) return 3; /* U+205F */
    if (n >= 3 && s[0] == 0xe3 && s[1] == 0x80 && s[2] == 0x80) return 3; /* U+3000 */
    return 0;
}

/* The start of the code point that ends at s[e) (UTF-8). */
static size_t cp_start(const unsigned char *s, size_t e) {
    size_t b = e - 1;
    while (b > 0 && e - b < 4 && (s[b] & 0xc0) == 0x80) b--;
    return b;
}

/* s[b, e) without the white space at its start / end (Python's lstrip / rstrip). */
static size_t skip_space(const char *s, size_t b, size_t e) {
    const unsigned char *u = (const unsigned char *)s;
    size_t k;
    while (b < e && (k = space_at(u + b, e - b))) b += k;
    return b;
}
static size_t back_space(const char *s, size_t b, size_t e) {
    const unsigned char *u = (const unsigned char *)s;
    while (e > b) {
        size_t st = cp_start(u, e);
        if (st < b || space_at(u + st, e - st) != e - st) break;
        e = st;
    }
    return e;
}

static attn_status add_node(attn_ctx *ctx, prog *p, const node *nd) {
    ATTN_FAIL_IF(!attn__grow(ctx, (void **)&p->nodes, &p->cap, p->nn, sizeof *p->nodes), ctx,
                 ATTN_E_NOMEM, "chat template: out of memory");
    p->nodes[p->nn++] = *nd;
    return ATTN_OK;
}

/* What remains of text node k under the whitespace rules (Jinja's lexer with trim_blocks and
 * lstrip_blocks, as transformers sets them). */
static void text_left(const prog *p, size_t k) {
    node *t = &p->nodes[k];
    const node *prev = k > 0 ? &p->nodes[k - 1] : NULL;
    const node *next = k + 1 < p->nn ? &p->nodes[k + 1] : NULL;
    size_t lo = 0, hi = t->n;
    if (prev && prev->trim_right) lo = skip_space(t->s, 0, hi); /* -%}\s* */
    else if (prev && prev->kind == N_STMT && !prev->keep_right && hi > 0 && t->s[0] == '\n')
        lo = 1; /* trim_blocks: %}\n? */
    if (next && next->trim_left) {
        hi = back_space(t->s, lo, hi); /* {%- strips all the white space before it */
    } else if (next && next->kind == N_STMT && !next->keep_left) {
        /* lstrip_blocks: white space between the line's start and the block tag */
        size_t l = hi;
        while (l > lo && t->s[l - 1] != '\n') l--;
        int line_start = l > lo || k == 0 || (lo > 0 && t->s[lo - 1] == '\n');
        if (line_start && l < hi && skip_space(t->s, l, hi) == hi) hi = l;
    }
    t->tb = lo, t->te = hi;
}

/* Splits the template into text, {% statement %}, {{ expression }} and {# comment #} nodes,
 * after Jinja's newline rules (\r\n and \r read as \n, one trailing newline dropped). */
static attn_status prog_read(attn_ctx *ctx, const char *tmpl, prog *p) {
    memset(p, 0, sizeof *p);
    size_t len = strlen(tmpl), k = 0;
    ATTN_FAIL_IF(len == SIZE_MAX, ctx, ATTN_E_OVERFLOW, "chat template: too long");
    p->src = attn__malloc(ctx, len + 1);
    ATTN_FAIL_IF(!p->src, ctx, ATTN_E_NOMEM, "chat template: out of memory");
    for (size_t i = 0; i < len; i++) {
        if (tmpl[i] == '\r') {
            p->src[k++] = '\n';
            if (i + 1 < len && tmpl[i + 1] == '\n') i++;
        } else {
            p->src[k++] = tmpl[i];
        }
    }
    if (k > 0 && p->src[k - 1] == '\n') k--;
    p->src[k] = 0;
    const char *t = p->src;
    len = k;
    size_t i = 0;
    while (i < len) {
        node nd;
        memset(&nd, 0, sizeof nd);
        if (t[i] == '{' && i + 1 < len && (t[i + 1] == '%' || t[i + 1] == '{' || t[i + 1] == '#')) {
            char open = t[i + 1], close = open == '{' ? '}' : open;
            size_t b = i + 2;
            nd.trim_left = b < len && t[b] == '-';
            nd.keep_left = b < len && t[b] == '+';
            if (nd.trim_left || nd.keep_left) b++;
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
            nd.trim_right = e > b && t[e - 1] == '-';
            nd.keep_right = e > b && t[e - 1] == '+';
            size_t in_end = nd.trim_right || nd.keep_right ? e - 1 : e;
            size_t ib = b, ie = in_end;
            while (ib < ie && is_ws(t[ib])) ib++;
            while (ie > ib && is_ws(t[ie - 1])) ie--;
            nd.kind = open == '{' ? N_EXPR : N_STMT;
            nd.comment = open == '#';
            nd.s = nd.comment ? "" : t + ib, nd.n = nd.comment ? 0 : ie - ib;
            i = e + 2;
        } else {
            size_t e = i;
            while (e < len && !(t[e] == '{' && e + 1 < len &&
                                (t[e + 1] == '%' || t[e + 1] == '{' || t[e + 1] == '#')))
                e++;
            nd.kind = N_TEXT, nd.s = t + i, nd.n = e - i;
            i = e;
        }
        ATTN_TRY(add_node(ctx, p, &nd));
    }
    for (size_t n = 0; n < p->nn; n++)
        if (p->nodes[n].kind == N_TEXT) text_left(p, n);
    return ATTN_OK;
}

/* Nodes Jinja acts on: texts with something left, statements, expressions (not comments). */
static int is_item(const node *nd) {
    return nd->kind == N_TEXT ? nd->te > nd->tb : !nd->comment;
}

/* ---- the ChatML shape ------------------------------------------------------------------------ */
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

typedef enum { S_FOR, S_ENDFOR, S_IF_GEN, S_IF_FIRST, S_ENDIF, S_OTHER } stmt_kind;

static stmt_kind stmt_of(const node *nd) {
    char s[160];
    if (!norm_stmt(nd, s, sizeof s)) return S_OTHER;
    static const char *const firsts[] = {
        "ifloop.firstandmessages[0]['role']!='system'",
        "ifloop.firstandmessages[0].role!='system'",
        "ifloop.index0==0andmessages[0]['role']!='system'",
        "ifloop.index0==0andmessages[0].role!='system'",
    };
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

/* A Jinja string literal's inside s[0, n) decoded into out (room for n + 1 bytes); 0 for an
 * escape attn does not read (Jinja reads Python's: refused rather than guessed). */
static int decode_lit(const char *s, size_t n, char *out, size_t *olen) {
    size_t o = 0;
    for (size_t k = 0; k < n; k++) {
        char c = s[k];
        if (c == '\\' && k + 1 < n) {
            char d = s[++k];
            if (d != 'n' && d != 't' && d != 'r' && d != '\\' && d != '\'' && d != '"') return 0;
            c = d == 'n' ? '\n' : d == 't' ? '\t' : d == 'r' ? '\r' : d;
        }
        out[o++] = c;
    }
    out[o] = 0;
    *olen = o;
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
    size_t o = n;
    if (unescape) {
        if (!decode_lit(s, n, lit + have, &o)) {
            attn__free(ctx, lit);
            return attn__fail(ctx, ATTN_E_UNSUPPORTED,
                              "chat template: a string literal has an escape attn does not "
                              "read (\\n \\t \\r \\' \\\" \\\\)");
        }
    } else {
        memcpy(lit + have, s, n);
        lit[have + n] = 0;
    }
    o += have;
    if (have) {
        attn__free(ctx, last->lit);
        last->lit = lit, last->n = o;
    } else {
        e->p[e->np++] = (piece){P_LIT, lit, o};
    }
    return ATTN_OK;
}

/* The items of s[*i, n) joined by + or ~ (whitespace around them): at each, a string literal
 * (quotes included, escapes skipped) goes to lit(u, body, length), anything else to
 * other(u, s, n, i), which advances *i past its item.  Each returns 1 when it took the item;
 * 0 stops the walk.  1 when the whole text is one or more items so joined, else 0. */
typedef int (*concat_lit_fn)(void *u, const char *b, size_t bn);
typedef int (*concat_other_fn)(void *u, const char *s, size_t n, size_t *i);
static int concat_walk(const char *s, size_t n, size_t *i, concat_lit_fn lit,
                       concat_other_fn other, void *u) {
    int want = 1, items = 0;
    for (;;) {
        while (*i < n && is_ws(s[*i])) (*i)++;
        if (*i >= n) break;
        if (!want) {
            if (s[*i] != '+' && s[*i] != '~') return 0;
            (*i)++, want = 1;
            continue;
        }
        if (s[*i] == '\'' || s[*i] == '"') {
            const char q = s[(*i)++];
            const size_t b = *i;
            while (*i < n && s[*i] != q) *i += s[*i] == '\\' && *i + 1 < n ? 2 : 1;
            if (*i >= n || !lit(u, s + b, *i - b)) return 0;
            (*i)++;
        } else if (!other(u, s, n, i)) {
            return 0;
        }
        want = 0, items++;
    }
    return !want && items;
}

typedef struct expr_walk {
    attn_ctx *ctx;
    expr *e;
    attn_status st; /* add_lit's failure */
} expr_walk;

static int expr_lit(void *u, const char *b, size_t bn) {
    expr_walk *w = u;
    return (w->st = add_lit(w->ctx, w->e, b, bn, 1)) == ATTN_OK;
}

/* message.role / message['role'], message.content / message['content'] */
static int expr_other(void *u, const char *s, size_t n, size_t *i) {
    expr *e = ((expr_walk *)u)->e;
    piece_kind k;
    if (!match_kw(s, n, i, "message")) return 0;
    if (match_kw(s, n, i, ".role") || match_kw(s, n, i, "['role']") ||
        match_kw(s, n, i, "[\"role\"]"))
        k = P_ROLE;
    else if (match_kw(s, n, i, ".content") || match_kw(s, n, i, "['content']") ||
             match_kw(s, n, i, "[\"content\"]"))
        k = P_CONTENT;
    else
        return 0;
    if (e->np >= CHAT_MAX_PIECES) return 0;
    e->p[e->np++] = (piece){k, NULL, 0};
    return 1;
}

/* Appends an expression's pieces to e: literals, message.role / message['role'],
 * message.content / message['content'], joined by + or ~. */
static attn_status parse_expr(attn_ctx *ctx, const node *nd, expr *e) {
    size_t i = 0;
    expr_walk w = {ctx, e, ATTN_OK};
    if (concat_walk(nd->s, nd->n, &i, expr_lit, expr_other, &w)) return ATTN_OK;
    if (w.st != ATTN_OK) return w.st;
    return attn__fail(ctx, ATTN_E_UNSUPPORTED,
                      "chat template: the expression {{ %.*s }} is not one attn formats (string "
                      "literals and message['role'] / message['content'] joined by +)",
                      (int)(nd->n > 120 ? 120 : nd->n), nd->s);
}

typedef struct chatml {
    expr sys, msg, gen; /* sys, gen: literal only, np 0 when absent */
} chatml;

static int lit_only(const expr *e) { return e->np == 1 && e->p[0].kind == P_LIT; }

/* The pieces of the items seq[*i...] that are text or expressions, appended to e. */
static attn_status body(attn_ctx *ctx, node *const *seq, size_t ns, size_t *i, expr *e) {
    for (; *i < ns && seq[*i]->kind != N_STMT; (*i)++)
        ATTN_TRY(seq[*i]->kind == N_TEXT
                     ? add_lit(ctx, e, seq[*i]->s + seq[*i]->tb, seq[*i]->te - seq[*i]->tb, 0)
                     : parse_expr(ctx, seq[*i], e));
    return ATTN_OK;
}

static attn_status parse_chatml(attn_ctx *ctx, const prog *p, chatml *c) {
    memset(c, 0, sizeof *c);
    node **seq = NULL;
    size_t ns = 0;
    attn_status st = ATTN_OK;
    if (p->nn) {
        seq = attn__calloc(ctx, p->nn, sizeof *seq);
        ATTN_FAIL_IF(!seq, ctx, ATTN_E_NOMEM, "chat template: out of memory");
    }
    for (size_t k = 0; k < p->nn; k++)
        if (is_item(&p->nodes[k])) seq[ns++] = &p->nodes[k];
    size_t i = 0;
    int saw_loop = 0;
    node *nd = NULL;
#define KIND(j) ((j) < ns && seq[j]->kind == N_STMT ? stmt_of(seq[j]) : S_OTHER)
    while (i < ns) {
        nd = seq[i];
        if (nd->kind == N_TEXT) {
            size_t tl = nd->te - nd->tb;
            st = attn__fail(ctx, ATTN_E_UNSUPPORTED,
                            "chat template: it writes the text \"%.*s\" outside its message "
                            "loop (not of the ChatML shape)",
                            (int)(tl > 60 ? 60 : tl), nd->s + nd->tb);
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
                                                 "%%} loop (not of the ChatML shape)");
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
    attn__free(ctx, seq);
    return ATTN_OK;
unrecognised_at_i:
    if (i >= ns) {
        st = attn__fail(ctx, ATTN_E_UNSUPPORTED,
                        "chat template: it ends inside a {%% for %%} or {%% if %%} block");
        goto fail;
    }
    nd = seq[i];
unrecognised:
    st = attn__fail(ctx, ATTN_E_UNSUPPORTED,
                    "chat template: %s %s%.*s%s is not part of the ChatML shape attn parses",
                    nd->kind == N_STMT ? "the statement" : "the expression",
                    nd->kind == N_STMT ? "{% " : "{{ ", (int)(nd->n > 120 ? 120 : nd->n), nd->s,
                    nd->kind == N_STMT ? " %}" : " }}");
fail:
    attn__free(ctx, seq);
    expr_free(ctx, &c->sys), expr_free(ctx, &c->msg), expr_free(ctx, &c->gen);
    return st;
}

/* ---- the published templates ---------------------------------------------------------------- */
#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

static uint64_t fnv(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * FNV_PRIME;
    return h;
}

static int is_name(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_';
}

/* A tag's inside as Jinja's lexer tokenises it: string literals as they are, white space
 * elsewhere dropped except one space between two names ("is not none", "not(x)"). */
static uint64_t canon_hash(uint64_t h, const char *s, size_t n) {
    char q = 0, last = 0;
    int gap = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (q) {
            h = fnv(h, &c, 1);
            if (c == '\\' && i + 1 < n) h = fnv(h, &s[++i], 1);
            else if (c == q) q = 0, last = c;
            continue;
        }
        if (is_ws(c)) {
            gap = 1;
            continue;
        }
        if (gap && is_name(last) && is_name(c)) h = fnv(h, " ", 1);
        gap = 0;
        if (c == '\'' || c == '"') q = c;
        h = fnv(h, &c, 1);
        last = c;
    }
    return h;
}

/* The program's hash with the items at holes[0, nh) left out (an 'H' in their place). */
static uint64_t prog_hash(const prog *p, const int *holes, int nh) {
    uint64_t h = FNV_OFFSET;
    int item = 0;
    for (size_t k = 0; k < p->nn; k++) {
        const node *nd = &p->nodes[k];
        if (!is_item(nd)) continue;
        int hole = 0;
        for (int j = 0; j < nh; j++) hole |= holes[j] == item;
        char kind = nd->kind == N_TEXT ? 'T' : nd->kind == N_STMT ? 'S' : 'E';
        h = fnv(h, &kind, 1);
        if (hole) h = fnv(h, "H", 1);
        else if (nd->kind == N_TEXT) h = fnv(h, nd->s + nd->tb, nd->te - nd->tb);
        else h = canon_hash(h, nd->s, nd->n);
        h = fnv(h, "", 1);
        item++;
    }
    return h;
}

static const node *prog_item(const prog *p, int idx) {
    int item = 0;
    for (size_t k = 0; k < p->nn; k++)
        if (is_item(&p->nodes[k]) && item++ == idx) return &p->nodes[k];
    return NULL;
}

#define TODAY_MARK '\x01' /* where a hole's text takes today's date */

typedef struct hole_walk {
    char *out, *tmp; /* the text so far (o bytes); a literal's decoding */
    size_t o;
    int allow_today;
} hole_walk;

static int hole_lit(void *u, const char *b, size_t bn) {
    hole_walk *w = u;
    size_t k;
    if (!decode_lit(b, bn, w->tmp, &k) || memchr(w->tmp, TODAY_MARK, k) || memchr(w->tmp, 0, k))
        return 0;
    memcpy(w->out + w->o, w->tmp, k), w->o += k;
    return 1;
}

static int hole_other(void *u, const char *s, size_t n, size_t *i) {
    hole_walk *w = u;
    if (!w->allow_today || !match_kw(s, n, i, "today") || (*i < n && is_name(s[*i]))) return 0;
    w->out[w->o++] = TODAY_MARK; /* "today" is 5 bytes: the mark fits */
    return 1;
}

/* A hole's text: an expression that is one string literal, or {% set NAME = 'a' + today + 'b'
 * %} (string literals, and today where allowed, joined by + or ~), decoded into an allocated
 * string (today as TODAY_MARK); NULL when it is not of that form. */
static char *hole_text(attn_ctx *ctx, const node *nd, int allow_today) {
    if (!nd || nd->kind == N_TEXT) return NULL;
    const char *s = nd->s;
    size_t n = nd->n, i = 0;
    if (nd->kind == N_STMT) {
        if (!match_kw(s, n, &i, "set") || i >= n || !is_ws(s[i])) return NULL;
        while (i < n && is_ws(s[i])) i++;
        while (i < n && is_name(s[i])) i++;
        while (i < n && is_ws(s[i])) i++;
        if (i >= n || s[i] != '=') return NULL;
        i++;
    }
    char *out = attn__malloc(ctx, n + 1), *tmp = attn__malloc(ctx, n + 1);
    hole_walk w = {out, tmp, 0, allow_today};
    if (!out || !tmp || !concat_walk(s, n, &i, hole_lit, hole_other, &w)) goto bad;
    const size_t o = w.o;
    out[o] = 0;
    attn__free(ctx, tmp);
    return out;
bad:
    attn__free(ctx, out);
    attn__free(ctx, tmp);
    return NULL;
}

typedef enum {
    F_CHATML,
    F_QWEN,
    F_QWEN3,
    F_GEMMA,
    F_LLAMA3,
    F_LLAMA31,
    F_MISTRAL,
    F_MISTRAL_V7,
    F_MISTRAL_SMALL,
    F_MISTRAL_SMALL3,
    F_MINISTRAL
} fam_kind;

/* The published templates (tests/fixtures/chat/templates: each one's text, its source, and
 * the hash tests/test_chat.c checks).  flag: Gemma 1 the system message opens the first user
 * turn (Gemma 3), 0 no system message (Gemma 2); Llama 3.1: 1 today's date (3.2's
 * strftime_now), 0 the date_string hole; Mistral: 1 v0.3's spaces ("[INST] ", " " +
 * trim(answer)), 0 Nemo's none; Small 3.2: 1 its hole may name today (Small 3's always
 * may). */
typedef struct known {
    const char *name;
    fam_kind kind;
    int flag;
    uint64_t hash;
    int nholes;
    int holes[2]; /* item indices */
} known;

static const known KNOWN[] = {
    {"qwen", F_QWEN, 0, 0x544d4200b47ce0ebULL, 2, {5, 17}},          /* Qwen2.5-7B-Instruct */
    {"qwen3", F_QWEN3, 0, 0xd0fdb2323759fae6ULL, 0, {0, 0}},         /* Qwen3-0.6B */
    {"gemma", F_GEMMA, 0, 0x37356d0a2076725fULL, 0, {0, 0}},         /* gemma-2-2b-it */
    {"gemma", F_GEMMA, 1, 0xdf18e97d3b7ad075ULL, 0, {0, 0}},         /* gemma-3-*-it */
    {"llama3", F_LLAMA3, 0, 0x37ee70aa89d9b8abULL, 0, {0, 0}},       /* Meta-Llama-3-8B-Instruct */
    {"llama3.1", F_LLAMA31, 0, 0x23745a7991973fd1ULL, 1, {8, 0}},    /* Llama-3.1-8B, 3.3-70B */
    {"llama3.1", F_LLAMA31, 1, 0x1f23bde12913a6b9ULL, 0, {0, 0}},    /* Llama-3.2-3B-Instruct */
    {"mistral-v3", F_MISTRAL, 1, 0x133d2843ef085b6eULL, 0, {0, 0}},  /* Mistral-7B-Instruct-v0.3 */
    {"mistral-tekken", F_MISTRAL, 0, 0xe67a2755ff7a0247ULL, 0, {0, 0}}, /* Mistral-Nemo-2407 */
    {"mistral-v7", F_MISTRAL_V7, 0, 0xe6b221914dc7cc60ULL, 0, {0, 0}},  /* Mistral-Large-2411 */
    {"mistral-small3", F_MISTRAL_SMALL3, 0, 0x6685c03aa0e2dc3bULL, 1, {1, 0}}, /* Small-24B-2501 */
    {"mistral-small3.2", F_MISTRAL_SMALL, 1, 0x4af01a48bd75c0dcULL, 1, {1, 0}}, /* Small-3.2-2506 */
    {"ministral3", F_MINISTRAL, 0, 0xf300f85aa72dc0acULL, 1, {0, 0}}, /* Ministral-3-14B-R. */
};
#define N_KNOWN (sizeof KNOWN / sizeof KNOWN[0])

/* The formats named without their file (attn_chat_template_named): those whose published
 * template has no default system message or date to take from it (KNOWN's index). */
static const struct {
    const char *name, *text;
    int known;
} NAMED[] = {
    {"qwen3", "{# attn chat format: qwen3 #}", 1},
    {"gemma2", "{# attn chat format: gemma2 #}", 2},
    {"gemma3", "{# attn chat format: gemma3 #}", 3},
    {"llama3", "{# attn chat format: llama3 #}", 4},
    {"llama3.2", "{# attn chat format: llama3.2 #}", 6},
    {"mistral-v3", "{# attn chat format: mistral-v3 #}", 7},
    {"mistral-nemo", "{# attn chat format: mistral-nemo #}", 8},
    {"mistral-v7", "{# attn chat format: mistral-v7 #}", 9},
};
#define N_NAMED (sizeof NAMED / sizeof NAMED[0])

const char *attn_chat_template_named(const char *name) {
    for (size_t i = 0; name && i < N_NAMED; i++)
        if (!strcmp(name, NAMED[i].name)) return NAMED[i].text;
    return NULL;
}

/* the NAMED entry whose text t is, or -1 */
static int named_at(const char *t) {
    for (size_t i = 0; t && i < N_NAMED; i++)
        if (!strcmp(t, NAMED[i].text)) return (int)i;
    return -1;
}

int attn__chat_template_is_named(const char *t) { return named_at(t) >= 0; }

typedef struct fam {
    fam_kind kind;
    const char *name;
    int flag;      /* KNOWN's */
    char *hole[2]; /* the holes' texts (allocated) */
    chatml c;      /* F_CHATML */
} fam;

static void fam_free(attn_ctx *ctx, fam *f) {
    if (f->kind == F_CHATML)
        expr_free(ctx, &f->c.sys), expr_free(ctx, &f->c.msg), expr_free(ctx, &f->c.gen);
    attn__free(ctx, f->hole[0]);
    attn__free(ctx, f->hole[1]);
    f->hole[0] = f->hole[1] = NULL;
}

static int has(const char *t, const char *m) { return strstr(t, m) != NULL; }

/* The family whose markers an unrecognised template carries, for the message. */
static const char *family_hint(const char *t) {
    if (has(t, "[SYSTEM_PROMPT]")) return "Mistral's [SYSTEM_PROMPT] ";
    if (has(t, "[INST]")) return "Mistral's [INST] ";
    if (has(t, "<start_of_turn>")) return "Gemma's <start_of_turn> ";
    if (has(t, "<|start_header_id|>")) return "Llama 3's <|start_header_id|> ";
    if (has(t, "<|im_start|>")) return "ChatML's <|im_start|> ";
    return NULL;
}

static attn_status recognise(attn_ctx *ctx, const char *t, fam *f) {
    memset(f, 0, sizeof *f);
    ATTN_FAIL_IF(!t || !t[0], ctx, ATTN_E_UNSUPPORTED, "the model has no chat template");
    const int ni = named_at(t);
    if (ni >= 0) {
        const known *kn = &KNOWN[NAMED[ni].known]; /* no holes: nothing to take */
        f->kind = kn->kind, f->name = kn->name, f->flag = kn->flag;
        return ATTN_OK;
    }
    prog p;
    attn_status st = prog_read(ctx, t, &p);
    if (st != ATTN_OK) {
        prog_free(ctx, &p);
        return st;
    }
    for (size_t k = 0; k < N_KNOWN; k++) {
        const known *kn = &KNOWN[k];
        if (prog_hash(&p, kn->holes, kn->nholes) != kn->hash) continue;
        f->kind = kn->kind, f->name = kn->name, f->flag = kn->flag;
        for (int j = 0; j < kn->nholes; j++) {
            f->hole[j] = hole_text(ctx, prog_item(&p, kn->holes[j]),
                                   (kn->kind == F_MISTRAL_SMALL && kn->flag) ||
                                       kn->kind == F_MISTRAL_SMALL3);
            if (!f->hole[j]) {
                fam_free(ctx, f);
                prog_free(ctx, &p);
                return attn__fail(ctx, ATTN_E_UNSUPPORTED,
                                  "chat template: %s's published template whose default "
                                  "system message or date is not a plain string (or is out "
                                  "of memory)", kn->name);
            }
        }
        prog_free(ctx, &p);
        return ATTN_OK;
    }
    st = parse_chatml(ctx, &p, &f->c);
    prog_free(ctx, &p);
    if (st == ATTN_OK) {
        f->kind = F_CHATML, f->name = "chatml";
        return ATTN_OK;
    }
    if (st != ATTN_E_UNSUPPORTED) return st;
    /* not of the ChatML shape (the parser's message says where) nor a published template */
    char why[ATTN__MSG_MAX];
    snprintf(why, sizeof why, "%s", attn_ctx_errmsg(ctx));
    const char *hint = family_hint(t);
    if (hint)
        return attn__fail(ctx, ATTN_E_UNSUPPORTED,
                          "chat template: it has %smarkers but is not one of the published "
                          "templates attn formats (a modified or another model's template: "
                          "attn does not guess its format)", hint);
    return attn__fail(ctx, ATTN_E_UNSUPPORTED,
                      "%s; nor is it one of the published templates attn formats (Qwen2.5, "
                      "Qwen3, Gemma 2/3, Llama 3.0-3.3, Mistral v0.3, Nemo, Large 2411, Small "
                      "3 and 3.2, Ministral 3)", why);
}

/* ---- writing ------------------------------------------------------------------------------- */
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

static void put_cb(void *o, const char *s, size_t n) { put(o, s, n); }
static void puts0(out_buf *o, const char *s) { put(o, s, strlen(s)); }

static void put_expr(out_buf *o, const expr *e, const attn_chat_message *m) {
    for (int i = 0; i < e->np; i++) {
        const piece *p = &e->p[i];
        if (p->kind == P_LIT) put(o, p->lit, p->n);
        else if (p->kind == P_ROLE) puts0(o, m->role);
        else puts0(o, m->content);
    }
}

/* Jinja's trim (Python's strip()) of s. */
static void put_trim(out_buf *o, const char *s) {
    size_t n = strlen(s), b = skip_space(s, 0, n);
    put(o, s + b, back_space(s, b, n) - b);
}

/* Python's lstrip/rstrip of '\n' over s[*b, *e). */
static void lstrip_nl(const char *s, size_t *b, size_t e) {
    while (*b < e && s[*b] == '\n') (*b)++;
}
static void rstrip_nl(const char *s, size_t b, size_t *e) {
    while (*e > b && s[*e - 1] == '\n') (*e)--;
}

/* s[b, e) searched for the last / first occurrence of m: its offset or SIZE_MAX. */
static size_t find_in(const char *s, size_t b, size_t e, const char *m, int last) {
    size_t k = strlen(m), r = SIZE_MAX;
    for (size_t i = b; i + k <= e; i++)
        if (!memcmp(s + i, m, k)) {
            r = i;
            if (!last) break;
        }
    return r;
}

static int is_role(const attn_chat_message *m, const char *r) { return !strcmp(m->role, r); }

/* strftime(fmt) of the local date in the C locale ("%d %b %Y": "25 Nov 2026"; "%Y-%m-%d"), as
 * transformers' strftime_now gives the templates. */
static void today(char *out, size_t cap, int iso) {
    static const char mon[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    time_t now = time(NULL);
    struct tm tmv;
    if (!localtime_r(&now, &tmv)) memset(&tmv, 0, sizeof tmv);
    if (iso)
        snprintf(out, cap, "%04d-%02d-%02d", tmv.tm_year + 1900, tmv.tm_mon % 12 + 1,
                 tmv.tm_mday);
    else
        snprintf(out, cap, "%02d %.3s %04d", tmv.tm_mday, mon[tmv.tm_mon % 12],
                 tmv.tm_year + 1900);
}

/* A hole's text with today's date (YYYY-MM-DD) where it names it. */
static void put_hole(out_buf *o, const char *h) {
    for (const char *p = h; *p;) {
        const char *m = strchr(p, TODAY_MARK);
        if (!m) {
            puts0(o, p);
            break;
        }
        put(o, p, (size_t)(m - p));
        char d[32];
        today(d, sizeof d, 1);
        puts0(o, d);
        p = m + 1;
    }
}

/* ---- one conversation --------------------------------------------------------------------- */
typedef struct rd {
    attn_ctx *ctx;
    const char *fn; /* the API function, for messages */
    const fam *f;
    const attn_chat_message *m;
    int64_t n;
    int gen, thinking;
    const char *bos, *eos;
    const attn__cj *tools;  /* the parsed tool definitions, NULL: none */
    const attn__cj **calls; /* [n]: each message's parsed tool_calls, NULL: none */
    out_buf *o;
} rd;

static void dump(rd *r, const attn__cj *v, int indent) { attn__cj_dump(v, indent, put_cb, r->o); }

static attn_status need_token(rd *r, const char *tok, const char *which) {
    ATTN_FAIL_IF(!tok, r->ctx, ATTN_E_INVALID,
                 "%s: the %s template writes the %s token: pass its text "
                 "(attn_llm_chat_apply does)", r->fn, r->f->name, which);
    return ATTN_OK;
}

static attn_status role_error(rd *r, int64_t i, const char *allowed) {
    return attn__fail(r->ctx, ATTN_E_INVALID,
                      "chat (%s): message %lld has the role \"%s\" (the template takes %s)",
                      r->f->name, (long long)i, r->m[i].role, allowed);
}

static attn_status roles_in(rd *r, int64_t from, const char *const *roles, const char *allowed) {
    for (int64_t i = from; i < r->n; i++) {
        int ok = 0;
        for (const char *const *q = roles; *q; q++) ok |= is_role(&r->m[i], *q);
        if (!ok) return role_error(r, i, allowed);
    }
    return ATTN_OK;
}

/* Gemma: a user message at every even place from the first one, none at the odd ones (the
 * template's only check: another role at an odd place is written as it is). */
static attn_status alternate(rd *r, int64_t from) {
    for (int64_t i = from; i < r->n; i++)
        ATTN_FAIL_IF(is_role(&r->m[i], "user") != ((i - from) % 2 == 0), r->ctx, ATTN_E_INVALID,
                     "chat (%s): the roles must alternate user/assistant/user/... after an "
                     "optional first system message (message %lld is \"%s\")", r->f->name,
                     (long long)i, r->m[i].role);
    return ATTN_OK;
}

/* A tool call's name and arguments: call.function (Qwen: where it has one), else the call. */
static attn_status call_parts(rd *r, int64_t i, const attn__cj *call, int unwrapped_ok,
                              int truthy_function, const attn__cj **name,
                              const attn__cj **args) {
    const attn__cj *fn = attn__cj_get(call, "function");
    if (fn && (!truthy_function || attn__cj_truthy(fn))) call = fn;
    else if (!unwrapped_ok) call = NULL;
    *name = attn__cj_get(call, "name");
    *args = attn__cj_get(call, "arguments");
    ATTN_FAIL_IF(!call || call->kind != CJ_OBJ || !*name || (*name)->kind != CJ_STR || !*args,
                 r->ctx, ATTN_E_INVALID,
                 "chat (%s): message %lld: a tool call needs %s \"name\" (a string) and "
                 "\"arguments\"", r->f->name, (long long)i,
                 unwrapped_ok ? "(in its \"function\" object, if any)" : "a \"function\" with");
    return ATTN_OK;
}

static void put_str(rd *r, const attn__cj *s) { put(r->o, s->s, s->n); }

/* The user message that is the last user message (Mistral: the template compares them). */
static int same_user(rd *r, int64_t i, int64_t last_user) {
    return last_user >= 0 && !strcmp(r->m[i].content, r->m[last_user].content);
}

static const char QWEN_TOOLS_HEAD[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
    "provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char QWEN_TOOLS_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

/* Qwen2.5 and Qwen3. */
static attn_status render_qwen(rd *r) {
    static const char *const roles[] = {"system", "user", "assistant", "tool", NULL};
    ATTN_TRY(roles_in(r, 0, roles, "system, user, assistant and tool; it drops others"));
    const int q3 = r->f->kind == F_QWEN3;
    const attn_chat_message *m = r->m;
    const int64_t n = r->n;
    int first = n > 0 && is_role(&m[0], "system");
    out_buf *o = r->o;
    if (attn__cj_truthy(r->tools)) {
        puts0(o, "<|im_start|>system\n");
        if (q3) {
            if (first) puts0(o, m[0].content), puts0(o, "\n\n");
        } else {
            puts0(o, first ? m[0].content : r->f->hole[0]), puts0(o, "\n\n");
        }
        puts0(o, QWEN_TOOLS_HEAD);
        for (const attn__cj *t = r->tools->first; t; t = t->next) puts0(o, "\n"), dump(r, t, -1);
        puts0(o, QWEN_TOOLS_TAIL);
    } else if (first) {
        puts0(o, "<|im_start|>system\n"), puts0(o, m[0].content), puts0(o, "<|im_end|>\n");
    } else if (!q3) {
        puts0(o, r->f->hole[1]);
    }
    int64_t lastq = n - 1; /* Qwen3: the last user message not wrapped as a tool response */
    for (int64_t i = n - 1; q3 && i >= 0; i--) {
        const char *c = m[i].content;
        size_t cl = strlen(c);
        int wrapped = cl >= 15 && !strncmp(c, "<tool_response>", 15) && cl >= 16 &&
                      !strcmp(c + cl - 16, "</tool_response>");
        if (is_role(&m[i], "user") && !wrapped) {
            lastq = i;
            break;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        const attn_chat_message *mi = &m[i];
        const attn__cj *calls = r->calls[i];
        if (is_role(mi, "user") || (is_role(mi, "system") && i > 0) ||
            (!q3 && is_role(mi, "assistant") && !attn__cj_truthy(calls))) {
            puts0(o, "<|im_start|>"), puts0(o, mi->role), puts0(o, "\n"), puts0(o, mi->content);
            puts0(o, "<|im_end|>\n");
        } else if (is_role(mi, "assistant")) {
            const char *c = mi->content;
            size_t len = strlen(c), cb = 0, ce = len;
            int content_set = 0;
            puts0(o, "<|im_start|>assistant");
            if (q3) {
                const char *rs = "";
                size_t rb = 0, re = 0;
                if (mi->reasoning_content) {
                    rs = mi->reasoning_content, re = strlen(rs);
                } else if (find_in(c, 0, len, "</think>", 0) != SIZE_MAX) {
                    /* content.split('</think>')[-1].lstrip('\n'); the reasoning:
                     * content.split('</think>')[0].rstrip('\n').split('<think>')[-1]
                     * .lstrip('\n') */
                    cb = find_in(c, 0, len, "</think>", 1) + 8;
                    lstrip_nl(c, &cb, ce);
                    rs = c, re = find_in(c, 0, len, "</think>", 0);
                    rstrip_nl(c, 0, &re);
                    size_t open = find_in(c, 0, re, "<think>", 1);
                    rb = open == SIZE_MAX ? 0 : open + 7;
                    lstrip_nl(c, &rb, re);
                }
                puts0(o, "\n");
                content_set = ce > cb; /* the template's `content` (before its lstrip) */
                if (i > lastq && (i == n - 1 || re > rb)) {
                    size_t sb = rb, se = re; /* reasoning.strip('\n') */
                    lstrip_nl(rs, &sb, se), rstrip_nl(rs, sb, &se);
                    puts0(o, "<think>\n"), put(o, rs + sb, se - sb), puts0(o, "\n</think>\n\n");
                    lstrip_nl(c, &cb, ce);
                }
                put(o, c + cb, ce - cb);
            } else if (c[0]) {
                puts0(o, "\n"), puts0(o, c);
            }
            if (attn__cj_truthy(calls)) {
                for (const attn__cj *tc = calls->first; tc; tc = tc->next) {
                    const attn__cj *name, *args;
                    ATTN_TRY(call_parts(r, i, tc, 1, q3, &name, &args));
                    if (!q3 || tc != calls->first || content_set) puts0(o, "\n");
                    puts0(o, "<tool_call>\n{\"name\": \""), put_str(r, name);
                    puts0(o, "\", \"arguments\": ");
                    if (q3 && args->kind == CJ_STR) put_str(r, args);
                    else dump(r, args, -1);
                    puts0(o, "}\n</tool_call>");
                }
            }
            puts0(o, "<|im_end|>\n");
        } else if (is_role(mi, "tool")) {
            if (i == 0 || !is_role(&m[i - 1], "tool")) puts0(o, "<|im_start|>user");
            puts0(o, "\n<tool_response>\n"), puts0(o, mi->content), puts0(o, "\n</tool_response>");
            if (i == n - 1 || !is_role(&m[i + 1], "tool")) puts0(o, "<|im_end|>\n");
        }
    }
    if (r->gen) {
        puts0(o, "<|im_start|>assistant\n");
        if (q3 && r->thinking == ATTN_CHAT_THINKING_OFF) puts0(o, "<think>\n\n</think>\n\n");
    }
    return ATTN_OK;
}

static attn_status render_gemma(rd *r) {
    ATTN_TRY(need_token(r, r->bos, "bos"));
    int64_t first = r->n > 0 && is_role(&r->m[0], "system");
    ATTN_FAIL_IF(first && !r->f->flag, r->ctx, ATTN_E_INVALID,
                 "chat (gemma): this template does not take a system message");
    ATTN_TRY(alternate(r, first));
    puts0(r->o, r->bos);
    for (int64_t i = first; i < r->n; i++) {
        puts0(r->o, "<start_of_turn>");
        puts0(r->o, is_role(&r->m[i], "assistant") ? "model" : r->m[i].role);
        puts0(r->o, "\n");
        if (i == first && first) puts0(r->o, r->m[0].content), puts0(r->o, "\n\n");
        put_trim(r->o, r->m[i].content);
        puts0(r->o, "<end_of_turn>\n");
    }
    if (r->gen) puts0(r->o, "<start_of_turn>model\n");
    return ATTN_OK;
}

static void llama_header(out_buf *o, const char *role) {
    puts0(o, "<|start_header_id|>"), puts0(o, role), puts0(o, "<|end_header_id|>\n\n");
}

static const char LLAMA_TOOLS[] =
    "Given the following functions, please respond with a JSON for a function call with its "
    "proper arguments that best answers the given prompt.\n\nRespond in the format {\"name\": "
    "function name, \"parameters\": dictionary of argument name and its value}.Do not use "
    "variables.\n\n";

/* Llama 3.0 (no system block) and 3.1-3.3. */
static attn_status render_llama(rd *r) {
    ATTN_TRY(need_token(r, r->bos, "bos"));
    const attn_chat_message *m = r->m;
    out_buf *o = r->o;
    int64_t i0 = 0, n = r->n;
    if (r->f->kind == F_LLAMA3) {
        if (n > 0) puts0(o, r->bos);
        for (int64_t i = 0; i < n; i++) {
            llama_header(o, m[i].role);
            put_trim(o, m[i].content);
            puts0(o, "<|eot_id|>");
        }
        if (r->gen) llama_header(o, "assistant");
        return ATTN_OK;
    }
    puts0(o, r->bos);
    int first = n > 0 && is_role(&m[0], "system");
    i0 = first;
    llama_header(o, "system");
    if (r->tools) puts0(o, "Environment: ipython\n");
    puts0(o, "Cutting Knowledge Date: December 2023\nToday Date: ");
    if (r->f->flag) {
        char d[32];
        today(d, sizeof d, 0);
        puts0(o, d);
    } else {
        puts0(o, r->f->hole[0]);
    }
    puts0(o, "\n\n");
    if (first) put_trim(o, m[0].content);
    puts0(o, "<|eot_id|>");
    if (r->tools) { /* tools_in_user_message: the first message after the system one */
        ATTN_FAIL_IF(i0 >= n, r->ctx, ATTN_E_INVALID,
                     "chat (%s): tools go into the first user message, and there is none",
                     r->f->name);
        llama_header(o, "user");
        puts0(o, LLAMA_TOOLS);
        for (const attn__cj *t = r->tools->first; t; t = t->next)
            dump(r, t, 4), puts0(o, "\n\n");
        put_trim(o, m[i0].content);
        puts0(o, "<|eot_id|>");
        i0++;
    }
    for (int64_t i = i0; i < n; i++) {
        const int tool = is_role(&m[i], "tool") || is_role(&m[i], "ipython");
        if (!tool && !r->calls[i]) {
            llama_header(o, m[i].role);
            put_trim(o, m[i].content);
            puts0(o, "<|eot_id|>");
        } else if (r->calls[i]) {
            ATTN_FAIL_IF(r->calls[i]->count != 1, r->ctx, ATTN_E_INVALID,
                         "chat (%s): message %lld has %zu tool calls: the template takes one "
                         "per message", r->f->name, (long long)i, r->calls[i]->count);
            const attn__cj *name, *args;
            ATTN_TRY(call_parts(r, i, r->calls[i]->first, 0, 0, &name, &args));
            llama_header(o, "assistant");
            puts0(o, "{\"name\": \""), put_str(r, name), puts0(o, "\", \"parameters\": ");
            dump(r, args, -1);
            puts0(o, "}<|eot_id|>");
        } else { /* a string is iterable: the template writes it through tojson */
            llama_header(o, "ipython");
            attn__cj_dump_str(m[i].content, strlen(m[i].content), put_cb, o);
            puts0(o, "<|eot_id|>");
        }
    }
    if (r->gen) llama_header(o, "assistant");
    return ATTN_OK;
}

/* A Mistral tool call id: a string of 9 characters. */
static attn_status mistral_id(rd *r, int64_t i, const attn__cj *id) {
    ATTN_FAIL_IF(!id || id->kind != CJ_STR || attn__cj_strlen_cp(id->s, id->n) != 9, r->ctx,
                 ATTN_E_INVALID, "chat (%s): message %lld: tool call ids must be strings of 9 "
                 "characters (the template refuses others)", r->f->name, (long long)i);
    return ATTN_OK;
}

static attn_status mistral_result_id(rd *r, int64_t i) {
    const char *id = r->m[i].tool_call_id;
    ATTN_FAIL_IF(!id || attn__cj_strlen_cp(id, strlen(id)) != 9, r->ctx, ATTN_E_INVALID,
                 "chat (%s): message %lld: a tool result's tool_call_id must be 9 characters "
                 "(the template refuses others)", r->f->name, (long long)i);
    return ATTN_OK;
}

/* Mistral 7B v0.3 (flag 1) and Nemo (flag 0). */
static attn_status render_mistral(rd *r) {
    ATTN_TRY(need_token(r, r->bos, "bos"));
    ATTN_TRY(need_token(r, r->eos, "eos"));
    const attn_chat_message *m = r->m;
    out_buf *o = r->o;
    const int sp = r->f->flag;
    const int64_t n = r->n;
    ATTN_FAIL_IF(n == 0, r->ctx, ATTN_E_INVALID, "chat (%s): no messages", r->f->name);
    int64_t first = is_role(&m[0], "system"), lastu = -1, idx = 0;
    for (int64_t i = first; i < n; i++) {
        if (is_role(&m[i], "user")) lastu = i;
        if (is_role(&m[i], "tool") || is_role(&m[i], "tool_results") || r->calls[i]) continue;
        ATTN_FAIL_IF(is_role(&m[i], "user") != (idx % 2 == 0), r->ctx, ATTN_E_INVALID,
                     "chat (%s): after the optional system message, the roles must alternate "
                     "user/assistant/... (message %lld is \"%s\")", r->f->name, (long long)i,
                     m[i].role);
        idx++;
    }
    puts0(o, r->bos);
    for (int64_t i = first; i < n; i++) {
        const attn_chat_message *mi = &m[i];
        if (is_role(mi, "user")) {
            if (r->tools && same_user(r, i, lastu)) {
                puts0(o, sp ? "[AVAILABLE_TOOLS] [" : "[AVAILABLE_TOOLS][");
                for (const attn__cj *t = r->tools->first; t; t = t->next) {
                    const attn__cj *fn = attn__cj_get(t, "function");
                    ATTN_FAIL_IF(!fn || fn->kind != CJ_OBJ, r->ctx, ATTN_E_INVALID,
                                 "chat (%s): a tool definition needs a \"function\" object",
                                 r->f->name);
                    puts0(o, "{\"type\": \"function\", \"function\": {");
                    int any = 0;
                    for (const attn__cj *kv = fn->first; kv; kv = kv->next) {
                        if (!strcmp(kv->key, "return")) continue;
                        if (any++) puts0(o, ", ");
                        puts0(o, "\""), put(o, kv->key, kv->klen);
                        if (kv->kind == CJ_STR) puts0(o, "\": \""), put_str(r, kv), puts0(o, "\"");
                        else puts0(o, "\": "), dump(r, kv, -1);
                    }
                    puts0(o, "}}");
                    puts0(o, t->next ? ", " : "]");
                }
                puts0(o, "[/AVAILABLE_TOOLS]");
            }
            int with_sys = first && (sp ? same_user(r, i, lastu) : i == n - 1);
            puts0(o, sp ? "[INST] " : "[INST]");
            if (with_sys) puts0(o, m[0].content), puts0(o, "\n\n");
            puts0(o, mi->content), puts0(o, "[/INST]");
        } else if (r->calls[i]) {
            puts0(o, sp ? "[TOOL_CALLS] [" : "[TOOL_CALLS][");
            for (const attn__cj *tc = r->calls[i]->first; tc; tc = tc->next) {
                const attn__cj *fn = attn__cj_get(tc, "function");
                ATTN_FAIL_IF(!fn, r->ctx, ATTN_E_INVALID,
                             "chat (%s): message %lld: a tool call needs a \"function\"",
                             r->f->name, (long long)i);
                dump(r, fn, -1);
                o->len--; /* out[:-1]: the dump ends in an ASCII character ('}', '"', ...) */
                ATTN_TRY(mistral_id(r, i, attn__cj_get(tc, "id")));
                const attn__cj *id = attn__cj_get(tc, "id");
                puts0(o, ", \"id\": \""), put_str(r, id), puts0(o, "\"}");
                if (tc->next) puts0(o, ", ");
                else puts0(o, "]"), puts0(o, r->eos);
            }
        } else if (is_role(mi, "assistant")) {
            if (sp) puts0(o, " "), put_trim(o, mi->content);
            else puts0(o, mi->content);
            puts0(o, r->eos);
        } else if (is_role(mi, "tool") || is_role(mi, "tool_results")) {
            puts0(o, sp ? "[TOOL_RESULTS] {\"content\": " : "[TOOL_RESULTS]{\"content\": ");
            puts0(o, mi->content), puts0(o, ", ");
            ATTN_TRY(mistral_result_id(r, i));
            puts0(o, "\"call_id\": \""), puts0(o, mi->tool_call_id), puts0(o, "\"}[/TOOL_RESULTS]");
        } else {
            return role_error(r, i, "an optional first system message, then user, assistant "
                                    "and tool");
        }
    }
    return ATTN_OK;
}

/* Mistral Large 2411's v7 template. */
static attn_status render_mistral_v7(rd *r) {
    ATTN_TRY(need_token(r, r->bos, "bos"));
    ATTN_TRY(need_token(r, r->eos, "eos"));
    static const char *const roles[] = {"system", "user", "assistant", NULL};
    ATTN_TRY(roles_in(r, 0, roles, "system, user and assistant"));
    puts0(r->o, r->bos);
    for (int64_t i = 0; i < r->n; i++) {
        const attn_chat_message *mi = &r->m[i];
        if (is_role(mi, "user"))
            puts0(r->o, "[INST] "), puts0(r->o, mi->content), puts0(r->o, "[/INST]");
        else if (is_role(mi, "system"))
            puts0(r->o, "[SYSTEM_PROMPT] "), puts0(r->o, mi->content),
                puts0(r->o, "[/SYSTEM_PROMPT]");
        else
            puts0(r->o, " "), puts0(r->o, mi->content), puts0(r->o, r->eos);
    }
    return ATTN_OK;
}

/* Mistral Small 3.2's [SYSTEM_PROMPT] template. */
static attn_status render_mistral_small(rd *r) {
    ATTN_TRY(need_token(r, r->bos, "bos"));
    ATTN_TRY(need_token(r, r->eos, "eos"));
    const attn_chat_message *m = r->m;
    out_buf *o = r->o;
    const int64_t n = r->n;
    int64_t first = n > 0 && is_role(&m[0], "system"), lastu = -1, idx = 0;
    for (int64_t i = first; i < n; i++) {
        if (is_role(&m[i], "user")) lastu = i;
        if (is_role(&m[i], "tool") || attn__cj_truthy(r->calls[i])) continue;
        ATTN_FAIL_IF(is_role(&m[i], "user") != (idx % 2 == 0), r->ctx, ATTN_E_INVALID,
                     "chat (%s): after the optional system message, the roles must alternate "
                     "user/assistant/... (message %lld is \"%s\")", r->f->name, (long long)i,
                     m[i].role);
        idx++;
    }
    puts0(o, r->bos);
    puts0(o, "[SYSTEM_PROMPT]");
    if (first) puts0(o, m[0].content);
    else put_hole(o, r->f->hole[0]);
    puts0(o, "[/SYSTEM_PROMPT]");
    for (int64_t i = first; i < n; i++) {
        const attn_chat_message *mi = &m[i];
        if (is_role(mi, "system")) {
            puts0(o, "[SYSTEM_PROMPT]"), puts0(o, mi->content), puts0(o, "[/SYSTEM_PROMPT]");
        } else if (is_role(mi, "user")) {
            if (r->tools && same_user(r, i, lastu))
                puts0(o, "[AVAILABLE_TOOLS]"), dump(r, r->tools, -1),
                    puts0(o, "[/AVAILABLE_TOOLS]");
            puts0(o, "[INST]"), puts0(o, mi->content), puts0(o, "[/INST]");
        } else if (is_role(mi, "assistant")) {
            if (attn__cj_truthy(r->calls[i])) {
                for (const attn__cj *tc = r->calls[i]->first; tc; tc = tc->next) {
                    const attn__cj *name, *args;
                    ATTN_TRY(call_parts(r, i, tc, 0, 0, &name, &args));
                    puts0(o, "[TOOL_CALLS]"), put_str(r, name);
                    ATTN_TRY(mistral_id(r, i, attn__cj_get(tc, "id")));
                    puts0(o, "[CALL_ID]"), put_str(r, attn__cj_get(tc, "id"));
                    puts0(o, "[ARGS]"), dump(r, args, -1);
                }
            } else {
                puts0(o, mi->content);
            }
            puts0(o, r->eos);
        } else if (is_role(mi, "tool") || is_role(mi, "tool_results")) {
            ATTN_TRY(mistral_result_id(r, i));
            puts0(o, "[TOOL_RESULTS]"), puts0(o, mi->tool_call_id), puts0(o, "[TOOL_CONTENT]");
            puts0(o, mi->content), puts0(o, "[/TOOL_RESULTS]");
        } else {
            return role_error(r, i, "system, user, assistant and tool");
        }
    }
    return ATTN_OK;
}

/* Mistral Small 3's (24B-Instruct-2501) [SYSTEM_PROMPT] template: it reads messages[0] (no
 * messages: refused), the default system message (dated today) when that is not a system
 * message; no alternation check, no tools, other roles refused. */
static attn_status render_mistral_small3(rd *r) {
    ATTN_TRY(need_token(r, r->bos, "bos"));
    ATTN_TRY(need_token(r, r->eos, "eos"));
    const attn_chat_message *m = r->m;
    out_buf *o = r->o;
    const int64_t n = r->n;
    ATTN_FAIL_IF(n == 0, r->ctx, ATTN_E_INVALID, "chat (%s): no messages", r->f->name);
    static const char *const roles[] = {"system", "user", "assistant", NULL};
    const int64_t first = is_role(&m[0], "system");
    ATTN_TRY(roles_in(r, first, roles, "system, user and assistant"));
    puts0(o, r->bos);
    puts0(o, "[SYSTEM_PROMPT]");
    if (first) puts0(o, m[0].content);
    else put_hole(o, r->f->hole[0]);
    puts0(o, "[/SYSTEM_PROMPT]");
    for (int64_t i = first; i < n; i++) {
        const attn_chat_message *mi = &m[i];
        if (is_role(mi, "user"))
            puts0(o, "[INST]"), puts0(o, mi->content), puts0(o, "[/INST]");
        else if (is_role(mi, "system"))
            puts0(o, "[SYSTEM_PROMPT]"), puts0(o, mi->content), puts0(o, "[/SYSTEM_PROMPT]");
        else
            puts0(o, mi->content), puts0(o, r->eos);
    }
    return ATTN_OK;
}

/* Ministral 3's [SYSTEM_PROMPT] template. */
static attn_status render_ministral(rd *r) {
    ATTN_TRY(need_token(r, r->bos, "bos"));
    ATTN_TRY(need_token(r, r->eos, "eos"));
    const attn_chat_message *m = r->m;
    out_buf *o = r->o;
    const int64_t n = r->n;
    ATTN_FAIL_IF(n == 0, r->ctx, ATTN_E_INVALID, "chat (%s): no messages", r->f->name);
    int64_t first = is_role(&m[0], "system"), idx = 0;
    puts0(o, r->bos);
    if (first) puts0(o, "[SYSTEM_PROMPT]"), puts0(o, m[0].content), puts0(o, "[/SYSTEM_PROMPT]");
    else if (r->f->hole[0][0])
        puts0(o, "[SYSTEM_PROMPT]"), put_hole(o, r->f->hole[0]), puts0(o, "[/SYSTEM_PROMPT]");
    if (attn__cj_truthy(r->tools))
        puts0(o, "[AVAILABLE_TOOLS]"), dump(r, r->tools, -1), puts0(o, "[/AVAILABLE_TOOLS]");
    for (int64_t i = first; i < n; i++) {
        int has_calls = r->calls[i] && r->calls[i]->count > 0;
        if (!is_role(&m[i], "user") && !(is_role(&m[i], "assistant") && !has_calls)) continue;
        ATTN_FAIL_IF(is_role(&m[i], "user") != (idx % 2 == 0), r->ctx, ATTN_E_INVALID,
                     "chat (%s): after the optional system message, the roles must alternate "
                     "user and assistant except for tool calls and results (message %lld is "
                     "\"%s\")", r->f->name, (long long)i, m[i].role);
        idx++;
    }
    for (int64_t i = first; i < n; i++) {
        const attn_chat_message *mi = &m[i];
        int has_calls = r->calls[i] && r->calls[i]->count > 0;
        if (is_role(mi, "user")) {
            puts0(o, "[INST]"), puts0(o, mi->content), puts0(o, "[/INST]");
        } else if (is_role(mi, "assistant")) {
            ATTN_FAIL_IF(!mi->content[0] && !has_calls, r->ctx, ATTN_E_INVALID,
                         "chat (%s): message %lld: an assistant message needs content or tool "
                         "calls", r->f->name, (long long)i);
            puts0(o, mi->content);
            for (const attn__cj *tc = has_calls ? r->calls[i]->first : NULL; tc; tc = tc->next) {
                const attn__cj *name, *args;
                puts0(o, "[TOOL_CALLS]");
                ATTN_TRY(call_parts(r, i, tc, 0, 0, &name, &args));
                put_str(r, name), puts0(o, "[ARGS]");
                if (args->kind != CJ_STR) dump(r, args, -1);
                else if (args->n == 0) puts0(o, "{}");
                else put_str(r, args);
            }
            puts0(o, r->eos);
        } else if (is_role(mi, "tool")) {
            puts0(o, "[TOOL_RESULTS]"), puts0(o, mi->content), puts0(o, "[/TOOL_RESULTS]");
        } else {
            return role_error(r, i, "an optional first system message, then user, assistant "
                                    "and tool");
        }
    }
    return ATTN_OK;
}

/* Which formats write tool definitions and tool calls. */
static int takes_tools(fam_kind k) {
    return k == F_QWEN || k == F_QWEN3 || k == F_LLAMA31 || k == F_MISTRAL ||
           k == F_MISTRAL_SMALL || k == F_MINISTRAL;
}

static attn_status render(rd *r) {
    const fam *f = r->f;
    /* the templates that read messages[0] fail on no messages */
    ATTN_FAIL_IF(r->n == 0 && (f->kind == F_QWEN || f->kind == F_QWEN3 || f->kind == F_GEMMA ||
                               f->kind == F_LLAMA31),
                 r->ctx, ATTN_E_INVALID, "chat (%s): no messages", f->name);
    switch (f->kind) {
    case F_CHATML:
        for (int64_t i = 0; i < r->n; i++) {
            if (i == 0 && f->c.sys.np && !is_role(&r->m[0], "system"))
                put(r->o, f->c.sys.p[0].lit, f->c.sys.p[0].n);
            put_expr(r->o, &f->c.msg, &r->m[i]);
        }
        if (r->gen && f->c.gen.np) put(r->o, f->c.gen.p[0].lit, f->c.gen.p[0].n);
        return ATTN_OK;
    case F_QWEN:
    case F_QWEN3: return render_qwen(r);
    case F_GEMMA: return render_gemma(r);
    case F_LLAMA3:
    case F_LLAMA31: return render_llama(r);
    case F_MISTRAL: return render_mistral(r);
    case F_MISTRAL_V7: return render_mistral_v7(r);
    case F_MISTRAL_SMALL: return render_mistral_small(r);
    case F_MISTRAL_SMALL3: return render_mistral_small3(r);
    case F_MINISTRAL: return render_ministral(r);
    }
    return ATTN_OK;
}

/* ---- API ---------------------------------------------------------------------------------- */
attn_status attn_chat_template_check(attn_ctx *ctx, const char *tmpl) {
    ATTN_FAIL_IF(!ctx, ctx, ATTN_E_INVALID, "attn_chat_template_check: ctx is NULL");
    fam f;
    ATTN_TRY(recognise(ctx, tmpl, &f));
    fam_free(ctx, &f);
    return ATTN_OK;
}

const char *attn_chat_template_name(attn_ctx *ctx, const char *tmpl) {
    if (!ctx) return NULL;
    fam f;
    if (recognise(ctx, tmpl, &f) != ATTN_OK) return NULL;
    fam_free(ctx, &f);
    return f.name;
}

/* attn_chat_apply for the API function fn (its name in the messages). */
static attn_status chat_apply(attn_ctx *ctx, const char *fn, const char *tmpl,
                              const attn_chat_message *msgs, int64_t n,
                              const attn_chat_options *opt, char *buf, size_t cap, size_t *len) {
    ATTN_FAIL_IF(n < 0 || (n > 0 && !msgs) || !len || (cap > 0 && !buf), ctx, ATTN_E_INVALID,
                 "%s: %s", fn,
                 n < 0 ? "n is negative" : !len ? "len is NULL" : cap > 0 && !buf ?
                 "buf is NULL with cap > 0" : "msgs is NULL");
    attn_chat_options defaults;
    memset(&defaults, 0, sizeof defaults);
    if (!opt) opt = &defaults;
    ATTN_FAIL_IF(opt->thinking < ATTN_CHAT_THINKING_DEFAULT ||
                     opt->thinking > ATTN_CHAT_THINKING_OFF,
                 ctx, ATTN_E_INVALID, "%s: thinking is %d (ATTN_CHAT_THINKING_*)", fn,
                 opt->thinking);
    for (int64_t i = 0; i < n; i++) {
        const attn_chat_message *m = &msgs[i];
        ATTN_FAIL_IF(!m->role || !m->content, ctx, ATTN_E_INVALID,
                     "%s: message %lld has a NULL %s", fn, (long long)i,
                     m->role ? "content" : "role");
        ATTN_FAIL_IF((m->tool_calls || m->reasoning_content) && strcmp(m->role, "assistant"),
                     ctx, ATTN_E_INVALID, "%s: message %lld (\"%s\") has %s: only assistant "
                     "messages do", fn, (long long)i, m->role,
                     m->tool_calls ? "tool_calls" : "reasoning_content");
        ATTN_FAIL_IF(m->tool_call_id && strcmp(m->role, "tool") &&
                         strcmp(m->role, "tool_results") && strcmp(m->role, "ipython"),
                     ctx, ATTN_E_INVALID, "%s: message %lld (\"%s\") has a tool_call_id: only "
                     "tool results do", fn, (long long)i, m->role);
    }
    fam f;
    ATTN_TRY(recognise(ctx, tmpl, &f));
    attn_status st = ATTN_OK;
    attn__cj_doc tools_doc, *docs = NULL;
    const attn__cj **calls = NULL;
    memset(&tools_doc, 0, sizeof tools_doc);
    int tools_ok = takes_tools(f.kind);
    if (opt->tools && !tools_ok) {
        st = attn__fail(ctx, ATTN_E_UNSUPPORTED,
                        "%s: the %s template does not write tool definitions (attn formats "
                        "tools for qwen, qwen3, llama3.1, mistral-v3, mistral-tekken, "
                        "mistral-small3.2 and ministral3)", fn, f.name);
        goto done;
    }
    if (opt->tools) {
        if ((st = attn__cj_parse(ctx, opt->tools, "tools", &tools_doc)) != ATTN_OK) goto done;
        const attn__cj *t = tools_doc.root;
        int ok = t->kind == CJ_ARR;
        for (const attn__cj *c = ok ? t->first : NULL; c; c = c->next) ok &= c->kind == CJ_OBJ;
        if (!ok) {
            st = attn__fail(ctx, ATTN_E_INVALID,
                            "%s: tools must be a JSON array of objects (tool definitions)", fn);
            goto done;
        }
    }
    if (n > 0) {
        docs = attn__calloc(ctx, (size_t)n, sizeof *docs);
        calls = attn__calloc(ctx, (size_t)n, sizeof *calls);
        if (!docs || !calls) {
            st = attn__fail(ctx, ATTN_E_NOMEM, "%s: out of memory (%lld messages)", fn,
                            (long long)n);
            goto done;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        if (!msgs[i].tool_calls) continue;
        if (!tools_ok) {
            st = attn__fail(ctx, ATTN_E_UNSUPPORTED,
                            "%s: message %lld has tool calls, which the %s template does not "
                            "write", fn, (long long)i, f.name);
            goto done;
        }
        char what[64];
        snprintf(what, sizeof what, "message %lld's tool_calls", (long long)i);
        if ((st = attn__cj_parse(ctx, msgs[i].tool_calls, what, &docs[i])) != ATTN_OK) goto done;
        const attn__cj *c = docs[i].root;
        int ok = c->kind == CJ_ARR;
        for (const attn__cj *e = ok ? c->first : NULL; e; e = e->next) ok &= e->kind == CJ_OBJ;
        if (!ok) {
            st = attn__fail(ctx, ATTN_E_INVALID, "%s: %s must be a JSON array of objects", fn,
                            what);
            goto done;
        }
        calls[i] = c;
    }
    out_buf o = {buf, cap, 0, 0};
    rd r = {ctx, fn, &f, msgs, n, opt->add_generation_prompt != 0, opt->thinking,
            opt->bos_token, opt->eos_token, tools_doc.root, calls, &o};
    if ((st = render(&r)) != ATTN_OK) goto done;
    if (o.overflow || o.len == SIZE_MAX) {
        st = attn__fail(ctx, ATTN_E_OVERFLOW, "%s: the conversation is too long", fn);
        goto done;
    }
    *len = o.len;
    if (cap > 0) buf[o.len < cap ? o.len : cap - 1] = 0;
done:
    for (int64_t i = 0; docs && i < n; i++) attn__cj_free(ctx, &docs[i]);
    attn__free(ctx, docs);
    attn__free(ctx, calls);
    attn__cj_free(ctx, &tools_doc);
    fam_free(ctx, &f);
    return st;
}

attn_status attn__chat_apply_as(attn_ctx *ctx, const char *fn, const char *tmpl,
                                const attn_chat_message *msgs, int64_t n,
                                const attn_chat_options *opt, char *buf, size_t cap,
                                size_t *len) {
    ATTN_FAIL_IF(!ctx, ctx, ATTN_E_INVALID, "%s: ctx is NULL", fn);
    return chat_apply(ctx, fn, tmpl, msgs, n, opt, buf, cap, len);
}

attn_status attn_chat_apply(attn_ctx *ctx, const char *tmpl, const attn_chat_message *msgs,
                            int64_t n, const attn_chat_options *opt, char *buf, size_t cap,
                            size_t *len) {
    return attn__chat_apply_as(ctx, "attn_chat_apply", tmpl, msgs, n, opt, buf, cap, len);
}

attn_status attn_chat_render(attn_ctx *ctx, const char *tmpl, const char *bos_token,
                             const char *eos_token, const attn_chat_message *msgs, int64_t n,
                             int add_generation_prompt, char *buf, size_t cap, size_t *len) {
    attn_chat_options o;
    memset(&o, 0, sizeof o);
    o.add_generation_prompt = add_generation_prompt;
    o.bos_token = bos_token, o.eos_token = eos_token;
    return attn__chat_apply_as(ctx, "attn_chat_render", tmpl, msgs, n, &o, buf, cap, len);
}

attn_status attn_chat_format(attn_ctx *ctx, const char *tmpl, const attn_chat_message *msgs,
                             int64_t n, int add_generation_prompt, char *buf, size_t cap,
                             size_t *len) {
    attn_chat_options o;
    memset(&o, 0, sizeof o);
    o.add_generation_prompt = add_generation_prompt;
    return attn__chat_apply_as(ctx, "attn_chat_format", tmpl, msgs, n, &o, buf, cap, len);
}
