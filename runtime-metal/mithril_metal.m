/*
 * mithril_metal.m: mithril_metal.h over Metal.framework (macOS 13+, Objective-C with ARC:
 * `clang -fobjc-arc -framework Metal -framework Foundation`).
 *
 * Ownership. Objective-C objects cross the C API as void *, so ARC cannot see them there:
 *   - An object this file hands out (a buffer, a command buffer) or keeps in a C struct
 *     (the context's device, queue and pipelines; an encoder) is retained as it leaves
 *     ARC with (__bridge_retained void *) and released as it comes back with
 *     (__bridge_transfer id): mr_metal_buffer_free, mr_metal_commit_wait, mr_metal_close,
 *     mr_metal_end. (These casts rather than CFBridgingRetain, whose CFTypeRef result is
 *     const void *.)
 *   - An object this file only borrows (the caller's device, a buffer given to
 *     mr_metal_set_buffer, a command buffer given to mr_metal_encode) is read with a plain
 *     (__bridge id), which changes no retain count.
 * The structs are plain malloc'ed C structs holding those retained pointers: ARC would
 * not release strong ids in a struct freed with free().
 *
 * Objects Metal returns autoreleased (a queue's commandBuffer, an encoder, NSError and
 * NSString temporaries) are made inside @autoreleasepool, so that a caller with no pool
 * of its own (a plain C program) leaks nothing.
 */
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mithril_metal.h"

#if !__has_feature(objc_arc)
#error "mithril_metal.m needs ARC: compile it with -fobjc-arc"
#endif

/* Metal's buffer argument table has 31 entries per function ([[buffer(0)]] to
 * [[buffer(30)]]) on every GPU family; a larger index is undefined behaviour unless the
 * API validation layer is on, so it is refused here. */
#define MR_METAL_MAX_BUFFER_INDEX 30u
/* Apple's limit for setBytes:length:atIndex: ("data smaller than 4 KB"); larger constants
 * belong in a buffer. */
#define MR_METAL_MAX_SET_BYTES 4096u

struct mr_metal {
    void *device; /* id<MTLDevice>, retained */
    void *queue;  /* id<MTLCommandQueue>, retained */
    void **pipelines; /* count id<MTLComputePipelineState>, each retained */
    unsigned count;
    NSUInteger max_threadgroup_memory; /* the device's, per threadgroup */
};

struct mr_metal_encoder {
    void *encoder;       /* id<MTLComputeCommandEncoder>, retained until mr_metal_end */
    const mr_metal *ctx; /* borrowed: its pipelines and limits */
    int failed;          /* a command was refused; later commands are skipped */
    char error[512];     /* why, reported by mr_metal_end */
};

/* ---- errors ---------------------------------------------------------------------- */

/* Per thread, as the header promises: one thread's failure does not overwrite another's
 * message while it reads it. */
static _Thread_local char mr_metal_error[1024];

static void set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(mr_metal_error, sizeof mr_metal_error, fmt, ap);
    va_end(ap);
}

const char *mr_metal_last_error(void) {
    return mr_metal_error;
}

/* An NSString as C text for an error message (UTF8String may be NULL, which %s must not
 * get). Only valid inside the caller's autorelease pool, which is where it is used. */
static const char *text_of(NSString *string, const char *fallback) {
    const char *text = string ? string.UTF8String : NULL;
    return text ? text : fallback;
}

/* An NSError's description (NULL-safe), as text_of. */
static const char *describe(NSError *error) {
    return text_of(error ? error.localizedDescription : nil, "no error description");
}

/* Refuses an encoder's command: the first reason is kept (the later ones usually follow
 * from it) and every later command is skipped, so that a command buffer whose encoding
 * failed holds no dispatch that ran with the wrong bindings. */
static void refuse(mr_metal_encoder *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refuse(mr_metal_encoder *e, const char *fmt, ...) {
    if (e->failed)
        return;
    e->failed = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->error, sizeof e->error, fmt, ap);
    va_end(ap);
}

/* ---- context --------------------------------------------------------------------- */

void mr_metal_close(mr_metal *ctx) {
    if (!ctx)
        return;
    /* Each (__bridge_transfer) hands one retain back to ARC, which releases it at once
     * (the result is discarded). */
    for (unsigned i = 0; i < ctx->count; i++)
        if (ctx->pipelines[i])
            (void)(__bridge_transfer id<MTLComputePipelineState>)ctx->pipelines[i];
    free(ctx->pipelines);
    if (ctx->queue)
        (void)(__bridge_transfer id<MTLCommandQueue>)ctx->queue;
    if (ctx->device)
        (void)(__bridge_transfer id<MTLDevice>)ctx->device;
    free(ctx);
}

