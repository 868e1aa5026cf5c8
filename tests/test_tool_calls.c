/* Tool calls out of answers (attn_chat_parse_tool_calls, attn_chat_tool_call_start):
 *  - round trips: for each format with tools, an assistant turn with calls rendered by
 *    attn_chat_apply from the family's published template (tests/fixtures/chat/templates;
 *    test_chat checks that rendering against transformers) is cut out of the conversation
 *    (the text after the generation prompt, before the end-of-turn token: what the model
 *    writes) and parsed back: the same names, the same arguments (json.dumps' form, written
 *    here by hand), the ids where the form holds them, the same content;
 *  - hand-written answers of each form with their expected results;
 *  - malformed, cut-short and hostile answers: no calls, the whole text as content, never a
 *    failure (every prefix of every good answer too);
 *  - the streaming hold-back offset: never decreasing over the prefixes of an answer, never
 *    past where the calls begin, equal to the content's length on a whole answer with calls;
 *  - argument checks, NULL frees, an allocator that fails. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "testutil.h"

static char *read_fixture(const char *rel) {
    char path[512];
    snprintf(path, sizeof path, "fixtures/chat/templates/%s", rel);
    return tu_slurp(path, NULL);
}

typedef struct want_call {
    const char *name, *args, *id;
} want_call;

/* Parses text as format and checks the result: content, n calls as w[0, n). */
static void expect(attn_ctx *ctx, const char *what, const char *format, const char *text,
                   size_t len, const char *content, size_t content_len, int64_t n,
                   const want_call *w) {
    attn_chat_parse *p = NULL;
    attn_status st = attn_chat_parse_tool_calls(ctx, format, text, len, &p);
    TU_CHECK(st == ATTN_OK && p, "%s (%s): %s", what, format, attn_ctx_errmsg(ctx));
    if (st != ATTN_OK || !p) return;
    TU_CHECK(p->content_len == content_len && !memcmp(p->content, content, content_len) &&
                 p->content[content_len] == 0,
             "%s (%s): content \"%.*s\" (%zu bytes), expected \"%.*s\" (%zu)", what, format,
             (int)p->content_len, p->content, p->content_len, (int)content_len, content,
             content_len);
    TU_CHECK(p->n_calls == n && (n > 0) == (p->calls != NULL), "%s (%s): %lld calls, expected %lld",
             what, format, (long long)p->n_calls, (long long)n);
    for (int64_t i = 0; i < n && i < p->n_calls; i++) {
        const attn_chat_tool_call *c = &p->calls[i];
        TU_CHECK(!strcmp(c->name, w[i].name), "%s (%s): call %lld's name \"%s\", expected \"%s\"",
                 what, format, (long long)i, c->name, w[i].name);
        TU_CHECK(!strcmp(c->arguments, w[i].args),
                 "%s (%s): call %lld's arguments %s, expected %s", what, format, (long long)i,
                 c->arguments, w[i].args);
        TU_CHECK(w[i].id ? c->id && !strcmp(c->id, w[i].id) : c->id == NULL,
                 "%s (%s): call %lld's id %s, expected %s", what, format, (long long)i,
                 c->id ? c->id : "NULL", w[i].id ? w[i].id : "NULL");
    }
    /* the hold-back offset of the whole answer: the content's length when there are calls */
    if (n > 0) {
        size_t s = attn_chat_tool_call_start(format, text, len);
        TU_CHECK(s == content_len, "%s (%s): tool_call_start %zu, content %zu bytes", what,
                 format, s, content_len);
    }
    attn_chat_parse_free(p);
}

/* Text alone as content, no calls. */
static void no_calls(attn_ctx *ctx, const char *what, const char *format, const char *text,
                     size_t len) {
    expect(ctx, what, format, text, len, text, len, 0, NULL);
}

/* The streamed calls of every prefix of an answer (attn_chat_parse_tool_calls_partial): never
 * more calls than the whole answer's, each with its name and the start of its arguments; on
 * the whole answer all of them, whole. */
