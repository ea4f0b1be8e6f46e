// SPDX-License-Identifier: GPL-3.0-or-later
// The emulator's CUDA runtime (runtime.h): devices, memory, streams, events
// and graph capture on the host. Everything is kept under one lock (the
// device), which is also held while work runs, so the emulated device does
// one thing at a time, in the order the host asked for it.
#include "tests/cuda_emulator/emulator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace tb_emu {

namespace {

thread_local cudaError_t t_last = cudaSuccess;
thread_local int t_device = 0;
// The calling thread's capture interaction mode (cudaThreadExchangeStreamCaptureMode).
thread_local cudaStreamCaptureMode t_mode = cudaStreamCaptureModeGlobal;

size_t env_size(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (end == v || *end) {
    std::fprintf(stderr, "cuda emulator: %s=%s is not a number; using %zu\n", name, v, fallback);
    return fallback;
  }
  return size_t(n);
}

struct Device {
  size_t total = 0, used = 0;
  int sms = 0;
};

struct Allocation {
  size_t bytes = 0;     // as asked: an access past them is out of bounds here
  size_t reserved = 0;  // as counted against the device's memory
  int device = -1;      // -1: pinned host memory
};

struct GraphData {
  std::vector<std::function<void()>> nodes;
};

struct StreamData {
  int device = 0;
  unsigned flags = 0;
  // Capture: the graph being recorded, by whom and how; `origin` when the
  // capture began here (not joined through an event).
  GraphData* graph = nullptr;
  bool origin = false, invalidated = false;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id capturer;
  std::string invalid_why;
};

struct EventData {
  unsigned flags = 0;
  bool recorded = false;
  int64_t ns = 0;
  GraphData* captured_in = nullptr;  // last recorded inside this capture
};

struct State {
  bool started = false;
  std::vector<Device> devices;
  std::map<uintptr_t, Allocation> allocations;  // by base address
  std::set<StreamData*> streams;
  std::set<EventData*> events;
  std::set<GraphData*> graphs, execs;
};

std::recursive_mutex g_lock;
State g_state;

State& state() {
  if (!g_state.started) {
    g_state.started = true;
    const size_t n = env_size("TRAINBENCH_EMULATED_GPUS", 0);
    const size_t total = env_size("TRAINBENCH_EMULATED_GPU_MEMORY", size_t(8) << 30);
    const int sms = int(std::max<size_t>(1, env_size("TRAINBENCH_EMULATED_SMS", 16)));
    g_state.devices.assign(n, Device{total, 0, sms});
  }
  return g_state;
}

cudaError_t fail(cudaError_t e) {
  t_last = e;
  return e;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

StreamData* stream_of(cudaStream_t s) { return reinterpret_cast<StreamData*>(s); }
EventData* event_of(cudaEvent_t e) { return reinterpret_cast<EventData*>(e); }

bool capturing(const StreamData* s) { return s && s->graph; }

void invalidate(StreamData* s, const std::string& why) {
  if (!s->invalidated) s->invalid_why = why;
  s->invalidated = true;
}

// Every stream capturing into g (the origin and the streams that joined it).
template <typename F>
void for_capture(GraphData* g, F f) {
  for (StreamData* s : state().streams)
    if (s->graph == g) f(s);
}

// A call CUDA refuses during capture g: every stream of it is invalidated.
cudaError_t refuse_in_capture(GraphData* g, const char* call) {
  for_capture(g, [call](StreamData* c) { invalidate(c, call); });
  return fail(cudaErrorStreamCaptureUnsupported);
}

// A stream handle that is neither the legacy stream (null) nor a live stream.
bool unknown_stream(StreamData* s) { return s && !state().streams.count(s); }

// CUDA's rule for "potentially unsafe" calls (allocation, synchronisation)
// during a capture: refused when this thread has a capture of its own not in
// relaxed mode, or another thread has a global-mode capture, unless this
// thread's mode is relaxed. A refused call invalidates those captures.
bool unsafe_call_refused(const char* call) {
  if (t_mode == cudaStreamCaptureModeRelaxed) return false;
  bool refused = false;
  const auto me = std::this_thread::get_id();
  for (StreamData* s : state().streams) {
    if (!s->origin || !s->graph) continue;
    const bool mine = s->capturer == me && s->mode != cudaStreamCaptureModeRelaxed;
    const bool global_other = s->capturer != me && s->mode == cudaStreamCaptureModeGlobal &&
                              t_mode == cudaStreamCaptureModeGlobal;
    if (mine || global_other) {
      for_capture(s->graph, [&](StreamData* c) {
        invalidate(c, std::string(call) + " during the capture (not in relaxed mode)");
      });
      refused = true;
    }
  }
  return refused;
}

Allocation* allocation_at(const void* p, size_t bytes, uintptr_t* base_out = nullptr) {
  auto& a = state().allocations;
  const uintptr_t q = reinterpret_cast<uintptr_t>(p);
  auto it = a.upper_bound(q);
  if (it == a.begin()) return nullptr;
  --it;
  if (q < it->first || q + bytes > it->first + it->second.bytes) return nullptr;
  if (base_out) *base_out = it->first;
  return &it->second;
}

void* host_block(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + 255) & ~size_t(255);
  return std::aligned_alloc(256, rounded);
}

}  // namespace

