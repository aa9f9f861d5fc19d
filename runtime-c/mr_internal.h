/*
 * mr_internal.h -- what the runtime's source files share (not part of the API, which is
 * mithril_runtime.h): the build's ISA and tile-size macros, MR_MADD, small helpers as
 * static inline functions, the GEMM driver's operand description and the epilogue's
 * coordinates, and the functions one file of the runtime calls in another. Those have
 * external linkage (so the linker can join the files) but hidden visibility where the
 * compiler has it (MR_INTERNAL): a shared library exports only the API.
 *
 * The implementations of mithril_runtime.h (portable C99), one file per concern:
 * mr_gemm.c (GEMM: packing, micro-kernels, the blocked driver), mr_gemm_i8.c (int8
 * products), mr_conv.c (convolution:
 * direct loops, implicit-im2col and in-place GEMMs), mr_winograd.c (F(4x4, 3x3)
 * convolution and its weight transform), mr_pool.c (pooling), mr_softmax.c (softmax),
 * mr_train.c (the SGD update) and mr_threads.c (work split through the caller's
 * parallel-for hook); with run-time dispatch (below), mr_isa_avx2.c and mr_isa_avx512.c
 * (the ISA-specialized ones again, for those ISAs) and mr_dispatch.c (the public names).
 *
 *
 * No malloc, no printf, no mutable globals (but mr_dispatch.c's choice of variant), no
 * threads. Only <math.h>, <stdint.h>, <stddef.h> and <string.h> (and <immintrin.h>;
 * <stdlib.h> in mr_dispatch.c). Every function (static ones included) is prefixed mr_.
 *
 * Numerical choices
 * -----------------
 *  - All arithmetic is f32; nothing is promoted to double (double is soft-float on many
 *    microcontrollers). The test program checks every function against double-precision
 *    reference loops.
 *  - GEMM and convolution accumulate in float. Along k the sum is split into blocks of
 *    MR_SGEMM_KC: within a block the products are summed in increasing k; each block's
 *    sum is scaled by alpha and added to C. The first block applies beta (and, when
 *    beta == 0, overwrites C without reading it).
 *  - Multiply-adds use fmaf() when <math.h> says it is fast (FP_FAST_FMAF: GCC/glibc on a
 *    target with hardware FMA; the vectorizer turns it into vector FMAs); otherwise
 *    a*b + c, which the compiler may still contract into an FMA (clang does by default,
 *    GCC in -std=c99 mode does not); the avx2 and avx512 variants always use fmaf (their
 *    ISA has FMA). Either way the choice is fixed at compile time, so a given build and
 *    variant is deterministic, but results may differ in the last bits between builds
 *    for different targets, and between variants.
 *  - Convolution via the GEMM path sums over (c, kh, kw) in that row-major order; the
 *    direct path (Og < MR_CONV_DIRECT_OG) and the lanes path (mr_conv2d_lanes, one
 *    depth block) sum in the same order, so all match the reference order up to the KC
 *    blocking.
 *  - Max pooling and softmax's max propagate NaN (numpy semantics); average pooling sums
 *    in float in (kh, kw) order and divides by KH*KW (one correctly rounded division).
 *  - Softmax uses mr_fast_expf's reduction and polynomial for exp(x - max) (mithril_ops.h:
 *    about 1 ulp, and it vectorizes, unlike a call to expf; 0 below -87.34, where it
 *    would go subnormal) and a float sum, then divides (not multiplies by a
 *    reciprocal). For contiguous rows (inner == 1) the sum is kept in interleaved
 *    partial sums (MR_SOFTMAX_LANES, or 16 with AVX-512), which both vectorizes and
 *    shortens the error chains.
 *  - No -ffast-math assumptions: the code relies on IEEE NaN/Inf behaviour.
 */
