/* train.c: trains the MLP of train_mlp.json with the library mithrilc generates from it
 * (`mithrilc compile train_mlp.json --target c --grad ...`; see README.md).
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

/* 64-byte aligned static storage (C99 has no alignas): a little extra, aligned by hand. */
static unsigned char weights_mem[TRAIN_MLP_WEIGHTS_SIZE + 64];
static unsigned char arena_mem[TRAIN_MLP_ARENA_SIZE + 64];
static unsigned char state_mem[TRAIN_MLP_TRAIN_STATE_SIZE + 64];

static void *aligned64(unsigned char *p)
{
    return p + (64 - (uintptr_t)p % 64) % 64;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;

/* Uniform in [-1, 1), exactly k / 2^23 - 1 for a 24-bit k. */
static float uniform(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(rng >> 40) / 8388608.0f - 1.0f;
}

int main(void)
{
    static const float centers[3][2] = { { 2.0f, 0.0f }, { -1.0f, 1.75f }, { -1.0f, -1.75f } };
    static float x[POINTS * 2];
    static int32_t labels[POINTS];
    const void *inputs[2];
    unsigned char *weights = (unsigned char *)aligned64(weights_mem);
    void *arena = aligned64(arena_mem);
    void *state = aligned64(state_mem);
    int i, step;
    float first = 0.0f, loss = 0.0f;

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

    inputs[0] = x;
    inputs[1] = labels;
    for (step = 0; step < STEPS; ++step) {
        loss = train_mlp_train_step(weights, inputs, LR, MOMENTUM, state, arena);
        if (step == 0) {
            first = loss;
        }
        if (step % 25 == 0) {
            printf("step %3d  loss %.6f\n", step, loss);
        }
    }
    printf("step %3d  loss %.6f\n", STEPS - 1, loss);
    printf("loss fell %.1fx\n", first / loss);
    return 0;
}
