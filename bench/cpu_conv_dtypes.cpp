// SPDX-License-Identifier: GPL-3.0-or-later
// trainbench-cpu-conv-dtypes: what mixed precision would buy the CPU engine's
// convolutions, before any bf16 CPU path exists (amp is a GPU trick in this
// engine: bench/NOTES.md, "Mixed precision on the CPU"). Times oneDNN's
// training convolutions (forward, backward data, backward weights) on the
// models' 3x3 layers in
//   f32-direct     f32, oneDNN's direct kernels (the engine's onednn-blocked path)
//   f32-winograd   f32, oneDNN's Winograd F(4x4, 3x3) (onednn-winograd, the
//                  engine's choice for these layers with AVX-512), where it has one
//   bf16-direct    bf16 activations and filters, f32 accumulation, f32 weight
//                  gradients (what a trainer keeping f32 master weights asks);
//                  oneDNN's bf16 kernels (avx512_core_bf16, AMX where the
//                  processor has it, or its emulation on plain AVX-512)
// each in the layouts oneDNN picks, in interleaved rounds; and, as a fourth
// row per layer, what a bf16 path in an engine that keeps f32 activations in
// nChw16c between layers adds: the casts of x, dy and the filters to the bf16
// kernels' layouts and of y and dx back (oneDNN reorders). Prints one JSON
// object: the processor, its bf16/AMX flags, oneDNN's ISA and per shape and op
// each candidate's median and minimum milliseconds and oneDNN's kernel name.
//
//   trainbench-cpu-conv-dtypes --threads 2 --rounds 10 --batch 64
#include <omp.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>

#include "engine/backend/cpu/cpu_backend.h"
#include "bench/cpu_timing.h"

using namespace tb;
using tb::bench::load_average;
using tb::bench::time_candidates;
using dnnl::memory;
using DataType = memory::data_type;
using Tag = memory::format_tag;

namespace {

// The flags of /proc/cpuinfo's first processor that say how bf16 runs.
nlohmann::json bf16_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  nlohmann::json out = nlohmann::json::array();
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> have{std::istream_iterator<std::string>(words), {}};
    for (const char* f : {"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "avx512_fp16"})
      if (have.count(f)) out.push_back(f);
    break;
  }
  return out;
}

// oneDNN's name for the instruction set it runs (its effective ISA).
std::string onednn_isa() {
  using I = dnnl::cpu_isa;
  const std::pair<I, const char*> names[] = {
      {I::avx512_core_amx, "avx512_core_amx"}, {I::avx512_core_bf16, "avx512_core_bf16"},
      {I::avx512_core_vnni, "avx512_core_vnni"}, {I::avx512_core, "avx512_core"},
      {I::avx2_vnni, "avx2_vnni"}, {I::avx2, "avx2"}, {I::avx, "avx"}, {I::sse41, "sse41"}};
  const I isa = dnnl::get_effective_cpu_isa();
  for (const auto& [i, name] : names)
    if (isa == i) return name;
  return "other (" + std::to_string(int(isa)) + ")";
}

// One 3x3, stride 1, pad 1 convolution's three training primitives in one
// dtype and algorithm, with their operands in the layouts oneDNN chose.
struct Convolution {
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weights;
  memory x, w, y, dy, dx, dw, w_data, x_weights, dy_weights;
  std::string impl[3];

