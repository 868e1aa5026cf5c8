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

/* The result of a parse: content text[0, content_end) and p's calls, in one block. */
static attn_status build_result(attn_ctx *ctx, const pbuild *p, const char *text,
                                size_t content_end, attn_chat_parse **out) {
    const char *fn = "attn_chat_parse_tool_calls";
    size_t size = sizeof(parse_impl), calls_at, text_at, tmp;
    ATTN_FAIL_IF(!attn__mul_size(p->nc, sizeof(attn_chat_tool_call), &tmp) ||
                     !attn__add_size(size, tmp, &size),
                 ctx, ATTN_E_OVERFLOW, "%s: too many calls", fn);
    calls_at = sizeof(parse_impl);
    text_at = size;
    ATTN_FAIL_IF(!attn__add_size(size, content_end, &size) || !attn__add_size(size, 1, &size) ||
                     !attn__add_size(size, p->n, &size),
                 ctx, ATTN_E_OVERFLOW, "%s: text too large", fn);
    char *blk = attn__malloc(ctx, size);
    ATTN_FAIL_IF(!blk, ctx, ATTN_E_NOMEM, "%s: out of memory", fn);
    parse_impl *r = (parse_impl *)(void *)blk;
    attn_chat_tool_call *calls = (attn_chat_tool_call *)(void *)(blk + calls_at);
    char *content = blk + text_at, *strs = content + content_end + 1;
    if (content_end) memcpy(content, text, content_end);
    content[content_end] = 0;
    if (p->n) memcpy(strs, p->b, p->n);
    for (size_t i = 0; i < p->nc; i++) {
        calls[i].name = strs + p->c[i].name;
        calls[i].arguments = p->c[i].args == SIZE_MAX ? "" : strs + p->c[i].args;
        calls[i].id = p->c[i].id == SIZE_MAX ? NULL : strs + p->c[i].id;
    }
    r->pub.content = content;
    r->pub.content_len = content_end;
    r->pub.n_calls = (int64_t)p->nc;
    r->pub.calls = p->nc ? calls : NULL;
    r->free = ctx->free;
    r->alloc_user = ctx->alloc_user;
    *out = &r->pub;
    return ATTN_OK;
}

/* The checks both parses make; ATTN_OK and the form in *f. */
static attn_status parse_args(attn_ctx *ctx, const char *fn, const char *format,
                              const char *text, size_t len, attn_chat_parse **out, tform *f) {
    ATTN_FAIL_IF(!out, ctx, ATTN_E_INVALID, "%s: out is NULL", fn);
    *out = NULL;
    ATTN_FAIL_IF(!text && len > 0, ctx, ATTN_E_INVALID, "%s: text is NULL", fn);
    *f = form_of(format);
    ATTN_FAIL_IF(*f == TF_UNKNOWN, ctx, ATTN_E_INVALID,
                 "%s: unknown chat format \"%.64s\" (the names attn_chat_template_name gives)",
                 fn, format ? format : "(null)");
    const int64_t lim = attn_ctx_limit(ctx, ATTN_LIMIT_TEXT_BYTES);
    ATTN_FAIL_IF((uint64_t)len > (uint64_t)lim, ctx, ATTN_E_UNSUPPORTED,
                 "%s: a text of %zu bytes is over ATTN_LIMIT_TEXT_BYTES (%lld)", fn, len,
                 (long long)lim);
    return ATTN_OK;
}

static attn_status parse_calls(attn_ctx *ctx, const char *fn, const char *format,
                               const char *text, size_t len, int partial, attn_chat_parse **out);

attn_status attn_chat_parse_tool_calls(attn_ctx *ctx, const char *format, const char *text,
                                       size_t len, attn_chat_parse **out) {
    if (!ctx) return ATTN_E_INVALID;
    return parse_calls(ctx, "attn_chat_parse_tool_calls", format, text, len, 0, out);
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

/* ---- streaming: what an answer still being written settles of its calls ----------------- */
enum { P_BAD = -1, P_MORE = 0, P_DONE = 1 };

/* ws (when asked) then the text m: P_DONE with *at past it, P_MORE when the text ends inside
 * it, P_BAD when something else is there. */
static int lit(const char *s, size_t *at, size_t len, const char *m, int ws) {
    const size_t i = ws ? skip_ws(s, *at, len) : *at, k = strlen(m);
    const size_t have = len - i < k ? len - i : k;
    if (memcmp(s + i, m, have)) return P_BAD;
    if (have < k) return P_MORE;
    *at = i + k;
    return P_DONE;
}

/* A scalar whose whole text is s[at, end): written as attn__cj_dump writes it. */
static int pscalar(pbuild *p, const char *s, size_t at, size_t end, size_t *stop) {
    attn__cj_doc doc;
    size_t e;
    int ok = json_at(p, s, at, end, &doc, &e) && e == end;
    if (ok) attn__cj_dump(doc.root, -1, pb_put, p);
    attn__cj_free(p->ctx, &doc);
    *stop = end;
    return ok ? P_DONE : P_BAD;
}

static int hexval(const char *s, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        const char c = s[i];
        const int d = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
        if (d < 0) return 0;
        *v = *v * 16 + (unsigned)d;
    }
    return 1;
}

