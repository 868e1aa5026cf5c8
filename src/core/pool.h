/* A small persistent thread pool: threads - 1 workers plus the calling thread.
 *
 * attn_ctx_create makes one when params->threads > 1 (ctx->pool) and attn_ctx_free destroys
 * it; its memory comes from the context's allocator hooks.  Work is handed out with
 * attn__parallel_for, which splits [0, n) into contiguous chunks by a fixed rule and returns
 * when every chunk is done (fork-join).
 *
 * Determinism.  The split depends on n and the thread count only; callers must hand out only
 * independent work (each index writes its own outputs and reads nothing another index writes),
 * so that the partition never changes a result: results stay bit-identical for every thread
 * count, as attn.h promises.
 *
 * Thread safety.  A context, and so its pool, is used by one thread at a time (attn.h); the
 * pool does not lock against two callers at once.  A task that calls attn__parallel_for on the
 * same context (nesting) runs that inner loop inline on its own thread.
 *
 * Scheduling.  Chunk 0 runs on the caller, which then also runs every chunk no worker has
 * started yet (a worker slow to wake costs parallelism, not latency), so a chunk may run on any
 * thread: per-chunk scratch must be indexed by tid, never by the thread.  Idle workers spin up
 * to 1 ms for the next job, so back-to-back jobs start without a system call, then sleep on a
 * condition variable; the caller spins (then yields) up to 2 ms for running chunks, then
 * sleeps. */
#ifndef ATTN_POOL_H
#define ATTN_POOL_H
#include "internal.h"

struct attn__pool;

/* fn(arg, begin, end, tid): process indices [begin, end).  tid in [0, width) names the chunk
 * (not the thread that runs it).  With q = n / width and r = n % width, chunk t holds q + 1
 * indices when t < r, else q, in order: chunk t begins at t*q + min(t, r). */
typedef void (*attn__task_fn)(void *arg, int64_t begin, int64_t end, int tid);

/* Starts nthreads - 1 workers (2 <= nthreads <= 65535).  ATTN_E_NOMEM (nothing left allocated or
 * running) when memory or a thread cannot be had. */
ATTN__HIDDEN attn_status attn__pool_create(attn_ctx *ctx, int nthreads,
                                           struct attn__pool **out /* OUT */);
/* Stops and joins the workers and frees the pool; accepts NULL. */
ATTN__HIDDEN void attn__pool_free(attn_ctx *ctx, struct attn__pool *pool);

/* Number of chunks attn__parallel_for(ctx, n, ...) uses: min(threads, n), at least 1; 1 when
 * the context has no pool or is already inside a parallel loop.  Size per-chunk scratch with
 * it (or with ctx->threads, an upper bound). */
ATTN__HIDDEN int attn__parallel_width(const attn_ctx *ctx, int64_t n);

/* Runs fn over [0, n) split into attn__parallel_width(ctx, n) contiguous chunks, chunk 0 on the
 * calling thread; returns when all are done.  n <= 0 does nothing; with one chunk fn runs
 * inline as fn(arg, 0, n, 0). */
ATTN__HIDDEN void attn__parallel_for(attn_ctx *ctx, int64_t n, attn__task_fn fn, void *arg);

#endif
