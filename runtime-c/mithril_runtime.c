/*
 * mithril_runtime.c -- implementations of mithril_runtime.h (portable C99).
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
#include "mithril_runtime.h"
#include "mithril_ops.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__) && !defined(MR_NO_INTRINSICS)
#include <immintrin.h>
#define MR_AVX512 1
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
#define MR_SOFTMAX_LANES 8
#define MR_SOFTMAX_TILE 64

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

/* ------------------------------------------------------------------------------------ */
/* Small helpers                                                                        */
/* ------------------------------------------------------------------------------------ */

/* mr_min_i64, mr_max_i64: the smaller, the larger of a and b. */
static int64_t mr_min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t mr_max_i64(int64_t a, int64_t b) { return a > b ? a : b; }

/*
 * mr_out_range: the output positions t in [0, out_len) whose input coordinate
 * t*stride + off falls inside [0, in_len), returned as the half-open range [*lo, *hi)
 * (empty when *lo == *hi). Requires stride >= 1. The set is contiguous because the
 * coordinate is increasing in t.
 */
static void mr_out_range(int64_t out_len, int64_t stride, int64_t off, int64_t in_len,
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

/* ------------------------------------------------------------------------------------ */
/* GEMM                                                                                 */
/* ------------------------------------------------------------------------------------ */

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

/* Panel layout: B(k, j) is at p[(j / MR_PANEL) * depth * MR_PANEL + k * MR_PANEL + j % MR_PANEL]. */
static const float *mr_panel_at(const mr_bsrc *src, int64_t k, int64_t j)
{
    j += src->j0;
    return src->p + (j / MR_PANEL) * src->depth * MR_PANEL + k * MR_PANEL + j % MR_PANEL;
}

/* Whether the micro-kernel can read B's panels in place (its panels split them). */
static int mr_panels_in_place(const mr_bsrc *src)
{
    return src->kind == MR_BSRC_PANELS && MR_PANEL % MR_SGEMM_NR == 0 && src->j0 % MR_SGEMM_NR == 0;
}

#ifdef MR_AVX512
/* The lanes [a, b) of 16, clamped, as a bit mask. */
static unsigned mr_lanes(int64_t a, int64_t b)
{
    const int64_t lo = a < 0 ? 0 : (a > 16 ? 16 : a), hi = b < 0 ? 0 : (b > 16 ? 16 : b);
    return hi <= lo ? 0u : ((1u << hi) - 1u) & ~((1u << lo) - 1u);
}

/* d[0..len) = zeros in [0, za), lane t = the float at address `at` + 4t in [za, zb),
 * zeros in [zb, len), with masked loads and stores: no scalar loops. Lanes outside
 * [za, zb) are masked off, so their addresses (which may lie outside the input, hence
 * the integer address) are never read. */
static void mr_pack_piece_avx512(float *d, int64_t len, int64_t za, int64_t zb, uintptr_t at)
{
    int64_t t0;
    for (t0 = 0; t0 < len; t0 += 16) {
        const __m512 v = _mm512_maskz_loadu_ps((__mmask16)mr_lanes(za - t0, zb - t0), (const void *)(at + 4u * (uintptr_t)t0));
        _mm512_mask_storeu_ps(d + t0, (__mmask16)mr_lanes(0, len - t0), v);
    }
}
#endif

#if defined(MR_AVX512) && MR_SGEMM_NR == 32
/* Segments of one output row a 32-column panel can span, and taps per filter, that the
 * fast im2col packing handles. */
#define MR_IM2COL_SEGS 6
#define MR_IM2COL_TAPS 49

/*
 * mr_pack_im2col_fast: the im2col block of mr_sgemm_pack_b for stride 1 and dilation 1,
 * panel by panel. A panel's 32 columns are pieces (segments) of consecutive output
 * rows; for tap (kh, kw) segment s reads one run of input row oh_s + kh - pt, so every
 * depth row of the panel is, per segment and half, one masked load at an offset, with
 * masks and offsets that depend only on the tap: computed once per panel. Returns 0
 * (packing nothing) outside that case.
 */
static int mr_pack_im2col_fast(const mr_bsrc *src, int64_t pc, int64_t jc, int64_t kc, int64_t nc, float *bp)
{
    const int64_t NR = 32, taps = src->KH * src->KW, HW = src->H * src->W;
    int64_t q;
    if (src->kind != MR_BSRC_IM2COL || src->sh != 1 || src->sw != 1 || src->dh != 1 || src->dw != 1 ||
        taps > MR_IM2COL_TAPS || (NR + src->OW - 1) / src->OW + 1 > MR_IM2COL_SEGS) {
        return 0;
    }
    for (q = 0; q * NR < nc; ++q) {
        int64_t off[MR_IM2COL_TAPS][MR_IM2COL_SEGS];
        unsigned mask[MR_IM2COL_TAPS][MR_IM2COL_SEGS];
        int64_t seg_start[MR_IM2COL_SEGS], seg_oh[MR_IM2COL_SEGS], seg_ow[MR_IM2COL_SEGS];
        const int64_t nv = mr_min_i64(NR, nc - q * NR), p0 = src->j0 + jc + q * NR;
        int64_t nseg = 0, t = 0, tap, r, c, th, tw;
        float *dst = bp + q * kc * NR;
        /* the panel's lanes [0, nv) as runs of output rows */
        while (t < nv) {
            const int64_t p = p0 + t;
            seg_start[nseg] = t;
            seg_oh[nseg] = p / src->OW;
            seg_ow[nseg] = p % src->OW;
            t += mr_min_i64(nv - t, src->OW - seg_ow[nseg]);
            ++nseg;
        }
        for (tap = 0, th = 0, tw = 0; tap < taps; ++tap) {
            int64_t s;
            for (s = 0; s < nseg; ++s) {
                const int64_t end = s + 1 < nseg ? seg_start[s + 1] : nv;
                const int64_t ih = seg_oh[s] + th - src->pt;
                /* lane u of the segment reads column seg_ow + u + tw - pl of row ih */
                const int64_t shift = seg_ow[s] + tw - src->pl;
                const int64_t lo = mr_min_i64(end - seg_start[s], shift < 0 ? -shift : 0);
                const int64_t hi = mr_min_i64(end - seg_start[s], src->W - shift);
                const int row_ok = ih >= 0 && ih < src->H;
                mask[tap][s] = row_ok && hi > lo ? (unsigned)((((uint64_t)1 << hi) - 1u) & ~(((uint64_t)1 << lo) - 1u))
                                                       << seg_start[s]
                                                 : 0u;
                off[tap][s] = ih * src->W + shift - seg_start[s];
            }
            /* (th, tw) = (tap / KW, tap % KW), stepped instead of divided out */
            if (++tw == src->KW) {
                tw = 0;
                ++th;
            }
        }
        c = pc / taps;
        tap = pc % taps;
        for (r = 0; r < kc; ++r) {
            const uintptr_t xc = (uintptr_t)(src->p + c * HW);
            __m512 lo = _mm512_setzero_ps(), hi = lo;
            int64_t s;
            for (s = 0; s < nseg; ++s) {
                const uintptr_t at = xc + 4u * (uintptr_t)off[tap][s];
                lo = _mm512_mask_loadu_ps(lo, (__mmask16)(mask[tap][s] & 0xffffu), (const void *)at);
                hi = _mm512_mask_loadu_ps(hi, (__mmask16)(mask[tap][s] >> 16), (const void *)(at + 64u));
            }
            _mm512_storeu_ps(dst + r * NR, lo);
            _mm512_storeu_ps(dst + r * NR + 16, hi);
            if (++tap == taps) {
                tap = 0;
                ++c;
            }
        }
    }
    return 1;
}
#else
static int mr_pack_im2col_fast(const mr_bsrc *src, int64_t pc, int64_t jc, int64_t kc, int64_t nc, float *bp)
{
    (void)src; (void)pc; (void)jc; (void)kc; (void)nc; (void)bp;
    return 0;
}
#endif

/*
 * mr_sgemm_pack_b: copies the kc x nc block of B starting at (row pc, column jc) into bp,
 * laid out as ceil(nc/NR) consecutive micro-panels; micro-panel q holds columns
 * [q*NR, q*NR + NR) of the block as kc rows of NR contiguous floats:
 *   bp[(q*kc + r)*NR + t] = B(pc + r, jc + q*NR + t), zero for columns past nc.
 */
static void mr_sgemm_pack_b(const mr_bsrc *src, int64_t pc, int64_t jc, int64_t kc,
                            int64_t nc, float *bp)
{
    const int64_t NR = MR_SGEMM_NR;
    const int64_t npanels = (nc + NR - 1) / NR;
    int64_t q, r, t;
    if (src->kind == MR_BSRC_PANELS) {
        for (q = 0; q < npanels; ++q) {
            const int64_t nv = mr_min_i64(NR, nc - q * NR);
            for (r = 0; r < kc; ++r) {
                float *d = bp + (q * kc + r) * NR;
                for (t = 0; t < nv; ++t) d[t] = *mr_panel_at(src, pc + r, jc + q * NR + t);
                for (; t < NR; ++t) d[t] = 0.0f;
            }
        }
    } else if (src->kind == MR_BSRC_STRIDED && src->cs == 1 && nc % NR == 0) {
        /* Row-major B in whole panels (a weight stored transposed): each row's nc floats
         * are read in one contiguous sweep, and rows a few ahead are prefetched (the
         * rows are far apart, which defeats the hardware prefetcher). */
        for (r = 0; r < kc; ++r) {
            const float *s = src->p + (pc + r) * src->rs + jc;
#if defined(__GNUC__)
            if (r + 8 < kc) {
                for (t = 0; t < nc; t += 16) __builtin_prefetch(s + 8 * src->rs + t);
            }
#endif
            for (q = 0; q < npanels; ++q) {
                memcpy(bp + (q * kc + r) * NR, s + q * NR, sizeof(float) * (size_t)NR);
            }
        }
    } else if (src->kind == MR_BSRC_STRIDED) {
        for (q = 0; q < npanels; ++q) {
            const int64_t nv = mr_min_i64(NR, nc - q * NR);
            float *dst = bp + q * kc * NR;
            const float *s0 = src->p + pc * src->rs + (jc + q * NR) * src->cs;
            if (src->cs == 1 && nv == NR) {
                for (r = 0; r < kc; ++r) {
                    memcpy(dst + r * NR, s0 + r * src->rs, sizeof(float) * (size_t)NR);
                }
            } else {
                for (r = 0; r < kc; ++r) {
                    const float *s = s0 + r * src->rs;
                    float *d = dst + r * NR;
                    for (t = 0; t < nv; ++t) d[t] = s[t * src->cs];
                    for (; t < NR; ++t) d[t] = 0.0f;
                }
            }
        }
    } else if (mr_pack_im2col_fast(src, pc, jc, kc, nc, bp)) {
        /* done */
    } else {
        const int64_t padded = npanels * NR;
        const int64_t oh0 = (src->j0 + jc) / src->OW, ow0 = (src->j0 + jc) % src->OW;
        /* (c, kh, kw) of block row r, advanced incrementally instead of divided out */
        int64_t c = pc / (src->KH * src->KW), kh = (pc / src->KW) % src->KH, kw = pc % src->KW;
        for (r = 0; r < kc; ++r) {
            const float *xc = src->p + c * src->H * src->W;
            const int64_t woff = kw * src->dw - src->pl;
            int64_t lo, hi, j = 0, oh = oh0, ow = ow0;
            mr_out_range(src->OW, src->sw, woff, src->W, &lo, &hi);
            /* walk the block's columns one output row (oh) at a time, and each output row
             * in pieces that stay inside one micro-panel, so every piece is a contiguous
             * destination: zeros, then the in-range input taps, then zeros */
            while (j < nc) {
                const int64_t ih = oh * src->sh + kh * src->dh - src->pt;
                const int64_t row_end = mr_min_i64(src->OW, ow + (nc - j));
                const int row_ok = ih >= 0 && ih < src->H;
                const float *xr = xc + (row_ok ? ih * src->W : 0);
                while (ow < row_end) {
                    const int64_t off = j % NR;
                    const int64_t len = mr_min_i64(NR - off, row_end - ow);
                    float *restrict d = bp + ((j / NR) * kc + r) * NR + off;
                    const int64_t za = row_ok ? mr_min_i64(len, lo > ow ? lo - ow : 0) : len;
                    const int64_t zb = row_ok ? mr_min_i64(len, hi > ow ? hi - ow : 0) : len;
#ifdef MR_AVX512
                    if (src->sw == 1) {
                        mr_pack_piece_avx512(d, len, za, zb, (uintptr_t)xr + 4u * (uintptr_t)(ow + woff));
                        j += len;
                        ow += len;
                        continue;
                    }
#endif
                    for (t = 0; t < za; ++t) d[t] = 0.0f;
                    if (zb > za) {
                        /* xs[u*sw] = x[c, ih, (ow + za + u)*sw + woff], in range for u < zb-za */
                        const float *restrict xs = xr + (ow + za) * src->sw + woff;
                        if (src->sw == 1) {
                            for (t = za; t < zb; ++t) d[t] = xs[t - za];
                        } else {
                            for (t = za; t < zb; ++t) d[t] = xs[(t - za) * src->sw];
                        }
                    }
                    for (t = zb > za ? zb : za; t < len; ++t) d[t] = 0.0f;
                    j += len;
                    ow += len;
                }
                ow = 0;
                ++oh;
            }
            for (t = nc; t < padded; ++t) bp[((t / NR) * kc + r) * NR + t % NR] = 0.0f;
            if (++kw == src->KW) {
                kw = 0;
                if (++kh == src->KH) {
                    kh = 0;
                    ++c;
                }
            }
        }
    }
}

/*
 * mr_sgemm_pack_a: copies the mr x kc block of A at (row ic, column pc) into ap as kc
 * columns of MR contiguous floats: ap[r*MR + i] = A[(ic+i)*a_rs + (pc+r)*a_cs] for
 * i < mr, zero for mr <= i < MR.
 */
static void mr_sgemm_pack_a(const float *A, int64_t a_rs, int64_t a_cs, int64_t ic,
                            int64_t pc, int64_t mr, int64_t kc, float *ap)
{
    const int64_t MR = MR_SGEMM_MR;
    int64_t i, r;
    for (i = 0; i < mr; ++i) {
        const float *s = A + (ic + i) * a_rs + pc * a_cs;
        if (a_cs == 1) {
            for (r = 0; r < kc; ++r) ap[r * MR + i] = s[r];
        } else {
            for (r = 0; r < kc; ++r) ap[r * MR + i] = s[r * a_cs];
        }
    }
    for (; i < MR; ++i) {
        for (r = 0; r < kc; ++r) ap[r * MR + i] = 0.0f;
    }
}

/*
 * mr_sgemm_micro: the register micro-kernel. For i < MR, j < NR, with
 *   s = sum_{r<kc} a[i*ars + r*acs] * b[r*bs + j], summed in increasing r:
 *   out[i*out_rs + j] = s, or out[i*out_rs + j] + s when `add`,
 * where b is a B micro-panel (kc rows of NR floats bs apart: packed, or a weight's
 * panel in place) and a is either a packed A sliver (ars = 1, acs = MR) or A itself when
 * it has a unit stride (no copy needed). out is the MR x NR tile or C itself.
 * While it runs, the kernel may prefetch into L2 the pf_rows rows of NR floats (bs apart)
 * that start at pf (none when pf_rows == 0); it reads nothing there.
 * Each row of the tile is a separate accumulator array and every j loop has the
 * compile-time bound NR, so the compiler vectorizes along j and keeps the MR x NR tile in
 * registers; a[...] becomes one broadcast per row and step.
 */
#if defined(MR_AVX512) && MR_SGEMM_MR == 8 && MR_SGEMM_NR == 32
/* The 8 x 32 tile in 16 zmm accumulators, written out with intrinsics: the same sums in
 * the same order (fused multiply-adds) as the portable kernel below. */
#define MR_MICRO_AVX512 1
#ifndef MR_B_AHEAD
#define MR_B_AHEAD 16
#endif
/* Row i of the tile: its A element times both halves of B's row. */
#define MR_ROW_FMA(i)                                   \
    x = _mm512_set1_ps(a[(i) * ars]);                   \
    c##i##0 = _mm512_fmadd_ps(x, b0, c##i##0);          \
    c##i##1 = _mm512_fmadd_ps(x, b1, c##i##1)
#define MR_ROW_STORE(i)                                                                              \
    if (add) {                                                                                       \
        c##i##0 = _mm512_add_ps(_mm512_loadu_ps(out + (i) * out_rs), c##i##0);                      \
        c##i##1 = _mm512_add_ps(_mm512_loadu_ps(out + (i) * out_rs + 16), c##i##1);                 \
    }                                                                                                \
    _mm512_storeu_ps(out + (i) * out_rs, c##i##0);                                                   \
    _mm512_storeu_ps(out + (i) * out_rs + 16, c##i##1)
/* One step of k: B's row at `row` (both halves) against the tile's eight A elements. */
#define MR_K_STEP(row)                                                            \
    {                                                                             \
        const float *bq = (row);                                                  \
        const __m512 b0 = _mm512_loadu_ps(bq), b1 = _mm512_loadu_ps(bq + 16);     \
        __m512 x;                                                                 \
        MR_ROW_FMA(0); MR_ROW_FMA(1); MR_ROW_FMA(2); MR_ROW_FMA(3);               \
        MR_ROW_FMA(4); MR_ROW_FMA(5); MR_ROW_FMA(6); MR_ROW_FMA(7);               \
        a += acs;                                                                 \
    }
#define MR_TILE_ZERO                                                                                       \
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00; \
    __m512 c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00
#define MR_TILE_STORE                                                   \
    MR_ROW_STORE(0); MR_ROW_STORE(1); MR_ROW_STORE(2); MR_ROW_STORE(3); \
    MR_ROW_STORE(4); MR_ROW_STORE(5); MR_ROW_STORE(6); MR_ROW_STORE(7)
/* At every 2^shift-th step r, row r >> shift of the pf region into L2, while there
 * are rows left. */
#define MR_PF_STEP(r)                                                            \
    if (((r) & every) == 0 && ((r) >> shift) < pf_rows) {                        \
        const float *q = pf + ((r) >> shift) * bs;                               \
        _mm_prefetch((const char *)q, _MM_HINT_T1);                              \
        _mm_prefetch((const char *)(q + 16), _MM_HINT_T1);                       \
    }
static void mr_sgemm_micro_avx512(int64_t kc, const float *restrict a, int64_t ars, int64_t acs,
                                  const float *restrict b, int64_t bs, float *restrict out, int64_t out_rs, int add,
                                  const float *pf, int64_t pf_rows)
{
    MR_TILE_ZERO;
    int64_t r, every;
    int shift = 0;
    /* the pf rows spread evenly over the kc steps, one every 2^shift steps (at most kc
     * of them: when a short last depth block precedes a full one, the rest is left to
     * the hardware; a loop for several rows a step slowed a 40 x 3072 x 768 GEMM by 7%) */
    while (pf_rows > 0 && (kc >> (shift + 1)) >= pf_rows) ++shift;
    every = ((int64_t)1 << shift) - 1; /* a mask: r & every is 0 every 2^shift steps */
    /* Every sliver after the first finds the micro-panel in L1, but the first streams it
     * from L3, about 3.5 times slower: there the FMAs wait on B. The hardware prefetcher
     * alone leaves them waiting, so fetch MR_B_AHEAD rows ahead (gpt_block b1: 16.0 ->
     * 15.1 ms), and let each sliver bring its share of the next micro-panel into L2 (pf)
     * (its 128 x 3072 x 768 GEMM, 5980 -> 1965 cycles for the first sliver). The last rows
     * run without the first, so no prefetch address lies past the panel. */
    for (r = 0; r + MR_B_AHEAD < kc; ++r, b += bs) {
        _mm_prefetch((const char *)(b + MR_B_AHEAD * bs), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + MR_B_AHEAD * bs + 16), _MM_HINT_T0);
        MR_PF_STEP(r)
        MR_K_STEP(b)
    }
    for (; r < kc; ++r, b += bs) {
        MR_PF_STEP(r)
        MR_K_STEP(b)
    }
    MR_TILE_STORE;
}
#undef MR_PF_STEP

/* mr_conv2d_taps_gemm's kernel: the 8 x 32 tile whose B row r is the 32 floats at
 * base + off[r], read in place; rows [0, mr) and columns [0, nr) of it are stored to
 * out (row i at out + i*out_rs), or added to it when `add`. Not inlined: inside its
 * caller's loops the compiler runs out of registers for the eight row offsets of A and
 * spills them (cnn b1 1t: 2.23 -> 2.09 ms). */
__attribute__((noinline)) static void mr_sgemm_micro_taps(int64_t kc, const float *restrict a, int64_t ars, int64_t acs,
                                const float *restrict base, const int64_t *off, float *restrict out,
                                int64_t out_rs, int64_t mr, int64_t nr, int add)
{
    MR_TILE_ZERO;
    const __mmask16 m0 = (__mmask16)mr_lanes(0, nr), m1 = (__mmask16)mr_lanes(0, nr - 16);
    int64_t r;
    for (r = 0; r + MR_B_AHEAD < kc; ++r) {
        _mm_prefetch((const char *)(base + off[r + MR_B_AHEAD]), _MM_HINT_T0);
        _mm_prefetch((const char *)(base + off[r + MR_B_AHEAD] + 16), _MM_HINT_T0);
        MR_K_STEP(base + off[r])
    }
    for (; r < kc; ++r) MR_K_STEP(base + off[r])
/* Row i's columns [0, nr): masked loads and stores touch no lane past nr, and the
 * second half's address is formed only when it has lanes. */
#define MR_ROW_STORE_MASKED(i)                                                               \
    if ((i) < mr) {                                                                          \
        float *o = out + (i) * out_rs;                                                       \
        if (add) c##i##0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, o), c##i##0);             \
        _mm512_mask_storeu_ps(o, m0, c##i##0);                                               \
        if (nr > 16) {                                                                       \
            if (add) c##i##1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, o + 16), c##i##1);    \
            _mm512_mask_storeu_ps(o + 16, m1, c##i##1);                                      \
        }                                                                                    \
    }
    MR_ROW_STORE_MASKED(0) MR_ROW_STORE_MASKED(1) MR_ROW_STORE_MASKED(2) MR_ROW_STORE_MASKED(3)
    MR_ROW_STORE_MASKED(4) MR_ROW_STORE_MASKED(5) MR_ROW_STORE_MASKED(6) MR_ROW_STORE_MASKED(7)
#undef MR_ROW_STORE_MASKED
}
#undef MR_ROW_FMA
#undef MR_ROW_STORE
#undef MR_K_STEP
#undef MR_TILE_ZERO
#undef MR_TILE_STORE
#endif

#ifdef MR_MICRO_AVX512
static void mr_sgemm_micro(int64_t kc, const float *restrict a, int64_t ars, int64_t acs,
                           const float *restrict b, int64_t bs, float *restrict out, int64_t out_rs, int add,
                           const float *pf, int64_t pf_rows)
{
    mr_sgemm_micro_avx512(kc, a, ars, acs, b, bs, out, out_rs, add, pf, pf_rows);
}
#else
static void mr_sgemm_micro(int64_t kc, const float *restrict a, int64_t ars, int64_t acs,
                           const float *restrict b, int64_t bs, float *restrict out, int64_t out_rs, int add,
                           const float *pf, int64_t pf_rows)
{
    (void)pf; /* portable C has no prefetch */
    (void)pf_rows;
    float c0[MR_SGEMM_NR], c1[MR_SGEMM_NR], c2[MR_SGEMM_NR], c3[MR_SGEMM_NR];
#if MR_SGEMM_MR > 4
    float c4[MR_SGEMM_NR], c5[MR_SGEMM_NR];
#endif
#if MR_SGEMM_MR > 6
    float c6[MR_SGEMM_NR], c7[MR_SGEMM_NR];
#endif
    int64_t r;
    int j;
    for (j = 0; j < MR_SGEMM_NR; ++j) {
        c0[j] = 0.0f;
        c1[j] = 0.0f;
        c2[j] = 0.0f;
        c3[j] = 0.0f;
#if MR_SGEMM_MR > 4
        c4[j] = 0.0f;
        c5[j] = 0.0f;
#endif
#if MR_SGEMM_MR > 6
        c6[j] = 0.0f;
        c7[j] = 0.0f;
#endif
    }
    for (r = 0; r < kc; ++r) {
        const float a0 = a[0], a1 = a[ars], a2 = a[2 * ars], a3 = a[3 * ars];
#if MR_SGEMM_MR > 4
        const float a4 = a[4 * ars], a5 = a[5 * ars];
#endif
#if MR_SGEMM_MR > 6
        const float a6 = a[6 * ars], a7 = a[7 * ars];
#endif
        for (j = 0; j < MR_SGEMM_NR; ++j) {
            const float bj = b[j];
            c0[j] = MR_MADD(a0, bj, c0[j]);
            c1[j] = MR_MADD(a1, bj, c1[j]);
            c2[j] = MR_MADD(a2, bj, c2[j]);
            c3[j] = MR_MADD(a3, bj, c3[j]);
#if MR_SGEMM_MR > 4
            c4[j] = MR_MADD(a4, bj, c4[j]);
            c5[j] = MR_MADD(a5, bj, c5[j]);
#endif
#if MR_SGEMM_MR > 6
            c6[j] = MR_MADD(a6, bj, c6[j]);
            c7[j] = MR_MADD(a7, bj, c7[j]);
#endif
        }
        a += acs;
        b += bs;
    }
    for (j = 0; j < MR_SGEMM_NR; ++j) {
        out[j] = add ? out[j] + c0[j] : c0[j];
        out[out_rs + j] = add ? out[out_rs + j] + c1[j] : c1[j];
        out[2 * out_rs + j] = add ? out[2 * out_rs + j] + c2[j] : c2[j];
        out[3 * out_rs + j] = add ? out[3 * out_rs + j] + c3[j] : c3[j];
#if MR_SGEMM_MR > 4
        out[4 * out_rs + j] = add ? out[4 * out_rs + j] + c4[j] : c4[j];
        out[5 * out_rs + j] = add ? out[5 * out_rs + j] + c5[j] : c5[j];
#endif
#if MR_SGEMM_MR > 6
        out[6 * out_rs + j] = add ? out[6 * out_rs + j] + c6[j] : c6[j];
        out[7 * out_rs + j] = add ? out[7 * out_rs + j] + c7[j] : c7[j];
#endif
    }
}
#endif

/*
 * mr_sgemm_store: writes the top-left mr x nr part of the MR x NR tile t into C:
 *   overwrite != 0: C[i*c_rs + j*c_cs] = alpha * t[i*NR + j]            (C not read)
 *   overwrite == 0: C[i*c_rs + j*c_cs] = alpha * t[i*NR + j] + beta * C[...]
 */
static void mr_sgemm_store(const float *restrict t, int64_t mr, int64_t nr, float alpha,
                           float beta, int overwrite, float *restrict C, int64_t c_rs,
                           int64_t c_cs)
{
    int64_t i, j;
    for (i = 0; i < mr; ++i) {
        const float *ti = t + i * MR_SGEMM_NR;
        float *ci = C + i * c_rs;
        if (c_cs == 1) {
            if (overwrite) {
                for (j = 0; j < nr; ++j) ci[j] = alpha * ti[j];
            } else if (beta == 1.0f) {
                for (j = 0; j < nr; ++j) ci[j] = MR_MADD(alpha, ti[j], ci[j]);
            } else {
                for (j = 0; j < nr; ++j) ci[j] = MR_MADD(alpha, ti[j], beta * ci[j]);
            }
        } else {
            if (overwrite) {
                for (j = 0; j < nr; ++j) ci[j * c_cs] = alpha * ti[j];
            } else {
                for (j = 0; j < nr; ++j) ci[j * c_cs] = MR_MADD(alpha, ti[j], beta * ci[j * c_cs]);
            }
        }
    }
}

/*
 * mr_sgemm_driver: C = alpha * A * B + beta * C for an M x K matrix A (strided), a K x N
 * matrix B described by src, and an M x N strided C; M, N, K >= 1. Loop nest (BLIS
 * order, minus the MC loop): N in blocks of NC, K in blocks of KC (pack the KC x NC
 * block of B onto the stack, unless it is in panels), the NR-wide micro-panels of the
 * B block, then M in blocks of MR (the kernel reads a full MR x KC sliver of A in place
 * when A has a unit row or column stride; a partial one is packed once per KC block, and
 * with no unit stride, each sliver is packed for each micro-panel).
 */
/* Where a block of a product lies in the epilogue's coordinates: (n, i + row, j + col). */
typedef struct {
    const mr_epilogue *ep;
    int64_t n, i, j;
} mr_epi_at;

static void mr_epi_call(const mr_epi_at *at, int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
    if (at && at->ep && at->ep->fn && i1 > i0 && j1 > j0) {
        at->ep->fn(at->ep->ctx, at->n, at->i + i0, at->i + i1, at->j + j0, at->j + j1);
    }
}

/* For the driver's prefetch: the in-place micro-panel it visits after the one at depth
 * pc and column j (the next NR columns of the column block [jc, jc + nc), else the next
 * depth block's first, else the next column block's first), with its depth in *kc;
 * NULL (and *kc = 0) after the last. */
static const float *mr_next_panel(const mr_bsrc *src, int64_t N, int64_t K, int64_t jc, int64_t nc,
                                  int64_t pc, int64_t j, int64_t *kc)
{
    j += MR_SGEMM_NR;
    if (j >= jc + nc) {
        j = jc;
        pc += MR_SGEMM_KC;
        if (pc >= K) {
            pc = 0;
            j = jc + nc;
        }
    }
    *kc = j < N ? mr_min_i64(MR_SGEMM_KC, K - pc) : 0;
    return j < N ? mr_panel_at(src, pc, j) : NULL;
}

/* The packed product; the epilogue runs on each column panel once its last depth block
 * is added. */
static void mr_sgemm_driver(int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                            int64_t a_rs, int64_t a_cs, const mr_bsrc *src, float beta,
                            float *C, int64_t c_rs, int64_t c_cs, const mr_epi_at *at)
{
    float bp[MR_SGEMM_KC * MR_SGEMM_NC];
    float ap[MR_SGEMM_MR * MR_SGEMM_KC];
    float tile[MR_SGEMM_MR * MR_SGEMM_NR];
    const int64_t slivers = (M + MR_SGEMM_MR - 1) / MR_SGEMM_MR;
    int64_t jc, pc, ic, jr;
    for (jc = 0; jc < N; jc += MR_SGEMM_NC) {
        const int64_t nc = mr_min_i64(MR_SGEMM_NC, N - jc);
        for (pc = 0; pc < K; pc += MR_SGEMM_KC) {
            const int64_t kc = mr_min_i64(MR_SGEMM_KC, K - pc);
            const int first = pc == 0;
            const float bet = first ? beta : 1.0f;
            const int overwrite = first && beta == 0.0f;
            const int in_place = mr_panels_in_place(src);
            /* with a unit stride, A's full slivers are read in place and only a partial
             * last one (rows [tail, M)) is packed, once for every micro-panel of B */
            const int a_unit = a_cs == 1 || a_rs == 1;
            const int64_t tail = M - M % MR_SGEMM_MR;
            if (!in_place) mr_sgemm_pack_b(src, pc, jc, kc, nc, bp);
            if (a_unit && tail < M) mr_sgemm_pack_a(A, a_rs, a_cs, tail, pc, M - tail, kc, ap);
            /* B's micro-panel outside, so it stays in L1 while every sliver of A passes
             * it (A's slivers stream from L2, 32 bytes a step where B's panel would take
             * 128: gpt_block's 128 x 768 x 2304 GEMM, 139 -> 158 GFLOP/s) */
            for (jr = 0; jr < nc; jr += MR_SGEMM_NR) {
                const int64_t nr = mr_min_i64(MR_SGEMM_NR, nc - jr);
                /* B's micro-panel: packed, or in place in B's panels (which are
                 * zero-padded to whole panels, so a partial one reads zeros) */
                const float *pb = in_place ? mr_panel_at(src, pc, jc + jr) : bp + (jr / MR_SGEMM_NR) * kc * MR_SGEMM_NR;
                const int64_t bs = in_place ? MR_PANEL : MR_SGEMM_NR;
                /* in place, B comes from memory: the slivers share out the next
                 * micro-panel's rows to prefetch (per each) */
                int64_t next_kc = 0;
                const float *next = in_place ? mr_next_panel(src, N, K, jc, nc, pc, jc + jr, &next_kc) : NULL;
                const int64_t per = (next_kc + slivers - 1) / slivers;
                for (ic = 0; ic < M; ic += MR_SGEMM_MR) {
                    const int64_t mr = mr_min_i64(MR_SGEMM_MR, M - ic);
                    const int64_t pf0 = ic / MR_SGEMM_MR * per;
                    const float *pf = pf0 < next_kc ? next + pf0 * bs : NULL;
                    const int64_t pf_rows = pf ? mr_min_i64(per, next_kc - pf0) : 0;
                    const float *pa = ap;
                    int64_t ars = 1, acs = MR_SGEMM_MR;
                    float *cij = C + ic * c_rs + (jc + jr) * c_cs;
                    if (a_unit && mr == MR_SGEMM_MR) {
                        pa = A + ic * a_rs + pc * a_cs;
                        ars = a_rs;
                        acs = a_cs;
                    } else if (!a_unit) {
                        mr_sgemm_pack_a(A, a_rs, a_cs, ic, pc, mr, kc, ap);
                    }
                    if (mr == MR_SGEMM_MR && nr == MR_SGEMM_NR && c_cs == 1 && alpha == 1.0f && (overwrite || bet == 1.0f)) {
                        /* a whole tile of a row-major C: written (or added to) directly, the
                         * same values as through the tile and mr_sgemm_store */
                        mr_sgemm_micro(kc, pa, ars, acs, pb, bs, cij, c_rs, !overwrite, pf, pf_rows);
                    } else {
                        mr_sgemm_micro(kc, pa, ars, acs, pb, bs, tile, MR_SGEMM_NR, 0, pf, pf_rows);
                        mr_sgemm_store(tile, mr, nr, alpha, bet, overwrite, cij, c_rs, c_cs);
                    }
                }
            }
        }
        mr_epi_call(at, 0, M, jc, jc + nc);
    }
}

/*
 * mr_sgemm: C[i*c_rs + j*c_cs] = alpha * sum_k A[i*a_rs + k*a_cs] * B[k*b_rs + j*b_cs]
 *           + beta * C[i*c_rs + j*c_cs] for i < M, j < N (C not read when beta == 0;
 *           C = beta*C, or 0 when beta == 0, if K == 0). Blocked and packed; see the
 *           header for the full contract.
 */
#ifndef MR_SGEMV_MAX_M
#define MR_SGEMV_MAX_M 4
#endif

/*
 * mr_sgemm_dots: C[i,j] = alpha * dot(A[i,:], B[:,j]) + beta * C[i,j] for rows A[i,:]
 * and columns B[:,j] that are contiguous (a_cs == 1, b_rs == 1). Sixteen partial sums
 * per dot product let the compiler vectorize the loop over k; they are added pairwise
 * at the end.
 */
static void mr_sgemm_dots(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t a_rs,
                          const float *B, int64_t b_cs, float beta, float *C, int64_t c_rs, int64_t c_cs)
{
    int64_t i, j, k, l;
    for (i = 0; i < M; ++i) {
        const float *a = A + i * a_rs;
        for (j = 0; j < N; ++j) {
            const float *b = B + j * b_cs;
            float part[16] = { 0 };
            float sum = 0.0f;
            float *c = C + i * c_rs + j * c_cs;
            for (k = 0; k + 16 <= K; k += 16) {
                for (l = 0; l < 16; ++l) {
                    part[l] += a[k + l] * b[k + l];
                }
            }
            for (; k < K; ++k) {
                part[k & 15] += a[k] * b[k];
            }
            for (l = 8; l > 0; l >>= 1) {
                for (k = 0; k < l; ++k) {
                    part[k] += part[k + l];
                }
            }
            sum = alpha * part[0];
            *c = beta == 0.0f ? sum : sum + beta * *c;
        }
    }
}

/*
 * mr_sgemm_axpy: C[i,:] = alpha * sum_k A[i,k] * B[k,:] + beta * C[i,:] for a row-major
 * B (b_cs == 1) and C (c_cs == 1): for each k, every row i adds A[i,k] times row k of B,
 * a contiguous loop the compiler vectorizes. C's rows stay in cache while B streams.
 */
static void mr_sgemm_axpy(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t a_rs,
                          int64_t a_cs, const float *B, int64_t b_rs, float beta, float *C, int64_t c_rs)
{
    int64_t i, j, k;
    for (i = 0; i < M; ++i) {
        float *restrict c = C + i * c_rs;
        for (j = 0; j < N; ++j) {
            c[j] = beta == 0.0f ? 0.0f : beta * c[j];
        }
    }
    for (k = 0; k < K; ++k) {
        const float *restrict b = B + k * b_rs;
        for (i = 0; i < M; ++i) {
            float *restrict c = C + i * c_rs;
            const float a = alpha * A[i * a_rs + k * a_cs];
            for (j = 0; j < N; ++j) {
                c[j] += a * b[j];
            }
        }
    }
}

/* mr_sgemm with an epilogue at `at` (NULL: none). */
static void mr_sgemm_at(int64_t M, int64_t N, int64_t K, float alpha,
                        const float *A, int64_t a_rs, int64_t a_cs,
                        const float *B, int64_t b_rs, int64_t b_cs,
                        float beta, float *C, int64_t c_rs, int64_t c_cs, const mr_epi_at *at)
{
    mr_bsrc src;
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        int64_t i, j;
        for (i = 0; i < M; ++i) {
            for (j = 0; j < N; ++j) {
                float *c = C + i * c_rs + j * c_cs;
                *c = beta == 0.0f ? 0.0f : beta * *c;
            }
        }
        mr_epi_call(at, 0, M, 0, N);
        return;
    }
    /* A few rows against a B whose columns are contiguous (B = W^T, a Linear layer's
     * weight [N, K]): dot products read both operands in order and pack nothing, where
     * packing B would cost more than the product itself. */
    if (M <= MR_SGEMV_MAX_M && b_rs == 1 && a_cs == 1) {
        mr_sgemm_dots(M, N, K, alpha, A, a_rs, B, b_cs, beta, C, c_rs, c_cs);
        mr_epi_call(at, 0, M, 0, N);
        return;
    }
    /* A few rows against a row-major B (a weight stored transposed): rows of C as sums
     * of rows of B, reading B once and in order, again without packing. */
    if (M <= MR_SGEMV_MAX_M && b_cs == 1 && c_cs == 1) {
        mr_sgemm_axpy(M, N, K, alpha, A, a_rs, a_cs, B, b_rs, beta, C, c_rs);
        mr_epi_call(at, 0, M, 0, N);
        return;
    }
    memset(&src, 0, sizeof src);
    src.kind = MR_BSRC_STRIDED;
    src.p = B;
    src.rs = b_rs;
    src.cs = b_cs;
    mr_sgemm_driver(M, N, K, alpha, A, a_rs, a_cs, &src, beta, C, c_rs, c_cs, at);
}

void mr_sgemm(int64_t M, int64_t N, int64_t K, float alpha,
              const float *A, int64_t a_rs, int64_t a_cs,
              const float *B, int64_t b_rs, int64_t b_cs,
              float beta, float *C, int64_t c_rs, int64_t c_cs)
{
    mr_sgemm_at(M, N, K, alpha, A, a_rs, a_cs, B, b_rs, b_cs, beta, C, c_rs, c_cs, NULL);
}

/*
 * mr_sgemm_panels_gemv: a few rows of A against B in panels: for each panel, MR_PANEL
 * sums per row stay in registers while the panel streams past once, in order.
 */
static void mr_sgemm_panels_gemv(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t a_rs,
                                 int64_t a_cs, const mr_bsrc *src, float beta, float *C, int64_t c_rs,
                                 int64_t c_cs)
{
    int64_t j0, i, k, t;
    for (j0 = 0; j0 < N; j0 += MR_PANEL) {
        const float *b = mr_panel_at(src, 0, j0);
        const int64_t nv = mr_min_i64(MR_PANEL, N - j0);
        for (i = 0; i < M; ++i) {
            const float *a = A + i * a_rs;
            float acc[MR_PANEL];
            float *c = C + i * c_rs + j0 * c_cs;
            for (t = 0; t < MR_PANEL; ++t) acc[t] = 0.0f;
            for (k = 0; k < K; ++k) {
                const float ak = a[k * a_cs];
                const float *bk = b + k * MR_PANEL;
                for (t = 0; t < MR_PANEL; ++t) acc[t] = MR_MADD(ak, bk[t], acc[t]);
            }
            for (t = 0; t < nv; ++t) {
                c[t * c_cs] = beta == 0.0f ? alpha * acc[t] : MR_MADD(alpha, acc[t], beta * c[t * c_cs]);
            }
        }
    }
}

/* mr_sgemm_panels with an epilogue at `at`; B's column j is column j0 + j of the panels. */
static void mr_sgemm_panels_at(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t a_rs,
                               int64_t a_cs, const float *Bp, int64_t j0, float beta, float *C, int64_t c_rs,
                               int64_t c_cs, const mr_epi_at *at)
{
    mr_bsrc src;
    if (M <= 0 || N <= 0) return;
    memset(&src, 0, sizeof src);
    src.kind = MR_BSRC_PANELS;
    src.p = Bp;
    src.j0 = j0;
    src.depth = K;
    if (K <= 0) {
        mr_sgemm_at(M, N, 0, alpha, A, a_rs, a_cs, Bp, 0, 0, beta, C, c_rs, c_cs, at);
        return;
    }
    if (M <= MR_SGEMV_MAX_M && j0 % MR_PANEL == 0) {
        mr_sgemm_panels_gemv(M, N, K, alpha, A, a_rs, a_cs, &src, beta, C, c_rs, c_cs);
        mr_epi_call(at, 0, M, 0, N);
        return;
    }
    mr_sgemm_driver(M, N, K, alpha, A, a_rs, a_cs, &src, beta, C, c_rs, c_cs, at);
}

void mr_sgemm_panels(int64_t M, int64_t N, int64_t K, float alpha,
                     const float *A, int64_t a_rs, int64_t a_cs, const float *Bp,
                     float beta, float *C, int64_t c_rs, int64_t c_cs)
{
    mr_sgemm_panels_at(M, N, K, alpha, A, a_rs, a_cs, Bp, 0, beta, C, c_rs, c_cs, NULL);
}

/* ------------------------------------------------------------------------------------ */
/* Convolution                                                                          */
/* ------------------------------------------------------------------------------------ */

/*
 * mr_conv2d_direct: the convolution of mr_conv2d_f32 for the output channels of one
 * image n, computed with direct loops: for each output channel o, y[n,o] is zeroed, then
 * for each (c, kh, kw) in row-major order the weight w[o,c,kh,kw] times the matching
 * input row segment is added to each output row (the inner loop runs over ow, contiguous
 * in y, and contiguous in x when stride_w == 1). Taps in the padding are skipped.
 * xn = x + n*C*H*W, yn = y + n*O*OH*OW.
 */
static void mr_conv2d_direct(const float *xn, const float *w, float *yn, int64_t C,
                             int64_t H, int64_t W, int64_t O, int64_t KH, int64_t KW,
                             int64_t OH, int64_t OW, int64_t sh, int64_t sw, int64_t pt,
                             int64_t pl, int64_t dh, int64_t dw, int64_t groups)
{
    const int64_t Cg = C / groups, Og = O / groups, P = OH * OW;
    int64_t o, c, kh, kw, oh;
    for (o = 0; o < O; ++o) {
        const int64_t g = o / Og;
        float *yo = yn + o * P;
        memset(yo, 0, sizeof(float) * (size_t)P);
        for (c = 0; c < Cg; ++c) {
            const float *xc = xn + (g * Cg + c) * H * W;
            const float *wc = w + (o * Cg + c) * KH * KW;
            for (kh = 0; kh < KH; ++kh) {
                for (kw = 0; kw < KW; ++kw) {
                    const float wv = wc[kh * KW + kw];
                    const int64_t woff = kw * dw - pl;
                    int64_t lo, hi;
                    mr_out_range(OW, sw, woff, W, &lo, &hi);
                    if (lo >= hi) continue;
                    for (oh = 0; oh < OH; ++oh) {
                        const int64_t ih = oh * sh + kh * dh - pt;
                        float *restrict yr;
                        const float *restrict xr;
                        int64_t t, cnt = hi - lo;
                        if (ih < 0 || ih >= H) continue;
                        /* xr[t*sw] is x[ih, (lo+t)*sw + woff], inside the row for t < cnt */
                        xr = xc + ih * W + lo * sw + woff;
                        yr = yo + oh * OW + lo;
                        if (sw == 1) {
                            for (t = 0; t < cnt; ++t) yr[t] = MR_MADD(wv, xr[t], yr[t]);
                        } else {
                            for (t = 0; t < cnt; ++t) yr[t] = MR_MADD(wv, xr[t * sw], yr[t]);
                        }
                    }
                }
            }
        }
    }
}

/*
 * mr_conv2d_f32: y[n,o,oh,ow] = sum_{c<C/groups, kh, kw} w[o,c,kh,kw] *
 *   x[n, (o/(O/groups))*(C/groups) + c, oh*stride_h + kh*dil_h - pad_top,
 *     ow*stride_w + kw*dil_w - pad_left], zero outside the input; NCHW, contiguous.
 * Per (image, group): a GEMM y_g[Og, OH*OW] = w_g[Og, Cg*KH*KW] * im2col(x_g) whose B
 * panels are gathered from x while packing (no scratch), a plain strided GEMM for
 * unpadded stride-1 1x1 convolutions, or direct loops when Og < MR_CONV_DIRECT_OG.
 */
/* Whether mr_conv2d_at computes a convolution with direct loops (see mr_conv2d_f32). */
static int mr_conv_direct(int64_t O, int64_t groups)
{
    return O / groups < MR_CONV_DIRECT_OG;
}

/*
 * Stride-1 convolutions with no padding (the compiler pads the input first) as a GEMM
 * that reads B in place: output position (oh, ow) reads x[c, oh + kh*dh, ow + kw*dw],
 * which is x + q + off(k) for the "wide" column q = oh*W + ow and the depth row
 * k = (c*KH + kh)*KW + kw at off(k) = c*H*W + kh*dh*W + kw*dw. So each depth row of a
 * 32-column panel is 32 consecutive floats of x: no im2col copy. Wide columns with
 * ow >= OW are computed and dropped at the store (KW - 1 of every W columns).
 */
static int mr_conv_taps(int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t OH, int64_t OW, int64_t sh,
                        int64_t sw, int64_t pt, int64_t pl, int64_t dh, int64_t dw)
{
    /* pt == pl == 0 with these sizes also means no bottom or right padding */
    return sh == 1 && sw == 1 && pt == 0 && pl == 0 && OH + (KH - 1) * dh <= H && OW + (KW - 1) * dw <= W;
}

/* The wide column of output position p, and the first output position at or after wide column q. */
static int64_t mr_wide(int64_t p, int64_t W, int64_t OW) { return p / OW * W + p % OW; }
static int64_t mr_compact(int64_t q, int64_t W, int64_t OW) { return q / W * OW + mr_min_i64(q % W, OW); }

/* bp[r*NR + t] = base[off[r] + t] for r < kc, t < nr; zero for t in [nr, NR). */
static void mr_gather_rows(const float *base, const int64_t *off, int64_t kc, int64_t nr, float *bp)
{
    int64_t r, t;
    for (r = 0; r < kc; ++r) {
        for (t = 0; t < MR_SGEMM_NR; ++t) bp[r * MR_SGEMM_NR + t] = t < nr ? base[off[r] + t] : 0.0f;
    }
}

/* Rows [0, mr) of the tile (wide columns [q, q + nr)) into y's output positions, row i
 * at y + i*P, dropping the columns with ow >= OW; added to y when `add`. */
static void mr_store_wide(const float *tile, int64_t mr, int64_t q, int64_t nr, int64_t W, int64_t OW,
                          float *y, int64_t P, int add)
{
    int64_t j = 0, i, t;
    while (j < nr) {
        const int64_t ow = (q + j) % W, run = mr_min_i64(nr - j, W - ow);
        if (ow < OW) {
            const int64_t n = mr_min_i64(run, OW - ow), p = (q + j) / W * OW + ow;
            for (i = 0; i < mr; ++i) {
                const float *restrict src = tile + i * MR_SGEMM_NR + j;
                float *restrict dst = y + i * P + p;
                if (add) {
                    for (t = 0; t < n; ++t) dst[t] += src[t];
                } else {
                    memcpy(dst, src, sizeof(float) * (size_t)n);
                }
            }
        }
        j += run;
    }
}

/*
 * mr_conv2d_taps_gemm: output positions [p0, p1) of one image and group (see
 * mr_conv_taps): y[o*P + p] = sum_k w[o*Kd + k] * x[off(k) + wide(p)] for o < Og,
 * summed in blocks of MR_SGEMM_KC as mr_sgemm does, with the epilogue on each block of
 * positions once final.
 *
 * A panel is up to 32 wide columns from a position's. When a row's valid columns fill
 * its panels no worse than the wide grid does (32 * ceil(OW / 32) <= W, e.g. OW = 32,
 * W = 34), panels start at row starts and so never span two rows ("row mode": each
 * tile is stored straight from registers); otherwise they run on across rows, and a
 * tile that spans two rows is stored through mr_store_wide.
 */
static void mr_conv2d_taps_gemm(const float *x, const float *w, float *y, int64_t Cg, int64_t H, int64_t W,
                                int64_t Og, int64_t KH, int64_t KW, int64_t OH, int64_t OW, int64_t dh,
                                int64_t dw, int64_t p0, int64_t p1, mr_epi_at *at)
{
    const int64_t NR = MR_SGEMM_NR, Kd = Cg * KH * KW, P = OH * OW, span = (OW + NR - 1) / NR * NR;
    const int row_mode = span <= W;
    float bp[MR_SGEMM_KC * MR_SGEMM_NR];
    float ap[MR_SGEMM_MR * MR_SGEMM_KC];
    float tile[MR_SGEMM_MR * MR_SGEMM_NR];
    int64_t off[MR_SGEMM_KC];
    int64_t b0, b1, pc, ic, p, pn, r;
#ifdef MR_MICRO_AVX512
    /* the end of the image's wide columns: a panel that ends by it reads inside x */
    const int64_t qmax = mr_wide(P - 1, W, OW) + 1;
#endif
    at->j = 0;
    /* blocks of positions (whole rows in row mode) of about MR_SGEMM_NC columns */
    for (b0 = p0; b0 < p1; b0 = b1) {
        const int64_t rows = mr_max_i64(1, MR_SGEMM_NC / span);
        int64_t c = 0, kh = 0, kw = 0, qend; /* depth row pc + r's channel and tap; the block's end */
        b1 = mr_min_i64(p1, row_mode ? (b0 / OW + rows) * OW : mr_compact(mr_wide(b0, W, OW) + MR_SGEMM_NC, W, OW));
        qend = mr_wide(b1 - 1, W, OW) + 1;
        for (pc = 0; pc < Kd; pc += MR_SGEMM_KC) {
            const int64_t kc = mr_min_i64(MR_SGEMM_KC, Kd - pc);
            for (r = 0; r < kc; ++r) {
                off[r] = c * H * W + kh * dh * W + kw * dw;
                if (++kw == KW) {
                    kw = 0;
                    if (++kh == KH) {
                        kh = 0;
                        ++c;
                    }
                }
            }
            for (ic = 0; ic < Og; ic += MR_SGEMM_MR) {
                const int64_t mr = mr_min_i64(MR_SGEMM_MR, Og - ic);
                const float *pa = w + ic * Kd + pc;
                int64_t ars = Kd, acs = 1;
                if (mr < MR_SGEMM_MR) {
                    mr_sgemm_pack_a(w, Kd, 1, ic, pc, mr, kc, ap);
                    pa = ap;
                    ars = 1;
                    acs = MR_SGEMM_MR;
                }
                for (p = b0; p < b1; p = pn) {
                    const int64_t q = mr_wide(p, W, OW), ow = p % OW;
                    int64_t nq = mr_min_i64(NR, qend - q); /* wide columns stored */
                    if (row_mode) nq = mr_min_i64(nq, OW - ow);
                    pn = mr_compact(q + nq, W, OW);
#ifdef MR_MICRO_AVX512
                    if (q + NR <= qmax && ow + nq <= OW) {
                        /* one run of y: stored from registers */
                        mr_sgemm_micro_taps(kc, pa, ars, acs, x + q, off, y + ic * P + p, P, mr, nq, pc > 0);
                        continue;
                    }
                    if (qmax >= NR) {
                        /* A panel past qmax is moved back to end there; its first
                         * columns (stored by the previous panel, or not ours) are dropped. */
                        const int64_t qs = mr_min_i64(q, qmax - NR);
                        mr_sgemm_micro_taps(kc, pa, ars, acs, x + qs, off, tile, NR, MR_SGEMM_MR, NR, 0);
                        mr_store_wide(tile + (q - qs), mr, q, nq, W, OW, y + ic * P, P, pc > 0);
                        continue;
                    }
#endif
                    mr_gather_rows(x + q, off, kc, nq, bp);
                    mr_sgemm_micro(kc, pa, ars, acs, bp, NR, tile, NR, 0, NULL, 0);
                    mr_store_wide(tile, mr, q, nq, W, OW, y + ic * P, P, pc > 0);
                }
            }
        }
        mr_epi_call(at, 0, Og, b0, b1);
    }
}

/* mr_conv2d_f32 with an epilogue, for output positions [p0, p1) only (all of them on
 * the direct path); image n of y is the epilogue's image n0 + n. */
static void mr_conv2d_at(const float *x, const float *w, float *y,
                         int64_t N, int64_t C, int64_t H, int64_t W,
                         int64_t O, int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                         int64_t stride_h, int64_t stride_w,
                         int64_t pad_top, int64_t pad_left,
                         int64_t dil_h, int64_t dil_w, int64_t groups,
                         const mr_epilogue *ep, int64_t n0, int64_t p0, int64_t p1)
{
    const int64_t Cg = C / groups, Og = O / groups, P = OH * OW, Kd = Cg * KH * KW;
    int64_t n, g;
    if (N <= 0 || O <= 0 || P <= 0 || p1 <= p0) return;
    for (n = 0; n < N; ++n) {
        const float *xn = x + n * C * H * W;
        float *yn = y + n * O * P;
        mr_epi_at at;
        at.ep = ep;
        at.n = (ep ? ep->n : 0) + n0 + n;
        at.i = 0;
        at.j = 0;
        if (Kd <= 0) {
            int64_t o;
            for (o = 0; o < O; ++o) memset(yn + o * P + p0, 0, sizeof(float) * (size_t)(p1 - p0));
            mr_epi_call(&at, 0, O, p0, p1);
            continue;
        }
        if (mr_conv_direct(O, groups)) {
            mr_conv2d_direct(xn, w, yn, C, H, W, O, KH, KW, OH, OW, stride_h, stride_w,
                             pad_top, pad_left, dil_h, dil_w, groups);
            mr_epi_call(&at, 0, O, 0, P);
            continue;
        }
        for (g = 0; g < groups; ++g) {
            mr_bsrc src;
            const float *xg = xn + g * Cg * H * W, *wg = w + g * Og * Kd;
            float *yg = yn + g * Og * P;
            at.i = g * Og;
            at.j = p0;
            memset(&src, 0, sizeof src);
            if (KH == 1 && KW == 1 && pad_top == 0 && pad_left == 0 && stride_h == 1 &&
                stride_w == 1 && OW == W && OH <= H) {
                /* pointwise: im2col(x_g) is x_g itself viewed as [Cg, H*W] */
                src.kind = MR_BSRC_STRIDED;
                src.p = xg + p0;
                src.rs = H * W;
                src.cs = 1;
            } else if (mr_conv_taps(H, W, KH, KW, OH, OW, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w)) {
                mr_conv2d_taps_gemm(xg, wg, yg, Cg, H, W, Og, KH, KW, OH, OW, dil_h, dil_w, p0, p1, &at);
                continue;
            } else {
                src.kind = MR_BSRC_IM2COL;
                src.p = xg;
                src.j0 = p0;
                src.H = H;
                src.W = W;
                src.KH = KH;
                src.KW = KW;
                src.OW = OW;
                src.sh = stride_h;
                src.sw = stride_w;
                src.pt = pad_top;
                src.pl = pad_left;
                src.dh = dil_h;
                src.dw = dil_w;
            }
            mr_sgemm_driver(Og, p1 - p0, Kd, 1.0f, wg, Kd, 1, &src, 0.0f, yg + p0, P, 1, &at);
        }
    }
}

void mr_conv2d_f32(const float *x, const float *w, float *y,
                   int64_t N, int64_t C, int64_t H, int64_t W,
                   int64_t O, int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                   int64_t stride_h, int64_t stride_w,
                   int64_t pad_top, int64_t pad_left,
                   int64_t dil_h, int64_t dil_w, int64_t groups)
{
    mr_conv2d_at(x, w, y, N, C, H, W, O, KH, KW, OH, OW, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w,
                 groups, NULL, 0, 0, OH * OW);
}

/* ------------------------------------------------------------------------------------ */
/* Winograd convolution                                                                 */
/* ------------------------------------------------------------------------------------ */

/*
 * F(4x4, 3x3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks",
 * 2016; interpolation points 0, +-1, +-2). A 4x4 block of outputs ("tile") of one
 * channel pair is
 *   A^T [(G g G^T) . (B^T d B)] A
 * for the 3x3 kernel g and the 6x6 input patch d under the tile, so the sum over input
 * channels becomes, for each of the 36 positions xi of a transformed patch, one GEMM
 *   M[xi] = U[xi] V[xi]:  [O, C] x [C, tiles],
 * 36 multiply-adds per tile and channel pair where direct convolution needs 144
 * (F(2x2, 3x3) needs 64). One 64 -> 64 convolution at 32x32, one thread: 495 us as an
 * implicit GEMM, 335 us by F(2x2, 3x3) image by image, 226 us by this; cnn b1, four
 * such convolutions, one thread: 1.81 -> 1.07 ms.
 *
 * Tiles are numbered over all images, row-major within each. Where the last tiles of
 * a row or column stick out of the output, their extra outputs are computed and not
 * stored, and the input under them reads as zeros, like the padding. The tiles go in
 * blocks of MR_PANEL consecutive ones; per block, the input transform writes V, one
 * column panel of C rows per xi, which mr_sgemm_panels reads in place; 36 GEMMs write
 * M (O rows of MR_PANEL per xi); the output transform writes y, and the epilogue runs
 * on the block's outputs. A block's V and M stay in L2, where a whole image's did not.
 *
 * The blocks are split into at most MR_WINOGRAD_SLOTS chunks of consecutive blocks,
 * each with its own slot of scratch, so threads run chunks at once whatever their
 * number, and each block is computed the same way as serially.
 */
typedef struct {
    const float *x, *u;
    float *y, *scratch;
    int64_t C, H, W, O, OH, OW, pt, pl, TW, T, tiles, blocks, chunks;
    const mr_epilogue *ep;
} mr_wino_job;

/* Floats between V[xi] and V[xi + 1], and between M[xi] and M[xi + 1]: one panel row
 * more than each needs, so the 36 are not a power of two apart, which would map them
 * all to the same cache sets. */
static int64_t mr_wino_vs(int64_t C) { return (C + 1) * MR_PANEL; }
static int64_t mr_wino_ms(int64_t O) { return (O + 1) * MR_PANEL; }

/* A run of tiles along one tile row: image n, tile row th, tile columns [tw, tw + len). */
typedef struct {
    int64_t n, th, tw, len;
} mr_wino_run;

/* The run that starts at tile g (numbered over all images), at most `left` long. */
static mr_wino_run mr_wino_run_at(const mr_wino_job *j, int64_t g, int64_t left)
{
    mr_wino_run r;
    r.n = g / j->T;
    r.th = g % j->T / j->TW;
    r.tw = g % j->TW;
    r.len = mr_min_i64(left, j->TW - r.tw);
    return r;
}

/* A window of an input row under a run: its float k is read at address at + 4k when
 * lo <= k < hi, and is zero (padding) otherwise. An integer address: the window may
 * start before the input or end past it. */
typedef struct {
    uintptr_t at;
    int64_t lo, hi;
} mr_wino_window;

/* Row ih, columns [iw, iw + n), of a plane of H x W. */
static mr_wino_window mr_wino_window_at(const float *plane, int64_t H, int64_t W, int64_t ih, int64_t iw, int64_t n)
{
    mr_wino_window r;
    r.at = (uintptr_t)plane + 4u * (uintptr_t)(ih * W + iw);
    r.lo = mr_min_i64(n, mr_max_i64(0, -iw));
    r.hi = ih >= 0 && ih < H ? mr_max_i64(r.lo, mr_min_i64(n, W - iw)) : r.lo;
    return r;
}

/*
 * mr_wino_input_run: one input channel's part of V for a run of len tiles: tile k's
 * B^T d B, d the 6x6 patch at columns [4k, 4k + 6) of the 6 input row windows (4 * len
 * + 2 floats each), goes to d[xi * vs + k]. B^T applied to each row of d, then to each
 * column of that:
 *   B^T = [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
 *          [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]
 * mr_wino_output_run: one output channel's outputs of a run of len tiles: tile k's
 * A^T m A, m its 36 values of M at mo[xi * s + k], rows [0, nrows) and columns [0,
 * width) of the run's 4 x 4 len outputs, to y (rows OW apart):
 *   A^T = [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]
 * With AVX-512, 16 tiles at a time in registers, the stride-4 columns picked by
 * permutes (a loop over tiles with a stride of 4 is one gcc leaves mostly scalar: the
 * convolution above, 390 -> 226 us); else loops over the run's tiles.
 */
#ifdef MR_AVX512
/* The 6x6 patches' rows of 16 tiles from float k of window w: e[j] lane t = float
 * k + 4t + j (masked loads: floats outside [w.lo, w.hi) are zeros, and never read). */
static void mr_wino_patch_rows(const mr_wino_window *w, int64_t k, __m512 e[6])
{
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    __m512 v[5], lo, hi;
    int q, j;
    /* floats k + 16q .. k + 16q + 15; the fifth holds those past the last tile's */
    for (q = 0; q < 5; ++q) {
        const int64_t at = k + 16 * q;
        v[q] = _mm512_maskz_loadu_ps((__mmask16)mr_lanes(w->lo - at, w->hi - at), (const void *)(w->at + 4u * (uintptr_t)at));
    }
    for (j = 0; j < 4; ++j) {
        const __m512i ij = _mm512_add_epi32(idx, _mm512_set1_epi32(j));
        lo = _mm512_permutex2var_ps(v[0], ij, v[1]);
        hi = _mm512_permutex2var_ps(v[2], ij, v[3]);
        e[j] = _mm512_shuffle_f32x4(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));
    }
    /* e[4], e[5]: e[0], e[1] one tile on, the last lane from v[4] (floats 64, 65) */
    e[4] = _mm512_permutex2var_ps(e[0], _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16), v[4]);
    e[5] = _mm512_permutex2var_ps(e[1], _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17), v[4]);
}

