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
 * UTF-8, numbers of every form, literals, whitespace), each also with one byte changed, or cut:
 * the acceptor takes all its bytes and ends done exactly when sj_parse (an independent parser)
 * reads it as one object and it keeps the acceptor's whitespace policy (ws_policy_ok). */
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

/* The acceptor's own whitespace policy, which JSON itself does not have: no blank before the
 * object, runs of at most 16 blanks outside strings with at most one newline among them. */
static int ws_policy_ok(const char *d, size_t n) {
    int in = 0, esc = 0, run = 0, nl = 0;
    for (size_t i = 0; i < n; i++) {
        const char c = d[i];
        if (in) {
            if (esc) esc = 0;
            else if (c == '\\') esc = 1;
            else if (c == '"') in = 0;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            if (i == 0 || ++run > 16 || (c == '\n' && ++nl > 1)) return 0;
            continue;
        }
        run = 0, nl = 0;
        if (c == '"') in = 1;
    }
    return 1;
}

/* 1 if the acceptor takes all n bytes of d (fed in pieces of 1..4) and is done */
static int jsa_whole(const char *d, size_t n, int *prefix_ok) {
    attn__jsa s;
    attn__jsa_init(&s, NULL);
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
        const int parsed = sj_parse(&d, doc, k, err, sizeof err) && d.root->kind == SJ_OBJ &&
                           ws_policy_ok(doc, k);
        sj_free(&d);
        good += whole && parsed;
        for (int m = 0; m < 4; m++) {
            memcpy(mut, doc, k + 1);
            size_t n = k;
            if (m == 3) n = jr((unsigned)k + 1); /* cut */
            else mut[jr((unsigned)k)] = "{}[]\",:0-.eE+tfnu\\ \x01\xc3x"[jr(22)];
            const int w = jsa_whole(mut, n, &pok);
            sj_doc e = {0};
            const int p = sj_parse(&e, mut, n, err, sizeof err) && e.root->kind == SJ_OBJ &&
                          ws_policy_ok(mut, n);
            sj_free(&e);
            total++, agree += w == p, rejected += !w;
            if (w != p) {
                for (size_t q = 0; q < n; q++)
                    if (mut[q] == '\n' || mut[q] == '\r' || mut[q] == '\t') mut[q] = '~';
                TU_CHECK(0, "JSON acceptor %s, sj_parse %s (%s): '%.*s'", w ? "done" : "not done",
                         p ? "an object" : "no object", err, (int)n, mut);
            }
        }
    }
    TU_CHECK(good > 2000, "JSON acceptor: %d of 3000 random objects whole and parsed", good);
    printf("JSON acceptor: 3000 random objects, %d changed or cut ones as sj_parse (%d of them "
           "not JSON)\n", agree, rejected);
    /* the bounds: 32 levels, 16 whitespace bytes in a row; nothing after the object but blanks */
    attn__jsa s;
    char deep[80];
    memset(deep, '[', sizeof deep);
    deep[0] = '{', deep[1] = '"', deep[2] = '"', deep[3] = ':';
    attn__jsa_init(&s, NULL);
    TU_CHECK(attn__jsa_feed(&s, deep, 4 + 31) && !attn__jsa_feed(&s, "[", 1),
             "JSON acceptor: 32 levels, not 33");
    attn__jsa_init(&s, NULL);
    TU_CHECK(attn__jsa_feed(&s, "{                ", 17) && !attn__jsa_feed(&s, " ", 1),
             "JSON acceptor: 16 blanks in a row, not 17");
    attn__jsa_init(&s, NULL);
    TU_CHECK(attn__jsa_feed(&s, "{\n  \"a\": [\n    1,\r\n    2\n  ]\n}", 30) &&
                 attn__jsa_done(&s), "JSON acceptor: pretty-printed");
    attn__jsa_init(&s, NULL);
    TU_CHECK(attn__jsa_feed(&s, "{\n", 2) && !attn__jsa_feed(&s, "\n", 1),
             "JSON acceptor: one newline between two tokens, not two");
    attn__jsa_init(&s, NULL);
    TU_CHECK(!attn__jsa_feed(&s, " {", 2), "JSON acceptor: nothing before the object");
    attn__jsa_init(&s, NULL);
    TU_CHECK(attn__jsa_feed(&s, "{}\n", 3) && attn__jsa_done(&s) && !attn__jsa_feed(&s, "{", 1),
             "JSON acceptor: done after the object");
    attn__jsa_init(&s, NULL);
    TU_CHECK(!attn__jsa_feed(&s, "[1]", 3), "JSON acceptor: the top level is an object");
}

