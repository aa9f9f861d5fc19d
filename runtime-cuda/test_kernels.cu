/* test_kernels.cu -- mithril_cuda.h's kernels against plain CPU references in double.
 *
 * A host program: under MR_CUDA_EMULATE (make -f Makefile.kernels test) it runs the
 * kernels on cuda_emu.h's CPU fibers; built with nvcc it runs them on a GPU. Every
 * kernel is compared with a reference computed here: GEMM and convolution within a
 * relative 1e-5 of the sum of the products' magnitudes (the bound float accumulation
 * keeps to), pooling and softmax within 1e-5 relative (pooling's max is exact), SGD
 * exactly (the same operations, each rounded alone). NaN must meet NaN. Exit status 0
 * when all pass.
 */
#include "mithril_cuda.h"
#include "mr_cublaslt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>
#include <vector>

static int g_failures = 0, g_checks = 0;

#define CUDA_OK(call)                                                                          \
    do {                                                                                       \
        cudaError_t err_ = (call);                                                             \
        if (err_ != cudaSuccess) {                                                             \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
            exit(2);                                                                           \
        }                                                                                      \
    } while (0)

/* Deterministic values in [-1, 1). */
static uint64_t g_rng = 0x243f6a8885a308d3ull;
static float rnd()
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}
static std::vector<float> rnd_vec(size_t n)
{
    std::vector<float> v(n);
    for (auto &x : v) x = rnd();
    return v;
}

/* Device copies. */
template <class T> static T *dev_from(const std::vector<T> &h)
{
    T *d = NULL;
    CUDA_OK(cudaMalloc((void **)&d, (h.empty() ? 1 : h.size()) * sizeof(T)));
    if (!h.empty()) CUDA_OK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <class T> static std::vector<T> host_from(const T *d, size_t n)
{
    std::vector<T> h(n);
    CUDA_OK(cudaDeviceSynchronize());
    if (n) CUDA_OK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

/* got vs ref (with per-element scale: |got - ref| <= tol * scale, scale >= |ref|). */
static bool close_to(double got, double ref, double scale, double tol)
{
    if (ref != ref) return got != got;
    if (got != got) return false;
    if (isinf(ref) || isinf(got)) return got == ref;
    return fabs(got - ref) <= tol * scale;
}

static void report(const char *what, const char *name, size_t bad, size_t n, size_t first, double got, double ref)
{
    ++g_checks;
    if (bad) {
        ++g_failures;
        printf("FAIL %-8s %-44s %zu/%zu wrong; first at %zu: got %.9g want %.9g\n", what, name, bad, n, first, got, ref);
    } else {
        printf("ok   %-8s %s\n", what, name);
    }
}

static void compare(const char *what, const char *name, const std::vector<float> &got, const std::vector<double> &ref,
                    const std::vector<double> &scale, double tol)
{
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double sc = scale.empty() ? fabs(ref[i]) : (scale[i] > fabs(ref[i]) ? scale[i] : fabs(ref[i]));
        if (!close_to(got[i], ref[i], sc, tol)) {
            if (!bad) first = i;
            ++bad;
        }
    }
    report(what, name, bad, got.size(), first, bad ? got[first] : 0, bad ? ref[first] : 0);
}

/* The plan the exact cases run: the library's own for this device (g_tile < 0), or tile
 * g_tile with K in g_split slices, forced. Split-K's partial sums go to g_scratch. */
static int g_tile = -1;
static int64_t g_split = 1;
static mr_scratch g_scratch = {NULL, 0};

template <class Ep>
static cudaError_t sgemm_exact(cudaStream_t s, int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs,
                               int64_t a_cs, const float *b, int64_t b_rs, int64_t b_cs, float *c, int64_t c_rs,
                               int64_t c_cs, const mr_batch *batch, Ep ep)
{
    if (g_tile < 0) return mr_cuda_sgemm(s, m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, c_cs, batch, g_scratch, ep);
    mr_plan pl = mr_plan_empty(m, n, k, mr_batch_count(batch));
    mr_plan_set_tile(&pl, g_tile, g_split);
    return mr_cuda_sgemm_planned(s, pl, m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, c_cs, batch, g_scratch.p, ep);
}

template <class Ep>
static cudaError_t conv2d_exact(cudaStream_t s, const float *x, const float *w, float *out, int64_t n, int64_t c, int64_t h,
                                int64_t wd, int64_t o, int64_t kh, int64_t kw, int64_t oh, int64_t ow, int64_t sh,
                                int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups, Ep ep)
{
    if (g_tile < 0)
        return mr_cuda_conv2d(s, x, w, out, n, c, h, wd, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, groups, g_scratch, ep);
    mr_plan pl = mr_plan_conv(n, c, h, wd, o, kh, kw, oh, ow, sh, sw, ph, pw, groups, 0, 1, MR_PLAN_ALL, 0);
    if (pl.kind == MR_PLAN_TILED) mr_plan_set_tile(&pl, g_tile, g_split);
    return mr_cuda_conv2d_planned(s, pl, x, w, out, n, c, h, wd, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, groups,
                                  g_scratch.p, ep);
}

/* ------------------------------------------------------------------------------------ */
/* Reduced precision (the tensor-core paths)                                            */
/* ------------------------------------------------------------------------------------ */

/* Which path a case runs: EXACT calls mr_cuda_sgemm / mr_cuda_conv2d; MR_F32 .. MR_F16
 * call the _tc functions with that precision. */
#define EXACT (-1)
/* The _tc functions take the precision as a template argument (a model's is fixed when it
 * is compiled); the cases choose it at run time: f(P) with P its std::integral_constant. */
template <class F> static cudaError_t with_precision(mr_precision prec, F f)
{
    switch (prec) {
    case MR_TF32: return f(std::integral_constant<mr_precision, MR_TF32>());
    case MR_BF16: return f(std::integral_constant<mr_precision, MR_BF16>());
    case MR_F16: return f(std::integral_constant<mr_precision, MR_F16>());
    default: return f(std::integral_constant<mr_precision, MR_F32>());
    }
}
template <class... Args> static cudaError_t sgemm_tc(mr_precision prec, cudaStream_t s, Args... args)
{
    return with_precision(prec, [&](auto P) { return mr_cuda_sgemm_tc<decltype(P)::value>(s, args...); });
}
template <class... Args> static cudaError_t conv2d_tc(mr_precision prec, cudaStream_t s, Args... args)
{
    return with_precision(prec, [&](auto P) { return mr_cuda_conv2d_tc<decltype(P)::value>(s, args...); });
}
static const char *prec_name(int prec)
{
    static char forced[64];
    if (prec == EXACT && g_tile >= 0) {
        const mr_tile_shape t = mr_tile_shape_of(g_tile);
        snprintf(forced, sizeof forced, "[%dx%d split %lld] ", t.bm, t.bn, (long long)g_split);
        return forced;
    }
    return prec == MR_TF32 ? "tf32 " : prec == MR_BF16 ? "bf16 " : prec == MR_F16 ? "f16 " : prec == MR_F32 ? "f32tc " : "";
}

/* v rounded to the precision's format, computed independently of the kernels' bit tricks:
 * TF32 10 mantissa bits, ties away (cvt.rna); BF16 7 bits, F16 10 bits (exponents down to
 * -14, then subnormal steps of 2^-24, overflow past 65504 to inf), ties to even. */
static double round_fmt(float v, int prec)
{
    if (prec <= MR_F32 || v == 0 || !isfinite(v)) return v;
    const int mant = prec == MR_BF16 ? 7 : 10, emin = prec == MR_F16 ? -14 : -126;
    int e;
    frexp((double)v, &e);
    const int lead = e - 1 < emin ? emin : e - 1;
    const double q = ldexp(1.0, lead - mant), r = (double)v / q;
    const double res = (prec == MR_TF32 ? round(r) : nearbyint(r)) * q;
    return prec == MR_F16 && fabs(res) > 65504.0 ? copysign(INFINITY, (double)v) : res;
}

/* The unit roundoff of each format: TF32 and F16 2^-11, BF16 2^-8. */
static double unit_roundoff(int prec) { return prec == MR_BF16 ? ldexp(1.0, -8) : ldexp(1.0, -11); }

/*
 * The checks of one reduced-precision result (tc: the case is expected on tensor cores):
 *  - "rounded": within 1e-5 of ref_r, the double product of the operands rounded to the
 *    format (round_fmt), relative to the sum of |products| -- f32 accumulation error only;
 *  - "vs f64": within 2u + u^2 + 1e-5 of the exact double ref, relative to the same sum
 *    (u the format's unit roundoff: TF32 and F16 about 2^-10, BF16 about 2^-7); for F16 an
 *    absolute term covers subnormal operands (|error| <= 2^-25 (|a| + |b|) a product);
 *  - "uses TC": some element (k > 0) is off the exact f32 tolerance, 1e-5, so the case
 *    cannot pass by running the exact kernel.
 * Not tc (F32, or a shape that falls back): the exact 1e-5 check.
 */
static void check_reduced(const char *what, const char *name, int prec, bool tc, int64_t k, const std::vector<float> &got,
                          const std::vector<double> &ref, const std::vector<double> &ref_r,
                          const std::vector<double> &scale, const std::vector<double> &opsum)
{
    char nm[220];
    if (!tc) {
        compare(what, name, got, ref, scale, 1e-5);
        return;
    }
    snprintf(nm, sizeof nm, "%s: rounded", name);
    compare(what, nm, got, ref_r, scale, 1e-5);
    const double u = unit_roundoff(prec), tol = 2 * u + u * u + 1e-5;
    std::vector<double> sc(scale);
    if (prec == MR_F16)
        for (size_t i = 0; i < sc.size(); ++i) sc[i] += opsum[i] * ldexp(1.0, -25) / tol;
    snprintf(nm, sizeof nm, "%s: vs f64", name);
    compare(what, nm, got, ref, sc, tol);
    if (k > 0) {
        size_t off = 0;
        for (size_t i = 0; i < got.size(); ++i)
            if (!close_to(got[i], ref[i], scale[i] > fabs(ref[i]) ? scale[i] : fabs(ref[i]), 1e-5)) ++off;
        snprintf(nm, sizeof nm, "%s: uses TC (%zu off f32)", name, off);
        report(what, nm, off ? 0 : 1, got.size(), 0, 0, 0);
    }
}

/* ------------------------------------------------------------------------------------ */
/* GEMM                                                                                 */
/* ------------------------------------------------------------------------------------ */

/* The epilogue of the tests: C = relu(C + bias[j]) (C of batch nb at nb * cb). */
struct ep_bias_relu {
    float *c;
    const float *bias;
    int64_t c_rs, c_cs, cb;
    __device__ void operator()(int64_t nb, int64_t i, int64_t j) const
    {
        float *p = c + nb * cb + i * c_rs + j * c_cs;
        const float v = *p + bias[j];
        *p = v > 0.0f ? v : 0.0f;
    }
};

/*
 * One GEMM case: C = A B for m x k A and k x n B, A transposed in memory if ta (stored
 * k x m), B if tb; c_pad extra columns of C's rows; a batch of `nbatch` products
 * (rank 2: [2, nbatch / 2] when even) with B broadcast when bcast_b; misalign offsets
 * every pointer by one element (no float4 paths); epi: the bias-relu epilogue.
 */
static void test_gemm(int prec, int64_t m, int64_t n, int64_t k, bool ta, bool tb, int64_t nbatch = 1,
                      bool bcast_b = false, bool epi = false, bool misalign = false, int64_t c_pad = 0)
{
    char name[160];
    snprintf(name, sizeof name, "%s%lldx%lldx%lld%s%s%s%s%s%s", prec_name(prec), (long long)m, (long long)n, (long long)k, ta ? " At" : "",
             tb ? " Bt" : "", nbatch > 1 ? " batched" : "", bcast_b ? " bcastB" : "", epi ? " bias+relu" : "",
             misalign ? " misaligned" : "");
    const int64_t off = misalign ? 1 : 0;
    const int64_t sa = m * k, sb = bcast_b ? 0 : k * n, ldc = n + c_pad, sc = m * ldc;
    std::vector<float> A = rnd_vec(off + sa * nbatch), B = rnd_vec(off + (bcast_b ? k * n : sb * nbatch));
    std::vector<float> C(off + sc * nbatch, 12345.0f), bias = rnd_vec(n);
    const int64_t a_rs = ta ? 1 : k, a_cs = ta ? m : 1, b_rs = tb ? 1 : n, b_cs = tb ? k : 1;
    float *dA = dev_from(A), *dB = dev_from(B), *dC = dev_from(C), *dbias = dev_from(bias);
    mr_batch bt;
    memset(&bt, 0, sizeof bt);
    if (nbatch > 1 && nbatch % 2 == 0) {
        bt.rank = 2;
        bt.ext[0] = 2, bt.ext[1] = nbatch / 2;
        bt.a[0] = sa * (nbatch / 2), bt.a[1] = sa;
        bt.b[0] = sb * (nbatch / 2), bt.b[1] = sb;
        bt.c[0] = sc * (nbatch / 2), bt.c[1] = sc;
    } else if (nbatch > 1) {
        bt.rank = 1;
        bt.ext[0] = nbatch, bt.a[0] = sa, bt.b[0] = sb, bt.c[0] = sc;
    }
    const mr_batch *bp = nbatch > 1 ? &bt : NULL;
    const mr_precision mp = (mr_precision)(prec < 0 ? 0 : prec);
    if (epi) {
        ep_bias_relu ep = {dC + off, dbias, ldc, 1, sc};
        if (prec == EXACT)
            CUDA_OK(sgemm_exact(0, m, n, k, dA + off, a_rs, a_cs, dB + off, b_rs, b_cs, dC + off, ldc, 1, bp, ep));
        else
            CUDA_OK(sgemm_tc(mp, 0, m, n, k, dA + off, a_rs, a_cs, dB + off, b_rs, b_cs, dC + off, ldc, 1, bp, g_scratch, ep));
    } else if (prec == EXACT) {
        CUDA_OK(sgemm_exact(0, m, n, k, dA + off, a_rs, a_cs, dB + off, b_rs, b_cs, dC + off, ldc, 1, bp,
                              mr_no_epilogue()));
    } else {
        CUDA_OK(sgemm_tc(mp, 0, m, n, k, dA + off, a_rs, a_cs, dB + off, b_rs, b_cs, dC + off, ldc, 1, bp, g_scratch,
                         mr_no_epilogue()));
    }
    std::vector<float> got = host_from(dC, C.size());
    std::vector<double> ref(C.size()), ref_r(C.size()), scale(C.size(), 0.0), opsum(C.size(), 0.0);
    for (size_t i = 0; i < C.size(); ++i) ref[i] = ref_r[i] = C[i]; /* padding and the offset untouched */
    std::vector<double> Ar(A.size()), Br(B.size());
    for (size_t i = 0; i < A.size(); ++i) Ar[i] = round_fmt(A[i], prec);
    for (size_t i = 0; i < B.size(); ++i) Br[i] = round_fmt(B[i], prec);
    for (int64_t nb = 0; nb < nbatch; ++nb) {
        const float *a = A.data() + off + nb * sa, *b = B.data() + off + nb * sb;
        const double *ar = Ar.data() + off + nb * sa, *br = Br.data() + off + nb * sb;
        for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
                double s = 0, s_abs = 0, sr = 0, ops = 0;
                for (int64_t kk = 0; kk < k; ++kk) {
                    const double p = (double)a[i * a_rs + kk * a_cs] * b[kk * b_rs + j * b_cs];
                    s += p;
                    s_abs += fabs(p);
                    sr += ar[i * a_rs + kk * a_cs] * br[kk * b_rs + j * b_cs];
                    ops += fabs(a[i * a_rs + kk * a_cs]) + fabs(b[kk * b_rs + j * b_cs]);
                }
                if (epi) {
                    s = s + bias[j] > 0 ? s + bias[j] : 0, s_abs += fabs(bias[j]);
                    sr = sr + bias[j] > 0 ? sr + bias[j] : 0;
                }
                const int64_t at = off + nb * sc + i * ldc + j;
                ref[at] = s, scale[at] = s_abs, ref_r[at] = sr, opsum[at] = ops;
            }
        }
    }
    check_reduced("gemm", name, prec, prec > MR_F32 && m > MR_GEMV_MAX_M, k, got, ref, ref_r, scale, opsum);
    cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(dbias);
}

