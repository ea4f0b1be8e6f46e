// SPDX-License-Identifier: GPL-3.0-or-later
// trainbench-cpu-norm-pool-onednn: whether oneDNN would be a faster CPU path
// for batch norm and pooling (issue 28), before any such path exists: times
// the CPU backend's own f32 ops (batchnorm::forward_train / backward with and
// without the ReLU epilogue, pooling::max / avg forward and backward) against
// oneDNN's primitives on the same NCHW tensors, in interleaved rounds so that
// other work on a shared machine slows every candidate alike. oneDNN runs on
// the caller's NCHW ("onednn") and, for batch norm, on its blocked layout
// with the reorders in and out that a path keeping the caller's layout would
// pay ("onednn-blocked", as the convolutions' onednn-blocked path). Average
// pooling also through the engine with its path on auto ("trainbench-auto":
// oneDNN where its JIT kernel takes the shape, pooling_cpu.h) against our
// loops forced ("trainbench"). Batch norm
// with ReLU is oneDNN's fuse_norm_relu (a workspace of the ReLU mask); its
// residual add has no oneDNN counterpart and is not timed. Prints one JSON
// object: per op and shape, each candidate's median and minimum milliseconds.
//
//   trainbench-cpu-norm-pool-onednn --threads 2 --rounds 20
#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/ops/batchnorm/batchnorm.h"
#include "engine/ops/pooling/pooling.h"
#include "engine/ops/pooling/pooling_cpu.h"
#include "bench/cpu_timing.h"

using namespace tb;
using tb::bench::load_average;
using tb::bench::median;
using tb::bench::random_f32;
using tb::bench::time_candidates;
using dnnl::memory;
using Tag = memory::format_tag;