/* ---- the acceptor with a schema, against st_args_check ------------------------------------
 * A schema with every enforced keyword but $ref (which st_args_check does not follow: the
 * recursive schema below checks it); documents made of right and wrong keys, types, enum
 * members, lengths and nestings (no duplicate keys, no minimum / maximum: st_args_check checks
 * those, the acceptor does not; nor 7.0, an integer to st_args_check and the number 7 of an
 * enum, which the acceptor takes only as written, 7; nor 1e3, which it takes as a number, not an
 * integer): the acceptor takes a whole document and ends done exactly
 * when the strict checker (an independent implementation) passes it.  Then the refusals. */
static const char *const cat_schema =
    "{\"type\": \"object\", \"properties\": {"
    "\"name\": {\"type\": \"string\"}, \"age\": {\"type\": \"integer\"},"
    "\"w\": {\"type\": [\"number\", \"null\"]},"
    "\"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"minItems\": 1, \"maxItems\": 3},"
    "\"kind\": {\"enum\": [\"cat\", \"dog\", 7, null]},"
    "\"ok\": {\"type\": \"boolean\"},"
    "\"owner\": {\"anyOf\": [{\"type\": \"object\", \"properties\": {\"n\": {\"type\": "
    "\"string\"}, \"kids\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}}},"
    "\"required\": [\"n\"], \"additionalProperties\": false}, {\"type\": \"null\"}]},"
    "\"extra\": {\"type\": \"object\"}},"
    "\"required\": [\"name\", \"age\"], \"additionalProperties\": false}";

static void jdoc_value(char *b, size_t *k, size_t cap, int depth, const char *key);
static void jdoc_person(char *b, size_t *k, size_t cap, int depth) {
    jput(b, k, cap, "{");
    int first = 1;
    if (jr(8)) jput(b, k, cap, "\"n\": \"Al\""), first = 0;
    if (depth < 3 && jr(3) == 0) {
        if (!first) jput(b, k, cap, ", ");
        jput(b, k, cap, "\"kids\": [");
        const unsigned n = jr(3);
        for (unsigned i = 0; i < n; i++) {
            if (i) jput(b, k, cap, ",");
            jdoc_value(b, k, cap, depth + 1, "kid");
        }
        jput(b, k, cap, "]");
        first = 0;
    }
    if (jr(10) == 0) jput(b, k, cap, first ? "\"zz\": 1" : ", \"zz\": 1");
    jput(b, k, cap, "}");
}
static void jdoc_value(char *b, size_t *k, size_t cap, int depth, const char *key) {
    static const char *const any[] = {"\"s\"", "12", "-3", "2.5", "2.5e-1", "true", "false", "null",
                                      "[]", "{}", "\"cat\"", "\"cow\"", "7", "[\"a\"]"};
    const unsigned r = jr(4);
    if (r == 0) { /* anything */
        jput(b, k, cap, any[jr(sizeof any / sizeof any[0])]);
        return;
    }
    if (!strcmp(key, "name")) jput(b, k, cap, "\"Tom \\\"T\\\" \\u00e9\"");
    else if (!strcmp(key, "age")) jput(b, k, cap, r == 1 ? "-4" : "30");
    else if (!strcmp(key, "w")) jput(b, k, cap, r == 1 ? "null" : "4.25e1");
    else if (!strcmp(key, "ok")) jput(b, k, cap, r == 1 ? "true" : "false");
    else if (!strcmp(key, "kind")) jput(b, k, cap, r == 1 ? "\"dog\"" : r == 2 ? "7" : "null");
    else if (!strcmp(key, "extra")) jput(b, k, cap, r == 1 ? "{\"q\": [1, {\"r\": null}]}" : "{}");
    else if (!strcmp(key, "tags")) {
        jput(b, k, cap, "[");
        const unsigned n = jr(5);
        for (unsigned i = 0; i < n; i++) jput(b, k, cap, i ? ", \"t\"" : "\"t\"");
        jput(b, k, cap, "]");
    } else if (!strcmp(key, "kid")) {
        jput(b, k, cap, "\"Bo\"");
    } else if (!strcmp(key, "owner")) {
        if (r == 1) jput(b, k, cap, "null");
        else jdoc_person(b, k, cap, depth);
    } else {
        jput(b, k, cap, "1");
    }
}

