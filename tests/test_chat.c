/* Chat formatting (src/text/chat.c) against transformers' rendering of the same templates and
 * conversations (tests/fixtures/chat/cases.inc, written by tests/gen_chat.py): byte for byte;
 * templates outside the ChatML family refused with a message; the buffer contract. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "testutil.h"

#include "fixtures/chat/cases.inc"

int main(void) {
    attn_ctx *ctx = NULL;
    TU_CHECK(attn_ctx_create(NULL, &ctx) == ATTN_OK, "context");
    if (!ctx) return tu_finish("test_chat");
    const int nt = (int)(sizeof TEMPLATES / sizeof TEMPLATES[0]);
    char buf[4096];
    for (int t = 0; t < nt; t++) {
        TU_CHECK(attn_chat_template_check(ctx, TEMPLATES[t].tmpl) == ATTN_OK, "%s: refused: %s",
                 TEMPLATES[t].name, attn_ctx_errmsg(ctx));
        for (int c = 0; c < N_CONVS; c++) {
            attn_chat_message msgs[4];
            for (int m = 0; m < CONV_LEN[c]; m++)
                msgs[m].role = CONV[c][2 * m], msgs[m].content = CONV[c][2 * m + 1];
            for (int gen = 0; gen < 2; gen++) {
                size_t len = 0;
                attn_status st = attn_chat_format(ctx, TEMPLATES[t].tmpl, msgs, CONV_LEN[c], gen,
                                                  buf, sizeof buf, &len);
                const char *want = EXPECTED[t][c][gen];
                TU_CHECK(st == ATTN_OK && len == strlen(want) && strcmp(buf, want) == 0,
                         "%s, conversation %d, add_generation_prompt %d: got (%s) \"%s\", "
                         "transformers \"%s\"", TEMPLATES[t].name, c, gen,
                         st == ATTN_OK ? "ok" : attn_ctx_errmsg(ctx), buf, want);
                /* the length alone, then a buffer one byte short: cut, NUL-terminated */
                size_t len0 = 0;
                TU_CHECK(attn_chat_format(ctx, TEMPLATES[t].tmpl, msgs, CONV_LEN[c], gen, NULL,
                                          0, &len0) == ATTN_OK && len0 == strlen(want),
                         "%s: the length alone", TEMPLATES[t].name);
                if (len0 > 0) {
                    char *small = malloc(len0);
                    memset(small, 'x', len0);
                    TU_CHECK(attn_chat_format(ctx, TEMPLATES[t].tmpl, msgs, CONV_LEN[c], gen,
                                              small, len0, &len) == ATTN_OK &&
                                 len == len0 && small[len0 - 1] == 0 &&
                                 memcmp(small, want, len0 - 1) == 0,
                             "%s: a buffer one byte short", TEMPLATES[t].name);
                    free(small);
                }
            }
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
