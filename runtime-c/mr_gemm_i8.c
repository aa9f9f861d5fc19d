/*
 * mr_gemm_i8.c -- int8 products (mithril_runtime.h's mr_gemm_i8_mt, mithrilc's --quantize int8): the
 * rows of A quantized on the fly, one scale and zero point per row, against a B stored
 * with one scale per column, multiplied in int8 with int32 sums.
 *
 * The scheme, and why:
 *  - B (the weight) is symmetric int8 per output column over all of K (ONNX Runtime's
 *    per-channel weights): one scale per column lets the whole sum over k stay one int32,
 *    scaled once at the end. Blocks along K (llama.cpp's q8_0 x q8_0) would convert and
 *    scale every 32 k: three more instructions per eight dot products, where on a
 *    Sapphire Rapids core the int8 rate is only twice the f32 one (benches/peak).
 *  - A (the activations) is asymmetric u8 per row, [min, max] (0 included) onto
 *    [0, 255]: the range u8 x s8 instructions take (vpdpbusd), and for the one-sided
 *    rows after ReLU or GELU twice the resolution of a symmetric scheme. The zero point
 *    comes out of the sum as zp_i * colsum_j, the column sums stored with B.
 *  - The sums are exact: every kernel (AMX, AVX-512 VNNI, AVX-VNNI, vpmaddwd on AVX2
 *    and AVX-512 without VNNI, the portable loops) computes the same int32, and the rows'
 *    quantization and the scaling are the same float operations in every variant, so
 *    every variant gives the same bits. (vpmaddubsw is not used: u8 x s8 pairs overflow
 *    its 16-bit sums; vpmaddwd on bytes widened to 16 bits does as many multiply-adds per
 *    instruction on the CPUs without VNNI, exactly.)
 *
 * |sum (a - zp) * b| <= 255 * 128 * K stays inside int32 for K <= MR_I8_MAX_K.
 */
#include "mr_internal.h"

/* Rows of A a kernel call takes (the driver's slivers): two of AMX's 16-row tiles; the
 * vector kernels take them in groups of their own rows. */
#define MR_I8_MR 32
/* Bytes of one quad of B's panel: MR_PANEL columns of 4 consecutive k. */
#define MR_I8_QUAD (4 * MR_PANEL)

/* ------------------------------------------------------------------------------------ */
/* Quantizing A's rows                                                                  */
/* ------------------------------------------------------------------------------------ */

/* Where row i's codes, scale and zero point are in the scratch (MR_I8_SCRATCH_BYTES). */
static uint8_t *mr_i8_codes(void *scratch, int64_t K, int64_t i) { return (uint8_t *)scratch + i * MR_I8_K4(K); }
static float *mr_i8_scales(void *scratch, int64_t M, int64_t K) { return (float *)(void *)((uint8_t *)scratch + M * MR_I8_K4(K)); }
static int32_t *mr_i8_zeros(void *scratch, int64_t M, int64_t K) { return (int32_t *)(void *)(mr_i8_scales(scratch, M, K) + M); }

/* rint(v) for |v| <= 2^22, in the default rounding (to nearest even): adding and taking
 * away 1.5 * 2^23 leaves the integer part, in plain float arithmetic every variant
 * computes alike and vectorizes (the runtime is never built with -ffast-math, which
 * could fold it away). */
static inline float mr_i8_rint(float v)
{
    const float magic = 12582912.0f;
    return (v + magic) - magic;
}

/* The row x[k * cs], k < K: *lo = min(0, min x), *hi = max(0, max x), and whether an
 * element is infinite or NaN (then v - v is NaN). A contiguous row in the variant's
 * vectors (as independent lanes in plain C, or with a run-time stride, GCC kept it
 * scalar: 28% of gpt_block b1's time); min and max are exact, so every variant finds
 * the same range. */
static int mr_i8_range(const float *x, int64_t cs, int64_t K, float *lo, float *hi)
{
    float l = 0.0f, h = 0.0f, nan = 0.0f;
    int64_t k = 0;
#if defined(MR_VN)
    if (cs == 1 && K >= MR_VN) {
        float lanes[3][MR_VN];
        mr_vf vl = mr_vf_set1(0.0f), vh = vl, vn = vl;
        int t;
        for (; k + MR_VN <= K; k += MR_VN) {
            const mr_vf v = mr_vf_load(x + k);
            vl = mr_vf_min(vl, v);
            vh = mr_vf_max(vh, v);
            vn = mr_vf_add(vn, mr_vf_sub(v, v));
        }
        mr_vf_store(lanes[0], vl);
        mr_vf_store(lanes[1], vh);
        mr_vf_store(lanes[2], vn);
        for (t = 0; t < MR_VN; ++t) {
            l = lanes[0][t] < l ? lanes[0][t] : l;
            h = lanes[1][t] > h ? lanes[1][t] : h;
            nan += lanes[2][t];
        }
    }
#endif
    for (; k < K; ++k) {
        const float v = x[k * cs];
        l = v < l ? v : l;
        h = v > h ? v : h;
        nan += v - v;
    }
    *lo = l;
    *hi = h;
    return nan != 0.0f;
}

/* The codes of the row x[k * cs], k < K: clamp(rint(x * inv) + zp, 0, 255); a
 * contiguous row in the variant's vectors (GCC 12 at -O2 kept it scalar, with branches
 * for the clamps), the same float operations in the same order. */
