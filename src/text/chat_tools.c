/* Tool calls out of a model's answer (attn_chat_parse_tool_calls, attn_chat_tool_call_start):
 * the forms the chat formats' templates write for an assistant's calls, read back.  Contract:
 * attn.h.
 *
 *   qwen, qwen3         CONTENT <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call> ...
 *                       (qwen3: looked for after the last </think>)
 *   llama3.1            the whole answer {"name": N, "parameters": {...}} (an optional
 *                       <|python_tag|> first; "arguments" taken for "parameters")
 *   mistral-v3, mistral-tekken   CONTENT [TOOL_CALLS] [{"name": N, "arguments": {...}, "id": I},
 *                       ...]
 *   mistral-small3.2    CONTENT [TOOL_CALLS]N[CALL_ID]I[ARGS]{...} ... ([CALL_ID] optional)
 *   ministral3          CONTENT [TOOL_CALLS]N[ARGS]{...} ...
 * The calls must run to the end of the answer (whitespace between and after them allowed);
 * anything else -- JSON that does not parse, a call without a name or with arguments that are
 * not an object, text after the calls -- leaves the whole answer as content. */
#include <stdlib.h>
#include <string.h>

#include "../io/json.h"
#include "chat_json.h"
#include "internal.h"

typedef enum {
    TF_NONE,      /* a format whose template writes no tool calls */
    TF_QWEN,      /* qwen */
    TF_QWEN3,     /* qwen3 */
    TF_LLAMA,     /* llama3.1 */
    TF_MISTRAL,   /* mistral-v3, mistral-tekken: a JSON array after [TOOL_CALLS] */
    TF_SMALL,     /* mistral-small3.2: name[CALL_ID]id[ARGS]{...} */
    TF_MINISTRAL, /* ministral3: name[ARGS]{...} */
    TF_UNKNOWN
} tform;

static tform form_of(const char *format) {
    static const struct {
        const char *name;
        tform f;
    } t[] = {{"chatml", TF_NONE},          {"gemma", TF_NONE},
             {"llama3", TF_NONE},          {"mistral-v7", TF_NONE},
             {"qwen", TF_QWEN},            {"qwen3", TF_QWEN3},
             {"llama3.1", TF_LLAMA},       {"mistral-v3", TF_MISTRAL},
             {"mistral-tekken", TF_MISTRAL}, {"mistral-small3.2", TF_SMALL},
             {"ministral3", TF_MINISTRAL}};
    if (!format) return TF_UNKNOWN;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(format, t[i].name)) return t[i].f;
    return TF_UNKNOWN;
}

static const char QWEN_OPEN[] = "<tool_call>", QWEN_CLOSE[] = "</tool_call>";
static const char MISTRAL_OPEN[] = "[TOOL_CALLS]";
static const char PYTHON_TAG[] = "<|python_tag|>";

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static size_t skip_ws(const char *s, size_t i, size_t len) {
    while (i < len && is_ws(s[i])) i++;
    return i;
}

/* The first offset >= from where m[0, k) occurs in s[0, len), or SIZE_MAX. */
static size_t find(const char *s, size_t from, size_t len, const char *m, size_t k) {
    if (k == 0 || len < k) return SIZE_MAX;
    for (size_t i = from; i + k <= len; i++)
        if (s[i] == m[0] && !memcmp(s + i, m, k)) return i;
    return SIZE_MAX;
}

/* Where the search for calls begins: qwen3 after the last </think> (a reasoning block may
 * mention a call's tag), SIZE_MAX while the answer is a <think> block not yet closed (all
 * reasoning), else 0. */
static size_t search_from(tform f, const char *s, size_t len) {
    if (f != TF_QWEN3) return 0;
    size_t at = 0;
    for (size_t p = 0; (p = find(s, p, len, "</think>", 8)) != SIZE_MAX; p += 8) at = p + 8;
    if (at == 0) {
        const size_t i = skip_ws(s, 0, len);
        if (len - i >= 7 && !memcmp(s + i, "<think>", 7)) return SIZE_MAX;
    }
    return at;
}

/* s[0, end) without its trailing whitespace: the new end. */
static size_t rtrim(const char *s, size_t end) {
    while (end > 0 && is_ws(s[end - 1])) end--;
    return end;
}

/* ---- the result being built -------------------------------------------------------------- */
typedef struct pcall {
    size_t name, args, id; /* offsets into the byte buffer; SIZE_MAX: no id */
} pcall;

typedef struct pbuild {
    attn_ctx *ctx;
    char *b; /* the strings, each NUL-terminated */
    size_t n, cap;
    pcall *c;
    size_t nc, ccap;
    int oom;
} pbuild;

