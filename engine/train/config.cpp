// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/train/config.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "engine/core/error.h"
#include "engine/data/dataset.h"
#include "engine/nn/models.h"
#include "engine/ladder/rungs.h"

namespace tb {

using json = nlohmann::json;

namespace {

using Cap = bool BackendCapabilities::*;

// Fluent row builders: flag/integer/number/text/int_list make a row, then
// .trick(n) marks a trick, .needs(&BackendCapabilities::x) the capability a
// backend must report for it, .one_of(...) a closed set of values,
// .applies_when(key, values) the values of another key it needs to matter,
// and .label/.labels/.zero_means how front ends name it.
struct Row {
  ConfigKey k;
  Row&& trick(int n) && { k.trick = n; return std::move(*this); }
  Row&& needs(Cap c) && { k.needs = c; return std::move(*this); }
  Row&& one_of(json c) && { k.choices = std::move(c); return std::move(*this); }
  Row&& min_devices(int n) && { k.min_devices = n; return std::move(*this); }
  Row&& label(std::string l) && { k.label = std::move(l); return std::move(*this); }
  Row&& labels(json l) && { k.choice_labels = std::move(l); return std::move(*this); }
  Row&& zero_means(std::string z) && { k.zero_means = std::move(z); return std::move(*this); }
  Row&& applies_when(std::string key, json values) && {
    k.applies_key = std::move(key);
    k.applies_values = std::move(values);
    return std::move(*this);
  }
};

// A row with the members every key has; the rest keep ConfigKey's defaults.
Row row(std::string key, KeyType type, json def, json choices, double lo, double hi,
        std::string group, ConfigField field, std::string help) {
  Row r;
  r.k.key = std::move(key);
  r.k.type = type;
  r.k.default_value = std::move(def);
  r.k.choices = std::move(choices);
  r.k.min = lo, r.k.max = hi;
  r.k.group = std::move(group);
  r.k.field = field;
  r.k.help = std::move(help);
  return r;
}
Row flag(std::string key, bool RunConfig::* field, bool def, std::string group, std::string help) {
  return row(std::move(key), KeyType::Bool, def, json::array(), 0, 0, std::move(group), field,
             std::move(help));
}
Row integer(std::string key, int64_t RunConfig::* field, int64_t def, double lo, double hi,
            std::string group, std::string help) {
  return row(std::move(key), KeyType::Int, def, json::array(), lo, hi, std::move(group), field,
             std::move(help));
}
Row number(std::string key, double RunConfig::* field, double def, double lo, double hi,
           std::string group, std::string help) {
  return row(std::move(key), KeyType::Float, def, json::array(), lo, hi, std::move(group), field,
             std::move(help));
}
Row text(std::string key, std::string RunConfig::* field, std::string def,
         std::vector<std::string> choices, std::string group, std::string help) {
  return row(std::move(key), KeyType::String, def, json(choices), 0, 0, std::move(group), field,
             std::move(help));
}

// The registered models' display names, by name (engine/nn/models.cpp).
json model_labels() {
  json labels = json::object();
  for (const ModelDef& m : model_registry()) labels[m.name] = m.label;
  return labels;
}

const std::vector<ConfigGroup>& groups() {
  static const std::vector<ConfigGroup> kGroups = {
    {"run", "Run", false},
    {"data", "Data", false},
    {"training", "Training", false},
    {"schedule", "Learning-rate schedule", false},
    {"data pipeline", "Data pipeline", true},
    {"precision", "Precision", true},
    {"kernels", "Kernels and memory layout", true},
    {"optimizer", "Optimizer", true},
    {"parallel", "Data parallel", true},
    {"memory", "Memory", true},
    {"debugging", "Debugging", true},
    {"ladder", "Optimization ladder", false},
  };
  return kGroups;
}

// The settings table: every key the engine reads, once. `trick(n)` is the
// row of the spec's TRICKS.md; the GUI's teaching texts for tricks (tooltip,
// what, why, ...) live in resources/tricks/tricks.json, keyed by the same
// names; their labels are here, with every other key's.
std::vector<ConfigKey> make_table() {
  using C = BackendCapabilities;
  using R = RunConfig;
  const double big = 1e12;
  const std::vector<Row> rows = {
      // --- the run
      text("name", &R::name, "", {}, "run",
           "Run name shown in the history (default: model and batch size, e.g. " +
               default_run_name("fmnist-cnn", 64) + ")")
          .label("Name"),
      text("model", &R::model, "fmnist-cnn", model_names(), "run", "Model architecture")
          .label("Model")
          .labels(model_labels()),
      text("device", &R::device, "auto", {}, "run",
           "auto (a GPU when one works, else the CPU), cpu, cuda or cuda:N")
          .label("Device"),
      integer("cpu_threads", &R::cpu_threads, 0, 0, 4096, "run",
              "Threads of the CPU backend's kernels (0: as many as the CPUs this process may "
              "use: its affinity mask, its cgroup's CPU quota and OMP_NUM_THREADS, whichever "
              "is smallest)")
          .label("CPU threads")
          .zero_means("all it may use")
          .needs(&C::host_kernel_threads),
      text("cpu_layout", &R::cpu_layout, "auto", {"auto", "nchw", "blocked"}, "run",
           "Memory order of the CPU backend's activations between layers: blocked keeps "
           "them in oneDNN's nChw16c (16 channels side by side) from each convolution to "
           "the next, so no convolution reorders them in and out, and batch norm, ReLU, the "
           "residual add and pooling work on 16 channels at once; nchw is PyTorch's order. "
           "auto: blocked where oneDNN has AVX-512 kernels and the run is fp32 without "
           "channels_last")
          .label("CPU activation layout")
          .labels({{"auto", "auto (blocked with AVX-512)"},
                   {"nchw", "NCHW"},
                   {"blocked", "blocked (nChw16c)"}})
          .needs(&C::host_kernel_threads),
      integer("epochs", &R::epochs, 1, 0, 100000, "run", "Passes over the training set")
          .label("Epochs"),
      integer("max_steps", &R::max_steps, 0, 0, big, "run",
              "Stop after this many optimizer steps (0: run all epochs)")
          .label("Max steps")
          .zero_means("use epochs"),
      row("seed", KeyType::Int, 0, json::array(), 0, 9.0e15, "run", &R::seed,
          "Seed for weights, shuffling and augmentation")
          .trick(19)
          .label("Seed"),
      integer("log_every", &R::log_every, 20, 1, 1000000, "run",
              "Steps between loss/accuracy read-backs when sync_every_step is off")
          .trick(16)
          .label("Log every"),
      integer("measure_every", &R::measure_every, 20, 1, 1000000, "run",
              "Steps between the sampled measurements (and step 1): the driver's device memory, "
              "GPU telemetry (NVML), host RSS and CPU use, and with cupti_sampling the kernel "
              "census and tensor pipe counters; the step time, its breakdown and the allocator's "
              "counters are every step")
          .label("Measure every"),
      flag("cupti_sampling", &R::cupti_sampling, false, "run",
           "Tensor Core figures through CUPTI on sampled steps (one in measure_every): the kernel "
           "census and the tensor pipe counters. A sampled step waits for the device and pays "
           "CUPTI's setup, which on a small step costs more than the step, so it is off unless "
           "asked (profiler: a census every step)")
          .label("Tensor Core sampling (CUPTI)")
          .needs(&C::kernel_profiler),
      number("target_accuracy", &R::target_accuracy, 0.0, 0, 1, "run",
             "Stop once the test accuracy reaches this; records time and steps to it (0: off)")
          .label("Target accuracy")
          .zero_means("off"),
      integer("eval_every_steps", &R::eval_every_steps, 0, 0, big, "run",
              "Evaluate on the test set every N steps as well as at epoch ends (0: epoch ends only)")
          .label("Evaluate every")
          .zero_means("epoch ends only"),
      // --- data
      text("dataset", &R::dataset, "fashion-mnist", {"fashion-mnist", "mnist", "cifar10", "synthetic"},
           "data", "Data set")
          .label("Data set")
          .labels({{"fashion-mnist", "Fashion-MNIST"},
                   {"mnist", "MNIST"},
                   {"cifar10", "CIFAR-10 (binary folder)"},
                   {"synthetic", "Synthetic images"}}),
      text("data_dir", &R::data_dir, "", {}, "data",
           "Folder of the data set files (default for fashion-mnist: " +
               default_data_dir("fashion-mnist") + ")")
          .label("Folder")
          .applies_when("dataset", {"fashion-mnist", "mnist", "cifar10"}),
      integer("train_limit", &R::train_limit, 0, 0, big, "data",
              "Use only the first N training samples (0: all)")
          .label("Training samples")
          .zero_means("all"),
      integer("test_limit", &R::test_limit, 0, 0, big, "data",
              "Use only the first N test samples (0: all)")
          .label("Test samples")
          .zero_means("all"),
      row("synthetic_shape", KeyType::IntList, json::array({3, 32, 32}), json::array(), 1, 4096,
          "data", &R::synthetic_shape, "Synthetic images: [channels, height, width]")
          .label("Image shape (C×H×W)")
          .applies_when("dataset", {"synthetic"}),
      integer("synthetic_size", &R::synthetic_size, 10000, 1, big, "data",
              "Synthetic training samples")
          .label("Synthetic samples")
          .applies_when("dataset", {"synthetic"}),
      integer("random_crop_padding", &R::random_crop_padding, 0, 0, 64, "data",
              "Random crop after zero padding by this many pixels (0: off)")
          .label("Random-crop padding")
          .zero_means("off"),
      flag("horizontal_flip", &R::horizontal_flip, false, "data", "Random horizontal flips")
          .label("Random horizontal flip"),
      flag("pad_to_32", &R::pad_to_32, false, "data", "Pad 28x28 images to 32x32 (for CIFAR models)")
          .label("Pad to 32×32"),
      // --- optimizer and schedule
      integer("batch_size", &R::batch_size, 64, 1, 1 << 20, "training", "Samples per micro-batch")
          .trick(2)
          .label("Batch size"),
      text("optimizer", &R::optimizer, "sgd", {"sgd", "adamw", "rmsprop", "lars", "lamb"},
           "training", "Optimizer (lars/lamb for large batches)")
          .trick(23)
          .label("Optimizer")
          .labels({{"sgd", "SGD with momentum"},
                   {"adamw", "AdamW"},
                   {"rmsprop", "RMSProp"},
                   {"lars", "LARS (large batch)"},
                   {"lamb", "LAMB (large batch)"}}),
      number("lr", &R::lr, 0.05, 0, 100, "training", "Base learning rate").label("Learning rate"),
      number("momentum", &R::momentum, 0.9, 0, 1, "training", "Momentum (SGD, RMSProp, LARS)")
          .label("Momentum")
          .applies_when("optimizer", {"sgd", "rmsprop", "lars"}),
      flag("nesterov", &R::nesterov, false, "training", "Nesterov momentum (SGD)")
          .label("Nesterov momentum")
          .applies_when("optimizer", {"sgd"}),
      number("weight_decay", &R::weight_decay, 5e-4, 0, 1, "training",
             "Weight decay (L2 for SGD/RMSProp/LARS, decoupled for AdamW/LAMB)")
          .label("Weight decay"),
      number("beta1", &R::beta1, 0.9, 0, 1, "training", "First-moment decay (AdamW, LAMB)")
          .label("β1")
          .applies_when("optimizer", {"adamw", "lamb"}),
      number("beta2", &R::beta2, 0.999, 0, 1, "training", "Second-moment decay (AdamW, LAMB)")
          .label("β2")
          .applies_when("optimizer", {"adamw", "lamb"}),
      number("eps", &R::eps, 1e-8, 0, 1, "training", "Denominator epsilon (AdamW, RMSProp, LAMB)")
          .label("Epsilon")
          .applies_when("optimizer", {"adamw", "rmsprop", "lamb"}),
      number("alpha", &R::alpha, 0.99, 0, 1, "training", "Squared-gradient smoothing (RMSProp)")
          .label("α (smoothing)")
          .applies_when("optimizer", {"rmsprop"}),
      // Cosine decay over the run is the default recipe: with it fmnist-cnn reaches
      // 0.916 test accuracy in 3 epochs, against 0.893 at a constant rate
      // (bench/results/cpu-fmnist-cnn-accuracy.json).
      // One-cycle's own shape (pct_start, div_factor, final_div_factor) is
      // fixed in ScheduleConfig; min_lr is the cosine schedule's alone.
      text("schedule", &R::schedule, "cosine", {"constant", "step", "cosine", "onecycle"},
           "schedule", "Learning-rate schedule (cosine: decay to min_lr over the run)")
          .label("Schedule")
          .labels({{"constant", "Constant"},
                   {"step", "Step decay"},
                   {"cosine", "Cosine"},
                   {"onecycle", "One-cycle"}}),
      integer("step_size", &R::step_size, 1000, 1, big, "schedule",
              "Steps between decays (step schedule)")
          .label("Decay every (steps)")
          .applies_when("schedule", {"step"}),
      number("gamma", &R::gamma, 0.1, 0, 1, "schedule", "Decay factor (step schedule)")
          .label("Decay factor γ")
          .applies_when("schedule", {"step"}),
      number("min_lr", &R::min_lr, 0.0, 0, 100, "schedule", "Final learning rate (cosine schedule)")
          .label("Final learning rate")
          .applies_when("schedule", {"cosine"}),
      integer("base_batch_size", &R::base_batch_size, 64, 1, 1 << 20, "training",
              "Batch size the base lr is for (lr_scaling)")
          .trick(2)
          .label("Base batch size")
          .applies_when("lr_scaling", {"linear", "sqrt"}),
      number("label_smoothing", &R::label_smoothing, 0.0, 0, 1, "training",
             "Label smoothing of the loss")
          .label("Label smoothing")
          .zero_means("off"),
      // --- tricks: data pipeline
      integer("workers", &R::workers, 0, 0, 256, "data pipeline",
              "Loader threads decoding and augmenting in parallel (0: on the training thread)")
          .trick(3)
          .label("Data-loader workers"),
      flag("pin_memory", &R::pin_memory, false, "data pipeline",
           "Batches in page-locked host memory")
          .trick(4).needs(&C::pinned_host_memory)
          .label("Pinned host memory"),
      flag("non_blocking", &R::non_blocking, false, "data pipeline",
           "Host-to-device copies on their own stream, overlapping compute")
          .trick(5).needs(&C::async_upload)
          .label("Non-blocking copies"),
      flag("h2d_uint8", &R::h2d_uint8, false, "data pipeline",
           "Copy uint8 images and normalise on the device")
          .trick(6).needs(&C::device_normalize_u8)
          .label("Send uint8 images to the device"),
      flag("device_side_init", &R::device_side_init, false, "data pipeline",
           "Create tensors on the device")
          .trick(15).needs(&C::device_side_init)
          .label("Create tensors on the device"),
      flag("gpu_augment", &R::gpu_augment, false, "data pipeline", "Augment on the device")
          .trick(15).needs(&C::device_augment)
          .label("Augment on the GPU"),
      // --- tricks: precision
      text("amp", &R::amp, "off", {"off", "fp16", "bf16"}, "precision",
           "Mixed precision with fp32 master weights (fp16 with dynamic loss scaling)")
          .trick(1).needs(&C::low_precision)
          .label("Mixed precision"),
      text("amp_activations", &R::amp_activations, "low", {"low", "f32"}, "precision",
           "Under amp, the activations between layers: low keeps them in fp16/bf16 as "
           "PyTorch's autocast does; f32 keeps them in fp32 and casts around every "
           "convolution and linear layer (the earlier form, for comparison)")
          .trick(1).needs(&C::low_precision)
          .label("Activations under mixed precision")
          .labels({{"low", "fp16/bf16 (as autocast)"}, {"f32", "fp32, cast at each conv/linear"}})
          .applies_when("amp", {"fp16", "bf16"}),
      integer("pad_channels_to", &R::pad_channels_to, 0, 0, 128, "precision",
              "Pad channel counts to a multiple of this (8 suits Tensor Cores; 0: off)")
          .trick(22).needs(&C::tensor_core_alignment)
          .label("Pad channels for Tensor Cores").one_of({0, 2, 4, 8, 16, 32, 64, 128})
          .labels({{"0", "off"}}),
      // --- tricks: kernels and memory layout
      flag("cudnn_benchmark", &R::cudnn_benchmark, false, "kernels",
           "Time every cuDNN plan once per shape and keep the fastest")
          .trick(7).needs(&C::autotuned_convolutions)
          .label("cuDNN autotune"),
      flag("channels_last", &R::channels_last, false, "kernels",
           "NHWC activations and weights end to end")
          .trick(8).needs(&C::channels_last)
          .label("Channels-last layout"),
      flag("fuse_pointwise", &R::fuse_pointwise, false, "kernels",
           "One kernel for BN-apply+ReLU(+add) and bias+activation chains")
          .trick(11).needs(&C::fused_pointwise)
          .label("Fuse pointwise operations"),
      flag("conv_bias_before_bn", &R::conv_bias_before_bn, true, "kernels",
           "Keep the (redundant) convolution bias in front of batch norm")
          .trick(10)
          .label("Keep conv bias before batch norm"),
      flag("cuda_graphs", &R::cuda_graphs, false, "kernels",
           "Capture the training step once and replay it")
          .trick(24).needs(&C::graph_capture)
          .label("CUDA graphs (whole step)"),
      // --- tricks: optimizer
      flag("optimizer_foreach", &R::optimizer_foreach, false, "optimizer",
           "Update all parameters in one fused pass instead of one per tensor")
          .trick(12)
          .label("Multi-tensor optimizer"),
      flag("grad_set_to_none", &R::grad_set_to_none, true, "optimizer",
           "Skip zeroing gradients: the first backward writes them")
          .trick(9)
          .label("Gradients to none"),
      integer("accumulation_steps", &R::accumulation_steps, 1, 1, 4096, "optimizer",
              "Micro-batches per optimizer step")
          .trick(13)
          .label("Gradient accumulation"),
      number("clip_grad_norm", &R::clip_grad_norm, 0.0, 0, 1e9, "optimizer",
             "Clip the global gradient L2 norm to this (0: off)")
          .trick(14)
          .label("Clip gradient norm")
          .zero_means("off"),
      text("lr_scaling", &R::lr_scaling, "none", {"none", "linear", "sqrt"}, "optimizer",
           "Scale lr with batch_size relative to base_batch_size")
          .trick(2)
          .label("Scale LR with batch"),
      integer("warmup_steps", &R::warmup_steps, 0, 0, big, "optimizer",
              "Linear learning-rate warm-up steps (with any schedule)")
          .trick(2)
          .label("LR warm-up steps")
          .zero_means("off"),
      // --- tricks: data parallel (engine/parallel, docs/parallel.md)
      text("parallel", &R::parallel, "none", {"none", "dp", "ddp"}, "parallel",
           "Data parallelism: ddp, one process per device (mpirun or RANK/WORLD_SIZE); "
           "dp, one process driving several GPUs")
          .trick(21).needs(&C::process_parallel)
          .label("Data parallel"),
      integer("dp_devices", &R::dp_devices, 0, 0, 1024, "parallel",
              "dp: GPUs one process drives, from the run's device on (cuda:k .. cuda:k+N-1); "
              "each step splits batch_size across them")
          .trick(21)
          .label("GPUs (dp)")
          .zero_means("every visible GPU from the run's device on")
          .applies_when("parallel", {"dp"}),
      integer("processes", &R::processes, 1, 1, 4096, "parallel",
              "ddp processes: the GUI starts this many with mpirun; a run records how many "
              "its launcher started")
          .trick(21)
          .label("Processes")
          .applies_when("parallel", {"ddp"}),
      number("bucket_mb", &R::bucket_mb, 25.0, 0, 4096, "parallel",
             "ddp all-reduce bucket size in MiB; a bucket is sent as soon as backward has "
             "filled it (0: one all-reduce after backward)")
          .trick(21)
          .label("All-reduce bucket (MiB)")
          .zero_means("one all-reduce after backward")
          .applies_when("parallel", {"ddp"}),
      flag("sync_batchnorm", &R::sync_batchnorm, false, "parallel",
           "ddp: batch-norm statistics over every rank's batch (default: each rank its own)")
          .trick(21)
          .label("Synchronised batch norm")
          .applies_when("parallel", {"ddp"}),
      // --- tricks: memory
      flag("eval_inference_mode", &R::eval_inference_mode, true, "memory",
           "Evaluate without keeping activations or gradients")
          .trick(18)
          .label("Inference mode for evaluation"),
      flag("empty_cache_between_phases", &R::empty_cache_between_phases, false, "memory",
           "Return cached device memory between training and evaluation")
          .trick(20).needs(&C::caching_allocator)
          .label("Release cached memory between phases"),
      // --- tricks: debugging
      flag("sync_every_step", &R::sync_every_step, true, "debugging",
           "Read loss and accuracy back every step (off: every log_every steps)")
          .trick(16)
          .label("Synchronise every step"),
      flag("anomaly_check", &R::anomaly_check, false, "debugging",
           "Check every layer's output for NaN/Inf (costly)")
          .trick(17)
          .label("NaN/Inf check after every layer"),
      flag("profiler", &R::profiler, false, "debugging", "Full per-kernel tracing (costly)")
          .trick(17).needs(&C::kernel_profiler)
          .label("Per-kernel profiler"),
      flag("deterministic", &R::deterministic, false, "debugging",
           "Deterministic algorithms only: bit-identical reruns")
          .trick(19)
          .label("Deterministic algorithms"),
      // --- the optimization ladder (read by `trainbench-engine ladder` only)
      text("ladder_rungs", &R::ladder_rungs, "", {}, "ladder",
           "Comma-separated rungs in order (empty: the default order; `ladder --list-rungs`)")
          .label("Rungs"),
      text("ladder_mode", &R::ladder_mode, "cumulative", {"cumulative", "alone", "leave_one_out"},
           "ladder",
           "cumulative: each rung on top of the last; alone: each against the baseline; "
           "leave_one_out: all rungs, then all but one")
          .label("Mode")
          .labels({{"cumulative", "Cumulative (each rung on top of the last)"},
                   {"alone", "Each rung alone"},
                   {"leave_one_out", "Leave one out"}}),
      integer("ladder_repeats", &R::ladder_repeats, 3, 1, 100, "ladder",
              "Measured runs per rung, interleaved (A B C A B C) so drift hits every rung alike")
          .label("Repeats"),
      integer("ladder_warmup_steps", &R::ladder_warmup_steps, 10, 0, 100000, "ladder",
              "Steps per run before measuring (allocator, autotuning, caches)")
          .label("Warm-up steps"),
      integer("ladder_measured_steps", &R::ladder_measured_steps, 50, 1, 1000000, "ladder",
              "Steps per run whose median step time is the run's figure")
          .label("Measured steps"),
      flag("ladder_accuracy", &R::ladder_accuracy, false, "ladder",
           "Rungs that change the numbers (amp, batch size) also train to the end once, "
           "next to the baseline, for their accuracy and time to target_accuracy")
          .label("Accuracy runs"),
  };
  std::vector<ConfigKey> t;
  for (const Row& r : rows) t.push_back(r.k);
  // The table checks itself: a wrong row fails every test at start-up.
  for (const ConfigKey& k : t) {
    const bool field_ok = std::visit(
        [&](auto p) {
          using T = std::remove_reference_t<decltype(RunConfig{}.*p)>;
          switch (k.type) {
            case KeyType::Bool: return std::is_same_v<T, bool>;
            case KeyType::Int: return std::is_same_v<T, int64_t> || std::is_same_v<T, uint64_t>;
            case KeyType::Float: return std::is_same_v<T, double>;
            case KeyType::String: return std::is_same_v<T, std::string>;
            case KeyType::IntList: return std::is_same_v<T, std::vector<int64_t>>;
          }
          return false;
        },
        k.field);
    TB_CHECK(field_ok, "settings table: key '", k.key, "' fills a RunConfig field of another type");
    const auto group = std::find_if(groups().begin(), groups().end(),
                                    [&](const ConfigGroup& g) { return g.id == k.group; });
    TB_CHECK(group != groups().end(), "settings table: key '", k.key, "' names unknown group '",
             k.group, "'");
    TB_CHECK(!group->tricks || !k.label.empty(), "settings table: trick '", k.key, "' has no label");
    for (const auto& item : k.choice_labels.items()) {
      const std::string value = item.key();  // not a structured binding: clang 14 cannot capture one
      TB_CHECK(std::any_of(k.choices.begin(), k.choices.end(),
                           [&](const json& c) { return (c.is_string() ? c.get<std::string>() : c.dump()) == value; }),
               "settings table: key '", k.key, "' names choice '", value, "', which it does not have");
    }
    if (k.applies_key.empty()) continue;
    const auto on = std::find_if(t.begin(), t.end(), [&](const ConfigKey& o) { return o.key == k.applies_key; });
    TB_CHECK(on != t.end(), "settings table: key '", k.key, "' applies when unknown key '", k.applies_key, "'");
    for (const json& v : k.applies_values)
      TB_CHECK(on->choices.empty() || std::find(on->choices.begin(), on->choices.end(), v) != on->choices.end(),
               "settings table: key '", k.key, "' applies when ", k.applies_key, " is ", v.dump(),
               ", which is not one of its choices");
  }
  return t;
}

const char* type_name(KeyType t) {
  switch (t) {
    case KeyType::Bool: return "bool";
    case KeyType::Int: return "int";
    case KeyType::Float: return "float";
    case KeyType::String: return "string";
    case KeyType::IntList: return "int_list";
  }
  return "?";
}

std::string closest_key(const std::string& key) {
  // Suggest the schema key sharing the longest prefix, for typos like "batchsize".
  std::string best;
  size_t best_len = 0;
  for (const auto& k : config_schema()) {
    size_t n = 0;
    while (n < k.key.size() && n < key.size() && k.key[n] == key[n]) ++n;
    if (n > best_len) best_len = n, best = k.key;
  }
  return best_len >= 3 ? best : "";
}

// A value as error messages show it; text that is not UTF-8 must not turn a
// clear error into a JSON exception (found by fuzz/config_fuzzer.cpp).
std::string shown(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

json check_type_and_range(const ConfigKey& k, const json& v, const std::string& source) {
  const std::string where = source + ": key '" + k.key + "'";
  auto range_ok = [&](double x) { return !(k.min < k.max) || (x >= k.min && x <= k.max); };
  auto range_str = [&]() {
    // An integer key's bounds as integers: "in [1, 1048576]", not "[1.0, 1048576.0]".
    const auto bound = [&](double x) {
      return k.type == KeyType::Float ? json(x).dump() : json(static_cast<int64_t>(x)).dump();
    };
    return " in [" + bound(k.min) + ", " + bound(k.max) + "]";
  };
  switch (k.type) {
    case KeyType::Bool:
      TB_CHECK(v.is_boolean(), where, ": expected true or false, got ", shown(v));
      return v;
    case KeyType::Int: {
      bool integral = v.is_number_integer() ||
                      (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
      TB_CHECK(integral, where, ": expected an integer, got ", shown(v));
      const double x = v.get<double>();
      TB_CHECK(range_ok(x), where, ": ", shown(v), " is out of range; expected an integer",
               range_str());
      return json(static_cast<int64_t>(x));
    }
    case KeyType::Float: {
      TB_CHECK(v.is_number(), where, ": expected a number, got ", shown(v));
      const double x = v.get<double>();
      TB_CHECK(std::isfinite(x) && range_ok(x), where, ": ", shown(v),
               " is out of range; expected a number", range_str());
      return json(x);
    }
    case KeyType::String:
      TB_CHECK(v.is_string(), where, ": expected a string, got ", shown(v));
      return v;
    case KeyType::IntList: {
      TB_CHECK(v.is_array() && !v.empty(), where, ": expected a list of integers, got ", shown(v));
      for (const auto& e : v)
        TB_CHECK(e.is_number_integer() && range_ok(e.get<double>()), where, ": element ", shown(e),
                 " is not an integer", range_str());
      return v;
    }
  }
  return v;
}

// A value of the key's type and range, then one of its choices when it has any.
json check_value(const ConfigKey& k, const json& v, const std::string& source) {
  json value = check_type_and_range(k, v, source);
  if (!k.choices.empty() && std::find(k.choices.begin(), k.choices.end(), value) == k.choices.end()) {
    std::string list;
    for (const auto& c : k.choices)
      list += (list.empty() ? "" : ", ") + (c.is_string() ? c.get<std::string>() : c.dump());
    TB_FAIL(source, ": key '", k.key, "': ",
            value.is_string() ? "'" + value.get<std::string>() + "'" : shown(value),
            " is not one of: ", list);
  }
  return value;
}

}  // namespace

std::string ConfigKey::backends() const {
  // The CUDA backend honours every capability the CPU backend has, but its
  // build may lack a library (NCCL: parallel still has dp there), so its own
  // set does not decide "all"; threads of host kernels are the CPU's alone.
  if (needs == &BackendCapabilities::host_kernel_threads) return "cpu";
  return needs == nullptr || capabilities_of(DeviceKind::CPU).*needs ? "all" : "cuda";
}

const std::vector<ConfigGroup>& config_groups() { return groups(); }

const std::vector<ConfigKey>& config_schema() {
  static const std::vector<ConfigKey> schema = make_table();
  return schema;
}

const ConfigKey* find_config_key(const std::string& key) {
  for (const ConfigKey& k : config_schema())
    if (k.key == key) return &k;
  return nullptr;
}

json config_schema_json() {
  json groups = json::array();
  for (const ConfigGroup& g : config_groups())
    groups.push_back({{"id", g.id}, {"title", g.title}, {"tricks", g.tricks}});
  json keys = json::array();
  for (const auto& k : config_schema()) {
    json e = {{"key", k.key},           {"type", type_name(k.type)},
              {"default", k.default_value}, {"group", k.group},
              {"trick", k.trick},       {"backends", k.backends()},
              {"min_devices", k.min_devices}, {"help", k.help}};
    if (!k.choices.empty()) e["choices"] = k.choices;
    if (k.min < k.max) e["min"] = k.min, e["max"] = k.max;
    if (!k.label.empty()) e["label"] = k.label;
    if (!k.choice_labels.empty()) e["choice_labels"] = k.choice_labels;
    if (!k.zero_means.empty()) e["zero_means"] = k.zero_means;
    if (!k.applies_key.empty()) e["applies_when"] = {{"key", k.applies_key}, {"values", k.applies_values}};
    keys.push_back(e);
  }
  json models = json::array();
  for (const ModelDef& m : model_registry())
    models.push_back({{"name", m.name},
                      {"label", m.label},
                      {"input_shape", m.input_shape},
                      {"min_image_size", m.min_image_size}});
  return {{"version", 2}, {"groups", groups}, {"keys", keys}, {"models", models}};
}

json default_config() {
  json c = json::object();
  for (const auto& k : config_schema()) c[k.key] = k.default_value;
  return c;
}

std::string default_run_name(const std::string& model, int64_t batch_size) {
  return model + " b" + std::to_string(batch_size);
}

json check_config_entry(const std::string& key, const json& value, const std::string& source) {
  const ConfigKey* k = find_config_key(key);
  if (!k) {
    const std::string hint = closest_key(key);
    TB_FAIL(source, ": unknown key '", key, "'",
            hint.empty() ? std::string() : " (did you mean '" + hint + "'?)",
            "; `trainbench-engine config --schema` lists every key");
  }
  return check_value(*k, value, source);
}

json check_config_keys(const json& overrides, const std::string& source) {
  TB_CHECK(overrides.is_object(), source, ": the configuration must be a JSON object, got ",
           overrides.type_name());
  json checked = json::object();
  for (const auto& item : overrides.items())
    checked[item.key()] = check_config_entry(item.key(), item.value(), source);
  return checked;
}

json validate_config(const json& overrides, const std::string& source) {
  json c = default_config();
  const json checked = check_config_keys(overrides, source);  // named: items() of a temporary would dangle
  for (const auto& item : checked.items()) c[item.key()] = item.value();
  // Cross-key rules.
  // The folder a run reads is stored with it: runs that name it and runs that
  // leave it to the default compare as the same.
  if (c["data_dir"].get<std::string>().empty())
    c["data_dir"] = default_data_dir(c["dataset"].get<std::string>());
  TB_CHECK(c["epochs"].get<int64_t>() > 0 || c["max_steps"].get<int64_t>() > 0, source,
           ": epochs and max_steps are both 0; nothing would run");
  const auto& shape = c["synthetic_shape"];
  TB_CHECK(shape.size() == 3, source, ": key 'synthetic_shape': expected [channels, height, width], got ",
           shown(shape));
  const std::string device = c["device"].get<std::string>();
  TB_CHECK(device == "auto" || device == "cpu" || device == "cuda" || device.rfind("cuda:", 0) == 0,
           source, ": key 'device': '", device, "' is not auto, cpu, cuda or cuda:N");
  try {
    parse_rung_list(c["ladder_rungs"].get<std::string>());  // the rungs of the catalogue
  } catch (const Error& e) {
    TB_FAIL(source, ": key 'ladder_rungs': ", e.what());
  }
  return c;
}

void apply_assignment(json& config, const std::string& assignment) {
  const auto eq = assignment.find('=');
  TB_CHECK(eq != std::string::npos && eq > 0, "--set '", assignment,
           "': expected key=value, e.g. --set batch_size=256");
  const std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) value = text;  // bare words are strings: --set amp=bf16
  config[key] = value;
}

RunConfig::RunConfig() : RunConfig(default_config()) {}

RunConfig::RunConfig(const nlohmann::json& validated) : values(validated) {
  for (const ConfigKey& k : config_schema())
    std::visit(
        [&](auto field) {
          using T = std::remove_reference_t<decltype(this->*field)>;
          this->*field = validated.at(k.key).get<T>();
        },
        k.field);
}

RunConfig RunConfig::from_json(const nlohmann::json& validated) { return RunConfig(validated); }

}  // namespace tb
