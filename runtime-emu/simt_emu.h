// simt_emu.h: the target-neutral core of mithrilc's CPU emulation of GPU kernels, shared by
// runtime-cuda/cuda_emu.h (CUDA) and runtime-metal/metal_emu.h (Metal Shading Language).
//
// Kernels run on the CPU: thread blocks (Metal: threadgroups) are spread over a pool of host
// threads; inside a block, each GPU thread is a fiber with its own stack, and the fibers of a
// block run one at a time on one host thread, switching only at barriers (block barriers, warp /
// simd-group functions). That is a valid GPU schedule, so it tests the kernels' logic (results,
// barrier use), not their speed or their memory ordering.
//
// The API shims put their names on this machinery: a Launch carries an Api that says how the
// diagnostics name the target, the block barrier and the thread position, and each warp
// operation is given the name of the API function that reached it.
//
// This header is what every emulated translation unit reads: the types, the calls into the
// scheduler, and the small inline helpers kernels use. The scheduler itself (fibers, the
// context switch, the host-thread pool, barriers and warp operations) is simt_emu.cpp,
// compiled once per build and linked into every emulated program: its C++ library headers
// took more than half of each generated file's compile time when it was inline here.
#ifndef MITHRILC_SIMT_EMU_H
#define MITHRILC_SIMT_EMU_H

// System headers come first, and the API shims include this header before defining their
// qualifier macros (CUDA's __noinline__, Metal's thread / device / kernel), which must not be
// defined while these are read. Later includes of them are no-ops thanks to their guards.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace mr_simt {

struct Idx3 { unsigned x, y, z; };

// How diagnostics name things in the API that launched the kernel.
struct Api {
  const char *target;         // "CUDA": "mithrilc CUDA emulation: ..."
  const char *group;          // what a block is called: "block", "threadgroup"
  const char *barrier;        // the block barrier: "__syncthreads()"
  const char *collectives;    // warp operations: "warp primitives"
  bool one_d;                 // positions as "threadgroup 3, thread 5", not "(3,0,0)"
};

struct Launch {
  const char *name;
  Idx3 grid, block;
  void (*invoke)(const void *);
  const void *data;
  const Api *api;
};

// What a warp operation computes when its group completes. Collective is a barrier only (the
// callers then work on their own: matrix loads and multiplies).
enum class Op : unsigned char {
  Sync, Shfl, ShflUp, ShflDown, ShflXor, First, Ballot, Any, All, Reduce, ScanIncl, ScanExcl,
  Collective
};
// A reduction over the lanes' values (bit patterns of the caller's type), in lane order.
struct Fold {
  uint64_t (*fn)(uint64_t, uint64_t);
  uint64_t identity;  // for exclusive scans: the first lane's result
};

struct Worker;
struct Fiber;

// What the API's thread-position built-ins read. One block at a time per host thread, one fiber
// at a time per block: the scheduler stores the running fiber's thread index here at each switch.
// __thread, not thread_local: its initializer is constant, so every read is a plain TLS load
// (an extern thread_local is read through a wrapper call in case it is initialized dynamically).
struct Tls {
  Idx3 tid, bid, bdim, gdim;
  const Launch *launch;  // the running launch
  Worker *w;
  Fiber *f;
};
extern __thread Tls t_;

// MR_EMU_* settings: a positive number, with an optional k or m suffix; else dflt.
unsigned env_unsigned(const char *name, unsigned dflt);
// The host threads that run blocks: MR_EMU_THREADS, else the machine's.
unsigned host_threads();
// Runs every block of L on the host-thread pool; returns when all are done (one launch at a
// time, whatever the calling thread).
void launch(const Launch &L);
// The block barrier (called from kernels, on a fiber); returns the sum of the threads' pred
// (CUDA's __syncthreads_count).
int block_barrier(int pred);
// The calling lane reaches warp operation `name` with value v: waits until every lane of the
// group arrived and returns its result. `mask` names the lanes (CUDA's *_sync); live (mask
// ignored) takes the warp's lanes that have not exited, now and as they exit (Metal).
uint64_t warp_arrive(Op op, const char *name, uint32_t mask, bool live, uint64_t v, int arg,
                     int width, const Fold *fold);
