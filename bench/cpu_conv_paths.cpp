// SPDX-License-Identifier: GPL-3.0-or-later
// trainbench-cpu-conv-paths: times each f32 path of the CPU convolution
// (docs/cpu-conv-paths.md: blas, onednn, onednn-blocked, onednn-winograd, and what auto picks)
// on the convolutions of fmnist-cnn (or given shapes), forward and backward
// (dx dw db, as the trainer asks; the first layer without dx), in interleaved
// rounds so that other work on a shared machine slows every path alike.
// Prints one JSON object: per shape and op, each path's median and minimum
// milliseconds over the rounds, the load average before and after, and the
// process's OS threads at the end.
//
//   trainbench-cpu-conv-paths --batch 64 --threads 2 --rounds 30
//   trainbench-cpu-conv-paths --shape 64,64,32,32,64,3,1,1   (N,Cin,H,W,Cout,k,stride,pad)
//   trainbench-cpu-conv-paths --shape 64,3,32,32,64,3,1,1,0  (a 9th field 0: no dx, as a
//                                                             model's first layer)
//   trainbench-cpu-conv-paths --layout nhwc   (activations and filters channels-last,
//                                              as the channels_last trick stores them)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/ops/conv/conv.h"
#include "engine/ops/conv/conv_cpu_paths.h"
#include "bench/cpu_timing.h"

using namespace tb;
using tb::bench::load_average;
using tb::bench::median;
using tb::bench::random_f32;

namespace {

struct Shape4 {
  int64_t N, C_in, H, W, C_out, k, stride, pad;
  bool dx;  // the first layer's input needs no gradient
};

// The process's OS threads (/proc/self/status): OpenMP's pool shows here, so
// --threads 1 staying at 1 shows that neither oneDNN nor our kernels started more.
int process_threads() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  int n = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "Threads: %d", &n) == 1) break;
  std::fclose(f);
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 64;
  int threads = 2, rounds = 30;
  Layout layout = Layout::NCHW;
  std::vector<Shape4> shapes;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--batch") batch = std::stoll(v);
    else if (a == "--threads") threads = std::stoi(v);
    else if (a == "--rounds") rounds = std::stoi(v);
    else if (a == "--layout") {
      if (v != "nchw" && v != "nhwc") {
        std::fprintf(stderr, "--layout: expected nchw or nhwc, got '%s'\n", v.c_str());
        return 2;
      }
      layout = v == "nhwc" ? Layout::NHWC : Layout::NCHW;
    }
    else if (a == "--shape") {
      Shape4 s{};
      long dx = 1;
      const int got = std::sscanf(v.c_str(), "%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld", &s.N, &s.C_in,
                                  &s.H, &s.W, &s.C_out, &s.k, &s.stride, &s.pad, &dx);
      if ((got != 8 && got != 9) || (dx != 0 && dx != 1)) {
        std::fprintf(stderr, "--shape: expected N,Cin,H,W,Cout,k,stride,pad[,dx 0 or 1], got '%s'\n",
                     v.c_str());
        return 2;
      }
      s.dx = dx == 1;
      shapes.push_back(s);
    } else {
      std::fprintf(stderr, "unknown option %s (--batch, --threads, --rounds, --shape, --layout)\n", a.c_str());
      return 2;
    }
  }
  if (shapes.empty())  // fmnist-cnn: conv1 (no dx), conv2
    shapes = {{batch, 1, 28, 28, 32, 3, 1, 1, false}, {batch, 32, 14, 14, 64, 3, 1, 1, true}};

  std::vector<std::string> paths{"blas", "auto"};
#ifdef TRAINBENCH_HAVE_ONEDNN
  paths.insert(paths.begin() + 1, {"onednn", "onednn-blocked", "onednn-winograd"});
#endif
  std::vector<std::unique_ptr<CpuBackend>> backends;
  for (const std::string& p : paths) {
    backends.push_back(std::make_unique<CpuBackend>(BackendOptions{.threads = threads}));
    conv::set_cpu_conv_path(*backends.back(), p);
  }
  const double load_before = load_average();
  nlohmann::json out = {{"threads", threads}, {"rounds", rounds}, {"layout", layout_name(layout)},
                        {"cpu", CpuBackend::host_name()}, {"results", nlohmann::json::array()}};
  std::mt19937 rng(1);
  using Clock = std::chrono::steady_clock;
  for (const Shape4& s : shapes) {
    const auto g = ConvGeometry::make(s.N, s.C_in, s.H, s.W, s.C_out, s.k, s.stride, s.pad);
    // Random values need no reordering: the same numbers read as `layout`.
    auto in_layout = [&](const Tensor& t) { return Tensor::view_of(t, 0, t.shape(), layout); };
    const Tensor x = in_layout(random_f32(g.input_shape(), rng));
    const Tensor w = in_layout(random_f32(g.weight_shape(), rng));
    const Tensor b = random_f32({g.C_out}, rng), dy = in_layout(random_f32(g.output_shape(), rng));
    Tensor y = Tensor::empty(g.output_shape(), DType::F32, Device::cpu(), layout);
    Tensor dx = s.dx ? Tensor::empty(g.input_shape(), DType::F32, Device::cpu(), layout) : Tensor{};
    Tensor dw = Tensor::empty(g.weight_shape(), DType::F32, Device::cpu(), layout);
    Tensor db = Tensor::empty({g.C_out}, DType::F32);
    for (const char* op : {"forward", "backward"}) {
      auto run = [&](Backend& be) {
        if (op[0] == 'f') conv::forward(be, g, x, w, b, y);
        else conv::backward(be, g, x, w, dy, dx, dw, db, false);
      };
      for (auto& be : backends) run(*be), run(*be);  // warm-up (auto: its choice)
      std::vector<std::vector<double>> ms(backends.size());
      for (int r = 0; r < rounds; ++r)
        for (size_t i = 0; i < backends.size(); ++i) {
          const auto t0 = Clock::now();
          run(*backends[i]);
          ms[i].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        }
      nlohmann::json row = {{"op", op},
                            {"shape", {s.N, s.C_in, s.H, s.W, s.C_out, s.k, s.stride, s.pad}},
                            {"dx", s.dx}};
      for (size_t i = 0; i < backends.size(); ++i)
        row["ms"][paths[i]] = {{"median", median(ms[i])},
                               {"min", *std::min_element(ms[i].begin(), ms[i].end())}};
      const auto rec = backends.back()->describe()["kernel_paths"]["convolution"];
      const std::string prefix = std::string(op) + " N" + std::to_string(s.N) + " " +
                                 std::to_string(s.C_in) + "x" + std::to_string(s.H) + "x" +
                                 std::to_string(s.W) + " -> " + std::to_string(s.C_out) + " ";
      for (const auto& [key, r] : rec.items())
        if (key.rfind(prefix, 0) == 0) row["auto_chose"] = r;
      out["results"].push_back(row);
    }
  }
  out["load_average"] = {{"before", load_before}, {"after", load_average()}};
  out["process_threads"] = process_threads();
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
