/*
 * mr_isa_avx2.c -- the "avx2" variant of the ISA-specialized sources (mr_isa_variant.h,
 * mr_internal.h): every function compiled for AVX2 and FMA, the
 * external names suffixed _avx2; mr_dispatch.c calls them on CPUs that have the ISA.
 * Compiles to nothing when dispatch is off (MR_NO_DISPATCH, not x86-64, not GCC or
 * clang).
 */
#define MR_ISA_AVX2 1
#include "mr_isa_variant.h"
