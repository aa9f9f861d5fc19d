// test_emu_kernels.cpp: test_emu.metal's kernels, registered as a model's generated
// <name>_emu.cpp registers its own (one wrapper a kernel, thread positions from the accessors).
#include "metal_emu.h"
#include "test_emu.metal"

namespace {
using mr_metal_emu::Args;
namespace E = mr_metal_emu;

void tg_sum_emu(const Args &a) {
  tg_sum((device const float *)a.buffer[0], (device float *)a.buffer[1], *(constant uint *)a.buffer[2],
         (float *)E::threadgroup_memory(0), E::thread_position_in_grid(), E::thread_index_in_threadgroup(),
         E::threadgroup_position_in_grid(), E::threads_per_threadgroup());
}
void simd_int_emu(const Args &a) {
  simd_int((device const int *)a.buffer[0], (device int *)a.buffer[1], E::thread_position_in_grid(),
           E::thread_index_in_simdgroup());
}
void simd_float_emu(const Args &a) {
  simd_float((device const float *)a.buffer[0], (device float *)a.buffer[1], E::thread_position_in_grid());
}
void early_exit_emu(const Args &a) {
  early_exit((device int *)a.buffer[0], E::thread_position_in_grid(), E::thread_index_in_simdgroup());
}
void matmul8_emu(const Args &a) {
  matmul8((device const float *)a.buffer[0], (device const float *)a.buffer[1], (device float *)a.buffer[2],
          (device const half *)a.buffer[3], (device const half *)a.buffer[4], (device float *)a.buffer[5],
          (device float *)a.buffer[6]);
}
void round16_emu(const Args &a) {
  round16((device const float *)a.buffer[0], (device ushort *)a.buffer[1], (device ushort *)a.buffer[2],
          (device float *)a.buffer[3], E::thread_position_in_grid());
}
void vec_math_emu(const Args &a) {
  vec_math((device float4 *)a.buffer[0], (device float *)a.buffer[1], E::thread_position_in_grid());
}
void fault_barrier_emu(const Args &a) { fault_barrier((device int *)a.buffer[0], E::thread_index_in_threadgroup()); }
void fault_simd_mismatch_emu(const Args &a) {
  fault_simd_mismatch((device int *)a.buffer[0], E::thread_index_in_simdgroup());
}
void fault_simd_barrier_emu(const Args &a) {
  fault_simd_barrier((device int *)a.buffer[0], E::thread_index_in_simdgroup());
}
void fault_tg_unset_emu(const Args &a) {
  fault_tg_unset((device float *)a.buffer[0], (float *)E::threadgroup_memory(1), E::thread_index_in_threadgroup());
}
void fault_matrix_partial_emu(const Args &a) {
  fault_matrix_partial((device float *)a.buffer[0], E::thread_index_in_simdgroup());
}

const E::Entry kernels[] = {
    {"tg_sum", tg_sum_emu},
    {"simd_int", simd_int_emu},
    {"simd_float", simd_float_emu},
    {"early_exit", early_exit_emu},
    {"matmul8", matmul8_emu},
    {"round16", round16_emu},
    {"vec_math", vec_math_emu},
    {"fault_barrier", fault_barrier_emu},
    {"fault_simd_mismatch", fault_simd_mismatch_emu},
    {"fault_simd_barrier", fault_simd_barrier_emu},
    {"fault_tg_unset", fault_tg_unset_emu},
    {"fault_matrix_partial", fault_matrix_partial_emu},
};
const E::Register registered(kernels, sizeof kernels / sizeof kernels[0]);
}  // namespace