/* A string from its opening quote at s[at]: whole, or the characters the text holds so far
 * (an escape or a UTF-8 sequence cut at the end waits), as attn__cj_dump_str writes them. */
static int pstring(pbuild *p, const char *s, size_t at, size_t len, size_t *stop) {
    size_t j = at + 1;
    while (j < len) {
        const unsigned char c = (unsigned char)s[j];
        if (c == '"') return pscalar(p, s, at, j + 1, stop);
        size_t k = 1;
        if (c == '\\') {
            unsigned v;
            k = j + 1 < len && s[j + 1] == 'u' ? 6 : 2;
            if (k == 6 && j + 6 <= len && hexval(s + j + 2, &v) && v >= 0xd800 && v < 0xdc00)
                k = 12; /* a high surrogate: with its pair */
        } else if (c < 0x20) {
            return P_BAD;
        } else if (c >= 0x80) {
            k = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
        }
        if (k > len - j) break;
        j += k;
    }
    /* the string so far, closed, written without its closing quote */
    const size_t k = j - at;
    char *tmp = attn__malloc(p->ctx, k + 1);
    if (!tmp) {
        p->oom = 1;
        return P_BAD;
    }
    memcpy(tmp, s + at, k);
    tmp[k] = '"';
    attn__cj_doc doc;
    size_t e;
    const size_t n0 = p->n;
    int ok = json_at(p, tmp, 0, k + 1, &doc, &e) && e == k + 1;
    if (ok) attn__cj_dump(doc.root, -1, pb_put, p);
    if (ok && !p->oom && p->n > n0) p->n--;
    attn__cj_free(p->ctx, &doc);
    attn__free(p->ctx, tmp);
    return ok ? P_MORE : P_BAD;
}

/* A JSON value from s[at]: P_DONE (*stop past it), P_MORE (the text ends inside it: what it
 * settles written) or P_BAD.  What is written is what attn__cj_dump writes of the whole value,
 * or its start. */
static int pvalue(pbuild *p, const char *s, size_t at, size_t len, size_t *stop, int depth) {
    at = skip_ws(s, at, len);
    if (at == len) return P_MORE;
    const char c = s[at];
    if (c == '"') return pstring(p, s, at, len, stop);
    if (c == '{' || c == '[') {
        if (depth >= 60) return P_BAD;
        const int obj = c == '{';
        const char close = obj ? '}' : ']';
        pb_put(p, &c, 1);
        at++;
        for (int first = 1;; first = 0) {
            at = skip_ws(s, at, len);
            if (at == len) return P_MORE;
            if (s[at] == close) {
                pb_put(p, &close, 1);
                *stop = at + 1;
                return P_DONE;
            }
            if (!first) {
                if (s[at] != ',') return P_BAD;
                pb_put(p, ", ", 2);
                at = skip_ws(s, at + 1, len);
                if (at == len) return P_MORE;
            }
            int r;
            if (obj) {
                if (s[at] != '"') return P_BAD;
                if ((r = pstring(p, s, at, len, &at)) != P_DONE) return r;
                if ((r = lit(s, &at, len, ":", 1)) != P_DONE) return r;
                pb_put(p, ": ", 2);
            }
            if ((r = pvalue(p, s, at, len, &at, depth + 1)) != P_DONE) return r;
        }
    }
    /* a number or a literal: settled where something else follows it */
    size_t j = at;
    if ((c >= '0' && c <= '9') || c == '-')
        while (j < len && s[j] && strchr("+-0123456789.eE", s[j])) j++;
    else if (c >= 'a' && c <= 'z')
        while (j < len && s[j] >= 'a' && s[j] <= 'z') j++;
    else
        return P_BAD;
    if (j == len) return P_MORE;
    return pscalar(p, s, at, j, stop);
}

/* A call's arguments from s[*at] (an object): written as far as settled; P_DONE with *at past
 * them when whole. */
static int pargs(pbuild *p, const char *s, size_t *at, size_t len) {
    const size_t i = skip_ws(s, *at, len);
    if (i == len) return P_MORE;
    if (s[i] != '{') return P_BAD;
    return pvalue(p, s, i, len, at, 0);
}

/* The head of a JSON call at s[*at]: {"name": NAME, KEY: (KEY or ALT with their quotes).
 * P_DONE with the call begun (its name written) and *at on its arguments. */