/* B^T x for the 6 vectors x (lane by lane), into y. */
static void mr_wino_bt(const __m512 x[6], __m512 y[6])
{
    const __m512 two = _mm512_set1_ps(2.0f), four = _mm512_set1_ps(4.0f), five = _mm512_set1_ps(5.0f);
    y[0] = _mm512_fmadd_ps(four, x[0], _mm512_fnmadd_ps(five, x[2], x[4]));
    y[1] = _mm512_fnmadd_ps(four, _mm512_add_ps(x[1], x[2]), _mm512_add_ps(x[3], x[4]));
    y[2] = _mm512_fmadd_ps(four, _mm512_sub_ps(x[1], x[2]), _mm512_sub_ps(x[4], x[3]));
    y[3] = _mm512_fmadd_ps(two, _mm512_sub_ps(x[3], x[1]), _mm512_sub_ps(x[4], x[2]));
    y[4] = _mm512_fmadd_ps(two, _mm512_sub_ps(x[1], x[3]), _mm512_sub_ps(x[4], x[2]));
    y[5] = _mm512_fmadd_ps(four, x[1], _mm512_fnmadd_ps(five, x[3], x[5]));
}

/* A^T x for the 6 vectors x (lane by lane), into y. */
static void mr_wino_at(const __m512 x[6], __m512 y[4])
{
    const __m512 s12 = _mm512_add_ps(x[1], x[2]), d12 = _mm512_sub_ps(x[1], x[2]);
    const __m512 s34 = _mm512_add_ps(x[3], x[4]), d34 = _mm512_sub_ps(x[3], x[4]);
    y[0] = _mm512_add_ps(_mm512_add_ps(x[0], s12), s34);
    y[1] = _mm512_fmadd_ps(_mm512_set1_ps(2.0f), d34, d12);
    y[2] = _mm512_fmadd_ps(_mm512_set1_ps(4.0f), s34, s12);
    y[3] = _mm512_add_ps(_mm512_fmadd_ps(_mm512_set1_ps(8.0f), d34, d12), x[5]);
}

