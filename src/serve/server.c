/* The OpenAI-compatible server's core (include/attn.h attn_server_*, docs/serve.md): request
 * parsing and validation, the answers' JSON, server-sent events and the continuous-batching
 * scheduler.  One scheduler thread owns the model and N session slots: between decode steps it
 * admits queued requests, prefills their prompts in chunks, then runs one
 * attn_llm_session_decode_batch for every active sequence.  No HTTP here (the attn program's
 * cli/serve.c does it with GNU libmicrohttpd) and no printing: log lines go to a callback. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn.h"
#include "internal.h"
#include "pool.h"
#include "serve_jsa.h"
#include "serve_json.h"
#include "serve_page.h"
#include "serve_tools.h"
#include "server.h"

#define MAX_STOPS 16
#define MAX_STOP_BYTES 1024
#define MAX_MESSAGES 1024
#define MAX_EMBED_INPUTS 2048
#define MAX_LOGIT_BIAS 1024 /* logit_bias entries per request */
#define PREFILL_CHUNK 64
_Static_assert(PREFILL_CHUNK >= 2 * ATTN__SERVE_MIN_PIECE, "attn__serve_prefill_chunk's chunk");

/* ---- requests ------------------------------------------------------------------------- */
#define MAX_TOP_LOGPROBS 20
/* A token of the answer with logprobs: its id and log-probability under the model's logits
 * (log-softmax, before penalties, logit_bias and temperature), the most likely ntop ids with
 * theirs, and the answer's length before its text (text_offset). */
typedef struct lp_entry {
    int32_t id, ntop;
    float lp;
    int32_t top_id[MAX_TOP_LOGPROBS];
    float top_lp[MAX_TOP_LOGPROBS];
    size_t off;
} lp_entry;
enum { KIND_CHAT, KIND_COMPLETION };

/* One generation request, shared by its reply and the scheduler (a reference each): freed
 * when the last of them lets go (refs). */
typedef struct attn_server attn_server_t;

typedef struct sreq {
    attn_server_t *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    int kind, stream, include_usage;
    int32_t *prompt;
    int64_t n_prompt, max_tokens;
    attn_llm_sampler sp;
    int ignore_eos;
    int cache_prompt; /* reuse a slot's cached prefix (default); 0: prefill the whole prompt,
                       * in the chunks attn__serve_prefill_chunk cuts, so the answer is the
                       * one-shot prefill's bit for bit (attn generate's) */
    char *stop[MAX_STOPS];
    size_t stop_len[MAX_STOPS];
    int nstop;
    int json;        /* 1: response_format json_object or json_schema: the answer is kept one
                      * JSON object (that fits schema when not NULL); 2: a strict forced
                      * call's arguments are kept to its parameters (schema); 3: after them,
                      * the call's closing (closing_ok) */
    int args_tried;  /* a forced call's arguments: the constraint was looked for */
    int closers;     /* json 3: the closing brackets written after the arguments */
    char *forced;    /* tool_choice naming a function: its name */
    char *head_names; /* required: the function of each of name_heads, in their order */
    int head_done;   /* required: the head written (an index into name_heads), or -1 */
    attn__jss *schema;
    attn__jsa js;    /* its acceptor, after the answer so far */
    int32_t *bias_id; /* logit_bias: nbias ids and what each adds (-inf: banned) */
    float *bias;
    int nbias;
    int logprobs, top_lp; /* logprobs asked (chat: true; completions: an integer), top N */
    struct lp_entry *lp;  /* one per answer token (under mu), lp_sent of them streamed */
    size_t nlp, lp_cap, lp_sent;
    char *echo;           /* completions' echo: the prompt's text, put before the answer */
    size_t echo_len;
    struct lp_entry *plp; /* echo with logprobs: the prompt's tokens (the first one, or the
                           * one after an added bos, with a null logprob), nplp of them */
    size_t nplp;
    char id[48];
    unsigned long long seq;
    long long created;
    const char *tool_fmt; /* the chat format whose tool calls the answer may hold (tools were
                           * given), else NULL */
    int choice;           /* ST_CHOICE_*: required and named force a call */
    char *tools_json;     /* the request's tools (JSON text, NUL-terminated) where the answer
                           * is read for calls: the arguments of a strict function's call are
                           * checked against its parameters */
    char tool_err[320];   /* why the calls failed that check */
    char *tool_names;     /* required: the tools' function names, each NUL-terminated */
    size_t tool_names_n;  /* their bytes */
    char *name_heads;     /* required with several tools: each tool's call head after the
                           * opener (NAME", "arguments": {), NUL-terminated: the name is
                           * sampled from these (constrain_name) */
    size_t name_heads_n, name_from; /* their bytes; where the name begins in text */
    int name_open;        /* 1 until the text holds one of the heads */
    int tool_failed;      /* a forced call that the answer does not hold */
    int64_t sent_calls;   /* stream: calls whose first delta went out */
    size_t *sent_args;    /* their argument bytes sent */
    size_t sent_cap;
    /* written by the scheduler under mu */
    sbuf text;      /* the whole answer so far (after a stop string: cut there) */
    size_t emitted; /* bytes of text sent as stream deltas */
    sbuf sse;       /* stream bytes not yet read by the response */
    int done, cancelled, failed;
    const char *finish;
    attn_chat_parse *calls; /* the answer's tool calls (tool_fmt), read when it ended */
    int64_t completion_tokens, reused;
    double t_queued, t_first, t_done;
} sreq;

static void req_unref(sreq *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left) return;
    free(r->prompt), free(r->tool_names), free(r->name_heads), free(r->sent_args);
    free(r->forced), free(r->head_names);
    free(r->tools_json), free(r->bias_id), free(r->bias), free(r->lp), free(r->echo);
    attn__jss_free(r->schema);
    free(r->plp);
    for (int i = 0; i < r->nstop; i++) free(r->stop[i]);
    sb_free(&r->text), sb_free(&r->sse);
    attn_chat_parse_free(r->calls);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

/* ---- the server ----------------------------------------------------------------------- */
typedef struct slot {
    attn_server_t *srv;
    attn_llm_session *s;
    int32_t *ids; /* the ids in the cache: pos of them */
    int64_t nids;
    sreq *r;      /* NULL: free */
    int64_t done; /* prompt tokens in the cache */
    int decoding; /* 1: next is fed by the next batch */
    int32_t next;
    attn_bpe_stream bs;
    uint64_t step;
    int32_t *hist; /* prompt + generated (the sampler's history) */
    int64_t nh;
} slot;

struct attn_server {
    char *api_key;
    long long parallel, queue;
    int log_requests;
    size_t max_body;
    void (*log)(void *user, const char *line);
    void *log_user;
    char model_name[256], embed_name[256];
    long long created;
    attn_llm *m;
    const attn_bpe *tok;
    attn_llm_config cfg;
    int chat_ok;
    char chat_why[256];
    const char *chat_format; /* attn_chat_template_name's (static), NULL without chat */
    unsigned long long id_salt; /* of the tool call ids made here */
    int64_t cap;
    attn_bert *bert;
    attn_ctx *ectx;
    int64_t edim, emax;
    pthread_mutex_t emu;
    attn_ctx *sctx; /* the scheduler's */
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sreq **q;
    long long qhead, qn;
    slot *slots;
    int active, stopping;
    long long inflight; /* requests between their first call and their completion */
    float *lgb;
    int32_t *bids; /* the scheduler's batch: ids, sessions and slots, --parallel each */
    int32_t *pids; /* its prefill batch: --parallel chunks of ids, and their lengths */
    int64_t *plens;
    attn_llm_session **bss;
    struct slot **bsl;
    char *piece; /* one token's text: 3 * (max_token_bytes + 3) bytes always suffice */
    size_t piece_cap;
    /* every token's text as the answer gets it (tool tags included), for constrain_name; made
     * by the scheduler when first needed: tok_text[tok_off[id] .. tok_off[id + 1]) */
    char *tok_text;
    size_t *tok_off;
    float *masked; /* the logits constrain_name gives the sampler */
    float *biased; /* the logits with a request's logit_bias ([V]) */
    uint8_t *jallow; /* response_format json_object: the tokens that may be part of an answer
                      * (some bytes, not a control token), made when first needed */
    float *jmask;    /* the logits of the tokens that keep the answer JSON ([V]) */
    int32_t *jby;    /* the allowed tokens by their first byte: jby[jfirst[b] .. jfirst[b + 1]) */
    int64_t jfirst[257];
    int jfailed;
    attn_ctx **tctx; /* one single-thread context per thread of sctx: the step's draws */
    int ntctx;
    int32_t *bpick; /* a step's drawn ids, their statuses and contexts ([parallel] each) */
    attn_status *bst;
    int *btid;
    char *tok_raw;  /* every token's bytes as it decodes alone, for logprobs (made by the
                     * scheduler when first needed, read-only after): tok_raw[raw_off[id] ..
                     * raw_off[id + 1]) */
    size_t *raw_off;
    int tok_raw_failed;
    lp_entry lp_cur; /* the entry of the token just sampled (sample -> take) */
    int lp_have;
    float *plg; /* echo with logprobs: a prefill piece's logits [PREFILL_CHUNK, V], when
                 * first needed */
    int tok_text_failed;
    unsigned long long seq;
    /* metrics (under mu) */
    unsigned long long http[600], prompt_tokens, completion_tokens, steps, batched, reused,
        copied, requests_done;
    int last_batch;
    int started; /* the scheduler thread runs */
    int locks;   /* mu, cv and emu are made */
};

