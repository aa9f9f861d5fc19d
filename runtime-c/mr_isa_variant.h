/*
 * mr_isa_variant.h -- the body of mr_isa_avx2.c and mr_isa_avx512.c, which define
 * MR_ISA_AVX2 or MR_ISA_AVX512 and include it: the ISA-specialized sources again, every
 * function compiled for that ISA (the target pragma that mr_internal.h opens, closed at
 * the end), their external names suffixed with the variant's (see mr_internal.h). Only
 * a declaration when dispatch is off (ISO C wants one in every translation unit).
 */
#include "mr_internal.h"

#if defined(MR_ISA_UNITY)
#include "mr_gemm.c"
#include "mr_gemm_i8.c"
#include "mr_conv.c"
#include "mr_winograd.c"
#include "mr_pool.c"
#include "mr_softmax.c"
#include "mr_threads.c"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#else
typedef int mr_isa_variant_off;
#endif
