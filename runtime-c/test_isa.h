/* test_isa.h -- the test programs' check of the kernels' variant (mr_isa_name), shared
 * by test_runtime.c and test_threads.c. Not part of the runtime.
 *
 * MR_ISA names the variant that must run: with dispatch, the runtime takes it from the
 * environment; without (-DMR_NO_DISPATCH), the Makefile names the one the target flags
 * select. If another variant ran although this CPU has the one named, that is a failure;
 * if the CPU lacks it, the program reports the variant as skipped and runs nothing. */
#ifndef TEST_ISA_H
#define TEST_ISA_H

#include <stdio.h>
#include <string.h>

#include "mithril_runtime.h"

/* Whether this CPU runs the variant `isa`, by the test's own check (not the runtime's). */
static int test_isa_cpu_has(const char *isa)
{
    if (strcmp(isa, "generic") == 0) return 1;
#if defined(__aarch64__)
    if (strcmp(isa, "neon") == 0) return 1;
#endif
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (strcmp(isa, "avx2") == 0) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (strcmp(isa, "avx512") == 0) {
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
#endif
    return 0;
}

/* The variant that runs; counts one check when MR_ISA names one. Returns NULL when the
 * CPU lacks the variant named (the caller then skips its tests). */
static const char *test_isa_check(const char *want, int *passed, int *failed)
{
    const char *ran = mr_isa_name();
    if (!want || !*want) return ran;
    if (strcmp(want, ran) == 0) {
        ++*passed;
    } else if (!test_isa_cpu_has(want)) {
        printf("variant %s: skipped (this CPU lacks it; %s would run)\n", want, ran);
        return NULL;
    } else {
        ++*failed;
        printf("FAIL MR_ISA=%s, but variant %s ran\n", want, ran);
    }
    return ran;
}

#endif /* TEST_ISA_H */
