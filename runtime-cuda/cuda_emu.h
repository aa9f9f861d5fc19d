// cuda_emu.h: CPU emulation of the CUDA subset that mithrilc's generated .cu files use.
//
// With -DMR_CUDA_EMULATE, mithril_cuda.h includes this header instead of <cuda_runtime.h>, and
// the same source compiles as host C++17 (g++ >= 12, clang++ >= 14). Kernels run on the CPU:
// blocks are spread over a pool of host threads; inside a block, each CUDA thread is a fiber with
// its own stack, and the fibers of a block run one at a time on one host thread, switching only
// at barriers (__syncthreads, warp primitives). That is a valid CUDA schedule, so it tests the
// kernels' logic (results, barrier use), not their speed or their memory ordering.
//
// The fibers, blocks, barriers and warp operations are runtime-emu/simt_emu.h's (shared with
// the Metal emulation); this header is the CUDA API over them.
//
// What every emulated translation unit reads: the built-ins, the device functions, and the
// host API's declarations. The host API's state (streams, events, graphs, the last error) and
// the launches are cuda_emu.cpp's, and the scheduler simt_emu.cpp's: both are compiled once per
// build and linked into every emulated program.
// See README.md, section "Emulation", for what is and is not modelled.
#ifndef MITHRILC_CUDA_EMU_H
#define MITHRILC_CUDA_EMU_H

// The target-neutral machinery (fibers, blocks, barriers, warp operations) and the system
// headers, which must be read before the qualifier macros below (__noinline__ above all, which
// libstdc++ spells in its attributes). In a generated output directory simt_emu.h lies beside
// this file; in the source tree it is in runtime-emu/.
#if __has_include("simt_emu.h")
#include "simt_emu.h"
#else
#include "../runtime-emu/simt_emu.h"
#endif
#include <cstddef>
#include <tuple>
#include <utility>

// ---------------------------------------------------------------------------------------------
// Qualifiers
// ---------------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// Per-block storage: every thread of a block runs on the same host thread and a host thread runs
// one block at a time (to its end), so a thread_local static is exactly one copy per running
// block. Like CUDA shared memory it is not reset between blocks.
#define __shared__ static thread_local

// ---------------------------------------------------------------------------------------------
// Vector types, dim3
// ---------------------------------------------------------------------------------------------
typedef ::mr_simt::Idx3 uint3;
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};
struct alignas(8) float2 { float x, y; };
struct float3 { float x, y, z; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) double2 { double x, y; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float3 make_float3(float x, float y, float z) { return float3{x, y, z}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline double2 make_double2(double x, double y) { return double2{x, y}; }
static inline int2 make_int2(int x, int y) { return int2{x, y}; }
static inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
static inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }

// A constant, not a macro: cudaDeviceProp has a member of the same name.
static constexpr int warpSize = 32;

// ---------------------------------------------------------------------------------------------
// Host runtime types (needed by the launcher below)
// ---------------------------------------------------------------------------------------------
enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorCudartUnloading = 4,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidPitchValue = 12,
  cudaErrorInvalidSymbol = 13,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInsufficientDriver = 35,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorLaunchTimeout = 702,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotSupported = 801,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureMerge = 902,
  cudaErrorStreamCaptureUnmatched = 903,
  cudaErrorStreamCaptureUnjoined = 904,
  cudaErrorStreamCaptureIsolation = 905,
  cudaErrorStreamCaptureImplicit = 906,
  cudaErrorCapturedEvent = 907,
  cudaErrorStreamCaptureWrongThread = 908,
  cudaErrorUnknown = 999
};
typedef enum cudaError cudaError_t;

enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2
};
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2
};

// Graphs, streams and events are cuda_emu.cpp's.
struct CUgraph_st;
struct CUgraphExec_st;
struct CUstream_st;
struct CUevent_st;
typedef CUgraph_st *cudaGraph_t;
typedef CUgraphExec_st *cudaGraphExec_t;
typedef CUstream_st *cudaStream_t;
typedef CUevent_st *cudaEvent_t;
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)