static inline void mr_i8_codes_of(const float *x, int64_t cs, int64_t K, float inv, float zp, uint8_t *q)
{
    int64_t k = 0;
#if defined(MR_VN)
    if (cs == 1) {
        const mr_vf vinv = mr_vf_set1(inv), magic = mr_vf_set1(12582912.0f), vzp = mr_vf_set1(zp);
        const mr_vf lo = mr_vf_set1(0.0f), hi = mr_vf_set1(255.0f);
        for (; k + MR_VN <= K; k += MR_VN) {
            mr_vf c = mr_vf_add(mr_vf_sub(mr_vf_add(mr_vf_mul(mr_vf_load(x + k), vinv), magic), magic), vzp);
            mr_vf_store_u8(q + k, mr_vf_min(mr_vf_max(c, lo), hi));
        }
    }
#endif
    for (; k < K; ++k) {
        float c = mr_i8_rint(x[k * cs] * inv) + zp;
        c = c < 0.0f ? 0.0f : c;
        c = c > 255.0f ? 255.0f : c;
        q[k] = (uint8_t)(int32_t)c;
    }
}

/* Where flat row r of a batch of matrices of m rows is: b = r / m's matrix at b * bs,
 * its row r % m at rs apart. */
static inline int64_t mr_i8_row(int64_t r, int64_t m, int64_t bs, int64_t rs) { return r / m * bs + r % m * rs; }

/*
 * The quantization of the values x[k * cs], k < K: lo = min(0, min x), hi = max(0,
 * max x), *scale = hi / 255 - lo / 255 (no overflow), *zp = rint(-lo / scale); returns
 * 1 / scale. Values of zeros get scale 0, values with an infinity or a NaN scale NaN (so
 * their outputs are NaN, as f32 would give NaN or infinities); both zp 0, and 0 is
 * returned: every code is 0.
 */
static float mr_i8_params(const float *x, int64_t cs, int64_t K, float *scale, int32_t *zp)
{
    float lo, hi, s, inv;
    const int bad = mr_i8_range(x, cs, K, &lo, &hi);
    int32_t z;
    s = hi / 255.0f - lo / 255.0f;
    /* (below the smallest normal float, 1 / scale could overflow: such values, under
     * 3e-36, are taken as zeros) */
    if (bad || !(s >= 1.17549435e-38f)) {
        *scale = bad ? NAN : 0.0f;
        *zp = 0;
        return 0.0f;
    }
    inv = 1.0f / s;
    z = (int32_t)mr_i8_rint(-lo * inv);
    *scale = s;
    *zp = z > 255 ? 255 : z;
    return inv;
}

/*
 * mr_i8_quantize_rows: flat rows [i0, i1) of the M x K matrix A (M = batch * m rows:
 * mr_i8_row) into the scratch, each with its scale and zero point (mr_i8_params):
 * code = clamp(rint(x * (1 / scale)) + zp, 0, 255); the codes of k in [K, K4) are zp
 * (B's rows there are zero).
 */
void mr_i8_quantize_rows(int64_t M, int64_t m, int64_t K, const float *A, int64_t a_bs, int64_t a_rs, int64_t a_cs,
                         int64_t i0, int64_t i1, void *scratch)
{
    float *scales = mr_i8_scales(scratch, M, K);
    int32_t *zeros = mr_i8_zeros(scratch, M, K);
    int64_t i;
    for (i = i0; i < i1; ++i) {
        const float *x = A + mr_i8_row(i, m, a_bs, a_rs);
        uint8_t *q = mr_i8_codes(scratch, K, i);
        const float inv = mr_i8_params(x, a_cs, K, &scales[i], &zeros[i]);
        if (inv == 0.0f) {
            memset(q, 0, (size_t)MR_I8_K4(K));
            continue;
        }
        if (a_cs == 1) {
            mr_i8_codes_of(x, 1, K, inv, (float)zeros[i], q);
        } else {
            mr_i8_codes_of(x, a_cs, K, inv, (float)zeros[i], q);
        }
        memset(q + K, zeros[i], (size_t)(MR_I8_K4(K) - K));
    }
}

/* ------------------------------------------------------------------------------------ */
/* Kernels: S[i][t] = sum_k a[i][k] * b[k][t] for i < rows, the panel's 32 columns      */
/* ------------------------------------------------------------------------------------ */

/*
 * Every kernel: rows (<= MR_I8_MR) rows of codes a (a_rs apart, quads 4-byte groups of
 * k each) against one panel of B (quads of MR_I8_QUAD bytes: column t's k = 4q..4q+3 at
 * q * MR_I8_QUAD + 4t), the int32 sums into S (rows of MR_PANEL). Sums wrap (they stay
 * in range for K <= MR_I8_MAX_K).
 */
#if !defined(MR_AVX512) && !defined(MR_AVX2)
static void mr_i8_panel_portable(int64_t rows, int64_t quads, const uint8_t *a, int64_t a_rs, const int8_t *b,
                                 int32_t S[MR_I8_MR][MR_PANEL])
{
    int64_t i, q;
    int t, u;
    for (i = 0; i < rows; ++i) {
        uint32_t s[MR_PANEL] = {0};
        for (q = 0; q < quads; ++q) {
            const uint8_t *ai = a + i * a_rs + 4 * q;
            const int8_t *bq = b + q * MR_I8_QUAD;
            for (t = 0; t < MR_PANEL; ++t) {
                for (u = 0; u < 4; ++u) s[t] += (uint32_t)((int32_t)ai[u] * (int32_t)bq[4 * t + u]);
            }
        }
        for (t = 0; t < MR_PANEL; ++t) S[i][t] = (int32_t)s[t];
    }
}
#endif

/* The VNNI and AMX intrinsics (AVX-VNNI's _mm256_dpbusd_avx_epi32, AMX's tiles) need
 * GCC 11 or clang 12; older compilers run vpmaddwd instead. */
#if (defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11)
#define MR_I8_INTRINSICS 1
#endif

/* AArch64's sdot kernel (below) is built with GCC 8 on, which declares vdotq_s32 for
 * functions that target dotprod; clang (as of 14) only where the whole file is built for
 * it (-march=armv8.2-a+dotprod or later). */
