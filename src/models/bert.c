/* BERT sentence encoder (attn_bert_*): a Hugging Face / sentence-transformers folder as it
 * is, the embeddings, pooling and normalisation.  The encoder is the shared post-norm encoder
 * layer (GELU, key padding masks; src/layers/encoder.c) over BERT's parameters, the
 * tokenizer the WordPiece kind of attn_bpe (attn_bpe_load_wordpiece: src/text/wordpiece.c and
 * bpe.c).  See attn_bert_load in attn.h for the contract and the limits of the tables. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/json.h"
#include "file.h"
#include "../layers/layers.h"
#include "pool.h"
#include "../text/bpe.h"

/* ---- model -------------------------------------------------------------------------------- */
typedef struct bert_layer {
    attn__lin q, k, v, ao, inter, out;
    attn__ln ln1, ln2;
    /* the shared encoder layer over these, q, k and v stacked into its in_proj [3E, E] (a copy
     * in m->extra made after loading): out_proj = ao, linear1 = inter, linear2 = out */
    attn__block enc;
} bert_layer;

typedef struct bert_impl {
    float *wemb, *pemb, *temb; /* [V, E], [P, E], [T, E] */
    attn__ln eln;
    bert_layer *layers;        /* follow this struct in the same allocation */
} bert_impl;

struct attn_bert {
    attn_module *m;
    attn_free_fn free;
    void *alloc_user;
    attn_bert_info info;
    attn_bpe *tok; /* the tokenizer (attn_bpe_load_wordpiece) */
    int32_t cls, sep, pad;
    /* the four matrices of each layer (in_proj, attention output, intermediate, output)
     * packed (attn__weight_pack) as the dtype runs them: F32 (from the load) the float GEMM's
     * panels beside the rows, BF16 / F16 (attn_bert_set_dtype) rounded; described in the
     * encoder layers' attn__weight (pw) */
    attn_dtype dtype;
    void *lw; /* all packed matrices */
};

static void use_rows(attn_bert *b);
static attn_status pack_layers(attn_ctx *ctx, attn_bert *b, attn_dtype dtype);

static void bfree(attn_bert *b, void *p) {
    if (p) b->free(b->alloc_user, p);
}

void attn_bert_free(attn_bert *b) {
    if (!b) return;
    attn_module *m = b->m;
    attn_bpe_free(b->tok);
    bfree(b, b->lw);
    b->free(b->alloc_user, b);
    attn_module_free(m);
}

/* ---- small file and JSON helpers ---------------------------------------------------------- */
static int path_join(char *buf, size_t n, const char *dir, const char *name) {
    return snprintf(buf, n, "%s/%s", dir, name) < (int)n;
}

/* Reads a whole regular file (NUL-terminated); *data NULL and ATTN_OK with *missing = 1 when
 * it does not exist.  Directories, FIFOs and devices are refused by type; text files of a
 * model folder are bounded by ATTN_LIMIT_TEXT_BYTES. */
static attn_status read_file(attn_ctx *ctx, const char *path, char **data, size_t *len,
                             int *missing) {
    *data = NULL;
    *len = 0;
    if (missing) *missing = 0;
    unsigned char *p = NULL;
    attn_status st = attn__text_file_read(ctx, path, "model file", missing != NULL, &p, len);
    if (st == ATTN_OK && !p && missing) {
        *missing = 1;
        return ATTN_OK;
    }
    *data = (char *)p;
    return st;
}

/* An integer member; a wrong type or a value outside int64 is refused naming the key. */
static attn_status json_int_named(attn__json_reader *r, const char *key, int64_t *v) {
    attn_status st = attn__json_int(r, v);
    if (st) return attn__fail(r->ctx, st, "%s %s: %s", r->what, key, attn_ctx_errmsg(r->ctx));
    return ATTN_OK;
}

/* ---- config.json --------------------------------------------------------------------------- */
typedef struct bert_cfg {
    int64_t hidden, heads, layers, inter, maxpos, types, vocab, pad_id;
    double eps;
} bert_cfg;

