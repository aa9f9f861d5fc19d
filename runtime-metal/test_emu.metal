// test_emu.metal: kernels that check metal_emu.h (the Metal emulation), compiled as C++17 by
// test_emu_kernels.cpp as a model's .metal is by its <name>_emu.cpp; test_emu.cpp runs them
// through mithril_metal.h's API and checks the results. Plain MSL: it would compile for a GPU.
#include <metal_stdlib>
#include "mithril_ops.h"
using namespace metal;

// Each threadgroup's sum through threadgroup memory: a tree with a barrier a level; any
// number of threads (not a power of 2, partial simdgroups).
kernel void tg_sum(device const float *in [[buffer(0)]], device float *out [[buffer(1)]],
                   constant uint &n [[buffer(2)]], threadgroup float *tg [[threadgroup(0)]],
                   uint tid [[thread_position_in_grid]], uint lid [[thread_index_in_threadgroup]],
                   uint group [[threadgroup_position_in_grid]], uint threads [[threads_per_threadgroup]]) {
    tg[lid] = tid < n ? in[tid] : 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = 1; s < threads; s *= 2) {
        if (lid % (2 * s) == 0 && lid + s < threads) tg[lid] += tg[lid + s];
        threadgroup_barrier(mem_flags::mem_threadgroup | mem_flags::mem_device);
    }
    if (lid == 0) out[group] = tg[0];
}

// Every integer simd-group function, 16 results a thread.
kernel void simd_int(device const int *in [[buffer(0)]], device int *out [[buffer(1)]],
                     uint tid [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    const int v = in[tid];
    device int *o = out + tid * 16;
    o[0] = simd_sum(v);
    o[1] = simd_max(v);
    o[2] = simd_min(v);
    o[3] = simd_product(lane < 10 ? 2 : 1);
    o[4] = simd_and(v | 0x100);
    o[5] = simd_or(v);
    o[6] = simd_xor(v);
    o[7] = simd_prefix_inclusive_sum(v);
    o[8] = simd_prefix_exclusive_sum(v);
    o[9] = simd_shuffle(v, ushort((lane * 7) % 32));
    o[10] = simd_shuffle_down(v, 3);
    o[11] = simd_shuffle_up(v, 5);
    o[12] = simd_shuffle_xor(v, 6);
    o[13] = simd_broadcast(v, 9);
    o[14] = simd_any(v == 1007) ? 1 : 0;
    o[15] = (simd_all(v >= 0) ? 2 : 0) + (simd_broadcast_first(v) == in[tid - lane] ? 1 : 0);
}

// Float and 16-bit float reductions: simd_max ignores a NaN lane (fmax), simd_sum adds in
// lane order.
kernel void simd_float(device const float *in [[buffer(0)]], device float *out [[buffer(1)]],
                       uint tid [[thread_position_in_grid]]) {
    const float v = in[tid];
    out[tid * 4 + 0] = simd_sum(v);
    out[tid * 4 + 1] = simd_max(v);
    out[tid * 4 + 2] = simd_min(v);
    out[tid * 4 + 3] = float(simd_sum(half(v)));
}

// Lanes 24..31 return before the others' simd_sum completes: it then takes 24 lanes; the
// shuffle's source lane 24 has returned, so lane 23 keeps its own value.
kernel void early_exit(device int *out [[buffer(0)]], uint tid [[thread_position_in_grid]],
                       uint lane [[thread_index_in_simdgroup]]) {
    if (lane >= 24) return;
    const int n = simd_sum(1);
    simdgroup_barrier(mem_flags::mem_none);
    out[tid] = n + 100 * simd_shuffle_down(int(lane), 1);
}

// 8x8 matrices: C = A B + C from an offset and a transposed load; D = Ah Bh in half with a
// float result, stored transposed; E = a filled matrix times A.
kernel void matmul8(device const float *a [[buffer(0)]], device const float *b [[buffer(1)]],
                    device float *c [[buffer(2)]], device const half *ah [[buffer(3)]],
                    device const half *bh [[buffer(4)]], device float *d [[buffer(5)]],
                    device float *e [[buffer(6)]]) {
    simdgroup_float8x8 A, B, C;
    simdgroup_load(A, a, 16, ulong2(8, 0));        // columns 8..15 of an 8x16 matrix
    simdgroup_load(B, b, 8, ulong2(0, 0), true);   // b holds B's transpose
    simdgroup_load(C, c);
    simdgroup_multiply_accumulate(C, A, B, C);
    simdgroup_store(C, c);
    simdgroup_half8x8 Ah, Bh;
    simdgroup_float8x8 D;
    simdgroup_load(Ah, ah);
    simdgroup_load(Bh, bh);
    simdgroup_multiply(D, Ah, Bh);
    simdgroup_store(D, d, 8, ulong2(0, 0), true);
    simdgroup_float8x8 E, F = make_filled_simdgroup_matrix<float, 8, 8>(0.5f);
    simdgroup_multiply(E, F, A);
    simdgroup_store(E, e);
}

// 16-bit float conversions and arithmetic, and as_type.
kernel void round16(device const float *in [[buffer(0)]], device ushort *h [[buffer(1)]],
                    device ushort *bf [[buffer(2)]], device float *sum [[buffer(3)]],
                    uint tid [[thread_position_in_grid]]) {
    const half x = half(in[tid]);
    h[tid] = as_type<ushort>(x);
    bf[tid] = as_type<ushort>(bfloat(in[tid]));
    sum[tid] = float(x + half(1.0f));  // rounded to half
}

// Vectors, math, mithril_ops.h's helpers.
kernel void vec_math(device float4 *v [[buffer(0)]], device float *m [[buffer(1)]],
                     uint tid [[thread_position_in_grid]]) {
    const float4 a = v[tid];
    const float4 b = float4(1.0f, 2.0f, 3.0f, 4.0f);
    float4 r = (a + b) * 2.0f - float4(1.0f) / b;
    r.w += 0.5f;
    v[tid] = r;
    device float *o = m + tid * 8;
    o[0] = metal::precise::exp(1.0f);
    o[1] = metal::fast::tanh(0.5f);
    o[2] = metal::rsqrt(4.0f);
    o[3] = metal::clamp(5.0f, 0.0f, 1.0f) + float(metal::max(3, 7));
    o[4] = metal::select(1.0f, 2.0f, true);
    o[5] = metal::as_type<float>(0x3f800000u);
    o[6] = metal::fmax(NAN, 1.0f);
    o[7] = mr_sigmoidf(0.0f) + expf(0.0f);
}

// Faults: each must abort with the emulation's diagnostic (test_emu.cpp checks the line).
kernel void fault_barrier(device int *out [[buffer(0)]], uint lid [[thread_index_in_threadgroup]]) {
    if (lid == 3) return;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[lid] = 1;
}
kernel void fault_simd_mismatch(device int *out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
    int x = int(lane);
    if (lane & 1) x = simd_shuffle_xor(x, 1);
    else x = simd_sum(x);
    out[lane] = x;
}
kernel void fault_simd_barrier(device int *out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
    int x = int(lane);
    if (lane < 16) x = simd_sum(x);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[lane] = x;
}
kernel void fault_tg_unset(device float *out [[buffer(0)]], threadgroup float *tg [[threadgroup(1)]],
                           uint lid [[thread_index_in_threadgroup]]) {
    tg[lid] = 1.0f;
    out[lid] = tg[lid];
}
// (lane is not read: an unused attribute parameter must compile warning-free, as in Metal.)
kernel void fault_matrix_partial(device float *out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
    simdgroup_float8x8 A;
    simdgroup_load(A, out);
}
