// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A compute device as the engine sees it: what it is (device, name,
// describe, capabilities), its memory (fill, copy, copies between devices),
// the capability objects a device of its own adds (memory, staging, graphs),
// and the op families' kernels, reached through the registry
// (kernels<K>(), engine/ops/registry.h). The ops themselves are the
// families' entry points in engine/ops/<family>/<family>.h; layers in
// engine/nn call those and never see a device API.
//
// Conventions for every op:
// - Rank-4 tensors have logical shape (N, C, H, W); their Layout says the memory
//   order. A backend either supports the layout it is given or throws tb::Error;
//   it never transposes silently.
// - "accumulate" on parameter gradients: false writes (the first backward after
//   gradients were set to none), true adds into what is there.
// - An undefined Tensor (Tensor{}) means "not wanted" (e.g. dx of the first layer,
//   db of a convolution without bias).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <typeindex>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend/capabilities.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "engine/ops/registry.h"

namespace tb {

struct OptimizerStep;  // engine/ops/optimizer/optimizer.h (set_optimizer_constants)

// Device memory as the caching allocator and the driver see it (the GPU memory
// plots, empty_cache_between_phases): DeviceMemory::stats. Host backends have none.
struct DeviceMemoryStats {
  int64_t allocated_bytes = 0;       // in live tensors (allocator block sizes)
  int64_t reserved_bytes = 0;        // held by the caching allocator: live + cached
  int64_t peak_allocated_bytes = 0;  // since the start or the last reset_peak()
  int64_t peak_reserved_bytes = 0;
  int64_t malloc_count = 0;          // cudaMalloc calls so far
  int64_t device_used_bytes = -1;    // the driver's view (cudaMemGetInfo), all processes;
  int64_t device_total_bytes = -1;   //   -1 when not asked for
};

class DeviceMemory;
class Staging;
class GraphCapture;
class Backend;

// Where ops' short-lived device scratch comes from while a model's pass runs
// (cuDNN's and cuBLASLt's workspaces, reductions' partial sums): the pass's
// memory plan (engine/nn/buffers.h), so a workspace takes room the
// activations leave free at that moment instead of adding to their peak, as
// a workspace from PyTorch's caching allocator does. ScratchScope installs one.
class ScratchSource {
 public:
  virtual ~ScratchSource() = default;
  // A tensor of this shape, dtype and layout on backend's device, 256-byte
  // aligned, until the Tensor goes (work enqueued on the backend's stream
  // before then may still use it).
  virtual Tensor scratch(Backend& backend, const Shape& shape, DType dtype, Layout layout) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // Op family K's kernels on this backend (engine/ops/registry.h), made on
  // first use and kept. Throws tb::Error naming the family and this backend
  // when it has none; has_kernels<K>() asks without throwing.
  template <class K>
  K& kernels() {
    return static_cast<K&>(kernels_of(typeid(K), K::kFamily));
  }
  template <class K>
  bool has_kernels() const {
    return find_op_kernels(typeid(K), device().kind) != nullptr;
  }

  virtual Device device() const = 0;
  virtual std::string name() const = 0;          // "cpu (openblas 0.3.21, 2 threads)"
  virtual nlohmann::json describe() const = 0;   // device and library versions, for the run record
  // What the trainer may use here beyond the portable ops (capabilities.h).
  // The default: nothing beyond them.
  virtual BackendCapabilities capabilities() const { return {}; }
  virtual void synchronize() {}

  Tensor empty(const Shape& s, DType t, Layout l = Layout::NCHW) const {
    return Tensor::empty(s, t, device(), l);
  }

  // --- memory
  virtual void fill(Tensor& t, double value) = 0;
  // Same logical shape and dtype; either side may be on the host; layouts may
  // differ (the only place a layout conversion happens, and it is explicit).
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  // parallel: dp (one process driving several devices). Copies `src`, on
  // `src_backend`'s device, into `dst` on this backend's device (same shape,
  // dtype and layout), after the work both backends have queued so far; ops
  // either backend queues afterwards see the copy done. The default copies
  // within one device (two CPU backends share the host's memory, which lets
  // the CPU tests drive parallel: dp's replicas) and refuses across devices.
  virtual void copy_from_peer(Backend& src_backend, const Tensor& src, Tensor& dst) {
    TB_CHECK(src_backend.device() == device(), "copy_from_peer: the ", name(),
             " backend drives one device; copying from ", src_backend.name(),
             " (parallel: dp) needs the cuda backend");
    copy(src, dst);
  }

  // --- capability objects (below the class): what a backend with a device of
  // its own adds. A host backend has none (nullptr); the trick that needs one
  // is off there (capabilities.h names which).
  virtual DeviceMemory* memory() { return nullptr; }   // caching_allocator
  virtual Staging* staging() { return nullptr; }       // pin_memory, non_blocking
  virtual GraphCapture* graphs() { return nullptr; }   // cuda_graphs

  // --- scratch: a tensor one op needs for its own work (a library's
  // workspace, partial sums, an operand rounded to f16/bf16), valid until the
  // Tensor goes (ops on one stream give it back right after enqueuing): from
  // the installed ScratchSource (a model's pass), else a fresh tensor from
  // the device's allocator. A backend may refuse sources (pass_scratch
  // false: TRAINBENCH_CUDA_SCRATCH=allocator, for an A/B of the memory plan).
  Tensor scratch(const Shape& shape, DType dtype, Layout layout = Layout::NCHW);
  Tensor scratch(int64_t bytes) {  // at least `bytes`, as f64
    return scratch({(std::max<int64_t>(bytes, 0) + 7) / 8}, DType::F64);
  }
  // Installs `source` (nullptr: none) and returns the one it replaces. Set and
  // used by the one thread that drives this backend.
  ScratchSource* set_scratch_source(ScratchSource* source) {
    ScratchSource* previous = scratch_source_;
    scratch_source_ = source;
    return previous;
  }
  bool pass_scratch() const { return pass_scratch_; }

