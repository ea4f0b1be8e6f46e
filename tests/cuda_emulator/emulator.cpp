// SPDX-License-Identifier: GPL-3.0-or-later
// The emulator's scheduler (emulator.h): a block's threads as fibers on the
// calling thread, switched at barriers and warp exchanges.
#include "tests/cuda_emulator/emulator.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define TB_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TB_EMU_ASAN 1
#endif
#endif
#if defined(TB_EMU_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif

namespace tb_emu {

ThreadState* g_thread = nullptr;

namespace {

cudaError_t g_last = cudaSuccess;
std::string g_message;
Schedule g_schedule = Schedule::forward;
Counters g_counters;

// Room for a kernel's frames (more under the address sanitizer), one guard page below.
constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kGuardBytes = 4096;

struct Stack {
  char* base = nullptr;  // lowest usable byte
  size_t size = 0;
};

Stack new_stack() {
  void* p = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "cuda emulator: no memory for a thread's stack\n");
    std::abort();
  }
  mprotect(p, kGuardBytes, PROT_NONE);  // an overflow faults instead of writing a neighbour
  return {static_cast<char*>(p) + kGuardBytes, kStackBytes};
}

// Stacks live as long as the process: a launch of n threads reuses the first n.
std::vector<Stack>& stacks(size_t n) {
  static std::vector<Stack> pool;
  while (pool.size() < n) pool.push_back(new_stack());
  return pool;
}

enum class Wait { none, barrier, warp_arrive, warp_leave };

struct Fiber {
  ucontext_t ctx;
  Stack stack;
  ThreadState state;
  unsigned linear = 0;
  bool done = false;
  Wait wait = Wait::none;
  const uint64_t* wait_gen = nullptr;
  uint64_t wait_value = 0;
  void* fake_stack = nullptr;  // the address sanitizer's, while switched out
};

struct Warp {
  uint64_t slots[32] = {};
  unsigned arrived = 0, left = 0;  // lane masks of the exchange under way
  uint64_t arrive_gen = 0, leave_gen = 0;
  const char* what = nullptr;
};

struct Block {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  ucontext_t scheduler;
  Fiber* current = nullptr;
  unsigned threads = 0;
  int live = 0, exited = 0, at_barrier = 0;
  uint64_t barrier_gen = 0;
  const char* barrier_file = nullptr;
  int barrier_line = 0;
  std::string fault;  // set: the block is abandoned
  Body body = nullptr;
  void* closure = nullptr;
  const void* scheduler_stack_bottom = nullptr;
  size_t scheduler_stack_size = 0;
  void* scheduler_fake_stack = nullptr;
};

Block* g_block = nullptr;

std::string where(const ThreadState& t) {
  std::ostringstream os;
  os << "thread (" << t.thread_idx.x << "," << t.thread_idx.y << "," << t.thread_idx.z
     << ") of block (" << t.block_idx.x << "," << t.block_idx.y << "," << t.block_idx.z << ")";
  return os.str();
}

// Fiber -> scheduler. `exiting`: the fiber never runs again.
void switch_out(bool exiting) {
  Block& b = *g_block;
  Fiber& f = *b.current;
#if defined(TB_EMU_ASAN)
  __sanitizer_start_switch_fiber(exiting ? nullptr : &f.fake_stack, b.scheduler_stack_bottom,
                                 b.scheduler_stack_size);
#else
  (void)exiting;
#endif
  swapcontext(&f.ctx, &b.scheduler);
#if defined(TB_EMU_ASAN)
  __sanitizer_finish_switch_fiber(f.fake_stack, nullptr, nullptr);
#endif
}

[[noreturn]] void fail_here(const std::string& message) {
  g_block->fault = message;
  for (;;) switch_out(false);  // never resumed: the scheduler abandons the block
}

void fiber_entry() {
  Block& b = *g_block;
  Fiber& f = *b.current;
#if defined(TB_EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &b.scheduler_stack_bottom, &b.scheduler_stack_size);
#endif
  b.body(b.closure);
  f.done = true;
  --b.live;
  ++b.exited;
  if (b.at_barrier > 0) {
    std::ostringstream os;
    os << where(f.state) << " exited while " << b.at_barrier << " of its block's threads wait at "
       << "__syncthreads (" << b.barrier_file << ":" << b.barrier_line
       << "): on the GPU that barrier may hang or pass early";
    b.fault = os.str();
  }
  switch_out(true);
  std::abort();  // not reached: an exited fiber is never switched to
}

