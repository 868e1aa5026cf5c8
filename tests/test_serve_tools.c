/* attn serve's tool calls in answers (src/serve/serve_tools.c): model answers written in each chat
 * format's form are read by attn_chat_parse_tool_calls and turned into the chat completion's
 * message and the stream's tool_calls delta; the JSON is read back with the server's own
 * parser (src/serve/serve_json.c) and checked against OpenAI's shape: content null when the answer
 * is only calls, each call {"id", "type": "function", "function": {"name", "arguments": a
 * string holding the arguments' JSON}}, "index" in the stream delta, ids unique and of 9
 * letters and digits where the model gave none (Mistral's templates take those back), the
 * model's own where it gave one.  A plain answer stays "content". */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "serve_jsa.h"
#include "serve_json.h"
#include "serve_tools.h"
#include "testutil.h"

/* b's text wrapped as one JSON object, parsed; NULL (a failure recorded) when it is not JSON */
static const sj *parse(sj_doc *d, sbuf *b, const char *what) {
    sbuf w = {0};
    sb_puts(&w, "{");
    sb_put(&w, b->p, b->n);
    sb_puts(&w, "}");
    char err[256] = "";
    int ok = sj_parse(d, w.p, w.n, err, sizeof err);
    TU_CHECK(ok, "%s: not JSON (%s): %.*s", what, err, (int)w.n, w.p);
    sb_free(&w);
    return ok ? d->root : NULL;
}

static int alnum9(const char *s, size_t n) {
    if (n != 9) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9')))
            return 0;
    return 1;
}

typedef struct wc {
    const char *name, *args, *id; /* id NULL: one made by the server */
} wc;

/* One forced answer through the parser and the writers. */
static void one(attn_ctx *ctx, const char *format, const char *answer, const char *content,
                int n, const wc *w) {
    attn_chat_parse *p = NULL;
    TU_STATUS(attn_chat_parse_tool_calls(ctx, format, answer, strlen(answer), &p), ATTN_OK, ctx);
    if (!p) return;
    TU_CHECK(p->n_calls == n, "%s: %lld calls, expected %d", format, (long long)p->n_calls, n);
    /* the message */
    sbuf b = {0};
    st_message_json(&b, answer, strlen(answer), p, 7, 12345);
    sj_doc d;
    const sj *root = parse(&d, &b, format);
    const sj *m = sj_get(root, "message");
    const sj *c = sj_get(m, "content"), *tc = sj_get(m, "tool_calls");
    TU_CHECK(m && sj_get(m, "role") && !strcmp(sj_get(m, "role")->s, "assistant"),
             "%s: role", format);
    if (n == 0) {
        TU_CHECK(c && c->kind == SJ_STR && !strcmp(c->s, answer) && !tc,
                 "%s: a plain answer is its content, without tool_calls", format);
    } else if (!content) {
        TU_CHECK(c && c->kind == SJ_NULL, "%s: content null when the answer is only calls",
                 format);
    } else {
        TU_CHECK(c && c->kind == SJ_STR && !strcmp(c->s, content), "%s: content \"%s\"", format,
                 c && c->kind == SJ_STR ? c->s : "?");
    }
    /* the stream delta */
    sbuf e = {0};
    sb_puts(&e, "\"tool_calls\":");
    st_calls_json(&e, p, 7, 12345, 1);
    sj_doc d2;
    const sj *dt = sj_get(parse(&d2, &e, format), "tool_calls");
    for (int pass = 0; pass < 2 && n > 0; pass++) {
        const sj *arr = pass ? dt : tc;
        TU_CHECK(arr && arr->kind == SJ_ARR && (int)arr->n == n, "%s: tool_calls of %d", format,
                 n);
        if (!arr || arr->kind != SJ_ARR) continue;
        int i = 0;
        const char *ids[8] = {0};
        for (const sj *x = arr->first; x && i < n; x = x->next, i++) {
            const sj *id = sj_get(x, "id"), *ty = sj_get(x, "type"), *f = sj_get(x, "function");
            const sj *nm = sj_get(f, "name"), *ar = sj_get(f, "arguments"), *ix = sj_get(x, "index");
            TU_CHECK(ty && ty->kind == SJ_STR && !strcmp(ty->s, "function"), "%s: type", format);
            TU_CHECK(nm && nm->kind == SJ_STR && !strcmp(nm->s, w[i].name), "%s: name %d", format,
                     i);
            TU_CHECK(ar && ar->kind == SJ_STR && !strcmp(ar->s, w[i].args),
                     "%s: call %d's arguments %s, expected %s", format, i,
                     ar && ar->kind == SJ_STR ? ar->s : "?", w[i].args);
            /* the arguments string is JSON itself */
            sj_doc a;
            char err[128];
            TU_CHECK(ar && ar->kind == SJ_STR && sj_parse(&a, ar->s, ar->len, err, sizeof err) &&
                         a.root->kind == SJ_OBJ,
                     "%s: call %d's arguments are a JSON object", format, i);
            sj_free(&a);
            TU_CHECK(id && id->kind == SJ_STR &&
                         (w[i].id ? !strcmp(id->s, w[i].id) : alnum9(id->s, id->len)),
                     "%s: call %d's id %s", format, i, id && id->kind == SJ_STR ? id->s : "?");
            for (int j = 0; j < i && id && id->kind == SJ_STR; j++)
                TU_CHECK(strcmp(ids[j], id->s), "%s: ids %d and %d are equal", format, j, i);
            if (id && id->kind == SJ_STR) ids[i] = id->s;
            TU_CHECK(pass ? ix && ix->kind == SJ_NUM && ix->num == i : !ix,
                     "%s: index only in the stream delta", format);
        }
    }
    sj_free(&d), sj_free(&d2);
    sb_free(&b), sb_free(&e);
    attn_chat_parse_free(p);
}