static void mr_wino_input_run(const mr_wino_window rows[6], int64_t len, float *d, int64_t vs)
{
    int64_t k0;
    int i, b, a;
    for (k0 = 0; k0 < len; k0 += 16) {
        const __mmask16 m = (__mmask16)mr_lanes(0, len - k0);
        __m512 r[6][6];
        for (i = 0; i < 6; ++i) {
            __m512 e[6];
            mr_wino_patch_rows(&rows[i], 4 * k0, e);
            mr_wino_bt(e, r[i]);
        }
        for (b = 0; b < 6; ++b) {
            __m512 col[6], out[6];
            for (i = 0; i < 6; ++i) col[i] = r[i][b];
            mr_wino_bt(col, out);
            for (a = 0; a < 6; ++a) _mm512_mask_storeu_ps(d + (6 * a + b) * vs + k0, m, out[a]);
        }
    }
}

/* The 64 floats 4k + q = y[q][k] (k < 16, q < 4), as 4 vectors. */
static void mr_wino_interleave4(const __m512 y[4], __m512 o[4])
{
    const __m512 t0 = _mm512_unpacklo_ps(y[0], y[1]), t1 = _mm512_unpackhi_ps(y[0], y[1]);
    const __m512 t2 = _mm512_unpacklo_ps(y[2], y[3]), t3 = _mm512_unpackhi_ps(y[2], y[3]);
    /* u_m's 128-bit lane L: tile 4L + m */
    const __m512 u0 = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t2)));
    const __m512 u1 = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t2)));
    const __m512 u2 = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t1), _mm512_castps_pd(t3)));
    const __m512 u3 = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t1), _mm512_castps_pd(t3)));
    const __m512 e01 = _mm512_shuffle_f32x4(u0, u1, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 e23 = _mm512_shuffle_f32x4(u2, u3, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 o01 = _mm512_shuffle_f32x4(u0, u1, _MM_SHUFFLE(3, 1, 3, 1));
    const __m512 o23 = _mm512_shuffle_f32x4(u2, u3, _MM_SHUFFLE(3, 1, 3, 1));
    o[0] = _mm512_shuffle_f32x4(e01, e23, _MM_SHUFFLE(2, 0, 2, 0));
    o[1] = _mm512_shuffle_f32x4(o01, o23, _MM_SHUFFLE(2, 0, 2, 0));
    o[2] = _mm512_shuffle_f32x4(e01, e23, _MM_SHUFFLE(3, 1, 3, 1));
    o[3] = _mm512_shuffle_f32x4(o01, o23, _MM_SHUFFLE(3, 1, 3, 1));
}

static void mr_wino_output_run(const float *mo, int64_t s, int64_t len, float *y, int64_t OW, int64_t nrows,
                               int64_t width)
{
    int64_t k0, p;
    int a, q, v;
    for (k0 = 0; k0 < len; k0 += 16) {
        const __mmask16 m = (__mmask16)mr_lanes(0, len - k0);
        __m512 t[6][4], out[4][4];
        for (a = 0; a < 6; ++a) {
            __m512 x[6];
            for (q = 0; q < 6; ++q) x[q] = _mm512_maskz_loadu_ps(m, mo + (6 * a + q) * s + k0);
            mr_wino_at(x, t[a]);
        }
        for (q = 0; q < 4; ++q) {
            __m512 col[6], o[4];
            for (a = 0; a < 6; ++a) col[a] = t[a][q];
            mr_wino_at(col, o);
            for (p = 0; p < 4; ++p) out[p][q] = o[p];
        }
        for (p = 0; p < nrows; ++p) {
            __m512 o[4];
            mr_wino_interleave4(out[p], o);
            for (v = 0; v < 4; ++v) {
                const int64_t c = 4 * k0 + 16 * v;
                _mm512_mask_storeu_ps(y + p * OW + mr_min_i64(c, width), (__mmask16)mr_lanes(0, width - c), o[v]);
            }
        }
    }
}
#else
static void mr_wino_input_run(const mr_wino_window rows[6], int64_t len, float *d, int64_t vs)
{
    float r[6][6][MR_PANEL], row[4 * MR_PANEL + 2];
    int64_t i, k;
    for (i = 0; i < 6; ++i) {
        const mr_wino_window *w = &rows[i];
        memset(row, 0, sizeof row);
        if (w->hi > w->lo) memcpy(row + w->lo, (const float *)(w->at + 4u * (uintptr_t)w->lo), sizeof(float) * (size_t)(w->hi - w->lo));
        for (k = 0; k < len; ++k) {
            const float *e = row + 4 * k;
            r[i][0][k] = 4.0f * e[0] - 5.0f * e[2] + e[4];
            r[i][1][k] = e[3] + e[4] - 4.0f * (e[1] + e[2]);
            r[i][2][k] = 4.0f * (e[1] - e[2]) + e[4] - e[3];
            r[i][3][k] = 2.0f * (e[3] - e[1]) + e[4] - e[2];
            r[i][4][k] = 2.0f * (e[1] - e[3]) + e[4] - e[2];
            r[i][5][k] = 4.0f * e[1] - 5.0f * e[3] + e[5];
        }
    }
    for (i = 0; i < 6; ++i) {
        const float *r0 = r[0][i], *r1 = r[1][i], *r2 = r[2][i], *r3 = r[3][i], *r4 = r[4][i], *r5 = r[5][i];
        for (k = 0; k < len; ++k) {
            d[(0 + i) * vs + k] = 4.0f * r0[k] - 5.0f * r2[k] + r4[k];
            d[(6 + i) * vs + k] = r3[k] + r4[k] - 4.0f * (r1[k] + r2[k]);
            d[(12 + i) * vs + k] = 4.0f * (r1[k] - r2[k]) + r4[k] - r3[k];
            d[(18 + i) * vs + k] = 2.0f * (r3[k] - r1[k]) + r4[k] - r2[k];
            d[(24 + i) * vs + k] = 2.0f * (r1[k] - r3[k]) + r4[k] - r2[k];
            d[(30 + i) * vs + k] = 4.0f * r1[k] - 5.0f * r3[k] + r5[k];
        }
    }
}

static void mr_wino_output_run(const float *mo, int64_t s, int64_t len, float *y, int64_t OW, int64_t nrows,
                               int64_t width)
{
    float t[6][4][MR_PANEL];
    float out[4][4 * MR_PANEL];
    int64_t a, q, k, p;
    for (a = 0; a < 6; ++a) {
        const float *q0 = mo + 6 * a * s, *q1 = q0 + s, *q2 = q1 + s, *q3 = q2 + s, *q4 = q3 + s, *q5 = q4 + s;
        for (k = 0; k < len; ++k) {
            t[a][0][k] = q0[k] + q1[k] + q2[k] + q3[k] + q4[k];
            t[a][1][k] = q1[k] - q2[k] + 2.0f * (q3[k] - q4[k]);
            t[a][2][k] = q1[k] + q2[k] + 4.0f * (q3[k] + q4[k]);
            t[a][3][k] = q1[k] - q2[k] + 8.0f * (q3[k] - q4[k]) + q5[k];
        }
    }
    for (q = 0; q < 4; ++q) {
        const float *t0 = t[0][q], *t1 = t[1][q], *t2 = t[2][q], *t3 = t[3][q], *t4 = t[4][q], *t5 = t[5][q];
        for (k = 0; k < len; ++k) {
            out[0][4 * k + q] = t0[k] + t1[k] + t2[k] + t3[k] + t4[k];
            out[1][4 * k + q] = t1[k] - t2[k] + 2.0f * (t3[k] - t4[k]);
            out[2][4 * k + q] = t1[k] + t2[k] + 4.0f * (t3[k] + t4[k]);
            out[3][4 * k + q] = t1[k] - t2[k] + 8.0f * (t3[k] - t4[k]) + t5[k];
        }
    }
    for (p = 0; p < nrows; ++p) memcpy(y + p * OW, out[p], sizeof(float) * (size_t)width);
}
#endif

/* V for tiles [g0, g0 + nt), nt <= MR_PANEL: V[xi] at v + xi * vs holds C rows of
 * MR_PANEL floats, tile g0 + k in column k, zeros in columns nt and up (so the GEMM
 * reads only numbers). */
static void mr_wino_input(const mr_wino_job *j, int64_t g0, int64_t nt, float *v)
{
    const int64_t vs = mr_wino_vs(j->C);
    int64_t c, i, xi, done;
    mr_wino_run run;
    for (c = 0; c < j->C; ++c) {
        for (done = 0; done < nt; done += run.len) {
            const float *plane;
            mr_wino_window rows[6];
            run = mr_wino_run_at(j, g0 + done, nt - done);
            plane = j->x + (run.n * j->C + c) * j->H * j->W;
            for (i = 0; i < 6; ++i) {
                rows[i] = mr_wino_window_at(plane, j->H, j->W, 4 * run.th + i - j->pt, 4 * run.tw - j->pl, 4 * run.len + 2);
            }
            mr_wino_input_run(rows, run.len, v + c * MR_PANEL + done, vs);
        }
        if (nt < MR_PANEL) {
            for (xi = 0; xi < 36; ++xi) memset(v + xi * vs + c * MR_PANEL + nt, 0, sizeof(float) * (size_t)(MR_PANEL - nt));
        }
    }
}

/* y for tiles [g0, g0 + nt): the outputs inside y. */
static void mr_wino_output(const mr_wino_job *j, const float *m, int64_t g0, int64_t nt)
{
    int64_t o, done;
    mr_wino_run run;
    for (o = 0; o < j->O; ++o) {
        for (done = 0; done < nt; done += run.len) {
            run = mr_wino_run_at(j, g0 + done, nt - done);
            mr_wino_output_run(m + o * MR_PANEL + done, mr_wino_ms(j->O), run.len,
                               j->y + ((run.n * j->O + o) * j->OH + 4 * run.th) * j->OW + 4 * run.tw, j->OW,
                               mr_min_i64(4, j->OH - 4 * run.th), mr_min_i64(4 * run.len, j->OW - 4 * run.tw));
        }
    }
}

/* The epilogue on the outputs of tiles [g0, g0 + nt): per run, its output rows (one
 * range when the run spans them whole). */
static void mr_wino_epilogue(const mr_wino_job *j, int64_t g0, int64_t nt)
{
    mr_epi_at at;
    int64_t done, oh;
    mr_wino_run run;
    at.ep = j->ep;
    at.i = 0;
    at.j = 0;
    for (done = 0; done < nt; done += run.len) {
        int64_t oh1, w0, w1;
        run = mr_wino_run_at(j, g0 + done, nt - done);
        at.n = j->ep->n + run.n;
        oh1 = mr_min_i64(j->OH, 4 * run.th + 4);
        w0 = 4 * run.tw;
        w1 = mr_min_i64(j->OW, 4 * (run.tw + run.len));
        if (w0 == 0 && w1 == j->OW) {
            mr_epi_call(&at, 0, j->O, 4 * run.th * j->OW, oh1 * j->OW);
        } else {
            for (oh = 4 * run.th; oh < oh1; ++oh) mr_epi_call(&at, 0, j->O, oh * j->OW + w0, oh * j->OW + w1);
        }
    }
}

/* Chunks [s0, s1): each its consecutive blocks, in its own slot of scratch. */
static void mr_wino_task(void *ctx, int64_t s0, int64_t s1)
{
    const mr_wino_job *j = (const mr_wino_job *)ctx;
    const int64_t vs = mr_wino_vs(j->C), ms = mr_wino_ms(j->O);
    int64_t s, b, xi;
    for (s = s0; s < s1; ++s) {
        float *v = j->scratch + s * MR_WINOGRAD_SLOT(j->C, j->O), *m = v + 36 * vs;
        for (b = s * j->blocks / j->chunks; b < (s + 1) * j->blocks / j->chunks; ++b) {
            const int64_t g0 = b * MR_PANEL, nt = mr_min_i64(MR_PANEL, j->tiles - g0);
            mr_wino_input(j, g0, nt, v);
            for (xi = 0; xi < 36; ++xi) {
                mr_sgemm_panels(j->O, MR_PANEL, j->C, 1.0f, j->u + xi * j->O * j->C, j->C, 1, v + xi * vs, 0.0f,
                                m + xi * ms, MR_PANEL, 1);
            }
            mr_wino_output(j, m, g0, nt);
            if (j->ep) mr_wino_epilogue(j, g0, nt);
        }
    }
}

void mr_conv2d_winograd_f32_mt(const mr_threads *threads, const float *x, const float *u, float *y,
                               int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t OH, int64_t OW,
                               int64_t pad_top, int64_t pad_left, float *scratch, const mr_epilogue *ep)
{
    mr_wino_job job;
    if (N <= 0 || O <= 0 || OH <= 0 || OW <= 0) return;
    job.x = x; job.u = u; job.y = y; job.scratch = scratch; job.ep = ep;
    job.C = C; job.H = H; job.W = W; job.O = O; job.OH = OH; job.OW = OW; job.pt = pad_top; job.pl = pad_left;
    job.TW = (OW + 3) / 4;
    job.T = MR_WINOGRAD_TILES(OH, OW);
    job.tiles = N * job.T;
    job.blocks = MR_WINOGRAD_BLOCKS(N, OH, OW);
    job.chunks = mr_min_i64(MR_WINOGRAD_SLOTS, job.blocks);
    mr_run(threads, mr_wino_task, &job, job.chunks, 36.0 * (double)job.tiles * (double)O * (double)C);
}

void mr_winograd_weights_f32(const float *w, float *u, int64_t O, int64_t C)
{
    static const double G[6][3] = {{1.0 / 4, 0, 0},
                                   {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                   {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                   {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                   {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                   {0, 0, 1}};
    int64_t o, c, i, k, a, b;
    for (o = 0; o < O; ++o) {
        for (c = 0; c < C; ++c) {
            const float *g = w + (o * C + c) * 9;
            for (i = 0; i < 6; ++i) {
                for (k = 0; k < 6; ++k) {
                    double s = 0.0;
                    for (a = 0; a < 3; ++a) {
                        for (b = 0; b < 3; ++b) s += G[i][a] * (double)g[a * 3 + b] * G[k][b];
                    }
                    u[((i * 6 + k) * O + o) * C + c] = (float)s;
                }
            }
        }
    }
}

void mr_conv2d_winograd_f32(const float *x, const float *u, float *y, int64_t N, int64_t C, int64_t H, int64_t W,
                            int64_t O, int64_t OH, int64_t OW, int64_t pad_top, int64_t pad_left, float *scratch)
{
    mr_conv2d_winograd_f32_mt(NULL, x, u, y, N, C, H, W, O, OH, OW, pad_top, pad_left, scratch, NULL);
}

/* ------------------------------------------------------------------------------------ */
/* Pooling                                                                              */
/* ------------------------------------------------------------------------------------ */

/*
 * mr_pool2d_f32: y[n,c,oh,ow] = max (is_max) or sum/(KH*KW) (average) over the taps
 * x[n,c, oh*stride_h + kh*dil_h - pad_top, ow*stride_w + kw*dil_w - pad_left] that lie
 * inside the input. Max: padded taps never win, an all-padding window is -INFINITY, NaN
 * propagates. Average: padded taps count as zeros in the divisor KH*KW. NCHW contiguous.
 * Each output row is initialised and then updated tap by tap, (kh, kw) in row-major
 * order, with the inner loop over ow.
 */
#ifdef MR_AVX512
/* mr_max_nan on 16 lanes. */
static __m512 mr_max_nan16(__m512 m, __m512 v)
{
    const __mmask16 wins = _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(wins, m, v);
}

/* One output row (OW <= 16) of a 2x2, stride-2 max pool over input rows x0 and x1: the
 * even and odd taps of each row gathered into lanes with permutes, then the same
 * updates in the same order as the scalar loop. */
static void mr_max_pool_2x2_row_avx512(const float *x0, const float *x1, float *y, int64_t OW)
{
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    const int64_t n = 2 * OW;
    const __mmask16 lo = (__mmask16)(n >= 16 ? 0xffffu : ((1u << n) - 1u));
    const __mmask16 hi = (__mmask16)(n <= 16 ? 0u : ((1u << (n - 16)) - 1u));
    const __m512 a0 = _mm512_maskz_loadu_ps(lo, x0), a1 = _mm512_maskz_loadu_ps(hi, x0 + 16);
    const __m512 b0 = _mm512_maskz_loadu_ps(lo, x1), b1 = _mm512_maskz_loadu_ps(hi, x1 + 16);
    __m512 m = _mm512_permutex2var_ps(a0, even, a1);
    m = mr_max_nan16(m, _mm512_permutex2var_ps(a0, odd, a1));
    m = mr_max_nan16(m, _mm512_permutex2var_ps(b0, even, b1));
    m = mr_max_nan16(m, _mm512_permutex2var_ps(b0, odd, b1));
    _mm512_mask_storeu_ps(y, (__mmask16)((1u << OW) - 1u), m);
}
#endif

/* A running max: v wins if larger or NaN (NaN propagates, as numpy's max). */
static float mr_max_nan(float m, float v)
{
    /* `|`, not `||`: no branch, so loops of it vectorize. */
    return ((v > m) | (v != v)) ? v : m;
}

void mr_pool2d_f32(const float *x, float *y,
                   int64_t N, int64_t C, int64_t H, int64_t W,
                   int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                   int64_t stride_h, int64_t stride_w,
                   int64_t pad_top, int64_t pad_left,
                   int64_t dil_h, int64_t dil_w, int is_max)
{
    const int64_t planes = N * C;
    const float div = (float)(KH * KW);
    int64_t pl, oh, ow, kh, kw;
    if (KH == 2 && KW == 2 && stride_h == 2 && stride_w == 2 && pad_top == 0 && pad_left == 0 && dil_h == 1 &&
        dil_w == 1 && 2 * OH <= H && 2 * OW <= W) {
        /* The common 2x2, stride-2 window in one pass per output row: the same updates,
         * in the same (kh, kw) order, as the general loops below. */
        for (pl = 0; pl < planes * OH; ++pl) {
            const float *restrict x0 = x + (pl / OH) * H * W + (pl % OH) * 2 * W, *restrict x1 = x0 + W;
            float *restrict yr = y + pl * OW;
#ifdef MR_AVX512
            if (is_max && OW <= 16) {
                mr_max_pool_2x2_row_avx512(x0, x1, yr, OW);
                continue;
            }
#endif
            if (is_max) {
                for (ow = 0; ow < OW; ++ow) {
                    /* the running max starts at -inf, which the first tap always replaces */
                    yr[ow] = mr_max_nan(mr_max_nan(mr_max_nan(x0[2 * ow], x0[2 * ow + 1]), x1[2 * ow]), x1[2 * ow + 1]);
                }
            } else {
                for (ow = 0; ow < OW; ++ow) yr[ow] = (((0.0f + x0[2 * ow]) + x0[2 * ow + 1]) + x1[2 * ow] + x1[2 * ow + 1]) / div;
            }
        }
        return;
    }
    for (pl = 0; pl < planes; ++pl) {
        const float *xp = x + pl * H * W;
        float *yp = y + pl * OH * OW;
        for (oh = 0; oh < OH; ++oh) {
            float *restrict yr = yp + oh * OW;
            const float init = is_max ? -INFINITY : 0.0f;
            for (ow = 0; ow < OW; ++ow) yr[ow] = init;
            for (kh = 0; kh < KH; ++kh) {
                const int64_t ih = oh * stride_h + kh * dil_h - pad_top;
                if (ih < 0 || ih >= H) continue;
                for (kw = 0; kw < KW; ++kw) {
                    const int64_t woff = kw * dil_w - pad_left;
                    const float *restrict xr = xp + ih * W;
                    int64_t lo, hi;
                    mr_out_range(OW, stride_w, woff, W, &lo, &hi);
                    /* Strides 1 and 2 (almost every pooling) with constant strides, which
                     * the compiler vectorizes; the same updates as the general loop. */
                    if (is_max && stride_w == 2) {
                        for (ow = lo; ow < hi; ++ow) yr[ow] = mr_max_nan(yr[ow], xr[ow * 2 + woff]);
                    } else if (is_max && stride_w == 1) {
                        for (ow = lo; ow < hi; ++ow) yr[ow] = mr_max_nan(yr[ow], xr[ow + woff]);
                    } else if (is_max) {
                        for (ow = lo; ow < hi; ++ow) yr[ow] = mr_max_nan(yr[ow], xr[ow * stride_w + woff]);
                    } else if (stride_w == 2) {
                        for (ow = lo; ow < hi; ++ow) yr[ow] += xr[ow * 2 + woff];
                    } else {
                        for (ow = lo; ow < hi; ++ow) yr[ow] += xr[ow * stride_w + woff];
                    }
                }
            }
            if (!is_max) {
                for (ow = 0; ow < OW; ++ow) yr[ow] = yr[ow] / div;
            }
        }
    }
}

/* ------------------------------------------------------------------------------------ */
/* Softmax                                                                              */
/* ------------------------------------------------------------------------------------ */

/* exp(d) for softmax, where d = x - max <= 0 or NaN: mr_fast_expf's core without the
 * cases above 0, and 0 below -87.34 (mr_fast_expf gives the smallest normal there), so a
 * masked-out -inf gives exactly 0. */
static float mr_softmax_exp(float d)
{
    const float c = d < -87.33654f ? -87.33654f : (d != d ? 0.0f : d);
    const float n = mr_expf_n(c);
    const float y = mr_expf_scaled(c, n, n);
    return d >= -87.33654f ? y : (d != d ? d : 0.0f);
}

#ifdef MR_AVX512
/* mr_softmax_exp on 16 lanes: the same reduction and polynomial, in fused multiply-adds,
 * with 2^n applied by vscalefps. Lanes below -87.34 are computed at -87.34 and then set
 * to 0, never at their own value: a subnormal result costs a microcode assist, and a
 * causal mask's -infs made the row 5 times slower. (The division that follows can still
 * go subnormal, for d near -87 in a row whose sum is large; that is rare.) */
static __m512 mr_softmax_exp16(__m512 d)
{
    const __m512 lo = _mm512_set1_ps(-87.33654f);
    const __m512 c = _mm512_max_ps(d, lo); /* NaN gives lo */
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), c);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    p = _mm512_mask_mov_ps(_mm512_scalef_ps(p, n), _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q), d);
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(d, lo, _CMP_NLT_UQ), p); /* d >= lo or NaN */
}

/* mr_softmax_row in 16 lanes: the max (exact in any order) with NaNs tracked apart,
 * the exponentials stored and summed in 16 partial sums, then the divisions. gcc left
 * the portable row's max loop scalar (gpt_block's attention: 1.45 -> 0.51 ns an element). */
static void mr_softmax_row_avx512(const float *x, float *y, int64_t n)
{
    const int64_t body = n - n % 16;
    const __mmask16 tail = (__mmask16)mr_lanes(0, n - body);
    __m512 m = _mm512_set1_ps(-INFINITY), sum = _mm512_setzero_ps(), v;
    __mmask16 nan = 0;
    float mx;
    int64_t k;
    for (k = 0; k < body; k += 16) {
        v = _mm512_loadu_ps(x + k);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        m = _mm512_max_ps(m, v);
    }
    if (tail) {
        v = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail, x + k);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        m = _mm512_max_ps(m, v);
    }
    mx = nan ? NAN : _mm512_reduce_max_ps(m);
    m = _mm512_set1_ps(mx);
    for (k = 0; k < body; k += 16) {
        v = mr_softmax_exp16(_mm512_sub_ps(_mm512_loadu_ps(x + k), m));
        _mm512_storeu_ps(y + k, v);
        sum = _mm512_add_ps(sum, v);
    }
    if (tail) {
        v = mr_softmax_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + k), m));
        _mm512_mask_storeu_ps(y + k, tail, v);
        sum = _mm512_mask_add_ps(sum, tail, sum, v);
    }
    m = _mm512_set1_ps(_mm512_reduce_add_ps(sum));
    for (k = 0; k < body; k += 16) _mm512_storeu_ps(y + k, _mm512_div_ps(_mm512_loadu_ps(y + k), m));
    if (tail) _mm512_mask_storeu_ps(y + k, tail, _mm512_div_ps(_mm512_maskz_loadu_ps(tail, y + k), m));
}
#endif

