/*
 * mr_isa_avx512.c -- the "avx512" variant of the ISA-specialized sources (see mr_internal.h):
 * each of them again, every function compiled for AVX-512 (F, DQ, BW, VL), AVX2 and FMA by a target pragma,
 * their external names suffixed _avx512. mr_dispatch.c calls them on CPUs that have
 * the ISA. Compiles to nothing when dispatch is off (MR_NO_DISPATCH, not x86-64, not
 * GCC or clang).
 */
#define MR_ISA_AVX512 1
#include "mr_internal.h"

#if defined(MR_ISA_AVX512)
#include "mr_gemm.c"
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
typedef int mr_isa_avx512_off; /* ISO C wants a declaration in every translation unit */
#endif
