/*
 * bench_quant.c -- times mr_sgemm_panels (f32 panels) against mr_sgemm_panels_q with the
 * panels stored as f16, bf16 and q8_0, and against the int8 product mr_gemm_i8_mt (A
 * quantized in the call), one thread, at gpt_block's matrix sizes and a few others;
 * prints ns per call (the best of several batches). Not a test, not part of the
 * runtime: `make bench-quant` (MR_ISA=generic|avx2|avx512 picks the kernels' variant,
 * MR_INT8=madd the int8 set without VNNI). Then the convolutions of the bench models
 * (one image, unpadded input with the runtime's padding): f32 (direct or implicit
 * GEMM), f32 by Winograd where it applies, q8_0 weights, and mr_conv2d_i8_mt. The stored bits need not be meaningful for
 * timing (test_narrow.h's narrow_bits; the int8 panels are the same bytes).
 */
#define _POSIX_C_SOURCE 199309L
#include "mithril_runtime.h"
#include "test_narrow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU time: other processes on the machine do not count */
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* best ns per call of `reps` calls, over 7 batches (type -1: f32 panels, 99: int8) */
static double time_call(int type, int64_t M, int64_t N, int64_t K, const float *A, const void *B, float *C, int reps,
                        void *scratch)
{
    double best = 1e300;
    int b, r;
    for (b = 0; b < 7; ++b) {
        const double t0 = now_ns();
        for (r = 0; r < reps; ++r) {
            if (type == 99) {
                mr_gemm_i8_mt(NULL, 1, M, N, K, 1.0f, A, 0, K, 1, B, 0.0f, C, 0, N, 1, scratch, NULL);
            } else if (type < 0) {
                mr_sgemm_panels(M, N, K, 1.0f, A, K, 1, (const float *)B, 0.0f, C, N, 1);
            } else {
                mr_sgemm_panels_q(M, N, K, 1.0f, A, K, 1, B, type, 0.0f, C, N, 1);
            }
        }
        if ((now_ns() - t0) / reps < best) best = (now_ns() - t0) / reps;
    }
    return best;
}

/* One convolution of one image (C x H x W, O filters KH x KW, padding pad, stride 1),
 * each form's best ns per call over 7 batches. */
static void time_conv(int64_t C, int64_t H, int64_t W, int64_t O, int64_t KH, int64_t KW, int64_t pad)
{
    const int64_t OH = H + 2 * pad - KH + 1, OW = W + 2 * pad - KW + 1, K = C * KH * KW;
    const double macs = (double)O * (double)OH * (double)OW * (double)K;
    const int reps = macs > 1e7 ? 5 : macs > 1e5 ? 50 : 500, wino = KH == 3 && KW == 3 && C >= 16 && O >= 16;
    float *x = malloc(sizeof(float) * (size_t)(C * H * W)), *w = malloc(sizeof(float) * (size_t)(O * K));
    float *y = malloc(sizeof(float) * (size_t)(O * OH * OW)), *u = malloc(sizeof(float) * (size_t)(36 * O * C));
    float *ws = malloc(sizeof(float) * (size_t)MR_WINOGRAD_SCRATCH(1, C, O, OH, OW));
    unsigned char *wq = calloc((size_t)MR_I8_PANELS_BYTES(K, O), 1), *w8 = malloc((size_t)MR_STORED_BYTES(MR_Q8_0, O * K));
    unsigned char *scratch = malloc((size_t)MR_I8_CONV_SCRATCH_BYTES(1, C, KH, KW, OH, OW, 1, 1, 1, 1));
    double best[4] = {1e300, 1e300, 1e300, 1e300};
    int64_t i;
    int b, r, f;
    if (!x || !w || !y || !u || !ws || !wq || !w8 || !scratch) exit(2);
    for (i = 0; i < C * H * W; ++i) x[i] = (float)((i * 7919) % 2001) / 1000.0f - 1.0f;
    for (i = 0; i < O * K; ++i) w[i] = (float)((i * 104729) % 2001) / 1000.0f - 1.0f;
    narrow_bits(MR_Q8_0, w, O * K, w8);
    /* int8 panels of nonzero codes (AMX runs zero tiles faster), scales 1/127 */
    for (i = 0; i < MR_I8_PANELS_BYTES(K, O); ++i) wq[i] = (unsigned char)((i * 7919) % 251);
    for (i = 0; i < (O + MR_PANEL - 1) / MR_PANEL * MR_PANEL; ++i) {
        const float scale = 1.0f / 127.0f;
        memcpy(wq + 4 * i, &scale, sizeof scale);
    }
    if (wino) mr_winograd_weights_f32(w, u, O, C);
    for (b = 0; b < 7; ++b) {
        for (f = 0; f < 4; ++f) {
            double t0;
            if (f == 1 && !wino) continue;
            t0 = now_ns();
            for (r = 0; r < reps; ++r) {
                if (f == 0) mr_conv2d_f32(x, w, y, 1, C, H, W, O, KH, KW, OH, OW, 1, 1, pad, pad, 1, 1, 1);
                if (f == 1) mr_conv2d_winograd_f32(x, u, y, 1, C, H, W, O, OH, OW, pad, pad, ws);
                if (f == 2) mr_conv2d_q_mt(NULL, x, w8, MR_Q8_0, y, 1, C, H, W, O, KH, KW, OH, OW, 1, 1, pad, pad, 1, 1, 1, NULL);
                if (f == 3) mr_conv2d_i8_mt(NULL, x, wq, y, 1, C, H, W, O, KH, KW, OH, OW, 1, 1, pad, pad, 1, 1, scratch, NULL);
            }
            if ((now_ns() - t0) / reps < best[f]) best[f] = (now_ns() - t0) / reps;
        }
    }
    printf("%4lld %4lld %4lld %4lld %2lldx%-2lld %4lld %12.0f %12.0f %12.0f %12.0f\n", (long long)C, (long long)H,
           (long long)W, (long long)O, (long long)KH, (long long)KW, (long long)pad, best[0], wino ? best[1] : 0.0,
           best[2], best[3]);
    free(x); free(w); free(y); free(u); free(ws); free(wq); free(w8); free(scratch);
}

