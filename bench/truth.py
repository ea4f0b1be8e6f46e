#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Truth of the measurements (bench/README.md): are the engine's figures the
ones an outside tool would give? Each part adds its section to one JSON
(--output; the device, driver, versions and date at the top, a date per part):

  step          trainbench-step-truth (bench/step_truth.cpp) times the loop from
                outside (CUDA events at every step boundary; the host clock on
                the CPU): the sum of the engine's step_time_ms over the timed
                steps against the outside total. Target: within 2 %.
  cost          the outside mean step time with measurement off (step total
                only, no CUPTI), default (events read back late, sampled memory
                and telemetry, no CUPTI), cupti_sampling (census and tensor
                pipe counters sampled) and the full per-kernel profiler, at
                batch 64 and 512, alternating off/default to share the
                machine's drift. Target: the default within 2 % of off; the
                costlier modes' figures are what the GUI's tooltips show.
  memory        the engine's allocated/reserved/peak and the driver's used bytes
                (cudaMemGetInfo deltas from before the run) against PyTorch's
                figures for the same model, batch and recipe.
  tensor-cores  the kernel-time Tensor Core share and the tensor pipe active %
                from the engine's census, fp32 (no TF32) against bf16/fp16
                channels-last; with --ncu, scripts/gpu-check.sh ncu's JSON
                (the same figure from Nsight Compute) is merged in.

    bench/truth.py all --bin build/bin --output gpu-truth.json [--device cpu --quick]
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_proc  # noqa: E402
import engine_run  # noqa: E402

# The "All tricks" preset in bf16, eager (the step check adds CUDA graphs where
# it wants them) and with cuDNN's heuristic plans, not autotuning: these check
# timing, not speed, and autotuning would cost each of the many short runs
# seconds of the call's budget. No channel padding: part_memory's PyTorch side
# pads none.
RESNET_TRICKS = {**engine_run.preset_overrides(engine_run.ALL_TRICKS_PRESET),
                 "model": "resnet18-cifar", "dataset": "synthetic", "synthetic_shape": [3, 32, 32],
                 "amp": "bf16", "cuda_graphs": False, "cudnn_benchmark": False,
                 "pad_channels_to": 0, "log_every": 50, "workers": 8, "schedule": "constant",
                 "test_limit": 256}
# fmnist-cnn with the engine's defaults: a small step, and the CPU's workload.
FMNIST_DEFAULTS = {"model": "fmnist-cnn", "dataset": "synthetic", "synthetic_shape": [1, 28, 28],
                   "batch_size": 64, "test_limit": 256}
# The step-time check: a large step (compute-bound) and a small one (where a
# timer's own overhead shows most), eager and captured.
STEP_CONFIGS = [
    ("resnet18-cifar b512 bf16 all tricks + CUDA graphs", dict(RESNET_TRICKS, batch_size=512, cuda_graphs=True)),
    ("resnet18-cifar b512 bf16 all tricks, eager", dict(RESNET_TRICKS, batch_size=512)),
    ("fmnist-cnn b64 fp32 defaults", FMNIST_DEFAULTS),
]
COST_MODES = {  # name -> harness flags
    "off": ["--measure", "off", "--cupti", "off"],
    "default": [],
    "cupti_sampling": ["--set", "cupti_sampling=true"],
    "profiler": ["--set", "profiler=true"],
}
COSTLIER_MODES = ("cupti_sampling", "profiler")  # one run each per batch


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def scaled(a, batch):
    return max(2, int(round(batch * a.batch_scale)))


