/* libFuzzer target: the GGUF reader.  Any input must be read from memory without a sanitizer
 * report; a refusal must be ATTN_E_FORMAT or ATTN_E_UNSUPPORTED with a message and *out reset;
 * an accepted input must survive a walk over everything it holds (every entry by index and by
 * key through the getter of its type, every element of every array, every tensor by index and
 * by name with every byte of its data touched), and what the reader says must agree with
 * itself (tensor sizes from the block tables, data inside the input, shapes reversed, lookups
 * finding the same entries).  Any broken promise traps. */
#include "fuzz_util.h"

static size_t sink; /* keeps the reads of the walk */

static int is_int(int t) {
    return (t >= ATTN_GGUF_UINT8 && t <= ATTN_GGUF_INT32) || t == ATTN_GGUF_UINT64 ||
           t == ATTN_GGUF_INT64;
}

static void walk_value(const attn_gguf *g, const attn_gguf_kv *kv) {
    int64_t v;
    double f;
    int b;
    const char *s;
    size_t len;
    attn_status st;
    switch (kv->type) {
    case ATTN_GGUF_STRING: {
        char buf[16];
        FZ_CHECK(attn_gguf_get_str(g, kv->key, &s, &len) == ATTN_OK && len == kv->n);
        for (size_t k = 0; k < len; k++) sink += (unsigned char)s[k];
        st = attn_gguf_get_str_copy(g, kv->key, buf, sizeof buf, &len);
        FZ_CHECK(st == (len < sizeof buf ? ATTN_OK : ATTN_E_INVALID) && strlen(buf) <= len);
        FZ_CHECK(attn_gguf_get_int(g, kv->key, INT64_MIN, INT64_MAX, &v) == ATTN_E_FORMAT);
        break;
    }
    case ATTN_GGUF_BOOL:
        FZ_CHECK(attn_gguf_get_bool(g, kv->key, &b) == ATTN_OK && (b == 0 || b == 1));
        break;
    case ATTN_GGUF_FLOAT32:
    case ATTN_GGUF_FLOAT64:
        FZ_CHECK(attn_gguf_get_float(g, kv->key, &f) == ATTN_OK);
        FZ_CHECK(attn_gguf_get_int(g, kv->key, INT64_MIN, INT64_MAX, &v) == ATTN_E_FORMAT);
        break;
    case ATTN_GGUF_ARRAY: {
        int et = -2;
        uint64_t n = 0;
        const void *data = NULL;
        FZ_CHECK(attn_gguf_get_arr(g, kv->key, &et, &n, &data) == ATTN_OK);
        FZ_CHECK(et == kv->elem_type && n == kv->n && et != ATTN_GGUF_ARRAY);
        FZ_CHECK((et == ATTN_GGUF_STRING) == (data == NULL));
        for (uint64_t i = 0; i < n; i++) {
            if (et == ATTN_GGUF_STRING) {
                FZ_CHECK(attn_gguf_arr_str(g, kv->key, i, &s, &len) == ATTN_OK);
                if (len) sink += (unsigned char)s[0] + (unsigned char)s[len - 1];
            } else if (is_int(et)) {
                st = attn_gguf_arr_int(g, kv->key, i, INT64_MIN, INT64_MAX, &v);
                FZ_CHECK(st == ATTN_OK || (st == ATTN_E_FORMAT && et == ATTN_GGUF_UINT64));
                FZ_CHECK(attn_gguf_arr_float(g, kv->key, i, &f) == ATTN_OK);
            } else if (et == ATTN_GGUF_BOOL) {
                unsigned char c = ((const unsigned char *)data)[i];
                FZ_CHECK(c == 0 || c == 1);
            } else {
                FZ_CHECK(attn_gguf_arr_float(g, kv->key, i, &f) == ATTN_OK);
            }
        }
        FZ_CHECK(attn_gguf_arr_float(g, kv->key, n, &f) != ATTN_OK);
        break;
    }
    default:
        FZ_CHECK(is_int(kv->type));
        st = attn_gguf_get_int(g, kv->key, INT64_MIN, INT64_MAX, &v);
        FZ_CHECK(st == ATTN_OK || (st == ATTN_E_FORMAT && kv->type == ATTN_GGUF_UINT64));
        FZ_CHECK(attn_gguf_get_float(g, kv->key, &f) == ATTN_OK);
        break;
    }
}

