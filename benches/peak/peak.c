/*
 * peak.c: this machine's single-precision FMA peak and memory bandwidth, measured, so
 * that a GEMM's speed can be given as a fraction of what the cores can do rather than
 * of a datasheet figure (benches/peak/run.sh; the bench table reads its last line).
 *
 * FMA peak: each thread runs fused multiply-adds on independent accumulators (enough
 * to cover the FMA latency on every port: 12 for 16-register AVX2, 24 for AVX-512, 16
 * for NEON), in the widest vector ISA the CPU has that this file was compiled for. The
 * ISA is chosen at run time (cpuid through __builtin_cpu_supports), each kernel built
 * with a function-level target attribute, so no -march flag is needed. Best of several
 * rounds, each long enough (about 0.2 s) for the clock to settle.
 *
 * Bandwidth: the STREAM triad a[i] = b[i] + s * c[i] over three 64 MiB arrays (far
 * beyond the caches), counting 12 bytes an element (the write-allocate read of a[] not
 * counted, as STREAM does). Best of several rounds.
 *
 *   peak [--threads N]... [--isa avx512|avx2|neon|scalar]
 * (default: 1 thread, then every core; the widest ISA)
 * prints one line per measurement and a last line of key=value pairs.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PEAK_X86 1
#elif defined(__aarch64__)
#include <arm_neon.h>
#define PEAK_NEON 1
#endif

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One thread's FMA loop: `iters` iterations of one FMA on each of its accumulators,
 * each a variable of its own (an array would live in memory at -O2). Returns a value
 * that depends on every accumulator, so none is optimised away. */
typedef float (*fma_loop)(int64_t iters);

