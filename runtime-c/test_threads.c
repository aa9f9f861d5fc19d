/* test_threads.c: mr_sgemm_mt and mr_conv2d_f32_mt through a parallel_for that splits
 * the range into single items run in reverse order (as an unlucky scheduler might)
 * give exactly the serial results. Prints "N passed, M failed". Not part of the runtime. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mithril_runtime.h"

static int passed, failed;

static void reverse_items(void *user, mr_task task, void *ctx, int64_t n) {
    int64_t i;
    (void)user;
    for (i = n - 1; i >= 0; --i) { task(ctx, i, i + 1); }
}

static void fill(float *p, size_t n, unsigned seed) {
    size_t i;
    for (i = 0; i < n; ++i) { seed = seed * 1103515245u + 12345u; p[i] = (float)((seed >> 9) % 2001) / 1000.0f - 1.0f; }
}

static void same(const char *what, const float *a, const float *b, size_t n) {
    if (memcmp(a, b, n * sizeof *a) == 0) { ++passed; } else { ++failed; printf("FAIL %s\n", what); }
}

int main(void) {
    mr_threads threads = { reverse_items, NULL };
    int64_t dims[][3] = { { 1, 512, 784 }, { 32, 513, 100 }, { 7, 2304, 64 }, { 128, 300, 17 }, { 3, 1, 5 } };
    size_t k;
    for (k = 0; k < sizeof dims / sizeof dims[0]; ++k) {
        int64_t M = dims[k][0], N = dims[k][1], K = dims[k][2];
        float *A = malloc(sizeof(float) * (size_t)(M * K)), *B = malloc(sizeof(float) * (size_t)(K * N));
        float *C1 = malloc(sizeof(float) * (size_t)(M * N)), *C2 = malloc(sizeof(float) * (size_t)(M * N));
        fill(A, (size_t)(M * K), 1u + (unsigned)k);
        fill(B, (size_t)(K * N), 7u + (unsigned)k);
        /* B as the transpose of a row-major [N, K] weight, as Linear layers use it. */
        mr_sgemm(M, N, K, 1.0f, A, K, 1, B, 1, K, 0.0f, C1, N, 1);
        mr_sgemm_mt(&threads, M, N, K, 1.0f, A, K, 1, B, 1, K, 0.0f, C2, N, 1);
        same("mr_sgemm_mt, transposed B", C1, C2, (size_t)(M * N));
        mr_sgemm(M, N, K, 1.0f, A, K, 1, B, N, 1, 0.0f, C1, N, 1);
        mr_sgemm_mt(&threads, M, N, K, 1.0f, A, K, 1, B, N, 1, 0.0f, C2, N, 1);
        same("mr_sgemm_mt, row-major B", C1, C2, (size_t)(M * N));
        free(A); free(B); free(C1); free(C2);
    }
    {
        /* N, C, H, W, O, KH, KW, stride, pad, groups */
        int64_t convs[][10] = { { 1, 3, 32, 32, 64, 3, 3, 1, 1, 1 }, { 2, 16, 9, 9, 40, 3, 3, 2, 1, 1 },
                                { 3, 8, 7, 7, 8, 3, 3, 1, 1, 4 }, { 1, 6, 10, 10, 17, 5, 5, 1, 0, 1 } };
        for (k = 0; k < sizeof convs / sizeof convs[0]; ++k) {
            int64_t *c = convs[k];
            int64_t OH = (c[2] + 2 * c[8] - c[5]) / c[7] + 1, OW = (c[3] + 2 * c[8] - c[6]) / c[7] + 1;
            size_t nx = (size_t)(c[0] * c[1] * c[2] * c[3]), nw = (size_t)(c[4] * (c[1] / c[9]) * c[5] * c[6]);
            size_t ny = (size_t)(c[0] * c[4] * OH * OW);
            float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * nw);
            float *y1 = malloc(sizeof(float) * ny), *y2 = malloc(sizeof(float) * ny);
            fill(x, nx, 3u + (unsigned)k);
            fill(w, nw, 5u + (unsigned)k);
            mr_conv2d_f32(x, w, y1, c[0], c[1], c[2], c[3], c[4], c[5], c[6], OH, OW, c[7], c[7], c[8], c[8], 1, 1, c[9]);
            mr_conv2d_f32_mt(&threads, x, w, y2, c[0], c[1], c[2], c[3], c[4], c[5], c[6], OH, OW, c[7], c[7], c[8], c[8], 1, 1, c[9]);
            same("mr_conv2d_f32_mt", y1, y2, ny);
            free(x); free(w); free(y1); free(y2);
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