#ifndef MR_INTERNAL_H
#define MR_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
 * ISA dispatch (see mithril_runtime.h). On x86-64 with GCC >= 6 or clang >= 9, unless
 * MR_NO_DISPATCH is defined, the ISA-specialized sources (mr_gemm.c, mr_gemm_i8.c, mr_conv.c,
 * mr_winograd.c, mr_pool.c, mr_softmax.c, mr_threads.c) are compiled three times:
 *  - as themselves, for the build's own target (plain -O3: baseline x86-64), the
 *    "generic" variant;
 *  - inside mr_isa_avx2.c, which defines MR_ISA_AVX2: every function of the translation
 *    unit compiled for AVX2 and FMA by a target pragma (below), the "avx2" variant;
 *  - inside mr_isa_avx512.c (MR_ISA_AVX512): AVX-512 F/DQ/BW/VL, the "avx512" variant.
 * Each variant's external functions get its suffix (MR_VARIANT: mr_sgemm_avx2,
 * mr_sgemm_micro_avx512, ...), so calls between the files stay inside the variant, and
 * mr_dispatch.c defines the public names, which call the variant chosen once from the
 * CPU (or MR_ISA). MR_DISPATCH says dispatch is on. Without it (MR_NO_DISPATCH, other
 * architectures and compilers: firmware, AArch64, MSVC) the sources define the plain
 * names and select their vector code from the compiler's target macros (__AVX512F__,
 * __AVX2__ and __FMA__), and mr_isa_*.c compile to nothing.
 *
 * The code's ISA conditionals key on MR_TARGET_AVX512 / MR_TARGET_AVX2 (the ISA the
 * code may use), MR_AVX512 / MR_AVX2 (and intrinsics are allowed), never on __AVX512F__
 * or __AVX2__ directly: clang does not define those after a target pragma.
 */
#if !defined(MR_NO_DISPATCH) && defined(__x86_64__) &&                                    \
    ((defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 6))
#define MR_DISPATCH 1
#endif
#if !defined(MR_DISPATCH)
#undef MR_ISA_AVX2
#undef MR_ISA_AVX512
#endif
#if defined(MR_ISA_AVX512)
#undef MR_ISA_AVX2
#define MR_ISA_UNITY 1 /* a variant's translation unit (mr_isa_*.c) */
#define MR_TARGET_AVX512 1
#define MR_TARGET_AVX2 1
#elif defined(MR_ISA_AVX2)
#define MR_ISA_UNITY 1
#define MR_TARGET_AVX2 1
#else
/* the build's own target */
#if defined(__AVX512F__)
#define MR_TARGET_AVX512 1
#endif
#if defined(__AVX2__) && defined(__FMA__)
#define MR_TARGET_AVX2 1
#endif
#endif

#if defined(MR_TARGET_AVX512) && !defined(MR_NO_INTRINSICS)
#include <immintrin.h>
#define MR_AVX512 1
#elif defined(MR_TARGET_AVX2) && !defined(MR_NO_INTRINSICS)
#include <immintrin.h>
#define MR_AVX2 1
#elif defined(__aarch64__) && !defined(MR_NO_INTRINSICS)
/* NEON is part of every AArch64 CPU: compiled in at compile time, nothing to dispatch. */
#include <arm_neon.h>
#define MR_NEON 1
#endif

/* A variant's translation unit: from here on every function is compiled for its ISA
 * (the system headers above are not; <immintrin.h>'s intrinsics may be called from
 * functions whose target has them). mr_isa_*.c end the region after their sources. */
#if defined(MR_ISA_AVX512)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")
#endif
#elif defined(MR_ISA_AVX2)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#endif

/* The variant's float vector, for code written once for every vector width (narrow
 * weights' widening, Winograd's transforms): mr_vf holds MR_VN floats (AVX-512: 16,
 * AVX2: 8, NEON: 4), and MR_VF(op) names an x86 intrinsic at its width. None in the
 * portable build. */