static attn_status parse_config(attn_ctx *ctx, const char *dir, bert_cfg *c) {
    char path[4096];
    ATTN_FAIL_IF(!path_join(path, sizeof path, dir, "config.json"), ctx, ATTN_E_INVALID,
                 "model folder path too long");
    char *data;
    size_t len;
    int missing;
    ATTN_TRY(read_file(ctx, path, &data, &len, &missing));
    ATTN_FAIL_IF(missing, ctx, ATTN_E_NOT_FOUND,
                 "%s: missing config.json (not a Hugging Face model folder)", dir);
    memset(c, 0, sizeof *c);
    c->hidden = c->heads = c->layers = c->inter = c->maxpos = c->vocab = -1;
    c->types = 2;
    c->eps = 1e-12;
    attn__json_reader r;
    attn_status st = attn__json_open(&r, ctx, data, len, "config.json", 0);
    if (st) goto done;
    st = attn__json_object_begin(&r);
    while (st == ATTN_OK) {
        int more;
        const char *key;
        if ((st = attn__json_member(&r, &more, &key, NULL)) || !more) break;
        int64_t *iv = !strcmp(key, "hidden_size")               ? &c->hidden
                      : !strcmp(key, "num_attention_heads")     ? &c->heads
                      : !strcmp(key, "num_hidden_layers")       ? &c->layers
                      : !strcmp(key, "intermediate_size")       ? &c->inter
                      : !strcmp(key, "max_position_embeddings") ? &c->maxpos
                      : !strcmp(key, "type_vocab_size")         ? &c->types
                      : !strcmp(key, "vocab_size")              ? &c->vocab
                      : !strcmp(key, "pad_token_id")            ? &c->pad_id
                                                                : NULL;
        if (iv) {
            st = json_int_named(&r, key, iv);
        } else if (!strcmp(key, "layer_norm_eps")) {
            st = attn__json_double(&r, "layer_norm_eps", &c->eps);
            if (st)
                st = attn__fail(ctx, st, "config.json layer_norm_eps: %s", attn_ctx_errmsg(ctx));
        } else if (!strcmp(key, "hidden_act") || !strcmp(key, "model_type") ||
                   !strcmp(key, "position_embedding_type")) {
            const char *s;
            if ((st = attn__json_string(&r, &s, NULL))) break;
            if (!strcmp(key, "hidden_act") && strcmp(s, "gelu"))
                st = attn__fail(ctx, ATTN_E_UNSUPPORTED,
                                "%s: unsupported hidden_act \"%s\" (only \"gelu\")", path, s);
            else if (!strcmp(key, "model_type") && strcmp(s, "bert"))
                st = attn__fail(ctx, ATTN_E_UNSUPPORTED,
                                "%s: unsupported model_type \"%s\" (only \"bert\")", path, s);
            else if (!strcmp(key, "position_embedding_type") && strcmp(s, "absolute"))
                st = attn__fail(ctx, ATTN_E_UNSUPPORTED,
                                "%s: unsupported position_embedding_type \"%s\"", path, s);
        } else {
            st = attn__json_skip(&r);
        }
    }
    if (st == ATTN_OK) st = attn__json_finish(&r);
    attn__json_close(&r);
    if (st) goto done;
    {
        const char *names[] = {"hidden_size", "num_attention_heads", "num_hidden_layers",
                               "intermediate_size", "max_position_embeddings", "vocab_size"};
        int64_t vals[] = {c->hidden, c->heads, c->layers, c->inter, c->maxpos, c->vocab};
        for (int i = 0; i < 6; i++)
            if (vals[i] <= 0 || vals[i] > (1 << 24)) {
                if (vals[i] == -1)
                    st = attn__fail(ctx, ATTN_E_FORMAT, "%s: %s is missing", path, names[i]);
                else
                    st = attn__fail(ctx, ATTN_E_FORMAT, "config.json %s %lld is out of range "
                                    "[1, %d]", names[i], (long long)vals[i], 1 << 24);
                goto done;
            }
        /* the layer array and the vocabulary tables are sized from these before any tensor
         * is seen: the named limits bound them */
        int64_t ll = attn_ctx_limit(ctx, ATTN_LIMIT_LAYERS);
        int64_t vl = attn_ctx_limit(ctx, ATTN_LIMIT_VOCAB);
        if (c->layers > ll || c->vocab > vl) {
            int lay = c->layers > ll;
            st = attn__fail(ctx, ATTN_E_UNSUPPORTED, "config.json %s %lld is over %s (%lld)",
                            lay ? "num_hidden_layers" : "vocab_size",
                            (long long)(lay ? c->layers : c->vocab),
                            lay ? "ATTN_LIMIT_LAYERS" : "ATTN_LIMIT_VOCAB",
                            (long long)(lay ? ll : vl));
            goto done;
        }
        if (c->types <= 0 || c->types > (1 << 24) || c->hidden % c->heads ||
            !(c->eps > 0 && c->eps < 1) ||
            c->pad_id < 0) {
            st = attn__fail(ctx, ATTN_E_FORMAT,
                            "%s: inconsistent config (type_vocab_size, hidden_size divisible "
                            "by num_attention_heads, layer_norm_eps, pad_token_id)", path);
            goto done;
        }
    }
done:
    attn__free(ctx, data);
    return st;
}

/* ---- the tokenizer ------------------------------------------------------------------------ */
/* vocab.txt and tokenizer_config.json (attn_bpe_load_wordpiece); the options and special ids
 * into b->info and b. */
