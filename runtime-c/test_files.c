/*
 * test_files.c -- standalone test program for mr_files.c, the demos' file readers and
 * command line (not part of the runtime). Feeds each reader well-formed files as NumPy
 * and the safetensors package write them, and hostile ones, and checks the values read
 * or the whole error message.
 *
 * Prints "files: N passed, M failed" and exits 0 only when M == 0.
 */
#include "mr_files.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_passed, g_failed;

static void check(int ok, const char *what, int line)
{
    if (ok) {
        ++g_passed;
    } else {
        ++g_failed;
        printf("FAIL (line %d): %s\n", line, what);
    }
}
#define CHECK(cond) check((cond) != 0, #cond, __LINE__)

/* A call that must fail with exactly `want` as its message. */
static void check_err(int status, const char *err, const char *want, int line)
{
    if (status == 0) {
        ++g_failed;
        printf("FAIL (line %d): succeeded, wanted the error: %s\n", line, want);
    } else if (strcmp(err, want) != 0) {
        ++g_failed;
        printf("FAIL (line %d): the error\n    %s\nwanted\n    %s\n", line, err, want);
    } else {
        ++g_passed;
    }
}
#define CHECK_ERR(call, want) check_err((call), err, (want), __LINE__)

/* A call that must succeed. */
static void check_ok(int status, const char *err, int line)
{
    if (status != 0) {
        ++g_failed;
        printf("FAIL (line %d): %s\n", line, err);
    } else {
        ++g_passed;
    }
}
#define CHECK_OK(call) check_ok((call), err, __LINE__)

static char err[MR_ERR_SIZE];

/* A temporary stream holding n bytes, at its start. */
static FILE *stream_of(const void *bytes, size_t n)
{
    FILE *f = tmpfile();
    if (!f || (n && fwrite(bytes, 1, n, f) != n)) {
        printf("cannot make a temporary file\n");
        exit(1);
    }
    rewind(f);
    return f;
}

/* An .npy file: the magic, format `version`, the dictionary `dict` (a '\n' added, no
 * padding), then n bytes of data. */
static FILE *npy_of(int version, const char *dict, const void *data, size_t n)
{
    size_t len = strlen(dict) + 1, pre = version == 1 ? 10 : 12;
    unsigned char *buf = (unsigned char *)malloc(pre + len + n + 1);
    FILE *f;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)version;
    buf[7] = 0;
    buf[8] = (unsigned char)(len & 0xff);
    buf[9] = (unsigned char)(len >> 8);
    if (pre == 12) {
        buf[10] = (unsigned char)(len >> 16);
        buf[11] = (unsigned char)(len >> 24);
    }
    memcpy(buf + pre, dict, len - 1);
    buf[pre + len - 1] = '\n';
    if (n) { memcpy(buf + pre + len, data, n); }
    f = stream_of(buf, pre + len + n);
    free(buf);
    return f;
}

/* The ports the tests read: x, f32 [2, 3]; s, f32 [] ; b, bool [3]; y, f32 [B, 2] with
 * B symbolic up to 4; z, i64 [B]. */
static const long long shape_23[] = { 2, 3 }, shape_0[] = { 0 }, shape_3[] = { 3 }, shape_b2[] = { 4, 2 }, shape_b[] = { 4 };
static const int sym_static2[] = { -1, -1 }, sym_static1[] = { -1 }, sym_b2[] = { 0, -1 }, sym_b[] = { 0 };
static const mr_port port_x = { "x", "<f4", 4, 6, 2, shape_23, sym_static2 };
static const mr_port port_s = { "s", "<f4", 4, 1, 0, shape_0, sym_static1 };
static const mr_port port_b = { "b", "|b1", 1, 3, 1, shape_3, sym_static1 };
static const mr_port port_y = { "y", "<f4", 4, 8, 2, shape_b2, sym_b2 };
static const mr_port port_z = { "z", "<i8", 8, 4, 1, shape_b, sym_b };

static long long dim_value[2];
static int dim_set[2];
static mr_dims dims = { dim_value, dim_set, 1 };

static void reset_dims(void)
{
    dim_value[0] = 4;
    dim_set[0] = 0;
}

/* Reads `dict` + data as port p (dst: 64 bytes), the dimensions reset first. */
static int read_npy(int version, const char *dict, const void *data, size_t n, const mr_port *p, void *dst)
{
    FILE *f = npy_of(version, dict, data, n);
    int status = mr_npy_read_stream(f, "t.npy", p, &dims, dst, 64, err);
    fclose(f);
    return status;
}

/* 0 to 5, then room for the tests that give more data than an array holds. */
static const float six[16] = { 0, 1, 2, 3, 4, 5 };

