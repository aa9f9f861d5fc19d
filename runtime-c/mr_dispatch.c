/*
 * mr_dispatch.c -- mithril_runtime.h's public names for the ISA-specialized functions,
 * each calling the variant (mr_internal.h) chosen once, on first use, from the CPU:
 * "avx512" (mr_isa_avx512.c) where it has AVX-512 F, DQ, BW and VL, else "avx2"
 * (mr_isa_avx2.c) where it has AVX2 and FMA, else "generic" (the sources compiled for
 * the build's own target). The environment variable MR_ISA=generic|avx2|avx512 asks
 * for a variant instead; a variant the CPU lacks, or another value, is ignored (the
 * automatic choice stands). mr_isa_name() says which variant runs.
 *
 * Without dispatch (MR_NO_DISPATCH, not x86-64, not GCC >= 6 or clang >= 9) the
 * sources define the public names themselves and this file only defines mr_isa_name,
 * naming the compile-time choice ("neon" on AArch64, whose GEMM tile is NEON's).
 */
/* (syscall(), for AMX's permission below: glibc declares it under -std=c99 only so) */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE 1
#endif
#define MR_DISPATCHER 1 /* the plain names: mr_internal.h renames nothing here */
#include "mr_internal.h"

#if defined(MR_DISPATCH)
#include <stdlib.h> /* getenv */

