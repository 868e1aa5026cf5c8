/* The default thread count (attn_cpu_default_threads, src/core/cpu.c attn__cpu_threads_at) on
 * fake sysfs and procfs trees written to a temporary folder: SMT siblings counted once, the
 * affinity mask applied, cgroup v2 cpu.max (with its ancestors) and v1 cfs quotas rounded up,
 * and missing or malformed files taken as no information (never a crash, never 0 threads). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpu.h"
#include "testutil.h"

static char root[256];

/* root + rel, with every folder above it made; writes text (NULL: only the folders) */
static void put(const char *rel, const char *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(path, 0755) != 0 && errno != EEXIST) TU_CHECK(0, "mkdir %s", path);
            *p = '/';
        }
    if (!text) {
        if (mkdir(path, 0755) != 0 && errno != EEXIST) TU_CHECK(0, "mkdir %s", path);
        return;
    }
    FILE *f = fopen(path, "w");
    TU_CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* a fresh tree (the old one removed) */
static int tree_no;
static void fresh(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/attn_cpu_threads_%d_%d", tmp && *tmp ? tmp : "/tmp",
             (int)getpid(), tree_no++);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) TU_CHECK(0, "%s failed", cmd);
    TU_CHECK(mkdir(root, 0755) == 0, "mkdir %s", root);
}

static void cleanup(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) TU_CHECK(0, "%s failed", cmd);
}

/* ncpu CPUs, SMT pairs (c, c + ncpu/2) when smt, else one CPU per core */
static void topology(int ncpu, int smt) {
    for (int c = 0; c < ncpu; c++) {
        char rel[128], text[64];
        snprintf(rel, sizeof rel, "sys/devices/system/cpu/cpu%d/topology/thread_siblings_list",
                 c);
        int h = ncpu / 2;
        if (smt) snprintf(text, sizeof text, "%d,%d\n", c % h, c % h + h);
        else snprintf(text, sizeof text, "%d\n", c);
        put(rel, text);
    }
}

static attn__cpu_threads run(const unsigned char *allowed, int n) {
    attn__cpu_threads t;
    memset(&t, 0x55, sizeof t);
    attn__cpu_threads_at(root, allowed, n, &t);
    return t;
}

#define EXPECT(t, a, c, q, th)                                                                \
    TU_CHECK((t).allowed == (a) && (t).cores == (c) && (t).quota == (q) &&                    \
                 (t).threads == (th),                                                         \
             "line %d: allowed %d cores %d quota %d threads %d, expected %d %d %d %d",        \
             __LINE__, (t).allowed, (t).cores, (t).quota, (t).threads, a, c, q, th)

