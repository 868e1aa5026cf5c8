/* attn serve's tool calls in answers: OpenAI's JSON shapes (serve_tools.h). */
#include "serve_tools.h"

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
