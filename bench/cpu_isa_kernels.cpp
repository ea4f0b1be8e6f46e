// SPDX-License-Identifier: GPL-3.0-or-later
// trainbench-cpu-isa-kernels: the CPU backend's dispatched loops
// (engine/core/cpu_features.h) timed on one thread in each instruction-set
// copy this processor runs, on fmnist-cnn's and resnet18-cifar's shapes. Each
// figure is the fastest of --reps calls in the thread's own CPU time (the
// machine may be shared: time the core ran another process does not count,
// though what that process did to the caches still does), also as GB/s of
// the bytes the op must move. One JSON object on stdout (bench/NOTES.md
// quotes it).
//
//   build/bin/trainbench-cpu-isa-kernels [--reps 50]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/cpu_timing.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/cpu_features.h"
#include "engine/ops/batchnorm/batchnorm.h"
#include "engine/ops/optimizer/optimizer.h"
#include "engine/ops/pointwise/pointwise.h"

using json = nlohmann::json;
using namespace tb;
using tb::bench::thread_seconds;

namespace {

Tensor filled(const Shape& s, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  Tensor t = Tensor::empty(s, DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = d(rng);
  return t;
}


// The fastest of reps calls of f, in seconds of this thread's CPU time.
double fastest(int reps, const std::function<void()>& f) {
  f();  // first touch, caches
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = thread_seconds();
    f();
    best = std::min(best, thread_seconds() - t0);
  }
  return best;
}

struct Op {
  std::string name;
  double bytes;  // what the op must read and write, once each
  std::function<void()> run;
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 50;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--reps") reps = std::atoi(argv[i + 1]);
  CpuBackend be(BackendOptions{.threads = 1});
  std::vector<Op> ops;
  // Batch norm with its ReLU (fuse_pointwise's layer and the plain one share
  // the code): fmnist-cnn's two layers at batch 128, resnet18-cifar's widest
  // at batch 64.
  for (Shape s : {Shape{128, 32, 28, 28}, Shape{128, 64, 14, 14}, Shape{64, 64, 32, 32}}) {
    const int64_t C = s[1];
    Tensor x = filled(s, 1), y = Tensor::empty(s, DType::F32);
    Tensor dy = filled(s, 2), dx = Tensor::empty(s, DType::F32);
    Tensor g = filled({C}, 3, 0.5f, 1.5f), b = filled({C}, 4);
    Tensor rm = filled({C}, 5), rv = filled({C}, 6, 0.5f, 2.0f);
    Tensor m = Tensor::empty({C}, DType::F32), is = Tensor::empty({C}, DType::F32);
    Tensor dg = Tensor::empty({C}, DType::F32), db = Tensor::empty({C}, DType::F32);
    const double v = double(x.numel()) * 4;
    const std::string shape = std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" +
                              std::to_string(s[2]) + "x" + std::to_string(s[3]);
    ops.push_back({"batchnorm_relu forward_train " + shape, 2 * v, [=, &be]() mutable {
                     batchnorm::forward_train(be, x, g, b, rm, rv, 0.1f, 1e-5f, y, m, is,
                                              Epilogue{.act = Activation::ReLU});
                   }});
    ops.push_back({"batchnorm_relu backward " + shape, 4 * v, [=, &be]() mutable {
                     batchnorm::backward(be, x, dy, g, m, is, dx, dg, db, false,
                                         EpilogueGrad{.act = Activation::ReLU, .y = y});
                   }});
    ops.push_back({"relu forward (in place) " + shape, 2 * v,
                   [=, &be]() mutable { pointwise::relu_forward(be, dx, dx); }});
    ops.push_back({"relu backward " + shape, 3 * v,
                   [=, &be]() mutable { pointwise::relu_backward(be, y, dy, dx); }});
    ops.push_back({"add (in place) " + shape, 3 * v, [=, &be]() mutable { pointwise::add(be, dx, dy, dx); }});
  }
  // SGD with momentum and weight decay over fmnist-cnn's 421,642 parameters.
  {
    const int64_t n = 421642;
    Tensor p = filled({n}, 7), gr = filled({n}, 8),
         mom = filled({n}, 9);
    OptimizerStep st;
    st.lr = 0.05f, st.momentum = 0.9f, st.weight_decay = 5e-4f;
    ops.push_back({"sgd momentum 421642", double(n) * 4 * 5, [=, &be]() mutable {
                     optimizer::step(be, st, {ParamSlot{p, gr, mom, {}, true}}, true);
                   }});
  }

  json out = {{"what", "fastest of " + std::to_string(reps) +
                           " calls on one thread, in the thread's CPU time; GB/s of the bytes each op must move"},
              {"device", CpuBackend::host_name()}, {"reps", reps}, {"ops", json::array()}};
  for (const Op& op : ops) {
    json row = {{"op", op.name}, {"bytes", op.bytes}};
    for (CpuIsa isa : cpu_isas_supported()) {
      set_cpu_isa(isa);
      const double s = fastest(reps, op.run);
      row[cpu_isa_name(isa)] = {{"us", s * 1e6}, {"gb_per_s", op.bytes / s / 1e9}};
    }
    std::fprintf(stderr, "%s\n", row.dump().c_str());
    out["ops"].push_back(row);
  }
  std::printf("%s\n", out.dump(2).c_str());
}
