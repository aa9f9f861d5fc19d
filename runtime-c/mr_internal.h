/*
 * mr_internal.h -- what the runtime's source files share (not part of the API, which is
 * mithril_runtime.h): the build's ISA and tile-size macros, MR_MADD, small helpers as
 * static inline functions, the GEMM driver's operand description and the epilogue's
 * coordinates, and the functions one file of the runtime calls in another. Those have
 * external linkage (so the linker can join the files) but hidden visibility where the
 * compiler has it (MR_INTERNAL): a shared library exports only the API.
 *
 * The implementations of mithril_runtime.h (portable C99), one file per concern:
 * mr_gemm.c (GEMM: packing, micro-kernels, the blocked driver), mr_conv.c (convolution:
 * direct loops, implicit-im2col and in-place GEMMs), mr_winograd.c (F(4x4, 3x3)
 * convolution and its weight transform), mr_pool.c (pooling), mr_softmax.c (softmax),
 * mr_train.c (the SGD update) and mr_threads.c (work split through the caller's
 * parallel-for hook).
 *
 *
 * No malloc, no printf, no mutable globals, no threads. Only <math.h>, <stdint.h>,
 * <stddef.h> and <string.h>. Every function (static ones included) is prefixed mr_.
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
 *    GCC in -std=c99 mode does not). Either way the choice is fixed at compile time, so
 *    a given build is deterministic, but results may differ in the last bits between
 *    builds for different targets.
 *  - Convolution via the GEMM path sums over (c, kh, kw) in that row-major order; the
 *    direct path (Og < MR_CONV_DIRECT_OG) sums in the same order, so both match the
 *    reference order up to the KC blocking.
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

#include "mithril_runtime.h"
#include "mithril_ops.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__) && !defined(MR_NO_INTRINSICS)
#include <immintrin.h>
#define MR_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__) && !defined(MR_NO_INTRINSICS)
#include <immintrin.h>
#define MR_AVX2 1
#endif

/* Register tile: 8 x 32 fills AVX-512's 32 registers (16 accumulators of 16 floats);
 * 6 x 16 suits 16-register AVX2 and 128-bit NEON. Both are plain C that the compiler
 * vectorizes along NR. */
#if defined(__AVX512F__)
#ifndef MR_SGEMM_MR
#define MR_SGEMM_MR 8
#endif
#ifndef MR_SGEMM_NR
#define MR_SGEMM_NR 32
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
#ifndef MR_CONV_DIRECT_OG
#define MR_CONV_DIRECT_OG 4
#endif

#if MR_SGEMM_MR != 4 && MR_SGEMM_MR != 6 && MR_SGEMM_MR != 8
#error "MR_SGEMM_MR must be 4, 6 or 8"
#endif
#if MR_SGEMM_NR < 1 || MR_SGEMM_KC < 1 || MR_SGEMM_NC < 1
#error "MR_SGEMM_NR, MR_SGEMM_KC and MR_SGEMM_NC must be positive"
#endif
#if (MR_SGEMM_NC % MR_SGEMM_NR) != 0
#error "MR_SGEMM_NC must be a multiple of MR_SGEMM_NR"
#endif

#if defined(FP_FAST_FMAF)
#define MR_MADD(a, b, c) fmaf((a), (b), (c))
#else
#define MR_MADD(a, b, c) ((a) * (b) + (c))
#endif

/* The 8 x 32 micro-kernel in AVX-512 intrinsics (mr_gemm.c), which convolution's in-place
 * kernel shares (mr_conv.c). */
#if defined(MR_AVX512) && MR_SGEMM_MR == 8 && MR_SGEMM_NR == 32
#define MR_MICRO_AVX512 1
#endif

/* The 6 x 16 micro-kernel in AVX2 and FMA intrinsics (mr_gemm.c): 12 ymm accumulators,
 * two for B's row and one for A's broadcast fill the 16 registers. */
#if defined(MR_AVX2) && MR_SGEMM_MR == 6 && MR_SGEMM_NR == 16
#define MR_MICRO_AVX2 1
#endif

/* Functions one file of the runtime defines and another calls: not exported from a
 * shared library (on ELF and Mach-O; elsewhere GCC would warn that it ignores this). */
#if defined(__GNUC__) && (defined(__ELF__) || defined(__APPLE__))
#define MR_INTERNAL __attribute__((visibility("hidden")))
#else
#define MR_INTERNAL
#endif

/* ------------------------------------------------------------------------------------ */
/* Small helpers                                                                        */
/* ------------------------------------------------------------------------------------ */

/* mr_min_i64, mr_max_i64: the smaller, the larger of a and b. */
static inline int64_t mr_min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t mr_max_i64(int64_t a, int64_t b) { return a > b ? a : b; }

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
enum { MR_BSRC_STRIDED = 0, MR_BSRC_IM2COL = 1, MR_BSRC_PANELS = 2 };
typedef struct mr_bsrc {
    int kind;
    const float *p;
    int64_t rs, cs;
    int64_t H, W, KH, KW, OW, sh, sw, pt, pl, dh, dw;
    int64_t j0; /* im2col, panels: the block's column j is column j0 + j of the source */
    int64_t depth; /* panels: rows of B (a panel holds depth * MR_PANEL floats) */
} mr_bsrc;

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

/* mr_gemm.c */
MR_INTERNAL void mr_sgemm_pack_a(const float *A, int64_t a_rs, int64_t a_cs, int64_t ic,
                                 int64_t pc, int64_t mr, int64_t kc, float *ap);
MR_INTERNAL void mr_sgemm_micro(int64_t kc, const float *restrict a, int64_t ars, int64_t acs,
                                const float *restrict b, int64_t bs, float *restrict out, int64_t out_rs, int add,
                                const float *pf, int64_t pf_rows);
#ifdef MR_MICRO_AVX512
MR_INTERNAL void mr_sgemm_micro_taps(int64_t kc, const float *restrict a, int64_t ars, int64_t acs,
                                     const float *restrict base, const int64_t *off, float *restrict out,
                                     int64_t out_rs, int64_t mr, int64_t nr, int add);
#endif
MR_INTERNAL void mr_sgemm_driver(int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                                 int64_t a_rs, int64_t a_cs, const mr_bsrc *src, float beta,
                                 float *C, int64_t c_rs, int64_t c_cs, const mr_epi_at *at);
MR_INTERNAL void mr_sgemm_at(int64_t M, int64_t N, int64_t K, float alpha,
                             const float *A, int64_t a_rs, int64_t a_cs,
                             const float *B, int64_t b_rs, int64_t b_cs,
                             float beta, float *C, int64_t c_rs, int64_t c_cs, const mr_epi_at *at);
MR_INTERNAL void mr_sgemm_panels_at(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t a_rs,
                                    int64_t a_cs, const float *Bp, int64_t j0, float beta, float *C, int64_t c_rs,
                                    int64_t c_cs, const mr_epi_at *at);

/* mr_conv.c */
MR_INTERNAL int mr_conv_direct(int64_t O, int64_t groups);
MR_INTERNAL void mr_conv2d_at(const float *x, const float *w, float *y,
                              int64_t N, int64_t C, int64_t H, int64_t W,
                              int64_t O, int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                              int64_t stride_h, int64_t stride_w,
                              int64_t pad_top, int64_t pad_left,
                              int64_t dil_h, int64_t dil_w, int64_t groups,
                              const mr_epilogue *ep, int64_t n0, int64_t p0, int64_t p1);

#endif /* MR_INTERNAL_H */
