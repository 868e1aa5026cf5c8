/*
 * attn_mpi.h -- attention across processes over MPI: ring (context-parallel) attention, and
 * data-parallel training (attn_dp: gradients summed over the ranks, overlapping the backward).
 *
 * Installed, and compiled into libattn, only by a build with -DATTN_MPI=ON (CMake's
 * find_package(MPI); Debian: libopenmpi-dev openmpi-bin).  attn.h never includes mpi.h: only
 * programs that include this header need MPI's headers, and they link MPI as they would
 * anyway (mpicc, or CMake's MPI::MPI_C).  docs/distributed.md describes the algorithm, its
 * communication and how to run it.
 *
 * Tier: EXTRA (see attn.h): supported and tested, may change between minor versions.
 *
 * MPI itself: the caller initialises MPI (MPI_Init_thread; MPI_THREAD_FUNNELED suffices:
 * the library calls MPI from the calling thread only, never from its worker threads) and
 * finalises it.  Every rank of the communicator must make the same call with the same shapes
 * and options; the call is collective.  It uses point-to-point tags 0x4154 and 0x4155 and one
 * MPI_Iallreduce on the communicator: give it a communicator of its own (MPI_Comm_dup) when
 * other traffic may be in flight on yours at the same time.
 */
#ifndef ATTN_MPI_H
#define ATTN_MPI_H

#include <mpi.h>

#include "attn.h"
#include "attn_tasks.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which rows of the sequence each rank holds (N ranks, global length L).
 *  ZIGZAG      the sequence is cut into 2N chunks of L/(2N) rows; rank r holds chunks r and
 *              2N-1-r, in that order.  Under a causal mask every rank then has the same work
 *              (the load balancing of the context-parallel papers).  The default.
 *  CONTIGUOUS  rank r holds rows [r L/N, (r+1) L/N).  Under a causal mask rank N-1 does N
 *              blocks of work and rank 0 one: a reference, not a layout to train with.
 * Without a causal mask every query sees every key and the layout only names which global
 * rows a rank's local rows are (attn_ring_row); any local length works. */
typedef enum attn_ring_layout { ATTN_RING_ZIGZAG = 0, ATTN_RING_CONTIGUOUS = 1 } attn_ring_layout;

typedef struct attn_ring_options {
    /* attn_sdpa's options, of which causal (NONE, or TOP_LEFT = BOTTOM_RIGHT here since query
     * and key lengths are equal under a causal mask), scale and softcap apply; dropout, the
     * sliding window and ALiBi depend on global positions or indices and are refused
     * (ATTN_E_UNSUPPORTED). */
    attn_sdpa_options sdpa;
    attn_ring_layout layout;
    /* 0, or the global sequence length the caller means (the ranks' local lengths times N):
     * when set, a number of ranks that does not divide it (into 2N chunks for a causal zigzag
     * layout) is refused with ATTN_E_SHAPE before any work, on every rank. */
    int64_t seq_len;
    /* Seconds any one wait for another rank may last (the shape agreement, each block that
     * travels round the ring) before the call gives up with ATTN_E_TIMEOUT.  0: the
     * environment variable ATTN_MPI_TIMEOUT (seconds) if set, else 300. */
    double timeout_s;
} attn_ring_options;

/* sdpa = attn_sdpa_defaults(), ZIGZAG, seq_len 0, timeout 0 (the default). */
ATTN_API attn_ring_options attn_ring_defaults(void);

/* The global row of local row i of rank `rank` out of `nranks` for a sequence of L rows under
 * `layout` (ZIGZAG needs L divisible by 2 nranks, CONTIGUOUS by nranks); -1 when the arguments
 * do not describe such a row.  Scatter a sequence with it, or gather the ranks' results. */
ATTN_API int64_t attn_ring_row(int64_t L, int nranks, int rank, attn_ring_layout layout,
                               int64_t i);