/* Views with no unit stride anywhere (every other column of A, every third of B, C
 * written to every other element): the general-stride loads and stores. */
static void test_gemm_views(int prec, int64_t m, int64_t n, int64_t k)
{
    char name[160];
    snprintf(name, sizeof name, "%s%lldx%lldx%lld strided views", prec_name(prec), (long long)m, (long long)n,
             (long long)k);
    const int64_t a_rs = 2 * k + 1, a_cs = 2, b_rs = 3 * n, b_cs = 3, c_rs = 2 * n, c_cs = 2;
    std::vector<float> A = rnd_vec(m * a_rs), B = rnd_vec(k * b_rs), C(m * c_rs, 9.0f);
    float *dA = dev_from(A), *dB = dev_from(B), *dC = dev_from(C);
    if (prec == EXACT)
        CUDA_OK(sgemm_exact(0, m, n, k, dA, a_rs, a_cs, dB, b_rs, b_cs, dC, c_rs, c_cs, NULL, mr_no_epilogue()));
    else
        CUDA_OK(sgemm_tc((mr_precision)prec, 0, m, n, k, dA, a_rs, a_cs, dB, b_rs, b_cs, dC, c_rs, c_cs, nullptr, g_scratch,
                         mr_no_epilogue()));
    std::vector<float> got = host_from(dC, C.size());
    std::vector<double> ref(C.begin(), C.end()), ref_r(C.begin(), C.end()), scale(C.size(), 0.0), opsum(C.size(), 0.0);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double s = 0, s_abs = 0, sr = 0, ops = 0;
            for (int64_t kk = 0; kk < k; ++kk) {
                const float x = A[i * a_rs + kk * a_cs], y = B[kk * b_rs + j * b_cs];
                const double p = (double)x * y;
                s += p, s_abs += fabs(p), sr += round_fmt(x, prec) * round_fmt(y, prec), ops += fabs(x) + fabs(y);
            }
            const int64_t at = i * c_rs + j * c_cs;
            ref[at] = s, scale[at] = s_abs, ref_r[at] = sr, opsum[at] = ops;
        }
    check_reduced("gemm", name, prec, prec > MR_F32 && m > MR_GEMV_MAX_M, k, got, ref, ref_r, scale, opsum);
    cudaFree(dA), cudaFree(dB), cudaFree(dC);
}

static void test_gemms(int P)
{
    test_gemm(P, 1, 1, 1, false, false);
    test_gemm(P, 1, 37, 50, false, false);              /* gemv, warp a column */
    test_gemm(P, 1, 37, 50, false, true);               /* gemv, B k-contiguous */
    test_gemm(P, 3, 5000, 9, false, false);             /* gemv, thread a column */
    test_gemm(P, 4, 300, 70, true, false, 1, false, true);
    test_gemm(P, 5, 9, 3, false, false);                /* just past the gemv limit */
    test_gemm(P, 65, 33, 17, false, false);
    test_gemm(P, 128, 128, 64, false, false);
    test_gemm(P, 128, 128, 64, true, true);
    test_gemm(P, 130, 70, 0, false, false);             /* k = 0: zeros */
    test_gemm(P, 130, 70, 0, false, false, 1, false, true);
    test_gemm(P, 129, 65, 33, false, false);            /* one past the tiles everywhere */
    test_gemm(P, 200, 100, 37, true, false);
    test_gemm(P, 200, 100, 37, false, true);
    test_gemm(P, 77, 91, 45, true, true, 1, false, false, false, 3);
    test_gemm(P, 96, 60, 40, false, false, 1, false, false, true); /* no float4: misaligned */
    test_gemm(P, 64, 64, 64, false, false, 1, false, true, false, 5);
    test_gemm(P, 33, 40, 20, false, false, 6, true, true);   /* batched [2, 3], B broadcast */
    test_gemm(P, 2, 40, 20, false, true, 3, false, false);   /* batched gemv */
    test_gemm(P, 140, 20, 24, false, false, 4, false, false);
    test_gemm(P, 300, 260, 150, false, false);          /* several tiles in every direction */
    test_gemm(P, 300, 260, 150, true, true, 1, false, true);
    test_gemm(P, 200, 7, 1, false, false);              /* k = 1 */
    test_gemm_views(P, 150, 70, 40);
    test_gemm_views(P, 3, 70, 40);
}

/* ------------------------------------------------------------------------------------ */
/* Convolution                                                                          */
/* ------------------------------------------------------------------------------------ */

struct ep_conv_bias_relu {
    float *out;
    const float *bias;
    int64_t o, ohw;
    __device__ void operator()(int64_t b, int64_t oc, int64_t pos) const
    {
        float *p = out + (b * o + oc) * ohw + pos;
        const float v = *p + bias[oc];
        *p = v > 0.0f ? v : 0.0f;
    }
};

