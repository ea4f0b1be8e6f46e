#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Side by side on the lent GPU: Trainbench's CUDA backend and PyTorch train the
same model at the same batch with the same tricks; then the optimization ladder
(the baseline, then one trick more per run) for Trainbench alone. Writes one
JSON with the device, driver, versions and date. Run by scripts/gpu-check.sh
bench; by hand:

    bench/gpu_vs_pytorch.py --engine build-cuda/bin/trainbench-engine \
        --output bench/results/gpu-vs-pytorch.json [--quick]

Both sides are timed on the device (CUDA events): Trainbench's step_time_ms
minus its data wait (the loader; PyTorch's inputs are ready-made), PyTorch's
copy + forward + backward + optimizer. Medians over the timed steps.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# (name, model, C,H,W, batch, tricks shared by both sides)
PAIRS = [
    ("fmnist-cnn b64 fp32", "fmnist-cnn", (1, 28, 28), 64, {}),
    ("fmnist-cnn b256 fp32", "fmnist-cnn", (1, 28, 28), 256, {}),
    ("resnet18 b256 fp32", "resnet18-cifar", (3, 32, 32), 256, {}),
    ("resnet18 b256 bf16 channels-last", "resnet18-cifar", (3, 32, 32), 256,
     {"amp": "bf16", "channels_last": True}),
    ("resnet18 b256 fp16 channels-last", "resnet18-cifar", (3, 32, 32), 256,
     {"amp": "fp16", "channels_last": True}),
]

# Cumulative: each rung adds its tricks to everything above it.
LADDER = [
    ("baseline", {"grad_set_to_none": False}),
    ("+ data-loader workers", {"workers": 4}),
    ("+ pinned memory, non-blocking copies", {"pin_memory": True, "non_blocking": True}),
    ("+ uint8 host-to-device", {"h2d_uint8": True}),
    ("+ grad set to none", {"grad_set_to_none": True}),
    ("+ cuDNN autotuning", {"cudnn_benchmark": True}),
    ("+ no conv bias before BN", {"conv_bias_before_bn": False}),
    ("+ multi-tensor optimizer", {"optimizer_foreach": True}),
    ("+ fused pointwise", {"fuse_pointwise": True}),
    ("+ mixed precision bf16", {"amp": "bf16"}),
    ("+ channels-last", {"channels_last": True}),
    ("+ no per-step sync", {"sync_every_step": False}),
    ("+ batch 512 (linear lr scaling, warm-up)",
     {"batch_size": 512, "lr_scaling": "linear", "base_batch_size": 256, "warmup_steps": 20}),
]


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def trainbench(engine, db, name, model, chw, batch, tricks, steps, warmup, device="cuda"):
    config = {"name": name, "device": device, "model": model, "dataset": "synthetic",
              "synthetic_shape": list(chw), "synthetic_size": (steps + warmup + 2) * max(batch, 512),
              "test_limit": 512, "max_steps": steps + warmup, "batch_size": batch, "seed": 0,
              "workers": 4}
    config.update(tricks)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(config, f)
    try:
        proc = subprocess.run([engine, "run", "--db", db, "--quiet", "--config", f.name],
                              capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if proc.returncode != 0:
        return {"framework": "trainbench", "name": name, "error": proc.stderr.strip()[-2000:]}
    run_id = max(r["id"] for r in json.loads(sh([engine, "list", "--db", db, "--json"])))
    data = json.loads(sh([engine, "export", str(run_id), "--db", db, "--format", "json"]))
    series = data["step_series"]
    step = {s: v for s, _, v in series["step_time_ms"]}
    wait = {s: v for s, _, v in series.get("data_wait_ms", [])}
    timed = [s for s in step if s > warmup]
    compute = statistics.median(step[s] - wait.get(s, 0.0) for s in timed)
    out = {"framework": "trainbench", "name": name, "run_id": run_id, "model": model,
           "batch_size": config["batch_size"], "tricks": tricks, "steps": len(timed),
           "median_step_ms": compute, "median_step_ms_with_data": statistics.median(
               step[s] for s in timed),
           "samples_per_s": config["batch_size"] * 1e3 / compute,
           "peak_allocated_bytes": data["summary"].get("gpu_mem_peak_bytes"),
           "environment": data.get("environment", {}),
           "tricks_applied": {k: v.get("applied") for k, v in data.get("tricks", {}).items()
                              if v.get("changed")}}
    for k in ("tensor_core_share", "kernels_per_step", "h2d_ms", "loss_scale"):
        vals = [v for s, _, v in series.get(k, []) if s > warmup]
        if vals:
            out["median_" + k] = statistics.median(vals)
    return out


def pytorch(python, model, chw, batch, tricks, steps, warmup):
    cmd = [python, os.path.join(HERE, "torch_train_step.py"), "--model", model, "--shape",
           ",".join(map(str, chw)), "--batch-size", str(batch), "--steps", str(steps), "--warmup",
           str(warmup), "--amp", tricks.get("amp", "off")]
    if tricks.get("channels_last"):
        cmd.append("--channels-last")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"framework": "pytorch", "error": proc.stderr.strip()[-2000:]}
    return json.loads(proc.stdout)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--engine", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="fewer steps, first pairs only")
    p.add_argument("--skip-ladder", action="store_true")
    p.add_argument("--device", default="cuda",
                   help="Trainbench's device; anything but cuda skips PyTorch (a smoke test)")
    a = p.parse_args()
    steps, warmup = (30, 10) if a.quick else (a.steps, a.warmup)
    db = tempfile.mktemp(suffix=".db")
    result = {"benchmark": "gpu-vs-pytorch", "date": datetime.datetime.now(
        datetime.timezone.utc).isoformat(timespec="seconds"), "steps": steps, "warmup": warmup}
    try:
        result["nvidia_smi"] = sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                   "--format=csv,noheader"]).strip()
    except (OSError, subprocess.CalledProcessError) as e:
        result["nvidia_smi"] = f"unavailable: {e}"
    pairs = []
    for name, model, chw, batch, tricks in (PAIRS[:2] if a.quick else PAIRS):
        tb = trainbench(a.engine, db, name, model, chw, batch, tricks, steps, warmup, a.device)
        pt = (pytorch(a.python, model, chw, batch, tricks, steps, warmup) if a.device == "cuda"
              else {"framework": "pytorch", "error": "skipped: not a cuda run"})
        pair = {"name": name, "trainbench": tb, "pytorch": pt}
        if "median_step_ms" in tb and "median_step_ms" in pt:
            pair["trainbench_speedup_vs_pytorch"] = pt["median_step_ms"] / tb["median_step_ms"]
        print(json.dumps({k: pair.get(k) for k in ("name", "trainbench_speedup_vs_pytorch")}),
              flush=True)
        pairs.append(pair)
    result["pairs"] = pairs
    if not a.skip_ladder:
        ladder, tricks = [], {}
        for rung, add in LADDER:
            tricks = {**tricks, **add}
            batch = tricks.get("batch_size", 256)
            r = trainbench(a.engine, db, "ladder: " + rung, "resnet18-cifar", (3, 32, 32), batch,
                           {k: v for k, v in tricks.items() if k != "batch_size"}, steps, warmup,
                           a.device)
            r["rung"] = rung
            if ladder and "median_step_ms" in r and "median_step_ms" in ladder[0]:
                r["speedup_vs_baseline"] = (r["samples_per_s"] / ladder[0]["samples_per_s"])
            print(json.dumps({k: r.get(k) for k in ("rung", "median_step_ms", "samples_per_s",
                                                     "speedup_vs_baseline", "error")}), flush=True)
            ladder.append(r)
        result["ladder"] = ladder
    if pairs and "environment" in pairs[0]["trainbench"]:
        result["environment"] = pairs[0]["trainbench"]["environment"]
    with open(a.output, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", a.output)


if __name__ == "__main__":
    main()