  static bool make(const dnnl::engine& eng, int64_t N, int64_t C, int64_t HW, int64_t K,
                   DataType dt, dnnl::algorithm alg, Convolution& c) {
    const memory::dims xd{N, C, HW, HW}, wd{K, C, 3, 3}, yd{N, K, HW, HW};
    const auto any = [](const memory::dims& d, DataType t) { return memory::desc(d, t, Tag::any); };
    const memory::dims stride{1, 1}, pad{1, 1};
    try {
      const auto fpd = dnnl::convolution_forward::primitive_desc(
          dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, any(xd, dt),
                                          any(wd, dt), any(yd, dt), stride, pad, pad),
          eng);
      const auto dpd = dnnl::convolution_backward_data::primitive_desc(
          dnnl::convolution_backward_data::desc(alg, any(xd, dt), any(wd, dt), any(yd, dt),
                                                stride, pad, pad),
          eng, fpd);
      // Weight gradients in f32 whatever the activations: the master weights' dtype.
      const auto wpd = dnnl::convolution_backward_weights::primitive_desc(
          dnnl::convolution_backward_weights::desc(alg, any(xd, dt), any(wd, DataType::f32),
                                                   any(yd, dt), stride, pad, pad),
          eng, fpd);
      c.fwd = dnnl::convolution_forward(fpd);
      c.bwd_data = dnnl::convolution_backward_data(dpd);
      c.bwd_weights = dnnl::convolution_backward_weights(wpd);
      c.x = memory(fpd.src_desc(), eng), c.w = memory(fpd.weights_desc(), eng);
      c.y = memory(fpd.dst_desc(), eng);
      c.dy = memory(dpd.diff_dst_desc(), eng), c.dx = memory(dpd.diff_src_desc(), eng);
      c.w_data = memory(dpd.weights_desc(), eng);
      c.x_weights = memory(wpd.src_desc(), eng), c.dy_weights = memory(wpd.diff_dst_desc(), eng);
      c.dw = memory(wpd.diff_weights_desc(), eng);
      c.impl[0] = fpd.impl_info_str(), c.impl[1] = dpd.impl_info_str();
      c.impl[2] = wpd.impl_info_str();
    } catch (const dnnl::error&) {  // no kernels for this problem (Winograd's limits)
      return false;
    }
    return true;
  }
};

// The reorders a bf16 convolution needs between an engine's f32 nChw16c
// activations (KCRS filters) and the layouts its kernels chose.
struct Casts {
  std::vector<std::pair<dnnl::reorder, std::pair<memory, memory>>> steps;
  memory x16, y16, dy16, dx16, w32;

  Casts(const dnnl::engine& eng, Convolution& c, int64_t N, int64_t C, int64_t HW, int64_t K) {
    const auto f32 = [&](memory::dims d, Tag t) { return memory({d, DataType::f32, t}, eng); };
    x16 = f32({N, C, HW, HW}, Tag::nChw16c), dx16 = f32({N, C, HW, HW}, Tag::nChw16c);
    y16 = f32({N, K, HW, HW}, Tag::nChw16c), dy16 = f32({N, K, HW, HW}, Tag::nChw16c);
    w32 = f32({K, C, 3, 3}, Tag::oihw);
    const auto add = [&](memory from, memory to) {
      steps.push_back({dnnl::reorder(from, to), {from, to}});
    };
    add(x16, c.x), add(w32, c.w), add(c.y, y16), add(dy16, c.dy);
    if (c.w_data.get_desc() != c.w.get_desc()) add(w32, c.w_data);
    add(c.dx, dx16);
    if (c.x_weights.get_desc() != c.x.get_desc()) add(x16, c.x_weights);
    if (c.dy_weights.get_desc() != c.dy.get_desc()) add(dy16, c.dy_weights);
  }
  void run(dnnl::stream& s) {
    for (auto& [r, io] : steps) r.execute(s, io.first, io.second);
    s.wait();
  }
};