#if defined(MR_AVX512) || defined(MR_AVX2)
#if defined(MR_AVX512)
typedef __m512 mr_vf;
#define MR_VN 16
#define MR_VF(op) _mm512_##op
#else
typedef __m256 mr_vf;
#define MR_VN 8
#define MR_VF(op) _mm256_##op
#endif
#define mr_vf_load MR_VF(loadu_ps)
#define mr_vf_store MR_VF(storeu_ps)
#define mr_vf_set1 MR_VF(set1_ps)
#define mr_vf_add MR_VF(add_ps)
#define mr_vf_sub MR_VF(sub_ps)
#define mr_vf_mul MR_VF(mul_ps)
#define mr_vf_div MR_VF(div_ps)
#define mr_vf_fma(x, y, z) MR_VF(fmadd_ps)((x), (y), (z))   /* x * y + z */
#define mr_vf_fnma(x, y, z) MR_VF(fnmadd_ps)((x), (y), (z)) /* z - x * y */
#define mr_vf_min MR_VF(min_ps) /* (NaNs: either operand; callers test for them apart) */
#define mr_vf_max MR_VF(max_ps)
#elif defined(MR_NEON)
typedef float32x4_t mr_vf;
#define MR_VN 4
#define mr_vf_load vld1q_f32
#define mr_vf_store vst1q_f32
#define mr_vf_set1 vdupq_n_f32
#define mr_vf_add vaddq_f32
#define mr_vf_sub vsubq_f32
#define mr_vf_mul vmulq_f32
#define mr_vf_div vdivq_f32
#define mr_vf_fma(x, y, z) vfmaq_f32((z), (x), (y))
#define mr_vf_fnma(x, y, z) vfmsq_f32((z), (x), (y))
#define mr_vf_min vminq_f32
#define mr_vf_max vmaxq_f32
#endif
/* mr_vf_store_u8(p, v): v's lanes, whole numbers in [0, 255], as MR_VN bytes at p. */
#if defined(MR_AVX512)
#define mr_vf_store_u8(p, v) _mm_storeu_si128((__m128i *)(void *)(p), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(v)))
#elif defined(MR_AVX2)
static inline void mr_vf_store_u8(uint8_t *p, __m256 v)
{
    const __m256i i = _mm256_cvttps_epi32(v);
    const __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64((__m128i *)(void *)p, _mm_packus_epi16(h, h));
}
#elif defined(MR_NEON)
static inline void mr_vf_store_u8(uint8_t *p, float32x4_t v)
{
    const uint16x4_t h = vmovn_u32(vcvtq_u32_f32(v));
    uint8_t t[8];
    vst1_u8(t, vmovn_u16(vcombine_u16(h, h)));
    memcpy(p, t, 4);
}
#endif

/* Kernels written once as a body for any count of rows (MR_BODY, inlined), and a
 * switch that calls the body for each count, so each has its tile in registers
 * (MR_KERNEL: not inlined into its callers, nor copied by GCC for a caller's constant
 * arguments, whose clones doubled the GEMM kernels' code, about 40 KB). */
#define MR_BODY static inline __attribute__((always_inline))
#if defined(__clang__)
#define MR_KERNEL __attribute__((noinline))
#else
#define MR_KERNEL __attribute__((noinline, noclone))
#endif

/* Dispatch: every external function the ISA-specialized sources define gets the
 * variant's suffix: mithril_runtime.h's functions that dispatch (mr_dispatch.c's table
 * lists the same ones) and the internal ones. mr_dispatch.c (MR_DISPATCHER) keeps the
 * plain names. mr_run and mr_winograd_weights_f32 have no vector code and are defined
 * once, by the generic translation units (#ifndef MR_ISA_UNITY). */
