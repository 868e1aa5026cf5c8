#define _GNU_SOURCE /* lstat, for tu_rm_tree */
#include "testutil_sdpa.h"
#include "cpu.h"
#include "../src/kernels/dispatch.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#define TU_HAVE_MMAP 1
#endif

int tu_failures = 0, tu_checks = 0;

void tu_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    tu_failures++;
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int tu_status(attn_status got, attn_status expected, attn_ctx *ctx, const char *expr,
              const char *file, int line) {
    tu_checks++;
    if (got == expected) return 1;
    tu_fail(file, line, "%s returned %s, expected %s (%s)", expr, attn_status_name(got),
            attn_status_name(expected), attn_ctx_errmsg(ctx));
    return 0;
}

double tu_max_err(const float *got, const float *ref, size_t n, double *ref_max) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (isnan(got[i]) || isnan(ref[i])) d = INFINITY;
        if (isinf(ref[i]) && got[i] == ref[i]) d = 0;
        if (d > e) e = d;
        if (isfinite(ref[i]) && fabs(ref[i]) > m) m = fabs(ref[i]);
    }
    if (ref_max) *ref_max = m;
    return e;
}

int tu_close(const char *what, const float *got, const float *ref, size_t n, double tol) {
    double m, e = tu_max_err(got, ref, n, &m);
    double bound = tol * (m > 1 ? m : 1);
    tu_checks++;
    if (!(e <= bound)) {
        tu_fail(__FILE__, __LINE__, "%s: max abs error %.3g > %.3g (tol %.1g, max|ref| %.3g)",
                what, e, bound, tol, m);
        return 0;
    }
    return 1;
}

uint64_t tu_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void tu_fill(float *p, size_t n, uint64_t seed, float lo, float hi) {
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++)
        p[i] = lo + (hi - lo) * (float)((tu_rand(&s) >> 40) * (1.0 / 16777216.0));
}

int tu_finish(const char *name) {
    if (tu_failures) {
        fprintf(stderr, "%s: %d of %d checks FAILED\n", name, tu_failures, tu_checks);
        return 1;
    }
    printf("%s: all %d checks passed\n", name, tu_checks);
    return 0;
}

/* ---- testutil_sdpa.h -------------------------------------------------------------------- */
void tu_sdpa_masks(int cfg, int64_t B, int64_t H, int64_t L, int64_t S, attn__sdpa_args *a,
                   uint64_t *rs, float **fbuf, unsigned char **bbuf) {
    size_t nf = (size_t)(B * H * L * S), nb = (size_t)(B * L * S + B * S + L * S);
    *fbuf = malloc(4 * nf + 4), *bbuf = malloc(nb + 1);
    float *f = *fbuf;
    unsigned char *u = *bbuf;
    for (size_t i = 0; i < nf; i++) f[i] = (float)((double)(tu_rand(rs) % 2001) / 1000.0 - 1.0);
    for (size_t i = 0; i < nb; i++) u[i] = (tu_rand(rs) % 5) != 0;
    a->mask_ncols[0] = a->mask_ncols[1] = S;
    attn__mask4 *m0 = &a->mask[0], *m1 = &a->mask[1];
    switch (cfg) {
    case 1:
        m0->kind = ATTN_MASK_KEEP, m0->data = u, m0->dtype = ATTN_BOOL;
        m0->stride[2] = S, m0->stride[3] = 1;
        break;
    case 2:
        m0->kind = ATTN_MASK_ADD, m0->data = f, m0->dtype = ATTN_F32;
        m0->stride[0] = H * L * S, m0->stride[1] = L * S, m0->stride[2] = S, m0->stride[3] = 1;
        m1->kind = ATTN_MASK_BLOCK, m1->data = u, m1->dtype = ATTN_BOOL;
        for (int64_t i = 0; i < B * S; i++) u[i] = (tu_rand(rs) % 4) == 0;
        m1->stride[0] = S, m1->stride[3] = 1;
        break;
    case 3:
        for (int64_t i = 0; i < H * S; i++)
            if (tu_rand(rs) % 6 == 0) f[i] = -INFINITY;
        m0->kind = ATTN_MASK_ADD, m0->data = f, m0->dtype = ATTN_F32;
        m0->stride[1] = S, m0->stride[3] = 1;
        break;
    case 4:
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < L; i += 3)
                memset(u + (b * L + i) * S, 0, (size_t)(S - 2 > 0 ? S - 2 : 0));
        m0->kind = ATTN_MASK_KEEP, m0->data = u, m0->dtype = ATTN_U8;
        m0->stride[0] = L * S, m0->stride[2] = S, m0->stride[3] = 1;
        a->mask_ncols[0] = S - 2 > 0 ? S - 2 : 0;
        break;
    case 5:
        m0->kind = ATTN_MASK_BLOCK, m0->data = u, m0->dtype = ATTN_BOOL;
        for (int64_t i = 0; i < L * S; i++) u[i] = (tu_rand(rs) % 5) == 0;
        m0->stride[2] = 1, m0->stride[3] = L;
        break;
    case 6:
        m1->kind = ATTN_MASK_KEEP, m1->data = u, m1->dtype = ATTN_BOOL, m1->stride[3] = 1;
        m0->kind = ATTN_MASK_ADD, m0->data = f, m0->dtype = ATTN_F32, m0->stride[2] = 1;
        break;
    case 7:
        for (int64_t i = 0; i < B * S; i++) u[i] = i < S || (tu_rand(rs) % 3) == 0;
        m1->kind = ATTN_MASK_BLOCK, m1->data = u, m1->dtype = ATTN_BOOL;
        m1->stride[0] = S, m1->stride[3] = 1;
        break;
    case 8:
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = b; i < L; i += 2) memset(u + (b * L + i) * S, 0, (size_t)S);
        m0->kind = ATTN_MASK_KEEP, m0->data = u, m0->dtype = ATTN_BOOL;
        m0->stride[0] = L * S, m0->stride[2] = S, m0->stride[3] = 1;
        break;
    }
}

