/*
 * attn_mpi.h -- attention across processes over MPI: ring (context-parallel) attention.
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

#ifdef __cplusplus
}
#endif
#endif