#ifdef PEAK_X86
#define AVX2_CHAINS 12
__attribute__((target("avx2,fma"))) static float fma_avx2(int64_t iters)
{
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    __m256 acc0 = _mm256_set1_ps((float)0);
    __m256 acc1 = _mm256_set1_ps((float)1);
    __m256 acc2 = _mm256_set1_ps((float)2);
    __m256 acc3 = _mm256_set1_ps((float)3);
    __m256 acc4 = _mm256_set1_ps((float)4);
    __m256 acc5 = _mm256_set1_ps((float)5);
    __m256 acc6 = _mm256_set1_ps((float)6);
    __m256 acc7 = _mm256_set1_ps((float)7);
    __m256 acc8 = _mm256_set1_ps((float)8);
    __m256 acc9 = _mm256_set1_ps((float)9);
    __m256 acc10 = _mm256_set1_ps((float)10);
    __m256 acc11 = _mm256_set1_ps((float)11);
    int64_t i;
    for (i = 0; i < iters; ++i) {
        acc0 = _mm256_fmadd_ps(acc0, a, b);
        acc1 = _mm256_fmadd_ps(acc1, a, b);
        acc2 = _mm256_fmadd_ps(acc2, a, b);
        acc3 = _mm256_fmadd_ps(acc3, a, b);
        acc4 = _mm256_fmadd_ps(acc4, a, b);
        acc5 = _mm256_fmadd_ps(acc5, a, b);
        acc6 = _mm256_fmadd_ps(acc6, a, b);
        acc7 = _mm256_fmadd_ps(acc7, a, b);
        acc8 = _mm256_fmadd_ps(acc8, a, b);
        acc9 = _mm256_fmadd_ps(acc9, a, b);
        acc10 = _mm256_fmadd_ps(acc10, a, b);
        acc11 = _mm256_fmadd_ps(acc11, a, b);
    }
    acc0 = _mm256_add_ps(acc0, acc1);
    acc0 = _mm256_add_ps(acc0, acc2);
    acc0 = _mm256_add_ps(acc0, acc3);
    acc0 = _mm256_add_ps(acc0, acc4);
    acc0 = _mm256_add_ps(acc0, acc5);
    acc0 = _mm256_add_ps(acc0, acc6);
    acc0 = _mm256_add_ps(acc0, acc7);
    acc0 = _mm256_add_ps(acc0, acc8);
    acc0 = _mm256_add_ps(acc0, acc9);
    acc0 = _mm256_add_ps(acc0, acc10);
    acc0 = _mm256_add_ps(acc0, acc11);
    {
        float out[8], sum = 0.0f;
        int c;
        _mm256_storeu_ps(out, acc0);
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
    __m512 acc0 = _mm512_set1_ps((float)0);
    __m512 acc1 = _mm512_set1_ps((float)1);
    __m512 acc2 = _mm512_set1_ps((float)2);
    __m512 acc3 = _mm512_set1_ps((float)3);
    __m512 acc4 = _mm512_set1_ps((float)4);
    __m512 acc5 = _mm512_set1_ps((float)5);
    __m512 acc6 = _mm512_set1_ps((float)6);
    __m512 acc7 = _mm512_set1_ps((float)7);
    __m512 acc8 = _mm512_set1_ps((float)8);
    __m512 acc9 = _mm512_set1_ps((float)9);
    __m512 acc10 = _mm512_set1_ps((float)10);
    __m512 acc11 = _mm512_set1_ps((float)11);
    __m512 acc12 = _mm512_set1_ps((float)12);
    __m512 acc13 = _mm512_set1_ps((float)13);
    __m512 acc14 = _mm512_set1_ps((float)14);
    __m512 acc15 = _mm512_set1_ps((float)15);
    __m512 acc16 = _mm512_set1_ps((float)16);
    __m512 acc17 = _mm512_set1_ps((float)17);
    __m512 acc18 = _mm512_set1_ps((float)18);
    __m512 acc19 = _mm512_set1_ps((float)19);
    __m512 acc20 = _mm512_set1_ps((float)20);
    __m512 acc21 = _mm512_set1_ps((float)21);
    __m512 acc22 = _mm512_set1_ps((float)22);
    __m512 acc23 = _mm512_set1_ps((float)23);
    int64_t i;
    for (i = 0; i < iters; ++i) {
        acc0 = _mm512_fmadd_ps(acc0, a, b);
        acc1 = _mm512_fmadd_ps(acc1, a, b);
        acc2 = _mm512_fmadd_ps(acc2, a, b);
        acc3 = _mm512_fmadd_ps(acc3, a, b);
        acc4 = _mm512_fmadd_ps(acc4, a, b);
        acc5 = _mm512_fmadd_ps(acc5, a, b);
        acc6 = _mm512_fmadd_ps(acc6, a, b);
        acc7 = _mm512_fmadd_ps(acc7, a, b);
        acc8 = _mm512_fmadd_ps(acc8, a, b);
        acc9 = _mm512_fmadd_ps(acc9, a, b);
        acc10 = _mm512_fmadd_ps(acc10, a, b);
        acc11 = _mm512_fmadd_ps(acc11, a, b);
        acc12 = _mm512_fmadd_ps(acc12, a, b);
        acc13 = _mm512_fmadd_ps(acc13, a, b);
        acc14 = _mm512_fmadd_ps(acc14, a, b);
        acc15 = _mm512_fmadd_ps(acc15, a, b);
        acc16 = _mm512_fmadd_ps(acc16, a, b);
        acc17 = _mm512_fmadd_ps(acc17, a, b);
        acc18 = _mm512_fmadd_ps(acc18, a, b);
        acc19 = _mm512_fmadd_ps(acc19, a, b);
        acc20 = _mm512_fmadd_ps(acc20, a, b);
        acc21 = _mm512_fmadd_ps(acc21, a, b);
        acc22 = _mm512_fmadd_ps(acc22, a, b);
        acc23 = _mm512_fmadd_ps(acc23, a, b);
    }
    acc0 = _mm512_add_ps(acc0, acc1);
    acc0 = _mm512_add_ps(acc0, acc2);
    acc0 = _mm512_add_ps(acc0, acc3);
    acc0 = _mm512_add_ps(acc0, acc4);
    acc0 = _mm512_add_ps(acc0, acc5);
    acc0 = _mm512_add_ps(acc0, acc6);
    acc0 = _mm512_add_ps(acc0, acc7);
    acc0 = _mm512_add_ps(acc0, acc8);
    acc0 = _mm512_add_ps(acc0, acc9);
    acc0 = _mm512_add_ps(acc0, acc10);
    acc0 = _mm512_add_ps(acc0, acc11);
    acc0 = _mm512_add_ps(acc0, acc12);
    acc0 = _mm512_add_ps(acc0, acc13);
    acc0 = _mm512_add_ps(acc0, acc14);
    acc0 = _mm512_add_ps(acc0, acc15);
    acc0 = _mm512_add_ps(acc0, acc16);
    acc0 = _mm512_add_ps(acc0, acc17);
    acc0 = _mm512_add_ps(acc0, acc18);
    acc0 = _mm512_add_ps(acc0, acc19);
    acc0 = _mm512_add_ps(acc0, acc20);
    acc0 = _mm512_add_ps(acc0, acc21);
    acc0 = _mm512_add_ps(acc0, acc22);
    acc0 = _mm512_add_ps(acc0, acc23);
    return _mm512_reduce_add_ps(acc0);
}
#endif

#ifdef PEAK_NEON
#define NEON_CHAINS 16
static float fma_neon(int64_t iters)
{
    const float32x4_t a = vdupq_n_f32(0.999999f), b = vdupq_n_f32(1e-7f);
    float32x4_t acc0 = vdupq_n_f32((float)0);
    float32x4_t acc1 = vdupq_n_f32((float)1);
    float32x4_t acc2 = vdupq_n_f32((float)2);
    float32x4_t acc3 = vdupq_n_f32((float)3);
    float32x4_t acc4 = vdupq_n_f32((float)4);
    float32x4_t acc5 = vdupq_n_f32((float)5);
    float32x4_t acc6 = vdupq_n_f32((float)6);
    float32x4_t acc7 = vdupq_n_f32((float)7);
    float32x4_t acc8 = vdupq_n_f32((float)8);
    float32x4_t acc9 = vdupq_n_f32((float)9);
    float32x4_t acc10 = vdupq_n_f32((float)10);
    float32x4_t acc11 = vdupq_n_f32((float)11);
    float32x4_t acc12 = vdupq_n_f32((float)12);
    float32x4_t acc13 = vdupq_n_f32((float)13);
    float32x4_t acc14 = vdupq_n_f32((float)14);
    float32x4_t acc15 = vdupq_n_f32((float)15);
    int64_t i;
    for (i = 0; i < iters; ++i) {
        acc0 = vfmaq_f32(b, acc0, a);
        acc1 = vfmaq_f32(b, acc1, a);
        acc2 = vfmaq_f32(b, acc2, a);
        acc3 = vfmaq_f32(b, acc3, a);
        acc4 = vfmaq_f32(b, acc4, a);
        acc5 = vfmaq_f32(b, acc5, a);
        acc6 = vfmaq_f32(b, acc6, a);
        acc7 = vfmaq_f32(b, acc7, a);
        acc8 = vfmaq_f32(b, acc8, a);
        acc9 = vfmaq_f32(b, acc9, a);
        acc10 = vfmaq_f32(b, acc10, a);
        acc11 = vfmaq_f32(b, acc11, a);
        acc12 = vfmaq_f32(b, acc12, a);
        acc13 = vfmaq_f32(b, acc13, a);
        acc14 = vfmaq_f32(b, acc14, a);
        acc15 = vfmaq_f32(b, acc15, a);
    }
    acc0 = vaddq_f32(acc0, acc1);
    acc0 = vaddq_f32(acc0, acc2);
    acc0 = vaddq_f32(acc0, acc3);
    acc0 = vaddq_f32(acc0, acc4);
    acc0 = vaddq_f32(acc0, acc5);
    acc0 = vaddq_f32(acc0, acc6);
    acc0 = vaddq_f32(acc0, acc7);
    acc0 = vaddq_f32(acc0, acc8);
    acc0 = vaddq_f32(acc0, acc9);
    acc0 = vaddq_f32(acc0, acc10);
    acc0 = vaddq_f32(acc0, acc11);
    acc0 = vaddq_f32(acc0, acc12);
    acc0 = vaddq_f32(acc0, acc13);
    acc0 = vaddq_f32(acc0, acc14);
    acc0 = vaddq_f32(acc0, acc15);
    return vaddvq_f32(acc0);
}
#endif

/* Scalar FMAs (fmaf contracts to one instruction where the ISA has one). */
#define SCALAR_CHAINS 8
static float fma_scalar(int64_t iters)
{
    const float a = 0.999999f, b = 1e-7f;
    float acc0 = (float)0;
    float acc1 = (float)1;
    float acc2 = (float)2;
    float acc3 = (float)3;
    float acc4 = (float)4;
    float acc5 = (float)5;
    float acc6 = (float)6;
    float acc7 = (float)7;
    int64_t i;
    for (i = 0; i < iters; ++i) {
        acc0 = acc0 * a + b;
        acc1 = acc1 * a + b;
        acc2 = acc2 * a + b;
        acc3 = acc3 * a + b;
        acc4 = acc4 * a + b;
        acc5 = acc5 * a + b;
        acc6 = acc6 * a + b;
        acc7 = acc7 * a + b;
    }
    acc0 = (acc0 + acc1);
    acc0 = (acc0 + acc2);
    acc0 = (acc0 + acc3);
    acc0 = (acc0 + acc4);
    acc0 = (acc0 + acc5);
    acc0 = (acc0 + acc6);
    acc0 = (acc0 + acc7);
    return acc0;
}

/* The widest FMA loop this CPU runs (or the one named `want`: avx512, avx2, neon,
 * scalar), its name and flops per iteration. */
struct isa {
    const char *name;
    fma_loop loop;
    double flops_per_iter;
};

static struct isa best_isa(const char *want)
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

/* What every thread of a measurement shares: start together, each time itself. */
struct job {
    pthread_barrier_t start;
    fma_loop loop;
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

static void *fma_worker(void *arg)
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

int main(int argc, char **argv)
{
    const char *want = NULL;
    struct isa isa;
    const int64_t per_array = (int64_t)64 << 20; /* bytes */
    int counts[16], ncounts = 0, cores = (int)sysconf(_SC_NPROCESSORS_ONLN), k, r;
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
    isa = best_isa(want);
    if (ncounts == 0) {
        counts[ncounts++] = 1;
        if (cores > 1) {
            counts[ncounts++] = cores;
        }
    }
    used = (size_t)snprintf(summary, sizeof summary, "isa=%s", isa.name);
    for (k = 0; k < ncounts; ++k) {
        struct job job;
        double best = 0.0, secs, calib;
        memset(&job, 0, sizeof job);
        job.threads = counts[k];
        job.loop = isa.loop;
        /* Iterations for about 0.2 s, from a short calibration run. */
        job.iters = 1 << 20;
        calib = run_threads(&job, fma_worker, &sink);
        job.iters = (int64_t)((double)job.iters * 0.2 / (calib > 1e-6 ? calib : 1e-6)) + 1;
        for (r = 0; r < 5; ++r) {
            secs = run_threads(&job, fma_worker, &sink);
            const double gflops = isa.flops_per_iter * (double)job.iters * job.threads / secs * 1e-9;
            best = gflops > best ? gflops : best;
        }
        printf("fma peak, %s, %d thread(s): %.1f GFLOP/s\n", isa.name, job.threads, best);
        used += (size_t)snprintf(summary + used, sizeof summary - used, " fma_gflops_%dt=%.1f", job.threads, best);
    }
    for (k = 0; k < ncounts; ++k) {
        struct job job;
        const int64_t n = per_array / (int64_t)sizeof(float) / counts[k] * counts[k];
        double best = 0.0, secs;
        int64_t i;
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
