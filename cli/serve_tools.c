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