/* Ring attention: attn_sdpa over a sequence split across the ranks of comm.
 *
 *  q    [B, H, Lr, D]     this rank's query rows (Lr = L / N, the rows attn_ring_row names)
 *  k    [B, Hkv, Lr, D]   this rank's key rows (the same global rows), H a multiple of Hkv
 *  v    [B, Hkv, Lr, Dv]
 *  out  [B, H, Lr, Dv]    attention of this rank's queries over the WHOLE sequence's keys
 *  lse  NULL or [B, H, Lr]: log-sum-exp of each row's scaled scores (keep it with out for
 *       attn_sdpa_ring_backward)
 * Without a causal mask the key length may differ from Lr (cross-attention; the same on every
 * rank).  The key/value blocks travel round the ring (rank r sends to r+1 and receives from
 * r-1, non-blocking, while it computes with the block it holds); each block runs the fused
 * attention kernels of attn_sdpa and the partial results are merged exactly through their
 * log-sum-exp.  Equal to attn_sdpa on the gathered tensors to float rounding (tested within
 * 1e-5 of max(1, max|out|); measured 3e-7), and the same bits for any number of threads.
 * Memory per rank: this rank's tensors, two key/value blocks in flight and the kernels'
 * workspace -- O(L/N).
 * The blocks that travel are allocated through the context's allocator hooks (also for a
 * context with a fixed caller workspace: after a timeout they may have to outlive the call);
 * the rest comes from the workspace.
 *
 * Refused on every rank before any work (the ranks agree through one small MPI_Iallreduce):
 * arguments a rank refuses locally (its own status and message; the others ATTN_E_INVALID,
 * "rank R refused the call (STATUS)"), shapes or options that differ between ranks
 * (ATTN_E_SHAPE naming the field), a causal zigzag local length that is odd, opt->seq_len
 * that N does not divide.
 *
 * Faults: no wait lasts longer than opt->timeout_s: a rank that hangs (or never calls) makes
 * the others return ATTN_E_TIMEOUT with a message naming the rank and the block they waited
 * for.  After a timeout the communicator's state is undefined (requests still pending are
 * cancelled or released, their buffers deliberately leaked since a late message could still
 * land in them): report the message and stop the job (MPI_Abort).  A rank that dies is
 * Open MPI's to report: mpirun stops the others.  A rank that fails after the ring started
 * (out of memory) makes the others time out.  Overflow (see attn_sdpa) is ATTN_E_NONFINITE
 * on the rank whose rows overflowed, after the ring completed. */
ATTN_API attn_status attn_sdpa_ring(attn_ctx *ctx, MPI_Comm comm, const attn_tensor *q,
                                    const attn_tensor *k, const attn_tensor *v,
                                    const attn_ring_options *opt, attn_tensor *out,
                                    attn_tensor *lse);

/* Backward of attn_sdpa_ring from its saved out and lse (both required; as
 * attn_sdpa_backward_saved): dq [B, H, Lr, D], dk [B, Hkv, Lr, D], dv [B, Hkv, Lr, Dv], each
 * overwritten, each may be NULL on any rank.  The key/value blocks travel round the ring as in
 * the forward, and with each its dK/dV accumulator, which every rank adds its share to before
 * passing it on; after N steps each accumulator is back at the rank holding those keys.
 * Equal to attn_sdpa_backward on the gathered tensors to float rounding (tested within 1e-4
 * of max(1, the largest gradient); measured 7e-7), the same bits for any number of threads.
 * Memory: two key/value blocks and two dK/dV accumulators in flight, O(L/N).  Refusals,
 * timeouts and overflow as attn_sdpa_ring. */
ATTN_API attn_status attn_sdpa_ring_backward(attn_ctx *ctx, MPI_Comm comm, const attn_tensor *q,
                                             const attn_tensor *k, const attn_tensor *v,
                                             const attn_ring_options *opt,
                                             const attn_tensor *out, const attn_tensor *lse,
                                             const attn_tensor *dout, attn_tensor *dq,
                                             attn_tensor *dk, attn_tensor *dv);

/* ============================================================================================
 * Data-parallel training (docs/distributed.md, "Data-parallel training").  Every rank holds the
 * whole model and runs its share of each global batch; attn_dp sums the ranks' parameter
 * gradients so that every rank takes the same optimiser step and keeps the same weights, bit
 * for bit.  The sum is a reduction of attn's own over point-to-point messages (not
 * MPI_Allreduce, whose rounding may differ between ranks): buckets of consecutive gradient
 * elements, each cut into N chunks; rank r receives everyone's chunk r, sums it in rank order
 * 0..N-1 (in double, rounded once) and sends the result to every rank.  A bucket starts while
 * the backward still runs, as soon as the model reports its gradients final (the context's
 * gradient-ready hook, attn_ctx_set_grad_ready, which attn_dp_begin installs and attn_dp_end
 * removes); the reports also drive the transfers in flight.
 * Calls are collective over the communicator given to attn_dp_create (duplicated: the object
 * has its own) and must come in the same order on every rank.  MPI from the calling thread
 * only (MPI_THREAD_FUNNELED suffices).
 * Faults: every wait polls against a deadline (timeout_s, else ATTN_MPI_TIMEOUT, else 300 s):
 * a rank that hangs or died makes the others return ATTN_E_TIMEOUT naming what they waited
 * for; the communicator is then unusable (requests cancelled or abandoned, their buffers
 * deliberately leaked): report and stop the job (MPI_Abort).
 * ========================================================================================== */
