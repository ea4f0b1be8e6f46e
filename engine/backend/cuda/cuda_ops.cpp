// SPDX-License-Identifier: GPL-3.0-or-later
// Argument checks and dispatch for the backend's own kernels: pointwise
// (pointwise.cu). The op families' are in their folders
// (engine/ops/<family>/<family>_cuda.cpp).
// Every op checks shapes, dtypes, devices and layouts on the host, then
// enqueues on the backend's stream and returns without waiting.
#include "engine/backend/cuda/cuda_internal.h"
#include "engine/core/dispatch.h"

namespace tb {

using cuda::check_on;

namespace {

// Same shape, dtype and (rank 4) layout; f32 or f64; both on this device.
void check_pair(const CudaBackend& be, const Tensor& a, const Tensor& b, const char* op) {
  check_on(be, a, op, "first operand");
  check_on(be, b, op, "second operand");
  TB_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype(), op,
           ": operands differ: ", a.describe(), " vs ", b.describe());
  TB_CHECK(a.rank() != 4 || a.layout() == b.layout(), op, ": layouts differ: ", a.describe(),
           " vs ", b.describe());
  TB_CHECK(a.dtype() == DType::F32 || a.dtype() == DType::F64, op, ": expected f32 or f64, got ",
           a.describe());
}

template <typename T>
T* p(const Tensor& t) {
  return t.data_as<T>();
}

}  // namespace

// ---------------------------------------------------------------- pointwise

void CudaBackend::relu_forward(const Tensor& x, Tensor& y) {
  check_pair(*this, x, y, "relu_forward");
  impl_->activate();
  by_dtype(x, [&](auto z) {
    using T = decltype(z);
    cuda::launch_relu_forward(p<T>(x), p<T>(y), x.numel(), impl_->stream);
  });
}

void CudaBackend::relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  check_pair(*this, y, dy, "relu_backward");
  check_pair(*this, y, dx, "relu_backward");
  impl_->activate();
  by_dtype(y, [&](auto z) {
    using T = decltype(z);
    cuda::launch_relu_backward(p<T>(y), p<T>(dy), p<T>(dx), y.numel(), impl_->stream);
  });
}

void CudaBackend::gelu_forward(const Tensor& x, Tensor& y) {
  check_pair(*this, x, y, "gelu_forward");
  impl_->activate();
  by_dtype(x, [&](auto z) {
    using T = decltype(z);
    cuda::launch_gelu_forward(p<T>(x), p<T>(y), x.numel(), impl_->stream);
  });
}

void CudaBackend::gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  check_pair(*this, x, dy, "gelu_backward");
  check_pair(*this, x, dx, "gelu_backward");
  impl_->activate();
  by_dtype(x, [&](auto z) {
    using T = decltype(z);
    cuda::launch_gelu_backward(p<T>(x), p<T>(dy), p<T>(dx), x.numel(), impl_->stream);
  });
}

void CudaBackend::add(const Tensor& a, const Tensor& b, Tensor& y) {
  check_pair(*this, a, b, "add");
  check_pair(*this, a, y, "add");
  impl_->activate();
  by_dtype(a, [&](auto z) {
    using T = decltype(z);
    cuda::launch_add(p<T>(a), p<T>(b), p<T>(y), a.numel(), impl_->stream);
  });
}

void CudaBackend::accumulate(const Tensor& src, Tensor& dst) {
  check_pair(*this, src, dst, "accumulate");
  impl_->activate();
  by_dtype(src, [&](auto z) {
    using T = decltype(z);
    cuda::launch_accumulate(p<T>(src), p<T>(dst), src.numel(), impl_->stream);
  });
}

void CudaBackend::scale(Tensor& t, double alpha) {
  check_on(*this, t, "scale", "tensor");
  TB_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F64, "scale: expected f32 or f64, got ",
           t.describe());
  impl_->activate();
  by_dtype(t, [&](auto z) {
    using T = decltype(z);
    cuda::launch_scale(p<T>(t), alpha, t.numel(), impl_->stream);
  });
}

}  // namespace tb
