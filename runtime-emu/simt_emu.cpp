// simt_emu.cpp: the scheduler of mithrilc's CPU emulation of GPU kernels (simt_emu.h says what
// it models): fibers with a hand-written context switch, blocks of fibers on a pool of host
// threads, the block barrier, warp / simd-group operations with their divergence and deadlock
// diagnostics. Compiled once per build (make's simt_emu.o, kept in mithrilc's build cache) and
// linked into every emulated program, CUDA's and Metal's.
#include "simt_emu.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>
#include <sys/mman.h>
#include <unistd.h>

// The context switch: hand-written for x86-64 and AArch64 (ELF), ucontext elsewhere or when
// MR_EMU_UCONTEXT is defined (glibc's swapcontext makes a sigprocmask syscall per switch, about
// 20x slower; -fcf-protection shadow stacks also need it, the hand-written switch "returns"
// into a fresh stack).
#if !defined(MR_EMU_UCONTEXT) && defined(__ELF__) && (defined(__x86_64__) || defined(__aarch64__))
#define MR_EMU_ASM_SWITCH 1
#else
#define MR_EMU_ASM_SWITCH 0
#include <ucontext.h>
#endif

namespace mr_simt {

unsigned env_unsigned(const char *name, unsigned dflt) {
  const char *v = std::getenv(name);
  if (!v || !*v) return dflt;
  char *end = nullptr;
  unsigned long long n = std::strtoull(v, &end, 10);
  if (end && (*end == 'k' || *end == 'K')) n <<= 10;
  if (end && (*end == 'm' || *end == 'M')) n <<= 20;
  return n ? static_cast<unsigned>(n) : dflt;
}

unsigned host_threads() {
  static const unsigned n = [] {
    unsigned hw = std::thread::hardware_concurrency();
    return env_unsigned("MR_EMU_THREADS", hw ? hw : 1);
  }();
  return n;
}

static size_t stack_bytes() {
  static const size_t n = [] {
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_t s = std::max<size_t>(env_unsigned("MR_EMU_STACK", 256u << 10), 16u << 10);
    return (s + page - 1) / page * page;
  }();
  return n;
}

// ---------------------------------------------------------------------------------------------
// Context switch
// ---------------------------------------------------------------------------------------------
#if MR_EMU_ASM_SWITCH
// mr_emu_ctx_switch(save, load): pushes the callee-saved registers, stores the stack pointer in
// *save, loads load as the stack pointer, pops and returns into the other context. A fresh
// stack holds a frame whose return address is mr_emu_ctx_start, which calls fn(arg) from two
// callee-saved registers.
extern "C" void mr_emu_ctx_switch(void **save, void *load);
extern "C" void mr_emu_ctx_start();
#if defined(__x86_64__)
__asm__(
    ".pushsection .text\n"
    ".globl mr_emu_ctx_switch\n"
    ".type mr_emu_ctx_switch,@function\n"
    ".p2align 4\n"
    "mr_emu_ctx_switch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size mr_emu_ctx_switch,.-mr_emu_ctx_switch\n"
    ".globl mr_emu_ctx_start\n"
    ".type mr_emu_ctx_start,@function\n"
    ".p2align 4\n"
    "mr_emu_ctx_start:\n"
    "  movq %rbx, %rdi\n"
    "  callq *%r12\n"
    "  ud2\n"
    ".size mr_emu_ctx_start,.-mr_emu_ctx_start\n"
    ".popsection\n");
#else  // AArch64
__asm__(
    ".pushsection .text\n"
    ".globl mr_emu_ctx_switch\n"
    ".type mr_emu_ctx_switch,%function\n"
    ".p2align 4\n"
    "mr_emu_ctx_switch:\n"
    "  sub sp, sp, #160\n"
    "  stp x19, x20, [sp, #0]\n"
    "  stp x21, x22, [sp, #16]\n"
    "  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n"
    "  stp x27, x28, [sp, #64]\n"
    "  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n"
    "  stp d10, d11, [sp, #112]\n"
    "  stp d12, d13, [sp, #128]\n"
    "  stp d14, d15, [sp, #144]\n"
    "  mov x9, sp\n"
    "  str x9, [x0]\n"
    "  mov sp, x1\n"
    "  ldp x19, x20, [sp, #0]\n"
    "  ldp x21, x22, [sp, #16]\n"
    "  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n"
    "  ldp x27, x28, [sp, #64]\n"
    "  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n"
    "  ldp d10, d11, [sp, #112]\n"
    "  ldp d12, d13, [sp, #128]\n"
    "  ldp d14, d15, [sp, #144]\n"
    "  add sp, sp, #160\n"
    "  ret\n"
    ".size mr_emu_ctx_switch,.-mr_emu_ctx_switch\n"
    ".globl mr_emu_ctx_start\n"
    ".type mr_emu_ctx_start,%function\n"
    ".p2align 4\n"
    "mr_emu_ctx_start:\n"
    "  mov x0, x19\n"
    "  blr x20\n"
    "  brk #0\n"
    ".size mr_emu_ctx_start,.-mr_emu_ctx_start\n"
    ".popsection\n");
#endif

struct Ctx { void *sp = nullptr; };
static void ctx_switch(Ctx *from, Ctx *to) { mr_emu_ctx_switch(&from->sp, to->sp); }
static void ctx_init(Ctx *c, char *stack_top, void (*fn)(void *), void *arg) {
  uintptr_t top = reinterpret_cast<uintptr_t>(stack_top) & ~static_cast<uintptr_t>(15);
#if defined(__x86_64__)
  // r15 r14 r13 r12=fn rbx=arg rbp, return address; after the final ret the stack pointer is
  // top, 16-aligned, as the call in mr_emu_ctx_start needs.
  void **f = reinterpret_cast<void **>(top) - 7;
  std::memset(f, 0, 7 * sizeof(void *));
  f[3] = reinterpret_cast<void *>(fn);
  f[4] = arg;
  f[6] = reinterpret_cast<void *>(&mr_emu_ctx_start);
#else
  // x19=arg x20=fn ... x29=0 x30=mr_emu_ctx_start, d8-d15.
  void **f = reinterpret_cast<void **>(top - 160);
  std::memset(f, 0, 160);
  f[0] = arg;
  f[1] = reinterpret_cast<void *>(fn);
  f[11] = reinterpret_cast<void *>(&mr_emu_ctx_start);
#endif
  c->sp = f;
}
#else
struct Ctx { ucontext_t uc; };
static void ctx_switch(Ctx *from, Ctx *to) { swapcontext(&from->uc, &to->uc); }
static void ctx_tramp(unsigned fhi, unsigned flo, unsigned ahi, unsigned alo) {
  auto fn = reinterpret_cast<void (*)(void *)>((static_cast<uintptr_t>(fhi) << 16 << 16) | flo);
  fn(reinterpret_cast<void *>((static_cast<uintptr_t>(ahi) << 16 << 16) | alo));
  std::abort();
}
static void ctx_init(Ctx *c, char *stack_top, void (*fn)(void *), void *arg) {
  size_t size = stack_bytes();
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack_top - size;
  c->uc.uc_stack.ss_size = size;
  c->uc.uc_link = nullptr;
  uintptr_t f = reinterpret_cast<uintptr_t>(fn), a = reinterpret_cast<uintptr_t>(arg);
  makecontext(&c->uc, reinterpret_cast<void (*)(void)>(&ctx_tramp), 4,
              static_cast<unsigned>(f >> 16 >> 16), static_cast<unsigned>(f),
              static_cast<unsigned>(a >> 16 >> 16), static_cast<unsigned>(a));
}
#endif

// ---------------------------------------------------------------------------------------------
// Blocks of fibers
// ---------------------------------------------------------------------------------------------
enum class St : unsigned char { Ready, Running, AtBlockBarrier, AtWarpBarrier, Done };
// A lane's copy waiting for its group's wait (async_copy): the bytes it read, and where they go.
struct AsyncCopy {
  unsigned char *dst;
  unsigned bytes, group;
  unsigned char data[16];
};
struct Fiber {
  Ctx ctx;
  Idx3 tid;
  unsigned linear;
  St state;
  Worker *w;
  char *map;  // mmap'ed guard page + stack
  size_t map_size;
  std::vector<AsyncCopy> copies;  // issued, not yet written, in issue order
  unsigned groups;                // the lane's committed groups of copies
};

// Lanes of one warp at the same operation: the group completes when every lane of mask
// arrived. A live group (Metal's simd-group functions, which name no mask) takes the warp's
// lanes that have not exited: its mask shrinks when one exits.
struct WarpGroup {
  uint32_t mask, arrived;
  Op op;
  bool live;
  const char *name;  // the API function, for diagnostics and to tell operations apart
  const Fold *fold;
};
struct Warp {
  uint32_t present, exited;
  unsigned ngroups;
  WarpGroup groups[32];
  uint64_t val[32], res[32];
  int arg[32], width[32];
  alignas(16) unsigned char exchange[32 * kExchangeBytes];  // warp_exchange()
};

// Per host thread: the fibers (reused across blocks and launches) and the running block.
struct Worker {
  Ctx sched;
  std::vector<Fiber *> fibers;
  const Launch *launch = nullptr;
  Idx3 tids_for{0, 0, 0};  // the block shape the fibers' thread indices were computed for
  unsigned n = 0, done = 0, bar_arrived = 0;
  int bar_acc = 0, bar_res = 0;
  Warp warps[32];
  ~Worker() {
    for (Fiber *f : fibers) {
      munmap(f->map, f->map_size);
      delete f;
    }
  }
};

__thread Tls t_ = {{0, 0, 0}, {0, 0, 0}, {1, 1, 1}, {1, 1, 1}, nullptr, nullptr, nullptr};

[[noreturn]] void fail(const char *what, const Fiber *f) {
  const Tls &t = t_;
  const Launch *L = t.launch;
  const Api *api = L ? L->api : nullptr;
  const Idx3 tid = f ? f->tid : Idx3{0, 0, 0};
  if (api && api->one_d)
    std::fprintf(stderr, "mithrilc %s emulation: %s in kernel %s, %s %u, thread %u\n",
                 api->target, what, L->name, api->group, t.bid.x, tid.x);
  else
    std::fprintf(stderr, "mithrilc %s emulation: %s in kernel %s, %s (%u,%u,%u), thread (%u,%u,%u)\n",
                 api ? api->target : "GPU", what, L ? L->name : "?", api ? api->group : "block",
                 t.bid.x, t.bid.y, t.bid.z, tid.x, tid.y, tid.z);
  std::fflush(stderr);
  std::abort();
}

// Leaves fiber f (already marked waiting or done) for the next ready fiber of the block, directly
// (one switch instead of two through the scheduler); the scheduler gets control back when no
// fiber after f is ready, and starts the next round-robin pass.
static void park(Worker *w, Fiber *f) {
  for (unsigned j = f->linear + 1; j < w->n; ++j) {
    Fiber *g = w->fibers[j];
    if (g->state == St::Ready) {
      g->state = St::Running;
      t_.f = g;
      t_.tid = g->tid;
      ctx_switch(&f->ctx, &g->ctx);
      return;
    }
  }
  ctx_switch(&f->ctx, &w->sched);
}

static void warp_complete(Warp &W, const WarpGroup &g);

// Completes group gi of warp W (every lane of its mask arrived): computes the results, marks the
// waiting lanes (all but `self`, the running one) ready and drops the group.
static void warp_release(Worker *w, Warp &W, unsigned gi, unsigned base, uint32_t self) {
  warp_complete(W, W.groups[gi]);
  for (uint32_t m = W.groups[gi].mask & ~self; m; m &= m - 1)
    w->fibers[base + static_cast<unsigned>(__builtin_ctz(m))]->state = St::Ready;
  W.groups[gi] = W.groups[--W.ngroups];
}

// A lane's kernel returned: live groups stop waiting for it (and may complete without it); a
// fixed mask that names it can never complete.
static void lane_exit(Worker *w, Fiber *f) {
  Warp &W = w->warps[f->linear >> 5];
  const uint32_t bit = 1u << (f->linear & 31);
  W.exited |= bit;
  for (unsigned g = 0; g < W.ngroups;) {
    WarpGroup &G = W.groups[g];
    if (!(G.mask & bit)) {
      ++g;
    } else if (G.live) {
      G.mask &= ~bit;
      if (G.arrived == G.mask) warp_release(w, W, g, f->linear & ~31u, 0);  // refills slot g
      else ++g;
    } else {
      char msg[160];
      std::snprintf(msg, sizeof msg, "thread exited while %s (mask 0x%08x) waits for it", G.name,
                    G.mask);
      fail(msg, f);
    }
  }
}

static void fiber_main(void *arg) {
  Fiber *f = static_cast<Fiber *>(arg);
  // Parked at the end of the loop between blocks: resuming the fiber runs the next thread.
  for (;;) {
    Worker *w = f->w;
    w->launch->invoke(w->launch->data);
    if (!f->copies.empty()) {
      char msg[120];
      std::snprintf(msg, sizeof msg, "thread exited with %zu cp.async %s no wait_group waited for",
                    f->copies.size(), f->copies.size() == 1 ? "copy" : "copies");
      fail(msg, f);
    }
    lane_exit(w, f);
    f->state = St::Done;
    ++w->done;
    park(w, f);
  }
}

static void prepare_worker(Worker &w, const Launch &L) {
  unsigned n = L.block.x * L.block.y * L.block.z;
  while (w.fibers.size() < n) {
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_t size = stack_bytes() + page;
    void *m = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      std::fprintf(stderr, "mithrilc %s emulation: cannot map a %zu-byte fiber stack\n",
                   L.api->target, size);
      std::abort();
    }
    // The lowest page faults on a stack overflow instead of corrupting the next stack.
    mprotect(m, page, PROT_NONE);
    Fiber *f = new Fiber();
    f->map = static_cast<char *>(m);
    f->map_size = size;
    f->w = &w;
    f->linear = static_cast<unsigned>(w.fibers.size());
    ctx_init(&f->ctx, f->map + size, &fiber_main, f);
    w.fibers.push_back(f);
  }
  if (w.tids_for.x != L.block.x || w.tids_for.y != L.block.y || w.tids_for.z != L.block.z) {
    for (unsigned i = 0; i < n; ++i)
      w.fibers[i]->tid = Idx3{i % L.block.x, i / L.block.x % L.block.y, i / (L.block.x * L.block.y)};
    w.tids_for = L.block;
  }
  w.launch = &L;
  w.n = n;
  t_.w = &w;
  t_.launch = &L;
  t_.bdim = L.block;
  t_.gdim = L.grid;
}

