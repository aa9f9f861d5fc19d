// metal_emu.h: CPU emulation of the Metal Shading Language subset that mithrilc's generated
// .metal files and its MSL kernel library (mithril_metal_kernels.h) use.
//
// The same .metal source compiles as host C++17 (g++ >= 12, clang++ >= 14): metal_stdlib, in
// this directory, stands for <metal_stdlib> and includes this header. Kernels run on
// runtime-emu/simt_emu.h's fibers: threadgroups are spread over a pool of host threads, each
// thread of a threadgroup is a fiber, and fibers switch only at barriers (threadgroup_barrier,
// simd-group functions). That is a valid GPU schedule, so it tests the kernels' logic (results,
// barrier use), not their speed, their memory ordering, or what the real Metal compiler
// accepts. README.md, section "Emulation", says what is and is not modelled.
//
// The host side is mithril_metal_emu.cpp (mithril_metal.h's API). A model's generated
// <name>_emu.cpp includes this header and its .metal, wraps each kernel in a function of
// mr_metal_emu::Args and registers the wrappers by name (mr_metal_emu::Register).
//
// Include order: system headers and mithril_metal.h before this header. It defines the
// address-space qualifiers as macros (kernel, device, thread, constant, threadgroup), which
// would otherwise rewrite those words in later headers (mithril_metal.h names parameters
// `device` and `kernel`).
//
// Every translation unit of an emulated program may include it; the scheduler it runs on is
// simt_emu.cpp, compiled once and linked in.
#ifndef MITHRILC_METAL_EMU_H
#define MITHRILC_METAL_EMU_H

// The shared core and the system headers. In a generated output directory simt_emu.h lies
// beside this file; in the source tree it is in runtime-emu/.
#if __has_include("simt_emu.h")
#include "simt_emu.h"
#else
#include "../runtime-emu/simt_emu.h"
#endif
#include <cfloat>
#include <limits>

// mithril_ops.h takes its Metal branch on __METAL_VERSION__; 310 is MSL 3.1 (bfloat).
#ifndef __METAL_VERSION__
#define __METAL_VERSION__ 310
#endif
#ifndef MAXFLOAT
#define MAXFLOAT FLT_MAX
#endif
// mithril_ops.h's Metal branch defines, as static functions, the few C math names that Metal
// lacks; in C++ <cmath> has declared them extern already. These names are macros for the
// emulation's own (mithril_ops.h's definitions, under another name), as Metal would see them.
#define expf mr_metal_emu_expf
#define fabsf mr_metal_emu_fabsf
#define log1pf mr_metal_emu_log1pf
#define erfcf mr_metal_emu_erfcf
#define erff mr_metal_emu_erff

// MSL attributes ([[buffer(0)]], [[thread_position_in_grid]], ...) are unknown to C++
// compilers, which ignore them with a warning: silenced here for the rest of the translation
// unit, the .metal source included after this header.
#ifdef __clang__
#pragma clang diagnostic ignored "-Wunknown-attributes"
#else
#pragma GCC diagnostic ignored "-Wattributes"
#endif
// See `threadgroup` below.
#pragma GCC diagnostic ignored "-Wregister"
// A kernel may declare attribute parameters it does not read ([[thread_index_in_simdgroup]]);
// Metal's compiler does not warn about them, -Wextra would.
#pragma GCC diagnostic ignored "-Wunused-parameter"

// ---------------------------------------------------------------------------------------------
// Address spaces. Every buffer is host memory, so they are plain pointers and references.
// ---------------------------------------------------------------------------------------------
#define kernel
#define device
#define thread
#define constant const
// `threadgroup` appears both as a qualifier (threadgroup float *tg) and inside an attribute
// ([[threadgroup(0)]]). Expanding to nothing breaks the attribute ([[(0)]]); `register` is
// the one C++ keyword that is a no-op in a parameter or local declaration and, as a keyword
// inside [[...]], an ignored attribute name. So it may not appear in a cast or a return type
// under emulation: the wrapper casts threadgroup memory as (float *).
#define threadgroup register