static void test_conv(int prec, const char *label, int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t kh, int64_t kw,
                      int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t g, bool epi)
{
    char name[160];
    const int64_t oh = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1, ow = (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
    snprintf(name, sizeof name, "%s%s n%lld c%lld %lldx%lld o%lld k%lldx%lld g%lld%s", prec_name(prec), label, (long long)n, (long long)c,
             (long long)h, (long long)w, (long long)o, (long long)kh, (long long)kw, (long long)g, epi ? " bias+relu" : "");
    const int64_t cg = c / g, M = o / g;
    std::vector<float> X = rnd_vec(n * c * h * w), W = rnd_vec(o * cg * kh * kw), bias = rnd_vec(o);
    std::vector<float> Y(n * o * oh * ow, 777.0f);
    float *dX = dev_from(X), *dW = dev_from(W), *dY = dev_from(Y), *dbias = dev_from(bias);
    const mr_precision mp = (mr_precision)(prec < 0 ? 0 : prec);
    if (epi) {
        ep_conv_bias_relu ep = {dY, dbias, o, oh * ow};
        if (prec == EXACT)
            CUDA_OK(conv2d_exact(0, dX, dW, dY, n, c, h, w, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, g, ep));
        else
            CUDA_OK(conv2d_tc(mp, 0, dX, dW, dY, n, c, h, w, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, g, g_scratch, ep));
    } else if (prec == EXACT) {
        CUDA_OK(conv2d_exact(0, dX, dW, dY, n, c, h, w, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, g, mr_no_epilogue()));
    } else {
        CUDA_OK(conv2d_tc(mp, 0, dX, dW, dY, n, c, h, w, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, g, g_scratch,
                          mr_no_epilogue()));
    }
    std::vector<float> got = host_from(dY, Y.size());
    std::vector<double> ref(Y.size()), scale(Y.size()), ref_r(Y.size()), opsum(Y.size());
    for (int64_t b = 0; b < n; ++b)
        for (int64_t oc = 0; oc < o; ++oc)
            for (int64_t y = 0; y < oh; ++y)
                for (int64_t x = 0; x < ow; ++x) {
                    double s = 0, s_abs = 0, sr = 0, ops = 0;
                    const int64_t gi = oc / M;
                    for (int64_t ic = 0; ic < cg; ++ic)
                        for (int64_t ky = 0; ky < kh; ++ky)
                            for (int64_t kx = 0; kx < kw; ++kx) {
                                const int64_t iy = y * sh + ky * dh - ph, ix = x * sw + kx * dw - pw;
                                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                                const float xv = X[((b * c + gi * cg + ic) * h + iy) * w + ix],
                                            wv = W[((oc * cg + ic) * kh + ky) * kw + kx];
                                const double p = (double)xv * wv;
                                s += p;
                                s_abs += fabs(p);
                                sr += round_fmt(xv, prec) * round_fmt(wv, prec);
                                ops += fabs(xv) + fabs(wv);
                            }
                    if (epi) {
                        s = s + bias[oc] > 0 ? s + bias[oc] : 0, s_abs += fabs(bias[oc]);
                        sr = sr + bias[oc] > 0 ? sr + bias[oc] : 0;
                    }
                    const int64_t at = ((b * o + oc) * oh + y) * ow + x;
                    ref[at] = s, scale[at] = s_abs, ref_r[at] = sr, opsum[at] = ops;
                }
    check_reduced("conv2d", name, prec, prec > MR_F32 && M > MR_CONV_DIRECT_MAX_M, cg * kh * kw, got, ref, ref_r, scale,
                  opsum);
    cudaFree(dX), cudaFree(dW), cudaFree(dY), cudaFree(dbias);
}

static void test_convs(int P)
{
    /*        label        n  c   h   w   o  kh kw sh sw ph pw dh dw  g  epi */
    test_conv(P, "1x1", 2, 8, 5, 6, 12, 1, 1, 1, 1, 0, 0, 1, 1, 1, false);
    test_conv(P, "1x1", 2, 8, 5, 6, 12, 1, 1, 1, 1, 0, 0, 1, 1, 1, true);
    test_conv(P, "1x1 s2", 2, 8, 7, 6, 12, 1, 1, 2, 2, 0, 0, 1, 1, 1, false);
    test_conv(P, "3x3 p1", 2, 3, 9, 7, 10, 3, 3, 1, 1, 1, 1, 1, 1, 1, false);
    test_conv(P, "3x3 p1", 2, 16, 16, 16, 140, 3, 3, 1, 1, 1, 1, 1, 1, 1, true);
    test_conv(P, "3x3 s2", 1, 4, 11, 10, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1, false);
    test_conv(P, "3x3 d2", 1, 5, 12, 12, 6, 3, 3, 1, 1, 2, 2, 2, 2, 1, false);
    test_conv(P, "5x3 mixed", 2, 3, 13, 9, 7, 5, 3, 2, 1, 2, 0, 1, 2, 1, false);
    test_conv(P, "groups", 1, 6, 8, 8, 10, 3, 3, 1, 1, 1, 1, 1, 1, 2, false);
    test_conv(P, "groups", 2, 8, 6, 6, 16, 3, 3, 1, 1, 1, 1, 1, 1, 2, true);
    test_conv(P, "depthwise", 2, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8, false);
    test_conv(P, "depthwise", 1, 6, 9, 9, 6, 3, 3, 2, 2, 1, 1, 1, 1, 6, true);
    test_conv(P, "mult2", 1, 4, 7, 7, 8, 3, 3, 1, 1, 1, 1, 1, 1, 4, false);
    test_conv(P, "1-d", 2, 4, 1, 30, 6, 1, 5, 1, 1, 0, 2, 1, 1, 1, false);
    test_conv(P, "1-d", 1, 4, 1, 30, 6, 1, 3, 1, 2, 0, 1, 1, 1, 1, true);
}

/* ------------------------------------------------------------------------------------ */
/* Pooling                                                                              */
/* ------------------------------------------------------------------------------------ */

static void test_pool(const char *label, int64_t planes, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh,
                      int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int is_max, int nans)
{
    char name[160];
    const int64_t oh = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1, ow = (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
    snprintf(name, sizeof name, "%s %s %lldx%lld k%lldx%lld s%lld p%lld%s", is_max ? "max" : "avg", label,
             (long long)h, (long long)w, (long long)kh, (long long)kw, (long long)sh, (long long)ph,
             nans ? " NaN" : "");
    std::vector<float> X = rnd_vec(planes * h * w), Y(planes * oh * ow, 5.0f);
    for (int i = 0; i < nans; ++i) X[(size_t)(i * 7919) % X.size()] = NAN;
    float *dX = dev_from(X), *dY = dev_from(Y);
    CUDA_OK(mr_cuda_pool2d(0, dX, dY, planes, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, is_max));
    std::vector<float> got = host_from(dY, Y.size());
    std::vector<double> ref(Y.size());
    for (int64_t pl = 0; pl < planes; ++pl)
        for (int64_t y = 0; y < oh; ++y)
            for (int64_t x = 0; x < ow; ++x) {
                double acc = is_max ? -INFINITY : 0.0;
                bool nan = false;
                for (int64_t ky = 0; ky < kh; ++ky)
                    for (int64_t kx = 0; kx < kw; ++kx) {
                        const int64_t iy = y * sh + ky * dh - ph, ix = x * sw + kx * dw - pw;
                        if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                        const double v = X[(pl * h + iy) * w + ix];
                        if (v != v) nan = true;
                        acc = is_max ? (v > acc ? v : acc) : acc + v;
                    }
                ref[(pl * oh + y) * ow + x] = nan ? NAN : (is_max ? acc : acc / (double)(kh * kw));
            }
    compare("pool2d", name, got, ref, std::vector<double>(), 1e-5);
    cudaFree(dX), cudaFree(dY);
}

static void test_pools()
{
    for (int is_max = 1; is_max >= 0; --is_max) {
        test_pool("2x2", 6, 8, 10, 2, 2, 2, 2, 0, 0, 1, 1, is_max, 0);
        test_pool("3x3 pad", 5, 9, 7, 3, 3, 2, 2, 1, 1, 1, 1, is_max, 0);
        test_pool("3x3 s1", 3, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, is_max, 3);
        test_pool("dilated", 2, 10, 11, 2, 3, 1, 2, 1, 0, 2, 2, is_max, 0);
        test_pool("all-pad", 2, 3, 3, 2, 2, 3, 3, 2, 2, 1, 1, is_max, 0); /* corner windows lie in padding */
        test_pool("global", 4, 7, 7, 7, 7, 1, 1, 0, 0, 1, 1, is_max, 1);
    }
}

/* ------------------------------------------------------------------------------------ */
/* Softmax                                                                              */
/* ------------------------------------------------------------------------------------ */

/* special: 0 none, 1 some -inf entries (and one all -inf row), 2 a NaN in one row */
static void test_softmax(int64_t outer, int64_t n, int64_t inner, int special, bool in_place = false)
{
    char name[160];
    snprintf(name, sizeof name, "[%lld, %lld, %lld]%s%s", (long long)outer, (long long)n, (long long)inner,
             special == 1 ? " -inf" : special == 2 ? " NaN" : "", in_place ? " in place" : "");
    std::vector<float> X = rnd_vec(outer * n * inner);
    for (auto &v : X) v *= 8.0f;
    if (special == 1) {
        for (size_t i = 0; i < X.size(); i += 3) X[i] = -INFINITY;
        for (int64_t k = 0; k < n; ++k) X[k * inner] = -INFINITY; /* row (0, 0) all -inf: NaN, as runtime-c */
    } else if (special == 2) {
        X[(n / 2) * inner + (inner > 1 ? 1 : 0)] = NAN;
    }
    float *dX = dev_from(X), *dY = in_place ? dX : dev_from(std::vector<float>(X.size(), 3.0f));
    CUDA_OK(mr_cuda_softmax(0, dX, dY, outer, n, inner));
    std::vector<float> got = host_from(dY, X.size());
    std::vector<double> ref(X.size());
    for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
            double m = -INFINITY, s = 0;
            bool nan = false;
            for (int64_t k = 0; k < n; ++k) {
                const double v = X[(o * n + k) * inner + i];
                nan |= v != v;
                m = v > m ? v : m;
            }
            for (int64_t k = 0; k < n; ++k) s += exp(X[(o * n + k) * inner + i] - m);
            for (int64_t k = 0; k < n; ++k) {
                const double v = X[(o * n + k) * inner + i];
                ref[(o * n + k) * inner + i] = (nan || m == -INFINITY) ? NAN : exp(v - m) / s;
            }
        }
    compare("softmax", name, got, ref, std::vector<double>(), 1e-5);
    /* masked entries must be exactly 0 */
    if (special == 1) {
        size_t bad = 0;
        for (size_t i = 0; i < X.size(); ++i)
            if (X[i] == -INFINITY && ref[i] == 0.0 && got[i] != 0.0f) ++bad;
        report("softmax", "  -inf entries exactly 0", bad, X.size(), 0, 0, 0);
    }
    cudaFree(dX);
    if (!in_place) cudaFree(dY);
}

static void test_softmaxes()
{
    test_softmax(3, 10, 1, 0);
    test_softmax(4, 1, 1, 0);
    test_softmax(5, 33, 1, 0);
    test_softmax(2, 300, 1, 0);
    test_softmax(2, 1000, 1, 1);
    test_softmax(2, 1024, 1, 2);
    test_softmax(2, 1500, 1, 0);  /* a block a row */
    test_softmax(2, 3000, 1, 1);
    test_softmax(2, 2049, 1, 2, true);
    test_softmax(2, 7, 5, 0);     /* a thread a column (short) */
    test_softmax(2, 50, 3, 1);    /* a warp a strided row */
    test_softmax(3, 2000, 2, 2);  /* a block a strided row */
    test_softmax(1, 20, 5000, 1); /* a thread a column (many) */
    test_softmax(4, 40, 1, 0, true);
}

/* ------------------------------------------------------------------------------------ */
/* Attention                                                                            */
/* ------------------------------------------------------------------------------------ */

/* The tests' score: p * scale, then mask 0 none, 1 causal (j <= i), 2 anti-causal (j >= i:
 * row i's first i keys masked, whole key tiles for i >= 32; rows i >= n all -inf). */
struct attn_score {
    float scale;
    int mask;
    __device__ float operator()(int64_t, int64_t i, int64_t j, float s) const
    {
        return (mask == 1 && j > i) || (mask == 2 && j < i) ? -INFINITY : s * scale;
    }
};

/* Operand layouts of an attention case. */
enum { ATT_KT = 1, ATT_VIEWS = 2, ATT_BATCH = 4 };

/*
 * One attention case: out = softmax(score(q k)) v for q m x d, k d x n, v n x e. mask < 0
 * calls mr_no_score, else attn_score{0.125, mask}. flags: ATT_KT k given as K (n x d
 * row-major) transposed by strides, else d x n row-major; ATT_VIEWS q and v stored
 * transposed and out's rows padded by 3; ATT_BATCH a [2, 3] batch with k and v broadcast
 * over the second dimension (stride 0). Against a double reference: softmax as
 * exp(x - max) / sum (an all -inf row NaN), within 1e-5 of sum_j p_j |v[j][c]|.
 */
/* The query rows an attention case's blocks take, forced (0: the library's own plan), and
 * the precision of its products (not MR_F32: the tensor-core kernel, forced where the
 * head is at most 64 wide). */
static int g_attn_rows = 0;
static int g_attn_prec = MR_F32;

/* mr_cuda_attention, or with g_attn_rows its planned form with that row tile, or with
 * g_attn_prec the tensor-core one's. *tc: whether the tensor-core kernel ran. */
template <class Sc>
static cudaError_t attention(int64_t m, int64_t n, int64_t d, int64_t e, const float *q, int64_t q_rs, int64_t q_cs,
                             const float *k, int64_t k_rs, int64_t k_cs, const float *v, int64_t v_rs, int64_t v_cs,
                             float *o, int64_t o_rs, int64_t o_cs, const mr_attn_batch *bp, Sc sc, bool *tc)
{
    *tc = false;
    if (!g_attn_rows && g_attn_prec == MR_F32)
        return mr_cuda_attention(0, m, n, d, e, q, q_rs, q_cs, k, k_rs, k_cs, v, v_rs, v_cs, o, o_rs, o_cs, bp, sc);
    int64_t nbatch = 1;
    for (int i = 0; bp && i < bp->rank; ++i) nbatch *= bp->ext[i];
    const unsigned heads = MR_ATTN_D32 | MR_ATTN_D64 | MR_ATTN_D128;
    if (g_attn_prec == MR_F32) {
        const mr_plan pl = mr_plan_attention(m, n, d, e, nbatch, 0, 1, heads | (MR_ATTN_ROWS8 << (g_attn_rows / 16)));
        return mr_cuda_attention_planned(0, pl, m, n, d, e, q, q_rs, q_cs, k, k_rs, k_cs, v, v_rs, v_cs, o, o_rs, o_cs, bp,
                                         sc);
    }
    /* one SM: the tensor-core tile always fills it */
    const mr_plan pl = mr_plan_attention(m, n, d, e, nbatch, 1, 1, heads | MR_ATTN_TC | MR_ATTN_ROWS16);
    *tc = pl.rows == MR_ATTN_TC_ROWS;
    return with_precision((mr_precision)g_attn_prec, [&](auto P) {
        return mr_cuda_attention_planned<MR_ATTN_ALL, decltype(P)::value>(0, pl, m, n, d, e, q, q_rs, q_cs, k, k_rs, k_cs, v,
                                                                          v_rs, v_cs, o, o_rs, o_cs, bp, sc);
    });
}

static void test_attention(int64_t m, int64_t n, int64_t d, int64_t e, int mask, int flags)
{
    char name[160];
    snprintf(name, sizeof name, "%s%s%lldx%lld d%lld e%lld%s%s%s%s", g_attn_prec == MR_F32 ? "" : prec_name(g_attn_prec), g_attn_rows == 8 ? "[8 rows] " : g_attn_rows == 16 ? "[16 rows] " : g_attn_rows == 32 ? "[32 rows] " : "", (long long)m, (long long)n, (long long)d, (long long)e,
             mask < 0 ? "" : mask == 0 ? " scaled" : mask == 1 ? " scaled causal" : " scaled anti-causal",
             flags & ATT_KT ? " Kt" : "", flags & ATT_VIEWS ? " views" : "", flags & ATT_BATCH ? " batch[2,3] bcastKV" : "");
    const bool kt = flags & ATT_KT, views = flags & ATT_VIEWS, batched = flags & ATT_BATCH;
    const int64_t b0 = batched ? 2 : 1, b1 = batched ? 3 : 1, nbatch = b0 * b1;
    const int64_t sq = m * d, sk = d * n, sv = n * e, ldo = e + (views ? 3 : 0), so = m * ldo;
    const int64_t q_rs = views ? 1 : d, q_cs = views ? m : 1, k_rs = kt ? 1 : n, k_cs = kt ? d : 1;
    const int64_t v_rs = views ? 1 : e, v_cs = views ? n : 1;
    std::vector<float> Q = rnd_vec(sq * nbatch), K = rnd_vec(sk * b0), V = rnd_vec(sv * b0);
    for (auto &x : Q) x *= 2.0f; /* scores of a few units */
    std::vector<float> O(so * nbatch, 12345.0f);
    float *dQ = dev_from(Q), *dK = dev_from(K), *dV = dev_from(V), *dO = dev_from(O);
    mr_attn_batch bt;
    memset(&bt, 0, sizeof bt);
    bt.rank = 2, bt.ext[0] = b0, bt.ext[1] = b1;
    bt.q[0] = sq * b1, bt.q[1] = sq, bt.k[0] = sk, bt.k[1] = 0, bt.v[0] = sv, bt.v[1] = 0, bt.o[0] = so * b1, bt.o[1] = so;
    const mr_attn_batch *bp = batched ? &bt : NULL;
    const attn_score sc = {0.125f, mask};
    bool tc;
    if (mask < 0)
        CUDA_OK(attention(m, n, d, e, dQ, q_rs, q_cs, dK, k_rs, k_cs, dV, v_rs, v_cs, dO, ldo, 1, bp, mr_no_score(), &tc));
    else
        CUDA_OK(attention(m, n, d, e, dQ, q_rs, q_cs, dK, k_rs, k_cs, dV, v_rs, v_cs, dO, ldo, 1, bp, sc, &tc));
    std::vector<float> got = host_from(dO, O.size());
    /* On tensor cores the reference takes Q, K and V rounded to the format (round_fmt), as
     * the kernel reads them, and scale (sum_j p_j |v[j][c]|, the bound the exact kernel's
     * 1e-5 of it) widens by the weights' rounding: 2u + u^2 more (u the format's unit
     * roundoff); for F16, weights below 2^-14 lose up to 2^-25 each absolutely. */
    const int fmt = tc ? g_attn_prec : MR_F32;
    const double u = tc ? unit_roundoff(g_attn_prec) : 0, widen = (2 * u + u * u + 1e-5) / 1e-5;
    std::vector<double> ref(O.begin(), O.end()), scale(O.size(), 0.0), s(n);
    for (int64_t nb = 0; nb < nbatch; ++nb) {
        const float *q = &Q[nb * sq], *k = &K[nb / b1 * sk], *v = &V[nb / b1 * sv];
        for (int64_t i = 0; i < m; ++i) {
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < n; ++j) {
                double p = 0;
                for (int64_t c = 0; c < d; ++c) p += round_fmt(q[i * q_rs + c * q_cs], fmt) * round_fmt(k[c * k_rs + j * k_cs], fmt);
                s[j] = mask < 0 ? p : (mask == 1 && j > i) || (mask == 2 && j < i) ? -INFINITY : p * 0.125;
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int64_t j = 0; j < n; ++j) sum += exp(s[j] - mx);
            for (int64_t c = 0; c < e; ++c) {
                double acc = 0, mag = 0, vmax = 0;
                for (int64_t j = 0; j < n; ++j) {
                    const double w = exp(s[j] - mx) / sum, x = round_fmt(v[j * v_rs + c * v_cs], fmt);
                    acc += w * x, mag += w * fabs(x), vmax = fabs(x) > vmax ? fabs(x) : vmax;
                }
                ref[nb * so + i * ldo + c] = mx == -INFINITY ? NAN : acc;
                scale[nb * so + i * ldo + c] = mag * widen + (tc && g_attn_prec == MR_F16 ? n * ldexp(1.0, -25) * vmax / 1e-5 : 0);
            }
        }
    }
    compare("attn", name, got, ref, scale, 1e-5);
    if (tc) {
        /* some element off the exact kernel's bound: the tensor-core kernel ran */
        size_t off = 0;
        for (size_t i = 0; i < got.size(); ++i)
            if (scale[i] > 0 && !close_to(got[i], ref[i], fabs(ref[i]) > 1 ? fabs(ref[i]) : 1, 1e-6)) ++off;
        char nm[200];
        snprintf(nm, sizeof nm, "%s: uses TC (%zu off f32)", name, off);
        report("attn", nm, off ? 0 : 1, got.size(), 0, 0, 0);
    }
    cudaFree(dQ), cudaFree(dK), cudaFree(dV), cudaFree(dO);
}

