// SPDX-License-Identifier: GPL-3.0-or-later
// The emulator's scheduler (emulator.h): a block's threads as fibers on the
// calling thread, switched at barriers and warp exchanges.
#include "tests/cuda_emulator/emulator.h"

#include <pthread.h>
#include <sys/mman.h>

#include <boost/context/detail/fcontext.hpp>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <memory>
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
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace tb_emu {

ThreadState* g_thread = nullptr;

namespace {

std::string g_message;
Schedule g_schedule = Schedule::forward;
Counters g_counters;

// Room for a kernel's frames (a few KiB; the address sanitizer keeps its
// locals on fake stacks of its own), one guard page below.
constexpr size_t kStackBytes = 64 * 1024;
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

namespace ctx = boost::context::detail;

// A context with a stack of its own that runs the block's threads one
// after another: parked (suspended after its thread finished) between
// threads, blocks and launches, so a thread costs no new context and, under
// the address sanitizer, no new fake stack. `broken`: left inside a kernel
// by a fault or a deadlock; made afresh before its next use.
struct Worker {
  ctx::fcontext_t ctx = nullptr;
  Stack stack;
  bool started = false, broken = false;
  void* fake_stack = nullptr;  // the address sanitizer's, while switched out
};

// Workers live as long as the process (never moved: contexts point into them).
std::vector<std::unique_ptr<Worker>>& workers(size_t n) {
  static std::vector<std::unique_ptr<Worker>> pool;
  while (pool.size() < n) {
    pool.push_back(std::make_unique<Worker>());
    pool.back()->stack = new_stack();
  }
  return pool;
}

// Switches to `to`, leaving the current context in *from. Boost.Context's
// fcontext switch saves only the callee-saved registers: the C library's
// swapcontext also saves and restores the signal mask, a system call each
// way, which was most of an emulated model step's time. Whoever switches
// passes its own slot; the side that resumes stores the context it left.
void swap(ctx::fcontext_t* from, ctx::fcontext_t to) {
  const ctx::transfer_t t = ctx::jump_fcontext(to, from);
  *static_cast<ctx::fcontext_t*>(t.data) = t.fctx;
}

enum class Wait { none, barrier, warp_arrive, warp_leave };

// One CUDA thread of the block under way, run by a worker.
struct Fiber {
  Worker* worker = nullptr;
  ThreadState state;
  unsigned linear = 0;
  bool done = false;
  Wait wait = Wait::none;
  const uint64_t* wait_gen = nullptr;
  uint64_t wait_value = 0;
};

struct Warp {
  uint64_t slots[32] = {};
  unsigned arrived = 0, left = 0;  // lane masks of the exchange under way
  uint64_t arrive_gen = 0, leave_gen = 0;
  const char* what = nullptr;
};

// One block under way. Its threads' workers switch straight to the next
// runnable thread's in the schedule's order (one context switch each); the
// scheduler's context is resumed when none is left: all done, a fault, or a
// deadlock.
struct Block {
  std::vector<Fiber> fibers;
  bool reverse = false;  // the schedule's order: thread k is fibers[reverse ? n-1-k : k]
  std::vector<Warp> warps;
  ctx::fcontext_t scheduler = nullptr;
  Fiber* current = nullptr;
  unsigned pos = 0;  // current's place in the schedule's order
  unsigned threads = 0;
  int live = 0, exited = 0, at_barrier = 0;
  uint64_t barrier_gen = 0;
  const char* barrier_file = nullptr;
  int barrier_line = 0;
  std::string fault;  // set: the block is abandoned
  Body body = nullptr;
  void* closure = nullptr;
  const void* scheduler_stack_bottom = nullptr;  // for the sanitizer's switch annotations
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

// The fiber to run after the current one: the next runnable in the order,
// the current last (it runs on only if it is not waiting); null when none.
Fiber* next_runnable(Block& b) {
  for (unsigned k = 1; k <= b.threads; ++k) {
    const unsigned p = (b.pos + k) % b.threads;
    Fiber& f = b.fibers[b.reverse ? b.threads - 1 - p : p];
    if (f.done || (f.wait != Wait::none && *f.wait_gen == f.wait_value)) continue;
    b.pos = p;
    return &f;
  }
  return nullptr;
}

// Leaves the current thread's worker for the next runnable thread's, or for
// the scheduler. `exiting`: the worker is abandoned (a fault). Only the
// worker is touched after the switch: by then the block may be another one.
void switch_away(bool exiting) {
  Block& b = *g_block;
  Fiber& cur = *b.current;
  Worker& me = *cur.worker;
  Fiber* next = b.fault.empty() ? next_runnable(b) : nullptr;
  if (next == &cur) return;
  const void* bottom = next ? next->worker->stack.base : b.scheduler_stack_bottom;
  const size_t size = next ? next->worker->stack.size : b.scheduler_stack_size;
#if defined(TB_EMU_ASAN)
  __sanitizer_start_switch_fiber(exiting ? nullptr : &me.fake_stack, bottom, size);
#else
  (void)exiting, (void)bottom, (void)size;
#endif
  if (next) {
    b.current = next;
    g_thread = &next->state;
    swap(&me.ctx, next->worker->ctx);
  } else {
    swap(&me.ctx, b.scheduler);
  }
#if defined(TB_EMU_ASAN)
  __sanitizer_finish_switch_fiber(me.fake_stack, nullptr, nullptr);
#endif
}

// A fault found by the current thread: the message, made in its own frame
// (nothing on the abandoned fiber's stack owns memory), ends the block.
template <typename Say>
[[noreturn]] void fail_here(Say&& say) {
  {
    std::ostringstream os;
    say(os);
    g_block->fault = os.str();
  }
  g_block->current->worker->broken = true;
  switch_away(true);
  std::abort();  // not reached: the scheduler abandons the block
}

// A worker's life: run the current thread of the current block, park, and
// again for whichever thread it is given next.
void worker_main(ctx::transfer_t started_by) {
  *static_cast<ctx::fcontext_t*>(started_by.data) = started_by.fctx;
#if defined(TB_EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
  for (;;) {
    Block& b = *g_block;
    Fiber& f = *b.current;
    b.body(b.closure);
    f.done = true;
    --b.live;
    ++b.exited;
    if (b.at_barrier > 0)
      fail_here([&](std::ostream& os) {
        os << where(f.state) << " exited while " << b.at_barrier
           << " of its block's threads wait at __syncthreads (" << b.barrier_file << ":"
           << b.barrier_line << "): on the GPU that barrier may hang or pass early";
      });
    switch_away(false);
  }
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
  std::vector<std::unique_ptr<Worker>>& pool = workers(n);
  b.fibers.assign(n, Fiber{});
  b.warps.assign((n + 31) / 32, Warp{});
  b.reverse = g_schedule == Schedule::reverse;
  b.live = int(n);
  b.exited = b.at_barrier = 0;
  b.fault.clear();
  for (unsigned t = 0; t < n; ++t) {
    Fiber& f = b.fibers[t];
    f.worker = pool[t].get();
    f.linear = t;
    f.state.thread_idx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
    f.state.block_idx = block_idx;
    f.state.block_dim = block;
    f.state.grid_dim = grid;
    Worker& w = *f.worker;
    if (!w.started || w.broken) {
#if defined(TB_EMU_ASAN)
      // Frames that never returned left their poison on the stack.
      if (w.broken) ASAN_UNPOISON_MEMORY_REGION(w.stack.base, w.stack.size);
#endif
      w.ctx = ctx::make_fcontext(w.stack.base + w.stack.size, w.stack.size, worker_main);
      w.started = true;
      w.broken = false;
      w.fake_stack = nullptr;
    }
  }
  b.pos = n - 1;
  Fiber* first = next_runnable(b);
  b.current = first;
  g_thread = &first->state;
#if defined(TB_EMU_ASAN)
  __sanitizer_start_switch_fiber(&b.scheduler_fake_stack, first->worker->stack.base,
                                 first->worker->stack.size);
#endif
  swap(&b.scheduler, first->worker->ctx);
#if defined(TB_EMU_ASAN)
  __sanitizer_finish_switch_fiber(b.scheduler_fake_stack, nullptr, nullptr);
#endif
  // A deadlock leaves its waiting threads' workers inside the kernel too.
  for (Fiber& f : b.fibers)
    if (!f.done) f.worker->broken = true;
  if (!b.fault.empty()) return false;
  if (b.live > 0) {
    std::ostringstream os;
    os << "deadlock in block (" << block_idx.x << "," << block_idx.y << "," << block_idx.z
       << "): " << b.live << " threads wait and none can go on";
    describe_waits(os, b);
    b.fault = os.str();
    return false;
  }
  return true;
}

bool refuse(cudaError_t e, const std::string& message) {
  set_last_error(e);
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
#if defined(TB_EMU_ASAN)
  {  // the calling thread's stack, where the fibers switch back to
    pthread_attr_t attr;
    void* addr = nullptr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      pthread_attr_getstack(&attr, &addr, &size);
      pthread_attr_destroy(&attr);
    }
    b.scheduler_stack_bottom = addr;
    b.scheduler_stack_size = size;
  }
#endif
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
  if (b.exited > 0)
    fail_here([&](std::ostream& os) {
      os << where(f.state) << " reached __syncthreads (" << file << ":" << line << ") after "
         << b.exited << " of its block's " << b.threads << " threads exited";
    });
  if (b.at_barrier == 0) {
    b.barrier_file = file;
    b.barrier_line = line;
  } else if (line != b.barrier_line || std::strcmp(file, b.barrier_file) != 0) {
    fail_here([&](std::ostream& os) {
      os << "threads of one block wait at different barriers: " << where(f.state) << " at "
         << file << ":" << line << ", others at " << b.barrier_file << ":" << b.barrier_line;
    });
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
  switch_away(false);
  f.wait = Wait::none;
}

uint64_t warp_exchange(unsigned mask, uint64_t bits, int src, const char* what) {
  Block& b = *g_block;
  Fiber& f = *b.current;
  const unsigned warp = f.linear / 32, lane = f.linear % 32;
  const unsigned lanes = std::min(32u, b.threads - warp * 32);
  const unsigned all = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
  if (mask != all)
    fail_here([&](std::ostream& os) {
      os << what << " by " << where(f.state) << " with mask 0x" << std::hex << mask
         << " where its warp's lanes are 0x" << all;
    });
  for (unsigned l = 0; l < lanes; ++l)
    if (b.fibers[warp * 32 + l].done)
      fail_here([&](std::ostream& os) {
        os << what << " by " << where(f.state) << ": lane " << l
           << " of its warp has exited, so it never joins";
      });
  if (src < 0 || src >= int(lanes))
    fail_here([&](std::ostream& os) {
      os << what << " by " << where(f.state) << " reads lane " << src << " outside its warp";
    });
  Warp& w = b.warps[warp];
  if (w.arrived == 0) {
    w.what = what;
  } else if (std::strcmp(w.what, what) != 0) {
    fail_here([&](std::ostream& os) {
      os << "lanes of one warp in different shuffles: " << what << " and " << w.what << " ("
         << where(f.state) << ")";
    });
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
    switch_away(false);
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
    switch_away(false);
    f.wait = Wait::none;
  }
  return got;
}

}  // namespace tb_emu