// ---------------------------------------------------------------------------------------------
// Scalar types
// ---------------------------------------------------------------------------------------------
// glibc's <sys/types.h> declares uint, ushort and ulong as the same types: redeclarations.
typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;
static_assert(sizeof(long) == 8, "MSL's long is 64 bits: an LP64 host is needed");

namespace mr_metal_emu {
namespace detail {
struct HalfFormat {
  static uint16_t from(float f) { return ::mr_simt::f32_to_f16(f); }
  static float to(uint16_t b) { return ::mr_simt::f16_to_f32(b); }
};
struct BfloatFormat {
  static uint16_t from(float f) { return ::mr_simt::f32_to_bf16(f); }
  static float to(uint16_t b) { return ::mr_simt::bf16_to_f32(b); }
};

// A 16-bit float: storage, and arithmetic done in float and rounded back (exact for + - * /:
// float holds more than twice the digits, so the double rounding is harmless). Conversions
// from any arithmetic type round to nearest even; to float it converts implicitly, as in MSL.
template <class Format>
struct Float16 {
  uint16_t bits;
  Float16() = default;
  template <class T, class = std::enable_if_t<std::is_arithmetic<T>::value>>
  Float16(T v) : bits(Format::from(static_cast<float>(v))) {}
  template <class G>
  explicit Float16(Float16<G> v) : bits(Format::from(static_cast<float>(v))) {}
  operator float() const { return Format::to(bits); }
  Float16 operator-() const { return Float16(-static_cast<float>(*this)); }
  Float16 operator+() const { return *this; }
  template <class T> Float16 &operator+=(T v) { return *this = Float16(static_cast<float>(*this) + static_cast<float>(v)); }
  template <class T> Float16 &operator-=(T v) { return *this = Float16(static_cast<float>(*this) - static_cast<float>(v)); }
  template <class T> Float16 &operator*=(T v) { return *this = Float16(static_cast<float>(*this) * static_cast<float>(v)); }
  template <class T> Float16 &operator/=(T v) { return *this = Float16(static_cast<float>(*this) / static_cast<float>(v)); }
};
// MSL's usual arithmetic conversions: a 16-bit float with an integer stays 16-bit, with a float
// becomes float. Exact-match templates, so that the built-in float operators (reached through
// the conversion to float) never make a call ambiguous.
template <class F, class T>
using Mixed = std::enable_if_t<std::is_arithmetic<T>::value,
                               std::conditional_t<std::is_integral<T>::value, Float16<F>, float>>;
#define MR_METAL_F16_OP(op)                                                                      \
  template <class F>                                                                            \
  inline Float16<F> operator op(Float16<F> a, Float16<F> b) {                                   \
    return Float16<F>(static_cast<float>(a) op static_cast<float>(b));                          \
  }                                                                                             \
  template <class F, class T>                                                                   \
  inline Mixed<F, T> operator op(Float16<F> a, T b) {                                           \
    return Mixed<F, T>(static_cast<float>(a) op static_cast<float>(b));                         \
  }                                                                                             \
  template <class F, class T>                                                                   \
  inline Mixed<F, T> operator op(T a, Float16<F> b) {                                           \
    return Mixed<F, T>(static_cast<float>(a) op static_cast<float>(b));                         \
  }
MR_METAL_F16_OP(+)
MR_METAL_F16_OP(-)
MR_METAL_F16_OP(*)
MR_METAL_F16_OP(/)
#undef MR_METAL_F16_OP
}  // namespace detail
}  // namespace mr_metal_emu

typedef ::mr_metal_emu::detail::Float16<::mr_metal_emu::detail::HalfFormat> half;
typedef ::mr_metal_emu::detail::Float16<::mr_metal_emu::detail::BfloatFormat> bfloat;

