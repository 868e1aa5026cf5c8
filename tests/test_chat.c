/* Chat formatting (src/text/chat.c) against transformers' rendering of the same templates and
 * conversations (tests/fixtures/chat/cases.inc, written by tests/gen_chat.py): byte for byte;
 * templates outside the ChatML family refused with a message; the buffer contract. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn.h"
#include "testutil.h"

#include "fixtures/chat/cases.inc"

/* want with "@TODAY@" replaced by today's date as strftime("%d %b %Y") gives it in the C locale
 * (transformers' strftime_now for Llama 3.2's template); malloc'ed */
static char *with_today(const char *want) {
    char d[64];
    time_t now = time(NULL);
    struct tm tmv;
    localtime_r(&now, &tmv);
    strftime(d, sizeof d, "%d %b %Y", &tmv);
    const char *at = strstr(want, "@TODAY@");
    char *out = malloc(strlen(want) + strlen(d) + 1);
    if (!at) return strcpy(out, want);
    memcpy(out, want, (size_t)(at - want));
    strcpy(out + (at - want), d);
    strcat(out, at + 7);
    return out;
}

int main(void) {
    attn_ctx *ctx = NULL;
    TU_CHECK(attn_ctx_create(NULL, &ctx) == ATTN_OK, "context");
    if (!ctx) return tu_finish("test_chat");
    const int nt = (int)(sizeof TEMPLATES / sizeof TEMPLATES[0]);
    char buf[4096];
    for (int t = 0; t < nt; t++) {
        const char *tm = TEMPLATES[t].tmpl, *bos = TEMPLATES[t].bos, *eos = TEMPLATES[t].eos;
        TU_CHECK(attn_chat_template_check(ctx, tm) == ATTN_OK, "%s: refused: %s",
                 TEMPLATES[t].name, attn_ctx_errmsg(ctx));
        const char *fmt = attn_chat_template_name(ctx, tm);
        TU_CHECK(fmt && !strcmp(fmt, TEMPLATES[t].format), "%s: recognised as %s, not %s",
                 TEMPLATES[t].name, fmt ? fmt : attn_ctx_errmsg(ctx), TEMPLATES[t].format);
        int ok_convs = 0, refused = 0;
        for (int c = 0; c < N_CONVS; c++) {
            attn_chat_message msgs[CONV_MAX];
            for (int m = 0; m < CONV_LEN[c]; m++)
                msgs[m].role = CONV[c][2 * m], msgs[m].content = CONV[c][2 * m + 1];
            for (int gen = 0; gen < 2; gen++) {
                size_t len = 0;
                buf[0] = 0;
                attn_status st = attn_chat_render(ctx, tm, bos, eos, msgs, CONV_LEN[c], gen, buf,
                                                  sizeof buf, &len);
                if (!EXPECTED[t][c][gen]) { /* the template refuses this conversation */
                    TU_CHECK(st == ATTN_E_INVALID, "%s, conversation %d: transformers refuses "
                             "it, attn gave (%s) \"%s\"", TEMPLATES[t].name, c,
                             attn_status_name(st), buf);
                    refused++;
                    continue;
                }
                char *want = with_today(EXPECTED[t][c][gen]);
                TU_CHECK(st == ATTN_OK && len == strlen(want) && strcmp(buf, want) == 0,
                         "%s, conversation %d, add_generation_prompt %d: got (%s) \"%s\", "
                         "transformers \"%s\"", TEMPLATES[t].name, c, gen,
                         st == ATTN_OK ? "ok" : attn_ctx_errmsg(ctx), buf, want);
                ok_convs++;
                /* the length alone, then a buffer one byte short: cut, NUL-terminated */
                size_t len0 = 0;
                TU_CHECK(attn_chat_render(ctx, tm, bos, eos, msgs, CONV_LEN[c], gen, NULL, 0,
                                          &len0) == ATTN_OK && len0 == strlen(want),
                         "%s: the length alone", TEMPLATES[t].name);
                if (len0 > 0) {
                    char *small = malloc(len0);
                    memset(small, 'x', len0);
                    TU_CHECK(attn_chat_render(ctx, tm, bos, eos, msgs, CONV_LEN[c], gen, small,
                                              len0, &len) == ATTN_OK &&
                                 len == len0 && small[len0 - 1] == 0 &&
                                 memcmp(small, want, len0 - 1) == 0,
                             "%s: a buffer one byte short", TEMPLATES[t].name);
                    free(small);
                }
                free(want);
            }
        }
        printf("  %-14s %-15s %2d renderings as transformers, %d refusals as transformers\n",
               TEMPLATES[t].name, fmt ? fmt : "?", ok_convs, refused);
        /* a template that writes bos without its text */
        if (bos[0]) {
            attn_chat_message m1 = {"user", "hi"};
            size_t l1;
            TU_CHECK(attn_chat_render(ctx, tm, NULL, NULL, &m1, 1, 1, buf, sizeof buf, &l1) ==
                         ATTN_E_INVALID, "%s: bos text missing", TEMPLATES[t].name);
        }
    }
    const int nb = (int)(sizeof BAD_TEMPLATES / sizeof BAD_TEMPLATES[0]);
    for (int t = 0; t < nb; t++) {
        attn_chat_message m = {"user", "hi"};
        size_t len = 0;
        attn_status st = attn_chat_format(ctx, BAD_TEMPLATES[t].tmpl, &m, 1, 1, buf, sizeof buf,
                                          &len);
        printf("  refused %-14s %s\n", BAD_TEMPLATES[t].name, attn_ctx_errmsg(ctx));
        TU_CHECK(st == ATTN_E_UNSUPPORTED && strstr(attn_ctx_errmsg(ctx), "chat template"),
                 "%s: not refused as it should be (%s)", BAD_TEMPLATES[t].name,
                 attn_status_name(st));
        TU_CHECK(attn_chat_template_check(ctx, BAD_TEMPLATES[t].tmpl) == ATTN_E_UNSUPPORTED,
                 "%s: check", BAD_TEMPLATES[t].name);
    }
    TU_CHECK(attn_chat_template_check(ctx, NULL) == ATTN_E_UNSUPPORTED &&
                 strstr(attn_ctx_errmsg(ctx), "no chat template"), "NULL template");
    /* bad arguments */
    attn_chat_message nul = {"user", NULL};
    size_t len;
    TU_CHECK(attn_chat_format(ctx, TEMPLATES[0].tmpl, &nul, 1, 0, buf, sizeof buf, &len) ==
                 ATTN_E_INVALID, "NULL content");
    TU_CHECK(attn_chat_format(ctx, TEMPLATES[0].tmpl, NULL, 1, 0, buf, sizeof buf, &len) ==
                 ATTN_E_INVALID, "NULL messages");
    TU_CHECK(attn_chat_format(ctx, TEMPLATES[0].tmpl, &nul, -1, 0, buf, sizeof buf, &len) ==
                 ATTN_E_INVALID, "negative count");
    TU_CHECK(attn_chat_format(ctx, TEMPLATES[0].tmpl, &nul, 0, 0, buf, sizeof buf, NULL) ==
                 ATTN_E_INVALID, "NULL len");
    /* hostile templates: every prefix of each template parses or is refused, never crashes */
    for (int t = 0; t < nt; t++) {
        size_t n = strlen(TEMPLATES[t].tmpl);
        for (size_t k = 0; k <= n; k++) {
            char *pre = malloc(k + 1);
            memcpy(pre, TEMPLATES[t].tmpl, k);
            pre[k] = 0;
            attn_status st = attn_chat_template_check(ctx, pre);
            TU_CHECK(st == ATTN_OK || st == ATTN_E_UNSUPPORTED, "%s prefix %zu: %s",
                     TEMPLATES[t].name, k, attn_status_name(st));
            free(pre);
        }
    }
    attn_ctx_free(ctx);
    return tu_finish("test_chat");
}