attn_ctx *tu_ctx(int threads) {
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.threads = threads;
    attn_ctx *c = NULL;
    return attn_ctx_create(&p, &c) == ATTN_OK ? c : NULL;
}

/* ---- instruction sets ------------------------------------------------------------------ */
/* The CPU's bits, less the AMX ones where the OS does not grant the tiles (as dispatch.c). */
static unsigned usable_features(void) {
    unsigned cpu = attn__cpu_features();
    if (!attn__cpu_amx_request())
        cpu &= ~(unsigned)(ATTN__CPU_AMX_TILE | ATTN__CPU_AMX_BF16 | ATTN__CPU_AMX_INT8);
    return cpu;
}

unsigned tu_isa_features(void) {
    unsigned cpu = usable_features();
    attn__kernel_env env;
    attn__kernel_env_read(&env);
    const int best = attn__isa_best(cpu, env.isa);
    if (best < ATTN__ISA_AVX512) cpu &= ATTN__CPU_AVX2 | ATTN__CPU_AVX_VNNI;
    if (best < ATTN__ISA_AVX2) cpu = 0;
    return cpu;
}

/* The first refusal for each `what` and set of missing bits prints its line; later ones are
 * quiet. */
static int first_refusal(const char *what, unsigned missing) {
    enum { MAX = 64 };
    static char seen[MAX][128];
    static int nseen;
    char key[sizeof seen[0]];
    snprintf(key, sizeof key, "%x %s", missing, what);
    for (int i = 0; i < nseen; i++)
        if (strcmp(seen[i], key) == 0) return 0;
    if (nseen < MAX) memcpy(seen[nseen++], key, sizeof key);
    return 1;
}

/* "avx512f + avx512_bf16": the names of the bits of set */
static void bit_names(unsigned set, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < ATTN__CPU_COUNT && n < cap; i++)
        if (set & (1u << i))
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? " + " : "",
                                  attn__cpu_feature_name(1u << i));
}

int tu_isa_ok(unsigned need, const char *what) {
    const unsigned missing = need & ~tu_isa_features();
    if (!missing) return 1;
    if (first_refusal(what, missing)) {
        char names[256], why[64] = "";
        bit_names(missing, names, sizeof names);
        const char *cap = getenv("ATTN_ISA");
        if (cap && (usable_features() & missing) == missing) /* the CPU has them */
            snprintf(why, sizeof why, " (capped by ATTN_ISA=%.30s)", cap);
        printf("skipped: %s needs %s, not on this CPU%s\n", what, names, why);
        fflush(stdout);
    }
    return 0;
}

