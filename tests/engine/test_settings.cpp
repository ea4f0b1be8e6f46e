// SPDX-License-Identifier: GPL-3.0-or-later
// The settings table (engine/train/config.cpp) is the one declaration of every
// key: RunConfig, defaults, validation and `config --schema` come from it; the
// run plan joins it with the capabilities the backends report.
#include <QtTest>

#include <set>

#include <nlohmann/json.hpp>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/data/dataset.h"
#include "engine/ladder/rungs.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/schedule.h"
#include "engine/train/config.h"
#include "engine/train/tricks.h"

using namespace tb;
using json = nlohmann::json;

namespace {

// A valid value of `k` that differs from its default.
json other_value(const ConfigKey& k) {
  if (!k.choices.empty())
    for (const json& c : k.choices)
      if (c != k.default_value) return c;
  switch (k.type) {
    case KeyType::Bool: return !k.default_value.get<bool>();
    case KeyType::Int: return k.default_value.get<int64_t>() + 1 <= k.max || !(k.min < k.max)
                                  ? k.default_value.get<int64_t>() + 1
                                  : k.default_value.get<int64_t>() - 1;
    case KeyType::Float: {
      const double d = k.default_value.get<double>();
      return d < k.max ? (d + k.max) / 2 : (d + k.min) / 2;
    }
    case KeyType::String:
      if (k.key == "device") return "cuda:1";
      if (k.key == "ladder_rungs") return rung_catalogue().back().id;  // names a known rung
      return "other " + k.key;
    case KeyType::IntList: return json::array({1, 2, 3});
  }
  return nullptr;
}

json field_value(const RunConfig& c, const ConfigField& field) {
  return std::visit([&](auto p) { return json(c.*p); }, field);
}

}  // namespace

class TestSettings : public QObject {
  Q_OBJECT

 private slots:
  // Each row fills its RunConfig field: a non-default value of every key
  // comes back from RunConfig::from_json in that field.
  void everyKeyFillsItsField() {
    json overrides = json::object();
    for (const ConfigKey& k : config_schema()) overrides[k.key] = other_value(k);
    const json validated = validate_config(overrides, "test");
    const RunConfig c = RunConfig::from_json(validated);
    for (const ConfigKey& k : config_schema()) {
      QVERIFY2(validated.at(k.key) != k.default_value, k.key.c_str());
      QVERIFY2(field_value(c, k.field) == validated.at(k.key), k.key.c_str());
    }
    // And the defaults fill the fields with the defaults.
    const RunConfig d = RunConfig::from_json(default_config());
    for (const ConfigKey& k : config_schema())
      QVERIFY2(field_value(d, k.field) == k.default_value, k.key.c_str());
  }

  // A RunConfig made without a configuration holds the table's defaults: the
  // table is the one place a default is declared (config.h had a second set of
  // initializers, lr 0 against the table's 0.05 and nine more).
  void aDefaultRunConfigHoldsTheTablesDefaults() {
    const RunConfig c;
    for (const ConfigKey& k : config_schema())
      QVERIFY2(field_value(c, k.field) == k.default_value, k.key.c_str());
    QCOMPARE(c.values, default_config());
  }

  // The folder a run reads is stored with it: a run that leaves data_dir to
  // the default and one that names the default folder (the workbench fills
  // it in) have the same configuration, so Compare does not list data_dir as
  // a difference between them; a data set without a default folder keeps an
  // empty one (open_dataset then says the folder is missing).
  void dataFolderIsStoredResolved() {
    const json left_out = validate_config(json::object(), "test");
    const std::string folder = default_data_dir("fashion-mnist");
    QVERIFY(!folder.empty());
    QCOMPARE(left_out["data_dir"].get<std::string>(), folder);
    QCOMPARE(validate_config({{"data_dir", folder}}, "test"), left_out);
    QCOMPARE(validate_config({{"data_dir", "/data/fm"}}, "test")["data_dir"].get<std::string>(),
             std::string("/data/fm"));
    QCOMPARE(validate_config({{"dataset", "mnist"}}, "test")["data_dir"].get<std::string>(),
             std::string());
    QCOMPARE(validate_config({{"dataset", "synthetic"}}, "test")["data_dir"].get<std::string>(),
             std::string());
  }