/* (MR_NAME, from mithril_runtime.h, adds the build's MR_PREFIX.) */
#if defined(MR_ISA_AVX512)
#define MR_VARIANT(name) MR_NAME(name##_avx512)
#elif defined(MR_ISA_AVX2)
#define MR_VARIANT(name) MR_NAME(name##_avx2)
#else
#define MR_VARIANT(name) MR_NAME(name##_generic)
#endif
#if defined(MR_DISPATCH) && !defined(MR_DISPATCHER)
#define MR_RENAMED 1
/* mithril_runtime.h's functions that dispatch (mr_dispatch.c's table) */
#define mr_sgemm MR_VARIANT(mr_sgemm)
#define mr_sgemm_panels MR_VARIANT(mr_sgemm_panels)
#define mr_sgemm_mt MR_VARIANT(mr_sgemm_mt)
#define mr_sgemm_panels_mt MR_VARIANT(mr_sgemm_panels_mt)
#define mr_sgemm_panels_q MR_VARIANT(mr_sgemm_panels_q)
#define mr_sgemm_panels_q_mt MR_VARIANT(mr_sgemm_panels_q_mt)
#define mr_gemm_i8_mt MR_VARIANT(mr_gemm_i8_mt)
#define mr_conv2d_i8_mt MR_VARIANT(mr_conv2d_i8_mt)
#define mr_int8_name MR_VARIANT(mr_int8_name)
#define mr_dequantize MR_VARIANT(mr_dequantize)
#define mr_conv2d_f32 MR_VARIANT(mr_conv2d_f32)
#define mr_conv2d_f32_mt MR_VARIANT(mr_conv2d_f32_mt)
#define mr_conv2d_winograd_f32 MR_VARIANT(mr_conv2d_winograd_f32)
#define mr_conv2d_winograd_f32_mt MR_VARIANT(mr_conv2d_winograd_f32_mt)
#define mr_conv2d_q_mt MR_VARIANT(mr_conv2d_q_mt)
#define mr_conv2d_winograd_q_mt MR_VARIANT(mr_conv2d_winograd_q_mt)
#define mr_pool2d_f32 MR_VARIANT(mr_pool2d_f32)
#define mr_pool2d_f32_mt MR_VARIANT(mr_pool2d_f32_mt)
#define mr_softmax_f32 MR_VARIANT(mr_softmax_f32)
#define mr_softmax_f32_mt MR_VARIANT(mr_softmax_f32_mt)
/* internal (declared below) */
#define mr_sgemm_pack_a MR_VARIANT(mr_sgemm_pack_a)
#define mr_dequant_run MR_VARIANT(mr_dequant_run)
#define mr_sgemm_micro MR_VARIANT(mr_sgemm_micro)
#define mr_sgemm_micro_taps MR_VARIANT(mr_sgemm_micro_taps)
#define mr_sgemm_driver MR_VARIANT(mr_sgemm_driver)
#define mr_sgemm_at MR_VARIANT(mr_sgemm_at)
#define mr_sgemm_panels_at MR_VARIANT(mr_sgemm_panels_at)
#define mr_i8_quantize_rows MR_VARIANT(mr_i8_quantize_rows)
#define mr_gemm_i8_cols MR_VARIANT(mr_gemm_i8_cols)
#define mr_i8_conv_image MR_VARIANT(mr_i8_conv_image)
#define mr_i8_conv_codes MR_VARIANT(mr_i8_conv_codes)
#define mr_i8_conv_chunk MR_VARIANT(mr_i8_conv_chunk)
#define mr_conv_direct MR_VARIANT(mr_conv_direct)
#define mr_conv2d_at MR_VARIANT(mr_conv2d_at)
#endif

#include "mithril_runtime.h"
#include "mithril_ops.h"

/* Register tile, decided here for every ISA: 8 x 32 fills AVX-512's 32 registers (16
 * accumulators of 16 floats); 3 x 32 fills AVX2's 16 (12 accumulators of 8 floats,
 * three for A's elements, one for B's vector) and reads each panel row whole; 12 x 8
 * fills AArch64's 32 128-bit registers (24 accumulators of 4 floats, two for B's row,
 * three for A's 12 elements), and its 8 columns divide MR_PANEL, so B's panels are still
 * read in place; 6 x 16 suits the portable kernel, plain C that the compiler vectorizes
 * along NR. AVX-512, AVX2 and NEON have intrinsic kernels. */
#if defined(MR_TARGET_AVX512)
#ifndef MR_SGEMM_MR
#define MR_SGEMM_MR 8
#endif
#ifndef MR_SGEMM_NR
#define MR_SGEMM_NR 32
#endif
#elif defined(MR_AVX2)
#ifndef MR_SGEMM_MR
#define MR_SGEMM_MR 3
#endif
#ifndef MR_SGEMM_NR
#define MR_SGEMM_NR 32
#endif
#elif defined(MR_NEON)
#ifndef MR_SGEMM_MR
#define MR_SGEMM_MR 12
#endif
#ifndef MR_SGEMM_NR
#define MR_SGEMM_NR 8
#endif
#endif
#ifndef MR_SGEMM_MR
#define MR_SGEMM_MR 6
#endif
#ifndef MR_SGEMM_NR
#define MR_SGEMM_NR 16
#endif
#ifndef MR_SGEMM_KC
#define MR_SGEMM_KC 256
#endif
#ifndef MR_SGEMM_NC
#define MR_SGEMM_NC 64
#endif
/* A's share of L2 in the GEMM driver (mr_sgemm_driver): three quarters of the L2 that
 * cpuid reports for a core (mr_l2_bytes), unless MR_SGEMM_A_BYTES fixes it; where the
 * CPU does not say, three quarters of the 2 MiB a core of recent Xeons has (gpt_block's
 * 128 x 3072 A stays whole: as two blocks, its GEMM went from 152 to 144 GFLOP/s), and
 * of the 512 KiB of Zen 2 and 3 (its 128 x 768 A stays whole). */