static void test_attentions()
{
    test_attention(1, 1, 1, 1, -1, 0);
    test_attention(7, 45, 64, 64, 1, 0);
    test_attention(7, 45, 64, 64, -1, ATT_KT);
    test_attention(128, 128, 64, 64, -1, ATT_KT);
    test_attention(128, 128, 64, 64, 1, 0);
    test_attention(33, 70, 128, 96, 1, ATT_KT);
    test_attention(33, 70, 128, 96, -1, 0);
    test_attention(5, 3, 20, 128, -1, 0);
    test_attention(5, 3, 20, 128, 0, ATT_KT);
    test_attention(40, 50, 32, 16, 1, ATT_KT | ATT_BATCH);  /* D 32 */
    test_attention(37, 100, 96, 128, 1, ATT_BATCH);          /* D 128, 3 row tiles */
    test_attention(20, 37, 24, 40, 0, ATT_VIEWS | ATT_BATCH); /* no unit stride in q or v */
    /* rows whose first key tiles are all masked (running max from -inf), and rows
     * i >= n that are masked entirely (NaN, as the unfused softmax) */
    test_attention(80, 70, 64, 48, 2, ATT_KT);
    test_attention(80, 70, 128, 8, 2, 0);
    /* every row tile, forced (a head over 64 wide takes 16 or 8 rows) */
    for (int rows = 8; rows <= 32; rows *= 2) {
        g_attn_rows = rows;
        test_attention(37, 45, 64, 64, 1, ATT_KT | ATT_BATCH);
        test_attention(33, 70, 32, 16, 2, 0);
        if (rows < 32) test_attention(37, 100, 96, 128, 1, ATT_BATCH);
    }
    g_attn_rows = 0;
    /* the tensor-core kernel at each precision: heads 32 and 64 wide (wider ones run the
     * exact kernel), several row tiles, masked rows, strided and batched views */
    for (int prec = MR_TF32; prec <= MR_F16; ++prec) {
        g_attn_prec = prec;
        test_attention(7, 45, 64, 64, 1, 0);
        test_attention(128, 128, 64, 64, -1, ATT_KT);
        test_attention(130, 70, 64, 48, 2, ATT_KT);
        test_attention(40, 50, 32, 16, 1, ATT_KT | ATT_BATCH);
        test_attention(20, 37, 24, 40, 0, ATT_VIEWS | ATT_BATCH);
        test_attention(33, 70, 128, 96, 1, ATT_KT);
    }
    g_attn_prec = MR_F32;
    /* outside the limits: cudaErrorInvalidValue, nothing launched */
    float *buf = dev_from(std::vector<float>(4 * 130, 0.0f));
    const int64_t bad[][4] = {{4, 4, 129, 4}, {4, 4, 4, 129}, {0, 4, 4, 4}, {4, 0, 4, 4}, {4, 4, 0, 4}, {4, 4, 4, 0}};
    size_t wrong = 0;
    for (const auto &b : bad)
        wrong += mr_cuda_attention(0, b[0], b[1], b[2], b[3], buf, b[2], 1, buf, b[1], 1, buf, b[3], 1, buf, b[3], 1,
                                   NULL, mr_no_score()) != cudaErrorInvalidValue;
    report("attn", "d or e = 129, or a zero dimension: cudaErrorInvalidValue", wrong, 6, 0, 0, 0);
    CUDA_OK(cudaGetLastError());
    cudaFree(buf);
}

