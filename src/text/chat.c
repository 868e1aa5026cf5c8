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
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>

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

/* ---- the other families: recognised by their published templates' markers -------------------
 * A template that is not a plain ChatML program is matched against the families whose chat
 * formats attn writes itself, each tested byte for byte against transformers' rendering of the
 * families' published templates (tests/gen_chat.py).  The markers name the family; the
 * variant points inside it (how a system message is placed, the date line) are read from the
 * template, and a template of a known family whose variant is not one of these is refused by
 * name.  Roles: "system" (first only where the family says so), "user", "assistant". */
typedef enum { F_CHATML, F_QWEN, F_QWEN3, F_GEMMA, F_LLAMA3, F_MISTRAL } fam_kind;

typedef struct fam {
    fam_kind kind;
    const char *name;
    int gemma_sys;         /* Gemma: 1 the system message prefixes the first turn; 0 refused */
    int llama_date;        /* Llama 3: 0 no system block (3.0), 1 the literal date, 2 today */
    char date[32];         /* Llama 3.1+: the literal date_string */
    int mistral_space;     /* Mistral: 1 "[INST] " and " " + trim(answer) (v0.3), 0 "[INST]" */
    char qsys[512];        /* Qwen with tools: the default system message ("" = none) */
    chatml c;              /* F_CHATML */
} fam;

static int has(const char *t, const char *m) { return strstr(t, m) != NULL; }

/* The literal after `key` up to the closing quote (Jinja escapes \n, \\, \', \" decoded) into
 * out[cap]; 0 when absent or too long. */
static int literal_after(const char *t, const char *key, char *out, size_t cap) {
    const char *p = strstr(t, key);
    if (!p) return 0;
    p += strlen(key);
    char q = p[-1];
    size_t n = 0;
    while (*p && *p != q) {
        char c = *p++;
        if (c == '\\' && *p) {
            c = *p++;
            c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
        }
        if (n + 1 >= cap) return 0;
        out[n++] = c;
    }
    out[n] = 0;
    return *p == q;
}

static attn_status recognise(attn_ctx *ctx, const char *t, fam *f) {
    memset(f, 0, sizeof *f);
    ATTN_FAIL_IF(!t || !t[0], ctx, ATTN_E_UNSUPPORTED, "the model has no chat template");
    if (has(t, "<start_of_turn>") && has(t, "<end_of_turn>")) {
        f->kind = F_GEMMA, f->name = "gemma";
        ATTN_FAIL_IF(!has(t, "\"model\"") && !has(t, "'model'"), ctx, ATTN_E_UNSUPPORTED,
                     "chat template: a Gemma template (<start_of_turn>) without the 'model' "
                     "role: a variant attn does not know");
        if (has(t, "first_user_prefix")) f->gemma_sys = 1;
        else if (!has(t, "System role not supported"))
            return attn__fail(ctx, ATTN_E_UNSUPPORTED,
                              "chat template: a Gemma template (<start_of_turn>) whose system "
                              "message handling attn does not know");
        return ATTN_OK;
    }
    if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>") && has(t, "<|eot_id|>")) {
        f->kind = F_LLAMA3, f->name = "llama3";
        if (has(t, "Cutting Knowledge Date: December 2023")) {
            f->name = "llama3.1";
            if (has(t, "strftime_now")) f->llama_date = 2;
            else if (literal_after(t, "set date_string = \"", f->date, sizeof f->date) ||
                     literal_after(t, "set date_string = '", f->date, sizeof f->date))
                f->llama_date = 1;
            else
                return attn__fail(ctx, ATTN_E_UNSUPPORTED,
                                  "chat template: a Llama 3.1 template without a date_string "
                                  "attn can read");
        } else if (has(t, "Cutting Knowledge") || has(t, "Environment: ipython") ||
                   has(t, "<|python_tag|>")) {
            return attn__fail(ctx, ATTN_E_UNSUPPORTED, "chat template: a Llama 3 template of a "
                                                       "variant attn does not know");
        }
        return ATTN_OK;
    }
    if (has(t, "[INST]") && has(t, "[/INST]")) {
        f->kind = F_MISTRAL, f->name = "mistral";
        ATTN_FAIL_IF(has(t, "[SYSTEM_PROMPT]"), ctx, ATTN_E_UNSUPPORTED,
                     "chat template: Mistral's [SYSTEM_PROMPT] format (Mistral Small 3, "
                     "Devstral) is not supported yet");
        if (has(t, "\"[INST] \" + message[\"content\"] + \"[/INST]\"") &&
            has(t, "message == user_messages[-1]") &&
            has(t, "\" \" + message[\"content\"]|trim + eos_token"))
            f->mistral_space = 1, f->name = "mistral-v3";
        else if (has(t, "\"[INST]\" + message[\"content\"] + \"[/INST]\"") &&
                 has(t, "loop.last and system_message is defined"))
            f->mistral_space = 0, f->name = "mistral-tekken";
        else
            return attn__fail(ctx, ATTN_E_UNSUPPORTED,
                              "chat template: a Mistral [INST] template of a variant attn does "
                              "not know");
        return ATTN_OK;
    }
    attn_status st = parse_template(ctx, t, &f->c);
    if (st == ATTN_OK) {
        f->kind = F_CHATML, f->name = "chatml";
        return ATTN_OK;
    }
    if (has(t, "<|im_start|>") && has(t, "<|im_end|>") && has(t, "tools")) {
        if (has(t, "reasoning_content") && has(t, "</think>")) {
            f->kind = F_QWEN3, f->name = "qwen3";
            return ATTN_OK;
        }
        if (has(t, "<tool_call>") && has(t, "message.tool_calls")) {
            f->kind = F_QWEN, f->name = "qwen";
            /* the default system message: a literal '<|im_start|>system\nTEXT<|im_end|>\n' */
            for (const char *p = t; (p = strstr(p, "'<|im_start|>system\\n")) != NULL; p++) {
                char lit[sizeof f->qsys];
                if (!literal_after(p, "'", lit, sizeof lit)) continue;
                size_t n = strlen(lit), k = strlen("<|im_end|>\n");
                if (n > 19 + k && !strcmp(lit + n - k, "<|im_end|>\n")) {
                    memcpy(f->qsys, lit + 19, n - 19 - k);
                    f->qsys[n - 19 - k] = 0;
                    break;
                }
            }
            return ATTN_OK;
        }
    }
    return st;
}