#ifndef MR_AVX512
/*
 * mr_softmax_row: softmax of one contiguous row of length n (n >= 1): m = max x (NaN-
 * propagating), y[k] = mr_softmax_exp(x[k] - m), s = sum y in MR_SOFTMAX_LANES interleaved float
 * partial sums (lane k % LANES) combined pairwise, then y[k] = y[k] / s. y may equal x.
 */
static void mr_softmax_row(const float *x, float *y, int64_t n)
{
    float m, s;
    float lanes[MR_SOFTMAX_LANES];
    int64_t k;
    int l;
    /* The max in lanes too (exact: any NaN gives NaN, else the largest value). */
    for (l = 0; l < MR_SOFTMAX_LANES; ++l) lanes[l] = -INFINITY;
    for (k = 0; k + MR_SOFTMAX_LANES <= n; k += MR_SOFTMAX_LANES) {
        for (l = 0; l < MR_SOFTMAX_LANES; ++l) lanes[l] = mr_max_nan(lanes[l], x[k + l]);
    }
    for (l = 0; k < n; ++k, ++l) lanes[l] = mr_max_nan(lanes[l], x[k]);
    m = lanes[0];
    for (l = 1; l < MR_SOFTMAX_LANES; ++l) m = mr_max_nan(m, lanes[l]);
    /* the exponentials in a loop of their own, which vectorizes (with the sums in it,
     * gcc did not: gpt_block's attention, 2.27 -> 1.71 ns an element) */
    for (k = 0; k < n; ++k) y[k] = mr_softmax_exp(x[k] - m);
    for (l = 0; l < MR_SOFTMAX_LANES; ++l) lanes[l] = 0.0f;
    for (k = 0; k + MR_SOFTMAX_LANES <= n; k += MR_SOFTMAX_LANES) {
        for (l = 0; l < MR_SOFTMAX_LANES; ++l) lanes[l] += y[k + l];
    }
    for (l = 0; k < n; ++k, ++l) lanes[l] += y[k];
    for (l = MR_SOFTMAX_LANES / 2; l >= 1; l /= 2) {
        int t;
        for (t = 0; t < l; ++t) lanes[t] += lanes[t + l];
    }
    s = lanes[0];
    for (k = 0; k < n; ++k) y[k] = y[k] / s;
}
#endif

