/* CPU feature detection: which instruction-set extensions this CPU has and the operating
 * system lets a program use (the register state is saved on context switch).  CPUID and
 * XGETBV run once per process, on the first call, under pthread_once: CPUID is slow under a
 * hypervisor (tens of microseconds per query), so nothing asks it per call.  The kernel layer
 * turns these bits into a context's kernel table at attn_ctx_create (src/kernels/dispatch.c,
 * docs/kernels.md). */
#ifndef ATTN_CPU_H
#define ATTN_CPU_H
#include "internal.h"

/* Bits of attn__cpu_features().  Each one means "the CPU reports it and the OS saves the
 * registers it needs" (XCR0: YMM for AVX2/AVX-VNNI, opmask + ZMM for AVX-512, tile state for
 * AMX).  Linux still asks a program to request the AMX tile state (arch_prctl) before its
 * first tile instruction: the bits only say that the hardware and the kernel support it. */
enum {
    ATTN__CPU_AVX2 = 1u << 0,         /* AVX2, FMA and F16C (CPUID.1:ECX bits 12 and 29,
                                       * .7.0:EBX bit 5): every AVX2 CPU has the other two */
    ATTN__CPU_AVX512F = 1u << 1,      /* CPUID.(7,0):EBX bit 16 */
    ATTN__CPU_AVX512DQ = 1u << 2,     /* EBX bit 17 */
    ATTN__CPU_AVX512BW = 1u << 3,     /* EBX bit 30 */
    ATTN__CPU_AVX512VL = 1u << 4,     /* EBX bit 31 */
    ATTN__CPU_AVX512_VNNI = 1u << 5,  /* CPUID.(7,0):ECX bit 11 */
    ATTN__CPU_AVX512_BF16 = 1u << 6,  /* CPUID.(7,1):EAX bit 5 */
    ATTN__CPU_AVX512_FP16 = 1u << 7,  /* CPUID.(7,0):EDX bit 23 */
    ATTN__CPU_AVX_VNNI = 1u << 8,     /* CPUID.(7,1):EAX bit 4 (VEX-encoded, 256-bit) */
    ATTN__CPU_AMX_TILE = 1u << 9,     /* CPUID.(7,0):EDX bit 24 */
    ATTN__CPU_AMX_BF16 = 1u << 10,    /* EDX bit 22 */
    ATTN__CPU_AMX_INT8 = 1u << 11,    /* EDX bit 25 */
    /* AArch64 (Linux: getauxval(AT_HWCAP/AT_HWCAP2); macOS: sysctl hw.optional.*) */
    ATTN__CPU_NEON = 1u << 12,        /* Advanced SIMD with fp32 FMA (HWCAP_ASIMD; every ARMv8-A) */
    ATTN__CPU_DOTPROD = 1u << 13,     /* SDOT/UDOT (HWCAP_ASIMDDP, FEAT_DotProd) */
    ATTN__CPU_I8MM = 1u << 14,        /* SMMLA/USDOT (HWCAP2_I8MM, FEAT_I8MM) */
    ATTN__CPU_COUNT = 15              /* number of bits above */
};

/* The ATTN__CPU_* bits of this machine (x86-64: CPUID with GCC/Clang's cpuid.h; AArch64: the
 * OS's report, NEON alone where it has none; 0 elsewhere).
 * Thread-safe; detection runs once per process. */
ATTN__HIDDEN unsigned attn__cpu_features(void);
/* Asks the OS, once per process, to let it use the AMX tiles (Linux arch_prctl); 1 when the
 * CPU has AMX_TILE and AMX_BF16 and the OS agreed, else 0.  Thread-safe. */
ATTN__HIDDEN int attn__cpu_amx_request(void);
/* What CPUID says the processor is: the vendor ("GenuineIntel", "AuthenticAMD", ...; "" off
 * x86-64), the display family and model (family 25 = AMD Zen 3/4, 26 = Zen 5; family 6 with
 * its model for Intel), and the brand string ("AMD EPYC 9R14 96-Core Processor"; "" where the
 * CPU has none).  Read once per process.  Thread-safe. */
typedef struct attn__cpu_id {
    char vendor[13];
    char brand[49];
    unsigned family, model;
} attn__cpu_id;
ATTN__HIDDEN const attn__cpu_id *attn__cpu_identity(void);
/* The lower-case name of one bit ("avx2", "avx512f", "avx512_bf16", "amx_tile"...; the names
 * of /proc/cpuinfo), or NULL for anything that is not a single known bit. */
ATTN__HIDDEN const char *attn__cpu_feature_name(unsigned bit);

/* The default thread count (attn_cpu_default_threads) and what it follows from.  root: ""
 * for this machine, else a folder that stands for / (tests: fake sysfs and procfs trees).
 * allowed[c] != 0 for each CPU c < n this process may run on.  Linux: a core is the CPUs of
 * one topology/thread_siblings_list (SMT siblings count once; a CPU whose list cannot be read
 * is its own core); the quota is the smallest CPU bandwidth limit of the process's cgroup and
 * its ancestors (cgroup v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us), rounded up to
 * whole CPUs.  Files missing or malformed count as no information, never as an error. */
typedef struct attn__cpu_threads {
    int allowed; /* CPUs this process may run on */
    int cores;   /* physical cores among them */
    int quota;   /* the cgroup's CPU limit rounded up, 0: none */
    int threads; /* min(cores, quota), at least 1 */
} attn__cpu_threads;
ATTN__HIDDEN void attn__cpu_threads_at(const char *root, const unsigned char *allowed, int n,
                                       attn__cpu_threads *out);
/* attn__cpu_threads_at for this process and machine (non-Linux: cores = allowed, no quota). */
ATTN__HIDDEN void attn__cpu_threads_here(attn__cpu_threads *out);

#endif
