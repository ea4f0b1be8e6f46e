// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/parallel/device_replicas.h"

#include <exception>
#include <thread>

#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/nn/model.h"
#include "engine/ops/pointwise/pointwise.h"

namespace tb {

using json = nlohmann::json;

std::vector<int64_t> scatter_sizes(int64_t batch, int n) {
  TB_CHECK(n > 0 && batch >= n, "parallel: dp: a batch of ", batch, " cannot be split across ", n,
           " devices (batch_size must be at least dp_devices)");
  std::vector<int64_t> sizes(size_t(n), batch / n);
  for (int64_t r = 0; r < batch % n; ++r) ++sizes[size_t(r)];
  return sizes;
}

DeviceReplicas::DeviceReplicas(Backend& primary, Model& model,
                               std::vector<std::unique_ptr<Backend>> others,
                               const std::function<std::unique_ptr<Model>(Backend&)>& build,
                               const Context& like)
    : primary_(primary), model_(model), others_(std::move(others)) {
  TB_CHECK(model_.built(), "parallel: dp: the model must be built before it is replicated");
  replicas_.resize(others_.size() + 1);
  replicas_[0].backend = &primary_;
  replicas_[0].model = &model_;
  for (size_t r = 1; r < replicas_.size(); ++r) {
    Replica& rep = replicas_[r];
    Backend& be = *others_[r - 1];
    rep.backend = &be;
    rep.owned_model = build(be);
    rep.model = rep.owned_model.get();
    TB_CHECK(rep.model->num_params() == model_.num_params() &&
                 rep.model->buffers().size() == model_.buffers().size(),
             "parallel: dp: the replica on ", be.device().str(), " differs from the model on ",
             primary_.device().str());
    rep.ctx = std::make_unique<Context>(Context{be});
    rep.ctx->training = like.training;
    rep.ctx->dtype = like.dtype;
    rep.ctx->layout = like.layout;
    rep.ctx->amp = like.amp;
    rep.stats = be.empty({2}, DType::F64);
    be.fill(rep.stats, 0.0);
  }
  if (size() > 1) received_ = primary_.empty(model_.grad_block().shape(), model_.grad_block().dtype());
  stats_host_ = Tensor::empty({2}, DType::F64);
  // Building the replicas made their devices current on this thread; what
  // the trainer makes next (the step timer's events) belongs to the primary.
  primary_.synchronize();
}

DeviceReplicas::~DeviceReplicas() = default;

Backend& DeviceReplicas::backend(int r) { return *replicas_.at(size_t(r)).backend; }
Model& DeviceReplicas::model(int r) { return *replicas_.at(size_t(r)).model; }

Context& DeviceReplicas::context(int r) {
  TB_CHECK(r > 0, "parallel: dp: replica 0's context is the trainer's");
  return *replicas_.at(size_t(r)).ctx;
}

Tensor& DeviceReplicas::stats(int r) {
  TB_CHECK(r > 0, "parallel: dp: replica 0's accumulator is the trainer's");
  return replicas_.at(size_t(r)).stats;
}

void DeviceReplicas::replicate() {
  const std::vector<BufferInfo>& buffers = model_.buffers();
  for (size_t r = 1; r < replicas_.size(); ++r) {
    Replica& rep = replicas_[r];
    Tensor params = rep.model->param_block();
    rep.backend->copy_from_peer(primary_, model_.param_block(), params);
    for (size_t b = 0; b < buffers.size(); ++b) {
      Tensor dst = rep.model->buffers()[b].value;
      rep.backend->copy_from_peer(primary_, buffers[b].value, dst);
    }
  }
}

namespace {
// Rows [begin, begin + rows) of `t` along dim 0 (N is outermost in NCHW and NHWC alike).
Tensor rows_of(const Tensor& t, int64_t begin, int64_t rows) {
  Shape shape = t.shape();
  const int64_t per_row = t.numel() / shape[0];
  shape[0] = rows;
  return Tensor::view_of(t, begin * per_row, shape, t.layout());
}
}  // namespace

void DeviceReplicas::scatter(const Tensor& x, const Tensor& y) {
  const int64_t batch = x.dim(0);
  TB_CHECK(y.dim(0) == batch, "parallel: dp: ", x.describe(), " and labels ", y.describe(),
           " differ in batch size");
  const std::vector<int64_t> sizes = scatter_sizes(batch, size());
  int64_t begin = 0;
  for (size_t r = 0; r < replicas_.size(); ++r) {
    Replica& rep = replicas_[r];
    const Tensor xs = rows_of(x, begin, sizes[r]), ys = rows_of(y, begin, sizes[r]);
    rep.share = double(sizes[r]) / double(batch);
    if (r == 0) {
      rep.x = xs, rep.y = ys;
    } else {
      ensure_buffer(*rep.ctx, rep.x, xs.shape(), xs.dtype(), xs.layout());
      ensure_buffer(*rep.ctx, rep.y, ys.shape(), ys.dtype());
      rep.backend->copy_from_peer(primary_, xs, rep.x);
      rep.backend->copy_from_peer(primary_, ys, rep.y);
    }
    begin += sizes[r];
  }
}

void DeviceReplicas::parallel_apply(const std::function<void(int)>& f) {
  std::vector<std::exception_ptr> errors(replicas_.size());
  std::vector<std::thread> threads;
  threads.reserve(replicas_.size() - 1);
  for (int r = 1; r < size(); ++r)
    threads.emplace_back([&, r] {
      try {
        f(r);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  try {
    f(0);
  } catch (...) {
    errors[0] = std::current_exception();
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

void DeviceReplicas::reduce_gradients() {
  Tensor sum = model_.grad_block();
  for (size_t r = 1; r < replicas_.size(); ++r) {
    primary_.copy_from_peer(*replicas_[r].backend, replicas_[r].model->grad_block(), received_);
    pointwise::accumulate(primary_, received_, sum);
  }
}

std::pair<double, double> DeviceReplicas::read_and_reset_stats() {
  double loss = 0, correct = 0;
  for (size_t r = 1; r < replicas_.size(); ++r) {
    Replica& rep = replicas_[r];
    rep.backend->copy(rep.stats, stats_host_);
    loss += stats_host_.data_as<double>()[0];
    correct += stats_host_.data_as<double>()[1];
    rep.backend->fill(rep.stats, 0.0);
  }
  return {loss, correct};
}

json DeviceReplicas::describe() const {
  json names = json::array();
  for (const Replica& rep : replicas_) names.push_back(rep.backend->name());
  return {{"dp_devices", size()}, {"dp_device_names", names}};
}

}  // namespace tb
