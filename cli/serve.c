#define _POSIX_C_SOURCE 200809L
/* attn serve: an OpenAI-compatible HTTP server (docs/serve.md).  The server itself is the
 * library's (attn_server_*, src/serve/: requests, answers, the continuous-batching scheduler);
 * this file is its HTTP, from GNU libmicrohttpd (one thread per connection): each request goes
 * to attn_server_handle and its reply back to the client.  Built without libmicrohttpd, the
 * command says how to get it. */
#include <stdio.h>
#include <string.h>

#include "commands.h"

#ifndef ATTN_HAVE_MHD
int attn_cmd_serve(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("attn serve: an OpenAI-compatible HTTP server (docs/serve.md); this build "
                   "has none.\n");
            break;
        }
    fprintf(stderr, "attn serve needs GNU libmicrohttpd: apt-get install libmicrohttpd-dev, "
                    "then rebuild\n");
    return 2;
}
#else

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#if MHD_VERSION < 0x00097002
typedef int MHD_Result_t;
#else
typedef enum MHD_Result MHD_Result_t;
#endif

#define MAX_BODY ((size_t)1 << 20)

static struct {
    const char *model, *embed, *host, *api_key, *template_file;
    long long port, parallel, ctx, queue, threads;
    int insecure, cache_bf16, quiet, mmap, act;
    attn_server *srv;
} S;

/* One connection's request: its body as it comes, then the server's reply. */
typedef struct conn {
    char *body;
    size_t n, cap, total;
    int too_big, oom;
    attn_server_reply *reply;
} conn;

/* 1 when the peer of the connection has closed it (a read of 0 bytes). */
static int peer_gone(struct MHD_Connection *mc) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    struct pollfd pf = {ci->connect_fd, POLLIN, 0};
    if (poll(&pf, 1, 0) <= 0) return 0;
    if (pf.revents & (POLLHUP | POLLERR)) return 1;
    char ch;
    return recv(ci->connect_fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    size_t n = 0;
    int done = 0;
    if (attn_server_reply_read(cls, buf, max, &n, &done, 5000) != ATTN_OK)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    if (n) return (ssize_t)n;
    return done < 0 ? MHD_CONTENT_READER_END_WITH_ERROR
           : done   ? MHD_CONTENT_READER_END_OF_STREAM
                    : 0;
}

/* The reply of the connection to libmicrohttpd (waiting for a generation's end, watching for a
 * client that leaves). */
static MHD_Result_t send_reply(struct MHD_Connection *mc, attn_server_reply *rep) {
    while (!attn_server_reply_wait(rep, 250))
        if (peer_gone(mc)) attn_server_reply_cancel(rep);
    attn_server_reply_info ri;
    attn_server_reply_get(rep, &ri);
    if (!ri.status) return MHD_NO; /* the client left */
    struct MHD_Response *resp =
        ri.stream ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, rep, NULL)
                  : MHD_create_response_from_buffer(ri.body_len, (void *)ri.body,
                                                    MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    if (ri.content_type) MHD_add_response_header(resp, "Content-Type", ri.content_type);
    for (int64_t i = 0; i < ri.n_headers; i++)
        MHD_add_response_header(resp, ri.header_names[i], ri.header_values[i]);
    MHD_Result_t ret = MHD_queue_response(mc, (unsigned)ri.status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static MHD_Result_t handle(void *cls, struct MHD_Connection *mc, const char *url,
                           const char *method, const char *version, const char *upload,
                           size_t *upload_size, void **con_cls) {
    (void)cls, (void)version;
    conn *c = *con_cls;
    const char *auth = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Authorization");
    if (!c) {
        if (!(c = calloc(1, sizeof *c))) return MHD_NO;
        *con_cls = c;
        /* a declared body over the limit is refused before it is read */
        const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Length");
        unsigned long long declared = cl ? strtoull(cl, NULL, 10) : 0;
        if (declared > MAX_BODY) {
            c->too_big = 1;
            const size_t len = declared > SIZE_MAX ? SIZE_MAX : (size_t)declared;
            if (attn_server_handle(S.srv, method, url, auth, NULL, len, &c->reply))
                return MHD_NO;
            return send_reply(mc, c->reply);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        const size_t k = *upload_size;
        *upload_size = 0;
        c->total = c->total + k < c->total ? SIZE_MAX : c->total + k;
        if (c->too_big || c->oom) return MHD_YES;
        if (c->total > MAX_BODY) {
            c->too_big = 1, free(c->body), c->body = NULL;
            return MHD_YES;
        }
        if (c->n + k > c->cap) {
            size_t cap = c->cap ? c->cap : 4096;
            while (cap < c->n + k) cap *= 2;
            char *p = realloc(c->body, cap);
            if (!p) {
                c->oom = 1, free(c->body), c->body = NULL;
                return MHD_YES;
            }
            c->body = p, c->cap = cap;
        }
        memcpy(c->body + c->n, upload, k);
        c->n += k;
        return MHD_YES;
    }
    if (c->reply) return MHD_YES; /* answered already (413 before the body) */
    /* a body over the limit or one that memory could not hold: the server says which */
    const char *body = c->too_big || c->oom ? NULL : c->body;
    const size_t len = c->too_big || c->oom ? c->total : c->n;
    if (attn_server_handle(S.srv, method, url, auth, body, len, &c->reply) != ATTN_OK)
        return MHD_NO;
    return send_reply(mc, c->reply);
}

static void completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)mc;
    conn *c = *con_cls;
    if (!c) return;
    *con_cls = NULL;
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) attn_server_reply_cancel(c->reply);
    attn_server_reply_free(c->reply); /* its log line */
    free(c->body);
    free(c);
}

