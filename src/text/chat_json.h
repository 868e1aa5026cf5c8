/* JSON values of chat formatting (src/text/chat_json.c): tool definitions and tool calls parsed
 * into a small tree, and written back as Python's json.dumps writes them, which is what the
 * templates' tojson filter gives under transformers (json.dumps(x, ensure_ascii=False,
 * indent=indent)).
 *
 * The tree keeps what json.dumps needs to give the same text as Python would for the value
 * json.loads makes of the same text: members in their order, integers (any size) apart from
 * floats, a float printed as Python's repr prints it (the shortest digits that read back to
 * the same double; 1e16 -> 1e+16, 0.5 -> 0.5, 1.0 -> 1.0, 1e400 -> Infinity).  Refused (the
 * caller's status, ATTN_E_INVALID): text that is not JSON, a key twice in one object (json.loads
 * would keep one of them), U+0000 in a string, more than 4096 members in one object. */
#ifndef ATTN_TEXT_CHAT_JSON_H
#define ATTN_TEXT_CHAT_JSON_H

#include "internal.h"

typedef enum { CJ_NULL, CJ_BOOL, CJ_INT, CJ_FLOAT, CJ_STR, CJ_ARR, CJ_OBJ } attn__cj_kind;

typedef struct attn__cj {
    attn__cj_kind kind;
    int b;         /* CJ_BOOL */
    const char *s; /* CJ_STR: the decoded UTF-8 (no NUL inside); CJ_INT, CJ_FLOAT: the literal */
    size_t n;      /* its length in bytes */
    const char *key; /* a member of an object: its key (decoded, NUL-terminated) */
    size_t klen;
    size_t count;                 /* CJ_ARR, CJ_OBJ: elements or members */
    struct attn__cj *first, *next; /* children in order */
} attn__cj;

typedef struct attn__cj_doc {
    attn__cj *root;
    char *pool;                /* the decoded strings */
    struct attn__cj_block *blocks; /* the nodes */
} attn__cj_doc;

/* Parses text (NUL-terminated) into doc.  what names the text in messages ("tools",
 * "message 3's tool_calls").  On failure: ATTN_E_INVALID with a message (ATTN_E_NOMEM when
 * out of memory); attn__cj_free is safe on doc either way. */
ATTN__HIDDEN attn_status attn__cj_parse(attn_ctx *ctx, const char *text, const char *what,
                                        attn__cj_doc *doc);
/* One value at the start of text[0, len) (whitespace before it skipped), what follows it left
 * alone: *end is the offset just after the value.  Failures as attn__cj_parse. */
ATTN__HIDDEN attn_status attn__cj_parse_prefix(attn_ctx *ctx, const char *text, size_t len,
                                               const char *what, attn__cj_doc *doc,
                                               size_t *end);
ATTN__HIDDEN void attn__cj_free(attn_ctx *ctx, attn__cj_doc *doc);

/* The member `key` of an object (NULL when v is not an object or has no such member). */
ATTN__HIDDEN const attn__cj *attn__cj_get(const attn__cj *v, const char *key);
/* Python's truth value of the value json.loads gives: false for null, false, 0, 0.0, "", [],
 * {}. */
ATTN__HIDDEN int attn__cj_truthy(const attn__cj *v);
/* Python's len(s) of a string: its code points. */
ATTN__HIDDEN size_t attn__cj_strlen_cp(const char *s, size_t n);

/* Where json.dumps writes: put(o, s, n). */
typedef void (*attn__cj_put)(void *o, const char *s, size_t n);
/* json.dumps(v, ensure_ascii=False, indent=indent) with indent < 0 for None (separators ", "
 * and ": "; with an indent "," and ": " and a newline before each item, as Python does). */
ATTN__HIDDEN void attn__cj_dump(const attn__cj *v, int indent, attn__cj_put put, void *o);
/* json.dumps of a string s[0, n) (its quotes, escapes as Python writes them). */
ATTN__HIDDEN void attn__cj_dump_str(const char *s, size_t n, attn__cj_put put, void *o);
/* Python's repr of the double the literal s[0, n) reads as, into out[32]; its length. */
ATTN__HIDDEN size_t attn__cj_float_repr(const char *s, size_t n, char *out);

#endif
