/*
 * peak.c: this machine's single-precision FMA peak, its int8 and bf16 dot-product peaks
 * and its memory bandwidth, measured, so that a kernel's speed can be given as a fraction
 * of what the cores can do rather than of a datasheet figure (benches/peak/run.sh; the
 * bench table reads its last line).
 *
 * Peaks: each thread runs one instruction on independent accumulators (enough to cover
 * its latency on every port), in the widest vector ISA the CPU has that this file was
 * compiled for. The ISA is chosen at run time (cpuid through __builtin_cpu_supports), each
 * loop built with a function-level target attribute, so no -march flag is needed. Best of
 * several rounds, each long enough (about 0.2 s) for the clock to settle.
 *   - fma: fused multiply-adds (AVX-512, AVX2+FMA, NEON, scalar), in GFLOP/s.
 *   - int8: the dot products of the FMA set's int8 kernels: vpdpbusd (AVX-512 VNNI, or
 *     AVX-VNNI with AVX2), else vpmaddubsw + vpmaddwd + vpaddd (AVX-512BW, AVX2); sdot
 *     (NEON with the dot-product extension). In GOP/s, a multiply-add counted as 2.
 *   - bf16: vdpbf16ps (AVX-512 BF16), in GFLOP/s.
 *   - int8_amx, bf16_amx: AMX's tdpbusd and tdpbf16ps on 16 x 16 tiles (Sapphire Rapids
 *     and later, where the kernel grants the tile state), in GOP/s and GFLOP/s.
 * `--isa` names the FMA set (run.sh measures avx2 too on an AVX-512 CPU); the int8 and
 * bf16 loops follow it, and AMX is measured with avx512 only (every AMX CPU has it).
 *
 * Bandwidth: the STREAM triad a[i] = b[i] + s * c[i] over three 64 MiB arrays (far
 * beyond the caches), counting 12 bytes an element (the write-allocate read of a[] not
 * counted, as STREAM does). Best of several rounds.
 *
 *   peak [--threads N]... [--isa avx512|avx2|neon|scalar]
 * (default: 1 thread, then every core; the widest ISA)
 * prints one line per measurement and a last line of key=value pairs:
 *   isa=avx512 fma_gflops_1t=.. int8=avx512vnni int8_gops_1t=.. bf16=avx512bf16
 *   bf16_gflops_1t=.. int8_amx=amx-int8 int8_amx_gops_1t=.. bf16_amx=amx-bf16
 *   bf16_amx_gflops_1t=.. triad_gbs_1t=..   (a set that is "none" has no figures; the AMX
 *   keys are named so that bench.py's int8_gops_ and fma_gflops_ patterns miss them)
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE 1 /* syscall() */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define PEAK_X86 1
/* AMX's intrinsics need GCC 11 or clang 12, and the tiles the kernel's leave (asked
 * with Linux's arch_prctl). */
#if defined(__x86_64__) && defined(__linux__) \
    && ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#include <sys/syscall.h>
#define PEAK_AMX 1
#endif
#elif defined(__aarch64__)
#include <arm_neon.h>
#include <asm/hwcap.h>
#include <sys/auxv.h>
#define PEAK_NEON 1
#endif

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One thread's loop: `iters` iterations of one instruction on each of its accumulators,
 * each a variable of its own (an array would live in memory at -O2). Returns a value
 * that depends on every accumulator, so none is optimised away. */
typedef float (*peak_loop)(int64_t iters);

/* The accumulators' indices, for loops written once: CHAINS_n(X) is X(0) ... X(n-1).
 * Enough chains to cover the instruction's latency on every port: 12 for 16-register
 * AVX2, 24 for AVX-512, 16 for NEON, 8 scalar. */
#define CHAINS_8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define CHAINS_12(X) CHAINS_8(X) X(8) X(9) X(10) X(11)
#define CHAINS_16(X) CHAINS_12(X) X(12) X(13) X(14) X(15)
#define CHAINS_24(X) CHAINS_16(X) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)