static int json_head(pbuild *p, const char *s, size_t *at, size_t len, const char *key,
                     const char *alt) {
    size_t i = *at;
    int r;
    if ((r = lit(s, &i, len, "{", 1)) != P_DONE || (r = lit(s, &i, len, "\"name\"", 1)) != P_DONE ||
        (r = lit(s, &i, len, ":", 1)) != P_DONE)
        return r;
    i = skip_ws(s, i, len);
    if (i == len) return P_MORE;
    if (s[i] != '"') return P_BAD;
    const size_t ns = i;
    size_t j = i + 1;
    while (j < len && s[j] != '"') j += s[j] == '\\' ? 2 : 1;
    if (j >= len) return P_MORE;
    i = j + 1;
    if ((r = lit(s, &i, len, ",", 1)) != P_DONE) return r;
    const size_t k = i;
    r = lit(s, &i, len, key, 1);
    if (r == P_BAD && alt) i = k, r = lit(s, &i, len, alt, 1);
    if (r != P_DONE || (r = lit(s, &i, len, ":", 1)) != P_DONE) return r;
    attn__cj_doc doc;
    size_t e;
    int ok = json_at(p, s, ns, j + 1, &doc, &e) && doc.root->kind == CJ_STR && doc.root->n > 0 &&
             pb_call(p);
    if (ok) {
        const size_t b0 = p->n;
        pb_put(p, doc.root->s, doc.root->n);
        p->c[p->nc - 1].name = pb_end(p, b0);
    }
    attn__cj_free(p->ctx, &doc);
    *at = i;
    return ok ? P_DONE : P_BAD;
}

/* The arguments of the call just begun: written (NUL-terminated) as far as settled. */
static int call_args(pbuild *p, const char *s, size_t *at, size_t len) {
    const size_t b0 = p->n;
    const int r = pargs(p, s, at, len);
    p->c[p->nc - 1].args = pb_end(p, b0);
    return p->oom ? P_BAD : r;
}

/* The calls from s[at] (their form's opener) on, as far as the text settles them. */
static void partial_from(pbuild *p, tform f, const char *s, size_t at, size_t len) {
    switch (f) {
    case TF_QWEN:
    case TF_QWEN3:
        for (;;) {
            if (lit(s, &at, len, QWEN_OPEN, 1) != P_DONE ||
                json_head(p, s, &at, len, "\"arguments\"", NULL) != P_DONE ||
                call_args(p, s, &at, len) != P_DONE || lit(s, &at, len, "}", 1) != P_DONE ||
                lit(s, &at, len, QWEN_CLOSE, 1) != P_DONE)
                return;
        }
    case TF_LLAMA: {
        at = skip_ws(s, at, len);
        const int r = lit(s, &at, len, PYTHON_TAG, 0);
        if (r == P_MORE) return;
        if (json_head(p, s, &at, len, "\"parameters\"", "\"arguments\"") == P_DONE)
            call_args(p, s, &at, len);
        return;
    }
    case TF_MISTRAL:
        if (lit(s, &at, len, MISTRAL_OPEN, 1) != P_DONE || lit(s, &at, len, "[", 1) != P_DONE)
            return;
        for (;;) {
            if (json_head(p, s, &at, len, "\"arguments\"", NULL) != P_DONE ||
                call_args(p, s, &at, len) != P_DONE)
                return;
            /* an id after the arguments (the call's id was chosen before it came) */
            size_t i = at;
            if (lit(s, &i, len, ",", 1) == P_DONE) {
                if (lit(s, &i, len, "\"id\"", 1) != P_DONE || lit(s, &i, len, ":", 1) != P_DONE)
                    return;
                i = skip_ws(s, i, len);
                if (i == len || s[i] != '"') return;
                i++;
                while (i < len && s[i] != '"') i += s[i] == '\\' ? 2 : 1;
                if (i >= len) return;
                at = i + 1;
            }
            if (lit(s, &at, len, "}", 1) != P_DONE) return;
            i = at;
            if (lit(s, &i, len, ",", 1) != P_DONE) return;
            at = i;
        }
    case TF_SMALL:
    case TF_MINISTRAL:
        for (;;) {
            if (lit(s, &at, len, MISTRAL_OPEN, 1) != P_DONE) return;
            const size_t a = find(s, at, len, "[ARGS]", 6);
            if (a == SIZE_MAX) return;
            size_t name_end = a, id_at = SIZE_MAX;
            if (f == TF_SMALL) {
                const size_t ci = find(s, at, a, "[CALL_ID]", 9);
                if (ci != SIZE_MAX) name_end = ci, id_at = ci + 9;
            }
            if (!plain_ok(s + at, name_end - at)) return;
            if (id_at != SIZE_MAX && !plain_ok(s + id_at, a - id_at)) return;
            if (!pb_call(p)) return;
            size_t b0 = p->n;
            pb_put(p, s + at, name_end - at);
            p->c[p->nc - 1].name = pb_end(p, b0);
            if (id_at != SIZE_MAX) {
                b0 = p->n;
                pb_put(p, s + id_at, a - id_at);
                p->c[p->nc - 1].id = pb_end(p, b0);
            }
            at = a + 6;
            if (call_args(p, s, &at, len) != P_DONE) return;
        }
    default: return;
    }
}

