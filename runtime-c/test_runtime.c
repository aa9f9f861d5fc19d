/*
 * test_runtime.c -- standalone test program for the runtime's kernels (not part of the
 * runtime; it may use stdio and malloc). Every runtime function is checked against naive
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
        {1, 3, 12, 40, 8, 3, 3, 1, 1, 0, 0, -2, -3, 1, 1, 1}, /* cropped: OW < W - 2 */
        {2, 3, 1, 70, 8, 1, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1},    /* 1-d */
        {1, 2, 5, 5, 8, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1},     /* one output position */
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
    test_gemm();
    test_conv();
    test_winograd();
    test_pool();
    test_softmax();
    test_sgd();
    printf("variant %s: %d passed, %d failed\n", isa, g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