#ifdef MR_SGEMM_A_BYTES
#define MR_SGEMM_A_FIXED 1
#else
#define MR_SGEMM_A_FIXED 0
#if defined(MR_TARGET_AVX512)
#define MR_SGEMM_A_BYTES (1536 * 1024)
#else
#define MR_SGEMM_A_BYTES (384 * 1024)
#endif
#endif
#ifndef MR_CONV_DIRECT_OG
#define MR_CONV_DIRECT_OG 4
#endif

/* The 12 x 8 micro-kernel in NEON intrinsics (mr_gemm.c). */
#if defined(MR_NEON) && MR_SGEMM_MR == 12 && MR_SGEMM_NR == 8
#define MR_MICRO_NEON 1
#endif

#if MR_SGEMM_MR != 4 && MR_SGEMM_MR != 6 && MR_SGEMM_MR != 8 && !defined(MR_MICRO_NEON) && \
    !(defined(MR_AVX2) && MR_SGEMM_MR == 3 && MR_SGEMM_NR == 32)
#error "MR_SGEMM_MR must be 4, 6 or 8 (or 12 with NR 8 on AArch64, 3 with NR 32 with AVX2)"
#endif
#if MR_SGEMM_NR < 1 || MR_SGEMM_KC < 1 || MR_SGEMM_NC < 1
#error "MR_SGEMM_NR, MR_SGEMM_KC and MR_SGEMM_NC must be positive"
#endif
#if (MR_SGEMM_NC % MR_SGEMM_NR) != 0
#error "MR_SGEMM_NC must be a multiple of MR_SGEMM_NR"
#endif

/* (A variant's translation unit has FMA although <math.h>, read for the baseline
 * target, does not say so.) */
#if defined(FP_FAST_FMAF) || defined(MR_ISA_UNITY)
#define MR_MADD(a, b, c) fmaf((a), (b), (c))
#else
#define MR_MADD(a, b, c) ((a) * (b) + (c))
#endif

/* The 8 x 32 micro-kernel in AVX-512 intrinsics (mr_gemm.c), which convolution's in-place
 * kernel shares (mr_conv.c). */
#if defined(MR_AVX512) && MR_SGEMM_MR == 8 && MR_SGEMM_NR == 32
#define MR_MICRO_AVX512 1
#endif

/* The 3 x 32 micro-kernel in AVX2 and FMA intrinsics (mr_gemm.c): 12 ymm accumulators,
 * three for A's broadcasts and one for B's vector fill the 16 registers. */
#if defined(MR_AVX2) && MR_SGEMM_MR == 3 && MR_SGEMM_NR == 32
#define MR_MICRO_AVX2 1
#endif

/* The x86 kernels also have a convolution kernel that reads B's rows where they are
 * (mr_sgemm_micro_taps: mr_conv.c's taps path). */
#if defined(MR_MICRO_AVX512) || defined(MR_MICRO_AVX2)
#define MR_MICRO_TAPS 1
#endif

/* The x86 kernels also take a tile of fewer rows (mr_sgemm_micro's rows, the taps
 * kernel's mr), computing only those rows and reading no row of A past them; the others compute
 * every row of the tile, so a partial sliver of A is packed and padded with zeros. */
#if defined(MR_MICRO_AVX512) || defined(MR_MICRO_AVX2)
#define MR_MICRO_ROWS 1
#else
#define MR_MICRO_ROWS 0
#endif

/* The x86 micro-kernels read A by rows with a unit column stride (acs == 1: A in place,
 * or packed by mr_sgemm_pack_a as rows of kc floats), so they step one pointer along k
 * where a stride known only at run time had the compiler keep and step one per row
 * (gpt_block's GEMMs, avx512, one thread: 146 -> 161 GFLOP/s). NEON's kernel and the
 * portable one read A packed by columns (NEON loads four rows' elements as one vector). */
#if defined(MR_MICRO_AVX512) || defined(MR_MICRO_AVX2)
#define MR_A_ROWS 1
#else
#define MR_A_ROWS 0
#endif

/* Functions one file of the runtime defines and another calls: not exported from a
 * shared library (on ELF and Mach-O; elsewhere GCC would warn that it ignores this). */