namespace mr_emu {
namespace detail {
// The shared core (runtime-emu/simt_emu.h) is reachable as mr_emu::detail::..., as before the
// split (mithril_cuda.h calls mr_emu::detail::env_unsigned).
using namespace ::mr_simt;

// A warp primitive with an explicit mask, as CUDA's *_sync take.
inline uint64_t warp_op(Op op, const char *name, uint32_t mask, uint64_t v, int arg, int width) {
  return warp_arrive(op, name, mask, false, v, arg, width, nullptr);
}

// A kernel and its arguments, converted to the parameter types and held by value, as CUDA
// does (a captured launch runs them later).
template <typename Tup, typename K>
struct Bound {
  K kernel;
  Tup args;
  static void invoke(const void *p) {
    const Bound *b = static_cast<const Bound *>(p);
    std::apply(b->kernel, b->args);
  }
  static void drop(void *p) { delete static_cast<Bound *>(p); }
};

// Launches invoke(args) over grid x block on stream s, or records it into s's graph when s
// captures; drop(args) frees args when no launch needs them any more. An invalid shape sets
// the last error (and invalidates a capture) instead.
void launch(const char *name, dim3 grid, dim3 block, cudaStream_t s, void (*invoke)(const void *),
            void *args, void (*drop)(void *));

}  // namespace detail
}  // namespace mr_emu

// ---------------------------------------------------------------------------------------------
// Built-in variables and device functions
// ---------------------------------------------------------------------------------------------
// The core holds all four as uint3 (mr_simt::Idx3); blockDim and gridDim read as dim3 copies.
#define threadIdx (static_cast<const uint3 &>(::mr_emu::detail::t_.tid))
#define blockIdx (static_cast<const uint3 &>(::mr_emu::detail::t_.bid))
#define blockDim (static_cast<const dim3 &>(::mr_emu::detail::t_.bdim))
#define gridDim (static_cast<const dim3 &>(::mr_emu::detail::t_.gdim))

static inline void __syncthreads() { ::mr_emu::detail::block_barrier(0); }
static inline int __syncthreads_count(int p) { return ::mr_emu::detail::block_barrier(p != 0); }
static inline int __syncthreads_and(int p) {
  return ::mr_emu::detail::block_barrier(p != 0) == static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
}
static inline int __syncthreads_or(int p) { return ::mr_emu::detail::block_barrier(p != 0) != 0; }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::mr_emu::detail::warp_op(::mr_emu::detail::Op::Sync, "__syncwarp()", mask, 0, 0, 32);
}
template <typename T>
static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  using namespace ::mr_emu::detail;
  return from_bits<T>(warp_op(Op::Shfl, "__shfl_sync()", mask, to_bits(v), src, width));
}
template <typename T>
static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  using namespace ::mr_emu::detail;
  return from_bits<T>(warp_op(Op::ShflUp, "__shfl_up_sync()", mask, to_bits(v), static_cast<int>(delta), width));
}
template <typename T>
static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  using namespace ::mr_emu::detail;
  return from_bits<T>(warp_op(Op::ShflDown, "__shfl_down_sync()", mask, to_bits(v), static_cast<int>(delta), width));
}
template <typename T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  using namespace ::mr_emu::detail;
  return from_bits<T>(warp_op(Op::ShflXor, "__shfl_xor_sync()", mask, to_bits(v), lane_mask, width));
}
static inline unsigned __ballot_sync(unsigned mask, int p) {
  using namespace ::mr_emu::detail;
  return static_cast<unsigned>(warp_op(Op::Ballot, "__ballot_sync()", mask, p != 0, 0, 32));
}
static inline int __any_sync(unsigned mask, int p) {
  using namespace ::mr_emu::detail;
  return static_cast<int>(warp_op(Op::Any, "__any_sync()", mask, p != 0, 0, 32));
}
static inline int __all_sync(unsigned mask, int p) {
  using namespace ::mr_emu::detail;
  return static_cast<int>(warp_op(Op::All, "__all_sync()", mask, p != 0, 0, 32));
}
// Lanes of the warp that have not exited (no lockstep is modelled, so no finer answer exists).
static inline unsigned __activemask() { return ::mr_simt::live_lanes(); }

static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
template <typename T>
static inline T __ldg(const T *p) { return *p; }