// ---------------------------------------------------------------------------------------------
// Vector types: .x .y .z .w and [i], element-wise + - * / (with a vector or a scalar on either
// side), constructors from N scalars or one (broadcast), explicit conversion between element
// types. Sizes and alignments are MSL's (a 3-vector takes 4 elements' room).
// ---------------------------------------------------------------------------------------------
namespace mr_metal_emu {
namespace detail {
template <class T, int N> struct VecStorage;
template <class T> struct alignas(2 * sizeof(T)) VecStorage<T, 2> {
  T x, y;
  T &at(int i) { return i == 0 ? x : y; }
  const T &at(int i) const { return i == 0 ? x : y; }
};
template <class T> struct alignas(4 * sizeof(T)) VecStorage<T, 3> {
  T x, y, z;
  T &at(int i) { return i == 0 ? x : i == 1 ? y : z; }
  const T &at(int i) const { return i == 0 ? x : i == 1 ? y : z; }
};
template <class T> struct alignas(4 * sizeof(T)) VecStorage<T, 4> {
  T x, y, z, w;
  T &at(int i) { return i == 0 ? x : i == 1 ? y : i == 2 ? z : w; }
  const T &at(int i) const { return i == 0 ? x : i == 1 ? y : i == 2 ? z : w; }
};

template <class T, int N>
struct Vec : VecStorage<T, N> {
  Vec() = default;
  Vec(T s) {  // NOLINT: MSL converts a scalar to a vector implicitly (broadcast)
    for (int i = 0; i < N; ++i) this->at(i) = s;
  }
  template <class... A, class = std::enable_if_t<sizeof...(A) == N && (N > 1)>>
  Vec(A... a) {
    const T v[N] = {static_cast<T>(a)...};
    for (int i = 0; i < N; ++i) this->at(i) = v[i];
  }
  template <class U>
  explicit Vec(const Vec<U, N> &o) {
    for (int i = 0; i < N; ++i) this->at(i) = static_cast<T>(o.at(i));
  }
  T &operator[](int i) { return this->at(i); }
  const T &operator[](int i) const { return this->at(i); }
  Vec operator-() const {
    Vec r;
    for (int i = 0; i < N; ++i) r.at(i) = static_cast<T>(-this->at(i));
    return r;
  }
  template <class S> Vec &operator+=(const S &s) { return *this = *this + s; }
  template <class S> Vec &operator-=(const S &s) { return *this = *this - s; }
  template <class S> Vec &operator*=(const S &s) { return *this = *this * s; }
  template <class S> Vec &operator/=(const S &s) { return *this = *this / s; }
};
template <class T> struct IsVec : std::false_type {};
template <class T, int N> struct IsVec<Vec<T, N>> : std::true_type {};
template <class T, class S>
using Scalar = std::enable_if_t<!IsVec<S>::value && std::is_convertible<S, T>::value, T>;

#define MR_METAL_VEC_OP(op)                                                                      \
  template <class T, int N>                                                                     \
  inline Vec<T, N> operator op(const Vec<T, N> &a, const Vec<T, N> &b) {                        \
    Vec<T, N> r;                                                                                \
    for (int i = 0; i < N; ++i) r.at(i) = static_cast<T>(a.at(i) op b.at(i));                   \
    return r;                                                                                   \
  }                                                                                             \
  template <class T, int N, class S, class = Scalar<T, S>>                                      \
  inline Vec<T, N> operator op(const Vec<T, N> &a, const S &s) {                                \
    return a op Vec<T, N>(static_cast<T>(s));                                                   \
  }                                                                                             \
  template <class T, int N, class S, class = Scalar<T, S>>                                      \
  inline Vec<T, N> operator op(const S &s, const Vec<T, N> &b) {                                \
    return Vec<T, N>(static_cast<T>(s)) op b;                                                   \
  }
MR_METAL_VEC_OP(+)
MR_METAL_VEC_OP(-)
MR_METAL_VEC_OP(*)
MR_METAL_VEC_OP(/)
#undef MR_METAL_VEC_OP
}  // namespace detail
}  // namespace mr_metal_emu

#define MR_METAL_VEC_TYPES(T)                              \
  typedef ::mr_metal_emu::detail::Vec<T, 2> T##2;          \
  typedef ::mr_metal_emu::detail::Vec<T, 3> T##3;          \
  typedef ::mr_metal_emu::detail::Vec<T, 4> T##4;
