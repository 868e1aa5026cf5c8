/* The OpenAI server's core without HTTP (attn_server_*, src/serve/): requests handed to
 * attn_server_handle on the tiny GGUF llama (tests/fixtures/llama_tiny.gguf).  Greedy answers
 * (completion, chat, streamed chat) equal a plain greedy loop over one session
 * (attn_llm_session_prefill / _decode and an argmax written here: not the server's batched
 * decode or sampler), at 1 and 2 threads; the error replies (malformed JSON, a body that is
 * not an object, missing messages, a prompt over the context, a body over max_body, a wrong
 * method, an unknown path, a missing API key) with their status and message; a cancelled
 * stream frees its slot (one slot: the next request runs at once, and the tokens generated
 * show the cancelled one stopped); /health and /v1/models shapes; options refused; NULL-safe
 * frees.  The JSON of the replies is read with the library's own parser (src/serve). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "serve_jsa.h"
#include "serve_json.h"
#include "server.h"
#include "testutil.h"

#define GGUF "fixtures/llama_tiny.gguf"
#define CHAT "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"

static attn_server *srv;
static int log_lines;

static void on_log(void *user, const char *line) {
    (void)user;
    if (strstr(line, " ms")) log_lines++;
    if (getenv("TEST_SERVER_VERBOSE")) fprintf(stderr, "log: %s\n", line);
}

/* One request's complete reply: status and body (a copy, NUL-terminated; free it). */
static int request(const char *method, const char *path, const char *auth, const char *body,
                   char **out) {
    attn_server_reply *r = NULL;
    *out = NULL;
    if (attn_server_handle(srv, method, path, auth, body, body ? strlen(body) : 0, &r) !=
        ATTN_OK)
        return -1;
    while (!attn_server_reply_wait(r, 100)) {
    }
    attn_server_reply_info ri;
    attn_server_reply_get(r, &ri);
    if (!ri.stream) {
        *out = malloc(ri.body_len + 1);
        if (*out) memcpy(*out, ri.body, ri.body_len), (*out)[ri.body_len] = 0;
    }
    attn_server_reply_free(r);
    return ri.status;
}

/* The string at obj.key (a copy) of a parsed body; NULL if absent. */
static char *field(const sj *o, const char *key) {
    const sj *f = sj_get(o, key);
    if (!f || f->kind != SJ_STR) return NULL;
    char *s = malloc(f->len + 1);
    if (s) memcpy(s, f->s, f->len + 1);
    return s;
}

/* The text that reaches a client for bytes p[0, n): through the JSON writer and parser (invalid
 * UTF-8 comes out as U+FFFD, as in every answer). */
static char *as_client(const char *p, size_t n) {
    sbuf b = {0};
    sb_json_str(&b, p, n);
    sj_doc d = {0};
    char err[128], *s = NULL;
    if (!b.oom && sj_parse(&d, b.p, b.n, err, sizeof err) && d.root->kind == SJ_STR &&
        (s = malloc(d.root->len + 1)))
        memcpy(s, d.root->s, d.root->len + 1);
    sj_free(&d);
    sb_free(&b);
    return s;
}

/* The greedy continuation of text (bos first when asked and the model adds one), at most max
 * tokens, stopping at an end token: a plain loop over one session. */
/* greedy's logit_bias: g_nbias (id, bias) pairs added at every step (-inf bans) */
static int g_nbias;
static int32_t g_bias_id[4];
static float g_bias[4];

/* when set, greedy() draws with it instead (steps from 0, no history: no penalties) */
static const attn_llm_sampler *g_sampler;

static char *greedy(attn_ctx *ctx, attn_llm *m, const char *text, int bos, int max, int *ntok) {
    const attn_bpe *tok = attn_llm_tokenizer(m);
    attn_llm_config cfg;
    attn_llm_special sp;
    attn_llm_get_info(m, &cfg);
    attn_llm_get_special(m, &sp);
    int32_t ids[512], gen[512];
    int64_t n = 0, lead = bos && sp.add_bos && sp.bos >= 0;
    if (lead) ids[0] = sp.bos;
    if (attn_bpe_encode(ctx, tok, text, strlen(text), ATTN_BPE_PARSE_SPECIAL, ids + lead,
                        512 - lead, &n) != ATTN_OK)
        return NULL;
    n += lead;
    attn_llm_session *s = NULL;
    float *lg = malloc(sizeof *lg * (size_t)cfg.vocab_size);
    if (!lg || attn_llm_session_create(ctx, m, 128, ATTN_F32, &s) != ATTN_OK ||
        attn_llm_session_prefill(ctx, s, ids, n, lg) != ATTN_OK) {
        free(lg), attn_llm_session_free(s);
        return NULL;
    }
    int g = 0;
    for (; g < max;) {
        for (int i = 0; i < g_nbias; i++) lg[g_bias_id[i]] += g_bias[i];
        int32_t best = 0;
        for (int64_t v = 1; v < cfg.vocab_size; v++)
            if (lg[v] > lg[best]) best = (int32_t)v;
        uint64_t step = (uint64_t)g;
        if (g_sampler &&
            attn_llm_sample(ctx, g_sampler, lg, cfg.vocab_size, NULL, 0, &step, &best) != ATTN_OK)
            break;
        if (attn_llm_is_end(m, best)) break;
        gen[g++] = best;
        if (g == max || attn_llm_session_decode(ctx, s, best, lg) != ATTN_OK) break;
    }
    attn_llm_session_free(s), free(lg);
    /* the text as a stream decoder writes it (attn generate's): an incomplete character at the
     * end is U+FFFD */
    size_t len = 0, k = 0;
    char buf[8192];
    attn_bpe_stream bs;
    memset(&bs, 0, sizeof bs);
    for (int i = 0; i < g; i++) {
        if (attn_bpe_decode_stream(ctx, tok, &bs, gen[i], ATTN_BPE_SKIP_SPECIAL | ATTN_BPE_CONTINUE,
                                   buf + len, sizeof buf - len, &k) != ATTN_OK)
            return NULL;
        len += k;
    }
    if (attn_bpe_decode_stream_end(ctx, &bs, buf + len, sizeof buf - len, &k) != ATTN_OK)
        return NULL;
    *ntok = g;
    return as_client(buf, len + k);
}

