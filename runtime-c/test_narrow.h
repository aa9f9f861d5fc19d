/*
 * test_narrow.h -- narrow_bits for the test and bench programs (not part of the
 * runtime): n floats turned into a sequence stored as `type` (mithril_runtime.h's
 * narrow types) at q, MR_STORED_BYTES(type, n) bytes, when any bits will do (threaded
 * against serial, timing): bf16 the floats' upper halves, f16 values in [0.5, 1) with
 * the floats' signs, q8_0 the first floats as scales and a byte pattern.
 */
#ifndef TEST_NARROW_H
#define TEST_NARROW_H

#include <stdint.h>
#include <string.h>

#include "mithril_runtime.h"

static void narrow_bits(int type, const float *f, int64_t n, unsigned char *q)
{
    const int64_t nb = (n + 31) / 32;
    int64_t e;
    if (type == MR_Q8_0) {
        memcpy(q, f, 4 * (size_t)nb);
        for (e = 0; e < n; ++e) q[4 * nb + e] = (unsigned char)(e * 37 + 11);
        return;
    }
    for (e = 0; e < n; ++e) {
        uint32_t u;
        uint16_t h;
        memcpy(&u, &f[e], 4);
        h = (uint16_t)(type == MR_BF16 ? u >> 16 : (0x3800u | ((u >> 13) & 0x3ffu)) ^ ((u >> 16) & 0x8000u));
        memcpy(q + 2 * e, &h, 2);
    }
}

#endif /* TEST_NARROW_H */