/* PEAK_LOOP(CHAINS, T, INIT, STEP, ADD): the body of a loop over the accumulators
 * `acc0`... of type T, each started at INIT(i), advanced by STEP(acc, i) and summed
 * into `total` by ADD(total, acc); the function returns from `total`. */
#define PEAK_DECL(i) T acc##i = INIT(i);
#define PEAK_STEP(i) acc##i = STEP(acc##i, i);
#define PEAK_ADD(i) total = ADD(total, acc##i);
#define PEAK_LOOP(CHAINS)                   \
    T total = INIT(0);                      \
    int64_t it;                             \
    CHAINS(PEAK_DECL)                       \
    for (it = 0; it < iters; ++it) {        \
        CHAINS(PEAK_STEP)                   \
    }                                       \
    CHAINS(PEAK_ADD)

/* An int8 dot-product instruction sums four products into each 32-bit lane. */
#define INT8_OPS_PER_LANE 8.0

#ifdef PEAK_X86
/* FMA: acc = acc * a + b, 2 flops a lane. */
#define AVX2_CHAINS 12
__attribute__((target("avx2,fma"))) static float fma_avx2(int64_t iters)
{
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
#define T __m256
#define INIT(i) _mm256_set1_ps((float)(i))
#define STEP(acc, i) _mm256_fmadd_ps(acc, a, b)
#define ADD _mm256_add_ps
    PEAK_LOOP(CHAINS_12)
#undef T
#undef INIT
#undef STEP
#undef ADD
    {
        float out[8], sum = 0.0f;
        int c;
        _mm256_storeu_ps(out, total);
        for (c = 0; c < 8; ++c) {
            sum += out[c];
        }
        return sum;
    }
}

#define AVX512_CHAINS 24
__attribute__((target("avx512f"))) static float fma_avx512(int64_t iters)
{
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
#define T __m512
#define INIT(i) _mm512_set1_ps((float)(i))
#define STEP(acc, i) _mm512_fmadd_ps(acc, a, b)
#define ADD _mm512_add_ps
    PEAK_LOOP(CHAINS_24)
#undef T
#undef INIT
#undef STEP
#undef ADD
    return _mm512_reduce_add_ps(total);
}

/* int8 dot products: unsigned bytes times signed bytes, four products summed into each
 * 32-bit lane (2 ops a product, as a multiply-add is 2 flops). VNNI does it in one
 * instruction (vpdpbusd), written as asm: with the intrinsic, GCC 12's tree PRE (-O2)
 * computes the first step of every chain outside the loop and keeps a second copy of
 * each accumulator, so 24 chains spill and every vpdpbusd comes with a store and moves
 * (the loop ran at half the rate; this one is 24 vpdpbusd and nothing else). Without
 * VNNI it takes three (vpmaddubsw to 16-bit pairs, vpmaddwd against ones to 32 bits,
 * vpaddd), whose products do not depend on the accumulator: each chain loads its
 * unsigned operand from a volatile vector of its own at each step, as a kernel loads its
 * operands (constant operands would be multiplied once, outside the loop). Only the add
 * is on a chain, so 8 chains cover its latency and leave the registers the products
 * need. */