/* The completion_tokens of a parsed answer's usage (-1 without). */
static long long usage_completion(const sj *o) {
    const sj *u = sj_get(o, "usage"), *c = u ? sj_get(u, "completion_tokens") : NULL;
    long long v = -1;
    return c && sj_int(c, 0, 1 << 30, &v) ? v : -1;
}

/* A metric's value from /metrics (-1 if absent). */
static double metric(const char *name) {
    char *b = NULL;
    double v = -1;
    if (request("GET", "/metrics", NULL, NULL, &b) == 200 && b) {
        char key[128];
        snprintf(key, sizeof key, "\n%s ", name);
        const char *p = strstr(b, key);
        if (p) v = atof(p + strlen(key));
    }
    free(b);
    return v;
}

/* Waits (5 s at most) for the scheduler to account the ended requests: an answer is out before
 * its slot's counters move. */
static void settle(void) {
    for (int i = 0; i < 500 && metric("attn_active_sequences") != 0; i++) {
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
    }
}

/* Greedy answers of /v1/completions, /v1/chat/completions and its stream, against greedy(). */
static void answers(attn_ctx *ref, attn_llm *m, int threads) {
    int nref = 0, nchat = 0;
    char *want = greedy(ref, m, "hello", 1, 20, &nref);
    char *want_chat = greedy(ref, m, CHAT, 0, 16, &nchat);
    TU_CHECK(want && want_chat && nref > 0 && nchat > 0, "the reference continuations");
    char *b = NULL;
    int st = request("POST", "/v1/completions", NULL,
                     "{\"prompt\": \"hello\", \"max_tokens\": 20, \"temperature\": 0}", &b);
    sj_doc d = {0};
    char err[256];
    int ok = st == 200 && b && sj_parse(&d, b, strlen(b), err, sizeof err);
    TU_CHECK(ok, "threads %d: /v1/completions: %d %s", threads, st, b ? b : "");
    if (ok) {
        const sj *ch = sj_get(d.root, "choices");
        char *text = ch && ch->first ? field(ch->first, "text") : NULL;
        TU_CHECK(text && want && !strcmp(text, want),
                 "threads %d: the completion '%s' is not the greedy '%s'", threads,
                 text ? text : "(none)", want ? want : "");
        TU_CHECK(usage_completion(d.root) == nref, "threads %d: %lld completion tokens, not %d",
                 threads, usage_completion(d.root), nref);
        char *obj = field(d.root, "object");
        TU_CHECK(obj && !strcmp(obj, "text_completion"), "the completion's object");
        free(text), free(obj);
    }
    sj_free(&d);
    free(b);
    /* chat */
    st = request("POST", "/v1/chat/completions", NULL,
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 16, "
                 "\"temperature\": 0}", &b);
    ok = st == 200 && b && sj_parse(&d, b, strlen(b), err, sizeof err);
    TU_CHECK(ok, "threads %d: /v1/chat/completions: %d %s", threads, st, b ? b : "");
    char *content = NULL;
    if (ok) {
        const sj *ch = sj_get(d.root, "choices"), *msg = ch && ch->first ? sj_get(ch->first, "message") : NULL;
        content = msg ? field(msg, "content") : NULL;
        char *role = msg ? field(msg, "role") : NULL;
        TU_CHECK(content && want_chat && !strcmp(content, want_chat),
                 "threads %d: the chat answer '%s' is not the greedy '%s'", threads,
                 content ? content : "(none)", want_chat ? want_chat : "");
        TU_CHECK(role && !strcmp(role, "assistant"), "the message's role");
        free(role);
    }
    sj_free(&d);
    free(b);
    /* the same chat streamed: the deltas joined are the answer; [DONE] ends it */
    attn_server_reply *r = NULL;
    const char *body = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                       "\"max_tokens\": 16, \"temperature\": 0, \"stream\": true}";
    TU_CHECK(attn_server_handle(srv, "POST", "/v1/chat/completions", NULL, body, strlen(body),
                                &r) == ATTN_OK, "a streamed request");
    attn_server_reply_info ri;
    attn_server_reply_get(r, &ri);
    TU_CHECK(ri.status == 200 && ri.stream && ri.content_type &&
                 !strcmp(ri.content_type, "text/event-stream"),
             "the stream's head: %d %d %s", ri.status, ri.stream,
             ri.content_type ? ri.content_type : "");
    sbuf all = {0};
    for (int done = 0, guard = 0; !done && guard < 100000; guard++) {
        char buf[97]; /* small reads: events cut anywhere */
        size_t n = 0;
        if (attn_server_reply_read(r, buf, sizeof buf, &n, &done, 5000) != ATTN_OK) break;
        sb_put(&all, buf, n);
        TU_CHECK(done >= 0, "the stream ended by a failure");
    }
    attn_server_reply_free(r);
    sb_put(&all, "", 1);
    sbuf joined = {0};
    int events = 0, finished = 0, role = 0;
    const char *p = all.p;
    while (p && (p = strstr(p, "data: "))) {
        p += 6;
        const char *e = strstr(p, "\n\n");
        if (!e) break;
        if (!strncmp(p, "[DONE]", 6)) {
            events = events ? events + 1000000 : 0;
            break;
        }
        if (sj_parse(&d, p, (size_t)(e - p), err, sizeof err)) {
            const sj *ch = sj_get(d.root, "choices"), *c0 = ch ? ch->first : NULL;
            const sj *delta = c0 ? sj_get(c0, "delta") : NULL, *f = c0 ? sj_get(c0, "finish_reason") : NULL;
            const sj *t = delta ? sj_get(delta, "content") : NULL;
            if (delta && sj_get(delta, "role")) role = 1;
            if (t && t->kind == SJ_STR) sb_put(&joined, t->s, t->len);
            if (f && f->kind == SJ_STR) finished = 1;
            events++;
        }
        sj_free(&d);
        p = e;
    }
    sb_put(&joined, "", 1);
    TU_CHECK(events > 1000000 && finished && role, "threads %d: the stream's events (%d), its "
             "finish reason, role chunk and [DONE]: %s", threads, events, all.p ? all.p : "");
    TU_CHECK(joined.p && content && !strcmp(joined.p, content),
             "threads %d: the streamed answer '%s' is not the answer '%s'", threads,
             joined.p ? joined.p : "", content ? content : "");
    sb_free(&all), sb_free(&joined);
    free(content), free(want), free(want_chat);
}

