/* attn train dates|charlm|lm|vit under mpirun: data-parallel training (attn_dp, attn_mpi.h).
 * Built against MPI only with -DATTN_MPI=ON (ATTN_HAVE_MPI); without it, a run that mpirun
 * started on several ranks is refused (each would train the whole model alone).
 *
 * The start-up agreement (attn_cli_dp_ready): each rank notes every setting that changes the
 * result (attn_cli_dp_note*: options, a hash of the data, of the checkpoint resumed, of the
 * initial weights), then every rank meets in one all-reduce (MAX over 64-bit words: each hash
 * and its complement, so the largest and the smallest over the ranks) carrying its status too.
 * A rank that failed to start (a bad file, a bad option: it printed why) joins it from
 * attn_cli_dp_finish with a failed status, so the others learn of it at once instead of
 * waiting for the first gradient sum to time out; a setting that differs is named, with every
 * rank's value.  Nothing collective happens before it (attn_dp_create, which duplicates the
 * communicator, comes after), so a rank that stops early never leaves the others in another
 * collective. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#ifdef ATTN_HAVE_MPI
#include "attn_mpi.h"
#endif

static struct {
    int on;         /* MPI initialised here */
    int rank, size, local;
    attn_train_dp hooks;
    int have_hooks;
    int train;      /* a training command: the ranks meet in attn_cli_dp_ready */
    const char *cmd;
    int ready;      /* attn_cli_dp_ready was called */
    attn_ctx *ctx;  /* attn_cli_dp_open's */
    long long batch;
    const char *what;
#ifdef ATTN_HAVE_MPI
    attn_dp *dp;
#endif
} g = {0, 0, 1, 1, {0}, 0, 0, NULL, 0, NULL, 0, NULL
#ifdef ATTN_HAVE_MPI
       , NULL
#endif
};

/* ---- the settings the ranks must share ------------------------------------------------- */
#define DP_NOTES 48
#define DP_VAL 64
static struct {
    const char *name;
    uint64_t h;
    char val[DP_VAL];
} notes[DP_NOTES];
static int nnotes, notes_lost;

static int noting(void) { return g.on && g.size > 1 && g.train; }

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
#define FNV0 0xcbf29ce484222325ull

/* A 64-bit hash of bulk data, 8 bytes at a time (a GiB of text in about a second): each word
 * mixed by a multiply and a rotation into a value that depends on the order. */
static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
typedef struct { uint64_t h, n; } bulk;
static void bulk_add(bulk *k, const void *p, size_t n) { /* the same calls, the same hash */
    const unsigned char *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        k->h = rotl64(k->h ^ (w * 0xc2b2ae3d27d4eb4full), 31) * 0x9e3779b97f4a7c15ull +
               0x165667b19e3779f9ull;
    }
    for (; i < n; i++) k->h = rotl64(k->h ^ (b[i] * 0xc2b2ae3d27d4eb4full), 31) * 0x9e3779b97f4a7c15ull;
    k->n += n;
}
static uint64_t bulk_end(const bulk *k) {
    uint64_t h = k->h ^ k->n;
    h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33;
    return h;
}

static void note_put(const char *name, const char *val) {
    for (int i = 0; i < nnotes; i++)
        if (!strcmp(notes[i].name, name)) return; /* the first one counts */
    if (nnotes == DP_NOTES) {
        notes_lost++; /* a programming error: compared as "the settings" */
        return;
    }
    notes[nnotes].name = name;
    snprintf(notes[nnotes].val, DP_VAL, "%s", val);
    notes[nnotes].h = fnv1a(fnv1a(FNV0, name, strlen(name) + 1), val, strlen(val));
    nnotes++;
}

void attn_cli_dp_note(const char *name, const char *fmt, ...) {
    if (!noting()) return;
    char v[DP_VAL];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    note_put(name, v);
}

void attn_cli_dp_note_data(const char *name, const void *p, size_t n) {
    if (!noting()) return;
    bulk k = {0x27d4eb2f165667c5ull, 0};
    bulk_add(&k, p, n);
    char v[DP_VAL];
    snprintf(v, sizeof v, "%zu bytes, hash %016llx", n, (unsigned long long)bulk_end(&k));
    note_put(name, v);
}

