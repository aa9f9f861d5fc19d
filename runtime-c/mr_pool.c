/*
 * mr_pool.c -- mr_pool2d_f32: max and average pooling.
 */
#include "mr_internal.h"

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

/* Two output rows (OW <= 8, y's rows r and r + 1, contiguous) of the same pool in one
 * vector: rows x0, x1 (row r's pair) and x2, x3 (row r + 1's), read 2 OW floats each;
 * even and odd (mr_pool_2x2_lanes) put row r's taps in lanes [0, OW) and row r + 1's
 * in [OW, 2 OW). Each output gets the same updates in the same order as above. */
static void mr_max_pool_2x2_rows2_avx512(const float *x0, const float *x1, const float *x2, const float *x3, float *y,
                                         int64_t OW, __m512i even, __m512i odd)
{
    const __mmask16 in = (__mmask16)((1u << (2 * OW)) - 1u);
    const __m512 a0 = _mm512_maskz_loadu_ps(in, x0), b0 = _mm512_maskz_loadu_ps(in, x2);
    const __m512 a1 = _mm512_maskz_loadu_ps(in, x1), b1 = _mm512_maskz_loadu_ps(in, x3);
    __m512 m = _mm512_permutex2var_ps(a0, even, b0);
    m = mr_max_nan16(m, _mm512_permutex2var_ps(a0, odd, b0));
    m = mr_max_nan16(m, _mm512_permutex2var_ps(a1, even, b1));
    m = mr_max_nan16(m, _mm512_permutex2var_ps(a1, odd, b1));
    _mm512_mask_storeu_ps(y, in, m);
}

/* mr_max_pool_2x2_rows2_avx512's lane indices: lane l < OW takes tap 2l (+1 for odd)
 * of the first source, lane OW + l tap 2l of the second (indices 16 and up). */
static void mr_pool_2x2_lanes(int64_t OW, __m512i *even, __m512i *odd)
{
    int32_t e[16];
    int64_t l;
    for (l = 0; l < 16; ++l) e[l] = (int32_t)(l < OW ? 2 * l : l < 2 * OW ? 16 + 2 * (l - OW) : 0);
    *even = _mm512_loadu_si512(e);
    *odd = _mm512_add_epi32(*even, _mm512_set1_epi32(1));
}
#elif defined(MR_AVX2)
/* mr_max_nan on 8 lanes. */
static __m256 mr_max_nan8(__m256 m, __m256 v)
{
    const __m256 wins = _mm256_or_ps(_mm256_cmp_ps(v, m, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_blendv_ps(m, v, wins);
}

/* The even and odd floats of the 16 in lo, hi as two vectors of 8. */
static void mr_deinterleave8(__m256 lo, __m256 hi, __m256 *even, __m256 *odd)
{
    /* in-lane shuffles give lanes 0-1 of lo, 0-1 of hi, 2-3 of lo, 2-3 of hi (64-bit
     * units); the permute puts them in order */
    *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xd8));
    *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xdd)), 0xd8));
}

/* 8 outputs of a 2x2, stride-2 max pool from the 16 floats at x0 and at x1, in the
 * scalar loop's update order. */
static __m256 mr_max_pool_2x2_8(__m256 a0, __m256 a1, __m256 b0, __m256 b1)
{
    __m256 e0, o0, e1, o1;
    mr_deinterleave8(a0, a1, &e0, &o0);
    mr_deinterleave8(b0, b1, &e1, &o1);
    return mr_max_nan8(mr_max_nan8(mr_max_nan8(e0, o0), e1), o1);
}

/* One output row of a 2x2, stride-2 max pool over input rows x0 and x1, 8 outputs at a
 * time. The last few, where `whole` says 16 floats from the remainder's start in x0 and
 * in x1 may be read and 8 outputs from it in y written (the later rows' outputs then
 * written over them), as a whole vector; else read with masked loads and stored one by
 * one (AVX's masked store is microcoded on AMD's cores, about 20 cycles). The avx2
 * kernels' lenet b32 spent three times the avx512 ones' time here with the scalar loop,
 * and its second pool (rows of 5, b32) took 26.3 us with the masked remainder, 9.4
 * with whole vectors (alone, one thread, Zen 4). */
static void mr_max_pool_2x2_row_avx2(const float *x0, const float *x1, float *y, int64_t OW, int whole)
{
    int64_t ow = 0;
    for (; ow + 8 <= OW || (whole && ow < OW); ow += 8) {
        const float *p = x0 + 2 * ow, *q = x1 + 2 * ow;
        _mm256_storeu_ps(y + ow, mr_max_pool_2x2_8(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8),
                                                   _mm256_loadu_ps(q), _mm256_loadu_ps(q + 8)));
    }
    if (ow < OW) {
        const int64_t n = OW - ow;
        const __m256i lo = mr_lanes8(0, 2 * n), hi = mr_lanes8(0, 2 * n - 8);
        const float *p = x0 + 2 * ow, *q = x1 + 2 * ow;
        float out[8];
        int64_t t;
        _mm256_storeu_ps(out, mr_max_pool_2x2_8(_mm256_maskload_ps(p, lo), _mm256_maskload_ps(p + 8, hi),
                                                _mm256_maskload_ps(q, lo), _mm256_maskload_ps(q + 8, hi)));
        for (t = 0; t < n; ++t) y[ow + t] = out[t];
    }
}
#endif


/* Where output row pl (of planes * OH) of a 2x2, stride-2 pool starts reading in x: its
 * plane's start plus its pair of input rows. */
static int64_t mr_pool_2x2_at(int64_t pl, int64_t OH, int64_t H, int64_t W)
{
    return (pl / OH) * H * W + (pl % OH) * 2 * W;
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
        pl = 0;
#ifdef MR_AVX512
        if (is_max && OW <= 8) {
            /* rows of up to 8 outputs two at a time: lenet b32's second pool (rows of 5)
             * took 14.4 us a row at a time, 6.5 two at a time (alone, one thread, Zen 4) */
            __m512i even, odd;
            mr_pool_2x2_lanes(OW, &even, &odd);
            for (; pl + 2 <= planes * OH; pl += 2) {
                const float *x0 = x + mr_pool_2x2_at(pl, OH, H, W), *x2 = x + mr_pool_2x2_at(pl + 1, OH, H, W);
                mr_max_pool_2x2_rows2_avx512(x0, x0 + W, x2, x2 + W, y + pl * OW, OW, even, odd);
            }
        }
#endif
        for (; pl < planes * OH; ++pl) {
            const int64_t at = mr_pool_2x2_at(pl, OH, H, W);
            const float *restrict x0 = x + at, *restrict x1 = x0 + W;
            float *restrict yr = y + pl * OW;
#ifdef MR_AVX512
            if (is_max && OW <= 16) {
                mr_max_pool_2x2_row_avx512(x0, x1, yr, OW);
                continue;
            }
#elif defined(MR_AVX2)
            if (is_max) {
                /* whole: the remainder's 16 floats of x1 and 8 outputs of yr lie inside x, y */
                const int64_t rem = OW - OW % 8;
                mr_max_pool_2x2_row_avx2(x0, x1, yr, OW,
                                         at + W + 2 * rem + 16 <= planes * H * W && pl * OW + rem + 8 <= planes * OH * OW);
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
