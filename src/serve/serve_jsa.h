/* An incremental JSON acceptor: the bytes of an answer, fed as they come (a token's piece at a
 * time), are checked to be a prefix of one JSON object (RFC 8259), and with a compiled schema a
 * prefix of an object that fits it, so that `response_format` can keep a model's answer inside
 * JSON or a JSON schema (server.c).  Bounded: 32 levels of nesting, 16 whitespace bytes in a
 * row with at most one newline among them (pretty-printing needs no more; a model kept from
 * what it would write would otherwise fill blank lines), none before the object, 64 bytes of
 * one number and an exponent of at most 99 (so it stays a finite double); what goes over is
 * refused like a syntax error.  Strings must be valid UTF-8 (a character may
 * come in pieces, one token after another) and their \u escapes whole surrogate pairs, as
 * sj_parse reads them.
 *
 * The schemas (attn__jss_compile): a JSON Schema subset, enforced byte by byte:
 *   type (a name or a list of names: object, array, string, number, integer, boolean, null),
 *   properties, required, additionalProperties (false, true or a schema; absent: true, or
 *   false for a strict schema, as OpenAI's strict mode requires it written),
 *   items, minItems, maxItems, enum and const (strings, numbers, booleans, null),
 *   anyOf / oneOf whose branches start with different characters (Optional[X]: X or null),
 *   $ref to "#", "#/$defs/NAME" or "#/definitions/NAME" (recursion allowed).
 * Property names are matched as written (no escapes).  Other keywords (format, pattern,
 * minLength, minimum ...) are not enforced; allOf, not, if/then/else and ambiguous anyOf are
 * refused by name. */
#ifndef ATTN_SERVE_JSA_H
#define ATTN_SERVE_JSA_H

#include <stddef.h>
#include <stdint.h>

#include "serve_json.h"

#define ATTN__JSA_DEPTH 32

typedef struct attn__jss attn__jss; /* a compiled schema */

typedef struct attn__jsa {
    const attn__jss *sc; /* NULL: any JSON object */
    int depth;
    uint8_t stack[ATTN__JSA_DEPTH]; /* open containers: '{' or '[' */
    int32_t node[ATTN__JSA_DEPTH];  /* with a schema: each container's node */
    uint64_t seen[ATTN__JSA_DEPTH]; /* objects: the properties written */
    uint32_t count[ATTN__JSA_DEPTH]; /* arrays: the items begun */
    int32_t vnode; /* the node of the next value (or of the scalar being read) */
    int32_t prop;  /* the property whose key is being read or was just read (-1: another) */
    uint8_t st;    /* the state (serve_jsa.c) */
    uint8_t aux;   /* a literal's next byte index, \u hex digits left, a number's length */
    uint8_t ws;    /* whitespace bytes in a row */
    uint8_t nl;    /* newlines among them */
    uint8_t key;   /* the string being read is an object's key */
    uint8_t lit;   /* the literal being read (true, false, null) */
    uint8_t need, lo, hi; /* UTF-8: continuation bytes still due, the next one's range */
    uint8_t low;   /* a \u high surrogate was read: its low one must follow */
    uint8_t ion;   /* the number must be an integer */
    uint8_t en;    /* a key or an enum value is being matched: its bytes in buf */
    uint16_t u;    /* the \u escape's value so far; a number's exponent */
    uint8_t blen;
    char buf[64];
} attn__jsa;

/* The state before the first byte (sc NULL: any object): a top-level object is expected. */
void attn__jsa_init(attn__jsa *s, const attn__jss *sc);
/* Feeds n bytes: 1 if they extend an accepted prefix (s advanced), 0 if not (s is then left in
 * an unspecified state: feed a copy when the answer may be no). */
int attn__jsa_feed(attn__jsa *s, const char *p, size_t n);
/* attn__jsa_feed up to the end of the top-level object: the bytes after it are not looked at
 * (a tool call's arguments, followed by the call's own closing text); *used: the bytes fed. */
int attn__jsa_feed_upto(attn__jsa *s, const char *p, size_t n, size_t *used);
/* *d = *s, copying only what s uses (its open containers, its key or enum bytes): the cheap
 * copy to try a token on. */
void attn__jsa_copy(attn__jsa *d, const attn__jsa *s);
/* 1 once the top-level object is closed. */
int attn__jsa_done(const attn__jsa *s);

/* Compiles schema (a parsed JSON Schema; it need not outlive the result) into *out (free with
 * attn__jss_free, which takes NULL).  0 with a message in err when it uses what is refused
 * above, is not an object schema at its root, or exceeds the bounds (1,024 nodes, 64
 * properties an object, 256 enum members of at most 62 bytes, names of at most 62 bytes). */
int attn__jss_compile(const sj *schema, int strict, attn__jss **out, char *err, size_t ecap);
void attn__jss_free(attn__jss *s);

#endif