MR_METAL_VEC_TYPES(float)
MR_METAL_VEC_TYPES(half)
MR_METAL_VEC_TYPES(bfloat)
MR_METAL_VEC_TYPES(int)
MR_METAL_VEC_TYPES(uint)
MR_METAL_VEC_TYPES(short)
MR_METAL_VEC_TYPES(ushort)
MR_METAL_VEC_TYPES(char)
MR_METAL_VEC_TYPES(uchar)
MR_METAL_VEC_TYPES(long)
MR_METAL_VEC_TYPES(ulong)
#undef MR_METAL_VEC_TYPES

// ---------------------------------------------------------------------------------------------
// The emulation's side: kernels by name, and what the thread-position attributes read
// ---------------------------------------------------------------------------------------------
namespace mr_metal_emu {

// [[buffer(i)]]: mr_metal_set_buffer's pointer plus offset, or mr_metal_set_bytes' copy.
struct Args { void *buffer[31]; };
using Kernel = void (*)(const Args &);
struct Entry { const char *name; Kernel fn; };

namespace detail {
// A dispatch as the fibers see it (mr_simt::Launch::data).
struct Dispatch {
  Kernel fn;
  Args args;
  size_t threadgroup_bytes[31];  // [[threadgroup(i)]] sizes, multiples of 16; 0: not set
};
inline void invoke(const void *d) {
  const Dispatch *D = static_cast<const Dispatch *>(d);
  D->fn(D->args);
}

// How the core's diagnostics name Metal's things.
inline constexpr ::mr_simt::Api kMetal{"Metal", "threadgroup", "threadgroup_barrier()",
                                       "simd-group functions", true};

[[noreturn]] inline void fail(const char *what) { ::mr_simt::fail(what, ::mr_simt::t_.f); }
inline const ::mr_simt::Tls &tls() { return ::mr_simt::t_; }
}  // namespace detail

// Registers kernels by name at static initialization (several models may register); the
// registry is mithril_metal_emu.cpp's.
struct Register {
  Register(const Entry *entries, unsigned count);
};
// The registered kernel called name, or null.
Kernel find(const char *name);

// Runs fn over groups threadgroups (1-D) of threads threads, on the host-thread pool; returns
// when all are done. The caller (mithril_metal_emu.cpp) has checked the shape.
inline void run(const char *name, Kernel fn, const Args &args, const size_t threadgroup_bytes[31],
                uint32_t groups, unsigned threads) {
  detail::Dispatch D{fn, args, {}};
  std::memcpy(D.threadgroup_bytes, threadgroup_bytes, sizeof D.threadgroup_bytes);
  ::mr_simt::Launch L{name, {groups, 1, 1}, {threads, 1, 1}, &detail::invoke, &D, &detail::kMetal};
  ::mr_simt::launch(L);
}

// [[threadgroup(index)]] of the running threadgroup: one block per host thread (a host thread
// runs one threadgroup at a time, to its end), 64-byte aligned, zeroed when first allocated and,
// like Metal's, not reset between threadgroups.
inline void *threadgroup_memory(unsigned index) {
  struct Blocks {
    void *p[31] = {};
    size_t size[31] = {};
    ~Blocks() {
      for (void *q : p) std::free(q);
    }
  };
  static thread_local Blocks blocks;
  const detail::Dispatch *D = static_cast<const detail::Dispatch *>(detail::tls().launch->data);
  const size_t want = index < 31 ? D->threadgroup_bytes[index] : 0;
  if (want == 0) {
    char msg[160];
    std::snprintf(msg, sizeof msg,
                  "[[threadgroup(%u)]] read without mr_metal_set_threadgroup_memory(e, %u, ...)",
                  index, index);
    detail::fail(msg);
  }
  if (blocks.size[index] < want) {
    // Every fiber of the group asks before the kernel runs, so no fiber holds the old block.
    std::free(blocks.p[index]);
    blocks.p[index] = std::aligned_alloc(64, (want + 63) / 64 * 64);
    if (!blocks.p[index]) detail::fail("out of memory for threadgroup memory");
    std::memset(blocks.p[index], 0, want);
    blocks.size[index] = want;
  }
  return blocks.p[index];
}

// One accessor per thread-position attribute; dispatches are 1-D.
inline uint thread_position_in_grid() { return detail::tls().bid.x * detail::tls().bdim.x + detail::tls().tid.x; }
inline uint threadgroup_position_in_grid() { return detail::tls().bid.x; }
inline uint threadgroups_per_grid() { return detail::tls().gdim.x; }
inline uint threads_per_grid() { return detail::tls().gdim.x * detail::tls().bdim.x; }
inline uint thread_index_in_threadgroup() { return detail::tls().tid.x; }
inline uint threads_per_threadgroup() { return detail::tls().bdim.x; }
inline uint thread_index_in_simdgroup() { return detail::tls().tid.x & 31u; }
inline uint simdgroup_index_in_threadgroup() { return detail::tls().tid.x >> 5; }
inline uint simdgroups_per_threadgroup() { return (detail::tls().bdim.x + 31u) >> 5; }

}  // namespace mr_metal_emu