#if defined(MR_NEON) && defined(__linux__) && \
    (defined(__clang__) ? defined(__ARM_FEATURE_DOTPROD) : (defined(__GNUC__) && __GNUC__ >= 8))
#define MR_I8_SDOT 1
#endif

#if defined(MR_AVX512) || defined(MR_AVX2) || defined(MR_I8_SDOT)
/* Four codes of A as one int32 (a broadcast's source). */
static inline int32_t mr_i8_quad(const uint8_t *a)
{
    int32_t v;
    memcpy(&v, a, sizeof v);
    return v;
}
#endif

#if defined(MR_I8_SDOT)
/*
 * AArch64's sdot (Armv8.2's dot product, FEAT_DotProd: Neoverse N1 and later, Apple M1,
 * Cortex-A55/A76 on; found at run time, mr_dispatch.c's mr_i8_isa(3)): four int32 lanes
 * each add a dot product of 4 signed bytes. It multiplies s8 by s8, so A's u8 codes go
 * in as a - 128 (their top bit flipped) and 128 * colsum is added back: the same exact
 * int32 sums as every other set (usdot, u8 x s8, is Armv8.6's i8mm, rarer). R rows (a
 * constant once inlined, at most 4) by 16 columns of the panel at b and colsum (at the
 * pass's first column): per quad four vectors of B (4 columns of 4 k each), per row a
 * broadcast of its quad and four sdot; 16 accumulators, 4 for B, one for A.
 */
#if defined(__clang__)
#define MR_I8_SDOT_TARGET __attribute__((target("dotprod")))
#else
/* (arm_neon.h declares vdotq_s32 for armv8.2-a+dotprod: a mere "+dotprod" on armv8-a
 * is not enough to inline it) */
#define MR_I8_SDOT_TARGET __attribute__((target("arch=armv8.2-a+dotprod")))
#endif
MR_BODY MR_I8_SDOT_TARGET void mr_i8_sdot_body(const int R, int64_t quads, const uint8_t *a, int64_t a_rs,
                                              const int8_t *b, const int32_t *colsum, int32_t *S)
{
    int32x4_t c[4][4];
    int64_t q;
    int i, v;
    for (i = 0; i < R; ++i)
        for (v = 0; v < 4; ++v) c[i][v] = vdupq_n_s32(0);
    for (q = 0; q < quads; ++q) {
        int8x16_t w[4];
        for (v = 0; v < 4; ++v) w[v] = vld1q_s8(b + q * MR_I8_QUAD + 16 * v);
        for (i = 0; i < R; ++i) {
            const uint32_t quad = (uint32_t)mr_i8_quad(a + i * a_rs + 4 * q) ^ 0x80808080u;
            const int8x16_t x = vreinterpretq_s8_u32(vdupq_n_u32(quad));
            for (v = 0; v < 4; ++v) c[i][v] = vdotq_s32(c[i][v], x, w[v]);
        }
    }
    for (i = 0; i < R; ++i) {
        for (v = 0; v < 4; ++v) {
            const int32x4_t back = vshlq_n_s32(vld1q_s32(colsum + 4 * v), 7);
            vst1q_s32(S + i * MR_PANEL + 4 * v, vaddq_s32(c[i][v], back));
        }
    }
}

/* A sliver against a panel with sdot: rows in groups of 4, columns in two passes of 16. */
MR_KERNEL MR_I8_SDOT_TARGET static void mr_i8_panel_sdot(int64_t rows, int64_t quads, const uint8_t *a, int64_t a_rs,
                                                         const int8_t *b, const int32_t *colsum,
                                                         int32_t S[MR_I8_MR][MR_PANEL])
{
    int64_t i0;
    int c0;
    for (i0 = 0; i0 < rows; i0 += 4) {
        for (c0 = 0; c0 < MR_PANEL; c0 += 16) {
            const uint8_t *a_ = a + i0 * a_rs;
            const int8_t *b_ = b + 4 * c0;
            switch (mr_min_i64(4, rows - i0)) {
            case 1: mr_i8_sdot_body(1, quads, a_, a_rs, b_, colsum + c0, S[i0] + c0); break;
            case 2: mr_i8_sdot_body(2, quads, a_, a_rs, b_, colsum + c0, S[i0] + c0); break;
            case 3: mr_i8_sdot_body(3, quads, a_, a_rs, b_, colsum + c0, S[i0] + c0); break;
            default: mr_i8_sdot_body(4, quads, a_, a_rs, b_, colsum + c0, S[i0] + c0); break;
            }
        }
    }
}
#endif

#if defined(MR_AVX512) || defined(MR_AVX2)

/* The variant's integer vector: 16 (AVX-512) or 8 (AVX2) int32 lanes. vpdpbusd is
 * AVX-512 VNNI's at the AVX-512 width and AVX-VNNI's (the VEX form) at AVX2's; without
 * it, vpmaddwd takes B's bytes widened to 16 bits (mr_vi_b16: 2 * MR_VI_LANES bytes, so
 * MR_VI_LANES / 2 columns of 4 k) and a quad of A widened and repeated (mr_vi_a16). */
