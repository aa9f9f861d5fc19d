// cuda_emu.cpp: the state behind cuda_emu.h's CUDA runtime API (streams and their captures,
// graphs, events, the last error) and its kernel launches, which run on simt_emu.cpp's
// scheduler. Compiled once per build (make's cuda_emu.o, kept in mithrilc's build cache) and
// linked into every emulated CUDA program.
//
// The C++ library first: cuda_emu.h defines qualifier macros (__noinline__) that its headers
// must not see.
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>
#include <unistd.h>

#include "cuda_emu.h"

struct CUgraph_st { std::vector<std::function<void()>> nodes; };
struct CUgraphExec_st { std::vector<std::function<void()>> nodes; };

// Streams are in order and every operation runs to completion at its call, so a stream only
// carries its capture state.
struct CUstream_st {
  bool capturing = false;
  bool invalidated = false;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  CUgraph_st *graph = nullptr;
};

struct CUevent_st { std::chrono::steady_clock::time_point t; bool recorded = false; };

namespace mr_emu {
namespace detail {
using namespace ::mr_simt;

// How the core's diagnostics name CUDA's things.
static constexpr Api kCuda{"CUDA", "block", "__syncthreads()", "warp primitives", false};

// The last error is per host thread, as in the CUDA runtime.
static thread_local cudaError_t t_last_error = cudaSuccess;
static cudaError_t set_error(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

// Number of stream captures in Global or ThreadLocal mode: while one runs, calls that would
// synchronize implicitly (cudaMalloc, cudaMemcpy, legacy-stream work) are refused, as by CUDA.
static std::atomic<int> g_strict_captures{0};

// The real stream object behind a user-visible handle (the null and legacy handles share one).
static CUstream_st *stream_obj(cudaStream_t s) {
  static CUstream_st legacy;
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return &legacy;
  return s;
}
static bool is_legacy(cudaStream_t s) { return s == nullptr || s == cudaStreamLegacy; }

// Records op into s's graph when s captures (true), or says to run it now (false). Work on the
// legacy stream while a strict capture runs invalidates the capture, as in CUDA.
static bool capture(cudaStream_t s, std::function<void()> op, cudaError_t *err) {
  *err = cudaSuccess;
  CUstream_st *st = stream_obj(s);
  if (st->capturing) {
    st->graph->nodes.push_back(std::move(op));
    return true;
  }
  if (is_legacy(s) && g_strict_captures.load(std::memory_order_relaxed) > 0) {
    *err = set_error(cudaErrorStreamCaptureImplicit);
    return true;
  }
  return false;
}

static cudaError_t validate(dim3 g, dim3 b) {
  uint64_t threads = uint64_t(b.x) * b.y * b.z;
  if (threads == 0 || threads > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64 || g.x == 0 ||
      g.y == 0 || g.z == 0 || g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535)
    return cudaErrorInvalidConfiguration;
  return cudaSuccess;
}

static std::chrono::steady_clock::time_point now() { return std::chrono::steady_clock::now(); }

void launch(const char *name, dim3 grid, dim3 block, cudaStream_t s, void (*invoke)(const void *),
            void *args, void (*drop)(void *)) {
  // Shared: a graph's instantiations copy their nodes.
  std::shared_ptr<void> held(args, drop);
  if (cudaError_t e = validate(grid, block)) {
    set_error(e);
    if (stream_obj(s)->capturing) stream_obj(s)->invalidated = true;
    return;
  }
  auto run = [name, grid, block, invoke, held] {
    ::mr_simt::launch(Launch{name, grid, block, invoke, held.get(), &kCuda});
  };
  cudaError_t e;
  if (capture(s, run, &e)) return;
  run();
}

}  // namespace detail
}  // namespace mr_emu

const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
#define MR_EMU_E(x) case x: return #x;
    MR_EMU_E(cudaSuccess) MR_EMU_E(cudaErrorInvalidValue) MR_EMU_E(cudaErrorMemoryAllocation)
    MR_EMU_E(cudaErrorInitializationError) MR_EMU_E(cudaErrorCudartUnloading)
    MR_EMU_E(cudaErrorInvalidConfiguration) MR_EMU_E(cudaErrorInvalidPitchValue)
    MR_EMU_E(cudaErrorInvalidSymbol) MR_EMU_E(cudaErrorInvalidMemcpyDirection)
    MR_EMU_E(cudaErrorInsufficientDriver) MR_EMU_E(cudaErrorInvalidDeviceFunction)
    MR_EMU_E(cudaErrorNoDevice) MR_EMU_E(cudaErrorInvalidDevice)
    MR_EMU_E(cudaErrorInvalidResourceHandle) MR_EMU_E(cudaErrorIllegalState)
    MR_EMU_E(cudaErrorNotReady) MR_EMU_E(cudaErrorIllegalAddress)
    MR_EMU_E(cudaErrorLaunchOutOfResources) MR_EMU_E(cudaErrorLaunchTimeout)
    MR_EMU_E(cudaErrorLaunchFailure) MR_EMU_E(cudaErrorNotSupported)
    MR_EMU_E(cudaErrorStreamCaptureUnsupported) MR_EMU_E(cudaErrorStreamCaptureInvalidated)
    MR_EMU_E(cudaErrorStreamCaptureMerge) MR_EMU_E(cudaErrorStreamCaptureUnmatched)
    MR_EMU_E(cudaErrorStreamCaptureUnjoined) MR_EMU_E(cudaErrorStreamCaptureIsolation)
    MR_EMU_E(cudaErrorStreamCaptureImplicit) MR_EMU_E(cudaErrorCapturedEvent)
    MR_EMU_E(cudaErrorStreamCaptureWrongThread) MR_EMU_E(cudaErrorUnknown)
#undef MR_EMU_E
  }
  return "cudaErrorUnknown";
}
const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorIllegalState: return "operation not permitted in the current state";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    default: return cudaGetErrorName(e);
  }
}
cudaError_t cudaGetLastError() {
  cudaError_t e = ::mr_emu::detail::t_last_error;
  ::mr_emu::detail::t_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return ::mr_emu::detail::t_last_error; }