// Called when no fiber can run and some have not finished: name the fault.
[[noreturn]] static void diagnose(Worker &w) {
  const Api &api = *w.launch->api;
  const Fiber *exited = nullptr, *at_bar = nullptr, *at_warp = nullptr;
  for (unsigned i = 0; i < w.n; ++i) {
    const Fiber *f = w.fibers[i];
    if (f->state == St::Done && !exited) exited = f;
    if (f->state == St::AtBlockBarrier && !at_bar) at_bar = f;
    if (f->state == St::AtWarpBarrier && !at_warp) at_warp = f;
  }
  char msg[240];
  if (at_bar && exited) {
    std::snprintf(msg, sizeof msg,
                  "barrier divergence: this thread exited while others wait at %s", api.barrier);
    fail(msg, exited);
  }
  if (at_warp) {
    const Warp &W = w.warps[at_warp->linear >> 5];
    const WarpGroup *mine = nullptr;
    for (unsigned g = 0; g < W.ngroups; ++g)
      if (W.groups[g].arrived & (1u << (at_warp->linear & 31))) mine = &W.groups[g];
    for (unsigned g = 0; mine && g < W.ngroups; ++g)
      if (&W.groups[g] != mine && (W.groups[g].mask & mine->mask)) {
        std::snprintf(msg, sizeof msg,
                      "mismatched %s: %s (mask 0x%08x) while lanes 0x%08x wait at %s (mask 0x%08x)",
                      api.collectives, mine->name, mine->mask, W.groups[g].arrived,
                      W.groups[g].name, W.groups[g].mask);
        fail(msg, at_warp);
      }
    if (mine) {
      std::snprintf(msg, sizeof msg, "deadlock: %s (mask 0x%08x) waits for lanes 0x%08x that wait at %s",
                    mine->name, mine->mask, mine->mask & ~mine->arrived, api.barrier);
      fail(msg, at_warp);
    }
  }
  fail("deadlock: threads wait at different barriers", at_bar ? at_bar : at_warp);
}

