/* attn info on a GGUF file: header, metadata (arrays summarised, long strings cut), tensors in
 * file order with their GGML type, dims (GGUF order) and bytes, and a summary by type. */
#define _XOPEN_SOURCE 700
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"

#define STR_SHOWN 60   /* bytes of a string value shown */
#define ELEM_SHOWN 6   /* elements of an array shown */
#define ELEM_STR_SHOWN 24

int attn_cli_is_gguf(const char *path) {
    if (!path || !strcmp(path, "-")) return 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY); /* a FIFO cannot block the open */
    if (fd < 0) return 0;
    struct stat sb;
    char magic[4];
    int yes = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && read(fd, magic, 4) == 4 &&
              !memcmp(magic, "GGUF", 4);
    close(fd);
    return yes;
}

int attn_cli_is_safetensors(const char *path) {
    if (!path || !strcmp(path, "-")) return 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return 0;
    struct stat sb;
    unsigned char h[9];
    int yes = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && read(fd, h, 9) == 9;
    close(fd);
    if (!yes) return 0;
    uint64_t n = 0; /* the header's length, little-endian, then its JSON object */
    for (int i = 7; i >= 0; i--) n = n << 8 | h[i];
    return h[8] == '{' && n >= 2 && n <= (uint64_t)sb.st_size - 8;
}

/* len bytes of s, quoted, escaped as attn_cli_put_escaped does (a NUL as \x00), at most max of
 * them, then how many there were when cut. */
static void put_str(const char *s, size_t len, size_t max) {
    char buf[STR_SHOWN + 1];
    size_t m = len < max ? len : max;
    if (m > STR_SHOWN) m = STR_SHOWN;
    putchar('"');
    for (size_t i = 0; i < m;) {
        size_t k = 0;
        while (i + k < m && s[i + k]) k++;
        memcpy(buf, s + i, k);
        buf[k] = 0;
        attn_cli_put_escaped(stdout, buf);
        i += k;
        if (i < m) { /* a NUL byte */
            printf("\\x00");
            i++;
        }
    }
    putchar('"');
    if (m < len) printf("... (%zu bytes)", len);
}

/* Element i (0 for a scalar) of kv, a number. */
static void put_number(const attn_gguf *g, const attn_gguf_kv *kv, int t, uint64_t i) {
    const char *key = kv->key;
    int arr = kv->type == ATTN_GGUF_ARRAY;
    if (t == ATTN_GGUF_UINT64) { /* every value exactly, from its bytes */
        const unsigned char *p = (const unsigned char *)kv->data + 8 * i;
        unsigned long long u = 0;
        for (int b = 7; b >= 0; b--) u = (u << 8) | p[b];
        printf("%llu", u);
        return;
    }
    if (t == ATTN_GGUF_FLOAT32 || t == ATTN_GGUF_FLOAT64) {
        double f = 0;
        if (arr) attn_gguf_arr_float(g, key, i, &f);
        else attn_gguf_get_float(g, key, &f);
        printf(t == ATTN_GGUF_FLOAT32 ? "%.9g" : "%.17g", f);
        return;
    }
    int64_t v = 0;
    attn_status s = arr ? attn_gguf_arr_int(g, key, i, INT64_MIN, INT64_MAX, &v)
                        : attn_gguf_get_int(g, key, INT64_MIN, INT64_MAX, &v);
    if (s == ATTN_OK) printf("%lld", (long long)v);
}

