/* attn serve's tool calls in answers (cli/serve_tools.c): the calls attn_chat_parse_tool_calls
 * found in a model's answer written as OpenAI's chat completion message and stream delta.  No
 * dependency but the library and cli/serve_json.c: tests/test_serve_tools.c checks the JSON. */
#ifndef ATTN_SERVE_TOOLS_H
#define ATTN_SERVE_TOOLS_H
#include "attn.h"
#include "serve_json.h"

/* The id of call i of request seq: the model's own when it wrote one of 1 to 40 letters,
 * digits, '_' or '-'; else 9 letters and digits (what Mistral's templates take back) made
 * from seq, i and salt.  out: 48 bytes. */
void st_call_id(char *out, const attn_chat_tool_call *c, unsigned long long seq, int64_t i,
                unsigned long long salt);
/* The calls as OpenAI's tool_calls array: [{"id", "type": "function", "function": {"name",
 * "arguments": the JSON text as a string}}], with "index" first in each when index is set (a
 * stream delta). */
void st_calls_json(sbuf *b, const attn_chat_parse *p, unsigned long long seq,
                   unsigned long long salt, int index);
/* A chat completion's "message" object: role, content (null when empty and there are calls),
 * tool_calls when there are any.  p NULL: the text as content. */
void st_message_json(sbuf *b, const char *text, size_t n, const attn_chat_parse *p,
                     unsigned long long seq, unsigned long long salt);

#endif
