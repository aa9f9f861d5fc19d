/* test_ops.c: checks mithril_ops.h's scalar helpers against libm in double over
 * dense sweeps and edge cases (NaN, infinities, overflow, tiny values). Prints
 * "N passed, M failed" and exits non-zero on a failure. Not part of the runtime. */
#include <math.h>
#include <stdio.h>

#include "mithril_ops.h"

static int passed, failed;

static void check(const char *what, double x, double got, double want, double atol, double rtol) {
    int ok = (got != got && want != want) || got == want || fabs(got - want) <= atol + rtol * fabs(want);
    if (ok) {
        ++passed;
    } else {
        ++failed;
        if (failed < 40) { printf("FAIL %s(%.9g): got %.9g, want %.9g\n", what, x, got, want); }
    }
}

int main(void) {
    double x;
    float edge[] = { 0.0f, -0.0f, 1e-30f, -1e-30f, 88.7f, 88.73f, -87.3f, -87.4f, -104.0f, 1000.0f, -1000.0f };
    unsigned k;
    for (x = -100.0; x <= 100.0; x += 0.001953125) {
        float f = (float)x;
        double e = (double)(float)exp((double)f); /* float overflow is +inf */
        /* Below exp's normal range the result may be the smallest normal instead. */
        check("mr_fast_expf", f, mr_fast_expf(f), e, e < 1.2e-38 ? 1.2e-38 : 0.0, 4e-7);
        check("mr_fast_tanhf", f, mr_fast_tanhf(f), tanh((double)f), 1e-7, 4e-7);
        check("mr_sigmoidf", f, mr_sigmoidf(f), 1.0 / (1.0 + exp(-(double)f)), 1e-7, 4e-7);
        /* x / (1 + exp(-2u)) = 0.5 x (1 + tanh(u)), without the latter's cancellation.
         * Measured: relative error under 1.7e-6 where |y| > 1e-6, 7.2e-6 where |y| >
         * 1e-20 (-2u, rounded to float, goes into exp). */
        check("mr_gelu_tanhf", f, mr_gelu_tanhf(f),
              f / (1.0 + exp(-1.5957691216057308 * (f + 0.044715 * (double)f * f * f))), 1e-20, 1e-5);
    }
    for (k = 0; k < sizeof edge / sizeof edge[0]; ++k) {
        float f = edge[k];
        double e = exp((double)f);
        check("mr_fast_expf", f, mr_fast_expf(f), e > 3.4e38 ? INFINITY : e, 1.2e-38, 4e-7);
        check("mr_fast_tanhf", f, mr_fast_tanhf(f), tanh((double)f), 1e-7, 4e-7);
    }
    check("mr_gelu_tanhf", NAN, mr_gelu_tanhf(NAN), NAN, 0, 0);
    check("mr_gelu_tanhf", INFINITY, mr_gelu_tanhf(INFINITY), INFINITY, 0, 0);
    check("mr_gelu_tanhf", -INFINITY, mr_gelu_tanhf(-INFINITY), NAN, 0, 0); /* -inf * 0 */
    check("mr_gelu_tanhf", -3e38f, mr_gelu_tanhf(-3e38f), 0.0, 0, 0);
    check("mr_gelu_tanhf", 3e38f, mr_gelu_tanhf(3e38f), 3e38f, 0, 0);
    check("mr_fast_expf", NAN, mr_fast_expf(NAN), NAN, 0, 0);
    check("mr_fast_expf", INFINITY, mr_fast_expf(INFINITY), INFINITY, 0, 0);
    check("mr_fast_expf", -INFINITY, mr_fast_expf(-INFINITY), 0.0, 1.2e-38, 0);
    check("mr_fast_tanhf", NAN, mr_fast_tanhf(NAN), NAN, 0, 0);
    check("mr_fast_tanhf", INFINITY, mr_fast_tanhf(INFINITY), 1.0, 0, 0);
    check("mr_fast_tanhf", -INFINITY, mr_fast_tanhf(-INFINITY), -1.0, 0, 0);
    /* Floats to the narrower and unsigned integer types: truncated, saturated, NaN 0. */
    check("mr_f2u8", 300.5, mr_f2u8(300.5), 255, 0, 0);
    check("mr_f2u8", -3.5, mr_f2u8(-3.5), 0, 0, 0);
    check("mr_f2u8", 254.9, mr_f2u8(254.9), 254, 0, 0);
    check("mr_f2u8", NAN, mr_f2u8(NAN), 0, 0, 0);
    check("mr_f2i8", -1e9, mr_f2i8(-1e9), -128, 0, 0);
    check("mr_f2i8", -7.9, mr_f2i8(-7.9), -7, 0, 0);
    check("mr_f2i8", INFINITY, mr_f2i8(INFINITY), 127, 0, 0);
    check("mr_f2u16", 70000, mr_f2u16(70000), 65535, 0, 0);
    check("mr_f2i16", -40000, mr_f2i16(-40000), -32768, 0, 0);
    check("mr_f2u32", 5e9, mr_f2u32(5e9), 4294967295.0, 0, 0);
    check("mr_f2u64", 1e30, (double)mr_f2u64(1e30), 18446744073709551616.0, 0, 0);
    check("mr_f2u64", 18446744073709549568.0, (double)mr_f2u64(18446744073709549568.0), 18446744073709549568.0, 0, 0);
    check("mr_f2u64", -INFINITY, (double)mr_f2u64(-INFINITY), 0, 0, 0);
    /* Integer helpers: powers wrap modulo 2^64 without signed overflow (UBSan checks it),
     * u64's own division and shifts past 2^63. */
    check("mr_pow_i64", 3, (double)(mr_pow_i64(3, 41) == (int64_t)(uint64_t)18026252303461234787ULL), 1, 0, 0);
    check("mr_pow_i64", -2, (double)mr_pow_i64(-2, 63), -9223372036854775808.0, 0, 0);
    check("mr_pow_i64", 5, (double)mr_pow_i64(5, -1), 1, 0, 0);
    check("mr_pow_u64", 3, (double)(mr_pow_u64(3, 41) == 18026252303461234787ULL), 1, 0, 0);
    check("mr_floordiv_u64", 2, (double)(mr_floordiv_u64(UINT64_MAX, 2) == UINT64_MAX / 2), 1, 0, 0);
    check("mr_floordiv_u64", 0, (double)mr_floordiv_u64(7, 0), 0, 0, 0);
    check("mr_shr_u64", 60, (double)mr_shr_u64(UINT64_MAX, 60, 64), 15, 0, 0);
    check("mr_shr_u64", 64, (double)mr_shr_u64(UINT64_MAX, 64, 64), 0, 0, 0);
    check("mr_shl_u64", 63, (double)(mr_shl_u64(3, 63, 64) == 9223372036854775808ULL), 1, 0, 0);
    check("mr_shl_u64", 64, (double)mr_shl_u64(1, 64, 64), 0, 0, 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