/* ------------------------------------------------------------------------------------ */
/* SGD                                                                                  */
/* ------------------------------------------------------------------------------------ */

template <class T> static void test_sgd(int64_t n, T lr, T momentum, bool with_v)
{
    char name[160];
    snprintf(name, sizeof name, "%s n%lld lr %g momentum %g%s", sizeof(T) == 4 ? "f32" : "f64", (long long)n, (double)lr,
             (double)momentum, with_v ? "" : " v=NULL");
    std::vector<T> W(n), G(n), V(n);
    for (int64_t i = 0; i < n; ++i) W[i] = (T)rnd(), G[i] = (T)rnd(), V[i] = (T)rnd();
    T *dW = dev_from(W), *dG = dev_from(G), *dV = with_v ? dev_from(V) : NULL;
    const cudaError_t err = sizeof(T) == 4
                                ? mr_cuda_sgd_f32(0, (float *)dW, (const float *)dG, (float *)dV, n, (float)lr, (float)momentum)
                                : mr_cuda_sgd_f64(0, (double *)dW, (const double *)dG, (double *)dV, n, (double)lr,
                                                  (double)momentum);
    CUDA_OK(err);
    std::vector<T> gw = host_from(dW, n), gv = with_v ? host_from(dV, n) : V;
    /* runtime-c's mr_sgd, verbatim */
    volatile T t;
    size_t bad = 0, first = 0;
    for (int64_t i = 0; i < n; ++i) {
        T w = W[i], v = V[i];
        if (momentum == 0 || !with_v) {
            t = lr * G[i];
            w -= t;
        } else {
            t = momentum * v;
            v = t + G[i];
            t = lr * v;
            w -= t;
        }
        if (gw[i] != w || gv[i] != v) {
            if (!bad) first = (size_t)i;
            ++bad;
        }
    }
    report("sgd", name, bad, (size_t)n, first, bad ? (double)gw[first] : 0, 0);
    cudaFree(dW), cudaFree(dG);
    if (dV) cudaFree(dV);
}

static void test_sgds()
{
    test_sgd<float>(1000, 0.1f, 0.9f, true);
    test_sgd<float>(1000, 0.1f, 0.0f, true);
    test_sgd<float>(777, 0.05f, 0.9f, false);
    test_sgd<double>(1000, 0.1, 0.9, true);
    test_sgd<double>(1000, 0.01, 0.0, false);
    test_sgd<float>(600000, 0.01f, 0.5f, true); /* more than the 2048-block grid: the grid-stride loop */
}

/* F16's range: an operand above 65504 becomes inf (its row of C is inf); TF32 and BF16
 * keep f32's range (the row is about 1e5). */
static void test_f16_range()
{
    const int64_t m = 8, n = 8, k = 8;
    std::vector<float> A(m * k, 1.0f), B(k * n, 1.0f), C(m * n, 0.0f);
    A[0] = 1e5f;
    float *dA = dev_from(A), *dB = dev_from(B), *dC = dev_from(C);
    for (int prec = MR_TF32; prec <= MR_F16; ++prec) {
        CUDA_OK(sgemm_tc((mr_precision)prec, 0, m, n, k, dA, k, 1, dB, n, 1, dC, n, 1, nullptr, g_scratch, mr_no_epilogue()));
        std::vector<float> got = host_from(dC, C.size());
        size_t bad = 0, first = 0;
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
                const double want = i ? 8.0 : (prec == MR_F16 ? INFINITY : (double)round_fmt(1e5f, prec) + 7.0);
                if (!close_to(got[i * n + j], want, fabs(want), 1e-6)) {
                    if (!bad) first = (size_t)(i * n + j);
                    ++bad;
                }
            }
        char name[80];
        snprintf(name, sizeof name, "%s8x8x8 with an operand of 1e5 (f16: inf)", prec_name(prec));
        report("gemm", name, bad, got.size(), first, bad ? got[first] : 0, 0);
    }
    cudaFree(dA), cudaFree(dB), cudaFree(dC);
}

/* Every tile kernel, with K whole and split, on odd sizes, layouts, batches, strides and
 * epilogues (the plan forced: this device's own plan runs in the cases above). */
static void test_tiles()
{
    const int64_t splits[] = {1, 3, 7};
    for (int t = 0; t < MR_TILE_COUNT; ++t)
        for (int64_t split : splits) {
            g_tile = t, g_split = split;
            test_gemm(EXACT, 1, 3, 50, false, false);
            test_gemm(EXACT, 3, 31, 70, true, false, 1, false, true);
            test_gemm(EXACT, 31, 33, 100, false, true);
            test_gemm(EXACT, 33, 31, 129, true, true, 1, false, false, true);
            test_gemm(EXACT, 127, 129, 64, false, false, 1, false, false, false, 3);
            test_gemm(EXACT, 129, 127, 200, false, false, 6, true, true); /* batched [2, 3], B broadcast */
            test_gemm(EXACT, 130, 70, 0, false, false, 1, false, true);   /* k = 0 */
            test_gemm_views(EXACT, 33, 65, 90);
            /*           label       n  c   h   w   o  kh kw sh sw ph pw dh dw g  epi */
            test_conv(EXACT, "3x3 p1", 2, 16, 9, 11, 33, 3, 3, 1, 1, 1, 1, 1, 1, 1, true);
            test_conv(EXACT, "groups", 2, 8, 6, 6, 16, 3, 3, 1, 1, 1, 1, 1, 1, 2, false);
            test_conv(EXACT, "1x1", 3, 40, 5, 7, 31, 1, 1, 1, 1, 0, 0, 1, 1, 1, true);
        }
    g_tile = -1, g_split = 1;
}

/* The tensor-core kernels' shared tiles (mr_tc_tile): every warp-wide fragment read is free
 * of bank conflicts (bank = 4-byte word mod 32), at every row base and K step the kernels
 * read, and idx is a bijection onto the tile. Lane 4g + t reads row x0 + g: tf32 one word at
 * k0 + t; the 16-bit formats the pair k0 + 2t, k0 + 2t + 1, as one 8-byte read when the
 * tile is x-major (served a half warp at a time), else as two reads. */
template <class Tl, int KS> static void check_tile_banks(const char *name)
{
    size_t reads = 0, conflicted = 0, worst = 1;
    auto one = [&](const int (&word)[32], int lanes) {
        for (int h = 0; h < 32; h += lanes) {
            int use[32] = {0};
            size_t most = 0;
            for (int l = h; l < h + lanes; ++l) {
                const int b = word[l] % 32;
                if (++use[b] > (int)most) most = (size_t)use[b];
                if (lanes == 16 && ++use[(b + 1) % 32] > (int)most) most = (size_t)use[(b + 1) % 32];
            }
            ++reads;
            if (most > 1) ++conflicted, worst = most > worst ? most : worst;
        }
    };
    for (int x0 = 0; x0 < Tl::BX; x0 += 8)
        for (int k0 = 0; k0 < MR_GEMM_BK; k0 += KS == 8 ? 4 : 8) {
            int w0[32], w1[32];
            bool pairs = true;
            for (int l = 0; l < 32; ++l) {
                const int g = l / 4, t = l % 4, k = k0 + (KS == 8 ? t : 2 * t);
                w0[l] = Tl::idx(x0 + g, k);
                w1[l] = Tl::idx(x0 + g, k + 1);
                pairs = pairs && w0[l] % 2 == 0 && w1[l] == w0[l] + 1;
            }
            if (KS == 8) {
                one(w0, 32);
            } else if (Tl::X_MAJOR) {
                if (!pairs) ++conflicted; /* the pair is not one aligned 8-byte word */
                one(w0, 16);
            } else {
                one(w0, 32);
                one(w1, 32);
            }
        }
    std::vector<int> seen(Tl::SIZE, 0);
    size_t outside = 0;
    for (int x = 0; x < Tl::BX; ++x)
        for (int k = 0; k < MR_GEMM_BK; ++k) {
            const int i = Tl::idx(x, k);
            if (i < 0 || i >= Tl::SIZE || seen[i]++) ++outside;
        }
    char nm[120];
    snprintf(nm, sizeof nm, "%s: fragment reads conflict-free", name);
    report("tc tile", nm, conflicted, reads, 0, (double)worst, 1);
    snprintf(nm, sizeof nm, "%s: one word an element", name);
    report("tc tile", nm, outside, (size_t)Tl::BX * MR_GEMM_BK, 0, 0, 0);
}