int tu_set_ok(int isa, const char *what) {
    const unsigned need = isa == ATTN__ISA_AVX512
                              ? ATTN__CPU_AVX2 | ATTN__CPU_AVX512F | ATTN__CPU_AVX512DQ
                          : isa == ATTN__ISA_AVX2 ? ATTN__CPU_AVX2
                          : isa == ATTN__ISA_NEON ? ATTN__CPU_NEON
                                                  : 0u;
    if (isa < 0 || isa >= ATTN__ISA_COUNT) return 0;
    char full[160];
    snprintf(full, sizeof full, "%s (%s set)", what, attn__isa_name(isa));
    if (!attn__isa_runs(isa, ~0u)) { /* not compiled: not an x86-64 (or AArch64) build */
        if (first_refusal(full, ~0u)) printf("skipped: %s: not in this build\n", full);
        return 0;
    }
    return tu_isa_ok(need, full);
}

int tu_each_set(int isa, const char *what) {
    if (!tu_set_ok(isa, what)) return 0;
    if (isa != ATTN__ISA_REF || !tu_emulated() || !tu_set_ok(ATTN__ISA_AVX2, what)) return 1;
    char full[160];
    snprintf(full, sizeof full, "%s (ref set)", what);
    if (first_refusal(full, 0))
        printf("skipped: %s: ATTN_TEST_QUICK runs the SIMD sets only\n", full);
    return 0;
}

/* ATTN_TEST_QUICK's value when it asks for a smaller run (set, not empty, not "0"), else NULL */
static const char *quick_value(void) {
    const char *q = getenv("ATTN_TEST_QUICK");
    return q && *q && strcmp(q, "0") != 0 ? q : NULL;
}

int tu_quick(const char *what) {
    static int said;
    const int quick = quick_value() != NULL;
    if (quick && !said && what) {
        printf("%s: ATTN_TEST_QUICK: a smaller run (%s)\n", what,
               tu_emulated() ? "for an emulator" : "every set, guard pages kept");
        fflush(stdout);
        said = 1;
    }
    return quick;
}

int tu_emulated(void) {
    const char *q = quick_value();
    return q && strcmp(q, "sizes") != 0;
}

void *tu_guarded_alloc(tu_guarded *g, size_t bytes, int guard) {
#ifdef TU_HAVE_MMAP
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), body = (bytes + page - 1) / page * page;
    g->len = body + page;
    g->base = mmap(NULL, g->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g->base == MAP_FAILED) return g->base = NULL;
    if (guard && mprotect((char *)g->base + body, page, PROT_NONE) != 0) return NULL;
    return (char *)g->base + body - bytes;
#else
    (void)guard;
    g->len = bytes;
    return g->base = malloc(bytes ? bytes : 1);
#endif
}

void tu_guarded_free(tu_guarded *g) {
#ifdef TU_HAVE_MMAP
    if (g->base) munmap(g->base, g->len);
#else
    free(g->base);
#endif
    g->base = NULL;
}

int tu_guard_ok(const char *what) {
#if defined(__x86_64__) || defined(_M_X64)
    const int emulated = tu_emulated();
    if (emulated) tu_quick(what);
    return !emulated;
#else
    (void)what;
    return 1;
#endif
}

/* Removes a file or a directory tree (test scratch folders); 0 on success or when absent. */
int tu_rm_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return 0;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        char p[1024];
        while (d && (e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(p, sizeof p, "%s/%s", path, e->d_name);
            tu_rm_tree(p);
        }
        if (d) closedir(d);
        return rmdir(path);
    }
    return unlink(path);
}