/* mr_sgd_f32 and mr_sgd_f64, one body: v = momentum * v + g, then w -= lr * v (v
 * untouched when momentum is 0). */
#define MR_SGD(name, T)                                                  \
    void name(T *w, const T *g, T *v, int64_t n, T lr, T momentum)       \
    {                                                                    \
        int64_t i;                                                       \
        if (momentum == 0) {                                             \
            for (i = 0; i < n; ++i) {                                    \
                w[i] -= lr * g[i];                                       \
            }                                                            \
            return;                                                      \
        }                                                                \
        for (i = 0; i < n; ++i) {                                        \
            v[i] = momentum * v[i] + g[i];                               \
            w[i] -= lr * v[i];                                           \
        }                                                                \
    }
MR_SGD(mr_sgd_f32, float)
MR_SGD(mr_sgd_f64, double)

/*
 * mr_softmax_f32: y[o,k,i] = exp(x[o,k,i] - m) / sum_k' exp(x[o,k',i] - m), with
 * m = max_k x[o,k,i] (NaN-propagating), for x, y contiguous [outer, n, inner]; all in
 * float. inner == 1 uses mr_softmax_row (mr_softmax_row_avx512 with AVX-512); otherwise
 * tiles of MR_SOFTMAX_TILE columns of inner are processed together (per-column max and
 * sum in stack arrays, sum in increasing k), so the inner loops run over contiguous
 * memory. y may equal x.
 */