int attn_cli_dp_note_file(const char *cmd, const char *name, const char *path) {
    if (!noting()) return 1;
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "attn %s: [rank %d of %d] cannot read %s: %s\n", cmd, g.rank, g.size,
                path, strerror(errno));
        return 0;
    }
    static unsigned char buf[1 << 16];
    bulk k = {0x27d4eb2f165667c5ull, 0};
    size_t got;
    do { /* whole buffers (multiples of 8) until the end */
        got = 0;
        size_t r;
        while (got < sizeof buf && (r = fread(buf + got, 1, sizeof buf - got, f)) > 0) got += r;
        bulk_add(&k, buf, got);
    } while (got == sizeof buf);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "attn %s: [rank %d of %d] error reading %s\n", cmd, g.rank, g.size, path);
        return 0;
    }
    char v[DP_VAL];
    snprintf(v, sizeof v, "%llu bytes, hash %016llx", (unsigned long long)k.n,
             (unsigned long long)bulk_end(&k));
    note_put(name, v);
    return 1;
}

void attn_cli_dp_note_params(const char *name, const attn_module *m) {
    if (!noting() || !m) return;
    bulk k = {0x27d4eb2f165667c5ull, 0};
    size_t n = attn_module_param_count(m);
    for (size_t i = 0; i < n; i++) {
        const char *pn;
        attn_tensor v;
        if (attn_module_param_at(m, i, &pn, &v) != ATTN_OK) continue;
        int64_t c = 1;
        for (int d = 0; d < v.ndim; d++) c *= v.shape[d];
        bulk_add(&k, pn, strlen(pn));
        bulk_add(&k, v.data, (size_t)c * sizeof(float));
    }
    char v[DP_VAL];
    snprintf(v, sizeof v, "%lld parameters, hash %016llx", (long long)attn_module_numel(m),
             (unsigned long long)bulk_end(&k));
    note_put(name, v);
}

/* The world size mpirun (Open MPI, MPICH/Hydra, PMIx) announces, or 0 outside mpirun. */
static int launcher_size(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
                                       "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *s = getenv(vars[i]);
        long long v;
        if (s && attn_cli_parse_i64(s, 1, 1 << 30, &v)) return (int)v;
    }
    return getenv("PMIX_RANK") ? 1 : 0;
}

#ifdef ATTN_HAVE_MPI
int attn_cli_mpi_init(const char *cmd, int *rank, int *size) {
    int provided, init = 0;
    MPI_Initialized(&init);
    if (!init && MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "attn %s: MPI_Init_thread failed\n", cmd);
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return 0;
}
#endif