#define MADD_CHAINS 8
__attribute__((target("avx512f,avx512vnni"))) static __m512i dpbusd_zmm(__m512i acc, __m512i a, __m512i b)
{
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

__attribute__((target("avx512f,avx512vnni"))) static float int8_avx512vnni(int64_t iters)
{
    const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
#define T __m512i
#define INIT(i) _mm512_set1_epi32(i)
#define STEP(acc, i) dpbusd_zmm(acc, a, b)
#define ADD _mm512_add_epi32
    PEAK_LOOP(CHAINS_24)
#undef T
#undef INIT
#undef STEP
#undef ADD
    return (float)_mm512_reduce_add_epi32(total);
}

__attribute__((target("avx512f,avx512bw"))) static float int8_avx512bw(int64_t iters)
{
    const __m512i b = _mm512_set1_epi8(-2), ones = _mm512_set1_epi16(1);
    volatile __m512i a[MADD_CHAINS];
    int c;
    for (c = 0; c < MADD_CHAINS; ++c) {
        a[c] = _mm512_set1_epi8((char)(c + 1));
    }
#define T __m512i
#define INIT(i) _mm512_set1_epi32(i)
#define STEP(acc, i) _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(a[i], b), ones))
#define ADD _mm512_add_epi32
    PEAK_LOOP(CHAINS_8)
#undef T
#undef INIT
#undef STEP
#undef ADD
    return (float)_mm512_reduce_add_epi32(total);
}

__attribute__((target("avx2"))) static float sum_epi32x8(__m256i v)
{
    int32_t out[8];
    int c;
    float sum = 0.0f;
    memcpy(out, &v, sizeof out);
    for (c = 0; c < 8; ++c) {
        sum += (float)out[c];
    }
    return sum;
}

/* AVX-VNNI's vpdpbusd is the VEX form ({vex}; ymm0-15, hence "x"): the EVEX one is
 * AVX-512's. */
__attribute__((target("avx2,avxvnni"))) static __m256i dpbusd_ymm(__m256i acc, __m256i a, __m256i b)
{
    __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(a), "x"(b));
    return acc;
}

__attribute__((target("avx2,avxvnni"))) static float int8_avxvnni(int64_t iters)
{
    const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
#define T __m256i
#define INIT(i) _mm256_set1_epi32(i)
#define STEP(acc, i) dpbusd_ymm(acc, a, b)
#define ADD _mm256_add_epi32
    PEAK_LOOP(CHAINS_12)
#undef T
#undef INIT
#undef STEP
#undef ADD
    return sum_epi32x8(total);
}

__attribute__((target("avx2"))) static float int8_avx2(int64_t iters)
{
    const __m256i b = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
    volatile __m256i a[MADD_CHAINS];
    int c;
    for (c = 0; c < MADD_CHAINS; ++c) {
        a[c] = _mm256_set1_epi8((char)(c + 1));
    }
#define T __m256i
#define INIT(i) _mm256_set1_epi32(i)
#define STEP(acc, i) _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a[i], b), ones))
#define ADD _mm256_add_epi32
    PEAK_LOOP(CHAINS_8)
#undef T
#undef INIT
#undef STEP
#undef ADD
    return sum_epi32x8(total);
}

/* bf16 dot products (vdpbf16ps): pairs of bf16 products summed into each f32 lane, 4
 * flops a lane. */
__attribute__((target("avx512f,avx512bf16"))) static float bf16_avx512(int64_t iters)
{
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);
#define T __m512
#define INIT(i) _mm512_set1_ps((float)(i))
#define STEP(acc, i) _mm512_dpbf16_ps(acc, a, b)
#define ADD _mm512_add_ps
    PEAK_LOOP(CHAINS_24)
#undef T
#undef INIT
#undef STEP
#undef ADD
    return _mm512_reduce_add_ps(total);
}
#endif

#ifdef PEAK_AMX
/* AMX: four accumulator tiles (0-3, 16 rows of 16 int32 or f32) against two A tiles (4,
 * 5) and two B tiles (6, 7), 2 x 2 as a kernel blocks them, the operands loaded once, so
 * the loop is tdp* and nothing else (on Sapphire Rapids one accumulator alone runs at
 * the same rate; four leave room for a core whose tiles' latency shows). tdpbusd: 16 x
 * 16 x 64 MACs; tdpbf16ps: 16 x 16 x 32. The operands are not zero: zero tiles run about
 * 25% faster there, which no kernel sees. The configuration and the operand row are
 * static objects: GCC's ldtilecfg and tileloadd asms tell it of 8 bytes and of no bytes
 * read, so a local one's stores could be dropped. */
#define AMX_TILES 4
struct amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};
static const struct amx_config amx_config = {
    1, 0, { 0 }, { 64, 64, 64, 64, 64, 64, 64, 64 }, { 16, 16, 16, 16, 16, 16, 16, 16 }
};
/* Every row of every operand tile (a stride of 0): bf16 1.0, as int8 -128 and 63. */
static const uint16_t amx_row[32] = {
    0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80,
    0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80,
    0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80,
};