#if defined(MR_AVX512)
typedef __m512i mr_vi;
#define MR_VI_LANES 16
#define MR_I8_VNNI_TARGET __attribute__((target("avx512vnni")))
#define mr_vi_zero _mm512_setzero_si512
#define mr_vi_load(p) _mm512_loadu_si512((const void *)(p))
#define mr_vi_store(p, v) _mm512_storeu_si512((void *)(p), (v))
#define mr_vi_set1 _mm512_set1_epi32
#define mr_vi_add _mm512_add_epi32
#define mr_vi_madd _mm512_madd_epi16
#define mr_vi_dpbusd(c, a, b) _mm512_dpbusd_epi32((c), (a), (b))
#define mr_vi_b16(p) _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define mr_vi_a16(v) _mm512_set1_epi64((long long)_mm_cvtsi128_si64(_mm_cvtepu8_epi16(_mm_cvtsi32_si128(v))))
#else
typedef __m256i mr_vi;
#define MR_VI_LANES 8
#define MR_I8_VNNI_TARGET __attribute__((target("avxvnni")))
#define mr_vi_zero _mm256_setzero_si256
#define mr_vi_load(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define mr_vi_store(p, v) _mm256_storeu_si256((__m256i *)(void *)(p), (v))
#define mr_vi_set1 _mm256_set1_epi32
#define mr_vi_add _mm256_add_epi32
#define mr_vi_madd _mm256_madd_epi16
#define mr_vi_dpbusd(c, a, b) _mm256_dpbusd_avx_epi32((c), (a), (b))
#define mr_vi_b16(p) _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define mr_vi_a16(v) _mm256_set1_epi64x((long long)_mm_cvtsi128_si64(_mm_cvtepu8_epi16(_mm_cvtsi32_si128(v))))
#endif
/* Columns a kernel pass covers: 2 vectors of MR_VI_LANES (AVX-512: the whole panel) */
#define MR_I8_CH (2 * MR_VI_LANES)
/* Rows a pass takes: AVX-512 8 x 32 sums in 16 accumulators (with vpmaddwd, whose
 * accumulators hold half-sums, 4 x 32 in 16); AVX2 4 x 16 in 8 (2 x 16 in 8) */
#if defined(MR_AVX512)
#define MR_I8_VNNI_ROWS 8
#define MR_I8_MADD_ROWS 4
#else
#define MR_I8_VNNI_ROWS 4
#define MR_I8_MADD_ROWS 2
#endif

#if defined(MR_I8_INTRINSICS)
/* VNNI: R rows (a constant once inlined) by MR_I8_CH columns of the panel at b (already
 * at the pass's first column): per quad B's two vectors, then per row one broadcast of
 * its quad and two vpdpbusd. */
MR_BODY MR_I8_VNNI_TARGET void mr_i8_vnni_body(const int R, int64_t quads, const uint8_t *a, int64_t a_rs,
                                              const int8_t *b, int32_t *S, int acc)
{
    mr_vi c[MR_I8_VNNI_ROWS][2];
    int64_t q;
    int i;
    for (i = 0; i < R; ++i) {
        c[i][0] = acc ? mr_vi_load(S + i * MR_PANEL) : mr_vi_zero();
        c[i][1] = acc ? mr_vi_load(S + i * MR_PANEL + MR_VI_LANES) : mr_vi_zero();
    }
    for (q = 0; q < quads; ++q) {
        const mr_vi b0 = mr_vi_load(b + q * MR_I8_QUAD), b1 = mr_vi_load(b + q * MR_I8_QUAD + 4 * MR_VI_LANES);
        for (i = 0; i < R; ++i) {
            const mr_vi x = mr_vi_set1(mr_i8_quad(a + i * a_rs + 4 * q));
            c[i][0] = mr_vi_dpbusd(c[i][0], x, b0);
            c[i][1] = mr_vi_dpbusd(c[i][1], x, b1);
        }
    }
    for (i = 0; i < R; ++i) {
        mr_vi_store(S + i * MR_PANEL, c[i][0]);
        mr_vi_store(S + i * MR_PANEL + MR_VI_LANES, c[i][1]);
    }
}

#endif

/* vpmaddwd: R rows by MR_I8_CH columns in four vectors of half-sums (lane 2t: k = 4q,
 * 4q + 1 of column t; lane 2t + 1: 4q + 2, 4q + 3), added in pairs at the end (to S's
 * sums when acc). */
MR_BODY void mr_i8_madd_body(const int R, int64_t quads, const uint8_t *a, int64_t a_rs, const int8_t *b, int32_t *S,
                             int acc)
{
    mr_vi c[MR_I8_MADD_ROWS][4];
    int32_t half[4 * MR_VI_LANES];
    int64_t q;
    int i, v, t;
    for (i = 0; i < R; ++i) c[i][0] = c[i][1] = c[i][2] = c[i][3] = mr_vi_zero();
    for (q = 0; q < quads; ++q) {
        mr_vi w[4];
        for (v = 0; v < 4; ++v) w[v] = mr_vi_b16(b + q * MR_I8_QUAD + v * 2 * MR_VI_LANES);
        for (i = 0; i < R; ++i) {
            const mr_vi x = mr_vi_a16(mr_i8_quad(a + i * a_rs + 4 * q));
            for (v = 0; v < 4; ++v) c[i][v] = mr_vi_add(c[i][v], mr_vi_madd(x, w[v]));
        }
    }
    for (i = 0; i < R; ++i) {
        for (v = 0; v < 4; ++v) mr_vi_store(half + v * MR_VI_LANES, c[i][v]);
        for (t = 0; t < MR_I8_CH; ++t) {
            const uint32_t s = (uint32_t)half[2 * t] + (uint32_t)half[2 * t + 1];
            S[i * MR_PANEL + t] = (int32_t)(s + (acc ? (uint32_t)S[i * MR_PANEL + t] : 0u));
        }
    }
}

/* The passes over a sliver and a panel: rows in groups of the body's R (each count a
 * constant, R at most 8), columns in passes of MR_I8_CH. */
#define MR_I8_ROWS_CASE(body, R, n) \
    case n: body((R) > (n) ? (n) : (R), quads, a_, a_rs, b_, s_, acc); break;
