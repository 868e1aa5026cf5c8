/* CPU feature detection (cpu.h): CPUID and XGETBV once per process. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sched.h>
#include <sys/stat.h>
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

/* ---- the default thread count ------------------------------------------------------------ */
#define PATH_CAP 1024

/* root + a + b as one path in buf (0: too long) */
static int path3(char *buf, const char *root, const char *a, const char *b) {
    int k = snprintf(buf, PATH_CAP, "%s%s%s", root, a, b);
    return k > 0 && k < PATH_CAP;
}

/* Up to cap - 1 bytes of a small file, NUL-terminated; the length, or -1.  Opened without
 * blocking and refused unless a regular file, as attn__file_read does (file.h); not that
 * function itself, which sizes the file with fstat (procfs says 0 bytes) and needs a context
 * (this runs before one exists). */
static int read_small(const char *path, char *buf, int cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return -1;
    }
    int len = 0;
    while (len < cap - 1) {
        ssize_t r = read(fd, buf + len, (size_t)(cap - 1 - len));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (int)r;
    }
    close(fd);
    buf[len] = 0;
    return len;
}

/* A decimal number of at most 18 digits at *p (advanced past it); -1 if there is none */
static long long number(const char **p) {
    long long v = 0;
    int d = 0;
    while (**p >= '0' && **p <= '9' && d < 18) v = v * 10 + (*(*p)++ - '0'), d++;
    return d == 0 || (**p >= '0' && **p <= '9') ? -1 : v;
}

/* The smallest CPU of a CPU list such as "0-3,8,10-11" (sysfs's thread_siblings_list); -1 if
 * it is not one */
static long long list_min(const char *s) {
    long long lo = -1;
    for (;;) {
        long long a = number(&s), b = a;
        if (a < 0) return -1;
        if (*s == '-') {
            s++;
            if ((b = number(&s)) < a) return -1;
        }
        if (lo < 0 || a < lo) lo = a;
        if (*s == ',') {
            s++;
            continue;
        }
        return *s == '\n' || *s == 0 ? lo : -1;
    }
}

/* CPUs of a bandwidth limit of quota microseconds per period (rounded up), 0 when there is
 * none ("max", -1) or it does not parse */
static int limit_cpus(long long quota, long long period) {
    if (quota <= 0 || period <= 0) return 0;
    long long c = quota / period + (quota % period != 0);
    return c > 1 << 20 ? 1 << 20 : (int)c;
}

/* The smallest limit from dir up to top (both under the same root; dir starts with top):
 * v2 reads each level's cpu.max ("max 100000" or "200000 100000"), v1 cpu.cfs_quota_us and
 * cpu.cfs_period_us.  0: none. */
static int quota_up(char *dir, size_t top, int v2) {
    int best = 0;
    char path[PATH_CAP], text[128];
    for (;;) {
        int c = 0;
        if (v2) {
            if (path3(path, dir, "/cpu.max", "") && read_small(path, text, sizeof text) > 0) {
                const char *q = text;
                long long quota = number(&q), period = -1;
                if (quota >= 0 && *q == ' ') q++, period = number(&q);
                c = limit_cpus(quota, period);
            }
        } else if (path3(path, dir, "/cpu.cfs_quota_us", "") &&
                   read_small(path, text, sizeof text) > 0) {
            const char *q = text;
            long long quota = number(&q); /* -1: none ("-1" does not parse as a number) */
            if (quota > 0 && path3(path, dir, "/cpu.cfs_period_us", "") &&
                read_small(path, text, sizeof text) > 0) {
                q = text;
                c = limit_cpus(quota, number(&q));
            }
        }
        if (c > 0 && (best == 0 || c < best)) best = c;
        size_t len = strlen(dir);
        if (len <= top) return best;
        while (len > top && dir[len - 1] != '/') len--; /* up one level */
        while (len > top && dir[len - 1] == '/') len--;
        dir[len] = 0;
    }
}

