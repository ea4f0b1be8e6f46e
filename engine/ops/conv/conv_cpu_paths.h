// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Which of its f32 paths the CPU backend's convolution runs, per op and shape
// (conv_cpu.cpp asks; docs/cpu-conv-paths.md tells the whole story):
//
//   reference       the plain loops (the oracle, f64, BackendOptions::reference)
//   blas            im2col + OpenBLAS GEMM (NCHW activations and filters only)
//   onednn          oneDNN on the caller's layout (conv_onednn.h)
//   onednn-blocked  oneDNN on its own blocked layout, reordered in and out
//   onednn-winograd oneDNN's Winograd F(4x4, 3x3) on its blocked layout
//                   (3x3, stride 1, channels in 16-blocks, AVX-512 only)
//
// The setting, TRAINBENCH_CPU_CONV (or set_cpu_conv_path for tests), is one
// of those names, `auto` (the default) or `timed`:
// - auto: a fixed rule, so that a run's numbers do not depend on the
//   machine's load (the CPU backend is deterministic for a fixed thread count,
//   run after run): with oneDNN built and its direct kernels available (AVX2
//   or better: onednn::has_direct_kernels), NCHW and blocked activations take
//   onednn-winograd where oneDNN has Winograd kernels for the problem and
//   onednn-blocked elsewhere, NHWC onednn, except that a model's first
//   layer between NCHW tensors takes blas (kBlasForwardChannels,
//   kBlasBackwardChannels); without, NCHW takes blas and NHWC
//   the reference; an empty batch takes blas or the reference (oneDNN refuses
//   empty tensors). The rule comes from bench/cpu_conv_paths.cpp's timings
//   (docs/cpu-conv-paths.md).
// - timed: the first call of each (op, shape, layouts, outputs) runs every
//   candidate that can take it (blas where the layouts allow, the oneDNN
//   paths where built and able; the reference only when nothing else can) once to warm
//   up, then kTimedRuns rounds of each candidate once, into scratch outputs;
//   it keeps the one with the smallest minimum, and every later call of that
//   key runs it. Rounds, so that a burst of other work slows all candidates
//   alike; the minimum, because other processes on a shared machine only ever
//   add time. Under heavy load the choice can still be wrong, and two runs
//   may choose differently (so their last bits differ): the record keeps the
//   timings.
// - a path: every f32 convolution takes it; one that cannot take a shape
//   (blas on NHWC) falls back to the reference, and the record says so.
//
// Every key's choice is recorded (op, shape, path, how it was chosen, the
// timings, oneDNN's implementation name) and reported by the backend's
// describe() as kernel_paths.convolution, which the run's environment keeps.
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tb {

class CpuBackend;

namespace conv {

enum class CpuConvPath { Reference, Blas, OneDnn, OneDnnBlocked, OneDnnWinograd };
const char* path_name(CpuConvPath p);

struct CpuConvSetting {
  enum class Mode { Rule, Timed, Forced } mode = Mode::Rule;
  CpuConvPath path = CpuConvPath::Reference;  // Forced's
};

// auto takes blas for a model's first layer between NCHW tensors: forward
// below kBlasForwardChannels input channels, backward below
// kBlasBackwardChannels (one: grayscale). There oneDNN's kernels, made for
// channel blocks, and the reorders into them took longer than blas's im2col
// and GEMM; the backward of 3 channels was faster on oneDNN's
// (docs/cpu-conv-paths.md, "Few input channels"). 8: an AVX2 channel block.
inline constexpr int64_t kBlasForwardChannels = 8;
inline constexpr int64_t kBlasBackwardChannels = 2;

// Throws tb::Error naming `source` and the value for an unknown name, or a
// oneDNN path in a build without oneDNN.
CpuConvSetting parse_cpu_conv_setting(const std::string& value, const std::string& source);
// TRAINBENCH_CPU_CONV, or auto when it is unset or empty.
CpuConvSetting cpu_conv_setting_from_environment();

// Sets how be's convolutions pick their path from now on ("auto" or a path
// name, as TRAINBENCH_CPU_CONV) and forgets the choices made so far. Defined
// in conv_cpu.cpp (the family's CPU kernels hold the setting).
void set_cpu_conv_path(CpuBackend& be, const std::string& setting);

// The choice cache of one backend.
class CpuConvChoices {
 public:
  static constexpr int kTimedRuns = 5;

  // The path of `key`: cached, or chosen now among `candidates` (not empty)
  // by timing `trial(path)` (which must write only scratch). `shape` is the
  // record's readable name of the key.
  CpuConvPath choose(const std::string& key, const std::string& shape,
                     const std::vector<CpuConvPath>& candidates,
                     const std::function<void(CpuConvPath)>& trial);
  // The path recorded for key, if any (every call asks this first).
  bool find(const std::string& key, CpuConvPath& path) const;
  // Records a path taken without timing (forced, or the only candidate).
  void note(const std::string& key, const std::string& shape, CpuConvPath path,
            const std::string& why);
  // oneDNN's implementation name of a key's run (once per key).
  void note_implementation(const std::string& key, const std::string& impl);
  void clear();
  // {shape: {"path", "chosen_by", "min_ms": {path: ms}, "onednn_implementation"}}
  nlohmann::json describe() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, CpuConvPath> paths_;
  nlohmann::json records_ = nlohmann::json::object();
  std::map<std::string, std::string> shape_of_;  // key -> shape
};

}  // namespace conv
}  // namespace tb