#define MR_I8_PASSES(body, R)                                                  \
    {                                                                          \
        int64_t i0_, c0_;                                                      \
        for (i0_ = 0; i0_ < rows; i0_ += (R)) {                                \
            for (c0_ = 0; c0_ < MR_PANEL; c0_ += MR_I8_CH) {                   \
                const uint8_t *a_ = a + i0_ * a_rs;                            \
                const int8_t *b_ = b + 4 * c0_;                                \
                int32_t *s_ = S[i0_] + c0_;                                    \
                switch (mr_min_i64((R), rows - i0_)) {                         \
                MR_I8_ROWS_CASE(body, R, 1) MR_I8_ROWS_CASE(body, R, 2)        \
                MR_I8_ROWS_CASE(body, R, 3) MR_I8_ROWS_CASE(body, R, 4)        \
                MR_I8_ROWS_CASE(body, R, 5) MR_I8_ROWS_CASE(body, R, 6)        \
                MR_I8_ROWS_CASE(body, R, 7)                                    \
                default: body((R), quads, a_, a_rs, b_, s_, acc); break;       \
                }                                                              \
            }                                                                  \
        }                                                                      \
    }
#if defined(MR_I8_INTRINSICS)
MR_KERNEL MR_I8_VNNI_TARGET static void mr_i8_panel_vnni(int64_t rows, int64_t quads, const uint8_t *a, int64_t a_rs,
                                                         const int8_t *b, int32_t S[MR_I8_MR][MR_PANEL], int acc)
MR_I8_PASSES(mr_i8_vnni_body, MR_I8_VNNI_ROWS)
#endif

MR_KERNEL static void mr_i8_panel_madd(int64_t rows, int64_t quads, const uint8_t *a, int64_t a_rs, const int8_t *b,
                                       int32_t S[MR_I8_MR][MR_PANEL], int acc)
MR_I8_PASSES(mr_i8_madd_body, MR_I8_MADD_ROWS)

#if defined(MR_AVX512) && defined(MR_I8_INTRINSICS)
/*
 * AMX (Sapphire Rapids and later: tdpbusd, a 16 x 16 tile of int32 sums from 16 rows of
 * 64 u8 codes and 16 quads of 16 columns, 16 times vpdpbusd's work): the sliver's rows
 * as two A tiles of up to 16, the panel as two B tiles of 16 columns (B's quads are
 * MR_I8_QUAD bytes apart, so a tile reads one half of each), four C tiles; whole groups
 * of 16 quads, the rest of K by the VNNI kernel (every AMX CPU has AVX-512 VNNI), added
 * to the tiles' sums. The tiles are configured for the sliver's rows when *configured
 * (the rows they have) differs, so once a call of the driver, not once a sliver
 * (loading the configuration each time took 12% of a 128 x 2304 x 768 product), and
 * released by mr_i8_amx_done.
 */
#define MR_I8_AMX 1
#define MR_I8_AMX_TARGET __attribute__((target("amx-tile,amx-int8,avx512vnni")))
typedef struct {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} mr_amx_config;

MR_KERNEL MR_I8_AMX_TARGET static void mr_i8_panel_amx(int64_t rows, int64_t quads, const uint8_t *a, int64_t a_rs,
                                                       const int8_t *b, int32_t S[MR_I8_MR][MR_PANEL], int *configured)
{
    const int64_t whole = quads / 16 * 16;
    const int r0 = (int)mr_min_i64(16, rows), r1 = (int)mr_max_i64(0, rows - 16);
    mr_amx_config cfg;
    int64_t q;
    int t;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    /* tiles 0, 1: C of rows [0, 16); 2, 3: C of rows [16, 32); 4, 5: A's; 6, 7: B's (a
     * tile of no rows has no columns either, or the configuration is refused) */
    for (t = 0; t < 8; ++t) {
        cfg.rows[t] = (uint8_t)(t >= 6 ? 16 : (t == 2 || t == 3 || t == 5) ? r1 : r0);
        cfg.colsb[t] = cfg.rows[t] ? 64 : 0;
    }
    if (whole > 0) {
        if (*configured != rows) {
            /* (GCC 12's _tile_loadconfig tells the compiler it reads 8 bytes of cfg: the
             * barrier keeps the stores to the rest from being dropped) */
            __asm__ __volatile__("" : : "r"(&cfg) : "memory");
            _tile_loadconfig(&cfg);
            *configured = (int)rows;
        }
        _tile_zero(0);
        _tile_zero(1);
        if (r1 > 0) {
            _tile_zero(2);
            _tile_zero(3);
        }
        for (q = 0; q < whole; q += 16) {
            _tile_loadd(4, a + 4 * q, a_rs);
            _tile_loadd(6, b + q * MR_I8_QUAD, MR_I8_QUAD);
            _tile_loadd(7, b + q * MR_I8_QUAD + 64, MR_I8_QUAD);
            _tile_dpbusd(0, 4, 6);
            _tile_dpbusd(1, 4, 7);
            if (r1 > 0) {
                _tile_loadd(5, a + 16 * a_rs + 4 * q, a_rs);
                _tile_dpbusd(2, 5, 6);
                _tile_dpbusd(3, 5, 7);
            }
        }
        _tile_stored(0, S[0], 4 * MR_PANEL);
        _tile_stored(1, S[0] + 16, 4 * MR_PANEL);
        if (r1 > 0) {
            _tile_stored(2, S[16], 4 * MR_PANEL);
            _tile_stored(3, S[16] + 16, 4 * MR_PANEL);
        }
    }
    if (quads > whole) mr_i8_panel_vnni(rows, quads - whole, a + 4 * whole, a_rs, b + whole * MR_I8_QUAD, S, whole > 0);
}

/* The tiles given back (their state is large, and the OS saves it while it is in use). */
MR_I8_AMX_TARGET static void mr_i8_amx_done(int *configured)
{
    if (*configured) _tile_release();
    *configured = 0;
}
#endif
#endif

/* The kernel set this variant runs on this CPU (mr_int8_name's answer, and the driver's
 * kernel): the best of AMX, VNNI at the variant's width and vpmaddwd the CPU has and
 * MR_INT8 allows (mr_dispatch.c's mr_i8_isa); the portable loops elsewhere. */