/* The system's default GPU. A command-line program not linked with CoreGraphics may get
 * nil from MTLCreateSystemDefaultDevice on some macOS versions; MTLCopyAllDevices
 * (macOS only) still lists the GPUs, so the first of them is the fallback. */
static id<MTLDevice> default_device(void) {
    id<MTLDevice> device = MTLCreateSystemDefaultDevice();
    if (!device)
        device = MTLCopyAllDevices().firstObject;
    return device;
}

int mr_metal_open(mr_metal **out, void *device_handle, const char *metallib_path, const char *const kernels[],
                  unsigned count) {
    if (!out) {
        set_error("mr_metal_open: no context pointer");
        return MR_METAL_ERROR;
    }
    *out = NULL;
    if (!metallib_path || (count > 0 && !kernels)) {
        set_error("mr_metal_open: no metallib path or no kernel names");
        return MR_METAL_ERROR;
    }
    /* calloc: mr_metal_close can free a half-built context (NULL fields are skipped). */
    mr_metal *ctx = calloc(1, sizeof *ctx);
    void **pipelines = calloc(count ? count : 1, sizeof *pipelines);
    if (!ctx || !pipelines) {
        free(ctx);
        free(pipelines);
        set_error("mr_metal_open: out of memory");
        return MR_METAL_ERROR;
    }
    ctx->pipelines = pipelines;
    ctx->count = count;
    @autoreleasepool {
        /* The caller's device is borrowed (a plain __bridge); the context retains its own
         * reference below, so the caller may release theirs. */
        id<MTLDevice> device = device_handle ? (__bridge id<MTLDevice>)device_handle : default_device();
        if (!device) {
            set_error("mr_metal_open: no Metal device (this machine has no GPU that supports Metal)");
            mr_metal_close(ctx);
            return MR_METAL_ERROR;
        }
        ctx->device = (__bridge_retained void *)device;
        ctx->max_threadgroup_memory = device.maxThreadgroupMemoryLength;

        id<MTLCommandQueue> queue = [device newCommandQueue];
        if (!queue) {
            set_error("mr_metal_open: %s could not make a command queue", text_of(device.name, "the GPU"));
            mr_metal_close(ctx);
            return MR_METAL_ERROR;
        }
        ctx->queue = (__bridge_retained void *)queue;

        NSString *path = [NSString stringWithUTF8String:metallib_path];
        if (!path) {
            set_error("mr_metal_open: the metallib path is not UTF-8: %s", metallib_path);
            mr_metal_close(ctx);
            return MR_METAL_ERROR;
        }
        /* fileURLWithPath: resolves a relative path against the working directory. The
         * library itself is not kept: pipelines do not need it once made. */
        NSError *error = nil;
        id<MTLLibrary> library = [device newLibraryWithURL:[NSURL fileURLWithPath:path] error:&error];
        if (!library) {
            set_error("mr_metal_open: cannot load the Metal library %s: %s", metallib_path, describe(error));
            mr_metal_close(ctx);
            return MR_METAL_ERROR;
        }
        for (unsigned i = 0; i < count; i++) {
            NSString *name = kernels[i] ? [NSString stringWithUTF8String:kernels[i]] : nil;
            id<MTLFunction> function = name ? [library newFunctionWithName:name] : nil;
            if (!function) {
                set_error("mr_metal_open: %s has no kernel %s", metallib_path, kernels[i] ? kernels[i] : "(null)");
                mr_metal_close(ctx);
                return MR_METAL_ERROR;
            }
            error = nil;
            id<MTLComputePipelineState> pipeline = [device newComputePipelineStateWithFunction:function error:&error];
            if (!pipeline) {
                set_error("mr_metal_open: cannot make a pipeline for kernel %s of %s: %s", kernels[i], metallib_path,
                          describe(error));
                mr_metal_close(ctx);
                return MR_METAL_ERROR;
            }
            ctx->pipelines[i] = (__bridge_retained void *)pipeline;
        }
    }
    *out = ctx;
    return 0;
}

/* ---- buffers --------------------------------------------------------------------- */