/* The server's clock in seconds (monotonic). */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One log line through the callback (none without one). */
static void logf_(attn_server_t *S, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(attn_server_t *S, const char *fmt, ...) {
    if (!S->log) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    S->log(S->log_user, line);
}


/* ---- the scheduler -------------------------------------------------------------------- */
static void push_sse(sreq *r, sbuf *ev) {
    sb_put(&r->sse, ev->p, ev->n);
    if (ev->oom) r->sse.oom = 1;
    sb_free(ev);
    pthread_cond_broadcast(&r->cv); /* the response's reader waits for it */
}

static void lp_num(sbuf *b, float x) {
    if (isnan(x)) sb_puts(b, "null"); /* an echoed prompt's first token */
    else if (isfinite(x)) sb_printf(b, "%.9g", (double)x);
    else sb_puts(b, "-1e30"); /* JSON has no infinity */
}

/* One token's fields of a chat entry: "token", "logprob", "bytes". */
static void lp_tok(sbuf *b, const attn_server_t *S, int32_t id, float lp) {
    const char *t = S->tok_raw + S->raw_off[id];
    const size_t n = S->raw_off[id + 1] - S->raw_off[id];
    sb_puts(b, "\"token\":");
    sb_json_str(b, t, n); /* a piece of a character: U+FFFD here, its bytes below */
    sb_puts(b, ",\"logprob\":");
    lp_num(b, lp);
    sb_puts(b, ",\"bytes\":[");
    for (size_t i = 0; i < n; i++) sb_printf(b, "%s%u", i ? "," : "", (unsigned char)t[i]);
    sb_puts(b, "]");
}

/* The logprobs object of entries [from, to) of r: chat's {"content": [...]}, or the
 * completions' {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; null when the
 * request asked for none. */
static void lp_json(sbuf *b, const attn_server_t *S, const sreq *r, size_t from, size_t to) {
    if (!r->logprobs || !S->tok_raw) {
        sb_puts(b, "null");
        return;
    }
    if (r->kind == KIND_CHAT) {
        sb_puts(b, "{\"content\":[");
        for (size_t i = from; i < to; i++) {
            const lp_entry *e = &r->lp[i];
            sb_puts(b, i > from ? ",{" : "{");
            lp_tok(b, S, e->id, e->lp);
            sb_puts(b, ",\"top_logprobs\":[");
            for (int k = 0; k < e->ntop; k++) {
                sb_puts(b, k ? ",{" : "{");
                lp_tok(b, S, e->top_id[k], e->top_lp[k]);
                sb_puts(b, "}");
            }
            sb_puts(b, "]}");
        }
        sb_puts(b, "]}");
        return;
    }
    for (int part = 0; part < 4; part++) {
        static const char *const key[4] = {"{\"tokens\":[", "],\"token_logprobs\":[",
                                           "],\"top_logprobs\":[", "],\"text_offset\":["};
        sb_puts(b, key[part]);
        for (size_t i = from; i < to; i++) {
            const lp_entry *e = &r->lp[i];
            if (i > from) sb_puts(b, ",");
            if (part == 0)
                sb_json_str(b, S->tok_raw + S->raw_off[e->id],
                            S->raw_off[e->id + 1] - S->raw_off[e->id]);
            else if (part == 1)
                lp_num(b, e->lp);
            else if (part == 3)
                sb_printf(b, "%zu", e->off);
            else if (isnan(e->lp)) {
                sb_puts(b, "null"); /* an echoed prompt's first token */
            } else {
                sb_puts(b, "{");
                for (int k = 0; k < e->ntop; k++) {
                    if (k) sb_puts(b, ",");
                    const int32_t t = e->top_id[k];
                    sb_json_str(b, S->tok_raw + S->raw_off[t], S->raw_off[t + 1] - S->raw_off[t]);
                    sb_puts(b, ":");
                    lp_num(b, e->top_lp[k]);
                }
                sb_puts(b, "}");
            }
        }
    }
    sb_puts(b, "]}");
}

/* One stream chunk: delta text (NULL: none), the finish reason (NULL: none), the role chunk;
 * the tool_calls array t[0, n) as the delta when role is 2. */
static void stream_chunk(sreq *r, const char *t, size_t n, const char *finish, int role) {
    attn_server_t *S = r->srv;
    sbuf e = {0};
    sb_puts(&e, "data: {\"id\":\"");
    sb_puts(&e, r->id);
    sb_printf(&e, "\",\"object\":\"%s\",\"created\":%lld,\"model\":",
              r->kind == KIND_CHAT ? "chat.completion.chunk" : "text_completion", r->created);
    sb_json_str(&e, S->model_name, strlen(S->model_name));
    sb_puts(&e, ",\"choices\":[{\"index\":0,");
    /* the tokens' logprobs go with the text chunks (and the last one), as far as taken */
    const int lp_here = r->logprobs && !role;
    if (r->kind == KIND_CHAT) {
        sb_puts(&e, "\"delta\":{");
        if (role == 2) sb_puts(&e, "\"tool_calls\":"), sb_put(&e, t, n);
        else if (role) sb_puts(&e, "\"role\":\"assistant\",\"content\":\"\"");
        else if (t) sb_puts(&e, "\"content\":"), sb_json_str(&e, t, n);
        sb_puts(&e, "}");
        if (lp_here) sb_puts(&e, ",\"logprobs\":"), lp_json(&e, S, r, r->lp_sent, r->nlp);
    } else {
        sb_puts(&e, "\"text\":");
        sb_json_str(&e, t ? t : "", t ? n : 0);
        sb_puts(&e, ",\"logprobs\":");
        if (lp_here) lp_json(&e, S, r, r->lp_sent, r->nlp);
        else sb_puts(&e, "null");
    }
    if (lp_here) r->lp_sent = r->nlp;
    sb_puts(&e, ",\"finish_reason\":");
    if (finish) sb_printf(&e, "\"%s\"", finish);
    else sb_puts(&e, "null");
    sb_puts(&e, "}]");
    if (finish)
        sb_printf(&e, ",\"usage\":{\"prompt_tokens\":%lld,\"completion_tokens\":%lld,"
                      "\"total_tokens\":%lld}", (long long)r->n_prompt,
                  (long long)r->completion_tokens,
                  (long long)(r->n_prompt + r->completion_tokens));
    sb_puts(&e, "}\n\n");
    if (finish) sb_puts(&e, "data: [DONE]\n\n");
    push_sse(r, &e);
}

/* Bytes at the end of the text that could start a stop string: held back from the stream. */
static size_t holdback(const sreq *r) {
    size_t best = 0;
    for (int i = 0; i < r->nstop; i++)
        for (size_t k = r->stop_len[i] - 1; k > best; k--)
            if (k <= r->text.n && !memcmp(r->text.p + r->text.n - k, r->stop[i], k)) {
                best = k;
                break;
            }
    return best;
}

/* Streams the calls of p beyond those sent: a call's first delta (id, name) once its name is
 * known, then its arguments in pieces as they settle.  Under r->mu. */
static void stream_calls(sreq *r, const attn_chat_parse *p) {
    attn_server_t *S = r->srv;
    for (int64_t i = 0; p && i < p->n_calls; i++) {
        const attn_chat_tool_call *c = &p->calls[i];
        const size_t alen = strlen(c->arguments);
        sbuf e = {0};
        if (i >= r->sent_calls) {
            if ((size_t)i >= r->sent_cap) {
                size_t cap = r->sent_cap ? 2 * r->sent_cap : 8;
                size_t *na = realloc(r->sent_args, cap * sizeof *na);
                if (!na) return; /* the rest goes whole at the end */
                r->sent_args = na, r->sent_cap = cap;
            }
            st_call_head_json(&e, c, i, r->seq, S->id_salt);
            stream_chunk(r, e.p, e.n, NULL, 2);
            sb_free(&e);
            r->sent_args[i] = 0, r->sent_calls = i + 1;
        }
        if (alen > r->sent_args[i]) {
            st_call_args_json(&e, i, c->arguments + r->sent_args[i], alen - r->sent_args[i]);
            stream_chunk(r, e.p, e.n, NULL, 2);
            sb_free(&e);
            r->sent_args[i] = alen;
        }
    }
}

/* Sends what the text holds beyond what was sent (all of it when final; up to the start of
 * the tool calls when the answer has some, then the calls as they are written).  Under
 * r->mu. */
static void flush_text(sreq *r, int final) {
    attn_server_t *S = r->srv;
    const size_t held = final ? 0 : holdback(r);
    size_t safe = r->text.n - held;
    if (final && r->calls && r->calls->n_calls > 0) safe = r->calls->content_len;
    else if (!final && r->tool_fmt) { /* text that may begin a call waits for the end */
        size_t t = attn_chat_tool_call_start(r->tool_fmt, r->text.p, r->text.n);
        if (t < safe) safe = t;
    }
    if (safe > r->emitted) {
        if (r->stream) stream_chunk(r, r->text.p + r->emitted, safe - r->emitted, NULL, 0);
        r->emitted = safe;
    }
    if (!final && r->stream && r->tool_fmt && safe < r->text.n - held) {
        attn_chat_parse *p = NULL;
        if (attn_chat_parse_tool_calls_partial(S->sctx, r->tool_fmt, r->text.p, r->text.n - held,
                                               &p) == ATTN_OK)
            stream_calls(r, p);
        attn_chat_parse_free(p);
    }
}

/* 1 when every call of p names one of the request's tools. */
static int calls_named(const sreq *r, const attn_chat_parse *p) {
    for (int64_t i = 0; i < p->n_calls; i++) {
        int found = 0;
        for (size_t k = 0; k < r->tool_names_n && !found; k += strlen(r->tool_names + k) + 1)
            found = !strcmp(r->tool_names + k, p->calls[i].name);
        if (!found) return 0;
    }
    return 1;
}

/* 1 when the arguments of every call of a function with "strict": true fit its parameters
 * (OpenAI's strict mode: the call must follow the schema; other calls come back as the model
 * wrote them, for the client to check); else 0 with the reason in r->tool_err. */
static int calls_fit(sreq *r, const attn_chat_parse *p) {
    sj_doc td = {0};
    char err[256];
    int ok = 1;
    if (!r->tools_json || !sj_parse(&td, r->tools_json, strlen(r->tools_json), err, sizeof err)) {
        sj_free(&td);
        return 1; /* parsed once already when the request came: cannot fail here */
    }
    for (int64_t i = 0; ok && i < p->n_calls; i++) {
        int strict = 0;
        const sj *ps = st_tool_parameters(td.root, p->calls[i].name, &strict);
        if (!ps || !strict) continue;
        const char *a = p->calls[i].arguments ? p->calls[i].arguments : "{}";
        sj_doc ad = {0};
        char path[160] = "arguments";
        if (!sj_parse(&ad, a, strlen(a), err, sizeof err))
            snprintf(r->tool_err, sizeof r->tool_err, "the arguments of %s are not JSON: %s",
                     p->calls[i].name, err), ok = 0;
        else if (!st_args_check(ps, ad.root, path, sizeof path, err, sizeof err))
            snprintf(r->tool_err, sizeof r->tool_err, "the arguments of %s do not fit its "
                     "parameters: %s", p->calls[i].name, err), ok = 0;
        sj_free(&ad);
    }
    sj_free(&td);
    return ok;
}

/* The error event of a stream that ends without the call it had to make. */
static void stream_error(sreq *r, const char *msg) {
    sbuf e = {0};
    sb_puts(&e, "data: {\"error\":{\"message\":");
    sb_json_str(&e, msg, strlen(msg));
    sb_puts(&e, ",\"type\":\"server_error\",\"code\":\"tool_call_failed\"}}\n\ndata: [DONE]\n\n");
    push_sse(r, &e);
}

/* Appends a piece of text; 1 when a stop string now occurs (the text is cut before it). */
static int add_text(sreq *r, const char *t, size_t n) {
    size_t old = r->text.n;
    sb_put(&r->text, t, n);
    if (!r->text.p) return 0;
    size_t cut = SIZE_MAX;
    for (int i = 0; i < r->nstop; i++) {
        size_t L = r->stop_len[i], from = old >= L - 1 ? old - (L - 1) : 0;
        for (size_t p = from; p + L <= r->text.n && p < cut; p++)
            if (!memcmp(r->text.p + p, r->stop[i], L)) {
                cut = p;
                break;
            }
    }
    if (cut == SIZE_MAX) return 0;
    r->text.n = cut;
    r->text.p[cut] = 0;
    return 1;
}

/* Why a forced call failed (reason: r->finish). */
static const char *tool_failure(const sreq *r) {
    if (r->tool_err[0]) return r->tool_err;
    if (r->calls && r->calls->n_calls > 0)
        return "the model called a function that is not one of 'tools' (tool_choice "
               "\"required\")";
    return !strcmp(r->finish, "length")
               ? "the answer ran out of tokens (max_tokens or the context) before its tool call "
                 "was complete"
               : "the model's answer is not a well-formed tool call of its chat format";
}

/* Ends the slot's request (reason: "stop", "length", NULL when it was cancelled or failed;
 * failed: 1 for a failure, 2 for a stop string, after which nothing more is added). */
static void finish(slot *sl, const char *reason, int failed) {
    attn_server_t *S = sl->srv;
    sreq *r = sl->r;
    char tail[8];
    size_t tl = 0;
    attn_bpe_decode_stream_end(S->sctx, &sl->bs, tail, sizeof tail, &tl);
    pthread_mutex_lock(&r->mu);
    /* a character left incomplete ends as U+FFFD, as attn generate writes it */
    if (tl && reason && failed != 2) add_text(r, tail, tl);
    r->finish = reason ? reason : "cancelled";
    r->failed = failed == 1;
    if (reason && r->tool_fmt && r->text.p && !r->text.oom) {
        /* the calls at the end of the answer; a malformed one stays text */
        if (attn_chat_parse_tool_calls(S->sctx, r->tool_fmt, r->text.p, r->text.n, &r->calls) !=
            ATTN_OK)
            logf_(S, "attn serve: reading tool calls: %s", attn_ctx_errmsg(S->sctx));
        else if (r->calls->n_calls > 0)
            r->finish = "tool_calls";
    }
    /* a forced call: the answer must be one (required: of the tools given) */
    if (reason && failed != 1 && (r->choice == ST_CHOICE_REQUIRED || r->choice == ST_CHOICE_NAMED))
        r->tool_failed = !r->calls || r->calls->n_calls == 0 ||
                         (r->choice == ST_CHOICE_REQUIRED && !calls_named(r, r->calls));
    /* the arguments of strict functions' calls against their parameters */
    if (reason && failed != 1 && !r->tool_failed && r->calls && r->calls->n_calls > 0)
        r->tool_failed = !calls_fit(r, r->calls);
    if (!r->cancelled && r->tool_failed) {
        if (r->stream) stream_error(r, tool_failure(r));
    } else if (!r->cancelled) {
        flush_text(r, 1);
        if (r->stream && r->calls && r->calls->n_calls > 0) stream_calls(r, r->calls);
        if (r->stream) stream_chunk(r, NULL, 0, r->finish, 0);
    }
    r->done = 1;
    r->t_done = now_s();
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&S->mu);
    S->completion_tokens += (unsigned long long)r->completion_tokens;
    S->requests_done++;
    S->active--;
    pthread_mutex_unlock(&S->mu);
    sl->r = NULL, sl->decoding = 0;
    req_unref(r);
}

/* The text of a control token that belongs to a tool call's form (Mistral's [TOOL_CALLS],
 * [ARGS], [CALL_ID], Llama's <|python_tag|>), which a decode skipping special tokens drops;
 * NULL for any other token. */
