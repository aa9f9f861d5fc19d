/* A libFuzzer target for the ggml target's GGUF loader (templates/ggml/model.c.tera:
 * mlp_init, its read_weights and checks, and ggml's own gguf reader under them), on
 * the library mithrilc generates for examples/mlp: each input is written to a file,
 * which mlp_init must refuse with a message or load; a loaded model is then run once
 * on zeros and freed. Built and run by run.sh in this folder. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ggml.h"
#include "mlp.h"

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)level;
    (void)text;
    (void)user;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[256];
    static float input[MLP_INPUT_0_SIZE], output[MLP_OUTPUT_0_SIZE];
    const void *inputs[] = { input };
    void *outputs[] = { output };
    char error[256];
    struct mlp *model;
    FILE *f;
    if (!path[0]) {
        const char *dir = getenv("FUZZ_GGUF_DIR");
        snprintf(path, sizeof path, "%s/fuzz-gguf-%ld.gguf", dir ? dir : "/tmp", (long)getpid());
        ggml_log_set(quiet, NULL);
    }
    f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) {
        abort();
    }
    error[0] = 0;
    model = mlp_init(path, 1, error, sizeof error);
    if (!model) {
        /* A refusal says why. */
        if (!error[0]) {
            abort();
        }
        return 0;
    }
    if (mlp_forward(model, inputs, outputs) != 0) {
        abort();
    }
    mlp_free(model);
    return 0;
}