/* Two completions at once on the two slots (prompts of a few and of more than 8 tokens, so
 * their prefills run as one attn_llm_session_prefill_batch of two passes; cache_prompt false):
 * each answer is the greedy one of a plain session loop.  sampled: temperature 1 over every
 * token with a seed each, so the step's two draws run on the threads at once (each on its own
 * context): each answer is a plain loop's draws with that seed. */
static void together(attn_ctx *ref, attn_llm *m, int threads, int sampled) {
    static const char *texts[2] = {
        "hello",
        "the quick brown fox jumps over the lazy dog, then it runs back again and again"};
    char *want[2] = {NULL, NULL}, body[2][256];
    attn_server_reply *r[2] = {NULL, NULL};
    int n[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        attn_llm_sampler sp = attn_llm_sampler_defaults();
        sp.seed = 1000 + (uint64_t)i;
        g_sampler = sampled ? &sp : NULL;
        want[i] = greedy(ref, m, texts[i], 1, 12, &n[i]);
        g_sampler = NULL;
        snprintf(body[i], sizeof body[i],
                 "{\"prompt\": \"%s\", \"max_tokens\": 12, \"temperature\": %d, "
                 "\"seed\": %d, \"cache_prompt\": false}", texts[i], sampled, 1000 + i);
        TU_CHECK(attn_server_handle(srv, "POST", "/v1/completions", NULL, body[i],
                                    strlen(body[i]), &r[i]) == ATTN_OK, "request %d", i);
    }
    for (int i = 0; i < 2; i++) {
        if (!r[i]) continue;
        while (!attn_server_reply_wait(r[i], 100)) {
        }
        attn_server_reply_info ri;
        attn_server_reply_get(r[i], &ri);
        sj_doc d = {0};
        char err[256];
        char *text = NULL;
        if (ri.status == 200 && ri.body && sj_parse(&d, ri.body, ri.body_len, err, sizeof err)) {
            const sj *ch = sj_get(d.root, "choices");
            text = ch && ch->first ? field(ch->first, "text") : NULL;
        }
        TU_CHECK(text && want[i] && !strcmp(text, want[i]),
                 "threads %d: together, answer %d '%s' is not the %s '%s'", threads, i,
                 text ? text : "(none)", sampled ? "sampled" : "greedy", want[i] ? want[i] : "");
        free(text);
        sj_free(&d);
        attn_server_reply_free(r[i]);
        free(want[i]);
    }
}

/* logit_bias: a ban of the greedy answer's first token and a +30 on another give the greedy
 * answer of the same biases applied here; bad keys and values, and a ban of every token, are
 * 400.  (error_case is below.) */
static void error_case(const char *method, const char *path, const char *auth, const char *body,
                       int status, const char *what);
static void logit_bias(attn_ctx *ref, attn_llm *m) {
    int n0 = 0, n1 = 0;
    char *plain = greedy(ref, m, "hello", 1, 8, &n0);
    const attn_bpe *tok = attn_llm_tokenizer(m);
    int32_t first[256] = {0};
    int64_t nf = 0;
    /* the plain answer's first token (its text encoded again) */
    TU_CHECK(plain && attn_bpe_encode(ref, tok, plain, strlen(plain), 0, first, 256, &nf) ==
                          ATTN_OK && nf >= 1, "the plain answer's tokens");
    g_nbias = 2, g_bias_id[0] = first[0], g_bias[0] = -INFINITY;
    g_bias_id[1] = 40, g_bias[1] = 30.0f;
    char *want = greedy(ref, m, "hello", 1, 8, &n1);
    g_nbias = 0;
    char body[256], *b = NULL;
    snprintf(body, sizeof body,
             "{\"prompt\": \"hello\", \"max_tokens\": 8, \"temperature\": 0, "
             "\"logit_bias\": {\"%d\": -100, \"40\": 30}}", (int)first[0]);
    int st = request("POST", "/v1/completions", NULL, body, &b);
    sj_doc d = {0};
    char err[256], *text = NULL;
    if (st == 200 && b && sj_parse(&d, b, strlen(b), err, sizeof err)) {
        const sj *ch = sj_get(d.root, "choices");
        text = ch && ch->first ? field(ch->first, "text") : NULL;
    }
    TU_CHECK(text && want && plain && !strcmp(text, want) && strcmp(text, plain),
             "logit_bias: '%s', expected '%s' (without: '%s')", text ? text : "(none)",
             want ? want : "", plain ? plain : "");
    free(text), free(b), free(want), free(plain);
    sj_free(&d);
    error_case("POST", "/v1/completions", NULL, "{\"prompt\": \"hi\", \"logit_bias\": {\"x\": 1}}",
               400, "keys must be token ids");
    error_case("POST", "/v1/completions", NULL,
               "{\"prompt\": \"hi\", \"logit_bias\": {\"99999999\": 1}}", 400,
               "keys must be token ids");
    error_case("POST", "/v1/completions", NULL, "{\"prompt\": \"hi\", \"logit_bias\": {\"5\": 101}}",
               400, "values must be numbers in [-100, 100]");
    error_case("POST", "/v1/completions", NULL, "{\"prompt\": \"hi\", \"logit_bias\": [1]}", 400,
               "must be an object");
    attn_llm_config cfg;
    attn_llm_get_info(m, &cfg);
    char *all = malloc((size_t)cfg.vocab_size * 16 + 64);
    if (all) {
        size_t k = (size_t)sprintf(all, "{\"prompt\": \"hi\", \"logit_bias\": {");
        for (int64_t v = 0; v < cfg.vocab_size; v++)
            k += (size_t)sprintf(all + k, "%s\"%lld\": -100", v ? ", " : "", (long long)v);
        strcpy(all + k, "}}");
        error_case("POST", "/v1/completions", NULL, all, 400, "bans every token");
        free(all);
    }
}

