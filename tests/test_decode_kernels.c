/* The decode microkernels (src/kernels/decode.h: qk, pv, qk_bf16, pv_bf16) of every kernel set
 * this build and machine run, called directly on the odd shapes the driver rarely produces:
 * rows 1-9 (every register block and its remainder), keys 1-13 (the key blocks and the keys
 * after them), D and Dv from 1 to 67 (every tail of 4, 8 and 16 lanes, one and several
 * vector blocks).  Against dot products in double: |got - exact| <= 2 D u sum |q_d k_d| + tiny
 * for qk (D-term fp32 sums, u = 2^-24: any summation order is within D u of the exact sum), the
 * same with n terms for pv; a missing, extra or misplaced term is off by a whole product
 * (values in [-1, 1] away from 0: far above the bound).  NaN fails.  The inputs are bf16
 * values (so that the bf16 kernels see the same numbers), whose products are exact in fp32:
 * the measured error is 0 on ref, avx2, avx512 and neon (printed).
 *
 * Memory: the contract says nothing past a K or V row's D (Dv) values is read.  K and V are
 * placed so that their last row ends where an inaccessible page begins (mmap + mprotect, on
 * POSIX systems), so a read past it stops the test with SIGSEGV; the values beyond each
 * other row are NaN, so a read of those into a score shows as NaN (the q rows are zero padded
 * as the contract says, and 0 * NaN is NaN). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/decode.h"
#include "../src/kernels/dispatch.h"
#include "testutil.h"

/* 0: the page after K and V stays readable (tu_guard_ok: under qemu-x86_64 the guard page would
 * test the emulator's masked loads, so only the NaN padding checks the reads there). */
static int use_guard = 1;

/* a value in [-1, -1/4] or [1/4, 1], exactly a bf16 value */
static float val(uint64_t *rs) {
    float x = 0.25f + 0.75f * (float)(tu_rand(rs) % 1000) / 1000.0f;
    x = tu_rand(rs) % 2 ? -x : x;
    return attn__bf16_round(x);
}

static double worst;

static void check(const char *what, double got, double exact, double mag, int64_t terms,
                  int *bad) {
    double tol = 2.0 * (double)terms * 0x1p-24 * mag + 1e-30;
    double e = fabs(got - exact);
    if (mag > 0 && e / mag > worst) worst = e / mag;
    if (!(e <= tol)) {
        if (*bad < 3) printf("FAIL %s: got %.9g, exact %.9g, bound %.3g\n", what, got, exact, tol);
        (*bad)++;
    }
}

static void one_set(const attn__decode_kernels *kt, const char *name) {
    static const int64_t rows_[] = {1, 2, 3, 4, 5, 7, 9};
    static const int64_t n_[] = {1, 3, 4, 5, 8, 13};
    static const int64_t d_[] = {1, 2, 3, 4, 5, 7, 8, 16, 17, 33, 36, 64, 67};
    uint64_t rs = 1234;
    char what[200];
    int bad = 0, cases = 0;
    for (size_t ri = 0; ri < sizeof rows_ / sizeof rows_[0]; ri++)
        for (size_t ni = 0; ni < sizeof n_ / sizeof n_[0]; ni++)
            for (size_t di = 0; di < sizeof d_ / sizeof d_[0]; di++)
                for (int bf = 0; bf < 2; bf++) {
                    const int64_t rows = rows_[ri], n = n_[ni], D = d_[di];
                    const int64_t ldq = (D + 15) / 16 * 16, ldk = D + 3 * (n % 2);
                    const int64_t ldo = ldq + 16, ldp = n + 2, lds = n + 5;
                    const size_t es = bf ? 2 : 4, nkv = (size_t)((n - 1) * ldk + D);
                    float *q = calloc((size_t)(rows * ldq), 4);
                    float *p = malloc(4 * (size_t)(rows * ldp));
                    float *s = malloc(4 * (size_t)(rows * lds));
                    float *o = malloc(4 * (size_t)(rows * ldo));
                    float *kf = malloc(4 * nkv);
                    tu_guarded gk, gv;
                    void *k = tu_guarded_alloc(&gk, es * nkv, use_guard),
                         *v = tu_guarded_alloc(&gv, es * nkv, use_guard);
                    if (!q || !p || !s || !o || !kf || !k || !v) {
                        TU_CHECK(0, "out of memory");
                        return;
                    }
                    for (size_t i = 0; i < nkv; i++) {
                        int64_t e = (int64_t)i % ldk;
                        kf[i] = e < D ? val(&rs) : NAN; /* NaN between rows */
                    }
                    for (size_t i = 0; i < nkv; i++) {
                        if (bf) ((attn__bf16 *)k)[i] = attn__f32_to_bf16(kf[i]);
                        else ((float *)k)[i] = kf[i];
                    }
                    memcpy(v, k, es * nkv); /* V: the same values (its own guard page) */
                    for (int64_t r = 0; r < rows; r++) {
                        for (int64_t d = 0; d < D; d++) q[r * ldq + d] = val(&rs);
                        for (int64_t j = 0; j < n; j++) p[r * ldp + j] = val(&rs);
                    }
                    if (bf) {
                        kt->qk_bf16(rows, n, D, q, ldq, k, ldk, s, lds);
                        kt->pv_bf16(rows, n, D, p, ldp, v, ldk, o, ldo);
                    } else {
                        kt->qk(rows, n, D, q, ldq, k, ldk, s, lds);
                        kt->pv(rows, n, D, p, ldp, v, ldk, o, ldo);
                    }
                    snprintf(what, sizeof what, "%s %s rows %lld n %lld D %lld", name,
                             bf ? "bf16" : "fp32", (long long)rows, (long long)n, (long long)D);
                    for (int64_t r = 0; r < rows; r++) {
                        for (int64_t j = 0; j < n; j++) {
                            double ex = 0, mag = 0;
                            for (int64_t d = 0; d < D; d++) {
                                double t = (double)q[r * ldq + d] * kf[j * ldk + d];
                                ex += t, mag += fabs(t);
                            }
                            check(what, s[r * lds + j], ex, mag, D, &bad);
                        }
                        for (int64_t e = 0; e < D; e++) {
                            double ex = 0, mag = 0;
                            for (int64_t j = 0; j < n; j++) {
                                double t = (double)p[r * ldp + j] * kf[j * ldk + e];
                                ex += t, mag += fabs(t);
                            }
                            check(what, o[r * ldo + e], ex, mag, n, &bad);
                        }
                    }
                    cases++;
                    free(q), free(p), free(s), free(o), free(kf);
                    tu_guarded_free(&gk), tu_guarded_free(&gv);
                }
    TU_CHECK(bad == 0, "decode microkernels [%s]: %d values off", name, bad);
    printf("decode microkernels [%s]: %d cases\n", name, cases);
}

int main(void) {
    use_guard = tu_guard_ok("test_decode_kernels: no guard page (qemu-x86_64's masked loads)");
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        if (!tu_set_ok(isa, "test_decode_kernels: decode microkernels")) continue;
        const attn__decode_kernels *kt = isa == ATTN__ISA_REF      ? attn__decode_kernels_ref()
                                         : isa == ATTN__ISA_AVX2   ? attn__decode_kernels_avx2()
                                         : isa == ATTN__ISA_AVX512 ? attn__decode_kernels_avx512()
                                                                   : attn__decode_kernels_neon();
        if (kt) one_set(kt, attn__isa_name(isa));
    }
    printf("test_decode_kernels: worst error %.3g of sum |terms| (bound 2 terms 2^-24 each)\n",
           worst);
    return tu_finish("test_decode_kernels");
}