std::recursive_mutex& device_lock() { return g_lock; }

void set_last_error(cudaError_t e) { t_last = e; }

bool is_device_memory(const void* p, size_t bytes) {
  std::lock_guard lock(g_lock);
  const Allocation* a = allocation_at(p, bytes);
  return a && a->device >= 0;
}

cudaError_t enqueue(cudaStream_t s, std::function<void()> work, const char* what) {
  std::lock_guard lock(g_lock);
  StreamData* sd = stream_of(s);
  if (unknown_stream(sd)) return fail(cudaErrorInvalidResourceHandle);
  if (capturing(sd)) {
    sd->graph->nodes.push_back(std::move(work));
    return cudaSuccess;
  }
  if (!sd) {
    // The legacy default stream synchronises with every blocking stream: a
    // blocking stream being captured is invalidated by it.
    bool implicit = false;
    for (StreamData* c : state().streams)
      if (c->graph && !(c->flags & cudaStreamNonBlocking)) {
        invalidate(c, std::string(what) + " on the legacy default stream");
        implicit = true;
      }
    if (implicit) return fail(cudaErrorStreamCaptureImplicit);
  }
  work();
  return cudaSuccess;
}

}  // namespace tb_emu

using namespace tb_emu;

// ---------------------------------------------------------------- errors

cudaError_t cudaGetLastError() {
  const cudaError_t e = tb_emu::t_last;
  tb_emu::t_last = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() { return tb_emu::t_last; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorSymbolNotFound: return "cudaErrorSymbolNotFound";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorPeerAccessUnsupported: return "cudaErrorPeerAccessUnsupported";
    case cudaErrorPeerAccessAlreadyEnabled: return "cudaErrorPeerAccessAlreadyEnabled";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
  }
  return "cudaErrorUnknown";
}

// The emulator's own words for the last failed launch: what the tests print.
const char* cudaGetErrorString(cudaError_t e) {
  if (e == cudaErrorInvalidConfiguration || e == cudaErrorLaunchFailure)
    return tb_emu::last_launch_error().c_str();
  if (e == cudaErrorNoDevice)
    return "no emulated CUDA device (TRAINBENCH_EMULATED_GPUS is 0 or unset)";
  return cudaGetErrorName(e);
}

// ---------------------------------------------------------------- devices

cudaError_t cudaGetDeviceCount(int* n) {
  std::lock_guard lock(g_lock);
  *n = int(state().devices.size());
  return *n > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
  std::lock_guard lock(g_lock);
  if (device < 0 || size_t(device) >= state().devices.size()) return fail(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  std::lock_guard lock(g_lock);
  if (device < 0 || size_t(device) >= state().devices.size()) return fail(cudaErrorInvalidDevice);
  const Device& d = state().devices[size_t(device)];
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "Trainbench emulated GPU %d (host)", device);
  prop->totalGlobalMem = d.total;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = d.sms;
  prop->l2CacheSize = 50 << 20;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int device) {
  std::lock_guard lock(g_lock);
  if (device < 0 || size_t(device) >= state().devices.size()) return fail(cudaErrorInvalidDevice);
  // No bus: NVML then finds no device for it, as on a machine without NVML.
  std::snprintf(id, size_t(len), "emulated:%d", device);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  std::lock_guard lock(g_lock);
  for (StreamData* s : state().streams)
    if (s->graph) {
      return refuse_in_capture(s->graph, "cudaDeviceSynchronize");
    }
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  *can = 0;  // copies between emulated devices go "through the host"
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int, unsigned) { return fail(cudaErrorPeerAccessUnsupported); }

