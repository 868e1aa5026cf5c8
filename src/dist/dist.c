/* Helpers shared by the MPI code of src/dist (dist.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "dist.h"

attn_status attn__mpi_env_timeout(attn_ctx *ctx, const char *fn, double *t) {
    const char *s = getenv("ATTN_MPI_TIMEOUT");
    *t = ATTN__MPI_DEFAULT_TIMEOUT;
    if (!s || !*s) return ATTN_OK;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    ATTN_FAIL_IF(errno || *end || !(v > 0) || !isfinite(v), ctx, ATTN_E_INVALID,
                 "%s: ATTN_MPI_TIMEOUT='%s' is not a positive number of seconds", fn, s);
    *t = v;
    return ATTN_OK;
}
