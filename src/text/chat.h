/* Chat formatting (src/text/chat.c) for the library's other files. */
#ifndef ATTN_TEXT_CHAT_H
#define ATTN_TEXT_CHAT_H

#include "internal.h"

/* attn_chat_apply, its messages naming the API function fn ("attn_llm_chat_format"). */
ATTN__HIDDEN attn_status attn__chat_apply_as(attn_ctx *ctx, const char *fn, const char *tmpl,
                                             const attn_chat_message *msgs, int64_t n,
                                             const attn_chat_options *opt, char *buf,
                                             size_t cap, size_t *len);

/* 1 when t is one of attn_chat_template_named's texts (a format without its published file) */
ATTN__HIDDEN int attn__chat_template_is_named(const char *t);

#endif