void *mr_metal_buffer_new(mr_metal *ctx, size_t bytes) {
    if (!ctx) {
        set_error("mr_metal_buffer_new: no context");
        return NULL;
    }
    /* Metal refuses an empty buffer; an empty tensor still gets a valid (1-byte) one. */
    NSUInteger length = bytes ? (NSUInteger)bytes : 1;
    @autoreleasepool {
        id<MTLDevice> device = (__bridge id<MTLDevice>)ctx->device;
        if (length > device.maxBufferLength) {
            set_error("mr_metal_buffer_new: %zu bytes is over %s's largest buffer (%lu bytes)", bytes,
                      text_of(device.name, "the GPU"), (unsigned long)device.maxBufferLength);
            return NULL;
        }
        /* Shared storage: the CPU and GPU see the same memory (mr_metal_contents). */
        id<MTLBuffer> buffer = [device newBufferWithLength:length options:MTLResourceStorageModeShared];
        if (!buffer) {
            set_error("mr_metal_buffer_new: cannot allocate %zu bytes on %s", bytes, text_of(device.name, "the GPU"));
            return NULL;
        }
        /* Metal does not promise zeroed memory (a buffer may reuse freed pages); the API
         * does. */
        memset(buffer.contents, 0, length);
        return (__bridge_retained void *)buffer;
    }
}

void mr_metal_buffer_free(void *buffer) {
    if (buffer)
        (void)(__bridge_transfer id<MTLBuffer>)buffer;
}

void *mr_metal_contents(void *buffer) {
    return buffer ? ((__bridge id<MTLBuffer>)buffer).contents : NULL;
}

/* ---- command buffers --------------------------------------------------------------- */

void *mr_metal_command_buffer(mr_metal *ctx) {
    if (!ctx) {
        set_error("mr_metal_command_buffer: no context");
        return NULL;
    }
    @autoreleasepool {
        /* commandBuffer (not ...WithUnretainedReferences): the command buffer retains
         * the buffers it uses until it completes, so a caller freeing one early cannot
         * pull memory from under a running kernel. */
        id<MTLCommandBuffer> cb = [(__bridge id<MTLCommandQueue>)ctx->queue commandBuffer];
        if (!cb) {
            set_error("mr_metal_command_buffer: the queue made no command buffer");
            return NULL;
        }
        /* The queue returns it autoreleased; the caller's handle holds its own retain
         * (released by mr_metal_commit_wait) that outlives this pool. */
        return (__bridge_retained void *)cb;
    }
}

int mr_metal_commit_wait(void *command_buffer) {
    if (!command_buffer) {
        set_error("mr_metal_commit_wait: no command buffer");
        return MR_METAL_ERROR;
    }
    @autoreleasepool {
        /* Takes the handle's retain back: ARC releases the command buffer at the end of
         * this scope, whatever happens. */
        id<MTLCommandBuffer> cb = (__bridge_transfer id<MTLCommandBuffer>)command_buffer;
        [cb commit];
        [cb waitUntilCompleted];
        /* Once waitUntilCompleted returns the status is Completed or Error; anything else
         * is treated as a failure too rather than reported as success. */
        if (cb.status != MTLCommandBufferStatusCompleted) {
            set_error("mr_metal_commit_wait: the command buffer failed (status %lu): %s", (unsigned long)cb.status,
                      describe(cb.error));
            return MR_METAL_ERROR;
        }
    }
    return 0;
}

/* ---- encoding ------------------------------------------------------------------------ */

mr_metal_encoder *mr_metal_encode(mr_metal *ctx, void *command_buffer) {
    if (!ctx || !command_buffer) {
        set_error("mr_metal_encode: no context or command buffer");
        return NULL;
    }
    mr_metal_encoder *e = calloc(1, sizeof *e);
    if (!e) {
        set_error("mr_metal_encode: out of memory");
        return NULL;
    }
    @autoreleasepool {
        /* Serial: each dispatch sees the previous one's writes, which the generated code
         * relies on (no barriers are encoded). */
        id<MTLComputeCommandEncoder> encoder =
            [(__bridge id<MTLCommandBuffer>)command_buffer computeCommandEncoderWithDispatchType:MTLDispatchTypeSerial];
        if (!encoder) {
            free(e);
            set_error("mr_metal_encode: the command buffer made no compute encoder (is another encoder still open on "
                      "it, or was it committed?)");
            return NULL;
        }
        e->encoder = (__bridge_retained void *)encoder;
    }
    e->ctx = ctx;
    return e;
}

/* The encoder's Metal object, borrowed. */
static id<MTLComputeCommandEncoder> encoder_of(mr_metal_encoder *e) {
    return (__bridge id<MTLComputeCommandEncoder>)e->encoder;
}

/* The set_* and dispatch functions return nothing: a refusal is remembered in the
 * encoder and reported by mr_metal_end. A NULL encoder (mr_metal_encode failed, and
 * already said why) is ignored, so that mr_metal_end(NULL) reports that failure. */

