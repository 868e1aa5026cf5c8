/* CPU feature detection (cpu.h): CPUID and XGETBV once per process. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <pthread.h>
#include <string.h>
#include <sched.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

#include "cpu.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <cpuid.h>

static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

#define BIT(r, n) (((r) >> (n)) & 1u)

/* CPU support from CPUID; OS support from XCR0: bits 1-2 (SSE, AVX: the YMM state) for the
 * AVX and VEX extensions, 5-7 (opmask, ZMM0-15 high halves, ZMM16-31) as well for AVX-512,
 * 17-18 (XTILECFG, XTILEDATA) for AMX.  XGETBV is only valid where CPUID says OSXSAVE. */
static unsigned detect(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    unsigned fma = BIT(c, 12), osxsave = BIT(c, 27), avx = BIT(c, 28), f16c = BIT(c, 29);
    if (!osxsave || !avx) return 0;
    uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6 || __get_cpuid_max(0, NULL) < 7) return 0;
    int zmm = (xcr0 & 0xe6) == 0xe6, tiles = (xcr0 & 0x60000) == 0x60000;
    __cpuid_count(7, 0, a, b, c, d);
    unsigned sub = a; /* the highest subleaf of leaf 7 */
    unsigned f = 0;
    if (fma && f16c && BIT(b, 5)) f |= ATTN__CPU_AVX2;
    if (zmm) {
        if (BIT(b, 16)) f |= ATTN__CPU_AVX512F;
        if (BIT(b, 17)) f |= ATTN__CPU_AVX512DQ;
        if (BIT(b, 30)) f |= ATTN__CPU_AVX512BW;
        if (BIT(b, 31)) f |= ATTN__CPU_AVX512VL;
        if (BIT(c, 11)) f |= ATTN__CPU_AVX512_VNNI;
        if (BIT(d, 23)) f |= ATTN__CPU_AVX512_FP16;
    }
    if (tiles) {
        if (BIT(d, 24)) f |= ATTN__CPU_AMX_TILE;
        if (BIT(d, 22)) f |= ATTN__CPU_AMX_BF16;
        if (BIT(d, 25)) f |= ATTN__CPU_AMX_INT8;
    }
    if (sub >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        if (BIT(a, 4)) f |= ATTN__CPU_AVX_VNNI;
        if (zmm && BIT(a, 5)) f |= ATTN__CPU_AVX512_BF16;
    }
    return f;
}

static void identify(attn__cpu_id *id) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return;
    memcpy(id->vendor, &b, 4);
    memcpy(id->vendor + 4, &d, 4);
    memcpy(id->vendor + 8, &c, 4);
    id->vendor[12] = 0;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        unsigned fam = (a >> 8) & 0xf, mod = (a >> 4) & 0xf;
        if (fam == 0xf) fam += (a >> 20) & 0xff;
        if (fam == 0x6 || fam >= 0xf) mod |= ((a >> 16) & 0xf) << 4;
        id->family = fam;
        id->model = mod;
    }
    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) >= 0x80000004u) {
        unsigned r[12];
        for (unsigned i = 0; i < 3; i++)
            __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
        memcpy(id->brand, r, 48);
        id->brand[48] = 0;
        /* trim the padding some CPUs put around the name */
        char *s = id->brand;
        while (*s == ' ') s++;
        memmove(id->brand, s, strlen(s) + 1);
        size_t n = strlen(id->brand);
        while (n && id->brand[n - 1] == ' ') id->brand[--n] = 0;
    }
}
#elif defined(__aarch64__) || defined(_M_ARM64)
/* AArch64: Advanced SIMD is part of every ARMv8-A CPU; the dot-product and int8 matrix
 * extensions are asked of the OS, which reports only what it saves and enables: Linux through
 * the auxiliary vector (HWCAP_ASIMD bit 1, HWCAP_ASIMDDP bit 20, HWCAP2_I8MM bit 13: the
 * kernel's uapi numbers, written here so that old headers do not matter), macOS through
 * sysctl.  Elsewhere NEON alone. */
#if defined(__linux__)
#include <sys/auxv.h>
static unsigned detect(void) {
    const unsigned long hw = getauxval(AT_HWCAP);
#ifdef AT_HWCAP2
    const unsigned long hw2 = getauxval(AT_HWCAP2);
#else
    const unsigned long hw2 = 0;
#endif
    unsigned f = 0;
    if (hw & (1ul << 1)) f |= ATTN__CPU_NEON;
    if ((f & ATTN__CPU_NEON) && (hw & (1ul << 20))) f |= ATTN__CPU_DOTPROD;
    if ((f & ATTN__CPU_NEON) && (hw2 & (1ul << 13))) f |= ATTN__CPU_I8MM;
    return f;
}
#elif defined(__APPLE__)
#include <sys/sysctl.h>
static int sysctl_flag(const char *name) {
    int v = 0;
    size_t n = sizeof v;
    return sysctlbyname(name, &v, &n, NULL, 0) == 0 && v != 0;
}
static unsigned detect(void) {
    unsigned f = ATTN__CPU_NEON;
    if (sysctl_flag("hw.optional.arm.FEAT_DotProd")) f |= ATTN__CPU_DOTPROD;
    if (sysctl_flag("hw.optional.arm.FEAT_I8MM")) f |= ATTN__CPU_I8MM;
    return f;
}
#else
static unsigned detect(void) { return ATTN__CPU_NEON; }
#endif
static void identify(attn__cpu_id *id) { (void)id; /* no CPUID: no vendor or brand */ }
#else
static unsigned detect(void) { return 0; }
static void identify(attn__cpu_id *id) { (void)id; }
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static unsigned features;

static attn__cpu_id identity;

static void init(void) {
    features = detect();
    identify(&identity);
}

unsigned attn__cpu_features(void) {
    pthread_once(&once, init);
    return features;
}

const attn__cpu_id *attn__cpu_identity(void) {
    pthread_once(&once, init);
    return &identity;
}

/* Linux: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) lets this process (every thread,
 * present and future) use the AMX tile data; without it the first tile load faults. */
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static int amx_ok;

static void amx_init(void) {
    const unsigned need = ATTN__CPU_AMX_TILE | ATTN__CPU_AMX_BF16;
    if ((attn__cpu_features() & need) != need) return;
#if defined(__linux__) && defined(__x86_64__) && defined(SYS_arch_prctl)
    amx_ok = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
#else
    amx_ok = 0;
#endif
}

int attn__cpu_amx_request(void) {
    pthread_once(&amx_once, amx_init);
    return amx_ok;
}

const char *attn__cpu_feature_name(unsigned bit) {
    static const char *const names[ATTN__CPU_COUNT] = {
        "avx2",        "avx512f",     "avx512dq", "avx512bw", "avx512vl", "avx512_vnni",
        "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8",
        "asimd",       "asimddp",     "i8mm"};
    for (int i = 0; i < ATTN__CPU_COUNT; i++)
        if (bit == 1u << i) return names[i];
    return NULL;
}

int attn_cpu_count(void) {
    long n = 0;
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
#endif
    if (n <= 0) n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}