/* st_args_check: value against schema, want 1 (fits) or 0 (with the message holding frag) */
static void fits(const char *schema, const char *value, int want, const char *frag) {
    sj_doc ds = {0}, dv = {0};
    char err[256] = "", path[96] = "arguments";
    int ok = sj_parse(&ds, schema, strlen(schema), err, sizeof err) &&
             sj_parse(&dv, value, strlen(value), err, sizeof err);
    TU_CHECK(ok, "test JSON: %s", err);
    if (ok) {
        int got = st_args_check(ds.root, dv.root, path, sizeof path, err, sizeof err);
        TU_CHECK(got == want, "%s against %s: %d, expected %d (%s)", value, schema, got, want,
                 err);
        TU_CHECK(want || (frag && strstr(err, frag)), "%s against %s: the message '%s' lacks "
                 "'%s'", value, schema, err, frag ? frag : "");
        TU_CHECK(!strcmp(path, "arguments"), "the path is restored: %s", path);
    }
    sj_free(&ds), sj_free(&dv);
}

static void args_schema(void) {
    const char *w = "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, "
                    "\"unit\": {\"type\": \"string\", \"enum\": [\"C\", \"F\"]}, \"days\": "
                    "{\"type\": \"integer\", \"minimum\": 1, \"maximum\": 7}, \"tags\": "
                    "{\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"maxItems\": 2}, "
                    "\"at\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"null\"}]}}, "
                    "\"required\": [\"city\"], \"additionalProperties\": false}";
    fits(w, "{\"city\": \"Paris\"}", 1, NULL);
    fits(w, "{\"city\": \"Paris\", \"unit\": \"C\", \"days\": 3, \"tags\": [\"a\"], \"at\": null}",
         1, NULL);
    fits(w, "{}", 0, "lacks its required 'city'");
    fits(w, "{\"city\": 3}", 0, "arguments.city must be of type string, not a number");
    fits(w, "{\"city\": \"x\", \"unit\": \"K\"}", 0, "arguments.unit is \"K\", not one of");
    fits(w, "{\"city\": \"x\", \"days\": 2.5}", 0, "arguments.days must be of type integer");
    fits(w, "{\"city\": \"x\", \"days\": 9}", 0, "arguments.days is 9, outside [1, 7]");
    fits(w, "{\"city\": \"x\", \"tags\": [\"a\", 2]}", 0, "arguments.tags[1] must be of type string");
    fits(w, "{\"city\": \"x\", \"tags\": [\"a\", \"b\", \"c\"]}", 0, "3 items");
    fits(w, "{\"city\": \"x\", \"at\": 5}", 0, "arguments.at (a number) matches none");
    fits(w, "{\"city\": \"x\", \"zip\": 1}", 0, "has 'zip', which is not among");
    fits(w, "[1]", 0, "must be of type object, not an array");
    /* a list of types; nested objects; unknown keywords and types are not held against it */
    fits("{\"type\": [\"number\", \"null\"]}", "null", 1, NULL);
    fits("{\"type\": [\"number\", \"null\"]}", "\"1\"", 0, "of type [\"number\", \"null\"]");
    fits("{\"properties\": {\"a\": {\"properties\": {\"b\": {\"const\": true}}}}}",
         "{\"a\": {\"b\": false}}", 0, "arguments.a.b must be true");
    fits("{\"type\": \"string\", \"format\": \"date\", \"pattern\": \"^x\"}", "\"y\"", 1, NULL);
    fits("{\"type\": \"uuid\"}", "1", 1, NULL);
    fits("true", "{\"anything\": 1}", 1, NULL);
    /* the parameters of a function by name, and its strict flag */
    sj_doc d = {0};
    char err[128];
    const char *tools = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"strict\": "
                        "true, \"parameters\": {\"type\": \"object\"}}}, {\"type\": \"function\", "
                        "\"function\": {\"name\": \"g\"}}]";
    const int parsed = sj_parse(&d, tools, strlen(tools), err, sizeof err);
    TU_CHECK(parsed, "tools JSON: %s", err);
    if (parsed) {
        int strict = 0;
        const sj *p = st_tool_parameters(d.root, "f", &strict);
        TU_CHECK(p && p->kind == SJ_OBJ && strict, "f's parameters, strict");
        TU_CHECK(!st_tool_parameters(d.root, "g", &strict) && !strict, "g: no parameters");
        TU_CHECK(!st_tool_parameters(d.root, "h", &strict), "h: no such function");
    }
    sj_free(&d);
}


