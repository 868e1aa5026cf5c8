/* A small, strict pull parser for JSON (RFC 8259), enough for safetensors headers.
 *
 * Why a pull parser and not a tree: a hostile header of 100 MB of "[0,0,0,..." would make a
 * tree of tens of millions of nodes; pulling values one at a time lets the caller keep only
 * what it needs, so memory stays proportional to what the caller stores.
 *
 * The input is a byte buffer that is NOT NUL-terminated; nothing reads outside it.  Strings are
 * decoded (all escapes, \uXXXX with surrogate pairs, raw UTF-8 validated) into a pool owned by
 * the reader that never moves, so returned pointers stay valid until attn__json_close (or for
 * as long as the caller keeps the pool taken with attn__json_take_pool).  The pool is sized
 * from the input, so decoding never needs to grow it.
 *
 * Every failure records ATTN_E_FORMAT (or ATTN_E_NOMEM) in the context with the byte offset;
 * after a failure every further call fails at once with the same status, so callers may check
 * only where convenient.  Duplicate object keys are the caller's business (it sees every key);
 * attn__json_skip checks syntax only.
 */
#ifndef ATTN_IO_JSON_H
#define ATTN_IO_JSON_H

#include "internal.h"

#define ATTN__JSON_MAX_DEPTH 64

typedef enum attn__json_kind {
    ATTN__JSON_NULL = 0,
    ATTN__JSON_BOOL = 1,
    ATTN__JSON_NUMBER = 2,
    ATTN__JSON_STRING = 3,
    ATTN__JSON_ARRAY = 4,
    ATTN__JSON_OBJECT = 5
} attn__json_kind;

typedef struct attn__json_reader {
    attn_ctx *ctx;
    const unsigned char *text;
    size_t len, pos;
    const char *what;  /* names the document in messages, e.g. "safetensors header" */
    size_t base;       /* added to offsets in messages (the header starts at file byte 8) */
    char *pool;        /* decoded strings, NUL-terminated, capacity len + 1 */
    size_t pool_used, pool_cap;
    attn_status status; /* sticky: first failure */
    int depth;
    unsigned char stack[ATTN__JSON_MAX_DEPTH]; /* open containers: '{' or '[' */
    unsigned char fresh[ATTN__JSON_MAX_DEPTH]; /* 1 until the container's first element */
} attn__json_reader;

/* Starts reading text[0, len).  Allocates the string pool through ctx (ctx must not be NULL). */
ATTN__HIDDEN attn_status attn__json_open(attn__json_reader *r, attn_ctx *ctx, const void *text,
                                         size_t len, const char *what, size_t base);
/* Frees the pool unless it was taken. */
ATTN__HIDDEN void attn__json_close(attn__json_reader *r);
/* Hands the pool (every string returned so far) to the caller, who frees it with attn__free. */
ATTN__HIDDEN char *attn__json_take_pool(attn__json_reader *r);

/* Kind of the next value, not consumed. */
ATTN__HIDDEN attn_status attn__json_peek(attn__json_reader *r, attn__json_kind *kind);
/* Name of a kind for messages ("an array"). */
ATTN__HIDDEN const char *attn__json_kind_name(attn__json_kind kind);

/* Consumes '{'.  Then call attn__json_member until *more is 0; after each member with
 * *more = 1 exactly one value must be consumed.  key may be NULL to validate without keeping
 * the key; *key is NUL-terminated and *key_len excludes the NUL (the key may hold NULs). */
ATTN__HIDDEN attn_status attn__json_object_begin(attn__json_reader *r);
ATTN__HIDDEN attn_status attn__json_member(attn__json_reader *r, int *more, const char **key,
                                           size_t *key_len);
/* Consumes '['.  Then call attn__json_element until *more is 0, consuming one value after
 * each *more = 1. */
ATTN__HIDDEN attn_status attn__json_array_begin(attn__json_reader *r);
ATTN__HIDDEN attn_status attn__json_element(attn__json_reader *r, int *more);

/* Scalars.  attn__json_int refuses fractions, exponents and values outside int64. */
ATTN__HIDDEN attn_status attn__json_string(attn__json_reader *r, const char **s, size_t *len);
ATTN__HIDDEN attn_status attn__json_int(attn__json_reader *r, int64_t *v);
/* A number as double (fractions and exponents too, as strtod reads the literal); key (may be
 * NULL) names it in the message when the value is not a number. */
ATTN__HIDDEN attn_status attn__json_double(attn__json_reader *r, const char *key, double *v);
ATTN__HIDDEN attn_status attn__json_bool(attn__json_reader *r, int *v);
ATTN__HIDDEN attn_status attn__json_null(attn__json_reader *r);
/* A bool (1 / 0), or null (-1): the optional flags of tokenizer and model configs. */
ATTN__HIDDEN attn_status attn__json_flag(attn__json_reader *r, int *v);
/* Skips one value of any kind (syntax checked, nothing stored). */
ATTN__HIDDEN attn_status attn__json_skip(attn__json_reader *r);
/* Requires that every container is closed and only whitespace remains. */
ATTN__HIDDEN attn_status attn__json_finish(attn__json_reader *r);

/* 1 if s[0, n) is well-formed UTF-8 (no overlong forms, no surrogates, at most U+10FFFF). */
ATTN__HIDDEN int attn__json_utf8_valid(const char *s, size_t n);

#endif
