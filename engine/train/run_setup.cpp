// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/train/run_setup.h"

#include <algorithm>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/amp/loss_scaler.h"
#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/data/dataset.h"
#include "engine/data/loader.h"
#include "engine/nn/models.h"
#include "engine/nn/pad_channels.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/schedule.h"
#include "engine/parallel/communicator.h"
#include "engine/parallel/data_parallel.h"
#include "engine/parallel/device_replicas.h"

namespace tb {

using json = nlohmann::json;

namespace {

json dataset_spec(const RunConfig& c, int64_t limit) {
  json s = {{"name", c.dataset}};
  if (c.dataset == "synthetic") {
    s["shape"] = c.synthetic_shape;
    s["size"] = c.synthetic_size;
    s["seed"] = c.seed;
  } else if (!c.data_dir.empty()) {
    s["path"] = c.data_dir;
  }
  if (limit > 0) s["limit"] = limit;
  return s;
}

// The training-set recipe: padding to 32x32 on request, augmentation, and the
// data set's standard normalisation.
TransformOptions transform_for(const RunConfig& c, const Dataset& ds, bool train) {
  TransformOptions t;
  const Shape s = ds.sample_shape();
  if (c.pad_to_32 && (s[1] < 32 || s[2] < 32)) t.pad_to_h = t.pad_to_w = 32;
  if (train) {
    t.random_crop = c.random_crop_padding > 0;
    t.crop_padding = c.random_crop_padding;
    t.random_hflip = c.horizontal_flip;
  }
  t.norm = standard_norm_stats(c.dataset, s[0]);
  return t;
}

BackendOptions backend_options(const RunConfig& c) {
  BackendOptions bo;
  bo.threads = static_cast<int>(c.cpu_threads);
  bo.deterministic = c.deterministic;
  bo.cudnn_benchmark = c.cudnn_benchmark;
  return bo;
}

RunData open_data(const RunConfig& c, const RunPlan& plan, Backend& be, const Shard& shard) {
  RunData d;
  d.train_set = open_dataset(dataset_spec(c, c.train_limit), "train");
  d.test_set = open_dataset(dataset_spec(c, c.test_limit), "test");
  LoaderOptions lo;
  lo.batch_size = c.batch_size;
  lo.seed = c.seed;
  lo.workers = static_cast<int>(c.workers);
  lo.shuffle = true;
  lo.drop_last = true;  // equal batch shapes every step
  lo.shard = shard;     // ddp: this rank's batches of every epoch (distributed_sampler.h)
  lo.transform = transform_for(c, *d.train_set, true);
  if (plan.pinned_staging) {
    Staging* staging = be.staging();
    TB_CHECK(staging, "pin_memory: the ", be.name(), " backend has no pinned host memory");
    lo.allocator = [staging](const Shape& s, DType t) {
      return staging->pinned_host_empty(s, t);
    };
  }
  if (plan.uint8_upload) lo.format = plan.gpu_augment ? BatchFormat::Uint8Raw : BatchFormat::Uint8;
  d.train = std::make_unique<DataLoader>(*d.train_set, lo);
  lo.shuffle = false;
  lo.drop_last = false;
  lo.transform = transform_for(c, *d.test_set, false);
  d.test = std::make_unique<DataLoader>(*d.test_set, lo);
  return d;
}

std::unique_ptr<Model> build_model(const RunConfig& c, const RunPlan& plan, Backend& be,
                                   const RunData& data, const Log& log) {
  ModelOptions mo;
  mo.conv_bias_before_bn = c.conv_bias_before_bn;
  mo.pad_channels_to = plan.pad_channels_to;
  mo.fuse_pointwise = plan.fuse_pointwise;
  std::unique_ptr<Model> model =
      make_model(c.model, data.train->image_shape(), data.train_set->num_classes(), mo);
  // device_side_init: constant parameters and buffers are filled on the device
  // (the random weights keep their host draws, so the same seed gives the same model).
  if (plan.device_side_init) model->set_device_side_init(true);
  model->build(be, c.seed, DType::F32, plan.layout);
  if (plan.device_side_init)
    log("info", "device_side_init: " + std::to_string(model->init_device_bytes()) +
                    " bytes of parameters and buffers filled on the device, " +
                    std::to_string(model->init_upload_bytes()) +
                    " bytes of random weights drawn on the host and uploaded");
  for (const auto& layer : model->layers())
    if (const auto* pad = dynamic_cast<const PadChannels*>(layer.get()))
      log("info", "pad_channels_to=" + std::to_string(c.pad_channels_to) + ": input channels " +
                      std::to_string(pad->in_channels()) + " -> " +
                      std::to_string(pad->out_channels()));
  return model;
}

// Logs every trick that was asked for but is not applied, and the amp test hook.
void log_plan(const RunPlan& plan, const Log& log) {
  for (const auto& [key, st] : plan.tricks.items())
    if (st["changed"].get<bool>() && !st["applied"].get<bool>())
      log("warning", key + " = " + st["requested"].dump() + " not applied: " +
                         st.value("reason", ""));
  if (!plan.activation_layout_reason.empty())
    log("info", std::string("activations ") + layout_name(plan.activation_layout) + " (" +
                    plan.activation_layout_reason + ")");
  if (plan.precision.enabled() && !plan.applied("amp"))
    log("info", "amp = " + std::string(plan.precision.name()) +
                    " on the cpu through the reference low-precision ops (test hook)");
}

RunShape run_shape(const RunConfig& c, const RunData& data, int world_size) {
  RunShape r;
  const int64_t K = c.accumulation_steps;
  r.steps_per_epoch = data.train->num_batches() / K;
  TB_CHECK(r.steps_per_epoch > 0, data.train_set->name(), " has ", data.train_set->size(),
           " samples: not enough for one step of batch_size ", c.batch_size,
           " x accumulation_steps ", K);
  r.total_steps = c.max_steps > 0 ? c.max_steps : c.epochs * r.steps_per_epoch;
  r.epochs = (r.total_steps + r.steps_per_epoch - 1) / r.steps_per_epoch;
  r.samples_per_step = c.batch_size * K * world_size;  // every rank's batches
  return r;
}

// ddp on CUDA: one device per process, by the launcher's local rank.
std::string device_for_rank(const std::string& device, const LaunchInfo& launch) {
  if (launch.world_size == 1) return device;
  bool cuda = device == "cuda";
  if (device == "auto")
    for (const auto& [id, name] : available_devices()) cuda = cuda || id.rfind("cuda", 0) == 0;
  return cuda ? "cuda:" + std::to_string(launch.local_rank) : device;
}

// Devices of `be`'s kind visible from its device on: what parallel: dp may drive.
int devices_from(const Backend& be) {
  if (be.device().is_cpu()) return 1;
  int n = 0;
  for (const auto& [id, name] : available_devices()) n += id.rfind("cuda:", 0) == 0;
  return std::max(1, n - be.device().index);
}

// parallel: dp: the backends of devices 2..n of the plan (after the run's own)
// and the replicas that train on them.
std::unique_ptr<DeviceReplicas> make_replicas(const RunConfig& c, const RunPlan& plan, Backend& be,
                                              Model& model, const RunData& data,
                                              const Context& ctx) {
  std::vector<std::unique_ptr<Backend>> others;
  for (int r = 1; r < plan.dp_devices; ++r)
    others.push_back(make_backend("cuda:" + std::to_string(be.device().index + r),
                                  backend_options(c)));
  const Log quiet = [](const std::string&, const std::string&) {};  // replica 0 said it all
  return std::make_unique<DeviceReplicas>(
      be, model, std::move(others),
      [&](Backend& replica_be) { return build_model(c, plan, replica_be, data, quiet); }, ctx);
}

}  // namespace

RunSetup::RunSetup(const RunConfig& c, const SetupOptions& options,
                   const std::atomic<bool>& stop, const Log& log)
    : config(c) {
  // --- how this process was started (mpirun, torchrun: one rank of several)
  launch = options.launch_for_test ? *options.launch_for_test : launch_from_environment();
  TB_CHECK(launch.world_size == 1 || c.parallel == "ddp", "started as ", launch.describe(),
           " but parallel is '", c.parallel, "': set parallel: ddp, or start one process");

  // --- the backend, and every trick decided once from what it reports
  std::string note;
  BackendOptions bo = backend_options(c);
  bo.local_ranks = launch.local_size;
  backend = make_backend(device_for_rank(c.device, launch), bo, &note);
  Backend& be = *backend;
  if (!note.empty()) log("info", note);
  plan = resolve_tricks(c, be.capabilities(), be.device(),
                        {.tracing = options.tracing,
                         .amp_on_cpu_for_test = options.amp_on_cpu_for_test,
                         .world_size = launch.world_size,
                         .devices = c.parallel == "dp" ? devices_from(be) : 1});
  // dp cannot fall back to one device quietly: a comparison run on the
  // wrong setup would measure nothing.
  TB_CHECK(c.parallel != "dp" || plan.dp, "parallel = dp cannot run on ", be.device().str(), ": ",
           plan.tricks["parallel"].value("reason", ""));
  TB_CHECK(!plan.dp || c.batch_size >= plan.dp_devices, "parallel = dp: batch_size ",
           c.batch_size, " cannot be split across ", plan.dp_devices,
           " devices (dp_devices; batch_size is the whole step's batch)");
  TB_CHECK(launch.world_size == 1 || plan.ddp, "parallel: ddp cannot run as ", launch.describe(),
           ": ", plan.tricks["parallel"].value("reason", ""));
  shard = plan.ddp ? Shard{launch.rank, launch.world_size} : Shard{};

  // --- data, model, optimizer, schedule
  data = open_data(c, plan, be, shard);
  shape = run_shape(c, data, shard.count);
  model = build_model(c, plan, be, data, log);
  // ddp: the communicator, every rank on rank 0's model, the gradient buckets.
  if (plan.ddp) {
    // mpirun sends SIGKILL 1 s after its SIGTERM (communicator.h).
    const double max_grace_s = launch.launcher == LaunchInfo::Launcher::Mpi ? 0.7 : 5.0;
    WaitPolicy wait{.stop = &stop, .grace_s = 0.5};
    ddp = std::make_unique<DataParallel>(
        make_communicator(launch, be, wait), be, *model,
        DataParallelOptions{plan.bucket_elements, plan.sync_batchnorm, max_grace_s});
    TB_CHECK(ddp->rank() == launch.rank && ddp->size() == launch.world_size, "ddp: the ",
             ddp->comm().describe(), " communicator sees rank ", ddp->rank(), " of ", ddp->size(),
             ", the launcher said ", launch.describe());
    ddp->broadcast_model();
    if (c.processes != 1 && c.processes != launch.world_size)
      log("warning", "processes = " + std::to_string(c.processes) + " but the launcher started " +
                         std::to_string(launch.world_size));
    log("info", "ddp: " + launch.describe() + " over " + ddp->comm().describe() + ", " +
                    std::to_string(ddp->buckets().buckets().size()) + " gradient bucket(s), " +
                    (plan.sync_batchnorm ? "synchronised" : "per-rank") + " batch norm");
  }
  optimizer = std::make_unique<Optimizer>(OptimizerConfig::from_run(c), *model, be);
  schedule = std::make_unique<LrSchedule>(
      ScheduleConfig::from_run(c, shape.samples_per_step, shape.total_steps));
  log_plan(plan, log);
  // amp: conv/linear in f16/bf16, the rest in f32; fp16 adds the dynamic loss
  // scaler, driven as engine/amp/loss_scaler.h describes.
  if (plan.precision.needs_loss_scaling()) scaler = std::make_unique<LossScaler>(be);
  // --- the step's parts
  ctx = std::make_unique<Context>(Context{be});
  ctx->layout = plan.activation_layout;
  ctx->amp = plan.precision;
  if (ddp) ctx->sync_batchnorm = ddp->batchnorm_sync();
  // dp: replicas 1..n-1 on their devices (their step contexts are the StepRunner's).
  if (plan.dp) {
    dp = make_replicas(c, plan, be, *model, data, *ctx);
    log("info", "dp: " + dp->describe().dump() + ", batch_size " +
                    std::to_string(c.batch_size) + " split across them every step");
  }
}

RunSetup::~RunSetup() = default;

}  // namespace tb