  void schemaCarriesGroupsAndCapabilities() {
    const json schema = config_schema_json();
    QCOMPARE(schema["version"].get<int>(), 2);
    std::set<std::string> groups;
    int trick_groups = 0;
    for (const json& g : schema["groups"]) {
      groups.insert(g["id"].get<std::string>());
      trick_groups += g["tricks"].get<bool>();
    }
    QCOMPARE(trick_groups, 7);
    for (const json& k : schema["keys"]) {
      QVERIFY2(groups.count(k["group"].get<std::string>()), k.dump().c_str());
      const ConfigKey* key = find_config_key(k["key"].get<std::string>());
      QVERIFY(key);
      // "all" exactly when the CPU backend reports what the key needs, but
      // for the one capability a GPU backend never has (host kernel threads).
      const bool cpu = !key->needs || CpuBackend().capabilities().*(key->needs);
      const bool cpu_only = key->needs == &BackendCapabilities::host_kernel_threads;
      QVERIFY(!cpu_only || !(capabilities_of(DeviceKind::CUDA).*(key->needs)));
      QCOMPARE(k["backends"].get<std::string>(), std::string(cpu_only ? "cpu" : cpu ? "all" : "cuda"));
    }
    QCOMPARE(find_config_key("cpu_threads")->backends(), std::string("cpu"));
    // ddp runs over processes (MPI on the CPU), so parallel needs no second device.
    QCOMPARE(find_config_key("parallel")->min_devices, 1);
    QVERIFY(find_config_key("no_such_key") == nullptr);
  }

  // What a backend object reports is what capabilities_of reads without one.
  void backendsReportTheirCapabilities() {
    CpuBackend cpu;
    for (const ConfigKey& k : config_schema())
      if (k.needs) QCOMPARE(cpu.capabilities().*(k.needs), capabilities_of(DeviceKind::CPU).*(k.needs));
    QVERIFY(capabilities_of(DeviceKind::CPU).fused_pointwise);
    QVERIFY(!capabilities_of(DeviceKind::CPU).graph_capture);
    QVERIFY(capabilities_of(DeviceKind::CUDA).graph_capture);
    QVERIFY(capabilities_of(DeviceKind::CUDA).multi_device);  // dp: copy_from_peer (peer.cpp)
    QVERIFY(!capabilities_of(DeviceKind::CPU).multi_device);
#ifdef TRAINBENCH_HAVE_MPI
    QVERIFY(capabilities_of(DeviceKind::CPU).process_parallel);
#else
    QVERIFY(!capabilities_of(DeviceKind::CPU).process_parallel);
#endif
  }

  void choicesOfAnIntegerKeyAreChecked() {
    QCOMPARE(validate_config({{"pad_channels_to", 8}}, "test")["pad_channels_to"].get<int>(), 8);
    try {
      validate_config({{"pad_channels_to", 3}}, "cfg.json");
      QFAIL("pad_channels_to = 3 was accepted");
    } catch (const Error& e) {
      const std::string m = e.what();
      QVERIFY2(m.find("cfg.json: key 'pad_channels_to': 3 is not one of: 0, 2, 4, 8") == 0, m.c_str());
    }
  }

  // CUPTI only when asked (its sampled steps cost more than a small step):
  // the default plan has neither the census nor the tensor pipe counters,
  // cupti_sampling samples both, profiler takes a census every step.
  void cuptiOnlyWhenAsked() {
    auto plan = [](const json& cfg) {
      return resolve_tricks(RunConfig::from_json(validate_config(cfg, "test")),
                            capabilities_of(DeviceKind::CUDA), Device::cuda(0));
    };
    const RunPlan plain = plan(json::object());
    QVERIFY(!plain.kernel_census && !plain.tensor_pipe && !plain.census_every_step);
    const RunPlan sampled = plan({{"cupti_sampling", true}});
    QVERIFY(sampled.kernel_census && sampled.tensor_pipe && !sampled.census_every_step);
    // The profiler where this build's CUDA backend has CUPTI (the record says).
    const RunPlan profiled = plan({{"profiler", true}});
    const bool applied = profiled.applied("profiler");
    QVERIFY(profiled.kernel_census == applied && profiled.tensor_pipe == applied &&
            profiled.census_every_step == applied);
    const RunPlan on_cpu = resolve_tricks(RunConfig::from_json(validate_config({{"cupti_sampling", true}}, "test")),
                                          CpuBackend().capabilities(), Device::cpu());
    QVERIFY(!on_cpu.kernel_census && !on_cpu.tensor_pipe);
  }