void mr_softmax_f32(const float *x, float *y, int64_t outer, int64_t n, int64_t inner)
{
    int64_t o, k, i0, i;
    if (outer <= 0 || n <= 0 || inner <= 0) return;
    if (inner == 1) {
#ifdef MR_AVX512
        for (o = 0; o < outer; ++o) mr_softmax_row_avx512(x + o * n, y + o * n, n);
#else
        for (o = 0; o < outer; ++o) mr_softmax_row(x + o * n, y + o * n, n);
#endif
        return;
    }
    for (o = 0; o < outer; ++o) {
        const float *xo = x + o * n * inner;
        float *yo = y + o * n * inner;
        for (i0 = 0; i0 < inner; i0 += MR_SOFTMAX_TILE) {
            const int64_t t = mr_min_i64(MR_SOFTMAX_TILE, inner - i0);
            float mx[MR_SOFTMAX_TILE], sm[MR_SOFTMAX_TILE];
            for (i = 0; i < t; ++i) {
                mx[i] = -INFINITY;
                sm[i] = 0.0f;
            }
            for (k = 0; k < n; ++k) {
                const float *xr = xo + k * inner + i0;
                for (i = 0; i < t; ++i) {
                    const float v = xr[i];
                    mx[i] = (v > mx[i] || v != v) ? v : mx[i];
                }
            }
            for (k = 0; k < n; ++k) {
                const float *xr = xo + k * inner + i0;
                float *yr = yo + k * inner + i0;
                for (i = 0; i < t; ++i) {
                    const float e = mr_softmax_exp(xr[i] - mx[i]);
                    yr[i] = e;
                    sm[i] += e;
                }
            }
            for (k = 0; k < n; ++k) {
                float *yr = yo + k * inner + i0;
                for (i = 0; i < t; ++i) yr[i] = yr[i] / sm[i];
            }
        }
    }
}

