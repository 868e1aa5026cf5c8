/* The tile state both AMX kernels use (gemm_amx.c, flash_amx.c); include only from files
 * compiled with the AMX flags.  Tiles are process state the OS must allow
 * (attn__cpu_amx_request, done by dispatch.c before a table with them is chosen) and thread
 * state each thread must configure: attn__amx_begin loads the configuration before a thread's
 * first tile instruction of a call and attn__amx_end releases the tiles after its last, so
 * that nothing carries over between calls or to other code on that thread. */
#ifndef ATTN_AMX_TILES_H
#define ATTN_AMX_TILES_H
#include <immintrin.h>
#include <stdint.h>

typedef struct attn__amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} attn__amx_config;

/* Palette 1, tiles 0-7 of 16 rows by 64 bytes.  A constant in memory: GCC 12 does not see
 * LDTILECFG read its operand and drops the stores that would fill a local copy. */
static const _Alignas(64) attn__amx_config attn__amx_tiles16 = {
    1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

static inline void attn__amx_begin(void) { _tile_loadconfig(&attn__amx_tiles16); }

static inline void attn__amx_end(void) { _tile_release(); }

#endif
