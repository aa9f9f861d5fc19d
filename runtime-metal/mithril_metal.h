/*
 * mithril_metal.h: the host side of the Metal target, a small C API over Metal that the
 * generated <name>.c calls to encode a model's kernels, and that a program calling the
 * model uses to make buffers and command buffers.
 *
 * Two implementations, one API:
 *   mithril_metal.m         Objective-C over Metal.framework (macOS; `make` in the output
 *                           directory builds it with xcrun clang -fobjc-arc).
 *   mithril_metal_emu.cpp   C++17 over metal_emu.h: the kernels, compiled as C++ from the
 *                           same .metal source, run on the CPU (`make emulate`). A test of
 *                           kernel logic, not of the GPU.
 *
 * Handles are opaque pointers: a buffer is an id<MTLBuffer>, a command buffer an
 * id<MTLCommandBuffer> and a device an id<MTLDevice>, bridged to void * (under emulation,
 * host memory and host objects). Buffers are made in shared storage, so
 * mr_metal_contents gives the CPU's view of them (Apple silicon's unified memory).
 *
 * Functions that can fail return 0 or MR_METAL_ERROR; mr_metal_last_error() then says why
 * (per thread, valid until the next failing call).
 */
#ifndef MITHRIL_METAL_H
#define MITHRIL_METAL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MR_METAL_ERROR (-3)

/* A device, its command queue, and the compute pipelines of one model's kernels. */
typedef struct mr_metal mr_metal;
/* A compute command encoder on a command buffer. */
typedef struct mr_metal_encoder mr_metal_encoder;

/* Opens `device` (NULL: the system's default GPU), loads the library at `metallib_path`
 * and makes a pipeline for each of the `count` kernel names; the pipelines are then
 * known by their index in `kernels`. Under emulation the metallib path is not read: the
 * kernels come from the model's <name>_emu.cpp (mr_metal_emu::Register). */
int mr_metal_open(mr_metal **ctx, void *device, const char *metallib_path, const char *const kernels[], unsigned count);
void mr_metal_close(mr_metal *ctx);
const char *mr_metal_last_error(void);

/* A zero-filled buffer of `bytes` (at least 1) in shared storage, or NULL. */
void *mr_metal_buffer_new(mr_metal *ctx, size_t bytes);
void mr_metal_buffer_free(void *buffer);
/* The CPU's pointer to a buffer's bytes. */
void *mr_metal_contents(void *buffer);

/* A new command buffer on the context's queue, or NULL; mr_metal_commit_wait commits it,
 * waits for it and releases it, returning MR_METAL_ERROR if it failed. */
void *mr_metal_command_buffer(mr_metal *ctx);
int mr_metal_commit_wait(void *command_buffer);

/* A compute encoder on `command_buffer`, or NULL. Commands are encoded in order and run
 * in order (a serial dispatch type: each dispatch sees the previous one's writes). */
mr_metal_encoder *mr_metal_encode(mr_metal *ctx, void *command_buffer);
/* [[buffer(index)]] is `buffer`'s bytes from `offset` on. */
void mr_metal_set_buffer(mr_metal_encoder *e, unsigned index, void *buffer, uint64_t offset);
/* [[buffer(index)]] is a copy of `size` bytes (small constants: sizes). */
void mr_metal_set_bytes(mr_metal_encoder *e, unsigned index, const void *bytes, size_t size);
/* [[threadgroup(index)]] is `size` bytes of threadgroup memory (rounded up to 16). */
void mr_metal_set_threadgroup_memory(mr_metal_encoder *e, unsigned index, size_t size);
/* Runs pipeline `kernel` over `groups` threadgroups (1-D) of `threads` threads each,
 * with the bindings set so far. */
void mr_metal_dispatch(mr_metal_encoder *e, unsigned kernel, uint64_t groups, unsigned threads);
/* Ends the encoding; MR_METAL_ERROR if any command was refused (the reason in
 * mr_metal_last_error()). The encoder is freed either way. */
int mr_metal_end(mr_metal_encoder *e);

/* The threadgroups of `per_group` threads that a grid-stride kernel over `units`
 * threads takes: enough for one thread a unit, at most 65535 (the kernels loop over
 * the rest), at least 1. */
static inline uint64_t mr_metal_groups(int64_t units, unsigned per_group)
{
    const int64_t most = 65535;
    int64_t groups = units <= 0 ? 1 : (units - 1) / (int64_t)per_group + 1;
    return (uint64_t)(groups < most ? groups : most);
}

#ifdef __cplusplus
}
#endif

#endif /* MITHRIL_METAL_H */