static attn_status load_tokenizer(attn_ctx *ctx, attn_bert *b, const char *dir) {
    ATTN_TRY(attn_bpe_load_wordpiece(ctx, dir, &b->tok));
    attn_bpe_info ti;
    attn_bpe_get_info(b->tok, &ti);
    ATTN_FAIL_IF(ti.vocab_size > b->info.vocab_size, ctx, ATTN_E_FORMAT,
                 "%.300s/vocab.txt has %lld tokens, more than config.json's vocab_size %lld",
                 dir, (long long)ti.vocab_size, (long long)b->info.vocab_size);
    b->info.do_lower_case = ti.lowercase;
    b->info.strip_accents = ti.strip_accents;
    b->info.tokenize_chinese_chars = ti.handle_chinese_chars;
    b->cls = ti.cls_id, b->sep = ti.sep_id, b->pad = ti.pad_id;
    return ATTN_OK;
}

/* ---- sentence_bert_config.json, modules.json, pooling ------------------------------------- */
/* Reads an object of the file at dir/name, calling fn for each key (fn consumes the value). */
typedef attn_status (*member_fn)(attn_ctx *ctx, attn__json_reader *r, const char *key,
                                 void *user);
static attn_status parse_object_file(attn_ctx *ctx, const char *dir, const char *name,
                                     member_fn fn, void *user, int *missing) {
    char path[4096];
    char *data;
    size_t len;
    ATTN_FAIL_IF(!path_join(path, sizeof path, dir, name), ctx, ATTN_E_INVALID,
                 "model folder path too long");
    ATTN_TRY(read_file(ctx, path, &data, &len, missing));
    if (*missing) return ATTN_OK;
    attn__json_reader r;
    attn_status st = attn__json_open(&r, ctx, data, len, name, 0);
    if (st == ATTN_OK) st = attn__json_object_begin(&r);
    while (st == ATTN_OK) {
        int more;
        const char *key;
        if ((st = attn__json_member(&r, &more, &key, NULL)) || !more) break;
        st = fn(ctx, &r, key, user);
    }
    if (st == ATTN_OK) st = attn__json_finish(&r);
    attn__json_close(&r);
    attn__free(ctx, data);
    return st;
}

static attn_status sbert_member(attn_ctx *ctx, attn__json_reader *r, const char *key,
                                void *user) {
    attn_bert *b = user;
    if (!strcmp(key, "max_seq_length")) return json_int_named(r, key, &b->info.max_seq_length);
    if (!strcmp(key, "do_lower_case")) {
        int v;
        ATTN_TRY(attn__json_flag(r, &v));
        if (v == 1) b->info.do_lower_case = 1;
        return ATTN_OK;
    }
    return attn__json_skip(r);
}

typedef struct pool_cfg {
    int cls, mean, max, other;
    char other_name[64];
} pool_cfg;

static attn_status pool_member(attn_ctx *ctx, attn__json_reader *r, const char *key,
                               void *user) {
    pool_cfg *p = user;
    attn__json_kind k;
    ATTN_TRY(attn__json_peek(r, &k));
    if (k == ATTN__JSON_BOOL && !strncmp(key, "pooling_mode_", 13)) {
        int v;
        ATTN_TRY(attn__json_bool(r, &v));
        if (!strcmp(key, "pooling_mode_cls_token")) p->cls = v;
        else if (!strcmp(key, "pooling_mode_mean_tokens")) p->mean = v;
        else if (!strcmp(key, "pooling_mode_max_tokens")) p->max = v;
        else if (v && !p->other) {
            p->other = 1;
            snprintf(p->other_name, sizeof p->other_name, "%s", key);
        }
        return ATTN_OK;
    }
    return attn__json_skip(r);
}

/* Whether a relative path stays below its folder: not absolute, no ".." component. */
static int path_inside(const char *p) {
    if (p[0] == '/') return 0;
    for (const char *c = p; *c;) {
        size_t n = strcspn(c, "/");
        if (n == 2 && c[0] == '.' && c[1] == '.') return 0;
        c += n;
        if (*c) c++;
    }
    return 1;
}

