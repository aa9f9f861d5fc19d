/* Two models' libraries in one program (tests/link.rs): runs mlp and lenet, each on its
 * input and weights, and writes their outputs. C99 that is also C++ (the test builds it
 * with g++ too: the two headers together in C++).
 *
 *   two_models MLP_WEIGHTS MLP_INPUT MLP_OUTPUT LENET_WEIGHTS LENET_INPUT LENET_OUTPUT
 *
 * Inputs and outputs are raw little-endian f32; weights are each model's weights.bin. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "lenet.h"
#include "mlp.h"

/* size bytes aligned to 64 (the ABI asks it of weights and arenas); *block is what to free. */
static unsigned char *aligned(size_t size, void **block)
{
    *block = malloc(size + 64);
    if (*block == NULL) {
        return NULL;
    }
    return (unsigned char *)*block + (64 - (uintptr_t)*block % 64);
}

static int read_file(const char *path, unsigned char *to, size_t size)
{
    FILE *f = fopen(path, "rb");
    size_t got = f != NULL ? fread(to, 1, size, f) : 0;
    if (f != NULL) {
        fclose(f);
    }
    if (got != size) {
        fprintf(stderr, "%s: expected %lu bytes\n", path, (unsigned long)size);
        return 1;
    }
    return 0;
}

/* Runs one model: its forward function on a weights file and an input file. */
typedef int (*forward_fn)(const void *weights, const void *const inputs[], void *const outputs[], void *arena);

static int run(forward_fn forward, size_t weights_size, size_t arena_size, size_t in_size, size_t out_size,
               const char *weights_path, const char *input_path, const char *output_path)
{
    void *blocks[4];
    unsigned char *w = aligned(weights_size, &blocks[0]);
    unsigned char *a = aligned(arena_size, &blocks[1]);
    unsigned char *in = aligned(in_size * sizeof(float), &blocks[2]);
    unsigned char *out = aligned(out_size * sizeof(float), &blocks[3]);
    int status = w == NULL || a == NULL || in == NULL || out == NULL;
    if (status == 0) {
        status = read_file(weights_path, w, weights_size) || read_file(input_path, in, in_size * sizeof(float));
    }
    if (status == 0) {
        const void *const inputs[1] = { in };
        void *const outputs[1] = { out };
        status = forward(w, inputs, outputs, a);
    }
    if (status == 0) {
        FILE *f = fopen(output_path, "wb");
        status = f == NULL || fwrite(out, sizeof(float), out_size, f) != out_size;
        if (f != NULL) {
            fclose(f);
        }
    }
    for (int i = 0; i < 4; ++i) {
        free(blocks[i]);
    }
    return status;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: two_models MLP_WEIGHTS MLP_INPUT MLP_OUTPUT LENET_WEIGHTS LENET_INPUT LENET_OUTPUT\n");
        return 2;
    }
    if (MLP_NUM_INPUTS != 1 || LENET_NUM_INPUTS != 1 || MLP_ABI_VERSION != LENET_ABI_VERSION) {
        fprintf(stderr, "unexpected headers\n");
        return 2;
    }
    if (run(mlp_forward, MLP_WEIGHTS_SIZE, MLP_ARENA_SIZE, MLP_INPUT_0_SIZE, MLP_OUTPUT_0_SIZE, argv[1], argv[2], argv[3])) {
        fprintf(stderr, "mlp failed\n");
        return 1;
    }
    if (run(lenet_forward, LENET_WEIGHTS_SIZE, LENET_ARENA_SIZE, LENET_INPUT_0_SIZE, LENET_OUTPUT_0_SIZE, argv[4], argv[5], argv[6])) {
        fprintf(stderr, "lenet failed\n");
        return 1;
    }
    printf("mithrilc %s, C API %d\n", MLP_MITHRILC_VERSION, MLP_ABI_VERSION);
    return 0;
}
