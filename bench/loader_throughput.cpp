// SPDX-License-Identifier: GPL-3.0-or-later
// trainbench-loader-throughput: what one loader thread delivers, in samples
// per second of its own CPU time, for the data the GPU benchmarks feed
// (bench/gpu_vs_pytorch.py: CIFAR-shaped synthetic data for resnet18-cifar
// and resnet9, Fashion-MNIST for fmnist-cnn) in the batch formats the
// recipes use: the all-tricks recipe's raw bytes (the device crops, flips and
// normalises), and the baseline's normalised floats. A GPU step of S ms at
// batch B needs B / S·1000 samples a second; divided by the figure here, that
// is the loader threads it takes (the benchmarks give the engine 8). One JSON
// object on stdout (bench/NOTES.md quotes it).
//
//   build/bin/trainbench-loader-throughput [--batches 8] [--data-dir DIR]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/cpu_timing.h"
#include "engine/core/error.h"
#include "engine/data/dataset.h"
#include "engine/data/loader.h"

using json = nlohmann::json;
using namespace tb;
using tb::bench::thread_seconds;

namespace {

// Samples a second of one loader thread over `batches` batches of `batch`:
// workers = 0 builds every batch on this thread, so its CPU time is the
// loader thread's cost whatever else the machine runs.
json measure(const Dataset& data, const std::string& format_name, BatchFormat format,
             const TransformOptions& transform, int64_t batch, int batches) {
  LoaderOptions o;
  o.batch_size = batch;
  o.workers = 0;
  o.format = format;
  o.transform = transform;
  DataLoader loader(data, o);
  loader.start_epoch(0);
  Batch b;
  TB_CHECK(loader.next(b), "loader_throughput: no first batch");  // first touch
  loader.recycle(std::move(b));
  int64_t samples = 0;
  const double t0 = thread_seconds();
  for (int k = 0; k < batches && loader.next(b); ++k) {
    samples += b.labels.dim(0);
    loader.recycle(std::move(b));
  }
  const double s = thread_seconds() - t0;
  return {{"data", data.name()},
          {"format", format_name},
          {"batch", batch},
          {"samples", samples},
          {"us_per_sample", samples ? 1e6 * s / double(samples) : 0.0},
          {"samples_per_s_per_thread", s > 0 ? double(samples) / s : 0.0}};
}

}  // namespace

int main(int argc, char** argv) {
  int batches = 8;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--batches" && i + 1 < argc) {
      batches = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--data-dir" && i + 1 < argc) {
      data_dir = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--batches N] [--data-dir DIR]\n", argv[0]);
      return 2;
    }
  }
  json out = {{"benchmark", "loader_throughput"}, {"batches", batches}, {"rows", json::array()}};
  // bench/gpu_vs_pytorch.py's resnet rows: batch 512, one sample per index.
  const int64_t batch = 512;
  auto synthetic = open_dataset(json{{"name", "synthetic"},
                                     {"shape", {3, 32, 32}},
                                     {"size", batch * (batches + 1)}},
                                "train");
  TransformOptions none;
  TransformOptions cifar_baseline;  // the baseline's host-side crop and flip
  cifar_baseline.random_crop = true, cifar_baseline.random_hflip = true;
  out["rows"].push_back(measure(*synthetic, "uint8_raw", BatchFormat::Uint8Raw, none, batch, batches));
  out["rows"].push_back(
      measure(*synthetic, "float32", BatchFormat::Float32, cifar_baseline, batch, batches));
  if (check_dataset_files({{"name", "fashion-mnist"}, {"path", data_dir}}).empty()) {
    auto fmnist = open_dataset(json{{"name", "fashion-mnist"}, {"path", data_dir}}, "train");
    out["rows"].push_back(measure(*fmnist, "uint8_raw", BatchFormat::Uint8Raw, none, 256, batches));
    out["rows"].push_back(measure(*fmnist, "float32", BatchFormat::Float32, none, 256, batches));
  } else {
    out["not_measured"] = "fashion-mnist: no data set in " + data_dir;
  }
  std::printf("%s\n", out.dump(1).c_str());
  return 0;
}