static void partial_prefixes(attn_ctx *ctx, const char *what, const char *format,
                             const char *text, const attn_chat_parse *whole) {
    const size_t len = strlen(text);
    int64_t last = 0;
    for (size_t k = 0; k <= len; k++) {
        attn_chat_parse *p = NULL;
        TU_STATUS(attn_chat_parse_tool_calls_partial(ctx, format, text, k, &p), ATTN_OK, ctx);
        if (!p) return;
        TU_CHECK(p->n_calls <= whole->n_calls && p->n_calls >= last,
                 "%s (%s): partial of %zu bytes: %lld calls (whole %lld, before %lld)", what,
                 format, k, (long long)p->n_calls, (long long)whole->n_calls, (long long)last);
        for (int64_t i = 0; i < p->n_calls && i < whole->n_calls; i++) {
            const attn_chat_tool_call *c = &p->calls[i], *w = &whole->calls[i];
            const size_t a = strlen(c->arguments);
            TU_CHECK(!strcmp(c->name, w->name) && !strncmp(c->arguments, w->arguments, a),
                     "%s (%s): partial of %zu bytes: call %lld %s %s, whole %s %s", what, format,
                     k, (long long)i, c->name, c->arguments, w->name, w->arguments);
            if (k == len)
                TU_CHECK(!strcmp(c->arguments, w->arguments), "%s (%s): whole, call %lld: %s",
                         what, format, (long long)i, c->arguments);
        }
        if (k == len)
            TU_CHECK(p->n_calls == whole->n_calls, "%s (%s): whole: %lld partial calls of %lld",
                     what, format, (long long)p->n_calls, (long long)whole->n_calls);
        last = p->n_calls;
        attn_chat_parse_free(p);
    }
}

/* Every prefix of a good answer of n calls: no calls, or (a prefix that ends a call) fewer
 * calls after the same content; the hold-back offset never decreases and never passes the
 * calls' start. */
static void prefixes(attn_ctx *ctx, const char *what, const char *format, const char *text,
                     size_t content_len, int64_t n) {
    const size_t len = strlen(text);
    size_t last = 0, full_end = len;
    attn_chat_parse *whole = NULL;
    TU_STATUS(attn_chat_parse_tool_calls(ctx, format, text, len, &whole), ATTN_OK, ctx);
    if (whole) partial_prefixes(ctx, what, format, text, whole);
    attn_chat_parse_free(whole);
    while (full_end > 0 && strchr(" \n\t\r", text[full_end - 1])) full_end--;
    for (size_t k = 0; k <= len; k++) {
        size_t s = attn_chat_tool_call_start(format, text, k);
        TU_CHECK(s <= k && s >= last, "%s (%s): tool_call_start of %zu bytes is %zu (before: %zu)",
                 what, format, k, s, last);
        TU_CHECK(s <= content_len, "%s (%s): tool_call_start %zu passes the content (%zu)", what,
                 format, s, content_len);
        last = s;
        if (k >= full_end) continue; /* complete */
        attn_chat_parse *p = NULL;
        attn_status st = attn_chat_parse_tool_calls(ctx, format, text, k, &p);
        TU_CHECK(st == ATTN_OK && p &&
                     ((p->n_calls == 0 && p->content_len == k && !memcmp(p->content, text, k)) ||
                      (p->n_calls > 0 && p->n_calls < n && p->content_len == content_len)),
                 "%s (%s): the first %zu bytes: %lld calls", what, format, k,
                 p ? (long long)p->n_calls : -1LL);
        attn_chat_parse_free(p);
    }
}

/* ---- round trips through the renderer ---------------------------------------------------- */
typedef struct rt_fmt {
    const char *format, *file, *bos, *eos, *end; /* end: what closes the assistant's turn */
    int ids;                                     /* the answer holds the calls' ids */
} rt_fmt;

static const char TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
    "\"Weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
    "\"string\"}}}}}]";