def harness(a, config, extra=(), steps=None, warmup=None):
    steps = steps or a.steps
    warmup = warmup if warmup is not None else a.warmup
    cfg = dict(config, device=a.device, max_steps=warmup + steps)
    cfg["batch_size"] = scaled(a, cfg["batch_size"])
    cfg.setdefault("synthetic_size", cfg["batch_size"] * (warmup + steps + 1))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "truth.json")
        cfg_path = os.path.join(tmp, "config.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        cmd = [os.path.join(a.bin, "trainbench-step-truth"), "--config", cfg_path,
               "--warmup", str(warmup), "--output", out, *extra]
        try:
            proc = bench_proc.run(cmd, timeout=a.run_timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {a.run_timeout} s"}
        if not os.path.exists(out):
            return {"error": (proc.stderr.strip() or proc.stdout.strip())[-1500:] or
                    f"exit {proc.returncode}, no output"}
        r = json.load(open(out))
        if proc.returncode != 0 and "error" not in r:
            r["error"] = proc.stderr.strip()[-1500:] or f"exit {proc.returncode}"
        return r


def part_step(a, res):
    out = []
    for name, cfg in STEP_CONFIGS[:1] if a.quick else STEP_CONFIGS:
        r = harness(a, cfg)
        st = r.get("step_time", {})
        print(json.dumps({"step": name, "difference_pct": st.get("difference_pct"),
                          "within_target": st.get("within_target"),
                          "error": (r.get("error") or "")[:200] or None}), flush=True)
        out.append({"name": name, **r})
        res.setdefault("environment", r.get("environment"))
        res.setdefault("device", r.get("device"))
        for k in ("cuda_driver_version", "cuda_runtime_version"):
            if k in r:
                res.setdefault(k, r[k])
    return {"date": now(), "target_pct": 2.0, "runs": out}


def outside_mean_ms(r):
    st = r.get("step_time", {})
    n = st.get("timed_steps") or 0
    return st["outside_sum_ms"] / n if n else None


# The cost check's workloads: the GPU's (resnet18-cifar all tricks) and the CPU's
# (fmnist-cnn's defaults: resnet18-cifar's second-long CPU step would take the
# check's runs a quarter of an hour and tell the same).
COST_CONFIGS = {"resnet18-cifar": ("resnet18-cifar bf16 channels-last (tricks, eager)",
                                   RESNET_TRICKS),
                "fmnist-cnn": ("fmnist-cnn fp32 defaults", FMNIST_DEFAULTS)}


def part_cost(a, res):
    batches = [64] if a.quick else [64, 512]
    # 100 timed steps a run (with measure_every 20, five sampled steps a run).
    steps, warmup = min(a.steps, 100), min(a.warmup, 20)
    model_name, model_cfg = COST_CONFIGS[a.cost_model]
    out = []
    for b in batches:
        cfg = dict(model_cfg, batch_size=b)
        means = {m: [] for m in COST_MODES}
        errors = []
        for rep in range(a.repeats):
            for mode in (["off", "default"] if rep % 2 == 0 else ["default", "off"]):
                r = harness(a, cfg, COST_MODES[mode], steps=steps, warmup=warmup)
                m = outside_mean_ms(r)
                (means[mode].append(m) if m else
                 errors.append({"mode": mode, "error": r.get("error") or "no outside step time"}))
                res.setdefault("environment", r.get("environment"))
        for mode in COSTLIER_MODES:
            r = harness(a, cfg, COST_MODES[mode], steps=steps, warmup=warmup)
            m = outside_mean_ms(r)
            (means[mode].append(m) if m else
             errors.append({"mode": mode, "error": r.get("error") or "no outside step time"}))
        row = {"batch_size": b, "outside_mean_step_ms": means, "errors": errors}
        med = {k: statistics.median(v) for k, v in means.items() if v}
        if "off" in med:
            for k in ("default", *COSTLIER_MODES):
                if k in med:
                    row[f"{k}_cost_pct"] = 100.0 * (med[k] - med["off"]) / med["off"]
            if "default_cost_pct" in row:
                row["default_within_2pct"] = row["default_cost_pct"] <= 2.0
            # the spread of the same mode: a cost below it is noise
            if len(means["off"]) > 1:
                row["off_spread_pct"] = 100.0 * (max(means["off"]) - min(means["off"])) / med["off"]
        print(json.dumps({"cost": f"batch {b}", **{k: row.get(k) for k in (
            "default_cost_pct", "cupti_sampling_cost_pct", "profiler_cost_pct",
            "off_spread_pct")}}), flush=True)
        out.append(row)
    return {"date": now(), "model": model_name,
            "clock": "outside (trainbench-step-truth): mean step time over the timed steps",
            "modes": {"off": "TRAINBENCH_MEASURE=off semantics (step total only) and CUPTI off "
                             "(no census, no tensor pipe counters); the sampled memory and "
                             "telemetry series have no switch and stay on in every mode",
                      "default": "the engine's defaults (no CUPTI)",
                      "cupti_sampling": "cupti_sampling=true: kernel census and tensor pipe "
                                        "counters on one step in measure_every",
                      "profiler": "profiler=true: kernel census every step"},
            "repeats": a.repeats, "batches": out}


def part_memory(a, res):
    cfg = dict(RESNET_TRICKS, batch_size=512)
    steps, warmup = min(a.steps, 60), min(a.warmup, 10)
    r = harness(a, cfg, steps=steps, warmup=warmup)
    torch_cmd = [a.python, os.path.join(HERE, "torch_train_step.py"), "--model", "resnet18-cifar",
                 "--batch-size", str(scaled(a, 512)), "--steps", str(steps), "--warmup", str(warmup),
                 "--recipe", "all-tricks", "--precision", "bf16", "--device", a.device,
                 "--cudnn-benchmark", "off"]  # as RESNET_TRICKS
    try:
        proc = bench_proc.run(torch_cmd, timeout=a.run_timeout)
        pt = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else \
            {"error": proc.stderr.strip()[-1500:]}
    except subprocess.TimeoutExpired:
        pt = {"error": f"timed out after {a.run_timeout} s"}
    mem = r.get("memory", {})
    sec = {"date": now(), "model": "resnet18-cifar b512 bf16 channels-last, eager, both sides",
           "trainbench": mem, "trainbench_error": r.get("error"),
           "pytorch": {k: pt.get(k) for k in ("peak_allocated_bytes", "peak_reserved_bytes",
                                               "reserved_end_bytes", "device_used_delta_bytes",
                                               "version", "error") if k in pt}}
    if mem.get("engine_peak_allocated_bytes") and pt.get("peak_allocated_bytes"):
        sec["peak_allocated_ratio_trainbench_over_pytorch"] = (
            mem["engine_peak_allocated_bytes"] / pt["peak_allocated_bytes"])
    if mem.get("driver_delta_bytes") and pt.get("device_used_delta_bytes"):
        sec["driver_delta_ratio_trainbench_over_pytorch"] = (
            mem["driver_delta_bytes"] / pt["device_used_delta_bytes"])
    if not mem:
        sec["note"] = "no device memory figures: not a GPU run"
    print(json.dumps({"memory": {k: v for k, v in sec.items()
                                 if k.endswith("ratio_trainbench_over_pytorch") or k == "note"}}),
          flush=True)
    return sec


def part_tensor_cores(a, res):
    base = {"model": "resnet18-cifar", "dataset": "synthetic", "synthetic_shape": [3, 32, 32],
            "batch_size": 256, "test_limit": 256, "profiler": True, "device": a.device}
    configs = [("fp32 (no TF32)", {}),
               ("bf16 channels-last", {"amp": "bf16", "channels_last": True}),
               ("fp16 channels-last", {"amp": "fp16", "channels_last": True})]
    steps, warmup = (4, 1) if a.quick else (20, 2)
    out = []
    db = os.path.join(tempfile.mkdtemp(prefix="truth-tc-"), "runs.db")
    for name, add in configs:
        b = scaled(a, base["batch_size"])
        cfg = dict(base, **add, batch_size=b, max_steps=steps + warmup,
                   synthetic_size=b * (steps + warmup + 1))
        r = engine_run.run(os.path.join(a.bin, "trainbench-engine"), db, cfg, warmup,
                           timeout=a.run_timeout, env={"TRAINBENCH_TENSOR_PIPE_EVERY": "4"})
        row = {"config": name, **{k: r.get(k) for k in (
            "median_tensor_core_share", "median_tensor_pipe_active_pct", "median_kernels_per_step",
            "median_step_ms", "error") if k in r}}
        if "median_tensor_core_share" not in r and "error" not in r:
            row["note"] = "no census figures (the CPU, or CUPTI unavailable: see the run's log)"
        out.append(row)
        print(json.dumps({"tensor_cores": row}), flush=True)
    sec = {"date": now(), "census": "profiler=true: every step; tensor pipe counters every 4th",
           "expectation": "fp32 share <= 0.02; bf16/fp16 channels-last share >= 0.10",
           "configs": out}
    shares = {r["config"]: r.get("median_tensor_core_share") for r in out}
    if all(v is not None for v in shares.values()):
        fp32 = shares["fp32 (no TF32)"]
        sec["expectation_met"] = fp32 <= 0.02 and all(
            v >= 0.10 for k, v in shares.items() if k != "fp32 (no TF32)")
    if a.ncu and os.path.exists(a.ncu):
        sec["ncu"] = json.load(open(a.ncu))
    return sec


PARTS = {"step": part_step, "cost": part_cost, "memory": part_memory,
         "tensor-cores": part_tensor_cores}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("part", choices=[*PARTS, "all"])
    p.add_argument("--bin", required=True, help="folder with trainbench-engine and trainbench-step-truth")
    p.add_argument("--output", required=True, help="JSON; each part replaces its own section")
    p.add_argument("--device", default="cuda")
    p.add_argument("--python", default=sys.executable, help="a Python with torch")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--repeats", type=int, default=2, help="cost: runs per mode and batch")
    p.add_argument("--run-timeout", type=float, default=120)
    p.add_argument("--cost-model", choices=sorted(COST_CONFIGS), default="resnet18-cifar",
                   help="cost: the workload (fmnist-cnn for the CPU backend)")
    p.add_argument("--quick", action="store_true", help="the first configuration of each part only")
    p.add_argument("--batch-scale", type=float, default=1.0, help="CPU smoke runs only")
    p.add_argument("--ncu", default="", help="tensor-pipe-vs-ncu.json from scripts/gpu-check.sh ncu")
    a = p.parse_args()
    res = {}
    if os.path.exists(a.output):
        try:
            res = json.load(open(a.output))
        except ValueError:
            res = {}
    res.update({"benchmark": "truth", "device_kind": a.device})
    res["nvidia_smi"] = bench_proc.nvidia_smi()
    for name in (PARTS if a.part == "all" else [a.part]):
        t0 = time.time()
        sec = PARTS[name](a, res)
        sec["wall_s"] = time.time() - t0
        res[name.replace("-", "_")] = sec
        res["date"] = now()
        with open(a.output + ".tmp", "w") as f:
            json.dump(res, f, indent=1)
        os.replace(a.output + ".tmp", a.output)
    print("wrote", a.output)


if __name__ == "__main__":
    main()