int main(void) {
    unsigned char all[16], some[16];
    memset(all, 1, sizeof all);

    /* 8 cores with 2 hardware threads each, no cgroup files: 8 threads, not 16 */
    fresh();
    topology(16, 1);
    attn__cpu_threads t = run(all, 16);
    EXPECT(t, 16, 8, 0, 8);
    /* an affinity of both threads of core 0 and one of core 3: 2 cores */
    memset(some, 0, sizeof some);
    some[0] = some[8] = some[3] = 1;
    t = run(some, 16);
    EXPECT(t, 3, 2, 0, 2);
    /* dense sibling lists ("0-1", as on machines that number siblings next to each other) */
    fresh();
    for (int c = 0; c < 8; c++) {
        char rel[128], text[32];
        snprintf(rel, sizeof rel, "sys/devices/system/cpu/cpu%d/topology/thread_siblings_list",
                 c);
        snprintf(text, sizeof text, "%d-%d\n", c & ~1, (c & ~1) + 1);
        put(rel, text);
    }
    t = run(all, 8);
    EXPECT(t, 8, 4, 0, 4);

    /* cgroup limits on 8 (or 4) CPUs without SMT: the files of a case are written in order
     * into one fresh tree, then the quota and threads checked after each step marked check */
    static const struct quota_step {
        int fresh, ncpu;       /* fresh: a new tree (with ncpu CPUs) first */
        const char *path, *text;
        int check, quota;      /* check: the expected quota after this file (0: none) */
    } steps[] = {
        /* v2: the process's own cpu.max "150000 100000" (1.5 CPUs: 2) under an ancestor's
         * "max"; then an ancestor's limit lower still */
        {1, 8, "proc/self/cgroup", "0::/kube/pod1/app\n", 0, 0},
        {0, 8, "sys/fs/cgroup/kube/pod1/app/cpu.max", "150000 100000\n", 0, 0},
        {0, 8, "sys/fs/cgroup/kube/pod1/cpu.max", "max 100000\n", 1, 2},
        {0, 8, "sys/fs/cgroup/kube/cpu.max", "100000 100000\n", 1, 1},
        /* v2 inside a container's namespace ("0::/", the limit at the mount root): above the
         * cores (the cores stay), below them, "max" */
        {1, 4, "proc/self/cgroup", "0::/\n", 0, 0},
        {0, 4, "sys/fs/cgroup/cpu.max", "800000 100000\n", 1, 8},
        {0, 4, "sys/fs/cgroup/cpu.max", "200000 100000\n", 1, 2},
        {0, 4, "sys/fs/cgroup/cpu.max", "max 100000\n", 1, 0},
        /* v1 cpu,cpuacct: 250 ms per 100 ms (3 CPUs), then -1 (none) */
        {1, 8, "proc/self/cgroup", "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n", 0, 0},
        {0, 8, "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "250000\n", 0, 0},
        {0, 8, "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n", 1, 3},
        {0, 8, "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n", 1, 0},
        /* v1 in a container: the path is not below the "cpu" mount, whose root has half a
         * CPU (1) */
        {1, 8, "proc/self/cgroup", "4:cpuacct,cpu:/docker/abc\n", 0, 0},
        {0, 8, "sys/fs/cgroup/cpu/cpu.cfs_quota_us", "50000\n", 0, 0},
        {0, 8, "sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n", 1, 1},
        /* "cpuset" alone is not "cpu" */
        {1, 8, "proc/self/cgroup", "3:cpuset:/x\n", 0, 0},
        {0, 8, "sys/fs/cgroup/cpu/cpu.cfs_quota_us", "100000\n", 0, 0},
        {0, 8, "sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n", 1, 0},
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        const struct quota_step *q = &steps[i];
        if (q->fresh) fresh(), topology(q->ncpu, 0);
        put(q->path, q->text);
        if (!q->check) continue;
        t = run(all, q->ncpu);
        const int th = q->quota && q->quota < q->ncpu ? q->quota : q->ncpu;
        TU_CHECK(t.allowed == q->ncpu && t.cores == q->ncpu && t.quota == q->quota &&
                     t.threads == th,
                 "step %zu (%s = %s): quota %d threads %d, expected %d %d", i, q->path,
                 q->text, t.quota, t.threads, q->quota, th);
    }

    /* malformed files: no information, never 0 threads or a crash */
    static const char *const bad_lists[] = {"", "x", "3-1", "-1", "1,", "99999999999999999999",
                                            "0-", ",0", "2\n"};
    for (size_t i = 0; i < sizeof bad_lists / sizeof bad_lists[0]; i++) {
        fresh();
        for (int c = 0; c < 4; c++) {
            char rel[128];
            snprintf(rel, sizeof rel,
                     "sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", c);
            put(rel, bad_lists[i]); /* "2" names a CPU above cpu0 and cpu1: theirs ignored */
        }
        t = run(all, 4);
        const int cores = strcmp(bad_lists[i], "2\n") == 0 ? 3 : 4;
        TU_CHECK(t.allowed == 4 && t.cores == cores && t.threads == cores,
                 "sibling list '%s': allowed %d cores %d threads %d", bad_lists[i], t.allowed,
                 t.cores, t.threads);
    }
    static const char *const bad_max[] = {"", "max", "0 100000", "100000 0", "100000",
                                          "-5 100000", "abc def", "100000 100000 7",
                                          "1 1000000000000000000000"};
    for (size_t i = 0; i < sizeof bad_max / sizeof bad_max[0]; i++) {
        fresh();
        topology(4, 0);
        put("proc/self/cgroup", "0::/a\n");
        put("sys/fs/cgroup/a/cpu.max", bad_max[i]);
        t = run(all, 4);
        /* "100000 100000 7": 1 CPU from the first two numbers is fine too */
        TU_CHECK(t.threads >= 1 && t.threads <= 4 && (t.quota == 0 || t.quota == 1),
                 "cpu.max '%s': quota %d threads %d", bad_max[i], t.quota, t.threads);
    }
    static const char *const bad_cgroup[] = {"", "garbage", "0::", "0::relative", "::/x",
                                             "4:cpu", "4:cpu:", "\n\n\n"};
    for (size_t i = 0; i < sizeof bad_cgroup / sizeof bad_cgroup[0]; i++) {
        fresh();
        topology(4, 0);
        put("proc/self/cgroup", bad_cgroup[i]);
        t = run(all, 4);
        EXPECT(t, 4, 4, 0, 4);
    }
    /* a FIFO with no writer where cpu.max and a sibling list should be, and a folder where
     * /proc/self/cgroup should be: not read (no hang), no information */
    {
        fresh();
        topology(2, 0);
        put("proc/self/cgroup", "0::/f\n");
        put("sys/fs/cgroup/f", NULL);
        char fifo[1024];
        snprintf(fifo, sizeof fifo, "%s/sys/fs/cgroup/f/cpu.max", root);
        TU_CHECK(mkfifo(fifo, 0644) == 0, "mkfifo %s", fifo);
        snprintf(fifo, sizeof fifo, "%s/sys/devices/system/cpu/cpu1/topology/thread_siblings_list",
                 root);
        remove(fifo);
        TU_CHECK(mkfifo(fifo, 0644) == 0, "mkfifo %s", fifo);
        t = run(all, 2);
        EXPECT(t, 2, 2, 0, 2);
        fresh();
        topology(2, 0);
        put("proc/self/cgroup", NULL);
        t = run(all, 2);
        EXPECT(t, 2, 2, 0, 2);
    }
    /* a path as long as the buffers: refused quietly */
    {
        fresh();
        topology(2, 0);
        char line[6000];
        memset(line, 'a', sizeof line);
        memcpy(line, "0::/", 4);
        line[sizeof line - 2] = '\n', line[sizeof line - 1] = 0;
        put("proc/self/cgroup", line);
        t = run(all, 2);
        EXPECT(t, 2, 2, 0, 2);
    }
    /* nothing at all (no sysfs, no procfs; non-Linux-like): one core per allowed CPU */
    fresh();
    t = run(all, 16);
    EXPECT(t, 16, 16, 0, 16);
    /* an empty affinity mask: 1 */
    memset(some, 0, sizeof some);
    t = run(some, 16);
    EXPECT(t, 1, 1, 0, 1);
    cleanup();

    /* this machine: the public function, the context of threads 0 and the description agree */
    attn__cpu_threads here;
    attn__cpu_threads_here(&here);
    const int def = attn_cpu_default_threads();
    TU_CHECK(def == here.threads && def >= 1 && def <= attn_cpu_count(),
             "attn_cpu_default_threads %d, here %d, cpus %d", def, here.threads,
             attn_cpu_count());
    attn_ctx *ctx = NULL;
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    TU_CHECK(attn_ctx_create(&p, &ctx) == ATTN_OK, "attn_ctx_create");
    if (ctx) {
        TU_CHECK(attn_ctx_threads(ctx) == def, "threads 0 gave %d, default %d",
                 attn_ctx_threads(ctx), def);
        char buf[4096], want[64];
        size_t need = 0;
        TU_CHECK(attn_ctx_describe(ctx, buf, sizeof buf, &need) == ATTN_OK, "describe");
        snprintf(want, sizeof want, "%d by default", def);
        TU_CHECK(strstr(buf, want) != NULL, "the description lacks '%s': %s", want, buf);
        attn_ctx_free(ctx);
    }
    printf("this machine: %d CPUs, %d cores, quota %d: %d threads by default\n", here.allowed,
           here.cores, here.quota, here.threads);
    return tu_finish("test_cpu_threads");
}