void mr_metal_set_buffer(mr_metal_encoder *e, unsigned index, void *buffer, uint64_t offset) {
    if (!e || e->failed)
        return;
    if (index > MR_METAL_MAX_BUFFER_INDEX) {
        refuse(e, "mr_metal_set_buffer: buffer index %u is over Metal's %u", index, MR_METAL_MAX_BUFFER_INDEX);
        return;
    }
    if (!buffer) {
        refuse(e, "mr_metal_set_buffer: no buffer for [[buffer(%u)]]", index);
        return;
    }
    id<MTLBuffer> b = (__bridge id<MTLBuffer>)buffer;
    /* An offset past the end would point the kernel outside the allocation. */
    if (offset > b.length) {
        refuse(e, "mr_metal_set_buffer: offset %llu is past the end of a %lu-byte buffer ([[buffer(%u)]])",
               (unsigned long long)offset, (unsigned long)b.length, index);
        return;
    }
    [encoder_of(e) setBuffer:b offset:(NSUInteger)offset atIndex:index];
}

void mr_metal_set_bytes(mr_metal_encoder *e, unsigned index, const void *bytes, size_t size) {
    if (!e || e->failed)
        return;
    if (index > MR_METAL_MAX_BUFFER_INDEX) {
        refuse(e, "mr_metal_set_bytes: buffer index %u is over Metal's %u", index, MR_METAL_MAX_BUFFER_INDEX);
        return;
    }
    if (!bytes || size == 0 || size > MR_METAL_MAX_SET_BYTES) {
        refuse(e, "mr_metal_set_bytes: %zu bytes for [[buffer(%u)]] (1 to %u bytes may be set inline)", size, index,
               MR_METAL_MAX_SET_BYTES);
        return;
    }
    /* Metal copies the bytes now: the caller's memory need not outlive the call. */
    [encoder_of(e) setBytes:bytes length:size atIndex:index];
}

void mr_metal_set_threadgroup_memory(mr_metal_encoder *e, unsigned index, size_t size) {
    if (!e || e->failed)
        return;
    /* Metal requires a multiple of 16 bytes; a zero-sized entry is given the minimum. */
    size_t rounded = size == 0 ? 16 : (size + 15) & ~(size_t)15;
    if (size > e->ctx->max_threadgroup_memory || rounded > e->ctx->max_threadgroup_memory) {
        refuse(e, "mr_metal_set_threadgroup_memory: %zu bytes at [[threadgroup(%u)]] is over the device's %lu", size,
               index, (unsigned long)e->ctx->max_threadgroup_memory);
        return;
    }
    [encoder_of(e) setThreadgroupMemoryLength:rounded atIndex:index];
}

void mr_metal_dispatch(mr_metal_encoder *e, unsigned kernel, uint64_t groups, unsigned threads) {
    if (!e || e->failed)
        return;
    if (kernel >= e->ctx->count) {
        refuse(e, "mr_metal_dispatch: kernel %u of %u", kernel, e->ctx->count);
        return;
    }
    id<MTLComputePipelineState> pipeline = (__bridge id<MTLComputePipelineState>)e->ctx->pipelines[kernel];
    /* The pipeline's limit, not the device's: it shrinks with the kernel's registers and
     * threadgroup memory, and Metal faults a dispatch over it. */
    NSUInteger max_threads = pipeline.maxTotalThreadsPerThreadgroup;
    if (threads == 0 || threads > max_threads) {
        refuse(e, "mr_metal_dispatch: kernel %u: %u threads per threadgroup (this pipeline allows 1 to %lu)", kernel,
               threads, (unsigned long)max_threads);
        return;
    }
    /* A kernel's [[thread_position_in_grid]] is a 32-bit uint: a 1-D grid of more threads
     * would give several threads the same index. */
    if (groups == 0 || groups > UINT32_MAX / threads) {
        refuse(e, "mr_metal_dispatch: kernel %u: %llu threadgroups of %u threads (1 to %u threads in all)", kernel,
               (unsigned long long)groups, threads, UINT32_MAX);
        return;
    }
    id<MTLComputeCommandEncoder> encoder = encoder_of(e);
    [encoder setComputePipelineState:pipeline];
    [encoder dispatchThreadgroups:MTLSizeMake((NSUInteger)groups, 1, 1) threadsPerThreadgroup:MTLSizeMake(threads, 1, 1)];
}

int mr_metal_end(mr_metal_encoder *e) {
    if (!e)
        return MR_METAL_ERROR; /* mr_metal_encode failed and set the error */
    @autoreleasepool {
        /* endEncoding even after a refusal: the command buffer cannot be committed, nor
         * take another encoder, while this one is open. Taking the retain back releases
         * the encoder at the end of the scope. */
        id<MTLComputeCommandEncoder> encoder = (__bridge_transfer id<MTLComputeCommandEncoder>)e->encoder;
        [encoder endEncoding];
    }
    int failed = e->failed;
    if (failed)
        set_error("%s", e->error);
    free(e);
    return failed ? MR_METAL_ERROR : 0;
}
