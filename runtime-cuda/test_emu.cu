// test_emu.cu: checks cuda_emu.h (build with -DMR_CUDA_EMULATE as C++17; see Makefile). It is
// also valid CUDA, so `make nvcc-check` compiles it for sm_90.
//
//   test_emu                 run the checks, print timings, exit 0 when all pass
//   test_emu divergent|shfl-exited|deadlock|mismatch|mma-divergent|cp-async-unwaited|cp-async-misaligned
//                            run a faulty kernel: the emulation must abort with its message
//
// Built a second time with -DMR_EMU_SECOND_TU, it only defines second_tu_sum(): linking both
// objects checks that two translation units can include the header.
#if defined(MR_CUDA_EMULATE)
#include "cuda_emu.h"
#define MR_LAUNCH(kernel, grid, block, stream, ...) \
  mr_emu_launch(#kernel, kernel, grid, block, stream, __VA_ARGS__)
#else
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define MR_LAUNCH(kernel, grid, block, stream, ...) \
  kernel<<<grid, block, 0, stream>>>(__VA_ARGS__)
#endif
#include "mr_ptx.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(MR_EMU_SECOND_TU)
__global__ void second_tu_kernel(int *out, int64_t n) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    atomicAdd(out, static_cast<int>(i));
}

int second_tu_sum(int64_t n) {
  int *out;
  cudaMallocManaged(&out, sizeof(int));
  *out = 0;
  MR_LAUNCH(second_tu_kernel, dim3(3), dim3(64), 0, out, n);
  int r = *out;
  cudaFree(out);
  return r;
}
#else

int second_tu_sum(int64_t n);

static int g_failures = 0;
#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (!(cond)) {                                        \
      std::printf("FAIL %s:%d: ", __FILE__, __LINE__);    \
      std::printf(__VA_ARGS__);                           \
      std::printf("\n");                                  \
      ++g_failures;                                       \
    }                                                     \
  } while (0)

static double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// ---- kernels -------------------------------------------------------------------------------

__global__ void block_sum(const float *__restrict__ x, float *out, int64_t n) {
  __shared__ float warp_sums[32];
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  float v = i < n ? x[i] : 0.0f;
  for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffffu, v, d);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < blockDim.x / 32 ? warp_sums[threadIdx.x] : 0.0f;
    for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffffu, v, d);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
  }
}

#define TILE 32
__global__ void transpose(const float *in, float *out, int rows, int cols) {
  __shared__ float tile[TILE][TILE + 1];
  int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += blockDim.y)
    if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * cols + x];
  __syncthreads();
  x = blockIdx.y * TILE + threadIdx.x;
  y = blockIdx.x * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += blockDim.y)
    if (x < rows && y + j < cols) out[(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
}

__global__ void warp_ops(int *xor_sum, int *scan, unsigned *ballot, double *dshfl, long long *bcast) {
  int lane = threadIdx.x % 32, t = blockIdx.x * blockDim.x + threadIdx.x;
  int v = lane;
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  xor_sum[t] = v;
  int s = lane + 1;
  for (int d = 1; d < 32; d *= 2) {
    int u = __shfl_up_sync(0xffffffffu, s, d);
    if (lane >= d) s += u;
  }
  scan[t] = s;
  ballot[t] = __ballot_sync(0xffffffffu, lane % 3 == 0);
  dshfl[t] = __shfl_down_sync(0xffffffffu, 0.5 * lane, 1, 8);  // segments of 8 lanes
  bcast[t] = __shfl_sync(0xffffffffu, 1000000000000LL * lane, 7);
  // Two halves of the warp at the same primitive with disjoint masks.
  unsigned half = lane < 16 ? 0x0000ffffu : 0xffff0000u;
  if (__all_sync(half, 1) != 1 || __any_sync(half, lane == 20) != (lane >= 16)) scan[t] = -1;
  __syncwarp();
}

__global__ void atomics(int *ci, float *cf, double *cd, unsigned long long *cu, int *cmax) {
  atomicAdd(ci, 1);
  atomicAdd(cf, 1.0f);
  atomicAdd(cd, 0.5);
  atomicAdd(cu, 2ULL);
  atomicMax(cmax, static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x));
}

struct Affine { float a, b; };
__global__ void saxpy_grid_stride(Affine f, const float *x, float *y, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)
    y[i] = f.a * x[i] + f.b + y[i];
}

