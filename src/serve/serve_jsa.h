/* An incremental JSON acceptor: the bytes of an answer, fed as they come (a token's piece at a
 * time), are checked to be a prefix of one JSON object (RFC 8259), so that `response_format:
 * {"type": "json_object"}` can keep a model's answer inside JSON (server.c).  Bounded: 64
 * levels of nesting, 16 whitespace bytes in a row, 64 bytes of one number and two digits of its
 * exponent (so it stays a finite double); what goes over is
 * refused like a syntax error.  Strings must be valid UTF-8 (a character may come in pieces,
 * one token after another) and their \u escapes whole surrogate pairs, as sj_parse reads
 * them. */
#ifndef ATTN_SERVE_JSA_H
#define ATTN_SERVE_JSA_H

#include <stddef.h>
#include <stdint.h>

#define ATTN__JSA_DEPTH 64

typedef struct attn__jsa {
    uint8_t stack[ATTN__JSA_DEPTH]; /* open containers: '{' or '[' */
    int depth;
    uint8_t st;   /* the state (serve_jsa.c) */
    uint8_t aux;  /* a literal's next byte index, \u hex digits left, a number's length */
    uint8_t ws;   /* whitespace bytes in a row */
    uint8_t key;  /* the string being read is an object's key */
    uint8_t need, lo, hi; /* UTF-8: continuation bytes still due, the next one's range */
    uint8_t low;  /* a \u high surrogate was read: its low one must follow */
    uint16_t u;   /* the \u escape's value so far */
} attn__jsa;

/* The state before the first byte: a top-level object is expected. */
void attn__jsa_init(attn__jsa *s);
/* Feeds n bytes: 1 if they extend a JSON object prefix (s advanced), 0 if not (s is then left
 * in an unspecified state: feed a copy when the answer may be no). */
int attn__jsa_feed(attn__jsa *s, const char *p, size_t n);
/* 1 once the top-level object is closed. */
int attn__jsa_done(const attn__jsa *s);

#endif