cudaError_t cudaDriverGetVersion(int* v) {
  *v = 13000;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = 13000;
  return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char*, void** fn, unsigned, unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
  *fn = nullptr;  // no driver API here
  if (status) *status = cudaDriverEntryPointSymbolNotFound;
  return fail(cudaErrorSymbolNotFound);
}

// ---------------------------------------------------------------- memory

cudaError_t cudaMalloc(void** p, size_t bytes) {
  std::lock_guard lock(g_lock);
  *p = nullptr;
  if (size_t(t_device) >= state().devices.size()) return fail(cudaErrorNoDevice);
  if (unsafe_call_refused("cudaMalloc")) return fail(cudaErrorStreamCaptureUnsupported);
  Device& d = state().devices[size_t(t_device)];
  const size_t rounded = (std::max<size_t>(bytes, 1) + 511) & ~size_t(511);
  if (rounded > d.total - d.used) return fail(cudaErrorMemoryAllocation);
  void* q = host_block(rounded);
  if (!q) return fail(cudaErrorMemoryAllocation);
  std::memset(q, 0xff, rounded);  // NaN in every float type: unwritten reads show
  d.used += rounded;
  state().allocations[reinterpret_cast<uintptr_t>(q)] =
      Allocation{std::max<size_t>(bytes, 1), rounded, t_device};
  *p = q;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  std::lock_guard lock(g_lock);
  if (!p) return cudaSuccess;
  if (unsafe_call_refused("cudaFree")) return fail(cudaErrorStreamCaptureUnsupported);
  auto it = state().allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == state().allocations.end() || it->second.device < 0) return fail(cudaErrorInvalidValue);
  state().devices[size_t(it->second.device)].used -= it->second.reserved;
  state().allocations.erase(it);
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
  std::lock_guard lock(g_lock);
  *p = nullptr;
  if (unsafe_call_refused("cudaHostAlloc")) return fail(cudaErrorStreamCaptureUnsupported);
  void* q = host_block(bytes);
  if (!q) return fail(cudaErrorMemoryAllocation);
  state().allocations[reinterpret_cast<uintptr_t>(q)] =
      Allocation{std::max<size_t>(bytes, 1), std::max<size_t>(bytes, 1), -1};
  *p = q;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, 0); }

cudaError_t cudaFreeHost(void* p) {
  std::lock_guard lock(g_lock);
  if (!p) return cudaSuccess;
  if (unsafe_call_refused("cudaFreeHost")) return fail(cudaErrorStreamCaptureUnsupported);
  auto it = state().allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == state().allocations.end() || it->second.device >= 0) return fail(cudaErrorInvalidValue);
  state().allocations.erase(it);
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  std::lock_guard lock(g_lock);
  if (size_t(t_device) >= state().devices.size()) return fail(cudaErrorNoDevice);
  const Device& d = state().devices[size_t(t_device)];
  *free = d.total - d.used;
  *total = d.total;
  return cudaSuccess;
}

namespace {

// A copy's operands must be what its kind says (device memory where it says
// device); a wrong kind is an error on a GPU too, or worse, a fault.
cudaError_t check_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  const Allocation* d = allocation_at(dst, bytes);
  const Allocation* s = allocation_at(src, bytes);
  const bool dst_dev = d && d->device >= 0, src_dev = s && s->device >= 0;
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToDevice: ok = dst_dev && !src_dev; break;
    case cudaMemcpyDeviceToHost: ok = src_dev && !dst_dev; break;
    case cudaMemcpyDeviceToDevice: ok = src_dev && dst_dev; break;
    case cudaMemcpyHostToHost: ok = !src_dev && !dst_dev; break;
    case cudaMemcpyDefault: ok = true; break;
  }
  // Device memory named by a range must lie inside one allocation.
  const bool dst_in = d || !allocation_at(dst, 1), src_in = s || !allocation_at(src, 1);
  if (!ok || !dst_in || !src_in) {
    std::fprintf(stderr,
                 "cuda emulator: cudaMemcpy of %zu bytes, kind %d, from %p (%s) to %p (%s): "
                 "the operands do not match the kind or run past their allocation\n",
                 bytes, int(kind), src, src_dev ? "device" : "host", dst,
                 dst_dev ? "device" : "host");
    return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s) {
  std::lock_guard lock(g_lock);
  if (const cudaError_t e = check_copy(dst, src, bytes, kind); e != cudaSuccess) return e;
  return enqueue(s, [=] { std::memmove(dst, src, bytes); }, "cudaMemcpyAsync");
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int, const void* src, int, size_t bytes,
                                cudaStream_t s) {
  std::lock_guard lock(g_lock);
  if (const cudaError_t e = check_copy(dst, src, bytes, cudaMemcpyDeviceToDevice); e != cudaSuccess)
    return e;
  return enqueue(s, [=] { std::memmove(dst, src, bytes); }, "cudaMemcpyPeerAsync");
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t s) {
  std::lock_guard lock(g_lock);
  if (bytes && !is_device_memory(dst, bytes)) return fail(cudaErrorInvalidValue);
  return enqueue(s, [=] { std::memset(dst, value, bytes); }, "cudaMemsetAsync");
}

