/*
 * mr_winograd.c -- mr_conv2d_winograd_f32 (F(4x4, 3x3) as 36 GEMMs over transformed
 * tiles) and mr_winograd_weights_f32, the weight transform it reads.
 */
#include "mr_internal.h"

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
    const float *x;
    const void *u; /* stored as utype */
    int utype;
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
 * With AVX-512, 16 tiles at a time in registers (AVX2: 8), the stride-4 columns picked
 * by permutes (a loop over tiles with a stride of 4 is one gcc leaves mostly scalar: the
 * convolution above, 390 -> 226 us with AVX-512); else loops over the run's tiles.
 */
#if defined(MR_VN)
/* MR_VN tiles in each vector register (mr_vf): the patches' loads, the output's
 * interleave and the loads and stores of part vectors differ by ISA, the transforms and
 * runs are the same. */
#if defined(MR_AVX512) || defined(MR_AVX2)
/* 4 x 4 transposes within each 128-bit lane: lane i of u[m]'s 128 bits L is lane m of
 * x[i]'s. */
static void mr_vf_transpose4(const mr_vf x[4], mr_vf u[4])
{
    const mr_vf t0 = MR_VF(unpacklo_ps)(x[0], x[1]), t1 = MR_VF(unpackhi_ps)(x[0], x[1]);
    const mr_vf t2 = MR_VF(unpacklo_ps)(x[2], x[3]), t3 = MR_VF(unpackhi_ps)(x[2], x[3]);
    u[0] = MR_VF(castpd_ps)(MR_VF(unpacklo_pd)(MR_VF(castps_pd)(t0), MR_VF(castps_pd)(t2)));
    u[1] = MR_VF(castpd_ps)(MR_VF(unpackhi_pd)(MR_VF(castps_pd)(t0), MR_VF(castps_pd)(t2)));
    u[2] = MR_VF(castpd_ps)(MR_VF(unpacklo_pd)(MR_VF(castps_pd)(t1), MR_VF(castps_pd)(t3)));
    u[3] = MR_VF(castpd_ps)(MR_VF(unpackhi_pd)(MR_VF(castps_pd)(t1), MR_VF(castps_pd)(t3)));
}

#if defined(MR_AVX512)
/* The n <= 16 floats at p, zeros after them; and stored to p. */
static mr_vf mr_vf_load_n(const float *p, int64_t n) { return _mm512_maskz_loadu_ps((__mmask16)mr_lanes(0, n), p); }
static void mr_vf_store_n(float *p, mr_vf v, int64_t n) { _mm512_mask_storeu_ps(p, (__mmask16)mr_lanes(0, n), v); }

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

/* The 64 floats 4k + q = y[q][k] (k < 16, q < 4), as 4 vectors. */
static void mr_wino_interleave4(const __m512 y[4], __m512 o[4])
{
    __m512 u[4];
    mr_vf_transpose4(y, u); /* u[m]'s 128-bit lane L: tile 4L + m */
    const __m512 e01 = _mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 e23 = _mm512_shuffle_f32x4(u[2], u[3], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 o01 = _mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1));
    const __m512 o23 = _mm512_shuffle_f32x4(u[2], u[3], _MM_SHUFFLE(3, 1, 3, 1));
    o[0] = _mm512_shuffle_f32x4(e01, e23, _MM_SHUFFLE(2, 0, 2, 0));
    o[1] = _mm512_shuffle_f32x4(o01, o23, _MM_SHUFFLE(2, 0, 2, 0));
    o[2] = _mm512_shuffle_f32x4(e01, e23, _MM_SHUFFLE(3, 1, 3, 1));
    o[3] = _mm512_shuffle_f32x4(o01, o23, _MM_SHUFFLE(3, 1, 3, 1));
}
#else
/* The n floats at p (at most 8), zeros after them; and stored to p, a part vector one
 * float at a time (AVX's masked store is microcoded on AMD's cores). */