/* The CPU limit of the process's cgroup, 0 when there is none (or it cannot be read) */
static int cgroup_quota(const char *root) {
    char path[PATH_CAP], text[4096], dir[PATH_CAP];
    if (!path3(path, root, "/proc/self/cgroup", "") || read_small(path, text, sizeof text) <= 0)
        return 0;
    int best = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        /* "hierarchy-id:controllers:path" */
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/') continue;
        *c1 = *c2 = 0;
        const char *ctl = c1 + 1, *cg = c2 + 1;
        int q = 0;
        if (strcmp(line, "0") == 0 && *ctl == 0) { /* cgroup v2 */
            size_t top = strlen(root) + strlen("/sys/fs/cgroup");
            if (path3(dir, root, "/sys/fs/cgroup", strcmp(cg, "/") ? cg : ""))
                q = quota_up(dir, top, 1);
        } else { /* v1: the line whose controllers name cpu */
            int cpu = 0;
            for (const char *t = ctl; *t;) {
                size_t w = strcspn(t, ",");
                if (w == 3 && strncmp(t, "cpu", 3) == 0) cpu = 1;
                t += w + (t[w] == ',');
            }
            if (!cpu) continue;
            static const char *const mounts[] = {"/sys/fs/cgroup/cpu,cpuacct",
                                                 "/sys/fs/cgroup/cpu"};
            for (int m = 0; m < 2 && q == 0; m++) {
                size_t top = strlen(root) + strlen(mounts[m]);
                /* the cgroup's folder; inside a container the mount root is its cgroup */
                if (path3(dir, root, mounts[m], strcmp(cg, "/") ? cg : ""))
                    q = quota_up(dir, top, 0);
                if (q == 0 && path3(dir, root, mounts[m], "")) q = quota_up(dir, top, 0);
            }
        }
        if (q > 0 && (best == 0 || q < best)) best = q;
    }
    return best;
}

/* allowed, cores: as attn__cpu_threads (quota and threads not set) */
static void count_cores(const char *root, const unsigned char *allowed, int n,
                        attn__cpu_threads *out) {
    memset(out, 0, sizeof *out);
    unsigned char seen[1024];
    if (n > 1024) n = 1024;
    memset(seen, 0, sizeof seen);
    for (int c = 0; c < n; c++) {
        if (!allowed[c]) continue;
        out->allowed++;
        char path[PATH_CAP], text[512], cpu[32];
        long long key = c;
        snprintf(cpu, sizeof cpu, "/cpu%d", c);
        if (path3(path, root, "/sys/devices/system/cpu", cpu) &&
            strlen(path) + 40 < PATH_CAP) {
            strcat(path, "/topology/thread_siblings_list");
            if (read_small(path, text, sizeof text) > 0) {
                long long lo = list_min(text);
                if (lo >= 0 && lo <= c) key = lo; /* the core's first CPU (its list holds c) */
            }
        }
        if (!seen[key]) seen[key] = 1, out->cores++;
    }
    if (out->allowed == 0) out->allowed = out->cores = 1;
}

/* the threads from the cores and the quota */
static void finish(attn__cpu_threads *out, int quota) {
    out->quota = quota;
    out->threads = out->quota > 0 && out->quota < out->cores ? out->quota : out->cores;
    if (out->threads < 1) out->threads = 1;
}

void attn__cpu_threads_at(const char *root, const unsigned char *allowed, int n,
                          attn__cpu_threads *out) {
    count_cores(root, allowed, n, out);
    finish(out, cgroup_quota(root));
}

/* The cores of the last affinity mask seen (reading a sysfs file per CPU costs ~5 us each: a
 * context made per thread on a machine of hundreds of CPUs would pay milliseconds) */
static pthread_mutex_t cores_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned char cores_mask[1024];
static int cores_n = -1;
static attn__cpu_threads cores_last;

void attn__cpu_threads_here(attn__cpu_threads *out) {
#ifdef __linux__
    cpu_set_t set;
    unsigned char allowed[1024];
    int n = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        n = CPU_SETSIZE < 1024 ? CPU_SETSIZE : 1024;
        for (int c = 0; c < n; c++) allowed[c] = CPU_ISSET(c, &set) != 0;
    }
    if (n > 0) {
        pthread_mutex_lock(&cores_mu);
        if (cores_n == n && memcmp(cores_mask, allowed, (size_t)n) == 0) {
            *out = cores_last;
        } else {
            count_cores("", allowed, n, out);
            memcpy(cores_mask, allowed, (size_t)n);
            cores_n = n, cores_last = *out;
        }
        pthread_mutex_unlock(&cores_mu);
        finish(out, cgroup_quota("")); /* read each time: a limit may change */
        return;
    }
#endif
    memset(out, 0, sizeof *out);
    out->allowed = out->cores = out->threads = attn_cpu_count();
}

int attn_cpu_default_threads(void) {
    attn__cpu_threads t;
    attn__cpu_threads_here(&t);
    return t.threads < 1 ? 1 : t.threads > 1024 ? 1024 : t.threads;
}