template <int Scale>
__global__ void scale_kernel(const float *__restrict__ x, float *__restrict__ y, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = Scale * x[i];
}

__global__ void add_one(float *x, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}

// Intrinsics and CUDA's min/max overloads (mixed signed/unsigned included).
__global__ void intrinsics(float *f, int *i, int n, int64_t m) {
  unsigned t = threadIdx.x;
  i[0] = static_cast<int>(min(t, n) + max(m, static_cast<int64_t>(7)) + min(3, n));
  i[1] = __popc(0xf0u) + __clz(1) + __ffs(8) + __float_as_int(1.0f) - 0x3f800000;
  f[0] = __expf(0.0f) + __fdividef(1.0f, 4.0f) + rsqrtf(16.0f) + __int_as_float(0x40000000) +
         __fmaf_rn(2.0f, 3.0f, 1.0f) + max(0.5f, -1.0f) + __ldg(f + 1);
}

__device__ int g_table[64];
__global__ void fill_table(int k) { g_table[threadIdx.x] = k * static_cast<int>(threadIdx.x); }

__global__ void many_barriers(int *out, int iters) {
  __shared__ int s;
  if (threadIdx.x == 0) s = 0;
  __syncthreads();
  for (int i = 0; i < iters; ++i) {
    if (threadIdx.x == static_cast<unsigned>(i) % blockDim.x) ++s;
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = s;
}

__global__ void empty_kernel(int) {}

// 64x64 output tile per block, 256 threads each computing 4x4, K-steps of 16 through shared
// memory with two __syncthreads() each: the shape of mithrilc's GEMM kernel.
// M is a multiple of 64: the grid covers it exactly.
__global__ void gemm64(const float *__restrict__ A, const float *__restrict__ B, float *C, int N,
                       int K) {
  __shared__ float As[16][64], Bs[16][64];
  int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  int row0 = blockIdx.y * 64, col0 = blockIdx.x * 64;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += 16) {
    for (int e = threadIdx.x; e < 16 * 64; e += 256) {
      int kk = e / 64, mm = e % 64;
      As[kk][mm] = A[(row0 + mm) * K + k0 + kk];
      Bs[kk][mm] = B[(k0 + kk) * N + col0 + mm];
    }
    __syncthreads();
    for (int kk = 0; kk < 16; ++kk)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] += As[kk][ty * 4 + i] * Bs[kk][tx * 4 + j];
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) C[(row0 + ty * 4 + i) * N + col0 + tx * 4 + j] = acc[i][j];
}

// Faulty kernels, for the abort checks.
__global__ void divergent(int *out) {
  if (threadIdx.x < 5) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}
__global__ void shfl_exited(int *out) {
  if (threadIdx.x == 3) return;
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}
__global__ void deadlock(int *out) {
  if (threadIdx.x == 0)
    __syncthreads();
  else
    __syncwarp();
  out[threadIdx.x] = 1;
}
__global__ void mismatch(int *out) {
  int v = static_cast<int>(threadIdx.x);
  if (threadIdx.x % 2)
    v = __shfl_xor_sync(0xffffffffu, v, 1);
  else
    v = static_cast<int>(__ballot_sync(0xffffffffu, v));
  out[threadIdx.x] = v;
}


// mma.sync: d = a b + c on a 16 x 8 tile, the registers laid out by the PTX ISA's fragments
// (cuda_emu.h): mr_ptx.h's inline PTX on a GPU, the emulation's functions here.
enum MmaKind { TF32, BF16, F16 };
static __device__ void mma(MmaKind kind, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if (kind == TF32) mr_mma_tf32(d, a, b);
  else if (kind == BF16) mr_mma_bf16(d, a, b);
  else mr_mma_f16(d, a, b);
}
static __device__ uint32_t pack(MmaKind kind, float lo, float hi) {
  if (kind == BF16)
    return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
           static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16;
  return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(lo))) |
         static_cast<uint32_t>(__half_as_ushort(__float2half_rn(hi))) << 16;
}