int main(void)
{
    static const int64_t mnk[][3] = {{1, 256, 256},  {1, 768, 768},  {1, 2304, 768}, {1, 3072, 768},
                                     {1, 768, 3072}, {1, 4096, 1024}, {4, 2304, 768}, {4, 768, 3072},
                                     {8, 2304, 768}, {32, 768, 768}, {128, 2304, 768}, {128, 768, 3072},
                                     {128, 3072, 768}};
    static const char *names[] = {"f16", "bf16", "q8_0"};
    size_t c;
    printf("variant %s (int8: %s), ns per call (best of 7 batches), 1 thread\n", mr_isa_name(), mr_int8_name());
    printf("%5s %5s %5s %12s %12s %12s %12s %12s\n", "M", "N", "K", "f32", names[0], names[1], names[2], "i8");
    for (c = 0; c < sizeof mnk / sizeof mnk[0]; ++c) {
        const int64_t M = mnk[c][0], N = mnk[c][1], K = mnk[c][2];
        const int64_t n = (N + MR_PANEL - 1) / MR_PANEL * K * MR_PANEL;
        float *A = malloc(sizeof(float) * (size_t)(M * K)), *C = malloc(sizeof(float) * (size_t)(M * N));
        float *B = malloc(sizeof(float) * (size_t)n);
        const int64_t qbytes = MR_I8_PANELS_BYTES(K, N) > MR_STORED_BYTES(MR_F32, n) ? MR_I8_PANELS_BYTES(K, N)
                                                                                   : MR_STORED_BYTES(MR_F32, n);
        unsigned char *Bq = calloc((size_t)qbytes, 1), *scratch = malloc((size_t)MR_I8_SCRATCH_BYTES(M, K));
        const double macs = (double)M * (double)N * (double)K;
        const int reps = macs > 1e8 ? 3 : macs > 1e6 ? 30 : 300;
        int64_t i;
        int t;
        if (!A || !B || !C || !Bq || !scratch) return 2;
        for (i = 0; i < M * K; ++i) A[i] = (float)((i * 7919) % 2001) / 1000.0f - 1.0f;
        for (i = 0; i < n; ++i) B[i] = (float)((i * 104729) % 2001) / 1000.0f - 1.0f;
        printf("%5lld %5lld %5lld %12.0f", (long long)M, (long long)N, (long long)K, time_call(-1, M, N, K, A, B, C, reps, scratch));
        for (t = MR_F16; t <= MR_Q8_0; ++t) {
            narrow_bits(t, B, n, Bq);
            printf(" %12.0f", time_call(t, M, N, K, A, Bq, C, reps, scratch));
        }
        printf(" %12.0f\n", time_call(99, M, N, K, A, Bq, C, reps, scratch));
        free(A); free(B); free(C); free(Bq); free(scratch);
    }
    printf("\nconvolutions, one image: ns per call (Winograd 0: not its kind)\n");
    printf("%4s %4s %4s %4s %5s %4s %12s %12s %12s %12s\n", "C", "H", "W", "O", "k", "pad", "f32", "winograd", "q8_0", "i8");
    time_conv(1, 32, 32, 6, 5, 5, 0);    /* lenet */
    time_conv(6, 14, 14, 16, 5, 5, 0);
    time_conv(3, 32, 32, 64, 3, 3, 1);   /* cnn */
    time_conv(64, 32, 32, 64, 3, 3, 1);
    time_conv(64, 16, 16, 128, 3, 3, 1); /* wider */
    time_conv(128, 8, 8, 256, 3, 3, 1);
    time_conv(64, 56, 56, 64, 1, 1, 0);
    return 0;
}