/* The tiles are this thread's: configured, used and released in the loop's function.
 * The tile instructions are never optimised away (their asms are volatile, their
 * builtins have effects), so the loop returns no sum. */
#define AMX_LOOP(DP)                      \
    int64_t it;                           \
    _tile_loadconfig(&amx_config);        \
    _tile_zero(0);                        \
    _tile_zero(1);                        \
    _tile_zero(2);                        \
    _tile_zero(3);                        \
    _tile_loadd(4, amx_row, 0);           \
    _tile_loadd(5, amx_row, 0);           \
    _tile_loadd(6, amx_row, 0);           \
    _tile_loadd(7, amx_row, 0);           \
    for (it = 0; it < iters; ++it) {      \
        DP(0, 4, 6);                      \
        DP(1, 4, 7);                      \
        DP(2, 5, 6);                      \
        DP(3, 5, 7);                      \
    }                                     \
    _tile_release();                      \
    return 0.0f;

__attribute__((target("amx-tile,amx-int8"))) static float int8_amx(int64_t iters)
{
    AMX_LOOP(_tile_dpbusd)
}

__attribute__((target("amx-tile,amx-bf16"))) static float bf16_amx(int64_t iters)
{
    AMX_LOOP(_tile_dpbf16ps)
}

/* AMX-TILE and the instruction's bit (cpuid leaf 7, EDX: AMX-TILE 24, AMX-INT8 25,
 * AMX-BF16 22), the tile state enabled in XCR0 (bits 17 and 18) and granted to this
 * process (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), once for all threads). */
static int amx_usable(unsigned bit)
{
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0, xcr0, xcr0_hi;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !(edx & (1u << 24)) || !(edx & (1u << bit))) {
        return 0;
    }
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) { /* OSXSAVE: xgetbv */
        return 0;
    }
    __asm__ volatile("xgetbv" : "=a"(xcr0), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    return (xcr0 & (3u << 17)) == (3u << 17) && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}
#endif

#ifdef PEAK_NEON
#define NEON_CHAINS 16
static float fma_neon(int64_t iters)
{
    const float32x4_t a = vdupq_n_f32(0.999999f), b = vdupq_n_f32(1e-7f);
#define T float32x4_t
#define INIT(i) vdupq_n_f32((float)(i))
#define STEP(acc, i) vfmaq_f32(b, acc, a)
#define ADD vaddq_f32
    PEAK_LOOP(CHAINS_16)
#undef T
#undef INIT
#undef STEP
#undef ADD
    return vaddvq_f32(total);
}

/* int8 dot products (sdot, Armv8.2's dot-product extension): signed bytes, four
 * products summed into each 32-bit lane. */
__attribute__((target("arch=armv8.2-a+dotprod"))) static float int8_neon_dot(int64_t iters)
{
    const int8x16_t a = vdupq_n_s8(3), b = vdupq_n_s8(-2);
#define T int32x4_t
#define INIT(i) vdupq_n_s32(i)
#define STEP(acc, i) vdotq_s32(acc, a, b)
#define ADD vaddq_s32
    PEAK_LOOP(CHAINS_16)
#undef T
#undef INIT
#undef STEP
#undef ADD
    return (float)vaddvq_s32(total);
}
#endif

/* Scalar FMAs (fmaf contracts to one instruction where the ISA has one). */
#define SCALAR_CHAINS 8
static float fma_scalar(int64_t iters)
{
    const float a = 0.999999f, b = 1e-7f;
#define T float
#define INIT(i) (float)(i)
#define STEP(acc, i) (acc * a + b)
#define ADD(x, y) ((x) + (y))
    PEAK_LOOP(CHAINS_8)
#undef T
#undef INIT
#undef STEP
#undef ADD
    return total;
}

/* One measurable loop: its instructions' name, the function and the operations (flops,
 * or int8 multiply-adds counted as 2) an iteration does; a NULL loop where the CPU (or
 * this build) has none of its kind. */
