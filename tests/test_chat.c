/* Chat formatting (src/text/chat.c) against transformers' rendering of the same templates,
 * conversations, tools and options (tests/fixtures/chat/cases.inc, written by
 * tests/gen_chat.py): byte for byte; transformers' refusals refused; tools for formats that do
 * not write them refused; modified and other models' templates refused with a message; the
 * buffer contract; each API function's name in its messages; the JSON writer (Python's repr
 * of floats, json.dumps) against Python; attn_llm_set_chat_template. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn.h"
#include "testutil.h"
#include "../src/text/chat_json.h"

#include "fixtures/chat/cases.inc"

/* s with every `from` replaced by `to`; malloc'ed (s is freed when own) */
static char *replace(char *s, int own, const char *from, const char *to) {
    size_t nf = strlen(from), nt = strlen(to), k = 0;
    for (const char *p = s; (p = strstr(p, from)) != NULL; p += nf) k++;
    char *out = malloc(strlen(s) + k * (nt > nf ? nt - nf : 0) + 1), *o = out;
    const char *p = s, *q;
    while ((q = strstr(p, from)) != NULL) {
        memcpy(o, p, (size_t)(q - p)), o += q - p;
        memcpy(o, to, nt), o += nt;
        p = q + nf;
    }
    strcpy(o, p);
    if (own) free(s);
    return out;
}

/* the expected text with today's date (strftime in the C locale: transformers' strftime_now)
 * and Mistral Small 3.2's default system message put in; malloc'ed */
static char *expand(const char *want) {
    char d[64], iso[64];
    time_t now = time(NULL);
    struct tm tmv;
    localtime_r(&now, &tmv);
    strftime(d, sizeof d, "%d %b %Y", &tmv);
    strftime(iso, sizeof iso, "%Y-%m-%d", &tmv);
    char *s = replace((char *)want, 0, "@SMALL_SYSTEM@", SMALL_SYSTEM);
    s = replace(s, 1, "@TODAY_ISO@", iso);
    return replace(s, 1, "@TODAY@", d);
}

/* a file under tests/fixtures/chat, as it is (malloc'ed; NULL when unreadable) */
static char *read_fixture(const char *rel) {
    char path[512];
    snprintf(path, sizeof path, "fixtures/chat/%s", rel);
    return tu_slurp(path, NULL);
}

static char *template_text(const char *file, const char *tmpl, const char *name) {
    if (!file) return strdup(tmpl);
    char *t = read_fixture(file);
    TU_CHECK(t != NULL, "%s: cannot read fixtures/chat/%s", name, file);
    return t ? t : strdup("");
}

static void put_str(void *o, const char *s, size_t n) {
    char **b = o;
    size_t have = strlen(*b);
    *b = realloc(*b, have + n + 1);
    memcpy(*b + have, s, n);
    (*b)[have + n] = 0;
}

static void json_writer(attn_ctx *ctx) {
    int bad = 0;
    const int nf = (int)(sizeof FLOATS / sizeof FLOATS[0]);
    for (int i = 0; i < nf; i++) {
        char out[32];
        attn__cj_float_repr(FLOATS[i].lit, strlen(FLOATS[i].lit), out);
        if (strcmp(out, FLOATS[i].repr)) bad++;
        TU_CHECK(!strcmp(out, FLOATS[i].repr), "repr(float(%s)): attn %s, Python %s",
                 FLOATS[i].lit, out, FLOATS[i].repr);
    }
    const int nd = (int)(sizeof DUMPS / sizeof DUMPS[0]);
    for (int i = 0; i < nd; i++) {
        attn__cj_doc doc;
        TU_CHECK(attn__cj_parse(ctx, DUMPS[i].json, "test", &doc) == ATTN_OK, "parse %d: %s", i,
                 attn_ctx_errmsg(ctx));
        if (!doc.root) continue;
        char *b = calloc(1, 1);
        attn__cj_dump(doc.root, DUMPS[i].indent, put_str, &b);
        TU_CHECK(!strcmp(b, DUMPS[i].dumps), "json.dumps %d (indent %d): attn %s, Python %s", i,
                 DUMPS[i].indent, b, DUMPS[i].dumps);
        free(b);
        attn__cj_free(ctx, &doc);
    }
    /* refused: not JSON, a key twice, U+0000, trailing data */
    const char *refused[] = {"[1,]", "{\"a\": 1, \"a\": 2}", "[\"\\u0000\"]", "[] x", "",
                             "{\"a\\u0000\": 1}", "[NaN]"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        attn__cj_doc doc;
        TU_CHECK(attn__cj_parse(ctx, refused[i], "test", &doc) == ATTN_E_INVALID &&
                     strstr(attn_ctx_errmsg(ctx), "test"),
                 "JSON %s not refused", refused[i]);
        attn__cj_free(ctx, &doc);
    }
    printf("  JSON writer: %d floats as Python's repr (%d differ), %d json.dumps texts\n", nf,
           bad, nd);
}