/* The dispatched functions: name, parameters, arguments. */
#define MR_DISPATCHED(X)                                                                                       \
    X(mr_sgemm,                                                                                                \
      (int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t a_rs, int64_t a_cs, const float *B, \
       int64_t b_rs, int64_t b_cs, float beta, float *C, int64_t c_rs, int64_t c_cs),                          \
      (M, N, K, alpha, A, a_rs, a_cs, B, b_rs, b_cs, beta, C, c_rs, c_cs))                                     \
    X(mr_sgemm_panels,                                                                                         \
      (int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t a_rs, int64_t a_cs, const float *Bp, \
       float beta, float *C, int64_t c_rs, int64_t c_cs),                                                      \
      (M, N, K, alpha, A, a_rs, a_cs, Bp, beta, C, c_rs, c_cs))                                                \
    X(mr_sgemm_mt,                                                                                             \
      (const mr_threads *threads, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t a_rs,  \
       int64_t a_cs, const float *B, int64_t b_rs, int64_t b_cs, float beta, float *C, int64_t c_rs,           \
       int64_t c_cs, const mr_epilogue *ep),                                                                   \
      (threads, M, N, K, alpha, A, a_rs, a_cs, B, b_rs, b_cs, beta, C, c_rs, c_cs, ep))                        \
    X(mr_sgemm_panels_mt,                                                                                      \
      (const mr_threads *threads, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t a_rs,  \
       int64_t a_cs, const float *Bp, float beta, float *C, int64_t c_rs, int64_t c_cs, const mr_epilogue *ep), \
      (threads, M, N, K, alpha, A, a_rs, a_cs, Bp, beta, C, c_rs, c_cs, ep))                                   \
    X(mr_sgemm_panels_q,                                                                                       \
      (int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t a_rs, int64_t a_cs, const void *Bp,  \
       int btype, float beta, float *C, int64_t c_rs, int64_t c_cs),                                           \
      (M, N, K, alpha, A, a_rs, a_cs, Bp, btype, beta, C, c_rs, c_cs))                                         \
    X(mr_sgemm_panels_q_mt,                                                                                    \
      (const mr_threads *threads, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t a_rs,  \
       int64_t a_cs, const void *Bp, int btype, float beta, float *C, int64_t c_rs, int64_t c_cs,              \
       const mr_epilogue *ep),                                                                                 \
      (threads, M, N, K, alpha, A, a_rs, a_cs, Bp, btype, beta, C, c_rs, c_cs, ep))                            \
    X(mr_gemm_i8_mt,                                                                                           \
      (const mr_threads *threads, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha, const float *A, \
       int64_t a_bs, int64_t a_rs, int64_t a_cs, const void *Bq, float beta, float *C, int64_t c_bs,           \
       int64_t c_rs, int64_t c_cs, void *scratch, const mr_epilogue *ep),                                      \
      (threads, batch, M, N, K, alpha, A, a_bs, a_rs, a_cs, Bq, beta, C, c_bs, c_rs, c_cs, scratch, ep))       \
    X(mr_conv2d_i8_mt,                                                                                         \
      (const mr_threads *threads, const float *x, const void *wq, float *y, int64_t N, int64_t C, int64_t H,   \
       int64_t W, int64_t O, int64_t KH, int64_t KW, int64_t OH, int64_t OW, int64_t stride_h,                 \
       int64_t stride_w, int64_t pad_top, int64_t pad_left, int64_t dil_h, int64_t dil_w, void *scratch,       \
       const mr_epilogue *ep),                                                                                 \
      (threads, x, wq, y, N, C, H, W, O, KH, KW, OH, OW, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w,  \
       scratch, ep))                                                                                           \
    X(mr_dequantize, (int type, const void *src, int64_t n, float *dst), (type, src, n, dst))                  \
    X(mr_conv2d_f32,                                                                                           \
      (const float *x, const float *w, float *y, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,        \
       int64_t KH, int64_t KW, int64_t OH, int64_t OW, int64_t stride_h, int64_t stride_w, int64_t pad_top,    \
       int64_t pad_left, int64_t dil_h, int64_t dil_w, int64_t groups),                                        \
      (x, w, y, N, C, H, W, O, KH, KW, OH, OW, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w, groups))   \
    X(mr_conv2d_f32_mt,                                                                                        \
      (const mr_threads *threads, const float *x, const float *w, float *y, int64_t N, int64_t C, int64_t H,   \
       int64_t W, int64_t O, int64_t KH, int64_t KW, int64_t OH, int64_t OW, int64_t stride_h,                 \
       int64_t stride_w, int64_t pad_top, int64_t pad_left, int64_t dil_h, int64_t dil_w, int64_t groups,      \
       const mr_epilogue *ep),                                                                                 \
      (threads, x, w, y, N, C, H, W, O, KH, KW, OH, OW, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w,   \
       groups, ep))                                                                                            \
    X(mr_conv2d_winograd_f32,                                                                                  \
      (const float *x, const float *u, float *y, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,        \
       int64_t OH, int64_t OW, int64_t pad_top, int64_t pad_left, float *scratch),                             \
      (x, u, y, N, C, H, W, O, OH, OW, pad_top, pad_left, scratch))                                            \
    X(mr_conv2d_winograd_f32_mt,                                                                               \
      (const mr_threads *threads, const float *x, const float *u, float *y, int64_t N, int64_t C, int64_t H,   \
       int64_t W, int64_t O, int64_t OH, int64_t OW, int64_t pad_top, int64_t pad_left, float *scratch,        \
       const mr_epilogue *ep),                                                                                 \
      (threads, x, u, y, N, C, H, W, O, OH, OW, pad_top, pad_left, scratch, ep))                               \
    X(mr_conv2d_q_mt,                                                                                          \
      (const mr_threads *threads, const float *x, const void *w, int wtype, float *y, int64_t N, int64_t C,    \
       int64_t H, int64_t W, int64_t O, int64_t KH, int64_t KW, int64_t OH, int64_t OW, int64_t stride_h,      \
       int64_t stride_w, int64_t pad_top, int64_t pad_left, int64_t dil_h, int64_t dil_w, int64_t groups,      \
       const mr_epilogue *ep),                                                                                 \
      (threads, x, w, wtype, y, N, C, H, W, O, KH, KW, OH, OW, stride_h, stride_w, pad_top, pad_left, dil_h,   \
       dil_w, groups, ep))                                                                                     \
    X(mr_conv2d_winograd_q_mt,                                                                                 \
      (const mr_threads *threads, const float *x, const void *u, int utype, float *y, int64_t N, int64_t C,    \
       int64_t H, int64_t W, int64_t O, int64_t OH, int64_t OW, int64_t pad_top, int64_t pad_left,             \
       float *scratch, const mr_epilogue *ep),                                                                 \
      (threads, x, u, utype, y, N, C, H, W, O, OH, OW, pad_top, pad_left, scratch, ep))                        \
    X(mr_pool2d_f32,                                                                                           \
      (const float *x, float *y, int64_t N, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW,           \
       int64_t OH, int64_t OW, int64_t stride_h, int64_t stride_w, int64_t pad_top, int64_t pad_left,          \
       int64_t dil_h, int64_t dil_w, int is_max),                                                              \
      (x, y, N, C, H, W, KH, KW, OH, OW, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w, is_max))         \
    X(mr_pool2d_f32_mt,                                                                                        \
      (const mr_threads *threads, const float *x, float *y, int64_t N, int64_t C, int64_t H, int64_t W,        \
       int64_t KH, int64_t KW, int64_t OH, int64_t OW, int64_t stride_h, int64_t stride_w, int64_t pad_top,    \
       int64_t pad_left, int64_t dil_h, int64_t dil_w, int is_max),                                            \
      (threads, x, y, N, C, H, W, KH, KW, OH, OW, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w, is_max)) \
    X(mr_softmax_f32, (const float *x, float *y, int64_t outer, int64_t n, int64_t inner),                     \
      (x, y, outer, n, inner))                                                                                 \
    X(mr_softmax_f32_mt,                                                                                       \
      (const mr_threads *threads, const float *x, float *y, int64_t outer, int64_t n, int64_t inner),         \
      (threads, x, y, outer, n, inner))

