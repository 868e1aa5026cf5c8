/* Mixed-precision GEMM microkernel on AMX-BF16 (contract in ../gemm_mixed.h).  A 32 x 32 tile
 * of C lives in four 16 x 16 float tile registers (tmm0-3) for the whole K; each step of 32 k
 * values loads two 16-row slices of the A panel (tmm4-5) and the two 16-column halves of the B
 * panel's 16 pairs (tmm6-7) and issues four TDPBF16PS (16 x 16 x 32 products each).  The
 * packing is the AVX512_BF16 one (x86_avx512bf16/gemm_mixed_avx512.c).  The tile state:
 * amx_tiles.h. */
#include <string.h>

#include "../gemm_mixed.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__)
#include "amx_tiles.h"

static void ukr_amx(int64_t kh, const attn__bf16 *a, int64_t lda, const attn__bf16 *b, float *c,
                    int64_t ldc, int acc) {
    const int64_t sc = ldc * (int64_t)sizeof(float), sa = lda * (int64_t)sizeof(attn__bf16);
    if (acc) {
        _tile_loadd(0, c, sc);
        _tile_loadd(1, c + 16, sc);
        _tile_loadd(2, c + 16 * ldc, sc);
        _tile_loadd(3, c + 16 * ldc + 16, sc);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int64_t q = 0; q < kh; q += 16) {
        _tile_loadd(4, a + 2 * q, sa);
        _tile_loadd(5, a + 16 * lda + 2 * q, sa);
        _tile_loadd(6, b + q * 64, 128); /* pairs of columns 0-15: 64 of each 128-byte step */
        _tile_loadd(7, b + q * 64 + 32, 128);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c, sc);
    _tile_stored(1, c + 16, sc);
    _tile_stored(2, c + 16 * ldc, sc);
    _tile_stored(3, c + 16 * ldc + 16, sc);
}

/* K' slices of 256 up to K' = 1024: the row panel's 16 KiB slice stays in L1 across a block of
 * B panels, so half the tile loads come from L1 (measured 10-17% faster at K = 768; longer K
 * was no faster sliced, as C is then reloaded more often). */
static const attn__mixed_kernel table = {"amx_bf16", 32, 32, (size_t)1 << 20, ukr_amx,
                                         attn__amx_begin, attn__amx_end, attn__mixed_pack_a_avx512,
                                         attn__mixed_pack_b_avx512, 256, 1024};

const attn__mixed_kernel *attn__mixed_kernel_amx(void) { return &table; }
#else
const attn__mixed_kernel *attn__mixed_kernel_amx(void) { return NULL; }
#endif
