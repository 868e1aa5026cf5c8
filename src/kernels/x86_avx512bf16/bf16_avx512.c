/* AVX-512 BF16 kernels (VDPBF16PS: 32 bf16 products per instruction, accumulated in float).
 * Built with -mavx512bf16; used only where ctx->kern.has_bf16 (the CPU has the instructions). */
#include "../dispatch.h"

#if defined(__AVX512BF16__)
int attn__bf16_kernels_built(void) { return 1; }
#else
int attn__bf16_kernels_built(void) { return 0; }
#endif