/* logprobs: /v1/completions (logprobs 3) against a greedy session loop's log-softmax in double
 * (each token's and the top 3, sorted; text offsets), chat's entries non-streamed and streamed
 * (one per completion token in both), and the 400s. */
static void logprobs(attn_ctx *ref, attn_llm *m) {
    enum { T = 6, N = 3 };
    attn_llm_config cfg;
    attn_llm_special sp;
    attn_llm_get_info(m, &cfg);
    attn_llm_get_special(m, &sp);
    const int64_t V = cfg.vocab_size;
    int32_t ids[64];
    int64_t n = 0;
    const int lead = sp.add_bos && sp.bos >= 0;
    if (lead) ids[0] = sp.bos;
    TU_CHECK(attn_bpe_encode(ref, attn_llm_tokenizer(m), "hello", 5, ATTN_BPE_PARSE_SPECIAL,
                             ids + lead, 60, &n) == ATTN_OK, "encode");
    n += lead;
    double want[T], want_top[N][T];
    float *lg = malloc(sizeof *lg * (size_t)V);
    attn_llm_session *s = NULL;
    int ok = lg && attn_llm_session_create(ref, m, 128, ATTN_F32, &s) == ATTN_OK &&
             attn_llm_session_prefill(ref, s, ids, n, lg) == ATTN_OK;
    for (int t = 0; t < T && ok; t++) {
        double mx = -INFINITY, sum = 0;
        int32_t best = 0;
        for (int64_t v = 0; v < V; v++) mx = fmax(mx, lg[v]), best = lg[v] > lg[best] ? (int32_t)v : best;
        for (int64_t v = 0; v < V; v++) sum += exp(lg[v] - mx);
        want[t] = lg[best] - mx - log(sum);
        for (int k = 0; k < N; k++) { /* the k-th largest */
            int32_t b = -1;
            for (int64_t v = 0; v < V; v++) {
                int taken = 0;
                for (int j = 0; j < k; j++) taken |= want_top[j][t] == (double)v;
                if (!taken && (b < 0 || lg[v] > lg[b])) b = (int32_t)v;
            }
            want_top[k][t] = (double)b; /* the id for now */
        }
        for (int k = 0; k < N; k++)
            want_top[k][t] = lg[(int64_t)want_top[k][t]] - mx - log(sum);
        ok = attn_llm_session_decode(ref, s, best, lg) == ATTN_OK; /* ignore_eos */
    }
    attn_llm_session_free(s);
    free(lg);
    TU_CHECK(ok, "the reference loop: %s", attn_ctx_errmsg(ref));
    char *b = NULL;
    int st = request("POST", "/v1/completions", NULL,
                     "{\"prompt\": \"hello\", \"max_tokens\": 6, \"temperature\": 0, "
                     "\"ignore_eos\": true, \"logprobs\": 3}", &b);
    sj_doc d = {0};
    char err[256];
    const sj *lp = NULL;
    if (st == 200 && b && sj_parse(&d, b, strlen(b), err, sizeof err)) {
        const sj *ch = sj_get(d.root, "choices");
        lp = ch && ch->first ? sj_get(ch->first, "logprobs") : NULL;
    }
    const sj *tl = lp ? sj_get(lp, "token_logprobs") : NULL, *tp = lp ? sj_get(lp, "top_logprobs") : NULL;
    const sj *to = lp ? sj_get(lp, "text_offset") : NULL, *tk = lp ? sj_get(lp, "tokens") : NULL;
    TU_CHECK(tl && tp && to && tk && tl->n == T && tp->n == T && to->n == T && tk->n == T,
             "completions logprobs: the four arrays of %d: %s", T, b ? b : "");
    double worst = 0, last_off = -1;
    int t = 0;
    for (const sj *e = tl ? tl->first : NULL, *q = tp ? tp->first : NULL, *o = to ? to->first : NULL;
         e && q && o && t < T; e = e->next, q = q->next, o = o->next, t++) {
        worst = fmax(worst, fabs(e->num - want[t]));
        TU_CHECK(q->kind == SJ_OBJ && q->n == N, "top_logprobs[%d]: %d entries", t, N);
        int k = 0;
        for (const sj *x = q->first; x && k < N; x = x->next, k++)
            worst = fmax(worst, fabs(x->num - want_top[k][t]));
        TU_CHECK(o->num >= last_off, "text_offset not increasing");
        last_off = o->num;
    }
    fprintf(stderr, "DBG worst %g\n", worst);
    TU_CHECK(t == T && worst <= 1e-5, "completions logprobs: worst difference %g from the "
             "reference's log-softmax", worst);
    sj_free(&d);
    free(b);
    /* chat: one entry a completion token, non-streamed and streamed */
    for (int stream = 0; stream < 2; stream++) {
        const char *body = stream ? "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                                    "\"max_tokens\": 5, \"temperature\": 0, \"ignore_eos\": true, "
                                    "\"logprobs\": true, \"top_logprobs\": 2, \"stream\": true}"
                                  : "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                                    "\"max_tokens\": 5, \"temperature\": 0, \"ignore_eos\": true, "
                                    "\"logprobs\": true, \"top_logprobs\": 2}";
        int entries = 0, tops = 1;
        if (!stream) {
            st = request("POST", "/v1/chat/completions", NULL, body, &b);
            if (st == 200 && b && sj_parse(&d, b, strlen(b), err, sizeof err)) {
                const sj *ch = sj_get(d.root, "choices");
                const sj *l = ch && ch->first ? sj_get(ch->first, "logprobs") : NULL;
                const sj *c = l ? sj_get(l, "content") : NULL;
                for (const sj *e = c ? c->first : NULL; e; e = e->next, entries++) {
                    const sj *tt = sj_get(e, "top_logprobs");
                    tops &= tt && tt->n == 2 && sj_get(e, "bytes") && sj_get(e, "token") &&
                            sj_get(e, "logprob");
                }
            }
            sj_free(&d);
            free(b);
        } else {
            attn_server_reply *r = NULL;
            TU_CHECK(attn_server_handle(srv, "POST", "/v1/chat/completions", NULL, body,
                                        strlen(body), &r) == ATTN_OK, "stream");
            sbuf all = {0};
            for (int done = 0, g = 0; r && !done && g < 100000; g++) {
                char buf[256];
                size_t k = 0;
                if (attn_server_reply_read(r, buf, sizeof buf, &k, &done, 5000) != ATTN_OK) break;
                sb_put(&all, buf, k);
            }
            attn_server_reply_free(r);
            sb_put(&all, "", 1);
            for (const char *p = all.p; p && (p = strstr(p, "data: {")); p++) {
                const char *e = strstr(p, "\n\n");
                if (!e) break;
                if (sj_parse(&d, p + 6, (size_t)(e - p - 6), err, sizeof err)) {
                    const sj *ch = sj_get(d.root, "choices");
                    const sj *l = ch && ch->first ? sj_get(ch->first, "logprobs") : NULL;
                    const sj *c = l && l->kind == SJ_OBJ ? sj_get(l, "content") : NULL;
                    for (const sj *x = c ? c->first : NULL; x; x = x->next) entries++;
                }
                sj_free(&d);
            }
            sb_free(&all);
        }
        TU_CHECK(entries == 5 && tops, "chat logprobs (%s): %d entries, expected 5",
                 stream ? "streamed" : "whole", entries);
    }
    /* echo: the prompt's text and tokens first, each token's logprob from the forward's row
     * before it (the first one's null unless it follows an added bos) */
    st = request("POST", "/v1/completions", NULL,
                 "{\"prompt\": \"hello\", \"max_tokens\": 2, \"temperature\": 0, "
                 "\"ignore_eos\": true, \"logprobs\": 1, \"echo\": true}", &b);
    float *fl = malloc(sizeof *fl * (size_t)(n * V));
    int echo_ok = st == 200 && b && fl && attn_llm_forward(ref, m, ids, 1, n, fl) == ATTN_OK &&
                  sj_parse(&d, b, strlen(b), err, sizeof err);
    double eworst = 0;
    if (echo_ok) {
        const sj *ch = sj_get(d.root, "choices"), *c0 = ch ? ch->first : NULL;
        char *text = c0 ? field(c0, "text") : NULL;
        const sj *l = c0 ? sj_get(c0, "logprobs") : NULL;
        const sj *tlp = l ? sj_get(l, "token_logprobs") : NULL;
        echo_ok = text && !strncmp(text, "hello", 5) && tlp && tlp->n == (size_t)(n - lead + 2);
        int64_t p = lead; /* the prompt token of each entry */
        for (const sj *e = tlp ? tlp->first : NULL; echo_ok && e && p < n; e = e->next, p++) {
            if (p == 0) {
                echo_ok = e->kind == SJ_NULL;
                continue;
            }
            const float *row = fl + (p - 1) * V;
            double mx = -INFINITY, sum = 0;
            for (int64_t v = 0; v < V; v++) mx = fmax(mx, row[v]);
            for (int64_t v = 0; v < V; v++) sum += exp(row[v] - mx);
            eworst = fmax(eworst, fabs(e->num - (row[ids[p]] - mx - log(sum))));
        }
        free(text);
    }
    TU_CHECK(echo_ok && eworst <= 1e-5, "echo with logprobs: the prompt's entries (worst %g): %s",
             eworst, b ? b : "");
    sj_free(&d);
    free(b);
    /* max_tokens 0 (a harness's log-likelihood request): the prompt scored, nothing added */
    st = request("POST", "/v1/completions", NULL,
                 "{\"prompt\": \"hello\", \"max_tokens\": 0, \"logprobs\": 0, \"echo\": true}",
                 &b);
    int zero_ok = st == 200 && b && sj_parse(&d, b, strlen(b), err, sizeof err);
    if (zero_ok) {
        const sj *ch = sj_get(d.root, "choices"), *c0 = ch ? ch->first : NULL;
        char *text = c0 ? field(c0, "text") : NULL;
        const sj *l = c0 ? sj_get(c0, "logprobs") : NULL;
        const sj *tlp = l && l->kind == SJ_OBJ ? sj_get(l, "token_logprobs") : NULL;
        zero_ok = text && !strcmp(text, "hello") && tlp && tlp->n == (size_t)(n - lead) &&
                  usage_completion(d.root) == 0;
        free(text);
    }
    TU_CHECK(zero_ok, "echo, max_tokens 0: %s", b ? b : "");
    sj_free(&d);
    free(b), free(fl);
    error_case("POST", "/v1/completions", NULL,
               "{\"prompt\": \"hi\", \"echo\": true, \"stream\": true}", 400, "not streamed");
    error_case("POST", "/v1/chat/completions", NULL,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"top_logprobs\": 2}",
               400, "needs 'logprobs': true");
    error_case("POST", "/v1/chat/completions", NULL,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"logprobs\": true, "
               "\"top_logprobs\": 21}", 400, "top_logprobs");
    error_case("POST", "/v1/completions", NULL, "{\"prompt\": \"hi\", \"logprobs\": true}", 400,
               "'logprobs' must be an integer");
}