// Atomics: blocks run concurrently on several host threads, so these are real atomics.
#define MR_EMU_ATOMIC_INT(T)                                                                     \
  static inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }   \
  static inline T atomicSub(T *p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }   \
  static inline T atomicAnd(T *p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); }   \
  static inline T atomicOr(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }     \
  static inline T atomicXor(T *p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); }   \
  static inline T atomicExch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); } \
  static inline T atomicCAS(T *p, T cmp, T v) {                                                 \
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);         \
    return cmp;                                                                                 \
  }                                                                                             \
  static inline T atomicMax(T *p, T v) {                                                        \
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                               \
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED,          \
                                                   __ATOMIC_RELAXED)) {                         \
    }                                                                                           \
    return old;                                                                                 \
  }                                                                                             \
  static inline T atomicMin(T *p, T v) {                                                        \
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                               \
    while (v < old && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED,          \
                                                   __ATOMIC_RELAXED)) {                         \
    }                                                                                           \
    return old;                                                                                 \
  }
MR_EMU_ATOMIC_INT(int)
MR_EMU_ATOMIC_INT(unsigned)
MR_EMU_ATOMIC_INT(unsigned long long)
MR_EMU_ATOMIC_INT(long long)
#undef MR_EMU_ATOMIC_INT

#define MR_EMU_ATOMIC_FP(T, I)                                                                   \
  static inline T atomicAdd(T *p, T v) {                                                        \
    I *q = reinterpret_cast<I *>(p);                                                            \
    I old = __atomic_load_n(q, __ATOMIC_RELAXED), upd;                                          \
    do {                                                                                        \
      T sum = ::mr_emu::detail::from_bits<T>(old) + v;                                          \
      std::memcpy(&upd, &sum, sizeof upd);                                                      \
    } while (!__atomic_compare_exchange_n(q, &old, upd, true, __ATOMIC_RELAXED,                 \
                                          __ATOMIC_RELAXED));                                   \
    return ::mr_emu::detail::from_bits<T>(old);                                                 \
  }                                                                                             \
  static inline T atomicExch(T *p, T v) {                                                       \
    I n;                                                                                        \
    std::memcpy(&n, &v, sizeof n);                                                              \
    return ::mr_emu::detail::from_bits<T>(                                                      \
        __atomic_exchange_n(reinterpret_cast<I *>(p), n, __ATOMIC_RELAXED));                    \
  }
MR_EMU_ATOMIC_FP(float, uint32_t)
MR_EMU_ATOMIC_FP(double, uint64_t)
#undef MR_EMU_ATOMIC_FP

// Math intrinsics: the fast variants are computed exactly (their results are within CUDA's
// documented error bounds).
static inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
static inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
// glibc's <math.h> declares __expf, __logf, ... itself, but libm does not export them: these
// names are macros for the emulation's own functions.
static inline float mr_emu_expf(float x) { return std::exp(x); }
static inline float mr_emu_logf(float x) { return std::log(x); }
static inline float mr_emu_sinf(float x) { return std::sin(x); }
static inline float mr_emu_cosf(float x) { return std::cos(x); }
static inline float mr_emu_tanhf(float x) { return std::tanh(x); }
static inline float mr_emu_powf(float x, float y) { return std::pow(x, y); }
#define __expf mr_emu_expf
#define __logf mr_emu_logf
#define __sinf mr_emu_sinf
#define __cosf mr_emu_cosf
#define __tanhf mr_emu_tanhf
#define __powf mr_emu_powf
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return std::sqrt(x); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
static inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
static inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
static inline int __float2int_rn(float x) { return static_cast<int>(std::nearbyint(x)); }
static inline int __float_as_int(float x) { return ::mr_emu::detail::from_bits<int>(::mr_emu::detail::to_bits(x)); }
static inline unsigned __float_as_uint(float x) { return ::mr_emu::detail::from_bits<unsigned>(::mr_emu::detail::to_bits(x)); }
static inline float __int_as_float(int x) { return ::mr_emu::detail::from_bits<float>(::mr_emu::detail::to_bits(x)); }
static inline float __uint_as_float(unsigned x) { return ::mr_emu::detail::from_bits<float>(::mr_emu::detail::to_bits(x)); }
static inline long long __double_as_longlong(double x) { return ::mr_emu::detail::from_bits<long long>(::mr_emu::detail::to_bits(x)); }
static inline double __longlong_as_double(long long x) { return ::mr_emu::detail::from_bits<double>(::mr_emu::detail::to_bits(x)); }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz(static_cast<unsigned>(x)) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll(static_cast<unsigned long long>(x)) : 64; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
  return (x >> 16) | (x << 16);
}
// The host's steady clock, in nanoseconds.
long long clock64();

