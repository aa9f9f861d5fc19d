// test_emu.cpp: checks the Metal emulation (metal_emu.h, mithril_metal_emu.cpp) by running
// test_emu.metal's kernels (registered by test_emu_kernels.cpp) through mithril_metal.h's API,
// as a model's host code does. Each faulty kernel runs in a child process, which must abort
// with the emulation's one-line diagnostic. Exit status 1 on any failed check. See Makefile.
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <sys/wait.h>
#include <unistd.h>

#include "mithril_metal.h"

namespace {

int failures = 0;

void check(bool ok, const char *fmt, ...) {
  if (ok) return;
  ++failures;
  std::va_list ap;
  va_start(ap, fmt);
  std::fprintf(stderr, "FAIL: ");
  std::vfprintf(stderr, fmt, ap);
  std::fprintf(stderr, "\n");
  va_end(ap);
}

const char *const kNames[] = {"tg_sum", "simd_int", "simd_float", "early_exit", "matmul8", "round16",
                              "vec_math", "fault_barrier", "fault_simd_mismatch", "fault_simd_barrier",
                              "fault_tg_unset", "fault_matrix_partial"};
enum { TG_SUM, SIMD_INT, SIMD_FLOAT, EARLY_EXIT, MATMUL8, ROUND16, VEC_MATH, FAULT_BARRIER,
       FAULT_SIMD_MISMATCH, FAULT_SIMD_BARRIER, FAULT_TG_UNSET, FAULT_MATRIX_PARTIAL };

mr_metal *ctx;

// A buffer holding n copies of T, filled from init.
template <class T>
void *buffer(const std::vector<T> &init) {
  void *b = mr_metal_buffer_new(ctx, init.size() * sizeof(T));
  std::memcpy(mr_metal_contents(b), init.data(), init.size() * sizeof(T));
  return b;
}
template <class T>
T *at(void *b) { return static_cast<T *>(mr_metal_contents(b)); }

// Encodes one dispatch of kernel with buffers bound at 0, 1, ...; returns mr_metal_end's result.
int run(unsigned kernel, uint64_t groups, unsigned threads, std::vector<void *> bufs, size_t tg0 = 0) {
  void *cb = mr_metal_command_buffer(ctx);
  mr_metal_encoder *e = mr_metal_encode(ctx, cb);
  for (unsigned i = 0; i < bufs.size(); ++i) mr_metal_set_buffer(e, i, bufs[i], 0);
  if (tg0) mr_metal_set_threadgroup_memory(e, 0, tg0);
  mr_metal_dispatch(e, kernel, groups, threads);
  const int r = mr_metal_end(e);
  const int c = mr_metal_commit_wait(cb);
  return r ? r : c;
}

void test_tg_sum() {
  const unsigned n = 250, threads = 100, groups = 3;
  std::vector<float> in(n);
  for (unsigned i = 0; i < n; ++i) in[i] = static_cast<float>(i % 17);
  void *bi = buffer(in), *bo = buffer(std::vector<float>(groups));
  void *cb = mr_metal_command_buffer(ctx);
  mr_metal_encoder *e = mr_metal_encode(ctx, cb);
  mr_metal_set_buffer(e, 0, bi, 0);
  mr_metal_set_buffer(e, 1, bo, 0);
  mr_metal_set_bytes(e, 2, &n, sizeof n);
  mr_metal_set_threadgroup_memory(e, 0, threads * sizeof(float));
  mr_metal_dispatch(e, TG_SUM, groups, threads);
  check(mr_metal_end(e) == 0 && mr_metal_commit_wait(cb) == 0, "tg_sum: %s", mr_metal_last_error());
  for (unsigned g = 0; g < groups; ++g) {
    float want = 0;
    for (unsigned i = g * threads; i < (g + 1) * threads && i < n; ++i) want += in[i];
    check(at<float>(bo)[g] == want, "tg_sum group %u: %g, want %g", g, at<float>(bo)[g], want);
  }
  mr_metal_buffer_free(bi);
  mr_metal_buffer_free(bo);
}

// The simd-group functions over a simdgroup of `lanes` lanes (the others absent), as MSL defines them.
void expect_simd_int(const int *v, unsigned lanes, unsigned lane, int *o) {
  int sum = 0, mx = v[0], mn = v[0], an = ~0, orr = 0, xr = 0, incl = 0, excl = 0;
  bool any = false, all = true;
  for (unsigned l = 0; l < lanes; ++l) {
    sum += v[l];
    mx = std::max(mx, v[l]);
    mn = std::min(mn, v[l]);
    an &= v[l] | 0x100;
    orr |= v[l];
    xr ^= v[l];
    if (l < lane) excl += v[l];
    if (l <= lane) incl += v[l];
    any |= v[l] == 1007;
    all &= v[l] >= 0;
  }
  auto from = [&](unsigned src) { return src < lanes ? v[src] : v[lane]; };
  const int want[16] = {sum, mx, mn, 1 << std::min(lanes, 10u), an, orr, xr, incl, excl,
                        from(lane * 7 % 32), lane + 3 < 32 ? from(lane + 3) : v[lane],
                        lane >= 5 ? from(lane - 5) : v[lane], from(lane ^ 6), from(9), any ? 1 : 0,
                        (all ? 2 : 0) + 1};
  std::memcpy(o, want, sizeof want);
}

void test_simd_int() {
  // Two threadgroups of 48: simdgroup 1 of each has 16 lanes.
  const unsigned threads = 48, groups = 2, n = threads * groups;
  std::vector<int> in(n);
  for (unsigned i = 0; i < n; ++i) in[i] = static_cast<int>((i * 37 + 11) % 101) - (i == 70 ? 500 : 0);
  in[20] = 1007;  // simd_any true in group 0's first simdgroup only
  void *bi = buffer(in), *bo = buffer(std::vector<int>(n * 16));
  check(run(SIMD_INT, groups, threads, {bi, bo}) == 0, "simd_int: %s", mr_metal_last_error());
  static const char *const what[16] = {"sum", "max", "min", "product", "and", "or", "xor", "prefix_inclusive_sum",
                                       "prefix_exclusive_sum", "shuffle", "shuffle_down", "shuffle_up",
                                       "shuffle_xor", "broadcast", "any", "all+broadcast_first"};
  for (unsigned t = 0; t < n; ++t) {
    const unsigned lid = t % threads, base = t - lid % 32, lanes = std::min(32u, threads - (lid - lid % 32));
    int want[16];
    expect_simd_int(&in[base], lanes, lid % 32, want);
    for (int j = 0; j < 16; ++j)
      check(at<int>(bo)[t * 16 + j] == want[j], "simd_int thread %u %s: %d, want %d", t, what[j],
            at<int>(bo)[t * 16 + j], want[j]);
  }
  mr_metal_buffer_free(bi);
  mr_metal_buffer_free(bo);
}

// Half-precision value of f (round to nearest even), by the test's own arithmetic.
float to_half(float f) {
  int e;
  std::frexp(f, &e);
  const float ulp = std::ldexp(1.0f, std::max(e, -13) - 11);
  return std::nearbyint(f / ulp) * ulp;
}

void test_simd_float() {
  std::vector<float> in(32);
  for (unsigned i = 0; i < 32; ++i) in[i] = 0.1f * static_cast<float>(i) - 1.0f;
  in[5] = NAN;  // ignored by simd_max / simd_min; poisons the sum
  in[6] = 7.0f;
  void *bi = buffer(in), *bo = buffer(std::vector<float>(32 * 4));
  check(run(SIMD_FLOAT, 1, 32, {bi, bo}) == 0, "simd_float: %s", mr_metal_last_error());
  float mx = -INFINITY, mn = INFINITY;
  for (float v : in)
    if (v == v) mx = std::fmax(mx, v), mn = std::fmin(mn, v);
  for (unsigned t = 0; t < 32; ++t) {
    const float *o = at<float>(bo) + t * 4;
    check(std::isnan(o[0]) && o[1] == mx && o[2] == mn && std::isnan(o[3]),
          "simd_float thread %u: %g %g %g %g, want nan %g %g nan", t, o[0], o[1], o[2], o[3], mx, mn);
  }
  // Without the NaN: sums in lane order, the half one rounded at each step.
  in[5] = 0.25f;
  std::memcpy(mr_metal_contents(bi), in.data(), in.size() * sizeof(float));
  check(run(SIMD_FLOAT, 1, 32, {bi, bo}) == 0, "simd_float: %s", mr_metal_last_error());
  float sum = 0, hsum = 0;
  for (float v : in) sum += v, hsum = to_half(hsum + to_half(v));
  check(at<float>(bo)[0] == sum, "simd_float sum %a, want %a", at<float>(bo)[0], sum);
  check(at<float>(bo)[3] == hsum, "simd_float half sum %a, want %a (rounded to half at each step)",
        at<float>(bo)[3], hsum);
  mr_metal_buffer_free(bi);
  mr_metal_buffer_free(bo);
}

void test_early_exit() {
  void *bo = buffer(std::vector<int>(64, -1));
  check(run(EARLY_EXIT, 1, 64, {bo}) == 0, "early_exit: %s", mr_metal_last_error());
  for (unsigned t = 0; t < 64; ++t) {
    const unsigned lane = t % 32;
    const int want = lane >= 24 ? -1 : 24 + 100 * static_cast<int>(lane == 23 ? 23 : lane + 1);
    check(at<int>(bo)[t] == want, "early_exit thread %u: %d, want %d", t, at<int>(bo)[t], want);
  }
  mr_metal_buffer_free(bo);
}

void test_matmul8() {
  std::vector<float> a(8 * 16), b(64), c(64), ah(64), bh(64);
  for (unsigned i = 0; i < a.size(); ++i) a[i] = static_cast<float>(static_cast<int>(i * 7 % 13) - 6) * 0.5f;
  for (unsigned i = 0; i < 64; ++i) {
    b[i] = static_cast<float>(static_cast<int>(i * 5 % 11) - 5);
    c[i] = static_cast<float>(i);
    ah[i] = 1.0f + static_cast<float>(i) / 1024.0f + 1.0f / 4096.0f;  // not a half: rounds
    bh[i] = static_cast<float>(i % 9) - 4.0f;
  }
  std::vector<uint16_t> ahb(64), bhb(64);
  // Half bit patterns through the emulation's own kernel would be circular: build them here.
  auto half_bits = [](float f) {
    uint32_t x;
    const float h = to_half(f);
    if (h == 0.0f) return static_cast<uint16_t>(0);  // the values here are 0 or normal
    std::memcpy(&x, &h, 4);
    return static_cast<uint16_t>(((x >> 16) & 0x8000u) | (((x >> 23 & 0xffu) - 112u) << 10) | ((x >> 13) & 0x3ffu));
  };
  for (unsigned i = 0; i < 64; ++i) ahb[i] = half_bits(ah[i]), bhb[i] = half_bits(bh[i]);
  void *ba = buffer(a), *bb = buffer(b), *bc = buffer(c), *bah = buffer(ahb), *bbh = buffer(bhb);
  void *bd = buffer(std::vector<float>(64)), *be = buffer(std::vector<float>(64));
  check(run(MATMUL8, 1, 32, {ba, bb, bc, bah, bbh, bd, be}) == 0, "matmul8: %s", mr_metal_last_error());
  for (unsigned i = 0; i < 8; ++i)
    for (unsigned j = 0; j < 8; ++j) {
      float want = c[i * 8 + j], d = 0, e = 0;
      for (unsigned k = 0; k < 8; ++k) {
        want += a[i * 16 + 8 + k] * b[j * 8 + k];
        d += to_half(ah[i * 8 + k]) * to_half(bh[k * 8 + j]);
        e += 0.5f * a[k * 16 + 8 + j];
      }
      check(at<float>(bc)[i * 8 + j] == want, "matmul8 C[%u][%u]: %g, want %g", i, j, at<float>(bc)[i * 8 + j], want);
      check(at<float>(bd)[j * 8 + i] == d, "matmul8 D[%u][%u] (stored transposed): %g, want %g", i, j,
            at<float>(bd)[j * 8 + i], d);
      check(at<float>(be)[i * 8 + j] == e, "matmul8 E[%u][%u]: %g, want %g", i, j, at<float>(be)[i * 8 + j], e);
    }
  for (void *p : {ba, bb, bc, bah, bbh, bd, be}) mr_metal_buffer_free(p);
}

void test_round16() {
  const float t11 = std::ldexp(1.0f, -11), t8 = std::ldexp(1.0f, -8);
  const std::vector<float> in = {1.0f + t11,      1.0f + 3 * t11,       65504.0f,  65520.0f,
                                 std::ldexp(1.0f, -24), std::ldexp(1.0f, -25), 3 * std::ldexp(1.0f, -25), -0.0f,
                                 2048.0f,         1.0f + t8,            1.0f + 3 * t8, 1.0f + t8 + std::ldexp(1.0f, -20),
                                 NAN,             -65519.0f};
  const uint16_t half_want[] = {0x3c00, 0x3c02, 0x7bff, 0x7c00, 0x0001, 0x0000, 0x0002, 0x8000,
                                0x6800, 0x3c04, 0x3c0c, 0x3c04, 0x7fff, 0xfbff};
  const uint16_t bf_want[] = {0x3f80, 0x3f80, 0x4780, 0x4780, 0x3380, 0x3300, 0x33c0, 0x8000,
                              0x4500, 0x3f80, 0x3f82, 0x3f81, 0x7fff, 0xc780};
  const unsigned n = static_cast<unsigned>(in.size());
  void *bi = buffer(in), *bh = buffer(std::vector<uint16_t>(n)), *bb = buffer(std::vector<uint16_t>(n)),
       *bs = buffer(std::vector<float>(n));
  check(run(ROUND16, 1, n, {bi, bh, bb, bs}) == 0, "round16: %s", mr_metal_last_error());
  for (unsigned i = 0; i < n; ++i) {
    check(at<uint16_t>(bh)[i] == half_want[i], "half(%a): 0x%04x, want 0x%04x", in[i], at<uint16_t>(bh)[i], half_want[i]);
    check(at<uint16_t>(bb)[i] == bf_want[i], "bfloat(%a): 0x%04x, want 0x%04x", in[i], at<uint16_t>(bb)[i], bf_want[i]);
  }
  check(at<float>(bs)[8] == 2048.0f, "half(2048) + half(1) = %g, want 2048 (ties to even)", at<float>(bs)[8]);
  check(at<float>(bs)[0] == 2.0f, "half(1) + half(1) = %g", at<float>(bs)[0]);
  for (void *p : {bi, bh, bb, bs}) mr_metal_buffer_free(p);
}

void test_vec_math() {
  void *bv = buffer(std::vector<float>{1, 2, 3, 4, -1, -2, -3, -4}), *bm = buffer(std::vector<float>(16));
  check(run(VEC_MATH, 1, 2, {bv, bm}) == 0, "vec_math: %s", mr_metal_last_error());
  const float *v = at<float>(bv), *m = at<float>(bm);
  const float want_v[8] = {3, 7.5f, 11.0f + 2.0f / 3.0f, 15.75f + 0.5f, -1, -0.5f, 0.0f - 1.0f / 3.0f, -0.25f + 0.5f};
  for (int i = 0; i < 8; ++i) check(std::fabs(v[i] - want_v[i]) < 1e-6f, "vec_math v[%d]: %g, want %g", i, v[i], want_v[i]);
  const float want_m[8] = {std::exp(1.0f), std::tanh(0.5f), 0.5f, 8.0f, 2.0f, 1.0f, 1.0f, 1.5f};
  for (int t = 0; t < 2; ++t)
    for (int i = 0; i < 8; ++i)
      check(std::fabs(m[t * 8 + i] - want_m[i]) < 1e-6f, "vec_math m[%d]: %g, want %g", i, m[t * 8 + i], want_m[i]);
  mr_metal_buffer_free(bv);
  mr_metal_buffer_free(bm);
}

// The host API's refusals: each is reported by mr_metal_end (and the command buffer).
void test_refusals() {
  mr_metal *other = nullptr;
  const char *const unknown[] = {"tg_sum", "no_such_kernel"};
  check(mr_metal_open(&other, nullptr, "x.metallib", unknown, 2) == MR_METAL_ERROR && !other &&
            std::strstr(mr_metal_last_error(), "no_such_kernel"),
        "open with an unknown kernel: %s", mr_metal_last_error());
  void *b = mr_metal_buffer_new(ctx, 64);
  struct Case { unsigned kernel; uint64_t groups; unsigned threads; const char *says; } cases[] = {
      {TG_SUM, 1, 0, "threads"}, {TG_SUM, 1, 1025, "threads"}, {TG_SUM, 0, 32, "threadgroups"},
      {99, 1, 32, "kernel 99"}, {TG_SUM, 1u << 30, 64, "2^32"}, {TG_SUM, 1ull << 63, 2, "2^32"}};
  for (const Case &c : cases) {
    check(run(c.kernel, c.groups, c.threads, {b}) == MR_METAL_ERROR && std::strstr(mr_metal_last_error(), c.says),
          "dispatch(%u, %llu, %u) not refused: %s", c.kernel, static_cast<unsigned long long>(c.groups), c.threads,
          mr_metal_last_error());
  }
  void *cb = mr_metal_command_buffer(ctx);
  mr_metal_encoder *e = mr_metal_encode(ctx, cb);
  char big[4097] = {};
  mr_metal_set_bytes(e, 0, big, sizeof big);
  check(mr_metal_end(e) == MR_METAL_ERROR && std::strstr(mr_metal_last_error(), "4097"), "set_bytes(4097): %s",
        mr_metal_last_error());
  check(mr_metal_commit_wait(cb) == MR_METAL_ERROR, "a command buffer with a refused command commits");
  check(run(TG_SUM, 1, 32, {b}, 40000) == MR_METAL_ERROR && std::strstr(mr_metal_last_error(), "threadgroup memory"),
        "40000 bytes of threadgroup memory: %s", mr_metal_last_error());
  mr_metal_buffer_free(b);
}

// Runs kernel in a child process, which must abort with one diagnostic line containing says.
void expect_abort(unsigned kernel, unsigned threads, const char *says, size_t tg0 = 0) {
  int fd[2];
  if (pipe(fd) != 0) std::abort();
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 2);
    close(fd[0]);
    void *b = mr_metal_buffer_new(ctx, 4096);
    run(kernel, 1, threads, {b}, tg0);
    std::_Exit(0);
  }
  close(fd[1]);
  std::string err;
  char buf[512];
  for (ssize_t k; (k = read(fd[0], buf, sizeof buf)) > 0;) err.append(buf, static_cast<size_t>(k));
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  // The diagnostic is the last line (a sanitizer may print warnings about fiber stacks before it).
  const size_t start = err.size() > 1 ? err.rfind('\n', err.size() - 2) + 1 : 0;
  const std::string line = err.substr(start);
  const std::string where = std::string(" in kernel ") + kNames[kernel] + ", threadgroup 0, thread ";
  const bool ok = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT &&
                  line.rfind("mithrilc Metal emulation: ", 0) == 0 && line.find(says) != std::string::npos &&
                  line.find(where) != std::string::npos && line.back() == '\n' &&
                  err.find("mithrilc") == start;
  check(ok, "%s did not abort as expected (status 0x%x): %s", kNames[kernel], status, err.c_str());
  if (ok) std::printf("ok: %s aborts: %s", kNames[kernel], line.c_str());
}

}  // namespace

