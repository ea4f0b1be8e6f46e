// SPDX-License-Identifier: GPL-3.0-or-later
// One rank of test_ddp's equality check, started by `mpirun -np 2`. Trains
// fmnist-cnn for a few steps as a ddp rank in each mode below and writes the
// parameters after every step to OUT/params_<mode>_rank<R>.bin (steps x
// parameters, f32). Rank 0 also trains the single-process reference on the
// concatenated batch (batch W*B, parallel none) into OUT/params_reference.bin.
// test_ddp.cpp compares the files; nothing is judged here.
#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/nn/model.h"
#include "engine/parallel/launch.h"
#include "engine/train/config.h"
#include "engine/train/events.h"
#include "engine/train/trainer.h"

using json = nlohmann::json;
using namespace tb;

namespace {

constexpr int kSteps = 4;
constexpr int kBatch = 8;  // per rank

std::vector<float> train(json cfg, const LaunchInfo* launch) {
  RunConfig c = RunConfig::from_json(validate_config(cfg, "ddp_rank_check"));
  EventBus bus;
  std::atomic<bool> stop{false};
  Trainer t(c, bus, stop);
  if (launch) t.set_launch_for_test(*launch);
  std::vector<float> steps;
  t.set_step_hook_for_test([&](int64_t, const Model& m) {
    const float* p = m.param_block().data_as<float>();
    steps.insert(steps.end(), p, p + m.num_params());
  });
  t.run(0);
  return steps;
}

void write(const std::string& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  if (!out) throw Error(path + ": write failed");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: mpirun -np 2 ddp_rank_check OUT_DIR\n");
    return 2;
  }
  const std::string out = argv[1];
  try {
    const LaunchInfo launch = launch_from_environment();
    const json base = {{"device", "cpu"},      {"model", "fmnist-cnn"}, {"dataset", "fashion-mnist"},
                       {"train_limit", 512},   {"test_limit", 32},      {"max_steps", kSteps},
                       {"batch_size", kBatch}, {"optimizer", "sgd"},    {"lr", 0.05},
                       {"momentum", 0.9},      {"weight_decay", 5e-4},  {"seed", 5},
                       {"schedule", "constant"}};
    const std::vector<std::pair<std::string, json>> modes = {
        // several buckets (fmnist-cnn has 421642 parameters), sent during backward
        {"bucketed", {{"parallel", "ddp"}, {"sync_batchnorm", true}, {"bucket_mb", 0.05}}},
        // one all-reduce after backward
        {"unbucketed", {{"parallel", "ddp"}, {"sync_batchnorm", true}, {"bucket_mb", 0}}},
        // each rank normalises with its own batch's statistics
        {"per_rank_bn", {{"parallel", "ddp"}, {"bucket_mb", 0.05}}},
    };
    for (const auto& [mode, extra] : modes) {
      json cfg = base;
      cfg.update(extra);
      write(out + "/params_" + mode + "_rank" + std::to_string(launch.rank) + ".bin",
            train(cfg, nullptr));
    }
    if (launch.rank == 0) {
      json cfg = base;
      cfg["batch_size"] = kBatch * launch.world_size;
      const LaunchInfo single;  // one process, inside the mpirun job
      write(out + "/params_reference.bin", train(cfg, &single));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_rank_check: %s\n", e.what());
    return 1;
  }
  return 0;
}