// CUDA's global min/max overloads. Non-templates, so that with `using namespace std` a call
// with two arguments of one type prefers these over std::min/std::max (no ambiguity).
#define MR_EMU_MINMAX(T)                                   \
  static inline T min(T a, T b) { return b < a ? b : a; } \
  static inline T max(T a, T b) { return a < b ? b : a; }
MR_EMU_MINMAX(int)
MR_EMU_MINMAX(unsigned)
MR_EMU_MINMAX(long)
MR_EMU_MINMAX(unsigned long)
MR_EMU_MINMAX(long long)
MR_EMU_MINMAX(unsigned long long)
#undef MR_EMU_MINMAX
// CUDA's mixed overloads: a signed and an unsigned argument compare as unsigned (so that, as
// with nvcc, min(threadIdx.x, n) with an int n is not ambiguous).
#define MR_EMU_MINMAX2(R, A, B)                                                            \
  static inline R min(A a, B b) { return static_cast<R>(a) < static_cast<R>(b) ? static_cast<R>(a) : static_cast<R>(b); } \
  static inline R max(A a, B b) { return static_cast<R>(a) < static_cast<R>(b) ? static_cast<R>(b) : static_cast<R>(a); }
MR_EMU_MINMAX2(unsigned, int, unsigned)
MR_EMU_MINMAX2(unsigned, unsigned, int)
MR_EMU_MINMAX2(unsigned long, long, unsigned long)
MR_EMU_MINMAX2(unsigned long, unsigned long, long)
MR_EMU_MINMAX2(unsigned long long, long long, unsigned long long)
MR_EMU_MINMAX2(unsigned long long, unsigned long long, long long)
#undef MR_EMU_MINMAX2
static inline double min(float a, double b) { return std::fmin(a, b); }
static inline double min(double a, float b) { return std::fmin(a, b); }
static inline double max(float a, double b) { return std::fmax(a, b); }
static inline double max(double a, float b) { return std::fmax(a, b); }
static inline float min(float a, float b) { return std::fmin(a, b); }
static inline float max(float a, float b) { return std::fmax(a, b); }
static inline double min(double a, double b) { return std::fmin(a, b); }
static inline double max(double a, double b) { return std::fmax(a, b); }

// ---------------------------------------------------------------------------------------------
// Reduced-precision types (cuda_fp16.h, cuda_bf16.h): storage and round-to-nearest-even
// conversions (simt_emu.h's), bit-exact with CUDA's (NaN becomes the canonical 0x7fff, as
// CUDA's do).
// ---------------------------------------------------------------------------------------------
struct __half { unsigned short bits_; };
struct __nv_bfloat16 { unsigned short bits_; };
typedef __nv_bfloat16 nv_bfloat16;
typedef __half half;
static inline __half __float2half_rn(float f) { return __half{::mr_simt::f32_to_f16(f)}; }
static inline __half __float2half(float f) { return __float2half_rn(f); }
static inline float __half2float(__half h) { return ::mr_simt::f16_to_f32(h.bits_); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{::mr_simt::f32_to_bf16(f)}; }
static inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
static inline float __bfloat162float(__nv_bfloat16 b) { return ::mr_simt::bf16_to_f32(b.bits_); }

static inline unsigned short __half_as_ushort(__half h) { return h.bits_; }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.bits_; }