static void fam_free(attn_ctx *ctx, fam *f) {
    if (f->kind == F_CHATML)
        expr_free(ctx, &f->c.sys), expr_free(ctx, &f->c.msg), expr_free(ctx, &f->c.gen);
}

static void puts0(out_buf *o, const char *s) { put(o, s, strlen(s)); }

/* Python's str.isspace() of the code point at s[0..n): its length in bytes, else 0. */
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

/* Jinja's trim (Python's strip()): *b, *e bound what is left of s. */
static void trim(const char *s, size_t *b, size_t *e) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, n = strlen(s), k;
    while (i < n && (k = space_at(u + i, n - i))) i += k;
    while (n > i) {
        size_t st = cp_start(u, n);
        if (st < i || space_at(u + st, n - st) != n - st) break;
        n = st;
    }
    *b = i, *e = n;
}

static void put_trim(out_buf *o, const char *s) {
    size_t b, e;
    trim(s, &b, &e);
    put(o, s + b, e - b);
}

/* One turn of the header formats (Gemma, Llama 3): open role mid [lead "\n\n"]
 * trim(content) close; lead NULL: none. */
static void put_turn(out_buf *o, const char *open, const char *role, const char *mid,
                     const char *lead, const char *content, const char *close) {
    puts0(o, open), puts0(o, role), puts0(o, mid);
    if (lead) puts0(o, lead), puts0(o, "\n\n");
    put_trim(o, content);
    puts0(o, close);
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

/* "25 Nov 2026": strftime("%d %b %Y") of the local date in the C locale, as transformers'
 * strftime_now gives Llama 3.2's template. */
static void today(char *out, size_t cap) {
    static const char mon[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    time_t now = time(NULL);
    struct tm tmv;
    if (!localtime_r(&now, &tmv)) memset(&tmv, 0, sizeof tmv);
    snprintf(out, cap, "%02d %s %04d", tmv.tm_mday, mon[tmv.tm_mon % 12], tmv.tm_year + 1900);
}

static attn_status need_token(attn_ctx *ctx, const char *tok, const char *which,
                              const char *name) {
    ATTN_FAIL_IF(!tok, ctx, ATTN_E_INVALID,
                 "attn_chat_render: the %s template writes the %s token: pass its text "
                 "(attn_llm_chat_format does)", name, which);
    return ATTN_OK;
}

/* Roles must alternate user/assistant/... from the first message (Gemma, Mistral). */
static attn_status alternate(attn_ctx *ctx, const attn_chat_message *m, int64_t n,
                             const char *name) {
    for (int64_t i = 0; i < n; i++) {
        ATTN_FAIL_IF(!is_role(&m[i], "user") && !is_role(&m[i], "assistant"), ctx,
                     ATTN_E_INVALID, "chat (%s): message %lld has the role \"%s\": after an "
                     "optional first system message, only user and assistant", name,
                     (long long)i, m[i].role);
        ATTN_FAIL_IF(is_role(&m[i], "user") != (i % 2 == 0), ctx, ATTN_E_INVALID,
                     "chat (%s): the roles must alternate user/assistant/user/... (message "
                     "%lld is \"%s\")", name, (long long)i, m[i].role);
    }
    return ATTN_OK;
}

static attn_status render(attn_ctx *ctx, const fam *f, const char *bos, const char *eos,
                          const attn_chat_message *msgs, int64_t n, int gen, out_buf *o) {
    int64_t first = n > 0 && is_role(&msgs[0], "system");
    const char *sys = first ? msgs[0].content : NULL;
    /* the templates that read messages[0] fail on no messages (Llama 3.0's writes nothing) */
    ATTN_FAIL_IF(n == 0 && f->kind != F_CHATML && !(f->kind == F_LLAMA3 && !f->llama_date), ctx,
                 ATTN_E_INVALID, "chat (%s): no messages", f->name);
    if (f->kind != F_CHATML)
        for (int64_t i = 0; i < n; i++)
            ATTN_FAIL_IF(!is_role(&msgs[i], "system") && !is_role(&msgs[i], "user") &&
                             !is_role(&msgs[i], "assistant"), ctx, ATTN_E_INVALID,
                         "chat (%s): message %lld has the role \"%s\" (system, user or "
                         "assistant)", f->name, (long long)i, msgs[i].role);
    switch (f->kind) {
    case F_CHATML:
        for (int64_t i = 0; i < n; i++) {
            if (i == 0 && f->c.sys.np && !first) put(o, f->c.sys.p[0].lit, f->c.sys.p[0].n);
            put_expr(o, &f->c.msg, &msgs[i]);
        }
        if (gen && f->c.gen.np) put(o, f->c.gen.p[0].lit, f->c.gen.p[0].n);
        return ATTN_OK;
    case F_QWEN:
    case F_QWEN3: {
        if (first) {
            puts0(o, "<|im_start|>system\n"), puts0(o, sys), puts0(o, "<|im_end|>\n");
        } else if (f->kind == F_QWEN && f->qsys[0]) {
            puts0(o, "<|im_start|>system\n"), puts0(o, f->qsys), puts0(o, "<|im_end|>\n");
        }
        int64_t lastq = n - 1; /* Qwen3: the last user message not wrapped as a tool response */
        for (int64_t i = n - 1; i >= 0; i--) {
            const char *c = msgs[i].content;
            size_t cl = strlen(c);
            int wrapped = cl >= 15 && !strncmp(c, "<tool_response>", 15) && cl >= 16 &&
                          !strcmp(c + cl - 16, "</tool_response>");
            if (is_role(&msgs[i], "user") && !wrapped) {
                lastq = i;
                break;
            }
        }
        for (int64_t i = first; i < n; i++) {
            const attn_chat_message *m = &msgs[i];
            puts0(o, "<|im_start|>"), puts0(o, m->role), puts0(o, "\n");
            if (f->kind == F_QWEN3 && is_role(m, "assistant")) {
                const char *c = m->content;
                size_t len = strlen(c), cb = 0, ce = len, rb = 0, re = 0;
                size_t close_last = find_in(c, 0, len, "</think>", 1);
                if (close_last != SIZE_MAX) {
                    cb = close_last + 8;
                    lstrip_nl(c, &cb, ce);
                    size_t close_first = find_in(c, 0, len, "</think>", 0);
                    re = close_first;
                    rstrip_nl(c, 0, &re);
                    size_t open = find_in(c, 0, re, "<think>", 1);
                    rb = open == SIZE_MAX ? 0 : open + 7;
                    lstrip_nl(c, &rb, re);
                }
                if (i > lastq && (i == n - 1 || re > rb)) {
                    size_t sb = rb, se = re; /* reasoning.strip('\n') */
                    lstrip_nl(c, &sb, se), rstrip_nl(c, sb, &se);
                    puts0(o, "<think>\n"), put(o, c + sb, se - sb), puts0(o, "\n</think>\n\n");
                    lstrip_nl(c, &cb, ce);
                }
                put(o, c + cb, ce - cb);
            } else {
                puts0(o, m->content);
            }
            puts0(o, "<|im_end|>\n");
        }
        if (gen) puts0(o, "<|im_start|>assistant\n");
        return ATTN_OK;
    }
    case F_GEMMA: {
        ATTN_TRY(need_token(ctx, bos, "bos", f->name));
        ATTN_FAIL_IF(first && !f->gemma_sys, ctx, ATTN_E_INVALID,
                     "chat (gemma): this template does not take a system message");
        ATTN_TRY(alternate(ctx, msgs + first, n - first, f->name));
        puts0(o, bos);
        for (int64_t i = first; i < n; i++)
            put_turn(o, "<start_of_turn>",
                     is_role(&msgs[i], "assistant") ? "model" : msgs[i].role, "\n",
                     i == first ? sys : NULL, msgs[i].content, "<end_of_turn>\n");
        if (gen) puts0(o, "<start_of_turn>model\n");
        return ATTN_OK;
    }
    case F_LLAMA3: {
        ATTN_TRY(need_token(ctx, bos, "bos", f->name));
        int64_t i0 = 0;
        if (n > 0) puts0(o, bos);
        if (f->llama_date) {
            char d[32];
            if (f->llama_date == 2) today(d, sizeof d);
            else snprintf(d, sizeof d, "%s", f->date);
            puts0(o, "<|start_header_id|>system<|end_header_id|>\n\n");
            puts0(o, "Cutting Knowledge Date: December 2023\nToday Date: "), puts0(o, d);
            puts0(o, "\n\n");
            if (sys) put_trim(o, sys);
            puts0(o, "<|eot_id|>");
            i0 = first;
        }
        for (int64_t i = i0; i < n; i++)
            put_turn(o, "<|start_header_id|>", msgs[i].role, "<|end_header_id|>\n\n", NULL,
                     msgs[i].content, "<|eot_id|>");
        if (gen) puts0(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        return ATTN_OK;
    }
    case F_MISTRAL: {
        ATTN_TRY(need_token(ctx, bos, "bos", f->name));
        ATTN_TRY(need_token(ctx, eos, "eos", f->name));
        ATTN_TRY(alternate(ctx, msgs + first, n - first, f->name));
        int64_t lastu = -1;
        for (int64_t i = first; i < n; i++)
            if (is_role(&msgs[i], "user")) lastu = i;
        puts0(o, bos);
        for (int64_t i = first; i < n; i++) {
            const attn_chat_message *m = &msgs[i];
            if (is_role(m, "user")) {
                /* v0.3: every user message equal to the last one (the template compares the
                 * messages); tekken: the last message, when it is a user's */
                int with_sys = sys && (f->mistral_space
                                           ? !strcmp(m->content, msgs[lastu].content)
                                           : i == n - 1);
                puts0(o, f->mistral_space ? "[INST] " : "[INST]");
                if (with_sys) puts0(o, sys), puts0(o, "\n\n");
                puts0(o, m->content), puts0(o, "[/INST]");
            } else if (f->mistral_space) {
                puts0(o, " "), put_trim(o, m->content), puts0(o, eos);
            } else {
                puts0(o, m->content), puts0(o, eos);
            }
        }
        return ATTN_OK;
    }
    }
    return ATTN_OK;
}

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

attn_status attn_chat_render(attn_ctx *ctx, const char *tmpl, const char *bos_token,
                             const char *eos_token, const attn_chat_message *msgs, int64_t n,
                             int add_generation_prompt, char *buf, size_t cap, size_t *len) {
    ATTN_FAIL_IF(!ctx, ctx, ATTN_E_INVALID, "attn_chat_render: ctx is NULL");
    ATTN_FAIL_IF(n < 0 || (n > 0 && !msgs) || !len || (cap > 0 && !buf), ctx, ATTN_E_INVALID,
                 "attn_chat_format: %s",
                 n < 0 ? "n is negative" : !len ? "len is NULL" : cap > 0 && !buf ?
                 "buf is NULL with cap > 0" : "msgs is NULL");
    for (int64_t i = 0; i < n; i++)
        ATTN_FAIL_IF(!msgs[i].role || !msgs[i].content, ctx, ATTN_E_INVALID,
                     "attn_chat_format: message %lld has a NULL %s", (long long)i,
                     msgs[i].role ? "content" : "role");
    fam f;
    ATTN_TRY(recognise(ctx, tmpl, &f));
    out_buf o = {buf, cap, 0, 0};
    attn_status st = render(ctx, &f, bos_token, eos_token, msgs, n, add_generation_prompt, &o);
    fam_free(ctx, &f);
    ATTN_TRY(st);
    ATTN_FAIL_IF(o.overflow || o.len == SIZE_MAX, ctx, ATTN_E_OVERFLOW,
                 "attn_chat_format: the conversation is too long");
    *len = o.len;
    if (cap > 0) buf[o.len < cap ? o.len : cap - 1] = 0;
    return ATTN_OK;
}

attn_status attn_chat_format(attn_ctx *ctx, const char *tmpl, const attn_chat_message *msgs,
                             int64_t n, int add_generation_prompt, char *buf, size_t cap,
                             size_t *len) {
    return attn_chat_render(ctx, tmpl, NULL, NULL, msgs, n, add_generation_prompt, buf, cap,
                            len);
}