static void test_npy_well_formed(void)
{
    float got[16];
    unsigned char flags[3];
    int i;
    /* As NumPy writes them (np.save; format 2.0 and 3.0 from np.lib.format.write_array). */
    reset_dims();
    CHECK_OK(read_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }           ", six, 24, &port_x, got));
    for (i = 0; i < 6; ++i) { CHECK(got[i] == (float)i); }
    CHECK_OK(read_npy(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", six, 24, &port_x, got));
    CHECK_OK(read_npy(3, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", six, 24, &port_x, got));
    CHECK_OK(read_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", six, 4, &port_s, got));
    CHECK_OK(read_npy(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", "\1\0\1", 3, &port_b, flags));
    CHECK(flags[0] == 1 && flags[1] == 0 && flags[2] == 1);
    /* Python's other spellings: either quotes, any order, any whitespace, no trailing comma. */
    CHECK_OK(read_npy(1, "{\"shape\":(2,3,),\"fortran_order\":False,\"descr\":\"<f4\"}", six, 24, &port_x, got));
    CHECK_OK(read_npy(1, "{ 'shape' :\t( 2 ,\n3 ) , 'descr' : '<f4' , 'fortran_order' : False }  ", six, 24, &port_x, got));
    /* A one-byte type in any byte order. */
    CHECK_OK(read_npy(1, "{'descr': '<b1', 'fortran_order': False, 'shape': (3,), }", "\1\0\1", 3, &port_b, flags));
    /* (Not a NUL in its place.) */
    {
        static const char dict[] = "{'descr': '\0b1', 'fortran_order': False, 'shape': (3,), }";
        FILE *f = tmpfile();
        fwrite("\x93NUMPY\x01\x00\x3a\x00", 1, 10, f);
        fwrite(dict, 1, sizeof dict - 1, f);
        fwrite("\n\1\0\1", 1, 4, f);
        rewind(f);
        CHECK_ERR(mr_npy_read_stream(f, "t.npy", &port_b, &dims, flags, 3, err), "t.npy: the array's element type is '\\x00b1'; the input 'b' wants '|b1'");
        fclose(f);
    }
    /* Fortran order (np.asfortranarray(np.arange(6).reshape(2, 3)) stores 0 3 1 4 2 5),
     * in NumPy's spelling and others, transposed to C order. */
    {
        static const float fortran[6] = { 0, 3, 1, 4, 2, 5 };
        static const char *const dicts[] = {
            "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
            "{\"descr\": \"<f4\", \"fortran_order\": True, \"shape\": (2, 3)}",
            "{'fortran_order':True,'descr':'<f4','shape':(2,3)}",
        };
        int d;
        for (d = 0; d < 3; ++d) {
            memset(got, 0, sizeof got);
            CHECK_OK(read_npy(1, dicts[d], fortran, 24, &port_x, got));
            for (i = 0; i < 6; ++i) { CHECK(got[i] == (float)i); }
        }
        /* A vector in Fortran order is the same as in C order. */
        CHECK_OK(read_npy(1, "{'descr': '|b1', 'fortran_order': True, 'shape': (3,), }", "\1\0\1", 3, &port_b, flags));
    }
    /* Rank 3, Fortran order: element (i, j, k) of [2, 3, 4] at i + 2j + 6k. */
    {
        static const long long shape_234[] = { 2, 3, 4 };
        static const int sym3[] = { -1, -1, -1 };
        const mr_port p = { "t", "<f4", 4, 24, 3, shape_234, sym3 };
        float src[24], dst[24];
        int j, k, bad = 0;
        FILE *f;
        for (i = 0; i < 24; ++i) { src[i] = (float)i; }
        f = npy_of(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3, 4), }", src, sizeof src);
        CHECK_OK(mr_npy_read_stream(f, "t.npy", &p, &dims, dst, sizeof dst, err));
        fclose(f);
        for (i = 0; i < 2; ++i) {
            for (j = 0; j < 3; ++j) {
                for (k = 0; k < 4; ++k) { bad += dst[(i * 3 + j) * 4 + k] != (float)(i + 2 * j + 6 * k); }
            }
        }
        CHECK(bad == 0);
    }
}

static void test_npy_hostile(void)
{
    float got[16];
    static const char v1_23[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    reset_dims();
    /* The descr compared whole, not searched for. */
    CHECK_ERR(read_npy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), 'x': '<f4'}", six, 24, &port_x, got),
              "t.npy: the .npy header has the key 'x' (it may have only 'descr', 'fortran_order' and 'shape')");
    CHECK_ERR(read_npy(1, "{'descr': '<f4x', 'fortran_order': False, 'shape': (2, 3), }", six, 24, &port_x, got),
              "t.npy: the array's element type is '<f4x'; the input 'x' wants '<f4'");
    CHECK_ERR(read_npy(1, "{'descr': '=f4', 'fortran_order': False, 'shape': (2, 3), }", six, 24, &port_x, got),
              "t.npy: the array's element type is '=f4'; the input 'x' wants '<f4'");
    CHECK_ERR(read_npy(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", six, 24, &port_x, got),
              "t.npy: the array's element type is '>f4'; the input 'x' wants '<f4'");
    CHECK_ERR(read_npy(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 3), }", six, 24, &port_x, got),
              "t.npy: the .npy header's descr is not a plain quoted string");
    /* The key set. */
    CHECK_ERR(read_npy(1, "{'descr': '<f4', 'shape': (2, 3), }", six, 24, &port_x, got), "t.npy: the .npy header lacks the key 'fortran_order'");
    CHECK_ERR(read_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'descr': '<f4'}", six, 24, &port_x, got),
              "t.npy: the .npy header has the key 'descr' twice");
    CHECK_ERR(read_npy(1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }", six, 24, &port_x, got),
              "t.npy: the .npy header's fortran_order is not True or False");
    CHECK_ERR(read_npy(1, "{'descr': '<f4', 'fortran_order': Trueish, 'shape': (2, 3), }", six, 24, &port_x, got),
              "t.npy: the .npy header's fortran_order is not True or False");
    CHECK_ERR(read_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } x", six, 24, &port_x, got),
              "t.npy: the .npy header has text after its dictionary");
    CHECK_ERR(read_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3) 'x': 1}", six, 24, &port_x, got),
              "t.npy: the .npy header's dictionary is malformed (no ',' or '}' after 'shape')");
    CHECK_ERR(read_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), ", six, 24, &port_x, got),
              "t.npy: the .npy header's dictionary is malformed (a key is not a plain quoted string)");
    CHECK_ERR(read_npy(1, "{'d\\x65scr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", six, 24, &port_x, got),
              "t.npy: the .npy header's dictionary is malformed (a key is not a plain quoted string)");
    /* Shapes. */
    CHECK_ERR(read_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", six, 24, &port_x, got),
              "t.npy: the .npy header's shape is not a tuple of whole numbers");
    CHECK_ERR(read_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", six, 24, &port_x, got),
              "t.npy: the .npy header's shape is not a tuple of whole numbers");
    CHECK_ERR(read_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (02, 3), }", six, 24, &port_x, got),
              "t.npy: the .npy header's shape is not a tuple of whole numbers");
    CHECK_ERR(read_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", six, 24, &port_x, got),
              "t.npy: dimension 0 of the array is 3; the input 'x' wants 2");
    CHECK_ERR(read_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", six, 24, &port_x, got),
              "t.npy: the array has 1 dimension(s); the input 'x' has 2");
    CHECK_ERR(read_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", six, 24, &port_x, got),
              "t.npy: dimension 0 of the array is 4294967296; the input 'x' wants 2");
    CHECK_ERR(read_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999, 3), }", six, 24, &port_x, got),
              "t.npy: a dimension in the .npy header's shape is too large");
    {
        /* 1025 dimensions of 1. */
        static char dict[4000];
        int d;
        strcpy(dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
        for (d = 0; d < 1025; ++d) { strcat(dict, "1, "); }
        strcat(dict, "), }");
        CHECK_ERR(read_npy(1, dict, six, 4, &port_x, got), "t.npy: the .npy array has more than 1024 dimensions");
    }
    /* Symbolic dimensions: 1 to the maximum, and the same across inputs. */
    reset_dims();
    CHECK_ERR(read_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 2), }", six, 0, &port_y, got),
              "t.npy: dimension 0 of the array is 0; the input 'y' takes 1 to 4 there");
    CHECK_ERR(read_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (5, 2), }", six, 40, &port_y, got),
              "t.npy: dimension 0 of the array is 5; the input 'y' takes 1 to 4 there");
    CHECK(dim_set[0] == 0);
    CHECK_OK(read_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", six, 24, &port_y, got));
    CHECK(dim_set[0] == 1 && dim_value[0] == 3 && mr_port_count(&port_y, &dims) == 6);
    {
        long long z[4] = { 1, 2, 3, 4 };
        FILE *f = npy_of(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", z, 16);
        CHECK_ERR(mr_npy_read_stream(f, "z.npy", &port_z, &dims, z, sizeof z, err), "z.npy: dimension 0 of the array is 2; another input's file set it to 3");
        fclose(f);
    }
    /* The data: exactly what the header says. */
    reset_dims();
    CHECK_ERR(read_npy(1, v1_23, six, 20, &port_x, got), "t.npy: the file is shorter than its header says (24 bytes of data): the file ends early");
    CHECK_ERR(read_npy(1, v1_23, "0123456789012345678901234", 25, &port_x, got), "t.npy: the file is longer than its header says (24 bytes of data)");
    CHECK_ERR(read_npy(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", six, 23, &port_x, got),
              "t.npy: the file is shorter than its header says (24 bytes of data): the file ends early");
    /* The preamble. */
    {
        FILE *f = stream_of("\x93NUMPZ\x01\x00\x10\x00", 10);
        CHECK_ERR(mr_npy_read_stream(f, "t.npy", &port_x, &dims, got, 64, err), "t.npy: not a .npy file (it does not start with \\x93NUMPY)");
        fclose(f);
        f = stream_of("\x93NUMPY\x04\x00\x10\x00", 10);
        CHECK_ERR(mr_npy_read_stream(f, "t.npy", &port_x, &dims, got, 64, err), "t.npy: unsupported .npy format version 4.0 (1.0, 2.0 and 3.0 are)");
        fclose(f);
        f = stream_of("\x93NUMPY\x01\x00\x10\x00{'descr'", 17);
        CHECK_ERR(mr_npy_read_stream(f, "t.npy", &port_x, &dims, got, 64, err), "t.npy: the .npy header is cut short: the file ends early");
        fclose(f);
        f = stream_of("\x93NUMPY\x02\x00\xff\xff\xff\xff{", 13);
        CHECK_ERR(mr_npy_read_stream(f, "t.npy", &port_x, &dims, got, 64, err), "t.npy: the .npy header is 4294967295 bytes, more than the 1048576 read");
        fclose(f);
        f = stream_of("\x93NUMPY\x02", 7);
        CHECK_ERR(mr_npy_read_stream(f, "t.npy", &port_x, &dims, got, 64, err), "t.npy: not a .npy file (it does not start with \\x93NUMPY)");
        fclose(f);
    }
    /* A file that is not there; a long path is shortened in the message, never the path. */
    CHECK_ERR(mr_npy_read("/nonexistent/x.npy", &port_x, &dims, got, 64, err), "/nonexistent/x.npy: cannot open: No such file or directory");
}

static void test_npy_write(void)
{
    float back[8];
    char header[200];
    FILE *f;
    long size;
    /* What NumPy writes: the dictionary padded to 64 bytes with '\n' last. */
    reset_dims();
    f = tmpfile();
    CHECK_OK(mr_npy_write_stream(f, "o.npy", &port_x, &dims, six, err));
    size = ftell(f);
    rewind(f);
    CHECK(size == 128 + 24 && fread(header, 1, 128, f) == 128);
    CHECK(memcmp(header, "\x93NUMPY\x01\x00\x76\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }      ", 75) == 0 && header[127] == '\n');
    rewind(f);
    CHECK_OK(mr_npy_read_stream(f, "o.npy", &port_x, &dims, back, sizeof back, err));
    CHECK(memcmp(back, six, 24) == 0);
    fclose(f);
    /* At the run-time size of a symbolic dimension; a vector's shape as (n,). */
    dim_value[0] = 3;
    f = tmpfile();
    CHECK_OK(mr_npy_write_stream(f, "o.npy", &port_z, &dims, six, err));
    rewind(f);
    CHECK(fread(header, 1, 128, f) == 128 && memcmp(header + 10, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", 57) == 0);
    fclose(f);
    /* A high rank (its header once overflowed a 512-byte buffer), and one whose header
     * needs format 2.0; read back by their sizes. */
    {
        static long long shape[30000];
        static int sym[30000];
        int rank, i;
        for (i = 0; i < 30000; ++i) {
            shape[i] = 1;
            sym[i] = -1;
        }
        for (rank = 200; rank <= 30000; rank = rank == 200 ? 30000 : 30001) {
            const mr_port p = { "h", "<f4", 4, 1, rank, shape, sym };
            unsigned char pre[12];
            unsigned long len;
            f = tmpfile();
            CHECK_OK(mr_npy_write_stream(f, "h.npy", &p, &dims, six, err));
            size = ftell(f);
            rewind(f);
            CHECK(fread(pre, 1, 12, f) == 12);
            len = pre[6] == 1 ? (unsigned long)pre[8] | (unsigned long)pre[9] << 8 : (unsigned long)pre[8] | (unsigned long)pre[9] << 8 | (unsigned long)pre[10] << 16;
            CHECK(pre[6] == (rank == 200 ? 1 : 2) && (unsigned long)size == (pre[6] == 1 ? 10 : 12) + len + 4 && (size - 4) % 64 == 0);
            if (rank == 200) {
                rewind(f);
                CHECK_OK(mr_npy_read_stream(f, "h.npy", &p, &dims, back, sizeof back, err));
                CHECK(back[0] == 0);
            }
            fclose(f);
        }
    }
    /* Every failed write is an error (a full disk, a folder that is not there). */
    f = fopen("/dev/full", "wb");
    if (f) {
        CHECK_ERR(mr_npy_write_stream(f, "/dev/full", &port_x, &dims, six, err), "/dev/full: cannot write: No space left on device");
        fclose(f);
    }
    CHECK_ERR(mr_npy_write("/nonexistent/o.npy", &port_x, &dims, six, err), "/nonexistent/o.npy: cannot write: No such file or directory");
    /* A path is joined whole, however long. */
    {
        char dir[5000], *path;
        memset(dir, 'd', sizeof dir - 1);
        dir[sizeof dir - 1] = 0;
        path = mr_path_join(dir, "output_0.npy");
        CHECK(path && strlen(path) == sizeof dir - 1 + 13 && strcmp(path + sizeof dir, "output_0.npy") == 0);
        CHECK(mr_npy_write(path, &port_x, &dims, six, err) != 0 && strstr(err, "...") && strstr(err, "cannot write: File name too long"));
        free(path);
    }
}

static void test_blob(void)
{
    unsigned char blob[16];
    FILE *f = stream_of("0123456789abcdef", 16);
    CHECK_OK(mr_blob_read_stream(f, "w.bin", blob, 16, err));
    CHECK(memcmp(blob, "0123456789abcdef", 16) == 0);
    fclose(f);
    f = stream_of("0123456789abcde", 15);
    CHECK_ERR(mr_blob_read_stream(f, "w.bin", blob, 16, err), "w.bin: the weights file is 15 bytes, shorter than the model's 16");
    fclose(f);
    f = stream_of("0123456789abcdefg", 17);
    CHECK_ERR(mr_blob_read_stream(f, "w.bin", blob, 16, err), "w.bin: the weights file is longer than the model's 16 bytes");
    fclose(f);
    f = stream_of("", 0);
    CHECK_ERR(mr_blob_read_stream(f, "w.bin", blob, 16, err), "w.bin: the weights file is 0 bytes, shorter than the model's 16");
    fclose(f);
    /* An endless file is refused after size + 1 bytes. */
    f = fopen("/dev/zero", "rb");
    if (f) {
        fclose(f);
        CHECK_ERR(mr_blob_read("/dev/zero", blob, 16, err), "/dev/zero: the weights file is longer than the model's 16 bytes");
    }
    CHECK_ERR(mr_blob_read("/nonexistent/w.bin", blob, 16, err), "/nonexistent/w.bin: cannot open: No such file or directory");
}

/* --- safetensors --- */

/* The parameters the tests want: w, f32 [2, 3]; b, f32 [3]; n, i64 [2]. */
static const long long st_shape_w[] = { 2, 3 }, st_shape_b[] = { 3 }, st_shape_n[] = { 2 };
static const mr_st_param st_params[] = {
    { "w", 1, "F32", 2, st_shape_w },
    { "b", 1, "F32", 1, st_shape_b },
    { "n", 1, "I64", 1, st_shape_n },
};

/* What place() received: each parameter's bytes. */
static unsigned char placed[3][64];
static size_t placed_bytes[3];

static int place(void *user, int index, const void *data, size_t bytes, char *e)
{
    (void)user;
    if (bytes > sizeof placed[0]) { return -1; }
    memcpy(placed[index], data, bytes);
    placed_bytes[index] = bytes;
    (void)e;
    return 0;
}

/* A safetensors file: the 8-byte length of `header` (or `len` when not ~0), the header,
 * then n bytes of data. */
static FILE *st_of(const char *header, unsigned long long len, const void *data, size_t n)
{
    size_t h = strlen(header);
    unsigned char *buf = (unsigned char *)malloc(8 + h + n + 1);
    FILE *f;
    int i;
    if (len == ~0ULL) { len = h; }
    for (i = 0; i < 8; ++i) { buf[i] = (unsigned char)(len >> (8 * i)); }
    memcpy(buf + 8, header, h);
    if (n) { memcpy(buf + 8 + h, data, n); }
    f = stream_of(buf, 8 + h + n);
    free(buf);
    return f;
}

static int read_st(const char *header, unsigned long long len, const void *data, size_t n, int count)
{
    FILE *f = st_of(header, len, data, n);
    int status;
    memset(placed_bytes, 0, sizeof placed_bytes);
    status = mr_safetensors_read_stream(f, "p.st", st_params, count, place, NULL, err);
    fclose(f);
    return status;
}

/* w as 6 f32 (0..5), b as 3 f32 (6..8), n as 2 i64 (9, 10): 24 + 12 + 16 bytes. */
static unsigned char st_data[52];

static void make_st_data(void)
{
    float w[9] = { 0, 1, 2, 3, 4, 5, 6, 7, 8 };
    long long n[2] = { 9, 10 };
    memcpy(st_data, w, 36);
    memcpy(st_data + 36, n, 16);
}

#define ST_W(offsets) "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":" offsets "}"
#define ST_B(offsets) "\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":" offsets "}"
#define ST_N(offsets) "\"n\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":" offsets "}"
#define ST_GOOD "{" ST_W("[0,24]") "," ST_B("[24,36]") "," ST_N("[36,52]") "}"

static void test_safetensors_well_formed(void)
{
    float w[6];
    long long n[2];
    int i;
    make_st_data();
    CHECK_OK(read_st(ST_GOOD, ~0ULL, st_data, 52, 3));
    memcpy(w, placed[0], 24);
    memcpy(n, placed[2], 16);
    for (i = 0; i < 6; ++i) { CHECK(w[i] == (float)i); }
    CHECK(placed_bytes[1] == 12 && n[0] == 9 && n[1] == 10);
    /* Any order of keys and entries, whitespace, padding spaces (as the package writes),
     * __metadata__, escapes, unknown fields dropped, tensors the model does not want. */
    CHECK_OK(read_st("{ \"__metadata__\" : {\"format\":\"pt\", \"k\\u00e9\":\"v\\n\"},\n"
                     " \"\\u0062\": {\"shape\": [3], \"data_offsets\": [24, 36], \"dtype\": \"F32\", \"extra\": [1, {\"a\": null}, -2.5e3]},\n"
                     " \"unwanted\\ud83d\\ude00\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[36,52]},\n " ST_W("[0,24]") "}    ",
                     ~0ULL, st_data, 52, 2));
    CHECK(placed_bytes[0] == 24 && placed_bytes[1] == 12 && memcmp(placed[1], st_data + 24, 12) == 0);
    CHECK_OK(read_st("{\"__metadata__\":null," ST_W("[0,24]") "," ST_B("[24,36]") "," ST_N("[36,52]") "}", ~0ULL, st_data, 52, 3));
    /* An f32 parameter in F16, BF16 or F64, converted. */
    {
        unsigned char d16[12], d64[48];
        static const unsigned short f16[6] = { 0x0000, 0x3c00, 0x4000, 0x4200, 0x4400, 0x4500 };
        static const unsigned short bf16[6] = { 0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0 };
        for (i = 0; i < 6; ++i) {
            double v = (double)i;
            d16[2 * i] = (unsigned char)(f16[i] & 0xff);
            d16[2 * i + 1] = (unsigned char)(f16[i] >> 8);
            memcpy(d64 + 8 * i, &v, 8);
        }
        CHECK_OK(read_st("{\"w\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[0,12]}}", ~0ULL, d16, 12, 1));
        memcpy(w, placed[0], 24);
        for (i = 0; i < 6; ++i) { CHECK(w[i] == (float)i); }
        for (i = 0; i < 6; ++i) {
            d16[2 * i] = (unsigned char)(bf16[i] & 0xff);
            d16[2 * i + 1] = (unsigned char)(bf16[i] >> 8);
        }
        CHECK_OK(read_st("{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]}}", ~0ULL, d16, 12, 1));
        memcpy(w, placed[0], 24);
        for (i = 0; i < 6; ++i) { CHECK(w[i] == (float)i); }
        CHECK_OK(read_st("{\"w\":{\"dtype\":\"F64\",\"shape\":[2,3],\"data_offsets\":[0,48]}}", ~0ULL, d64, 48, 1));
        memcpy(w, placed[0], 24);
        for (i = 0; i < 6; ++i) { CHECK(w[i] == (float)i); }
    }
    /* Empty tensors share an offset. */
    CHECK_OK(read_st("{\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[0,0]},\"f\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}," ST_W("[0,24]") "}",
                     ~0ULL, st_data, 24, 1));
}

static void test_safetensors_hostile(void)
{
    char big[300];
    make_st_data();
    /* The model's shape and dtype. */
    CHECK_ERR(read_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]}}", ~0ULL, st_data, 24, 1),
              "p.st: the parameter 'w' has shape [3, 2], the model's is [2, 3]");
    CHECK_ERR(read_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]}}", ~0ULL, st_data, 24, 1),
              "p.st: the parameter 'w' has shape [6], the model's is [2, 3]");
    CHECK_ERR(read_st("{\"w\":{\"dtype\":\"I32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", ~0ULL, st_data, 24, 1),
              "p.st: the parameter 'w' is I32, the model wants F32 (or F16, BF16 or F64)");
    CHECK_ERR(read_st("{" ST_W("[0,24]") ",\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[24,36]},\"n\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[36,52]}}", ~0ULL, st_data, 52, 3),
              "p.st: the parameter 'n' is F64, the model wants I64");
    CHECK_ERR(read_st("{" ST_W("[0,24]") "}", ~0ULL, st_data, 24, 2), "p.st: the parameter 'b' is not in the safetensors file");
    CHECK_ERR(read_st("{\"w\":{\"dtype\":\"F33\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", ~0ULL, st_data, 24, 1),
              "p.st: the safetensors header gives 'w' the unknown dtype 'F33'");
    /* Offsets: in order, without overlaps or holes, of the shape's size, covering the data. */
    CHECK_ERR(read_st("{" ST_W("[0,24]") "," ST_B("[12,24]") "}", ~0ULL, st_data, 24, 2),
              "p.st: the safetensors data_offsets of 'b' begin at 12, not where the data before them ends (24): the tensors overlap or leave a hole");
    CHECK_ERR(read_st("{" ST_W("[0,24]") "," ST_B("[28,40]") "}", ~0ULL, st_data, 40, 2),
              "p.st: the safetensors data_offsets of 'b' begin at 28, not where the data before them ends (24): the tensors overlap or leave a hole");
    /* (The data need not be in the order of the keys.) */
    CHECK_OK(read_st("{" ST_W("[12,36]") "," ST_B("[0,12]") "}", ~0ULL, st_data, 36, 2));
    CHECK_ERR(read_st("{" ST_W("[0,24]") "," ST_B("[18446744073709551604,0]") "}", ~0ULL, st_data, 36, 2),
              "p.st: the safetensors data_offsets of 'b' end before they begin ([18446744073709551604, 0])");
    CHECK_ERR(read_st("{" ST_W("[18446744073709551600,18446744073709551615]") "}", ~0ULL, st_data, 24, 1),
              "p.st: the safetensors data_offsets of 'w' begin at 18446744073709551600, not where the data before them ends (0): the tensors overlap or leave a hole");
    CHECK_ERR(read_st("{" ST_W("[0,18446744073709551616]") "}", ~0ULL, st_data, 24, 1),
              "p.st: the safetensors header is not valid JSON: a number too large at byte 71 of the header");
    CHECK_ERR(read_st("{" ST_W("[24,0]") "}", ~0ULL, st_data, 24, 1), "p.st: the safetensors data_offsets of 'w' end before they begin ([24, 0])");
    CHECK_ERR(read_st("{" ST_W("[0,20]") "}", ~0ULL, st_data, 20, 1), "p.st: the safetensors data_offsets of 'w' hold 20 bytes, its shape and dtype 24");
    CHECK_ERR(read_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,0]}}", ~0ULL, st_data, 0, 1),
              "p.st: the safetensors shape of 'w' overflows");
    CHECK_ERR(read_st("{\"w\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", ~0ULL, st_data, 2, 1),
              "p.st: the safetensors shape of 'w' is not a whole number of bytes of F4");
    CHECK_ERR(read_st("{" ST_W("[0,-24]") "}", ~0ULL, st_data, 24, 1), "p.st: the safetensors header's data_offsets of 'w' are not [begin, end]");
    /* The data: as long as the offsets say, to the end of the file. */
    CHECK_ERR(read_st(ST_GOOD, ~0ULL, st_data, 51, 3), "p.st: the safetensors data is cut short: the file ends early");
    CHECK_ERR(read_st("{" ST_W("[0,24]") "," ST_B("[24,36]") "}", ~0ULL, st_data, 52, 1), "p.st: the file is longer than its safetensors header says (36 bytes of data)");
    /* The header's length. */
    CHECK_ERR(read_st(ST_GOOD, 20, st_data, 52, 3), "p.st: the safetensors header is not valid JSON: a string was expected at byte 20 of the header");
    CHECK_ERR(read_st(ST_GOOD "  ", strlen(ST_GOOD), st_data, 52, 3), "p.st: the file is longer than its safetensors header says (52 bytes of data)");
    CHECK_ERR(read_st(ST_GOOD, 100000, st_data, 52, 3), "p.st: the safetensors header length (100000 bytes) is beyond the end of the file");
    CHECK_ERR(read_st(ST_GOOD, 100000001, st_data, 52, 3), "p.st: the safetensors header length 100000001 is more than the format's limit (100000000)");
    CHECK_ERR(read_st("", 0, NULL, 0, 3), "p.st: the safetensors header is not valid JSON: the header is not a JSON object at byte 0 of the header");
    {
        FILE *f = stream_of("\x10\0\0", 3);
        CHECK_ERR(mr_safetensors_read_stream(f, "p.st", st_params, 1, place, NULL, err), "p.st: not a safetensors file (shorter than its 8-byte header length)");
        fclose(f);
    }
    /* Bad JSON. */
    CHECK_ERR(read_st("{" ST_W("[0,24]") ",}", ~0ULL, st_data, 24, 1), "p.st: the safetensors header is not valid JSON: a string was expected at byte 57 of the header");
    CHECK_ERR(read_st("{'w':{}}", ~0ULL, st_data, 24, 1), "p.st: the safetensors header is not valid JSON: a string was expected at byte 1 of the header");
    CHECK_ERR(read_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}", ~0ULL, st_data, 24, 1),
              "p.st: the safetensors header is not valid JSON: ',' or '}' was expected at byte 56 of the header");
    CHECK_ERR(read_st("{\"w\xff\":{}}", ~0ULL, st_data, 24, 1), "p.st: the safetensors header is not valid JSON: a string is not UTF-8 at byte 3 of the header");
    CHECK_ERR(read_st("{\"w\xc0\xaf\":{}}", ~0ULL, st_data, 24, 1), "p.st: the safetensors header is not valid JSON: a string is not UTF-8 at byte 3 of the header");
    CHECK_ERR(read_st("{\"w\\ud800\":{}}", ~0ULL, st_data, 24, 1), "p.st: the safetensors header is not valid JSON: a lone surrogate escape at byte 9 of the header");
    CHECK_ERR(read_st("{\"w\\x\":{}}", ~0ULL, st_data, 24, 1), "p.st: the safetensors header is not valid JSON: a bad escape in a string at byte 4 of the header");
    CHECK_ERR(read_st("{\"w\n\":{}}", ~0ULL, st_data, 24, 1), "p.st: the safetensors header is not valid JSON: a control character in a string at byte 3 of the header");
    CHECK_ERR(read_st("{" ST_W("[0,24]") "} x", ~0ULL, st_data, 24, 1), "p.st: the safetensors header is not valid JSON: text after the header's object at byte 58 of the header");
    CHECK_ERR(read_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24],\"x\":01}}", ~0ULL, st_data, 24, 1),
              "p.st: the safetensors header is not valid JSON: ',' or '}' was expected at byte 61 of the header");
    CHECK_ERR(read_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0,3],\"data_offsets\":[0,24]}}", ~0ULL, st_data, 24, 1),
              "p.st: the safetensors header is not valid JSON: a whole number was expected at byte 30 of the header");
    {
        /* Nesting deeper than 64 in a dropped value. */
        size_t i;
        strcpy(big, "{\"w\":{\"x\":");
        for (i = 0; i < 70; ++i) { strcat(big, "["); }
        strcat(big, "}}");
        CHECK_ERR(read_st(big, ~0ULL, st_data, 24, 1), "p.st: the safetensors header is not valid JSON: nesting too deep at byte 74 of the header");
    }
    /* The structure. */
    CHECK_ERR(read_st("[]", ~0ULL, st_data, 0, 1), "p.st: the safetensors header is not valid JSON: the header is not a JSON object at byte 0 of the header");
    CHECK_ERR(read_st("{\"w\":[]}", ~0ULL, st_data, 0, 1), "p.st: the safetensors header's entry for 'w' is not an object");
    CHECK_ERR(read_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3]}}", ~0ULL, st_data, 0, 1), "p.st: the safetensors header's entry for 'w' lacks 'data_offsets'");
    CHECK_ERR(read_st("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", ~0ULL, st_data, 24, 1),
              "p.st: the safetensors header's entry for 'w' has 'dtype' twice");
    CHECK_ERR(read_st("{" ST_W("[0,24]") "," ST_W("[24,48]") "}", ~0ULL, st_data, 48, 1), "p.st: the safetensors header has the key 'w' twice");
    CHECK_ERR(read_st("{\"__metadata__\":{\"a\":1}," ST_W("[0,24]") "}", ~0ULL, st_data, 24, 1), "p.st: the safetensors header's __metadata__ is not a map of strings");
    CHECK_ERR(read_st("{\"__metadata__\":[]," ST_W("[0,24]") "}", ~0ULL, st_data, 24, 1), "p.st: the safetensors header's __metadata__ is not a map of strings");
    CHECK_ERR(read_st("{\"__metadata__\":{},\"__metadata__\":{}," ST_W("[0,24]") "}", ~0ULL, st_data, 24, 1), "p.st: the safetensors header has __metadata__ twice");
    /* A key with a NUL is not the key without it; names in messages are escaped. */
    CHECK_ERR(read_st("{\"w\\u0000\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", ~0ULL, st_data, 24, 1),
              "p.st: the parameter 'w' is not in the safetensors file");
    CHECK_ERR(read_st("{\"w\\n\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,24]}}", ~0ULL, st_data, 24, 0),
              "p.st: the safetensors data_offsets of 'w\\x0a' hold 24 bytes, its shape and dtype 8");
}