// ---------------------------------------------------------------------------------------------
// The PTX mithril_cuda.h issues as inline assembly, as functions of the registers' values:
// cvt.rna.tf32.f32, cp.async and its groups, and mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
// and m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 (d = a b + c on a 16 x 8 tile).
//
// mma is warp-collective, with the PTX ISA's fragment layouts (lane l: g = l / 4, t = l % 4;
// X(r, c) an element of the 16 x K matrix A, the K x 8 matrix B or the 16 x 8 matrix C or D):
//   tf32, K = 8:     a[i] = A(g + 8 (i & 1), t + 4 (i >> 1))        b[i] = B(t + 4 i, g)
//   16-bit, K = 16:  a[j] = A(g + 8 (j & 1), 2t + 8 (j >> 1) + h)   b[j] = B(2t + 8 j + h, g)
//                    (two elements a register, h = 0 in the low half, 1 in the high)
//   both:            c[i], d[i] = C(g + 8 (i >> 1), 2t + (i & 1))
// Every lane of the warp must reach it (a warp barrier checks that, as the shuffles': a
// divergent or exited lane aborts); each lane puts its registers in the warp's exchange area,
// and each computes its d from the whole tile: f32 accumulation, k in order from c's value
// (mr_simt::mma_tile). A tf32 operand is used as the tensor core uses it, its 13 low mantissa
// bits ignored (so a kernel that forgets cvt.rna.tf32.f32 gets truncation, not rounding).
// ---------------------------------------------------------------------------------------------
namespace mr_emu {
namespace ptx {
// cvt.rna.tf32.f32: round to nearest, ties away from zero, to 10 mantissa bits (NaN and inf
// unchanged; values past the largest tf32 round to inf).
static inline uint32_t cvt_rna_tf32(float f) {
  uint32_t x = ::mr_emu::detail::from_bits<uint32_t>(::mr_emu::detail::to_bits(f));
  if ((x & 0x7f800000u) != 0x7f800000u) x = (x + 0x1000u) & 0xffffe000u;
  return x;
}

// cp.async.{ca,cg}.shared.global [dst], [src], bytes; cp.async.commit_group; cp.async.wait_group
// n: each lane's copies land at the wait that completes their group (mr_simt::async_copy).
static inline void cp_async(void *dst, const void *src, unsigned bytes) { ::mr_simt::async_copy(dst, src, bytes); }
static inline void cp_async_commit_group() { ::mr_simt::async_commit(); }
static inline void cp_async_wait_group(unsigned n) { ::mr_simt::async_wait(n); }

namespace detail {
struct Regs {
  uint32_t a[4], b[2];
  float c[4];
};
static_assert(sizeof(Regs) <= ::mr_simt::kExchangeBytes, "an mma's registers fit a lane's exchange slot");

// The whole tile from every lane's registers (Elem: a register's bits and half to the value),
// then this lane's d. K is 8 (tf32, an element a register) or 16 (two a register).
template <int K, class Elem>
[[gnu::noinline]] inline void mma(float *d, const uint32_t *a, const uint32_t *b, const float *c, const char *name,
                                  Elem elem) {
  using namespace ::mr_emu::detail;
  const unsigned lane = (t_.tid.x + t_.bdim.x * (t_.tid.y + t_.bdim.y * t_.tid.z)) & 31u;
  unsigned char *x = ::mr_simt::warp_exchange();
  Regs mine;
  std::memcpy(mine.a, a, sizeof mine.a);
  std::memcpy(mine.b, b, sizeof mine.b);
  std::memcpy(mine.c, c, sizeof mine.c);
  std::memcpy(x + lane * ::mr_simt::kExchangeBytes, &mine, sizeof mine);
  warp_op(Op::Collective, name, 0xffffffffu, 0, 0, 32);
  float A[16 * K], B[K * 8], C[16 * 8], D[16 * 8];
  for (int l = 0; l < 32; ++l) {
    Regs r;
    std::memcpy(&r, x + l * ::mr_simt::kExchangeBytes, sizeof r);
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 4; ++i) {
      if (K == 8) {
        A[(g + 8 * (i & 1)) * K + t + 4 * (i >> 1)] = elem(r.a[i], 0);
      } else {
        for (int h = 0; h < 2; ++h) A[(g + 8 * (i & 1)) * K + 2 * t + 8 * (i >> 1) + h] = elem(r.a[i], h);
      }
      C[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = r.c[i];
    }
    for (int i = 0; i < 2; ++i) {
      if (K == 8) {
        B[(t + 4 * i) * 8 + g] = elem(r.b[i], 0);
      } else {
        for (int h = 0; h < 2; ++h) B[(2 * t + 8 * i + h) * 8 + g] = elem(r.b[i], h);
      }
    }
  }
  // No lane writes its slot again until every lane has read the others.
  warp_op(Op::Collective, name, 0xffffffffu, 0, 0, 32);
  ::mr_simt::mma_tile<16, 8, K>(D, A, B, C);
  const int g = static_cast<int>(lane) / 4, t = static_cast<int>(lane) % 4;
  for (int i = 0; i < 4; ++i) d[i] = D[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)];
}
}  // namespace detail

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 d, a, b, c (d may be c).
static inline void mma_m16n8k8_tf32(float *d, const uint32_t *a, const uint32_t *b, const float *c) {
  detail::mma<8>(d, a, b, c, "mma.sync.m16n8k8.tf32", [](uint32_t r, int) {
    return ::mr_emu::detail::from_bits<float>(r & 0xffffe000u);
  });
}
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 d, a, b, c (d may be c).
static inline void mma_m16n8k16_bf16(float *d, const uint32_t *a, const uint32_t *b, const float *c) {
  detail::mma<16>(d, a, b, c, "mma.sync.m16n8k16.bf16", [](uint32_t r, int h) {
    return ::mr_simt::bf16_to_f32(static_cast<unsigned short>(r >> (16 * h)));
  });
}
// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 d, a, b, c (d may be c).
static inline void mma_m16n8k16_f16(float *d, const uint32_t *a, const uint32_t *b, const float *c) {
  detail::mma<16>(d, a, b, c, "mma.sync.m16n8k16.f16", [](uint32_t r, int h) {
    return ::mr_simt::f16_to_f32(static_cast<unsigned short>(r >> (16 * h)));
  });
}
}  // namespace ptx
}  // namespace mr_emu