static void round_trip(attn_ctx *ctx, const rt_fmt *f, const char *calls_json, int64_t n,
                       const want_call *w, const char *content, const char *want_content) {
    char *tmpl = read_fixture(f->file);
    TU_CHECK(tmpl != NULL, "cannot read %s", f->file);
    if (!tmpl) return;
    const char *name = attn_chat_template_name(ctx, tmpl);
    TU_CHECK(name && !strcmp(name, f->format), "%s is %s", f->file, name ? name : "?");
    attn_chat_message m[2];
    memset(m, 0, sizeof m);
    m[0].role = "user", m[0].content = "What is the weather in Paris?";
    m[1].role = "assistant", m[1].content = content, m[1].tool_calls = calls_json;
    attn_chat_options o = {1, ATTN_CHAT_THINKING_OFF, TOOLS, f->bos, f->eos};
    static char a[1 << 15], b[1 << 15];
    size_t la = 0, lb = 0;
    attn_status s1 = attn_chat_apply(ctx, tmpl, m, 1, &o, a, sizeof a, &la);
    o.add_generation_prompt = 0;
    attn_status s2 = attn_chat_apply(ctx, tmpl, m, 2, &o, b, sizeof b, &lb);
    free(tmpl);
    TU_CHECK(s1 == ATTN_OK && s2 == ATTN_OK, "%s: render: %s", f->format, attn_ctx_errmsg(ctx));
    if (s1 != ATTN_OK || s2 != ATTN_OK) return;
    /* the answer: what follows the generation prompt, before the end of the turn */
    size_t k = 0;
    while (k < la && k < lb && a[k] == b[k]) k++;
    const size_t le = strlen(f->end);
    const int cont = k == la && lb >= k + le && !memcmp(b + lb - le, f->end, le);
    TU_CHECK(cont, "%s: the rendered turn does not continue the generation prompt:\n%s\n---\n%s",
             f->format, a, b);
    if (!cont) return;
    char *ans = strndup(b + k, lb - k - le);
    char what[128];
    snprintf(what, sizeof what, "round trip of %lld call(s), content \"%s\"", (long long)n,
             content);
    want_call ww[4];
    for (int64_t i = 0; i < n; i++) ww[i] = w[i], ww[i].id = f->ids ? w[i].id : NULL;
    expect(ctx, what, f->format, ans, strlen(ans), want_content, strlen(want_content), n, ww);
    prefixes(ctx, what, f->format, ans, strlen(want_content), n);
    free(ans);
}

static void round_trips(attn_ctx *ctx) {
    static const rt_fmt F[] = {
        {"qwen", "qwen2.5.jinja", "", "", "<|im_end|>\n", 0},
        {"qwen3", "qwen3.jinja", "", "", "<|im_end|>\n", 0},
        {"llama3.1", "llama3.1.jinja", "<|begin_of_text|>", "<|eot_id|>", "<|eot_id|>", 0},
        {"mistral-v3", "mistral-v3.jinja", "<s>", "</s>", "</s>", 1},
        {"mistral-tekken", "mistral-nemo.jinja", "<s>", "</s>", "</s>", 1},
        {"mistral-small3.2", "mistral-small3.2.jinja", "<s>", "</s>", "</s>", 1},
        {"ministral3", "ministral3.jinja", "<s>", "</s>", "</s>", 0},
    };
    static const char ONE[] =
        "[{\"id\": \"abcDEF123\", \"type\": \"function\", \"function\": {\"name\": "
        "\"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3, \"unit\": null, "
        "\"deep\": {\"a\": [1, 2.5, true], \"b\": \"\\u00e9\\\"\\n\"}}}}]";
    static const want_call W1[] = {
        {"get_weather",
         "{\"city\": \"Paris\", \"days\": 3, \"unit\": null, \"deep\": {\"a\": [1, 2.5, true], "
         "\"b\": \"\xc3\xa9\\\"\\n\"}}",
         "abcDEF123"}};
    static const char TWO[] =
        "[{\"id\": \"call00001\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
        "\"arguments\": {\"city\": \"Paris\"}}}, {\"id\": \"call00002\", \"type\": \"function\", "
        "\"function\": {\"name\": \"get_time\", \"arguments\": {}}}]";
    static const want_call W2[] = {{"get_weather", "{\"city\": \"Paris\"}", "call00001"},
                                   {"get_time", "{}", "call00002"}};
    for (size_t i = 0; i < sizeof F / sizeof F[0]; i++) {
        const rt_fmt *f = &F[i];
        round_trip(ctx, f, ONE, 1, W1, "", "");
        if (strcmp(f->format, "llama3.1")) round_trip(ctx, f, TWO, 2, W2, "", "");
        /* content before the calls: the formats whose templates write it */
        if (!strcmp(f->format, "qwen") || !strcmp(f->format, "ministral3"))
            round_trip(ctx, f, TWO, 2, W2, "Let me check.", "Let me check.");
    }
}