static const char *tool_tag(attn_server_t *S, int32_t id) {
    static const char *const tags[] = {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<|python_tag|>"};
    if (attn_bpe_token_type(S->tok, id) != ATTN_BPE_TOKEN_CONTROL) return NULL;
    const char *t = attn_bpe_token_text(S->tok, id);
    for (size_t i = 0; t && i < sizeof tags / sizeof tags[0]; i++)
        if (!strcmp(t, tags[i])) return tags[i];
    return NULL;
}

/* The sampled id of a slot: ends, or streams its text and sets up the next decode. */
static void take(slot *sl, int32_t id) {
    attn_server_t *S = sl->srv;
    sreq *r = sl->r;
    const int end = attn_llm_is_end(S->m, id);
    if (end && !r->ignore_eos) {
        finish(sl, "stop", 0);
        return;
    }
    size_t pl = 0;
    const char *piece = S->piece, *tag = r->tool_fmt ? tool_tag(S, id) : NULL;
    if (tag) /* a control token that writes tool calls: its text is part of the answer */
        piece = tag, pl = strlen(tag);
    else if (attn_bpe_decode_stream(S->sctx, S->tok, &sl->bs, id,
                                    ATTN_BPE_SKIP_SPECIAL | ATTN_BPE_CONTINUE, S->piece,
                                    S->piece_cap, &pl) != ATTN_OK)
        pl = 0;
    sl->hist[sl->nh++] = id;
    pthread_mutex_lock(&r->mu);
    if (S->lp_have && r->nlp == r->lp_cap) { /* at most one a token: bounded by the context */
        const size_t cap = r->lp_cap ? 2 * r->lp_cap : 64;
        lp_entry *u = realloc(r->lp, cap * sizeof *u);
        if (u) r->lp = u, r->lp_cap = cap;
    }
    if (S->lp_have && r->nlp < r->lp_cap) {
        r->lp[r->nlp] = S->lp_cur;
        r->lp[r->nlp++].off = r->text.n;
    }
    if (r->completion_tokens++ == 0) r->t_first = now_s();
    const int stopped = add_text(r, piece, pl);
    if (!stopped) flush_text(r, 0);
    int called = 0; /* a forced call ends with the call: what a model writes after it is lost */
    if (!stopped && r->choice >= ST_CHOICE_REQUIRED && r->text.p && !r->text.oom) {
        attn_chat_parse *p = NULL;
        called = attn_chat_parse_tool_calls(S->sctx, r->tool_fmt, r->text.p, r->text.n, &p) ==
                     ATTN_OK && p->n_calls > 0;
        attn_chat_parse_free(p);
    }
    pthread_mutex_unlock(&r->mu);
    if (stopped) finish(sl, "stop", 2);
    else if (called) finish(sl, "stop", 0);
    else if (r->completion_tokens >= r->max_tokens) finish(sl, "length", 0);
    else if (attn_llm_session_pos(sl->s) >= attn_llm_session_capacity(sl->s))
        finish(sl, "length", 0);
    else
        sl->next = id, sl->decoding = 1;
}

/* Every token's bytes in one table, t[off[id] .. off[id + 1]) (*t, *off: NULL when out of
 * memory): raw 0, the token's text in an answer (a tool call's tag as written, a piece of a
 * character empty: never a name's); raw 1, its bytes as it decodes alone (special tokens as
 * their text, a piece of a character as its bytes).  The scheduler's. */
static void tok_table(attn_server_t *S, int raw, char **tp, size_t **offp) {
    const size_t V = (size_t)S->cfg.vocab_size;
    size_t cap = V * 8 + 64, n = 0;
    char *t = malloc(cap);
    size_t *off = malloc(sizeof *off * (V + 1));
    for (size_t id = 0; t && off && id < V; id++) {
        const int32_t one = (int32_t)id;
        const char *tag = raw ? NULL : tool_tag(S, one), *piece = S->piece;
        size_t pl = 0;
        attn_bpe_stream bs;
        memset(&bs, 0, sizeof bs);
        if (tag) piece = tag, pl = strlen(tag);
        else if ((raw ? attn_bpe_decode(S->sctx, S->tok, &one, 1, ATTN_BPE_CONTINUE, S->piece,
                                        S->piece_cap, &pl)
                      : attn_bpe_decode_stream(S->sctx, S->tok, &bs, one,
                                               ATTN_BPE_SKIP_SPECIAL | ATTN_BPE_CONTINUE,
                                               S->piece, S->piece_cap, &pl)) != ATTN_OK)
            pl = 0;
        if (n + pl > cap) {
            char *u = cap < SIZE_MAX / 2 ? realloc(t, cap * 2 + pl) : NULL;
            if (!u) free(t);
            t = u, cap = cap * 2 + pl;
            if (!t) break;
        }
        off[id] = n, memcpy(t + n, piece, pl), n += pl;
    }
    if (!t || !off) {
        free(t), free(off);
        t = NULL, off = NULL;
    } else {
        off[V] = n;
    }
    *tp = t, *offp = off;
}

/* Every token's text in an answer (tok_table raw 0; 0 if it cannot be made). */
static int tok_texts(attn_server_t *S) {
    if (S->tok_text) return 1;
    if (S->tok_text_failed) return 0;
    S->masked = malloc(sizeof *S->masked * (size_t)S->cfg.vocab_size);
    if (S->masked) tok_table(S, 0, &S->tok_text, &S->tok_off);
    if (!S->tok_text) {
        free(S->masked);
        S->masked = NULL, S->tok_text_failed = 1;
        logf_(S, "attn serve: out of memory for the tokens' texts: tool_choice "
                 "\"required\" names are not constrained");
        return 0;
    }
    return 1;
}

/* tool_choice "required" with several tools: the name is written by the model after the
 * prefilled opener, so the logits of every token that would leave all the tools' call heads
 * (NAME + what follows it up to the arguments) are set to -inf until the answer holds one
 * head whole.  Returns the logits to sample from (lg itself when nothing is constrained). */
static const float *constrain_name(sreq *r, const float *lg) {
    attn_server_t *S = r->srv;
    if (!r->name_open || r->text.oom || r->text.n < r->name_from) return lg;
    const char *g = r->text.p + r->name_from;
    const size_t gl = r->text.n - r->name_from;
    int fits = 0, hi = 0;
    for (size_t k = 0; k < r->name_heads_n; k += strlen(r->name_heads + k) + 1, hi++) {
        const char *h = r->name_heads + k;
        const size_t hl = strlen(h);
        if (gl >= hl && !memcmp(g, h, hl)) { /* a head is written: the arguments are free */
            r->name_open = 0, r->head_done = hi;
            return lg;
        }
        fits |= gl < hl && !memcmp(g, h, gl);
    }
    if (!fits || !tok_texts(S)) {
        r->name_open = 0;
        return lg;
    }
    int any = 0;
    for (int64_t id = 0; id < S->cfg.vocab_size; id++) {
        const char *t = S->tok_text + S->tok_off[id];
        const size_t tl = S->tok_off[id + 1] - S->tok_off[id];
        int ok = 0;
        for (size_t k = 0; tl && !ok && k < r->name_heads_n; k += strlen(r->name_heads + k) + 1) {
            const char *h = r->name_heads + k;
            const size_t hl = strlen(h);
            if (gl < hl && !memcmp(g, h, gl))
                ok = !memcmp(t, h + gl, tl < hl - gl ? tl : hl - gl);
        }
        S->masked[id] = ok ? lg[id] : -INFINITY;
        any |= ok;
    }
    if (!any) r->name_open = 0;
    return any ? S->masked : lg;
}

/* Every token's bytes as it decodes alone (tok_table raw 1), for logprobs; 0 if the table
 * cannot be made. */
static int tok_raws(attn_server_t *S) {
    if (S->tok_raw) return 1;
    if (S->tok_raw_failed) return 0;
    tok_table(S, 1, &S->tok_raw, &S->raw_off);
    S->tok_raw_failed = !S->tok_raw;
    return S->tok_raw != NULL;
}

/* S->lp_cur for token id of the raw logits lg [V]: its log-probability and the top ones. */
static void logprob_entry(attn_server_t *S, const sreq *r, const float *lg, int32_t id) {
    const int64_t V = S->cfg.vocab_size;
    lp_entry *e = &S->lp_cur;
    float mx = -INFINITY;
    for (int64_t v = 0; v < V; v++) mx = lg[v] > mx ? lg[v] : mx;
    double sum = 0;
    for (int64_t v = 0; v < V; v++) sum += exp((double)lg[v] - mx);
    const double lse = (double)mx + log(sum);
    e->id = id, e->lp = (float)((double)lg[id] - lse), e->ntop = 0;
    /* the top ones: insertion into a sorted list (N <= 20), ties to the lower id */
    for (int64_t v = 0; v < V && r->top_lp > 0; v++) {
        int k = e->ntop;
        if (k == r->top_lp && !(lg[v] > lg[e->top_id[k - 1]])) continue;
        if (k < r->top_lp) e->ntop++;
        else k--;
        while (k > 0 && lg[v] > lg[e->top_id[k - 1]]) e->top_id[k] = e->top_id[k - 1], k--;
        e->top_id[k] = (int32_t)v;
    }
    for (int k = 0; k < e->ntop; k++) e->top_lp[k] = (float)((double)lg[e->top_id[k]] - lse);
    S->lp_have = 1;
}

/* response_format json_object: the tables (0 when out of memory). */
static int json_tables(attn_server_t *S) {
    if (S->jallow) return 1;
    if (S->jfailed || !tok_texts(S) || !tok_raws(S)) return 0;
    const int64_t V = S->cfg.vocab_size;
    S->jallow = malloc((size_t)V);
    S->jmask = malloc(sizeof *S->jmask * (size_t)V);
    S->jby = malloc(sizeof *S->jby * (size_t)V);
    if (!S->jallow || !S->jmask || !S->jby) {
        free(S->jallow), free(S->jmask), free(S->jby);
        S->jallow = NULL, S->jmask = NULL, S->jby = NULL, S->jfailed = 1;
        return 0;
    }
    for (int64_t v = 0; v < V; v++) {
        const size_t n = S->raw_off[v + 1] - S->raw_off[v];
        int high = 0;
        for (size_t i = 0; i < n; i++) high |= (unsigned char)S->tok_raw[S->raw_off[v] + i] >= 0x80;
        /* bytes, and text in an answer or a piece of a character: not a control token */
        S->jallow[v] = n > 0 && (S->tok_off[v + 1] > S->tok_off[v] || high) &&
                       !tool_tag(S, (int32_t)v);
    }
    /* a counting sort of the allowed tokens by first byte, in id order within each */
    memset(S->jfirst, 0, sizeof S->jfirst);
    for (int64_t v = 0; v < V; v++)
        if (S->jallow[v]) S->jfirst[(unsigned char)S->tok_raw[S->raw_off[v]] + 1]++;
    for (int b = 0; b < 256; b++) S->jfirst[b + 1] += S->jfirst[b];
    int64_t at[256];
    memcpy(at, S->jfirst, sizeof at);
    for (int64_t v = 0; v < V; v++)
        if (S->jallow[v]) S->jby[at[(unsigned char)S->tok_raw[S->raw_off[v]]]++] = (int32_t)v;
    return 1;
}

/* After a call's arguments: what closes the call in every form attn writes (Qwen's
 * `}\n</tool_call>`, Llama's `}`, Mistral's `}]`, then an end or control token): at most two
 * closing brackets in all (*closers: those written so far, updated) and blanks, up to a '<' (a
 * closing tag: free after it, *free_after set). */
static int closing_ok(const char *t, size_t n, int *closers, int *free_after) {
    *free_after = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] == '<') {
            *free_after = 1;
            return 1;
        }
        if ((t[i] == '}' || t[i] == ']') && ++*closers > 2) return 0;
        if (!strchr("}] \t\r\n", t[i])) return 0;
    }
    return 1;
}

/* Feeds token v's bytes to acceptor a: the whole answer (json 1), or a call's arguments up to
 * their end then the call's closing (json 2; *next: the mode after: 2, 3 or 0; *closers: the
 * closing brackets after the arguments). */
static int json_feed(const attn_server_t *S, int json, attn__jsa *a, int64_t v, int *next,
                     int *closers) {
    const char *p = S->tok_raw + S->raw_off[v];
    const size_t n = S->raw_off[v + 1] - S->raw_off[v];
    *next = json;
    if (json == 1) return attn__jsa_feed(a, p, n);
    size_t used = 0;
    int fr = 0;
    if (!attn__jsa_feed_upto(a, p, n, &used)) return 0;
    if (!attn__jsa_done(a)) return 1;
    *closers = 0;
    if (!closing_ok(p + used, n - used, closers, &fr)) return 0;
    *next = fr ? 0 : 3;
    return 1;
}

/* Whether token v keeps r's answer (or its call's arguments, or their closing) accepted. */
static int json_fits(attn_server_t *S, const sreq *r, int64_t v) {
    int next, fr, closers = r->closers;
    if (r->json == 3) /* the answer's text: control tokens (no text) close the call too */
        return !tool_tag(S, (int32_t)v) &&
               closing_ok(S->tok_text + S->tok_off[v], S->tok_off[v + 1] - S->tok_off[v],
                          &closers, &fr);
    if (!S->jallow[v]) return 0;
    attn__jsa c;
    attn__jsa_copy(&c, &r->js);
    return json_feed(S, r->json, &c, v, &next, &closers);
}

/* A strict function's forced call: once its head is written (a named one's from the start;
 * "required": when the name's head is whole), its arguments are kept to its parameters (the
 * schema compiled; a schema the acceptor refuses is left to the check at the end), from the
 * answer's bytes after the head on. */
static void args_begin(sreq *r) {
    if (r->args_tried || r->json || !r->tools_json || r->choice < ST_CHOICE_REQUIRED) return;
    const char *name = NULL;
    size_t after = r->name_from; /* where the arguments' '{' is: the head's last byte */
    if (r->choice == ST_CHOICE_NAMED) {
        name = r->forced;
        after -= after > 0;
    } else if (r->head_done >= 0 && r->head_names) {
        const char *h = r->name_heads;
        name = r->head_names;
        for (int i = 0; i < r->head_done; i++) h += strlen(h) + 1, name += strlen(name) + 1;
        after += strlen(h) - (strlen(h) > 0);
    } else {
        return; /* the name is not written yet */
    }
    r->args_tried = 1;
    if (!name || r->text.oom || after > r->text.n) return;
    sj_doc td = {0};
    char err[256];
    int strict = 0;
    const sj *ps = sj_parse(&td, r->tools_json, strlen(r->tools_json), err, sizeof err)
                       ? st_tool_parameters(td.root, name, &strict) : NULL;
    if (ps && strict && attn__jss_compile(ps, 1, &r->schema, err, sizeof err)) {
        attn__jsa_init(&r->js, r->schema);
        size_t used = 0;
        if (attn__jsa_feed_upto(&r->js, r->text.p + after, r->text.n - after, &used) &&
            !attn__jsa_done(&r->js)) {
            r->json = 2;
        } else {
            attn__jss_free(r->schema);
            r->schema = NULL;
        }
    }
    sj_free(&td);
}

/* response_format json_object: *id, drawn from lg, if it keeps the answer JSON; else a draw
 * from the tokens that do (accepting a fitting draw, else drawing among the fitting tokens,
 * gives each fitting token its probability among them).  1, or 0 with a message. */
static int json_draw(slot *sl, const float *lg, int32_t *id, const char **why) {
    attn_server_t *S = sl->srv;
    sreq *r = sl->r;
    if (!json_tables(S)) {
        *why = "out of memory for the tokens' bytes";
        return 0;
    }
    if (!json_fits(S, r, *id)) {
        /* the bytes that may come next: a token starting with another is out at once */
        uint8_t first[256];
        for (int b = 0; b < 256; b++) {
            attn__jsa c;
            attn__jsa_copy(&c, &r->js);
            const char ch = (char)b;
            first[b] = (uint8_t)attn__jsa_feed(&c, &ch, 1);
        }
        int any = 0;
        for (int64_t v = 0; v < S->cfg.vocab_size; v++) {
            const int ok = r->json == 3 && lg[v] != -INFINITY && json_fits(S, r, v);
            S->jmask[v] = ok ? lg[v] : -INFINITY;
            any |= ok;
        }
        for (int b = 0; r->json != 3 && b < 256; b++) /* tokens starting with a byte that fits */
            for (int64_t i = S->jfirst[b]; first[b] && i < S->jfirst[b + 1]; i++) {
                const int32_t v = S->jby[i];
                if (lg[v] != -INFINITY && json_fits(S, r, v)) S->jmask[v] = lg[v], any = 1;
            }
        if (!any) {
            *why = "no token continues the answer as JSON";
            return 0;
        }
        if (attn_llm_sample_ex(S->tctx[0], &r->sp, S->jmask, S->cfg.vocab_size, sl->hist, sl->nh,
                               r->n_prompt, &sl->step, id) != ATTN_OK) {
            *why = attn_ctx_errmsg(S->tctx[0]);
            return 0;
        }
    }
    if (r->json == 3) { /* the call's closing: free once a tag or a control token comes */
        int fr = 0;
        closing_ok(S->tok_text + S->tok_off[*id], S->tok_off[*id + 1] - S->tok_off[*id],
                   &r->closers, &fr);
        if (fr || S->tok_off[*id + 1] == S->tok_off[*id]) r->json = 0;
        return 1;
    }
    int next = r->json;
    json_feed(S, r->json, &r->js, *id, &next, &r->closers);
    r->json = next; /* 2 -> 3 (or 0) once the arguments are whole */
    return 1;
}

/* After a draw: the logprobs entry, the token's text */
static void took(slot *sl, const float *raw, int32_t id) {
    attn_server_t *S = sl->srv;
    sreq *r = sl->r;
    S->lp_have = 0;
    if (r->logprobs && tok_raws(S)) logprob_entry(S, r, raw, id);
    take(sl, id);
    /* a JSON answer ends with its object */
    if (sl->r == r && r->json == 1 && attn__jsa_done(&r->js)) finish(sl, "stop", 0);
}

/* The draws of a decode step's plain slots (no logit_bias, no tool-name constraint: nothing
 * shared), spread over the threads, each with its own context */
typedef struct draw_job {
    attn_server_t *S;
    slot **sl;
    const char *plain;
} draw_job;

static void draw_task(void *arg, int64_t begin, int64_t end, int tid) {
    const draw_job *j = arg;
    attn_server_t *S = j->S;
    for (int64_t k = begin; k < end; k++) {
        if (!j->plain[k]) continue;
        slot *sl = j->sl[k];
        S->btid[k] = tid;
        S->bst[k] = attn_llm_sample_ex(S->tctx[tid], &sl->r->sp,
                                       S->lgb + (size_t)k * (size_t)S->cfg.vocab_size,
                                       S->cfg.vocab_size, sl->hist, sl->nh, sl->r->n_prompt,
                                       &sl->step, &S->bpick[k]);
    }
}

static int sample(slot *sl, const float *lg) {
    attn_server_t *S = sl->srv;
    int32_t id;
    const float *raw = lg;
    if (sl->r->nbias) { /* logit_bias: added to the model's logits (a later entry of an id wins) */
        memcpy(S->biased, lg, sizeof *lg * (size_t)S->cfg.vocab_size);
        for (int i = 0; i < sl->r->nbias; i++)
            S->biased[sl->r->bias_id[i]] = lg[sl->r->bias_id[i]] + sl->r->bias[i];
        lg = S->biased;
    }
    lg = constrain_name(sl->r, lg);
    args_begin(sl->r);
    /* the presence and frequency penalties count the generated ids only */
    /* on the first draw context, as the step's parallel draws use the contexts of their threads */
    attn_status st = attn_llm_sample_ex(S->tctx[0], &sl->r->sp, lg, S->cfg.vocab_size, sl->hist,
                                        sl->nh, sl->r->n_prompt, &sl->step, &id);
    if (st != ATTN_OK) {
        logf_(S, "attn serve: sampling failed: %s", attn_ctx_errmsg(S->tctx[0]));
        finish(sl, NULL, 1);
        return 0;
    }
    const char *why = NULL;
    if (sl->r->json && !json_draw(sl, lg, &id, &why)) {
        logf_(S, "attn serve: response_format json_object: %s", why);
        finish(sl, NULL, 1);
        return 0;
    }
    took(sl, raw, id);
    return 1;
}