enum { MR_I8_PORTABLE, MR_I8_MADD, MR_I8_VNNI, MR_I8_TILES, MR_I8_DOT };
/* (mr_i8_isa's VNNI at the variant's width: 1 AVX-512's, 0 AVX-VNNI) */
#if defined(MR_AVX512)
#define MR_I8_WIDE 1
#else
#define MR_I8_WIDE 0
#endif
#if defined(MR_I8_AMX)
static int mr_i8_set(void) { return mr_i8_isa(2) ? MR_I8_TILES : mr_i8_isa(1) ? MR_I8_VNNI : MR_I8_MADD; }
#elif (defined(MR_AVX512) || defined(MR_AVX2)) && defined(MR_I8_INTRINSICS)
static int mr_i8_set(void) { return mr_i8_isa(MR_I8_WIDE) ? MR_I8_VNNI : MR_I8_MADD; }
#elif defined(MR_AVX512) || defined(MR_AVX2)
static int mr_i8_set(void) { return MR_I8_MADD; }
#elif defined(MR_I8_SDOT)
static int mr_i8_set(void) { return mr_i8_isa(3) ? MR_I8_DOT : MR_I8_PORTABLE; }
#else
static int mr_i8_set(void) { return MR_I8_PORTABLE; }
#endif
#if defined(MR_AVX512)
static const char *const mr_i8_names[] = {"generic", "avx512bw", "avx512vnni", "amx", "sdot"};
#else
static const char *const mr_i8_names[] = {"generic", "avx2", "avxvnni", "amx", "sdot"};
#endif
const char *mr_int8_name(void) { return mr_i8_names[mr_i8_set()]; }

/* One sliver against one panel with kernel set `set` (*tiles: AMX's configured rows).
 * AMX takes slivers of 4 rows or more: with fewer, most of its tiles' rows are padding
 * and VNNI is the faster (one thread, M = 1: 768 x 768 11.6 us against 15.9, 2304 x 768
 * 37.4 against 40.8; M = 4, 2304 x 768: AMX 33.4, VNNI 43.4). */
static void mr_i8_panel(int set, int64_t rows, int64_t quads, const uint8_t *a, int64_t a_rs, const int8_t *b,
                        const int32_t *colsum, int32_t S[MR_I8_MR][MR_PANEL], int *tiles)
{
#if defined(MR_I8_SDOT)
    if (set == MR_I8_DOT) {
        mr_i8_panel_sdot(rows, quads, a, a_rs, b, colsum, S);
        return;
    }
#else
    (void)colsum;
#endif
#if defined(MR_I8_AMX)
    if (set == MR_I8_TILES && rows < 4) set = MR_I8_VNNI;
    if (set == MR_I8_TILES) {
        mr_i8_panel_amx(rows, quads, a, a_rs, b, S, tiles);
        return;
    }
#else
    (void)tiles;
#endif
#if defined(MR_AVX512) || defined(MR_AVX2)
#if defined(MR_I8_INTRINSICS)
    if (set == MR_I8_VNNI) {
        mr_i8_panel_vnni(rows, quads, a, a_rs, b, S, 0);
        return;
    }
#endif
    (void)set;
    mr_i8_panel_madd(rows, quads, a, a_rs, b, S, 0);
#else
    (void)set;
    mr_i8_panel_portable(rows, quads, a, a_rs, b, S);
#endif
}

/* ------------------------------------------------------------------------------------ */
/* The driver                                                                           */
/* ------------------------------------------------------------------------------------ */

/*
 * One row of a sliver's sums s (n of them) into C's row c: the sum of (a - zp) * b,
 * exact (wrapping arithmetic, in range), times as = alpha * s_i and column j's scale,
 * plus beta * C. Contiguous C with beta 0 (what generated code passes) is a loop of its
 * own, which the compiler vectorizes.
 */
static void mr_i8_store_row(const int32_t *s, const int32_t *colsum, const float *sw, uint32_t z, float as,
                            float beta, float *c, int64_t c_cs, int64_t n)
{
    int64_t t;
    if (c_cs == 1 && beta == 0.0f) {
        for (t = 0; t < n; ++t) c[t] = as * sw[t] * (float)(int32_t)((uint32_t)s[t] - z * (uint32_t)colsum[t]);
        return;
    }
    for (t = 0; t < n; ++t) {
        const float v = as * sw[t] * (float)(int32_t)((uint32_t)s[t] - z * (uint32_t)colsum[t]);
        c[t * c_cs] = beta == 0.0f ? v : MR_MADD(beta, c[t * c_cs], v);
    }
}

/* Tiles of TR x TR floats transposed in vector registers (AVX-512 16, AVX2 8): v
 * (rows of MR_PANEL) into d (rows cs apart). */
