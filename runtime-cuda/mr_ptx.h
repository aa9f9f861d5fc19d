/*
 * mr_ptx.h: the PTX instructions the tensor-core kernels issue by inline assembly, for sm_80
 * and newer; under MR_CUDA_EMULATE, the emulator's functions of the same registers
 * (cuda_emu.h, which writes out the fragments' layouts). Include it after cuda_runtime.h
 * (or cuda_emu.h). mithril_cuda.h and test_emu.cu use it.
 */
#ifndef MR_PTX_H
#define MR_PTX_H

#include <stdint.h>

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800

/* cvt.rna.tf32.f32: v rounded to tf32 (nearest, ties away), as the register's bits. */
static __device__ __forceinline__ uint32_t mr_tf32_bits(float v)
{
#if defined(MR_CUDA_EMULATE)
    return mr_emu::ptx::cvt_rna_tf32(v);
#else
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return r;
#endif
}

/* cp.async: BYTES (4 or 16, both addresses aligned to it) from global src to shared dst,
 * without passing through registers; the copy lands at the cp.async.wait_group that
 * completes its group (mr_cp_async_commit closes the open group). */
template <int BYTES> static __device__ __forceinline__ void mr_cp_async(void *dst, const void *src)
{
    static_assert(BYTES == 4 || BYTES == 16, "cp.async copies 4 or 16 bytes here");
#if defined(MR_CUDA_EMULATE)
    mr_emu::ptx::cp_async(dst, src, BYTES);
#else
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    if (BYTES == 16) /* .cg: bypass L1, the tile is read once a block */
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(src) : "memory");
#endif
}
static __device__ __forceinline__ void mr_cp_async_commit()
{
#if defined(MR_CUDA_EMULATE)
    mr_emu::ptx::cp_async_commit_group();
#else
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
/* Waits until at most N of the thread's committed groups are still in flight. */
template <int N> static __device__ __forceinline__ void mr_cp_async_wait()
{
#if defined(MR_CUDA_EMULATE)
    mr_emu::ptx::cp_async_wait_group(N);
#else
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

/* d += a b on a 16 x 8 tile by mma.sync: m16n8k8 with tf32 operands, m16n8k16 with bf16 or
 * f16 (two elements a register), f32 accumulators. Warp-collective. */
#if defined(MR_CUDA_EMULATE)
static __device__ __forceinline__ void mr_mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    mr_emu::ptx::mma_m16n8k8_tf32(d, a, b, d);
}
static __device__ __forceinline__ void mr_mma_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    mr_emu::ptx::mma_m16n8k16_bf16(d, a, b, d);
}
static __device__ __forceinline__ void mr_mma_f16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    mr_emu::ptx::mma_m16n8k16_f16(d, a, b, d);
}
#else
#define MR_PTX_MMA(name, shape_types)                                                                 \
    static __device__ __forceinline__ void name(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) \
    {                                                                                                 \
        asm("mma.sync.aligned." shape_types " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"  \
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                          \
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                      \
    }
MR_PTX_MMA(mr_mma_tf32, "m16n8k8.row.col.f32.tf32.tf32.f32")
MR_PTX_MMA(mr_mma_bf16, "m16n8k16.row.col.f32.bf16.bf16.f32")
MR_PTX_MMA(mr_mma_f16, "m16n8k16.row.col.f32.f16.f16.f32")
#undef MR_PTX_MMA
#endif

#endif /* sm_80 and newer */
#endif /* MR_PTX_H */