namespace mr_emu {
namespace detail {
// Calls that synchronize implicitly are refused during a Global/ThreadLocal capture.
static cudaError_t check_not_capturing() {
  return g_strict_captures.load(std::memory_order_relaxed) > 0
             ? set_error(cudaErrorStreamCaptureUnsupported)
             : cudaSuccess;
}
static cudaError_t alloc(void **p, size_t n) {
  if (!p) return set_error(cudaErrorInvalidValue);
  *p = nullptr;
  if (cudaError_t e = check_not_capturing()) return e;
  if (n == 0) return cudaSuccess;
  *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
  return *p ? cudaSuccess : set_error(cudaErrorMemoryAllocation);
}
}  // namespace detail
}  // namespace mr_emu

cudaError_t cudaMalloc(void **p, size_t n) { return ::mr_emu::detail::alloc(p, n); }
cudaError_t cudaMallocHost(void **p, size_t n) { return ::mr_emu::detail::alloc(p, n); }
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned) {
  return ::mr_emu::detail::alloc(p, n);
}
cudaError_t cudaFree(void *p) {
  if (cudaError_t e = ::mr_emu::detail::check_not_capturing()) return e;
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) { return cudaFree(p); }

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k,
                                          cudaStream_t s) {
  if (static_cast<unsigned>(k) > 4) return ::mr_emu::detail::set_error(cudaErrorInvalidMemcpyDirection);
  if (n && (!dst || !src)) return ::mr_emu::detail::set_error(cudaErrorInvalidValue);
  cudaError_t e;
  if (::mr_emu::detail::capture(s, [=] { std::memmove(dst, src, n); }, &e)) return e;
  if (n) std::memmove(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k) {
  if (cudaError_t e = ::mr_emu::detail::check_not_capturing()) return e;
  return cudaMemcpyAsync(dst, src, n, k, 0);
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
  if (n && !p) return ::mr_emu::detail::set_error(cudaErrorInvalidValue);
  cudaError_t e;
  if (::mr_emu::detail::capture(s, [=] { std::memset(p, v, n); }, &e)) return e;
  if (n) std::memset(p, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t n) {
  if (cudaError_t e = ::mr_emu::detail::check_not_capturing()) return e;
  return cudaMemsetAsync(p, v, n, 0);
}

cudaError_t cudaStreamCreate(cudaStream_t *s) {
  if (!s) return ::mr_emu::detail::set_error(cudaErrorInvalidValue);
  *s = new CUstream_st();
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
  return cudaStreamCreate(s);
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (::mr_emu::detail::is_legacy(s) || s == cudaStreamPerThread)
    return ::mr_emu::detail::set_error(cudaErrorInvalidResourceHandle);
  if (s->capturing) {
    if (s->mode != cudaStreamCaptureModeRelaxed) --::mr_emu::detail::g_strict_captures;
    delete s->graph;
  }
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (::mr_emu::detail::stream_obj(s)->capturing) {
    ::mr_emu::detail::stream_obj(s)->invalidated = true;
    return ::mr_emu::detail::set_error(cudaErrorStreamCaptureUnsupported);
  }
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return ::mr_emu::detail::check_not_capturing(); }
cudaError_t cudaDeviceReset() { return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int *n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  return d == 0 ? cudaSuccess : ::mr_emu::detail::set_error(cudaErrorInvalidDevice);
}
cudaError_t cudaGetDevice(int *d) {
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
  if (d != 0) return ::mr_emu::detail::set_error(cudaErrorInvalidDevice);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "mithrilc CPU emulation");
  p->totalGlobalMem = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) *
                      static_cast<size_t>(sysconf(_SC_PAGESIZE));
  p->sharedMemPerBlock = p->sharedMemPerBlockOptin = 48u << 10;
  p->sharedMemPerMultiprocessor = 48u << 10;
  p->totalConstMem = 64u << 10;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  // The SMs the launch plans fill (mr_cuda_plan.h): an H100's 132, as the device is an
  // sm_90, so emulated runs take the tiles and split-K an H100 would; MR_EMU_SMS
  // overrides. (Blocks run on the host threads whatever it says.)
  p->multiProcessorCount = static_cast<int>(::mr_emu::detail::env_unsigned("MR_EMU_SMS", 132));
  p->maxThreadsPerMultiProcessor = 1024;
  p->major = 9;
  p->minor = 0;
  p->l2CacheSize = 1 << 20;
  p->concurrentKernels = p->unifiedAddressing = p->managedMemory = 1;
  p->asyncEngineCount = 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d) {
  cudaDeviceProp p;
  if (cudaError_t e = cudaGetDeviceProperties(&p, d)) return e;
  switch (a) {
    case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *v = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxGridDimX: *v = p.maxGridSize[0]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *v = static_cast<int>(p.sharedMemPerBlock);
      break;
    case cudaDevAttrWarpSize: *v = 32; break;
    case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
    default: return ::mr_emu::detail::set_error(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  *free_bytes = static_cast<size_t>(sysconf(_SC_AVPHYS_PAGES)) * page;
  *total = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * page;
  return cudaSuccess;
}

// Events: host clock at the call (the stream has finished all earlier work by then).
cudaError_t cudaEventCreate(cudaEvent_t *e) {
  *e = new CUevent_st();
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (::mr_emu::detail::stream_obj(s)->capturing) return cudaSuccess;  // a graph dependency only
  e->t = ::mr_emu::detail::now();
  e->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  if (!a->recorded || !b->recorded) return ::mr_emu::detail::set_error(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
  return cudaSuccess;
}

// CUDA Graphs: a captured stream records its work as closures; a graph launch replays them.
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
  if (::mr_emu::detail::is_legacy(s) || s == cudaStreamPerThread)
    return ::mr_emu::detail::set_error(cudaErrorStreamCaptureUnsupported);
  if (s->capturing) return ::mr_emu::detail::set_error(cudaErrorIllegalState);
  s->capturing = true;
  s->invalidated = false;
  s->mode = mode;
  s->graph = new CUgraph_st();
  if (mode != cudaStreamCaptureModeRelaxed) ++::mr_emu::detail::g_strict_captures;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
  if (::mr_emu::detail::is_legacy(s) || s == cudaStreamPerThread || !s->capturing)
    return ::mr_emu::detail::set_error(cudaErrorIllegalState);
  s->capturing = false;
  if (s->mode != cudaStreamCaptureModeRelaxed) --::mr_emu::detail::g_strict_captures;
  if (s->invalidated) {
    delete s->graph;
    s->graph = nullptr;
    *g = nullptr;
    return ::mr_emu::detail::set_error(cudaErrorStreamCaptureInvalidated);
  }
  *g = s->graph;
  s->graph = nullptr;
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *st) {
  const CUstream_st *o = ::mr_emu::detail::stream_obj(s);
  *st = !o->capturing    ? cudaStreamCaptureStatusNone
        : o->invalidated ? cudaStreamCaptureStatusInvalidated
                         : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g,
                                               unsigned long long) {
  if (!e || !g) return ::mr_emu::detail::set_error(cudaErrorInvalidValue);
  *e = new CUgraphExec_st{g->nodes};
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *e, cudaGraph_t g,
                                                        unsigned long long f) {
  return cudaGraphInstantiate(e, g, f);
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
  if (!e) return ::mr_emu::detail::set_error(cudaErrorInvalidValue);
  cudaError_t err;
  if (::mr_emu::detail::capture(s, [e] { for (auto &n : e->nodes) n(); }, &err)) return err;
  for (auto &n : e->nodes) n();
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}

long long clock64() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}