int attn_cli_dp_init(const char *cmd) {
    int n = launcher_size();
    if (n == 0) return 0;
#ifdef ATTN_HAVE_MPI
    if (attn_cli_mpi_init(cmd, &g.rank, &g.size)) return 1;
    g.on = 1;
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_size(node, &g.local);
        MPI_Comm_free(&node);
    }
    /* rank 0 alone prints: the others' standard output goes nowhere (errors still show) */
    if (g.rank != 0 && !freopen("/dev/null", "w", stdout)) {
        fprintf(stderr, "attn %s: rank %d: cannot silence standard output\n", cmd, g.rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return 0;
#else
    if (n > 1) {
        fprintf(stderr,
                "attn %s: started by mpirun on %d ranks, but this attn was built without "
                "-DATTN_MPI=ON: every rank would train alone; rebuild with -DATTN_MPI=ON or run "
                "one process\n", cmd, n);
        return 1;
    }
    return 0;
#endif
}

int attn_cli_dp_rank(void) { return g.rank; }
int attn_cli_dp_size(void) { return g.size; }
int attn_cli_dp_local(void) { return g.local > 0 ? g.local : 1; }

int attn_cli_dp_open(const char *cmd, attn_ctx *ctx, long long batch, const char *what,
                     const attn_train_dp **hooks) {
    *hooks = NULL;
#ifdef ATTN_HAVE_MPI
    if (!g.on || g.size == 1) return 0; /* one rank: the plain loop */
    /* the table is filled by attn_cli_dp_ready, once the ranks agree; until then its entries
     * fail (a command that forgot to call it) */
    memset(&g.hooks, 0, sizeof g.hooks);
    g.hooks.rank = g.rank, g.hooks.nranks = g.size;
    g.ctx = ctx, g.batch = batch, g.what = what;
    static char opt[40];
    snprintf(opt, sizeof opt, "--%s", what);
    attn_cli_dp_note(opt, "%lld", batch);
    /* the gradient elements per bucket (tuning, tests): read once the ranks agree on it */
    const char *bk = getenv("ATTN_DP_BUCKET");
    attn_cli_dp_note("ATTN_DP_BUCKET", "%s", bk ? bk : "(unset)");
    (void)cmd;
    *hooks = &g.hooks;
#else
    (void)cmd, (void)ctx, (void)batch, (void)what;
#endif
    return 0;
}

#ifdef ATTN_HAVE_MPI
/* The ranks' settings differ: rank 0 gathers every rank's values and names each that differs. */
static void tell_differences(const char *cmd, const uint64_t *r) {
    char *all = NULL;
    if (g.rank == 0) all = malloc((size_t)g.size * DP_NOTES * DP_VAL);
    char mine[DP_NOTES][DP_VAL];
    memset(mine, 0, sizeof mine);
    for (int i = 0; i < nnotes; i++) memcpy(mine[i], notes[i].val, DP_VAL);
    /* every rank takes part (the receive buffer matters on rank 0 only) */
    char dummy[DP_VAL];
    MPI_Gather(mine, DP_NOTES * DP_VAL, MPI_CHAR, all ? all : dummy, DP_NOTES * DP_VAL, MPI_CHAR,
               0, MPI_COMM_WORLD);
    if (g.rank != 0) return;
    fprintf(stderr, "attn %s: the ranks disagree on settings that change the result; every rank "
                    "must be given the same options, data and initial model:\n", cmd);
    for (int i = 0; i < nnotes; i++) {
        if (r[6 + 2 * i] == ~r[7 + 2 * i]) continue;
        fprintf(stderr, "  %s:", notes[i].name);
        for (int p = 0; p < g.size && all; p++) {
            if (p == 8 && g.size > 9) {
                fprintf(stderr, " ... (%d ranks)", g.size);
                break;
            }
            fprintf(stderr, "%s rank %d: %s", p ? "," : "", p,
                    all + ((size_t)p * DP_NOTES + (size_t)i) * DP_VAL);
        }
        fputc('\n', stderr);
    }
    free(all);
}
#endif

int attn_cli_dp_ready(const char *cmd, int ok) {
#ifdef ATTN_HAVE_MPI
    if (!noting() || g.ready) return ok ? 0 : 1;
    g.ready = 1;
    enum { NV = 6 + 2 * DP_NOTES };
    uint64_t v[NV], r[NV];
    /* MAX over the ranks of: the highest failed rank + 1, size - the lowest failed rank,
     * size - the lowest rank that started; the command and the list of settings; the hashes */
    v[0] = ok ? 0 : (uint64_t)g.rank + 1;
    v[1] = ok ? 0 : (uint64_t)(g.size - g.rank);
    v[2] = ok ? (uint64_t)(g.size - g.rank) : 0;
    uint64_t hc = fnv1a(FNV0, cmd, strlen(cmd) + 1);
    for (int i = 0; i < nnotes; i++) hc = fnv1a(hc, notes[i].name, strlen(notes[i].name) + 1);
    hc = fnv1a(hc, &notes_lost, sizeof notes_lost);
    v[3] = 0, v[4] = hc, v[5] = ~hc;
    for (int i = 0; i < DP_NOTES; i++) {
        uint64_t h = i < nnotes ? notes[i].h : 0;
        v[6 + 2 * i] = h, v[7 + 2 * i] = ~h;
    }
    if (MPI_Allreduce(v, r, NV, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS) {
        fprintf(stderr, "attn %s: [rank %d of %d] MPI_Allreduce failed at start-up\n", cmd,
                g.rank, g.size);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (r[0]) { /* a rank stopped before training; the lowest rank that did not tells */
        int hi = (int)r[0] - 1, lo = g.size - (int)r[1];
        if (ok && g.rank == g.size - (int)r[2]) {
            if (hi == lo)
                fprintf(stderr, "attn %s: rank %d of %d stopped before training (its message is "
                                "above): every rank stops\n", cmd, hi, g.size);
            else
                fprintf(stderr, "attn %s: ranks %d to %d of %d (some or all) stopped before "
                                "training (their messages are above): every rank stops\n",
                        cmd, lo, hi, g.size);
        }
        return 1;
    }
    if (r[4] != ~r[5]) {
        if (g.rank == 0)
            fprintf(stderr, "attn %s: the ranks run different commands (or versions of attn): "
                            "every rank must run the same one\n", cmd);
        return 1;
    }
    int differ = 0;
    for (int i = 0; i < nnotes; i++) differ |= r[6 + 2 * i] != ~r[7 + 2 * i];
    if (differ) {
        tell_differences(cmd, r);
        return 1;
    }
    /* agreed: the same on every rank from here */
    if (!g.ctx) return 0; /* attn_cli_dp_open was not called: nothing to set up */
    attn_dp_options o = attn_dp_defaults();
    const char *bk = getenv("ATTN_DP_BUCKET");
    long long bv;
    if (bk && *bk) {
        if (!attn_cli_parse_i64(bk, 1, 1LL << 28, &bv)) {
            if (g.rank == 0)
                fprintf(stderr, "attn %s: ATTN_DP_BUCKET='%s' is not a number of elements in "
                                "[1, 2^28]\n", cmd, bk);
            return 1;
        }
        o.bucket_floats = bv;
    }
    attn_status st = attn_dp_create(g.ctx, MPI_COMM_WORLD, &o, &g.dp);
    if (st != ATTN_OK) {
        attn_cli_fail(g.ctx, cmd, st);
        return 1;
    }
    /* a batch the ranks do not divide: refused here, before any step (every rank alike, rank 0
     * says why) */
    int64_t first, count;
    if ((st = attn_dp_split(g.ctx, g.dp, g.batch, g.what, &first, &count)) != ATTN_OK) {
        if (g.rank == 0) {
            fprintf(stderr, "attn %s: ", cmd);
            fprintf(stderr, "%s (%s)\n", attn_ctx_errmsg(g.ctx), attn_status_name(st));
        }
        return 1;
    }
    g.hooks = attn_dp_train_hooks(g.dp);
    g.have_hooks = 1;
    if (g.rank == 0)
        fprintf(stderr, "data parallel: %d ranks, each takes %lld of the %lld (%s) of a step; "
                        "the ranks agree on %d settings\n", g.size, g.batch / g.size, g.batch,
                g.what, nnotes);
    return 0;
#else
    (void)cmd;
    return ok ? 0 : 1;
#endif
}

void attn_cli_dp_expect_ready(const char *cmd) { g.train = 1, g.cmd = cmd; }

int attn_cli_dp_fail(attn_ctx *ctx, const char *cmd, attn_status st) {
#ifdef ATTN_HAVE_MPI
    if (g.on && g.size > 1) {
        /* a timeout (or an MPI error) is this rank's own story: every rank tells it; the rest
         * (refusals, bad input) every rank meets alike and rank 0 tells */
        if (st == ATTN_E_TIMEOUT || st == ATTN_E_IO || g.rank == 0) {
            char tag[48];
            snprintf(tag, sizeof tag, "[rank %d of %d] ", g.rank, g.size);
            attn_cli_fail_tagged(ctx, tag, cmd, st);
        }
        if (st == ATTN_E_TIMEOUT || st == ATTN_E_IO) {
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 1); /* the others may wait in MPI: stop the job */
        }
        return 1;
    }
#endif
    return attn_cli_fail(ctx, cmd, st);
}

void attn_cli_dp_fault(int64_t step) {
    /* test hooks (tests/cli_tests.cmake): rank 1 hangs or dies after step K */
    if (g.rank != 1) return;
    const char *h = getenv("ATTN_DP_TEST_HANG_STEP"), *e = getenv("ATTN_DP_TEST_EXIT_STEP");
    long long k;
    if (h && attn_cli_parse_i64(h, 1, 1LL << 40, &k) && step == k) {
        fprintf(stderr, "[rank 1] ATTN_DP_TEST_HANG_STEP: hanging after step %lld\n", k);
        for (;;) sleep(1000);
    }
    if (e && attn_cli_parse_i64(e, 1, 1LL << 40, &k) && step == k) {
        fprintf(stderr, "[rank 1] ATTN_DP_TEST_EXIT_STEP: exiting after step %lld\n", k);
        _exit(3);
    }
}

int attn_cli_dp_finish(int rc) {
#ifdef ATTN_HAVE_MPI
    /* a rank that stopped before the start-up agreement (a bad option or file, --help) joins
     * it now, failed, so that the others stop at once */
    if (noting() && !g.ready) attn_cli_dp_ready(g.cmd ? g.cmd : "train", 0);
    if (g.on) {
        attn_dp_stats s;
        attn_dp_stats_get(g.dp, &s);
        if (g.dp && g.rank == 0 && s.steps > 0)
            fprintf(stderr, "data parallel: %lld steps, %lld gradient buckets per step of which "
                            "%lld started after the backward, %.1f KiB sent per step per rank, "
                            "%.2f ms per step waiting for gradients after the backward\n",
                    (long long)s.steps, (long long)(s.buckets / s.steps),
                    (long long)(s.late_buckets / s.steps),
                    (double)s.bytes / (double)s.steps / 1024.0, 1e3 * s.exposed_s / (double)s.steps);
        attn_dp_free(g.dp);
        g.dp = NULL;
        /* a rank that failed alone must not wait in MPI_Finalize for the others */
        int any = rc != 0, all = 0;
        MPI_Allreduce(&any, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (all && !rc) rc = 1;
        MPI_Finalize();
        g.on = 0;
    }
#endif
    return rc;
}