  // The plan reads the record: a trick is used when it is on and applied.
  void planFollowsTheRecord() {
    json on = {{"pin_memory", true},  {"non_blocking", true}, {"h2d_uint8", true},
               {"channels_last", true}, {"pad_channels_to", 8}, {"fuse_pointwise", true},
               {"device_side_init", true}, {"amp", "bf16"},    {"cuda_graphs", true},
               {"empty_cache_between_phases", true}, {"profiler", true}};
    const RunConfig c = RunConfig::from_json(validate_config(on, "test"));
    const RunPlan cpu = resolve_tricks(c, CpuBackend().capabilities(), Device::cpu());
    QVERIFY(cpu.on_host && !cpu.pinned_staging && !cpu.non_blocking && !cpu.uint8_upload);
    QVERIFY(cpu.layout == Layout::NCHW && cpu.pad_channels_to == 0 && !cpu.device_side_init);
    QVERIFY(cpu.fuse_pointwise);  // the CPU backend has the fused ops
    QVERIFY(!cpu.precision.enabled() && !cpu.cuda_graphs && !cpu.empty_cache_between_phases);
    QVERIFY(!cpu.kernel_census && !cpu.tensor_pipe && !cpu.device_trace);
    QCOMPARE(cpu.tricks, resolve_tricks(c, Device::cpu()));

    const RunPlan gpu = resolve_tricks(c, capabilities_of(DeviceKind::CUDA), Device::cuda(0));
    QVERIFY(!gpu.on_host && gpu.pinned_staging && gpu.non_blocking && gpu.uint8_upload && !gpu.gpu_augment);
    QVERIFY(gpu.layout == Layout::NHWC && gpu.pad_channels_to == 8 && gpu.device_side_init);
    QVERIFY(gpu.precision.mode == AmpMode::BF16 && gpu.cuda_graphs && gpu.empty_cache_between_phases);
    QVERIFY(!gpu.device_trace);
    QCOMPARE(gpu.kernel_census && gpu.tensor_pipe, gpu.applied("profiler"));  // CUPTI: asked for
    QCOMPARE(gpu.census_every_step, gpu.applied("profiler"));

    // A trace blocks cuda_graphs, in the record (one place decides it).
    const RunPlan traced =
        resolve_tricks(c, capabilities_of(DeviceKind::CUDA), Device::cuda(0), {.tracing = true});
    QVERIFY(!traced.cuda_graphs && !traced.applied("cuda_graphs"));
    QVERIFY(traced.tricks["cuda_graphs"]["reason"].get<std::string>().find("trace") != std::string::npos);
    QVERIFY(traced.device_trace && !traced.kernel_census && !traced.tensor_pipe);

    // A capability the backend does not report: not applied, with the reason.
    BackendCapabilities no_graphs = capabilities_of(DeviceKind::CUDA);
    no_graphs.graph_capture = false;
    const RunPlan without = resolve_tricks(c, no_graphs, Device::cuda(0));
    QVERIFY(!without.cuda_graphs);
    QCOMPARE(without.tricks["cuda_graphs"]["reason"].get<std::string>(),
             std::string("not implemented by this build's cuda backend yet"));

    // The amp test hook uses the precision but reports it not applied.
    const RunPlan hook = resolve_tricks(c, CpuBackend().capabilities(), Device::cpu(),
                                        {.amp_on_cpu_for_test = true});
    QVERIFY(hook.precision.mode == AmpMode::BF16 && !hook.applied("amp"));

    // gpu_augment ships raw bytes and implies the uint8 upload.
    const RunConfig aug = RunConfig::from_json(validate_config({{"gpu_augment", true}}, "test"));
    const RunPlan a = resolve_tricks(aug, capabilities_of(DeviceKind::CUDA), Device::cuda(0));
    QVERIFY(a.gpu_augment && a.uint8_upload);
  }

  // cpu_layout blocked needs f32 activations: amp asked for on the CPU and
  // not applied (the CPU has no amp) leaves them f32, so they are blocked as
  // with amp off; the test hook that applies it keeps them NCHW, saying why.
  void cpuLayoutFollowsTheAppliedPrecision() {
    if (!cpu_has_onednn()) QSKIP("this build has no oneDNN: blocked falls back to NCHW");
    const auto plan = [](const json& settings, bool hook) {
      return resolve_tricks(RunConfig::from_json(validate_config(settings, "test")),
                            CpuBackend().capabilities(), Device::cpu(),
                            {.amp_on_cpu_for_test = hook});
    };
    const RunPlan off = plan({{"cpu_layout", "blocked"}}, false);
    QCOMPARE(layout_name(off.activation_layout), "nChw16c");
    const RunPlan asked = plan({{"cpu_layout", "blocked"}, {"amp", "fp16"}}, false);
    QVERIFY(!asked.applied("amp") && !asked.precision.enabled());
    QCOMPARE(layout_name(asked.activation_layout), "nChw16c");
    const RunPlan hook = plan({{"cpu_layout", "blocked"}, {"amp", "fp16"}}, true);
    QVERIFY(hook.precision.enabled());
    QCOMPARE(layout_name(hook.activation_layout), "NCHW");
    QVERIFY2(hook.activation_layout_reason.find("amp") != std::string::npos,
             hook.activation_layout_reason.c_str());
  }