int main() {
  if (mr_metal_open(&ctx, nullptr, "test_emu.metallib", kNames, sizeof kNames / sizeof kNames[0]) != 0) {
    std::fprintf(stderr, "FAIL: mr_metal_open: %s\n", mr_metal_last_error());
    return 1;
  }
  test_tg_sum();
  test_simd_int();
  test_simd_float();
  test_early_exit();
  test_matmul8();
  test_round16();
  test_vec_math();
  test_refusals();
  expect_abort(FAULT_BARRIER, 64, "barrier divergence: this thread exited while others wait at threadgroup_barrier()");
  expect_abort(FAULT_SIMD_MISMATCH, 32, "mismatched simd-group functions: ");
  expect_abort(FAULT_SIMD_BARRIER, 32, "deadlock: simd_sum() (mask 0xffffffff) waits for lanes 0xffff0000 that wait at threadgroup_barrier()");
  expect_abort(FAULT_TG_UNSET, 32, "[[threadgroup(1)]] read without mr_metal_set_threadgroup_memory", 64);
  expect_abort(FAULT_MATRIX_PARTIAL, 16, "simdgroup_load() in a simdgroup of lanes 0x0000ffff (needs all 32 threads)");
  mr_metal_close(ctx);
  if (failures) {
    std::fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("test_emu: all checks passed\n");
  return 0;
}