/* An error reply: status and a message holding what. */
static void error_case(const char *method, const char *path, const char *auth, const char *body,
                       int status, const char *what) {
    char *b = NULL;
    int st = request(method, path, auth, body, &b);
    sj_doc d = {0};
    char err[256];
    int parsed = b && sj_parse(&d, b, strlen(b), err, sizeof err);
    const sj *e = parsed ? sj_get(d.root, "error") : NULL;
    char *msg = e ? field(e, "message") : NULL;
    TU_CHECK(st == status && msg && strstr(msg, what), "%s %s: %d (want %d), message '%s' "
             "(want '%s')", method, path, st, status, msg ? msg : "(none)", what);
    free(msg);
    sj_free(&d);
    free(b);
}

/* response_format json_object: the answer (greedy, and sampled at temperature 1) is a JSON
 * object's prefix, whole when it stops; without it the same request's answer is not JSON; a
 * json_schema or a malformed response_format is 400. */
static void json_mode(attn_ctx *ref, attn_llm *m) {
    /* the token of '}' pushed up by logit_bias: the object closes at once, and the answer stops */
    int32_t close[4] = {0};
    int64_t nc = 0;
    TU_CHECK(attn_bpe_encode(ref, attn_llm_tokenizer(m), "}", 1, 0, close, 4, &nc) == ATTN_OK &&
                 nc == 1, "the token of '}'");
    for (int t = 0; t < 4; t++) {
        char body[320], *b = NULL;
        char bias[64] = "";
        if (t == 3) snprintf(bias, sizeof bias, ", \"logit_bias\": {\"%d\": 60}", (int)close[0]);
        snprintf(body, sizeof body,
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"a cat as JSON\"}], "
                 "\"max_tokens\": %d, \"temperature\": %d, \"seed\": 7%s%s}", t == 1 ? 40 : 60,
                 t == 1, t == 2 ? "" : ", \"response_format\": {\"type\": \"json_object\"}", bias);
        const int st = request("POST", "/v1/chat/completions", NULL, body, &b);
        sj_doc d = {0}, j = {0};
        char err[256], *text = NULL, *fin = NULL;
        if (st == 200 && b && sj_parse(&d, b, strlen(b), err, sizeof err)) {
            const sj *ch = sj_get(d.root, "choices");
            const sj *msg = ch && ch->first ? sj_get(ch->first, "message") : NULL;
            text = msg ? field(msg, "content") : NULL;
            fin = ch && ch->first ? field(ch->first, "finish_reason") : NULL;
        }
        attn__jsa a;
        attn__jsa_init(&a, NULL);
        const int prefix = text && attn__jsa_feed(&a, text, strlen(text));
        if (t == 3)
            TU_CHECK(fin && !strcmp(fin, "stop") && text && !strcmp(text, "{}"),
                     "json_object with '}' pushed up: '%s', finish %s", text ? text : "",
                     fin ? fin : "?");
        if (t != 2) {
            TU_CHECK(prefix && fin, "json_object %d: the answer is not a JSON object's start: %s",
                     t, b ? b : "");
            if (fin && !strcmp(fin, "stop"))
                TU_CHECK(attn__jsa_done(&a) && sj_parse(&j, text, strlen(text), err, sizeof err) &&
                             j.root->kind == SJ_OBJ,
                         "json_object %d: a stopped answer is one object: '%s'", t, text);
            printf("json_object %s: finish %s, '%s'\n", t == 3 ? "'}' pushed" : t ? "sampled" : "greedy",
                   fin ? fin : "?", text ? text : "");
        } else {
            TU_CHECK(text && !prefix, "without response_format the answer is JSON already: '%s'",
                     text ? text : "");
        }
        sj_free(&d), sj_free(&j);
        free(b), free(text), free(fin);
    }
    error_case("POST", "/v1/chat/completions", NULL,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"response_format\": "
               "{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\", \"schema\": {}}}}",
               400, "root must be an object");
    error_case("POST", "/v1/chat/completions", NULL,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"response_format\": "
               "{\"type\": \"json_schema\"}}", 400, "needs 'json_schema'");
    /* json_schema: an enum property, required, nothing else: the answer is one of two objects */
    for (int t = 0; t < 2; t++) {
        char body[512], *b = NULL;
        snprintf(body, sizeof body,
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"x or y?\"}], "
                 "\"max_tokens\": 200, \"temperature\": %d, \"seed\": 3, \"response_format\": "
                 "{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"xy\", \"strict\": true, "
                 "\"schema\": {\"type\": \"object\", \"properties\": {\"a\": {\"enum\": "
                 "[\"x\", \"y\"]}}, \"required\": [\"a\"], \"additionalProperties\": false}}}}", t);
        const int st = request("POST", "/v1/chat/completions", NULL, body, &b);
        sj_doc d = {0};
        char err[256], *text = NULL, *fin = NULL, compact[256];
        size_t n = 0;
        if (st == 200 && b && sj_parse(&d, b, strlen(b), err, sizeof err)) {
            const sj *ch = sj_get(d.root, "choices");
            const sj *msg = ch && ch->first ? sj_get(ch->first, "message") : NULL;
            text = msg ? field(msg, "content") : NULL;
            fin = ch && ch->first ? field(ch->first, "finish_reason") : NULL;
        }
        for (const char *q = text; q && *q && n + 1 < sizeof compact; q++)
            if (!strchr(" \t\r\n", *q)) compact[n++] = *q;
        compact[n] = 0;
        TU_CHECK(fin && !strcmp(fin, "stop") &&
                     (!strcmp(compact, "{\"a\":\"x\"}") || !strcmp(compact, "{\"a\":\"y\"}")),
                 "json_schema %d: '%s', finish %s (%s)", t, text ? text : "", fin ? fin : "?",
                 b ? b : "");
        printf("json_schema %s: '%s'\n", t ? "sampled" : "greedy", text ? text : "");
        sj_free(&d);
        free(b), free(text), free(fin);
    }
    error_case("POST", "/v1/chat/completions", NULL,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"response_format\": "
               "\"json\"}", 400, "'response_format' must be an object");
}