/* The variants' functions (mr_isa_avx2.c, mr_isa_avx512.c, and the sources themselves
 * for _generic), and a table of each variant's. */
#define MR_DECLARE(name, params, args) \
    extern __typeof__(name) MR_NAME(name##_generic), MR_NAME(name##_avx2), MR_NAME(name##_avx512);
MR_DISPATCHED(MR_DECLARE)
MR_DECLARE(mr_int8_name, , )
#undef MR_DECLARE

typedef struct {
    const char *name;
#define MR_FIELD(name, params, args) __typeof__(name) *name;
    MR_DISPATCHED(MR_FIELD)
    MR_FIELD(mr_int8_name, , )
#undef MR_FIELD
} mr_isa_table;

#define MR_ENTRY_GENERIC(name, params, args) MR_NAME(name##_generic),
#define MR_ENTRY_AVX2(name, params, args) MR_NAME(name##_avx2),
#define MR_ENTRY_AVX512(name, params, args) MR_NAME(name##_avx512),
static const mr_isa_table mr_isa_generic = {"generic", MR_DISPATCHED(MR_ENTRY_GENERIC) MR_ENTRY_GENERIC(mr_int8_name, , )};
static const mr_isa_table mr_isa_avx2 = {"avx2", MR_DISPATCHED(MR_ENTRY_AVX2) MR_ENTRY_AVX2(mr_int8_name, , )};
static const mr_isa_table mr_isa_avx512 = {"avx512", MR_DISPATCHED(MR_ENTRY_AVX512) MR_ENTRY_AVX512(mr_int8_name, , )};
#undef MR_ENTRY_GENERIC
#undef MR_ENTRY_AVX2
#undef MR_ENTRY_AVX512

/* The chosen variant's table; NULL until the first call. Every thread that finds it
 * NULL computes the same table and stores it: a race without consequence. */
static const mr_isa_table *mr_isa_current;

static int mr_isa_has_avx2(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static int mr_isa_has_avx512(void)
{
    return mr_isa_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}

static const mr_isa_table *mr_isa_choose(void)
{
    const char *want = getenv("MR_ISA");
    const mr_isa_table *t;
    __builtin_cpu_init();
    t = mr_isa_has_avx512() ? &mr_isa_avx512 : mr_isa_has_avx2() ? &mr_isa_avx2 : &mr_isa_generic;
    if (want && strcmp(want, "generic") == 0) t = &mr_isa_generic;
    if (want && strcmp(want, "avx2") == 0 && mr_isa_has_avx2()) t = &mr_isa_avx2;
    if (want && strcmp(want, "avx512") == 0 && mr_isa_has_avx512()) t = &mr_isa_avx512;
    __atomic_store_n(&mr_isa_current, t, __ATOMIC_RELEASE);
    return t;
}

static inline const mr_isa_table *mr_isa(void)
{
    const mr_isa_table *t = __atomic_load_n(&mr_isa_current, __ATOMIC_ACQUIRE);
    return __builtin_expect(t != NULL, 1) ? t : mr_isa_choose();
}

/* The public names: one indirect call (a tail call) to the variant's function. */
#define MR_WRAPPER(name, params, args) \
    void name params { mr_isa()->name args; }
MR_DISPATCHED(MR_WRAPPER)
#undef MR_WRAPPER

const char *mr_isa_name(void) { return mr_isa()->name; }
const char *mr_int8_name(void) { return mr_isa()->mr_int8_name(); }

#else /* no dispatch: the sources' compile-time choice (mr_internal.h) */

const char *mr_isa_name(void)
{
#if defined(MR_TARGET_AVX512)
    return "avx512";
#elif defined(MR_TARGET_AVX2)
    return "avx2";
#elif defined(MR_MICRO_NEON)
    return "neon";
#else
    return "generic";
#endif
}

#endif

/* This core's L2 in bytes, asked of cpuid once (leaf 0x80000006, which AMD's and Intel's
 * CPUs both answer); 0 where unknown (not x86, or a CPU that does not say). Every
 * thread that finds it unasked asks and stores the same value: a race without
 * consequence. */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>
int64_t mr_l2_bytes(void)
{
    static int64_t l2 = -1;
    int64_t v = __atomic_load_n(&l2, __ATOMIC_RELAXED);
    if (v < 0) {
        unsigned a, b, c, d;
        v = __get_cpuid(0x80000006u, &a, &b, &c, &d) ? (int64_t)(c >> 16) * 1024 : 0;
        __atomic_store_n(&l2, v, __ATOMIC_RELAXED);
    }
    return v;
}
#else
int64_t mr_l2_bytes(void) { return 0; }
#endif

/*
 * Which int8 instruction sets the products may use (mr_internal.h's mr_i8_isa: 0
 * AVX-VNNI, 1 AVX-512 VNNI, 2 AMX-INT8; 3 sdot on AArch64, below), asked of cpuid once (leaf 7: AVX-512 VNNI is
 * ECX bit 11, AMX-TILE and AMX-INT8 EDX bits 24 and 25; subleaf 1: AVX-VNNI is EAX bit
 * 4; the OS saves the vector registers where a variant runs at all). AMX's tile data
 * must also be granted to the process: on Linux by arch_prctl(ARCH_REQ_XCOMP_PERM,
 * XFEATURE_XTILEDATA), asked here, once; elsewhere AMX is not used. MR_INT8=vnni in the
 * environment rules out AMX, MR_INT8=madd AMX and VNNI (mr_gemm_i8.c's vpmaddwd kernels
 * run). Every thread that finds it unasked asks and stores the same value.
 */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <stdlib.h> /* getenv (also above, with dispatch) */
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
static int mr_amx_granted(void) { return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0; }
#else
static int mr_amx_granted(void) { return 0; }
#endif
int mr_i8_isa(int which)
{
    static int has = -1; /* bit 0: AVX-VNNI, bit 1: AVX-512 VNNI, bit 2: AMX-INT8 */
    int v = __atomic_load_n(&has, __ATOMIC_RELAXED);
    if (v < 0) {
        const char *want = getenv("MR_INT8");
        const int madd = want && strcmp(want, "madd") == 0, vnni = want && strcmp(want, "vnni") == 0;
        unsigned a = 0, b = 0, c = 0, d = 0;
        v = 0;
        /* (__cpuid_count, not __get_cpuid_count: GCC 6's <cpuid.h> has only the first) */
        if (!madd && __get_cpuid_max(0, NULL) >= 7) {
            __cpuid_count(7, 0, a, b, c, d);
            if (c & (1u << 11)) v |= 2;
            if (!vnni && (d & (1u << 24)) && (d & (1u << 25)) && mr_amx_granted()) v |= 4;
            __cpuid_count(7, 1, a, b, c, d);
            if (a & (1u << 4)) v |= 1;
        }
        __atomic_store_n(&has, v, __ATOMIC_RELAXED);
    }
    return (v >> which) & 1;
}
#elif defined(__aarch64__) && defined(__linux__)
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
/* 3: sdot (HWCAP_ASIMDDP, bit 20 of AT_HWCAP), unless MR_INT8=madd (no dot-product
 * instructions: the portable loops). */
int mr_i8_isa(int which)
{
    static int has = -1;
    int v = __atomic_load_n(&has, __ATOMIC_RELAXED);
    if (v < 0) {
        const char *want = getenv("MR_INT8");
        v = (!want || strcmp(want, "madd") != 0) && (getauxval(AT_HWCAP) & (1ul << 20)) ? 8 : 0;
        __atomic_store_n(&has, v, __ATOMIC_RELAXED);
    }
    return (v >> which) & 1;
}
#else
int mr_i8_isa(int which)
{
    (void)which;
    return 0;
}
#endif