static void run_block(Worker &w, Idx3 bid) {
  t_.bid = bid;
  w.done = w.bar_arrived = 0;
  w.bar_acc = 0;
  for (unsigned i = 0; i < (w.n + 31) / 32; ++i) {
    unsigned lanes = std::min(32u, w.n - 32 * i);
    w.warps[i].present = lanes == 32 ? ~0u : (1u << lanes) - 1;
    w.warps[i].exited = 0;
    w.warps[i].ngroups = 0;
  }
  for (unsigned i = 0; i < w.n; ++i) {
    w.fibers[i]->state = St::Ready;
    w.fibers[i]->copies.clear();
    w.fibers[i]->groups = 0;
  }
  // Round robin: each ready fiber runs until it finishes or waits at a barrier, then hands on
  // to the next ready one (park()). A barrier releases its waiters by marking them ready; the
  // next pass runs them.
  for (;;) {
    unsigned i = 0;
    while (i < w.n && w.fibers[i]->state != St::Ready) ++i;
    if (i == w.n) {
      if (w.done == w.n) return;
      diagnose(w);
    }
    Fiber *f = w.fibers[i];
    f->state = St::Running;
    t_.f = f;
    t_.tid = f->tid;
    ctx_switch(&w.sched, &f->ctx);
  }
}