/* modules.json: [{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.X"}, ...] */
static attn_status parse_modules(attn_ctx *ctx, attn_bert *b, const char *dir, char *pool_dir,
                                 size_t pool_dir_n, int *have) {
    char path[4096];
    char *data;
    size_t len;
    ATTN_FAIL_IF(!path_join(path, sizeof path, dir, "modules.json"), ctx, ATTN_E_INVALID,
                 "model folder path too long");
    ATTN_TRY(read_file(ctx, path, &data, &len, have));
    *have = !*have;
    pool_dir[0] = 0;
    if (!*have) return ATTN_OK;
    attn__json_reader r;
    attn_status st = attn__json_open(&r, ctx, data, len, "modules.json", 0);
    if (st == ATTN_OK) st = attn__json_array_begin(&r);
    int seen_transformer = 0;
    while (st == ATTN_OK) {
        int more;
        if ((st = attn__json_element(&r, &more)) || !more) break;
        if ((st = attn__json_object_begin(&r))) break;
        const char *type = "", *mpath = "";
        for (;;) {
            const char *key;
            if ((st = attn__json_member(&r, &more, &key, NULL)) || !more) break;
            attn__json_kind k;
            if ((st = attn__json_peek(&r, &k))) break;
            if (k == ATTN__JSON_STRING && !strcmp(key, "type"))
                st = attn__json_string(&r, &type, NULL);
            else if (k == ATTN__JSON_STRING && !strcmp(key, "path"))
                st = attn__json_string(&r, &mpath, NULL);
            else
                st = attn__json_skip(&r);
            if (st) break;
        }
        if (st) break;
        const char *t = strrchr(type, '.') ? strrchr(type, '.') + 1 : type;
        if (!strcmp(t, "Transformer")) {
            seen_transformer = 1;
        } else if (!strcmp(t, "Pooling")) {
            if (!path_inside(mpath))
                st = attn__fail(ctx, ATTN_E_FORMAT, "%s: Pooling path \"%.200s\" leaves the "
                                "model folder (absolute, or a \"..\" component)", path, mpath);
            else if (snprintf(pool_dir, pool_dir_n, "%s", mpath) >= (int)pool_dir_n)
                st = attn__fail(ctx, ATTN_E_INVALID, "modules.json: pooling path too long");
        } else if (!strcmp(t, "Normalize")) {
            b->info.normalize = 1;
        } else {
            st = attn__fail(ctx, ATTN_E_UNSUPPORTED,
                            "%s: unsupported module type \"%s\" (supported: Transformer, "
                            "Pooling, Normalize)", path, type);
        }
    }
    if (st == ATTN_OK) st = attn__json_finish(&r);
    attn__json_close(&r);
    attn__free(ctx, data);
    if (st == ATTN_OK && !seen_transformer)
        st = attn__fail(ctx, ATTN_E_UNSUPPORTED, "%s: no Transformer module", path);
    return st;
}

/* ---- the module ----------------------------------------------------------------------------- */
static attn_status build_module(attn_ctx *ctx, const bert_cfg *c, attn_module **out) {
    attn_module *m;
    size_t isz = sizeof(bert_impl) + (size_t)c->layers * sizeof(bert_layer);
    ATTN_TRY(attn__module_new(ctx, ATTN__BERT, isz, &m));
    bert_impl *q = m->impl;
    q->layers = (bert_layer *)(q + 1);
    int64_t E = c->hidden;
    float eps = (float)c->eps;
    attn_status st = attn__param_reg(ctx, m, "", "embeddings.word_embeddings.weight", &q->wemb,
                                     0, 2, c->vocab, E, 0);
    if (!st) st = attn__param_reg(ctx, m, "", "embeddings.position_embeddings.weight", &q->pemb,
                                  0, 2, c->maxpos, E, 0);
    if (!st) st = attn__param_reg(ctx, m, "", "embeddings.token_type_embeddings.weight",
                                  &q->temb, 0, 2, c->types, E, 0);
    if (!st) st = attn__ln_reg(ctx, m, "", "embeddings.LayerNorm", &q->eln, E, eps, 1);
    for (int64_t i = 0; i < c->layers && !st; i++) {
        char p[96];
        snprintf(p, sizeof p, "encoder.layer.%lld.", (long long)i);
        bert_layer *l = &q->layers[i];
        st = attn__lin_reg(ctx, m, p, "attention.self.query", &l->q, E, E, 1);
        if (!st) st = attn__lin_reg(ctx, m, p, "attention.self.key", &l->k, E, E, 1);
        if (!st) st = attn__lin_reg(ctx, m, p, "attention.self.value", &l->v, E, E, 1);
        if (!st) st = attn__lin_reg(ctx, m, p, "attention.output.dense", &l->ao, E, E, 1);
        if (!st) st = attn__ln_reg(ctx, m, p, "attention.output.LayerNorm", &l->ln1, E, eps, 1);
        if (!st) st = attn__lin_reg(ctx, m, p, "intermediate.dense", &l->inter, E, c->inter, 1);
        if (!st) st = attn__lin_reg(ctx, m, p, "output.dense", &l->out, c->inter, E, 1);
        if (!st) st = attn__ln_reg(ctx, m, p, "output.LayerNorm", &l->ln2, E, eps, 1);
    }
    if (st) {
        attn_module_free(m);
        return st;
    }
    ATTN_TRY(attn__module_finish(ctx, m));
    *out = m;
    return ATTN_OK;
}

/* One [3E, E] projection per layer instead of three [E, E] ones (one GEMM for q, k and v),
 * and the shared encoder layer over the parameters: post-norm, GELU, no dropout. */