/* ------------------------------------------------------------------------------------ */
/* Work split through the caller's parallel-for hook                                    */
/* ------------------------------------------------------------------------------------ */

/* Columns of C per task: the packed block width keeps each task's packing identical
 * to the serial call's, and gives enough tasks to split evenly: with 4 blocks per task,
 * N = 768 made 3 tasks, so one of 2 threads did twice the other's work (gpt_block b1 2t
 * 8.9 -> 7.6 ms). */
#define MR_MT_COLS MR_SGEMM_NC
#ifndef MR_MT_MIN_MACS
#define MR_MT_MIN_MACS 262144.0
#endif

typedef struct {
    int64_t M, N, K;
    float alpha, beta;
    const float *A, *B;
    float *C;
    int64_t a_rs, a_cs, b_rs, b_cs, c_rs, c_cs;
    const mr_epilogue *ep;
    int panels; /* B is in panels (mr_sgemm_panels_mt); b_rs, b_cs unused */
} mr_sgemm_job;

/* mr_sgemm_task: columns [begin, end) * MR_MT_COLS of a mr_sgemm_job. */
static void mr_sgemm_task(void *ctx, int64_t begin, int64_t end)
{
    const mr_sgemm_job *j = (const mr_sgemm_job *)ctx;
    int64_t j0 = begin * MR_MT_COLS;
    int64_t j1 = end * MR_MT_COLS < j->N ? end * MR_MT_COLS : j->N;
    if (j1 > j0) {
        mr_epi_at at;
        at.ep = j->ep;
        at.n = j->ep ? j->ep->n : 0;
        at.i = 0;
        at.j = j0;
        if (j->panels) {
            mr_sgemm_panels_at(j->M, j1 - j0, j->K, j->alpha, j->A, j->a_rs, j->a_cs, j->B, j0, j->beta,
                               j->C + j0 * j->c_cs, j->c_rs, j->c_cs, &at);
        } else {
            mr_sgemm_at(j->M, j1 - j0, j->K, j->alpha, j->A, j->a_rs, j->a_cs, j->B + j0 * j->b_cs, j->b_rs,
                        j->b_cs, j->beta, j->C + j0 * j->c_cs, j->c_rs, j->c_cs, &at);
        }
    }
}