#if defined(__GNUC__) && (defined(__ELF__) || defined(__APPLE__))
#define MR_INTERNAL __attribute__((visibility("hidden")))
#else
#define MR_INTERNAL
#endif

/* A variant's versions of mithril_runtime.h's functions are not exported from a shared
 * library either: only mr_dispatch.c's public names are. */
#if defined(MR_RENAMED)
#define MR_HIDE(f) extern __typeof__(f) f MR_INTERNAL;
MR_HIDE(mr_sgemm)
MR_HIDE(mr_sgemm_panels)
MR_HIDE(mr_sgemm_mt)
MR_HIDE(mr_sgemm_panels_mt)
MR_HIDE(mr_sgemm_panels_q)
MR_HIDE(mr_sgemm_panels_q_mt)
MR_HIDE(mr_gemm_i8_mt)
MR_HIDE(mr_conv2d_i8_mt)
MR_HIDE(mr_int8_name)
MR_HIDE(mr_dequantize)
MR_HIDE(mr_conv2d_f32)
MR_HIDE(mr_conv2d_f32_mt)
MR_HIDE(mr_conv2d_winograd_f32)
MR_HIDE(mr_conv2d_winograd_f32_mt)
MR_HIDE(mr_conv2d_q_mt)
MR_HIDE(mr_conv2d_winograd_q_mt)
MR_HIDE(mr_pool2d_f32)
MR_HIDE(mr_pool2d_f32_mt)
MR_HIDE(mr_softmax_f32)
MR_HIDE(mr_softmax_f32_mt)
#undef MR_HIDE
#endif

/* ------------------------------------------------------------------------------------ */
/* Small helpers                                                                        */
/* ------------------------------------------------------------------------------------ */

/* mr_min_i64, mr_max_i64: the smaller, the larger of a and b. */
static inline int64_t mr_min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t mr_max_i64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The slivers that rows [0, M) go in: MR_SGEMM_MR rows each, except that where M leaves
 * a remainder r, the last sliver has r rows, and with MR_MICRO_ROWS, an r of 1 to 3 goes
 * with the sliver before it as two of about equal rows (32 rows in 6-row tiles: 6, 6,
 * 6, 6, 4, 4 rather than five of 6 and a 2-row sliver computed as a whole tile: mlp b32
 * 446 -> 404 us; a tile of 4 rows of 16 keeps 8 accumulators, enough for two FMA pipes
 * of 4 cycles' latency). AVX2's 3-row tiles of 32 go 2, 2 for an r of 1, and keep 8
 * accumulators too. */
static inline int64_t mr_slivers(int64_t M) { return (M + MR_SGEMM_MR - 1) / MR_SGEMM_MR; }
static inline int64_t mr_sliver_at(int64_t M, int64_t s, int64_t *rows)
{
    const int64_t MR = MR_SGEMM_MR, full = M / MR, r = M % MR;
    if (MR_MICRO_ROWS && full > 0 && r > 0 && r < 4 && s >= full - 1) {
        const int64_t hi = (MR + r + 1) / 2;
        *rows = s == full - 1 ? hi : MR + r - hi;
        return (full - 1) * MR + (s == full - 1 ? 0 : hi);
    }
    *rows = mr_min_i64(MR, M - s * MR);
    return s * MR;
}

/*
 * mr_out_range: the output positions t in [0, out_len) whose input coordinate
 * t*stride + off falls inside [0, in_len), returned as the half-open range [*lo, *hi)
 * (empty when *lo == *hi). Requires stride >= 1. The set is contiguous because the
 * coordinate is increasing in t.
 */
static inline void mr_out_range(int64_t out_len, int64_t stride, int64_t off, int64_t in_len,
                                int64_t *lo, int64_t *hi)
{
    int64_t l, h;
    if (stride == 1) { /* the common case, without divisions */
        l = off >= 0 ? 0 : -off;
        h = in_len - off < 0 ? 0 : in_len - off;
    } else {
        l = off >= 0 ? 0 : (-off + stride - 1) / stride;
        h = (in_len - 1 - off) < 0 ? 0 : (in_len - 1 - off) / stride + 1;
    }
    if (h > out_len) h = out_len;
    if (l > h) l = h;
    *lo = l;
    *hi = h;
}

#ifdef MR_AVX512
/* The lanes [a, b) of 16, clamped, as a bit mask. */
static inline unsigned mr_lanes(int64_t a, int64_t b)
{
    const int64_t lo = a < 0 ? 0 : (a > 16 ? 16 : a), hi = b < 0 ? 0 : (b > 16 ? 16 : b);
    return hi <= lo ? 0u : ((1u << hi) - 1u) & ~((1u << lo) - 1u);
}
#elif defined(MR_AVX2)
/* The lanes [a, b) of 8, clamped, as a vector mask (for AVX's masked loads). */
static inline __m256i mr_lanes8(int64_t a, int64_t b)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const int lo = (int)(a < 0 ? 0 : a > 8 ? 8 : a), hi = (int)(b < 0 ? 0 : b > 8 ? 8 : b);
    return _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(lo), lane),
                               _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), lane));
}
#endif