static attn_status bind_layers(attn_ctx *ctx, attn_module *m, const bert_cfg *c) {
    bert_impl *q = m->impl;
    const int64_t E = c->hidden;
    size_t per = (size_t)(3 * E * E + 3 * E);
    float *w = attn__malloc(ctx, (size_t)c->layers * per * sizeof(float));
    ATTN_FAIL_IF(!w, ctx, ATTN_E_NOMEM, "out of memory (stacked projections)");
    m->extra = w;
    attn_transformer_config tc = attn_transformer_defaults(E, c->heads);
    tc.dim_feedforward = c->inter;
    tc.dropout = 0.0f;
    tc.activation = ATTN_ACT_GELU;
    tc.layer_norm_eps = (float)c->eps;
    tc.num_encoder_layers = tc.num_decoder_layers = 0;
    for (int64_t i = 0; i < c->layers; i++) {
        bert_layer *l = &q->layers[i];
        float *wi = w + (size_t)i * per, *bi = wi + 3 * E * E;
        const attn__lin *src[3] = {&l->q, &l->k, &l->v};
        for (int k = 0; k < 3; k++) {
            memcpy(wi + k * E * E, src[k]->weight, (size_t)(E * E) * sizeof(float));
            memcpy(bi + k * E, src[k]->bias, (size_t)E * sizeof(float));
        }
        attn__block *e = &l->enc;
        memset(e, 0, sizeof *e);
        e->E = E, e->act = tc.activation; /* post-norm, no dropout at inference */
        attn__attention_mha_bind(&e->at[0], E, c->heads, wi, bi, l->ao.weight, l->ao.bias);
        e->l1 = l->inter, e->l2 = l->out;
        e->norm[ATTN__SUB_SELF] = l->ln1, e->norm[ATTN__SUB_FFN] = l->ln2;
    }
    return ATTN_OK;
}

attn_status attn_bert_load(attn_ctx *ctx, const char *dir, attn_bert **out) {
    if (!ctx || !dir || !out)
        return attn__fail(ctx, ATTN_E_INVALID, "attn_bert_load: NULL argument");
    *out = NULL;
    bert_cfg c;
    ATTN_TRY(parse_config(ctx, dir, &c));
    /* the weights first: the module is built from them (each parameter must be there with
     * the shape config.json gives it as it is registered), never from config.json alone */
    attn_st *sf = NULL;
    attn_status st = attn__st_read_folder(ctx, dir, &sf);
    ATTN_TRY(st);
    attn_st_tensor ti;
    const char *prefix =
        attn_st_find(sf, "bert.embeddings.word_embeddings.weight", &ti) == ATTN_OK ? "bert."
                                                                                   : "";
    attn_module *m;
    attn__param_source(ctx, sf, prefix);
    st = build_module(ctx, &c, &m);
    attn__param_source(ctx, NULL, NULL);
    if (st) {
        attn_st_free(sf);
        return st;
    }
    attn_bert *b = attn__calloc(ctx, 1, sizeof *b);
    if (!b) {
        attn_st_free(sf);
        attn_module_free(m);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (attn_bert)");
    }
    b->m = m;
    b->free = m->free;
    b->alloc_user = m->alloc_user;
    attn_bert_info *in = &b->info;
    in->hidden_size = c.hidden;
    in->num_layers = c.layers;
    in->num_heads = c.heads;
    in->intermediate_size = c.inter;
    in->vocab_size = c.vocab;
    in->max_position_embeddings = c.maxpos;
    in->layer_norm_eps = c.eps;
    in->pooling = ATTN_BERT_POOL_MEAN;
    in->max_seq_length = 0;
    st = load_tokenizer(ctx, b, dir);
    int missing = 0;
    if (!st) st = parse_object_file(ctx, dir, "sentence_bert_config.json", sbert_member, b,
                                    &missing);
    if (!st) {
        if (in->max_seq_length <= 0) in->max_seq_length = c.maxpos < 512 ? c.maxpos : 512;
        if (in->max_seq_length > c.maxpos) in->max_seq_length = c.maxpos;
        if (in->max_seq_length < 2)
            st = attn__fail(ctx, ATTN_E_FORMAT, "max_seq_length %lld is too small",
                            (long long)in->max_seq_length);
    }
    char pdir[1024];
    int have_modules = 0;
    if (!st) st = parse_modules(ctx, b, dir, pdir, sizeof pdir, &have_modules);
    if (!st && have_modules) {
        char sub[4096];
        pool_cfg pc;
        memset(&pc, 0, sizeof pc);
        if (!pdir[0]) {
            st = attn__fail(ctx, ATTN_E_UNSUPPORTED, "%s/modules.json has no Pooling module",
                            dir);
        } else if (snprintf(sub, sizeof sub, "%s/%s", dir, pdir) >= (int)sizeof sub) {
            st = attn__fail(ctx, ATTN_E_INVALID, "model folder path too long");
        } else {
            st = parse_object_file(ctx, sub, "config.json", pool_member, &pc, &missing);
            if (!st && missing)
                st = attn__fail(ctx, ATTN_E_NOT_FOUND, "missing %s/config.json (pooling)", sub);
            if (!st && pc.other)
                st = attn__fail(ctx, ATTN_E_UNSUPPORTED, "%s/config.json: unsupported %s", sub,
                                pc.other_name);
            if (!st && pc.cls + pc.mean + pc.max != 1)
                st = attn__fail(ctx, ATTN_E_UNSUPPORTED,
                                "%s/config.json: exactly one of pooling_mode_mean_tokens, "
                                "pooling_mode_cls_token, pooling_mode_max_tokens must be set",
                                sub);
            in->pooling = pc.cls ? ATTN_BERT_POOL_CLS
                          : pc.max ? ATTN_BERT_POOL_MAX
                                   : ATTN_BERT_POOL_MEAN;
        }
    }
    if (!st) st = attn_module_load(ctx, m, sf, prefix, 1);
    attn_st_free(sf);
    if (!st) st = bind_layers(ctx, m, &c);
    if (st) {
        attn_bert_free(b);
        return st;
    }
    use_rows(b);
    if (pack_layers(ctx, b, ATTN_F32)) { /* a cache: the rows serve without it */
        attn_ctx_clear_error(ctx);
        use_rows(b);
    }
    *out = b;
    return ATTN_OK;
}

