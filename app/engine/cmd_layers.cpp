// SPDX-License-Identifier: GPL-3.0-or-later
#include "app/engine/cmd_layers.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>

#include "app/engine/table.h"
#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/metrics/layer_profile.h"
#include "engine/nn/layer_work.h"
#include "engine/nn/model.h"
#include "engine/nn/models.h"
#include "engine/store/run_store.h"

namespace tb::cli {

using json = nlohmann::json;

namespace {

std::string absence(const RunRecord& run) {
  return layer_profile_absence(run.summary, run.status, run.engine_version);
}

std::string fixed(const json& v, int decimals, double scale = 1) {
  if (!v.is_number()) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v.get<double>() * scale);
  return buf;
}

struct LayersArgs {
  int64_t id = 0;
  bool as_json = false;
};

int run_layers(const LayersArgs& a, const std::string& db) {
  TB_CHECK(access(db.c_str(), F_OK) == 0, db,
           ": no run store here yet (runs are recorded by `trainbench-engine run`)");
  RunStore store(db, RunStore::Mode::ReadOnly);
  const auto run = store.get_run(a.id);
  TB_CHECK(run.has_value(), db, ": no run with id ", a.id, " (see `trainbench-engine list`)");
  const std::vector<LayerProfileStep> steps = store.layer_profile(a.id);
  TB_CHECK(!steps.empty(), "run ", a.id, " has no per-layer profile: ", absence(*run));
  const json table = layer_profile_table(steps, DevicePeaks::from_environment(run->environment));
  if (a.as_json) {
    json out = table;
    out["run_id"] = a.id;
    std::cout << out.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    return 0;
  }
  const json& peaks = table["peaks"];
  std::cout << "run " << a.id << ": " << run->name << " on "
            << run->environment.value("device", std::string("?")) << ", mean of "
            << steps.size() << " sampled step(s) (" << table["sampled_steps"].dump()
            << "), step " << fixed(table["step_time_ms"], 2) << " ms\n"
            << "peaks: " << fixed(peaks["flops_per_s"], 1, 1e-9) << " GFLOP/s"
            << (peaks["dtype"].is_string() ? " " + peaks["dtype"].get<std::string>() : std::string())
            << ", " << fixed(peaks["bytes_per_s"], 1, 1e-9) << " GB/s, probed on "
            << peaks["device"].get<std::string>() << " (" << peaks["source"].get<std::string>()
            << ")\n\n";
  Table t({"layer", "kind", "phase", "time ms", "share", "GFLOP/s", "GB/s", "% roofline", "bound"});
  for (const json& r : table["rows"]) {
    const std::string layer = r["layer"].get<std::string>();
    t.add({layer.empty() ? "(step)" : layer, r["kind"].get<std::string>(),
           r["phase"].get<std::string>(), fixed(r["time_ms"], 3),
           fixed(r["share"], 1, 100) + (r["share"].is_number() ? " %" : ""),
           fixed(r["flops_per_s"], 2, 1e-9), fixed(r["bytes_per_s"], 2, 1e-9),
           fixed(r["roofline_pct"], 1), r["bound"].is_string() ? r["bound"].get<std::string>() : "-"});
  }
  t.print(std::cout);
  std::cout << "\nattributed: " << fixed(table["attributed_share"], 1, 100)
            << " % of the step (the rest is the \"unattributed\" row)\n";
  return 0;
}

// --- work

struct WorkArgs {
  std::string model;
  bool as_json = false;
};

json work_json(const Work& w) {
  return {{"matrix_flops", w.matrix_flops}, {"other_flops", w.other_flops}, {"bytes", w.bytes}};
}

// One model at its registry shape, batch 1, f32, default options (bench/
// bench_models.py's models): its layers' work and the MFU convention's sums.
json model_work_json(const ModelDef& def, Backend& cpu) {
  const int64_t classes = 10;
  std::unique_ptr<Model> model = make_model(def.name, def.input_shape, classes, ModelOptions{});
  model->build(cpu, 0);
  double forward = 0, train = 0;
  json layers = json::array();
  for (const LayerWorkRow& r : model_work(*model, WorkQuery{})) {
    forward += r.forward.matrix_flops;
    train += r.forward.matrix_flops + r.backward.matrix_flops;
    layers.push_back({{"name", r.name}, {"kind", r.kind}, {"forward", work_json(r.forward)},
                      {"backward", work_json(r.backward)}});
  }
  return {{"input_shape", def.input_shape}, {"classes", classes}, {"batch", 1},
          {"forward", int64_t(forward)}, {"train", int64_t(train)},  // whole FLOPs
          {"convention", "fwd + weight grad + input grad of every conv/linear (no input grad "
                         "where no earlier layer has parameters); BN, pointwise, loss excluded"},
          {"layers", layers}};
}

int run_work(const WorkArgs& a) {
  std::unique_ptr<Backend> cpu = make_backend("cpu", BackendOptions{});
  json out = json::object();
  for (const ModelDef& def : model_registry())
    if (a.model.empty() || a.model == def.name) out[def.name] = model_work_json(def, *cpu);
  TB_CHECK(!out.empty(), "work --model ", a.model, ": no such model (expected one of ",
           json(model_names()).dump(), ")");
  if (a.as_json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  for (const auto& [name, m] : out.items()) {
    std::cout << name << " " << m["input_shape"].dump() << ": forward "
              << fixed(m["forward"], 1, 1e-6) << " MFLOP, train " << fixed(m["train"], 1, 1e-6)
              << " MFLOP per sample (matrix FLOPs)\n";
    Table t({"layer", "kind", "fwd MFLOP", "fwd MB", "bwd MFLOP", "bwd MB"});
    for (const json& l : m["layers"]) {
      auto flops = [](const json& w) {
        return fixed(json(w["matrix_flops"].get<double>() + w["other_flops"].get<double>()), 3,
                     1e-6);
      };
      t.add({l["name"].get<std::string>(), l["kind"].get<std::string>(), flops(l["forward"]),
             fixed(l["forward"]["bytes"], 3, 1e-6), flops(l["backward"]),
             fixed(l["backward"]["bytes"], 3, 1e-6)});
    }
    t.print(std::cout);
    std::cout << "\n";
  }
  return 0;
}

}  // namespace

json layer_profile_export(const RunStore& store, const RunRecord& run) {
  const std::vector<LayerProfileStep> steps = store.layer_profile(run.id);
  if (steps.empty()) return {{"not_measured", absence(run)}};
  json out = layer_profile_table(steps, DevicePeaks::from_environment(run.environment));
  out["steps"] = json::array();  // each sampled step's own rows
  for (const LayerProfileStep& s : steps) out["steps"].push_back(s.to_json());
  return out;
}

std::vector<Command> add_layers_commands(CLI::App& app) {
  auto la = std::make_shared<LayersArgs>();
  CLI::App* layers = app.add_subcommand(
      "layers", "Where a stored run's sampled steps went, layer by layer: time, share of the "
                "step, achieved FLOP/s and bytes/s against the device's roofline");
  layers->add_option("id", la->id, "Run id")->required();
  layers->add_flag("--json", la->as_json, "JSON output");
  auto wa = std::make_shared<WorkArgs>();
  CLI::App* work = app.add_subcommand(
      "work", "Counted FLOPs and bytes of every model's layers per sample (the count "
              "bench/bench_models.py reads)");
  work->add_option("--model", wa->model, "Only this model");
  work->add_flag("--json", wa->as_json, "JSON output");
  return {{layers, [] { return StoreUse::Reads; },
           [la](const std::string& db) { return run_layers(*la, db); }},
          {work, [] { return StoreUse::None; },
           [wa](const std::string&) { return run_work(*wa); }}};
}

}  // namespace tb::cli
