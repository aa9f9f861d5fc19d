/*
 * fuzz_common.h -- what the libFuzzer harnesses of mr_files.c share (`make fuzz`): the
 * fuzzer's bytes as a stdio stream (fmemopen, POSIX), and a check that stops the run
 * when a reader breaks one of its promises.
 */
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../mr_files.h"

/* A read-only stream over n bytes (an empty one when n is 0, which fmemopen refuses). */
static inline FILE *fuzz_stream(const uint8_t *data, size_t n)
{
    static const uint8_t none[1] = { 0 };
    FILE *f = fmemopen((void *)(n ? data : none), n ? n : 1, "rb");
    if (f && n == 0) { (void)fgetc(f); }
    if (!f) { abort(); }
    return f;
}

/* Aborts (a finding) when a promise is broken, saying which. */
#define FUZZ_ASSERT(cond)                                                          \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "%s:%d: broken: %s\n", __FILE__, __LINE__, #cond);     \
            abort();                                                               \
        }                                                                          \
    } while (0)

/* A message is one line that fits its buffer. */
static inline void fuzz_check_message(const char *err)
{
    size_t n = strlen(err);
    FUZZ_ASSERT(n > 0 && n < MR_ERR_SIZE && strchr(err, '\n') == NULL);
}

#endif
