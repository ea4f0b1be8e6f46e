# SPDX-License-Identifier: GPL-3.0-or-later
"""One Trainbench run from the benchmarks (gpu_vs_pytorch.py, ladder.py): runs
`trainbench-engine run` on a configuration, reads the run back with `export`,
and reduces it to the figures the benchmarks compare: the median step time
over the steps after the warm-up (CUDA events on a GPU), samples/s, the data
wait, peak device memory and which tricks were applied."""
import json
import os
import statistics
import subprocess
import tempfile

import bench_proc

PRESETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "resources", "presets")
# "Every speed-up trick on", declared once as the GUI's preset; the benchmarks
# start from its overrides and say where they differ.
ALL_TRICKS_PRESET = "01_all_tricks.json"


def preset_overrides(file_name):
    """The keys a preset (resources/presets/<file_name>) sets."""
    with open(os.path.join(PRESETS, file_name)) as f:
        return json.load(f)["overrides"]


def model_input_shapes(engine):
    """{model: [C, H, W] it is made for}, from the engine's model registry
    (engine/nn/models.cpp, through `config --schema`)."""
    schema = json.loads(subprocess.run([engine, "config", "--schema"], check=True,
                                       capture_output=True, text=True).stdout)
    return {m["name"]: m["input_shape"] for m in schema["models"]}


def run(engine, db, config, warmup, timeout=None, env=None):
    """Returns a dict of figures, or {"error": ...} (never raises for a failed run)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(config, f)
    try:
        proc = bench_proc.run([engine, "run", "--db", db, "--quiet", "--config", f.name],
                              timeout=timeout, env=dict(os.environ, **(env or {})))
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    finally:
        os.unlink(f.name)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip() or proc.stdout.strip())[-1500:],
                "exit": proc.returncode}
    runs = json.loads(subprocess.run([engine, "list", "--db", db, "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    run_id = max(r["id"] for r in runs)
    data = json.loads(subprocess.run([engine, "export", str(run_id), "--db", db, "--format",
                                      "json"], check=True, capture_output=True, text=True).stdout)
    return reduce_run(data, config, warmup, run_id)


def series(data, name, warmup):
    return {s: v for s, _, v in data["step_series"].get(name, []) if s > warmup}


def reduce_run(data, config, warmup, run_id=None):
    step = series(data, "step_time_ms", warmup)
    if not step:
        return {"error": f"no timed steps after the {warmup} warm-up steps", "run_id": run_id}
    wait = series(data, "data_wait_ms", warmup)
    batch = config["batch_size"] * config.get("accumulation_steps", 1)
    med = statistics.median(step.values())
    ordered = sorted(step.values())
    compute = statistics.median(v - wait.get(s, 0.0) for s, v in step.items())
    summary = data.get("summary", {})
    out = {"run_id": run_id, "steps": len(step), "warmup": warmup, "batch_size": batch,
           "median_step_ms": med, "p10_step_ms": ordered[len(ordered) // 10],
           "p90_step_ms": ordered[(9 * len(ordered)) // 10],
           "samples_per_s": batch * 1e3 / med,
           "median_data_wait_ms": statistics.median(wait.values()) if wait else None,
           "samples_per_s_without_data_wait": batch * 1e3 / compute if compute > 0 else None,
           "peak_allocated_bytes": summary.get("gpu_mem_peak_bytes"),
           "summary": {k: summary.get(k) for k in ("median_step_time_ms", "peak_memory_bytes",
                                                   "peak_memory_kind", "cuda_graph_captures",
                                                   "cuda_graph_replays", "final_train_loss")},
           "environment": data.get("environment", {}),
           "tricks_applied": {k: v.get("applied") for k, v in data.get("tricks", {}).items()
                              if v.get("changed")},
           "tricks_not_applied": {k: v.get("reason", "") for k, v in data.get("tricks", {}).items()
                                  if v.get("changed") and not v.get("applied")}}
    # The largest cuDNN workspace: how much of the peak a workspace can be
    # (from the activations' pool by default, TRAINBENCH_CUDA_SCRATCH).
    ws = conv_workspaces(data.get("environment", {}))
    if ws:
        out["conv_workspace_max_bytes"] = max(ws.values())
    reserved = series(data, "gpu_mem_reserved_bytes", 0)
    if reserved:
        out["peak_reserved_bytes"] = max(reserved.values())
    for k in ("h2d_ms", "tensor_core_share", "kernels_per_step", "tensor_pipe_active_pct"):
        v = series(data, k, warmup)
        if v:
            out["median_" + k] = statistics.median(v.values())
    loss = summary.get("final_train_loss")
    if isinstance(loss, (int, float)) and not (loss == loss and abs(loss) < 1e6):
        out["error"] = f"train loss is not finite: {loss}"
    return out


def conv_workspaces(environment):
    """{plan key: workspace bytes} of every convolution plan the run recorded
    (environment.kernel_paths.convolution on the GPU: ConvPlanCache::describe)."""
    plans = (environment.get("kernel_paths") or {}).get("convolution") or {}
    return {k: r["workspace_bytes"] for k, r in plans.items()
            if isinstance(r, dict) and isinstance(r.get("workspace_bytes"), int)}
