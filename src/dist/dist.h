/* Helpers shared by the MPI code of src/dist (ring.c, dp.c); built only with -DATTN_MPI=ON. */
#ifndef ATTN_DIST_H
#define ATTN_DIST_H
#include "internal.h"

/* Seconds a rank waits for another before ATTN_E_TIMEOUT, when the call's options leave it 0. */
#define ATTN__MPI_DEFAULT_TIMEOUT 300.0

/* *t = the environment variable ATTN_MPI_TIMEOUT (a positive number of seconds) if set, else
 * ATTN__MPI_DEFAULT_TIMEOUT; anything else is ATTN_E_INVALID with a message naming fn. */
ATTN__HIDDEN attn_status attn__mpi_env_timeout(attn_ctx *ctx, const char *fn, double *t);
#endif
