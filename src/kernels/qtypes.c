/* The GGML block formats: element and byte counts of one block per type number (GGUF's tensor
 * types).  Layouts (little-endian, fp16 scales):
 *   Q4_0  32: d f16, 16 B nibbles                 Q4_1  32: d, m f16, 16 B nibbles
 *   Q5_0  32: d, 4 B high bits, 16 B nibbles      Q5_1  32: d, m, 4 B high bits, 16 B
 *   Q8_0  32: d, 32 int8
 *   Q2_K 256: 16 B scales, 64 B quants, d, dmin   Q3_K 256: 32 B hmask, 64 B qs, 12 B scales, d
 *   Q4_K 256: d, dmin, 12 B scales, 128 B qs      Q5_K 256: d, dmin, 12 B scales, 32 B qh, 128 B
 *   Q6_K 256: 128 B ql, 64 B qh, 16 int8 scales, d  Q8_K 256: d f32, 256 int8, 16 int16 bsums
 *   IQ4_NL 32: d, 16 B nibbles (non-linear table)  IQ4_XS 256: d, u16 scales_h, 4 B scales_l, 128 B
 * Q8_1 (GGML's activation format, never a file's tensor; its size differs between GGML and the
 * gguf package) is not listed: a file naming it is refused as unsupported. */
#include "internal.h"

#include "quant.h"

static const attn__wtype QTYPES[] = {
    {ATTN_Q_F32, "F32", 1, 4, 0},       {ATTN_Q_F16, "F16", 1, 2, 0},
    {ATTN_Q_Q4_0, "Q4_0", 32, 18, 0},   {ATTN_Q_Q4_1, "Q4_1", 32, 20, 0},
    {ATTN_Q_Q5_0, "Q5_0", 32, 22, 0},   {ATTN_Q_Q5_1, "Q5_1", 32, 24, 0},
    {ATTN_Q_Q8_0, "Q8_0", 32, 34, 0},
    {ATTN_Q_Q2_K, "Q2_K", 256, 84, 0},  {ATTN_Q_Q3_K, "Q3_K", 256, 110, 0},
    {ATTN_Q_Q4_K, "Q4_K", 256, 144, 0}, {ATTN_Q_Q5_K, "Q5_K", 256, 176, 0},
    {ATTN_Q_Q6_K, "Q6_K", 256, 210, 0}, {ATTN_Q_Q8_K, "Q8_K", 256, 292, 0},
    {ATTN_Q_IQ4_NL, "IQ4_NL", 32, 18, 0}, {ATTN_Q_IQ4_XS, "IQ4_XS", 256, 136, 0},
    {ATTN_Q_BF16, "BF16", 1, 2, 0},
    {ATTN__W_BF16P, "BF16 panels", 1, 2, 1},  {ATTN__W_F16P, "F16 panels", 1, 2, 1},
    {ATTN__W_F32P, "F32 panels", 1, 4, 1},
};

const attn__wtype *attn__wtype_of(int type) {
    for (size_t i = 0; i < sizeof QTYPES / sizeof QTYPES[0]; i++)
        if (QTYPES[i].type == type) return &QTYPES[i];
    return NULL;
}

/* The file types only (the public calls). */
static const attn__wtype *find(int type) {
    const attn__wtype *d = attn__wtype_of(type);
    return d && !d->panels ? d : NULL;
}

const char *attn_qtype_name(int type) {
    const attn__wtype *d = find(type);
    return d ? d->name : NULL;
}

attn_status attn_qtype_block(int type, int64_t *block_elems, int64_t *block_bytes) {
    const attn__wtype *d = find(type);
    if (!d) return ATTN_E_UNSUPPORTED;
    if (block_elems) *block_elems = d->elems;
    if (block_bytes) *block_bytes = d->bytes;
    return ATTN_OK;
}