static void walk(const attn_gguf *g, const uint8_t *data, size_t size) {
    uint32_t a = attn_gguf_alignment(g);
    FZ_CHECK(attn_gguf_version(g) == 2 || attn_gguf_version(g) == 3);
    FZ_CHECK(a >= 1 && a <= ATTN_GGUF_MAX_ALIGNMENT && (a & (a - 1)) == 0);
    FZ_CHECK(attn_gguf_data_offset(g) % a == 0);
    size_t nkv = attn_gguf_kv_count(g), nt = attn_gguf_tensor_count(g);
    attn_gguf_kv kv, kf;
    FZ_CHECK(attn_gguf_kv_at(g, nkv, &kv) == ATTN_E_INVALID);
    for (size_t i = 0; i < nkv; i++) {
        FZ_CHECK(attn_gguf_kv_at(g, i, &kv) == ATTN_OK);
        FZ_CHECK(kv.offset < size && attn_gguf_type_name(kv.type) != NULL);
        FZ_CHECK(attn_gguf_kv_find(g, kv.key, &kf) == ATTN_OK && kf.offset == kv.offset);
        walk_value(g, &kv);
    }
    attn_gguf_tensor t, u;
    FZ_CHECK(attn_gguf_tensor_at(g, nt, &t) == ATTN_E_INVALID);
    for (size_t i = 0; i < nt; i++) {
        FZ_CHECK(attn_gguf_tensor_at(g, i, &t) == ATTN_OK);
        FZ_CHECK(attn_gguf_tensor_find(g, t.name, &u) == ATTN_OK && u.data == t.data);
        int64_t be, bb, numel = 1;
        FZ_CHECK(attn_qtype_block(t.type, &be, &bb) == ATTN_OK);
        FZ_CHECK(t.n_dims >= 1 && t.n_dims <= ATTN_GGUF_MAX_DIMS);
        for (int d = 0; d < ATTN_GGUF_MAX_DIMS; d++) {
            FZ_CHECK(t.ne[d] >= 0 && (d < t.n_dims || t.ne[d] == 1));
            FZ_CHECK(t.shape[d] == (d < t.n_dims ? t.ne[t.n_dims - 1 - d] : 1));
            numel *= t.ne[d]; /* the reader checked that this does not overflow */
        }
        FZ_CHECK(numel == t.numel && t.ne[0] % be == 0);
        FZ_CHECK((uint64_t)t.nbytes == (uint64_t)(t.numel / be) * (uint64_t)bb);
        FZ_CHECK(t.offset % a == 0 && t.file_offset == attn_gguf_data_offset(g) + t.offset);
        const uint8_t *p = t.data;
        FZ_CHECK(p == data + t.file_offset && t.file_offset <= size &&
                 t.nbytes <= size - t.file_offset);
        for (size_t k = 0; k < t.nbytes; k++) sink += p[k]; /* ASan sees any stray pointer */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    attn_ctx *ctx = fz_ctx(1 << 20, 64, 1 << 16, 1 << 20);
    attn_gguf *g = (attn_gguf *)&ctx; /* must come back NULL on failure */
    attn_status s = attn_gguf_read_memory(ctx, data, size, &g);
    if (s != ATTN_OK) {
        fz_failed(ctx, s);
        FZ_CHECK(s == ATTN_E_FORMAT || s == ATTN_E_UNSUPPORTED);
        FZ_CHECK(g == NULL);
        return 0;
    }
    fz_loaded("gguf");
    walk(g, data, size);
    attn_gguf_free(g);
    return 0;
}