void describe_waits(std::ostringstream& os, const Block& b) {
  int shown = 0;
  for (const Fiber& f : b.fibers) {
    if (f.done || shown == 4) continue;
    os << "; " << where(f.state) << " waits at "
       << (f.wait == Wait::barrier ? "__syncthreads" : "a warp shuffle");
    ++shown;
  }
}

bool run_block(Block& b, const dim3& grid, const dim3& block, const uint3& block_idx) {
  const unsigned n = b.threads;
  std::vector<Stack>& pool = stacks(n);
  b.fibers.assign(n, Fiber{});
  b.warps.assign((n + 31) / 32, Warp{});
  b.live = int(n);
  b.exited = b.at_barrier = 0;
  b.fault.clear();
  for (unsigned t = 0; t < n; ++t) {
    Fiber& f = b.fibers[t];
    f.linear = t;
    f.stack = pool[t];
    f.state.thread_idx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
    f.state.block_idx = block_idx;
    f.state.block_dim = block;
    f.state.grid_dim = grid;
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.base;
    f.ctx.uc_stack.ss_size = f.stack.size;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_entry, 0);
  }
  const bool reverse = g_schedule == Schedule::reverse;
  for (;;) {
    bool ran = false, left = false;
    for (unsigned k = 0; k < n; ++k) {
      Fiber& f = b.fibers[reverse ? n - 1 - k : k];
      if (f.done) continue;
      left = true;
      if (f.wait != Wait::none && *f.wait_gen == f.wait_value) continue;
      ran = true;
      b.current = &f;
      g_thread = &f.state;
#if defined(TB_EMU_ASAN)
      __sanitizer_start_switch_fiber(&b.scheduler_fake_stack, f.stack.base, f.stack.size);
#endif
      swapcontext(&b.scheduler, &f.ctx);
#if defined(TB_EMU_ASAN)
      __sanitizer_finish_switch_fiber(b.scheduler_fake_stack, nullptr, nullptr);
#endif
      if (!b.fault.empty()) return false;
    }
    if (!left) return true;
    if (!ran) {
      std::ostringstream os;
      os << "deadlock in block (" << block_idx.x << "," << block_idx.y << "," << block_idx.z
         << "): " << b.live << " threads wait and none can go on";
      describe_waits(os, b);
      b.fault = os.str();
      return false;
    }
  }
}

bool refuse(cudaError_t e, const std::string& message) {
  g_last = e;
  g_message = message;
  return false;
}

}  // namespace

void set_schedule(Schedule s) { g_schedule = s; }
Schedule schedule() { return g_schedule; }
const std::string& last_launch_error() { return g_message; }
Counters counters() { return g_counters; }

bool run_grid(const Config& c, Body body, void* closure) {
  const dim3 g = c.grid, bl = c.block;
  std::ostringstream why;
  const uint64_t threads = uint64_t(bl.x) * bl.y * bl.z;
  if (threads == 0 || uint64_t(g.x) * g.y * g.z == 0)
    why << "an empty grid or block";
  else if (threads > 1024 || bl.x > 1024 || bl.y > 1024 || bl.z > 64)
    why << "block (" << bl.x << "," << bl.y << "," << bl.z << ") over 1024 threads or (1024, 1024, 64)";
  else if (g.x > 2147483647u || g.y > 65535 || g.z > 65535)
    why << "grid (" << g.x << "," << g.y << "," << g.z << ") over (2^31-1, 65535, 65535)";
  else if (c.shared_bytes > 48 * 1024)
    why << "dynamic shared memory of " << c.shared_bytes << " bytes (over 48 KiB without opting in)";
  if (!why.str().empty())
    return refuse(cudaErrorInvalidConfiguration, "invalid launch configuration: " + why.str());
  if (g_block) return refuse(cudaErrorLaunchFailure, "a launch from inside a kernel");

  Block b;
  b.threads = unsigned(threads);
  b.body = body;
  b.closure = closure;
  g_block = &b;
  const uint64_t blocks = uint64_t(g.x) * g.y * g.z;
  const bool reverse = g_schedule == Schedule::reverse;
  bool ok = true;
  for (uint64_t k = 0; k < blocks && ok; ++k) {
    const uint64_t i = reverse ? blocks - 1 - k : k;
    const uint3 idx{unsigned(i % g.x), unsigned((i / g.x) % g.y), unsigned(i / (uint64_t(g.x) * g.y))};
    ok = run_block(b, g, bl, idx);
    ++g_counters.blocks;
  }
  g_block = nullptr;
  g_thread = nullptr;
  ++g_counters.launches;
  if (!ok) return refuse(cudaErrorLaunchFailure, "kernel fault: " + b.fault);
  return true;
}