// ---------------------------------------------------------------------------------------------
// metal:: functions
// ---------------------------------------------------------------------------------------------
namespace metal {

// Math. The std:: overloads compute float in float (and are the same functions C's <math.h>
// declares, so `using namespace metal` with C's names in scope is not ambiguous). fast:: and
// precise:: are the same functions here: exact within the C library's accuracy, which is
// within Metal's documented bounds for both.
using std::abs;
using std::atan;
using std::ceil;
using std::copysign;
using std::cos;
using std::exp;
using std::exp2;
using std::fabs;
using std::floor;
using std::fma;
using std::fmod;
using std::isinf;
using std::isnan;
using std::log;
using std::log2;
using std::pow;
using std::rint;
using std::round;
using std::sin;
using std::sqrt;
using std::tan;
using std::tanh;
using std::trunc;
inline float rsqrt(float x) { return 1.0f / std::sqrt(x); }
inline float fmin(float a, float b) { return std::fmin(a, b); }
inline float fmax(float a, float b) { return std::fmax(a, b); }
inline float exp10(float x) { return std::pow(10.0f, x); }
inline float log10(float x) { return std::log10(x); }
inline float sign(float x) { return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x == x ? x : 0.0f; }
inline float saturate(float x) { return std::fmin(std::fmax(x, 0.0f), 1.0f); }
inline float mix(float x, float y, float a) { return x + (y - x) * a; }

// min / max: float ones follow fmin / fmax (a NaN argument yields the other), integer ones compare.
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline half min(half a, half b) { return half(std::fmin(float(a), float(b))); }
inline half max(half a, half b) { return half(std::fmax(float(a), float(b))); }
#define MR_METAL_INT_MINMAX(T)                                  \
  inline T min(T a, T b) { return b < a ? b : a; }              \
  inline T max(T a, T b) { return a < b ? b : a; }              \
  inline T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
MR_METAL_INT_MINMAX(int)
MR_METAL_INT_MINMAX(uint)
MR_METAL_INT_MINMAX(long)
MR_METAL_INT_MINMAX(ulong)
MR_METAL_INT_MINMAX(short)
MR_METAL_INT_MINMAX(ushort)
#undef MR_METAL_INT_MINMAX
inline float clamp(float x, float lo, float hi) { return std::fmin(std::fmax(x, lo), hi); }
inline half clamp(half x, half lo, half hi) { return half(clamp(float(x), float(lo), float(hi))); }

// select(a, b, c): c ? b : a.
template <class T> inline T select(T a, T b, bool c) { return c ? b : a; }

template <class To, class From>
inline To as_type(const From &v) {
  static_assert(sizeof(To) == sizeof(From), "as_type: the types' sizes differ");
  To r;
  std::memcpy(&r, &v, sizeof r);
  return r;
}

inline uint popcount(uint x) { return static_cast<uint>(__builtin_popcount(x)); }
inline uint clz(uint x) { return x ? static_cast<uint>(__builtin_clz(x)) : 32u; }
inline uint ctz(uint x) { return x ? static_cast<uint>(__builtin_ctz(x)) : 32u; }

// The element-wise vector forms of the one-argument float functions.
#define MR_METAL_VEC_FN(fn)                                                          \
  template <class T, int N>                                                         \
  inline ::mr_metal_emu::detail::Vec<T, N> fn(const ::mr_metal_emu::detail::Vec<T, N> &v) { \
    ::mr_metal_emu::detail::Vec<T, N> r;                                            \
    for (int i = 0; i < N; ++i) r[i] = static_cast<T>(fn(static_cast<float>(v[i])));  \
    return r;                                                                       \
  }
MR_METAL_VEC_FN(exp)
MR_METAL_VEC_FN(exp2)
MR_METAL_VEC_FN(log)
MR_METAL_VEC_FN(log2)
MR_METAL_VEC_FN(sqrt)
MR_METAL_VEC_FN(rsqrt)
MR_METAL_VEC_FN(sin)
MR_METAL_VEC_FN(cos)
MR_METAL_VEC_FN(tanh)
MR_METAL_VEC_FN(fabs)
MR_METAL_VEC_FN(floor)
MR_METAL_VEC_FN(ceil)
#undef MR_METAL_VEC_FN

namespace precise {
using metal::cos;
using metal::exp;
using metal::exp2;
using metal::log;
using metal::log2;
using metal::pow;
using metal::rsqrt;
using metal::sin;
using metal::sqrt;
using metal::tanh;
}  // namespace precise
namespace fast = precise;  // the same functions here (see above)

// ---------------------------------------------------------------------------------------------
// Barriers. The flags only order memory, and the fibers of a threadgroup share one host
// thread, so all flags are the same here.
// ---------------------------------------------------------------------------------------------
enum class mem_flags : unsigned {
  mem_none = 0,
  mem_device = 1,
  mem_threadgroup = 2,
  mem_texture = 4,
  mem_threadgroup_imageblock = 8
};
constexpr mem_flags operator|(mem_flags a, mem_flags b) {
  return static_cast<mem_flags>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}
// Every thread of the threadgroup must reach it (one that returned is a divergence error).
inline void threadgroup_barrier(mem_flags) { ::mr_simt::block_barrier(0); }

// ---------------------------------------------------------------------------------------------
// Simd-group functions, 32 lanes. MSL names no mask: the lanes taking part are the simdgroup's
// threads that have not returned (a lane that returns leaves the pending function, which may
// then complete without it). Lanes of a simdgroup at different simd-group functions, or one
// waiting while another waits at threadgroup_barrier, are diagnosed (divergent simd-group
// functions are not modelled). Results are MSL's: shuffle_down / shuffle_up leave the upper /
// lower delta lanes their own value; a source lane that does not take part (returned, or
// beyond the threadgroup's threads) yields the caller's own value. Values of up to 8 bytes.
// ---------------------------------------------------------------------------------------------
namespace detail {
using ::mr_simt::Op;
template <class T>
inline T simd(Op op, const char *name, T v, int arg, const ::mr_simt::Fold *fold = nullptr) {
  return ::mr_simt::from_bits<T>(::mr_simt::warp_arrive(op, name, 0, true, ::mr_simt::to_bits(v), arg, 32, fold));
}
// A reduction over the lanes' values, in lane order (the hardware's order, a tree, may round
// float sums differently).
template <class T, class F>
struct FoldOf {
  static uint64_t fn(uint64_t a, uint64_t b) {
    return ::mr_simt::to_bits(static_cast<T>(F::apply(::mr_simt::from_bits<T>(a), ::mr_simt::from_bits<T>(b))));
  }
  static inline const ::mr_simt::Fold fold{&fn, ::mr_simt::to_bits(static_cast<T>(F::identity))};
};
template <class T, bool Float = std::is_floating_point<T>::value || !std::is_integral<T>::value>
struct Extremes {
  static T lo(T a, T b) { return b < a ? b : a; }
  static T hi(T a, T b) { return a < b ? b : a; }
};
template <class T>
struct Extremes<T, true> {  // fmin / fmax: a NaN lane's value is ignored
  static T lo(T a, T b) { return static_cast<T>(std::fmin(static_cast<float>(a), static_cast<float>(b))); }
  static T hi(T a, T b) { return static_cast<T>(std::fmax(static_cast<float>(a), static_cast<float>(b))); }
};
template <class T> struct Sum { static constexpr int identity = 0; static T apply(T a, T b) { return a + b; } };
template <class T> struct Prod { static constexpr int identity = 1; static T apply(T a, T b) { return a * b; } };
template <class T> struct Min { static constexpr int identity = 0; static T apply(T a, T b) { return Extremes<T>::lo(a, b); } };
template <class T> struct Max { static constexpr int identity = 0; static T apply(T a, T b) { return Extremes<T>::hi(a, b); } };
template <class T> struct And { static constexpr int identity = -1; static T apply(T a, T b) { return a & b; } };
template <class T> struct Or { static constexpr int identity = 0; static T apply(T a, T b) { return a | b; } };
template <class T> struct Xor { static constexpr int identity = 0; static T apply(T a, T b) { return a ^ b; } };
}  // namespace detail

template <class T> inline T simd_shuffle(T v, ushort lane) { return detail::simd(detail::Op::Shfl, "simd_shuffle()", v, lane); }
template <class T> inline T simd_broadcast(T v, ushort lane) { return detail::simd(detail::Op::Shfl, "simd_broadcast()", v, lane); }
template <class T> inline T simd_broadcast_first(T v) { return detail::simd(detail::Op::First, "simd_broadcast_first()", v, 0); }
template <class T> inline T simd_shuffle_down(T v, ushort delta) { return detail::simd(detail::Op::ShflDown, "simd_shuffle_down()", v, delta); }
template <class T> inline T simd_shuffle_up(T v, ushort delta) { return detail::simd(detail::Op::ShflUp, "simd_shuffle_up()", v, delta); }
template <class T> inline T simd_shuffle_xor(T v, ushort mask) { return detail::simd(detail::Op::ShflXor, "simd_shuffle_xor()", v, mask); }
inline bool simd_any(bool p) { return detail::simd(detail::Op::Any, "simd_any()", static_cast<uint64_t>(p), 0) != 0; }
inline bool simd_all(bool p) { return detail::simd(detail::Op::All, "simd_all()", static_cast<uint64_t>(p), 0) != 0; }
#define MR_METAL_SIMD_FOLD(name, op, F)                                                   \
  template <class T> inline T name(T v) {                                                \
    return detail::simd(detail::Op::op, #name "()", v, 0, &detail::FoldOf<T, detail::F<T>>::fold); \
  }
MR_METAL_SIMD_FOLD(simd_sum, Reduce, Sum)
MR_METAL_SIMD_FOLD(simd_product, Reduce, Prod)
MR_METAL_SIMD_FOLD(simd_min, Reduce, Min)
MR_METAL_SIMD_FOLD(simd_max, Reduce, Max)
MR_METAL_SIMD_FOLD(simd_and, Reduce, And)
MR_METAL_SIMD_FOLD(simd_or, Reduce, Or)
MR_METAL_SIMD_FOLD(simd_xor, Reduce, Xor)
MR_METAL_SIMD_FOLD(simd_prefix_inclusive_sum, ScanIncl, Sum)
MR_METAL_SIMD_FOLD(simd_prefix_exclusive_sum, ScanExcl, Sum)
MR_METAL_SIMD_FOLD(simd_prefix_inclusive_product, ScanIncl, Prod)
MR_METAL_SIMD_FOLD(simd_prefix_exclusive_product, ScanExcl, Prod)
#undef MR_METAL_SIMD_FOLD
// A barrier of the simdgroup's lanes that have not returned.
inline void simdgroup_barrier(mem_flags) { detail::simd(detail::Op::Sync, "simdgroup_barrier()", 0, 0); }

// ---------------------------------------------------------------------------------------------
// simdgroup_matrix (8x8 of float, half, bfloat). Model: every lane holds the whole matrix
// (row-major), so thread_elements() is not modelled; load, store, multiply and
// multiply_accumulate are collective: all 32 lanes of a full simdgroup must reach the same one
// (others are diagnosed). A product accumulates in float, k in order, from c's value, and is
// rounded to d's type at the end.
// ---------------------------------------------------------------------------------------------
template <class T, int Cols, int Rows>
struct simdgroup_matrix {
  static_assert(Cols == 8 && Rows == 8, "simdgroup_matrix: only 8x8 is emulated");
  static_assert(std::is_same<T, float>::value || std::is_same<T, half>::value || std::is_same<T, bfloat>::value,
                "simdgroup_matrix: float, half or bfloat");
  T e[Rows * Cols];  // row-major
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int Cols, int Rows>
inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(const T v) {
  simdgroup_matrix<T, Cols, Rows> m;
  for (T &x : m.e) x = v;
  return m;
}

namespace detail {
// The collective step: the whole simdgroup, every lane present and none returned.
inline void matrix_collective(const char *name) {
  const uint32_t live = ::mr_simt::live_lanes();
  if (live != ~0u) {
    char msg[160];
    std::snprintf(msg, sizeof msg, "%s in a simdgroup of lanes 0x%08x (needs all 32 threads)", name,
                  live);
    ::mr_metal_emu::detail::fail(msg);
  }
  simd(Op::Collective, name, 0, 0);
}
}  // namespace detail

// Element (r, c) is src[(origin.y + r) * elements_per_row + origin.x + c]; transposed, the
// memory holds the transpose: src[(origin.x + c) * elements_per_row + origin.y + r].
template <class T, int Cols, int Rows>
inline void simdgroup_load(simdgroup_matrix<T, Cols, Rows> &d, const T *src, ulong elements_per_row = Cols,
                           ulong2 matrix_origin = ulong2(0), bool transpose_matrix = false) {
  detail::matrix_collective("simdgroup_load()");
  for (ulong r = 0; r < Rows; ++r)
    for (ulong c = 0; c < Cols; ++c)
      d.e[r * Cols + c] = transpose_matrix ? src[(matrix_origin.x + c) * elements_per_row + matrix_origin.y + r]
                                           : src[(matrix_origin.y + r) * elements_per_row + matrix_origin.x + c];
}
template <class T, int Cols, int Rows>
inline void simdgroup_store(const simdgroup_matrix<T, Cols, Rows> &m, T *dst, ulong elements_per_row = Cols,
                            ulong2 matrix_origin = ulong2(0), bool transpose_matrix = false) {
  detail::matrix_collective("simdgroup_store()");
  for (ulong r = 0; r < Rows; ++r)
    for (ulong c = 0; c < Cols; ++c)
      (transpose_matrix ? dst[(matrix_origin.x + c) * elements_per_row + matrix_origin.y + r]
                        : dst[(matrix_origin.y + r) * elements_per_row + matrix_origin.x + c]) = m.e[r * Cols + c];
}
// d = a b + c (d may be c).
template <class TD, class TA, class TB, class TC>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8> &d, const simdgroup_matrix<TA, 8, 8> &a,
                                          const simdgroup_matrix<TB, 8, 8> &b, const simdgroup_matrix<TC, 8, 8> &c) {
  detail::matrix_collective("simdgroup_multiply_accumulate()");
  float af[64], bf[64], cf[64], df[64];
  for (int i = 0; i < 64; ++i) {
    af[i] = static_cast<float>(a.e[i]);
    bf[i] = static_cast<float>(b.e[i]);
    cf[i] = static_cast<float>(c.e[i]);
  }
  ::mr_simt::mma_tile<8, 8, 8>(df, af, bf, cf);
  for (int i = 0; i < 64; ++i) d.e[i] = static_cast<TD>(df[i]);
}
// d = a b.
template <class TD, class TA, class TB>
inline void simdgroup_multiply(simdgroup_matrix<TD, 8, 8> &d, const simdgroup_matrix<TA, 8, 8> &a,
                               const simdgroup_matrix<TB, 8, 8> &b) {
  simdgroup_multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<TD, 8, 8>(TD(0)));
}

}  // namespace metal

#endif  // MITHRILC_METAL_EMU_H