/* The next prefill call's tokens out of rem left: at most chunk, and never a piece of fewer
 * than ATTN__SERVE_MIN_PIECE tokens when rem is more.  A row's bits depend only on whether
 * its call has more than ATTN__QMV_ROWS rows (the products' matrix-vector or GEMM path) and
 * more than ATTN__DECODE_MAX_L queries (attention's split-KV decode kernels or the fused
 * ones, which give a row the same bits whatever the call's split): so a prompt prefilled in
 * these chunks gets the one-shot prefill's logits bit for bit. */
int64_t attn__serve_prefill_chunk(int64_t rem, int64_t chunk) {
    if (rem <= chunk) return rem;
    if (rem - chunk < ATTN__SERVE_MIN_PIECE) return rem - ATTN__SERVE_MIN_PIECE;
    return chunk;
}

/* Tokens of slot sl's cache that start the prompt of r. */
static int64_t common(const slot *sl, const sreq *r) {
    int64_t p = 0;
    while (p < sl->nids && p < r->n_prompt && sl->ids[p] == r->prompt[p]) p++;
    return p;
}

/* A queued request into a free slot: the one whose cache shares the longest prefix with the
 * prompt, rewound to it; when another slot (busy or free) shares a longer one, its keys and
 * values are copied in instead (attn_llm_session_copy: a second chat of the same conversation,
 * or many requests with one system prompt, do not compute the prefix again). */
static void admit(sreq *r) {
    attn_server_t *S = r->srv;
    int best = -1, from = -1;
    int64_t bestp = -1, fromp = -1;
    for (int i = 0; i < S->parallel; i++) {
        const int64_t p = common(&S->slots[i], r);
        /* without cache_prompt: the free slot whose cache this prompt would reuse least, so
         * that the others keep theirs */
        if (!S->slots[i].r && (best < 0 || (r->cache_prompt ? p > bestp : p < bestp)))
            best = i, bestp = p;
        if (p > fromp) from = i, fromp = p;
    }
    slot *sl = &S->slots[best];
    if (!r->cache_prompt) bestp = fromp = 0;
    const int64_t cap = r->n_prompt - 1; /* the last token's logits are needed */
    if (bestp > cap) bestp = cap;
    if (fromp > cap) fromp = cap;
    if (from != best && fromp > bestp &&
        attn_llm_session_copy(sl->s, S->slots[from].s, fromp) == ATTN_OK) {
        memcpy(sl->ids, S->slots[from].ids, sizeof *sl->ids * (size_t)fromp);
        sl->nids = bestp = fromp;
        S->copied += (unsigned long long)fromp;
    }
    attn_llm_session_rewind(sl->s, bestp);
    sl->nids = bestp;
    sl->r = r, sl->done = bestp, sl->decoding = 0, sl->step = 0;
    memset(&sl->bs, 0, sizeof sl->bs);
    memcpy(sl->hist, r->prompt, sizeof *r->prompt * (size_t)r->n_prompt);
    sl->nh = r->n_prompt;
    r->reused = bestp;
    S->reused += (unsigned long long)bestp;
    S->active++;
}

static void *alloc_n(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    return malloc(n && size ? n * size : 1);
}

/* A prefill piece of k tokens of slot sl whose request echoes its prompt with logprobs: every
 * row's logits, each giving the next prompt token's entry (the first token's, unless it is an
 * added bos, with a null logprob); the last piece's last row samples the first answer token. */
static void prompt_rows(attn_server_t *S, slot *sl, int64_t k) {
    sreq *r = sl->r;
    const size_t V = (size_t)S->cfg.vocab_size;
    if (!S->plg) S->plg = alloc_n((size_t)PREFILL_CHUNK * V, sizeof *S->plg);
    if (!r->plp) r->plp = calloc((size_t)r->n_prompt, sizeof *r->plp);
    attn_status st = ATTN_E_NOMEM;
    if (S->plg && r->plp && tok_raws(S))
        st = attn_llm_session_prefill_logits(S->sctx, sl->s, r->prompt + sl->done, k, S->plg);
    if (st != ATTN_OK) {
        logf_(S, "attn serve: prefill failed: %s",
              st == ATTN_E_NOMEM ? "out of memory" : attn_ctx_errmsg(S->sctx));
        sl->nids = attn_llm_session_pos(sl->s);
        finish(sl, NULL, 1);
        return;
    }
    attn_llm_special sp;
    attn_llm_get_special(S->m, &sp);
    pthread_mutex_lock(&r->mu);
    for (int64_t j = -1; j < k; j++) {
        const int64_t p = sl->done + j + 1; /* the prompt token this row predicts */
        if (p >= r->n_prompt || (j < 0 && p > 0)) continue;
        if (j < 0) { /* the first token: no row predicts it */
            if (sp.add_bos && r->prompt[0] == sp.bos) continue; /* the added bos: not text */
            memset(&S->lp_cur, 0, sizeof S->lp_cur);
            S->lp_cur.id = r->prompt[0], S->lp_cur.lp = NAN;
        } else {
            logprob_entry(S, r, S->plg + (size_t)j * V, r->prompt[p]);
        }
        lp_entry *e = &r->plp[r->nplp];
        *e = S->lp_cur;
        e->off = r->nplp ? e[-1].off + (S->raw_off[e[-1].id + 1] - S->raw_off[e[-1].id]) : 0;
        r->nplp++;
    }
    pthread_mutex_unlock(&r->mu);
    memcpy(sl->ids + sl->nids, r->prompt + sl->done, sizeof *sl->ids * (size_t)k);
    sl->nids += k, sl->done += k;
    if (sl->done < r->n_prompt) return;
    if (r->max_tokens == 0) finish(sl, "length", 0); /* the prompt scored, nothing generated */
    else sample(sl, S->plg + (size_t)(k - 1) * V);
}

static void *scheduler(void *arg) {
    attn_server_t *S = arg;
    int32_t *ids = S->bids; /* the batch's arrays, allocated before the server started */
    attn_llm_session **ss = S->bss;
    slot **bs = S->bsl;
    for (;;) {
        pthread_mutex_lock(&S->mu);
        while (!S->stopping && S->qn == 0 && S->active == 0) pthread_cond_wait(&S->cv, &S->mu);
        if (S->stopping && S->qn == 0 && S->active == 0) {
            pthread_cond_broadcast(&S->cv);
            pthread_mutex_unlock(&S->mu);
            break;
        }
        while (S->qn > 0 && S->active < S->parallel) {
            sreq *r = S->q[S->qhead];
            S->qhead = (S->qhead + 1) % S->queue, S->qn--;
            admit(r);
        }
        pthread_mutex_unlock(&S->mu);
        /* cancelled ones leave; then one prefill chunk each for those still reading, all in
         * one attn_llm_session_prefill_batch (the weights read once for all the prompts) */
        int np = 0;
        int64_t nt = 0;
        for (int i = 0; i < S->parallel; i++) {
            slot *sl = &S->slots[i];
            if (!sl->r) continue;
            pthread_mutex_lock(&sl->r->mu);
            int gone = sl->r->cancelled;
            pthread_mutex_unlock(&sl->r->mu);
            if (gone) {
                finish(sl, NULL, 0);
                continue;
            }
            if (sl->decoding || sl->done >= sl->r->n_prompt) continue;
            const int64_t k = attn__serve_prefill_chunk(sl->r->n_prompt - sl->done,
                                                        PREFILL_CHUNK);
            if (sl->r->echo && sl->r->logprobs) { /* every row's logits: a call of its own */
                prompt_rows(S, sl, k);
                continue;
            }
            memcpy(S->pids + nt, sl->r->prompt + sl->done, sizeof *ids * (size_t)k);
            bs[np] = sl, ss[np] = sl->s, S->plens[np++] = k, nt += k;
        }
        if (np > 0) {
            attn_status st = attn_llm_session_prefill_batch(S->sctx, ss, S->pids, S->plens, np,
                                                            S->lgb);
            if (st != ATTN_OK)
                logf_(S, "attn serve: prefill failed: %s", attn_ctx_errmsg(S->sctx));
            for (int j = 0, at = 0; j < np; at += (int)S->plens[j], j++) {
                slot *sl = bs[j];
                const int64_t k = S->plens[j];
                if (st != ATTN_OK) {
                    sl->nids = attn_llm_session_pos(sl->s);
                    finish(sl, NULL, 1);
                    continue;
                }
                memcpy(sl->ids + sl->nids, S->pids + at, sizeof *ids * (size_t)k);
                sl->nids += k, sl->done += k;
                if (sl->done == sl->r->n_prompt)
                    sample(sl, S->lgb + (size_t)j * (size_t)S->cfg.vocab_size);
            }
        }
        /* one decode step for every sequence that has a token to feed */
        int n = 0;
        for (int i = 0; i < S->parallel; i++)
            if (S->slots[i].r && S->slots[i].decoding)
                bs[n] = &S->slots[i], ss[n] = S->slots[i].s, ids[n] = S->slots[i].next, n++;
        if (n == 0) continue;
        attn_status st = attn_llm_session_decode_batch(S->sctx, ss, ids, n, S->lgb);
        pthread_mutex_lock(&S->mu);
        S->steps++, S->batched += (unsigned long long)n, S->last_batch = n;
        pthread_mutex_unlock(&S->mu);
        char plain[256] = {0}; /* parallel <= 256 */
        int nplain = 0;
        for (int k = 0; k < n && st == ATTN_OK; k++) {
            slot *sl = bs[k];
            sl->ids[sl->nids++] = sl->next;
            sl->decoding = 0;
            plain[k] = S->ntctx > 1 && !sl->r->nbias && !sl->r->name_open && !sl->r->json;
            nplain += plain[k];
        }
        if (nplain > 1) {
            draw_job j = {S, bs, plain};
            attn__parallel_for(S->sctx, n, draw_task, &j);
        } else {
            memset(plain, 0, sizeof plain);
        }
        for (int k = 0; k < n; k++) {
            slot *sl = bs[k];
            if (st != ATTN_OK) {
                logf_(S, "attn serve: decode failed: %s", attn_ctx_errmsg(S->sctx));
                sl->nids = attn_llm_session_pos(sl->s);
                finish(sl, NULL, 1);
                continue;
            }
            const float *lg = S->lgb + (size_t)k * (size_t)S->cfg.vocab_size;
            if (!plain[k]) {
                sample(sl, lg);
            } else if (S->bst[k] != ATTN_OK) {
                logf_(S, "attn serve: sampling failed: %s", attn_ctx_errmsg(S->tctx[S->btid[k]]));
                finish(sl, NULL, 1);
            } else {
                took(sl, lg, S->bpick[k]);
            }
        }
    }
    (void)ids, (void)ss, (void)bs;
    return NULL;
}

/* ---- replies ------------------------------------------------------------------------- */
enum { REPLY_DONE, REPLY_STREAM, REPLY_DEFERRED };

struct attn_server_reply {
    attn_server_t *srv;
    int mode;         /* REPLY_* */
    int status, ready; /* ready: status, headers and body set (a deferred one when it ended) */
    const char *ctype;
    char *body;       /* owned */
    size_t body_len, read_pos;
    int64_t nh;
    const char *hn[6], *hv[6];
    int64_t tokens;
    double t0;
    char method[16], path[128];
    int client_left;
    sreq *r;          /* a generation's request (a reference) */
};

static void count_status(attn_server_reply *c, int status) {
    attn_server_t *S = c->srv;
    c->status = status;
    pthread_mutex_lock(&S->mu);
    if (status >= 0 && status < 600) S->http[status]++;
    pthread_mutex_unlock(&S->mu);
}

static void add_header(attn_server_reply *c, const char *name, const char *value) {
    if (c->nh < (int64_t)(sizeof c->hn / sizeof c->hn[0])) c->hn[c->nh] = name, c->hv[c->nh++] = value;
}

/* The reply's status, type and a copy of p[0, n) (0: out of memory; the reply is then a 500
 * without a body). */
static int send_buf(attn_server_reply *c, int status, const char *type, const char *p, size_t n,
                    const char *retry_after) {
    free(c->body);
    c->body = malloc(n ? n : 1);
    c->body_len = 0, c->nh = 0, c->ready = 1, c->mode = REPLY_DONE;
    if (!c->body) {
        c->ctype = "application/json";
        add_header(c, "Access-Control-Allow-Origin", "*");
        count_status(c, 500);
        return 0;
    }
    if (n) memcpy(c->body, p, n);
    c->body_len = n, c->ctype = type;
    add_header(c, "Access-Control-Allow-Origin", "*");
    if (retry_after) add_header(c, "Retry-After", retry_after);
    count_status(c, status);
    return 1;
}

static int send_json(attn_server_reply *c, int status, sbuf *b) {
    if (b->oom) {
        sb_free(b);
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"server_error\",\"code\":null}}";
        return send_buf(c, 500, "application/json", oom, sizeof oom - 1, NULL);
    }
    int r = send_buf(c, status, "application/json", b->p ? b->p : "{}",
                              b->p ? b->n : 2, NULL);
    sb_free(b);
    return r;
}

static int send_error(attn_server_reply *c, int status, const char *code,
                               const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int send_error(attn_server_reply *c, int status, const char *code,
                               const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *type = status == 401 ? "authentication_error"
                       : status >= 500 ? "server_error" : "invalid_request_error";
    sbuf b = {0};
    sb_puts(&b, "{\"error\":{\"message\":");
    sb_json_str(&b, msg, strlen(msg));
    sb_printf(&b, ",\"type\":\"%s\",\"code\":", type);
    if (code) sb_json_str(&b, code, strlen(code));
    else sb_puts(&b, "null");
    sb_puts(&b, "}}");
    if (b.oom) {
        sb_free(&b);
        return send_buf(c, status, "application/json", "{}", 2, NULL);
    }
    int r = send_buf(c, status, "application/json", b.p, b.n,
                              status == 503 ? "1" : NULL);
    sb_free(&b);
    return r;
}

static void put_usage(sbuf *b, int64_t prompt, int64_t completion) {
    sb_printf(b, "\"usage\":{\"prompt_tokens\":%lld,\"completion_tokens\":%lld,"
                 "\"total_tokens\":%lld}", (long long)prompt, (long long)completion,
              (long long)(prompt + completion));
}

/* A context for one request's work on its caller's thread (tokenizing, chat formatting). */
static attn_ctx *small_ctx(void) {
    attn_ctx_params cp;
    memset(&cp, 0, sizeof cp);
    cp.threads = 1;
    attn_ctx *x = NULL;
    return attn_ctx_create(&cp, &x) == ATTN_OK ? x : NULL;
}

/* The ids of text (special tokens parsed; bos first when asked and the model adds one). */
static int tokenize(attn_server_t *S, attn_ctx *x, const char *text, size_t len, int bos,
                    int32_t **ids, int64_t *n) {
    attn_llm_special sp;
    attn_llm_get_special(S->m, &sp);
    int64_t k = 0, lead = bos && sp.add_bos && sp.bos >= 0;
    *ids = NULL;
    if (attn_bpe_encode(x, S->tok, text, len, ATTN_BPE_PARSE_SPECIAL, NULL, 0, &k) != ATTN_OK)
        return 0;
    if (k > (int64_t)(SIZE_MAX / sizeof **ids) - 2) return 0;
    *ids = malloc(sizeof **ids * (size_t)(k + lead + 1));
    if (!*ids) return 0;
    if (lead) (*ids)[0] = sp.bos;
    if (attn_bpe_encode(x, S->tok, text, len, ATTN_BPE_PARSE_SPECIAL, *ids + lead, k, &k) !=
        ATTN_OK) {
        free(*ids), *ids = NULL;
        return 0;
    }
    *n = k + lead;
    return 1;
}

/* ---- streaming replies ---------------------------------------------------------------- */
ATTN_API attn_status attn_server_reply_read(attn_server_reply *c, char *buf, size_t max,
                                            size_t *n, int *done, int timeout_ms) {
    if (n) *n = 0;
    if (done) *done = 0;
    if (!c || !buf || !max || !n || !done) return ATTN_E_INVALID;
    if (c->mode != REPLY_STREAM) { /* a complete body (or a deferred one, once ready) */
        if (c->mode == REPLY_DEFERRED && !attn_server_reply_wait(c, timeout_ms)) return ATTN_OK;
        size_t k = c->body_len - c->read_pos < max ? c->body_len - c->read_pos : max;
        if (k) memcpy(buf, c->body + c->read_pos, k);
        c->read_pos += k, *n = k;
        *done = c->read_pos == c->body_len;
        return ATTN_OK;
    }
    sreq *r = c->r;
    pthread_mutex_lock(&r->mu);
    double t0 = now_s();
    while (r->sse.n == 0 && !r->done) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        if (r->sse.n == 0 && !r->done && now_s() - t0 > 1e-3 * timeout_ms) {
            /* a comment keeps the connection alive and finds a client that left */
            pthread_mutex_unlock(&r->mu);
            static const char ping[] = ": ping\n\n";
            if (max >= sizeof ping - 1) memcpy(buf, ping, sizeof ping - 1), *n = sizeof ping - 1;
            return ATTN_OK;
        }
    }
    if (r->sse.n == 0) {
        *done = r->failed ? -1 : 1;
        pthread_mutex_unlock(&r->mu);
        return ATTN_OK;
    }
    size_t k = r->sse.n < max ? r->sse.n : max;
    memcpy(buf, r->sse.p, k);
    memmove(r->sse.p, r->sse.p + k, r->sse.n - k);
    r->sse.n -= k;
    pthread_mutex_unlock(&r->mu);
    *n = k;
    return ATTN_OK;
}