  void optimizerAndScheduleComeFromTheRunConfig() {
    const RunConfig c = RunConfig::from_json(validate_config(
        {{"optimizer", "lamb"}, {"lr", 0.4}, {"momentum", 0.8}, {"nesterov", true},
         {"weight_decay", 0.01}, {"beta1", 0.85}, {"beta2", 0.99}, {"eps", 1e-6}, {"alpha", 0.9},
         {"optimizer_foreach", true}, {"schedule", "step"}, {"step_size", 7}, {"gamma", 0.5},
         {"min_lr", 0.001}, {"warmup_steps", 3}, {"lr_scaling", "linear"}, {"base_batch_size", 32}},
        "test"));
    const OptimizerConfig o = OptimizerConfig::from_run(c);
    QVERIFY(o.kind == OptimizerKind::LAMB && o.nesterov && o.multi_tensor);
    QCOMPARE(o.lr, 0.4f);
    QCOMPARE(o.momentum, 0.8f);
    QCOMPARE(o.weight_decay, 0.01f);
    QCOMPARE(o.beta1, 0.85f);
    QCOMPARE(o.beta2, 0.99f);
    QCOMPARE(o.eps, 1e-6f);
    QCOMPARE(o.alpha, 0.9f);
    const ScheduleConfig s = ScheduleConfig::from_run(c, 128, 1000);
    QVERIFY(s.kind == ScheduleKind::Step);
    QCOMPARE(s.base_lr, 0.4 * 128 / 32);  // linear scaling from base_batch_size
    QCOMPARE(s.total_steps, int64_t(1000));
    QCOMPARE(s.warmup_steps, int64_t(3));
    QCOMPARE(s.step_size, int64_t(7));
    QCOMPARE(s.gamma, 0.5);
    QCOMPARE(s.min_lr, 0.001);
  }

  // The table's applies_when facts are true of the engine: a key that
  // applies only to some schedules (or lr scalings) changes the learning
  // rates of exactly those.
  void appliesWhenMatchesTheSchedules() {
    auto rates = [](const json& overrides) {
      const RunConfig c = RunConfig::from_json(validate_config(overrides, "test"));
      const LrSchedule schedule(ScheduleConfig::from_run(c, 128, 50));
      std::vector<double> out;
      for (int64_t s = 0; s < 50; ++s) out.push_back(schedule.lr_for_step(s));
      return out;
    };
    int checked = 0;
    for (const ConfigKey& k : config_schema()) {
      if (k.applies_key != "schedule" && k.applies_key != "lr_scaling") continue;
      const ConfigKey* on = find_config_key(k.applies_key);
      QVERIFY(on);
      json changed = k.type == KeyType::Int ? json(7) : json(0.01);
      for (const json& choice : on->choices) {
        const json base = {{k.applies_key, choice}, {"schedule", k.applies_key == "schedule" ? choice : json("step")},
                           {"step_size", 10}};
        json other = base;
        other[k.key] = changed;
        const bool applies =
            std::find(k.applies_values.begin(), k.applies_values.end(), choice) != k.applies_values.end();
        QVERIFY2((rates(base) != rates(other)) == applies, (k.key + " with " + choice.dump()).c_str());
        ++checked;
      }
    }
    QVERIFY(checked >= 12);  // step_size, gamma, min_lr over 4 schedules; base_batch_size over 3 scalings
  }

  // Front ends name keys from the table: every key outside the trick groups
  // has a label, and the table's references are sound (make_table checks
  // them; here, that the schema carries them).
  void schemaCarriesLabelsAndApplicability() {
    std::set<std::string> trick_groups;
    for (const ConfigGroup& g : config_groups())
      if (g.tricks) trick_groups.insert(g.id);
    const json schema = config_schema_json();
    for (const json& k : schema["keys"]) {
      if (!trick_groups.count(k["group"].get<std::string>()))
        QVERIFY2(!k.value("label", std::string()).empty(), k.dump().c_str());
    }
    const json* step_size = nullptr;
    for (const json& k : schema["keys"])
      if (k["key"] == "step_size") step_size = &k;
    QVERIFY(step_size);
    QCOMPARE((*step_size)["applies_when"], (json{{"key", "schedule"}, {"values", {"step"}}}));
    QCOMPARE(find_config_key("optimizer")->choice_labels["lars"].get<std::string>(), std::string("LARS (large batch)"));
    QCOMPARE(find_config_key("train_limit")->zero_means, std::string("all"));
  }
};

QTEST_MAIN(TestSettings)
#include "test_settings.moc"