static void mr_sgemm_run(const mr_threads *threads, mr_sgemm_job *job)
{
    int64_t tasks = (job->N + MR_MT_COLS - 1) / MR_MT_COLS;
    /* Below MR_MT_MIN_MACS multiply-adds splitting costs more than it saves. */
    if (!threads || !threads->parallel_for || tasks < 2 ||
        (double)job->M * (double)job->N * (double)job->K < MR_MT_MIN_MACS) {
        mr_sgemm_task(job, 0, tasks > 0 ? tasks : 1);
        return;
    }
    threads->parallel_for(threads->user, mr_sgemm_task, job, tasks);
}

void mr_sgemm_mt(const mr_threads *threads, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t a_rs, int64_t a_cs,
                 const float *B, int64_t b_rs, int64_t b_cs,
                 float beta, float *C, int64_t c_rs, int64_t c_cs, const mr_epilogue *ep)
{
    mr_sgemm_job job;
    job.M = M; job.N = N; job.K = K; job.alpha = alpha; job.beta = beta;
    job.A = A; job.B = B; job.C = C;
    job.a_rs = a_rs; job.a_cs = a_cs; job.b_rs = b_rs; job.b_cs = b_cs; job.c_rs = c_rs; job.c_cs = c_cs;
    job.ep = ep;
    job.panels = 0;
    mr_sgemm_run(threads, &job);
}

void mr_sgemm_panels_mt(const mr_threads *threads, int64_t M, int64_t N, int64_t K, float alpha,
                        const float *A, int64_t a_rs, int64_t a_cs, const float *Bp,
                        float beta, float *C, int64_t c_rs, int64_t c_cs, const mr_epilogue *ep)
{
    mr_sgemm_job job;
    job.M = M; job.N = N; job.K = K; job.alpha = alpha; job.beta = beta;
    job.A = A; job.B = Bp; job.C = C;
    job.a_rs = a_rs; job.a_cs = a_cs; job.b_rs = 0; job.b_cs = 0; job.c_rs = c_rs; job.c_cs = c_cs;
    job.ep = ep;
    job.panels = 1;
    mr_sgemm_run(threads, &job);
}

typedef struct {
    const float *x, *w;
    float *y;
    int64_t N, C, H, W, O, KH, KW, OH, OW, sh, sw, pt, pl, dh, dw, groups, chunks, per_chunk;
    const mr_epilogue *ep;
} mr_conv_job;

/* mr_conv_task: items [begin, end) of a mr_conv_job, item = image * chunks + chunk; a
 * chunk is a range of per_chunk output positions (each packs only its own columns of
 * the implicit im2col matrix, so splitting repeats no work). Consecutive chunks of one
 * image are one call. */
static void mr_conv_task(void *ctx, int64_t begin, int64_t end)
{
    const mr_conv_job *j = (const mr_conv_job *)ctx;
    const int64_t P = j->OH * j->OW;
    int64_t item, next;
    for (item = begin; item < end; item = next) {
        const int64_t n = item / j->chunks, p0 = item % j->chunks * j->per_chunk;
        int64_t p1;
        next = mr_min_i64(end, (n + 1) * j->chunks);
        p1 = mr_min_i64(P, (next - n * j->chunks) * j->per_chunk);
        mr_conv2d_at(j->x + n * j->C * j->H * j->W, j->w, j->y + n * j->O * P, 1, j->C, j->H, j->W, j->O, j->KH,
                     j->KW, j->OH, j->OW, j->sh, j->sw, j->pt, j->pl, j->dh, j->dw, j->groups, j->ep, n, p0, p1);
    }
}

void mr_conv2d_f32_mt(const mr_threads *threads, const float *x, const float *w, float *y,
                      int64_t N, int64_t C, int64_t H, int64_t W,
                      int64_t O, int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                      int64_t stride_h, int64_t stride_w,
                      int64_t pad_top, int64_t pad_left,
                      int64_t dil_h, int64_t dil_w, int64_t groups, const mr_epilogue *ep)
{
    mr_conv_job job;
    const int64_t P = OH * OW;
    const double macs = (double)N * (double)O * (double)P * (double)(C / (groups > 0 ? groups : 1)) * (double)(KH * KW);
    if (!threads || !threads->parallel_for || macs < MR_MT_MIN_MACS || (N <= 1 && mr_conv_direct(O, groups))) {
        mr_conv2d_at(x, w, y, N, C, H, W, O, KH, KW, OH, OW, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w,
                     groups, ep, 0, 0, P);
        return;
    }
    job.x = x; job.w = w; job.y = y; job.N = N; job.C = C; job.H = H; job.W = W; job.O = O;
    job.KH = KH; job.KW = KW; job.OH = OH; job.OW = OW; job.sh = stride_h; job.sw = stride_w;
    job.pt = pad_top; job.pl = pad_left; job.dh = dil_h; job.dw = dil_w; job.groups = groups;
    job.ep = ep;
    /* Split images, and for the implicit GEMM their output positions too (blocks of
     * MR_MT_COLS); the direct path takes whole images. */
    job.per_chunk = mr_conv_direct(O, groups) ? P : MR_MT_COLS;
    job.chunks = (P + job.per_chunk - 1) / job.per_chunk;
    threads->parallel_for(threads->user, mr_conv_task, &job, N * job.chunks);
}

typedef struct {
    const float *x;
    float *y;
    int64_t H, W, KH, KW, OH, OW, sh, sw, pt, pl, dh, dw;
    int is_max;
} mr_pool_job;

/* mr_pool_task: planes [begin, end) of a mr_pool_job. */
static void mr_pool_task(void *ctx, int64_t begin, int64_t end)
{
    const mr_pool_job *j = (const mr_pool_job *)ctx;
    mr_pool2d_f32(j->x + begin * j->H * j->W, j->y + begin * j->OH * j->OW, 1, end - begin, j->H, j->W, j->KH, j->KW,
                  j->OH, j->OW, j->sh, j->sw, j->pt, j->pl, j->dh, j->dw, j->is_max);
}

void mr_pool2d_f32_mt(const mr_threads *threads, const float *x, float *y,
                      int64_t N, int64_t C, int64_t H, int64_t W,
                      int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                      int64_t stride_h, int64_t stride_w,
                      int64_t pad_top, int64_t pad_left,
                      int64_t dil_h, int64_t dil_w, int is_max)
{
    mr_pool_job job;
    job.x = x; job.y = y; job.H = H; job.W = W; job.KH = KH; job.KW = KW; job.OH = OH; job.OW = OW;
    job.sh = stride_h; job.sw = stride_w; job.pt = pad_top; job.pl = pad_left; job.dh = dil_h; job.dw = dil_w;
    job.is_max = is_max;
    mr_run(threads, mr_pool_task, &job, N * C, (double)(N * C) * (double)(OH * OW) * (double)(KH * KW));
}

typedef struct {
    const float *x;
    float *y;
    int64_t n, inner;
} mr_softmax_job;

/* mr_softmax_task: outer slices [begin, end) of a mr_softmax_job. */
static void mr_softmax_task(void *ctx, int64_t begin, int64_t end)
{
    const mr_softmax_job *j = (const mr_softmax_job *)ctx;
    const int64_t slice = j->n * j->inner;
    mr_softmax_f32(j->x + begin * slice, j->y + begin * slice, end - begin, j->n, j->inner);
}

void mr_softmax_f32_mt(const mr_threads *threads, const float *x, float *y, int64_t outer, int64_t n, int64_t inner)
{
    mr_softmax_job job;
    job.x = x;
    job.y = y;
    job.n = n;
    job.inner = inner;
    /* About ten operations per element (max, exp, sum, divide). */
    mr_run(threads, mr_softmax_task, &job, outer, 10.0 * (double)outer * (double)n * (double)inner);
}

void mr_run(const mr_threads *threads, mr_task task, void *ctx, int64_t n, double cost)
{
    /* About 64k operations (tens of microseconds) pay for waking the other threads. */
    if (threads && threads->parallel_for && n >= 2 && cost >= 65536.0) {
        threads->parallel_for(threads->user, task, ctx, n);
    } else {
        task(ctx, 0, n);
    }
}
