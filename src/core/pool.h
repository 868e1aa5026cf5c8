/* A small persistent thread pool: threads - 1 workers plus the calling thread.
 *
 * attn_ctx_create makes one when params->threads > 1 (ctx->pool) and attn_ctx_free destroys
 * it; its memory comes from the context's allocator hooks.  Work is handed out with
 * attn__parallel_for, which splits [0, n) into contiguous chunks by a fixed rule, lets the
 * threads claim the chunks in order, and returns when every chunk is done (fork-join).
 *
 * Determinism.  The split depends on n and the thread count only, and which thread runs which
 * chunk depends on timing; callers must hand out only independent work (each index writes its
 * own outputs and reads nothing another index writes), so that neither ever changes a result:
 * results stay bit-identical for every thread count, as attn.h promises.
 *
 * Thread safety.  A context, and so its pool, is used by one thread at a time (attn.h); the
 * pool does not lock against two callers at once.  A task that calls attn__parallel_for on the
 * same context (nesting) runs that inner loop inline on its own thread.
 *
 * Scheduling.  There are up to ATTN__POOL_OVERSPLIT chunks per thread, claimed one at a time
 * by the caller and the workers, so a worker that is slow to wake or shares its core with
 * another process costs parallelism, not latency.  Idle workers spin up to 1 ms for the next
 * job (yielding the CPU after 20 us), so back-to-back jobs start without a system call, then
 * sleep on a condition variable; the caller spins (then yields) up to 2 ms for running chunks,
 * then sleeps. */
#ifndef ATTN_POOL_H
#define ATTN_POOL_H
#include "internal.h"

struct attn__pool;

/* Chunks per thread: finer chunks balance the load when a thread runs slow. */
#define ATTN__POOL_OVERSPLIT 4

/* fn(arg, begin, end, tid): process indices [begin, end).  tid in [0, width) is the slot of the
 * thread running the chunk (0: the caller); a thread runs one chunk at a time, so per-tid
 * scratch is never shared.  The split: with width > 1, c = min(n, width * OVERSPLIT) chunks;
 * with q = n / c and r = n % c, chunk t holds q + 1 indices when t < r, else q, in order
 * (chunk t begins at t*q + min(t, r)). */
typedef void (*attn__task_fn)(void *arg, int64_t begin, int64_t end, int tid);

/* Starts nthreads - 1 workers (2 <= nthreads <= 16383).  ATTN_E_NOMEM (nothing left allocated or
 * running) when memory or a thread cannot be had. */
ATTN__HIDDEN attn_status attn__pool_create(attn_ctx *ctx, int nthreads,
                                           struct attn__pool **out /* OUT */);
/* Stops and joins the workers and frees the pool; accepts NULL. */
ATTN__HIDDEN void attn__pool_free(attn_ctx *ctx, struct attn__pool *pool);

/* Number of threads attn__parallel_for(ctx, n, ...) uses: min(threads, n), at least 1; 1 when
 * the context has no pool or is already inside a parallel loop.  Size per-tid scratch with it
 * (or with ctx->threads, an upper bound). */
ATTN__HIDDEN int attn__parallel_width(const attn_ctx *ctx, int64_t n);

/* Runs fn over [0, n) in contiguous chunks on attn__parallel_width(ctx, n) threads, the caller
 * among them; returns when all are done.  n <= 0 does nothing; with width 1 fn runs inline as
 * fn(arg, 0, n, 0). */
ATTN__HIDDEN void attn__parallel_for(attn_ctx *ctx, int64_t n, attn__task_fn fn, void *arg);

#endif