#if defined(MR_AVX512)
#define MR_I8_TR 16
static inline void mr_i8_transpose_tile(const float *v, float *d, int64_t cs)
{
    __m512 r[16], t[16];
    int i;
    for (i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(v + i * MR_PANEL);
    for (i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (i = 0; i < 4; ++i) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
    }
    for (i = 0; i < 8; ++i) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    }
    for (i = 0; i < 16; ++i) _mm512_storeu_ps(d + i * cs, r[i]);
}
#elif defined(MR_AVX2)
#define MR_I8_TR 8
static inline void mr_i8_transpose_tile(const float *v, float *d, int64_t cs)
{
    __m256 r[8], t[8];
    int i;
    for (i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(v + i * MR_PANEL);
    for (i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (i = 0; i < 4; ++i) {
        t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
        t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
    }
    for (i = 0; i < 8; ++i) _mm256_storeu_ps(d + i * cs, t[i]);
}
#else
#define MR_I8_TR 0
#endif

/* v's rows [0, rows), columns [0, cols), into d transposed: v[i][t] to d[t * cs + i]. */
static void mr_i8_transpose(const float v[MR_I8_MR][MR_PANEL], int64_t rows, int64_t cols, float *d, int64_t cs)
{
    int64_t t0 = 0, i, t;
#if MR_I8_TR > 0
    for (; t0 + MR_I8_TR <= cols; t0 += MR_I8_TR) {
        int64_t i0;
        for (i0 = 0; i0 + MR_I8_TR <= rows; i0 += MR_I8_TR) mr_i8_transpose_tile(v[i0] + t0, d + t0 * cs + i0, cs);
        for (t = t0; t < t0 + MR_I8_TR; ++t) {
            for (i = i0; i < rows; ++i) d[t * cs + i] = v[i][t];
        }
    }
#endif
    for (t = t0; t < cols; ++t) {
        for (i = 0; i < rows; ++i) d[t * cs + i] = v[i][t];
    }
}

/* A sliver's block of sums, waiting to be scaled into C: its flat rows [i0, i0 + rows)
 * and the panel's columns [c0, c1) (j: the first's column in B). */
typedef struct {
    int32_t S[MR_I8_MR][MR_PANEL];
    int64_t i0, rows, c0, c1, j;
} mr_i8_block;

/* What scaling a block into C reads: B's column scales and sums, the scratch's row
 * scales and zero points, and C (at column j0 of the product; flat row r at
 * mr_i8_row(r, m, c_bs, c_rs)). */
typedef struct {
    const float *sw, *sa;
    const int32_t *colsum, *zp;
    float alpha, beta;
    float *C;
    int64_t m, c_bs, c_rs, c_cs, j0;
} mr_i8_out;

static void mr_i8_scale_block(const mr_i8_block *b, const mr_i8_out *o)
{
    int64_t i;
    if (o->c_rs == 1 && o->beta == 0.0f && b->i0 / o->m == (b->i0 + b->rows - 1) / o->m) {
        /* C's rows contiguous (a convolution's output positions): along each column */
        /* scaled along the rows of sums (as below), then stored down C's columns */
        float *c = o->C + mr_i8_row(b->i0, o->m, o->c_bs, o->c_rs) + (b->j - o->j0) * o->c_cs;
        float v[MR_I8_MR][MR_PANEL];
        for (i = 0; i < b->rows; ++i) {
            mr_i8_store_row(b->S[i] + b->c0, o->colsum + b->j, o->sw + b->j, (uint32_t)o->zp[b->i0 + i],
                            o->alpha * o->sa[b->i0 + i], 0.0f, v[i], 1, b->c1 - b->c0);
        }
        mr_i8_transpose((const float(*)[MR_PANEL])v, b->rows, b->c1 - b->c0, c, o->c_cs);
        return;
    }
    for (i = 0; i < b->rows; ++i) {
        mr_i8_store_row(b->S[i] + b->c0, o->colsum + b->j, o->sw + b->j, (uint32_t)o->zp[b->i0 + i],
                        o->alpha * o->sa[b->i0 + i], o->beta,
                        o->C + mr_i8_row(b->i0 + i, o->m, o->c_bs, o->c_rs) + (b->j - o->j0) * o->c_cs, o->c_cs,
                        b->c1 - b->c0);
    }
}

/*
 * mr_gemm_i8_cols: columns [j0, j0 + n) of mr_gemm_i8_mt's product (j0 a multiple of
 * MR_PANEL; C at column j0) for all its M = batch * m flat rows, A already quantized
 * into the scratch: slivers of rows (C written along them), each against every panel,
 * its sums over all of K in registers (or tiles), then scaled into C one sliver late:
 * AMX's sums reach memory long after its tile stores issue, and reading them at once
 * stalled (the scaling took 60% of a 128 x 2304 x 768 product's time). The epilogue
 * runs once per matrix of the batch, at n + b.
 */
void mr_gemm_i8_cols(int64_t M, int64_t m, int64_t N, int64_t K, float alpha, const void *Bq, int64_t j0, int64_t n,
                     float beta, float *C, int64_t c_bs, int64_t c_rs, int64_t c_cs, void *scratch, const mr_epi_at *at)
{
    const int64_t K4 = MR_I8_K4(K), P = (N + MR_PANEL - 1) / MR_PANEL, quads = K4 / 4;
    const int8_t *codes = (const int8_t *)Bq + 8 * P * MR_PANEL;
    const int set = mr_i8_set();
    mr_i8_out o;
    mr_i8_block blocks[2], *now = &blocks[0], *late = NULL;
    int64_t p, i0, b;
    int tiles = 0;
    o.sw = (const float *)Bq;
    o.colsum = (const int32_t *)Bq + P * MR_PANEL;
    o.sa = mr_i8_scales(scratch, M, K);
    o.zp = mr_i8_zeros(scratch, M, K);
    o.alpha = alpha;
    o.beta = beta;
    o.C = C;
    o.m = m;
    o.c_bs = c_bs;
    o.c_rs = c_rs;
    o.c_cs = c_cs;
    o.j0 = j0;
    for (i0 = 0; i0 < M; i0 += MR_I8_MR) {
        for (p = j0 / MR_PANEL; p * MR_PANEL < j0 + n; ++p) {
            now->i0 = i0;
            now->rows = mr_min_i64(MR_I8_MR, M - i0);
            now->c0 = mr_max_i64(j0, p * MR_PANEL) - p * MR_PANEL;
            now->c1 = mr_min_i64(j0 + n, p * MR_PANEL + MR_PANEL) - p * MR_PANEL;
            now->j = p * MR_PANEL + now->c0;
            mr_i8_panel(set, now->rows, quads, mr_i8_codes(scratch, K, i0), K4, codes + p * K4 * MR_PANEL,
                        o.colsum + p * MR_PANEL, now->S,
                        &tiles);
            if (late) mr_i8_scale_block(late, &o);
            late = now;
            now = now == &blocks[0] ? &blocks[1] : &blocks[0];
        }
    }
#if defined(MR_I8_AMX)
    mr_i8_amx_done(&tiles);
#endif
    if (late) mr_i8_scale_block(late, &o);
    for (b = 0; at && b < M / m; ++b) {
        mr_epi_at e = *at;
        e.n = at->n + b;
        mr_epi_call(&e, 0, m, 0, n);
    }
}

/* ------------------------------------------------------------------------------------ */
/* Convolutions: int8 products whose rows are output positions                         */
/* ------------------------------------------------------------------------------------ */

/*
 * mr_conv2d_i8_mt's parts (mr_threads.c splits them): an image's quantization as a
 * whole (mr_i8_params: one scale and zero point an image, as ONNX Runtime's
 * ConvInteger takes its input per tensor; a row of A is an output position's patch, and
 * patches overlap, so a scale per row would quantize each input element once per tap),
 * its codes laid out channels last and padded with the zero point (the codes of a
 * zero), then the patches of a chunk of positions as rows of A: tap by tap, runs of C
 * codes (KW * C where taps are adjacent), against B's rows in the same order (row
 * (kh*KW + kw)*C + c). Then mr_gemm_i8_cols, storing down C's columns (the output is
 * NCHW: a column is an output channel).
 */
void mr_i8_conv_image(const mr_i8_conv *cv, int64_t n)
{
    (void)mr_i8_params(cv->x + n * cv->C * cv->H * cv->W, 1, cv->C * cv->H * cv->W, &cv->scales[n], &cv->zeros[n]);
}

/* Padded rows [r0, r1) of image n's codes: code (r, s, c) at codes[(r*Wp + s)*C + c] is
 * x[n, c, r - pt, s - pl] quantized, the zero point outside the image. */
void mr_i8_conv_codes(const mr_i8_conv *cv, int64_t n, int64_t r0, int64_t r1)
{
    const int64_t C = cv->C, H = cv->H, W = cv->W, Wp = cv->Wp, pl = cv->pl;
    const float scale = cv->scales[n];
    const int32_t zp = cv->zeros[n];
    /* the input's columns that the padded rows hold (stride leaves the last unread) */
    const int64_t wn = mr_max_i64(0, mr_min_i64(W, Wp - pl));
    const float inv = scale >= 1.17549435e-38f ? 1.0f / scale : 0.0f;
    /* a tile of channels by positions: coded along its rows, stored down its columns
     * (coding straight into the channels-last rows, a byte a line, took half the
     * convolution's time) */
    uint8_t q[16][64];
    int64_t r, c0, c, w0, w;
    for (r = r0; r < r1; ++r) {
        uint8_t *row = cv->codes + (n * cv->Hp + r) * Wp * C;
        const int64_t ih = r - cv->pt;
        if (ih < 0 || ih >= H || inv == 0.0f || wn == 0) {
            memset(row, zp, (size_t)(Wp * C));
            continue;
        }
        memset(row, zp, (size_t)(mr_min_i64(pl, Wp) * C));
        memset(row + (pl + wn) * C, zp, (size_t)((Wp - pl - wn) * C));
        for (c0 = 0; c0 < C; c0 += 16) {
            const int64_t cn = mr_min_i64(16, C - c0);
            for (w0 = 0; w0 < wn; w0 += 64) {
                const int64_t cnt = mr_min_i64(64, wn - w0);
                uint8_t *dst = row + (pl + w0) * C + c0;
                for (c = 0; c < cn; ++c) mr_i8_codes_of(cv->x + ((n * C + c0 + c) * H + ih) * W + w0, 1, cnt, inv, (float)zp, q[c]);
                for (w = 0; w < cnt; ++w) {
                    for (c = 0; c < cn; ++c) dst[w * C + c] = q[c][w];
                }
            }
        }
    }
}

/* Output positions [p0, p1) of image n: their patches as rows of A in `slot` (scratch
 * for p1 - p0 rows), then their products into y, then the epilogue. */
void mr_i8_conv_chunk(const mr_i8_conv *cv, int64_t n, int64_t p0, int64_t p1, void *slot)
{
    const int64_t C = cv->C, KW = cv->KW, K = C * cv->KH * KW, K4 = MR_I8_K4(K), rows = p1 - p0;
    const int64_t P = cv->OH * cv->OW, run = cv->dw == 1 ? KW * C : C;
    const uint8_t *codes = cv->codes + n * cv->Hp * cv->Wp * C;
    float *scales = mr_i8_scales(slot, rows, K);
    int32_t *zeros = mr_i8_zeros(slot, rows, K);
    mr_epi_at at;
    int64_t i, kh, kw;
    for (i = 0; i < rows; ++i) {
        const int64_t oh = (p0 + i) / cv->OW, ow = (p0 + i) % cv->OW;
        uint8_t *q = mr_i8_codes(slot, K, i);
        for (kh = 0; kh < cv->KH; ++kh) {
            const uint8_t *src = codes + ((oh * cv->sh + kh * cv->dh) * cv->Wp + ow * cv->sw) * C;
            for (kw = 0; kw < KW; kw += run / C) memcpy(q + (kh * KW + kw) * C, src + kw * cv->dw * C, (size_t)run);
        }
        memset(q + K, cv->zeros[n], (size_t)(K4 - K));
        scales[i] = cv->scales[n];
        zeros[i] = cv->zeros[n];
    }
    mr_gemm_i8_cols(rows, rows, cv->O, K, 1.0f, cv->wq, 0, cv->O, 0.0f, cv->y + n * cv->O * P + p0, 0, 1, P, slot,
                    NULL);
    at.ep = cv->ep;
    at.n = (cv->ep ? cv->ep->n : 0) + n;
    at.i = 0;
    at.j = 0;
    mr_epi_call(&at, 0, cv->O, p0, p1);
}
