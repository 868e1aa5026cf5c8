/* Persistent thread pool (see pool.h).
 *
 * One job at a time.  The job is a fixed list of chunks (pool.h gives the split).  The caller
 * publishes it through one 64-bit ticket, generation << 32 | chunks << 16 | next chunk, then it
 * and the workers with a slot below the job's width claim chunks in order by compare-and-swap
 * on the ticket until none is left; the caller then waits for the chunks still running.  A
 * worker that wakes late, or shares its core with another process, simply claims fewer chunks:
 * a slow wake-up (hundreds of microseconds on a virtual machine whose idle vCPU halts) costs
 * parallelism, never latency.  A claim names the generation, so a late worker can never take a
 * chunk of a newer job, and the caller does not publish a newer job before every chunk of the
 * current one is done, so the job fields a claimant reads are those of its ticket.
 *
 * Which thread runs a chunk never matters: chunks are independent, and a thread runs one chunk
 * at a time, so scratch indexed by the thread's slot (tid) is never shared.
 *
 * Waiting.  Idle workers spin on the ticket (yielding the CPU after 20 microseconds, in case
 * the caller shares it), then sleep on a condition variable; the caller spins on the done
 * count (yielding the CPU after a while, in case a worker was woken onto the caller's own CPU),
 * then sleeps.  The sleep hand-offs use sequentially consistent atomics
 * (publish, then look for sleepers; announce sleeping, then look again) so that no wake-up is
 * lost. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "pool.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define ATTN__RELAX() __builtin_ia32_pause()
#elif defined(__GNUC__) && defined(__aarch64__)
#define ATTN__RELAX() __asm__ __volatile__("yield" ::: "memory")
#else
#define ATTN__RELAX() ((void)0)
#endif

/* A worker spins this long for the next job before sleeping (back-to-back jobs, e.g. the
 * blocks of one GEMM, then start without a system call): with pause for the first
 * ATTN__WORKER_PAUSE_NS, then with sched_yield, which returns at once on a CPU of its own but
 * hands a shared one to the thread that has work.  Where two of the pool's threads share a CPU
 * (more threads than CPUs: taskset, another busy process, a hybrid CPU's scheduler), a worker
 * that spun without yielding for its whole millisecond held the CPU from the caller, who was
 * about to publish the next job: SmolLM2 generation ran at half the speed of one thread
 * (docs/kernels.md, "How a context picks its kernels"). */
#define ATTN__WORKER_SPIN_NS 1000000
#define ATTN__WORKER_PAUSE_NS 20000
/* The caller spins with pause this long for running chunks, then with sched_yield up to
 * ATTN__CALLER_SLEEP_NS, then sleeps. */
#define ATTN__CALLER_PAUSE_NS 20000
#define ATTN__CALLER_SLEEP_NS 2000000

#define ATTN__TICKET(gen, width, next)                                                        \
    (((uint64_t)(gen) << 32) | ((uint64_t)(width) << 16) | (uint64_t)(next))
#define ATTN__T_GEN(t) ((uint32_t)((t) >> 32))
#define ATTN__T_CHUNKS(t) ((int)(((t) >> 16) & 0xffff))
#define ATTN__T_NEXT(t) ((int)((t)&0xffff))

typedef struct attn__worker {
    struct attn__pool *pool;
    int slot; /* 1 .. nthreads-1; the caller is slot 0 */
} attn__worker;

struct attn__pool {
    int nthreads; /* including the caller (<= 1024: chunk counts fit the ticket's 16 bits) */
    int started;  /* workers running */
    pthread_t *tids;
    attn__worker *workers;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* workers sleep here between jobs */
    pthread_cond_t done_cv; /* the caller sleeps here until every chunk is done */
    /* the current job: written by the caller before it publishes the ticket */
    attn__task_fn fn;
    void *arg;
    int64_t n;
    uint32_t gen;            /* caller-side copy of the generation */
    _Atomic uint64_t ticket; /* generation, chunk count, next unclaimed chunk */
    atomic_int width;        /* slots taking part in the current job */
    atomic_int done;         /* chunks finished in the current job */
    atomic_int sleepers;     /* workers inside the condition wait */
    atomic_int caller_sleeping;
    atomic_int stop;
    atomic_int busy; /* a parallel loop is running: nested calls run inline */
};

