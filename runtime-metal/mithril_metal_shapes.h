/* mithril_metal_shapes.h -- launch shapes of the Metal target's kernel library.
 *
 * Plain macros only: this file is included both by mithril_metal_kernels.h (Metal Shading
 * Language, compiled into the model's .metal) and by the generated host C code, which
 * dispatches each library call as
 *
 *     mr_metal_set_threadgroup_memory(e, 0, MR_METAL_SGEMM_TG_BYTES);
 *     mr_metal_dispatch(e, k, MR_METAL_SGEMM_GROUPS(m, n, nbatch), MR_METAL_THREADS);
 *
 * Every library function grid-strides over its work units, so any number of threadgroups
 * >= 1 gives the right result; the GROUPS macros only pick a good number (one threadgroup
 * a work unit), capped to [1, MR_METAL_MAX_GROUPS]. Arguments are evaluated more than once
 * and should be 64-bit integers (long / int64_t) without side effects.
 */
#ifndef MITHRIL_METAL_SHAPES_H
#define MITHRIL_METAL_SHAPES_H

/* Threads a threadgroup for every library call: 8 simdgroups of 32 on Apple GPUs. 256 is
 * well under the 1024-thread limit, and leaves registers for a 4x4 accumulator tile a
 * thread (Apple GPUs give a thread fewer registers as the threadgroup grows). */
#define MR_METAL_THREADS 256
#define MR_METAL_SIMD_WIDTH 32
#define MR_METAL_SIMDS (MR_METAL_THREADS / MR_METAL_SIMD_WIDTH)
#define MR_METAL_MAX_GROUPS 65535
#define MR_METAL_MAX_BATCH 4

/* GEMM / implicit-GEMM tile: a threadgroup computes MR_METAL_GEMM_BM x MR_METAL_GEMM_BN
 * outputs, MR_METAL_GEMM_BK of K at a time; each thread a 4x4 register tile (16 x 16
 * threads). The A and B tiles live K-major in threadgroup memory with rows padded to
 * MR_METAL_GEMM_LD floats: the transposing stores of a K-contiguous operand then fall
 * on distinct banks. 2 x 16 x 65 floats = 8320 bytes, a quarter of the 32 KiB an Apple
 * GPU threadgroup may use, so several threadgroups fit on a core. */
#define MR_METAL_GEMM_BM 64
#define MR_METAL_GEMM_BN 64
#define MR_METAL_GEMM_BK 16
#define MR_METAL_GEMM_TM 4
#define MR_METAL_GEMM_TN 4
#define MR_METAL_GEMM_LD (MR_METAL_GEMM_BM + 1)
/* m <= MR_METAL_GEMV_MAX_M: one simdgroup an output column instead of the tile. */
#define MR_METAL_GEMV_MAX_M 4
/* Output channels a group up to which the convolution computes each output directly. */
#define MR_METAL_CONV_DIRECT_MAX_M 4
/* Softmax rows up to this length take one simdgroup a row; longer, one threadgroup. */
#define MR_METAL_SOFTMAX_SIMD_MAX_N 1024

#define MR_METAL_CDIV(a, b) (((a) + (b) - 1) / (b))
#define MR_METAL_CAP(x) ((x) < 1 ? 1 : ((x) > MR_METAL_MAX_GROUPS ? MR_METAL_MAX_GROUPS : (x)))

/* ---- mr_sgemm ---- */
#define MR_METAL_SGEMM_TG_BYTES (2 * MR_METAL_GEMM_BK * MR_METAL_GEMM_LD * 4)
/* m <= 4: a simdgroup per (batch, column); else a threadgroup per (batch, row tile,
 * column tile). */
#define MR_METAL_SGEMM_GROUPS(m, n, nbatch)                                                          \
    MR_METAL_CAP((m) <= MR_METAL_GEMV_MAX_M                                                        \
                     ? MR_METAL_CDIV((nbatch) * (n), MR_METAL_SIMDS)                               \
                     : MR_METAL_CDIV((m), MR_METAL_GEMM_BM) * MR_METAL_CDIV((n), MR_METAL_GEMM_BN) * \
                           (nbatch))

/* ---- mr_conv2d ---- */
#define MR_METAL_CONV2D_TG_BYTES MR_METAL_SGEMM_TG_BYTES
/* <= 4 output channels a group (depthwise): a thread an output; else a threadgroup per
 * (group, channel tile, tile of 64 output positions over all images). */
#define MR_METAL_CONV2D_GROUPS(n, o, oh, ow, cgroups)                                                \
    MR_METAL_CAP((o) / (cgroups) <= MR_METAL_CONV_DIRECT_MAX_M                                     \
                     ? MR_METAL_CDIV((n) * (o) * (oh) * (ow), MR_METAL_THREADS)                    \
                     : MR_METAL_CDIV((o) / (cgroups), MR_METAL_GEMM_BM) *                          \
                           MR_METAL_CDIV((n) * (oh) * (ow), MR_METAL_GEMM_BN) * (cgroups))

/* ---- mr_pool2d: a thread an output ---- */
#define MR_METAL_POOL2D_GROUPS(lead, oh, ow) MR_METAL_CAP(MR_METAL_CDIV((lead) * (oh) * (ow), MR_METAL_THREADS))

/* ---- mr_softmax ---- */
/* The threadgroup reduction's MR_METAL_SIMDS partials and its result. */
#define MR_METAL_SOFTMAX_TG_BYTES ((MR_METAL_SIMDS + 4) * 4)
/* Column per thread when inner > 1 and (many columns or n <= 8); else n <= 1024: a
 * simdgroup a row; else a threadgroup a row. Must choose as mr_softmax does only for
 * speed: any count works. */
#define MR_METAL_SOFTMAX_GROUPS(outer, n, inner)                                                     \
    MR_METAL_CAP(((inner) > 1 && ((outer) * (inner) >= 4096 || (n) <= 8))                          \
                     ? MR_METAL_CDIV((outer) * (inner), MR_METAL_THREADS)                          \
                     : ((n) <= MR_METAL_SOFTMAX_SIMD_MAX_N ? MR_METAL_CDIV((outer) * (inner), MR_METAL_SIMDS) \
                                                         : (outer) * (inner)))

/* ---- mr_sgd: a thread an element ---- */
#define MR_METAL_SGD_GROUPS(n) MR_METAL_CAP(MR_METAL_CDIV((n), MR_METAL_THREADS))

#endif /* MITHRIL_METAL_SHAPES_H */