/* A cancelled stream frees its slot at once, on the real SmolLM2-135M (ATTN_SMOLLM2_GGUF; else
 * skipped): one slot, a stream of 600 tokens cancelled after its first bytes; the next request
 * runs, and the tokens generated in all stay far below 600. */
static void cancel_early(void) {
    const char *path = getenv("ATTN_SMOLLM2_GGUF");
    if (!path || !*path) {
        printf("test_server: ATTN_SMOLLM2_GGUF not set: the early cancel check is skipped\n");
        return;
    }
    attn_ctx *ctx = tu_ctx(2);
    attn_llm *m = NULL;
    TU_CHECK(ctx && attn_llm_load(ctx, path, 0, &m) == ATTN_OK, "%s: %s", path,
             attn_ctx_errmsg(ctx));
    attn_server_options o = attn_server_options_defaults();
    o.parallel = 1, o.ctx = 1024;
    TU_CHECK(m && attn_server_create(ctx, m, NULL, &o, &srv) == ATTN_OK, "the SmolLM2 server");
    if (srv) {
        const char *body = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 600, "
                           "\"ignore_eos\": true, \"stream\": true}";
        attn_server_reply *r = NULL;
        TU_CHECK(attn_server_handle(srv, "POST", "/v1/completions", NULL, body, strlen(body),
                                    &r) == ATTN_OK, "the stream to cancel");
        char buf[64];
        size_t n = 0;
        int done = 0;
        TU_CHECK(attn_server_reply_read(r, buf, sizeof buf, &n, &done, 30000) == ATTN_OK &&
                     n > 0 && !done, "the stream's first bytes");
        attn_server_reply_cancel(r); /* the reply is freed after the next request */
        char *b = NULL;
        int st = request("POST", "/v1/completions", NULL,
                         "{\"prompt\": \"Hi\", \"max_tokens\": 3, \"ignore_eos\": true}", &b);
        free(b);
        attn_server_reply_free(r);
        settle();
        const double gen = metric("attn_completion_tokens_total");
        TU_CHECK(st == 200 && gen >= 3 && gen < 200, "after the cancel: %d, %g tokens generated "
                 "(the cancelled stream ran on?)", st, gen);
    }
    attn_server_free(srv), srv = NULL;
    attn_llm_free(m);
    attn_ctx_free(ctx);
}