static void pb_put(void *o, const char *s, size_t k) {
    pbuild *p = o;
    if (p->oom) return;
    size_t need;
    if (!attn__add_size(p->n, k, &need) || !attn__add_size(need, 1, &need)) {
        p->oom = 1;
        return;
    }
    if (need > p->cap) {
        size_t cap = p->cap ? p->cap : 256;
        while (cap < need) {
            if (cap > SIZE_MAX / 2) {
                p->oom = 1;
                return;
            }
            cap *= 2;
        }
        char *nb = attn__malloc(p->ctx, cap);
        if (!nb) {
            p->oom = 1;
            return;
        }
        if (p->n) memcpy(nb, p->b, p->n);
        attn__free(p->ctx, p->b);
        p->b = nb, p->cap = cap;
    }
    memcpy(p->b + p->n, s, k);
    p->n += k;
}

/* Ends the string begun at the current length: its NUL. */
static size_t pb_end(pbuild *p, size_t start) {
    pb_put(p, "", 1);
    return start;
}

static int pb_call(pbuild *p) {
    if (p->oom) return 0;
    if (!attn__grow(p->ctx, (void **)&p->c, &p->ccap, p->nc, sizeof *p->c)) {
        p->oom = 1;
        return 0;
    }
    p->c[p->nc].name = p->c[p->nc].args = p->c[p->nc].id = SIZE_MAX;
    p->nc++;
    return 1;
}

/* A name or id written as plain text (Mistral Small 3.2, Ministral 3): not empty, valid UTF-8,
 * no whitespace, control characters or brackets. */
static int plain_ok(const char *s, size_t n) {
    if (n == 0 || !attn__json_utf8_valid(s, n)) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x21 || c == 0x7f || c == '[' || c == ']' || c == '{' || c == '}') return 0;
    }
    return 1;
}

/* A call's parts from a parsed object: name (a non-empty string) and arguments (an object)
 * under the key args_key (or alt_key when given and args_key is absent); id: a string when
 * want_id and present.  1 when the call is well formed (and recorded). */
static int json_call(pbuild *p, const attn__cj *o, const char *args_key, const char *alt_key,
                     int want_id) {
    if (!o || o->kind != CJ_OBJ) return 0;
    const attn__cj *name = attn__cj_get(o, "name"), *args = attn__cj_get(o, args_key);
    if (!args && alt_key) args = attn__cj_get(o, alt_key);
    else if (args && alt_key && attn__cj_get(o, alt_key)) return 0; /* both: which one? */
    const attn__cj *id = want_id ? attn__cj_get(o, "id") : NULL;
    if (!name || name->kind != CJ_STR || name->n == 0 || !args || args->kind != CJ_OBJ)
        return 0;
    if (id && id->kind != CJ_STR && id->kind != CJ_NULL) return 0;
    if (!pb_call(p)) return 0;
    pcall *c = &p->c[p->nc - 1];
    size_t at = p->n;
    pb_put(p, name->s, name->n);
    c->name = pb_end(p, at);
    at = p->n;
    attn__cj_dump(args, -1, pb_put, p);
    c->args = pb_end(p, at);
    if (id && id->kind == CJ_STR && id->n > 0) {
        at = p->n;
        pb_put(p, id->s, id->n);
        c->id = pb_end(p, at);
    }
    return !p->oom;
}

/* One JSON value at s[at, len) into doc; 1 and *end on success. */
static int json_at(pbuild *p, const char *s, size_t at, size_t len, attn__cj_doc *doc,
                   size_t *end) {
    attn_status st = attn__cj_parse_prefix(p->ctx, s + at, len - at, "a tool call", doc, end);
    if (st == ATTN_E_NOMEM) p->oom = 1;
    *end += at;
    return st == ATTN_OK;
}