static mr_vf mr_vf_load_n(const float *p, int64_t n) { return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mr_lanes8(0, n)); }
static void mr_vf_store_n(float *p, mr_vf v, int64_t n)
{
    float part[8];
    int64_t t;
    if (n >= 8) {
        _mm256_storeu_ps(p, v);
        return;
    }
    _mm256_storeu_ps(part, v);
    for (t = 0; t < n; ++t) p[t] = part[t];
}

/* The 6x6 patches' rows of 8 tiles from float k of window w: e[j] lane t = float
 * k + 4t + j (masked loads: floats outside [w.lo, w.hi) are zeros, and never read). */
static void mr_wino_patch_rows(const mr_wino_window *w, int64_t k, __m256 e[6])
{
    /* the transposes below leave tiles in the order 0, 2, 4, 6, 1, 3, 5, 7 */
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i next = _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 0);
    __m256 v[5];
    int q;
    /* floats k + 8q .. k + 8q + 7 (tiles 2q and 2q + 1); the fifth holds those past the last tile's */
    for (q = 0; q < 5; ++q) {
        const int64_t at = k + 8 * q;
        v[q] = _mm256_maskload_ps((const float *)(w->at + 4u * (uintptr_t)at), mr_lanes8(w->lo - at, w->hi - at));
    }
    /* lane L of e[j] holds float j of tiles L, L + 2, ... */
    mr_vf_transpose4(v, e);
    for (q = 0; q < 4; ++q) e[q] = _mm256_permutevar8x32_ps(e[q], order);
    /* e[4], e[5]: e[0], e[1] one tile on, the last lane from v[4] (floats 32, 33) */
    e[4] = _mm256_blend_ps(_mm256_permutevar8x32_ps(e[0], next), _mm256_permutevar8x32_ps(v[4], _mm256_set1_epi32(0)), 0x80);
    e[5] = _mm256_blend_ps(_mm256_permutevar8x32_ps(e[1], next), _mm256_permutevar8x32_ps(v[4], _mm256_set1_epi32(1)), 0x80);
}

/* The 32 floats 4k + q = y[q][k] (k < 8, q < 4), as 4 vectors. */
static void mr_wino_interleave4(const __m256 y[4], __m256 o[4])
{
    __m256 u[4];
    mr_vf_transpose4(y, u); /* u[m]: tiles m and m + 4 */
    o[0] = _mm256_permute2f128_ps(u[0], u[1], 0x20);
    o[1] = _mm256_permute2f128_ps(u[2], u[3], 0x20);
    o[2] = _mm256_permute2f128_ps(u[0], u[1], 0x31);
    o[3] = _mm256_permute2f128_ps(u[2], u[3], 0x31);
}
#endif
#else
/* NEON. The n floats at p (at most 4), zeros after them; and stored to p. */
static mr_vf mr_vf_load_n(const float *p, int64_t n)
{
    float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (n >= 4) return vld1q_f32(p);
    memcpy(part, p, sizeof(float) * (size_t)n);
    return vld1q_f32(part);
}
static void mr_vf_store_n(float *p, mr_vf v, int64_t n)
{
    float part[4];
    if (n >= 4) {
        vst1q_f32(p, v);
        return;
    }
    vst1q_f32(part, v);
    memcpy(p, part, sizeof(float) * (size_t)n);
}

/* The 6x6 patches' rows of 4 tiles from float k of window w: e[j] lane t = float
 * k + 4t + j. vld4q_f32 splits 16 floats by their index mod 4 (e[0..3]); e[4] and e[5]
 * are e[0] and e[1] one tile on. Floats outside [w.lo, w.hi) are zeros and never read:
 * a window that does not hold all 18 floats is copied into zeros first. */
