/*
 * test_runtime.c -- standalone test program for the runtime's kernels (not part of the
 * runtime; it may use stdio and malloc). With MR_INT8 in the environment (another int8
 * kernel set: the Makefile's each_int8), only the int8 products' tests. Every runtime function is checked against naive
 * reference loops in double on awkward sizes, strided and transposed operands, padding,
 * dilation and groups. A float result r is accepted against the double reference ref when
 *   |r - ref| <= 1e-5 + 1e-5 * mag
 * where mag is the sum of the magnitudes of the terms that make up ref (for GEMM and
 * convolution), or |ref| (pooling, softmax). Max pooling must match exactly. NaN must
 * match NaN and infinities must match exactly.
 *
 * Prints "N passed, M failed" and exits 0 only when M == 0.
 */
#include "mithril_runtime.h"
#include "test_isa.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_passed, g_failed;
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

/* Deterministic xorshift64* generator. */
static uint64_t rng_next(void)
{
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 2685821657736338717ull;
}

/* Uniform in [lo, hi] (inclusive integers). */
static int64_t rng_int(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rng_next() % (uint64_t)(hi - lo + 1));
}

/* Uniform float in [-1, 1). */
static float rng_float(void)
{
    return (float)((double)(rng_next() >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static float *rand_floats(int64_t n)
{
    float *p = (float *)xmalloc(sizeof(float) * (size_t)n);
    int64_t i;
    for (i = 0; i < n; ++i) p[i] = rng_float();
    return p;
}

static float *nan_floats(int64_t n)
{
    float *p = (float *)xmalloc(sizeof(float) * (size_t)n);
    int64_t i;
    for (i = 0; i < n; ++i) p[i] = NAN;
    return p;
}

/*
 * Compares got[i] (at position idx[i] of the output, or i when idx is NULL) with
 * ref[i] within 1e-5 + 1e-5 * mag[i] (mag NULL: |ref|; exact != 0: bitwise-value equal).
 * Returns 1 when all match, else prints the first mismatch and returns 0.
 */
static int compare(const char *what, const float *got, const double *ref, const double *mag,
                   int64_t n, int exact)
{
    int64_t i;
    double worst = 0.0;
    for (i = 0; i < n; ++i) {
        const double g = (double)got[i], r = ref[i];
        int ok;
        if (isnan(r)) {
            ok = isnan(g);
        } else if (isinf(r)) {
            ok = g == r;
        } else if (exact) {
            ok = g == (double)(float)r;
        } else {
            const double m = mag ? mag[i] : fabs(r);
            const double err = fabs(g - r);
            ok = !isnan(g) && err <= 1e-5 + 1e-5 * m;
            if (ok && err / (1.0 + m) > worst) worst = err / (1.0 + m);
        }
        if (!ok) {
            printf("FAIL %s: element %lld: got %.9g, expected %.9g (mag %.6g)\n", what,
                   (long long)i, g, r, mag ? mag[i] : fabs(r));
            return 0;
        }
    }
    return 1;
}

static void record(int ok)
{
    if (ok) {
        ++g_passed;
    } else {
        ++g_failed;
    }
}

/* ==================================================================================== */
/* GEMM                                                                                 */
/* ==================================================================================== */

/*
 * A strided rows x cols matrix view over a buffer: element (i, j) at base[i*rs + j*cs]
 * where base = buf + origin. Layouts:
 *   0 row-major contiguous        1 column-major (transposed) contiguous
 *   2 row-major, padded ld (+3)   3 column-major, padded ld (+5)
 *   4 both strides non-unit (row-major-ish, cs = 2, rs = 2*cols + 1)
 *   5 rows reversed (negative row stride), row-major otherwise
 *   6 columns reversed with column-major storage (negative column stride)
 */
#define N_LAYOUTS 7
typedef struct {
    int64_t rs, cs, origin, size;
} view;

static view make_view(int64_t rows, int64_t cols, int layout)
{
    view v;
    v.origin = 0;
    switch (layout) {
    case 0: v.rs = cols; v.cs = 1; v.size = rows * cols; break;
    case 1: v.rs = 1; v.cs = rows; v.size = rows * cols; break;
    case 2: v.rs = cols + 3; v.cs = 1; v.size = rows * (cols + 3); break;
    case 3: v.rs = 1; v.cs = rows + 5; v.size = cols * (rows + 5); break;
    case 4: v.rs = 2 * cols + 1; v.cs = 2; v.size = rows * (2 * cols + 1); break;
    case 5: v.rs = -cols; v.cs = 1; v.size = rows * cols; v.origin = (rows - 1) * cols; break;
    default: v.rs = 1; v.cs = -rows; v.size = rows * cols; v.origin = (cols - 1) * rows; break;
    }
    if (v.size == 0) v.size = 1;
    if (rows == 0 || cols == 0) v.origin = 0;
    return v;
}

/* Whether every element of C not marked in `touched` still equals C0 (says where not). */
static int untouched_outside(const char *name, const float *C, const float *C0, const char *touched, int64_t size)
{
    int64_t i;
    for (i = 0; i < size; ++i) {
        if (!touched[i] && memcmp(&C[i], &C0[i], sizeof(float)) != 0) {
            printf("FAIL %s: wrote outside C at buffer offset %lld\n", name, (long long)i);
            return 0;
        }
    }
    return 1;
}

/*
 * One GEMM case: checks C = alpha*A*B + beta*C over every element of C and checks that
 * the C buffer outside the view is untouched. beta == 0 fills C with NaN first.
 */
static void test_gemm_case(int64_t M, int64_t N, int64_t K, int la, int lb, int lc,
                           float alpha, float beta)
{
    const view va = make_view(M, K, la), vb = make_view(K, N, lb), vc = make_view(M, N, lc);
    float *A = rand_floats(va.size), *B = rand_floats(vb.size);
    float *C = beta == 0.0f ? nan_floats(vc.size) : rand_floats(vc.size);
    float *C0 = (float *)xmalloc(sizeof(float) * (size_t)vc.size);
    double *ref = (double *)xmalloc(sizeof(double) * (size_t)(M * N + 1));
    double *mag = (double *)xmalloc(sizeof(double) * (size_t)(M * N + 1));
    float *got = (float *)xmalloc(sizeof(float) * (size_t)(M * N + 1));
    char *touched = (char *)calloc((size_t)vc.size, 1);
    const float *a = A + va.origin, *b = B + vb.origin;
    float *c = C + vc.origin;
    int64_t i, j, k;
    int ok = 1;
    char name[160];
    memcpy(C0, C, sizeof(float) * (size_t)vc.size);
    for (i = 0; i < M; ++i) {
        for (j = 0; j < N; ++j) {
            double s = 0.0, m = 0.0;
            const double c0 = (double)c[i * vc.rs + j * vc.cs];
            for (k = 0; k < K; ++k) {
                const double p = (double)a[i * va.rs + k * va.cs] * (double)b[k * vb.rs + j * vb.cs];
                s += p;
                m += fabs(p);
            }
            ref[i * N + j] = (double)alpha * s + (beta == 0.0f ? 0.0 : (double)beta * c0);
            mag[i * N + j] = fabs((double)alpha) * m + (beta == 0.0f ? 0.0 : fabs((double)beta * c0));
        }
    }
    mr_sgemm(M, N, K, alpha, a, va.rs, va.cs, b, vb.rs, vb.cs, beta, c, vc.rs, vc.cs);
    for (i = 0; i < M; ++i) {
        for (j = 0; j < N; ++j) {
            got[i * N + j] = c[i * vc.rs + j * vc.cs];
            touched[vc.origin + i * vc.rs + j * vc.cs] = 1;
        }
    }
    snprintf(name, sizeof name, "sgemm M=%lld N=%lld K=%lld layouts=%d%d%d alpha=%g beta=%g",
             (long long)M, (long long)N, (long long)K, la, lb, lc, alpha, beta);
    ok = compare(name, got, ref, mag, M * N, 0);
    ok = ok && untouched_outside(name, C, C0, touched, vc.size);
    record(ok);
    /* The same product with B in column panels (mr_sgemm_panels), from the same C. */
    {
        const int64_t panels = (N + MR_PANEL - 1) / MR_PANEL;
        float *Bp = (float *)calloc((size_t)(panels * K * MR_PANEL + 1), sizeof(float));
        memcpy(C, C0, sizeof(float) * (size_t)vc.size);
        for (k = 0; k < K; ++k) {
            for (j = 0; j < N; ++j) {
                Bp[(j / MR_PANEL) * K * MR_PANEL + k * MR_PANEL + j % MR_PANEL] = b[k * vb.rs + j * vb.cs];
            }
        }
        mr_sgemm_panels(M, N, K, alpha, a, va.rs, va.cs, Bp, beta, c, vc.rs, vc.cs);
        for (i = 0; i < M; ++i) {
            for (j = 0; j < N; ++j) got[i * N + j] = c[i * vc.rs + j * vc.cs];
        }
        snprintf(name, sizeof name, "sgemm_panels M=%lld N=%lld K=%lld layouts=%d%d alpha=%g beta=%g",
                 (long long)M, (long long)N, (long long)K, la, lc, alpha, beta);
        ok = compare(name, got, ref, mag, M * N, 0);
        ok = ok && untouched_outside(name, C, C0, touched, vc.size);
        record(ok);
        free(Bp);
    }
    free(A); free(B); free(C); free(C0); free(ref); free(mag); free(got); free(touched);
}

/* B with a zero row stride (every row of B is the same vector: broadcast). */
static void test_gemm_broadcast(void)
{
    const int64_t M = 7, N = 33, K = 17;
    float *A = rand_floats(M * K), *B = rand_floats(N), *C = nan_floats(M * N);
    double ref[7 * 33], mag[7 * 33];
    int64_t i, j, k;
    for (i = 0; i < M; ++i) {
        for (j = 0; j < N; ++j) {
            double s = 0.0, m = 0.0;
            for (k = 0; k < K; ++k) {
                s += (double)A[i * K + k] * B[j];
                m += fabs((double)A[i * K + k] * B[j]);
            }
            ref[i * N + j] = s;
            mag[i * N + j] = m;
        }
    }
    mr_sgemm(M, N, K, 1.0f, A, K, 1, B, 0, 1, 0.0f, C, N, 1);
    record(compare("sgemm broadcast B (b_rs = 0)", C, ref, mag, M * N, 0));
    free(A); free(B); free(C);
}

/* Degenerate sizes: M or N == 0 touches nothing; K == 0 gives beta*C (0 for beta 0). */
static void test_gemm_degenerate(void)
{
    float A[4] = {1, 2, 3, 4}, B[4] = {1, 2, 3, 4};
    float C[6] = {1, 2, 3, 4, 5, 6};
    double ref[6];
    int64_t i;
    mr_sgemm(0, 3, 2, 1.0f, A, 2, 1, B, 3, 1, 0.0f, C, 3, 1);
    mr_sgemm(2, 0, 2, 1.0f, A, 2, 1, B, 3, 1, 0.0f, C, 3, 1);
    for (i = 0; i < 6; ++i) ref[i] = (double)(i + 1);
    record(compare("sgemm M=0/N=0 leaves C alone", C, ref, NULL, 6, 1));
    mr_sgemm(2, 3, 0, 1.0f, A, 2, 1, B, 3, 1, 2.5f, C, 3, 1);
    for (i = 0; i < 6; ++i) ref[i] = 2.5 * (double)(i + 1);
    record(compare("sgemm K=0 beta=2.5 scales C", C, ref, NULL, 6, 1));
    for (i = 0; i < 6; ++i) C[i] = NAN;
    mr_sgemm(2, 3, 0, 1.0f, A, 2, 1, B, 3, 1, 0.0f, C, 3, 1);
    for (i = 0; i < 6; ++i) ref[i] = 0.0;
    record(compare("sgemm K=0 beta=0 zeroes NaN C", C, ref, NULL, 6, 1));
}

static void test_gemm(void)
{
    static const int64_t small[] = {1, 3, 7, 17, 33};
    static const int64_t big[][3] = {
        {65, 130, 300}, {13, 200, 513}, {128, 64, 256}, {6, 16, 256}, {100, 1, 1000},
        {1, 257, 1}, {37, 67, 257}, {7, 129, 1}, {61, 63, 511}, {2, 300, 40},
        {10, 70, 129}, {19, 33, 40}, /* with the sizes above, every remainder of 6 and 8 rows */
        {8, 40, 1100}, /* in depth chunks of whole KC blocks where MR_SGEMM_A_BYTES is 16 KiB */
    };
    const int ns = (int)(sizeof small / sizeof small[0]);
    int im, in, ik, l, t;
    /* every small size triple, rotating through layouts and alpha/beta */
    t = 0;
    for (im = 0; im < ns; ++im) {
        for (in = 0; in < ns; ++in) {
            for (ik = 0; ik < ns; ++ik, ++t) {
                const float alphas[3] = {1.0f, -0.5f, 2.0f}, betas[3] = {0.0f, 1.0f, -1.5f};
                test_gemm_case(small[im], small[in], small[ik], t % N_LAYOUTS,
                               (t / N_LAYOUTS) % N_LAYOUTS, (t / 3) % N_LAYOUTS,
                               alphas[t % 3], betas[(t / 3) % 3]);
            }
        }
    }
    /* every layout combination on one awkward shape */
    for (l = 0; l < N_LAYOUTS * N_LAYOUTS * N_LAYOUTS; ++l) {
        test_gemm_case(17, 33, 7, l % N_LAYOUTS, (l / N_LAYOUTS) % N_LAYOUTS,
                       l / (N_LAYOUTS * N_LAYOUTS), 1.0f, (l & 1) ? 0.0f : 0.75f);
    }
    /* sizes that cross the KC / NC / MR / NR block boundaries */
    for (l = 0; l < (int)(sizeof big / sizeof big[0]); ++l) {
        test_gemm_case(big[l][0], big[l][1], big[l][2], 0, 0, 0, 1.0f, 0.0f);
        test_gemm_case(big[l][0], big[l][1], big[l][2], 1, 3, 2, -1.0f, 1.0f);
        test_gemm_case(big[l][0], big[l][1], big[l][2], 4, 1, 3, 0.5f, 0.25f);
    }
    test_gemm_broadcast();
    test_gemm_degenerate();
}

/* ==================================================================================== */
/* Narrow weights: mr_dequantize, mr_sgemm_panels_q(_mt)                                */
/* ==================================================================================== */

/* The compiler's side of the formats (mithril_runtime.h), written here independently:
 * f32 to binary16 and to bfloat16, rounded to nearest even, and q8_0 blocks. */
static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static uint16_t to_f16(float f)
{
    const uint32_t u = f32_bits(f), sign = (u >> 16) & 0x8000u;
    const double a = fabs((double)f);
    double m;
    int e;
    if (f != f) return (uint16_t)(sign | 0x7e00u);
    if (a >= 65520.0) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504: inf */
    if (a < ldexp(1.0, -14)) {
        /* subnormal: a / 2^-24 rounded to nearest even (exact in double) */
        m = nearbyint(a * ldexp(1.0, 24));
        return (uint16_t)(sign | (uint32_t)m);
    }
    e = ilogb(a);
    m = nearbyint(ldexp(a, 10 - e)); /* in [1024, 2048] */
    if (m == 2048.0) {
        m = 1024.0;
        ++e;
    }
    if (e > 15) return (uint16_t)(sign | 0x7c00u);
    return (uint16_t)(sign | (uint32_t)(e + 15) << 10 | ((uint32_t)m - 1024u));
}

static uint16_t to_bf16(float f)
{
    const uint32_t u = f32_bits(f);
    if (f != f) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* binary16 to double from the definition (sign, exponent, fraction), not bit moves */
static double f16_value(uint16_t h)
{
    const int e = (h >> 10) & 31, m = h & 1023;
    const double s = (h & 0x8000u) ? -1.0 : 1.0;
    if (e == 31) return m ? NAN : s * INFINITY;
    if (e == 0) return s * ldexp((double)m, -24);
    return s * ldexp(1024.0 + m, e - 25);
}

/* n elements of x stored as `type` into a fresh buffer (MR_STORED_BYTES of it, plus
 * one so that n == 0 still allocates) */
static unsigned char *quantize(int type, const float *x, int64_t n)
{
    unsigned char *p = (unsigned char *)xmalloc((size_t)MR_STORED_BYTES(type, n) + 1);
    int64_t e, b;
    if (type == MR_F32) {
        memcpy(p, x, sizeof(float) * (size_t)n);
    } else if (type == MR_F16 || type == MR_BF16) {
        for (e = 0; e < n; ++e) {
            const uint16_t h = type == MR_F16 ? to_f16(x[e]) : to_bf16(x[e]);
            memcpy(p + 2 * e, &h, 2);
        }
    } else {
        const int64_t nb = (n + 31) / 32;
        for (b = 0; b < nb; ++b) {
            float amax = 0.0f, scale;
            const int64_t end = b * 32 + 32 < n ? b * 32 + 32 : n;
            for (e = b * 32; e < end; ++e) amax = fabsf(x[e]) > amax ? fabsf(x[e]) : amax;
            scale = amax / 127.0f;
            memcpy(p + 4 * b, &scale, 4);
            for (e = b * 32; e < end; ++e) {
                float r = scale == 0.0f ? 0.0f : roundf(x[e] / scale);
                int8_t q;
                r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
                q = (int8_t)r;
                memcpy(p + 4 * nb + e, &q, 1);
            }
        }
    }
    return p;
}

static const char *const type_names[] = {"f32", "f16", "bf16", "q8_0"};

static int same_value(float got, double want)
{
    if (want != want) return got != got;
    return (double)got == want && (want != 0.0 || !signbit(got) == !signbit(want));
}

/* mr_dequantize of n 16-bit values (f16 or bf16) against their values `want` */
static void check_dequantize_table(int type, const uint16_t *h, const double *want, int n, float *d)
{
    int i, ok = 1;
    mr_dequantize(type, h, n, d);
    for (i = 0; i < n; ++i) {
        if (!same_value(d[i], want[i])) {
            printf("FAIL dequantize %s %#06x: got %.9g, expected %.9g\n", type_names[type], h[i], d[i], want[i]);
            ok = 0;
        }
    }
    record(ok);
}

static void test_dequantize(void)
{
    /* binary16: normals, the largest, subnormals, signed zeros, infinities, NaNs */
    static const uint16_t h[] = {0x3c00, 0xc000, 0x7bff, 0x0400, 0x0001, 0x03ff, 0x8001, 0x8000, 0x0000,
                                 0x3555, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe00};
    static const double hv[] = {1.0, -2.0, 65504.0, 6.103515625e-05, 5.9604644775390625e-08,
                                 6.0975551605224609375e-05, -5.9604644775390625e-08, -0.0, 0.0,
                                 0.333251953125, INFINITY, -INFINITY, NAN, NAN, NAN};
    /* bfloat16: the f32's upper half, f32 subnormals kept */
    static const uint16_t bh[] = {0x3f80, 0xc040, 0x0001, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x3eab};
    static const double bv[] = {1.0, -3.0, 9.18354961579912115600575419705e-41, -0.0, INFINITY, -INFINITY, NAN,
                                0.333984375};
    const int nh = (int)(sizeof h / sizeof h[0]), nbh = (int)(sizeof bh / sizeof bh[0]);
    uint16_t *all = (uint16_t *)xmalloc(2 * 65536);
    float *d = (float *)xmalloc(sizeof(float) * 65536);
    unsigned char q8[4 * 3 + 67];
    float scale;
    int i, ok;
    /* hand-picked values */
    check_dequantize_table(MR_F16, h, hv, nh, d);
    check_dequantize_table(MR_BF16, bh, bv, nbh, d);
    /* every binary16 against its definition, and an odd start and length (n = 65533) */
    for (i = 0; i < 65536; ++i) all[i] = (uint16_t)i;
    mr_dequantize(MR_F16, all, 65536, d);
    for (i = 0, ok = 1; i < 65536 && ok; ++i) {
        ok = same_value(d[i], f16_value((uint16_t)i));
        if (!ok) printf("FAIL dequantize f16 %#06x: got %.9g, expected %.9g\n", i, d[i], f16_value((uint16_t)i));
    }
    record(ok);
    mr_dequantize(MR_F16, all + 3, 65533, d);
    for (i = 0, ok = 1; i < 65533 && ok; ++i) ok = same_value(d[i], f16_value((uint16_t)(i + 3)));
    if (!ok) printf("FAIL dequantize f16 from element 3\n");
    record(ok);
    /* q8_0 over 67 elements: block 0 scale 0.5 and q = e - 16, block 1 all zeros
     * (scale 0), a partial block 2 of 3 with scale 2 and q = -127, 1, 127 */
    scale = 0.5f;
    memcpy(q8, &scale, 4);
    scale = 0.0f;
    memcpy(q8 + 4, &scale, 4);
    scale = 2.0f;
    memcpy(q8 + 8, &scale, 4);
    for (i = 0; i < 32; ++i) q8[12 + i] = (unsigned char)(int8_t)(i - 16);
    for (i = 32; i < 64; ++i) q8[12 + i] = 0;
    q8[12 + 64] = (unsigned char)(int8_t)-127;
    q8[12 + 65] = 1;
    q8[12 + 66] = 127;
    mr_dequantize(MR_Q8_0, q8, 67, d);
    for (i = 0, ok = 1; i < 67; ++i) {
        const double want = i < 32 ? 0.5 * (i - 16) : i < 64 ? 0.0 : i == 64 ? -254.0 : i == 65 ? 2.0 : 254.0;
        if ((double)d[i] != want) {
            printf("FAIL dequantize q8_0 element %d: got %.9g, expected %.9g\n", i, d[i], want);
            ok = 0;
        }
    }
    record(ok);
    /* the stored sizes */
    record(MR_STORED_BYTES(MR_F32, 67) == 268 && MR_STORED_BYTES(MR_F16, 67) == 134 &&
           MR_STORED_BYTES(MR_BF16, 67) == 134 && MR_STORED_BYTES(MR_Q8_0, 67) == 79 &&
           MR_STORED_BYTES(MR_Q8_0, 64) == 72 && MR_STORED_BYTES(MR_Q8_0, 0) == 0);
    /* the test's own quantizers agree with the runtime's reading of them */
    {
        static const float x[] = {1.0f, 1.0f + 1.0f / 2048.0f, 1.0f + 3.0f / 2048.0f, 65519.0f, 65520.0f,
                                  1e-8f, 3e-8f, -0.0f, 1.00390625f, 1.01171875f};
        static const uint16_t fh[] = {0x3c00, 0x3c00, 0x3c02, 0x7bff, 0x7c00, 0x0000, 0x0001, 0x8000, 0x3c04, 0x3c0c};
        static const uint16_t fb[] = {0x3f80, 0x3f80, 0x3f80, 0x4780, 0x4780, 0x322c, 0x3301, 0x8000, 0x3f80, 0x3f82};
        int n = (int)(sizeof x / sizeof x[0]);
        for (i = 0, ok = 1; i < n; ++i) {
            if (to_f16(x[i]) != fh[i] || to_bf16(x[i]) != fb[i]) {
                printf("FAIL test quantizer of %.9g: f16 %#06x (want %#06x), bf16 %#06x (want %#06x)\n", x[i],
                       to_f16(x[i]), fh[i], to_bf16(x[i]), fb[i]);
                ok = 0;
            }
        }
        record(ok);
    }
    free(all);
    free(d);
}

/* An epilogue for the _mt check: adds col_bias[j] to row-major C and counts visits. */
typedef struct {
    float *C;
    int64_t N;
    const float *col_bias;
    int *visits;
} q_epi_ctx;

static void q_epi(const void *vctx, int64_t n, int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
    const q_epi_ctx *e = (const q_epi_ctx *)vctx;
    int64_t i, j;
    (void)n;
    for (i = i0; i < i1; ++i) {
        for (j = j0; j < j1; ++j) {
            e->C[i * e->N + j] += e->col_bias[j];
            e->visits[i * e->N + j] += 1;
        }
    }
}

/* ep as q_epi on e's fields (C row-major, N columns), visits zeroed (M * N of them) */
static void q_epi_init(q_epi_ctx *e, mr_epilogue *ep, float *C, int64_t M, int64_t N, const float *bias, int *visits)
{
    e->C = C;
    e->N = N;
    e->col_bias = bias;
    e->visits = visits;
    memset(visits, 0, sizeof(int) * (size_t)(M * N + 1));
    ep->fn = q_epi;
    ep->ctx = e;
    ep->n = 0;
}

/* Whether the epilogue visited each of the n elements once (says which not). */
static int q_epi_once(const char *name, const int *visits, int64_t n)
{
    int64_t i;
    for (i = 0; i < n; ++i) {
        if (visits[i] != 1) {
            printf("FAIL %s: epilogue visited element %lld %d times\n", name, (long long)i, visits[i]);
            return 0;
        }
    }
    return 1;
}

/* A parallel_for that runs the range one item at a time, last first. */
static void q_reverse_items(void *user, mr_task task, void *ctx, int64_t n)
{
    int64_t i;
    (void)user;
    for (i = n - 1; i >= 0; --i) task(ctx, i, i + 1);
}

/*
 * One product with B in panels stored as `type`: mr_sgemm_panels_q against the double
 * reference on the dequantized panels (mr_dequantize), with A and C in layouts la, lc;
 * with `mt`, also mr_sgemm_panels_q_mt through a pool that runs items last first, with
 * an epilogue (row-major C). For MR_F32, mr_sgemm_panels_q must equal mr_sgemm_panels.
 */
static void test_panels_q_case(int type, int64_t M, int64_t N, int64_t K, int la, int lc, float alpha, float beta,
                               int mt)
{
    const char *const *names = type_names;
    const int64_t panels = (N + MR_PANEL - 1) / MR_PANEL, nel = panels * K * MR_PANEL;
    const view va = make_view(M, K, la), vc = make_view(M, N, lc);
    float *A = rand_floats(va.size), *Bf = (float *)calloc((size_t)nel + 1, sizeof(float));
    float *Bd = (float *)xmalloc(sizeof(float) * (size_t)(nel + 1));
    float *C = beta == 0.0f ? nan_floats(vc.size) : rand_floats(vc.size);
    float *C0 = (float *)xmalloc(sizeof(float) * (size_t)vc.size);
    double *ref = (double *)xmalloc(sizeof(double) * (size_t)(M * N + 1));
    double *mag = (double *)xmalloc(sizeof(double) * (size_t)(M * N + 1));
    float *got = (float *)xmalloc(sizeof(float) * (size_t)(M * N + 1));
    char *touched = (char *)calloc((size_t)vc.size, 1);
    const float *a = A + va.origin;
    float *c = C + vc.origin;
    unsigned char *Bq;
    int64_t i, j, k;
    int ok;
    char name[160];
    /* B's panels (zero-padded), every eighth k-row of a panel scaled up, one all zero:
     * q8_0 blocks with different scales and a zero block */
    for (k = 0; k < K; ++k) {
        for (j = 0; j < N; ++j) {
            const float v = rng_float() * (k % 8 == 3 ? 40.0f : 1.0f);
            Bf[MR_PANEL_INDEX(k, j, K)] = k == K / 2 && j < MR_PANEL ? 0.0f : v;
        }
    }
    Bq = quantize(type, Bf, nel);
    mr_dequantize(type, Bq, nel, Bd);
    /* the widened panels are within the format's rounding of the f32 ones (half an
     * ulp of binary16 or bfloat16 at x, half a q8_0 step at the block's scale) */
    for (k = 0, ok = 1; k < nel && ok; ++k) {
        const double x = (double)Bf[k], err = fabs((double)Bd[k] - x);
        double amax = 0.0, bound;
        int64_t e;
        for (e = k / 32 * 32; e < k / 32 * 32 + 32; ++e) amax = fabs((double)Bf[e]) > amax ? fabs((double)Bf[e]) : amax;
        bound = type == MR_F32 ? 0.0
              : type == MR_F16 ? fabs(x) * ldexp(1.0, -11) + ldexp(1.0, -25)
              : type == MR_BF16 ? fabs(x) * ldexp(1.0, -8)
              : amax / 127.0 * 0.5 * (1.0 + 1e-4) + amax * 1e-6;
        ok = err <= bound;
        if (!ok) printf("FAIL dequantize %s element %lld: %.9g for %.9g\n", names[type], (long long)k, Bd[k], x);
    }
    record(ok);
    memcpy(C0, C, sizeof(float) * (size_t)vc.size);
    for (i = 0; i < M; ++i) {
        for (j = 0; j < N; ++j) {
            double sum = 0.0, m = 0.0;
            const double c0 = (double)c[i * vc.rs + j * vc.cs];
            for (k = 0; k < K; ++k) {
                const double p = (double)a[i * va.rs + k * va.cs] * (double)Bd[MR_PANEL_INDEX(k, j, K)];
                sum += p;
                m += fabs(p);
            }
            ref[i * N + j] = (double)alpha * sum + (beta == 0.0f ? 0.0 : (double)beta * c0);
            mag[i * N + j] = fabs((double)alpha) * m + (beta == 0.0f ? 0.0 : fabs((double)beta * c0));
            touched[vc.origin + i * vc.rs + j * vc.cs] = 1;
        }
    }
    mr_sgemm_panels_q(M, N, K, alpha, a, va.rs, va.cs, Bq, type, beta, c, vc.rs, vc.cs);
    for (i = 0; i < M; ++i) {
        for (j = 0; j < N; ++j) got[i * N + j] = c[i * vc.rs + j * vc.cs];
    }
    snprintf(name, sizeof name, "sgemm_panels_q %s M=%lld N=%lld K=%lld layouts=%d%d alpha=%g beta=%g", names[type],
             (long long)M, (long long)N, (long long)K, la, lc, alpha, beta);
    ok = compare(name, got, ref, mag, M * N, 0);
    ok = ok && untouched_outside(name, C, C0, touched, vc.size);
    record(ok);
    if (type == MR_F32) {
        /* the f32 case is mr_sgemm_panels, bit for bit */
        float *C2 = (float *)xmalloc(sizeof(float) * (size_t)vc.size);
        memcpy(C2, C0, sizeof(float) * (size_t)vc.size);
        mr_sgemm_panels(M, N, K, alpha, a, va.rs, va.cs, Bf, beta, C2 + vc.origin, vc.rs, vc.cs);
        record(memcmp(C, C2, sizeof(float) * (size_t)vc.size) == 0);
        if (memcmp(C, C2, sizeof(float) * (size_t)vc.size) != 0) printf("FAIL %s: differs from mr_sgemm_panels\n", name);
        free(C2);
    }
    if (mt && lc == 0 && vc.origin == 0) {
        mr_threads threads = {q_reverse_items, NULL};
        float *bias = rand_floats(N);
        int *visits = (int *)calloc((size_t)(M * N + 1), sizeof(int));
        q_epi_ctx ectx;
        mr_epilogue ep;
        int t;
        for (i = 0; i < M * N; ++i) {
            ref[i] += (double)bias[i % N];
            mag[i] += fabs((double)bias[i % N]);
        }
        for (t = 0; t < 2; ++t) {
            memcpy(C, C0, sizeof(float) * (size_t)vc.size);
            q_epi_init(&ectx, &ep, c, M, N, bias, visits);
            mr_sgemm_panels_q_mt(t ? &threads : NULL, M, N, K, alpha, a, va.rs, va.cs, Bq, type, beta, c, vc.rs,
                                 vc.cs, &ep);
            snprintf(name, sizeof name, "sgemm_panels_q_mt %s M=%lld N=%lld K=%lld threads=%d", names[type],
                     (long long)M, (long long)N, (long long)K, t);
            ok = compare(name, c, ref, mag, M * N, 0) && q_epi_once(name, visits, M * N);
            record(ok);
        }
        free(bias);
        free(visits);
    }
    free(A); free(Bf); free(Bd); free(Bq); free(C); free(C0); free(ref); free(mag); free(got); free(touched);
}

static void test_panels_q(void)
{
    /* M: every GEMV size (1..4) and past it; N: ragged, one column, whole panels; K: odd,
     * one, past MR_SGEMM_KC (256) */
    static const int64_t ms[] = {1, 2, 3, 4, 5, 8, 13, 37};
    static const int64_t nks[][2] = {{1, 1}, {31, 7}, {32, 37}, {33, 300}, {100, 19}, {70, 513}, {257, 64}};
    int type, im, in, t = 0;
    for (type = MR_F32; type <= MR_Q8_0; ++type) {
        for (im = 0; im < (int)(sizeof ms / sizeof ms[0]); ++im) {
            for (in = 0; in < (int)(sizeof nks / sizeof nks[0]); ++in, ++t) {
                const float alphas[3] = {1.0f, -0.75f, 2.0f}, betas[3] = {0.0f, 1.0f, 0.5f};
                test_panels_q_case(type, ms[im], nks[in][0], nks[in][1], (t % 3 == 0) ? 0 : t % N_LAYOUTS,
                                   (t % 2 == 0) ? 0 : (t / 2) % N_LAYOUTS, alphas[t % 3], betas[(t / 3) % 3], 0);
            }
        }
        /* threaded, with an epilogue: GEMV and blocked, big enough to be split */
        test_panels_q_case(type, 1, 600, 500, 0, 0, 1.0f, 0.0f, 1);
        test_panels_q_case(type, 3, 1000, 333, 0, 0, -0.5f, 1.0f, 1);
        test_panels_q_case(type, 37, 161, 300, 0, 0, 1.0f, 0.5f, 1);
        test_panels_q_case(type, 64, 256, 257, 1, 0, 2.0f, 0.0f, 1);
        test_panels_q_case(type, 13, 161, 1100, 0, 0, 1.0f, 0.5f, 1); /* depth chunks (16 KiB) */
    }
}

/* ==================================================================================== */
/* int8 products: mr_gemm_i8_mt                                                         */
/* ==================================================================================== */

/* B (K x N, row-major) in mr_gemm_i8_mt's stored form, written here from its definition
 * (mithril_runtime.h): per column scale max|B| / 127, codes rint(B / scale). Returns the
 * MR_I8_PANELS_BYTES(K, N) bytes. */
static unsigned char *i8_panels(const float *B, int64_t K, int64_t N)
{
    const int64_t P = (N + MR_PANEL - 1) / MR_PANEL;
    unsigned char *q = (unsigned char *)calloc((size_t)MR_I8_PANELS_BYTES(K, N), 1);
    int64_t j, k;
    if (!q) exit(2);
    for (j = 0; j < N; ++j) {
        float m = 0.0f, scale;
        int32_t sum = 0;
        for (k = 0; k < K; ++k) m = fabsf(B[k * N + j]) > m ? fabsf(B[k * N + j]) : m;
        scale = m / 127.0f;
        for (k = 0; k < K; ++k) {
            const long c = scale > 0.0f ? lrintf(B[k * N + j] / scale) : 0;
            const int8_t code = (int8_t)(c > 127 ? 127 : c < -127 ? -127 : c);
            q[8 * P * MR_PANEL + MR_I8_INDEX(k, j, K)] = (unsigned char)code;
            sum += code;
        }
        memcpy(q + 4 * j, &scale, 4);
        memcpy(q + 4 * (P * MR_PANEL + j), &sum, 4);
    }
    return q;
}

/* Element (k, j) of i8_panels' B, as stored (scale * code). */
static double i8_b(const unsigned char *q, int64_t K, int64_t N, int64_t k, int64_t j, int *code)
{
    const int64_t P = (N + MR_PANEL - 1) / MR_PANEL;
    float scale;
    *code = (int8_t)q[8 * P * MR_PANEL + MR_I8_INDEX(k, j, K)];
    memcpy(&scale, q + 4 * j, 4);
    return (double)scale * *code;
}

/*
 * One int8 product, A and C in layouts la and lc (rows of A: random, one of zeros, one
 * without negatives, one with a value 50 times the rest, one with a NaN or an infinity
 * when `bad`, one of magnitudes under 1e-37): checks
 *  - A's quantization in the scratch: every code within half a step of its value, the
 *    padding codes the zero point, nothing written past the scratch;
 *  - C against the same formula evaluated here from the scratch's codes with int64 sums:
 *    equal bit for bit (beta 0; else within 1e-6, fused or not), rows with a NaN or an
 *    infinity all NaN, nothing written outside C;
 *  - C against the f32 product in double, within the quantization's own bound (half a
 *    step of A's row times sum |B|, plus half of B's column step times sum |A|);
 *  - with `mt`, threaded (items last first) with an epilogue, the same bits.
 */
static void test_gemm_i8_case(int64_t M, int64_t N, int64_t K, int la, int lc, float alpha, float beta, int bad, int mt)
{
    const int64_t K4 = MR_I8_K4(K), sbytes = MR_I8_SCRATCH_BYTES(M, K);
    const view va = make_view(M, K, la), vc = make_view(M, N, lc);
    float *A = rand_floats(va.size), *B = rand_floats(K * N);
    float *C = beta == 0.0f ? nan_floats(vc.size) : rand_floats(vc.size);
    float *C0 = (float *)xmalloc(sizeof(float) * (size_t)vc.size), *got = (float *)xmalloc(sizeof(float) * (size_t)(M * N + 1));
    unsigned char *scratch = (unsigned char *)xmalloc((size_t)sbytes + 64), *Bq;
    char *touched = (char *)calloc((size_t)vc.size, 1);
    const float *a = A + va.origin;
    float *c = C + vc.origin;
    int64_t i, j, k;
    int ok = 1;
    char name[160];
    /* B: column 1 ten times larger, column 2 zero */
    for (k = 0; k < K; ++k) {
        if (N > 1) B[k * N + 1] *= 10.0f;
        if (N > 2) B[k * N + 2] = 0.0f;
    }
    for (k = 0; k < K; ++k) {
        float *ai = A + va.origin + k * va.cs;
        if (M > 1) ai[va.rs] = 0.0f;
        if (M > 2) ai[2 * va.rs] = fabsf(ai[2 * va.rs]);
        if (M > 3 && k == K / 2) ai[3 * va.rs] = 50.0f;
        if (M > 6) ai[6 * va.rs] *= 1e-37f; /* a range too small for a scale: zeros */
    }
    if (bad && M > 4) A[va.origin + 4 * va.rs + (K - 1) * va.cs] = NAN;
    if (bad && M > 5) A[va.origin + 5 * va.rs] = -INFINITY;
    Bq = i8_panels(B, K, N);
    memcpy(C0, C, sizeof(float) * (size_t)vc.size);
    memset(scratch + sbytes, 0xA5, 64);
    for (i = 0; i < M; ++i) {
        for (j = 0; j < N; ++j) touched[vc.origin + i * vc.rs + j * vc.cs] = 1;
    }
    snprintf(name, sizeof name, "gemm_i8 M=%lld N=%lld K=%lld layouts=%d%d alpha=%g beta=%g%s", (long long)M,
             (long long)N, (long long)K, la, lc, alpha, beta, bad ? " nan/inf rows" : "");
    mr_gemm_i8_mt(NULL, 1, M, N, K, alpha, a, 0, va.rs, va.cs, Bq, beta, c, 0, vc.rs, vc.cs, scratch, NULL);
    for (i = 0; i < 64 && ok; ++i) ok = scratch[sbytes + i] == 0xA5;
    if (!ok) printf("FAIL %s: wrote past the scratch\n", name);
    for (i = 0; i < M && ok; ++i) {
        const unsigned char *q = scratch + i * K4;
        float s;
        int32_t z;
        double sum_a = 0.0;
        int rowbad = 0;
        memcpy(&s, scratch + M * K4 + 4 * i, 4);
        memcpy(&z, scratch + M * K4 + 4 * M + 4 * i, 4);
        for (k = 0; k < K; ++k) rowbad |= !isfinite(a[i * va.rs + k * va.cs]);
        for (k = 0; k < K && !rowbad && ok; ++k) {
            const double x = a[i * va.rs + k * va.cs], back = (double)s * (q[k] - z);
            ok = z >= 0 && z <= 255 && fabs(back - x) <= 0.5 * s * (1.0 + 1e-5) + 1e-30;
            if (!ok) printf("FAIL %s: A(%lld, %lld) = %.9g quantized to %d (scale %g, zero %d)\n", name, (long long)i, (long long)k, x, q[k], s, z);
            sum_a += fabs(x);
        }
        for (k = K; k < K4 && ok; ++k) ok = q[k] == (unsigned char)z || rowbad;
        for (j = 0; j < N && ok; ++j) {
            float sw, want;
            int64_t sum = 0, colsum = 0;
            double exact = 0.0, bsum = 0.0;
            const float gotv = c[i * vc.rs + j * vc.cs], old = C0[vc.origin + i * vc.rs + j * vc.cs];
            int code;
            memcpy(&sw, Bq + 4 * j, 4);
            for (k = 0; k < K; ++k) {
                const double bq = i8_b(Bq, K, N, k, j, &code);
                sum += (int64_t)q[k] * code;
                colsum += code;
                exact += (double)a[i * va.rs + k * va.cs] * B[k * N + j];
                bsum += fabs(bq);
            }
            if (rowbad) {
                ok = isnan(gotv);
                if (!ok) printf("FAIL %s: C(%lld, %lld) = %g for a row with a NaN or an infinity\n", name, (long long)i, (long long)j, gotv);
                continue;
            }
            want = (alpha * s) * sw * (float)(sum - z * colsum);
            if (beta != 0.0f) {
                ok = fabsf(gotv - (want + beta * old)) <= 1e-6f * (fabsf(want) + fabsf(beta * old)) + 1e-30f;
            } else {
                ok = memcmp(&gotv, &want, sizeof want) == 0;
            }
            if (!ok) printf("FAIL %s: C(%lld, %lld) = %.9g, the quantized product gives %.9g\n", name, (long long)i, (long long)j, gotv, want);
            if (ok) {
                /* the quantization's own bound on |A B - quantized|, and 1e-5 for f32 */
                const double bound = 0.5 * s * bsum * (1.0 + 1e-5) + 0.5 * sw * sum_a + 1e-5 * (1.0 + fabs(exact));
                const double dev = fabs((double)(gotv - (beta != 0.0f ? beta * old : 0.0f)) / alpha - exact);
                ok = dev <= bound * (1.0 + 1e-4);
                if (!ok) printf("FAIL %s: C(%lld, %lld) is %g from the f32 product, past the bound %g\n", name, (long long)i, (long long)j, dev, bound);
            }
        }
    }
    ok = ok && untouched_outside(name, C, C0, touched, vc.size);
    record(ok);
    if (mt && lc == 0 && vc.origin == 0) {
        mr_threads threads = {q_reverse_items, NULL};
        float *bias = rand_floats(N);
        int *visits = (int *)calloc((size_t)(M * N + 1), sizeof(int));
        q_epi_ctx ectx;
        mr_epilogue ep;
        for (i = 0; i < M * N; ++i) got[i] = c[i] + bias[i % N];
        memcpy(C, C0, sizeof(float) * (size_t)vc.size);
        q_epi_init(&ectx, &ep, c, M, N, bias, visits);
        mr_gemm_i8_mt(&threads, 1, M, N, K, alpha, a, 0, va.rs, va.cs, Bq, beta, c, 0, vc.rs, vc.cs, scratch, &ep);
        ok = memcmp(c, got, sizeof(float) * (size_t)(M * N)) == 0 || beta != 0.0f;
        if (!ok) printf("FAIL %s threaded: differs from the serial call\n", name);
        ok = ok && q_epi_once(name, visits, M * N);
        record(ok);
        free(bias);
        free(visits);
    }
    free(A); free(B); free(Bq); free(C); free(C0); free(got); free(scratch); free(touched);
}

static void test_gemm_i8(void)
{
    /* M: 1..9 (partial and whole slivers, and rows of the AVX2 passes), 17, 34 (AMX: a
     * sliver of 32 rows, then one of 2, which VNNI takes); N: one
     * column, ragged and whole panels; K: one, not a multiple of 4, past a cache block */
    static const int64_t ms[] = {1, 2, 3, 5, 8, 9, 17, 34};
    static const int64_t nks[][2] = {{1, 1}, {31, 3}, {32, 4}, {33, 5}, {70, 31}, {100, 257}};
    int im, in, t = 0;
    for (im = 0; im < (int)(sizeof ms / sizeof ms[0]); ++im) {
        for (in = 0; in < (int)(sizeof nks / sizeof nks[0]); ++in, ++t) {
            const float alphas[3] = {1.0f, -0.75f, 2.0f}, betas[3] = {0.0f, 0.0f, 0.5f};
            test_gemm_i8_case(ms[im], nks[in][0], nks[in][1], t % N_LAYOUTS, (t % 2 == 0) ? 0 : (t / 2) % N_LAYOUTS,
                              alphas[t % 3], betas[(t / 3) % 3], t % 4 == 1, 0);
        }
    }
    /* threaded with an epilogue, big enough to be split (rows and columns) */
    test_gemm_i8_case(1, 600, 500, 0, 0, 1.0f, 0.0f, 0, 1);
    test_gemm_i8_case(37, 161, 300, 0, 0, 1.0f, 0.0f, 1, 1);
    test_gemm_i8_case(40, 200, 130, 1, 0, 2.0f, 0.0f, 0, 1);
}

/* An epilogue that counts its visits to C[n - base](i, j) of a batch of M x N. */
typedef struct {
    int64_t base, batch, M, N;
    int *visits;
} batch_epi_ctx;

static void batch_epi(const void *vctx, int64_t n, int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
    const batch_epi_ctx *e = (const batch_epi_ctx *)vctx;
    int64_t i, j;
    if (n < e->base || n >= e->base + e->batch) return;
    for (i = i0; i < i1; ++i) {
        for (j = j0; j < j1; ++j) e->visits[((n - e->base) * e->M + i) * e->N + j] += 1;
    }
}

/* A batch of products with one B (matrices apart, with gaps): the same bits as one call
 * per matrix, threaded (items last first) too, and the epilogue once per element at
 * n = ep.n + b. */
static void test_gemm_i8_batch(void)
{
    const int64_t batch = 3, M = 20, N = 100, K = 70, a_bs = M * K + 13, c_bs = M * N + 3;
    float *A = rand_floats(batch * a_bs), *B = rand_floats(K * N);
    float *C1 = nan_floats(batch * c_bs), *C2 = nan_floats(batch * c_bs);
    unsigned char *scratch = (unsigned char *)xmalloc((size_t)MR_I8_SCRATCH_BYTES(batch * M, K)), *Bq = i8_panels(B, K, N);
    int *visits = (int *)calloc((size_t)(batch * M * N), sizeof(int));
    mr_threads threads = {q_reverse_items, NULL};
    batch_epi_ctx ectx;
    mr_epilogue ep;
    int64_t b;
    int ok;
    for (b = 0; b < batch; ++b) {
        mr_gemm_i8_mt(NULL, 1, M, N, K, 1.5f, A + b * a_bs, 0, K, 1, Bq, 0.0f, C1 + b * c_bs, 0, N, 1, scratch, NULL);
    }
    ectx.base = 7;
    ectx.batch = batch;
    ectx.M = M;
    ectx.N = N;
    ectx.visits = visits;
    ep.fn = batch_epi;
    ep.ctx = &ectx;
    ep.n = 7;
    mr_gemm_i8_mt(&threads, batch, M, N, K, 1.5f, A, a_bs, K, 1, Bq, 0.0f, C2, c_bs, N, 1, scratch, &ep);
    ok = memcmp(C1, C2, sizeof(float) * (size_t)(batch * c_bs)) == 0;
    if (!ok) printf("FAIL gemm_i8 batch of %lld: differs from one call per matrix\n", (long long)batch);
    ok = ok && q_epi_once("gemm_i8 batch", visits, batch * M * N);
    record(ok);
    free(A); free(B); free(C1); free(C2); free(scratch); free(Bq); free(visits);
}

/* No depth: C = beta * C, B not read (NULL), the epilogue once per element. */
static void test_gemm_i8_empty(void)
{
    float C[2 * 3] = {1, 2, 3, 4, 5, 6};
    int visits[2 * 3 + 1] = {0}, i, ok = 1; /* (q_epi_init clears M * N + 1) */
    q_epi_ctx ectx;
    mr_epilogue ep;
    const float bias[3] = {0, 0, 0};
    q_epi_init(&ectx, &ep, C, 2, 3, bias, visits);
    mr_gemm_i8_mt(NULL, 1, 2, 3, 0, 1.0f, NULL, 0, 0, 1, NULL, 0.5f, C, 0, 3, 1, NULL, &ep);
    for (i = 0; i < 6; ++i) ok &= C[i] == 0.5f * (float)(i + 1);
    if (!ok) printf("FAIL gemm_i8 K=0: C is not beta * C\n");
    record(ok && q_epi_once("gemm_i8 K=0", visits, 6));
}

/* The largest sums: rows of ones (codes 255, zero point 0) against columns of -1 (codes
 * -127) over MR_I8_MAX_K: -255 * 127 * 65536, inside int32. */
static void test_gemm_i8_extreme(void)
{
    const int64_t M = 2, N = 32, K = MR_I8_MAX_K;
    float *A = (float *)xmalloc(sizeof(float) * (size_t)(M * K)), *B = (float *)xmalloc(sizeof(float) * (size_t)(K * N));
    float C[2 * 32];
    unsigned char *scratch = (unsigned char *)xmalloc((size_t)MR_I8_SCRATCH_BYTES(M, K)), *Bq;
    int64_t i;
    int ok = 1;
    for (i = 0; i < M * K; ++i) A[i] = 1.0f;
    for (i = 0; i < K * N; ++i) B[i] = -1.0f;
    Bq = i8_panels(B, K, N);
    mr_gemm_i8_mt(NULL, 1, M, N, K, 1.0f, A, 0, K, 1, Bq, 0.0f, C, 0, N, 1, scratch, NULL);
    for (i = 0; i < M * N && ok; ++i) {
        const float want = (1.0f / 255.0f - 0.0f / 255.0f) * (1.0f / 127.0f) * (float)(-255 * 127 * (int64_t)K);
        ok = C[i] == want;
        if (!ok) printf("FAIL gemm_i8 K=%lld extremes: C[%lld] = %.9g, want %.9g\n", (long long)K, (long long)i, C[i], want);
    }
    record(ok);
    free(A); free(B); free(Bq); free(scratch);
}

/* ==================================================================================== */
/* Convolution                                                                          */
/* ==================================================================================== */

typedef struct {
    int64_t N, C, H, W, O, KH, KW, sh, sw, pt, pl, pb, pr, dh, dw, groups;
} conv_cfg;

static int64_t out_len(int64_t in, int64_t k, int64_t s, int64_t p0, int64_t p1, int64_t d)
{
    const int64_t span = in + p0 + p1 - d * (k - 1) - 1;
    return span < 0 ? 0 : span / s + 1;
}

/* The convolution of c over x and w in double: ref, and the magnitudes mag. */
static void conv_reference(const conv_cfg *c, int64_t OH, int64_t OW, const float *x, const float *w, double *ref,
                           double *mag)
{
    const int64_t Cg = c->C / c->groups, Og = c->O / c->groups;
    int64_t n, o, oh, ow, ci, kh, kw;
    for (n = 0; n < c->N; ++n) {
        for (o = 0; o < c->O; ++o) {
            const int64_t g = o / Og;
            for (oh = 0; oh < OH; ++oh) {
                for (ow = 0; ow < OW; ++ow) {
                    double s = 0.0, m = 0.0;
                    for (ci = 0; ci < Cg; ++ci) {
                        for (kh = 0; kh < c->KH; ++kh) {
                            for (kw = 0; kw < c->KW; ++kw) {
                                const int64_t ih = oh * c->sh + kh * c->dh - c->pt;
                                const int64_t iw = ow * c->sw + kw * c->dw - c->pl;
                                double p;
                                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                                p = (double)x[((n * c->C + g * Cg + ci) * c->H + ih) * c->W + iw] *
                                    (double)w[((o * Cg + ci) * c->KH + kh) * c->KW + kw];
                                s += p;
                                m += fabs(p);
                            }
                        }
                    }
                    ref[((n * c->O + o) * OH + oh) * OW + ow] = s;
                    mag[((n * c->O + o) * OH + oh) * OW + ow] = m;
                }
            }
        }
    }
}

/*
 * One int8 convolution, mr_conv2d_i8_mt (groups 1; image 1 of zeros, image 2 with a NaN
 * when N > 2): checks
 *  - each image's codes in the scratch: every input element within half a step of its
 *    value, the padding the zero point;
 *  - y against the formula evaluated here from those codes with int64 sums, bit for bit;
 *    the NaN image's outputs all NaN;
 *  - y against the f32 convolution in double, within the quantization's bound;
 *  - threaded (items last first) with an epilogue: the same bits, each element once.
 */
static void test_conv_i8_case(const conv_cfg *c)
{
    const int64_t OH = out_len(c->H, c->KH, c->sh, c->pt, c->pb, c->dh), OW = out_len(c->W, c->KW, c->sw, c->pl, c->pr, c->dw);
    const int64_t P = OH * OW, K = c->C * c->KH * c->KW, nx = c->N * c->C * c->H * c->W, ny = c->N * c->O * P;
    const int64_t Hp = MR_I8_CONV_SPAN(OH, c->sh, c->KH, c->dh), Wp = MR_I8_CONV_SPAN(OW, c->sw, c->KW, c->dw);
    const int64_t sbytes = MR_I8_CONV_SCRATCH_BYTES(c->N, c->C, c->KH, c->KW, OH, OW, c->sh, c->sw, c->dh, c->dw);
    const int64_t head = MR_I8_CONV_TASKS(c->N, P) * MR_I8_SCRATCH_BYTES(MR_I8_CONV_ROWS(P), K);
    float *x = rand_floats(nx), *w = rand_floats(c->O * K), *B = (float *)xmalloc(sizeof(float) * (size_t)(K * c->O));
    float *y = nan_floats(ny + 1), *y2 = nan_floats(ny + 1);
    double *ref = (double *)xmalloc(sizeof(double) * (size_t)(ny + 1)), *mag = (double *)xmalloc(sizeof(double) * (size_t)(ny + 1));
    unsigned char *scratch = (unsigned char *)xmalloc((size_t)sbytes + 64), *Bq;
    int *visits = (int *)calloc((size_t)(ny + 1), sizeof(int)), *wcode = (int *)xmalloc(sizeof(int) * (size_t)K);
    mr_threads threads = {q_reverse_items, NULL};
    batch_epi_ctx ectx;
    mr_epilogue ep;
    int64_t n, o, ci, kh, kw, oh, ow, r, sc;
    int ok = 1;
    char name[200];
    snprintf(name, sizeof name, "conv_i8 N=%lld C=%lld %lldx%lld O=%lld k=%lldx%lld s=%lld,%lld pad=%lld,%lld,%lld,%lld d=%lld,%lld",
             (long long)c->N, (long long)c->C, (long long)c->H, (long long)c->W, (long long)c->O, (long long)c->KH,
             (long long)c->KW, (long long)c->sh, (long long)c->sw, (long long)c->pt, (long long)c->pl, (long long)c->pb,
             (long long)c->pr, (long long)c->dh, (long long)c->dw);
    if (c->N > 1) memset(x + c->C * c->H * c->W, 0, sizeof(float) * (size_t)(c->C * c->H * c->W));
    if (c->N > 2) x[2 * c->C * c->H * c->W + 1] = NAN;
    for (o = 0; o < c->O; ++o) {
        for (ci = 0; ci < c->C; ++ci) {
            for (kh = 0; kh < c->KH; ++kh) {
                for (kw = 0; kw < c->KW; ++kw) {
                    B[((kh * c->KW + kw) * c->C + ci) * c->O + o] = w[((o * c->C + ci) * c->KH + kh) * c->KW + kw];
                }
            }
        }
    }
    Bq = i8_panels(B, K, c->O);
    conv_reference(c, OH, OW, x, w, ref, mag);
    memset(scratch + sbytes, 0xA5, 64);
    mr_conv2d_i8_mt(NULL, x, Bq, y, c->N, c->C, c->H, c->W, c->O, c->KH, c->KW, OH, OW, c->sh, c->sw, c->pt, c->pl,
                    c->dh, c->dw, scratch, NULL);
    for (r = 0; r < 64 && ok; ++r) ok = scratch[sbytes + r] == 0xA5;
    if (!ok) printf("FAIL %s: wrote past the scratch\n", name);
    ok = ok && isnan(y[ny]);
    for (n = 0; n < c->N && ok; ++n) {
        const unsigned char *codes = scratch + head + 8 * c->N + n * Hp * Wp * c->C;
        float s;
        int32_t z;
        int bad = 0;
        memcpy(&s, scratch + head + 4 * n, 4);
        memcpy(&z, scratch + head + 4 * (c->N + n), 4);
        for (r = 0; r < c->C * c->H * c->W; ++r) bad |= !isfinite(x[n * c->C * c->H * c->W + r]);
        for (r = 0; r < Hp && ok && !bad; ++r) {
            for (sc = 0; sc < Wp && ok; ++sc) {
                for (ci = 0; ci < c->C && ok; ++ci) {
                    const int64_t ih = r - c->pt, iw = sc - c->pl;
                    const int q = codes[(r * Wp + sc) * c->C + ci];
                    if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) {
                        ok = q == z;
                    } else {
                        const double v = x[((n * c->C + ci) * c->H + ih) * c->W + iw];
                        ok = fabs((double)s * (q - z) - v) <= 0.5 * s * (1.0 + 1e-5) + 1e-30;
                    }
                    if (!ok) printf("FAIL %s: image %lld's code at (%lld, %lld, %lld) is %d (scale %g, zero %d)\n", name, (long long)n, (long long)r, (long long)sc, (long long)ci, q, s, z);
                }
            }
        }
        for (o = 0; o < c->O && ok; ++o) {
            /* the filter's codes, their sum, and the sum of |its stored values| */
            int64_t colsum = 0;
            double wsum = 0.0;
            float sw;
            memcpy(&sw, Bq + 4 * o, 4);
            for (r = 0; r < K; ++r) {
                wsum += fabs(i8_b(Bq, K, c->O, r, o, &wcode[r]));
                colsum += wcode[r];
            }
            for (oh = 0; oh < OH && ok; ++oh) {
                for (ow = 0; ow < OW && ok; ++ow) {
                    const int64_t at = ((n * c->O + o) * OH + oh) * OW + ow;
                    int64_t sum = 0;
                    double xsum = 0.0;
                    float want;
                    for (kh = 0; kh < c->KH; ++kh) {
                        for (kw = 0; kw < c->KW; ++kw) {
                            const int64_t pr_ = oh * c->sh + kh * c->dh, pc_ = ow * c->sw + kw * c->dw;
                            const int64_t ih = pr_ - c->pt, iw = pc_ - c->pl;
                            const int inside = ih >= 0 && ih < c->H && iw >= 0 && iw < c->W;
                            for (ci = 0; ci < c->C; ++ci) {
                                sum += (int64_t)codes[(pr_ * Wp + pc_) * c->C + ci] * wcode[(kh * c->KW + kw) * c->C + ci];
                                if (inside) xsum += fabs(x[((n * c->C + ci) * c->H + ih) * c->W + iw]);
                            }
                        }
                    }
                    if (bad) {
                        ok = isnan(y[at]);
                        if (!ok) printf("FAIL %s: y[%lld] = %g for an image with a NaN\n", name, (long long)at, y[at]);
                        continue;
                    }
                    want = (1.0f * s) * sw * (float)(sum - z * colsum);
                    ok = memcmp(&want, &y[at], sizeof want) == 0;
                    if (!ok) printf("FAIL %s: y[%lld] = %.9g, the quantized convolution gives %.9g\n", name, (long long)at, y[at], want);
                    if (ok) {
                        const double bound = 0.5 * s * wsum * (1.0 + 1e-5) + 0.5 * sw * xsum + 1e-5 * (1.0 + mag[at]);
                        ok = fabs(y[at] - ref[at]) <= bound * (1.0 + 1e-4);
                        if (!ok) printf("FAIL %s: y[%lld] is %g from the f32 convolution, past the bound %g\n", name, (long long)at, fabs(y[at] - ref[at]), bound);
                    }
                }
            }
        }
    }
    record(ok);
    ectx.base = 0;
    ectx.batch = c->N;
    ectx.M = c->O;
    ectx.N = P;
    ectx.visits = visits;
    ep.fn = batch_epi;
    ep.ctx = &ectx;
    ep.n = 0;
    mr_conv2d_i8_mt(&threads, x, Bq, y2, c->N, c->C, c->H, c->W, c->O, c->KH, c->KW, OH, OW, c->sh, c->sw, c->pt,
                    c->pl, c->dh, c->dw, scratch, &ep);
    ok = memcmp(y, y2, sizeof(float) * (size_t)ny) == 0;
    if (!ok) printf("FAIL %s threaded: differs from the serial call\n", name);
    record(ok && q_epi_once(name, visits, ny));
    free(x); free(w); free(B); free(Bq); free(y); free(y2); free(ref); free(mag); free(scratch); free(visits); free(wcode);
}

static void test_conv_i8(void)
{
    /* N, C, H, W, O, KH, KW, sh, sw, pt, pl, pb, pr, dh, dw, groups */
    static const conv_cfg cases[] = {
        {3, 5, 7, 6, 33, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},   /* cnn's kind, odd sizes, a ragged panel */
        {1, 3, 9, 9, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1},    /* 1x1, K < 4, one column */
        {2, 4, 11, 10, 16, 3, 2, 2, 3, 2, 0, 1, 2, 2, 1, 1}, /* strides, dilation, uneven padding */
        {1, 70, 5, 5, 64, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1},  /* K = 70: zero-point codes to K4 */
        {3, 2, 20, 20, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 2, 1}, /* chunks of positions, dilated along W */
        {5, 3, 18, 18, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},  /* 10 chunks: more than slots */
        {1, 6, 14, 14, 16, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1}, /* lenet's second */
        {2, 1, 8, 8, 6, 5, 5, 2, 2, 3, 3, 3, 3, 1, 1, 1},    /* padding wider than a stride */
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) test_conv_i8_case(&cases[i]);
}

/* mr_conv2d_q_mt (serial) with w stored as each type: the same values, bit for bit, as
 * mr_conv2d_f32 on the dequantized weights (the same sums in the same order; narrow
 * weights only change where they are widened). y: c's output by mr_conv2d_f32 on w. */
static void test_conv_q(const conv_cfg *c, const float *x, const float *w, const float *y, int64_t OH, int64_t OW,
                        const char *name)
{
    const int64_t nw = c->O * (c->C / c->groups) * c->KH * c->KW, ny = c->N * c->O * OH * OW;
    float *wd = (float *)xmalloc(sizeof(float) * (size_t)(nw + 1));
    float *yf = nan_floats(ny + 1), *yq = nan_floats(ny + 1);
    int type;
    for (type = MR_F32; type <= MR_Q8_0; ++type) {
        unsigned char *wq = quantize(type, w, nw);
        int ok;
        mr_dequantize(type, wq, nw, wd);
        mr_conv2d_f32(x, wd, yf, c->N, c->C, c->H, c->W, c->O, c->KH, c->KW, OH, OW, c->sh, c->sw, c->pt, c->pl,
                      c->dh, c->dw, c->groups);
        mr_conv2d_q_mt(NULL, x, wq, type, yq, c->N, c->C, c->H, c->W, c->O, c->KH, c->KW, OH, OW, c->sh, c->sw, c->pt,
                       c->pl, c->dh, c->dw, c->groups, NULL);
        ok = memcmp(yf, yq, sizeof(float) * (size_t)(ny + 1)) == 0;
        /* f32 is mr_conv2d_f32 itself */
        ok = ok && (type != MR_F32 || memcmp(yq, y, sizeof(float) * (size_t)ny) == 0);
        if (!ok) printf("FAIL %s: mr_conv2d_q_mt %s differs from mr_conv2d_f32 on the dequantized weights\n", name,
                        type_names[type]);
        record(ok);
        free(wq);
    }
    free(wd); free(yf); free(yq);
}

static void test_conv_case(const conv_cfg *c)
{
    const int64_t OH = out_len(c->H, c->KH, c->sh, c->pt, c->pb, c->dh);
    const int64_t OW = out_len(c->W, c->KW, c->sw, c->pl, c->pr, c->dw);
    const int64_t Cg = c->C / c->groups;
    const int64_t ny = c->N * c->O * OH * OW;
    float *x = rand_floats(c->N * c->C * c->H * c->W);
    float *w = rand_floats(c->O * Cg * c->KH * c->KW);
    float *y = nan_floats(ny + 1);
    double *ref = (double *)xmalloc(sizeof(double) * (size_t)(ny + 1));
    double *mag = (double *)xmalloc(sizeof(double) * (size_t)(ny + 1));
    char name[256];
    int ok;
    conv_reference(c, OH, OW, x, w, ref, mag);
    mr_conv2d_f32(x, w, y, c->N, c->C, c->H, c->W, c->O, c->KH, c->KW, OH, OW, c->sh, c->sw,
                  c->pt, c->pl, c->dh, c->dw, c->groups);
    snprintf(name, sizeof name,
             "conv2d N=%lld C=%lld H=%lld W=%lld O=%lld K=%lldx%lld out=%lldx%lld s=%lld,%lld "
             "pad=%lld,%lld,%lld,%lld dil=%lld,%lld groups=%lld",
             (long long)c->N, (long long)c->C, (long long)c->H, (long long)c->W,
             (long long)c->O, (long long)c->KH, (long long)c->KW, (long long)OH,
             (long long)OW, (long long)c->sh, (long long)c->sw, (long long)c->pt,
             (long long)c->pl, (long long)c->pb, (long long)c->pr, (long long)c->dh,
             (long long)c->dw, (long long)c->groups);
    ok = compare(name, y, ref, mag, ny, 0);
    if (ok && !isnan(y[ny])) {
        printf("FAIL %s: wrote past the end of y\n", name);
        ok = 0;
    }
    record(ok);
    test_conv_q(c, x, w, y, OH, OW, name);
    free(x); free(w); free(y); free(ref); free(mag);
}

/* mr_conv2d_winograd_f32 on a 3x3 convolution of N images of C x H x W into O channels,
 * padded by pt, pl, pb, pr, its weights transformed by mr_winograd_weights_f32. The
 * transforms add up terms of both signs scaled by up to 8, so the bound is four times
 * the magnitude's (the errors seen stay within a quarter of that). */
static void test_winograd_case(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t pt, int64_t pl,
                               int64_t pb, int64_t pr)
{
    const conv_cfg c = {N, C, H, W, O, 3, 3, 1, 1, pt, pl, pb, pr, 1, 1, 1};
    const int64_t OH = H + pt + pb - 2, OW = W + pl + pr - 2, ny = N * O * OH * OW;
    const int64_t ns = MR_WINOGRAD_SCRATCH(N, C, O, OH, OW);
    float *x = rand_floats(N * C * H * W), *w = rand_floats(O * C * 9), *u = rand_floats(36 * O * C);
    float *y = nan_floats(ny + 1), *scratch = nan_floats(ns + 1);
    double *ref = (double *)xmalloc(sizeof(double) * (size_t)(ny + 1));
    double *mag = (double *)xmalloc(sizeof(double) * (size_t)(ny + 1));
    int64_t k;
    char name[160];
    int ok;
    mr_winograd_weights_f32(w, u, O, C);
    conv_reference(&c, OH, OW, x, w, ref, mag);
    for (k = 0; k < ny; ++k) mag[k] *= 4.0;
    mr_conv2d_winograd_f32(x, u, y, N, C, H, W, O, OH, OW, pt, pl, scratch);
    snprintf(name, sizeof name, "conv2d_winograd N=%lld C=%lld H=%lld W=%lld O=%lld pad=%lld,%lld,%lld,%lld",
             (long long)N, (long long)C, (long long)H, (long long)W, (long long)O, (long long)pt, (long long)pl,
             (long long)pb, (long long)pr);
    ok = compare(name, y, ref, mag, ny, 0);
    if (ok && (!isnan(y[ny]) || !isnan(scratch[ns]))) {
        printf("FAIL %s: wrote past the end of y or the scratch\n", name);
        ok = 0;
    }
    record(ok);
    /* u stored as each type: mr_conv2d_winograd_f32 on the dequantized u, up to the
     * order of the sums (a few output channels take a different GEMM in f32) */
    {
        float *ud = (float *)xmalloc(sizeof(float) * (size_t)(36 * O * C)), *yq = nan_floats(ny + 1);
        double *yd = (double *)xmalloc(sizeof(double) * (size_t)(ny + 1));
        int type;
        for (type = MR_F32; type <= MR_Q8_0; ++type) {
            unsigned char *uq = quantize(type, u, 36 * O * C);
            char qname[200];
            mr_dequantize(type, uq, 36 * O * C, ud);
            mr_conv2d_winograd_f32(x, ud, y, N, C, H, W, O, OH, OW, pt, pl, scratch);
            for (k = 0; k < ny; ++k) yd[k] = (double)y[k];
            mr_conv2d_winograd_q_mt(NULL, x, uq, type, yq, N, C, H, W, O, OH, OW, pt, pl, scratch, NULL);
            snprintf(qname, sizeof qname, "%s winograd_q %s", name, type_names[type]);
            ok = compare(qname, yq, yd, mag, ny, 0);
            if (ok && (!isnan(yq[ny]) || !isnan(scratch[ns]))) {
                printf("FAIL %s: wrote past the end of y or the scratch\n", qname);
                ok = 0;
            }
            record(ok);
            free(uq);
        }
        free(ud); free(yq); free(yd);
    }
    free(x); free(w); free(u); free(y); free(scratch); free(ref); free(mag);
}

static void test_winograd(void)
{
    test_winograd_case(1, 1, 6, 6, 1, 0, 0, 0, 0);      /* one tile */
    test_winograd_case(1, 1, 3, 3, 1, 0, 0, 0, 0);      /* one output of one tile */
    test_winograd_case(2, 3, 10, 18, 5, 0, 0, 0, 0);    /* 8 tiles < MR_PANEL, odd channel counts */
    test_winograd_case(1, 16, 34, 34, 64, 0, 0, 0, 0);  /* 64 tiles: whole blocks of whole tile rows */
    test_winograd_case(1, 7, 10, 162, 9, 0, 0, 0, 0);   /* tile rows of 40: blocks split rows */
    test_winograd_case(3, 33, 14, 10, 17, 0, 0, 0, 0);  /* tiles sticking out of a 12x8 output */
    test_winograd_case(2, 16, 32, 32, 16, 1, 1, 1, 1);  /* "same" padding */
    test_winograd_case(1, 5, 7, 9, 3, 2, 0, 1, 1);      /* uneven padding, odd sizes */
    test_winograd_case(1, 2, 1, 3, 2, 2, 1, 1, 2);      /* an input smaller than its padding */
    test_winograd_case(5, 4, 9, 9, 4, 0, 0, 0, 0);      /* runs that end at images' ends */
    test_winograd_case(70, 4, 6, 6, 4, 0, 0, 0, 0);     /* more blocks than MR_WINOGRAD_SLOTS */
}

static void test_conv(void)
{
    static const conv_cfg fixed[] = {
        /* N  C   H   W   O  KH KW sh sw pt pl pb pr dh dw g */
        {1, 3, 7, 7, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},     /* same-padded 3x3 */
        {2, 3, 17, 33, 16, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1, 1},  /* strided */
        {1, 33, 9, 11, 17, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},  /* K = 297 > KC */
        {1, 5, 13, 13, 7, 3, 5, 1, 2, 2, 3, 2, 1, 2, 3, 1},   /* dilation + padding */
        {2, 16, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 16},  /* depthwise (direct) */
        {1, 8, 7, 7, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2},    /* groups = 2, Og = 8 */
        {1, 6, 7, 5, 12, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 3},    /* groups = 3, Og = 4 */
        {1, 6, 7, 5, 9, 2, 2, 1, 1, 0, 0, 0, 0, 1, 1, 3},     /* groups = 3, Og = 3 */
        {2, 7, 17, 17, 33, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1},  /* pointwise fast path */
        {1, 7, 17, 17, 33, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1},  /* 1x1 stride 2 */
        {1, 4, 5, 6, 5, 1, 1, 1, 1, 1, 0, 1, 0, 1, 1, 1},     /* 1x1 with padding */
        {1, 4, 5, 6, 5, 1, 1, 1, 1, 0, 0, 2, 1, 1, 1, 1},     /* 1x1, bottom/right pad */
        {2, 3, 1, 33, 8, 1, 5, 1, 1, 0, 2, 0, 2, 1, 1, 1},    /* 1-d conv */
        {1, 4, 1, 100, 6, 1, 7, 1, 3, 0, 3, 0, 0, 1, 2, 2},   /* 1-d strided dilated groups */
        {1, 2, 3, 3, 4, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 1},     /* kernel larger than input */
        {1, 2, 4, 4, 5, 2, 2, 1, 1, 5, 5, 5, 5, 1, 1, 1},     /* padding wider than kernel */
        {1, 3, 20, 20, 8, 7, 7, 3, 3, 3, 3, 3, 3, 1, 1, 1},   /* 7x7 stride 3 */
        {1, 16, 16, 16, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, /* P = 256 > NC */
        {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1},     /* scalar */
        {3, 1, 2, 3, 4, 1, 1, 3, 3, 0, 0, 0, 0, 1, 1, 1},     /* stride > input */
        /* negative bottom/right "padding": the caller's OH/OW stop short of the input */
        {1, 4, 5, 6, 5, 1, 1, 1, 1, 0, 0, -1, -2, 1, 1, 1},   /* 1x1, OW < W */
        {1, 4, 5, 6, 8, 1, 1, 1, 1, 0, 0, 0, -1, 1, 1, 1},    /* 1x1, OW < W, OH == H */
        {2, 3, 9, 8, 5, 3, 3, 2, 1, 1, 1, -2, -3, 1, 1, 1},   /* 3x3 cropped */
        /* stride 1, no padding: B read in place from x over wide columns */
        {1, 3, 30, 34, 64, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1},  /* 3x3 valid, many panels */
        {2, 33, 10, 12, 17, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1}, /* K > KC, a partial row tile */
        {1, 4, 12, 14, 9, 3, 2, 1, 1, 0, 0, 0, 0, 2, 3, 1},   /* dilated */
        {1, 6, 12, 12, 16, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 2},  /* groups = 2, Og = 8 */
        /* K > KC with rows one panel and a part wide (row mode): a part row added in place */
        {1, 32, 16, 16, 7, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1},  /* NR 16: rows of 14 */
        {1, 32, 32, 32, 7, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1},  /* NR 32: rows of 30 */
        {1, 3, 12, 40, 8, 3, 3, 1, 1, 0, 0, -2, -3, 1, 1, 1}, /* cropped: OW < W - 2 */
        {2, 3, 1, 70, 8, 1, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1},    /* 1-d */
        {1, 2, 5, 5, 8, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1},     /* one output position */
        /* few channels on narrow rows: channels in vector lanes (mr_conv2d_lanes), rows
         * in tiles of every width up to a whole row (AVX-512 14, AVX2 and NEON 6) */
        {2, 6, 14, 14, 16, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1},  /* lenet's second */
        {1, 3, 6, 18, 16, 3, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1},   /* rows of 14, one tile */
        {1, 2, 16, 17, 8, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1},   /* Og 8, rows of 15 */
        {1, 5, 8, 12, 4, 1, 4, 1, 1, 0, 0, 0, 0, 1, 1, 1},    /* Og 4, rows of 9 */
        {1, 1, 1, 40, 16, 1, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1},   /* one row of 38 */
        {2, 28, 7, 7, 16, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1},   /* K = 252, one depth block */
        /* for narrow weights: a direct path with Cg*KH*KW = 360 > KC (widened in parts),
         * groups that start inside a q8_0 block (Og*Cg*KH*KW = 45, 150) */
        {1, 40, 6, 7, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},
        {1, 10, 6, 6, 10, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2},
        {1, 12, 8, 9, 18, 1, 5, 1, 1, 0, 0, 0, 0, 1, 1, 3},
    };
    int i;
    for (i = 0; i < (int)(sizeof fixed / sizeof fixed[0]); ++i) test_conv_case(&fixed[i]);
    for (i = 0; i < 300; ++i) {
        conv_cfg c;
        static const int64_t cgs[] = {1, 2, 3, 5};
        static const int64_t ogs[] = {1, 2, 3, 4, 5, 7, 8, 17};
        c.N = rng_int(1, 2);
        c.groups = rng_int(1, 3);
        c.C = cgs[rng_int(0, 3)] * c.groups;
        c.O = ogs[rng_int(0, 7)] * c.groups;
        c.H = rng_int(1, 12);
        c.W = rng_int(1, 12);
        c.KH = rng_int(1, 4);
        c.KW = rng_int(1, 4);
        c.sh = rng_int(1, 3);
        c.sw = rng_int(1, 3);
        c.dh = rng_int(1, 3);
        c.dw = rng_int(1, 3);
        c.pt = rng_int(0, 3);
        c.pl = rng_int(0, 3);
        c.pb = rng_int(0, 3);
        c.pr = rng_int(0, 3);
        if (rng_int(0, 3) == 0) { /* the in-place path for unpadded stride-1 convolutions */
            c.sh = c.sw = 1;
            c.pt = c.pl = c.pb = c.pr = 0;
        }
        if (out_len(c.H, c.KH, c.sh, c.pt, c.pb, c.dh) < 1 ||
            out_len(c.W, c.KW, c.sw, c.pl, c.pr, c.dw) < 1) {
            --i;
            continue;
        }
        test_conv_case(&c);
    }
}

/* ==================================================================================== */
/* Pooling                                                                              */
/* ==================================================================================== */

typedef struct {
    int64_t N, C, H, W, KH, KW, sh, sw, pt, pl, pb, pr, dh, dw;
} pool_cfg;

static void test_pool_case(const pool_cfg *c, int is_max, int specials)
{
    const int64_t OH = out_len(c->H, c->KH, c->sh, c->pt, c->pb, c->dh);
    const int64_t OW = out_len(c->W, c->KW, c->sw, c->pl, c->pr, c->dw);
    const int64_t nx = c->N * c->C * c->H * c->W, ny = c->N * c->C * OH * OW;
    float *x = rand_floats(nx);
    float *y = nan_floats(ny + 1);
    double *ref = (double *)xmalloc(sizeof(double) * (size_t)(ny + 1));
    double *mag = (double *)xmalloc(sizeof(double) * (size_t)(ny + 1));
    int64_t p, oh, ow, kh, kw, i;
    char name[256];
    int ok;
    if (specials) {
        /* a few NaNs and infinities; max must propagate NaN, avg follows IEEE */
        for (i = 0; i < nx; i += 1 + rng_int(0, 40)) {
            const int64_t kind = rng_int(0, 2);
            x[i] = kind == 0 ? NAN : kind == 1 ? -INFINITY : INFINITY;
        }
    }
    for (p = 0; p < c->N * c->C; ++p) {
        for (oh = 0; oh < OH; ++oh) {
            for (ow = 0; ow < OW; ++ow) {
                double s = 0.0, m = 0.0, mx = -INFINITY;
                for (kh = 0; kh < c->KH; ++kh) {
                    for (kw = 0; kw < c->KW; ++kw) {
                        const int64_t ih = oh * c->sh + kh * c->dh - c->pt;
                        const int64_t iw = ow * c->sw + kw * c->dw - c->pl;
                        double v;
                        if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                        v = (double)x[(p * c->H + ih) * c->W + iw];
                        s += v;
                        m += fabs(v);
                        mx = (isnan(v) || isnan(mx)) ? NAN : (v > mx ? v : mx);
                    }
                }
                ref[(p * OH + oh) * OW + ow] = is_max ? mx : s / (double)(c->KH * c->KW);
                mag[(p * OH + oh) * OW + ow] = m / (double)(c->KH * c->KW);
            }
        }
    }
    mr_pool2d_f32(x, y, c->N, c->C, c->H, c->W, c->KH, c->KW, OH, OW, c->sh, c->sw, c->pt,
                  c->pl, c->dh, c->dw, is_max);
    snprintf(name, sizeof name,
             "pool2d %s%s N=%lld C=%lld H=%lld W=%lld K=%lldx%lld out=%lldx%lld s=%lld,%lld "
             "pad=%lld,%lld,%lld,%lld dil=%lld,%lld",
             is_max ? "max" : "avg", specials ? " (nan/inf)" : "", (long long)c->N,
             (long long)c->C, (long long)c->H, (long long)c->W, (long long)c->KH,
             (long long)c->KW, (long long)OH, (long long)OW, (long long)c->sh,
             (long long)c->sw, (long long)c->pt, (long long)c->pl, (long long)c->pb,
             (long long)c->pr, (long long)c->dh, (long long)c->dw);
    ok = compare(name, y, ref, mag, ny, is_max);
    if (ok && !isnan(y[ny])) {
        printf("FAIL %s: wrote past the end of y\n", name);
        ok = 0;
    }
    record(ok);
    free(x); free(y); free(ref); free(mag);
}

/* Windows wholly inside the padding give -INFINITY for max and 0 for average. */
static void test_pool_all_padding(void)
{
    const float x[4] = {1, 2, 3, 4}; /* [1, 1, 2, 2] */
    float y[9];
    double rmax[9], ravg[9];
    int64_t i;
    /* 2x2 kernel, stride 1, pad 3: output rows/cols 0 and 1 see only padding; row/col 2
     * sees input row/col 0 through kernel tap 1 */
    for (i = 0; i < 9; ++i) {
        rmax[i] = -INFINITY;
        ravg[i] = 0.0;
    }
    rmax[8] = 1.0;
    ravg[8] = 0.25;
    mr_pool2d_f32(x, y, 1, 1, 2, 2, 2, 2, 3, 3, 1, 1, 3, 3, 1, 1, 1);
    record(compare("pool2d max windows wholly in padding", y, rmax, NULL, 9, 1));
    mr_pool2d_f32(x, y, 1, 1, 2, 2, 2, 2, 3, 3, 1, 1, 3, 3, 1, 1, 0);
    record(compare("pool2d avg windows wholly in padding", y, ravg, NULL, 9, 0));
}

static void test_pool(void)
{
    static const pool_cfg fixed[] = {
        /* N  C  H   W  KH KW sh sw pt pl pb pr dh dw */
        {1, 1, 7, 7, 2, 2, 2, 2, 0, 0, 1, 1, 1, 1},
        {2, 3, 17, 33, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},
        {1, 3, 33, 17, 3, 3, 1, 1, 1, 1, 1, 1, 2, 2},
        {1, 2, 13, 13, 5, 3, 3, 2, 2, 1, 2, 1, 1, 3},
        {1, 1, 1, 33, 1, 4, 1, 3, 0, 2, 0, 2, 1, 1},  /* 1-d */
        {1, 2, 5, 5, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1},   /* kernel = input + padding */
        {3, 1, 4, 4, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1},   /* identity */
        {1, 1, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},   /* scalar input */
        {2, 2, 9, 8, 3, 2, 2, 1, 1, 0, -2, -3, 1, 1}, /* OH/OW stop short of the input */
        /* the 2x2, stride-2 path (its vector rows: 8 and 16 outputs at a time, two rows
         * of up to 8 at a time, whole vectors over the next rows, tails) */
        {2, 3, 28, 28, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1},
        {1, 3, 10, 10, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1},
        {1, 1, 9, 4, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1},
        {1, 2, 6, 41, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1},
        {1, 1, 4, 7, 2, 2, 2, 2, 0, 0, 0, -1, 1, 1},
        {1, 2, 2, 70, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1},
    };
    int i, is_max;
    for (is_max = 0; is_max <= 1; ++is_max) {
        for (i = 0; i < (int)(sizeof fixed / sizeof fixed[0]); ++i) {
            test_pool_case(&fixed[i], is_max, 0);
            test_pool_case(&fixed[i], is_max, 1);
        }
    }
    for (i = 0; i < 300; ++i) {
        pool_cfg c;
        c.N = rng_int(1, 2);
        c.C = rng_int(1, 3);
        c.H = rng_int(1, 17);
        c.W = rng_int(1, 17);
        c.KH = rng_int(1, 4);
        c.KW = rng_int(1, 4);
        c.sh = rng_int(1, 3);
        c.sw = rng_int(1, 3);
        c.dh = rng_int(1, 3);
        c.dw = rng_int(1, 3);
        c.pt = rng_int(0, 4);
        c.pl = rng_int(0, 4);
        c.pb = rng_int(0, 4);
        c.pr = rng_int(0, 4);
        if (out_len(c.H, c.KH, c.sh, c.pt, c.pb, c.dh) < 1 ||
            out_len(c.W, c.KW, c.sw, c.pl, c.pr, c.dw) < 1) {
            --i;
            continue;
        }
        test_pool_case(&c, i & 1, (i % 7) == 3);
    }
    test_pool_all_padding();
}

/* ==================================================================================== */
/* Softmax                                                                              */
/* ==================================================================================== */

/* kind: 0 uniform, 1 large offsets (+-1000), 2 some -inf, 3 one NaN per slice, 4 all -inf */
static void test_softmax_case(int64_t outer, int64_t n, int64_t inner, int kind, int in_place)
{
    const int64_t total = outer * n * inner;
    float *x = rand_floats(total + 1), *y = in_place ? x : nan_floats(total + 1);
    double *ref = (double *)xmalloc(sizeof(double) * (size_t)(total + 1));
    int64_t o, k, i;
    char name[160];
    int ok;
    x[total] = 12345.0f; /* guard */
    for (i = 0; i < total; ++i) {
        if (kind == 1) x[i] = x[i] * 30.0f + (i % 2 ? 1000.0f : -1000.0f);
        if (kind == 2 && rng_int(0, 3) == 0) x[i] = -INFINITY;
        if (kind == 4) x[i] = -INFINITY;
    }
    if (kind == 3) {
        for (o = 0; o < outer; ++o) {
            for (i = 0; i < inner; ++i) x[(o * n + rng_int(0, n - 1)) * inner + i] = NAN;
        }
    }
    for (o = 0; o < outer; ++o) {
        for (i = 0; i < inner; ++i) {
            double m = -INFINITY, s = 0.0;
            for (k = 0; k < n; ++k) {
                const double v = x[(o * n + k) * inner + i];
                m = (isnan(v) || isnan(m)) ? NAN : (v > m ? v : m);
            }
            for (k = 0; k < n; ++k) s += exp((double)x[(o * n + k) * inner + i] - m);
            for (k = 0; k < n; ++k) {
                ref[(o * n + k) * inner + i] = exp((double)x[(o * n + k) * inner + i] - m) / s;
            }
        }
    }
    mr_softmax_f32(x, y, outer, n, inner);
    snprintf(name, sizeof name, "softmax outer=%lld n=%lld inner=%lld kind=%d%s",
             (long long)outer, (long long)n, (long long)inner, kind, in_place ? " in-place" : "");
    ok = compare(name, y, ref, NULL, total, 0);
    if (ok && (in_place ? x[total] != 12345.0f : !isnan(y[total]))) {
        printf("FAIL %s: wrote past the end of y\n", name);
        ok = 0;
    }
    record(ok);
    free(x);
    if (!in_place) free(y);
    free(ref);
}

static void test_softmax(void)
{
    static const int64_t outers[] = {1, 3};
    static const int64_t ns[] = {1, 3, 7, 8, 16, 17, 33, 128, 1000};
    static const int64_t inners[] = {1, 3, 17, 64, 65, 130};
    int a, b, c, kind;
    for (a = 0; a < 2; ++a) {
        for (b = 0; b < (int)(sizeof ns / sizeof ns[0]); ++b) {
            for (c = 0; c < 6; ++c) {
                for (kind = 0; kind < 5; ++kind) {
                    if (ns[b] * inners[c] > 20000 && kind > 1) continue;
                    test_softmax_case(outers[a], ns[b], inners[c], kind, (b + c + kind) % 3 == 0);
                }
            }
        }
    }
    test_softmax_case(2, 100000, 1, 0, 0);
    test_softmax_case(0, 5, 5, 0, 0);
}

/* SGD with momentum against the update written out, over two steps; momentum 0
 * leaves the velocity untouched (NULL). */
static void test_sgd(void)
{
    float w[3] = { 1.0f, -2.0f, 0.5f }, v[3] = { 0.0f, 0.0f, 0.0f };
    const float g[3] = { 0.5f, 1.0f, -4.0f };
    const float w1[3] = { 0.95f, -2.1f, 0.9f };       /* w - 0.1 g */
    const float w2[3] = { 0.855f, -2.29f, 1.66f };     /* v = 0.9 g + g; w1 - 0.1 v */
    float p[3] = { 1.0f, -2.0f, 0.5f };
    int ok = 1, i;
    mr_sgd_f32(w, g, v, 3, 0.1f, 0.9f);
    mr_sgd_f32(w, g, v, 3, 0.1f, 0.9f);
    mr_sgd_f32(p, g, NULL, 3, 0.1f, 0.0f);
    for (i = 0; i < 3; ++i) {
        ok &= fabsf(w[i] - w2[i]) < 1e-6f && fabsf(p[i] - w1[i]) < 1e-6f && fabsf(v[i] - 1.9f * g[i]) < 1e-6f;
    }
    if (!ok) {
        printf("FAIL sgd: w = %g %g %g\n", w[0], w[1], w[2]);
    }
    record(ok);
}

int main(void)
{
    const char *isa = test_isa_check(getenv("MR_ISA"), &g_passed, &g_failed);
    if (!isa) return 0;
    if (getenv("MR_INT8")) {
        /* another int8 kernel set (the Makefile's each_int8): its tests alone */
        test_gemm_i8();
        test_gemm_i8_batch();
        test_gemm_i8_empty();
        test_gemm_i8_extreme();
        test_conv_i8();
        printf("variant %s, int8 %s: %d passed, %d failed\n", isa, mr_int8_name(), g_passed, g_failed);
        return g_failed == 0 ? 0 : 1;
    }
    test_gemm();
    test_dequantize();
    test_panels_q();
    test_gemm_i8();
    test_gemm_i8_batch();
    test_gemm_i8_empty();
    test_gemm_i8_extreme();
    test_conv_i8();
    test_conv();
    test_winograd();
    test_pool();
    test_softmax();
    test_sgd();
    printf("variant %s: %d passed, %d failed\n", isa, g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