/* ---- /v1/chat/completions and /v1/completions ------------------------------------------ */
static int num_field(const sj *o, const char *key, double lo, double hi, double *v,
                     char *err, size_t ecap) {
    const sj *f = sj_get(o, key);
    if (!f || f->kind == SJ_NULL) return 1;
    if (f->kind != SJ_NUM || f->num < lo || f->num > hi) {
        snprintf(err, ecap, "'%s' must be a number in [%g, %g]", key, lo, hi);
        return 0;
    }
    *v = f->num;
    return 1;
}

static int int_field(const sj *o, const char *key, long long lo, long long hi, long long *v,
                     char *err, size_t ecap) {
    const sj *f = sj_get(o, key);
    if (!f || f->kind == SJ_NULL) return 1;
    if (!sj_int(f, lo, hi, v)) {
        snprintf(err, ecap, "'%s' must be an integer in [%lld, %lld]", key, lo, hi);
        return 0;
    }
    return 1;
}

static int bool_field(const sj *o, const char *key, int *v, char *err, size_t ecap) {
    const sj *f = sj_get(o, key);
    if (!f || f->kind == SJ_NULL) return 1;
    if (f->kind != SJ_BOOL) {
        snprintf(err, ecap, "'%s' must be true or false", key);
        return 0;
    }
    *v = f->b;
    return 1;
}

/* A message's content: a string, or an array of {"type": "text", "text": ...} parts (joined).
 * *own is set when the text was made here (free it). */
static int content_of(const sj *c, const char **out, char **own, char *err, size_t ecap) {
    *own = NULL;
    if (c && c->kind == SJ_NULL) {
        *out = "";
        return 1;
    }
    if (c && c->kind == SJ_STR) {
        if (strlen(c->s) != c->len) {
            snprintf(err, ecap, "a message's content holds a NUL character");
            return 0;
        }
        *out = c->s;
        return 1;
    }
    if (!c || c->kind != SJ_ARR) {
        snprintf(err, ecap, "a message's 'content' must be a string or an array of text parts");
        return 0;
    }
    sbuf b = {0};
    for (const sj *p = c->first; p; p = p->next) {
        const sj *t = sj_get(p, "type"), *x = sj_get(p, "text");
        if (!t || t->kind != SJ_STR || strcmp(t->s, "text") || !x || x->kind != SJ_STR ||
            strlen(x->s) != x->len) {
            sb_free(&b);
            snprintf(err, ecap, "only content parts of type 'text' (a string without NUL) are "
                                "supported");
            return 0;
        }
        sb_put(&b, x->s, x->len);
    }
    if (b.oom) {
        sb_free(&b);
        snprintf(err, ecap, "out of memory");
        return 0;
    }
    *own = b.p ? b.p : calloc(1, 1);
    *out = *own ? *own : "";
    return 1;
}

/* An OpenAI tool_calls array as the JSON the chat templates read (transformers' form): each
 * function's "arguments" string (the JSON text OpenAI sends) written as the value it holds, as
 * vLLM and llama-server do; everything else as it came.  0 with a message in err. */
static int tool_calls_json(const sj *tc, size_t mi, sbuf *b, char *err, size_t ecap) {
    if (tc->kind != SJ_ARR) {
        snprintf(err, ecap, "messages[%zu].tool_calls must be an array", mi);
        return 0;
    }
    sb_puts(b, "[");
    size_t j = 0;
    for (const sj *c = tc->first; c; c = c->next, j++) {
        if (c->kind != SJ_OBJ) {
            snprintf(err, ecap, "messages[%zu].tool_calls[%zu] must be an object", mi, j);
            return 0;
        }
        sb_puts(b, j ? ", {" : "{");
        for (const sj *k = c->first; k; k = k->next) {
            if (k != c->first) sb_puts(b, ", ");
            sb_json_str(b, k->key, k->klen);
            sb_puts(b, ": ");
            if (strcmp(k->key, "function") || k->kind != SJ_OBJ) {
                sb_put(b, k->raw, k->rawlen);
                continue;
            }
            sb_puts(b, "{");
            for (const sj *f = k->first; f; f = f->next) {
                if (f != k->first) sb_puts(b, ", ");
                sb_json_str(b, f->key, f->klen);
                sb_puts(b, ": ");
                if (strcmp(f->key, "arguments") || f->kind != SJ_STR) {
                    sb_put(b, f->raw, f->rawlen);
                    continue;
                }
                sj_doc a;
                char why[200];
                int ok = sj_parse(&a, f->s, f->len, why, sizeof why);
                sj_free(&a);
                if (!ok) {
                    snprintf(err, ecap, "messages[%zu].tool_calls[%zu].function.arguments is not "
                                        "JSON: %s", mi, j, why);
                    return 0;
                }
                sb_put(b, f->s, f->len);
            }
            sb_puts(b, "}");
        }
        sb_puts(b, "}");
    }
    sb_puts(b, "]");
    if (b->oom) snprintf(err, ecap, "out of memory");
    return !b->oom;
}

/* A message's optional string field (NULL when absent or null); 0 with a message in err. */
static int opt_str(const sj *m, const char *key, size_t mi, const char **out, char *err,
                   size_t ecap) {
    const sj *f = sj_get(m, key);
    *out = NULL;
    if (!f || f->kind == SJ_NULL) return 1;
    if (f->kind != SJ_STR || strlen(f->s) != f->len) {
        snprintf(err, ecap, "messages[%zu].%s must be a string (without NUL)", mi, key);
        return 0;
    }
    *out = f->s;
    return 1;
}

/* The chat fields beside the messages: tools (their JSON text, as sent; not written into the
 * prompt with tool_choice "none"), tool_choice (*choice, *fname: st_tool_choice) and
 * chat_template_kwargs (only enable_thinking: attn runs no template, it writes the formats it
 * knows).  0 with a message in err. */
static int chat_opts(const sj *o, attn_chat_options *opt, sbuf *tools, int *choice,
                     const char **fname, char *err, size_t ecap) {
    const sj *t = sj_get(o, "tools"), *tc = sj_get(o, "tool_choice");
    if (t && t->kind != SJ_NULL && t->kind != SJ_ARR) {
        snprintf(err, ecap, "'tools' must be an array of tool definitions");
        return 0;
    }
    if (!st_tool_choice(tc, t && t->kind == SJ_ARR ? t : NULL, choice, fname, err, ecap))
        return 0;
    if (t && t->kind == SJ_ARR && *choice != ST_CHOICE_NONE) {
        sb_put(tools, t->raw, t->rawlen);
        sb_put(tools, "", 1);
        if (tools->oom) {
            snprintf(err, ecap, "out of memory");
            return 0;
        }
        opt->tools = tools->p;
    }
    const sj *kw = sj_get(o, "chat_template_kwargs");
    if (kw && kw->kind != SJ_NULL) {
        if (kw->kind != SJ_OBJ) {
            snprintf(err, ecap, "'chat_template_kwargs' must be an object");
            return 0;
        }
        for (const sj *k = kw->first; k; k = k->next) {
            if (strcmp(k->key, "enable_thinking") || strlen(k->key) != k->klen) {
                snprintf(err, ecap, "chat_template_kwargs: attn takes only enable_thinking (it "
                                    "writes the chat formats itself; no template runs)");
                return 0;
            }
            if (k->kind == SJ_NULL) continue;
            if (k->kind != SJ_BOOL) {
                snprintf(err, ecap, "chat_template_kwargs.enable_thinking must be true or false");
                return 0;
            }
            opt->thinking = k->b ? ATTN_CHAT_THINKING_ON : ATTN_CHAT_THINKING_OFF;
        }
    }
    return 1;
}

