/* test_threads.c: mr_sgemm_mt, mr_sgemm_panels_mt, mr_sgemm_panels_q_mt (f16, bf16, q8_0), mr_conv2d_f32_mt,
 * mr_conv2d_winograd_f32_mt and their narrow-weight versions (mr_conv2d_q_mt, mr_conv2d_winograd_q_mt) through a parallel_for that splits the range into single items run in reverse order (as an unlucky scheduler might; the convolutions also into ranges of 3 items)
 * give exactly the serial results, and their epilogues see every element exactly once,
 * after it is final. Prints "N passed, M failed". Not part of the runtime. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mithril_runtime.h"
#include "test_isa.h"
#include "test_narrow.h"

static int passed, failed;

static void reverse_items(void *user, mr_task task, void *ctx, int64_t n) {
    int64_t i;
    (void)user;
    for (i = n - 1; i >= 0; --i) { task(ctx, i, i + 1); }
}

/* Ranges of 3 items, last first: a convolution's task then gets the end of one image
 * and whole images, or whole images and the start of one, in one range. */
static void reverse_ranges(void *user, mr_task task, void *ctx, int64_t n) {
    int64_t i;
    (void)user;
    for (i = n; i > 0; i -= 3) { task(ctx, i > 3 ? i - 3 : 0, i); }
}

static void fill(float *p, size_t n, unsigned seed) {
    size_t i;
    for (i = 0; i < n; ++i) { seed = seed * 1103515245u + 12345u; p[i] = (float)((seed >> 9) % 2001) / 1000.0f - 1.0f; }
}

static void same(const char *what, const float *a, const float *b, size_t n) {
    if (memcmp(a, b, n * sizeof *a) == 0) { ++passed; } else { ++failed; printf("FAIL %s\n", what); }
}

/* An epilogue adding a per-row bias, then ReLU, and counting visits per element. */
typedef struct {
    float *y;
    int64_t rows, cols;
    const float *bias;
    int *visits;
} bias_relu_ctx;

static void bias_relu(const void *vctx, int64_t n, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    const bias_relu_ctx *e = (const bias_relu_ctx *)vctx;
    int64_t i, j;
    for (i = i0; i < i1; ++i) {
        for (j = j0; j < j1; ++j) {
            int64_t at = (n * e->rows + i) * e->cols + j;
            float v = e->y[at] + e->bias[i];
            e->y[at] = v > 0.0f ? v : 0.0f;
            e->visits[at] += 1;
        }
    }
}

