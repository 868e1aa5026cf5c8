/* The int16 GEMM's panel packing and microkernel for one vector width (gemm16_vnni.c includes
 * it twice): the includer defines NP (columns per panel: two vectors), SFX (a name suffix),
 * VI / VF (the integer and float vector types) and the operations below, then includes it. */
#define FN2(a, b) a##b
#define FN(a, b) FN2(a, b)

static void FN(pack, SFX)(int type, const uint8_t *w, size_t rb, int64_t nv, int64_t K,
                          int32_t *wq, float *ws, float *wm, int16_t *tmp) {
    const int G = attn__gemm16_group(type);
    const int64_t ng = K / G;
    memset(ws, 0, sizeof(float) * (size_t)(NP * ng));
    if (wm) memset(wm, 0, sizeof(float) * (size_t)(NP * ng));
    for (int64_t r = 0; r < NP; r++) {
        int16_t *q = tmp + r * K;
        if (r >= nv) {
            memset(q, 0, sizeof(int16_t) * (size_t)K);
            continue;
        }
        dec_row(type, w + (size_t)r * rb, K, q, ws + r, wm ? wm + r : NULL, NP);
    }
    /* the NP rows of K / 2 int32 pairs, transposed: wq[p][n] = pair p of row n */
    for (int64_t p0 = 0; p0 < K / 2; p0 += 8)
        for (int h = 0; h < NP / 8; h++) {
            __m256 t[8];
            for (int i = 0; i < 8; i++)
                t[i] = _mm256_loadu_ps((const float *)(const void *)(tmp + (8 * h + i) * K + 2 * p0));
            attn__tr8(t);
            for (int c = 0; c < 8; c++)
                _mm256_storeu_ps((float *)(void *)(wq + (p0 + c) * NP + 8 * h), t[c]);
        }
}

INLINE void FN(kern, SFX)(const int R, const int G, const int MINS, int64_t K, const int32_t *wq,
                          const float *ws, const float *wm, const attn__q16act *xa, float *y,
                          int64_t ldy, int64_t nv) {
    enum { H = NP / 2 }; /* lanes per vector */
    const int gp = G / 2;
    VF acc[MR][2];
    for (int i = 0; i < R; i++) acc[i][0] = acc[i][1] = ZEROF();
    for (int64_t g = 0; g < K / G; g++) {
        VI ia[MR][2];
        for (int i = 0; i < R; i++) ia[i][0] = ia[i][1] = ZEROI();
        const int32_t *wg = wq + g * gp * NP;
        const int16_t *x0 = xa->q + g * G;
#pragma GCC unroll 16
        for (int p = 0; p < gp; p++) {
            const VI b0 = LOADI(wg + p * NP), b1 = LOADI(wg + p * NP + H);
            for (int i = 0; i < R; i++) {
                const VI xb = SET1I(pair(x0 + i * xa->ldq + 2 * p));
                ia[i][0] = DPW(ia[i][0], xb, b0);
                ia[i][1] = DPW(ia[i][1], xb, b1);
            }
        }
        const VF s0 = LOADF(ws + g * NP), s1 = LOADF(ws + g * NP + H);
        const int64_t bx = g * G / 32;
        for (int i = 0; i < R; i++) {
            const VF f = SET1F(xa->d[i * xa->ldb + bx]);
            acc[i][0] = FMA(CVT(ia[i][0]), MUL(s0, f), acc[i][0]);
            acc[i][1] = FMA(CVT(ia[i][1]), MUL(s1, f), acc[i][1]);
        }
        if (MINS) {
            const VF m0 = LOADF(wm + g * NP), m1 = LOADF(wm + g * NP + H);
            for (int i = 0; i < R; i++) {
                const VF sv = SET1F(xa->sx[i * xa->ldb + g]);
                acc[i][0] = FNMA(m0, sv, acc[i][0]);
                acc[i][1] = FNMA(m1, sv, acc[i][1]);
            }
        }
    }
    for (int i = 0; i < R; i++) {
        if (nv == NP) {
            STOREF(y + i * ldy, acc[i][0]);
            STOREF(y + i * ldy + H, acc[i][1]);
        } else {
            float t[NP];
            STOREF(t, acc[i][0]);
            STOREF(t + H, acc[i][1]);
            memcpy(y + i * ldy, t, sizeof(float) * (size_t)nv);
        }
    }
}

#define KCALL(R)                                                                              \
    do {                                                                                      \
        if (G == 16)                                                                          \
            FN(kern, SFX)(R, 16, 0, K, wq, ws, wm, xa, y, ldy, nv);                           \
        else if (wm)                                                                          \
            FN(kern, SFX)(R, 32, 1, K, wq, ws, wm, xa, y, ldy, nv);                           \
        else                                                                                  \
            FN(kern, SFX)(R, 32, 0, K, wq, ws, wm, xa, y, ldy, nv);                           \
    } while (0)

static void FN(ukr, SFX)(int mr, int64_t K, int G, const int32_t *wq, const float *ws,
                         const float *wm, const attn__q16act *xa, float *y, int64_t ldy,
                         int64_t nv) {
    switch (mr) {
    case 1: KCALL(1); break;
    case 2: KCALL(2); break;
    case 3: KCALL(3); break;
    case 4: KCALL(4); break;
    case 5: KCALL(5); break;
    default: KCALL(6); break;
    }
}
#undef KCALL
#undef FN
#undef FN2