static void test_tc_tiles()
{
    check_tile_banks<mr_tc_tile<MR_TC_BM, true, 8>, 8>("tf32 A x-major");
    check_tile_banks<mr_tc_tile<MR_TC_BM, false, 8>, 8>("tf32 A K-major");
    check_tile_banks<mr_tc_tile<MR_TC_BN, true, 8>, 8>("tf32 B x-major");
    check_tile_banks<mr_tc_tile<MR_TC_BN, false, 8>, 8>("tf32 B K-major");
    check_tile_banks<mr_tc_tile<MR_TC_BM, true, 16>, 16>("16-bit A x-major");
    check_tile_banks<mr_tc_tile<MR_TC_BM, false, 16>, 16>("16-bit A K-major");
    check_tile_banks<mr_tc_tile<MR_TC_BN, true, 16>, 16>("16-bit B x-major");
    check_tile_banks<mr_tc_tile<MR_TC_BN, false, 16>, 16>("16-bit B K-major");
}

/* Split-K gives the same bits on every run of a plan (the slices are added in order). */
static void test_split_bits()
{
    const int64_t m = 70, n = 90, k = 1000;
    std::vector<float> A = rnd_vec(m * k), B = rnd_vec(k * n);
    float *dA = dev_from(A), *dB = dev_from(B), *dC = dev_from(std::vector<float>(m * n));
    mr_plan pl = mr_plan_empty(m, n, k, 1);
    mr_plan_set_tile(&pl, 2, 9);
    std::vector<float> first;
    size_t differ = 0;
    for (int run = 0; run < 3; ++run) {
        CUDA_OK(mr_cuda_sgemm_planned(0, pl, m, n, k, dA, k, 1, dB, n, 1, dC, n, 1, NULL, g_scratch.p, mr_no_epilogue()));
        std::vector<float> got = host_from(dC, (size_t)(m * n));
        if (run == 0) first = got;
        else differ += memcmp(first.data(), got.data(), got.size() * sizeof(float)) != 0;
    }
    report("gemm", "split-K 70x90x1000 in 9 slices: the same bits in 3 runs", differ, 3, 0, 0, 0);
    cudaFree(dA), cudaFree(dB), cudaFree(dC);
}

/* The planner's choices on an H100 (132 SMs) for products of the bench models. */
static void test_plans()
{
    struct {
        const char *name;
        int64_t m, n, k, nb;
        int64_t min_blocks; /* at least this many blocks (119: 90% of the SMs) */
        int split;          /* whether it must split K */
    } cases[] = {
        {"gpt_block b1 128x768x3072", 128, 768, 3072, 1, 119, 1},
        {"gpt_block b1 128x3072x768", 128, 3072, 768, 1, 119, 0},
        {"gpt_block b8 1024x768x768", 1024, 768, 768, 1, 119, 0},
        {"mlp b32 32x512x784", 32, 512, 784, 1, 1, 1},
    };
    for (const auto &c : cases) {
        const mr_plan p = mr_plan_gemm(c.m, c.n, c.k, c.nb, c.n, 1, 0, 132, MR_PLAN_ALL, 1 << 26);
        char name[160];
        const mr_tile_shape t = mr_tile_shape_of(p.tile);
        snprintf(name, sizeof name, "plan %s: %dx%d, split %lld, %lld blocks", c.name, t.bm, t.bn, (long long)p.split,
                 (long long)p.blocks);
        const bool ok = p.kind == MR_PLAN_TILED && p.blocks >= c.min_blocks && (!c.split || p.split > 1);
        report("plan", name, ok ? 0 : 1, 1, 0, 0, 0);
    }
    /* no scratch, no split; a mask of one tile, that tile */
    const mr_plan a = mr_plan_gemm(128, 768, 3072, 1, 768, 1, 0, 132, MR_PLAN_ALL, 0);
    const mr_plan b = mr_plan_gemm(128, 768, 3072, 1, 768, 1, 0, 132, 1u << 3, 1 << 26);
    report("plan", "without scratch: no split", a.split == 1 ? 0 : 1, 1, 0, 0, 0);
    /* a mask that fixes the layout instantiates that one: another is refused */
    {
        float *d = dev_from(std::vector<float>(64 * 64));
        constexpr unsigned ROW_MAJOR = MR_PLAN_TILES | MR_PLAN_LAYOUT | MR_PLAN_A_ALONG_K; /* A along K, B along n */
        const cudaError_t ok = mr_cuda_sgemm<ROW_MAJOR>(0, 64, 64, 64, d, 64, 1, d, 64, 1, d, 64, 1, NULL, mr_scratch{NULL, 0}, mr_no_epilogue());
        const cudaError_t other = mr_cuda_sgemm<ROW_MAJOR>(0, 64, 64, 64, d, 1, 64, d, 64, 1, d, 64, 1, NULL, mr_scratch{NULL, 0}, mr_no_epilogue());
        report("plan", "a fixed layout runs, another is cudaErrorInvalidValue", ok == cudaSuccess && other == cudaErrorInvalidValue ? 0 : 1, 1, 0, 0, 0);
        CUDA_OK(cudaDeviceSynchronize());
        cudaFree(d);
    }
    report("plan", "a mask of tile 3: tile 3, no split", b.tile == 3 && b.split == 1 ? 0 : 1, 1, 0, 0, 0);
}

/* ------------------------------------------------------------------------------------ */
/* cuBLASLt (mr_cublaslt.h)                                                             */
/* ------------------------------------------------------------------------------------ */

static double lt_act(int act, double v)
{
    if (act == MR_LT_ACT_RELU) return v > 0 ? v : 0;
    if (act == MR_LT_ACT_GELU_TANH) return 0.5 * v * (1 + tanh(0.79788456080286535588 * (v + 0.044715 * v * v * v)));
    return v;
}

/* The largest offset of a rows x cols operand with strides rs, cs and batch strides bs. */
static int64_t lt_extent(int64_t rows, int64_t cols, int64_t rs, int64_t cs, const mr_batch &bt, const int64_t *bs)
{
    int64_t e = (rows - 1) * rs + (cols - 1) * cs;
    for (int d = 0; d < bt.rank; ++d) e += (bt.ext[d] - 1) * bs[d];
    return e + 1;
}

/* One case of the mapping: strides, batch (rank 0: none), residual, epilogue, and whether
 * cuBLASLt should take it. */
struct lt_map_case {
    int64_t m, n, k, a_rs, a_cs, b_rs, b_cs, c_rs, c_cs;
    mr_batch bt;
    bool res;
    int64_t res_rs, res_cs, res_b[MR_MAX_BATCH];
    bool bias;
    int act;
};

/* Where a cuBLASLt operand's element lies, as BLAS defines it, -1 past its buffer. */
static int64_t lt_at(const mr_lt_operand &o, int64_t bi, int64_t r, int64_t c, size_t size)
{
    const int64_t at = bi * o.stride + r + c * o.ld;
    return at >= 0 && (size_t)at < size ? at : -1;
}

/*
 * The case's result two ways on random data: directly (C[i,j] = act(alpha sum A B + bias[j]
 * + R[i,j]) over the multi-dimensional batch) and by evaluating mr_lt_map's problem as
 * cuBLASLt defines it (column-major operands with their ld, op N or T, strided batch,
 * bias a row of D, beta = 1 with a residual), after checking what cuBLASLt requires of it
 * (dimensions consistent with op, ld >= max(1, rows), strides >= 0, count >= 1). Returns
 * "" when both agree on every element of C's buffer (elements the product does not touch
 * included), else what went wrong; "refused" when mr_lt_map refused.
 */
static const char *lt_map_check(const lt_map_case &t)
{
    mr_lt_problem pr;
    const int64_t *res_b = t.res ? t.res_b : NULL;
    if (!mr_lt_map(&pr, t.m, t.n, t.k, t.a_rs, t.a_cs, t.b_rs, t.b_cs, t.c_rs, t.c_cs, t.bt.rank ? &t.bt : NULL, t.res,
                   t.res_rs, t.res_cs, res_b))
        return "refused";
    const size_t na = lt_extent(t.m, t.k, t.a_rs, t.a_cs, t.bt, t.bt.a), nb = lt_extent(t.k, t.n, t.b_rs, t.b_cs, t.bt, t.bt.b),
                 nc = lt_extent(t.m, t.n, t.c_rs, t.c_cs, t.bt, t.bt.c),
                 nr = t.res ? lt_extent(t.m, t.n, t.res_rs, t.res_cs, t.bt, t.res_b) : 1;
    std::vector<double> A(na), B(nb), R(nr), bias(t.n), direct(nc, 777.0), mapped(nc, 777.0);
    for (auto &x : A) x = rnd();
    for (auto &x : B) x = rnd();
    for (auto &x : R) x = rnd();
    for (auto &x : bias) x = rnd();
    const double alpha = 0.75;

    /* directly, over the batch's multi-index */
    int64_t count = 1;
    for (int d = 0; d < t.bt.rank; ++d) count *= t.bt.ext[d];
    for (int64_t nbi = 0; nbi < count; ++nbi) {
        int64_t oa = 0, ob = 0, oc = 0, orr = 0, rem = nbi;
        for (int d = t.bt.rank - 1; d >= 0; --d) {
            const int64_t x = rem % t.bt.ext[d];
            rem /= t.bt.ext[d];
            oa += x * t.bt.a[d], ob += x * t.bt.b[d], oc += x * t.bt.c[d], orr += t.res ? x * t.res_b[d] : 0;
        }
        for (int64_t i = 0; i < t.m; ++i)
            for (int64_t j = 0; j < t.n; ++j) {
                double s = 0;
                for (int64_t kk = 0; kk < t.k; ++kk) s += A[oa + i * t.a_rs + kk * t.a_cs] * B[ob + kk * t.b_rs + j * t.b_cs];
                double v = alpha * s;
                if (t.bias) v += bias[j];
                if (t.res) v += R[orr + i * t.res_rs + j * t.res_cs];
                direct[oc + i * t.c_rs + j * t.c_cs] = lt_act(t.act, v);
            }
    }

    /* cuBLASLt's definition: A' is our B's buffer, B' our A's, C' our residual's, D' our C's */
    const uint64_t M = pr.m, N = pr.n, K = pr.k;
    const mr_lt_operand *ops[4] = {&pr.a, &pr.b, &pr.c, &pr.d};
    const uint64_t want_rows[4] = {pr.a.trans ? K : M, pr.b.trans ? N : K, M, M};
    const uint64_t want_cols[4] = {pr.a.trans ? M : K, pr.b.trans ? K : N, N, N};
    for (int x = 0; x < 4; ++x) {
        const mr_lt_operand &o = *ops[x];
        if (o.rows != want_rows[x] || o.cols != want_cols[x]) return "operand dimensions do not match op";
        if (o.ld < 1 || (uint64_t)o.ld < o.rows) return "ld < rows";
        if (o.stride < 0) return "negative batch stride";
        if (x >= 2 && o.trans) return "C or D transposed";
    }
    if (pr.batch < 1) return "batch count < 1";
    if (M != (uint64_t)t.n || N != (uint64_t)t.m || K != (uint64_t)t.k) return "m, n, k not swapped";
    std::vector<char> written(nc, 0);
    for (int64_t bi = 0; bi < pr.batch; ++bi)
        for (uint64_t r = 0; r < M; ++r)
            for (uint64_t c = 0; c < N; ++c) {
                double s = 0;
                for (uint64_t kk = 0; kk < K; ++kk) {
                    const int64_t ia = pr.a.trans ? lt_at(pr.a, bi, kk, r, nb) : lt_at(pr.a, bi, r, kk, nb);
                    const int64_t ib = pr.b.trans ? lt_at(pr.b, bi, c, kk, na) : lt_at(pr.b, bi, kk, c, na);
                    if (ia < 0 || ib < 0) return "reads past A or B";
                    s += B[ia] * A[ib];
                }
                double v = alpha * s;
                if (t.res) {
                    const int64_t ir = lt_at(pr.c, bi, r, c, nr);
                    if (ir < 0) return "reads past the residual";
                    v += R[ir];
                }
                if (t.bias) v += bias[r];
                const int64_t id = lt_at(pr.d, bi, r, c, nc);
                if (id < 0) return "writes past C";
                if (written[id]++) return "writes an element twice";
                mapped[id] = lt_act(t.act, v);
            }
    for (size_t i = 0; i < nc; ++i)
        if (!(fabs(mapped[i] - direct[i]) <= 1e-12 * (1 + fabs(direct[i])))) return "a different result";
    return "";
}