/* ---- the JSON acceptor (serve_jsa.c) against sj_parse ---------------------------------------
 * Random documents (objects at the top, nested objects and arrays, strings with escapes and
 * UTF-8, numbers of every form, literals, whitespace): every prefix is accepted, the whole is
 * done.  Then each document with one byte changed, or cut: the acceptor takes all its bytes and
 * ends done exactly when sj_parse reads it as one object (an independent parser). */
static uint64_t jrs = 0x2545f4914f6cdd1dull;
static unsigned jr(unsigned n) {
    jrs ^= jrs << 13, jrs ^= jrs >> 7, jrs ^= jrs << 17;
    return (unsigned)((jrs >> 11) % n);
}
static void jput(char *b, size_t *k, size_t cap, const char *s) {
    while (*s && *k + 1 < cap) b[(*k)++] = *s++;
    b[*k] = 0;
}
static void jws(char *b, size_t *k, size_t cap) {
    static const char *const w[] = {"", "", " ", "\n", "  ", "\t", "\r\n"};
    jput(b, k, cap, w[jr(7)]);
}
static void jvalue(char *b, size_t *k, size_t cap, int depth, int obj) {
    static const char *const atoms[] = {"0", "-0", "12", "-3.25", "1e5", "2E-7", "0.5e+3", "true",
                                        "false", "null", "\"\"", "\"a b\"", "\"\\\"q\\\"\"",
                                        "\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\u00e9\\uD83D\\uDE00\"",
                                        "\"caf\xc3\xa9 \xe6\x97\xa5\"", "123456789012"};
    const unsigned pick = obj ? 0 : jr(depth < 5 ? 4 : 1) ;
    if (obj || pick == 1) { /* an object */
        jput(b, k, cap, "{");
        const unsigned n = jr(4);
        for (unsigned i = 0; i < n; i++) {
            jws(b, k, cap);
            char key[32];
            snprintf(key, sizeof key, "\"k%u\"", jr(100));
            jput(b, k, cap, key);
            jws(b, k, cap);
            jput(b, k, cap, ":");
            jws(b, k, cap);
            jvalue(b, k, cap, depth + 1, 0);
            jws(b, k, cap);
            if (i + 1 < n) jput(b, k, cap, ",");
        }
        jws(b, k, cap);
        jput(b, k, cap, "}");
    } else if (pick == 2) { /* an array */
        jput(b, k, cap, "[");
        const unsigned n = jr(4);
        for (unsigned i = 0; i < n; i++) {
            jws(b, k, cap);
            jvalue(b, k, cap, depth + 1, 0);
            jws(b, k, cap);
            if (i + 1 < n) jput(b, k, cap, ",");
        }
        jput(b, k, cap, "]");
    } else {
        jput(b, k, cap, atoms[jr(sizeof atoms / sizeof atoms[0])]);
    }
}