static void jss_check(void) {
    char err[256];
    sj_doc sd = {0};
    attn__jss *sc = NULL;
    TU_CHECK(sj_parse(&sd, cat_schema, strlen(cat_schema), err, sizeof err) &&
                 attn__jss_compile(sd.root, 0, &sc, err, sizeof err),
             "the test schema compiles: %s", err);
    if (!sc) {
        sj_free(&sd);
        return;
    }
    static const char *const keys[] = {"name", "age", "w", "tags", "kind", "ok", "owner",
                                       "extra", "nam", "ages", "other"};
    int agree = 0, fits = 0, total = 0;
    char doc[4096], path[128];
    for (int t = 0; t < 4000; t++) {
        size_t k = 0;
        int used[11] = {0};
        jput(doc, &k, sizeof doc, "{");
        const unsigned n = 2 + jr(6);
        for (unsigned i = 0, w = 0; i < n; i++) {
            /* name and age first most of the time (they are required) */
            const unsigned q = i < 2 && jr(5) ? i : jr(t % 5 == 0 ? 11 : 8);
            if (used[q]) continue;
            used[q] = 1;
            if (w++) jput(doc, &k, sizeof doc, jr(2) ? "," : " ,\n ");
            jput(doc, &k, sizeof doc, "\"");
            jput(doc, &k, sizeof doc, keys[q]);
            jput(doc, &k, sizeof doc, "\": ");
            jdoc_value(doc, &k, sizeof doc, 0, keys[q]);
        }
        jput(doc, &k, sizeof doc, "}");
        int pok;
        attn__jsa a;
        attn__jsa_init(&a, sc);
        int w = 1;
        for (size_t i = 0; i < k && w;) { /* pieces of 1..4 bytes */
            size_t m = 1 + jr(4);
            if (m > k - i) m = k - i;
            w = attn__jsa_feed(&a, doc + i, m);
            i += m;
        }
        w = w && attn__jsa_done(&a);
        (void)pok;
        sj_doc d = {0};
        const int c = sj_parse(&d, doc, k, err, sizeof err) &&
                      st_args_check(sd.root, d.root, path, sizeof path, err, sizeof err);
        sj_free(&d);
        total++, agree += w == c, fits += c;
        if (w != c)
        {
            for (char *q = doc; *q; q++)
                if (*q == '\n') *q = ' ';
            TU_CHECK(0, "schema acceptor %s, the strict checker %s: %s", w ? "fits" : "no",
                     c ? "fits" : "no", doc);
        }
    }
    TU_CHECK(fits > 400 && total - fits > 400, "schema documents: %d of %d fit", fits, total);
    printf("JSON schema acceptor: %d of %d documents judged as st_args_check (%d fit)\n", agree,
           total, fits);
    /* a prefix that fits is taken; each required property's absence, a wrong type, an unknown
     * key, a fifth tag, a fraction in an integer are refused where they start */
    static const struct {
        const char *text;
        int ok;
    } pre[] = {{"{\"name\": \"T\", \"age\": 3", 1}, {"{\"age\": 3}", 0}, {"{\"name\": 1", 0},
               {"{\"nick", 0}, {"{\"age\": 3.", 0}, {"{\"age\": 3e", 0},
               {"{\"tags\": []", 0}, {"{\"tags\": [\"a\", \"b\", \"c\",", 0},
               {"{\"kind\": \"c", 1}, {"{\"kind\": \"cow", 0}, {"{\"kind\": 7", 1},
               {"{\"kind\": 70", 0}, {"{\"owner\": {}", 0}, {"{\"owner\": {\"n\": \"x\"}", 1},
               {"{\"owner\": n", 1}, {"{\"owner\": 5", 0}, {"{\"name\": \"a\", \"name", 0},
               {"{\"ok\": tru", 1}, {"{\"ok\": nul", 0}, {"{\"extra\": {\"a\\u00e9\": [1]}", 1}};
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++) {
        attn__jsa a;
        attn__jsa_init(&a, sc);
        TU_CHECK(attn__jsa_feed(&a, pre[i].text, strlen(pre[i].text)) == pre[i].ok,
                 "schema prefix '%s': %s", pre[i].text, pre[i].ok ? "refused" : "taken");
    }
    attn__jss_free(sc);
    sj_free(&sd);
    /* refused schemas, by name */
    static const struct {
        const char *schema, *why;
    } bad[] = {{"{\"type\": \"array\"}", "root must be an object"},
               {"{\"type\": \"object\", \"allOf\": []}", "allOf"},
               {"{\"type\": \"object\", \"properties\": {\"a\": {\"anyOf\": [{\"type\": "
                "\"object\"}, {\"type\": \"object\", \"required\": []}]}}}",
                "same character"},
               {"{\"type\": \"object\", \"properties\": {\"a\": {\"$ref\": \"#/$defs/X\"}}}",
                "cannot resolve"},
               {"{\"type\": \"object\", \"required\": [\"a\"]}", "not among the properties"},
               {"{\"type\": \"object\", \"properties\": {\"a\\\"b\": {}}}", "escape"},
               {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"date\"}}}",
                "type it does not know"},
               {"{\"type\": \"object\", \"properties\": {\"a\": {\"enum\": [[1]]}}}",
                "object or an array"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sj_doc d = {0};
        attn__jss *x = NULL;
        err[0] = 0;
        const int ok = sj_parse(&d, bad[i].schema, strlen(bad[i].schema), err, sizeof err) &&
                       attn__jss_compile(d.root, 0, &x, err, sizeof err);
        TU_CHECK(!ok && !x && strstr(err, bad[i].why), "schema %s: '%s' (want '%s')",
                 bad[i].schema, err, bad[i].why);
        attn__jss_free(x);
        sj_free(&d);
    }
    attn__jss_free(NULL);
    /* strict: an object without additionalProperties takes no other key */
    for (int strict = 0; strict < 2; strict++) {
        sj_doc d = {0};
        attn__jss *x = NULL;
        const char *sch = "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\"}}}";
        if (sj_parse(&d, sch, strlen(sch), err, sizeof err) &&
            attn__jss_compile(d.root, strict, &x, err, sizeof err)) {
            attn__jsa a;
            attn__jsa_init(&a, x);
            TU_CHECK(attn__jsa_feed(&a, "{\"b\"", 4) == !strict, "strict %d: another key %s",
                     strict, strict ? "taken" : "refused");
        }
        TU_CHECK(x != NULL, "strict %d: compiled (%s)", strict, err);
        attn__jss_free(x);
        sj_free(&d);
    }
    /* recursion: a person's kids are persons */
    sj_doc d = {0};
    const char *rec = "{\"$ref\": \"#/$defs/P\", \"$defs\": {\"P\": {\"type\": \"object\", "
                      "\"properties\": {\"kids\": {\"type\": \"array\", \"items\": {\"$ref\": "
                      "\"#/$defs/P\"}}}, \"additionalProperties\": false}}}";
    attn__jss *r = NULL;
    attn__jsa a;
    TU_CHECK(sj_parse(&d, rec, strlen(rec), err, sizeof err) &&
                 attn__jss_compile(d.root, 0, &r, err, sizeof err),
             "a recursive schema: %s", err);
    if (r) {
        attn__jsa_init(&a, r);
        const char *ok = "{\"kids\": [{\"kids\": [{}, {\"kids\": []}]}]}";
        TU_CHECK(attn__jsa_feed(&a, ok, strlen(ok)) && attn__jsa_done(&a), "recursive: %s", ok);
        attn__jsa_init(&a, r);
        TU_CHECK(!attn__jsa_feed(&a, "{\"kids\": [{\"x\"", 14), "recursive: an unknown key");
    }
    attn__jss_free(r);
    sj_free(&d);
}

int main(void) {
    attn_ctx *ctx = NULL;
    TU_CHECK(attn_ctx_create(NULL, &ctx) == ATTN_OK, "context");
    if (!ctx) return tu_finish("test_serve_tools");
    args_schema();
    jsa_check();
    jss_check();
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