// ---------------------------------------------------------------------------------------------
// Host runtime API. Device memory is host memory; every call completes before it returns.
// ---------------------------------------------------------------------------------------------
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxBlockDimX = 2,
  cudaDevAttrMaxGridDimX = 5,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrWarpSize = 10,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97
};
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9
};
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin, sharedMemPerMultiprocessor;
  size_t totalConstMem;
  int regsPerBlock, warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
  int multiProcessorCount, maxThreadsPerMultiProcessor, major, minor, l2CacheSize;
  int concurrentKernels, asyncEngineCount, unifiedAddressing, managedMemory;
};

const char *cudaGetErrorName(cudaError_t e);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();

cudaError_t cudaMalloc(void **p, size_t n);
template <typename T>
static inline cudaError_t cudaMalloc(T **p, size_t n) {
  return cudaMalloc(reinterpret_cast<void **>(p), n);
}
cudaError_t cudaMallocHost(void **p, size_t n);
template <typename T>
static inline cudaError_t cudaMallocHost(T **p, size_t n) {
  return cudaMalloc(reinterpret_cast<void **>(p), n);
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned);
template <typename T>
static inline cudaError_t cudaMallocManaged(T **p, size_t n, unsigned = 1) {
  return cudaMalloc(reinterpret_cast<void **>(p), n);
}
cudaError_t cudaFree(void *p);
cudaError_t cudaFreeHost(void *p);

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t s = 0);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s = 0);
cudaError_t cudaMemset(void *p, int v, size_t n);
template <typename T>
static inline cudaError_t cudaGetSymbolAddress(void **p, const T &symbol) {
  *p = const_cast<void *>(static_cast<const void *>(&symbol));
  return cudaSuccess;
}
template <typename T>
static inline cudaError_t cudaMemcpyToSymbol(const T &symbol, const void *src, size_t n,
                                             size_t offset = 0,
                                             cudaMemcpyKind k = cudaMemcpyHostToDevice) {
  return cudaMemcpy(reinterpret_cast<char *>(const_cast<T *>(&symbol)) + offset, src, n, k);
}

cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceReset();
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d);
template <typename T>
static inline cudaError_t cudaFuncSetAttribute(T *, cudaFuncAttribute, int) { return cudaSuccess; }
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total);

// Events: host clock at the call (the stream has finished all earlier work by then).
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t);
cudaError_t cudaEventQuery(cudaEvent_t);
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);

// CUDA Graphs: a captured stream records its work as closures; a graph launch replays them.
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *st);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long = 0);
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long f = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e);
cudaError_t cudaGraphDestroy(cudaGraph_t g);

// ---------------------------------------------------------------------------------------------
// Kernel launch: mithril_cuda.h's MR_LAUNCH calls this with the stringified kernel name.
// ---------------------------------------------------------------------------------------------
template <typename... P, typename... A>
inline void mr_emu_launch(const char *name, void (*kernel)(P...), dim3 grid, dim3 block,
                          cudaStream_t stream, A... args) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with a wrong number of arguments");
  using B = ::mr_emu::detail::Bound<std::tuple<std::decay_t<P>...>, void (*)(P...)>;
  ::mr_emu::detail::launch(name, grid, block, stream, &B::invoke, new B{kernel, {args...}}, &B::drop);
}

#endif  // MITHRILC_CUDA_EMU_H
