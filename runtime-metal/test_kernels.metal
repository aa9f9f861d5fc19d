/* test_kernels.metal -- tests of mithril_metal_kernels.h (see KERNELS.md).
 *
 * The top half is Metal Shading Language: small kernels shaped like the generated ones,
 * each calling one library function with every thread of its threadgroup. The bottom half
 * (host code, compiled only under the CPU emulation, metal_emu.h) dispatches them on odd
 * shapes, with the shapes.h group counts and with 1 and 3 threadgroups, and compares the
 * results with plain C++ references computed in double.
 *
 *   make -f Makefile.kernels test
 */
#include <metal_stdlib>
#include "mithril_ops.h"
#include "mithril_metal_kernels.h"

/* ------------------------------------------------------------------------------------ */
/* Kernels                                                                              */
/* ------------------------------------------------------------------------------------ */

struct gemm_params {
    long m, n, k, a_rs, a_cs, b_rs, b_cs, c_rs, c_cs;
    mr_batch bt;
};

/* An epilogue that reads its own element back (c = c/2 + bias[j] + nb/4 + i/8), so a
 * call before the store, a missing call or a wrong (nb, i, j) shows. */
struct test_gemm_ep {
    device float *c;
    device const float *bias;
    constant gemm_params *p;
    void operator()(long nb, long i, long j) const
    {
        long oc = 0, r = nb;
        for (int d = MR_METAL_MAX_BATCH - 1; d >= 0; --d) {
            if (d < p->bt.rank) {
                oc += (r % p->bt.ext[d]) * p->bt.c[d];
                r /= p->bt.ext[d];
            }
        }
        device float *e = c + oc + i * p->c_rs + j * p->c_cs;
        *e = *e * 0.5f + bias[j] + 0.25f * (float)nb + 0.125f * (float)i;
    }
};

