// mithril_metal_emu.cpp: mithril_metal.h's API under emulation (C++17 over metal_emu.h).
//
// The kernels are the model's .metal compiled as C++, registered by its <name>_emu.cpp;
// mr_metal_open finds them by name. Buffers are host memory (64-byte aligned, zero-filled),
// so mr_metal_contents is the buffer itself. A dispatch runs when it is encoded, to completion
// (threadgroups over metal_emu.h's host-thread pool): commands run in order, as the serial
// encoders of the Objective-C implementation do, and a command buffer has nothing left to do
// at commit. A kernel fault (barrier divergence, mismatched simd-group functions, ...) aborts
// the process with one line on stderr:
//   mithrilc Metal emulation: <what> in kernel <name>, threadgroup <g>, thread <t>
//
// Build: c++ -std=c++17 -I<dir with metal_emu.h and simt_emu.h> -c mithril_metal_emu.cpp, and
// link with simt_emu.cpp's object (-lpthread).
#include "mithril_metal.h"  // before metal_emu.h: its qualifier macros would rewrite `device`

#include <cstddef>
#include <string>
#include <vector>

#include "metal_emu.h"

namespace mr_metal_emu {

static std::vector<Entry> &registry() {
  static std::vector<Entry> entries;  // a function's static: ready for other files' static init
  return entries;
}

Register::Register(const Entry *entries, unsigned count) {
  for (unsigned i = 0; i < count; ++i) registry().push_back(entries[i]);
}

Kernel find(const char *name) {
  for (const Entry &e : registry())
    if (std::strcmp(e.name, name) == 0) return e.fn;
  return nullptr;
}

}  // namespace mr_metal_emu

namespace {

thread_local std::string t_error;

int error(std::string msg) {
  t_error = std::move(msg);
  return MR_METAL_ERROR;
}

struct Buffer {
  void *bytes;
  size_t size;
};

struct CommandBuffer {
  bool failed = false;
  std::string why;  // the first refused command's reason
};

// Metal's limits on Apple GPUs.
constexpr size_t kMaxBytes = 4096;            // setBytes
constexpr size_t kMaxThreadgroupMemory = 32768;
constexpr unsigned kMaxThreads = 1024;

}  // namespace

struct mr_metal {
  std::vector<std::string> names;
  std::vector<mr_metal_emu::Kernel> fns;
};

struct mr_metal_encoder {
  mr_metal *ctx;
  CommandBuffer *cb;
  mr_metal_emu::Args args{};
  // set_bytes copies, owned by the encoder: a binding holds for every later dispatch.
  std::vector<std::max_align_t> bytes[31];
  size_t threadgroup_bytes[31] = {};
  std::string refused;  // the first refused command's reason; empty: none

  void refuse(std::string why) {
    if (refused.empty()) refused = std::move(why);
  }
};