/* attn_llm_set_chat_template on the tiny GGUF: its own template replaced by Qwen3's */
static void model_template(attn_ctx *ctx, const char *qwen3) {
    attn_llm *m = NULL;
    if (attn_llm_load(ctx, "fixtures/llama_tiny.gguf", ATTN_LLM_LOAD_VOCAB_ONLY, &m) != ATTN_OK) {
        TU_CHECK(0, "llama_tiny.gguf: %s", attn_ctx_errmsg(ctx));
        return;
    }
    attn_chat_message u = {"user", "hi", NULL, NULL, NULL};
    size_t len = 0;
    char buf[256];
    const char *own = attn_llm_chat_template(m);
    TU_CHECK(attn_llm_set_chat_template(ctx, m, "{{ not a template }}") == ATTN_E_UNSUPPORTED &&
                 attn_llm_chat_template(m) == own,
             "an unknown template refused, the model's kept");
    TU_CHECK(attn_llm_set_chat_template(ctx, m, qwen3) == ATTN_OK &&
                 !strcmp(attn_llm_chat_template(m), qwen3),
             "set_chat_template: %s", attn_ctx_errmsg(ctx));
    attn_chat_options o = {1, ATTN_CHAT_THINKING_OFF, NULL, NULL, NULL};
    TU_CHECK(attn_llm_chat_apply(ctx, m, &u, 1, &o, buf, sizeof buf, &len) == ATTN_OK &&
                 !strcmp(buf, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
                              "</think>\n\n"),
             "attn_llm_chat_apply with the set template: %s", buf);
    TU_CHECK(attn_llm_chat_format(ctx, m, &u, 1, 1, buf, sizeof buf, &len) == ATTN_OK &&
                 !strcmp(buf, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"),
             "attn_llm_chat_format with the set template: %s", buf);
    TU_CHECK(attn_llm_chat_format(ctx, m, &u, -1, 1, buf, sizeof buf, &len) == ATTN_E_INVALID &&
                 !strncmp(attn_ctx_errmsg(ctx), "attn_llm_chat_format: ", 22),
             "attn_llm_chat_format's own name: %s", attn_ctx_errmsg(ctx));
    TU_CHECK(attn_llm_chat_apply(ctx, m, &u, -1, &o, buf, sizeof buf, &len) == ATTN_E_INVALID &&
                 !strncmp(attn_ctx_errmsg(ctx), "attn_llm_chat_apply: ", 21),
             "attn_llm_chat_apply's own name: %s", attn_ctx_errmsg(ctx));
    attn_llm_free(m);
}

int main(void) {
    attn_ctx *ctx = NULL;
    TU_CHECK(attn_ctx_create(NULL, &ctx) == ATTN_OK, "context");
    if (!ctx) return tu_finish("test_chat");
    const int nt = (int)(sizeof TEMPLATES / sizeof TEMPLATES[0]);
    char **tmpl = calloc((size_t)nt, sizeof *tmpl);
    char *qwen3 = NULL;
    for (int t = 0; t < nt; t++) {
        tmpl[t] = template_text(TEMPLATES[t].file, TEMPLATES[t].tmpl, TEMPLATES[t].name);
        TU_CHECK(attn_chat_template_check(ctx, tmpl[t]) == ATTN_OK, "%s: refused: %s",
                 TEMPLATES[t].name, attn_ctx_errmsg(ctx));
        const char *fmt = attn_chat_template_name(ctx, tmpl[t]);
        TU_CHECK(fmt && !strcmp(fmt, TEMPLATES[t].format), "%s: recognised as %s, not %s",
                 TEMPLATES[t].name, fmt ? fmt : attn_ctx_errmsg(ctx), TEMPLATES[t].format);
        if (!strcmp(TEMPLATES[t].name, "qwen3")) qwen3 = tmpl[t];
    }
    /* every case */
    const int nc = (int)(sizeof CASES / sizeof CASES[0]);
    int *ok = calloc((size_t)nt, sizeof *ok), *inv = calloc((size_t)nt, sizeof *inv),
        *uns = calloc((size_t)nt, sizeof *uns);
    char *buf = malloc(1 << 16);
    int n_named = 0;
    for (int i = 0; i < nc; i++) {
        const int t = CASES[i].tmpl;
        attn_chat_options o = {CASES[i].gen, CASES[i].thinking,
                               CASES[i].tools >= 0 ? TOOLS[CASES[i].tools] : NULL,
                               TEMPLATES[t].bos, TEMPLATES[t].eos};
        const attn_chat_message *m = CONVS[CASES[i].conv].m;
        const int64_t n = CONVS[CASES[i].conv].n;
        size_t len = 0;
        buf[0] = 0;
        attn_status st = attn_chat_apply(ctx, tmpl[t], m, n, &o, buf, 1 << 16, &len);
        if (CASES[i].want) {
            attn_status want = CASES[i].want == 1 ? ATTN_E_INVALID : ATTN_E_UNSUPPORTED;
            TU_CHECK(st == want, "%s, case %d (conversation %d, tools %d, thinking %d): "
                     "%s expected, attn gave (%s) \"%s\"", TEMPLATES[t].name, i, CASES[i].conv,
                     CASES[i].tools, CASES[i].thinking, attn_status_name(want),
                     attn_status_name(st), st ? attn_ctx_errmsg(ctx) : buf);
            (CASES[i].want == 1 ? inv : uns)[t]++;
            continue;
        }
        char *want = expand(TEXTS[CASES[i].text]);
        /* the format by its name (attn_chat_template_named), where it has one: the same text */
        const char *named = attn_chat_template_named(TEMPLATES[t].name);
        if (named) {
            char *nb = malloc(1 << 16);
            size_t nl = 0;
            nb[0] = 0;
            attn_status ns = attn_chat_apply(ctx, named, m, n, &o, nb, 1 << 16, &nl);
            TU_CHECK(ns == st && nl == len && !strcmp(nb, buf), "%s by name, case %d: (%s) "
                     "\"%s\", the published template's (%s) \"%s\"", TEMPLATES[t].name, i,
                     attn_status_name(ns), nb, attn_status_name(st), buf);
            free(nb);
            n_named++;
        }
        TU_CHECK(st == ATTN_OK && len == strlen(want) && strcmp(buf, want) == 0,
                 "%s, case %d (conversation %d, tools %d, generation prompt %d, thinking %d): "
                 "got (%s)\n\"%s\"\ntransformers\n\"%s\"", TEMPLATES[t].name, i, CASES[i].conv,
                 CASES[i].tools, CASES[i].gen, CASES[i].thinking,
                 st == ATTN_OK ? "ok" : attn_ctx_errmsg(ctx), buf, want);
        ok[t]++;
        /* the length alone, then a buffer one byte short: cut, NUL-terminated */
        size_t len0 = 0;
        TU_CHECK(attn_chat_apply(ctx, tmpl[t], m, n, &o, NULL, 0, &len0) == ATTN_OK &&
                     len0 == strlen(want),
                 "%s, case %d: the length alone", TEMPLATES[t].name, i);
        if (len0 > 0) {
            char *small = malloc(len0);
            memset(small, 'x', len0);
            TU_CHECK(attn_chat_apply(ctx, tmpl[t], m, n, &o, small, len0, &len) == ATTN_OK &&
                         len == len0 && small[len0 - 1] == 0 &&
                         memcmp(small, want, len0 - 1) == 0,
                     "%s, case %d: a buffer one byte short", TEMPLATES[t].name, i);
            free(small);
        }
        /* attn_chat_render gives the same for the default options */
        if (CASES[i].tools < 0 && !CASES[i].thinking) {
            TU_CHECK(attn_chat_render(ctx, tmpl[t], TEMPLATES[t].bos, TEMPLATES[t].eos, m, n,
                                      CASES[i].gen, buf, 1 << 16, &len) == ATTN_OK &&
                         !strcmp(buf, want),
                     "%s, case %d: attn_chat_render", TEMPLATES[t].name, i);
        }
        free(want);
    }
    /* every named format has a published template among the fixtures, recognised alike */
    static const char *const names[] = {"gemma2", "gemma3", "llama3", "llama3.2", "mistral-v3",
                                        "mistral-nemo", "mistral-v7", "qwen3"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        const char *named = attn_chat_template_named(names[k]);
        int found = 0;
        for (int t = 0; t < nt; t++)
            if (!strcmp(TEMPLATES[t].name, names[k])) {
                const char *a = attn_chat_template_name(ctx, tmpl[t]);
                const char *b = named ? attn_chat_template_name(ctx, named) : NULL;
                TU_CHECK(a && b && !strcmp(a, b), "%s: named as %s, published as %s", names[k],
                         b ? b : "(refused)", a ? a : "(refused)");
                found = 1;
            }
        TU_CHECK(named && found, "%s: no named text or no fixture", names[k]);
    }
    TU_CHECK(!attn_chat_template_named("chatml") && !attn_chat_template_named("Gemma3") &&
                 !attn_chat_template_named("") && !attn_chat_template_named(NULL),
             "a name that is not a format gave a text");
    printf("  named formats: %d renderings as the published templates'\n", n_named);
    for (int t = 0; t < nt; t++) {
        printf("  %-17s %-16s %3d renderings as transformers, %2d refusals as transformers "
               "(ATTN_E_INVALID), %2d tool cases refused (ATTN_E_UNSUPPORTED)\n",
               TEMPLATES[t].name, TEMPLATES[t].format, ok[t], inv[t], uns[t]);
        /* a template that writes bos without its text */
        if (TEMPLATES[t].bos[0]) {
            attn_chat_message m1 = {"user", "hi", NULL, NULL, NULL};
            size_t l1;
            TU_CHECK(attn_chat_render(ctx, tmpl[t], NULL, NULL, &m1, 1, 1, buf, 1 << 16, &l1) ==
                         ATTN_E_INVALID && strstr(attn_ctx_errmsg(ctx), "attn_chat_render: "),
                     "%s: bos text missing: %s", TEMPLATES[t].name, attn_ctx_errmsg(ctx));
        }
    }
    /* refused templates: unknown ones, and published ones changed in one place */
    const int nb = (int)(sizeof BAD_TEMPLATES / sizeof BAD_TEMPLATES[0]);
    for (int t = 0; t < nb; t++) {
        char *bt = template_text(BAD_TEMPLATES[t].file, BAD_TEMPLATES[t].tmpl,
                                 BAD_TEMPLATES[t].name);
        attn_chat_message m = {"user", "hi", NULL, NULL, NULL};
        size_t len = 0;
        attn_status st = attn_chat_format(ctx, bt, &m, 1, 1, buf, 1 << 16, &len);
        printf("  refused %-45s %.150s\n", BAD_TEMPLATES[t].name, attn_ctx_errmsg(ctx));
        TU_CHECK(st == ATTN_E_UNSUPPORTED && strstr(attn_ctx_errmsg(ctx), "chat template"),
                 "%s: not refused as it should be (%s)", BAD_TEMPLATES[t].name,
                 attn_status_name(st));
        TU_CHECK(attn_chat_template_check(ctx, bt) == ATTN_E_UNSUPPORTED &&
                     attn_chat_template_name(ctx, bt) == NULL,
                 "%s: check", BAD_TEMPLATES[t].name);
        free(bt);
    }
    TU_CHECK(attn_chat_template_check(ctx, NULL) == ATTN_E_UNSUPPORTED &&
                 strstr(attn_ctx_errmsg(ctx), "no chat template"), "NULL template");
    /* bad arguments: each function's name in its messages */
    attn_chat_message nul = {"user", NULL, NULL, NULL, NULL}, u = {"user", "hi", NULL, NULL, NULL};
    size_t len;
    const char *t0 = tmpl[0];
    TU_CHECK(attn_chat_format(ctx, t0, &nul, 1, 0, buf, 64, &len) == ATTN_E_INVALID &&
                 !strncmp(attn_ctx_errmsg(ctx), "attn_chat_format: message 0 has a NULL "
                                                "content", 39), "NULL content: %s",
             attn_ctx_errmsg(ctx));
    TU_CHECK(attn_chat_format(ctx, t0, NULL, 1, 0, buf, 64, &len) == ATTN_E_INVALID,
             "NULL messages");
    TU_CHECK(attn_chat_format(ctx, t0, &nul, -1, 0, buf, 64, &len) == ATTN_E_INVALID,
             "negative count");
    TU_CHECK(attn_chat_format(ctx, t0, &nul, 0, 0, buf, 64, NULL) == ATTN_E_INVALID,
             "NULL len");
    TU_CHECK(attn_chat_render(ctx, t0, NULL, NULL, &nul, 1, 0, buf, 64, &len) ==
                     ATTN_E_INVALID && !strncmp(attn_ctx_errmsg(ctx), "attn_chat_render: ", 18),
             "attn_chat_render's own name: %s", attn_ctx_errmsg(ctx));
    TU_CHECK(attn_chat_render(ctx, t0, NULL, NULL, &u, 1, 0, NULL, 64, &len) ==
                     ATTN_E_INVALID && !strncmp(attn_ctx_errmsg(ctx), "attn_chat_render: ", 18),
             "attn_chat_render's own name (NULL buf): %s", attn_ctx_errmsg(ctx));
    TU_CHECK(attn_chat_apply(ctx, t0, &nul, 1, NULL, buf, 64, &len) == ATTN_E_INVALID &&
                 !strncmp(attn_ctx_errmsg(ctx), "attn_chat_apply: ", 17),
             "attn_chat_apply's own name: %s", attn_ctx_errmsg(ctx));
    TU_CHECK(attn_chat_apply(ctx, t0, &u, 1, NULL, buf, 512, &len) == ATTN_OK &&
                 attn_chat_format(ctx, t0, &u, 1, 0, buf + 512, 512, &len) == ATTN_OK &&
                 !strcmp(buf, buf + 512), "NULL options: the defaults");
    if (qwen3) {
        attn_chat_options o = {1, 7, NULL, NULL, NULL};
        TU_CHECK(attn_chat_apply(ctx, qwen3, &u, 1, &o, buf, 64, &len) == ATTN_E_INVALID,
                 "thinking out of range");
        /* JSON that is not JSON, or not of the shape the template reads */
        o.thinking = 0;
        const char *bad_tools[] = {"[{]", "{\"type\": \"function\"}", "[1]",
                                   "[{\"a\": 1, \"a\": 2}]"};
        for (size_t i = 0; i < sizeof bad_tools / sizeof bad_tools[0]; i++) {
            o.tools = bad_tools[i];
            TU_CHECK(attn_chat_apply(ctx, qwen3, &u, 1, &o, buf, 64, &len) == ATTN_E_INVALID &&
                         strstr(attn_ctx_errmsg(ctx), "tools"),
                     "tools %s: %s", bad_tools[i], attn_ctx_errmsg(ctx));
        }
        o.tools = NULL;
        const char *bad_calls[] = {
            "[{\"function\": {\"name\": 3, \"arguments\": {}}}]",
            "[{\"function\": {\"name\": \"f\"}}]", "{}", "[\"f\"]", "[",
            "[{\"function\": {\"name\": \"f\", \"arguments\": \"\\u0000\"}}]"};
        for (size_t i = 0; i < sizeof bad_calls / sizeof bad_calls[0]; i++) {
            attn_chat_message c[2] = {{"user", "hi", NULL, NULL, NULL},
                                      {"assistant", "", NULL, bad_calls[i], NULL}};
            TU_CHECK(attn_chat_apply(ctx, qwen3, c, 2, &o, buf, 64, &len) == ATTN_E_INVALID,
                     "tool_calls %s: %s", bad_calls[i], attn_ctx_errmsg(ctx));
        }
        /* fields on messages that do not carry them */
        attn_chat_message f1 = {"user", "hi", "r", NULL, NULL}, f2 = {"user", "hi", NULL, "[]",
                                                                      NULL},
                          f3 = {"user", "hi", NULL, NULL, "call12345"};
        TU_CHECK(attn_chat_apply(ctx, qwen3, &f1, 1, &o, buf, 64, &len) == ATTN_E_INVALID &&
                     attn_chat_apply(ctx, qwen3, &f2, 1, &o, buf, 64, &len) == ATTN_E_INVALID &&
                     attn_chat_apply(ctx, qwen3, &f3, 1, &o, buf, 64, &len) == ATTN_E_INVALID,
                 "reasoning, tool calls or a call id on a user message");
        model_template(ctx, qwen3);
    }
    json_writer(ctx);
    /* hostile templates: every prefix of each template parses or is refused, never crashes */
    for (int t = 0; t < nt; t++) {
        size_t n = strlen(tmpl[t]);
        char *pre = malloc(n + 1);
        for (size_t k = 0; k <= n; k += n > 2000 ? 7 : 1) {
            memcpy(pre, tmpl[t], k);
            pre[k] = 0;
            attn_status st = attn_chat_template_check(ctx, pre);
            TU_CHECK(st == ATTN_OK || st == ATTN_E_UNSUPPORTED, "%s prefix %zu: %s",
                     TEMPLATES[t].name, k, attn_status_name(st));
        }
        free(pre);
    }
    for (int t = 0; t < nt; t++) free(tmpl[t]);
    free(tmpl), free(ok), free(inv), free(uns), free(buf);
    attn_ctx_free(ctx);
    return tu_finish("test_chat");
}
