// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The CPU backend. Each op family lives in its own file (conv.cpp, linear.cpp,
// pointwise.cpp, optimizer.cpp, memory.cpp; the families
// already moved in engine/ops/<family>/) with a plain reference implementation
// (templated on float/double: the test oracle, used for f64 and when
// options.reference is set) beside the fast f32 path (OpenBLAS GEMM,
// vectorisable loops, OpenMP threads).
#include "engine/backend/backend.h"

namespace tb {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options = {});

  Device device() const override { return Device::cpu(); }
  std::string name() const override;
  nlohmann::json describe() const override;
  static std::string host_name();  // CPU model name from /proc/cpuinfo

  // What the trainer may use on the CPU (engine/backend/capabilities.h): the
  // fused pointwise ops, and ddp over MPI when this build has it. Streams,
  // pinned memory, cuDNN, Tensor Cores and a caching allocator have no
  // counterpart here.
#ifdef TRAINBENCH_HAVE_MPI
  static constexpr BackendCapabilities kCapabilities{.fused_pointwise = true,
                                                     .process_parallel = true};
#else
  static constexpr BackendCapabilities kCapabilities{.fused_pointwise = true};
#endif
  BackendCapabilities capabilities() const override { return kCapabilities; }

  bool reference() const { return options_.reference; }
  int threads() const { return threads_; }
  // True when an op on tensors of dtype t must take the reference path.
  bool use_reference(DType t) const { return options_.reference || t == DType::F64; }

  void fill(Tensor& t, double value) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void normalize_u8(const Tensor& src, const std::vector<float>& scale,
                    const std::vector<float>& shift, Tensor& dst) override;
  void augment_normalize_u8(const Tensor& src, const Tensor& indices, const AugmentSpec& spec,
                            const std::vector<float>& scale, const std::vector<float>& shift,
                            Tensor& dst) override;

  void conv2d_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                      Tensor& y) override;
  void conv2d_backward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                       Tensor& dx, Tensor& dw, Tensor& db, bool accumulate) override;

  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override;
  void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                       Tensor& db, bool accumulate) override;

  void relu_forward(const Tensor& x, Tensor& y) override;
  void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) override;
  void gelu_forward(const Tensor& x, Tensor& y) override;
  void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override;
  void add(const Tensor& a, const Tensor& b, Tensor& y) override;
  void accumulate(const Tensor& src, Tensor& dst) override;
  void scale(Tensor& t, double alpha) override;

  // Fused linear + activation (fused.cpp, fuse_pointwise): the reference is the
  // composition of the unfused reference ops; the fast f32 path makes one sweep.
  void linear_act_forward(const Tensor& x, const Tensor& w, const Tensor& b, Activation act,
                          Tensor& y, Tensor& pre) override;
  void linear_act_backward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& pre,
                           const Tensor& dy, Activation act, Tensor& dpre, Tensor& dx, Tensor& dw,
                           Tensor& db, bool accumulate) override;

  // pad_channels.cpp
  void pad_channels_forward(const Tensor& x, Tensor& y) override;
  void pad_channels_backward(const Tensor& dy, Tensor& dx) override;

  double sum_squares(const Tensor& t) override;
  void optimizer_step(const OptimizerStep& step, const std::vector<ParamSlot>& slots,
                      bool multi_tensor) override;

  // Mixed precision, reference form (amp.cpp): the loss-scaler logic on the host,
  // for tests with planted inf/NaN; gradients f32 or f64.
  void cast(const Tensor& src, Tensor& dst) override;
  void amp_scale(Tensor& t, const Tensor& scaler_state) override;
  void amp_unscale_and_check(Tensor& grads, Tensor& scaler_state) override;
  void optimizer_step_amp(const OptimizerStep& step, const std::vector<ParamSlot>& slots,
                          bool multi_tensor, const Tensor& scaler_state) override;
  void amp_update_scale(Tensor& scaler_state, float growth_factor, float backoff_factor,
                        int64_t growth_interval) override;
  void linear_forward_lp(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override;
  void linear_backward_lp(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                          Tensor& dw, Tensor& db, bool accumulate) override;
  void conv2d_forward_lp(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                         Tensor& y) override;
  void conv2d_backward_lp(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                          Tensor& dx, Tensor& dw, Tensor& db, bool accumulate) override;

 private:
  BackendOptions options_;
  int threads_ = 1;
};

}  // namespace tb