// ---------------------------------------------------------------- streams

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  std::lock_guard lock(g_lock);
  auto* sd = new StreamData;
  sd->device = t_device;
  sd->flags = flags;
  state().streams.insert(sd);
  *s = reinterpret_cast<cudaStream_t>(sd);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  std::lock_guard lock(g_lock);
  StreamData* sd = stream_of(s);
  if (!sd || !state().streams.erase(sd)) return fail(cudaErrorInvalidResourceHandle);
  if (sd->origin && sd->graph) delete sd->graph;  // a capture never ended
  delete sd;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  std::lock_guard lock(g_lock);
  StreamData* sd = stream_of(s);
  if (unknown_stream(sd)) return fail(cudaErrorInvalidResourceHandle);
  if (capturing(sd)) return refuse_in_capture(sd->graph, "cudaStreamSynchronize");
  if (!sd && unsafe_call_refused("cudaStreamSynchronize(legacy stream)"))
    return fail(cudaErrorStreamCaptureUnsupported);
  return cudaSuccess;  // its work ran when it was enqueued
}

cudaError_t cudaStreamQuery(cudaStream_t s) {
  std::lock_guard lock(g_lock);
  StreamData* sd = stream_of(s);
  if (unknown_stream(sd)) return fail(cudaErrorInvalidResourceHandle);
  if (capturing(sd)) return refuse_in_capture(sd->graph, "cudaStreamQuery");
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  std::lock_guard lock(g_lock);
  StreamData* sd = stream_of(s);
  EventData* ed = event_of(e);
  if (unknown_stream(sd) || !state().events.count(ed))
    return fail(cudaErrorInvalidResourceHandle);
  // Waiting on an event recorded inside a capture makes this stream join it
  // (CUDA's fork): its later work goes into the same graph.
  if (ed->captured_in && !sd) return fail(cudaErrorStreamCaptureImplicit);
  if (ed->captured_in && !sd->graph) {
    sd->graph = ed->captured_in;
    sd->origin = false;
    sd->invalidated = false;
  }
  return cudaSuccess;  // ordering holds: work runs when enqueued
}

cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* user_data) {
  return enqueue(s, [fn, user_data] { fn(user_data); }, "cudaLaunchHostFunc");
}

