/*
 * fuzz_cli.c -- libFuzzer harness for mr_cli_parse, the demos' command line: the first
 * byte picks the flags (--threads, --graph), the rest is argv, its arguments separated by
 * NUL bytes. The model's inputs are "a", "a=b" and "x". What it accepts must be in range,
 * and each input's file must be the tail of an argument.
 */
#include "fuzz_common.h"

static const long long one[] = { 1 };
static const int none[] = { -1 };
static const mr_port inputs[] = {
    { "a", "<f4", 4, 1, 1, one, none },
    { "a=b", "<f4", 4, 1, 1, one, none },
    { "x", "<f4", 4, 1, 1, one, none },
};
static const char *const options[] = { "--weights", "--safetensors", "--out" };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[MR_ERR_SIZE], *text, *argv[66];
    const char *values[3], *paths[3];
    int argc = 1, k;
    size_t i, start = 1;
    mr_cli cli;
    if (size < 1) { return 0; }
    /* The arguments, NUL-terminated copies of the pieces between NULs. */
    text = (char *)malloc(size + 1);
    FUZZ_ASSERT(text != NULL);
    memcpy(text, data, size);
    text[size] = 0;
    argv[0] = (char *)"demo";
    for (i = 1; i <= size && argc < 65; ++i) {
        if (i == size || text[i] == 0) {
            text[i] = 0;
            argv[argc++] = text + start;
            start = i + 1;
        }
    }
    argv[argc] = NULL;
    memset(&cli, 0, sizeof cli);
    cli.inputs = inputs;
    cli.input_count = 3;
    cli.options = options;
    cli.option_count = 3;
    cli.flags = data[0] & 3;
    cli.usage = "demo [options]";
    cli.values = values;
    cli.input_paths = paths;
    if (mr_cli_parse(&cli, argc, argv, err) != 0) {
        fuzz_check_message(err);
    } else {
        FUZZ_ASSERT(cli.repeat >= 1 && cli.repeat <= MR_MAX_REPEAT && cli.threads >= 1 && cli.threads <= MR_MAX_THREADS);
        FUZZ_ASSERT((cli.flags & MR_CLI_THREADS) || cli.threads == 1);
        for (k = 0; k < 3; ++k) {
            FUZZ_ASSERT(!paths[k] || (paths[k] > text && paths[k] <= text + size && paths[k][-1] == '=' && *paths[k]));
        }
    }
    free(text);
    return 0;
}