/* --- the command line --- */

static const long long one[] = { 1 };
static const int static1[] = { -1 };
static const mr_port cli_inputs[] = {
    { "a", "<f4", 4, 1, 1, one, static1 },
    { "a=b", "<f4", 4, 1, 1, one, static1 },
    { "c", "<f4", 4, 1, 1, one, static1 },
};
static const char *const cli_options[] = { "--weights", "--out" };

static int parse(mr_cli *cli, unsigned flags, const char *a1, const char *a2, const char *a3, const char *a4)
{
    static const char *values[2], *paths[3];
    char *argv[6];
    int argc = 1;
    argv[0] = (char *)"demo";
    if (a1) { argv[argc++] = (char *)a1; }
    if (a2) { argv[argc++] = (char *)a2; }
    if (a3) { argv[argc++] = (char *)a3; }
    if (a4) { argv[argc++] = (char *)a4; }
    argv[argc] = NULL;
    memset(cli, 0, sizeof *cli);
    cli->inputs = cli_inputs;
    cli->input_count = 3;
    cli->options = cli_options;
    cli->option_count = 2;
    cli->flags = flags;
    cli->usage = "demo [--weights FILE] ...";
    cli->values = values;
    cli->input_paths = paths;
    return mr_cli_parse(cli, argc, argv, err);
}