// The lanes of the calling thread's warp that have not exited.
uint32_t live_lanes();
// The calling warp's exchange area: kExchangeBytes for each of its 32 lanes, in lane order
// (16-byte aligned). A collective that moves registers between lanes (mma.sync's fragments)
// has each lane write its own slot, meet the others at a warp barrier, read what it needs,
// and meet them again before any slot is written anew.
constexpr size_t kExchangeBytes = 64;
unsigned char *warp_exchange();
// Asynchronous copies into shared memory (CUDA's cp.async) on the calling lane. On a GPU a
// copy lands at some time between its issue and the wait that completes its group; the
// emulation takes one end. By default the latest: the source is read at once, but the bytes
// are written at that wait, so a kernel that reads a tile before waiting for it reads the
// tile's old contents. With MR_EMU_CP_ASYNC=early, the earliest: written at once, so a kernel
// that refills a tile other threads still read corrupts what they read. A copy of 4, 8 or 16
// bytes needs both addresses aligned to its size.
void async_copy(void *dst, const void *src, unsigned bytes);
// Closes the lane's open group of copies (cp.async.commit_group).
void async_commit();
// Writes every committed group but the `pending` most recent ones (cp.async.wait_group).
void async_wait(unsigned pending);
// Reports what went wrong in the running kernel at fiber f (null: the block) and aborts.
[[noreturn]] void fail(const char *what, const Fiber *f);

template <typename T>
inline uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                "warp shuffles take values of up to 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  return b;
}
template <typename T>
inline T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

// ---------------------------------------------------------------------------------------------
// 16-bit floats: IEEE binary16 and bfloat16 from and to float, round to nearest even,
// bit-exact with CUDA's conversions (NaN becomes the canonical 0x7fff).
// ---------------------------------------------------------------------------------------------
inline uint16_t f32_to_f16(float f) {
  const uint32_t x = from_bits<uint32_t>(to_bits(f));
  const uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  uint32_t h;
  if (a > 0x7f800000u) h = 0x7fffu;                      // NaN
  else if (a >= 0x477ff000u) h = sign | 0x7c00u;         // |f| >= 65520 (or inf): inf
  else if (a >= 0x38800000u) {                           // normal: rebias, round the 13 low bits
    const uint32_t r = a - 0x38000000u;
    h = sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
  } else {                                               // subnormal or zero: multiples of 2^-24
    h = sign | static_cast<uint32_t>(std::nearbyint(std::fabs(f) * 16777216.0f));
  }
  return static_cast<uint16_t>(h);
}
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3ffu;
  if (e == 0) {
    const float v = static_cast<float>(m) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return from_bits<float>(sign | (e == 31 ? (0xffu << 23 | m << 13) : ((e + 112u) << 23 | m << 13)));
}
inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = from_bits<uint32_t>(to_bits(f));
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
inline float bf16_to_f32(uint16_t b) { return from_bits<float>(static_cast<uint32_t>(b) << 16); }

// d = a b + c for float tiles (row-major, a M x K, b K x N), k in order per element, from c's
// value; d may alias c. Out of line: each tile type would otherwise get its own inlined,
// unrolled copy in every kernel (CUDA's test_kernels.cu build time tripled).
//
// Every lane of a warp (simdgroup) holds the whole tiles (the loads are collective), so the
// warp's 32 products are one: its lanes resume from the collective one after another on
// this OS thread, and a lane whose operands are bit for bit those of the product this
// thread computed last takes that result instead of computing it again (the products were
// four fifths of an emulated tensor-core model's time). Operands that differ in any bit are
// computed anew, so the result is always the lane's own.
template <int M, int N, int K>
[[gnu::noinline]] inline void mma_tile(float *d, const float *a, const float *b, const float *c) {
  // Zeroed at first, which is itself a product: +0 times +0 plus +0 is +0.
  static thread_local struct {
    float a[M * K], b[K * N], c[M * N], d[M * N];
  } last{};
  if (std::memcmp(last.a, a, sizeof last.a) || std::memcmp(last.b, b, sizeof last.b) ||
      std::memcmp(last.c, c, sizeof last.c)) {
    std::memcpy(last.a, a, sizeof last.a);
    std::memcpy(last.b, b, sizeof last.b);
    std::memcpy(last.c, c, sizeof last.c);
    for (int i = 0; i < M; ++i) {
      float acc[N];
      for (int j = 0; j < N; ++j) acc[j] = last.c[i * N + j];
      for (int kk = 0; kk < K; ++kk) {
        const float ai = last.a[i * K + kk];
        for (int j = 0; j < N; ++j) acc[j] += ai * last.b[kk * N + j];
      }
      for (int j = 0; j < N; ++j) last.d[i * N + j] = acc[j];
    }
  }
  std::memcpy(d, last.d, sizeof last.d);
}

}  // namespace mr_simt

#endif  // MITHRILC_SIMT_EMU_H