/* ---- hand-written answers ---------------------------------------------------------------- */
static void by_hand(attn_ctx *ctx) {
    static const want_call WX[] = {{"f", "{\"x\": 1}", NULL}};
    static const want_call WXY[] = {{"f", "{\"x\": 1}", NULL}, {"g", "{}", NULL}};
#define EXPECT(what, fmt, text, content, n, w)                                                 \
    expect(ctx, what, fmt, text, sizeof text - 1, content, sizeof content - 1, n, w)
    /* qwen */
    EXPECT("qwen, one call", "qwen", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\":1}}\n"
           "</tool_call>", "", 1, WX);
    EXPECT("qwen, compact, blanks around", "qwen",
           " \n<tool_call>{\"name\":\"f\",\"arguments\":{\"x\": 1}}</tool_call>\n\n", "", 1, WX);
    EXPECT("qwen, content and two calls", "qwen",
           "Sure.\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
           "<tool_call>\n{\"arguments\": {}, \"name\": \"g\"}\n</tool_call>", "Sure.", 2, WXY);
    EXPECT("qwen3, a think block", "qwen3",
           "<think>\nI could write <tool_call> here.\n</think>\n\n<tool_call>\n{\"name\": \"f\", "
           "\"arguments\": {\"x\": 1}}\n</tool_call>",
           "<think>\nI could write <tool_call> here.\n</think>", 1, WX);
    EXPECT("qwen3, content after the think block", "qwen3",
           "<think>\n\n</think>\n\nOK.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}"
           "\n</tool_call>", "<think>\n\n</think>\n\nOK.", 1, WX);
    /* llama3.1 */
    EXPECT("llama, parameters", "llama3.1", "{\"name\": \"f\", \"parameters\": {\"x\": 1}}", "",
           1, WX);
    EXPECT("llama, arguments, python_tag", "llama3.1",
           "<|python_tag|>{\"type\": \"function\", \"name\": \"f\", \"arguments\": {\"x\": 1}}\n",
           "", 1, WX);
    /* mistral */
    static const want_call WID[] = {{"f", "{\"x\": 1}", "a1b2c3d4e"}};
    EXPECT("mistral-v3", "mistral-v3",
           "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"x\": 1}, \"id\": \"a1b2c3d4e\"}]", "",
           1, WID);
    EXPECT("mistral-tekken, no id, content", "mistral-tekken",
           "Checking. [TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\": 1}}, {\"name\": \"g\", "
           "\"arguments\": {}}]", "Checking.", 2, WXY);
    EXPECT("mistral-small3.2, call id", "mistral-small3.2",
           "[TOOL_CALLS]f[CALL_ID]a1b2c3d4e[ARGS]{\"x\": 1}", "", 1, WID);
    EXPECT("mistral-small3.2, no call id, two", "mistral-small3.2",
           "Hm.[TOOL_CALLS]f[ARGS]{\"x\":1}[TOOL_CALLS]g[ARGS]{}", "Hm.", 2, WXY);
    EXPECT("ministral3", "ministral3", "[TOOL_CALLS]f[ARGS]{\"x\": 1}\n[TOOL_CALLS]g[ARGS] {}",
           "", 2, WXY);
    /* a Unicode name and an emptiable float: json.dumps' forms */
    static const want_call WU[] = {{"m\xc3\xa9t\xc3\xa9o", "{\"t\": 1e+16, \"u\": 0.5}", NULL}};
    EXPECT("qwen, float forms", "qwen",
           "<tool_call>{\"name\": \"m\\u00e9t\xc3\xa9o\", \"arguments\": {\"t\": 1E16, "
           "\"u\": 5e-1}}</tool_call>", "", 1, WU);
    /* the hold-back offset over a reasoning block that mentions the tag, and Llama's rule */
    static const char TH[] = "<think>\nI could write <tool_call> here.\n</think>\n\n<tool_call>\n"
                             "{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>";
    prefixes(ctx, "qwen3, a think block", "qwen3", TH, 48, 1);
    /* streamed arguments: escapes, a surrogate pair, UTF-8, numbers and literals in
     * json.dumps' form at every cut */
    prefixes(ctx, "qwen, streamed forms", "qwen",
             "OK <tool_call>\n{ \"name\" : \"m\\u00e9t\xc3\xa9o\" ,\"arguments\":{\"t\" : 1E16,"
             "\"u\":[5e-1 , -0, 12, true,null, false],\"s\":\"a\\\"\\/\\ud83d\\ude00\xe2\x82\xac\\n\","
             "\"o\": { } }}\n</tool_call>\n<tool_call>{\"name\": \"g\", \"arguments\": {}}"
             "</tool_call>", 2, 2);
    prefixes(ctx, "llama, streamed", "llama3.1",
             "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"q\": \"x y\", \"n\": [1.50]}}", 0,
             1);
    prefixes(ctx, "ministral3, streamed", "ministral3",
             "[TOOL_CALLS]f[ARGS]{\"a\":\"\\u00e9\"}[TOOL_CALLS]g[ARGS]{\"b\": 2}", 0, 2);
    {
        /* a partial answer: what is settled */
        attn_chat_parse *p = NULL;
        static const char T[] = "Hi <tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 12";
        TU_STATUS(attn_chat_parse_tool_calls_partial(ctx, "qwen", T, sizeof T - 1, &p), ATTN_OK,
                  ctx);
        TU_CHECK(p && p->n_calls == 1 && !strcmp(p->calls[0].name, "f") &&
                     !strcmp(p->calls[0].arguments, "{\"x\": ") && p->content_len == 2,
                 "partial: a number waits for its end: %s",
                 p && p->n_calls ? p->calls[0].arguments : "(no call)");
        attn_chat_parse_free(p);
        static const char U[] = "<tool_call>{\"arguments\": {\"x\": 1}, \"name\": \"f\"}";
        TU_STATUS(attn_chat_parse_tool_calls_partial(ctx, "qwen", U, sizeof U - 1, &p), ATTN_OK,
                  ctx);
        TU_CHECK(p && p->n_calls == 0, "partial: arguments before the name are not streamed");
        attn_chat_parse_free(p);
    }
    /* the text that forces a call */
    {
        static const struct {
            const char *fmt, *name, *want;
        } P[] = {{"qwen", "f", "<tool_call>\n{\"name\": \"f\", \"arguments\": {"},
                 {"qwen3", NULL, "<tool_call>\n{\"name\": \""},
                 {"llama3.1", "a\"b", "{\"name\": \"a\\\"b\", \"parameters\": {"},
                 {"mistral-v3", "f", "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {"},
                 {"mistral-tekken", "f", "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {"},
                 {"mistral-small3.2", "f", "[TOOL_CALLS]f[ARGS]{"},
                 {"ministral3", NULL, "[TOOL_CALLS]"}};
        for (size_t i = 0; i < sizeof P / sizeof P[0]; i++) {
            char buf[128];
            size_t n = 0;
            TU_STATUS(attn_chat_tool_call_prefix(ctx, P[i].fmt, P[i].name, buf, sizeof buf, &n),
                      ATTN_OK, ctx);
            TU_CHECK(n == strlen(P[i].want) && !strcmp(buf, P[i].want), "prefix %s: %s", P[i].fmt,
                     buf);
        }
        size_t n = 0;
        TU_CHECK(attn_chat_tool_call_prefix(ctx, "chatml", "f", NULL, 0, &n) == ATTN_E_INVALID &&
                     attn_chat_tool_call_prefix(ctx, "ministral3", "a b", NULL, 0, &n) ==
                         ATTN_E_INVALID &&
                     attn_chat_tool_call_prefix(ctx, "qwen", "", NULL, 0, &n) == ATTN_E_INVALID,
                 "prefix: refused formats and names");
        char small[4];
        TU_STATUS(attn_chat_tool_call_prefix(ctx, "qwen", "f", small, sizeof small, &n), ATTN_OK,
                  ctx);
        TU_CHECK(n == 40 && !strcmp(small, "<to"), "prefix: cut to the buffer (%zu)", n);
    }
    TU_CHECK(attn_chat_tool_call_start("qwen3", TH, 30) == 30, "an open think block is content");
    TU_CHECK(attn_chat_tool_call_start("llama3.1", " \n", 2) == 0 &&
                 attn_chat_tool_call_start("llama3.1", " <|pyt", 6) == 0 &&
                 attn_chat_tool_call_start("llama3.1", " {", 2) == 0 &&
                 attn_chat_tool_call_start("llama3.1", " <|pz", 5) == 5 &&
                 attn_chat_tool_call_start("llama3.1", "Hello {", 7) == 7,
             "llama3.1: held back while blank or a call's start");
    TU_CHECK(attn_chat_tool_call_start("qwen", "Hi <tool_", 9) == 2 &&
                 attn_chat_tool_call_start("qwen", "Hi <tool_x", 10) == 10 &&
                 attn_chat_tool_call_start("mistral-v3", "Hi [TOOL", 8) == 2,
             "a tag's beginning and the blanks before it are held back");
    /* formats without calls: the text as it is */
    static const char Q[] = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
    no_calls(ctx, "chatml", "chatml", Q, sizeof Q - 1);
    no_calls(ctx, "gemma", "gemma", Q, sizeof Q - 1);
    static const char L[] = "{\"name\": \"f\", \"parameters\": {}}";
    static const char M[] = "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]";
    no_calls(ctx, "llama3", "llama3", L, sizeof L - 1);
    no_calls(ctx, "mistral-v7", "mistral-v7", M, sizeof M - 1);
    TU_CHECK(attn_chat_tool_call_start("chatml", Q, sizeof Q - 1) == sizeof Q - 1,
             "chatml holds nothing back");
#undef EXPECT
}

