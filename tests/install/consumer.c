/* Built against an installed attn by tests/install/check.sh, through CMake and pkg-config. */
#include <attn.h>
#include <attn_tasks.h> /* installed beside attn.h */
#include <stdio.h>

int main(void) {
    attn_ctx *ctx;
    if (attn_ctx_create(NULL, &ctx) != ATTN_OK) return 1;
    float q[8] = {1, 0, 0, 1, 1, 1, 0, 0}, o[8];
    attn_tensor Q = attn_view4(q, 1, 1, 4, 2), O = attn_view4(o, 1, 1, 4, 2);
    attn_status st = attn_sdpa(ctx, &Q, &Q, &Q, NULL, NULL, &O, NULL, NULL);
    printf("attn %s: %s\n", attn_version(), st == ATTN_OK ? "ok" : attn_ctx_errmsg(ctx));
    if (attn_dates_defaults().d_model <= 0) st = ATTN_E_INTERNAL; /* the demo tier links too */
    attn_ctx_free(ctx);
    return st != ATTN_OK;
}