/* Fills r from the request body's fields; 0 with a message in err (status 400). */
static int parse_gen(const sj *o, int kind, attn_ctx *x, sreq *r, char *err, size_t ecap) {
    attn_server_t *S = r->srv;
    double temperature = 1, top_p = 1, min_p = 0, pres = 0, freq = 0, rep = 1;
    long long top_k = 0, n = 1, seed = -1, max_tokens = -1;
    int ignore_eos = 0, stream = 0, cache_prompt = 1;
    if (!num_field(o, "temperature", 0, 100, &temperature, err, ecap) ||
        !num_field(o, "top_p", 1e-9, 1, &top_p, err, ecap) ||
        !num_field(o, "min_p", 0, 1, &min_p, err, ecap) ||
        !num_field(o, "presence_penalty", -2, 2, &pres, err, ecap) ||
        !num_field(o, "frequency_penalty", -2, 2, &freq, err, ecap) ||
        !num_field(o, "repetition_penalty", 1e-3, 100, &rep, err, ecap) ||
        !int_field(o, "top_k", 0, 1 << 30, &top_k, err, ecap) ||
        !int_field(o, "n", 1, 128, &n, err, ecap) ||
        !int_field(o, "seed", -(1LL << 53), 1LL << 53, &seed, err, ecap) ||
        !int_field(o, "max_tokens", 0, 1LL << 30, &max_tokens, err, ecap) ||
        !int_field(o, "max_completion_tokens", 0, 1LL << 30, &max_tokens, err, ecap) ||
        !bool_field(o, "ignore_eos", &ignore_eos, err, ecap) ||
        !bool_field(o, "cache_prompt", &cache_prompt, err, ecap) ||
        !bool_field(o, "stream", &stream, err, ecap))
        return 0;
    if (n != 1) {
        snprintf(err, ecap, "'n' must be 1: one choice per request");
        return 0;
    }
    const sj *rf = sj_get(o, "response_format");
    if (rf && rf->kind != SJ_NULL) {
        const sj *ty = rf->kind == SJ_OBJ ? sj_get(rf, "type") : NULL;
        if (!ty || ty->kind != SJ_STR) {
            snprintf(err, ecap, "'response_format' must be an object with a string 'type'");
            return 0;
        }
        if (!strcmp(ty->s, "json_schema")) { /* {"json_schema": {"name", "schema", ...}} */
            const sj *js = sj_get(rf, "json_schema");
            const sj *sc = js && js->kind == SJ_OBJ ? sj_get(js, "schema") : NULL;
            if (!sc) {
                snprintf(err, ecap, "response_format json_schema needs 'json_schema': {'name': "
                                    "..., 'schema': {...}}");
                return 0;
            }
            const sj *strict = sj_get(js, "strict");
            if (!attn__jss_compile(sc, strict && strict->kind == SJ_BOOL && strict->b, &r->schema,
                                   err, ecap))
                return 0;
        } else if (strcmp(ty->s, "json_object") != 0 && strcmp(ty->s, "text") != 0) {
            snprintf(err, ecap, "response_format type '%.64s' is not one of 'text', "
                                "'json_object', 'json_schema'", ty->s);
            return 0;
        }
        r->json = strcmp(ty->s, "text") != 0;
        attn__jsa_init(&r->js, r->schema);
    }
    const sj *so = sj_get(o, "stream_options");
    if (so && so->kind != SJ_NULL && so->kind != SJ_OBJ) {
        snprintf(err, ecap, "'stream_options' must be an object");
        return 0;
    }
    r->include_usage = 1;
    r->kind = kind, r->stream = stream, r->ignore_eos = ignore_eos;
    r->cache_prompt = cache_prompt;
    r->sp = attn_llm_sampler_defaults();
    r->sp.temperature = (float)temperature, r->sp.top_p = (float)top_p;
    r->sp.min_p = (float)min_p, r->sp.top_k = top_k, r->sp.repetition_penalty = (float)rep;
    r->sp.presence_penalty = (float)pres, r->sp.frequency_penalty = (float)freq;
    r->sp.seed = seed >= 0 ? (uint64_t)seed
                           : (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)(uintptr_t)r;
    /* logprobs: chat's true/false with top_logprobs 0..20; the completions' an integer 0..20
     * (the top count; OpenAI's legacy field) */
    const sj *lpf = sj_get(o, "logprobs");
    long long top = 0;
    if (kind == KIND_CHAT) {
        if (!bool_field(o, "logprobs", &r->logprobs, err, ecap) ||
            !int_field(o, "top_logprobs", 0, MAX_TOP_LOGPROBS, &top, err, ecap))
            return 0;
        const sj *tf = sj_get(o, "top_logprobs");
        if (tf && tf->kind != SJ_NULL && !r->logprobs) {
            snprintf(err, ecap, "'top_logprobs' needs 'logprobs': true");
            return 0;
        }
    } else if (lpf && lpf->kind != SJ_NULL) {
        if (!int_field(o, "logprobs", 0, MAX_TOP_LOGPROBS, &top, err, ecap)) return 0;
        r->logprobs = 1;
    }
    r->top_lp = (int)top;
    int echo = 0;
    if (kind == KIND_COMPLETION && !bool_field(o, "echo", &echo, err, ecap)) return 0;
    if (echo && stream) {
        snprintf(err, ecap, "'echo' is not streamed: ask without 'stream'");
        return 0;
    }
    r->echo_len = echo; /* 1: asked (the text is kept when the prompt is read) */
    if (echo && r->logprobs) r->cache_prompt = 0; /* every prompt row's logits are needed */
    /* logit_bias: {"token id": bias in [-100, 100]}; -100 bans the token (OpenAI's meaning) */
    const sj *lb = sj_get(o, "logit_bias");
    if (lb && lb->kind != SJ_NULL) {
        if (lb->kind != SJ_OBJ || lb->n > MAX_LOGIT_BIAS) {
            snprintf(err, ecap, "'logit_bias' must be an object of at most %d token ids",
                     MAX_LOGIT_BIAS);
            return 0;
        }
        r->bias_id = malloc(sizeof *r->bias_id * (size_t)(lb->n ? lb->n : 1));
        r->bias = malloc(sizeof *r->bias * (size_t)(lb->n ? lb->n : 1));
        if (!r->bias_id || !r->bias) {
            snprintf(err, ecap, "out of memory");
            return 0;
        }
        for (const sj *e = lb->first; e; e = e->next) {
            long long id = -1;
            size_t d = 0;
            while (d < e->klen && d < 12 && e->key[d] >= '0' && e->key[d] <= '9')
                id = (id < 0 ? 0 : id * 10) + (e->key[d++] - '0');
            if (d == 0 || d != e->klen || id >= S->cfg.vocab_size) {
                snprintf(err, ecap, "'logit_bias' keys must be token ids in [0, %lld)",
                         (long long)S->cfg.vocab_size);
                return 0;
            }
            if (e->kind != SJ_NUM || !(e->num >= -100 && e->num <= 100)) {
                snprintf(err, ecap, "'logit_bias' values must be numbers in [-100, 100]");
                return 0;
            }
            r->bias_id[r->nbias] = (int32_t)id;
            r->bias[r->nbias++] = e->num <= -100 ? -INFINITY : (float)e->num;
        }
        if (r->nbias >= S->cfg.vocab_size) { /* a small vocabulary: is every token banned? */
            unsigned char *ban = calloc((size_t)S->cfg.vocab_size, 1);
            long long left = S->cfg.vocab_size;
            for (int i = 0; ban && i < r->nbias; i++) {
                const int32_t t = r->bias_id[i];
                if (r->bias[i] == -INFINITY) left -= !ban[t], ban[t] = 1;
                else left += ban[t], ban[t] = 0;
            }
            free(ban);
            if (left == 0) {
                snprintf(err, ecap, "'logit_bias' bans every token");
                return 0;
            }
        }
    }
    /* stop: a string or an array of strings */
    const sj *st = sj_get(o, "stop");
    if (st && st->kind != SJ_NULL) {
        const sj *one = st->kind == SJ_STR ? st : NULL;
        if (st->kind != SJ_STR && st->kind != SJ_ARR) {
            snprintf(err, ecap, "'stop' must be a string or an array of strings");
            return 0;
        }
        for (const sj *s = one ? one : st->first; s; s = one ? NULL : s->next) {
            if (s->kind != SJ_STR || s->len == 0 || s->len > MAX_STOP_BYTES) {
                snprintf(err, ecap, "each stop must be a non-empty string of at most %d bytes",
                         MAX_STOP_BYTES);
                return 0;
            }
            if (r->nstop == MAX_STOPS) {
                snprintf(err, ecap, "at most %d stop strings", MAX_STOPS);
                return 0;
            }
            if (!(r->stop[r->nstop] = malloc(s->len + 1))) {
                snprintf(err, ecap, "out of memory");
                return 0;
            }
            memcpy(r->stop[r->nstop], s->s, s->len + 1);
            r->stop_len[r->nstop++] = s->len;
        }
    }
    /* the prompt */
    char *text = NULL;
    size_t tl = 0;
    int bos = 0;
    if (kind == KIND_CHAT) {
        if (!S->chat_ok) {
            snprintf(err, ecap, "this model has no usable chat template (%s): use "
                                "/v1/completions", S->chat_why);
            return 0;
        }
        const sj *ms = sj_get(o, "messages");
        if (!ms || ms->kind != SJ_ARR || ms->n == 0) {
            snprintf(err, ecap, "'messages' must be a non-empty array");
            return 0;
        }
        if (ms->n > MAX_MESSAGES) {
            snprintf(err, ecap, "at most %d messages", MAX_MESSAGES);
            return 0;
        }
        attn_chat_message *cm = calloc(ms->n, sizeof *cm);
        char **own = calloc(ms->n, sizeof *own);
        sbuf *calls = calloc(ms->n, sizeof *calls), tools = {0};
        attn_chat_options opt;
        memset(&opt, 0, sizeof opt);
        opt.add_generation_prompt = 1;
        int ok = cm && own && calls, choice = ST_CHOICE_AUTO;
        const char *fname = NULL;
        size_t pl = 0;
        if (!ok) snprintf(err, ecap, "out of memory");
        else ok = chat_opts(o, &opt, &tools, &choice, &fname, err, ecap);
        r->choice = choice;
        r->head_done = -1;
        if (ok && choice == ST_CHOICE_NAMED && fname && !(r->forced = strdup(fname)))
            snprintf(err, ecap, "out of memory"), ok = 0;
        /* a forced call: the answer begins with the call's head (attn_chat_tool_call_prefix) */
        if (ok && choice >= ST_CHOICE_REQUIRED &&
            attn_chat_tool_call_prefix(x, S->chat_format, fname, NULL, 0, &pl) != ATTN_OK) {
            snprintf(err, ecap, "tool_choice %s cannot be met: %s",
                     choice == ST_CHOICE_NAMED ? "naming a function" : "\"required\"",
                     attn_ctx_errmsg(x));
            ok = 0;
        }
        if (ok && choice == ST_CHOICE_REQUIRED) { /* the names a call may have */
            sbuf nb = {0};
            for (const sj *t = sj_get(o, "tools")->first; t; t = t->next) {
                const sj *f = sj_get(t, "function"), *nm = f ? sj_get(f, "name") : NULL;
                if (nm && nm->kind == SJ_STR && strlen(nm->s) == nm->len)
                    sb_put(&nb, nm->s, nm->len + 1);
            }
            if (nb.oom) snprintf(err, ecap, "out of memory"), ok = 0, sb_free(&nb);
            r->tool_names = nb.p, r->tool_names_n = nb.n;
            /* the heads the name is sampled from: each name's call head after the opener */
            sbuf hb = {0}, hn = {0};
            for (size_t k = 0; ok && k < r->tool_names_n; k += strlen(r->tool_names + k) + 1) {
                size_t hl = 0;
                if (attn_chat_tool_call_prefix(x, S->chat_format, r->tool_names + k, NULL, 0,
                                               &hl) != ATTN_OK || hl <= pl)
                    continue; /* a name the form cannot hold: never written */
                char *h = malloc(hl + 1);
                if (h && attn_chat_tool_call_prefix(x, S->chat_format, r->tool_names + k, h,
                                                    hl + 1, &hl) == ATTN_OK) {
                    sb_put(&hb, h + pl, hl - pl + 1);
                    sb_put(&hn, r->tool_names + k, strlen(r->tool_names + k) + 1);
                } else if (!h) {
                    hb.oom = 1;
                }
                free(h);
            }
            if (hb.oom || hn.oom)
                snprintf(err, ecap, "out of memory"), ok = 0, sb_free(&hb), sb_free(&hn);
            r->name_heads = hb.p, r->name_heads_n = hb.n, r->name_open = hb.n > 0;
            r->head_names = hn.p;
        }
        size_t i = 0;
        for (const sj *m = ms->first; ok && m; m = m->next, i++) {
            const sj *role = sj_get(m, "role");
            if (m->kind != SJ_OBJ || !role || role->kind != SJ_STR ||
                strlen(role->s) != role->len || role->len == 0) {
                snprintf(err, ecap, "messages[%zu] needs a 'role' string", i);
                ok = 0;
                break;
            }
            cm[i].role = role->s;
            const sj *tc = sj_get(m, "tool_calls"), *content = sj_get(m, "content");
            if (tc && tc->kind != SJ_NULL) {
                ok = tool_calls_json(tc, i, &calls[i], err, ecap);
                sb_put(&calls[i], "", 1);
                cm[i].tool_calls = calls[i].p;
                if (ok && calls[i].oom) snprintf(err, ecap, "out of memory"), ok = 0;
            }
            /* content: null or absent where the assistant only calls tools */
            if (ok && tc && tc->kind != SJ_NULL && !content) cm[i].content = "";
            else if (ok) ok = content_of(content, &cm[i].content, &own[i], err, ecap);
            if (ok) ok = opt_str(m, "reasoning_content", i, &cm[i].reasoning_content, err, ecap) &&
                         opt_str(m, "tool_call_id", i, &cm[i].tool_call_id, err, ecap);
        }
        if (ok && opt.tools) { /* the tools kept: the calls' arguments are checked */
            r->tool_fmt = S->chat_format;
            r->tools_json = tools.p;
            tools = (sbuf){0};
        }
        if (ok) {
            attn_status s = attn_llm_chat_apply(x, S->m, cm, (int64_t)ms->n, &opt, NULL, 0, &tl);
            if (s == ATTN_OK && tl < SIZE_MAX - pl - 1 && (text = malloc(tl + pl + 1)))
                s = attn_llm_chat_apply(x, S->m, cm, (int64_t)ms->n, &opt, text, tl + 1, &tl);
            else if (s == ATTN_OK)
                s = ATTN_E_NOMEM;
            if (s != ATTN_OK) {
                snprintf(err, ecap, "the messages cannot be formatted: %s", attn_ctx_errmsg(x));
                ok = 0;
            }
            if (ok && pl) { /* the forced call's head: prompt and answer alike */
                size_t k = 0;
                attn_chat_tool_call_prefix(x, S->chat_format, fname, text + tl, pl + 1, &k);
                sb_put(&r->text, text + tl, pl);
                r->name_from = r->text.n;
                tl += pl;
                if (r->text.oom) snprintf(err, ecap, "out of memory"), ok = 0;
            }
        }
        for (size_t k = 0; own && k < ms->n; k++) free(own[k]);
        for (size_t k = 0; calls && k < ms->n; k++) sb_free(&calls[k]);
        sb_free(&tools);
        free(own), free(cm), free(calls);
        if (!ok) {
            free(text);
            return 0;
        }
    } else {
        const sj *p = sj_get(o, "prompt");
        if (p && p->kind == SJ_ARR && p->n == 1 && p->first->kind == SJ_STR) p = p->first;
        if (!p || p->kind != SJ_STR) {
            snprintf(err, ecap, "'prompt' must be a string");
            return 0;
        }
        if (!(text = malloc(p->len + 1))) {
            snprintf(err, ecap, "out of memory");
            return 0;
        }
        memcpy(text, p->s, p->len + 1);
        tl = p->len;
        bos = 1;
        if (r->echo_len) { /* echo: the prompt's text comes back before the answer */
            if (!(r->echo = malloc(p->len + 1))) {
                free(text);
                snprintf(err, ecap, "out of memory");
                return 0;
            }
            memcpy(r->echo, p->s, p->len + 1);
            r->echo_len = p->len;
        }
    }
    /* a template writes its own bos; a plain prompt gets one where the model adds it */
    int ok = tokenize(S, x, text, tl, bos, &r->prompt, &r->n_prompt);
    free(text);
    if (!ok) {
        snprintf(err, ecap, "the prompt cannot be tokenized: %s", attn_ctx_errmsg(x));
        return 0;
    }
    if (r->n_prompt == 0) {
        snprintf(err, ecap, "the prompt is empty: nothing to continue");
        return 0;
    }
    if (r->n_prompt > S->cap) {
        snprintf(err, ecap, "the prompt has %lld tokens, more than the context of %lld tokens",
                 (long long)r->n_prompt, (long long)S->cap);
        return 0;
    }
    const int64_t room = S->cap - r->n_prompt + 1;
    r->max_tokens = max_tokens < 0 || max_tokens > room ? room : max_tokens;
    return 1;
}