/* ---- malformed and hostile ------------------------------------------------------------- */
static void malformed(attn_ctx *ctx) {
    static const struct {
        const char *format, *text;
    } B[] = {
        {"qwen", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n"}, /* unclosed */
        {"qwen", "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}</tool_call>"},
        {"qwen", "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>"},
        {"qwen", "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>"},
        {"qwen", "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>"},
        {"qwen", "<tool_call>{\"arguments\": {}}</tool_call>"},
        {"qwen", "<tool_call>{\"name\": \"f\"}</tool_call>"},
        {"qwen", "<tool_call>[{\"name\": \"f\", \"arguments\": {}}]</tool_call>"},
        {"qwen", "<tool_call>{\"name\": \"f\", \"name\": \"g\", \"arguments\": {}}</tool_call>"},
        {"qwen", "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> and then text"},
        {"qwen", "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call><tool_call>oops"},
        {"qwen", "<tool_call>{\"name\": \"f\\u0000\", \"arguments\": {}}</tool_call>"},
        {"qwen", "<tool_call>{\"name\": \"\\ud800\", \"arguments\": {}}</tool_call>"},
        {"qwen", "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": NaN}}</tool_call>"},
        {"qwen", "<tool_call>{'name': 'f', 'arguments': {}}</tool_call>"},
        {"qwen", "<tool_call></tool_call>"},
        {"qwen", "<tool_call>"},
        {"qwen3", "<think><tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"},
        {"qwen3", "\n<think>\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"},
        {"qwen3", "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call></think>"},
        {"llama3.1", "Sure: {\"name\": \"f\", \"parameters\": {}}"},
        {"llama3.1", "{\"name\": \"f\", \"parameters\": {}} trailing"},
        {"llama3.1", "{\"name\": \"f\", \"parameters\": {}, \"arguments\": {}}"},
        {"llama3.1", "{\"name\": \"f\", \"parameters\": []}"},
        {"llama3.1", "{\"name\": \"f\"}"},
        {"llama3.1", "{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"parameters\": {}}"},
        {"llama3.1", "<|python_tag|>"},
        {"llama3.1", ""},
        {"mistral-v3", "[TOOL_CALLS] []"},
        {"mistral-v3", "[TOOL_CALLS] {\"name\": \"f\", \"arguments\": {}}"},
        {"mistral-v3", "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}, \"id\": 7}]"},
        {"mistral-v3", "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}, 3]"},
        {"mistral-v3", "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}] more"},
        {"mistral-tekken", "[TOOL_CALLS]"},
        {"mistral-small3.2", "[TOOL_CALLS]f[ARGS]"},
        {"mistral-small3.2", "[TOOL_CALLS][ARGS]{}"},
        {"mistral-small3.2", "[TOOL_CALLS]f g[ARGS]{}"},
        {"mistral-small3.2", "[TOOL_CALLS]f[CALL_ID][ARGS]{}"},
        {"mistral-small3.2", "[TOOL_CALLS]f[ARGS][1]"},
        {"mistral-small3.2", "[TOOL_CALLS]f[ARGS]{} x"},
        {"mistral-small3.2", "[TOOL_CALLS]f{}"},
        {"ministral3", "[TOOL_CALLS]\xff[ARGS]{}"},
        {"ministral3", "[TOOL_CALLS]f\n[ARGS]{}"},
        {"ministral3", "[TOOL_CALLS]f[ARGS]{}[TOOL_CALLS]"},
        {"ministral3", "[TOOL_CALLS]f[CALL_ID]x[ARGS]{}"},
    };
    for (size_t i = 0; i < sizeof B / sizeof B[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "malformed %zu", i);
        no_calls(ctx, what, B[i].format, B[i].text, strlen(B[i].text));
    }
    /* a NUL inside the text: content keeps it, nothing is read past it as a tag */
    static const char NUL[] = "a\0b<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
    static const want_call WF[] = {{"f", "{}", NULL}};
    expect(ctx, "a NUL in the content", "qwen", NUL, sizeof NUL - 1, "a\0b", 3, 1, WF);
    /* hostile sizes: deep nesting, many tags, many calls, a long text */
    const size_t big = 1 << 20;
    char *h = malloc(big + 64);
    memcpy(h, "[TOOL_CALLS] ", 13);
    memset(h + 13, '[', big);
    no_calls(ctx, "deep nesting", "mistral-v3", h, big + 13);
    for (size_t i = 0; i + 11 <= big; i += 11) memcpy(h + i, "<tool_call>", 11);
    no_calls(ctx, "a megabyte of <tool_call>", "qwen", h, big - big % 11);
    no_calls(ctx, "a megabyte of <tool_call>, qwen3", "qwen3", h, big - big % 11);
    size_t n = 0, calls = 0;
    while (n + 40 < big) n += (size_t)sprintf(h + n, "[TOOL_CALLS]f%zu[ARGS]{\"i\": %zu}", calls, calls),
                         calls++;
    attn_chat_parse *p = NULL;
    TU_STATUS(attn_chat_parse_tool_calls(ctx, "ministral3", h, n, &p), ATTN_OK, ctx);
    TU_CHECK(p && p->n_calls == (int64_t)calls && p->content_len == 0,
             "%zu calls in a megabyte: %lld", calls, p ? (long long)p->n_calls : -1LL);
    if (p && p->n_calls == (int64_t)calls) {
        char w[64];
        snprintf(w, sizeof w, "{\"i\": %zu}", calls - 1);
        TU_CHECK(!strcmp(p->calls[calls - 1].arguments, w), "the last of many calls: %s",
                 p->calls[calls - 1].arguments);
    }
    attn_chat_parse_free(p);
    free(h);
}