/* The calls from s[at, len) on, in form f; 1 when they are well formed and run to the end. */
static int calls_from(pbuild *p, tform f, const char *s, size_t at, size_t len) {
    attn__cj_doc doc;
    size_t end;
    switch (f) {
    case TF_QWEN:
    case TF_QWEN3:
        do {
            const size_t k = sizeof QWEN_OPEN - 1, kc = sizeof QWEN_CLOSE - 1;
            if (len - at < k || memcmp(s + at, QWEN_OPEN, k)) return 0;
            if (!json_at(p, s, at + k, len, &doc, &end)) return attn__cj_free(p->ctx, &doc), 0;
            int ok = json_call(p, doc.root, "arguments", NULL, 0);
            attn__cj_free(p->ctx, &doc);
            if (!ok) return 0;
            at = skip_ws(s, end, len);
            if (len - at < kc || memcmp(s + at, QWEN_CLOSE, kc)) return 0;
            at = skip_ws(s, at + kc, len);
        } while (at < len);
        return 1;
    case TF_LLAMA: {
        at = skip_ws(s, at, len);
        const size_t k = sizeof PYTHON_TAG - 1;
        if (len - at >= k && !memcmp(s + at, PYTHON_TAG, k)) at += k;
        if (!json_at(p, s, at, len, &doc, &end)) return attn__cj_free(p->ctx, &doc), 0;
        int ok = json_call(p, doc.root, "parameters", "arguments", 0);
        attn__cj_free(p->ctx, &doc);
        return ok && skip_ws(s, end, len) == len;
    }
    case TF_MISTRAL: {
        const size_t k = sizeof MISTRAL_OPEN - 1;
        if (len - at < k || memcmp(s + at, MISTRAL_OPEN, k)) return 0;
        if (!json_at(p, s, at + k, len, &doc, &end)) return attn__cj_free(p->ctx, &doc), 0;
        int ok = doc.root->kind == CJ_ARR && doc.root->count > 0;
        for (const attn__cj *c = ok ? doc.root->first : NULL; c && ok; c = c->next)
            ok = json_call(p, c, "arguments", NULL, 1);
        attn__cj_free(p->ctx, &doc);
        return ok && skip_ws(s, end, len) == len;
    }
    case TF_SMALL:
    case TF_MINISTRAL:
        do {
            const size_t k = sizeof MISTRAL_OPEN - 1;
            if (len - at < k || memcmp(s + at, MISTRAL_OPEN, k)) return 0;
            at += k;
            const size_t a = find(s, at, len, "[ARGS]", 6);
            if (a == SIZE_MAX) return 0;
            size_t name_end = a, id_at = SIZE_MAX;
            if (f == TF_SMALL) {
                const size_t ci = find(s, at, a, "[CALL_ID]", 9);
                if (ci != SIZE_MAX) name_end = ci, id_at = ci + 9;
            }
            if (!plain_ok(s + at, name_end - at)) return 0;
            if (id_at != SIZE_MAX && !plain_ok(s + id_at, a - id_at)) return 0;
            if (!json_at(p, s, a + 6, len, &doc, &end)) return attn__cj_free(p->ctx, &doc), 0;
            int ok = doc.root->kind == CJ_OBJ && pb_call(p);
            if (ok) {
                pcall *c = &p->c[p->nc - 1];
                size_t b0 = p->n;
                pb_put(p, s + at, name_end - at);
                c->name = pb_end(p, b0);
                b0 = p->n;
                attn__cj_dump(doc.root, -1, pb_put, p);
                c->args = pb_end(p, b0);
                if (id_at != SIZE_MAX) {
                    b0 = p->n;
                    pb_put(p, s + id_at, a - id_at);
                    c->id = pb_end(p, b0);
                }
                ok = !p->oom;
            }
            attn__cj_free(p->ctx, &doc);
            if (!ok) return 0;
            at = skip_ws(s, end, len);
        } while (at < len);
        return 1;
    default:
        return 0;
    }
}

/* Where the calls may begin in form f: the opener's first place (from `from`), SIZE_MAX when
 * there is none (llama3.1: the answer's first non-blank byte). */
static size_t opener_at(tform f, const char *s, size_t from, size_t len) {
    switch (f) {
    case TF_QWEN:
    case TF_QWEN3: return find(s, from, len, QWEN_OPEN, sizeof QWEN_OPEN - 1);
    case TF_MISTRAL:
    case TF_SMALL:
    case TF_MINISTRAL: return find(s, from, len, MISTRAL_OPEN, sizeof MISTRAL_OPEN - 1);
    case TF_LLAMA: return 0;
    default: return SIZE_MAX;
    }
}

/* ---- the result ------------------------------------------------------------------------- */
typedef struct parse_impl {
    attn_chat_parse pub; /* first: the caller's pointer is this one */
    attn_free_fn free;
    void *alloc_user;
} parse_impl;

