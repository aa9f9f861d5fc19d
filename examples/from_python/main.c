/* Calls the compiled model from C: reads 4x5 inputs from stdin, prints the 4x3 outputs.
 *
 *   mithrilc compile mlp.json --target c --shape input=4,5 --params params.npz --weights embed -o mlp-c
 *   cc -std=c99 -O2 -I mlp-c main.c mlp-c/libmlp.a -lm -o mlp_main
 *   echo 0.1 0.2 ... | ./mlp_main
 *
 * With --weights embed the weights are inside libmlp.a (mlp_weights_data); without it,
 * read mlp-c/weights.bin into a buffer of MLP_WEIGHTS_SIZE bytes aligned to 64. */
#include <stdint.h>
#include <stdio.h>

#include "mlp.h"

/* Scratch memory for the model, aligned to 64 as the header asks (C99 has no
 * alignment specifier, so round a slightly larger buffer up). */
static unsigned char arena_memory[MLP_ARENA_SIZE + 64];

int main(void)
{
    static float input[MLP_INPUT_0_SIZE], output[MLP_OUTPUT_0_SIZE];
    void *arena = (void *)(((uintptr_t)arena_memory + 63) & ~(uintptr_t)63);
    const void *inputs[] = { input };
    void *outputs[] = { output };
    int i;
    for (i = 0; i < MLP_INPUT_0_SIZE; i++) {
        if (scanf("%f", &input[i]) != 1) {
            fprintf(stderr, "expected %d numbers on stdin\n", MLP_INPUT_0_SIZE);
            return 1;
        }
    }
    if (mlp_forward(mlp_weights_data, inputs, outputs, arena) != 0) {
        fprintf(stderr, "mlp_forward failed\n");
        return 1;
    }
    for (i = 0; i < MLP_OUTPUT_0_SIZE; i++)
        printf("%.9g%c", output[i], i % 3 == 2 ? '\n' : ' ');
    return 0;
}