static void run_blocks(const Launch &L, std::atomic<uint64_t> &next, uint64_t total) {
  static thread_local Worker worker;
  prepare_worker(worker, L);
  const uint64_t gx = L.grid.x, gxy = uint64_t(L.grid.x) * L.grid.y;
  for (uint64_t b; (b = next.fetch_add(1, std::memory_order_relaxed)) < total;)
    run_block(worker, Idx3{unsigned(b % gx), unsigned(b / gx % L.grid.y), unsigned(b / gxy)});
  t_.w = nullptr;
  t_.launch = nullptr;
  t_.f = nullptr;
}

// Host threads that run blocks beside the launching thread, started at the first launch of
// more than one block.
class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> g(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread &t : threads_) t.join();
  }
  void run(const Launch &L) {
    std::lock_guard<std::mutex> serial(launch_m_);  // one launch at a time
    uint64_t total = uint64_t(L.grid.x) * L.grid.y * L.grid.z;
    unsigned helpers = static_cast<unsigned>(std::min<uint64_t>(host_threads(), total)) - 1;
    next_.store(0, std::memory_order_relaxed);
    if (helpers == 0) {
      run_blocks(L, next_, total);
      return;
    }
    {
      std::lock_guard<std::mutex> g(m_);
      while (threads_.size() < helpers) threads_.emplace_back([this] { loop(); });
      job_ = &L;
      total_ = total;
      wanted_ = helpers;
      active_ = helpers;
      ++gen_;
    }
    cv_.notify_all();
    run_blocks(L, next_, total);
    std::unique_lock<std::mutex> g(m_);
    done_cv_.wait(g, [this] { return active_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> g(m_);
    for (;;) {
      cv_.wait(g, [&] { return stop_ || (gen_ != seen && wanted_ > 0); });
      if (stop_) return;
      seen = gen_;
      --wanted_;
      const Launch *L = job_;
      uint64_t total = total_;
      g.unlock();
      run_blocks(*L, next_, total);
      g.lock();
      if (--active_ == 0) done_cv_.notify_one();
    }
  }
  std::mutex launch_m_, m_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> next_{0};
  const Launch *job_ = nullptr;
  uint64_t total_ = 0, gen_ = 0;
  unsigned wanted_ = 0, active_ = 0;
  bool stop_ = false;
};

static Pool &pool() {
  static Pool p;
  return p;
}

void launch(const Launch &L) { pool().run(L); }

uint32_t live_lanes() {
  const Warp &W = t_.w->warps[t_.f->linear >> 5];
  return W.present & ~W.exited;
}

unsigned char *warp_exchange() { return t_.w->warps[t_.f->linear >> 5].exchange; }

// ---------------------------------------------------------------------------------------------
// Asynchronous copies (called from kernels, on a fiber)
// ---------------------------------------------------------------------------------------------
void async_copy(void *dst, const void *src, unsigned bytes) {
  Fiber *f = t_.f;
  if ((bytes != 4 && bytes != 8 && bytes != 16) ||
      (reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) % bytes) {
    char msg[120];
    std::snprintf(msg, sizeof msg, "cp.async of %u bytes from %p to %p: misaligned address", bytes, src,
                  dst);
    fail(msg, f);
  }
  static const bool early = [] {
    const char *v = std::getenv("MR_EMU_CP_ASYNC");
    return v && std::strcmp(v, "early") == 0;
  }();
  if (early) {
    std::memcpy(dst, src, bytes);
    return;
  }
  AsyncCopy c;
  c.dst = static_cast<unsigned char *>(dst);
  c.bytes = bytes;
  c.group = f->groups;
  std::memcpy(c.data, src, bytes);
  f->copies.push_back(c);
}

void async_commit() { ++t_.f->groups; }

void async_wait(unsigned pending) {
  Fiber *f = t_.f;
  if (f->groups <= pending) return;
  const unsigned done = f->groups - pending;  // groups 0 .. done - 1 complete
  size_t kept = 0;
  for (const AsyncCopy &c : f->copies) {
    if (c.group < done) std::memcpy(c.dst, c.data, c.bytes);
    else f->copies[kept++] = c;
  }
  f->copies.resize(kept);
}

// ---------------------------------------------------------------------------------------------
// Barriers (called from kernels, on a fiber)
// ---------------------------------------------------------------------------------------------
// The block barrier; returns the sum of the threads' pred (CUDA's __syncthreads_count).
int block_barrier(int pred) {
  Worker *w = t_.w;
  Fiber *f = t_.f;
  w->bar_acc += pred;
  if (++w->bar_arrived == w->n) {
    // The last thread to arrive releases the others and runs on: a valid schedule that saves
    // a switch.
    w->bar_res = w->bar_acc;
    w->bar_acc = 0;
    w->bar_arrived = 0;
    for (unsigned i = 0; i < w->n; ++i)
      if (w->fibers[i]->state == St::AtBlockBarrier) w->fibers[i]->state = St::Ready;
    return w->bar_res;
  }
  f->state = St::AtBlockBarrier;
  park(w, f);
  return w->bar_res;
}

static void warp_complete(Warp &W, const WarpGroup &g) {
  uint32_t ballot = 0;
  if (g.op == Op::Ballot || g.op == Op::Any || g.op == Op::All)
    for (uint32_t m = g.mask; m; m &= m - 1) {
      unsigned l = static_cast<unsigned>(__builtin_ctz(m));
      if (W.val[l]) ballot |= 1u << l;
    }
  if (g.op == Op::Reduce || g.op == Op::ScanIncl || g.op == Op::ScanExcl) {
    // In lane order: lane l's scan is the fold of the lanes of the mask up to l.
    uint64_t acc = g.fold->identity;
    bool first = true;
    for (uint32_t m = g.mask; m; m &= m - 1) {
      unsigned l = static_cast<unsigned>(__builtin_ctz(m));
      if (g.op == Op::ScanExcl) W.res[l] = acc;
      acc = first ? W.val[l] : g.fold->fn(acc, W.val[l]);
      first = false;
      if (g.op == Op::ScanIncl) W.res[l] = acc;
    }
    if (g.op == Op::Reduce)
      for (uint32_t m = g.mask; m; m &= m - 1) W.res[__builtin_ctz(m)] = acc;
    return;
  }
  for (uint32_t m = g.mask; m; m &= m - 1) {
    unsigned l = static_cast<unsigned>(__builtin_ctz(m));
    unsigned wd = static_cast<unsigned>(W.width[l]), seg = l & ~(wd - 1);
    unsigned a = static_cast<unsigned>(W.arg[l]), src = l;
    switch (g.op) {
      case Op::Sync:
      case Op::Collective:
      case Op::Reduce:
      case Op::ScanIncl:
      case Op::ScanExcl: break;
      case Op::Shfl: src = seg + (a & (wd - 1)); break;
      case Op::ShflUp: src = (l - seg >= a) ? l - a : l; break;
      case Op::ShflDown: src = (l - seg + a < wd) ? l + a : l; break;
      case Op::ShflXor: src = (l ^ a) < seg + wd ? (l ^ a) : l; break;
      case Op::First: src = static_cast<unsigned>(__builtin_ctz(g.mask)); break;
      case Op::Ballot: W.res[l] = ballot; continue;
      case Op::Any: W.res[l] = ballot != 0; continue;
      case Op::All: W.res[l] = ballot == g.mask; continue;
    }
    // Reading a lane outside the mask is undefined in CUDA and Metal; it yields the own value.
    W.res[l] = (src < 32 && (g.mask >> src & 1)) ? W.val[src] : W.val[l];
  }
}

// The calling lane reaches warp operation `name` with value v: waits until every lane of the
// group arrived and returns its result. `mask` names the lanes (CUDA's *_sync); live (mask
// ignored) takes the warp's lanes that have not exited, now and as they exit (Metal).
uint64_t warp_arrive(Op op, const char *name, uint32_t mask, bool live, uint64_t v,
                            int arg, int width, const Fold *fold) {
  Worker *w = t_.w;
  Fiber *f = t_.f;
  unsigned lane = f->linear & 31;
  Warp &W = w->warps[f->linear >> 5];
  uint32_t bit = 1u << lane;
  if (live) mask = W.present & ~W.exited;
  if (!(mask & bit) || (mask & ~W.present) || (mask & W.exited) || width <= 0 || width > 32 ||
      (width & (width - 1))) {
    char msg[200];
    std::snprintf(msg, sizeof msg, "%s with mask 0x%08x %s", name, mask,
                  !(mask & bit)            ? "that does not name the calling lane"
                  : (mask & ~W.present)    ? "that names lanes beyond the block's threads"
                  : (mask & W.exited)      ? "that names an exited lane"
                                           : "and a width that is not a power of 2 up to 32");
    fail(msg, f);
  }
  W.val[lane] = v;
  W.arg[lane] = arg;
  W.width[lane] = width;
  // Lanes at the same operation with the same mask form a group. Groups may overlap: a lane
  // may reach another operation while lanes it names still finish an earlier one. Whether
  // overlapping groups can ever complete is only known when the block stalls (diagnose()).
  unsigned gi = 0;
  for (; gi < W.ngroups; ++gi) {
    const WarpGroup &g = W.groups[gi];
    if (g.op == op && g.live == live && (live || g.mask == mask) && g.fold == fold &&
        std::strcmp(g.name, name) == 0)
      break;
  }
  if (gi < W.ngroups)
    W.groups[gi].arrived |= bit;
  else
    W.groups[W.ngroups++] = WarpGroup{mask, bit, op, live, name, fold};
  if (W.groups[gi].arrived == W.groups[gi].mask) {
    warp_release(w, W, gi, f->linear & ~31u, bit);
    return W.res[lane];
  }
  f->state = St::AtWarpBarrier;
  park(w, f);
  return W.res[lane];
}

}  // namespace mr_simt

