/*
 * fuzz_npy.c -- libFuzzer harness for mr_npy_read_stream. The first byte picks the
 * input the file is read as (static or symbolic dimensions, each element type, rank 0
 * to 5); the rest is the file. An array read must write back (mr_npy_write_stream) and
 * read again to the same bytes and sizes.
 */
#include "fuzz_common.h"

static const long long shape_23[] = { 2, 3 }, shape_b3[] = { 8, 3 }, shape_b[] = { 8 }, shape_5[] = { 1, 2, 1, 3, 2 };
static const int sym_none[] = { -1, -1, -1, -1, -1 }, sym_b3[] = { 0, -1 }, sym_b[] = { 0 }, sym_5[] = { -1, 0, -1, -1, 1 };
static const mr_port ports[] = {
    { "x", "<f4", 4, 6, 2, shape_23, sym_none },
    { "y", "<f4", 4, 24, 2, shape_b3, sym_b3 },
    { "b", "|b1", 1, 8, 1, shape_b, sym_b },
    { "i", "<i8", 8, 1, 0, shape_23, sym_none },
    { "j", "<i4", 4, 8, 1, shape_b, sym_b },
    { "d", "<f8", 8, 12, 5, shape_5, sym_5 },
    { "u", "|u1", 1, 8, 1, shape_b, sym_b },
    { "h", "<f2", 2, 6, 2, shape_23, sym_none },
    /* bf16: f32 files rounded on reading */
    { "t", "<f4", 2, 24, 2, shape_b3, sym_b3 },
    { "q", "<u8", 8, 8, 1, shape_b, sym_b },
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const mr_port *p;
    long long value[2] = { 8, 2 }, value2[2];
    int set[2] = { 0, 0 }, set2[2] = { 0, 0 };
    mr_dims dims = { value, set, 2 }, dims2 = { value2, set2, 2 };
    unsigned char dst[256], again[256];
    char err[MR_ERR_SIZE], *buf = NULL;
    size_t len = 0;
    FILE *f;
    if (size < 1) { return 0; }
    p = &ports[data[0] % (sizeof ports / sizeof ports[0])];
    /* The first byte's high bits: one symbol already set by "another input". */
    if (data[0] & 0x80) {
        value[0] = 1 + (data[0] >> 4 & 7);
        set[0] = 1;
    }
    f = fuzz_stream(data + 1, size - 1);
    if (mr_npy_read_stream(f, "fuzz.npy", p, &dims, dst, sizeof dst, err) != 0) {
        fuzz_check_message(err);
        fclose(f);
        return 0;
    }
    fclose(f);
    /* The sizes it set are within their ranges. */
    FUZZ_ASSERT(value[0] >= 1 && value[0] <= 8 && value[1] >= 1 && value[1] <= 2);
    /* Written and read back, the same array. */
    f = open_memstream(&buf, &len);
    FUZZ_ASSERT(f != NULL);
    FUZZ_ASSERT(mr_npy_write_stream(f, "back.npy", p, &dims, dst, err) == 0);
    fclose(f);
    value2[0] = 8;
    value2[1] = 2;
    f = fuzz_stream((const uint8_t *)buf, len);
    FUZZ_ASSERT(mr_npy_read_stream(f, "back.npy", p, &dims2, again, sizeof again, err) == 0);
    fclose(f);
    FUZZ_ASSERT(memcmp(dst, again, mr_port_count(p, &dims) * (size_t)p->elem) == 0);
    FUZZ_ASSERT(mr_port_count(p, &dims) == mr_port_count(p, &dims2));
    free(buf);
    return 0;
}