struct isa {
    const char *name;
    peak_loop loop;
    double ops_per_iter;
};

/* The widest FMA loop this CPU runs (or the one named `want`: avx512, avx2, neon,
 * scalar). */
static struct isa best_fma(const char *want)
{
#ifdef PEAK_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && (!want || !strcmp(want, "avx512"))) {
        struct isa r = { "avx512", fma_avx512, 2.0 * 16 * AVX512_CHAINS };
        return r;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && (!want || !strcmp(want, "avx2"))) {
        struct isa r = { "avx2", fma_avx2, 2.0 * 8 * AVX2_CHAINS };
        return r;
    }
#endif
#ifdef PEAK_NEON
    if (!want || !strcmp(want, "neon")) {
        struct isa r = { "neon", fma_neon, 2.0 * 4 * NEON_CHAINS };
        return r;
    }
#endif
    if (want && strcmp(want, "scalar")) {
        fprintf(stderr, "peak: this CPU (or this build) has no %s\n", want);
        exit(2);
    }
    {
        struct isa r = { "scalar", fma_scalar, 2.0 * SCALAR_CHAINS };
        return r;
    }
}

/* The int8 dot-product loop the C target's kernels for `fma`'s instruction set would
 * use on this CPU: VNNI where it has it, else the three-instruction form (none for
 * scalar code, or NEON without the dot-product extension). */
static struct isa best_int8(struct isa fma)
{
    struct isa none = { "none", NULL, 0.0 };
#ifdef PEAK_X86
    if (!strcmp(fma.name, "avx512")) {
        struct isa vnni = { "avx512vnni", int8_avx512vnni, INT8_OPS_PER_LANE * 16 * AVX512_CHAINS };
        struct isa bw = { "avx512bw", int8_avx512bw, INT8_OPS_PER_LANE * 16 * MADD_CHAINS };
        return __builtin_cpu_supports("avx512vnni") ? vnni : __builtin_cpu_supports("avx512bw") ? bw : none;
    }
    if (!strcmp(fma.name, "avx2")) {
        struct isa vnni = { "avxvnni", int8_avxvnni, INT8_OPS_PER_LANE * 8 * AVX2_CHAINS };
        struct isa madd = { "avx2", int8_avx2, INT8_OPS_PER_LANE * 8 * MADD_CHAINS };
        /* AVX-VNNI: CPUID leaf 7, subleaf 1, EAX bit 4 (clang's __builtin_cpu_supports
         * does not know it). */
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        const int avxvnni = __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 4));
        return avxvnni ? vnni : madd;
    }
#endif
#ifdef PEAK_NEON
    if (!strcmp(fma.name, "neon") && (getauxval(AT_HWCAP) & HWCAP_ASIMDDP)) {
        struct isa dot = { "neon-dotprod", int8_neon_dot, INT8_OPS_PER_LANE * 4 * NEON_CHAINS };
        return dot;
    }
#endif
    (void)fma;
    return none;
}

/* The bf16 dot-product loop (AVX-512 BF16) with `fma`'s instruction set, if any. */
static struct isa best_bf16(struct isa fma)
{
    struct isa none = { "none", NULL, 0.0 };
#ifdef PEAK_X86
    if (!strcmp(fma.name, "avx512") && __builtin_cpu_supports("avx512bf16")) {
        struct isa r = { "avx512bf16", bf16_avx512, 4.0 * 16 * AVX512_CHAINS };
        return r;
    }
#endif
    (void)fma;
    return none;
}

/* The AMX loop (`bf16` 0: tdpbusd, 1: tdpbf16ps) with the avx512 set, if the CPU has it
 * and the kernel grants the tiles. */