/* A running max: v wins if larger or NaN (NaN propagates, as numpy's max). */
static inline float mr_max_nan(float m, float v)
{
    /* `|`, not `||`: no branch, so loops of it vectorize. */
    return ((v > m) | (v != v)) ? v : m;
}

/*
 * mr_bsrc: where the B operand of the GEMM driver comes from. kind MR_BSRC_STRIDED is a
 * plain strided matrix B[k*rs + j*cs]. kind MR_BSRC_IM2COL is the implicit im2col matrix
 * of one (image, group) of a convolution: row k = (c*KH + kh)*KW + kw, column
 * j = oh*OW + ow, element = x[c, oh*sh + kh*dh - pt, ow*sw + kw*dw - pl] or 0 when that
 * lies outside [0,H) x [0,W); x points at the group's first channel of the image.
 */
enum { MR_BSRC_STRIDED = 0, MR_BSRC_IM2COL = 1, MR_BSRC_PANELS = 2, MR_BSRC_PANELS_Q = 3 };
typedef struct mr_bsrc {
    int kind;
    const float *p;
    /* MR_BSRC_PANELS_Q: panels (as MR_BSRC_PANELS) stored narrow (mithril_runtime.h's
     * types): q is their start, btype the type, nb the q8_0 scales (all the panels'
     * K rows: the int8 elements start after them); packing widens them */
    const void *q;
    int btype;
    int64_t nb;
    int64_t rs, cs;
    int64_t H, W, KH, KW, OW, sh, sw, pt, pl, dh, dw;
    int64_t j0; /* im2col, panels: the block's column j is column j0 + j of the source */
    int64_t depth; /* panels: rows of B (a panel holds depth * MR_PANEL floats) */
} mr_bsrc;

/*
 * mr_asrc: the GEMM driver's A operand: A(i, k) is element off + i*rs + k*cs of a
 * sequence stored as `type` (mithril_runtime.h's types) at q; nb is the sequence's
 * number of q8_0 scales (its int8 elements start after them), so a q8_0 element's scale
 * is that of its block in the whole sequence. f32 is read in place where the kernel can;
 * narrow types are widened as they are packed.
 */
typedef struct {
    const void *q;
    int type;
    int64_t nb, off, rs, cs;
} mr_asrc;

/* An f32 A as a mr_asrc. */
static inline mr_asrc mr_asrc_f32(const float *A, int64_t a_rs, int64_t a_cs)
{
    mr_asrc a;
    a.q = A;
    a.type = MR_F32;
    a.nb = 0;
    a.off = 0;
    a.rs = a_rs;
    a.cs = a_cs;
    return a;
}

/* Where a block of a product lies in the epilogue's coordinates: (n, i + row, j + col). */
typedef struct {
    const mr_epilogue *ep;
    int64_t n, i, j;
} mr_epi_at;

static inline void mr_epi_call(const mr_epi_at *at, int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
    if (at && at->ep && at->ep->fn && i1 > i0 && j1 > j0) {
        at->ep->fn(at->ep->ctx, at->n, at->i + i0, at->i + i1, at->j + j0, at->j + j1);
    }
}

/* mr_dispatch.c (one for every variant) */
MR_INTERNAL int64_t mr_l2_bytes(void);
/* Whether the int8 products may use an instruction set: 0 AVX-VNNI, 1 AVX-512 VNNI, 2
 * AMX-INT8, 3 AArch64's sdot (mr_dispatch.c: the CPU has it, the OS lets the process use it, and MR_INT8
 * in the environment does not rule it out). */
MR_INTERNAL int mr_i8_isa(int which);