/* The four matrices of each layer as the float rows themselves (no packed copy). */
static void use_rows(attn_bert *b) {
    bert_impl *q = b->m->impl;
    const attn__weight f32 = {ATTN_Q_F32, NULL, 0, 0, NULL, 0};
    const int64_t E = b->info.hidden_size;
    for (int64_t li = 0; li < b->info.num_layers; li++) {
        attn__block *e = &q->layers[li].enc;
        attn__attention *a = &e->at[0]; /* q's data and bias start the stacked ones */
        a->qkv = attn__weight_f32(a->q.data, a->q.bias, 3 * E, E);
        a->o = attn__weight_f32(q->layers[li].ao.weight, q->layers[li].ao.bias, E, E);
        e->l1.pw = e->l2.pw = f32;
    }
    bfree(b, b->lw);
    b->lw = NULL, b->dtype = ATTN_F32;
}

attn_status attn_bert_set_dtype(attn_ctx *ctx, attn_bert *b, attn_dtype dtype) {
    if (!ctx || !b) return attn__fail(ctx, ATTN_E_INVALID, "attn_bert_set_dtype: NULL argument");
    ATTN_FAIL_IF(dtype != ATTN_F32 && dtype != ATTN_BF16 && dtype != ATTN_F16, ctx,
                 ATTN_E_UNSUPPORTED, "attn_bert_set_dtype: only f32, bf16 and f16 (got %s)",
                 attn_dtype_name(dtype));
    if (dtype == b->dtype && (b->lw || dtype != ATTN_F32)) return ATTN_OK;
    attn_status st = pack_layers(ctx, b, dtype);
    if (st && dtype == ATTN_F32) { /* the panels are a cache: without room, the rows */
        attn_ctx_clear_error(ctx);
        use_rows(b);
        return ATTN_OK;
    }
    return st;
}

/* The four matrices of each layer packed as dtype's type (attn__wtype_packed) into one block
 * lw; F32: the float GEMM's panels beside the rows (the same bits, no packing per product). */
