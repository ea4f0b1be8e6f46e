// SPDX-License-Identifier: GPL-3.0-or-later
// Argument checks and dispatch for the backend's own kernels: pooling
// (pool.cu), loss (loss.cu). Batch norm's and pointwise's are in their op
// families, engine/ops/<family>/<family>_cuda.cpp.
// Every op checks shapes, dtypes, devices and layouts on the host, then
// enqueues on the backend's stream and returns without waiting.
#include "engine/backend/cuda/cuda_internal.h"

namespace tb {

using cuda::check_f32;
using cuda::check_on;
using cuda::fptr;

namespace {

bool is_nhwc(const Tensor& t) { return t.rank() == 4 && t.layout() == Layout::NHWC; }

}  // namespace

// ---------------------------------------------------------------- pooling

namespace {

void check_pool(const CudaBackend& be, const char* op, const char* what, const Tensor& t,
                const Shape& shape, DType dt, Layout layout) {
  check_on(be, t, op, what);
  expect_dtype(t, dt, op);
  TB_CHECK(t.shape() == shape, op, ": ", what, " ", t.describe(), " does not match ",
           shape_str(shape));
  TB_CHECK(t.layout() == layout, op, ": ", what, " ", t.describe(), " is not ", layout_name(layout),
           " like the other operands");
}

cuda::PoolDims dims(const PoolGeometry& g, bool nhwc) {
  return {g.N, g.C, g.H, g.W, g.kernel, g.stride, g.pad, g.H_out, g.W_out, nhwc};
}

}  // namespace

void CudaBackend::maxpool2d_forward(const PoolGeometry& g, const Tensor& x, Tensor& y,
                                    Tensor& argmax) {
  const char* op = "maxpool2d_forward";
  check_on(*this, x, op, "x");
  const Layout l = x.layout();
  check_pool(*this, op, "x", x, g.input_shape(), DType::F32, l);
  check_pool(*this, op, "y", y, g.output_shape(), DType::F32, l);
  check_pool(*this, op, "argmax", argmax, g.output_shape(), DType::I32, l);
  impl_->activate();
  cuda::launch_maxpool_forward(dims(g, l == Layout::NHWC), fptr(x), fptr(y),
                               argmax.data_as<int32_t>(), impl_->stream);
}

void CudaBackend::maxpool2d_backward(const PoolGeometry& g, const Tensor& dy, const Tensor& argmax,
                                     Tensor& dx) {
  const char* op = "maxpool2d_backward";
  check_on(*this, dy, op, "dy");
  const Layout l = dy.layout();
  check_pool(*this, op, "dy", dy, g.output_shape(), DType::F32, l);
  check_pool(*this, op, "argmax", argmax, g.output_shape(), DType::I32, l);
  check_pool(*this, op, "dx", dx, g.input_shape(), DType::F32, l);
  impl_->activate();
  cuda::launch_maxpool_backward(dims(g, l == Layout::NHWC), fptr(dy), argmax.data_as<int32_t>(),
                                fptr(dx), impl_->stream);
}

void CudaBackend::avgpool2d_forward(const PoolGeometry& g, const Tensor& x, Tensor& y) {
  const char* op = "avgpool2d_forward";
  check_on(*this, x, op, "x");
  const Layout l = x.layout();
  check_pool(*this, op, "x", x, g.input_shape(), DType::F32, l);
  check_pool(*this, op, "y", y, g.output_shape(), DType::F32, l);
  impl_->activate();
  cuda::launch_avgpool_forward(dims(g, l == Layout::NHWC), fptr(x), fptr(y), impl_->stream);
}

void CudaBackend::avgpool2d_backward(const PoolGeometry& g, const Tensor& dy, Tensor& dx) {
  const char* op = "avgpool2d_backward";
  check_on(*this, dy, op, "dy");
  const Layout l = dy.layout();
  check_pool(*this, op, "dy", dy, g.output_shape(), DType::F32, l);
  check_pool(*this, op, "dx", dx, g.input_shape(), DType::F32, l);
  impl_->activate();
  cuda::launch_avgpool_backward(dims(g, l == Layout::NHWC), fptr(dy), fptr(dx), impl_->stream);
}

void CudaBackend::global_avgpool_forward(const Tensor& x, Tensor& y) {
  const char* op = "global_avgpool_forward";
  check_on(*this, x, op, "x");
  check_on(*this, y, op, "y");
  TB_CHECK(x.rank() == 4, op, ": x must be (N, C, H, W), got ", x.describe());
  check_f32(x, op, "x");
  check_f32(y, op, "y");
  expect_shape(y, {x.n(), x.c()}, op);
  impl_->activate();
  cuda::launch_global_avgpool_forward(fptr(x), fptr(y), x.n(), x.c(), x.h() * x.w(), is_nhwc(x),
                                      impl_->stream);
}

void CudaBackend::global_avgpool_backward(const Tensor& dy, Tensor& dx) {
  const char* op = "global_avgpool_backward";
  check_on(*this, dy, op, "dy");
  check_on(*this, dx, op, "dx");
  TB_CHECK(dx.rank() == 4, op, ": dx must be (N, C, H, W), got ", dx.describe());
  check_f32(dy, op, "dy");
  check_f32(dx, op, "dx");
  expect_shape(dy, {dx.n(), dx.c()}, op);
  impl_->activate();
  cuda::launch_global_avgpool_backward(fptr(dy), fptr(dx), dx.n(), dx.c(), dx.h() * dx.w(),
                                       is_nhwc(dx), impl_->stream);
}

// ---------------------------------------------------------------- loss

void CudaBackend::softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                        float label_smoothing, float grad_scale, Tensor& dlogits,
                                        Tensor& stats) {
  const char* op = "softmax_cross_entropy";
  check_on(*this, logits, op, "logits");
  check_on(*this, stats, op, "stats");
  TB_CHECK(logits.rank() == 2, op, ": logits must be (N, K), got ", logits.describe());
  check_f32(logits, op, "logits");
  const int64_t N = logits.dim(0), K = logits.dim(1);
  TB_CHECK(K > 0, op, ": no classes in ", logits.describe());
  TB_CHECK(labels.defined(), op, ": labels must be defined");
  expect_shape(labels, {N}, "softmax_cross_entropy: labels");
  expect_dtype(labels, DType::I32, "softmax_cross_entropy: labels");
  expect_shape(stats, {2}, "softmax_cross_entropy: stats");
  expect_dtype(stats, DType::F64, "softmax_cross_entropy: stats");
  if (dlogits.defined()) {
    check_on(*this, dlogits, op, "dlogits");
    expect_shape(dlogits, logits.shape(), "softmax_cross_entropy: dlogits");
    expect_dtype(dlogits, logits.dtype(), "softmax_cross_entropy: dlogits");
    TB_CHECK(dlogits.data() != logits.data(), op, ": dlogits must not alias logits");
  }
  TB_CHECK(label_smoothing >= 0.0f && label_smoothing <= 1.0f, op,
           ": label smoothing must be in [0, 1], got ", label_smoothing);
  Impl& m = *impl_;
  m.activate();
  // Host labels are checked here and copied; device labels cannot be checked
  // without a sync, so the kernel turns a bad one into a NaN loss instead.
  Tensor y = labels;
  if (labels.device().is_cpu()) {
    const int32_t* h = labels.data_as<int32_t>();
    for (int64_t n = 0; n < N; ++n)
      TB_CHECK(h[n] >= 0 && h[n] < K, op, ": label ", h[n], " of sample ", n, " is outside [0, ", K,
               ")");
    y = Tensor::empty({N}, DType::I32, device());
    copy(labels, y);
  } else {
    check_on(*this, labels, op, "labels");
  }
  Tensor rows = m.scratch(size_t(2 * std::max<int64_t>(N, 1)) * sizeof(double));
  cuda::launch_softmax_xent(fptr(logits), y.data_as<int32_t>(), N, K, label_smoothing, grad_scale,
                            fptr(dlogits), rows.data_as<double>(), stats.data_as<double>(),
                            m.stream);
}

}  // namespace tb
