// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// How an op family reaches a backend without growing the Backend interface.
//
// A family (engine/ops/<family>/) declares in its contract header
//   - the interface its backends implement: `class Kernels : public OpKernels`
//     with `static constexpr const char* kFamily = "batch norm";`, and
//   - its entry points, the API layers call: `batchnorm::forward_train(be, ...)`
//     checks the contract once for every backend, then calls
//     `be.kernels<batchnorm::Kernels>().forward_train(...)`.
// Each backend's side of the family (<family>_cpu.cpp, <family>_cuda.cpp)
// implements Kernels and defines `void <family>::register_cpu_kernels()` (or
// register_cuda_kernels) that calls register_kernels<...>() below. The calls
// are generated from the one `add_op_family(<family>)` line in
// engine/CMakeLists.txt (op_families.cpp in the build tree), so adding a
// family touches its folder and that line, never Backend.
//
// A backend makes each family's Kernels on first use and keeps it for its
// life; the object holds a reference to its backend, whose private state
// (stream, handles, options) it reads.
#include <memory>
#include <typeindex>

#include "engine/core/device.h"
#include "engine/core/dtype.h"

namespace tb {

class Backend;

// Base of every family's kernel interface.
class OpKernels {
 public:
  virtual ~OpKernels() = default;
};

using OpKernelsFactory = std::unique_ptr<OpKernels> (*)(Backend&);

// Adds (family, device kind) -> factory; a second registration of the same
// pair is a programming error (throws tb::Error).
void register_op_kernels(std::type_index family, const char* family_name, DeviceKind kind,
                         OpKernelsFactory make);
// The factory for (family, kind), or nullptr when that backend has none.
OpKernelsFactory find_op_kernels(std::type_index family, DeviceKind kind);

// Impl implements Kernels for BackendT (constructed from BackendT&).
template <class Kernels, class Impl, class BackendT>
void register_kernels(DeviceKind kind) {
  register_op_kernels(typeid(Kernels), Kernels::kFamily, kind,
                      [](Backend& be) -> std::unique_ptr<OpKernels> {
                        return std::make_unique<Impl>(static_cast<BackendT&>(be));
                      });
}

// A family's refusal of a dtype its kernels on `be` lack (the family's
// Kernels::supports said no): tb::Error "<op>: <dtype> <family> is not
// supported by the <backend> backend". Nothing when `supported`.
void require_dtype(bool supported, const Backend& be, const char* family, DType t,
                   const char* op);

// Generated (engine/CMakeLists.txt, add_op_family): calls every family's
// register_cpu_kernels() and, in CUDA builds, register_cuda_kernels().
// find_op_kernels runs it once; nothing else needs to.
void register_op_families();

}  // namespace tb