static attn_status pack_layers(attn_ctx *ctx, attn_bert *b, attn_dtype dtype) {
    bert_impl *q = b->m->impl;
    const int type = attn__wtype_packed(dtype);
    const int64_t E = b->info.hidden_size, I = b->info.intermediate_size;
    const int64_t nl = b->info.num_layers;
    const int64_t shape[4][2] = {{E, 3 * E}, {E, E}, {E, I}, {I, E}}; /* K, N */
    size_t per = 0, total;
    size_t bytes[4]; /* of each packed matrix */
    for (int k = 0; k < 4; k++) {
        ATTN_TRY(attn__weight_size(ctx, type, shape[k][1], shape[k][0], &bytes[k]));
        ATTN_FAIL_IF(!attn__add_size(per, bytes[k], &per), ctx, ATTN_E_OVERFLOW,
                     "attn_bert_set_dtype: model too large");
    }
    ATTN_FAIL_IF(!attn__mul_size(per, (size_t)nl, &total), ctx, ATTN_E_OVERFLOW,
                 "attn_bert_set_dtype: model too large");
    /* the model's allocator (the one it was loaded with, which attn_bert_free uses), not ctx's;
     * the layers see the packed forms only once all of them are packed */
    attn_alloc_fn alloc = b->m->alloc;
    unsigned char *w = alloc(b->alloc_user, total ? total : 1);
    attn__weight *pw = attn__malloc(ctx, (size_t)(4 * nl) * sizeof *pw);
    if (!w || !pw) {
        bfree(b, w);
        attn__free(ctx, pw);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (%s weights)",
                          attn_dtype_name(dtype));
    }
    unsigned char *at = w;
    attn_status st = ATTN_OK;
    for (int64_t li = 0; li < nl && !st; li++) {
        const attn__block *e = &q->layers[li].enc;
        const float *src[4] = {e->at[0].q.data, q->layers[li].ao.weight, e->l1.weight,
                               e->l2.weight};
        char what[64];
        snprintf(what, sizeof what, "attn_bert_set_dtype: layer %lld", (long long)li);
        for (int k = 0; k < 4 && !st; k++) {
            st = attn__weight_pack(ctx, type, src[k], shape[k][1], shape[k][0], at, what,
                                   &pw[4 * li + k]);
            at += bytes[k];
        }
    }
    if (st) {
        bfree(b, w);
        attn__free(ctx, pw);
        return st;
    }
    for (int64_t li = 0; li < nl; li++) {
        attn__block *e = &q->layers[li].enc;
        attn__weight *pk[2] = {&e->at[0].qkv, &e->at[0].o};
        for (int k = 0; k < 2; k++) { /* the packed form, with the layer's bias */
            const float *bias = pk[k]->bias;
            *pk[k] = pw[4 * li + k];
            pk[k]->bias = bias;
        }
        e->l1.pw = pw[4 * li + 2], e->l2.pw = pw[4 * li + 3];
    }
    attn__free(ctx, pw);
    bfree(b, b->lw);
    b->lw = w, b->dtype = dtype;
    return ATTN_OK;
}

attn_dtype attn_bert_get_dtype(const attn_bert *b) { return b ? b->dtype : ATTN_F32; }

const attn_bpe *attn_bert_tokenizer(const attn_bert *b) { return b ? b->tok : NULL; }

attn_status attn_bert_get_info(const attn_bert *b, attn_bert_info *info) {
    if (!b || !info) return ATTN_E_INVALID;
    *info = b->info;
    return ATTN_OK;
}

attn_status attn_bert_tokenize(attn_ctx *ctx, const attn_bert *b, const char *text,
                               int32_t *ids, int64_t cap, int64_t *n) {
    if (!ctx || !b || !text || !n || (cap > 0 && !ids))
        return attn__fail(ctx, ATTN_E_INVALID, "attn_bert_tokenize: NULL argument");
    /* the tokenizer's buffers grow with the text (16 code points a byte): bound it */
    size_t len = strlen(text);
    int64_t lim = attn_ctx_limit(ctx, ATTN_LIMIT_TEXT_BYTES);
    ATTN_FAIL_IF((uint64_t)len > (uint64_t)lim, ctx, ATTN_E_UNSUPPORTED,
                 "attn_bert_tokenize: a text of %zu bytes is over ATTN_LIMIT_TEXT_BYTES (%lld)",
                 len, (long long)lim);
    int64_t L = b->info.max_seq_length;
    int32_t *tmp = attn__malloc(ctx, (size_t)L * sizeof *tmp);
    ATTN_FAIL_IF(!tmp, ctx, ATTN_E_NOMEM, "out of memory (tokenizer)");
    int64_t cn;
    /* special-token texts ("[SEP]") in the text are ordinary text (flags 0); tokenizing stops
     * once max_seq_length - 2 ids are out */
    attn_status st = attn__bpe_encode_upto(ctx, b->tok, text, len, 0, tmp + 1, L - 2, &cn);
    if (st == ATTN_OK) {
        int64_t k = cn < L - 2 ? cn : L - 2;
        tmp[0] = b->cls;
        tmp[k + 1] = b->sep;
        *n = k + 2;
        for (int64_t i = 0; i < k + 2 && i < cap; i++) ids[i] = tmp[i];
    }
    attn__free(ctx, tmp);
    return st;
}

/* ---- forward -------------------------------------------------------------------------------- */
/* x [sum len, E] from the ids of n sequences packed back to back (sequence i: its len[i] rows
 * after the previous ones, positions from 0): the embeddings and their layer norm, then per
 * layer the shared encoder layer (post-norm, GELU):
 *   h = LN((ao Wo^T + bo) + x);  x = LN((gelu(h W1^T + b1) W2^T + b2) + h)
 * with bias, residual, GELU and layer norm in the epilogues of the products, on the weights
 * attn_bert_set_dtype packed (attn__matmul).  Each sequence attends to its own rows alone
 * (packed sequences: no padding rows are computed), and every other step is row by row, so a
 * text's bits do not depend on the others of its batch. */