extern "C" {

int mr_metal_open(mr_metal **ctx, void *, const char *, const char *const kernels[], unsigned count) {
  *ctx = nullptr;
  mr_metal *c = new mr_metal();
  for (unsigned i = 0; i < count; ++i) {
    mr_metal_emu::Kernel fn = mr_metal_emu::find(kernels[i]);
    if (!fn) {
      delete c;
      return error(std::string("mr_metal_open: kernel ") + kernels[i] +
                   " is not registered (no linked <name>_emu.cpp defines it)");
    }
    c->names.emplace_back(kernels[i]);
    c->fns.push_back(fn);
  }
  *ctx = c;
  return 0;
}

void mr_metal_close(mr_metal *ctx) { delete ctx; }

const char *mr_metal_last_error(void) { return t_error.c_str(); }

void *mr_metal_buffer_new(mr_metal *, size_t bytes) {
  if (bytes == 0) {
    error("mr_metal_buffer_new: a buffer of 0 bytes");
    return nullptr;
  }
  const size_t rounded = (bytes + 63) / 64 * 64;
  void *p = std::aligned_alloc(64, rounded);
  if (!p) {
    error("mr_metal_buffer_new: out of memory for " + std::to_string(bytes) + " bytes");
    return nullptr;
  }
  std::memset(p, 0, rounded);
  return new Buffer{p, bytes};
}

void mr_metal_buffer_free(void *buffer) {
  if (!buffer) return;
  std::free(static_cast<Buffer *>(buffer)->bytes);
  delete static_cast<Buffer *>(buffer);
}

void *mr_metal_contents(void *buffer) { return static_cast<Buffer *>(buffer)->bytes; }

void *mr_metal_command_buffer(mr_metal *) { return new CommandBuffer(); }

int mr_metal_commit_wait(void *command_buffer) {
  CommandBuffer *cb = static_cast<CommandBuffer *>(command_buffer);
  const bool failed = cb->failed;
  std::string why = cb->why;
  delete cb;
  return failed ? error("mr_metal_commit_wait: " + why) : 0;
}

mr_metal_encoder *mr_metal_encode(mr_metal *ctx, void *command_buffer) {
  mr_metal_encoder *e = new mr_metal_encoder();
  e->ctx = ctx;
  e->cb = static_cast<CommandBuffer *>(command_buffer);
  return e;
}

void mr_metal_set_buffer(mr_metal_encoder *e, unsigned index, void *buffer, uint64_t offset) {
  if (index >= 31) return e->refuse("mr_metal_set_buffer: index " + std::to_string(index) + " (at most 30)");
  const Buffer *b = static_cast<const Buffer *>(buffer);
  if (!b) return e->refuse("mr_metal_set_buffer: a null buffer at index " + std::to_string(index));
  if (offset > b->size)
    return e->refuse("mr_metal_set_buffer: offset " + std::to_string(offset) + " past the buffer's " +
                     std::to_string(b->size) + " bytes");
  e->args.buffer[index] = static_cast<char *>(b->bytes) + offset;
}

void mr_metal_set_bytes(mr_metal_encoder *e, unsigned index, const void *bytes, size_t size) {
  if (index >= 31) return e->refuse("mr_metal_set_bytes: index " + std::to_string(index) + " (at most 30)");
  if (size == 0 || size > kMaxBytes)
    return e->refuse("mr_metal_set_bytes: " + std::to_string(size) + " bytes (1 to 4096)");
  std::vector<std::max_align_t> &copy = e->bytes[index];
  copy.assign((size + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t), std::max_align_t());
  std::memcpy(copy.data(), bytes, size);
  e->args.buffer[index] = copy.data();
}

void mr_metal_set_threadgroup_memory(mr_metal_encoder *e, unsigned index, size_t size) {
  if (index >= 31) return e->refuse("mr_metal_set_threadgroup_memory: index " + std::to_string(index) + " (at most 30)");
  e->threadgroup_bytes[index] = (size + 15) / 16 * 16;
}

void mr_metal_dispatch(mr_metal_encoder *e, unsigned kernel_index, uint64_t groups, unsigned threads) {
  if (!e->refused.empty()) return;  // after a refused command the encoding is void
  if (kernel_index >= e->ctx->fns.size())
    return e->refuse("mr_metal_dispatch: kernel " + std::to_string(kernel_index) + " of " +
                     std::to_string(e->ctx->fns.size()));
  const std::string &name = e->ctx->names[kernel_index];
  if (threads < 1 || threads > kMaxThreads)
    return e->refuse("mr_metal_dispatch: " + name + " with " + std::to_string(threads) +
                     " threads a threadgroup (1 to 1024)");
  // thread_position_in_grid is a uint: the grid must fit in 32 bits.
  if (groups < 1 || groups > UINT32_MAX / threads)
    return e->refuse("mr_metal_dispatch: " + name + " with " + std::to_string(groups) +
                     " threadgroups of " + std::to_string(threads) + " (at least 1, fewer than 2^32 threads in all)");
  size_t tg = 0;
  for (size_t b : e->threadgroup_bytes) tg += b;
  if (tg > kMaxThreadgroupMemory)
    return e->refuse("mr_metal_dispatch: " + name + " with " + std::to_string(tg) +
                     " bytes of threadgroup memory (at most 32768)");
  mr_metal_emu::run(name.c_str(), e->ctx->fns[kernel_index], e->args, e->threadgroup_bytes,
                    static_cast<uint32_t>(groups), threads);
}

int mr_metal_end(mr_metal_encoder *e) {
  std::string refused = std::move(e->refused);
  CommandBuffer *cb = e->cb;
  delete e;
  if (refused.empty()) return 0;
  if (cb && !cb->failed) {
    cb->failed = true;
    cb->why = refused;
  }
  return error(refused);
}

}  // extern "C"
