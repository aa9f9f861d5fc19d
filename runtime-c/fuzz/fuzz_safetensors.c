/*
 * fuzz_safetensors.c -- libFuzzer harness for mr_safetensors_read_stream: the input is
 * the file; the model wants "w" (f32 [2, 3], which may come as F16, BF16 or F64), "b"
 * (f32 [3]) and "n" (i64 [2]). Each parameter placed must be whole and the right size.
 */
#include "fuzz_common.h"

static const long long shape_w[] = { 2, 3 }, shape_b[] = { 3 }, shape_n[] = { 2 };
static const mr_st_param params[] = {
    { "w", 1, "F32", 2, shape_w },
    { "b", 1, "F32", 1, shape_b },
    { "n", 1, "I64", 1, shape_n },
};
static const size_t want_bytes[] = { 24, 12, 16 };

static int placed[3];

static int place(void *user, int index, const void *data, size_t bytes, char *err)
{
    (void)user;
    (void)err;
    FUZZ_ASSERT(index >= 0 && index < 3 && !placed[index] && bytes == want_bytes[index]);
    placed[index] = 1;
    /* Touch every byte, so a short buffer shows under ASan. */
    { volatile unsigned char sum = 0; size_t i; for (i = 0; i < bytes; ++i) { sum ^= ((const unsigned char *)data)[i]; } (void)sum; }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[MR_ERR_SIZE];
    FILE *f = fuzz_stream(data, size);
    int status;
    memset(placed, 0, sizeof placed);
    status = mr_safetensors_read_stream(f, "fuzz.safetensors", params, 3, place, NULL, err);
    fclose(f);
    if (status != 0) {
        fuzz_check_message(err);
    } else {
        FUZZ_ASSERT(placed[0] && placed[1] && placed[2]);
    }
    return 0;
}