static struct isa best_amx(struct isa fma, int bf16)
{
    struct isa none = { "none", NULL, 0.0 };
#ifdef PEAK_AMX
    if (!strcmp(fma.name, "avx512")) {
        /* each tile 16 x 16 sums of 64 int8 or 32 bf16 products, 2 ops a product */
        struct isa i8 = { "amx-int8", int8_amx, 2.0 * 16 * 16 * 64 * AMX_TILES };
        struct isa b16 = { "amx-bf16", bf16_amx, 2.0 * 16 * 16 * 32 * AMX_TILES };
        if (!bf16 && amx_usable(25)) {
            return i8;
        }
        if (bf16 && amx_usable(22)) {
            return b16;
        }
    }
#endif
    (void)fma;
    (void)bf16;
    return none;
}

/* What every thread of a measurement shares: start together, each time itself. */
struct job {
    pthread_barrier_t start;
    peak_loop loop;
    int64_t iters;
    float *a, *b, *c;
    int64_t n; /* triad elements per thread */
    int threads;
};

struct worker {
    struct job *job;
    int index;
    double seconds;
    float sink;
};

static void *loop_worker(void *arg)
{
    struct worker *w = (struct worker *)arg;
    double t0;
    pthread_barrier_wait(&w->job->start);
    t0 = now();
    w->sink = w->job->loop(w->job->iters);
    w->seconds = now() - t0;
    return NULL;
}

static void *triad_worker(void *arg)
{
    struct worker *w = (struct worker *)arg;
    const struct job *j = w->job;
    const int64_t lo = j->n * w->index, hi = lo + j->n;
    float *a = j->a, *b = j->b, *c = j->c;
    int64_t i;
    double t0;
    pthread_barrier_wait(&w->job->start);
    t0 = now();
    for (i = lo; i < hi; ++i) {
        a[i] = b[i] + 3.0f * c[i];
    }
    w->seconds = now() - t0;
    w->sink = a[lo];
    return NULL;
}

/* Runs `body` on `threads` threads at once; returns the slowest thread's seconds. */
static double run_threads(struct job *job, void *(*body)(void *), float *sink)
{
    pthread_t tid[256];
    struct worker w[256];
    double slowest = 0.0;
    int t;
    pthread_barrier_init(&job->start, NULL, (unsigned)job->threads);
    for (t = 0; t < job->threads; ++t) {
        w[t].job = job;
        w[t].index = t;
        if (t > 0 && pthread_create(&tid[t], NULL, body, &w[t]) != 0) {
            fprintf(stderr, "peak: cannot start a thread\n");
            exit(1);
        }
    }
    body(&w[0]);
    for (t = 1; t < job->threads; ++t) {
        pthread_join(tid[t], NULL);
    }
    for (t = 0; t < job->threads; ++t) {
        slowest = w[t].seconds > slowest ? w[t].seconds : slowest;
        *sink += w[t].sink;
    }
    pthread_barrier_destroy(&job->start);
    return slowest;
}

/* `isa`'s loop on `threads` threads: the best of five rounds in G operations a second,
 * each round about 0.2 s long (iterations from a short calibration run). */
