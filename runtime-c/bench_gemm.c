/*
 * bench_gemm.c -- the GEMM efficiency figure: times mr_sgemm_panels, one thread, on
 * gpt_block's four large GEMMs (128 tokens: attention's input projection, its output
 * projection, the MLP's two) with weights of their sizes in panels, 64-byte aligned as
 * the compiler lays them out, and called in the model's order, so that each finds its
 * weights where the model would (not in L2: 28 MB of them pass by). Prints each GEMM's
 * median time and GFLOP/s, and, given this machine's measured FMA peak for one thread
 * and the instructions it was measured with (benches/peak), the fraction of it for the
 * kernels of those instructions. Not a test, not part of the runtime:
 *   make bench-gemm [PEAK="GFLOPS ISA [GFLOPS ISA]..."]   (MR_ISA=generic|avx2|avx512
 *                                                          picks the kernels)
 * benches/run.sh runs it with the peaks it measured (avx2's too on an AVX-512 CPU, where
 * an Intel core's AVX2 peak is half its AVX-512 one).
 */
#define _POSIX_C_SOURCE 200112L
#include "mithril_runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU time: other processes do not count */
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *x, const void *y)
{
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static void *aligned_floats(int64_t n)
{
    void *p = NULL;
    return posix_memalign(&p, 64, sizeof(float) * (size_t)n) == 0 ? p : NULL;
}

#define GEMMS 4
#define ROUNDS 41

int main(int argc, char **argv)
{
    /* M, N, K as gpt_block's forward calls them (c_attn, c_proj, c_fc, mlp_proj) */
    static const int64_t mnk[GEMMS][3] = {{128, 2304, 768}, {128, 768, 768}, {128, 3072, 768}, {128, 768, 3072}};
    static const char *names[GEMMS] = {"attention in", "attention out", "mlp in", "mlp out"};
    /* --peak GFLOPS ISA [GFLOPS ISA]...: each peak was measured with its ISA's
     * instructions, so a kernel set's speed is given as a fraction of its own ISA's peak */
    double peak = 0.0;
    float *A[GEMMS], *B[GEMMS], *C[GEMMS];
    double t[GEMMS][ROUNDS], flops_all = 0.0, ns_all = 0.0;
    const char *want = getenv("MR_ISA");
    int g, r;
    for (r = 2; argc > 1 && strcmp(argv[1], "--peak") == 0 && r + 1 < argc; r += 2) {
        if (strcmp(argv[r + 1], mr_isa_name()) == 0) peak = atof(argv[r]);
    }
    if (want && strcmp(want, mr_isa_name()) != 0) {
        printf("variant %s: skipped (this CPU lacks it; %s would run)\n", want, mr_isa_name());
        return 0;
    }
    for (g = 0; g < GEMMS; ++g) {
        const int64_t M = mnk[g][0], N = mnk[g][1], K = mnk[g][2], n = (N + MR_PANEL - 1) / MR_PANEL * MR_PANEL * K;
        int64_t i;
        A[g] = aligned_floats(M * K);
        B[g] = aligned_floats(n);
        C[g] = aligned_floats(M * N);
        if (!A[g] || !B[g] || !C[g]) return 2;
        for (i = 0; i < M * K; ++i) A[g][i] = (float)((i * 7919) % 2001) / 1000.0f - 1.0f;
        for (i = 0; i < n; ++i) B[g][i] = (float)((i * 104729) % 2001) / 1000.0f - 1.0f;
    }
    for (r = -2; r < ROUNDS; ++r) { /* two rounds to warm up */
        for (g = 0; g < GEMMS; ++g) {
            const int64_t M = mnk[g][0], N = mnk[g][1], K = mnk[g][2];
            const double t0 = now_ns();
            mr_sgemm_panels(M, N, K, 1.0f, A[g], K, 1, B[g], 0.0f, C[g], N, 1);
            if (r >= 0) t[g][r] = now_ns() - t0;
        }
    }
    printf("gpt_block's GEMMs (128 tokens), mr_sgemm_panels, 1 thread, %s kernels, median of %d calls:\n", mr_isa_name(),
           ROUNDS);
    for (g = 0; g < GEMMS; ++g) {
        const double flops = 2.0 * (double)mnk[g][0] * (double)mnk[g][1] * (double)mnk[g][2];
        double ns;
        qsort(t[g], ROUNDS, sizeof(double), cmp_double);
        ns = t[g][ROUNDS / 2];
        flops_all += flops;
        ns_all += ns;
        printf("  %-14s %4lld x %4lld x %4lld  %8.1f us  %6.1f GFLOP/s", names[g], (long long)mnk[g][0],
               (long long)mnk[g][1], (long long)mnk[g][2], ns / 1e3, flops / ns);
        if (peak > 0.0) printf("  %5.1f%% of peak", 100.0 * flops / ns / peak);
        printf("\n");
    }
    printf("  %-14s %20s  %8.1f us  %6.1f GFLOP/s", "all four", "", ns_all / 1e3, flops_all / ns_all);
    if (peak > 0.0) printf("  %5.1f%% of peak (%.1f GFLOP/s, 1 thread)", 100.0 * flops_all / ns_all / peak, peak);
    printf("\n");
    for (g = 0; g < GEMMS; ++g) {
        free(A[g]);
        free(B[g]);
        free(C[g]);
    }
    return 0;
}
