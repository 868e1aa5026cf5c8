/* libFuzzer target: chat formatting (attn_chat_apply, src/text/chat.c and chat_json.c).
 *
 * An input is up to three segments separated by FZ_SEP ("\x1e\x1e"): a chat template, the tool
 * definitions (JSON; absent: none) and an assistant message's tool_calls (JSON; absent: none).
 * The conversation around them is fixed: system, user, the assistant with those calls, a tool
 * result, user.  Each input is written with and without the generation prompt and with
 * thinking off, then with its first 1, 2 and 3 messages.
 *
 * Promises checked: no sanitizer report, leak or hang; a status of OK, ATTN_E_INVALID,
 * ATTN_E_UNSUPPORTED (or ATTN_E_NOMEM, ATTN_E_OVERFLOW), with a message when not OK; a
 * template attn_chat_template_check accepts has a name; a written text has the length the
 * length-only call gives, its NUL where *len says and no NUL before it, and a buffer one byte
 * short gets the same text cut, NUL-terminated. */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *seg_str(const fz_seg *s) {
    char *t = malloc(s->n + 1);
    FZ_CHECK(t != NULL);
    memcpy(t, s->p, s->n);
    t[s->n] = 0;
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1 << 16)) return 0;
    fz_seg seg[3];
    int ns = fz_split(data, size, seg, 3);
    char *tmpl = seg_str(&seg[0]);
    char *tools = ns > 1 ? seg_str(&seg[1]) : NULL;
    char *calls = ns > 2 ? seg_str(&seg[2]) : NULL;
    attn_ctx *ctx = NULL;
    FZ_CHECK(attn_ctx_create(NULL, &ctx) == ATTN_OK);
    attn_status chk = attn_chat_template_check(ctx, tmpl);
    FZ_CHECK(chk == ATTN_OK || chk == ATTN_E_UNSUPPORTED || chk == ATTN_E_NOMEM);
    FZ_CHECK(chk != ATTN_OK || attn_chat_template_name(ctx, tmpl) != NULL);
    const attn_chat_message msgs[5] = {
        {"system", "Be brief.", NULL, NULL, NULL},
        {"user", "What is the weather?", NULL, NULL, NULL},
        {"assistant", "", "I should call it.", calls, NULL},
        {"tool", "{\"temperature\": 21}", NULL, NULL, "call12345"},
        {"user", "Thanks \xe3\x80\x80 ", NULL, NULL, NULL}};
    static const int64_t counts[] = {5, 1, 2, 3};
    for (int v = 0; v < 6; v++) {
        attn_chat_options o = {v & 1, v >= 2 ? ATTN_CHAT_THINKING_OFF : 0, tools, "<s>", "</s>"};
        int64_t n = counts[v < 2 ? 0 : v - 2];
        size_t len = 0, len2 = 0;
        attn_status st = attn_chat_apply(ctx, tmpl, msgs, n, &o, NULL, 0, &len);
        FZ_CHECK(st == ATTN_OK || st == ATTN_E_INVALID || st == ATTN_E_UNSUPPORTED ||
                 st == ATTN_E_NOMEM || st == ATTN_E_OVERFLOW);
        FZ_CHECK(st == ATTN_OK || attn_ctx_errmsg(ctx)[0]);
        FZ_CHECK(st == ATTN_OK || chk != ATTN_OK || st != ATTN_E_UNSUPPORTED || tools || calls);
        if (st != ATTN_OK) continue;
        char *buf = malloc(len + 1);
        FZ_CHECK(buf != NULL);
        FZ_CHECK(attn_chat_apply(ctx, tmpl, msgs, n, &o, buf, len + 1, &len2) == ATTN_OK);
        FZ_CHECK(len2 == len && buf[len] == 0 && strlen(buf) == len);
        if (len > 0) {
            char *cut = malloc(len);
            FZ_CHECK(cut != NULL);
            FZ_CHECK(attn_chat_apply(ctx, tmpl, msgs, n, &o, cut, len, &len2) == ATTN_OK);
            FZ_CHECK(len2 == len && cut[len - 1] == 0 && !memcmp(cut, buf, len - 1));
            free(cut);
        }
        free(buf);
    }
    attn_ctx_free(ctx);
    free(tmpl), free(tools), free(calls);
    return 0;
}