static void test_cli(void)
{
    mr_cli cli;
    long v;
    CHECK_OK(parse(&cli, MR_CLI_THREADS, "--repeat", "7", "--threads", "64"));
    CHECK(cli.repeat == 7 && cli.threads == 64 && cli.graph == 0);
    CHECK_OK(parse(&cli, MR_CLI_GRAPH, "--weights", "w.bin", "--graph", NULL));
    CHECK(cli.graph == 1 && cli.values[0] && !strcmp(cli.values[0], "w.bin") && !cli.values[1] && cli.repeat == 1);
    CHECK_OK(parse(&cli, 0, "--repeat", "10000000", NULL, NULL));
    /* Counts: digits alone, 1 to the bound. */
    CHECK_ERR(parse(&cli, 0, "--repeat", "-1", NULL, NULL), "--repeat wants a whole number from 1 to 10000000, not '-1'");
    CHECK_ERR(parse(&cli, 0, "--repeat", "0", NULL, NULL), "--repeat wants a whole number from 1 to 10000000, not '0'");
    CHECK_ERR(parse(&cli, 0, "--repeat", "abc", NULL, NULL), "--repeat wants a whole number from 1 to 10000000, not 'abc'");
    CHECK_ERR(parse(&cli, 0, "--repeat", "3x", NULL, NULL), "--repeat wants a whole number from 1 to 10000000, not '3x'");
    CHECK_ERR(parse(&cli, 0, "--repeat", " 3", NULL, NULL), "--repeat wants a whole number from 1 to 10000000, not ' 3'");
    CHECK_ERR(parse(&cli, 0, "--repeat", "", NULL, NULL), "--repeat wants a whole number from 1 to 10000000, not ''");
    CHECK_ERR(parse(&cli, 0, "--repeat", "10000001", NULL, NULL), "--repeat wants a whole number from 1 to 10000000, not '10000001'");
    CHECK_ERR(parse(&cli, 0, "--repeat", "99999999999999999999999", NULL, NULL), "--repeat wants a whole number from 1 to 10000000, not '99999999999999999999999'");
    CHECK_ERR(parse(&cli, MR_CLI_THREADS, "--threads", "65", NULL, NULL), "--threads wants a whole number from 1 to 64, not '65'");
    CHECK_ERR(parse(&cli, MR_CLI_THREADS, "--threads", "100000", NULL, NULL), "--threads wants a whole number from 1 to 64, not '100000'");
    CHECK_ERR(parse(&cli, 0, "--threads", "2", NULL, NULL), "unknown argument '--threads' (usage: demo [--weights FILE] ...)");
    CHECK_ERR(parse(&cli, 0, "--graph", NULL, NULL, NULL), "unknown argument '--graph' (usage: demo [--weights FILE] ...)");
    CHECK_ERR(parse(&cli, 0, "--repeat", NULL, NULL, NULL), "--repeat wants a value");
    CHECK_ERR(parse(&cli, 0, "--repeat", "2", "--repeat", "2"), "--repeat is given twice");
    CHECK_ERR(parse(&cli, 0, "--out", "a", "--out", "b"), "--out is given twice");
    CHECK(mr_parse_count("64", 64, &v) == 0 && v == 64 && mr_parse_count("+1", 64, &v) != 0);
    /* Inputs by name: names may hold '='; an argument two names fit is refused. */
    CHECK_OK(parse(&cli, 0, "--input", "a=x.npy", "--input", "c=y=z.npy"));
    CHECK(!strcmp(cli.input_paths[0], "x.npy") && !cli.input_paths[1] && !strcmp(cli.input_paths[2], "y=z.npy"));
    CHECK_OK(parse(&cli, 0, "--input", "a=b", NULL, NULL));
    CHECK(!strcmp(cli.input_paths[0], "b") && !cli.input_paths[1]);
    CHECK_ERR(parse(&cli, 0, "--input", "a=b=x.npy", NULL, NULL),
              "--input 'a=b=x.npy' is ambiguous: it fits the inputs 'a' and 'a=b' (names may contain '='); use --input-index I=FILE, I the input's position from 0");
    CHECK_OK(parse(&cli, 0, "--input-index", "1=x.npy", "--input-index", "0=b=y.npy"));
    CHECK(!strcmp(cli.input_paths[1], "x.npy") && !strcmp(cli.input_paths[0], "b=y.npy"));
    CHECK_ERR(parse(&cli, 0, "--input-index", "3=x.npy", NULL, NULL), "--input-index wants I=FILE.npy with I from 0 to 2 (the model's inputs), not '3=x.npy'");
    CHECK_ERR(parse(&cli, 0, "--input-index", "a=x.npy", NULL, NULL), "--input-index wants I=FILE.npy with I from 0 to 2 (the model's inputs), not 'a=x.npy'");
    CHECK_ERR(parse(&cli, 0, "--input-index", "-1=x.npy", NULL, NULL), "--input-index wants I=FILE.npy with I from 0 to 2 (the model's inputs), not '-1=x.npy'");
    CHECK_ERR(parse(&cli, 0, "--input-index", "99999999999=x.npy", NULL, NULL), "--input-index wants I=FILE.npy with I from 0 to 2 (the model's inputs), not '99999999999=x.npy'");
    CHECK_ERR(parse(&cli, 0, "--input", "q=x.npy", NULL, NULL), "--input 'q=x.npy' names no input of the model (its inputs: 'a', 'a=b', 'c')");
    CHECK_ERR(parse(&cli, 0, "--input", "x.npy", NULL, NULL), "--input wants NAME=FILE.npy, not 'x.npy'");
    CHECK_ERR(parse(&cli, 0, "--input", "c=", NULL, NULL), "--input 'c=' names no file");
    CHECK_ERR(parse(&cli, 0, "--input", "c=x", "--input-index", "2=y"), "the input 'c' is given twice");
    CHECK_ERR(parse(&cli, 0, "--input", "c=x\n", "--bad\x01", NULL), "unknown argument '--bad\\x01' (usage: demo [--weights FILE] ...)");
}

