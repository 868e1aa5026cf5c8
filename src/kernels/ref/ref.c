/* Plain C reference kernels: the readable definition of each op and the test oracle.
 * Dot products accumulate in double so the oracle is more exact than any fast kernel.
 * The kernel bodies live in ref_impl.h, instantiated here in float (the library's kernels)
 * and in double (suffix _f64, ref_f64.h: the finite-difference oracle of the tests). */
#include <math.h>
#include <string.h>

#include "../ew.h"
#include "../kernels.h"
#include "ref_f64.h"

/* ---- the kernels, in float and in double ------------------------------------------------ */
#define R float
#define RF(name) name
#define R_EXP(x) expf(x)
#define R_TANH(x) tanhf(x)
#define SDPA_ARGS attn__sdpa_args
#define SDPA_GRADS attn__sdpa_grads
#include "ref_impl.h"
#undef R
#undef RF
#undef R_EXP
#undef R_TANH
#undef SDPA_ARGS
#undef SDPA_GRADS

#define R double
#define RF(name) name##_f64
#define R_EXP(x) exp(x)
#define R_TANH(x) tanh(x)
#define SDPA_ARGS attn__sdpa_args_f64
#define SDPA_GRADS attn__sdpa_grads_f64
#include "ref_impl.h"
#undef R
#undef RF
#undef R_EXP
#undef R_TANH
#undef SDPA_ARGS
#undef SDPA_GRADS