namespace {

memory mem(const memory::desc& d, const dnnl::engine& eng, const Tensor& t) {
  return memory(d, eng, t.data_as<float>());
}

void run_reorder(const dnnl::reorder& r, dnnl::stream& s, const memory& from, const memory& to) {
  r.execute(s, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, rounds = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--threads") threads = std::stoi(v);
    else if (a == "--rounds") rounds = std::stoi(v);
    else {
      std::fprintf(stderr, "unknown option %s (--threads, --rounds)\n", a.c_str());
      return 2;
    }
  }
  CpuBackend be(BackendOptions{.threads = threads}), be_auto(BackendOptions{.threads = threads});
  pooling::set_cpu_avg_pool_path(be, "fast");  // our loops; be_auto: the engine's choice
  omp_set_num_threads(threads);  // oneDNN's threads (OpenMP), as conv_onednn.cpp sets them
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const auto f32 = memory::data_type::f32;
  std::mt19937 rng(1);
  const double load_before = load_average();
  nlohmann::json out = {{"threads", threads}, {"rounds", rounds},
                        {"cpu", CpuBackend::host_name()}, {"results", nlohmann::json::array()}};

  // Batch norm: resnet18-cifar b64's four stages, fmnist-cnn b128's two layers.
  const std::vector<std::array<int64_t, 4>> bn_shapes = {
      {64, 64, 32, 32}, {64, 128, 16, 16}, {64, 256, 8, 8}, {64, 512, 4, 4},
      {128, 32, 28, 28}, {128, 64, 14, 14}};
  for (const auto& [N, C, H, W] : bn_shapes) {
    const Shape xs{N, C, H, W};
    const Tensor x = random_f32(xs, rng), dy = random_f32(xs, rng);
    const Tensor gamma = random_f32({C}, rng, 0.5f, 1.5f), beta = random_f32({C}, rng);
    Tensor rmean = Tensor::empty({C}, DType::F32), rvar = random_f32({C}, rng, 0.5f, 1.5f);
    Tensor y = Tensor::empty(xs, DType::F32), dx = Tensor::empty(xs, DType::F32);
    Tensor smean = Tensor::empty({C}, DType::F32), sinvstd = Tensor::empty({C}, DType::F32);
    Tensor dgamma = Tensor::empty({C}, DType::F32), dbeta = Tensor::empty({C}, DType::F32);
    // oneDNN's operands: its scale and shift, mean and variance, their gradients.
    Tensor var = Tensor::empty({C}, DType::F32), dscale = Tensor::empty({C}, DType::F32),
           dshift = Tensor::empty({C}, DType::F32);
    const memory::desc plain({N, C, H, W}, f32, Tag::nchw), blocked({N, C, H, W}, f32, Tag::nChw16c),
        stat({C}, f32, Tag::x);
    for (bool relu : {false, true}) {
      const Epilogue epi{relu ? Activation::ReLU : Activation::None};
      const EpilogueGrad epi_grad{relu ? Activation::ReLU : Activation::None, relu ? y : Tensor{}};
      const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift |
                         (relu ? dnnl::normalization_flags::fuse_norm_relu
                               : dnnl::normalization_flags::none);
      struct Bn {
        dnnl::batch_normalization_forward fwd;
        dnnl::batch_normalization_backward bwd;
        memory ws;
        memory::desc md;
      };
      auto make = [&](const memory::desc& md) {
        const dnnl::batch_normalization_forward::primitive_desc fpd(
            {dnnl::prop_kind::forward_training, md, 1e-5f, flags}, eng);
        const dnnl::batch_normalization_backward::primitive_desc bpd(
            {dnnl::prop_kind::backward, md, md, 1e-5f, flags}, eng, fpd);
        return Bn{dnnl::batch_normalization_forward(fpd), dnnl::batch_normalization_backward(bpd),
                  relu ? memory(fpd.workspace_desc(), eng) : memory(), md};
      };
      Bn bn_plain = make(plain), bn_blocked = make(blocked);
      memory xb(blocked, eng), yb(blocked, eng), dyb(blocked, eng), dxb(blocked, eng);
      const dnnl::reorder to_blocked(mem(plain, eng, x), xb), to_plain(yb, mem(plain, eng, y));
      auto fwd_args = [&](Bn& b, const memory& xm, const memory& ym) {
        std::unordered_map<int, memory> a{
            {DNNL_ARG_SRC, xm}, {DNNL_ARG_DST, ym}, {DNNL_ARG_SCALE, mem(stat, eng, gamma)},
            {DNNL_ARG_SHIFT, mem(stat, eng, beta)}, {DNNL_ARG_MEAN, mem(stat, eng, smean)},
            {DNNL_ARG_VARIANCE, mem(stat, eng, var)}};
        if (relu) a.emplace(DNNL_ARG_WORKSPACE, b.ws);
        return a;
      };
      auto bwd_args = [&](Bn& b, const memory& xm, const memory& dym, const memory& dxm) {
        std::unordered_map<int, memory> a{
            {DNNL_ARG_SRC, xm}, {DNNL_ARG_DIFF_DST, dym}, {DNNL_ARG_DIFF_SRC, dxm},
            {DNNL_ARG_SCALE, mem(stat, eng, gamma)}, {DNNL_ARG_SHIFT, mem(stat, eng, beta)},
            {DNNL_ARG_MEAN, mem(stat, eng, smean)},
            {DNNL_ARG_VARIANCE, mem(stat, eng, var)},
            {DNNL_ARG_DIFF_SCALE, mem(stat, eng, dscale)},
            {DNNL_ARG_DIFF_SHIFT, mem(stat, eng, dshift)}};
        if (relu) a.emplace(DNNL_ARG_WORKSPACE, b.ws);
        return a;
      };
      const std::string name = std::string("batchnorm") + (relu ? "+relu" : "");
      const nlohmann::json shape = {N, C, H, W};
      out["results"].push_back(
          {{"op", name + " forward (train)"}, {"shape", shape},
           {"ms", time_candidates(
                      {{"trainbench",
                        [&] {
                          batchnorm::forward_train(be, x, gamma, beta, rmean, rvar, 0.1f, 1e-5f,
                                                   y, smean, sinvstd, epi);
                        }},
                       {"onednn",
                        [&] {
                          bn_plain.fwd.execute(s, fwd_args(bn_plain, mem(plain, eng, x),
                                                           mem(plain, eng, y)));
                          s.wait();
                        }},
                       {"onednn-blocked",
                        [&] {
                          run_reorder(to_blocked, s, mem(plain, eng, x), xb);
                          bn_blocked.fwd.execute(s, fwd_args(bn_blocked, xb, yb));
                          run_reorder(to_plain, s, yb, mem(plain, eng, y));
                          s.wait();
                        }}},
                      rounds)}});
      out["results"].push_back(
          {{"op", name + " backward"}, {"shape", shape},
           {"ms", time_candidates(
                      {{"trainbench",
                        [&] {
                          batchnorm::backward(be, x, dy, gamma, smean, sinvstd, dx, dgamma, dbeta,
                                              false, epi_grad);
                        }},
                       {"onednn",
                        [&] {
                          bn_plain.bwd.execute(s, bwd_args(bn_plain, mem(plain, eng, x),
                                                           mem(plain, eng, dy),
                                                           mem(plain, eng, dx)));
                          s.wait();
                        }},
                       {"onednn-blocked",
                        [&] {
                          run_reorder(to_blocked, s, mem(plain, eng, x), xb);
                          run_reorder(to_blocked, s, mem(plain, eng, dy), dyb);
                          bn_blocked.bwd.execute(s, bwd_args(bn_blocked, xb, dyb, dxb));
                          run_reorder(to_plain, s, dxb, mem(plain, eng, dx));
                          s.wait();
                        }}},
                      rounds)}});
      std::fprintf(stderr, "%s %lldx%lldx%lldx%lld done\n", name.c_str(), (long long)N,
                   (long long)C, (long long)H, (long long)W);
    }
  }

  // Pooling: fmnist-cnn b128's two 2x2 max pools; average 2x2 on the same,
  // and 4x4 over resnet18-cifar b64's last stage.
  struct PoolCase {
    const char* kind;
    int64_t N, C, H, W, k, stride;
  };
  for (const PoolCase& p : {PoolCase{"max", 128, 32, 28, 28, 2, 2}, {"max", 128, 64, 14, 14, 2, 2},
                            {"avg", 128, 32, 28, 28, 2, 2}, {"avg", 64, 512, 4, 4, 4, 4}}) {
    const bool max = p.kind[0] == 'm';
    const PoolGeometry g = PoolGeometry::make(p.N, p.C, p.H, p.W, p.k, p.stride, 0);
    const Tensor x = random_f32(g.input_shape(), rng), dy = random_f32(g.output_shape(), rng);
    Tensor y = Tensor::empty(g.output_shape(), DType::F32), dx = Tensor::empty(g.input_shape(), DType::F32);
    Tensor argmax = Tensor::empty(g.output_shape(), DType::I32);
    const memory::desc xd({p.N, p.C, p.H, p.W}, f32, Tag::nchw),
        yd({p.N, p.C, g.H_out, g.W_out}, f32, Tag::nchw);
    const auto alg = max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_include_padding;
    const memory::dims k{p.k, p.k}, st{p.stride, p.stride}, pad{0, 0};
    const dnnl::pooling_forward::primitive_desc fpd(
        {dnnl::prop_kind::forward_training, alg, xd, yd, st, k, pad, pad}, eng);
    const dnnl::pooling_backward::primitive_desc bpd({alg, xd, yd, st, k, pad, pad}, eng, fpd);
    dnnl::pooling_forward fwd(fpd);
    dnnl::pooling_backward bwd(bpd);
    memory ws = max ? memory(fpd.workspace_desc(), eng) : memory();
    auto with_ws = [&](std::unordered_map<int, memory> a) {
      if (max) a.emplace(DNNL_ARG_WORKSPACE, ws);
      return a;
    };
    const nlohmann::json shape = {p.N, p.C, p.H, p.W, p.k, p.stride};
    std::vector<std::pair<std::string, std::function<void()>>> forward{
        {"trainbench",
         [&] {
           if (max) pooling::max_forward(be, g, x, y, argmax);
           else pooling::avg_forward(be, g, x, y);
         }},
        {"onednn",
         [&] {
           fwd.execute(s, with_ws({{DNNL_ARG_SRC, mem(xd, eng, x)}, {DNNL_ARG_DST, mem(yd, eng, y)}}));
           s.wait();
         }}};
    std::vector<std::pair<std::string, std::function<void()>>> backward{
        {"trainbench",
         [&] {
           if (max) pooling::max_backward(be, g, dy, argmax, dx);
           else pooling::avg_backward(be, g, dy, dx);
         }},
        {"onednn",
         [&] {
           bwd.execute(s, with_ws({{DNNL_ARG_DIFF_DST, mem(yd, eng, dy)},
                                   {DNNL_ARG_DIFF_SRC, mem(xd, eng, dx)}}));
           s.wait();
         }}};
    if (!max) {
      forward.push_back({"trainbench-auto", [&] { pooling::avg_forward(be_auto, g, x, y); }});
      backward.push_back({"trainbench-auto", [&] { pooling::avg_backward(be_auto, g, dy, dx); }});
    }
    out["results"].push_back({{"op", std::string(p.kind) + " pool forward"},
                              {"shape", shape},
                              {"onednn_implementation", fpd.impl_info_str()},
                              {"ms", time_candidates(forward, rounds)}});
    out["results"].push_back({{"op", std::string(p.kind) + " pool backward"},
                              {"shape", shape},
                              {"onednn_implementation", bpd.impl_info_str()},
                              {"ms", time_candidates(backward, rounds)}});
  }
  out["load_average"] = {{"before", load_before}, {"after", load_average()}};
  out["kernel_paths"] = be_auto.describe()["kernel_paths"];  // what auto chose
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