/* The integer types other than i32 and i64: their .npy descriptors (a one-byte type in
 * any byte order, the others only little-endian, never another type of the same size),
 * read and written exactly, and safetensors parameters of their own element sizes. */
static void test_integer_types(void)
{
    static const long long shape_2[] = { 2 };
    static const mr_port port_u8 = { "u", "|u1", 1, 3, 1, shape_3, sym_static1 };
    static const mr_port port_u16 = { "h", "<u2", 2, 2, 1, shape_2, sym_static1 };
    static const mr_port port_u64 = { "q", "<u8", 8, 2, 1, shape_2, sym_static1 };
    static const mr_port port_i8 = { "c", "|i1", 1, 3, 1, shape_3, sym_static1 };
    static const unsigned char bytes3[3] = { 0, 200, 255 };
    static const uint64_t big[2] = { UINT64_MAX, 9007199254740993ULL };
    static const uint16_t halves[2] = { 65535, 7 };
    unsigned char got[64], header[128];
    uint64_t wide[2];
    uint16_t narrow[2];
    FILE *f;
    reset_dims();
    CHECK_OK(read_npy(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", bytes3, 3, &port_u8, got));
    CHECK(memcmp(got, bytes3, 3) == 0);
    CHECK_OK(read_npy(1, "{'descr': '<u1', 'fortran_order': False, 'shape': (3,), }", bytes3, 3, &port_u8, got));
    CHECK_ERR(read_npy(1, "{'descr': '|i1', 'fortran_order': False, 'shape': (3,), }", bytes3, 3, &port_u8, got),
              "t.npy: the array's element type is '|i1'; the input 'u' wants '|u1'");
    CHECK_ERR(read_npy(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", bytes3, 3, &port_u8, got),
              "t.npy: the array's element type is '|b1'; the input 'u' wants '|u1'");
    CHECK_OK(read_npy(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", halves, 4, &port_u16, narrow));
    CHECK(narrow[0] == 65535 && narrow[1] == 7);
    CHECK_ERR(read_npy(1, "{'descr': '>u2', 'fortran_order': False, 'shape': (2,), }", halves, 4, &port_u16, narrow),
              "t.npy: the array's element type is '>u2'; the input 'h' wants '<u2'");
    CHECK_ERR(read_npy(1, "{'descr': '<i2', 'fortran_order': False, 'shape': (2,), }", halves, 4, &port_u16, narrow),
              "t.npy: the array's element type is '<i2'; the input 'h' wants '<u2'");
    CHECK_ERR(read_npy(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", halves, 3, &port_u16, narrow),
              "t.npy: the file is shorter than its header says (4 bytes of data): the file ends early");
    CHECK_OK(read_npy(1, "{'descr': '<u8', 'fortran_order': False, 'shape': (2,), }", big, 16, &port_u64, wide));
    CHECK(wide[0] == UINT64_MAX && wide[1] == 9007199254740993ULL);
    CHECK_ERR(read_npy(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", big, 16, &port_u64, wide),
              "t.npy: the array's element type is '<i8'; the input 'q' wants '<u8'");
    /* Written with NumPy's descr, and read back. */
    f = tmpfile();
    CHECK_OK(mr_npy_write_stream(f, "o.npy", &port_i8, &dims, bytes3, err));
    rewind(f);
    CHECK(fread(header, 1, 128, f) == 128 && memcmp(header + 10, "{'descr': '|i1', 'fortran_order': False, 'shape': (3,), }", 57) == 0);
    rewind(f);
    CHECK_OK(mr_npy_read_stream(f, "o.npy", &port_i8, &dims, got, sizeof got, err));
    CHECK(memcmp(got, bytes3, 3) == 0);
    fclose(f);
    /* bf16 (2-byte elements, descr '<f4'): its files hold f32, each value rounded to
     * nearest even on reading (ties to even, NaN kept NaN), in either order, and
     * written back exactly. */
    {
        static const long long shape_22[] = { 2, 2 };
        static const int sym_22[] = { -1, -1 };
        static const mr_port port_bf = { "t", "<f4", 2, 4, 2, shape_22, sym_22 };
        /* 1 + 2^-8 (a tie: to 1), 1 + 3 * 2^-8 (a tie: to 1 + 2^-6), -2.5, NaN */
        static const uint32_t f32s[4] = { 0x3f808000u, 0x3f818000u, 0xc0200000u, 0x7fa00001u };
        static const uint16_t want[4] = { 0x3f80, 0x3f82, 0xc020, 0x7fe0 }, fortran_want[4] = { 0x3f80, 0xc020, 0x3f82, 0x7fe0 };
        uint16_t got16[8];
        uint32_t back[4];
        CHECK_OK(read_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", f32s, 16, &port_bf, got16));
        CHECK(memcmp(got16, want, 8) == 0);
        CHECK_OK(read_npy(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", f32s, 16, &port_bf, got16));
        CHECK(memcmp(got16, fortran_want, 8) == 0);
        CHECK_ERR(read_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", f32s, 8, &port_bf, got16),
                  "t.npy: the file is shorter than its header says (16 bytes of data): the file ends early");
        CHECK_ERR(read_npy(1, "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 2), }", f32s, 8, &port_bf, got16),
                  "t.npy: the array's element type is '<f2'; the input 't' wants '<f4'");
        f = tmpfile();
        CHECK_OK(mr_npy_write_stream(f, "o.npy", &port_bf, &dims, want, err));
        CHECK(ftell(f) == 128 + 16);
        fseek(f, 128, SEEK_SET);
        CHECK(fread(back, 4, 4, f) == 4 && back[0] == 0x3f800000u && back[1] == 0x3f820000u && back[2] == 0xc0200000u && back[3] == 0x7fe00000u);
        fclose(f);
    }
    /* safetensors parameters of 1 and 8 bytes an element: each gets its own size. */
    {
        static const long long st_3[] = { 3 }, st_2[] = { 2 };
        static const mr_st_param params[] = { { "u", 1, "U8", 1, st_3 }, { "q", 1, "U64", 1, st_2 }, { "h", 1, "I16", 1, st_2 } };
        unsigned char data[3 + 16 + 4];
        memcpy(data, bytes3, 3);
        memcpy(data + 3, big, 16);
        memcpy(data + 19, halves, 4);
        f = st_of("{\"u\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},\"q\":{\"dtype\":\"U64\",\"shape\":[2],\"data_offsets\":[3,19]},"
                  "\"h\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[19,23]}}", ~0ULL, data, sizeof data);
        memset(placed_bytes, 0, sizeof placed_bytes);
        CHECK_OK(mr_safetensors_read_stream(f, "p.st", params, 3, place, NULL, err));
        fclose(f);
        CHECK(placed_bytes[0] == 3 && memcmp(placed[0], bytes3, 3) == 0);
        CHECK(placed_bytes[1] == 16 && memcmp(placed[1], big, 16) == 0);
        CHECK(placed_bytes[2] == 4 && memcmp(placed[2], halves, 4) == 0);
        /* A parameter of the same size and another type is refused. */
        f = st_of("{\"u\":{\"dtype\":\"I8\",\"shape\":[3],\"data_offsets\":[0,3]}}", ~0ULL, bytes3, 3);
        CHECK_ERR(mr_safetensors_read_stream(f, "p.st", params, 1, place, NULL, err), "p.st: the parameter 'u' is I8, the model wants U8");
        fclose(f);
    }
}

int main(void)
{
    test_npy_well_formed();
    test_npy_hostile();
    test_npy_write();
    test_blob();
    test_safetensors_well_formed();
    test_safetensors_hostile();
    test_integer_types();
    test_cli();
    printf("files: %d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
