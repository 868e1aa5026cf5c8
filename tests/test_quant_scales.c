/* attn__quant_first_nonfinite (the load-time check of quantized weights, round-3 review F4):
 * for every GGUF type with scales, a tensor of zero blocks is clean; a NaN or an Inf in each
 * scale field of one block (d, m, dmin; f16, or Q8_K's float) is found at that block and
 * named; quantized values (any bytes) never count; F16 / BF16 / F32 elements are checked one
 * by one.  And the loader refuses a GGUF whose quantized matrix has one (tests/test_llm_cli.sh
 * errors: a patched Q8_0 file through generate, perplexity and export). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/quant.h"
#include "testutil.h"

static void put16(unsigned char *p, unsigned v) { p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8); }

int main(void) {
    struct {
        int type, bb, off[2];
        const char *name[2];
    } t[] = {
        {ATTN_Q_Q4_0, 18, {0, -1}, {"d", NULL}},   {ATTN_Q_Q4_1, 20, {0, 2}, {"d", "m"}},
        {ATTN_Q_Q5_0, 22, {0, -1}, {"d", NULL}},   {ATTN_Q_Q5_1, 24, {0, 2}, {"d", "m"}},
        {ATTN_Q_Q8_0, 34, {0, -1}, {"d", NULL}},   {ATTN_Q_Q2_K, 84, {80, 82}, {"d", "dmin"}},
        {ATTN_Q_Q3_K, 110, {108, -1}, {"d", NULL}}, {ATTN_Q_Q4_K, 144, {0, 2}, {"d", "dmin"}},
        {ATTN_Q_Q5_K, 176, {0, 2}, {"d", "dmin"}}, {ATTN_Q_Q6_K, 210, {208, -1}, {"d", NULL}},
        {ATTN_Q_IQ4_NL, 18, {0, -1}, {"d", NULL}}, {ATTN_Q_IQ4_XS, 136, {0, -1}, {"d", NULL}},
    };
    const unsigned bad[2] = {0x7e00 /* NaN */, 0xfc00 /* -Inf */};
    enum { NB = 6 };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        int64_t be = 0, bb = 0;
        attn_qtype_block(t[i].type, &be, &bb);
        TU_CHECK(bb == t[i].bb, "%s: block of %lld bytes, the table says %d",
                 attn_qtype_name(t[i].type), (long long)bb, t[i].bb);
        unsigned char *b = malloc((size_t)(NB * t[i].bb));
        if (!b) return 1;
        /* quantized values of every bit pattern, scales 1.0: clean */
        for (int k = 0; k < NB * t[i].bb; k++) b[k] = (unsigned char)(k * 37 + 11);
        for (int k = 0; k < NB; k++)
            for (int f = 0; f < 2; f++)
                if (t[i].off[f] >= 0) put16(b + k * t[i].bb + t[i].off[f], 0x3c00);
        const char *what = "?";
        TU_CHECK(attn__quant_first_nonfinite(t[i].type, b, NB, &what) == -1, "%s: clean blocks",
                 attn_qtype_name(t[i].type));
        for (int f = 0; f < 2; f++) {
            if (t[i].off[f] < 0) continue;
            for (int v = 0; v < 2; v++) {
                unsigned char *p = b + 4 * t[i].bb + t[i].off[f];
                put16(p, bad[v]);
                int64_t got = attn__quant_first_nonfinite(t[i].type, b, NB, &what);
                TU_CHECK(got == 4 && !strcmp(what, t[i].name[f]), "%s: %s = 0x%04x: block %lld (%s)",
                         attn_qtype_name(t[i].type), t[i].name[f], bad[v], (long long)got, what);
                TU_CHECK(attn__quant_first_nonfinite(t[i].type, b, 4, NULL) == -1,
                         "%s: a block past nb was looked at", attn_qtype_name(t[i].type));
                put16(p, 0x3c00);
            }
        }
        free(b);
    }
    /* Q8_K: a float d */
    {
        unsigned char b[3 * 292];
        memset(b, 0, sizeof b);
        TU_CHECK(attn__quant_first_nonfinite(ATTN_Q_Q8_K, b, 3, NULL) == -1, "Q8_K clean");
        const float inf = 1.0f / 0.0f;
        memcpy(b + 2 * 292, &inf, 4);
        TU_CHECK(attn__quant_first_nonfinite(ATTN_Q_Q8_K, b, 3, NULL) == 2, "Q8_K Inf d");
    }
    /* element types */
    {
        unsigned char h[16];
        memset(h, 0, sizeof h);
        put16(h + 10, 0x7c01); /* f16 NaN, element 5 */
        TU_CHECK(attn__quant_first_nonfinite(ATTN_Q_F16, h, 8, NULL) == 5, "F16 NaN");
        memset(h, 0, sizeof h);
        put16(h + 6, 0xff80); /* bf16 -Inf, element 3 */
        TU_CHECK(attn__quant_first_nonfinite(ATTN_Q_BF16, h, 8, NULL) == 3, "BF16 -Inf");
        float f[4] = {1, 2, 0.0f / 0.0f, 4};
        TU_CHECK(attn__quant_first_nonfinite(ATTN_Q_F32, f, 4, NULL) == 2, "F32 NaN");
        TU_CHECK(attn__quant_first_nonfinite(ATTN_Q_F32, f, 2, NULL) == -1, "F32 clean");
    }
    return tu_finish("test_quant_scales");
}