static void mr_wino_patch_rows(const mr_wino_window *w, int64_t k, float32x4_t e[6])
{
    const float *p = (const float *)(w->at + 4u * (uintptr_t)k);
    float part[20];
    float32x4x4_t d;
    if (k < w->lo || k + 18 > w->hi) {
        const int64_t lo = mr_min_i64(mr_max_i64(w->lo - k, 0), 18), hi = mr_min_i64(w->hi - k, 18);
        memset(part, 0, sizeof part);
        if (hi > lo) memcpy(part + lo, (const float *)(w->at + 4u * (uintptr_t)(k + lo)), sizeof(float) * (size_t)(hi - lo));
        p = part;
    }
    d = vld4q_f32(p);
    e[0] = d.val[0];
    e[1] = d.val[1];
    e[2] = d.val[2];
    e[3] = d.val[3];
    e[4] = vextq_f32(d.val[0], vdupq_n_f32(p[16]), 1);
    e[5] = vextq_f32(d.val[1], vdupq_n_f32(p[17]), 1);
}

/* The 16 floats 4k + q = y[q][k] (k, q < 4), as 4 vectors: a 4 x 4 transpose. */
static void mr_wino_interleave4(const float32x4_t y[4], float32x4_t o[4])
{
    const float64x2_t t0 = vreinterpretq_f64_f32(vzip1q_f32(y[0], y[1])), t1 = vreinterpretq_f64_f32(vzip2q_f32(y[0], y[1]));
    const float64x2_t t2 = vreinterpretq_f64_f32(vzip1q_f32(y[2], y[3])), t3 = vreinterpretq_f64_f32(vzip2q_f32(y[2], y[3]));
    o[0] = vreinterpretq_f32_f64(vzip1q_f64(t0, t2));
    o[1] = vreinterpretq_f32_f64(vzip2q_f64(t0, t2));
    o[2] = vreinterpretq_f32_f64(vzip1q_f64(t1, t3));
    o[3] = vreinterpretq_f32_f64(vzip2q_f64(t1, t3));
}
#endif

/* B^T x for the 6 vectors x (lane by lane), into y. */
static void mr_wino_bt(const mr_vf x[6], mr_vf y[6])
{
    const mr_vf two = mr_vf_set1(2.0f), four = mr_vf_set1(4.0f), five = mr_vf_set1(5.0f);
    y[0] = mr_vf_fma(four, x[0], mr_vf_fnma(five, x[2], x[4]));
    y[1] = mr_vf_fnma(four, mr_vf_add(x[1], x[2]), mr_vf_add(x[3], x[4]));
    y[2] = mr_vf_fma(four, mr_vf_sub(x[1], x[2]), mr_vf_sub(x[4], x[3]));
    y[3] = mr_vf_fma(two, mr_vf_sub(x[3], x[1]), mr_vf_sub(x[4], x[2]));
    y[4] = mr_vf_fma(two, mr_vf_sub(x[1], x[3]), mr_vf_sub(x[4], x[2]));
    y[5] = mr_vf_fma(four, x[1], mr_vf_fnma(five, x[3], x[5]));
}

/* A^T x for the 6 vectors x (lane by lane), into y. */
static void mr_wino_at(const mr_vf x[6], mr_vf y[4])
{
    const mr_vf s12 = mr_vf_add(x[1], x[2]), d12 = mr_vf_sub(x[1], x[2]);
    const mr_vf s34 = mr_vf_add(x[3], x[4]), d34 = mr_vf_sub(x[3], x[4]);
    y[0] = mr_vf_add(mr_vf_add(x[0], s12), s34);
    y[1] = mr_vf_fma(mr_vf_set1(2.0f), d34, d12);
    y[2] = mr_vf_fma(mr_vf_set1(4.0f), s34, s12);
    y[3] = mr_vf_add(mr_vf_fma(mr_vf_set1(8.0f), d34, d12), x[5]);
}

static void mr_wino_input_run(const mr_wino_window rows[6], int64_t len, float *d, int64_t vs)
{
    int64_t k0;
    int i, b, a;
    for (k0 = 0; k0 < len; k0 += MR_VN) {
        mr_vf r[6][6];
        for (i = 0; i < 6; ++i) {
            mr_vf e[6];
            mr_wino_patch_rows(&rows[i], 4 * k0, e);
            mr_wino_bt(e, r[i]);
        }
        for (b = 0; b < 6; ++b) {
            mr_vf col[6], out[6];
            for (i = 0; i < 6; ++i) col[i] = r[i][b];
            mr_wino_bt(col, out);
            for (a = 0; a < 6; ++a) mr_vf_store_n(d + (6 * a + b) * vs + k0, out[a], len - k0);
        }
    }
}