static void log_line(void *user, const char *line) {
    (void)user;
    fprintf(stderr, "%s\n", line);
}

/* ---- the command ---------------------------------------------------------------------- */
static const char *base_name(const char *p) {
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') n--;
    size_t s = n;
    while (s > 0 && p[s - 1] != '/') s--;
    static char buf[2][256];
    static int which;
    char *b = buf[which++ & 1];
    snprintf(b, sizeof buf[0], "%.*s", (int)(n - s), p + s);
    return b;
}

static int is_loopback(const char *h) {
    return !strcmp(h, "localhost") || !strncmp(h, "127.", 4) || !strcmp(h, "::1");
}

int attn_cmd_serve(int argc, char **argv) {
    memset(&S, 0, sizeof S);
    S.host = "127.0.0.1", S.port = 8080, S.parallel = 4, S.queue = 64;
    int npos;
    const attn_cli_opt table[] = {
        ATTN_OPT_STR("model", 0, &S.model, "FILE",
                     "the LLM: a GGUF file or a Hugging Face folder; required"),
        ATTN_OPT_STR("embed", 0, &S.embed, "DIR",
                     "a BERT sentence-transformers folder for /v1/embeddings"),
        ATTN_OPT_MMAP(&S.mmap),
        ATTN_OPT_STR("template", 0, &S.template_file, "FILE|NAME",
                     "a chat template (Jinja text) to use instead of the\n"
                     "model's; it must be one attn recognises (ChatML,\n"
                     "Qwen2.5/3, Gemma, Llama 3, Mistral), else it is refused;\n"
                     "or a format's name, for a model file without one: gemma2,\n"
                     "gemma3, llama3, llama3.2, mistral-v3, mistral-nemo,\n"
                     "mistral-v7, qwen3"),
        ATTN_OPT_STR("host", 0, &S.host, "ADDR",
                     "the address to listen on (default 127.0.0.1; another\n"
                     "than loopback needs --api-key or --insecure)"),
        ATTN_OPT_INT("port", 0, &S.port, 0, 65535, "N",
                     "the port (default 8080; 0: any free one, printed)"),
        ATTN_OPT_INT("parallel", 0, &S.parallel, 1, 256, "N",
                     "sequences generated together: session slots (default 4)"),
        ATTN_OPT_INT("ctx", 0, &S.ctx, 1, 1 << 24, "N",
                     "context (KV cache) of each slot in tokens (default: the\n"
                     "model's, at most 4096)"),
        ATTN_OPT_FLAG("cache-bf16", 0, &S.cache_bf16, "keep the KV caches in bfloat16"),
        ATTN_OPT_ACT(&S.act),
        ATTN_OPT_INT("queue", 0, &S.queue, 1, 1 << 20, "N",
                     "requests waiting for a slot at most; more get 503\n"
                     "(default 64)"),
        ATTN_OPT_STR("api-key", 0, &S.api_key, "KEY",
                     "require 'Authorization: Bearer KEY' (all but / and\n"
                     "/health)"),
        ATTN_OPT_FLAG("insecure", 0, &S.insecure,
                      "allow a non-loopback --host without --api-key"),
        ATTN_OPT_THREADS(&S.threads),
        ATTN_OPT_FLAG("quiet", 'q', &S.quiet, "no log line per request"),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "serve", "attn serve --model MODEL [--embed DIR] [--host ADDR] [--port N] [options]",
        "An OpenAI-compatible HTTP server: GET / (a chat page), /health, /v1/models,\n"
        "/metrics; POST /v1/chat/completions, /v1/completions (stream: true for server-sent\n"
        "events), /v1/embeddings (with --embed), /tokenize, /detokenize.  Requests are\n"
        "batched: up to --parallel sequences decode together.  SIGINT or SIGTERM stops\n"
        "accepting, finishes the running requests and exits 0.  docs/serve.md has the rest.",
        table, NULL,
        "attn serve --model SmolLM2-135M-Instruct.Q4_1.gguf --port 8080\n"
        "curl http://127.0.0.1:8080/v1/chat/completions -d '{\"messages\": [{\"role\": "
        "\"user\", \"content\": \"Hi\"}]}'"};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (npos) return attn_cli_usage_error(&spec, "unexpected argument '%s'", argv[1]);
    if (!S.model) return attn_cli_usage_error(&spec, "--model is required");
    if (S.api_key && !S.api_key[0]) return attn_cli_usage_error(&spec, "--api-key is empty");
    if (!is_loopback(S.host) && !S.api_key && !S.insecure)
        return attn_cli_usage_error(&spec, "--host %s is reachable from other machines: give "
                                           "--api-key KEY (or --insecure to serve anyone)",
                                    S.host);
    union {
        struct sockaddr sa;
        struct sockaddr_in v4;
        struct sockaddr_in6 v6;
    } addr;
    memset(&addr, 0, sizeof addr);
    int v6 = 0;
    const char *h = !strcmp(S.host, "localhost") ? "127.0.0.1" : S.host;
    if (inet_pton(AF_INET, h, &addr.v4.sin_addr) == 1) {
        addr.v4.sin_family = AF_INET, addr.v4.sin_port = htons((uint16_t)S.port);
    } else if (inet_pton(AF_INET6, h, &addr.v6.sin6_addr) == 1) {
        addr.v6.sin6_family = AF_INET6, addr.v6.sin6_port = htons((uint16_t)S.port), v6 = 1;
    } else
        return attn_cli_usage_error(&spec, "--host %s is not an IPv4 or IPv6 address", S.host);

    const char *cmd = "serve";
    int rc = 1;
    struct MHD_Daemon *d = NULL;
    attn_ctx *sctx = NULL;
    attn_llm *m = NULL;
    attn_bert *bert = NULL;
    char model_name[256], embed_name[256];
    snprintf(model_name, sizeof model_name, "%s", base_name(S.model));
    snprintf(embed_name, sizeof embed_name, "%s", S.embed ? base_name(S.embed) : "");
    if (attn_cli_ctx(cmd, S.threads, 0, &sctx)) return 1;
    attn_status st = attn_llm_load(sctx, S.model, ATTN_CLI_MMAP_FLAGS(S.mmap), &m);
    if (st) {
        attn_cli_fail(sctx, cmd, st);
        goto out;
    }
    if (!attn_llm_tokenizer(m)) {
        fprintf(stderr, "attn serve: %s has no tokenizer\n", S.model);
        goto out;
    }
    if (S.act) attn_llm_set_activations(m, (attn_qact)S.act); /* ATTN_OPT_ACT's order */
    if (S.template_file && !attn_cli_chat_template(cmd, sctx, m, S.template_file)) goto out;
    if (S.embed && (st = attn_bert_load(sctx, S.embed, &bert))) {
        attn_cli_fail(sctx, cmd, st);
        goto out;
    }
    /* SIGINT and SIGTERM go to sigwait below, in no other thread (the server's and
     * libmicrohttpd's threads inherit the mask) */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    attn_server_options so = attn_server_options_defaults();
    so.parallel = S.parallel, so.ctx = S.ctx, so.queue = S.queue, so.cache_bf16 = S.cache_bf16;
    so.log_requests = !S.quiet, so.log = log_line;
    so.model_name = model_name, so.embed_name = embed_name;
    so.api_key = S.api_key, so.max_body = MAX_BODY;
    if ((st = attn_server_create(sctx, m, bert, &so, &S.srv))) {
        attn_cli_fail(sctx, cmd, st);
        goto out;
    }
    d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                             MHD_USE_ITC | (v6 ? MHD_USE_IPv6 : 0),
                         (uint16_t)S.port, NULL, NULL, handle, NULL, MHD_OPTION_SOCK_ADDR,
                         &addr.sa, MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)512, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "attn serve: cannot listen on %s port %lld: %s\n", S.host, S.port,
                strerror(errno));
        goto out;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    const unsigned port = di ? di->port : (unsigned)S.port;
    fprintf(stderr, "attn serve: %s (%lld slots of %lld tokens, %d threads)%s%s; listening on "
                    "http://%s%s%s:%u/\n", model_name, S.parallel,
            (long long)attn_server_context(S.srv), attn_ctx_threads(sctx),
            bert ? ", embeddings: " : "", bert ? embed_name : "", v6 ? "[" : "", S.host,
            v6 ? "]" : "", port);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "attn serve: %s: finishing the running requests\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM");
    MHD_quiesce_daemon(d); /* no new connections */
    /* the running requests end, and their answers are sent before the connections close (a
     * minute at most: a client that stopped reading does not hold the exit for ever) */
    attn_server_stop(S.srv, 60);
    MHD_stop_daemon(d); /* waits for the connections' threads */
    d = NULL;
    fprintf(stderr, "attn serve: stopped\n");
    rc = 0;
out:
    if (d) MHD_stop_daemon(d);
    attn_server_free(S.srv);
    S.srv = NULL;
    attn_bert_free(bert);
    attn_llm_free(m);
    attn_ctx_free(sctx);
    return rc;
}
#endif