/* Both parses: the calls of a finished answer (partial 0: every call complete, else none and
 * the whole text is content) or of one still being written (the calls so far). */
static attn_status parse_calls(attn_ctx *ctx, const char *fn, const char *format,
                               const char *text, size_t len, int partial, attn_chat_parse **out) {
    tform f = TF_NONE;
    ATTN_TRY(parse_args(ctx, fn, format, text, len, out, &f));
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
    if (partial) {
        if (at != SIZE_MAX) partial_from(&p, f, text, at, len);
        content_end = attn_chat_tool_call_start(format, text, len);
    } else if (at != SIZE_MAX && calls_from(&p, f, text, at, len) && !p.oom) {
        content_end = rtrim(text, at);
    } else {
        p.nc = 0;
    }
    attn_status st;
    if (p.oom) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "%s: out of memory", fn);
    } else {
        ctx->status = saved_st;
        memcpy(ctx->msg, saved_msg, sizeof saved_msg);
        st = build_result(ctx, &p, text, content_end, out);
    }
    attn__free(ctx, p.b);
    attn__free(ctx, p.c);
    return st;
}

attn_status attn_chat_parse_tool_calls_partial(attn_ctx *ctx, const char *format,
                                               const char *text, size_t len,
                                               attn_chat_parse **out) {
    if (!ctx) return ATTN_E_INVALID;
    return parse_calls(ctx, "attn_chat_parse_tool_calls_partial", format, text, len, 1, out);
}

attn_status attn_chat_tool_call_prefix(attn_ctx *ctx, const char *format, const char *name,
                                       char *buf, size_t cap, size_t *len) {
    if (!ctx) return ATTN_E_INVALID;
    const char *fn = "attn_chat_tool_call_prefix";
    ATTN_FAIL_IF(!len || (!buf && cap > 0), ctx, ATTN_E_INVALID, "%s: len or buf is NULL", fn);
    *len = 0;
    const tform f = form_of(format);
    ATTN_FAIL_IF(f == TF_UNKNOWN || f == TF_NONE, ctx, ATTN_E_INVALID,
                 "%s: the chat format \"%.64s\" writes no tool calls", fn,
                 format ? format : "(null)");
    const size_t nl = name ? strlen(name) : 0;
    ATTN_FAIL_IF(name && (nl == 0 || !attn__json_utf8_valid(name, nl)), ctx, ATTN_E_INVALID,
                 "%s: a name must be non-empty UTF-8", fn);
    ATTN_FAIL_IF(name && (f == TF_SMALL || f == TF_MINISTRAL) && !plain_ok(name, nl), ctx,
                 ATTN_E_INVALID,
                 "%s: \"%.64s\" cannot be a call's name in %s (no blanks or brackets)", fn, name,
                 format);
    pbuild p;
    memset(&p, 0, sizeof p);
    p.ctx = ctx;
    const char *head = f == TF_QWEN || f == TF_QWEN3 ? "<tool_call>\n{\"name\": "
                       : f == TF_LLAMA              ? "{\"name\": "
                       : f == TF_MISTRAL && !strcmp(format, "mistral-v3")
                           ? "[TOOL_CALLS] [{\"name\": "
                       : f == TF_MISTRAL ? "[TOOL_CALLS][{\"name\": "
                                         : "[TOOL_CALLS]";
    pb_put(&p, head, strlen(head));
    if (f == TF_SMALL || f == TF_MINISTRAL) {
        if (name) pb_put(&p, name, nl), pb_put(&p, "[ARGS]{", 7);
    } else if (!name) {
        pb_put(&p, "\"", 1);
    } else {
        attn__cj_dump_str(name, nl, pb_put, &p);
        const char *key = f == TF_LLAMA ? ", \"parameters\": {" : ", \"arguments\": {";
        pb_put(&p, key, strlen(key));
    }
    if (p.oom) {
        attn__free(ctx, p.b);
        return attn__fail(ctx, ATTN_E_NOMEM, "%s: out of memory", fn);
    }
    *len = p.n;
    if (cap > 0) {
        const size_t k = p.n < cap ? p.n : cap - 1;
        memcpy(buf, p.b, k);
        buf[k] = 0;
    }
    attn__free(ctx, p.b);
    return ATTN_OK;
}