// ---------------------------------------------------------------- events

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  std::lock_guard lock(g_lock);
  auto* ed = new EventData;
  ed->flags = flags;
  state().events.insert(ed);
  *e = reinterpret_cast<cudaEvent_t>(ed);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  std::lock_guard lock(g_lock);
  EventData* ed = event_of(e);
  if (!state().events.erase(ed)) return fail(cudaErrorInvalidResourceHandle);
  delete ed;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  std::lock_guard lock(g_lock);
  EventData* ed = event_of(e);
  StreamData* sd = stream_of(s);
  if (!state().events.count(ed) || unknown_stream(sd))
    return fail(cudaErrorInvalidResourceHandle);
  if (capturing(sd)) {  // a dependency inside the graph, not a timestamp
    ed->captured_in = sd->graph;
    return cudaSuccess;
  }
  ed->captured_in = nullptr;
  ed->recorded = true;
  ed->ns = now_ns();
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  std::lock_guard lock(g_lock);
  EventData* ed = event_of(e);
  if (!state().events.count(ed)) return fail(cudaErrorInvalidResourceHandle);
  if (ed->captured_in) return fail(cudaErrorStreamCaptureUnsupported);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  std::lock_guard lock(g_lock);
  EventData* ed = event_of(e);
  if (!state().events.count(ed)) return fail(cudaErrorInvalidResourceHandle);
  if (ed->captured_in) return fail(cudaErrorStreamCaptureUnsupported);
  if (unsafe_call_refused("cudaEventSynchronize")) return fail(cudaErrorStreamCaptureUnsupported);
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  std::lock_guard lock(g_lock);
  EventData *a = event_of(start), *b = event_of(end);
  if (!state().events.count(a) || !state().events.count(b))
    return fail(cudaErrorInvalidResourceHandle);
  if ((a->flags | b->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  if (!a->recorded || !b->recorded || a->captured_in || b->captured_in)
    return fail(cudaErrorInvalidResourceHandle);
  *ms = float(double(b->ns - a->ns) / 1e6);
  return cudaSuccess;
}

// ---------------------------------------------------------------- capture

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
  std::lock_guard lock(g_lock);
  StreamData* sd = stream_of(s);
  if (!sd) return fail(cudaErrorStreamCaptureUnsupported);  // not the legacy stream
  if (!state().streams.count(sd)) return fail(cudaErrorInvalidResourceHandle);
  if (sd->graph) return fail(cudaErrorIllegalState);
  sd->graph = new GraphData;
  sd->origin = true;
  sd->invalidated = false;
  sd->invalid_why.clear();
  sd->mode = mode;
  sd->capturer = std::this_thread::get_id();
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  std::lock_guard lock(g_lock);
  *graph = nullptr;
  StreamData* sd = stream_of(s);
  if (!sd || !state().streams.count(sd)) return fail(cudaErrorInvalidResourceHandle);
  if (!sd->graph || !sd->origin) return fail(cudaErrorIllegalState);
  if (sd->mode != cudaStreamCaptureModeRelaxed && sd->capturer != std::this_thread::get_id())
    return fail(cudaErrorStreamCaptureWrongThread);
  GraphData* g = sd->graph;
  bool invalid = false;
  std::string why;
  for_capture(g, [&](StreamData* c) {
    if (c->invalidated && why.empty()) why = c->invalid_why;
    invalid = invalid || c->invalidated;
    c->graph = nullptr;
    c->origin = false;
    c->invalidated = false;
  });
  for (EventData* e : state().events)
    if (e->captured_in == g) e->captured_in = nullptr, e->recorded = false;
  if (invalid) {
    delete g;
    std::fprintf(stderr, "cuda emulator: capture invalidated: %s\n", why.c_str());
    return fail(cudaErrorStreamCaptureInvalidated);
  }
  state().graphs.insert(g);
  *graph = reinterpret_cast<cudaGraph_t>(g);
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  std::lock_guard lock(g_lock);
  StreamData* sd = stream_of(s);
  if (unknown_stream(sd)) return fail(cudaErrorInvalidResourceHandle);
  *status = !capturing(sd)      ? cudaStreamCaptureStatusNone
            : sd->invalidated ? cudaStreamCaptureStatusInvalidated
                              : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  std::swap(*mode, t_mode);
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  std::lock_guard lock(g_lock);
  auto* g = reinterpret_cast<GraphData*>(graph);
  if (!state().graphs.count(g)) return fail(cudaErrorInvalidResourceHandle);
  auto* x = new GraphData(*g);  // an executable graph is a snapshot of its graph
  state().execs.insert(x);
  *exec = reinterpret_cast<cudaGraphExec_t>(x);
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  std::lock_guard lock(g_lock);
  auto* x = reinterpret_cast<GraphData*>(exec);
  if (!state().execs.count(x)) return fail(cudaErrorInvalidResourceHandle);
  return enqueue(
      s, [x] {
        for (auto& node : x->nodes) node();
      },
      "cudaGraphLaunch");
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  std::lock_guard lock(g_lock);
  auto* g = reinterpret_cast<GraphData*>(graph);
  if (!state().graphs.erase(g)) return fail(cudaErrorInvalidResourceHandle);
  delete g;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  std::lock_guard lock(g_lock);
  auto* x = reinterpret_cast<GraphData*>(exec);
  if (!state().execs.erase(x)) return fail(cudaErrorInvalidResourceHandle);
  delete x;
  return cudaSuccess;
}