/* The scheduler's prefill chunks (attn__serve_prefill_chunk): they add up to the prompt, none
 * is over the chunk size, none has fewer than ATTN__SERVE_MIN_PIECE tokens when the prompt has
 * more;
 * and a prompt prefilled in them gets the one-shot prefill's last logits bit for bit (what
 * makes a long prompt's greedy answer attn generate's). */
static void prefill_chunks(attn_ctx *ctx, attn_llm *m) {
    attn_llm_config cfg;
    attn_llm_get_info(m, &cfg);
    const int64_t lens[] = {1, 8, 9, 16, 17, 64, 65, 70, 72, 73, 80, 81, 100, 129, 137, 145};
    float *a = malloc(sizeof *a * (size_t)cfg.vocab_size);
    float *b = malloc(sizeof *b * (size_t)cfg.vocab_size);
    int32_t ids[160];
    for (int i = 0; i < 160; i++) ids[i] = (int32_t)((7 + 13 * i) % cfg.vocab_size);
    for (size_t t = 0; t < sizeof lens / sizeof *lens; t++) {
        const int64_t n = lens[t];
        if (n + 1 > cfg.max_position_embeddings) continue;
        int64_t done = 0, calls = 0, small = 0;
        attn_llm_session *s1 = NULL, *s2 = NULL;
        int ok = attn_llm_session_create(ctx, m, n, ATTN_F32, &s1) == ATTN_OK &&
                 attn_llm_session_create(ctx, m, n, ATTN_F32, &s2) == ATTN_OK &&
                 attn_llm_session_prefill(ctx, s1, ids, n, a) == ATTN_OK;
        while (ok && done < n) {
            const int64_t k = attn__serve_prefill_chunk(n - done, 64);
            ok = k >= 1 && k <= 64 && k <= n - done &&
                 attn_llm_session_prefill(ctx, s2, ids + done, k, done + k == n ? b : NULL) ==
                     ATTN_OK;
            small += k < ATTN__SERVE_MIN_PIECE;
            done += k, calls++;
        }
        TU_CHECK(ok && done == n, "prompt of %lld: the chunks (%lld calls) do not add up",
                 (long long)n, (long long)calls);
        TU_CHECK(n < ATTN__SERVE_MIN_PIECE || !small, "prompt of %lld: %lld chunks of fewer "
                 "than %d tokens", (long long)n, (long long)small, ATTN__SERVE_MIN_PIECE);
        TU_CHECK(ok && !memcmp(a, b, sizeof *a * (size_t)cfg.vocab_size),
                 "prompt of %lld in %lld chunks: the last logits differ from one prefill's",
                 (long long)n, (long long)calls);
        attn_llm_session_free(s1), attn_llm_session_free(s2);
    }
    free(a), free(b);
}

