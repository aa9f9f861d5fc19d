/*
 * mr_softmax.c -- mr_softmax_f32: softmax along one axis, by rows or by tiles of columns.
 */
#include "mr_internal.h"

/* ------------------------------------------------------------------------------------ */
/* Softmax                                                                              */
/* ------------------------------------------------------------------------------------ */

#define MR_SOFTMAX_LANES 8
#define MR_SOFTMAX_TILE 64
/* Elements of a row whose exponentials mr_softmax_exps computes a chunk at a time. */
#define MR_SOFTMAX_CHUNK 256
#define MR_SOFTMAX_EXP_LO -87.33654f

/* exp(d) for softmax, where d = x - max <= 0 or NaN: mr_fast_expf's core without the
 * cases above 0, and 0 below -87.34 (mr_fast_expf gives the smallest normal there), so a
 * masked-out -inf gives exactly 0. The three steps are mr_softmax_exps' three loops. */
static inline float mr_softmax_exp_arg(float d) { return d < MR_SOFTMAX_EXP_LO ? MR_SOFTMAX_EXP_LO : (d != d ? 0.0f : d); }
static inline float mr_softmax_exp_core(float c)
{
    const float n = mr_expf_n(c);
    return mr_expf_scaled(c, n, n);
}
static inline float mr_softmax_exp_fix(float d, float y) { return d >= MR_SOFTMAX_EXP_LO ? y : (d != d ? d : 0.0f); }
static float mr_softmax_exp(float d) { return mr_softmax_exp_fix(d, mr_softmax_exp_core(mr_softmax_exp_arg(d))); }

#ifndef MR_AVX512
/* The max of x[0..n) (exact: any NaN gives NaN, else the largest value), a chunk at a
 * time, by halving the chunk: each halving is an elementwise loop that vectorizes, where
 * GCC leaves a running max in lanes (a reduction of selects) scalar. */
static float mr_softmax_max(const float *x, int64_t n)
{
    float half[MR_SOFTMAX_CHUNK / 2];
    float m = -INFINITY;
    int64_t k0, k, h;
    for (k0 = 0; k0 < n; k0 += MR_SOFTMAX_CHUNK) {
        const float *xc = x + k0;
        const int64_t len = mr_min_i64(MR_SOFTMAX_CHUNK, n - k0);
        /* the chunk folded onto its first h (a power of two, h < len <= 2h, or 1) */
        for (h = 1; 2 * h < len; h *= 2) continue;
        for (k = 0; k < len - h; ++k) half[k] = mr_max_nan(xc[k], xc[h + k]);
        for (; k < h; ++k) half[k] = xc[k];
        for (h /= 2; h >= 1; h /= 2) {
            for (k = 0; k < h; ++k) half[k] = mr_max_nan(half[k], half[k + h]);
        }
        m = mr_max_nan(m, half[0]);
    }
    return m;
}

/* y[k] = mr_softmax_exp(x[k] - m) for k < n, the same values, in three loops over
 * chunks: as one loop GCC moves the polynomial under the clamp's branch and, since
 * float arithmetic may trap, leaves it scalar on every ISA but AVX-512 (rows of 128,
 * baseline x86-64: 6.8 ns an element, most of the softmax); split, each loop
 * vectorizes. y may equal x. */
static void mr_softmax_exps(const float *x, float *y, int64_t n, float m)
{
    float arg[MR_SOFTMAX_CHUNK], e[MR_SOFTMAX_CHUNK];
    int64_t k0, k, len;
    for (k0 = 0; k0 < n; k0 += len) {
        len = mr_min_i64(MR_SOFTMAX_CHUNK, n - k0);
        for (k = 0; k < len; ++k) arg[k] = mr_softmax_exp_arg(x[k0 + k] - m);
        for (k = 0; k < len; ++k) e[k] = mr_softmax_exp_core(arg[k]);
        for (k = 0; k < len; ++k) y[k0 + k] = mr_softmax_exp_fix(x[k0 + k] - m, e[k]);
    }
}
#endif

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
    m = mr_softmax_max(x, n);
    /* the exponentials in loops of their own, which vectorize (with the sums in them,
     * gcc did not: gpt_block's attention, 2.27 -> 1.71 ns an element) */
    mr_softmax_exps(x, y, n, m);
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
