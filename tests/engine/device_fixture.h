// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The one device fixture of the test suites (Caffe's typed tests, in Qt Test):
//
// - the backends, each made once per process: the CPU reference (the oracle:
//   plain loops, templated on float/double), the fast CPU backend (OpenBLAS,
//   vector loops, threads) and the CUDA backend where this build and machine
//   have a device;
// - the skip of a GPU slot or row, with the reason, where there is none
//   (NEED_GPU);
// - a Target (backend x layout x dtype) as a Qt Test data column, so that one
//   test body runs over every target an op family has: the op-family suites
//   (tests/engine/test_op_*.cpp) add one row per target and case, and the body
//   compares the target with the CPU reference at the tolerance the target's
//   arithmetic allows.
#include <QtTest>

#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/dtype.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "tests/engine/gpu_slot.h"
#ifdef TRAINBENCH_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif

namespace tb::test {

// True when a CUDA device can be used; otherwise *why says why not.
inline bool gpu_available(std::string* why) {
#ifdef TRAINBENCH_HAVE_CUDA
  std::string w;
  if (cuda_device_count(&w) > 0) return true;
  *why = "no CUDA device: " + w;
#else
  *why = "this build has no CUDA backend (TRAINBENCH_CUDA=OFF or no toolkit)";
#endif
  return false;
}

// The CPU reference backend (the oracle every other target is compared with).
inline CpuBackend& cpu_reference() {
  static CpuBackend be(BackendOptions{.reference = true});
  return be;
}

// The fast CPU backend, all threads.
inline CpuBackend& cpu_fast() {
  static CpuBackend be(BackendOptions{});
  return be;
}

// The CUDA backend on device 0, made at the first call (after NEED_GPU()); its
// describe() is printed once, so every suite's log names the device it ran on.
inline Backend& cuda_backend() {
#ifdef TRAINBENCH_HAVE_CUDA
  static std::unique_ptr<Backend> be = [] {
    auto b = make_cuda_backend(0, BackendOptions{});
    qInfo("%s", b->describe().dump().c_str());
    return b;
  }();
  return *be;
#else
  throw Error("this build has no CUDA backend");
#endif
}

// ------------------------------------------------------------ targets

enum class Impl { CpuReference, CpuFast, Cuda };

inline const char* impl_name(Impl i) {
  switch (i) {
    case Impl::CpuReference: return "cpu-ref";
    case Impl::CpuFast: return "cpu-fast";
    case Impl::Cuda: return "cuda";
  }
  return "?";
}

// Where and how an op runs: the backend, the layout of its rank-4 activations
// (and filters), and the dtype of its inputs.
struct Target {
  Impl impl = Impl::CpuReference;
  Layout layout = Layout::NCHW;
  DType dtype = DType::F32;
  bool on_gpu() const { return impl == Impl::Cuda; }
  std::string name() const {
    return std::string(impl_name(impl)) + " " + layout_name(layout) + " " + dtype_name(dtype);
  }
};

// The backend a target runs on (Cuda: only after NEED_GPU()).
inline Backend& backend_of(const Target& t) {
  switch (t.impl) {
    case Impl::CpuReference: return cpu_reference();
    case Impl::CpuFast: return cpu_fast();
    case Impl::Cuda: return cuda_backend();
  }
  return cpu_reference();
}

// The common target sets.
inline std::vector<Target> cuda_targets(DType dt = DType::F32) {
  return {{Impl::Cuda, Layout::NCHW, dt}, {Impl::Cuda, Layout::NHWC, dt}};
}

// The families whose activations come in every layout, the CPU's blocked
// nChw16c among them (batch norm, pooling): both CPU backends in f32 and f64,
// CUDA in f32; f16/bf16 have slots of their own.
inline std::vector<Target> activation_targets() {
  return {
      {Impl::CpuFast, Layout::NCHW, DType::F32},         {Impl::CpuFast, Layout::NCHW, DType::F64},
      {Impl::CpuReference, Layout::NHWC, DType::F32},    {Impl::CpuReference, Layout::NHWC, DType::F64},
      {Impl::CpuFast, Layout::NHWC, DType::F32},         {Impl::CpuFast, Layout::NHWC, DType::F64},
      {Impl::Cuda, Layout::NCHW, DType::F32},            {Impl::Cuda, Layout::NHWC, DType::F32},
      {Impl::CpuReference, Layout::NCHW16C, DType::F32}, {Impl::CpuFast, Layout::NCHW16C, DType::F64},
      {Impl::CpuFast, Layout::NCHW16C, DType::F32},
  };
}

// Whether a target's layout can hold C channels (nChw16c: whole blocks).
inline bool holds(const Target& t, int64_t C) {
  return t.layout != Layout::NCHW16C || C % kLayoutBlock == 0;
}

}  // namespace tb::test

Q_DECLARE_METATYPE(tb::test::Target)
Q_DECLARE_METATYPE(tb::Layout)
Q_DECLARE_METATYPE(tb::DType)

// First line of a GPU slot (or of a row whose target is the GPU): skips it,
// with the reason, where there is no device.
#define NEED_GPU()                                                                          \
  do {                                                                                      \
    std::string why_;                                                                       \
    if (!::tb::test::gpu_available(&why_)) QSKIP(qPrintable(QString::fromStdString(why_))); \
  } while (0)

// A GPU slot that needs what the emulated backend (TRAINBENCH_CUDA=EMULATED,
// tests/cuda_emulator) does not model: work running concurrently with the
// host, a real device's timing or memory, CUPTI, NVML. It runs on a GPU and
// is skipped there with `why`.
#ifdef TRAINBENCH_EMULATED_BACKEND
#define NEED_REAL_GPU(why) \
  QSKIP("not on the emulated CUDA backend: " why " (runs on a real GPU)")
#else
#define NEED_REAL_GPU(why) NEED_GPU()
#endif

// In a typed slot: fetches the "target" column into `var`, skips a GPU row
// without a device, and binds `be` to the target's backend.
#define FETCH_TARGET(var, be)                                                      \
  const ::tb::test::Target var = *static_cast<const ::tb::test::Target*>(          \
      QTest::qData("target", ::qMetaTypeId<::tb::test::Target>()));               \
  if (var.on_gpu()) NEED_GPU();                                                    \
  ::tb::Backend& be = ::tb::test::backend_of(var)

// Each op family's check_output(target, [case,] output name, reference, result)
// judges one output with the tolerance its target allows; this fails the row
// with the comparison's message.
#define EXPECT_OUTPUT(...)                                \
  do {                                                    \
    const auto c_ = check_output(__VA_ARGS__);            \
    QVERIFY2(c_.ok, c_.msg.c_str());                      \
  } while (0)
