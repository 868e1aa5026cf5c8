/* Minimal test harness: checks count failures; main returns tu_finish(). NaN always fails. */
#ifndef ATTN_TESTUTIL_H
#define ATTN_TESTUTIL_H
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include "attn.h"

extern int tu_failures, tu_checks;

#define TU_CHECK(cond, ...)                                                                   \
    do {                                                                                      \
        tu_checks++;                                                                          \
        if (!(cond)) tu_fail(__FILE__, __LINE__, __VA_ARGS__);                                \
    } while (0)
/* status must equal expected */
#define TU_STATUS(expr, expected, ctx) tu_status((expr), (expected), (ctx), #expr, __FILE__, __LINE__)

void tu_fail(const char *file, int line, const char *fmt, ...);
int tu_status(attn_status got, attn_status expected, attn_ctx *ctx, const char *expr,
              const char *file, int line);
/* max |a - b| <= tol * max(1, max|b|); NaN anywhere fails. Returns 1 on pass. */
int tu_close(const char *what, const float *got, const float *ref, size_t n, double tol);
/* Max abs error and the scale used, for reports. */
double tu_max_err(const float *got, const float *ref, size_t n, double *ref_max);
/* Deterministic uniform floats in [lo, hi). */
void tu_fill(float *p, size_t n, uint64_t seed, float lo, float hi);
uint64_t tu_rand(uint64_t *state);
int tu_finish(const char *name);
/* A context with `threads` worker threads (NULL on failure). */
attn_ctx *tu_ctx(int threads);
/* Instruction sets.  The kernel tables of an instruction set (attn__flash_kernels_avx512(),
 * attn__quant_kernels_vnni(), attn__mixed_pack_a_avx512 ...) are there whenever the build
 * compiled them, whatever the CPU: calling into one on a CPU without its instructions dies with
 * SIGILL.  So every direct use of them in a test asks first (comparing a table's address, as
 * test_dispatch.c does, runs nothing and needs no question):
 *   tu_isa_ok(need, what)  1 when this machine runs code that needs every ATTN__CPU_* bit of
 *                          need (src/core/cpu.h), as the library's dispatch sees it: the CPU's
 *                          bits (AMX where the OS grants the tiles) less what ATTN_ISA takes
 *                          away (ATTN_ISA=avx2: every AVX-512 and AMX bit, AVX-VNNI stays;
 *                          ATTN_ISA=ref: all of them), so that ATTN_ISA=avx2 tests as on an
 *                          AVX2 CPU;
 *   tu_set_ok(isa, what)   the same for a whole kernel set (dispatch.h ATTN__ISA_*: ref always,
 *                          avx2 needs AVX2 (with FMA, F16C), avx512 AVX2, AVX512F and DQ), also 0
 *                          for a set the build left out; the set's name is added to what;
 *   tu_each_set(isa, what) the loops over the sets: tu_set_ok, and under ATTN_TEST_QUICK (an
 *                          emulator) not the plain C set where a SIMD set runs (the emulated
 *                          run is for the SIMD sets, and slowest on plain C; the native runs
 *                          cover it).
 * The first time one says 0 for a `what`, it prints one line, "skipped: <what> needs <isa>,
 * not on this CPU"; what names the code left out ("test_flash: transposes").  The tests that
 * use them carry the ctest label isa, and CI runs those on an emulated CPU without AVX-512
 * (tests/CMakeLists.txt, .ci/run), where a missing question shows as SIGILL. */
int tu_isa_ok(unsigned need, const char *what);
int tu_set_ok(int isa, const char *what);
int tu_each_set(int isa, const char *what);
/* The ATTN__CPU_* bits tu_isa_ok works with. */
unsigned tu_isa_features(void);
/* The needs of the kernel families beyond the sets (src/kernels/dispatch.c; the ATTN__CPU_*
 * names come from src/core/cpu.h, which a test that uses these includes): */
#define TU_CPU_AVX512_WIDE                                                                    \
    (ATTN__CPU_AVX2 | ATTN__CPU_AVX512F | ATTN__CPU_AVX512BW | ATTN__CPU_AVX512DQ |           \
     ATTN__CPU_AVX512VL)
#define TU_CPU_AVX512_BF16 (TU_CPU_AVX512_WIDE | ATTN__CPU_AVX512_BF16) /* x86_avx512bf16 */
#define TU_CPU_AVX512_FP16 (TU_CPU_AVX512_WIDE | ATTN__CPU_AVX512_FP16) /* gemm_f16_avx512 */
#define TU_CPU_AMX_BF16 (TU_CPU_AVX512_BF16 | ATTN__CPU_AMX_TILE | ATTN__CPU_AMX_BF16) /* x86_amx */
/* 1 when ATTN_TEST_QUICK is set (and not "0"): the tests that are slow under an emulator
 * (tests/CMakeLists.txt ATTN_TEST_EMULATOR sets it) run fewer or smaller cases.  The first
 * call with a what (the test's name; NULL: say nothing) prints one line saying so.
 * tu_emulated: 1 for any other value than "sizes" (the emulator's ATTN_TEST_QUICK=1): the
 * plain C set is left out where a SIMD set runs (tu_each_set) and no guard pages on x86
 * (tu_guard_ok).  ATTN_TEST_QUICK=sizes, the smaller cases alone, is for a native build that
 * runs slowly (the sanitized tree of .ci/run): every set, guard pages kept. */
int tu_quick(const char *what);
int tu_emulated(void);
/* Bytes that end where an inaccessible page starts, so that a read past their end faults (mmap
 * where the system has it, else plain malloc); guard 0 leaves the page readable.  Free with
 * tu_guarded_free (accepts a failed allocation).  tu_guard_ok(what): whether to guard: not
 * under qemu-x86_64 (ATTN_TEST_QUICK on x86), whose emulator faults on the masked-out lanes
 * of VMASKMOVPS, which hardware never does; qemu-aarch64 has no such load. */
typedef struct tu_guarded {
    void *base;
    size_t len;
} tu_guarded;
void *tu_guarded_alloc(tu_guarded *g, size_t bytes, int guard);
void tu_guarded_free(tu_guarded *g);
int tu_guard_ok(const char *what);
/* Removes a file or a directory tree (scratch folders of the tests); 0 on success. */
int tu_rm_tree(const char *path);
/* The whole file at path with a 0 byte after it (malloc'ed; free it), its length in *n (n may
 * be NULL), or NULL when it cannot be read. */
char *tu_slurp(const char *path, size_t *n);
/* The next line of f without its newline (malloc'ed; free it), or NULL at the end. */
char *tu_read_line(FILE *f);
/* Central differences (step 2e-3) of loss(arg) at up to `samples` positions of the float array
 * p[n] (all of them when n <= samples, else positions drawn with seed) against the analytic
 * gradient ga: a check fails when max |fd - ga| > 2e-2 max(1, max |fd|); NaN fails.  what
 * names the array.  With ATTN_TEST_VERBOSE set, prints the error.  Under an emulator
 * (tu_emulated) half the samples, rounded up. */
void tu_fd_check(double (*loss)(void *arg), void *arg, const char *what, float *p,
                 const float *ga, int64_t n, int samples, uint64_t seed);

#endif