void tu_fd_check(double (*loss)(void *arg), void *arg, const char *what, float *p,
                 const float *ga, int64_t n, int samples, uint64_t seed) {
    const float h = 2e-3f;
    double maxerr = 0, maxg = 0;
    uint64_t st = seed;
    /* an emulator: half the positions (each costs two forward passes) */
    if (tu_emulated() && samples > 1) samples = (samples + 1) / 2;
    for (int s = 0; s < samples && s < n; s++) {
        int64_t i = n <= samples ? s : (int64_t)(tu_rand(&st) % (uint64_t)n);
        float old = p[i];
        p[i] = old + h;
        double lp = loss(arg);
        p[i] = old - h;
        double lm = loss(arg);
        p[i] = old;
        double fd = (lp - lm) / (2.0 * h);
        double e = fabs(fd - ga[i]);
        if (e != e || maxerr != maxerr) maxerr = NAN; /* a NaN stays, whatever follows */
        else if (e > maxerr) maxerr = e;
        if (fabs(fd) > maxg) maxg = fabs(fd);
    }
    double tol = 2e-2 * (maxg > 1 ? maxg : 1);
    TU_CHECK(maxerr <= tol, "%s: max |fd - analytic| = %.3g > %.3g", what, maxerr, tol);
    if (getenv("ATTN_TEST_VERBOSE")) printf("%-60s fd err %.2e (tol %.2e)\n", what, maxerr, tol);
}

char *tu_read_line(FILE *f) {
    size_t cap = 256, n = 0;
    char *s = malloc(cap);
    int c;
    while (s && (c = fgetc(f)) != EOF && c != '\n') {
        if (n + 1 >= cap) {
            char *t = realloc(s, cap *= 2);
            if (!t) {
                free(s);
                return NULL;
            }
            s = t;
        }
        s[n++] = (char)c;
    }
    if (!s || (c == EOF && n == 0)) {
        free(s);
        return NULL;
    }
    s[n] = 0;
    return s;
}

char *tu_slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    char *b = NULL;
    size_t got = 0;
    if (f && !fseek(f, 0, SEEK_END)) {
        long len = ftell(f);
        rewind(f);
        b = len >= 0 ? malloc((size_t)len + 1) : NULL;
        if (b && (got = fread(b, 1, (size_t)len, f)) != (size_t)len) free(b), b = NULL;
        if (b) b[got] = 0;
    }
    if (f) fclose(f);
    if (n) *n = b ? got : 0;
    return b;
}

void tu_sdpa_args_bhld(attn__sdpa_args *a, int64_t H, int64_t L, int64_t S, int64_t D,
                       attn_causal causal, float scale) {
    memset(a, 0, sizeof *a);
    a->B = 1, a->H = a->Hkv = H, a->L = L, a->S = S, a->D = a->Dv = D;
    const int64_t qs[4] = {H * L * D, L * D, D, 1}, ks[4] = {H * S * D, S * D, D, 1};
    memcpy(a->qs, qs, sizeof qs), memcpy(a->ks, ks, sizeof ks);
    memcpy(a->vs, ks, sizeof ks), memcpy(a->os, qs, sizeof qs);
    a->causal = causal, a->scale = scale;
}

const int tu_rows_alone_lasts[TU_RA_NL] = {1, 7, 33};

void tu_rows_alone_init(tu_rows_alone *r) {
    const size_t nq = (size_t)TU_RA_H * TU_RA_L * TU_RA_D, nk = (size_t)TU_RA_H * TU_RA_S * TU_RA_D;
    r->q = malloc(4 * nq), r->k = malloc(4 * nk), r->v = malloc(4 * nk);
    r->o = malloc(4 * nq), r->o1 = malloc(4 * nq);
    tu_fill(r->q, nq, 71, -2, 2), tu_fill(r->k, nk, 72, -2, 2), tu_fill(r->v, nk, 73, -1, 1);
}

void tu_rows_alone_free(tu_rows_alone *r) {
    free(r->q), free(r->k), free(r->v), free(r->o), free(r->o1);
}

int tu_rows_alone_differ(const tu_rows_alone *r, int64_t n) {
    const int64_t L = TU_RA_L, D = TU_RA_D;
    int bad = 0;
    for (int64_t h = 0; h < TU_RA_H; h++)
        bad |= memcmp(r->o1 + h * L * D, r->o + h * L * D + (L - n) * D, 4 * (size_t)(n * D)) != 0;
    return bad;
}