attn_status attn_chat_parse_tool_calls(attn_ctx *ctx, const char *format, const char *text,
                                       size_t len, attn_chat_parse **out) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!out, ctx, ATTN_E_INVALID, "attn_chat_parse_tool_calls: out is NULL");
    *out = NULL;
    ATTN_FAIL_IF(!text && len > 0, ctx, ATTN_E_INVALID,
                 "attn_chat_parse_tool_calls: text is NULL");
    const tform f = form_of(format);
    ATTN_FAIL_IF(f == TF_UNKNOWN, ctx, ATTN_E_INVALID,
                 "attn_chat_parse_tool_calls: unknown chat format \"%.64s\" (the names "
                 "attn_chat_template_name gives)", format ? format : "(null)");
    const int64_t lim = attn_ctx_limit(ctx, ATTN_LIMIT_TEXT_BYTES);
    ATTN_FAIL_IF((uint64_t)len > (uint64_t)lim, ctx, ATTN_E_UNSUPPORTED,
                 "attn_chat_parse_tool_calls: a text of %zu bytes is over ATTN_LIMIT_TEXT_BYTES "
                 "(%lld)", len, (long long)lim);
    if (!text) text = "";
    /* failed attempts leave their messages in ctx: the caller's call succeeds, so put back
     * what ctx held before */
    const attn_status saved_st = ctx->status;
    char saved_msg[ATTN__MSG_MAX];
    memcpy(saved_msg, ctx->msg, sizeof saved_msg);
    pbuild p;
    memset(&p, 0, sizeof p);
    p.ctx = ctx;
    size_t content_end = len;
    const size_t from = search_from(f, text, len);
    const size_t at = from == SIZE_MAX ? SIZE_MAX : opener_at(f, text, from, len);
    if (at != SIZE_MAX && calls_from(&p, f, text, at, len) && !p.oom) {
        content_end = rtrim(text, at);
    } else {
        p.nc = 0;
    }
    attn_status st = ATTN_OK;
    if (p.oom) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "attn_chat_parse_tool_calls: out of memory");
        goto done;
    }
    ctx->status = saved_st;
    memcpy(ctx->msg, saved_msg, sizeof saved_msg);
    /* one block: the header, the calls, the content and the strings */
    size_t size = sizeof(parse_impl), calls_at, text_at, tmp;
    if (!attn__mul_size(p.nc, sizeof(attn_chat_tool_call), &tmp) ||
        !attn__add_size(size, tmp, &size)) {
        st = attn__fail(ctx, ATTN_E_OVERFLOW, "attn_chat_parse_tool_calls: too many calls");
        goto done;
    }
    calls_at = sizeof(parse_impl);
    text_at = size;
    if (!attn__add_size(size, content_end, &size) || !attn__add_size(size, 1, &size) ||
        !attn__add_size(size, p.n, &size)) {
        st = attn__fail(ctx, ATTN_E_OVERFLOW, "attn_chat_parse_tool_calls: text too large");
        goto done;
    }
    char *blk = attn__malloc(ctx, size);
    if (!blk) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "attn_chat_parse_tool_calls: out of memory");
        goto done;
    }
    parse_impl *r = (parse_impl *)(void *)blk;
    attn_chat_tool_call *calls = (attn_chat_tool_call *)(void *)(blk + calls_at);
    char *content = blk + text_at, *strs = content + content_end + 1;
    if (content_end) memcpy(content, text, content_end);
    content[content_end] = 0;
    if (p.n) memcpy(strs, p.b, p.n);
    for (size_t i = 0; i < p.nc; i++) {
        calls[i].name = strs + p.c[i].name;
        calls[i].arguments = strs + p.c[i].args;
        calls[i].id = p.c[i].id == SIZE_MAX ? NULL : strs + p.c[i].id;
    }
    r->pub.content = content;
    r->pub.content_len = content_end;
    r->pub.n_calls = (int64_t)p.nc;
    r->pub.calls = p.nc ? calls : NULL;
    r->free = ctx->free;
    r->alloc_user = ctx->alloc_user;
    *out = &r->pub;
done:
    attn__free(ctx, p.b);
    attn__free(ctx, p.c);
    return st;
}

void attn_chat_parse_free(attn_chat_parse *p) {
    if (!p) return;
    parse_impl *r = (parse_impl *)(void *)p;
    r->free(r->alloc_user, r);
}

size_t attn_chat_tool_call_start(const char *format, const char *text, size_t len) {
    const tform f = form_of(format);
    if (f == TF_NONE || f == TF_UNKNOWN || (!text && len > 0)) return len;
    if (f == TF_LLAMA) { /* the answer is a call or not one: decided at its first bytes */
        const size_t i = skip_ws(text, 0, len), k = sizeof PYTHON_TAG - 1;
        if (i == len || text[i] == '{') return 0;
        const size_t m = len - i < k ? len - i : k;
        return memcmp(text + i, PYTHON_TAG, m) ? len : 0;
    }
    const char *open = f == TF_QWEN || f == TF_QWEN3 ? QWEN_OPEN : MISTRAL_OPEN;
    const size_t k = strlen(open), from = search_from(f, text, len);
    if (from == SIZE_MAX) return len;
    size_t at = opener_at(f, text, from, len);
    if (at == SIZE_MAX) { /* the longest end of the text that begins the opener */
        at = len;
        for (size_t m = k - 1; m > 0; m--)
            if (m <= len - from && !memcmp(text + len - m, open, m)) {
                at = len - m;
                break;
            }
    }
    /* the blanks before it too: the content ends without them when a call follows */
    size_t b = at;
    while (b > from && is_ws(text[b - 1])) b--;
    return b;
}
