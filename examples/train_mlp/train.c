/* train.c: trains the MLP of train_mlp.json with the library mithrilc generates from it
 * (`mithrilc compile train_mlp.json --target c --grad ...`; see README.md), or with the
 * Metal target's (`--target metal`), whose header includes mithril_metal.h: then the
 * weights, optimizer state, arena and data live in Metal buffers in shared memory.
 *
 * The task: 96 points in the plane, three classes, each a square cloud around its own
 * center. The data and the initial weights come from a fixed xorshift generator, so a
 * run is deterministic, and every value is an exact float (a 24-bit integer times a
 * power of two), so another implementation can reproduce them bit for bit.
 *
 * All memory is static: the weights (updated in place by each step), the optimizer
 * state and the arena, sized by the header's macros.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_mlp.h"

#define POINTS 96
#define STEPS 300
#define LR 0.02f
#define MOMENTUM 0.9f

#ifndef MITHRIL_METAL_H
/* 64-byte aligned static storage (C99 has no alignas): a little extra, aligned by hand. */
static unsigned char weights_mem[TRAIN_MLP_WEIGHTS_SIZE + 64];
static unsigned char arena_mem[TRAIN_MLP_ARENA_SIZE + 64];
static unsigned char state_mem[TRAIN_MLP_TRAIN_STATE_SIZE + 64];

static void *aligned64(unsigned char *p)
{
    return p + (64 - (uintptr_t)p % 64) % 64;
}
#endif

static uint64_t rng = 0x2545F4914F6CDD1Dull;

/* Uniform in [-1, 1), exactly k / 2^23 - 1 for a 24-bit k. */
static float uniform(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(rng >> 40) / 8388608.0f - 1.0f;
}

#ifdef MITHRIL_METAL_H
/* A shared Metal buffer of n bytes; the CPU's view of it in *contents. */
static void *metal_buffer(mr_metal *rt, size_t n, void **contents)
{
    void *buffer = mr_metal_buffer_new(rt, n);
    if (!buffer) {
        fprintf(stderr, "train: %s\n", mr_metal_last_error());
        exit(1);
    }
    *contents = mr_metal_contents(buffer);
    return buffer;
}
#endif

int main(void)
{
    static const float centers[3][2] = { { 2.0f, 0.0f }, { -1.0f, 1.75f }, { -1.0f, -1.75f } };
    const void *inputs[2];
    int i, step;
    float first = 0.0f, loss = 0.0f;
#ifdef MITHRIL_METAL_H
    train_mlp_model *model;
    mr_metal *rt;
    void *weights_buf, *arena_buf, *state_buf, *x_buf, *labels_buf, *arena, *state;
    unsigned char *weights;
    float *x;
    int32_t *labels;
    if (train_mlp_open(&model, NULL, "train_mlp.metallib") != 0) {
        fprintf(stderr, "train: %s\n", mr_metal_last_error());
        return 1;
    }
    rt = train_mlp_runtime(model);
    weights_buf = metal_buffer(rt, TRAIN_MLP_WEIGHTS_SIZE, (void **)&weights);
    arena_buf = metal_buffer(rt, TRAIN_MLP_ARENA_SIZE, &arena);
    state_buf = metal_buffer(rt, TRAIN_MLP_TRAIN_STATE_SIZE, &state);
    x_buf = metal_buffer(rt, sizeof(float) * POINTS * 2, (void **)&x);
    labels_buf = metal_buffer(rt, sizeof(int32_t) * POINTS, (void **)&labels);
#else
    static float x[POINTS * 2];
    static int32_t labels[POINTS];
    unsigned char *weights = (unsigned char *)aligned64(weights_mem);
    void *arena = aligned64(arena_mem);
    void *state = aligned64(state_mem);
#endif

    for (i = 0; i < POINTS; ++i) {
        labels[i] = i % 3;
        x[2 * i] = centers[i % 3][0] + 1.25f * uniform();
        x[2 * i + 1] = centers[i % 3][1] + 1.25f * uniform();
    }
    /* Small random weights, in the order of the weight macros. */
    {
        static const unsigned long offsets[] = { TRAIN_MLP_WEIGHT_0_OFFSET, TRAIN_MLP_WEIGHT_1_OFFSET, TRAIN_MLP_WEIGHT_2_OFFSET, TRAIN_MLP_WEIGHT_3_OFFSET };
        static const long sizes[] = { TRAIN_MLP_WEIGHT_0_SIZE, TRAIN_MLP_WEIGHT_1_SIZE, TRAIN_MLP_WEIGHT_2_SIZE, TRAIN_MLP_WEIGHT_3_SIZE };
        int w;
        long k;
        for (w = 0; w < TRAIN_MLP_NUM_WEIGHTS; ++w) {
            float *p = (float *)(void *)(weights + offsets[w]);
            for (k = 0; k < sizes[w]; ++k) {
                p[k] = 0.5f * uniform();
            }
        }
    }
    memset(state, 0, TRAIN_MLP_TRAIN_STATE_SIZE);

#ifdef MITHRIL_METAL_H
    inputs[0] = x_buf;
    inputs[1] = labels_buf;
#else
    inputs[0] = x;
    inputs[1] = labels;
#endif
    for (step = 0; step < STEPS; ++step) {
#ifdef MITHRIL_METAL_H
        loss = train_mlp_train_step(model, weights_buf, inputs, LR, MOMENTUM, state_buf, arena_buf);
#else
        loss = train_mlp_train_step(weights, inputs, LR, MOMENTUM, state, arena);
#endif
        if (step == 0) {
            first = loss;
        }
        if (step % 25 == 0) {
            printf("step %3d  loss %.6f\n", step, loss);
        }
    }
    printf("step %3d  loss %.6f\n", STEPS - 1, loss);
    printf("loss fell %.1fx\n", first / loss);
#ifdef MITHRIL_METAL_H
    mr_metal_buffer_free(weights_buf);
    mr_metal_buffer_free(arena_buf);
    mr_metal_buffer_free(state_buf);
    mr_metal_buffer_free(x_buf);
    mr_metal_buffer_free(labels_buf);
    train_mlp_close(model);
#endif
    return 0;
}
