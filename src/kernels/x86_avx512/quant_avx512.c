#include "../quant.h"
const attn__quant_kernels *attn__quant_kernels_avx512(void) { return NULL; }