// Random operands: the same distribution in each dtype (values in [-1, 1)).
void fill(memory& m, std::mt19937& rng) {
  const memory::desc d = m.get_desc();
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  if (d.data_type() == DataType::f32) {
    float* p = static_cast<float*>(m.get_data_handle());
    for (size_t i = 0; i < d.get_size() / sizeof(float); ++i) p[i] = u(rng);
  } else {  // bf16: an f32's upper half
    uint16_t* p = static_cast<uint16_t*>(m.get_data_handle());
    for (size_t i = 0; i < d.get_size() / sizeof(uint16_t); ++i) {
      const float v = u(rng);
      uint32_t b;
      std::memcpy(&b, &v, sizeof b);
      p[i] = uint16_t(b >> 16);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, rounds = 10;
  int64_t batch = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--threads") threads = std::stoi(v);
    else if (a == "--rounds") rounds = std::stoi(v);
    else if (a == "--batch") batch = std::stoll(v);
    else {
      std::fprintf(stderr, "unknown option %s (--threads, --rounds, --batch)\n", a.c_str());
      return 2;
    }
  }
  omp_set_num_threads(threads);  // oneDNN's threads (OpenMP), as conv_onednn.cpp sets them
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  std::mt19937 rng(1);
  const double load_before = load_average();
  nlohmann::json out = {{"threads", threads},
                        {"rounds", rounds},
                        {"batch", batch},
                        {"cpu", CpuBackend::host_name()},
                        {"cpu_flags", bf16_flags()},
                        {"onednn_isa", onednn_isa()},
                        {"results", nlohmann::json::array()}};

  // fmnist-cnn's second convolution and resnet18-cifar's four stages' 3x3
  // convolutions: {C_in, H = W, C_out}.
  struct Layer {
    const char* name;
    int64_t C, HW, K;
  };
  const Layer layers[] = {{"fmnist-cnn conv2", 32, 14, 64},
                          {"resnet18-cifar layer1", 64, 32, 64},
                          {"resnet18-cifar layer2", 128, 16, 128},
                          {"resnet18-cifar layer3", 256, 8, 256},
                          {"resnet18-cifar layer4", 512, 4, 512}};
  const std::pair<const char*, std::pair<DataType, dnnl::algorithm>> kinds[] = {
      {"f32-direct", {DataType::f32, dnnl::algorithm::convolution_direct}},
      {"f32-winograd", {DataType::f32, dnnl::algorithm::convolution_winograd}},
      {"bf16-direct", {DataType::bf16, dnnl::algorithm::convolution_direct}}};
  for (const Layer& l : layers) {
    std::vector<std::pair<std::string, Convolution>> convs;
    for (const auto& [name, kind] : kinds) {
      Convolution c;
      if (!Convolution::make(eng, batch, l.C, l.HW, l.K, kind.first, kind.second, c)) continue;
      for (memory* m : {&c.x, &c.w, &c.dy, &c.w_data, &c.x_weights, &c.dy_weights}) fill(*m, rng);
      convs.emplace_back(name, std::move(c));
    }
    const char* ops[] = {"forward", "backward data", "backward weights"};
    for (int op = 0; op < 3; ++op) {
      std::vector<std::pair<std::string, std::function<void()>>> candidates;
      nlohmann::json impl;
      for (auto& [name, c] : convs) {
        Convolution* p = &c;
        impl[name] = c.impl[op];
        candidates.emplace_back(name, [p, op, &s] {
          if (op == 0)
            p->fwd.execute(s, {{DNNL_ARG_SRC, p->x}, {DNNL_ARG_WEIGHTS, p->w}, {DNNL_ARG_DST, p->y}});
          else if (op == 1)
            p->bwd_data.execute(s, {{DNNL_ARG_DIFF_DST, p->dy},
                                    {DNNL_ARG_WEIGHTS, p->w_data},
                                    {DNNL_ARG_DIFF_SRC, p->dx}});
          else
            p->bwd_weights.execute(s, {{DNNL_ARG_SRC, p->x_weights},
                                       {DNNL_ARG_DIFF_DST, p->dy_weights},
                                       {DNNL_ARG_DIFF_WEIGHTS, p->dw}});
          s.wait();
        });
      }
      out["results"].push_back({{"layer", l.name},
                                {"shape", {batch, l.C, l.HW, l.HW, l.K, 3, 1, 1}},
                                {"op", ops[op]},
                                {"ms", time_candidates(candidates, rounds)},
                                {"impl", impl}});
    }
    for (auto& [name, c] : convs)
      if (name == std::string("bf16-direct")) {
        Casts casts(eng, c, batch, l.C, l.HW, l.K);
        Casts* p = &casts;
        out["results"].push_back(
            {{"layer", l.name},
             {"shape", {batch, l.C, l.HW, l.HW, l.K, 3, 1, 1}},
             {"op", "f32<->bf16 casts"},
             {"ms", time_candidates({{"bf16-casts", [p, &s] { p->run(s); }}}, rounds)},
             {"reorders", casts.steps.size()}});
      }
  }
  out["load_average"] = {{"before", load_before}, {"after", load_average()}};
  out["casts_note"] = "row 'f32<->bf16 casts': x, dy and the filters cast to bf16 in the layouts "
                      "the bf16 kernels chose and y and dx cast back to f32 nChw16c, one layer's "
                      "training step (a source shared by two primitives is cast once where they "
                      "chose the same layout)";
  std::printf("%s\n", out.dump(1).c_str());
  return 0;
}