/* Dense strides of an m x k operand: row-major or column-major, rows (columns) padded. */
static void lt_layout(int kind, int64_t rows, int64_t cols, int64_t *rs, int64_t *cs)
{
    const int64_t pad = kind & 2 ? 5 : 0;
    if (kind & 1) *rs = 1, *cs = rows + pad; /* column-major: a transposed view */
    else *rs = cols + pad, *cs = 1;
}

static void lt_map_expect(const char *name, const lt_map_case &t, bool accept)
{
    const char *why = lt_map_check(t);
    const bool ok = accept ? why[0] == 0 : strcmp(why, "refused") == 0;
    char nm[200];
    snprintf(nm, sizeof nm, "%s: %s%s%s", name, accept ? "mapped" : "refused", ok ? "" : ", got: ", ok ? "" : why);
    report("lt-map", nm, ok ? 0 : 1, 1, 0, 0, 0);
}

/* A plain case: m x k row-major A, k x n row-major B, dense C; no batch, residual, bias. */
static lt_map_case lt_plain(int64_t m, int64_t n, int64_t k)
{
    lt_map_case t;
    memset(&t, 0, sizeof t);
    t.m = m, t.n = n, t.k = k;
    t.a_rs = k, t.a_cs = 1, t.b_rs = n, t.b_cs = 1, t.c_rs = n, t.c_cs = 1;
    return t;
}

/* A [e0, e1] batch of contiguous products (rank 1 when e0 is 0). */
static void lt_batch(lt_map_case &t, int64_t e0, int64_t e1)
{
    const int64_t sa = t.m * t.k, sb = t.k * t.n, sc = t.m * t.c_rs, sr = t.m * t.res_rs;
    if (e0 == 0) {
        t.bt.rank = 1, t.bt.ext[0] = e1, t.bt.a[0] = sa, t.bt.b[0] = sb, t.bt.c[0] = sc, t.res_b[0] = sr;
        return;
    }
    t.bt.rank = 2, t.bt.ext[0] = e0, t.bt.ext[1] = e1;
    t.bt.a[1] = sa, t.bt.b[1] = sb, t.bt.c[1] = sc, t.res_b[1] = sr;
    t.bt.a[0] = sa * e1, t.bt.b[0] = sb * e1, t.bt.c[0] = sc * e1, t.res_b[0] = sr * e1;
}

static void test_lt_map()
{
    /* every size of 1, 3 and 33 with A and B each row- or column-major, dense or padded */
    static const char *kinds[4] = {"row-major", "col-major", "row-major padded", "col-major padded"};
    const int64_t sizes[3] = {1, 3, 33};
    for (int ka = 0; ka < 4; ++ka)
        for (int kb = 0; kb < 4; ++kb) {
            int bad = 0, cases = 0;
            const char *why = "";
            for (int64_t m : sizes)
                for (int64_t n : sizes)
                    for (int64_t k : sizes) {
                        lt_map_case t = lt_plain(m, n, k);
                        lt_layout(ka, m, k, &t.a_rs, &t.a_cs);
                        lt_layout(kb, k, n, &t.b_rs, &t.b_cs);
                        t.bias = (m + n + k) % 2 == 1, t.act = (int)((m * n + k) % 3);
                        const char *w = lt_map_check(t);
                        ++cases;
                        if (w[0]) ++bad, why = w;
                    }
            char nm[160];
            snprintf(nm, sizeof nm, "A %s, B %s, m n k in {1, 3, 33}: %d cases mapped%s%s", kinds[ka], kinds[kb], cases,
                     bad ? ", got: " : "", why);
            report("lt-map", nm, (size_t)bad, (size_t)cases, 0, 0, 0);
        }

    lt_map_case t = lt_plain(33, 3, 33);
    t.c_rs = 7, t.bias = true, t.act = MR_LT_ACT_RELU;
    lt_map_expect("C padded, bias, relu", t, true);
    t = lt_plain(3, 33, 3), t.res = true, t.res_rs = 33, t.res_cs = 1;
    lt_map_expect("residual", t, true);
    t.res_rs = 40, t.act = MR_LT_ACT_GELU_TANH, t.bias = true;
    lt_map_expect("residual padded, bias, gelu", t, true);
    t.res_rs = 1, t.res_cs = 3;
    lt_map_expect("residual column-major", t, false);
    t = lt_plain(3, 1, 3), t.res = true, t.res_rs = 1, t.res_cs = 9, t.c_rs = 1, t.c_cs = 4;
    lt_map_expect("n = 1: C and residual strides along n free", t, true);
    t = lt_plain(1, 33, 3), t.a_rs = 999, t.a_cs = 1, t.c_rs = 0;
    lt_map_expect("m = 1: row strides free", t, true);
    t = lt_plain(3, 33, 3), t.c_cs = 2, t.c_rs = 66;
    lt_map_expect("C with c_cs 2", t, false);
    t = lt_plain(3, 33, 3), t.c_rs = 1, t.c_cs = 3;
    lt_map_expect("C column-major", t, false);
    t = lt_plain(3, 33, 33), t.a_rs = 32;
    lt_map_expect("A rows overlapping (a_rs = k - 1)", t, false);
    t = lt_plain(3, 33, 3), t.b_rs = 32;
    lt_map_expect("B rows overlapping (b_rs = n - 1)", t, false);
    t = lt_plain(3, 33, 3), t.c_rs = 32;
    lt_map_expect("C rows overlapping (c_rs = n - 1)", t, false);
    t = lt_plain(3, 33, 3), t.a_rs = 6, t.a_cs = 2;
    lt_map_expect("A with no unit stride", t, false);
    t = lt_plain(3, 33, 3), t.b_rs = -33;
    lt_map_expect("a negative stride", t, false);
    t = lt_plain(3, 33, 0);
    lt_map_expect("k = 0", t, false);

    t = lt_plain(3, 33, 3), lt_batch(t, 0, 3);
    lt_map_expect("batch [3]", t, true);
    t = lt_plain(33, 3, 3), t.bias = true, t.act = MR_LT_ACT_RELU, lt_batch(t, 2, 3);
    lt_map_expect("batch [2, 3], collapsible", t, true);
    t = lt_plain(3, 33, 33), lt_layout(1, 3, 33, &t.a_rs, &t.a_cs), lt_batch(t, 2, 3), t.bt.ext[0] = 1, t.bt.a[0] = 12345;
    lt_map_expect("batch [1, 3], A column-major", t, true);
    t = lt_plain(3, 33, 3), lt_batch(t, 2, 3), t.bt.ext[1] = 1, t.bt.c[1] = -5;
    lt_map_expect("batch [2, 1] (extent 1 ignored)", t, true);
    t = lt_plain(3, 33, 3), lt_batch(t, 2, 3), t.bt.a[0] = t.bt.a[1] = 0;
    lt_map_expect("batch [2, 3], A broadcast", t, true);
    t = lt_plain(33, 3, 3), lt_layout(3, 3, 3, &t.b_rs, &t.b_cs), lt_batch(t, 2, 3), t.bt.b[0] = t.bt.b[1] = 0;
    lt_map_expect("batch [2, 3], B broadcast, B column-major padded", t, true);
    t = lt_plain(3, 33, 3), t.c_rs = 40, t.res = true, t.res_rs = 35, t.res_cs = 1, t.bias = true;
    t.act = MR_LT_ACT_GELU_TANH, lt_batch(t, 2, 3);
    lt_map_expect("batch [2, 3], C and residual padded", t, true);
    t = lt_plain(3, 33, 3), lt_batch(t, 2, 3), t.bt.a[1] = 0;
    lt_map_expect("batch [2, 3], A broadcast on the inner dimension only", t, false);
    t = lt_plain(3, 33, 3), lt_batch(t, 2, 3), t.bt.c[0] += 1;
    lt_map_expect("batch [2, 3], C not collapsible", t, false);
    t = lt_plain(3, 33, 3), t.res = true, t.res_rs = 33, t.res_cs = 1, lt_batch(t, 2, 3), t.res_b[0] *= 2;
    lt_map_expect("batch [2, 3], residual not collapsible", t, false);
    t = lt_plain(3, 33, 3), t.res = true, t.res_rs = 33, t.res_cs = 1, lt_batch(t, 0, 3), t.res_b[0] = 0;
    lt_map_expect("batch [3], residual broadcast", t, false);
    t = lt_plain(3, 33, 3), lt_batch(t, 0, 3), t.bt.c[0] = 0;
    lt_map_expect("batch [3], C stride 0", t, false);
    t = lt_plain(3, 33, 3), lt_batch(t, 2, 3), t.bt.b[1] = -t.bt.b[1], t.bt.b[0] = -t.bt.b[0];
    lt_map_expect("batch [2, 3], B's batch strides negative", t, false);
    {
        mr_lt_problem pr;
        t = lt_plain(3, 33, 3), lt_batch(t, 65536, 65536);
        const bool refused = !mr_lt_map(&pr, t.m, t.n, t.k, t.a_rs, t.a_cs, t.b_rs, t.b_cs, t.c_rs, t.c_cs, &t.bt, 0, 0, 0, NULL);
        report("lt-map", "batch [65536, 65536]: the count overflows int32, refused", refused ? 0 : 1, 1, 0, 0, 0);
    }
}

