/* attn serve's tool calls in answers: OpenAI's JSON shapes (serve_tools.h). */
#include "serve_tools.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int id_ok(const char *s) {
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 40) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static uint64_t mix(uint64_t z) { /* splitmix64's finaliser */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void st_call_id(char *out, const attn_chat_tool_call *c, unsigned long long seq, int64_t i,
                unsigned long long salt) {
    if (c && id_ok(c->id)) {
        snprintf(out, 48, "%s", c->id);
        return;
    }
    static const char A[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t h = mix(mix((uint64_t)seq ^ salt) + (uint64_t)i * 0x9e3779b97f4a7c15ULL);
    for (int k = 0; k < 9; k++) out[k] = A[h % 62], h /= 62;
    out[9] = 0;
}

void st_calls_json(sbuf *b, const attn_chat_parse *p, unsigned long long seq,
                   unsigned long long salt, int index) {
    sb_puts(b, "[");
    for (int64_t i = 0; p && i < p->n_calls; i++) {
        const attn_chat_tool_call *c = &p->calls[i];
        char id[48];
        st_call_id(id, c, seq, i, salt);
        sb_puts(b, i ? ",{" : "{");
        if (index) sb_printf(b, "\"index\":%lld,", (long long)i);
        sb_puts(b, "\"id\":");
        sb_json_str(b, id, strlen(id));
        sb_puts(b, ",\"type\":\"function\",\"function\":{\"name\":");
        sb_json_str(b, c->name, strlen(c->name));
        sb_puts(b, ",\"arguments\":");
        sb_json_str(b, c->arguments, strlen(c->arguments));
        sb_puts(b, "}}");
    }
    sb_puts(b, "]");
}

void st_message_json(sbuf *b, const char *text, size_t n, const attn_chat_parse *p,
                     unsigned long long seq, unsigned long long salt) {
    sb_puts(b, "\"message\":{\"role\":\"assistant\",\"content\":");
    const int calls = p && p->n_calls > 0;
    if (calls) text = p->content, n = p->content_len;
    if (calls && n == 0) sb_puts(b, "null");
    else sb_json_str(b, text ? text : "", text ? n : 0);
    if (calls) {
        sb_puts(b, ",\"tool_calls\":");
        st_calls_json(b, p, seq, salt, 0);
    }
    sb_puts(b, "}");
}

void st_call_head_json(sbuf *b, const attn_chat_tool_call *c, int64_t i, unsigned long long seq,
                       unsigned long long salt) {
    char id[48];
    st_call_id(id, c, seq, i, salt);
    sb_printf(b, "[{\"index\":%lld,\"id\":", (long long)i);
    sb_json_str(b, id, strlen(id));
    sb_puts(b, ",\"type\":\"function\",\"function\":{\"name\":");
    sb_json_str(b, c->name, strlen(c->name));
    sb_puts(b, ",\"arguments\":\"\"}}]");
}

void st_call_args_json(sbuf *b, int64_t i, const char *piece, size_t n) {
    sb_printf(b, "[{\"index\":%lld,\"function\":{\"arguments\":", (long long)i);
    sb_json_str(b, piece, n);
    sb_puts(b, "}}]");
}

/* The name of a tool definition {"type": "function", "function": {"name": ...}}, or NULL. */
static const char *tool_name(const sj *t) {
    const sj *f = sj_get(t, "function"), *n = f ? sj_get(f, "name") : NULL;
    return n && n->kind == SJ_STR && n->len > 0 && strlen(n->s) == n->len ? n->s : NULL;
}

int st_tool_named(const sj *tools, const char *name) {
    for (const sj *t = tools && tools->kind == SJ_ARR ? tools->first : NULL; t; t = t->next) {
        const char *n = tool_name(t);
        if (n && !strcmp(n, name)) return 1;
    }
    return 0;
}

int st_tool_choice(const sj *tc, const sj *tools, int *choice, const char **name, char *err,
                   size_t ecap) {
    *choice = ST_CHOICE_AUTO, *name = NULL;
    if (!tc || tc->kind == SJ_NULL) return 1;
    static const char shapes[] = "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                 "{\"type\": \"function\", \"function\": {\"name\": NAME}}";
    const int has_tools = tools && tools->kind == SJ_ARR;
    if (tc->kind == SJ_STR) {
        if (strlen(tc->s) != tc->len) { /* a NUL inside */
            snprintf(err, ecap, "%s", shapes);
            return 0;
        }
        if (!strcmp(tc->s, "none")) *choice = ST_CHOICE_NONE;
        else if (!strcmp(tc->s, "auto")) *choice = ST_CHOICE_AUTO;
        else if (!strcmp(tc->s, "required")) *choice = ST_CHOICE_REQUIRED;
        else {
            snprintf(err, ecap, "%s, not \"%.64s\"", shapes, tc->s);
            return 0;
        }
        if (!has_tools) {
            snprintf(err, ecap, "'tool_choice' is only allowed when 'tools' are given");
            return 0;
        }
        if (*choice == ST_CHOICE_REQUIRED && tools->n == 0) {
            snprintf(err, ecap, "'tool_choice' \"required\" with no tools: nothing to call");
            return 0;
        }
        if (*choice == ST_CHOICE_REQUIRED && tools->n == 1 && tool_name(tools->first)) {
            *choice = ST_CHOICE_NAMED, *name = tool_name(tools->first);
        }
        return 1;
    }
    const sj *type = tc->kind == SJ_OBJ ? sj_get(tc, "type") : NULL;
    const sj *fn = tc->kind == SJ_OBJ ? sj_get(tc, "function") : NULL;
    const sj *n = fn && fn->kind == SJ_OBJ ? sj_get(fn, "name") : NULL;
    if (!type || type->kind != SJ_STR || strcmp(type->s, "function") || !n ||
        n->kind != SJ_STR || n->len == 0 || strlen(n->s) != n->len) {
        snprintf(err, ecap, "%s", shapes);
        return 0;
    }
    if (!has_tools) {
        snprintf(err, ecap, "'tool_choice' is only allowed when 'tools' are given");
        return 0;
    }
    if (!st_tool_named(tools, n->s)) {
        snprintf(err, ecap, "'tool_choice' names the function \"%.128s\", which is not one of "
                            "'tools'", n->s);
        return 0;
    }
    *choice = ST_CHOICE_NAMED, *name = n->s;
    return 1;
}

/* ---- arguments against a function's parameters --------------------------------------------- */
static int st_type_is(const sj *v, const char *t, size_t tl) {
#define IS(name) (tl == sizeof name - 1 && !memcmp(t, name, tl))
    if (IS("object")) return v->kind == SJ_OBJ;
    if (IS("array")) return v->kind == SJ_ARR;
    if (IS("string")) return v->kind == SJ_STR;
    if (IS("number")) return v->kind == SJ_NUM;
    if (IS("integer")) return v->kind == SJ_NUM && v->num == floor(v->num);
    if (IS("boolean")) return v->kind == SJ_BOOL;
    if (IS("null")) return v->kind == SJ_NULL;
#undef IS
    return 1; /* a type this check does not know: not held against the value */
}

static int st_same(const sj *a, const sj *b) {
    if (a->kind != b->kind) return 0;
    switch (a->kind) {
    case SJ_NULL: return 1;
    case SJ_BOOL: return a->b == b->b;
    case SJ_NUM: return a->num == b->num;
    case SJ_STR: return a->len == b->len && !memcmp(a->s, b->s, a->len);
    default: return a->rawlen == b->rawlen && !memcmp(a->raw, b->raw, a->rawlen);
    }
}

static const char *st_kind_name(const sj *v) {
    static const char *n[] = {"null", "a boolean", "a number", "a string", "an array",
                              "an object"};
    return n[v->kind];
}

int st_args_check(const sj *schema, const sj *v, char *path, size_t pcap, char *err,
                  size_t ecap) {
    if (!schema || schema->kind != SJ_OBJ) return 1; /* true, or no schema: anything */
    const size_t pl = strlen(path);
    const sj *any = sj_get(schema, "anyOf");
    if (!any) any = sj_get(schema, "oneOf");
    if (any && any->kind == SJ_ARR && any->n > 0) {
        int ok = 0;
        for (const sj *s = any->first; s && !ok; s = s->next) {
            ok = st_args_check(s, v, path, pcap, err, ecap);
            path[pl] = 0;
        }
        if (!ok) {
            snprintf(err, ecap, "%s (%s) matches none of the schemas of its anyOf", path,
                     st_kind_name(v));
            return 0;
        }
    }
    const sj *ty = sj_get(schema, "type");
    if (ty && (ty->kind == SJ_STR || ty->kind == SJ_ARR)) {
        int ok = ty->kind == SJ_STR ? st_type_is(v, ty->s, ty->len) : 0;
        for (const sj *t = ty->kind == SJ_ARR ? ty->first : NULL; t && !ok; t = t->next)
            ok = t->kind == SJ_STR && st_type_is(v, t->s, t->len);
        if (!ok) {
            snprintf(err, ecap, "%s must be of type %.*s, not %s", path,
                     (int)(ty->kind == SJ_STR ? ty->len : ty->rawlen),
                     ty->kind == SJ_STR ? ty->s : ty->raw, st_kind_name(v));
            return 0;
        }
    }
    const sj *en = sj_get(schema, "enum"), *co = sj_get(schema, "const");
    if (en && en->kind == SJ_ARR) {
        int ok = 0;
        for (const sj *e = en->first; e && !ok; e = e->next) ok = st_same(e, v);
        if (!ok) {
            snprintf(err, ecap, "%s is %.*s, not one of its enum %.*s", path,
                     (int)(v->rawlen > 60 ? 60 : v->rawlen), v->raw,
                     (int)(en->rawlen > 120 ? 120 : en->rawlen), en->raw);
            return 0;
        }
    }
    if (co && !st_same(co, v)) {
        snprintf(err, ecap, "%s must be %.*s", path, (int)(co->rawlen > 60 ? 60 : co->rawlen),
                 co->raw);
        return 0;
    }
    if (v->kind == SJ_NUM) {
        const sj *lo = sj_get(schema, "minimum"), *hi = sj_get(schema, "maximum");
        if ((lo && lo->kind == SJ_NUM && v->num < lo->num) ||
            (hi && hi->kind == SJ_NUM && v->num > hi->num)) {
            snprintf(err, ecap, "%s is %.*s, outside [%.*s, %.*s]", path,
                     (int)(v->rawlen > 40 ? 40 : v->rawlen), v->raw,
                     lo && lo->kind == SJ_NUM ? (int)lo->rawlen : 4,
                     lo && lo->kind == SJ_NUM ? lo->raw : "-inf",
                     hi && hi->kind == SJ_NUM ? (int)hi->rawlen : 3,
                     hi && hi->kind == SJ_NUM ? hi->raw : "inf");
            return 0;
        }
    }
    if (v->kind == SJ_OBJ) {
        const sj *props = sj_get(schema, "properties"), *req = sj_get(schema, "required");
        const sj *add = sj_get(schema, "additionalProperties");
        for (const sj *r = req && req->kind == SJ_ARR ? req->first : NULL; r; r = r->next)
            if (r->kind == SJ_STR && !sj_get(v, r->s)) {
                snprintf(err, ecap, "%s lacks its required '%s'", path, r->s);
                return 0;
            }
        for (const sj *m = v->first; m; m = m->next) {
            const sj *ps = props && props->kind == SJ_OBJ ? sj_get(props, m->key) : NULL;
            if (!ps && add && add->kind == SJ_BOOL && !add->b) {
                snprintf(err, ecap, "%s has '%s', which is not among its properties", path,
                         m->key);
                return 0;
            }
            const sj *s = ps ? ps : add && add->kind == SJ_OBJ ? add : NULL;
            if (!s) continue;
            snprintf(path + pl, pcap - pl, ".%s", m->key);
            const int ok = st_args_check(s, m, path, pcap, err, ecap);
            path[pl] = 0;
            if (!ok) return 0;
        }
    }
    if (v->kind == SJ_ARR) {
        const sj *it = sj_get(schema, "items"), *mn = sj_get(schema, "minItems"),
                 *mx = sj_get(schema, "maxItems");
        if ((mn && mn->kind == SJ_NUM && (double)v->n < mn->num) ||
            (mx && mx->kind == SJ_NUM && (double)v->n > mx->num)) {
            snprintf(err, ecap, "%s has %zu items, outside its minItems/maxItems", path, v->n);
            return 0;
        }
        size_t i = 0;
        for (const sj *e = v->first; e && it; e = e->next, i++) {
            snprintf(path + pl, pcap - pl, "[%zu]", i);
            const int ok = st_args_check(it, e, path, pcap, err, ecap);
            path[pl] = 0;
            if (!ok) return 0;
        }
    }
    return 1;
}

const sj *st_tool_parameters(const sj *tools, const char *name, int *strict) {
    *strict = 0;
    for (const sj *t = tools && tools->kind == SJ_ARR ? tools->first : NULL; t; t = t->next) {
        const sj *f = sj_get(t, "function"), *nm = f ? sj_get(f, "name") : NULL;
        if (!nm || nm->kind != SJ_STR || strcmp(nm->s, name)) continue;
        const sj *st = sj_get(f, "strict");
        *strict = st && st->kind == SJ_BOOL && st->b;
        return sj_get(f, "parameters");
    }
    return NULL;
}