static void mr_wino_output_run(const float *mo, int64_t s, int64_t len, float *y, int64_t OW, int64_t nrows,
                               int64_t width)
{
    int64_t k0, p;
    int a, q, v;
    for (k0 = 0; k0 < len; k0 += MR_VN) {
        mr_vf t[6][4], out[4][4];
        for (a = 0; a < 6; ++a) {
            mr_vf x[6];
            for (q = 0; q < 6; ++q) x[q] = mr_vf_load_n(mo + (6 * a + q) * s + k0, len - k0);
            mr_wino_at(x, t[a]);
        }
        for (q = 0; q < 4; ++q) {
            mr_vf col[6], o[4];
            for (a = 0; a < 6; ++a) col[a] = t[a][q];
            mr_wino_at(col, o);
            for (p = 0; p < 4; ++p) out[p][q] = o[p];
        }
        for (p = 0; p < nrows; ++p) {
            mr_vf o[4];
            mr_wino_interleave4(out[p], o);
            for (v = 0; v < 4; ++v) {
                const int64_t c = 4 * k0 + MR_VN * v;
                if (c < width) mr_vf_store_n(y + p * OW + c, o[v], width - c);
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
                /* u[xi]: [O, C] at element xi*O*C of u (narrow: widened as it is packed) */
                mr_asrc a;
                a.q = j->u;
                a.type = j->utype;
                a.nb = (36 * j->O * j->C + 31) / 32;
                a.off = xi * j->O * j->C;
                a.rs = j->C;
                a.cs = 1;
                mr_sgemm_panels_at(j->O, MR_PANEL, j->C, 1.0f, &a, v + xi * vs, MR_F32, 1, 0, 0.0f, m + xi * ms,
                                   MR_PANEL, 1, NULL);
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
    mr_conv2d_winograd_q_mt(threads, x, u, MR_F32, y, N, C, H, W, O, OH, OW, pad_top, pad_left, scratch, ep);
}

void mr_conv2d_winograd_q_mt(const mr_threads *threads, const float *x, const void *u, int utype, float *y,
                             int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t OH, int64_t OW,
                             int64_t pad_top, int64_t pad_left, float *scratch, const mr_epilogue *ep)
{
    mr_wino_job job;
    if (N <= 0 || O <= 0 || OH <= 0 || OW <= 0) return;
    job.x = x; job.u = u; job.utype = utype; job.y = y; job.scratch = scratch; job.ep = ep;
    job.C = C; job.H = H; job.W = W; job.O = O; job.OH = OH; job.OW = OW; job.pt = pad_top; job.pl = pad_left;
    job.TW = (OW + 3) / 4;
    job.T = MR_WINOGRAD_TILES(OH, OW);
    job.tiles = N * job.T;
    job.blocks = MR_WINOGRAD_BLOCKS(N, OH, OW);
    job.chunks = mr_min_i64(MR_WINOGRAD_SLOTS, job.blocks);
    mr_run(threads, mr_wino_task, &job, job.chunks, 36.0 * (double)job.tiles * (double)O * (double)C);
}

#ifndef MR_ISA_UNITY /* once, in the generic build: no vector code, and the same
                      * weights whatever the CPU (mr_internal.h) */
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
#endif

void mr_conv2d_winograd_f32(const float *x, const float *u, float *y, int64_t N, int64_t C, int64_t H, int64_t W,
                            int64_t O, int64_t OH, int64_t OW, int64_t pad_top, int64_t pad_left, float *scratch)
{
    mr_conv2d_winograd_f32_mt(NULL, x, u, y, N, C, H, W, O, OH, OW, pad_top, pad_left, scratch, NULL);
}