/* The lt cases instantiate one tile kernel (64 x 64, no split) of the exact fallback. */
#define LT_MASK (1u << 2)
static mr_lt_site g_lt_site;
static mr_lt_workspace g_lt_ws = {NULL, 0};
static int g_lt_ran = 0, g_lt_fell_back = 0;

/*
 * One product through mr_cuda_sgemm_lt: m x k A (transposed in memory if ta), k x n B (tb),
 * C with c_cs (2: no unit stride, so the built-in kernels), batch 0 none, 1 [2, 3], 2 the
 * same with B broadcast; the epilogue. Against the double reference within the precision's
 * bound (exact f32: 1e-5 of the sum of |terms|; reduced: 5u, which also covers cuBLASLt
 * truncating the operands or choosing TF32 for BF16/F16). When the built-in kernels ran
 * (always under emulation), also bit for bit against mr_cuda_sgemm_tc with the same ep.
 * on_lt: 1 if cuBLASLt must take it when loaded, 0 if it must not, -1 either.
 */
static void test_lt_gemm(int prec, int64_t m, int64_t n, int64_t k, bool ta, bool tb, int64_t c_cs, int batch, int act,
                         bool bias, bool res, float alpha, int on_lt)
{
    char name[200];
    static const char *acts[3] = {"", " relu", " gelu"};
    snprintf(name, sizeof name, "%s%lldx%lldx%lld%s%s%s%s%s%s%s alpha %g", prec_name(prec), (long long)m, (long long)n,
             (long long)k, ta ? " At" : "", tb ? " Bt" : "", c_cs != 1 ? " c_cs 2" : "",
             batch == 1 ? " batch [2,3]" : batch == 2 ? " batch [2,3] bcastB" : "", bias ? " bias" : "", res ? " res" : "",
             acts[act], (double)alpha);
    const int64_t nbatch = batch ? 6 : 1, c_rs = n * c_cs + 3, sa = m * k, sb = batch == 2 ? 0 : k * n, sc = m * c_rs,
                  r_rs = n + 1, sr = m * r_rs;
    std::vector<float> A = rnd_vec(sa * nbatch), B = rnd_vec(batch == 2 ? k * n : sb * nbatch), C(sc * nbatch, 5.0f),
                       bs = rnd_vec(n), R = rnd_vec(sr * nbatch);
    const int64_t a_rs = ta ? 1 : k, a_cs = ta ? m : 1, b_rs = tb ? 1 : n, b_cs = tb ? k : 1;
    float *dA = dev_from(A), *dB = dev_from(B), *dC = dev_from(C), *dC2 = dev_from(C), *dbias = dev_from(bs),
          *dR = dev_from(R);
    mr_batch bt;
    memset(&bt, 0, sizeof bt);
    mr_lt_epilogue lt;
    memset(&lt, 0, sizeof lt);
    if (batch) {
        bt.rank = 2, bt.ext[0] = 2, bt.ext[1] = 3;
        bt.a[0] = 3 * sa, bt.a[1] = sa, bt.b[0] = 3 * sb, bt.b[1] = sb, bt.c[0] = 3 * sc, bt.c[1] = sc;
        lt.res_b[0] = 3 * sr, lt.res_b[1] = sr;
    }
    lt.act = act, lt.alpha = alpha, lt.bias = bias ? dbias : NULL, lt.res = res ? dR : NULL, lt.res_rs = r_rs, lt.res_cs = 1;
    const mr_batch *bp = batch ? &bt : NULL;
    /* the built-in kernels' equivalent of lt, as the compiler's functor is */
    mr_lt_functor ep = {dC, c_rs, c_cs, bt, lt};
    const long long runs = mr_lt_site_runs(&g_lt_site);
    CUDA_OK(with_precision((mr_precision)prec, [&](auto P) {
        return mr_cuda_sgemm_lt<decltype(P)::value, LT_MASK>(&g_lt_site, 0, m, n, k, dA, a_rs, a_cs, dB, b_rs, b_cs, dC,
                                                               c_rs, c_cs, bp, g_scratch, g_lt_ws, lt, ep);
    }));
    const bool on = mr_lt_site_runs(&g_lt_site) > runs;
    ++(on ? g_lt_ran : g_lt_fell_back);
    std::vector<float> got = host_from(dC, C.size());
    std::vector<double> ref(C.begin(), C.end()), scale(C.size(), 0.0);
    for (int64_t nb = 0; nb < nbatch; ++nb)
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
                double s = 0, s_abs = 0;
                for (int64_t kk = 0; kk < k; ++kk) {
                    const double p = (double)A[nb * sa + i * a_rs + kk * a_cs] * B[nb * sb + kk * b_rs + j * b_cs];
                    s += p, s_abs += fabs(p);
                }
                double v = alpha * s;
                s_abs *= fabs(alpha);
                if (bias) v += bs[j], s_abs += fabs(bs[j]);
                if (res) v += R[nb * sr + i * r_rs + j], s_abs += fabs(R[nb * sr + i * r_rs + j]);
                const int64_t at = nb * sc + i * c_rs + j * c_cs;
                ref[at] = lt_act(act, v), scale[at] = s_abs;
            }
    /* GELU's slope is below 1.13: an error in its argument grows at most that much */
    const double grow = act == MR_LT_ACT_GELU_TANH ? 1.2 : 1.0;
    const double tol = prec == MR_F32 ? 1e-5 : 5 * unit_roundoff(prec) + 1e-5;
    char nm[260];
    snprintf(nm, sizeof nm, "%s (%s)", name, on ? "cuBLASLt" : "built-in");
    compare("lt", nm, got, ref, scale, tol * grow);
    if (on_lt >= 0 && mr_lt_available()) {
        snprintf(nm, sizeof nm, "%s: %s cuBLASLt", name, on_lt ? "ran on" : "not on");
        report("lt", nm, on == (on_lt == 1) ? 0 : 1, 1, 0, 0, 0);
    }
    if (!on) {
        ep.c = dC2;
        CUDA_OK(with_precision((mr_precision)prec, [&](auto P) {
            return mr_cuda_sgemm_tc<decltype(P)::value, LT_MASK>(0, m, n, k, dA, a_rs, a_cs, dB, b_rs, b_cs, dC2, c_rs,
                                                                   c_cs, bp, g_scratch, ep);
        }));
        std::vector<float> want = host_from(dC2, C.size());
        snprintf(nm, sizeof nm, "%s: the same bits as mr_cuda_sgemm_tc", name);
        report("lt", nm, memcmp(got.data(), want.data(), got.size() * sizeof(float)) != 0, 1, 0, 0, 0);
    }
    cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(dC2), cudaFree(dbias), cudaFree(dR);
}

static void test_lts()
{
    test_lt_map();
    /*                 prec      m    n    k   ta     tb     c_cs batch act                  bias   res    alpha on_lt */
    test_lt_gemm(MR_F32,  65,  33,  17, false, false, 1,   0,    MR_LT_ACT_NONE,      false, false, 1.0f,  1);
    test_lt_gemm(MR_F32,  65,  33,  17, false, false, 1,   0,    MR_LT_ACT_RELU,      true,  false, 1.0f, -1);
    test_lt_gemm(MR_F32,  70, 96,  64,  true,  true,  1,   0,    MR_LT_ACT_GELU_TANH, true,  true,  0.5f, -1);
    test_lt_gemm(MR_F32,  33,  40,  20, false, true,  1,   1,    MR_LT_ACT_RELU,      true,  true,  1.0f, -1);
    test_lt_gemm(MR_F32,  33,  40,  20, true,  false, 1,   2,    MR_LT_ACT_NONE,      false, true,  2.0f, -1);
    test_lt_gemm(MR_F32,   1,  37,  50, false, false, 1,   0,    MR_LT_ACT_NONE,      true,  false, 1.0f, -1);
    test_lt_gemm(MR_F32,  65,  33,  17, false, false, 2,   0,    MR_LT_ACT_RELU,      true,  true,  1.0f,  0);
    test_lt_gemm(MR_F32,  65,  33,   0, false, false, 1,   0,    MR_LT_ACT_GELU_TANH, true,  true,  1.0f,  0);
    for (int prec = MR_TF32; prec <= MR_F16; ++prec) {
        test_lt_gemm(prec, 65, 33, 40, false, false, 1, 0, MR_LT_ACT_GELU_TANH, true, true, 1.0f, -1);
        test_lt_gemm(prec, 33, 40, 20, true, false, 1, 1, MR_LT_ACT_RELU, true, false, 0.5f, -1);
    }
    const char *why = mr_lt_available() ? "" :
#if defined(MR_CUDA_EMULATE)
        " (emulation: always the built-in kernels)";
#else
        " (not loaded: MR_CUBLASLT=off, or libcublasLt.so.13 missing or unusable)";
#endif
    printf("cublaslt: %d shapes ran on cuBLASLt, %d fell back%s\n", g_lt_ran, g_lt_fell_back, why);
}

/* test_kernels [tc]: every check, or (tc) the tensor-core products' alone -- the Makefile runs
 * those again with the emulation's cp.async copies landing early (MR_EMU_CP_ASYNC). */
int main(int argc, char **argv)
{
    g_scratch.floats = 1 << 22;
    CUDA_OK(cudaMalloc((void **)&g_scratch.p, (size_t)g_scratch.floats * sizeof(float)));
    if (argc > 1 && strcmp(argv[1], "tc") == 0) {
        for (int prec = MR_TF32; prec <= MR_F16; ++prec) {
            test_gemms(prec);
            test_convs(prec);
        }
        printf("%d of %d tensor-core checks passed\n", g_checks - g_failures, g_checks);
        return g_failures ? 1 : 0;
    }
    test_plans();
    test_tiles();
    test_split_bits();
    test_tc_tiles();
    test_gemms(EXACT);
    test_convs(EXACT);
    /* the tensor-core paths, every case for each precision; MR_F32 through the _tc entry
     * points must give the exact kernels' results */
    for (int prec = MR_TF32; prec <= MR_F16; ++prec) {
        test_gemms(prec);
        test_convs(prec);
    }
    test_f16_range();
    test_gemm(MR_F32, 129, 65, 33, false, false);
    test_conv(MR_F32, "3x3 p1", 2, 16, 16, 16, 140, 3, 3, 1, 1, 1, 1, 1, 1, 1, true);
    test_pools();
    test_softmaxes();
    test_attentions();
    test_sgds();
    /* cuBLASLt may use 32 MiB of workspace (the emulation never touches it) */
    g_lt_ws.bytes = (size_t)32 << 20;
    CUDA_OK(cudaMalloc(&g_lt_ws.p, g_lt_ws.bytes));
    test_lts();
    printf("%d of %d checks passed\n", g_checks - g_failures, g_checks);
    return g_failures ? 1 : 0;
}
