/* The server's tool calls in answers (src/serve/serve_tools.c): the calls
 * attn_chat_parse_tool_calls found in a model's answer written as OpenAI's chat completion
 * message and stream delta.  Internal to the library (attn__ names):
 * tests/test_serve_tools.c checks the JSON. */
#ifndef ATTN_SERVE_TOOLS_H
#define ATTN_SERVE_TOOLS_H
#define st_call_id attn__st_call_id
#define st_calls_json attn__st_calls_json
#define st_message_json attn__st_message_json
#define st_call_head_json attn__st_call_head_json
#define st_call_args_json attn__st_call_args_json
#define st_tool_choice attn__st_tool_choice
#define st_tool_named attn__st_tool_named
#define st_args_check attn__st_args_check
#define st_tool_parameters attn__st_tool_parameters
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

/* A streamed call's first delta: [{"index": i, "id", "type": "function", "function": {"name",
 * "arguments": ""}}] (its arguments follow in st_call_args_json pieces). */
void st_call_head_json(sbuf *b, const attn_chat_tool_call *c, int64_t i, unsigned long long seq,
                       unsigned long long salt);
/* A piece of call i's arguments: [{"index": i, "function": {"arguments": piece}}]. */
void st_call_args_json(sbuf *b, int64_t i, const char *piece, size_t n);

/* tool_choice of a chat request (OpenAI's): absent or null (auto where tools are given), "none",
 * "auto", "required", or {"type": "function", "function": {"name": NAME}}. */
enum { ST_CHOICE_AUTO, ST_CHOICE_NONE, ST_CHOICE_REQUIRED, ST_CHOICE_NAMED };
/* Reads tool_choice tc (NULL: absent) against the tools array (NULL: absent): *choice, and for
 * a named function *name (in tc's tree; a single tool made required is named too).  0 with a
 * message in err for what OpenAI refuses: another string or shape, a tool_choice without
 * tools, a name that is not one of the tools' functions. */
int st_tool_choice(const sj *tc, const sj *tools, int *choice, const char **name, char *err,
                   size_t ecap);
/* 1 when name is the name of one of the functions of tools. */
int st_tool_named(const sj *tools, const char *name);

/* 1 when value v fits schema (a JSON Schema subset: type (a name or a list), enum, const,
 * anyOf / oneOf (at least one), minimum, maximum, properties, required, additionalProperties
 * (false, or a schema), items, minItems, maxItems; other keywords are not checked).  0 with a
 * message in err naming the place (path: the value's name on entry, e.g. "arguments"; a buffer
 * of pcap bytes the check extends and restores). */
int st_args_check(const sj *schema, const sj *v, char *path, size_t pcap, char *err,
                  size_t ecap);
/* The "parameters" schema of function name among tools (NULL: none, or no such function);
 * *strict: its "strict": true. */
const sj *st_tool_parameters(const sj *tools, const char *name, int *strict);

#endif