  // An op family that chooses how to run each shape (the CPU convolution's
  // paths, cuDNN's plans) reports its choices here; describe() lists them as
  // kernel_paths.<family>, which the run's environment keeps. Called by the
  // family's kernels when they are made; the report lives as long as they do.
  void report_kernel_paths(const std::string& family, std::function<nlohmann::json()> report);

 protected:
  // Destroys the family kernels made so far (and their reports). A backend
  // whose kernels use its private state calls it first in its destructor,
  // before that state goes.
  void release_kernels();
  // Every family's report that is not empty, by family: describe()'s
  // kernel_paths (an empty object when no family chose anything yet).
  nlohmann::json kernel_paths() const;
  bool pass_scratch_ = true;  // scratch() uses an installed source

 private:
  OpKernels& kernels_of(std::type_index family, const char* family_name);
  std::mutex kernels_mutex_;
  std::unordered_map<std::type_index, std::unique_ptr<OpKernels>> kernels_;
  mutable std::mutex reports_mutex_;
  std::map<std::string, std::function<nlohmann::json()>> kernel_path_reports_;
  ScratchSource* scratch_source_ = nullptr;
};

// TRAINBENCH_CUDA_SCRATCH's value (null: unset): true for "pass" or unset
// (scratch from the pass's memory plan), false for "allocator"; anything else
// throws tb::Error naming the variable and the value.
bool pass_scratch_setting(const char* value);

// While alive, `backend`'s scratch comes from `source` (Model::forward and
// backward install the pass's memory plan); the previous source after.
class ScratchScope {
 public:
  ScratchScope(Backend& backend, ScratchSource* source)
      : backend_(backend), previous_(backend.set_scratch_source(source)) {}
  ~ScratchScope() { backend_.set_scratch_source(previous_); }
  ScratchScope(const ScratchScope&) = delete;
  ScratchScope& operator=(const ScratchScope&) = delete;

 private:
  Backend& backend_;
  ScratchSource* previous_;
};

// Device memory as the caching allocator and the driver see it (the GPU
// memory plots, empty_cache_between_phases).
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // Allocator figures; query_device also asks the driver for used/total (a
  // cheap call, but not free: not every step).
  virtual DeviceMemoryStats stats(bool query_device) = 0;
  virtual void empty_cache() = 0;  // give cached free blocks back to the driver
  virtual void reset_peak() = 0;   // peaks := current values
};

// Host -> device uploads of the input path (pin_memory, non_blocking).
class Staging {
 public:
  virtual ~Staging() = default;
  // A page-locked host buffer the loader fills with a batch, so a copy from it
  // can run asynchronously (pin_memory). Called from loader threads.
  virtual Tensor pinned_host_empty(const Shape& shape, DType dtype) = 0;
  // Non-blocking upload: enqueues host src -> device dst (same shape, dtype
  // and layout) on a copy stream and makes the compute stream wait for it
  // through an event, so the copy overlaps whatever the compute stream is
  // still doing. Returns a ticket; src must stay untouched until
  // wait_upload(ticket) returns. dst must not be one that work already
  // enqueued still reads: the caller double-buffers and passes the previous
  // use's fence (see fence()).
  virtual uint64_t upload_async(const Tensor& src, Tensor& dst, uint64_t after_fence) = 0;
  virtual void wait_upload(uint64_t ticket) = 0;  // ticket 0: nothing to wait for
  // A marker after everything enqueued on the compute stream so far, for
  // upload_async's after_fence (0 = nothing to wait for).
  virtual uint64_t fence() = 0;
};

// Whole-step capture (cuda_graphs). Everything the backend enqueues between
// begin_capture() and end_capture() is recorded, not run; end_capture()
// returns the id of a graph that launch(id) replays on the compute stream
// with the same device pointers. So every tensor the captured work touches
// must stay alive (and at its address) while the graph is used; drop_all()
// forgets every graph (the caller recaptures after it reallocated buffers).
// Host reads (sum_squares, read-backs) cannot be captured.
class GraphCapture {
 public:
  virtual ~GraphCapture() = default;
  virtual void begin_capture() = 0;
  virtual int end_capture() = 0;
  virtual void launch(int id) = 0;
  virtual void drop_all() = 0;
  // Per-step optimizer constants (lr, bias corrections, ...) are values baked
  // into a captured launch. While capturing, the optimizer reads them from a
  // device buffer instead; this writes `step`'s constants into that buffer,
  // enqueued on the compute stream (call it before each launch).
  virtual void set_optimizer_constants(const OptimizerStep& step) = 0;
};


struct BackendOptions {
  bool reference = false;      // cpu: the plain reference kernels (the test oracle)
  int threads = 0;             // cpu: 0 = the CPUs this process may use (core/cpu_threads.h)
  int local_ranks = 1;         // cpu: processes of the run on this machine, sharing its CPUs
  bool deterministic = false;  // cuda: deterministic algorithms only
  bool cudnn_benchmark = false;
};

// "cpu", "cuda", "cuda:N" or "auto" (a GPU when one works, else the CPU with one
// log line in *note). Throws tb::Error when the device cannot be used.
std::unique_ptr<Backend> make_backend(const std::string& device, const BackendOptions& options,
                                      std::string* note = nullptr);
// Devices this build can use, e.g. {"cpu"} or {"cuda:0", "cpu"}, with names.
std::vector<std::pair<std::string, std::string>> available_devices();

}  // namespace tb