/* ---- the contract's edges ------------------------------------------------------------ */
static int fail_after; /* allocations left before the allocator fails; <0: never */
static void *fail_alloc(void *u, size_t n) {
    (void)u;
    if (fail_after == 0) return NULL;
    if (fail_after > 0) fail_after--;
    return malloc(n);
}
static void fail_free(void *u, void *p) {
    (void)u;
    free(p);
}

static void edges(attn_ctx *ctx) {
    attn_chat_parse *p = (attn_chat_parse *)1;
    TU_STATUS(attn_chat_parse_tool_calls(ctx, "nope", "x", 1, &p), ATTN_E_INVALID, ctx);
    TU_CHECK(p == NULL, "*out is NULL after a failure");
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "nope") != NULL, "the message names the format: %s",
             attn_ctx_errmsg(ctx));
    TU_STATUS(attn_chat_parse_tool_calls(ctx, NULL, "x", 1, &p), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_chat_parse_tool_calls(ctx, "qwen", NULL, 1, &p), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_chat_parse_tool_calls(ctx, "qwen", "x", 1, NULL), ATTN_E_INVALID, ctx);
    TU_CHECK(attn_chat_parse_tool_calls(NULL, "qwen", "x", 1, &p) == ATTN_E_INVALID, "NULL ctx");
    TU_STATUS(attn_chat_parse_tool_calls(ctx, "qwen", NULL, 0, &p), ATTN_OK, ctx);
    TU_CHECK(p && p->content_len == 0 && p->content[0] == 0 && p->n_calls == 0, "empty text");
    attn_chat_parse_free(p);
    attn_chat_parse_free(NULL);
    TU_CHECK(attn_chat_tool_call_start("nope", "abc", 3) == 3, "unknown format holds nothing");
    TU_CHECK(attn_chat_tool_call_start("qwen", NULL, 0) == 0, "NULL empty text");
    /* over the text limit */
    attn_ctx_set_limit(ctx, ATTN_LIMIT_TEXT_BYTES, 4);
    TU_STATUS(attn_chat_parse_tool_calls(ctx, "qwen", "hello", 5, &p), ATTN_E_UNSUPPORTED, ctx);
    attn_ctx_set_limit(ctx, ATTN_LIMIT_TEXT_BYTES, (int64_t)1 << 30);
    /* a malformed call leaves ctx's message as it was */
    attn_chat_parse_tool_calls(ctx, "nope", "x", 1, &p);
    char before[512];
    snprintf(before, sizeof before, "%s", attn_ctx_errmsg(ctx));
    TU_STATUS(attn_chat_parse_tool_calls(ctx, "qwen", "<tool_call>{bad</tool_call>", 27, &p),
              ATTN_OK, ctx);
    TU_CHECK(!strcmp(before, attn_ctx_errmsg(ctx)), "message changed: %s", attn_ctx_errmsg(ctx));
    attn_chat_parse_free(p);
    /* an allocator that fails at each allocation in turn: ATTN_E_NOMEM or a right answer */
    static const char T[] = "Hi. <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}"
                            "</tool_call><tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>";
    int nomem = 0;
    for (int k = 0; k < 40; k++) {
        attn_ctx_params cp;
        memset(&cp, 0, sizeof cp);
        cp.threads = 1, cp.alloc = fail_alloc, cp.free = fail_free;
        fail_after = -1;
        attn_ctx *c2 = NULL;
        if (attn_ctx_create(&cp, &c2) != ATTN_OK) continue;
        fail_after = k;
        attn_chat_parse *q = NULL;
        attn_status st = attn_chat_parse_tool_calls(c2, "qwen", T, sizeof T - 1, &q);
        fail_after = -1;
        if (st == ATTN_E_NOMEM) nomem++;
        TU_CHECK(st == ATTN_E_NOMEM ? q == NULL
                                    : st == ATTN_OK && q && q->n_calls == 2 &&
                                          !strcmp(q->content, "Hi.") &&
                                          !strcmp(q->calls[0].arguments, "{\"a\": [1, 2]}"),
                 "failing allocation %d: %s", k, attn_status_name(st));
        attn_chat_parse_free(q);
        attn_ctx_free(c2);
    }
    TU_CHECK(nomem > 0, "no allocation failure was met");
}

int main(void) {
    attn_ctx *ctx = NULL;
    TU_CHECK(attn_ctx_create(NULL, &ctx) == ATTN_OK, "context");
    if (!ctx) return tu_finish("test_tool_calls");
    round_trips(ctx);
    by_hand(ctx);
    malformed(ctx);
    edges(ctx);
    attn_ctx_free(ctx);
    return tu_finish("test_tool_calls");
}