int main(void) {
    TU_CHECK(attn_server_reply_wait(NULL, 0) == 1, "wait on NULL");
    attn_server_free(NULL);
    attn_server_reply_free(NULL);
    attn_server_reply_cancel(NULL);
    attn_ctx *ref = tu_ctx(1);
    attn_llm *m = NULL;
    TU_CHECK(ref && attn_llm_load(ref, GGUF, 0, &m) == ATTN_OK, "%s: %s", GGUF,
             attn_ctx_errmsg(ref));
    if (!m) return tu_finish("test_server");
    /* float activations: the server reuses cached prefixes, whose rows may come from a long
     * prompt's float GEMM, where a fresh short prompt runs the matrix-vector kernels; the
     * default int16 ones differ from the GEMM by ~1e-4, float ones by ~1e-6, so the checks
     * against the reference loops below can be tight (1e-5) */
    attn_llm_set_activations(m, ATTN_QACT_F32);
    prefill_chunks(ref, m);

    /* options out of range are refused with a message, and nothing is made */
    attn_server_options o = attn_server_options_defaults();
    o.parallel = 300;
    attn_server *bad = NULL;
    TU_CHECK(attn_server_create(ref, m, NULL, &o, &bad) == ATTN_E_INVALID && !bad &&
                 strstr(attn_ctx_errmsg(ref), "parallel"),
             "parallel 300 refused: %s", attn_ctx_errmsg(ref));
    o = attn_server_options_defaults();
    o.api_key = "";
    TU_CHECK(attn_server_create(ref, m, NULL, &o, &bad) == ATTN_E_INVALID && !bad,
             "an empty API key refused");
    TU_CHECK(attn_server_create(ref, m, NULL, NULL, &bad) == ATTN_E_INVALID && !bad,
             "NULL options refused");

    for (int threads = 1; threads <= 2; threads++) {
        attn_ctx *sctx = tu_ctx(threads);
        o = attn_server_options_defaults();
        o.parallel = 2, o.ctx = 128, o.model_name = "tiny", o.max_body = 4096;
        o.log = on_log;
        TU_CHECK(sctx && attn_server_create(sctx, m, NULL, &o, &srv) == ATTN_OK,
                 "attn_server_create: %s", attn_ctx_errmsg(sctx));
        if (!srv) {
            attn_ctx_free(sctx);
            continue;
        }
        TU_CHECK(attn_server_context(srv) == 128, "the context: %lld",
                 (long long)attn_server_context(srv));
        answers(ref, m, threads);
        together(ref, m, threads, 0);
        together(ref, m, threads, 1);
        if (threads == 2) {
            attn_server_free(srv), srv = NULL;
            attn_ctx_free(sctx);
            continue;
        }
        logit_bias(ref, m);
        logprobs(ref, m);
        json_mode(ref, m);
        /* /health and /v1/models */
        char *b = NULL;
        TU_CHECK(request("GET", "/health", NULL, NULL, &b) == 200 && b &&
                     !strcmp(b, "{\"status\":\"ok\"}"), "/health: %s", b ? b : "");
        free(b);
        sj_doc d = {0};
        char err[256];
        int st = request("GET", "/v1/models", NULL, NULL, &b);
        int ok = st == 200 && b && sj_parse(&d, b, strlen(b), err, sizeof err);
        TU_CHECK(ok, "/v1/models: %d", st);
        if (ok) {
            const sj *data = sj_get(d.root, "data"), *m0 = data ? data->first : NULL;
            const sj *meta = m0 ? sj_get(m0, "meta") : NULL;
            char *id = m0 ? field(m0, "id") : NULL, *obj = field(d.root, "object");
            long long nctx = 0, par = 0;
            TU_CHECK(obj && !strcmp(obj, "list") && data && data->kind == SJ_ARR &&
                         data->n == 1 && id && !strcmp(id, "tiny") && meta &&
                         sj_int(sj_get(meta, "n_ctx"), 0, 1 << 30, &nctx) && nctx == 128 &&
                         sj_int(sj_get(meta, "parallel"), 0, 1 << 30, &par) && par == 2,
                     "/v1/models' shape: %s", b);
            free(id), free(obj);
        }
        sj_free(&d);
        free(b);
        /* errors */
        error_case("POST", "/v1/chat/completions", NULL, "{\"messages\": [", 400, "JSON");
        error_case("POST", "/v1/completions", NULL, "[1, 2]", 400, "must be an object");
        error_case("POST", "/v1/chat/completions", NULL, "{\"model\": \"x\"}", 400,
                   "'messages' must be a non-empty array");
        error_case("POST", "/v1/completions", NULL, "{\"prompt\": \"hi\", \"temperature\": -1}",
                   400, "'temperature' must be a number");
        char big[2048];
        memset(big, 0, sizeof big);
        strcpy(big, "{\"prompt\": \"");
        for (size_t k = strlen(big); k < 1500; k++) big[k] = "abcdefghij"[k % 10];
        strcat(big, "\"}");
        error_case("POST", "/v1/completions", NULL, big, 400, "more than the context of 128");
        char huge[5000];
        memset(huge, ' ', sizeof huge - 1);
        huge[sizeof huge - 1] = 0;
        error_case("POST", "/v1/completions", NULL, huge, 413, "over 4096 bytes");
        error_case("POST", "/health", NULL, NULL, 405, "takes GET");
        error_case("GET", "/nowhere", NULL, NULL, 404, "no such endpoint");
        error_case("POST", "/v1/embeddings", NULL, "{\"input\": \"x\"}", 404, "no embedding model");

        /* a stream cancelled at once: on one slot, the request after it runs, and nothing is
         * left in the slot or the queue (the tiny model is too fast to see the slot freed
         * early: cancel_early() does that on SmolLM2) */
        attn_server_free(srv), srv = NULL;
        o.parallel = 1;
        TU_CHECK(attn_server_create(sctx, m, NULL, &o, &srv) == ATTN_OK, "one slot: %s",
                 attn_ctx_errmsg(sctx));
        if (!srv) {
            attn_ctx_free(sctx);
            continue;
        }
        const char *body = "{\"prompt\": \"hello\", \"max_tokens\": 100, \"ignore_eos\": true, "
                           "\"temperature\": 0, \"stream\": true}";
        attn_server_reply *r = NULL;
        TU_CHECK(attn_server_handle(srv, "POST", "/v1/completions", NULL, body, strlen(body), &r) ==
                     ATTN_OK, "the stream to cancel");
        attn_server_reply_cancel(r); /* the reply is freed after the next request */
        st = request("POST", "/v1/completions", NULL,
                     "{\"prompt\": \"hello\", \"max_tokens\": 3, \"ignore_eos\": true}", &b);
        TU_CHECK(st == 200, "the request after the cancelled stream: %d", st);
        free(b);
        attn_server_reply_free(r);
        settle();
        TU_CHECK(metric("attn_active_sequences") == 0 && metric("attn_queue_depth") == 0 &&
                     metric("attn_requests_finished_total") == 2,
                 "the cancelled request left its slot");
        attn_server_free(srv), srv = NULL;

        /* the API key: every path but / and /health needs it */
        o.api_key = "sekrit";
        TU_CHECK(attn_server_create(sctx, m, NULL, &o, &srv) == ATTN_OK, "with a key");
        if (srv) {
            error_case("GET", "/v1/models", NULL, NULL, 401, "API key");
            error_case("GET", "/v1/models", "Bearer wrong", NULL, 401, "API key");
            TU_CHECK(request("GET", "/v1/models", "Bearer sekrit", NULL, &b) == 200, "the key");
            free(b);
            TU_CHECK(request("GET", "/health", NULL, NULL, &b) == 200, "/health without key");
            free(b);
            /* stopped: generation and /health answer 503 */
            attn_server_stop(srv, 1);
            error_case("POST", "/v1/completions", "Bearer sekrit", "{\"prompt\": \"hi\"}", 503,
                       "shutting down");
            error_case("GET", "/health", NULL, NULL, 503, "shutting down");
        }
        attn_server_free(srv), srv = NULL;
        attn_ctx_free(sctx);
    }
    cancel_early();
    TU_CHECK(log_lines > 10, "the log callback got the request lines (%d)", log_lines);
    attn_llm_free(m);
    attn_ctx_free(ref);
    return tu_finish("test_server");
}