/* 1 if the acceptor takes all n bytes of d (fed in pieces of 1..4) and is done */
static int jsa_whole(const char *d, size_t n, int *prefix_ok) {
    attn__jsa s;
    attn__jsa_init(&s);
    *prefix_ok = 1;
    for (size_t i = 0; i < n;) {
        size_t m = 1 + jr(4);
        if (m > n - i) m = n - i;
        if (!attn__jsa_feed(&s, d + i, m)) {
            *prefix_ok = 0;
            return 0;
        }
        i += m;
    }
    return attn__jsa_done(&s);
}

static void jsa_check(void) {
    char doc[8192], mut[8192], err[256];
    int good = 0, agree = 0, total = 0, rejected = 0;
    for (int t = 0; t < 3000; t++) {
        size_t k = 0;
        jvalue(doc, &k, sizeof doc, 0, 1);
        int pok;
        const int whole = jsa_whole(doc, k, &pok);
        sj_doc d = {0};
        const int parsed = sj_parse(&d, doc, k, err, sizeof err) && d.root->kind == SJ_OBJ;
        sj_free(&d);
        good += whole && parsed;
        for (int m = 0; m < 4; m++) {
            memcpy(mut, doc, k + 1);
            size_t n = k;
            if (m == 3) n = jr((unsigned)k + 1); /* cut */
            else mut[jr((unsigned)k)] = "{}[]\",:0-.eE+tfnu\\ \x01\xc3x"[jr(22)];
            const int w = jsa_whole(mut, n, &pok);
            sj_doc e = {0};
            const int p = sj_parse(&e, mut, n, err, sizeof err) && e.root->kind == SJ_OBJ;
            sj_free(&e);
            total++, agree += w == p, rejected += !w;
            if (w != p)
                TU_CHECK(0, "JSON acceptor %s, sj_parse %s (%s): '%.*s'", w ? "done" : "not done",
                         p ? "an object" : "no object", err, (int)n, mut);
        }
    }
    TU_CHECK(good == 3000, "JSON acceptor: %d of 3000 random objects whole and parsed", good);
    printf("JSON acceptor: 3000 random objects, %d changed or cut ones as sj_parse (%d of them "
           "not JSON)\n", agree, rejected);
    /* the bounds: 64 levels, 16 whitespace bytes in a row; nothing after the object but blanks */
    attn__jsa s;
    char deep[80];
    memset(deep, '[', sizeof deep);
    deep[0] = '{', deep[1] = '"', deep[2] = '"', deep[3] = ':';
    attn__jsa_init(&s);
    TU_CHECK(attn__jsa_feed(&s, deep, 4 + 63) && !attn__jsa_feed(&s, "[", 1),
             "JSON acceptor: 64 levels, not 65");
    attn__jsa_init(&s);
    TU_CHECK(attn__jsa_feed(&s, "{                ", 17) && !attn__jsa_feed(&s, " ", 1),
             "JSON acceptor: 16 blanks in a row, not 17");
    attn__jsa_init(&s);
    TU_CHECK(attn__jsa_feed(&s, "{}\n", 3) && attn__jsa_done(&s) && !attn__jsa_feed(&s, "{", 1),
             "JSON acceptor: done after the object");
    attn__jsa_init(&s);
    TU_CHECK(!attn__jsa_feed(&s, "[1]", 3), "JSON acceptor: the top level is an object");
}