static void put_value(const attn_gguf *g, const attn_gguf_kv *kv) {
    const char *s;
    size_t len;
    if (kv->type == ATTN_GGUF_STRING) {
        if (attn_gguf_get_str(g, kv->key, &s, &len) == ATTN_OK) put_str(s, len, STR_SHOWN);
        return;
    }
    if (kv->type == ATTN_GGUF_BOOL) {
        int b = 0;
        attn_gguf_get_bool(g, kv->key, &b);
        printf(b ? "true" : "false");
        return;
    }
    if (kv->type != ATTN_GGUF_ARRAY) {
        put_number(g, kv, kv->type, 0);
        return;
    }
    int et = kv->elem_type;
    const unsigned char *data = kv->data;
    printf("%llu: [", (unsigned long long)kv->n);
    for (uint64_t i = 0; i < kv->n && i < ELEM_SHOWN; i++) {
        if (i) printf(", ");
        if (et == ATTN_GGUF_STRING) {
            if (attn_gguf_arr_str(g, kv->key, i, &s, &len) == ATTN_OK)
                put_str(s, len, ELEM_STR_SHOWN);
        } else if (et == ATTN_GGUF_BOOL) {
            printf(data[i] ? "true" : "false");
        } else {
            put_number(g, kv, et, i);
        }
    }
    printf(kv->n > ELEM_SHOWN ? ", ...]" : "]");
}

int attn_cli_info_gguf(attn_ctx *ctx, const char *path) {
    attn_gguf *g = NULL;
    if (attn_gguf_open(ctx, path, &g) != ATTN_OK) {
        fprintf(stderr, "attn info: ");
        attn_cli_put_escaped(stderr, attn_ctx_errmsg(ctx));
        fputc('\n', stderr);
        return 1;
    }
    size_t nkv = attn_gguf_kv_count(g), nt = attn_gguf_tensor_count(g);
    printf("%s: GGUF version %u, alignment %u, %zu metadata entr%s, %zu tensor%s, data from "
           "byte %llu\n",
           path, attn_gguf_version(g), attn_gguf_alignment(g), nkv, nkv == 1 ? "y" : "ies", nt,
           nt == 1 ? "" : "s", (unsigned long long)attn_gguf_data_offset(g));
    for (size_t i = 0; i < nkv && !ferror(stdout); i++) {
        attn_gguf_kv kv;
        if (attn_gguf_kv_at(g, i, &kv) != ATTN_OK) continue;
        char type[32];
        if (kv.type == ATTN_GGUF_ARRAY)
            snprintf(type, sizeof type, "ARRAY[%s]", attn_gguf_type_name(kv.elem_type));
        else
            snprintf(type, sizeof type, "%s", attn_gguf_type_name(kv.type));
        printf("  ");
        size_t w = attn_cli_put_escaped(stdout, kv.key);
        printf("%*s %-14s ", w < 40 ? (int)(40 - w) : 0, "", type);
        put_value(g, &kv);
        printf("\n");
    }
    if (nt) printf("tensors (dims in GGUF order, ne[0] contiguous: the row-major shape is "
                   "reversed):\n");
    uint64_t total = 0;
    size_t per_type[64] = {0};
    for (size_t i = 0; i < nt && !ferror(stdout); i++) {
        attn_gguf_tensor t;
        if (attn_gguf_tensor_at(g, i, &t) != ATTN_OK) continue;
        char dims[128];
        int k = snprintf(dims, sizeof dims, "[");
        for (int d = 0; d < t.n_dims; d++)
            k += snprintf(dims + k, sizeof dims - (size_t)k, d ? ", %lld" : "%lld",
                          (long long)t.ne[d]);
        snprintf(dims + k, sizeof dims - (size_t)k, "]");
        printf("  ");
        size_t w = attn_cli_put_escaped(stdout, t.name);
        printf("%*s %-6s %-26s %12zu bytes\n", w < 40 ? (int)(40 - w) : 0, "",
               attn_qtype_name(t.type), dims, t.nbytes);
        total += t.nbytes;
        if (t.type >= 0 && t.type < 64) per_type[t.type]++;
    }
    printf("%zu tensor%s, %llu bytes (%.1f MiB)", nt, nt == 1 ? "" : "s",
           (unsigned long long)total, (double)total / (1024.0 * 1024.0));
    const char *sep = ": ";
    for (int t = 0; t < 64; t++)
        if (per_type[t]) {
            printf("%s%s %zu", sep, attn_qtype_name(t), per_type[t]);
            sep = ", ";
        }
    printf("\n");
    attn_gguf_free(g);
    return 0;
}