/* y after the epilogue, computed separately: the expected result. */
static void apply_bias_relu(float *y, int64_t images, int64_t rows, int64_t cols, const float *bias) {
    int64_t i;
    for (i = 0; i < images * rows * cols; ++i) {
        float v = y[i] + bias[(i / cols) % rows];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}

static void once_each(const char *what, const int *visits, size_t n) {
    size_t i;
    for (i = 0; i < n && visits[i] == 1; ++i) {}
    if (i == n) { ++passed; } else { ++failed; printf("FAIL %s: element %zu visited %d times\n", what, i, visits[i]); }
}

int main(void) {
    mr_threads threads = { reverse_items, NULL }, ranges = { reverse_ranges, NULL };
    int64_t dims[][3] = { { 1, 512, 784 }, { 32, 513, 100 }, { 7, 2304, 64 }, { 128, 300, 17 }, { 3, 1, 5 } };
    size_t k;
    const char *isa = test_isa_check(getenv("MR_ISA"), &passed, &failed);
    if (!isa) return 0;
    for (k = 0; k < sizeof dims / sizeof dims[0]; ++k) {
        int64_t M = dims[k][0], N = dims[k][1], K = dims[k][2];
        float *A = malloc(sizeof(float) * (size_t)(M * K)), *B = malloc(sizeof(float) * (size_t)(K * N));
        float *C1 = malloc(sizeof(float) * (size_t)(M * N)), *C2 = malloc(sizeof(float) * (size_t)(M * N));
        fill(A, (size_t)(M * K), 1u + (unsigned)k);
        fill(B, (size_t)(K * N), 7u + (unsigned)k);
        /* B as the transpose of a row-major [N, K] weight, as Linear layers use it. */
        float *bias = malloc(sizeof(float) * (size_t)M);
        int *visits = calloc((size_t)(M * N), sizeof(int));
        bias_relu_ctx ectx = { NULL, 0, 0, NULL, NULL };
        mr_epilogue ep = { bias_relu, NULL, 0 };
        int t;
        fill(bias, (size_t)M, 11u + (unsigned)k);
        ectx.y = C2; ectx.rows = M; ectx.cols = N; ectx.bias = bias; ectx.visits = visits;
        ep.ctx = &ectx;
        mr_sgemm(M, N, K, 1.0f, A, K, 1, B, 1, K, 0.0f, C1, N, 1);
        mr_sgemm_mt(&threads, M, N, K, 1.0f, A, K, 1, B, 1, K, 0.0f, C2, N, 1, NULL);
        same("mr_sgemm_mt, transposed B", C1, C2, (size_t)(M * N));
        mr_sgemm(M, N, K, 1.0f, A, K, 1, B, N, 1, 0.0f, C1, N, 1);
        mr_sgemm_mt(&threads, M, N, K, 1.0f, A, K, 1, B, N, 1, 0.0f, C2, N, 1, NULL);
        same("mr_sgemm_mt, row-major B", C1, C2, (size_t)(M * N));
        {
            /* B in panels: threaded equals serial, bit for bit. */
            const int64_t panels = (N + MR_PANEL - 1) / MR_PANEL;
            float *Bp = calloc((size_t)(panels * K * MR_PANEL), sizeof(float));
            int64_t r, c;
            for (r = 0; r < K; ++r) {
                for (c = 0; c < N; ++c) Bp[(c / MR_PANEL) * K * MR_PANEL + r * MR_PANEL + c % MR_PANEL] = B[r * N + c];
            }
            mr_sgemm_panels(M, N, K, 1.0f, A, K, 1, Bp, 0.0f, C1, N, 1);
            mr_sgemm_panels_mt(&threads, M, N, K, 1.0f, A, K, 1, Bp, 0.0f, C2, N, 1, NULL);
            same("mr_sgemm_panels_mt", C1, C2, (size_t)(M * N));
            apply_bias_relu(C1, 1, M, N, bias);
            for (t = 0; t < 2; ++t) {
                memset(visits, 0, sizeof(int) * (size_t)(M * N));
                mr_sgemm_panels_mt(t ? &threads : NULL, M, N, K, 1.0f, A, K, 1, Bp, 0.0f, C2, N, 1, &ep);
                same("mr_sgemm_panels_mt with an epilogue", C1, C2, (size_t)(M * N));
                once_each("mr_sgemm_panels_mt's epilogue", visits, (size_t)(M * N));
            }
            {
                /* The same panels stored narrow (any bits will do: threaded must equal
                 * serial) */
                const int64_t n = panels * K * MR_PANEL;
                unsigned char *Bq = malloc((size_t)MR_STORED_BYTES(MR_F32, n));
                int type;
                for (type = MR_F16; type <= MR_Q8_0; ++type) {
                    narrow_bits(type, Bp, n, Bq);
                    mr_sgemm_panels_q(M, N, K, 1.0f, A, K, 1, Bq, type, 0.0f, C1, N, 1);
                    mr_sgemm_panels_q_mt(&threads, M, N, K, 1.0f, A, K, 1, Bq, type, 0.0f, C2, N, 1, NULL);
                    same("mr_sgemm_panels_q_mt", C1, C2, (size_t)(M * N));
                    apply_bias_relu(C1, 1, M, N, bias);
                    for (t = 0; t < 2; ++t) {
                        memset(visits, 0, sizeof(int) * (size_t)(M * N));
                        mr_sgemm_panels_q_mt(t ? &threads : NULL, M, N, K, 1.0f, A, K, 1, Bq, type, 0.0f, C2, N, 1, &ep);
                        same("mr_sgemm_panels_q_mt with an epilogue", C1, C2, (size_t)(M * N));
                        once_each("mr_sgemm_panels_q_mt's epilogue", visits, (size_t)(M * N));
                    }
                }
                free(Bq);
            }
            free(Bp);
        }
        mr_sgemm(M, N, K, 1.0f, A, K, 1, B, N, 1, 0.0f, C1, N, 1);
        apply_bias_relu(C1, 1, M, N, bias);
        for (t = 0; t < 2; ++t) {
            memset(visits, 0, sizeof(int) * (size_t)(M * N));
            mr_sgemm_mt(t ? &threads : NULL, M, N, K, 1.0f, A, K, 1, B, N, 1, 0.0f, C2, N, 1, &ep);
            same("mr_sgemm_mt with an epilogue", C1, C2, (size_t)(M * N));
            once_each("mr_sgemm_mt's epilogue", visits, (size_t)(M * N));
        }
        free(A); free(B); free(C1); free(C2); free(bias); free(visits);
    }
    {
        /* N, C, H, W, O, KH, KW, stride, pad, groups */
        int64_t convs[][10] = { { 1, 3, 32, 32, 64, 3, 3, 1, 1, 1 }, { 2, 16, 9, 9, 40, 3, 3, 2, 1, 1 },
                                { 3, 8, 7, 7, 8, 3, 3, 1, 1, 4 }, { 1, 6, 10, 10, 17, 5, 5, 1, 0, 1 },
                                { 1, 16, 34, 34, 64, 3, 3, 1, 0, 1 }, { 2, 3, 12, 40, 9, 3, 3, 1, 0, 1 },
                                { 1, 6, 14, 14, 16, 5, 5, 1, 0, 1 }, { 3, 6, 14, 14, 16, 5, 5, 1, 0, 1 } };
        /* each through both splits */
        for (k = 0; k < 2 * (sizeof convs / sizeof convs[0]); ++k) {
            int64_t *c = convs[k / 2];
            const mr_threads *split = k % 2 ? &ranges : &threads;
            int64_t OH = (c[2] + 2 * c[8] - c[5]) / c[7] + 1, OW = (c[3] + 2 * c[8] - c[6]) / c[7] + 1;
            size_t nx = (size_t)(c[0] * c[1] * c[2] * c[3]), nw = (size_t)(c[4] * (c[1] / c[9]) * c[5] * c[6]);
            size_t ny = (size_t)(c[0] * c[4] * OH * OW);
            float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * nw);
            float *y1 = malloc(sizeof(float) * ny), *y2 = malloc(sizeof(float) * ny);
            fill(x, nx, 3u + (unsigned)k);
            fill(w, nw, 5u + (unsigned)k);
            float *bias = malloc(sizeof(float) * (size_t)c[4]);
            int *visits = calloc(ny, sizeof(int));
            bias_relu_ctx ectx = { NULL, 0, 0, NULL, NULL };
            mr_epilogue ep = { bias_relu, NULL, 0 };
            int t;
            fill(bias, (size_t)c[4], 13u + (unsigned)k);
            ectx.y = y2; ectx.rows = c[4]; ectx.cols = OH * OW; ectx.bias = bias; ectx.visits = visits;
            ep.ctx = &ectx;
            mr_conv2d_f32(x, w, y1, c[0], c[1], c[2], c[3], c[4], c[5], c[6], OH, OW, c[7], c[7], c[8], c[8], 1, 1, c[9]);
            mr_conv2d_f32_mt(split, x, w, y2, c[0], c[1], c[2], c[3], c[4], c[5], c[6], OH, OW, c[7], c[7], c[8], c[8], 1, 1, c[9], NULL);
            same("mr_conv2d_f32_mt", y1, y2, ny);
            apply_bias_relu(y1, c[0], c[4], OH * OW, bias);
            for (t = 0; t < 2; ++t) {
                memset(visits, 0, sizeof(int) * ny);
                mr_conv2d_f32_mt(t ? split : NULL, x, w, y2, c[0], c[1], c[2], c[3], c[4], c[5], c[6], OH, OW, c[7], c[7], c[8], c[8], 1, 1, c[9], &ep);
                same("mr_conv2d_f32_mt with an epilogue", y1, y2, ny);
                once_each("mr_conv2d_f32_mt's epilogue", visits, ny);
            }
            {
                /* w stored narrow: threaded equals serial */
                unsigned char *wq = malloc((size_t)MR_STORED_BYTES(MR_F32, nw));
                int type;
                for (type = MR_F16; type <= MR_Q8_0; ++type) {
                    narrow_bits(type, w, (int64_t)nw, wq);
                    mr_conv2d_q_mt(NULL, x, wq, type, y1, c[0], c[1], c[2], c[3], c[4], c[5], c[6], OH, OW, c[7], c[7], c[8], c[8], 1, 1, c[9], NULL);
                    apply_bias_relu(y1, c[0], c[4], OH * OW, bias);
                    memset(visits, 0, sizeof(int) * ny);
                    mr_conv2d_q_mt(split, x, wq, type, y2, c[0], c[1], c[2], c[3], c[4], c[5], c[6], OH, OW, c[7], c[7], c[8], c[8], 1, 1, c[9], &ep);
                    same("mr_conv2d_q_mt with an epilogue", y1, y2, ny);
                    once_each("mr_conv2d_q_mt's epilogue", visits, ny);
                }
                free(wq);
            }
            free(x); free(w); free(y1); free(y2); free(bias); free(visits);
        }
    }
    {
        /* Winograd: N, C, H, W, O, padding (any u will do: threaded must equal serial) */
        int64_t convs[][6] = { { 1, 64, 34, 34, 64, 0 }, { 3, 5, 10, 72, 7, 0 }, { 13, 3, 8, 9, 5, 1 }, { 40, 2, 5, 5, 3, 1 } };
        for (k = 0; k < sizeof convs / sizeof convs[0]; ++k) {
            int64_t *c = convs[k], p = c[5], OH = c[2] + 2 * p - 2, OW = c[3] + 2 * p - 2;
            size_t nx = (size_t)(c[0] * c[1] * c[2] * c[3]), nu = (size_t)(36 * c[4] * c[1]), ny = (size_t)(c[0] * c[4] * OH * OW);
            float *x = malloc(sizeof(float) * nx), *u = malloc(sizeof(float) * nu);
            float *y1 = malloc(sizeof(float) * ny), *y2 = malloc(sizeof(float) * ny);
            float *scratch = malloc(sizeof(float) * (size_t)MR_WINOGRAD_SCRATCH(c[0], c[1], c[4], OH, OW));
            float *bias = malloc(sizeof(float) * (size_t)c[4]);
            int *visits = calloc(ny, sizeof(int));
            bias_relu_ctx ectx = { NULL, 0, 0, NULL, NULL };
            mr_epilogue ep = { bias_relu, NULL, 0 };
            int t;
            fill(x, nx, 17u + (unsigned)k);
            fill(u, nu, 19u + (unsigned)k);
            fill(bias, (size_t)c[4], 23u + (unsigned)k);
            ectx.y = y2; ectx.rows = c[4]; ectx.cols = OH * OW; ectx.bias = bias; ectx.visits = visits;
            ep.ctx = &ectx;
            mr_conv2d_winograd_f32(x, u, y1, c[0], c[1], c[2], c[3], c[4], OH, OW, p, p, scratch);
            mr_conv2d_winograd_f32_mt(&threads, x, u, y2, c[0], c[1], c[2], c[3], c[4], OH, OW, p, p, scratch, NULL);
            same("mr_conv2d_winograd_f32_mt", y1, y2, ny);
            apply_bias_relu(y1, c[0], c[4], OH * OW, bias);
            for (t = 0; t < 2; ++t) {
                memset(visits, 0, sizeof(int) * ny);
                mr_conv2d_winograd_f32_mt(t ? &threads : NULL, x, u, y2, c[0], c[1], c[2], c[3], c[4], OH, OW, p, p, scratch, &ep);
                same("mr_conv2d_winograd_f32_mt with an epilogue", y1, y2, ny);
                once_each("mr_conv2d_winograd_f32_mt's epilogue", visits, ny);
            }
            {
                unsigned char *uq = malloc((size_t)MR_STORED_BYTES(MR_F32, nu));
                int type;
                for (type = MR_F16; type <= MR_Q8_0; ++type) {
                    narrow_bits(type, u, (int64_t)nu, uq);
                    mr_conv2d_winograd_q_mt(NULL, x, uq, type, y1, c[0], c[1], c[2], c[3], c[4], OH, OW, p, p, scratch, NULL);
                    apply_bias_relu(y1, c[0], c[4], OH * OW, bias);
                    memset(visits, 0, sizeof(int) * ny);
                    mr_conv2d_winograd_q_mt(&threads, x, uq, type, y2, c[0], c[1], c[2], c[3], c[4], OH, OW, p, p, scratch, &ep);
                    same("mr_conv2d_winograd_q_mt with an epilogue", y1, y2, ny);
                    once_each("mr_conv2d_winograd_q_mt's epilogue", visits, ny);
                }
                free(uq);
            }
            free(x); free(u); free(y1); free(y2); free(scratch); free(bias); free(visits);
        }
    }
    printf("variant %s: %d passed, %d failed\n", isa, passed, failed);
    return failed != 0;
}
