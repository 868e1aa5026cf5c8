#include "../quant.h"
const attn__quant_kernels *attn__quant_kernels_avx2(void) { return NULL; }
