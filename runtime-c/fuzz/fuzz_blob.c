/*
 * fuzz_blob.c -- libFuzzer harness for mr_blob_read_stream: the first two bytes are the
 * size the model wants (little-endian), the rest the file. It must succeed exactly when
 * the file has that size, with its bytes.
 */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[MR_ERR_SIZE];
    size_t want, have;
    unsigned char *dst;
    FILE *f;
    int status;
    if (size < 2) { return 0; }
    want = (size_t)data[0] | (size_t)data[1] << 8;
    have = size - 2;
    dst = (unsigned char *)malloc(want ? want : 1);
    FUZZ_ASSERT(dst != NULL);
    f = fuzz_stream(data + 2, have);
    status = mr_blob_read_stream(f, "fuzz.bin", dst, want, err);
    fclose(f);
    FUZZ_ASSERT((status == 0) == (have == want));
    if (status == 0) {
        FUZZ_ASSERT(want == 0 || memcmp(dst, data + 2, want) == 0);
    } else {
        fuzz_check_message(err);
    }
    free(dst);
    return 0;
}