int main(void) {
    attn_ctx *ctx = NULL;
    TU_CHECK(attn_ctx_create(NULL, &ctx) == ATTN_OK, "context");
    if (!ctx) return tu_finish("test_serve_tools");
    args_schema();
    jsa_check();
    static const wc W[] = {{"get_weather", "{\"city\": \"Paris\"}", NULL},
                           {"get_time", "{\"tz\": \"Europe/Paris\", \"q\": \"\\\"x\\\"\"}", NULL}};
    one(ctx, "qwen", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                     "\"Paris\"}}\n</tool_call>", NULL, 1, W);
    one(ctx, "qwen3", "<think>\nWeather and time.\n</think>\n\n<tool_call>\n{\"name\": "
                      "\"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>\n"
                      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": "
                      "\"Europe/Paris\", \"q\": \"\\\"x\\\"\"}}\n</tool_call>",
        "<think>\nWeather and time.\n</think>", 2, W);
    one(ctx, "llama3.1", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
        NULL, 1, W);
    static const wc WM[] = {{"get_weather", "{\"city\": \"Paris\"}", "aB3dE5gH9"}};
    one(ctx, "mistral-v3", "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                           "\"Paris\"}, \"id\": \"aB3dE5gH9\"}]", NULL, 1, WM);
    one(ctx, "ministral3", "Checking.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}"
                           "[TOOL_CALLS]get_time[ARGS]{\"tz\": \"Europe/Paris\", \"q\": "
                           "\"\\\"x\\\"\"}", "Checking.", 2, W);
    /* no calls: the text as content; a malformed call too */
    one(ctx, "qwen", "Paris is sunny.", NULL, 0, NULL);
    one(ctx, "qwen", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": ", NULL, 0,
        NULL);
    /* many calls: distinct ids */
    char many[4096];
    size_t k = 0;
    for (int i = 0; i < 8; i++)
        k += (size_t)snprintf(many + k, sizeof many - k,
                              "[TOOL_CALLS]f[ARGS]{\"i\": %d}", i);
    attn_chat_parse *p = NULL;
    TU_STATUS(attn_chat_parse_tool_calls(ctx, "ministral3", many, k, &p), ATTN_OK, ctx);
    char id[8][48];
    for (int i = 0; p && i < 8 && i < p->n_calls; i++) {
        st_call_id(id[i], &p->calls[i], 7, i, 12345);
        for (int j = 0; j < i; j++) TU_CHECK(strcmp(id[i], id[j]), "ids %d, %d equal", i, j);
    }
    char other[48];
    if (p && p->n_calls > 0) {
        st_call_id(other, &p->calls[0], 8, 0, 12345);
        TU_CHECK(strcmp(other, id[0]), "another request, another id");
    }
    attn_chat_parse_free(p);
    attn_ctx_free(ctx);
    return tu_finish("test_serve_tools");
}