static double measure(struct isa isa, int threads, float *sink)
{
    struct job job;
    double best = 0.0, calib;
    int r;
    memset(&job, 0, sizeof job);
    job.threads = threads;
    job.loop = isa.loop;
    job.iters = 1 << 20;
    calib = run_threads(&job, loop_worker, sink);
    job.iters = (int64_t)((double)job.iters * 0.2 / (calib > 1e-6 ? calib : 1e-6)) + 1;
    for (r = 0; r < 5; ++r) {
        const double secs = run_threads(&job, loop_worker, sink);
        const double rate = isa.ops_per_iter * (double)job.iters * threads / secs * 1e-9;
        best = rate > best ? rate : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    const char *want = NULL;
    struct isa fma, int8, bf16, int8_amx_isa, bf16_amx_isa;
    const int64_t per_array = (int64_t)64 << 20; /* bytes */
    int counts[16], ncounts = 0, cores = (int)sysconf(_SC_NPROCESSORS_ONLN), k;
    float sink = 0.0f;
    char summary[1024];
    size_t used;
    if (cores < 1) {
        cores = 1;
    }
    for (k = 1; k < argc; ++k) {
        if (!strcmp(argv[k], "--threads") && k + 1 < argc && ncounts < 16) {
            counts[ncounts] = atoi(argv[++k]);
            if (counts[ncounts] < 1 || counts[ncounts] > 256) {
                fprintf(stderr, "peak: --threads wants 1 to 256\n");
                return 2;
            }
            ++ncounts;
        } else if (!strcmp(argv[k], "--isa") && k + 1 < argc) {
            want = argv[++k];
        } else {
            fprintf(stderr, "usage: peak [--threads N]... [--isa avx512|avx2|neon|scalar]\n");
            return 2;
        }
    }
    fma = best_fma(want);
    int8 = best_int8(fma);
    bf16 = best_bf16(fma);
    int8_amx_isa = best_amx(fma, 0);
    bf16_amx_isa = best_amx(fma, 1);
    if (ncounts == 0) {
        counts[ncounts++] = 1;
        if (cores > 1) {
            counts[ncounts++] = cores;
        }
    }
    {
        /* Each kind of loop: its line's words, its summary keys (isa=avx512 fma_gflops_1t=...
         * first, which benches/run.sh and bench.py read) and its loop. */
        const struct {
            const char *what, *unit, *set_key, *rate_key;
            struct isa isa;
        } kinds[] = {
            { "fma peak", "GFLOP/s", "isa", "fma_gflops", fma },
            { "int8 dot-product peak", "GOP/s", "int8", "int8_gops", int8 },
            { "bf16 dot-product peak", "GFLOP/s", "bf16", "bf16_gflops", bf16 },
            { "int8 AMX peak", "GOP/s", "int8_amx", "int8_amx_gops", int8_amx_isa },
            { "bf16 AMX peak", "GFLOP/s", "bf16_amx", "bf16_amx_gflops", bf16_amx_isa },
        };
        size_t n;
        used = 0;
        for (n = 0; n < sizeof kinds / sizeof kinds[0]; ++n) {
            used += (size_t)snprintf(summary + used, sizeof summary - used, "%s%s=%s", n ? " " : "", kinds[n].set_key, kinds[n].isa.name);
            for (k = 0; kinds[n].isa.loop && k < ncounts; ++k) {
                const double rate = measure(kinds[n].isa, counts[k], &sink);
                printf("%s, %s, %d thread(s): %.1f %s\n", kinds[n].what, kinds[n].isa.name, counts[k], rate, kinds[n].unit);
                used += (size_t)snprintf(summary + used, sizeof summary - used, " %s_%dt=%.1f", kinds[n].rate_key, counts[k], rate);
            }
        }
    }
    for (k = 0; k < ncounts; ++k) {
        struct job job;
        const int64_t n = per_array / (int64_t)sizeof(float) / counts[k] * counts[k];
        double best = 0.0, secs;
        int64_t i;
        int r;
        memset(&job, 0, sizeof job);
        job.threads = counts[k];
        job.n = n / counts[k];
        job.a = (float *)malloc((size_t)n * sizeof(float));
        job.b = (float *)malloc((size_t)n * sizeof(float));
        job.c = (float *)malloc((size_t)n * sizeof(float));
        if (!job.a || !job.b || !job.c) {
            fprintf(stderr, "peak: out of memory\n");
            return 1;
        }
        /* Every page touched before timing (and by no particular thread). */
        for (i = 0; i < n; ++i) {
            job.a[i] = 0.0f;
            job.b[i] = 1.0f;
            job.c[i] = 2.0f;
        }
        for (r = 0; r < 5; ++r) {
            secs = run_threads(&job, triad_worker, &sink);
            const double gbs = 12.0 * (double)n / secs * 1e-9;
            best = gbs > best ? gbs : best;
        }
        printf("memory bandwidth (triad), %d thread(s): %.1f GB/s\n", job.threads, best);
        used += (size_t)snprintf(summary + used, sizeof summary - used, " triad_gbs_%dt=%.1f", job.threads, best);
        free(job.a);
        free(job.b);
        free(job.c);
    }
    /* The sink keeps every loop's result alive; it is never printed as a figure. */
    printf("%s%s\n", summary, sink == 12345.0f ? " " : "");
    return 0;
}