// One warp, three products: a is row-major 16 x K (K = 8 for tf32, 16 for bf16 and f16), b
// row-major K x 8, c and each d row-major 16 x 8; each lane loads the elements its registers
// hold, the operands rounded as it does.
__global__ void mma_products(const float *a, const float *b, const float *c, float *d) {
  const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
  const MmaKind kinds[3] = {TF32, BF16, F16};
  for (int p = 0; p < 3; ++p) {
    const MmaKind kind = kinds[p];
    const int K = kind == TF32 ? 8 : 16;
    uint32_t ra[4], rb[2];
    float rd[4];
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i & 1);
      if (kind == TF32) {
        ra[i] = mr_tf32_bits(a[row * K + t + 4 * (i >> 1)]);
      } else {
        const int col = 2 * t + 8 * (i >> 1);
        ra[i] = pack(kind, a[row * K + col], a[row * K + col + 1]);
      }
      rd[i] = c[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)];
    }
    for (int i = 0; i < 2; ++i) {
      if (kind == TF32) {
        rb[i] = mr_tf32_bits(b[(t + 4 * i) * 8 + g]);
      } else {
        const int k = 2 * t + 8 * i;
        rb[i] = pack(kind, b[k * 8 + g], b[(k + 1) * 8 + g]);
      }
    }
    mma(kind, rd, ra, rb);
    for (int i = 0; i < 4; ++i) d[p * 128 + (g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = rd[i];
  }
}

// The conversions, each value rounded to tf32, bf16 and f16 and back to float.
__global__ void conversions(const float *in, int n, float *tf, float *bf, float *hf) {
  const int i = static_cast<int>(threadIdx.x);
  if (i < n) {
    tf[i] = __uint_as_float(mr_tf32_bits(in[i]));
    bf[i] = __bfloat162float(__float2bfloat16_rn(in[i]));
    hf[i] = __half2float(__float2half_rn(in[i]));
  }
}

// Faulty mma use: half the warp skips it (divergence).
__global__ void mma_divergent(float *out) {
  float d[4] = {0, 0, 0, 0};
  const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  if (threadIdx.x < 16) mma(F16, d, a, b);
  out[threadIdx.x] = d[0];
}

// cp.async: each of 32 threads copies 16 bytes (group 0) and then 4 bytes (group 1) of src into
// shared memory and reads them back at each step into out (4 + 1 floats a step, 3 steps):
// before any wait, after cp.async.wait_group 1 (group 0 must have landed) and after
// wait_group 0 (both). The shared tiles start as -1, so a copy that has not landed reads -1.
struct alignas(16) Floats129 { float v[32 * 4 + 1]; };
__global__ void cp_async_groups(const float *src, float *out) {
  __shared__ Floats129 tile;
  __shared__ float one[32];
  float *four = tile.v;
  const int i = static_cast<int>(threadIdx.x);
  for (int e = 0; e < 4; ++e) four[4 * i + e] = -1.0f;
  one[i] = -1.0f;
  mr_cp_async<16>(&four[4 * i], src + 4 * i);
  mr_cp_async_commit();
  mr_cp_async<4>(&one[i], src + 128 + i);
  mr_cp_async_commit();
  float *o = out + 15 * i;
  for (int e = 0; e < 4; ++e) o[e] = four[4 * i + e];
  o[4] = one[i];
  mr_cp_async_wait<1>();
  for (int e = 0; e < 4; ++e) o[5 + e] = four[4 * i + e];
  o[9] = one[i];
  mr_cp_async_wait<0>();
  for (int e = 0; e < 4; ++e) o[10 + e] = four[4 * i + e];
  o[14] = one[i];
}

// Faulty cp.async use: a copy no wait completes before the thread exits; a misaligned copy.
__global__ void cp_async_unwaited(float *out) {
  __shared__ Floats129 tile;
  mr_cp_async<16>(&tile.v[4 * threadIdx.x], out + 4 * threadIdx.x);
  mr_cp_async_commit();
}
__global__ void cp_async_misaligned(float *out) {
  __shared__ Floats129 tile;
  mr_cp_async<16>(&tile.v[4 * threadIdx.x + 1], out + 4 * threadIdx.x);
  mr_cp_async_commit();
  mr_cp_async_wait<0>();
}

// ---- host ----------------------------------------------------------------------------------