typedef struct attn_dp_options {
    double timeout_s;      /* longest wait for another rank; 0: ATTN_MPI_TIMEOUT or 300 s */
    int64_t bucket_floats; /* gradient elements per bucket, <= 2^28; 0: 2^18 (1 MiB).  More
                              than 4096 buckets are never made (they grow instead) */
    int overlap;           /* 1: start buckets from the gradient-ready hook during the
                              backward (the default); 0: all of them in attn_dp_end */
} attn_dp_options;
/* timeout 0 (the default), bucket_floats 0 (the default), overlap 1. */
ATTN_API attn_dp_options attn_dp_defaults(void);

typedef struct attn_dp attn_dp;
/* Collective (MPI_Comm_dup).  opt NULL: the defaults.  A bad timeout_s, ATTN_MPI_TIMEOUT or
 * bucket_floats is ATTN_E_INVALID. */
ATTN_API attn_status attn_dp_create(attn_ctx *ctx, MPI_Comm comm, const attn_dp_options *opt,
                                    attn_dp **out /* OUT */);
/* NULL is a no-op.  Collective unless an earlier call timed out. */
ATTN_API void attn_dp_free(attn_dp *dp);
ATTN_API int attn_dp_rank(const attn_dp *dp); /* 0 for NULL */
ATTN_API int attn_dp_size(const attn_dp *dp); /* 1 for NULL */

/* This rank's contiguous share of `global` items (examples, sequences): first = rank global/N,
 * count = global/N.  A global count that N does not divide is ATTN_E_INVALID, with a message
 * naming `what`, the count and N (every rank refuses alike, before any work).  dp NULL: one
 * process. */
ATTN_API attn_status attn_dp_split(attn_ctx *ctx, const attn_dp *dp, int64_t global,
                                   const char *what, int64_t *first, int64_t *count);

/* One step: attn_dp_begin before the backward of m (m's gradients enabled; zero them first as
 * usual), the backward on ctx, then attn_dp_end, after which m's gradients hold their sum over
 * the ranks, the same bits on every rank.  Scale each rank's loss gradient by its share of the
 * global count (tokens, examples) beforehand so that the sum is the global mean's gradient.
 * The first begin for a module checks that every rank's module has as many parameters
 * (ATTN_E_SHAPE) and the same parameter bits (a 64-bit hash of them; ATTN_E_INVALID on every
 * rank: the ranks would otherwise train different models without notice).  Failures: ATTN_E_TIMEOUT as above; MPI errors ATTN_E_IO. */
ATTN_API attn_status attn_dp_begin(attn_dp *dp, attn_ctx *ctx, attn_module *m);
ATTN_API attn_status attn_dp_end(attn_dp *dp, attn_ctx *ctx, attn_module *m);
/* x[0 .. n-1] becomes its sum over the ranks, added in rank order (the same bits on every
 * rank).  For the step's totals (loss sums, token counts, stop flags).  n <= 2^20. */
ATTN_API attn_status attn_dp_sum(attn_dp *dp, attn_ctx *ctx, double *x, int n);
/* FNV-1a of the bytes of m's parameters (0xcbf29ce484222325 for NULL). */
ATTN_API uint64_t attn_dp_params_hash(const attn_module *m);
/* ATTN_OK when every rank's m has the same parameter bits (the hashes agree), else
 * ATTN_E_INVALID on every rank. */
ATTN_API attn_status attn_dp_check_same(attn_dp *dp, attn_ctx *ctx, const attn_module *m);

/* What the steps so far cost: steps completed, buckets summed, bytes sent per rank,
 * exposed_s: time spent in attn_dp_end, i.e. communication the backward did not hide;
 * hook_s: time spent inside the gradient-ready hook (starting and polling transfers);
 * late_buckets: buckets that started only in attn_dp_end. */
typedef struct attn_dp_stats {
    int64_t steps, buckets, late_buckets, bytes;
    double exposed_s, hook_s;
} attn_dp_stats;
ATTN_API void attn_dp_stats_get(const attn_dp *dp, attn_dp_stats *out);

/* The table the demo tasks take (attn_charlm_config.dp, attn_dates_config.dp; attn_tasks.h)
 * over dp: begin, end and sum above. */
ATTN_API attn_train_dp attn_dp_train_hooks(attn_dp *dp);

#ifdef __cplusplus
}
#endif
#endif