static int answer_gen(attn_server_reply *c, const sj *o, int kind) {
    attn_server_t *S = c->srv;
    char err[1024] = "";
    attn_ctx *x = small_ctx();
    sreq *r = calloc(1, sizeof *r);
    if (!x || !r) {
        attn_ctx_free(x), free(r);
        return send_error(c, 500, NULL, "out of memory");
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->refs = 1;
    r->srv = S;
    r->t_queued = now_s();
    int ok = parse_gen(o, kind, x, r, err, sizeof err);
    attn_ctx_free(x);
    if (!ok) {
        req_unref(r);
        return send_error(c, 400, NULL, "%s", err);
    }
    /* nothing to generate: answered here (but echo with logprobs scores the prompt) */
    const int local = r->max_tokens == 0 && !(r->echo && r->logprobs);
    if (local) {
        r->done = 1, r->finish = "length";
        r->tool_failed = r->choice >= ST_CHOICE_REQUIRED;
    } else {
        pthread_mutex_lock(&S->mu);
        int refused = S->stopping ? 1 : S->qn >= S->queue ? 2 : 0;
        if (!refused) {
            unsigned long long seq = ++S->seq;
            r->seq = seq;
            snprintf(r->id, sizeof r->id, "%s-%llu", kind == KIND_CHAT ? "chatcmpl" : "cmpl",
                     seq);
            r->created = (long long)time(NULL);
            /* the role chunk first, before the scheduler can add any */
            if (r->stream && kind == KIND_CHAT) stream_chunk(r, NULL, 0, NULL, 1);
            r->refs++; /* the scheduler's */
            S->q[(S->qhead + S->qn) % S->queue] = r;
            S->qn++;
            S->prompt_tokens += (unsigned long long)r->n_prompt;
            pthread_cond_broadcast(&S->cv);
        }
        pthread_mutex_unlock(&S->mu);
        if (refused) {
            req_unref(r);
            return send_error(c, 503, refused == 1 ? "shutting_down" : "queue_full",
                              refused == 1 ? "the server is shutting down"
                                           : "the queue is full (--queue %lld): try again",
                              S->queue);
        }
    }
    if (local) {
        snprintf(r->id, sizeof r->id, "%s-0", kind == KIND_CHAT ? "chatcmpl" : "cmpl");
        r->created = (long long)time(NULL);
        if (r->stream && kind == KIND_CHAT) stream_chunk(r, NULL, 0, NULL, 1);
    }
    c->r = r; /* the reply's reference, released when it is freed */
    if (r->stream) {
        pthread_mutex_lock(&r->mu);
        if (local && r->tool_failed) stream_error(r, tool_failure(r));
        else if (local) stream_chunk(r, NULL, 0, r->finish, 0);
        pthread_mutex_unlock(&r->mu);
        c->mode = REPLY_STREAM, c->ready = 1, c->ctype = "text/event-stream";
        add_header(c, "Cache-Control", "no-cache");
        add_header(c, "Access-Control-Allow-Origin", "*");
        count_status(c, 200);
        return 1;
    }
    c->mode = REPLY_DEFERRED; /* attn_server_reply_wait makes the answer when it ends */
    return 1;
}

/* The answer of a non-streamed generation that ended (not cancelled). */
static int gen_answer(attn_server_reply *c) {
    attn_server_t *S = c->srv;
    sreq *r = c->r;
    const int kind = r->kind;
    if (r->failed) return send_error(c, 500, NULL, "generation failed (see the server's log)");
    if (r->tool_failed) return send_error(c, 500, "tool_call_failed", "%s", tool_failure(r));
    sbuf b = {0};
    sb_printf(&b, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":", r->id,
              kind == KIND_CHAT ? "chat.completion" : "text_completion", r->created);
    sb_json_str(&b, S->model_name, strlen(S->model_name));
    sb_puts(&b, ",\"choices\":[{\"index\":0,");
    if (kind == KIND_CHAT) {
        st_message_json(&b, r->text.p, r->text.n, r->calls, r->seq, S->id_salt);
        sb_puts(&b, ",");
    } else {
        sbuf t = {0}; /* echo: the prompt's text first */
        if (r->echo) sb_put(&t, r->echo, r->echo_len);
        sb_put(&t, r->text.p ? r->text.p : "", r->text.n);
        sb_puts(&b, "\"text\":");
        sb_json_str(&b, t.p ? t.p : "", t.n);
        sb_puts(&b, ",");
        sb_free(&t);
    }
    if (kind != KIND_CHAT || r->logprobs) {
        sb_puts(&b, "\"logprobs\":");
        if (r->echo && r->logprobs) { /* the prompt's tokens, then the answer's (offsets after
                                        * the prompt's text) */
            sreq v = *r;
            v.lp = malloc(sizeof *v.lp * (r->nplp + r->nlp + 1));
            v.nlp = v.lp ? r->nplp + r->nlp : 0;
            for (size_t i = 0; v.lp && i < v.nlp; i++) {
                v.lp[i] = i < r->nplp ? r->plp[i] : r->lp[i - r->nplp];
                if (i >= r->nplp) v.lp[i].off += r->echo_len;
            }
            if (!v.lp) b.oom = 1;
            lp_json(&b, S, &v, 0, v.nlp);
            free(v.lp);
        } else {
            lp_json(&b, S, r, 0, r->nlp);
        }
        sb_puts(&b, ",");
    }
    sb_printf(&b, "\"finish_reason\":\"%s\"}],", r->finish);
    put_usage(&b, r->n_prompt, r->completion_tokens);
    sb_puts(&b, "}");
    return send_json(c, 200, &b);
}

/* ---- the other endpoints -------------------------------------------------------------- */
static int answer_models(attn_server_reply *c) {
    attn_server_t *S = c->srv;
    sbuf b = {0};
    sb_puts(&b, "{\"object\":\"list\",\"data\":[{\"id\":");
    sb_json_str(&b, S->model_name, strlen(S->model_name));
    sb_printf(&b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"attn\","
                  "\"meta\":{\"n_ctx\":%lld,\"n_vocab\":%lld,\"parallel\":%lld}}",
              S->created, (long long)S->cap, (long long)S->cfg.vocab_size, S->parallel);
    if (S->bert) {
        sb_puts(&b, ",{\"id\":");
        sb_json_str(&b, S->embed_name, strlen(S->embed_name));
        sb_printf(&b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"attn\","
                      "\"meta\":{\"embedding_dim\":%lld}}", S->created, (long long)S->edim);
    }
    sb_puts(&b, "]}");
    return send_json(c, 200, &b);
}

static int answer_tokenize(attn_server_reply *c, const sj *o) {
    attn_server_t *S = c->srv;
    const sj *t = sj_get(o, "content");
    if (!t) t = sj_get(o, "prompt");
    if (!t || t->kind != SJ_STR)
        return send_error(c, 400, NULL, "'content' must be a string");
    int add = 1;
    char err[256];
    if (!bool_field(o, "add_special", &add, err, sizeof err))
        return send_error(c, 400, NULL, "%s", err);
    attn_ctx *x = small_ctx();
    int32_t *ids = NULL;
    int64_t n = 0;
    if (!x || !tokenize(S, x, t->s, t->len, add, &ids, &n)) {
        int ret = send_error(c, 400, NULL, "cannot tokenize: %s",
                                      x ? attn_ctx_errmsg(x) : "out of memory");
        attn_ctx_free(x);
        return ret;
    }
    attn_ctx_free(x);
    sbuf b = {0};
    sb_puts(&b, "{\"tokens\":[");
    for (int64_t i = 0; i < n; i++) sb_printf(&b, i ? ",%d" : "%d", (int)ids[i]);
    sb_puts(&b, "],");
    put_usage(&b, n, 0);
    sb_puts(&b, "}");
    free(ids);
    c->tokens = n;
    return send_json(c, 200, &b);
}

static int answer_detokenize(attn_server_reply *c, const sj *o) {
    attn_server_t *S = c->srv;
    const sj *t = sj_get(o, "tokens");
    if (!t || t->kind != SJ_ARR)
        return send_error(c, 400, NULL, "'tokens' must be an array of token ids");
    int32_t *ids = malloc(sizeof *ids * (t->n ? t->n : 1));
    if (!ids) return send_error(c, 500, NULL, "out of memory");
    size_t i = 0;
    const long long V = (long long)attn_bpe_vocab_size(S->tok);
    for (const sj *e = t->first; e; e = e->next, i++) {
        long long v;
        if (!sj_int(e, 0, V - 1, &v)) {
            free(ids);
            return send_error(c, 400, NULL, "tokens[%zu] is not a token id in [0, %lld)", i,
                              V);
        }
        ids[i] = (int32_t)v;
    }
    attn_ctx *x = small_ctx();
    size_t len = 0;
    char *text = NULL;
    attn_status st = x ? attn_bpe_decode(x, S->tok, ids, (int64_t)t->n, 0, NULL, 0, &len)
                       : ATTN_E_NOMEM;
    if (st == ATTN_OK && !(text = malloc(len + 1))) st = ATTN_E_NOMEM;
    if (st == ATTN_OK) st = attn_bpe_decode(x, S->tok, ids, (int64_t)t->n, 0, text, len + 1, &len);
    free(ids);
    if (st != ATTN_OK) {
        int ret = send_error(c, 400, NULL, "cannot decode: %s",
                                      x ? attn_ctx_errmsg(x) : "out of memory");
        attn_ctx_free(x), free(text);
        return ret;
    }
    attn_ctx_free(x);
    sbuf b = {0};
    sb_puts(&b, "{\"content\":");
    sb_json_str(&b, text, len);
    sb_puts(&b, "}");
    free(text);
    return send_json(c, 200, &b);
}

static void base64(sbuf *b, const unsigned char *p, size_t n) {
    static const char tb[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char q[4];
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        q[0] = tb[v >> 18], q[1] = tb[v >> 12 & 63];
        q[2] = i + 1 < n ? tb[v >> 6 & 63] : '=', q[3] = i + 2 < n ? tb[v & 63] : '=';
        sb_put(b, q, 4);
    }
}

static int answer_embeddings(attn_server_reply *c, const sj *o) {
    attn_server_t *S = c->srv;
    if (!S->bert)
        return send_error(c, 404, "model_not_found",
                          "no embedding model: start the server with --embed FOLDER");
    const sj *in = sj_get(o, "input"), *fmt = sj_get(o, "encoding_format");
    int b64 = 0;
    if (fmt && fmt->kind != SJ_NULL) {
        if (fmt->kind != SJ_STR || (strcmp(fmt->s, "float") && strcmp(fmt->s, "base64")))
            return send_error(c, 400, NULL, "'encoding_format' must be float or base64");
        b64 = !strcmp(fmt->s, "base64");
    }
    if (!in || (in->kind != SJ_STR && in->kind != SJ_ARR) || (in->kind == SJ_ARR && !in->n))
        return send_error(c, 400, NULL,
                          "'input' must be a string or a non-empty array of strings");
    size_t n = in->kind == SJ_STR ? 1 : in->n;
    if (n > MAX_EMBED_INPUTS)
        return send_error(c, 400, NULL, "at most %d inputs", MAX_EMBED_INPUTS);
    const char **texts = malloc(sizeof *texts * n);
    float *out = malloc(sizeof *out * n * (size_t)S->edim);
    int32_t *ids = malloc(sizeof *ids * (size_t)S->emax);
    if (!texts || !out || !ids) {
        free(texts), free(out), free(ids);
        return send_error(c, 500, NULL, "out of memory");
    }
    size_t i = 0;
    for (const sj *e = in->kind == SJ_STR ? in : in->first; e;
         e = in->kind == SJ_STR ? NULL : e->next, i++) {
        if (e->kind != SJ_STR || strlen(e->s) != e->len) {
            free(texts), free(out), free(ids);
            return send_error(c, 400, NULL, "input[%zu] must be a string without NUL (token "
                                                "arrays are not supported)", i);
        }
        texts[i] = e->s;
    }
    int64_t ntok = 0;
    pthread_mutex_lock(&S->emu);
    attn_status st = ATTN_OK;
    for (i = 0; i < n && st == ATTN_OK; i++) {
        int64_t k = 0;
        st = attn_bert_tokenize(S->ectx, S->bert, texts[i], ids, S->emax, &k);
        ntok += k;
    }
    if (st == ATTN_OK) st = attn_bert_embed(S->ectx, S->bert, texts, (int64_t)n, out);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", st ? attn_ctx_errmsg(S->ectx) : "");
    pthread_mutex_unlock(&S->emu);
    free(ids);
    if (st != ATTN_OK) {
        free(texts), free(out);
        return send_error(c, 400, NULL, "cannot embed: %s", msg);
    }
    sbuf b = {0};
    sb_puts(&b, "{\"object\":\"list\",\"data\":[");
    for (i = 0; i < n; i++) {
        sb_printf(&b, "%s{\"object\":\"embedding\",\"index\":%zu,\"embedding\":", i ? "," : "", i);
        const float *row = out + i * (size_t)S->edim;
        if (b64) {
            /* little-endian float32 bytes, as OpenAI's */
            unsigned char *raw = malloc((size_t)S->edim * 4);
            if (!raw) {
                b.oom = 1;
                break;
            }
            for (int64_t e = 0; e < S->edim; e++) {
                uint32_t u;
                memcpy(&u, &row[e], 4);
                for (int k = 0; k < 4; k++) raw[e * 4 + k] = (unsigned char)(u >> (8 * k));
            }
            sb_put(&b, "\"", 1);
            base64(&b, raw, (size_t)S->edim * 4);
            sb_put(&b, "\"", 1);
            free(raw);
        } else {
            sb_put(&b, "[", 1);
            for (int64_t e = 0; e < S->edim; e++) {
                if (e) sb_put(&b, ",", 1);
                sb_json_float(&b, row[e]);
            }
            sb_put(&b, "]", 1);
        }
        sb_puts(&b, "}");
    }
    sb_puts(&b, "],\"model\":");
    sb_json_str(&b, S->embed_name, strlen(S->embed_name));
    sb_puts(&b, ",");
    put_usage(&b, ntok, 0);
    sb_puts(&b, "}");
    free(texts), free(out);
    c->tokens = ntok;
    return send_json(c, 200, &b);
}

static int answer_metrics(attn_server_reply *c) {
    attn_server_t *S = c->srv;
    sbuf b = {0};
    pthread_mutex_lock(&S->mu);
    sb_puts(&b, "# HELP attn_http_requests_total HTTP requests answered, by status code.\n"
                "# TYPE attn_http_requests_total counter\n");
    for (int k = 100; k < 600; k++)
        if (S->http[k])
            sb_printf(&b, "attn_http_requests_total{code=\"%d\"} %llu\n", k, S->http[k]);
    sb_printf(&b, "# HELP attn_requests_finished_total Generation requests finished.\n"
                  "# TYPE attn_requests_finished_total counter\n"
                  "attn_requests_finished_total %llu\n"
                  "# HELP attn_prompt_tokens_total Prompt tokens of accepted requests.\n"
                  "# TYPE attn_prompt_tokens_total counter\n"
                  "attn_prompt_tokens_total %llu\n"
                  "# HELP attn_prompt_tokens_reused_total Prompt tokens found in a slot's "
                  "cache (not prefilled again).\n"
                  "# TYPE attn_prompt_tokens_reused_total counter\n"
                  "attn_prompt_tokens_reused_total %llu\n"
                  "# HELP attn_prompt_tokens_copied_total Of those, tokens copied from another "
                  "slot's cache.\n"
                  "# TYPE attn_prompt_tokens_copied_total counter\n"
                  "attn_prompt_tokens_copied_total %llu\n"
                  "# HELP attn_completion_tokens_total Tokens generated.\n"
                  "# TYPE attn_completion_tokens_total counter\n"
                  "attn_completion_tokens_total %llu\n"
                  "# HELP attn_decode_steps_total Batched decode steps.\n"
                  "# TYPE attn_decode_steps_total counter\n"
                  "attn_decode_steps_total %llu\n"
                  "# HELP attn_decode_batch_rows_total Sequences summed over decode steps.\n"
                  "# TYPE attn_decode_batch_rows_total counter\n"
                  "attn_decode_batch_rows_total %llu\n"
                  "# HELP attn_batch_size Sequences in the last decode step.\n"
                  "# TYPE attn_batch_size gauge\n"
                  "attn_batch_size %d\n"
                  "# HELP attn_queue_depth Requests waiting for a slot.\n"
                  "# TYPE attn_queue_depth gauge\n"
                  "attn_queue_depth %lld\n"
                  "# HELP attn_active_sequences Requests in a slot.\n"
                  "# TYPE attn_active_sequences gauge\n"
                  "attn_active_sequences %d\n"
                  "# HELP attn_slots Session slots (--parallel).\n"
                  "# TYPE attn_slots gauge\n"
                  "attn_slots %lld\n",
              S->requests_done, S->prompt_tokens, S->reused, S->copied, S->completion_tokens, S->steps,
              S->batched, S->last_batch, S->qn, S->active, S->parallel);
    pthread_mutex_unlock(&S->mu);
    if (b.oom) {
        sb_free(&b);
        return send_error(c, 500, NULL, "out of memory");
    }
    int r = send_buf(c, 200, "text/plain; version=0.0.4", b.p, b.n, NULL);
    sb_free(&b);
    return r;
}

/* ---- dispatch ------------------------------------------------------------------------- */
static int key_ok(const attn_server_t *S, const char *h) {
    if (!S->api_key) return 1;
    if (!h || strncmp(h, "Bearer ", 7)) return 0;
    h += 7;
    /* compared in time independent of where they differ */
    size_t a = strlen(h), k = strlen(S->api_key);
    unsigned d = a != k;
    for (size_t i = 0; i < a; i++) d |= (unsigned char)h[i] ^ (unsigned char)S->api_key[i % k];
    return d == 0;
}

static void dispatch(attn_server_reply *c, const char *method, const char *url,
                     const char *auth, const char *body, size_t len) {
    attn_server_t *S = c->srv;
    if (len > S->max_body) {
        send_error(c, 413, NULL, "the body is over %zu bytes", S->max_body);
        return;
    }
    if (!body && len) {
        send_error(c, 500, NULL, "out of memory");
        return;
    }
    const int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(method, "OPTIONS")) { /* CORS preflight */
        send_buf(c, 204, NULL, "", 0, NULL); /* no body, no type */
        add_header(c, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        add_header(c, "Access-Control-Allow-Headers", "Content-Type, Authorization");
        return;
    }
    static const struct {
        const char *path;
        int post, auth;
    } routes[] = {{"/", 0, 0},
                  {"/health", 0, 0},
                  {"/v1/models", 0, 1},
                  {"/metrics", 0, 1},
                  {"/v1/chat/completions", 1, 1},
                  {"/v1/completions", 1, 1},
                  {"/v1/embeddings", 1, 1},
                  {"/tokenize", 1, 1},
                  {"/detokenize", 1, 1}};
    int k = -1;
    for (int i = 0; i < (int)(sizeof routes / sizeof routes[0]); i++)
        if (!strcmp(url, routes[i].path)) k = i;
    if (k < 0) {
        send_error(c, 404, "not_found", "no such endpoint: %s %s", method, url);
        return;
    }
    if (routes[k].post ? !post : !get) {
        send_error(c, 405, "method_not_allowed", "%s takes %s, not %s", url,
                   routes[k].post ? "POST" : "GET", method);
        return;
    }
    if (routes[k].auth && !key_ok(S, auth)) {
        send_error(c, 401, "invalid_api_key",
                   "a missing or wrong API key (Authorization: Bearer KEY)");
        return;
    }
    if (k == 0) {
        send_buf(c, 200, "text/html; charset=utf-8", attn_serve_page, strlen(attn_serve_page),
                 NULL);
        return;
    }
    if (k == 1) {
        pthread_mutex_lock(&S->mu);
        int stopping = S->stopping;
        pthread_mutex_unlock(&S->mu);
        if (stopping) {
            send_error(c, 503, NULL, "the server is shutting down");
            return;
        }
        static const char ok[] = "{\"status\":\"ok\"}";
        send_buf(c, 200, "application/json", ok, sizeof ok - 1, NULL);
        return;
    }
    if (k == 2) {
        answer_models(c);
        return;
    }
    if (k == 3) {
        answer_metrics(c);
        return;
    }
    sj_doc doc;
    char err[256];
    if (!sj_parse(&doc, body ? body : "", len, err, sizeof err)) {
        sj_free(&doc);
        send_error(c, 400, "invalid_json", "%s", err);
        return;
    }
    if (doc.root->kind != SJ_OBJ) send_error(c, 400, NULL, "the body must be an object");
    else if (k == 4) answer_gen(c, doc.root, KIND_CHAT);
    else if (k == 5) answer_gen(c, doc.root, KIND_COMPLETION);
    else if (k == 6) answer_embeddings(c, doc.root);
    else if (k == 7) answer_tokenize(c, doc.root);
    else answer_detokenize(c, doc.root);
    sj_free(&doc);
}

ATTN_API attn_status attn_server_handle(attn_server *S, const char *method, const char *path,
                                        const char *authorization, const char *body,
                                        size_t len, attn_server_reply **out) {
    if (out) *out = NULL;
    if (!S || !method || !path || !out) return ATTN_E_INVALID;
    attn_server_reply *c = calloc(1, sizeof *c);
    if (!c) return ATTN_E_NOMEM;
    c->srv = S;
    c->t0 = now_s();
    snprintf(c->method, sizeof c->method, "%s", method);
    snprintf(c->path, sizeof c->path, "%s", path);
    pthread_mutex_lock(&S->mu);
    S->inflight++;
    pthread_mutex_unlock(&S->mu);
    dispatch(c, method, path, authorization, body, len);
    *out = c;
    return ATTN_OK;
}

ATTN_API int attn_server_reply_wait(attn_server_reply *c, int timeout_ms) {
    if (!c || c->ready) return 1;
    sreq *r = c->r;
    pthread_mutex_lock(&r->mu);
    if (!r->done && timeout_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        while (!r->done)
            if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) != 0) break;
    }
    const int done = r->done, cancelled = r->cancelled;
    pthread_mutex_unlock(&r->mu);
    if (!done) return 0;
    if (cancelled) c->ready = 1, c->status = 0; /* nothing to send: the client left */
    else gen_answer(c);
    return 1;
}