template <int P, int EP>
kernel void k_gemm(device const float *a [[buffer(0)]], device const float *b [[buffer(1)]],
                   device float *c [[buffer(2)]], device const float *bias [[buffer(3)]],
                   constant gemm_params &p [[buffer(4)]], threadgroup float *tg [[threadgroup(0)]],
                   uint group [[threadgroup_position_in_grid]], uint groups [[threadgroups_per_grid]],
                   uint lid [[thread_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                   uint simd [[simdgroup_index_in_threadgroup]])
{
    const mr_batch bt = p.bt;
    if (EP) {
        const test_gemm_ep ep = {c, bias, &p};
        mr_sgemm<P>(p.m, p.n, p.k, a, p.a_rs, p.a_cs, b, p.b_rs, p.b_cs, c, p.c_rs, p.c_cs, bt, ep, tg, group, groups,
                    lid, lane, simd);
    } else {
        const mr_no_epilogue ep = {};
        mr_sgemm<P>(p.m, p.n, p.k, a, p.a_rs, p.a_cs, b, p.b_rs, p.b_cs, c, p.c_rs, p.c_cs, bt, ep, tg, group, groups,
                    lid, lane, simd);
    }
}

struct conv_params {
    long n, c, h, wd, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, cgroups;
};

/* out = out/2 + bias[oc] + image/4 + pos/64 */
struct test_conv_ep {
    device float *out;
    device const float *bias;
    long o, ohw;
    void operator()(long b, long oc, long pos) const
    {
        device float *e = out + (b * o + oc) * ohw + pos;
        *e = *e * 0.5f + bias[oc] + 0.25f * (float)b + (float)pos / 64.0f;
    }
};

template <int P, int EP>
kernel void k_conv(device const float *x [[buffer(0)]], device const float *w [[buffer(1)]],
                   device float *out [[buffer(2)]], device const float *bias [[buffer(3)]],
                   constant conv_params &p [[buffer(4)]], threadgroup float *tg [[threadgroup(0)]],
                   uint group [[threadgroup_position_in_grid]], uint groups [[threadgroups_per_grid]],
                   uint lid [[thread_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                   uint simd [[simdgroup_index_in_threadgroup]])
{
    if (EP) {
        const test_conv_ep ep = {out, bias, p.o, p.oh * p.ow};
        mr_conv2d<P>(x, w, out, p.n, p.c, p.h, p.wd, p.o, p.kh, p.kw, p.oh, p.ow, p.sh, p.sw, p.ph, p.pw, p.dh, p.dw,
                     p.cgroups, ep, tg, group, groups, lid, lane, simd);
    } else {
        const mr_no_epilogue ep = {};
        mr_conv2d<P>(x, w, out, p.n, p.c, p.h, p.wd, p.o, p.kh, p.kw, p.oh, p.ow, p.sh, p.sw, p.ph, p.pw, p.dh, p.dw,
                     p.cgroups, ep, tg, group, groups, lid, lane, simd);
    }
}

struct pool_params {
    long lead, h, wd, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw;
    int is_max;
};

kernel void k_pool(device const float *x [[buffer(0)]], device float *out [[buffer(1)]],
                   constant pool_params &p [[buffer(2)]], uint group [[threadgroup_position_in_grid]],
                   uint groups [[threadgroups_per_grid]], uint lid [[thread_index_in_threadgroup]])
{
    mr_pool2d(x, out, p.lead, p.h, p.wd, p.kh, p.kw, p.oh, p.ow, p.sh, p.sw, p.ph, p.pw, p.dh, p.dw, p.is_max, group,
              groups, lid);
}

kernel void k_softmax(device const float *x [[buffer(0)]], device float *out [[buffer(1)]],
                      constant long &outer [[buffer(2)]], constant long &n [[buffer(3)]],
                      constant long &inner [[buffer(4)]], threadgroup float *tg [[threadgroup(0)]],
                      uint group [[threadgroup_position_in_grid]], uint groups [[threadgroups_per_grid]],
                      uint lid [[thread_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                      uint simd [[simdgroup_index_in_threadgroup]])
{
    mr_softmax(x, out, outer, n, inner, tg, group, groups, lid, lane, simd);
}

kernel void k_sgd(device float *w [[buffer(0)]], device const float *g [[buffer(1)]], device float *v [[buffer(2)]],
                  constant long &n [[buffer(3)]], constant float &lr [[buffer(4)]],
                  constant float &momentum [[buffer(5)]], constant int &use_v [[buffer(6)]],
                  uint group [[threadgroup_position_in_grid]], uint groups [[threadgroups_per_grid]],
                  uint lid [[thread_index_in_threadgroup]])
{
    mr_sgd(w, g, v, n, lr, momentum, use_v, group, groups, lid);
}

#if !defined(MITHRILC_METAL_EMU_H)
/* For Apple's compiler (make -f Makefile.kernels metal-check): the template kernels'
 * instances, by name, so that every path of the library is compiled for the GPU too. */
#define TEST_GEMM_INST(P, EP, NAME)                                                                         \
    template [[host_name(NAME)]] kernel void k_gemm<P, EP>(                                                 \
        device const float *a [[buffer(0)]], device const float *b [[buffer(1)]], device float *c [[buffer(2)]], \
        device const float *bias [[buffer(3)]], constant gemm_params &p [[buffer(4)]],                      \
        threadgroup float *tg [[threadgroup(0)]], uint group [[threadgroup_position_in_grid]],              \
        uint groups [[threadgroups_per_grid]], uint lid [[thread_index_in_threadgroup]],                    \
        uint lane [[thread_index_in_simdgroup]], uint simd [[simdgroup_index_in_threadgroup]]);
#define TEST_CONV_INST(P, EP, NAME)                                                                         \
    template [[host_name(NAME)]] kernel void k_conv<P, EP>(                                                 \
        device const float *x [[buffer(0)]], device const float *w [[buffer(1)]], device float *out [[buffer(2)]], \
        device const float *bias [[buffer(3)]], constant conv_params &p [[buffer(4)]],                      \
        threadgroup float *tg [[threadgroup(0)]], uint group [[threadgroup_position_in_grid]],              \
        uint groups [[threadgroups_per_grid]], uint lid [[thread_index_in_threadgroup]],                    \
        uint lane [[thread_index_in_simdgroup]], uint simd [[simdgroup_index_in_threadgroup]]);
TEST_GEMM_INST(MR_F32, 0, "k_gemm_f32")
TEST_GEMM_INST(MR_F32, 1, "k_gemm_f32_ep")
TEST_GEMM_INST(MR_BF16, 1, "k_gemm_bf16_ep")
TEST_GEMM_INST(MR_F16, 1, "k_gemm_f16_ep")
TEST_CONV_INST(MR_F32, 1, "k_conv_f32_ep")
TEST_CONV_INST(MR_BF16, 1, "k_conv_bf16_ep")
TEST_CONV_INST(MR_F16, 0, "k_conv_f16")
#endif

/* ------------------------------------------------------------------------------------ */
/* Host                                                                                 */
/* ------------------------------------------------------------------------------------ */

#if defined(MITHRILC_METAL_EMU_H) /* the host half: under the emulation only */
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

/* TEST_DISPATCH_TG(groups, tg_bytes, kernel, args...) runs a kernel whose last arguments are
 * (tg, group, groups, lid, lane, simd) over `groups` threadgroups of MR_METAL_THREADS, with
 * tg_bytes of [[threadgroup(0)]]; TEST_DISPATCH(groups, kernel, args...) one whose last are
 * (group, groups, lid). Through metal_emu.h's dispatch (mr_metal_emu::run): the call, a
 * lambda, is reached from a registered-style wrapper through g_body, as a generated
 * <name>_emu.cpp wrapper reaches its kernel. */
namespace E = mr_metal_emu;
static std::function<void()> g_body;
static void test_trampoline(const E::Args &) { g_body(); }
static void test_run(const char *name, unsigned groups, size_t tg_bytes, std::function<void()> body)
{
    E::Args args;
    std::memset(&args, 0, sizeof args);
    size_t tgb[31] = {0};
    tgb[0] = (tg_bytes + 15) / 16 * 16;
    g_body = body;
    E::run(name, test_trampoline, args, tgb, groups, MR_METAL_THREADS);
    g_body = nullptr;
}
#define TEST_DISPATCH_TG(groups, bytes, K, ...)                                                              \
    test_run(#K, groups, bytes, [&] {                                                                       \
        K(__VA_ARGS__, (float *)E::threadgroup_memory(0), E::threadgroup_position_in_grid(),                 \
          E::threadgroups_per_grid(), E::thread_index_in_threadgroup(), E::thread_index_in_simdgroup(),      \
          E::simdgroup_index_in_threadgroup());                                                              \
    })
#define TEST_DISPATCH(groups, K, ...)                                                                        \
    test_run(#K, groups, 0, [&] {                                                                           \
        K(__VA_ARGS__, E::threadgroup_position_in_grid(), E::threadgroups_per_grid(),                       \
          E::thread_index_in_threadgroup());                                                                 \
    })

static int g_checks = 0, g_failures = 0;

static void check(bool ok, const char *what)
{
    ++g_checks;
    if (!ok) {
        ++g_failures;
        std::printf("FAIL %s\n", what);
    }
}

/* Deterministic values in [-1, 1). */
static unsigned g_seed = 12345u;
static float frand()
{
    g_seed = g_seed * 1664525u + 1013904223u;
    return (float)((g_seed >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}
static std::vector<float> rand_vec(size_t n)
{
    std::vector<float> v(n);
    for (auto &x : v) x = frand();
    return v;
}

/* x rounded to bf16 (8 significant bits, inf from 2^128) or f16 (11 bits, quantum 2^-24
 * below 2^-14, inf above 65504), nearest even: written with frexp / ldexp, apart from the kernels' bits. */
static double round_fmt(float xf, int p)
{
    const double x = xf;
    if (p == MR_F32 || x == 0.0 || x != x || std::isinf(x)) return x;
    int e;
    std::frexp(x, &e); /* x = m 2^e, 0.5 <= |m| < 1 */
    const int bits = p == MR_BF16 ? 8 : 11;
    int q = e - bits;
    if (p == MR_F16 && q < -24) q = -24;
    const double r = std::ldexp(std::nearbyint(std::ldexp(x, -q)), q);
    if (p == MR_F16 && std::fabs(r) > 65504.0) return r > 0 ? INFINITY : -INFINITY;
    if (std::fabs(r) >= std::ldexp(1.0, 128)) return r > 0 ? INFINITY : -INFINITY; /* past f32 and bf16 */
    return r;
}

static const char *prec_name(int p) { return p == MR_F32 ? "f32" : (p == MR_BF16 ? "bf16" : "f16"); }

/* ---- GEMM ---- */

struct gemm_case {
    const char *name;
    long m, n, k;
    bool at, bt_; /* A / B transposed (stored k-major / n-major) */
    long pad;     /* extra elements per row of A, B and C (views with padded rows) */
    int ep;
    int rank;
    long ext[4];
    bool bcast_b; /* B broadcast over the last batch dimension */
    bool no_unit; /* no unit stride in A, B or C: every stride doubled */
};

static void run_gemm_case(const gemm_case &t, int P, unsigned groups_override)
{
    const long m = t.m, n = t.n, k = t.k;
    const long u = t.no_unit ? 2 : 1;
    /* A: m x k; at: stored [k][m] */
    gemm_params p;
    std::memset(&p, 0, sizeof p);
    p.m = m, p.n = n, p.k = k;
    const long a_ld = (t.at ? m : k) + t.pad, b_ld = (t.bt_ ? k : n) + t.pad, c_ld = n + t.pad;
    if (t.at) p.a_rs = u, p.a_cs = a_ld * u; else p.a_rs = a_ld * u, p.a_cs = u;
    if (t.bt_) p.b_rs = u, p.b_cs = b_ld * u; else p.b_rs = b_ld * u, p.b_cs = u;
    p.c_rs = c_ld * u, p.c_cs = u;
    const long a_sz = (t.at ? k : m) * a_ld * u + 1, b_sz = (t.bt_ ? n : k) * b_ld * u + 1, c_sz = m * c_ld * u + 1;
    long nbatch = 1, nb_b = 1;
    p.bt.rank = t.rank;
    for (int d = t.rank - 1; d >= 0; --d) {
        p.bt.ext[d] = t.ext[d];
        p.bt.a[d] = nbatch * a_sz;
        p.bt.c[d] = nbatch * c_sz;
        const bool bc = t.bcast_b && d == t.rank - 1;
        p.bt.b[d] = bc ? 0 : nb_b * b_sz;
        nbatch *= t.ext[d];
        if (!bc) nb_b *= t.ext[d];
    }
    std::vector<float> A = rand_vec((size_t)(a_sz * nbatch)), B = rand_vec((size_t)(b_sz * nb_b)), bias = rand_vec(n + 1);
    std::vector<float> C((size_t)(c_sz * nbatch), 777.0f);
    const unsigned groups = groups_override ? groups_override : (unsigned)MR_METAL_SGEMM_GROUPS(m, n, nbatch);
    auto kern = P == MR_F32 ? (t.ep ? k_gemm<MR_F32, 1> : k_gemm<MR_F32, 0>)
                            : P == MR_BF16 ? (t.ep ? k_gemm<MR_BF16, 1> : k_gemm<MR_BF16, 0>)
                                           : (t.ep ? k_gemm<MR_F16, 1> : k_gemm<MR_F16, 0>);
    TEST_DISPATCH_TG(groups, MR_METAL_SGEMM_TG_BYTES, kern, A.data(), B.data(), C.data(), bias.data(), p);
    /* reference */
    double worst_exact = 0, worst_round = 0, worst_bound = 0;
    bool untouched = true;
    const double uround = P == MR_BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    for (long nb = 0; nb < nbatch; ++nb) {
        long oa = 0, ob = 0, oc = 0, r = nb;
        for (int d = t.rank - 1; d >= 0; --d) {
            const long i = r % t.ext[d];
            r /= t.ext[d];
            oa += i * p.bt.a[d], ob += i * p.bt.b[d], oc += i * p.bt.c[d];
        }
        for (long i = 0; i < m; ++i) {
            for (long j = 0; j < n; ++j) {
                double exact = 0, rounded = 0, mag = 0;
                for (long kk = 0; kk < k; ++kk) {
                    const float av = A[oa + i * p.a_rs + kk * p.a_cs], bv = B[ob + kk * p.b_rs + j * p.b_cs];
                    exact += (double)av * bv;
                    rounded += round_fmt(av, P) * round_fmt(bv, P);
                    mag += std::fabs((double)av * bv);
                }
                if (t.ep) {
                    exact = exact * 0.5 + bias[j] + 0.25 * nb + 0.125 * i;
                    rounded = rounded * 0.5 + bias[j] + 0.25 * nb + 0.125 * i;
                }
                const double got = C[oc + i * p.c_rs + j * p.c_cs];
                const double scale = mag + (t.ep ? 1.0 + std::fabs(bias[j]) + 0.25 * nb + 0.125 * i : 0.0) + 1e-30;
                worst_exact = std::fmax(worst_exact, std::fabs(got - exact) / scale);
                worst_round = std::fmax(worst_round, std::fabs(got - rounded) / scale);
                worst_bound = std::fmax(worst_bound, std::fabs(got - exact) / (mag + 1e-30) - (2 * uround + uround * uround) - 1e-5);
                if (got != got) worst_exact = worst_round = 1e30;
            }
        }
        /* padding and the gaps of strided views must stay untouched */
        for (long i = 0; i < m; ++i)
            for (long j = 0; j < c_ld * u; ++j)
                if (!(j % u == 0 && j / u < n) && C[oc + i * c_ld * u + j] != 777.0f) untouched = false;
    }
    char what[200];
    const bool on_tile = P != MR_F32 && m > MR_METAL_GEMV_MAX_M;
    if (!on_tile) {
        std::snprintf(what, sizeof what, "gemm %s %s groups %u: rel err %.3g", t.name, prec_name(P), groups, worst_exact);
        check(worst_exact <= 1e-5, what);
    } else {
        std::snprintf(what, sizeof what, "gemm %s %s groups %u: vs rounded %.3g", t.name, prec_name(P), groups, worst_round);
        check(worst_round <= 1e-5, what);
        std::snprintf(what, sizeof what, "gemm %s %s groups %u: vs f64 over bound %.3g", t.name, prec_name(P), groups, worst_bound);
        check(worst_bound <= 0, what);
        if (k > 0) {
            std::snprintf(what, sizeof what, "gemm %s %s groups %u: rounds (err %.3g)", t.name, prec_name(P), groups, worst_exact);
            check(worst_exact > 1e-5, what);
        }
    }
    std::snprintf(what, sizeof what, "gemm %s %s groups %u: padding untouched", t.name, prec_name(P), groups);
    check(untouched, what);
}

static void test_gemm()
{
    const gemm_case cases[] = {
        {"1x1x1", 1, 1, 1, false, false, 0, 0, 0, {0}, false, false},
        {"gemv m1", 1, 37, 100, false, false, 0, 0, 0, {0}, false, false},
        {"gemv m1 Bt", 1, 37, 100, false, true, 0, 1, 0, {0}, false, false},
        {"gemv m4 ep", 4, 70, 45, true, false, 3, 1, 0, {0}, false, false},
        {"5x9x3", 5, 9, 3, false, false, 0, 0, 0, {0}, false, false},
        {"65x33x17", 65, 33, 17, false, false, 0, 0, 0, {0}, false, false},
        {"129x65x33 ep", 129, 65, 33, false, false, 0, 1, 0, {0}, false, false},
        {"100x70x37 At", 100, 70, 37, true, false, 0, 0, 0, {0}, false, false},
        {"100x70x37 Bt ep", 100, 70, 37, false, true, 0, 1, 0, {0}, false, false},
        {"70x130x50 At Bt", 70, 130, 50, true, true, 0, 0, 0, {0}, false, false},
        {"9x20x1 k1", 9, 20, 1, false, false, 0, 0, 0, {0}, false, false},
        {"9x20x0 k0 ep", 9, 20, 0, false, false, 0, 1, 0, {0}, false, false},
        {"33x17x21 padded", 33, 17, 21, false, false, 5, 1, 0, {0}, false, false},
        {"20x19x18 no unit stride", 20, 19, 18, true, false, 1, 1, 0, {0}, false, true},
        {"batch 2x3 B bcast ep", 17, 23, 19, false, true, 0, 1, 2, {2, 3}, true, false},
        {"batch 3 gemv", 2, 40, 30, false, false, 0, 1, 1, {3}, false, false},
        {"batch 2 gemv Bt ep", 3, 45, 70, false, true, 0, 1, 1, {2}, false, false},
        {"gemv m2 k0 ep", 2, 33, 0, false, false, 0, 1, 0, {0}, false, false},
        {"batch 2 70x66x16", 70, 66, 16, false, false, 0, 0, 1, {2}, false, false},
    };
    for (int P : {MR_F32, MR_BF16, MR_F16})
        for (const auto &t : cases)
            for (unsigned g : {0u, 1u, 3u}) {
                if (P != MR_F32 && g == 3u) continue;
                run_gemm_case(t, P, g);
            }
}

/* ---- rounding ---- */

static void test_round()
{
    const float vals[] = {1.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256,
                          -1.00390625f, 0.1f, -3.14159265f, 65504.0f, 65519.0f, 65520.0f, -70000.0f, 1e-5f,
                          6.1e-5f, 3e-8f, 2.98023224e-08f, 2.99e-08f, -1e-7f, 1e30f, 3.4e38f, 0.0f, -0.0f,
                          INFINITY, -INFINITY, 5.96046448e-08f, 1.2e-38f};
    int bad = 0;
    for (int P : {MR_BF16, MR_F16})
        for (float v : vals) {
            const double want = round_fmt(v, P);
            const float got = mr_mtl_round(P, v);
            if (!((double)got == want || (got != got && want != want))) {
                ++bad;
                std::printf("  round %s(%.9g) = %.9g, want %.9g\n", prec_name(P), v, got, want);
            }
        }
    const float nan = std::nanf("");
    if (mr_mtl_round(MR_F16, nan) == mr_mtl_round(MR_F16, nan) || mr_mtl_round(MR_BF16, nan) == mr_mtl_round(MR_BF16, nan)) ++bad;
    check(bad == 0, "mr_mtl_round: bf16 and f16 nearest even, ranges, NaN");
}

/* ---- convolution ---- */

struct conv_case {
    const char *name;
    long n, c, h, wd, o, kh, kw, sh, sw, ph, pw, dh, dw, cgroups;
    int ep;
};

static void run_conv_case(const conv_case &t, int P, unsigned groups_override)
{
    conv_params p = {t.n, t.c, t.h, t.wd, t.o, t.kh, t.kw, 0, 0, t.sh, t.sw, t.ph, t.pw, t.dh, t.dw, t.cgroups};
    p.oh = (t.h + 2 * t.ph - t.dh * (t.kh - 1) - 1) / t.sh + 1;
    p.ow = (t.wd + 2 * t.pw - t.dw * (t.kw - 1) - 1) / t.sw + 1;
    const long cg = t.c / t.cgroups, M = t.o / t.cgroups, ohw = p.oh * p.ow;
    std::vector<float> X = rand_vec(t.n * t.c * t.h * t.wd), W = rand_vec(t.o * cg * t.kh * t.kw), bias = rand_vec(t.o);
    std::vector<float> O((size_t)(t.n * t.o * ohw), 777.0f);
    const unsigned groups = groups_override ? groups_override
                                            : (unsigned)MR_METAL_CONV2D_GROUPS(t.n, t.o, p.oh, p.ow, t.cgroups);
    auto kern = P == MR_F32 ? (t.ep ? k_conv<MR_F32, 1> : k_conv<MR_F32, 0>)
                            : P == MR_BF16 ? (t.ep ? k_conv<MR_BF16, 1> : k_conv<MR_BF16, 0>)
                                           : (t.ep ? k_conv<MR_F16, 1> : k_conv<MR_F16, 0>);
    TEST_DISPATCH_TG(groups, MR_METAL_CONV2D_TG_BYTES, kern, X.data(), W.data(), O.data(), bias.data(), p);
    const double uround = P == MR_BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    double worst_exact = 0, worst_round = 0, worst_bound = 0;
    for (long b = 0; b < t.n; ++b)
        for (long oc = 0; oc < t.o; ++oc)
            for (long y = 0; y < p.oh; ++y)
                for (long x = 0; x < p.ow; ++x) {
                    const long g = oc / M;
                    double exact = 0, rounded = 0, mag = 0;
                    for (long ic = 0; ic < cg; ++ic)
                        for (long ky = 0; ky < t.kh; ++ky)
                            for (long kx = 0; kx < t.kw; ++kx) {
                                const long iy = y * t.sh + ky * t.dh - t.ph, ix = x * t.sw + kx * t.dw - t.pw;
                                if (iy < 0 || iy >= t.h || ix < 0 || ix >= t.wd) continue;
                                const float xv = X[((b * t.c + g * cg + ic) * t.h + iy) * t.wd + ix];
                                const float wv = W[((oc * cg + ic) * t.kh + ky) * t.kw + kx];
                                exact += (double)xv * wv;
                                rounded += round_fmt(xv, P) * round_fmt(wv, P);
                                mag += std::fabs((double)xv * wv);
                            }
                    const long pos = y * p.ow + x;
                    if (t.ep) {
                        exact = exact * 0.5 + bias[oc] + 0.25 * b + pos / 64.0;
                        rounded = rounded * 0.5 + bias[oc] + 0.25 * b + pos / 64.0;
                    }
                    const double got = O[(b * t.o + oc) * ohw + pos];
                    const double scale = mag + (t.ep ? 1.0 + std::fabs(bias[oc]) + 0.25 * b + pos / 64.0 : 0.0) + 1e-30;
                    worst_exact = std::fmax(worst_exact, std::fabs(got - exact) / scale);
                    worst_round = std::fmax(worst_round, std::fabs(got - rounded) / scale);
                    worst_bound = std::fmax(worst_bound, std::fabs(got - exact) / (mag + 1e-30) - (2 * uround + uround * uround) - 1e-5);
                    if (got != got) worst_exact = worst_round = 1e30;
                }
    char what[200];
    const bool gemm_route = t.kh == 1 && t.kw == 1 && t.sh == 1 && t.sw == 1 && t.ph == 0 && t.pw == 0 && t.cgroups == 1;
    const bool on_tile = P != MR_F32 && (gemm_route ? t.o > MR_METAL_GEMV_MAX_M : M > MR_METAL_CONV_DIRECT_MAX_M);
    if (!on_tile) {
        std::snprintf(what, sizeof what, "conv %s %s groups %u: rel err %.3g", t.name, prec_name(P), groups, worst_exact);
        check(worst_exact <= 1e-5, what);
    } else {
        std::snprintf(what, sizeof what, "conv %s %s groups %u: vs rounded %.3g", t.name, prec_name(P), groups, worst_round);
        check(worst_round <= 1e-5, what);
        std::snprintf(what, sizeof what, "conv %s %s groups %u: vs f64 over bound %.3g", t.name, prec_name(P), groups, worst_bound);
        check(worst_bound <= 0, what);
        std::snprintf(what, sizeof what, "conv %s %s groups %u: rounds (err %.3g)", t.name, prec_name(P), groups, worst_exact);
        check(worst_exact > 1e-5, what);
    }
}

static void test_conv()
{
    const conv_case cases[] = {
        /* name          n  c  h  wd  o kh kw sh sw ph pw dh dw groups ep */
        {"1x1 gemm route ep", 2, 7, 5, 6, 9, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1},
        {"1x1 stride 2", 2, 5, 7, 6, 8, 1, 1, 2, 2, 0, 0, 1, 1, 1, 0},
        {"3x3 pad 1", 2, 3, 9, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0},
        {"3x3 pad 1 o70 ep", 1, 4, 6, 7, 70, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
        {"stride 2 dilation 2", 2, 3, 11, 10, 6, 3, 3, 2, 2, 1, 2, 2, 2, 1, 0},
        {"5x3 kernel", 1, 2, 9, 8, 7, 5, 3, 1, 2, 2, 1, 1, 1, 1, 1},
        {"groups 2", 2, 6, 6, 5, 12, 3, 3, 1, 1, 1, 1, 1, 1, 2, 1},
        {"depthwise s2 ep", 2, 5, 9, 8, 5, 3, 3, 2, 2, 1, 1, 1, 1, 5, 1},
        {"channel multiplier 2", 1, 4, 7, 7, 8, 3, 3, 1, 1, 1, 1, 1, 1, 4, 0},
        {"1-d", 3, 4, 1, 30, 6, 1, 5, 1, 1, 0, 2, 1, 1, 1, 0},
        {"many positions", 2, 3, 20, 19, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
    };
    for (int P : {MR_F32, MR_BF16, MR_F16})
        for (const auto &t : cases)
            for (unsigned g : {0u, 1u, 3u}) {
                if (P != MR_F32 && g == 3u) continue;
                run_conv_case(t, P, g);
            }
}

/* ---- pooling ---- */

struct pool_case {
    const char *name;
    long lead, h, wd, kh, kw, sh, sw, ph, pw, dh, dw;
    bool nans;
};

static void run_pool_case(const pool_case &t, int is_max, unsigned groups_override)
{
    pool_params p = {t.lead, t.h, t.wd, t.kh, t.kw, 0, 0, t.sh, t.sw, t.ph, t.pw, t.dh, t.dw, is_max};
    p.oh = (t.h + 2 * t.ph - t.dh * (t.kh - 1) - 1) / t.sh + 1;
    p.ow = (t.wd + 2 * t.pw - t.dw * (t.kw - 1) - 1) / t.sw + 1;
    std::vector<float> X = rand_vec(t.lead * t.h * t.wd);
    if (t.nans)
        for (size_t i = 0; i < X.size(); i += 17) X[i] = std::nanf("");
    std::vector<float> O((size_t)(t.lead * p.oh * p.ow), 777.0f);
    const unsigned groups = groups_override ? groups_override : (unsigned)MR_METAL_POOL2D_GROUPS(t.lead, p.oh, p.ow);
    TEST_DISPATCH(groups, k_pool, X.data(), O.data(), p);
    /* runtime-c's order: init, taps in (ky, kx) order, max takes larger or NaN; average
     * sums in-range taps from 0 and divides by kh*kw. Bit for bit. */
    long bad = 0;
    for (long pl = 0; pl < t.lead; ++pl)
        for (long y = 0; y < p.oh; ++y)
            for (long x = 0; x < p.ow; ++x) {
                float acc = is_max ? -INFINITY : 0.0f;
                for (long ky = 0; ky < t.kh; ++ky)
                    for (long kx = 0; kx < t.kw; ++kx) {
                        const long iy = y * t.sh + ky * t.dh - t.ph, ix = x * t.sw + kx * t.dw - t.pw;
                        if (iy < 0 || iy >= t.h || ix < 0 || ix >= t.wd) continue;
                        const float v = X[(pl * t.h + iy) * t.wd + ix];
                        if (is_max) acc = (v > acc || v != v) ? v : acc;
                        else acc += v;
                    }
                if (!is_max) acc = acc / (float)(t.kh * t.kw);
                const float got = O[(pl * p.oh + y) * p.ow + x];
                if (!(got == acc || (got != got && acc != acc))) ++bad;
            }
    char what[200];
    std::snprintf(what, sizeof what, "pool %s %s groups %u: %ld mismatches", t.name, is_max ? "max" : "avg", groups, bad);
    check(bad == 0, what);
}

static void test_pool()
{
    const pool_case cases[] = {
        {"2x2/2", 3, 8, 9, 2, 2, 2, 2, 0, 0, 1, 1, false},
        {"3x3/2 pad 1", 4, 9, 10, 3, 3, 2, 2, 1, 1, 1, 1, false},
        {"3x3/1 NaNs", 2, 7, 8, 3, 3, 1, 1, 1, 1, 1, 1, true},
        {"dilated", 2, 11, 9, 3, 2, 1, 2, 2, 1, 2, 3, false},
        {"windows in padding", 2, 3, 3, 2, 2, 3, 3, 2, 2, 1, 1, false},
        {"global", 5, 7, 6, 7, 6, 1, 1, 0, 0, 1, 1, false},
        {"many planes", 300, 6, 5, 2, 3, 2, 1, 1, 1, 1, 1, false},
    };
    for (const auto &t : cases)
        for (int is_max : {1, 0})
            for (unsigned g : {0u, 1u, 3u}) run_pool_case(t, is_max, g);
}

/* ---- softmax ---- */

enum { SM_RAND, SM_NEG_INF, SM_ALL_NEG_INF, SM_NAN, SM_LARGE };

static void run_softmax_case(long outer, long n, long inner, int kind, bool in_place, unsigned groups_override)
{
    std::vector<float> X = rand_vec(outer * n * inner);
    for (auto &v : X) v *= 8.0f;
    if (kind == SM_NEG_INF)
        for (size_t i = 0; i < X.size(); i += 3) X[i] = -INFINITY;
    if (kind == SM_ALL_NEG_INF)
        for (long k = 0; k < n; ++k) X[k * inner] = -INFINITY; /* row (0, 0) */
    if (kind == SM_NAN) X[(n / 2) * inner] = std::nanf("");      /* row (0, 0) */
    if (kind == SM_LARGE)
        for (size_t i = 0; i < X.size(); i += 2) X[i] = (i % 4 == 0) ? 3e38f : -3e38f;
    std::vector<float> O(X.size(), 777.0f);
    const std::vector<float> X0 = X;
    const unsigned groups = groups_override ? groups_override : (unsigned)MR_METAL_SOFTMAX_GROUPS(outer, n, inner);
    float *out = in_place ? X.data() : O.data();
    TEST_DISPATCH_TG(groups, MR_METAL_SOFTMAX_TG_BYTES, k_softmax, X.data(), out, outer, n, inner);
    double worst = 0;
    long bad = 0;
    for (long o = 0; o < outer; ++o)
        for (long i = 0; i < inner; ++i) {
            double m = -INFINITY;
            bool nan = false;
            for (long k = 0; k < n; ++k) {
                const float v = X0[(o * n + k) * inner + i];
                if (v != v) nan = true;
                m = std::fmax(m, (double)v);
            }
            double s = 0;
            for (long k = 0; k < n; ++k) {
                const double v = X0[(o * n + k) * inner + i];
                s += (v == -INFINITY) ? 0.0 : std::exp(v - m);
            }
            for (long k = 0; k < n; ++k) {
                const double v = X0[(o * n + k) * inner + i];
                const float got = out[(o * n + k) * inner + i];
                if (nan || m == -INFINITY) {
                    if (got == got) ++bad; /* NaN rows stay NaN */
                    continue;
                }
                if (v == -INFINITY) {
                    if (got != 0.0f) ++bad; /* masked entries exactly 0 */
                    continue;
                }
                const double want = std::exp(v - m) / s;
                const double err = std::fabs(got - want) / (want + 1e-6);
                if (got != got) ++bad;
                worst = std::fmax(worst, err);
            }
        }
    char what[200];
    std::snprintf(what, sizeof what, "softmax [%ld, %ld, %ld] kind %d%s groups %u: %ld bad, rel err %.3g", outer, n,
                  inner, kind, in_place ? " in place" : "", groups, bad, worst);
    check(bad == 0 && worst <= 1e-5, what);
}

static void test_softmax()
{
    struct sm { long outer, n, inner; int kind; bool in_place; };
    const sm cases[] = {
        {3, 1, 1, SM_RAND, false},      {5, 10, 1, SM_RAND, false},     {4, 33, 1, SM_NEG_INF, false},
        {3, 300, 1, SM_RAND, true},     {2, 1024, 1, SM_NEG_INF, false}, {3, 1500, 1, SM_RAND, false},
        {2, 3000, 1, SM_NEG_INF, true}, {2, 50, 3, SM_RAND, false},     {3, 2000, 2, SM_RAND, false},
        {4, 5, 5, SM_RAND, false},      {2, 20, 5000, SM_RAND, true},   {3, 40, 1, SM_ALL_NEG_INF, false},
        {2, 2000, 1, SM_ALL_NEG_INF, false}, {3, 6, 4, SM_ALL_NEG_INF, false}, {3, 40, 1, SM_NAN, false},
        {2, 1300, 1, SM_NAN, false},    {2, 7, 3, SM_NAN, false},       {3, 64, 1, SM_LARGE, false},
        {2, 1100, 1, SM_LARGE, false},  {2, 6, 5, SM_LARGE, false},
    };
    for (const auto &t : cases)
        for (unsigned g : {0u, 1u, 3u}) run_softmax_case(t.outer, t.n, t.inner, t.kind, t.in_place, g);
}

/* ---- SGD ---- */

static void run_sgd_case(long n, float lr, float momentum, int use_v, unsigned groups_override)
{
    std::vector<float> W = rand_vec(n), G = rand_vec(n), V = rand_vec(n);
    std::vector<float> W0 = W, V0 = V;
    const unsigned groups = groups_override ? groups_override : (unsigned)MR_METAL_SGD_GROUPS(n);
    TEST_DISPATCH(groups, k_sgd, W.data(), G.data(), V.data(), n, lr, momentum, use_v);
    long bad = 0;
    for (long i = 0; i < n; ++i) {
        /* runtime-c's mr_sgd_f32, each operation rounded on its own */
        float w = W0[i], v = V0[i];
        if (use_v) {
            volatile float pv = momentum * v;
            v = pv + G[i];
            volatile float step = lr * v;
            w = w - step;
        } else {
            volatile float step = lr * G[i];
            w = w - step;
        }
        if (W[i] != w || V[i] != v) ++bad;
    }
    char what[200];
    std::snprintf(what, sizeof what, "sgd n %ld momentum %g use_v %d groups %u: %ld differ from runtime-c", n, momentum,
                  use_v, groups, bad);
    check(bad == 0, what);
}

static void test_sgd()
{
    for (unsigned g : {0u, 1u, 3u}) {
        run_sgd_case(1000, 0.05f, 0.9f, 1, g);
        run_sgd_case(1001, 0.05f, 0.0f, 0, g);
        run_sgd_case(1, 0.5f, 0.9f, 1, g);
    }
    run_sgd_case(300001, 0.01f, 0.9f, 1, 0);
}

/* ---- random shapes ---- */

static long irand(long lo, long hi) /* in [lo, hi] */
{
    g_seed = g_seed * 1664525u + 1013904223u;
    return lo + (long)((g_seed >> 8) % (unsigned)(hi - lo + 1));
}

/* Random GEMM and convolution problems (deterministic seed), each precision, with a
 * random group count: the corners the listed cases miss. */
static void test_random()
{
    for (int t = 0; t < 24; ++t) {
        gemm_case c = {"random", irand(1, 150), irand(1, 150), irand(0, 70), irand(0, 1) != 0, irand(0, 1) != 0,
                       irand(0, 3), (int)irand(0, 1), (int)irand(0, 2), {irand(1, 3), irand(1, 2), 1, 1},
                       irand(0, 1) != 0, irand(0, 3) == 0};
        if (c.rank == 0) c.bcast_b = false;
        if (t % 4 == 0) c.m = irand(1, 4);
        const int P = t % 3 == 0 ? MR_F32 : (t % 3 == 1 ? MR_BF16 : MR_F16);
        run_gemm_case(c, P, (unsigned)irand(0, 6));
    }
    for (int t = 0; t < 18; ++t) {
        const long cgroups = irand(1, 3), kh = irand(1, 4), kw = irand(1, 4), dh = irand(1, 2), dw = irand(1, 2);
        conv_case c = {"random", irand(1, 3), cgroups * irand(1, 4), 0, 0, cgroups * irand(1, 12), kh, kw,
                       irand(1, 3), irand(1, 3), irand(0, 2), irand(0, 2), dh, dw, cgroups, (int)irand(0, 1)};
        c.h = dh * (kh - 1) + irand(1, 12);
        c.wd = dw * (kw - 1) + irand(1, 12);
        const int P = t % 3 == 0 ? MR_F32 : (t % 3 == 1 ? MR_BF16 : MR_F16);
        run_conv_case(c, P, (unsigned)irand(0, 6));
    }
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : "";
    if (!*only || !std::strcmp(only, "round")) test_round();
    if (!*only || !std::strcmp(only, "sgd")) test_sgd();
    if (!*only || !std::strcmp(only, "pool")) test_pool();
    if (!*only || !std::strcmp(only, "softmax")) test_softmax();
    if (!*only || !std::strcmp(only, "gemm")) test_gemm();
    if (!*only || !std::strcmp(only, "conv")) test_conv();
    if (!*only || !std::strcmp(only, "random")) test_random();
    std::printf("%d checks, %d failed\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
#endif /* MITHRILC_METAL_EMU_H */
