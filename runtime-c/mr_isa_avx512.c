/*
 * mr_isa_avx512.c -- the "avx512" variant of the ISA-specialized sources (mr_isa_variant.h,
 * mr_internal.h): every function compiled for AVX-512 (F, DQ, BW, VL), AVX2 and FMA, the
 * external names suffixed _avx512; mr_dispatch.c calls them on CPUs that have the ISA.
 * Compiles to nothing when dispatch is off (MR_NO_DISPATCH, not x86-64, not GCC or
 * clang).
 */
#define MR_ISA_AVX512 1
#include "mr_isa_variant.h"
