/* UTF-8, once for the library: the tokenizers (src/text/bpe.c), the JSON reader (src/io/json.c)
 * and the server's JSON (src/serve/serve_json.c). */
#ifndef ATTN_CORE_UTF8_H
#define ATTN_CORE_UTF8_H
#include <stddef.h>
#include <stdint.h>

/* At s[0, n) (n >= 1): the length of the well-formed sequence there (> 0: no overlong form, no
 * surrogate, at most U+10FFFF), or 0 with *bad the length of its maximal invalid subpart (a
 * valid start cut short counts as one subpart) and *cut 1 when that subpart is a valid start
 * that only ran out of bytes. */
static inline size_t attn__utf8_check(const unsigned char *s, size_t n, size_t *bad, int *cut) {
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    size_t need;
    *cut = 0;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F; /* at most U+10FFFF */
    } else {
        *bad = 1;
        return 0;
    }
    size_t i = 1;
    for (; i < need && i < n; i++) {
        unsigned d = s[i];
        if (i == 1 ? d < lo || d > hi : d < 0x80 || d > 0xBF) break;
    }
    if (i == need) return need;
    *bad = i;
    *cut = i == n;
    return 0;
}

/* The length of the well-formed sequence at s[0, n), or 0 (also for n == 0). */
static inline size_t attn__utf8_len(const unsigned char *s, size_t n) {
    size_t bad;
    int cut;
    return n ? attn__utf8_check(s, n, &bad, &cut) : 0;
}

/* The UTF-8 of code point c (at most U+10FFFF) into o; returns its length (1-4). */
static inline size_t attn__utf8_put(uint32_t c, unsigned char *o) {
    if (c < 0x80) return o[0] = (unsigned char)c, 1;
    if (c < 0x800)
        return o[0] = (unsigned char)(0xC0 | c >> 6), o[1] = (unsigned char)(0x80 | (c & 0x3F)), 2;
    if (c < 0x10000) {
        o[0] = (unsigned char)(0xE0 | c >> 12), o[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | c >> 18), o[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F)), o[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

#endif