ATTN_API void attn_server_reply_get(const attn_server_reply *c, attn_server_reply_info *info) {
    if (!info) return;
    memset(info, 0, sizeof *info);
    if (!c || !c->ready) return;
    info->status = c->status;
    info->content_type = c->ctype;
    info->n_headers = c->nh;
    for (int64_t i = 0; i < c->nh; i++)
        info->header_names[i] = c->hn[i], info->header_values[i] = c->hv[i];
    info->stream = c->mode == REPLY_STREAM;
    info->body = c->body, info->body_len = c->body_len;
}

ATTN_API void attn_server_reply_cancel(attn_server_reply *c) {
    if (!c) return;
    c->client_left = 1;
    if (!c->r) return;
    pthread_mutex_lock(&c->r->mu);
    if (!c->r->done) c->r->cancelled = 1;
    pthread_mutex_unlock(&c->r->mu);
}

/* One log line per request: method path status tokens ms. */
ATTN_API void attn_server_reply_free(attn_server_reply *c) {
    if (!c) return;
    attn_server_t *S = c->srv;
    int64_t tokens = c->tokens;
    if (c->r) {
        pthread_mutex_lock(&c->r->mu);
        if (!c->r->done) c->r->cancelled = 1;
        tokens = c->r->n_prompt + c->r->completion_tokens;
        pthread_mutex_unlock(&c->r->mu);
    }
    if (S->log_requests)
        logf_(S, "%s %s %d %lld %.1f ms%s", c->method, c->path, c->status, (long long)tokens,
              1e3 * (now_s() - c->t0), c->client_left ? " (client left)" : "");
    req_unref(c->r);
    free(c->body);
    free(c);
    pthread_mutex_lock(&S->mu);
    S->inflight--;
    pthread_cond_broadcast(&S->cv);
    pthread_mutex_unlock(&S->mu);
}

/* ---- the server ----------------------------------------------------------------------- */
ATTN_API attn_server_options attn_server_options_defaults(void) {
    attn_server_options o;
    memset(&o, 0, sizeof o);
    o.log_requests = 1;
    return o;
}

ATTN_API int64_t attn_server_context(const attn_server *S) { return S ? S->cap : 0; }

ATTN_API void attn_server_stop(attn_server *S, double wait_s) {
    if (!S) return;
    if (S->started) {
        pthread_mutex_lock(&S->mu);
        S->stopping = 1;
        pthread_cond_broadcast(&S->cv);
        pthread_mutex_unlock(&S->mu);
        pthread_join(S->th, NULL);
        S->started = 0;
    }
    /* the answers of the finished requests are sent before the connections close (wait_s at
     * most: a client that stopped reading does not hold the exit for ever) */
    pthread_mutex_lock(&S->mu);
    S->stopping = 1;
    for (double t0 = now_s(); S->inflight > 0 && now_s() - t0 < wait_s;) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&S->cv, &S->mu, &ts);
    }
    pthread_mutex_unlock(&S->mu);
}

ATTN_API void attn_server_free(attn_server *S) {
    if (!S) return;
    attn_server_stop(S, 0);
    for (long long i = 0; S->slots && i < S->parallel; i++) {
        attn_llm_session_free(S->slots[i].s);
        free(S->slots[i].ids), free(S->slots[i].hist);
    }
    free(S->slots), free(S->q), free(S->lgb), free(S->piece);
    free(S->tok_text), free(S->tok_off), free(S->masked), free(S->biased);
    free(S->tok_raw), free(S->raw_off), free(S->plg);
    free(S->bids), free(S->bss), free(S->bsl), free(S->pids), free(S->plens);
    for (int i = 0; S->tctx && i < S->ntctx; i++) attn_ctx_free(S->tctx[i]);
    free(S->jallow), free(S->jmask), free(S->jby);
    free(S->tctx), free(S->bpick), free(S->bst), free(S->btid);
    free(S->api_key);
    attn_ctx_free(S->ectx);
    if (S->locks) {
        pthread_mutex_destroy(&S->emu);
        pthread_mutex_destroy(&S->mu);
        pthread_cond_destroy(&S->cv);
    }
    free(S);
}

/* n * size bytes, or NULL when that overflows or memory is out. */

ATTN_API attn_status attn_server_create(attn_ctx *ctx, attn_llm *llm, attn_bert *embed,
                                        const attn_server_options *opt, attn_server **out) {
    ATTN_FAIL_IF(!out, ctx, ATTN_E_INVALID, "attn_server_create: out is NULL");
    *out = NULL;
    ATTN_FAIL_IF(!ctx || !llm || !opt, ctx, ATTN_E_INVALID,
                 "attn_server_create: ctx, llm and options are required");
    ATTN_FAIL_IF(opt->parallel < 0 || opt->parallel > 256, ctx, ATTN_E_INVALID,
                 "attn_server_create: parallel %lld is not in [1, 256] (0: 4)",
                 (long long)opt->parallel);
    ATTN_FAIL_IF(opt->queue < 0 || opt->queue > (1 << 20), ctx, ATTN_E_INVALID,
                 "attn_server_create: queue %lld is not in [1, 2^20] (0: 64)",
                 (long long)opt->queue);
    ATTN_FAIL_IF(opt->ctx < 0 || opt->ctx > (1 << 24), ctx, ATTN_E_INVALID,
                 "attn_server_create: ctx %lld is not in [1, 2^24] (0: the model's)",
                 (long long)opt->ctx);
    ATTN_FAIL_IF(opt->api_key && !opt->api_key[0], ctx, ATTN_E_INVALID,
                 "attn_server_create: the API key is empty");
    const attn_bpe *tok = attn_llm_tokenizer(llm);
    ATTN_FAIL_IF(!tok, ctx, ATTN_E_INVALID, "attn_server_create: the model has no tokenizer");
    attn_server_t *S = calloc(1, sizeof *S);
    ATTN_FAIL_IF(!S, ctx, ATTN_E_NOMEM, "attn_server_create: out of memory");
    attn_status st = ATTN_OK;
    S->sctx = ctx, S->m = llm, S->tok = tok, S->bert = embed;
    S->parallel = opt->parallel ? opt->parallel : 4;
    S->queue = opt->queue ? opt->queue : 64;
    S->max_body = opt->max_body ? opt->max_body : (size_t)1 << 20;
    S->log = opt->log, S->log_user = opt->log_user, S->log_requests = opt->log_requests;
    snprintf(S->model_name, sizeof S->model_name, "%s", opt->model_name ? opt->model_name : "model");
    snprintf(S->embed_name, sizeof S->embed_name, "%s", opt->embed_name ? opt->embed_name : "embed");
    if (opt->api_key && !(S->api_key = malloc(strlen(opt->api_key) + 1))) goto oom;
    if (S->api_key) memcpy(S->api_key, opt->api_key, strlen(opt->api_key) + 1);
    attn_llm_get_info(llm, &S->cfg);
    S->cap = opt->ctx ? opt->ctx
                      : (S->cfg.max_position_embeddings < 4096 ? S->cfg.max_position_embeddings
                                                              : 4096);
    if (S->cap > S->cfg.max_position_embeddings) S->cap = S->cfg.max_position_embeddings;
    ATTN_FAIL_IFG(S->cap < 1 || S->cfg.vocab_size < 1, ATTN_E_INVALID,
                  "attn_server_create: the model has no context or vocabulary");
    S->chat_ok = attn_chat_template_check(ctx, attn_llm_chat_template(llm)) == ATTN_OK;
    if (!S->chat_ok) snprintf(S->chat_why, sizeof S->chat_why, "%s", attn_ctx_errmsg(ctx));
    else S->chat_format = attn_chat_template_name(ctx, attn_llm_chat_template(llm));
    {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        S->id_salt = (unsigned long long)ts.tv_sec * 1000000007ULL ^ (unsigned long long)ts.tv_nsec;
    }
    if (embed) {
        attn_ctx_params cp;
        memset(&cp, 0, sizeof cp);
        cp.threads = attn_ctx_threads(ctx);
        if ((st = attn_ctx_create(&cp, &S->ectx)) != ATTN_OK) {
            st = attn__fail(ctx, st, "attn_server_create: the embedding context: %s",
                            attn_ctx_errmsg(NULL));
            goto done;
        }
        attn_bert_info bi;
        attn_bert_get_info(embed, &bi);
        S->edim = bi.hidden_size, S->emax = bi.max_seq_length;
    }
    pthread_mutex_init(&S->emu, NULL);
    pthread_mutex_init(&S->mu, NULL);
    pthread_cond_init(&S->cv, NULL);
    S->locks = 1;
    S->created = (long long)time(NULL);
    const size_t V = (size_t)S->cfg.vocab_size, P = (size_t)S->parallel;
    S->slots = calloc(P, sizeof *S->slots);
    S->q = calloc((size_t)S->queue, sizeof *S->q);
    S->lgb = V <= SIZE_MAX / P ? alloc_n(V * P, sizeof *S->lgb) : NULL;
    S->bids = alloc_n(P, sizeof *S->bids);
    S->bss = alloc_n(P, sizeof *S->bss);
    S->bsl = alloc_n(P, sizeof *S->bsl);
    S->pids = alloc_n(P, PREFILL_CHUNK * sizeof *S->pids);
    S->plens = alloc_n(P, sizeof *S->plens);
    S->biased = alloc_n(V, sizeof *S->biased);
    S->bpick = alloc_n(P, sizeof *S->bpick);
    S->bst = alloc_n(P, sizeof *S->bst);
    S->btid = alloc_n(P, sizeof *S->btid);
    S->ntctx = attn_ctx_threads(ctx);
    S->tctx = calloc((size_t)S->ntctx, sizeof *S->tctx);
    if (!S->bpick || !S->bst || !S->btid || !S->tctx) goto oom;
    for (int i = 0; i < S->ntctx; i++)
        if (!(S->tctx[i] = small_ctx())) goto oom;
    attn_bpe_info ti;
    attn_bpe_get_info(tok, &ti);
    ATTN_FAIL_IFG(ti.max_token_bytes < 0 || ti.max_token_bytes > (1 << 20), ATTN_E_INVALID,
                  "attn_server_create: tokens of %lld bytes", (long long)ti.max_token_bytes);
    S->piece_cap = 3 * ((size_t)ti.max_token_bytes + 3) + 1;
    S->piece = malloc(S->piece_cap);
    if (!S->slots || !S->q || !S->lgb || !S->piece || !S->bids || !S->bss || !S->bsl ||
        !S->pids || !S->plens || !S->biased)
        goto oom;
    for (long long i = 0; i < S->parallel; i++) {
        slot *sl = &S->slots[i];
        sl->srv = S;
        if ((st = attn_llm_session_create(ctx, llm, S->cap, opt->cache_bf16 ? ATTN_BF16 : ATTN_F32,
                                          &sl->s)) != ATTN_OK)
            goto done;
        sl->ids = alloc_n((size_t)S->cap + 1, sizeof *sl->ids);
        sl->hist = alloc_n((size_t)S->cap + 2, sizeof *sl->hist);
        if (!sl->ids || !sl->hist) goto oom;
    }
    ATTN_FAIL_IFG(pthread_create(&S->th, NULL, scheduler, S) != 0, ATTN_E_NOMEM,
                  "attn_server_create: cannot start the scheduler thread");
    S->started = 1;
    *out = S;
    return ATTN_OK;
oom:
    st = attn__fail(ctx, ATTN_E_NOMEM, "attn_server_create: out of memory");
done:
    attn_server_free(S);
    return st;
}