static int run_faulty(const char *which) {
  int *out;
  cudaMalloc(&out, 1024 * sizeof(int));
  if (!std::strcmp(which, "divergent"))
    MR_LAUNCH(divergent, dim3(2), dim3(64), 0, out);
  else if (!std::strcmp(which, "shfl-exited"))
    MR_LAUNCH(shfl_exited, dim3(1), dim3(32), 0, out);
  else if (!std::strcmp(which, "deadlock"))
    MR_LAUNCH(deadlock, dim3(1), dim3(32), 0, out);
  else if (!std::strcmp(which, "mismatch"))
    MR_LAUNCH(mismatch, dim3(1), dim3(32), 0, out);
  else if (!std::strcmp(which, "mma-divergent"))
    MR_LAUNCH(mma_divergent, dim3(1), dim3(32), 0, reinterpret_cast<float *>(out));
  else if (!std::strcmp(which, "cp-async-unwaited"))
    MR_LAUNCH(cp_async_unwaited, dim3(1), dim3(32), 0, reinterpret_cast<float *>(out));
  else if (!std::strcmp(which, "cp-async-misaligned"))
    MR_LAUNCH(cp_async_misaligned, dim3(1), dim3(32), 0, reinterpret_cast<float *>(out));
  else {
    std::fprintf(stderr, "unknown fault %s\n", which);
    return 2;
  }
  cudaDeviceSynchronize();
  std::printf("faulty kernel %s ran to its end\n", which);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1) return run_faulty(argv[1]);

  // mma products against the products of the rounded operands in double (the products
  // are exact in f32, so only the f32 accumulation differs: 1e-6 of the sum of |terms|).
  {
    std::vector<float> ha(256), hb(128), hc(128);
    for (int i = 0; i < 256; ++i) ha[i] = std::sin(0.7f * static_cast<float>(i)) * 1.37f;
    for (int i = 0; i < 128; ++i) hb[i] = std::cos(0.3f * static_cast<float>(i)) * 0.91f;
    for (int i = 0; i < 128; ++i) hc[i] = static_cast<float>(i % 9) - 4.0f;
    float *a, *b, *c, *d;
    cudaMalloc(&a, 256 * sizeof(float));
    cudaMalloc(&b, 128 * sizeof(float));
    cudaMalloc(&c, 128 * sizeof(float));
    cudaMalloc(&d, 384 * sizeof(float));
    cudaMemcpy(a, ha.data(), 256 * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb.data(), 128 * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(c, hc.data(), 128 * sizeof(float), cudaMemcpyHostToDevice);
    MR_LAUNCH(mma_products, dim3(1), dim3(32), 0, a, b, c, d);
    std::vector<float> hd(384);
    cudaMemcpy(hd.data(), d, 384 * sizeof(float), cudaMemcpyDeviceToHost);
    auto tf32 = [](float v) {  // cvt.rna.tf32.f32 (finite values)
      uint32_t x;
      std::memcpy(&x, &v, 4);
      x = (x + 0x1000u) & 0xffffe000u;
      std::memcpy(&v, &x, 4);
      return static_cast<double>(v);
    };
    auto bf = [](float v) { return static_cast<double>(__bfloat162float(__float2bfloat16_rn(v))); };
    auto hf = [](float v) { return static_cast<double>(__half2float(__float2half_rn(v))); };
    int bad = 0;
    for (int p = 0; p < 3; ++p) {
      const int K = p == 0 ? 8 : 16;
      for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 8; ++j) {
          double s = hc[i * 8 + j], sa = std::fabs(s);
          for (int k = 0; k < K; ++k) {
            const float x = ha[i * K + k], y = hb[k * 8 + j];
            const double q = p == 0 ? tf32(x) * tf32(y) : p == 1 ? bf(x) * bf(y) : hf(x) * hf(y);
            s += q, sa += std::fabs(q);
          }
          bad += std::fabs(hd[p * 128 + i * 8 + j] - s) > 1e-6 * sa;
        }
    }
    // ... and not the unrounded products (the rounding did happen): tf32 element (0, 0)
    double exact = hc[0];
    for (int k = 0; k < 8; ++k) exact += static_cast<double>(ha[k]) * hb[k * 8];
    CHECK(bad == 0 && std::fabs(hd[0] - exact) > 1e-6, "mma: %d wrong elements (tf32 (0,0) %.9g, exact %.9g)", bad,
          static_cast<double>(hd[0]), exact);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cudaFree(d);
  }

  // cp.async groups: each wait lands what it must. Under emulation copies land at the
  // wait that completes their group (the default), so before it the tiles still read -1;
  // on a GPU they may land any time before.
  {
    std::vector<float> hs(160), ho(32 * 15);
    for (int i = 0; i < 160; ++i) hs[i] = static_cast<float>(i) + 0.5f;
    float *src, *out;
    cudaMalloc(&src, 160 * sizeof(float));
    cudaMalloc(&out, 32 * 15 * sizeof(float));
    cudaMemcpy(src, hs.data(), 160 * sizeof(float), cudaMemcpyHostToDevice);
    MR_LAUNCH(cp_async_groups, dim3(1), dim3(32), 0, src, out);
    cudaMemcpy(ho.data(), out, 32 * 15 * sizeof(float), cudaMemcpyDeviceToHost);
    int bad = 0;
    const bool late = !std::getenv("MR_EMU_CP_ASYNC");
    for (int i = 0; i < 32; ++i) {
      const float *o = &ho[15 * i];
      for (int e = 0; e < 4; ++e) {
        const float want = hs[4 * i + e];
        bad += o[5 + e] != want || o[10 + e] != want;
#if defined(MR_CUDA_EMULATE)
        bad += late && o[e] != -1.0f;
#endif
      }
      bad += o[14] != hs[128 + i] || (o[9] != -1.0f && o[9] != hs[128 + i]);
#if defined(MR_CUDA_EMULATE)
      bad += late && (o[4] != -1.0f || o[9] != -1.0f);
#endif
    }
    CHECK(bad == 0 && cudaGetLastError() == cudaSuccess, "cp.async: %d wrong reads", bad);
    cudaFree(src);
    cudaFree(out);
  }

  // Conversions: ties (tf32 away from zero, bf16 and f16 to even), f16 overflow and
  // subnormals, signed zero, inf, NaN.
  {
    const float inf = INFINITY, p11 = std::ldexp(1.0f, -11), p10 = std::ldexp(1.0f, -10), p9 = std::ldexp(1.0f, -9),
                p8 = std::ldexp(1.0f, -8), p6 = std::ldexp(1.0f, -6), p24 = std::ldexp(1.0f, -24),
                p25 = std::ldexp(1.0f, -25);
    struct Case { float in, tf, bf, hf; };
    const Case cases[] = {
        {1.0f, 1.0f, 1.0f, 1.0f},
        {1 + p11, 1 + p10, 1.0f, 1.0f},                // a tie for tf32 and f16
        {1 + 3 * p11, 1 + p9, 1.0f, 1 + p9},           // tf32 away, f16 to even
        {-(1 + p11), -(1 + p10), -1.0f, -1.0f},
        {1 + p8, 1 + p8, 1.0f, 1 + p8},                // a tie for bf16: to even
        {1 + 3 * p8, 1 + 3 * p8, 1 + p6, 1 + 3 * p8},  // bf16 tie to even (up)
        {65504.0f, 65504.0f, 65536.0f, 65504.0f},
        {65519.0f, 65504.0f, 65536.0f, 65504.0f},
        {65520.0f, 65536.0f, 65536.0f, inf},           // f16: past its largest, to inf
        {-1e6f, -999936.0f, -999424.0f, -inf},
        {p24, p24, p24, p24},                          // f16's smallest subnormal
        {p25, p25, p25, 0.0f},                         // its half: a tie, to even (0)
        {3 * p25 / 2, 3 * p25 / 2, 3 * p25 / 2, p24},
        {-0.0f, -0.0f, -0.0f, -0.0f},
        {inf, inf, inf, inf},
        {NAN, NAN, NAN, NAN},
    };
    const int n = static_cast<int>(sizeof cases / sizeof cases[0]);
    std::vector<float> hin(n);
    for (int i = 0; i < n; ++i) hin[i] = cases[i].in;
    float *in, *out;
    cudaMalloc(&in, n * sizeof(float));
    cudaMalloc(&out, 3 * n * sizeof(float));
    cudaMemcpy(in, hin.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    MR_LAUNCH(conversions, dim3(1), dim3(32), 0, in, n, out, out + n, out + 2 * n);
    std::vector<float> h(3 * n);
    cudaMemcpy(h.data(), out, 3 * n * sizeof(float), cudaMemcpyDeviceToHost);
    auto same = [](float got, float want) {
      return std::isnan(want) ? std::isnan(got) : got == want && std::signbit(got) == std::signbit(want);
    };
    int bad = 0;
    for (int i = 0; i < n; ++i) {
      const bool ok = same(h[i], cases[i].tf) && same(h[n + i], cases[i].bf) && same(h[2 * n + i], cases[i].hf);
      if (!ok)
        std::printf("conversion of %.9g: tf32 %.9g (want %.9g), bf16 %.9g (%.9g), f16 %.9g (%.9g)\n",
                    static_cast<double>(cases[i].in), static_cast<double>(h[i]), static_cast<double>(cases[i].tf),
                    static_cast<double>(h[n + i]), static_cast<double>(cases[i].bf),
                    static_cast<double>(h[2 * n + i]), static_cast<double>(cases[i].hf));
      bad += !ok;
    }
    CHECK(bad == 0, "tf32/bf16/f16 conversions: %d wrong", bad);
    cudaFree(in);
    cudaFree(out);
  }

  // Block reduction over 1000 blocks.
  {
    const int64_t n = 1000 * 256 - 77;
    std::vector<float> hx(n);
    for (int64_t i = 0; i < n; ++i) hx[i] = static_cast<float>(i % 7 - 3);
    float *x, *out;
    cudaMalloc(&x, n * sizeof(float));
    cudaMalloc(&out, 1000 * sizeof(float));
    cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    MR_LAUNCH(block_sum, dim3(1000), dim3(256), 0, x, out, n);
    std::vector<float> hout(1000);
    cudaMemcpy(hout.data(), out, 1000 * sizeof(float), cudaMemcpyDeviceToHost);
    double total = 0, expect = 0;
    for (float v : hout) total += v;
    for (float v : hx) expect += v;
    int bad = 0;
    for (int b = 0; b < 1000; ++b) {
      float e = 0;
      for (int64_t i = b * 256; i < std::min<int64_t>(n, (b + 1) * 256); ++i) e += hx[i];
      bad += hout[b] != e;
    }
    CHECK(bad == 0 && total == expect, "block_sum: %d bad blocks, %f vs %f", bad, total, expect);
    cudaFree(x);
    cudaFree(out);
  }

  // Tiled transpose through shared memory.
  {
    const int rows = 100, cols = 70;
    std::vector<float> h(rows * cols), t(rows * cols);
    for (int i = 0; i < rows * cols; ++i) h[i] = static_cast<float>(i);
    float *in, *out;
    cudaMalloc(&in, h.size() * sizeof(float));
    cudaMalloc(&out, h.size() * sizeof(float));
    cudaMemcpy(in, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice);
    MR_LAUNCH(transpose, dim3((cols + TILE - 1) / TILE, (rows + TILE - 1) / TILE), dim3(TILE, 8), 0,
              in, out, rows, cols);
    cudaMemcpy(t.data(), out, h.size() * sizeof(float), cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) bad += t[c * rows + r] != h[r * cols + c];
    CHECK(bad == 0, "transpose: %d wrong elements", bad);
    cudaFree(in);
    cudaFree(out);
  }

  // Warp primitives.
  {
    const int n = 4 * 64;
    int *xs, *scan;
    unsigned *ballot;
    double *dshfl;
    long long *bcast;
    cudaMallocManaged(&xs, n * sizeof(int));
    cudaMallocManaged(&scan, n * sizeof(int));
    cudaMallocManaged(&ballot, n * sizeof(unsigned));
    cudaMallocManaged(&dshfl, n * sizeof(double));
    cudaMallocManaged(&bcast, n * sizeof(long long));
    MR_LAUNCH(warp_ops, dim3(4), dim3(64), 0, xs, scan, ballot, dshfl, bcast);
    cudaDeviceSynchronize();
    unsigned want_ballot = 0;
    for (int l = 0; l < 32; l += 3) want_ballot |= 1u << l;
    int bad = 0;
    for (int t = 0; t < n; ++t) {
      int l = t % 32;
      double want_d = (l % 8) < 7 ? 0.5 * (l + 1) : 0.5 * l;
      bad += xs[t] != 496 || scan[t] != (l + 1) * (l + 2) / 2 || ballot[t] != want_ballot ||
             dshfl[t] != want_d || bcast[t] != 7000000000000LL;
    }
    CHECK(bad == 0, "warp primitives: %d wrong lanes", bad);
    cudaFree(xs);
    cudaFree(scan);
    cudaFree(ballot);
    cudaFree(dshfl);
    cudaFree(bcast);
  }

  // Atomics from many blocks (running on several host threads).
  {
    int *ci, *cmax;
    float *cf;
    double *cd;
    unsigned long long *cu;
    cudaMallocManaged(&ci, sizeof(int));
    cudaMallocManaged(&cmax, sizeof(int));
    cudaMallocManaged(&cf, sizeof(float));
    cudaMallocManaged(&cd, sizeof(double));
    cudaMallocManaged(&cu, sizeof(unsigned long long));
    *ci = 0;
    *cmax = -1;
    *cf = 0;
    *cd = 0;
    *cu = 0;
    MR_LAUNCH(atomics, dim3(512), dim3(128), 0, ci, cf, cd, cu, cmax);
    cudaDeviceSynchronize();
    CHECK(*ci == 65536 && *cf == 65536.0f && *cd == 32768.0 && *cu == 131072ULL && *cmax == 65535,
          "atomics: %d %f %f %llu %d", *ci, *cf, *cd, *cu, *cmax);
    cudaFree(ci);
    cudaFree(cmax);
    cudaFree(cf);
    cudaFree(cd);
    cudaFree(cu);
  }

  // Grid-stride loop, a struct argument, cudaMemset; a template kernel through MR_LAUNCH.
  {
    const int64_t n = 100003;
    float *x, *y, *z;
    cudaMalloc(&x, n * sizeof(float));
    cudaMalloc(&y, n * sizeof(float));
    cudaMalloc(&z, n * sizeof(float));
    std::vector<float> h(n);
    for (int64_t i = 0; i < n; ++i) h[i] = static_cast<float>(i % 1000);
    cudaMemcpy(x, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemset(y, 0, n * sizeof(float));
    MR_LAUNCH(saxpy_grid_stride, dim3(7), dim3(128), 0, Affine{2.0f, 1.0f}, x, y, n);
    MR_LAUNCH(scale_kernel<3>, dim3((n + 255) / 256), dim3(256), 0, y, z, n);
    cudaMemcpy(h.data(), z, n * sizeof(float), cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) bad += h[i] != 3.0f * (2.0f * static_cast<float>(i % 1000) + 1.0f);
    CHECK(bad == 0, "grid-stride/template: %d wrong elements", bad);
    cudaFree(x);
    cudaFree(y);
    cudaFree(z);
  }

  // Stream capture into a graph, replayed twice.
  {
    const int64_t n = 5000;
    float *x, *host;
    cudaMalloc(&x, n * sizeof(float));
    cudaMallocHost(&host, n * sizeof(float));
    for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>(i);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaMemset(x, 0, n * sizeof(float));
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin capture");
    cudaStreamIsCapturing(s, &st);
    cudaMemcpyAsync(x, host, n * sizeof(float), cudaMemcpyHostToDevice, s);
    MR_LAUNCH(add_one, dim3((n + 127) / 128), dim3(128), s, x, n);
    MR_LAUNCH(add_one, dim3((n + 127) / 128), dim3(128), s, x, n);
    cudaMemcpyAsync(host, x, n * sizeof(float), cudaMemcpyDeviceToHost, s);
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamEndCapture(s, &graph) == cudaSuccess, "end capture");
    CHECK(st == cudaStreamCaptureStatusActive, "cudaStreamIsCapturing said %d", static_cast<int>(st));
    CHECK(host[10] == 10.0f, "captured work ran at capture: %f", host[10]);
    cudaGraphExec_t exec = nullptr;
    CHECK(cudaGraphInstantiate(&exec, graph, 0ULL) == cudaSuccess, "instantiate");
    for (int rep = 0; rep < 2; ++rep) cudaGraphLaunch(exec, s);
    cudaStreamSynchronize(s);
    CHECK(host[10] == 14.0f && host[n - 1] == static_cast<float>(n - 1 + 4),
          "graph replays: %f %f", host[10], host[n - 1]);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
    cudaFree(x);
    cudaFreeHost(host);
  }

  {
    float *f;
    int *i;
    cudaMallocManaged(&f, 2 * sizeof(float));
    cudaMallocManaged(&i, 2 * sizeof(int));
    f[1] = 0.125f;
    MR_LAUNCH(intrinsics, dim3(1), dim3(1), 0, f, i, 10, static_cast<int64_t>(5));
    cudaDeviceSynchronize();
    CHECK(i[0] == 10 && i[1] == 4 + 31 + 4 && f[0] == 1.0f + 0.25f + 0.25f + 2.0f + 7.0f + 0.5f + 0.125f,
          "intrinsics: %d %d %f", i[0], i[1], f[0]);
    cudaFree(f);
    cudaFree(i);
  }

  // A __device__ array through cudaGetSymbolAddress.
  {
    MR_LAUNCH(fill_table, dim3(1), dim3(64), 0, 5);
    void *p = nullptr;
    CHECK(cudaGetSymbolAddress(&p, g_table) == cudaSuccess, "cudaGetSymbolAddress");
    int h[64];
    cudaMemcpy(h, p, sizeof h, cudaMemcpyDeviceToHost);
    CHECK(h[0] == 0 && h[63] == 315, "g_table: %d %d", h[0], h[63]);
  }

  // Launch validation, the last error, the device properties; a second translation unit.
  {
    int *dummy;
    cudaMalloc(&dummy, 4);
    MR_LAUNCH(empty_kernel, dim3(1), dim3(2048), 0, 0);
    cudaError_t e = cudaGetLastError();
    CHECK(e == cudaErrorInvalidConfiguration, "block of 2048 threads gave %s", cudaGetErrorName(e));
    CHECK(cudaGetLastError() == cudaSuccess, "last error not reset");
    MR_LAUNCH(empty_kernel, dim3(0), dim3(32), 0, 0);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "empty grid accepted");
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    CHECK(prop.warpSize == 32 && sms == prop.multiProcessorCount && sms > 0, "properties");
    CHECK(second_tu_sum(1000) == 499500, "second translation unit");
    cudaFree(dummy);
  }

  // Timings (not meaningful for a GPU; they size the emulation's cost).
  {
    int *out;
    cudaMallocManaged(&out, sizeof(int));
    const int iters = 2000, threads = 256;
    auto t0 = std::chrono::steady_clock::now();
    MR_LAUNCH(many_barriers, dim3(1), dim3(threads), 0, out, iters);
    cudaDeviceSynchronize();
    double s_bar = seconds_since(t0);
    CHECK(*out == iters, "many_barriers: %d", *out);
    // A thread at a barrier switches straight to the next ready one: one switch per thread and
    // barrier (the last to arrive runs on; each pass starts with one from the scheduler).
    double switches = double(threads) * (iters + 1);
    const int blocks = 2048;
    t0 = std::chrono::steady_clock::now();
    MR_LAUNCH(empty_kernel, dim3(blocks), dim3(threads), 0, 0);
    cudaDeviceSynchronize();
    double s_empty = seconds_since(t0);

    const int M = 512, N = 512, K = 512;
    std::vector<float> ha(M * K), hb(K * N), hc(M * N);
    for (int i = 0; i < M * K; ++i) ha[i] = static_cast<float>(i % 13) - 6.0f;
    for (int i = 0; i < K * N; ++i) hb[i] = static_cast<float>(i % 7) - 3.0f;
    float *a, *b, *c;
    cudaMalloc(&a, ha.size() * sizeof(float));
    cudaMalloc(&b, hb.size() * sizeof(float));
    cudaMalloc(&c, hc.size() * sizeof(float));
    cudaMemcpy(a, ha.data(), ha.size() * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb.data(), hb.size() * sizeof(float), cudaMemcpyHostToDevice);
    t0 = std::chrono::steady_clock::now();
    MR_LAUNCH(gemm64, dim3(N / 64, M / 64), dim3(256), 0, a, b, c, N, K);
    cudaDeviceSynchronize();
    double s_gemm = seconds_since(t0);
    cudaMemcpy(hc.data(), c, hc.size() * sizeof(float), cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < M; i += 37)
      for (int j = 0; j < N; ++j) {
        float e = 0;
        for (int k = 0; k < K; ++k) e += ha[i * K + k] * hb[k * N + j];
        bad += hc[i * N + j] != e;
      }
    CHECK(bad == 0, "gemm64: %d wrong elements", bad);
#if defined(MR_CUDA_EMULATE)
    const unsigned workers = mr_emu::detail::host_threads();
#else
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    const unsigned workers = (unsigned)prop.multiProcessorCount;
#endif
    std::printf("timing (%u host threads): fiber switch (a thread through __syncthreads()) %.1f ns; empty thread start+finish %.1f ns; "
                "gemm64 %dx%dx%d %.2f GFLOP/s\n",
                workers, 1e9 * s_bar / switches,
                1e9 * s_empty / (double(blocks) * threads), M, N, K,
                2.0 * M * N * K / s_gemm / 1e9);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cudaFree(out);
  }

  if (g_failures) {
    std::printf("test_emu: %d check(s) failed\n", g_failures);
    return 1;
  }
  std::printf("test_emu: all checks passed\n");
  return 0;
}
#endif  // MR_EMU_SECOND_TU