static int64_t attn__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t attn__nchunks(int64_t n, int width) {
    int64_t c = (int64_t)width * ATTN__POOL_OVERSPLIT;
    return width <= 1 ? 1 : n < c ? n : c;
}

static void attn__chunk(int64_t n, int64_t nchunks, int64_t t, int64_t *begin, int64_t *end) {
    int64_t q = n / nchunks, r = n % nchunks;
    *begin = t * q + (t < r ? t : r);
    *end = *begin + q + (t < r);
}

/* Claims and runs chunks of the job in ticket t, as slot `slot`, until none is left (or a
 * newer job appears). */
static void attn__claim_all(struct attn__pool *p, uint64_t t, int slot) {
    const uint32_t gen = ATTN__T_GEN(t);
    for (;;) {
        if (ATTN__T_GEN(t) != gen || ATTN__T_NEXT(t) >= ATTN__T_CHUNKS(t)) return;
        /* the ticket check validates this read: a newer width comes with a newer ticket */
        if (slot >= atomic_load_explicit(&p->width, memory_order_relaxed)) return;
        if (!atomic_compare_exchange_weak(&p->ticket, &t, t + 1)) continue; /* t reloaded */
        const int nchunks = ATTN__T_CHUNKS(t);
        int64_t b, e;
        attn__chunk(p->n, nchunks, ATTN__T_NEXT(t), &b, &e);
        p->fn(p->arg, b, e, slot);
        if (atomic_fetch_add(&p->done, 1) + 1 == nchunks && atomic_load(&p->caller_sleeping)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
        t = atomic_load(&p->ticket);
    }
}

/* Waits until the ticket's generation differs from seen; returns the ticket. */
static uint64_t attn__wait_job(struct attn__pool *p, uint32_t seen) {
    int64_t t0 = 0;
    int yielding = 0;
    for (unsigned i = 0;; i++) {
        uint64_t t = atomic_load_explicit(&p->ticket, memory_order_acquire);
        if (ATTN__T_GEN(t) != seen) return t;
        if ((i & 63) == 63 || yielding) {
            int64_t now = attn__now_ns();
            if (!t0) t0 = now;
            else if (now - t0 > ATTN__WORKER_SPIN_NS) break;
            yielding = now - t0 > ATTN__WORKER_PAUSE_NS;
        }
        if (yielding) sched_yield();
        else ATTN__RELAX();
    }
    uint64_t t;
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    while (ATTN__T_GEN(t = atomic_load(&p->ticket)) == seen) pthread_cond_wait(&p->wake, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return t;
}

static void *attn__worker_main(void *arg) {
    attn__worker *w = arg;
    struct attn__pool *p = w->pool;
    uint32_t seen = 0;
    for (;;) {
        uint64_t t = attn__wait_job(p, seen);
        if (atomic_load(&p->stop)) break;
        seen = ATTN__T_GEN(t);
        attn__claim_all(p, t, w->slot);
    }
    return NULL;
}

/* Publishes ticket t (a job, or the stop request) and wakes sleeping workers. */
static void attn__publish(struct attn__pool *p, uint64_t t) {
    atomic_store(&p->ticket, t); /* seq_cst: orders the job before the sleepers check */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
}

static void attn__wait_done(struct attn__pool *p, int nchunks) {
    int64_t t0 = 0;
    int yielding = 0;
    for (unsigned i = 0;; i++) {
        if (atomic_load_explicit(&p->done, memory_order_acquire) == nchunks) return;
        if ((i & 15) == 15) {
            int64_t now = attn__now_ns();
            if (!t0) t0 = now;
            else if (now - t0 > ATTN__CALLER_SLEEP_NS) break;
            yielding = now - t0 > ATTN__CALLER_PAUSE_NS;
        }
        if (yielding) sched_yield();
        else ATTN__RELAX();
    }
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_sleeping, 1);
    while (atomic_load(&p->done) != nchunks) pthread_cond_wait(&p->done_cv, &p->mu);
    atomic_store(&p->caller_sleeping, 0);
    pthread_mutex_unlock(&p->mu);
}

static void attn__stop_workers(struct attn__pool *p) {
    if (p->started) {
        atomic_store(&p->stop, 1);
        attn__publish(p, ATTN__TICKET(++p->gen, 0, 0));
        for (int i = 0; i < p->started; i++) pthread_join(p->tids[i], NULL);
    }
    p->started = 0;
}

attn_status attn__pool_create(attn_ctx *ctx, int nthreads, struct attn__pool **out) {
    *out = NULL;
    if (nthreads < 2 || (int64_t)nthreads * ATTN__POOL_OVERSPLIT > 0xffff) return ATTN_E_INVALID;
    struct attn__pool *p = attn__malloc(ctx, sizeof *p);
    if (!p) return ATTN_E_NOMEM;
    memset(p, 0, sizeof *p);
    p->nthreads = nthreads;
    atomic_init(&p->ticket, 0);
    atomic_init(&p->width, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_sleeping, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->busy, 0);
    p->tids = attn__calloc(ctx, (size_t)nthreads - 1, sizeof *p->tids);
    p->workers = attn__calloc(ctx, (size_t)nthreads - 1, sizeof *p->workers);
    int have_mu = 0, have_wake = 0, have_done = 0;
    if (!p->tids || !p->workers) goto fail;
    if (pthread_mutex_init(&p->mu, NULL) != 0) goto fail;
    have_mu = 1;
    if (pthread_cond_init(&p->wake, NULL) != 0) goto fail;
    have_wake = 1;
    if (pthread_cond_init(&p->done_cv, NULL) != 0) goto fail;
    have_done = 1;
    /* workers take no signals: handlers run on the application's own threads */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int i = 0; i < nthreads - 1; i++) {
        p->workers[i].pool = p;
        p->workers[i].slot = i + 1;
        if (pthread_create(&p->tids[i], NULL, attn__worker_main, &p->workers[i]) != 0) break;
        p->started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (p->started != nthreads - 1) goto fail;
    *out = p;
    return ATTN_OK;
fail:
    attn__stop_workers(p);
    if (have_done) pthread_cond_destroy(&p->done_cv);
    if (have_wake) pthread_cond_destroy(&p->wake);
    if (have_mu) pthread_mutex_destroy(&p->mu);
    attn__free(ctx, p->workers);
    attn__free(ctx, p->tids);
    attn__free(ctx, p);
    return ATTN_E_NOMEM;
}

void attn__pool_free(attn_ctx *ctx, struct attn__pool *p) {
    if (!p) return;
    attn__stop_workers(p);
    pthread_cond_destroy(&p->done_cv);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    attn__free(ctx, p->workers);
    attn__free(ctx, p->tids);
    attn__free(ctx, p);
}

int attn__parallel_width(const attn_ctx *ctx, int64_t n) {
    struct attn__pool *p = ctx->pool;
    if (!p || n <= 1 || atomic_load_explicit(&p->busy, memory_order_relaxed)) return 1;
    return n < p->nthreads ? (int)n : p->nthreads;
}

void attn__parallel_for(attn_ctx *ctx, int64_t n, attn__task_fn fn, void *arg) {
    if (n <= 0) return;
    struct attn__pool *p = ctx->pool;
    int width = attn__parallel_width(ctx, n);
    if (width == 1) {
        fn(arg, 0, n, 0);
        return;
    }
    atomic_store_explicit(&p->busy, 1, memory_order_relaxed);
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    int nchunks = (int)attn__nchunks(n, width);
    atomic_store_explicit(&p->width, width, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    uint64_t t = ATTN__TICKET(++p->gen, nchunks, 0);
    attn__publish(p, t);
    attn__claim_all(p, t, 0);
    attn__wait_done(p, nchunks);
    atomic_store_explicit(&p->busy, 0, memory_order_relaxed);
}
