#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""The optimization ladder of seed article 004 on the GPU with Trainbench's
engine: a baseline run, then the same run with one trick more per rung, each
rung keeping everything above it. Writes one JSON (bench/tables.py turns it
into bench/README.md's table: batch, memory, step time, samples/s, speed-up).

RUNGS below is the one list of rungs. Until the engine's own `ladder`
command lands, each rung is a separate `trainbench-engine run`; then this
script hands RUNGS to that command instead and keeps its output format.

    bench/ladder.py --engine build/bin/trainbench-engine --output gpu-ladder.json
    bench/ladder.py --device cpu --steps 3 --warmup 2 --batch-scale 0.03 ...   # smoke
"""
import argparse
import datetime
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_proc  # noqa: E402
import engine_run  # noqa: E402

MODEL, SHAPE = "resnet18-cifar", [3, 32, 32]
# The baseline: fp32, batch 128, data made on the training thread, pageable
# fp32 uploads, NCHW, cuDNN heuristics, per-tensor SGD, eager steps. Every
# other key keeps the engine's default.
BASELINE = {"model": MODEL, "dataset": "synthetic", "synthetic_shape": SHAPE, "batch_size": 128,
            "amp": "off", "workers": 0, "pin_memory": False, "non_blocking": False,
            "h2d_uint8": False, "channels_last": False, "cudnn_benchmark": False,
            "fuse_pointwise": False, "optimizer_foreach": False, "cuda_graphs": False,
            "schedule": "constant", "lr": 0.05, "seed": 0, "test_limit": 512}
# (rung, keys it adds); cumulative, in seed 004's order extended to the end.
RUNGS = [
    ("baseline", {}),
    ("+ AMP (bf16)", {"amp": "bf16"}),
    ("+ bigger batch (512)", {"batch_size": 512}),
    ("+ uint8 H2D", {"h2d_uint8": True}),
    ("+ loader workers (8)", {"workers": 8}),
    ("+ pinned memory, non-blocking copies", {"pin_memory": True, "non_blocking": True}),
    ("+ channels-last", {"channels_last": True}),
    ("+ cuDNN autotune", {"cudnn_benchmark": True}),
    ("+ fused pointwise", {"fuse_pointwise": True}),
    ("+ multi-tensor optimizer", {"optimizer_foreach": True}),
    ("+ CUDA graphs", {"cuda_graphs": True}),
]


def rung_configs(device, steps, warmup, batch_scale=1.0):
    """(rung, added keys, full configuration) per rung."""
    cfg, out = dict(BASELINE, device=device), []
    for name, add in RUNGS:
        cfg = {**cfg, **add}
        c = dict(cfg, name=f"ladder: {name}", max_steps=warmup + steps)
        c["batch_size"] = max(2, int(round(cfg["batch_size"] * batch_scale)))
        c["synthetic_size"] = c["batch_size"] * (warmup + steps + 1)
        out.append((name, add, c))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--engine", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--budget", type=float, default=1e9, help="seconds for all rungs")
    p.add_argument("--batch-scale", type=float, default=1.0, help="CPU smoke runs only")
    a = p.parse_args()
    t_start = time.time()
    result = {"benchmark": "ladder", "seed": "004", "model": MODEL, "data": "synthetic uint8 3x32x32",
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "device_kind": a.device, "steps": a.steps, "warmup": a.warmup,
              "driver": "separate trainbench-engine runs (bench/ladder.py)", "rungs": []}
    result["nvidia_smi"] = bench_proc.nvidia_smi()
    db = os.path.join(tempfile.mkdtemp(prefix="ladder-"), "runs.db")
    base = None
    for name, add, cfg in rung_configs(a.device, a.steps, a.warmup, a.batch_scale):
        left = t_start + a.budget - time.time()
        if left < 15:
            result["rungs"].append({"rung": name, "added": add, "not_run": f"budget ({left:.0f} s left)"})
            continue
        t0 = time.time()
        r = engine_run.run(a.engine, db, cfg, a.warmup, timeout=min(150, left))
        row = {"rung": name, "added": add, "batch_size": cfg["batch_size"],
               "wall_s": time.time() - t0, **r}
        if "environment" in row and "environment" not in result:
            result["environment"] = row["environment"]
        row.pop("environment", None)
        if "samples_per_s" in row and "error" not in row:
            base = base or row
            row["speedup_vs_baseline"] = row["samples_per_s"] / base["samples_per_s"]
        result["rungs"].append(row)
        line = {k: row.get(k) for k in ("rung", "batch_size", "median_step_ms", "samples_per_s",
                                         "speedup_vs_baseline", "peak_allocated_bytes", "error")}
        not_applied = sorted(k for k in add if k in row.get("tricks_not_applied", {}))
        if not_applied:  # the rung's own tricks: on a GPU every one must apply
            line["not_applied"] = not_applied
        print(json.dumps(line), flush=True)
        result["wall_s"] = time.time() - t_start
        with open(a.output + ".tmp", "w") as f:
            json.dump(result, f, indent=1)
        os.replace(a.output + ".tmp", a.output)
    result["wall_s"] = time.time() - t_start
    with open(a.output, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", a.output)


if __name__ == "__main__":
    main()