/* mr_gemm.c */
MR_INTERNAL void mr_dequant_run(int type, const void *src, int64_t nb, int64_t e, int64_t n, float *restrict d);
MR_INTERNAL void mr_sgemm_pack_a(const mr_asrc *a, int64_t ic, int64_t pc, int64_t mr, int64_t kc, float *ap,
                                 int64_t *ars, int64_t *acs);
MR_INTERNAL void mr_sgemm_micro(int64_t rows, int64_t nr, int64_t kc, const float *restrict a, int64_t ars,
                                int64_t acs, const float *restrict b, int64_t bs, float *restrict out,
                                int64_t out_rs, int add, const float *pf, int64_t pf_rows);
#ifdef MR_MICRO_TAPS
MR_INTERNAL void mr_sgemm_micro_taps(int64_t kc, const float *restrict a, int64_t ars, int64_t acs,
                                     const float *restrict base, const int64_t *off, float *restrict out,
                                     int64_t out_rs, int64_t mr, int64_t nr, int add);
#endif
MR_INTERNAL void mr_sgemm_driver(int64_t M, int64_t N, int64_t K, float alpha, const mr_asrc *a,
                                 const mr_bsrc *src, float beta,
                                 float *C, int64_t c_rs, int64_t c_cs, const mr_epi_at *at);
MR_INTERNAL void mr_sgemm_at(int64_t M, int64_t N, int64_t K, float alpha,
                             const float *A, int64_t a_rs, int64_t a_cs,
                             const float *B, int64_t b_rs, int64_t b_cs,
                             float beta, float *C, int64_t c_rs, int64_t c_cs, const mr_epi_at *at);
MR_INTERNAL void mr_sgemm_panels_at(int64_t M, int64_t N, int64_t K, float alpha, const mr_asrc *a,
                                    const void *Bp, int btype, int64_t panels, int64_t j0, float beta,
                                    float *C, int64_t c_rs, int64_t c_cs, const mr_epi_at *at);

/* mr_gemm_i8.c */
MR_INTERNAL void mr_i8_quantize_rows(int64_t M, int64_t m, int64_t K, const float *A, int64_t a_bs, int64_t a_rs,
                                     int64_t a_cs, int64_t i0, int64_t i1, void *scratch);
MR_INTERNAL void mr_gemm_i8_cols(int64_t M, int64_t m, int64_t N, int64_t K, float alpha, const void *Bq, int64_t j0,
                                 int64_t n, float beta, float *C, int64_t c_bs, int64_t c_rs, int64_t c_cs,
                                 void *scratch, const mr_epi_at *at);
/* mr_conv2d_i8_mt's convolution (its arguments), with where its scratch holds the
 * images' scales and zero points, their codes (channels last, Hp x Wp padded positions
 * each) and the slots of rows of A, and how the positions are cut: chunks of `rows`
 * positions an image, run by `tasks` tasks, each with its slot of slot_bytes. */
typedef struct {
    const float *x;
    const void *wq;
    float *y;
    int64_t N, C, H, W, O, KH, KW, OH, OW, sh, sw, pt, pl, dh, dw, Hp, Wp;
    float *scales;
    int32_t *zeros;
    uint8_t *codes, *slots;
    int64_t rows, chunks, tasks, slot_bytes;
    const mr_epilogue *ep;
} mr_i8_conv;
MR_INTERNAL void mr_i8_conv_image(const mr_i8_conv *cv, int64_t n);
MR_INTERNAL void mr_i8_conv_codes(const mr_i8_conv *cv, int64_t n, int64_t r0, int64_t r1);
MR_INTERNAL void mr_i8_conv_chunk(const mr_i8_conv *cv, int64_t n, int64_t p0, int64_t p1, void *slot);

/* mr_conv.c */
MR_INTERNAL int mr_conv_direct(int64_t O, int64_t groups);
MR_INTERNAL void mr_conv2d_at(const float *x, const void *w, int wtype, float *y,
                              int64_t N, int64_t C, int64_t H, int64_t W,
                              int64_t O, int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                              int64_t stride_h, int64_t stride_w,
                              int64_t pad_top, int64_t pad_left,
                              int64_t dil_h, int64_t dil_w, int64_t groups,
                              const mr_epilogue *ep, int64_t n0, int64_t p0, int64_t p1);

#endif /* MR_INTERNAL_H */
