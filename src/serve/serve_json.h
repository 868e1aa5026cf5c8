/* The server's JSON (src/serve/serve_json.c): a strict parser of request bodies into a small
 * tree (RFC 8259; depth, size and number limits; UTF-8 validated; \u escapes with surrogate
 * pairs) and a growing byte buffer with a JSON string writer for the answers.  No dependency:
 * internal to the library's server (src/serve/server.c); the names below are given the
 * attn__ prefix so that they never meet an application's in the static library. */
#ifndef ATTN_SERVE_JSON_H
#define ATTN_SERVE_JSON_H
#define sj_parse attn__sj_parse
#define sj_free attn__sj_free
#define sj_get attn__sj_get
#define sj_int attn__sj_int
#define sj_utf8_valid_prefix attn__sj_utf8_valid_prefix
#define sb_put attn__sb_put
#define sb_puts attn__sb_puts
#define sb_printf attn__sb_printf
#define sb_json_str attn__sb_json_str
#define sb_json_float attn__sb_json_float
#define sb_free attn__sb_free
#include <stdarg.h>
#include <stddef.h>

#define SJ_MAX_DEPTH 32

typedef enum sj_kind { SJ_NULL, SJ_BOOL, SJ_NUM, SJ_STR, SJ_ARR, SJ_OBJ } sj_kind;

/* One value.  Strings (and keys) are NUL-terminated copies, valid UTF-8, len bytes (they may
 * hold a NUL from \u0000).  Arrays and objects: n children from first along next; an object's
 * children carry their key. */
typedef struct sj {
    sj_kind kind;
    int b;      /* SJ_BOOL */
    double num; /* SJ_NUM: finite */
    const char *s, *key;
    size_t len, klen, n;
    const char *raw; /* the value's text in the parsed document, rawlen bytes */
    size_t rawlen;
    struct sj *first, *next;
} sj;

/* A parsed document: every node and string lives in its arena. */
typedef struct sj_doc {
    struct sj_block *blocks;
    sj *root;
} sj_doc;

/* Parses text[0, len) into doc (doc->root); 1 on success, else 0 with a message in
 * err[0, errcap) ("bad JSON at byte 12: ...").  sj_free releases the document (also after a
 * failure; NULL accepted). */
int sj_parse(sj_doc *doc, const char *text, size_t len, char *err, size_t errcap);
void sj_free(sj_doc *doc);
/* The member key of object o, or NULL (also when o is not an object).  With duplicate keys
 * the last one counts (as most JSON readers do). */
const sj *sj_get(const sj *o, const char *key);
/* 1 when v is a number with an integral value in [lo, hi], stored in *out. */
int sj_int(const sj *v, long long lo, long long hi, long long *out);

/* A growing byte buffer; on out of memory it sets oom and drops further writes. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;
void sb_put(sbuf *b, const void *s, size_t n);
void sb_puts(sbuf *b, const char *s);
void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s[0, n) as a JSON string with its quotes: ", \ and control characters escaped, bytes of
 * invalid UTF-8 written as \ufffd. */
void sb_json_str(sbuf *b, const char *s, size_t n);
/* A float as JSON: %.9g (round-trips a float), NaN and infinities as null. */
void sb_json_float(sbuf *b, float f);
void sb_free(sbuf *b);

/* The length of the longest prefix of s[0, n) that is whole UTF-8 characters (valid ones). */
size_t sj_utf8_valid_prefix(const char *s, size_t n);

#endif