void syncthreads(const char* file, int line) {
  Block& b = *g_block;
  Fiber& f = *b.current;
  if (b.exited > 0) {
    std::ostringstream os;
    os << where(f.state) << " reached __syncthreads (" << file << ":" << line << ") after "
       << b.exited << " of its block's " << b.threads << " threads exited";
    fail_here(os.str());
  }
  if (b.at_barrier == 0) {
    b.barrier_file = file;
    b.barrier_line = line;
  } else if (line != b.barrier_line || std::strcmp(file, b.barrier_file) != 0) {
    std::ostringstream os;
    os << "threads of one block wait at different barriers: " << where(f.state) << " at " << file
       << ":" << line << ", others at " << b.barrier_file << ":" << b.barrier_line;
    fail_here(os.str());
  }
  if (++b.at_barrier == b.live) {
    b.at_barrier = 0;
    ++b.barrier_gen;
    ++g_counters.barriers;
    return;
  }
  f.wait = Wait::barrier;
  f.wait_gen = &b.barrier_gen;
  f.wait_value = b.barrier_gen;
  switch_out(false);
  f.wait = Wait::none;
}

uint64_t warp_exchange(unsigned mask, uint64_t bits, int src, const char* what) {
  Block& b = *g_block;
  Fiber& f = *b.current;
  const unsigned warp = f.linear / 32, lane = f.linear % 32;
  const unsigned lanes = std::min(32u, b.threads - warp * 32);
  const unsigned all = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
  std::ostringstream os;
  if (mask != all) {
    os << what << " by " << where(f.state) << " with mask 0x" << std::hex << mask
       << " where its warp's lanes are 0x" << all;
    fail_here(os.str());
  }
  for (unsigned l = 0; l < lanes; ++l)
    if (b.fibers[warp * 32 + l].done) {
      os << what << " by " << where(f.state) << ": lane " << l
         << " of its warp has exited, so it never joins";
      fail_here(os.str());
    }
  if (src < 0 || src >= int(lanes)) {
    os << what << " by " << where(f.state) << " reads lane " << src << " outside its warp";
    fail_here(os.str());
  }
  Warp& w = b.warps[warp];
  if (w.arrived == 0) {
    w.what = what;
  } else if (std::strcmp(w.what, what) != 0) {
    os << "lanes of one warp in different shuffles: " << what << " and " << w.what << " ("
       << where(f.state) << ")";
    fail_here(os.str());
  }
  w.slots[lane] = bits;
  w.arrived |= 1u << lane;
  if (w.arrived == mask) {
    w.arrived = 0;
    ++w.arrive_gen;
    ++g_counters.shuffles;
  } else {
    f.wait = Wait::warp_arrive;
    f.wait_gen = &w.arrive_gen;
    f.wait_value = w.arrive_gen;
    switch_out(false);
    f.wait = Wait::none;
  }
  const uint64_t got = w.slots[src];
  // Every lane reads before any lane's next exchange may write the slots.
  w.left |= 1u << lane;
  if (w.left == mask) {
    w.left = 0;
    ++w.leave_gen;
  } else {
    f.wait = Wait::warp_leave;
    f.wait_gen = &w.leave_gen;
    f.wait_value = w.leave_gen;
    switch_out(false);
    f.wait = Wait::none;
  }
  return got;
}

}  // namespace tb_emu

cudaError_t cudaGetLastError() {
  const cudaError_t e = tb_emu::g_last;
  tb_emu::g_last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return tb_emu::g_last; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}

// The emulator's own words for the last failed launch: what the tests print.
const char* cudaGetErrorString(cudaError_t e) {
  if (e == cudaErrorInvalidConfiguration || e == cudaErrorLaunchFailure)
    return tb_emu::last_launch_error().c_str();
  return cudaGetErrorName(e);
}
