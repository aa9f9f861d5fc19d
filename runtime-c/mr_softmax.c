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

#if !defined(MR_VN)
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

#if defined(MR_VN)
/* exp(r) for r = c - n ln 2 on MR_VN lanes: mr_expf_scaled's reduction and polynomial,
 * in fused multiply-adds, without the 2^n. */
static inline mr_vf mr_softmax_poly(mr_vf c, mr_vf n)
{
    const mr_vf r = mr_vf_fma(n, mr_vf_set1(2.12194440e-4f), mr_vf_fnma(n, mr_vf_set1(0.693359375f), c));
    mr_vf p = mr_vf_set1(1.9875691500e-4f);
    p = mr_vf_fma(p, r, mr_vf_set1(1.3981999507e-3f));
    p = mr_vf_fma(p, r, mr_vf_set1(8.3334519073e-3f));
    p = mr_vf_fma(p, r, mr_vf_set1(4.1665795894e-2f));
    p = mr_vf_fma(p, r, mr_vf_set1(1.6666665459e-1f));
    p = mr_vf_fma(p, r, mr_vf_set1(5.0000001201e-1f));
    return mr_vf_add(mr_vf_fma(p, mr_vf_mul(r, r), r), mr_vf_set1(1.0f));
}
#endif

#ifdef MR_AVX512
/* mr_softmax_exp on 16 lanes, but 0 for a NaN d (a NaN in the row makes its max NaN,
 * so every d, and every output, 0 / 0): mr_softmax_poly with 2^n applied by vscalefps.
 * Lanes below -87.34 are computed at -87.34 and then set to 0, never at their own
 * value: a subnormal result costs a microcode assist, and a causal mask's -infs made the
 * row 5 times slower. (The division that follows can still go subnormal, for d near -87
 * in a row whose sum is large; that is rare.) */
static __m512 mr_softmax_exp16(__m512 d)
{
    const __m512 lo = _mm512_set1_ps(MR_SOFTMAX_EXP_LO);
    const __m512 c = _mm512_max_ps(d, lo); /* NaN gives lo */
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(d, lo, _CMP_GE_OQ), _mm512_scalef_ps(mr_softmax_poly(c, n), n));
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
#elif defined(MR_VN)
/* AVX2 and NEON. mr_softmax_exp on MR_VN lanes, as mr_softmax_exp16 with 2^n built in
 * the exponent bits (n in [-126, 0]); and a running max that NaN wins (mr_max_nan). */
#if defined(MR_AVX2)
static inline mr_vf mr_softmax_expv(mr_vf d)
{
    const mr_vf lo = mr_vf_set1(MR_SOFTMAX_EXP_LO);
    const mr_vf c = _mm256_max_ps(d, lo); /* NaN gives lo */
    const mr_vf n = _mm256_round_ps(_mm256_mul_ps(c, mr_vf_set1(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(mr_softmax_poly(c, n), _mm256_castsi256_ps(e)),
                         _mm256_cmp_ps(d, lo, _CMP_GE_OQ)); /* 0 below lo and for NaN, as exp16 */
}
static inline mr_vf mr_vf_max_nan(mr_vf m, mr_vf v)
{
    return _mm256_blendv_ps(m, v, _mm256_or_ps(_mm256_cmp_ps(v, m, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}
#else
static inline mr_vf mr_softmax_expv(mr_vf d)
{
    const mr_vf lo = mr_vf_set1(MR_SOFTMAX_EXP_LO);
    const mr_vf c = vmaxnmq_f32(d, lo); /* NaN gives lo */
    const mr_vf n = vrndnq_f32(vmulq_f32(c, mr_vf_set1(1.44269504088896341f)));
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vbslq_f32(vcgeq_f32(d, lo), vmulq_f32(mr_softmax_poly(c, n), vreinterpretq_f32_s32(e)),
                     mr_vf_set1(0.0f)); /* 0 below lo and for NaN, as exp16 */
}
static inline mr_vf mr_vf_max_nan(mr_vf m, mr_vf v) { return vmaxq_f32(m, v); } /* FMAX: NaN wins */
#endif

/* mr_softmax_row in MR_VN lanes: the max, the exponentials stored and summed in MR_VN
 * partial sums, then the divisions; the last n % MR_VN elements by the scalar code
 * (without AVX's masked stores, which AMD's cores microcode). With the portable row,
 * the avx2 kernels took gpt_block's softmax 2.4 times as long as the avx512 ones. */
static void mr_softmax_row_vec(const float *x, float *y, int64_t n)
{
    const int64_t body = n - n % MR_VN;
    mr_vf m = mr_vf_set1(-INFINITY), sum = mr_vf_set1(0.0f), v;
    float lanes[MR_VN], mx = -INFINITY, s = 0.0f;
    int64_t k;
    int l;
    for (k = 0; k < body; k += MR_VN) m = mr_vf_max_nan(m, mr_vf_load(x + k));
    mr_vf_store(lanes, m);
    for (l = 0; l < MR_VN; ++l) mx = mr_max_nan(mx, lanes[l]);
    for (; k < n; ++k) mx = mr_max_nan(mx, x[k]);
    m = mr_vf_set1(mx);
    for (k = 0; k < body; k += MR_VN) {
        v = mr_softmax_expv(mr_vf_sub(mr_vf_load(x + k), m));
        mr_vf_store(y + k, v);
        sum = mr_vf_add(sum, v);
    }
    mr_vf_store(lanes, sum);
    for (l = 0; l < MR_VN; ++l) s += lanes[l];
    for (; k < n; ++k) {
        y[k] = mr_softmax_exp(x[k] - mx);
        s += y[k];
    }
    m = mr_vf_set1(s);
    for (k = 0; k < body; k += MR_VN) mr_vf_store(y + k, mr_vf_div(mr_vf_load(y + k), m));
    for (; k < n; ++k) y[k] = y[k] / s;
}
#endif

#if !defined(MR_VN)
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
 * float. inner == 1 uses mr_softmax_row (mr_softmax_row_avx512 with AVX-512,
 * mr_softmax_row_vec with AVX2 and NEON); otherwise
 * tiles of MR_SOFTMAX_TILE columns of inner are processed together (per-column max and
 * sum in stack arrays, sum in increasing k), so the inner loops run over contiguous
 * memory. y may equal x.
 */
void mr_softmax_f32(const float *x, float *y, int64_t outer, int64_t n, int64_t inner)
{
    int64_t o, k, i0, i;
    if (outer <= 0 || n <= 0 || inner <= 0) return;
    if (inner == 1) {
#if defined(MR_AVX512)
        for (o = 0; o < outer; ++o) mr_softmax_row_avx512(x + o * n, y + o * n, n);
#elif defined(MR_VN)
        for (o = 0; o < outer; ++o) mr_softmax_row_vec(x + o * n, y + o * n, n);
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