static attn_status encode(attn_ctx *ctx, const attn_bert *b, const int32_t *ids,
                          const int64_t *len, int64_t n, float *x) {
    const bert_impl *q = b->m->impl;
    const int64_t E = b->info.hidden_size;
    int64_t M = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < len[i]; j++, M++) {
            const float *we = q->wemb + (int64_t)ids[M] * E, *pe = q->pemb + j * E;
            float *xr = x + M * E;
            for (int64_t e = 0; e < E; e++) xr[e] = (we[e] + q->temb[e]) + pe[e];
        }
    attn__ln_fwd(ctx, &q->eln, x, x, M);
    attn__rng rng = {0, 0, 0, 0, 0}; /* inference: no dropout */
    attn__block_io io;
    memset(&io, 0, sizeof io);
    io.B = 1, io.T = M, io.seql = len, io.nseq = n, io.rng = &rng;
    for (int64_t li = 0; li < b->info.num_layers; li++)
        ATTN_TRY(attn__block_fwd(ctx, &q->layers[li].enc, x, x, &io, NULL));
    return ATTN_OK;
}

typedef struct len_idx { int64_t len, idx; } len_idx;
static int by_len_desc(const void *a, const void *b) {
    const len_idx *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

attn_status attn_bert_embed(attn_ctx *ctx, const attn_bert *b, const char *const *texts,
                            int64_t n, float *out) {
    if (!ctx || !b || (n > 0 && (!texts || !out)) || n < 0)
        return attn__fail(ctx, ATTN_E_INVALID, "attn_bert_embed: NULL argument");
    for (int64_t i = 0; i < n; i++)
        ATTN_FAIL_IF(!texts[i], ctx, ATTN_E_INVALID, "attn_bert_embed: text %lld is NULL",
                     (long long)i);
    if (n == 0) return ATTN_OK;
    const int64_t BS = 32, Lmax = b->info.max_seq_length, E = b->info.hidden_size;
    int32_t *ids = attn__malloc(ctx, (size_t)(n * Lmax) * sizeof *ids);
    len_idx *order = attn__malloc(ctx, (size_t)n * sizeof *order);
    int32_t *bid = attn__malloc(ctx, (size_t)(BS * Lmax) * sizeof *bid);
    int64_t *blen = attn__malloc(ctx, (size_t)BS * sizeof *blen);
    float *x = attn__malloc(ctx, (size_t)(BS * Lmax * E) * sizeof *x);
    attn_status st = ATTN_OK;
    if (!ids || !order || !bid || !blen || !x) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "out of memory (attn_bert_embed)");
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t k;
        if ((st = attn_bert_tokenize(ctx, b, texts[i], ids + i * Lmax, Lmax, &k))) goto done;
        order[i].len = k, order[i].idx = i;
    }
    /* batches of similar lengths; a batch's products run on its tokens packed (no padding) */
    qsort(order, (size_t)n, sizeof *order, by_len_desc);
    for (int64_t s0 = 0; s0 < n; s0 += BS) {
        const int64_t B = n - s0 < BS ? n - s0 : BS;
        int64_t M = 0;
        for (int64_t r = 0; r < B; r++) {
            const len_idx *o = &order[s0 + r];
            memcpy(bid + M, ids + o->idx * Lmax, (size_t)o->len * sizeof *bid);
            blen[r] = o->len, M += o->len;
        }
        if ((st = encode(ctx, b, bid, blen, B, x))) goto done;
        const float *xr = x;
        for (int64_t r = 0; r < B; xr += order[s0 + r].len * E, r++) {
            const len_idx *o = &order[s0 + r];
            float *y = out + o->idx * E;
            for (int64_t e = 0; e < E; e++) {
                if (b->info.pooling == ATTN_BERT_POOL_CLS) {
                    y[e] = xr[e];
                } else if (b->info.pooling == ATTN_BERT_POOL_MAX) {
                    float m = -INFINITY;
                    for (int64_t j = 0; j < o->len; j++) m = fmaxf(m, xr[j * E + e]);
                    y[e] = m;
                } else {
                    double acc = 0;
                    for (int64_t j = 0; j < o->len; j++) acc += xr[j * E + e];
                    y[e] = (float)(acc / (double)o->len);
                }
            }
            if (b->info.normalize) {
                double ss = 0;
                for (int64_t e = 0; e < E; e++) ss += (double)y[e] * y[e];
                double nr = sqrt(ss);
                if (nr < 1e-12) nr = 1e-12;
                for (int64_t e = 0; e < E; e++) y[e] = (float)(y[e] / nr);
            }
        }
    }
done:
    attn__free(ctx, ids), attn__free(ctx, order), attn__free(ctx, bid), attn__free(ctx, blen);
    attn__free(ctx, x);
    return st;
}
