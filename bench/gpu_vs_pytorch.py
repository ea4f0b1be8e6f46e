#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Side by side on one GPU, in one call: Trainbench and PyTorch train the same
model on the same data shape at the same batch with the same optimizer and
tricks (bench/README.md has the table this fills).

  models      resnet18-cifar and resnet9, batch 512, CIFAR-shaped synthetic
              uint8 data (3x32x32); fmnist-cnn, batch 256, Fashion-MNIST
  recipes     baseline fp32 (no tricks, TF32 off on both sides); all-tricks in
              bf16 and fp16 (on Trainbench's side the GUI's "All tricks" preset,
              resources/presets/01_all_tricks.json, without channel padding:
              AMP, channels-last, cuDNN autotune, pinned + non-blocking + uint8
              uploads, set-to-none, multi-tensor SGD, fused pointwise, CUDA
              graphs, ...; PyTorch eager, torch.compile and
              torch.compile(mode="max-autotune"))
  figures     samples/s (median of the timed steps after a warm-up, CUDA
              events, fresh data), peak device memory, MFU against the matrix
              peak measured first in the same call (bench/matrix_peak.py),
              FLOPs per sample from the engine's count (`trainbench-engine work`) for both sides, and
              the ratios Trainbench / PyTorch eager and / best compiled.

Tasks run in priority order (the issue's target row first) within --budget
seconds; the JSON is rewritten after every task, so a cut-off call keeps
what finished, and the tasks not run are listed with the reason (--only runs
a subset in a later call). CPU smoke run here:

    bench/gpu_vs_pytorch.py --device cpu --engine build/bin/trainbench-engine \
        --steps 3 --warmup 2 --batch-scale 0.03 --output /tmp/gvp.json
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_proc  # noqa: E402
import engine_run  # noqa: E402

# (model, batch, data set) of the comparison
MODELS = [("resnet18-cifar", 512, "synthetic"), ("resnet9", 512, "synthetic"),
          ("fmnist-cnn", 256, "fashion-mnist")]

# Trainbench's side of each recipe (PyTorch's is torch_train_step.py's --recipe).
ENGINE_RECIPES = {
    "baseline": {"amp": "off", "conv_bias_before_bn": True, "grad_set_to_none": False,
                 "optimizer_foreach": False, "sync_every_step": True},
    # The "All tricks" preset, but no channel padding: PyTorch's side pads
    # none, and both sides must do the same arithmetic.
    "all-tricks": {**engine_run.preset_overrides(engine_run.ALL_TRICKS_PRESET),
                   "pad_channels_to": 0, "log_every": 50},
}
# (recipe, precision) rows; PyTorch variants per row.
ROWS = [("baseline", "fp32"), ("all-tricks", "bf16"), ("all-tricks", "fp16")]
TORCH_VARIANTS = {"baseline": ["eager"], "all-tricks": ["eager", "compile", "max-autotune"]}
COMPILE_ARG = {"eager": "none", "compile": "default", "max-autotune": "max-autotune"}

# Priority order of (model, recipe, precision, side) tasks: the target
# row (resnet18 all-tricks bf16) against eager and compile first, then every
# eager comparison, then max-autotune of the target row (minutes of
# autotuning), then the fp16 rows, then the other compiled variants.
def tasks():
    t = [("resnet18-cifar", "all-tricks", "bf16", s) for s in ("trainbench", "eager", "compile")]
    t += [("resnet18-cifar", "baseline", "fp32", s) for s in ("trainbench", "eager")]
    for model, _, _ in MODELS[1:]:
        t += [(model, "all-tricks", "bf16", s) for s in ("trainbench", "eager")]
        t += [(model, "baseline", "fp32", s) for s in ("trainbench", "eager")]
    t.append(("resnet18-cifar", "all-tricks", "bf16", "max-autotune"))
    for model, _, _ in MODELS:
        t += [(model, "all-tricks", "fp16", s) for s in ("trainbench", "eager")]
    for model, _, _ in MODELS[1:]:
        t.append((model, "all-tricks", "bf16", "compile"))
    for model, _, _ in MODELS:
        t.append((model, "all-tricks", "fp16", "compile"))
    for model, _, _ in MODELS[1:]:
        t.append((model, "all-tricks", "bf16", "max-autotune"))
    for model, _, _ in MODELS:
        t.append((model, "all-tricks", "fp16", "max-autotune"))
    return t


def task_id(t):
    return "/".join(t)


# (seconds a task needs to be started, seconds it may take at most): a task
# that does not fit in what is left is listed as not run and the next, maybe
# cheaper, one is tried; a compile that runs past its cap is reported as such.
TASK_TIME = {"trainbench": (30, 120), "eager": (30, 120), "compile": (90, 180),
             "max-autotune": (150, 300)}


def engine_config(model, batch, data, recipe, precision, steps, warmup, device, data_dir,
                  input_shape):
    c = {"name": f"gpu-vs-pytorch {model} b{batch} {recipe} {precision}", "device": device,
         "model": model, "batch_size": batch, "max_steps": warmup + steps, "seed": 0,
         "schedule": "constant", "lr": 0.05, "optimizer": "sgd", "momentum": 0.9,
         "weight_decay": 5e-4, "test_limit": 512}
    if data == "synthetic":
        c.update({"dataset": "synthetic", "synthetic_shape": input_shape,
                  "synthetic_size": batch * (warmup + steps + 1)})
    else:
        c.update({"dataset": "fashion-mnist", "data_dir": data_dir})
    c.update(ENGINE_RECIPES[recipe])
    if recipe != "baseline":
        c["amp"] = precision
    # PyTorch's batches are made before its loop; Trainbench's loader runs
    # with workers so its data wait stays small (it is reported).
    c["workers"] = 8
    return c


def torch_side(a, model, batch, data, recipe, precision, variant, timeout):
    cmd = [a.python, os.path.join(HERE, "torch_train_step.py"), "--model", model,
           "--batch-size", str(batch), "--steps", str(a.steps), "--warmup", str(a.warmup),
           "--recipe", recipe, "--precision", precision, "--compile", COMPILE_ARG[variant],
           "--device", a.device, "--data", data, "--data-dir", a.data_dir]
    t0 = time.time()
    try:
        proc = bench_proc.run(cmd, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"
                         + (" (compilation or autotuning not finished)" if variant != "eager" else "")}
    if proc.returncode != 0 or not proc.stdout.strip():
        return {"error": (proc.stderr.strip() or "no output")[-1500:], "exit": proc.returncode}
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    r["wall_s"] = time.time() - t0
    return r


def matrix_peak(a):
    if a.peak:
        return json.load(open(a.peak))
    cmd = [a.python, os.path.join(HERE, "matrix_peak.py"), "--device", a.device]
    if a.device != "cuda":
        cmd += ["--size", "256", "--reps", "3"]
    elif a.quick:
        cmd += ["--size", "4096", "--reps", "5"]
    try:
        proc = bench_proc.run(cmd, timeout=180)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 180 s"}
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-1000:]}
    return json.loads(proc.stdout)


def flops(a):
    """FLOPs per sample of every model as the engine counts them
    (`trainbench-engine work`, which bench_models.train_flops_per_sample reads too)."""
    proc = subprocess.run([a.engine, "work", "--json"], capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": "trainbench-engine work failed: " + proc.stderr.strip()[-500:]}
    return {name: {k: m[k] for k in ("forward", "train", "convention")}
            for name, m in json.loads(proc.stdout).items()}


def ok(r):
    return isinstance(r, dict) and "samples_per_s" in r and "error" not in r


def fill_row(row, peak, flops_per_sample):
    """MFU and ratios of one row from what ran so far."""
    prec = row["precision"]
    pk = peak.get(prec, {})
    tflops = pk.get("tflops") if isinstance(pk, dict) else None
    sides = {"trainbench": row.get("trainbench"), **row.get("pytorch", {})}
    row["mfu"] = {k: (v["samples_per_s"] * flops_per_sample / (tflops * 1e12))
                  for k, v in sides.items() if ok(v) and tflops and flops_per_sample}
    tb = row.get("trainbench")
    pt = row.get("pytorch", {})
    ratios = {}
    if ok(tb):
        if ok(pt.get("eager")):
            ratios["vs_eager"] = tb["samples_per_s"] / pt["eager"]["samples_per_s"]
        compiled = [pt[v] for v in ("compile", "max-autotune") if ok(pt.get(v))]
        if compiled:
            best = max(compiled, key=lambda r: r["samples_per_s"])
            ratios["vs_best_compiled"] = tb["samples_per_s"] / best["samples_per_s"]
            ratios["best_compiled"] = best.get("compile")
        ran = [v for v in pt.values() if ok(v)]
        if ran:
            best = max(ran, key=lambda r: r["samples_per_s"])
            ratios["vs_best_pytorch"] = tb["samples_per_s"] / best["samples_per_s"]
            if tb.get("peak_allocated_bytes") and best.get("peak_allocated_bytes"):
                ratios["peak_memory_vs_best_pytorch"] = (tb["peak_allocated_bytes"] /
                                                         best["peak_allocated_bytes"])
        if ok(pt.get("eager")) and tb.get("peak_allocated_bytes") and \
                pt["eager"].get("peak_allocated_bytes"):
            ratios["peak_memory_vs_eager"] = (tb["peak_allocated_bytes"] /
                                              pt["eager"]["peak_allocated_bytes"])
    row["ratios"] = ratios


def targets(rows):
    """The issue's targets on all-tricks resnet18-cifar bf16."""
    row = next((r for r in rows if r["model"] == "resnet18-cifar" and r["recipe"] == "all-tricks"
                and r["precision"] == "bf16"), None)
    if row is None:
        return {}
    rt, mfu = row.get("ratios", {}), row.get("mfu", {})
    pt = row.get("pytorch", {})
    t = {}

    def check(name, value, target, higher=True):
        t[name] = {"value": value, "target": target,
                   "met": None if value is None else (value >= target if higher else value <= target)}
    check("samples_per_s_vs_eager", rt.get("vs_eager"), 1.25)
    check("samples_per_s_vs_best_compiled", rt.get("vs_best_compiled"), 1.0)
    mem = None
    ran = [v for v in pt.values() if ok(v) and v.get("peak_allocated_bytes")]
    tb = row.get("trainbench")
    if ok(tb) and tb.get("peak_allocated_bytes") and ran:
        mem = tb["peak_allocated_bytes"] / min(v["peak_allocated_bytes"] for v in ran)
    check("peak_memory_vs_lowest_pytorch", mem, 1.0, higher=False)
    check("mfu", mfu.get("trainbench"), 0.35)
    return t


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--engine", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--python", default=sys.executable, help="a Python with torch")
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--budget", type=float, default=1e9, help="seconds for all tasks")
    p.add_argument("--only", default="", help="regex on task ids model/recipe/precision/side")
    p.add_argument("--batch-scale", type=float, default=1.0,
                   help="multiplies every batch (CPU smoke runs only)")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--peak", default="", help="a matrix_peak.py JSON measured in this call")
    p.add_argument("--merge", default="",
                   help="an earlier call's JSON: its finished tasks are kept, not run again")
    p.add_argument("--quick", action="store_true",
                   help="fmnist-cnn baseline and all-tricks bf16, eager, 30 steps (gpu-check.sh run)")
    p.add_argument("--skip-ladder", action="store_true",
                   help="accepted for scripts/gpu-check.sh run; the ladder is bench/ladder.py")
    a = p.parse_args()
    if a.quick:
        a.steps, a.warmup = min(a.steps, 30), min(a.warmup, 10)
        a.only = a.only or r"^fmnist-cnn/(baseline/fp32|all-tricks/bf16)/(trainbench|eager)$"
    t_start = time.time()
    deadline = t_start + a.budget

    result = {"benchmark": "gpu-vs-pytorch", "date": datetime.datetime.now(
        datetime.timezone.utc).isoformat(timespec="seconds"), "device_kind": a.device,
        "steps": a.steps, "warmup": a.warmup, "batch_scale": a.batch_scale}
    result["nvidia_smi"] = bench_proc.nvidia_smi()
    result["matrix_peak"] = peak = matrix_peak(a)
    result["flops_per_sample"] = fl = flops(a)
    print(json.dumps({"matrix_peak_tflops": {k: v.get("tflops") for k, v in peak.items()
                                             if isinstance(v, dict)}}), flush=True)

    input_shapes = engine_run.model_input_shapes(a.engine)  # the engine's model registry
    rows = {}
    for model, batch, data in MODELS:
        b = max(2, int(round(batch * a.batch_scale)))
        for recipe, prec in ROWS:
            rows[(model, recipe, prec)] = {"model": model, "batch_size": b, "data": data,
                                           "recipe": recipe, "precision": prec, "pytorch": {}}
    result["rows"] = list(rows.values())
    result["not_run"] = []
    done = set()
    earlier = {}
    if a.merge:
        if not os.path.exists(a.merge):
            print(json.dumps({"merge": f"{a.merge}: no such file; every task runs"}), flush=True)
        else:
            earlier = json.load(open(a.merge))
            # Only figures of the same card, driver and settings: a later call
            # may land on another kind of machine (an H200 after an H100), and
            # a ratio across two cards would mean nothing.
            same = {k: (earlier.get(k), result.get(k)) for k in
                    ("nvidia_smi", "device_kind", "steps", "warmup", "batch_scale")}
            differ = {k: v for k, v in same.items() if v[0] != v[1]}
            if differ:
                print(json.dumps({"merge": f"{a.merge} not merged: measured under other "
                                           f"conditions {differ}; every task runs"}), flush=True)
                result["not_merged"] = {"file": a.merge, "differs": differ}
                earlier = {}
    if earlier:
        # Rows of an earlier call (same device, same script): tasks that ran
        # without error stay, the rest run again here.
        result["merged_from"] = {"file": a.merge, "date": earlier.get("date"),
                                 "nvidia_smi": earlier.get("nvidia_smi")}
        for old in earlier.get("rows", []):
            key = (old["model"], old["recipe"], old["precision"])
            if key not in rows:
                continue
            if ok(old.get("trainbench")):
                rows[key]["trainbench"] = old["trainbench"]
                done.add(key + ("trainbench",))
            for side, r in old.get("pytorch", {}).items():
                if ok(r):
                    rows[key]["pytorch"][side] = r
                    done.add(key + (side,))
    db = os.path.join(tempfile.mkdtemp(prefix="gvp-"), "runs.db")

    def save():
        for row in rows.values():
            fill_row(row, peak, fl.get(row["model"], {}).get("train"))
        result["targets"] = targets(list(rows.values()))
        # Versions: the engine's run record (driver, runtime, cuDNN, cuBLAS) and PyTorch's.
        for row in rows.values():
            tb = row.get("trainbench") or {}
            if tb.get("environment") and "environment" not in result:
                result["environment"] = tb["environment"]
            for r in row["pytorch"].values():
                if r.get("version") and "pytorch" not in result:
                    result["pytorch"] = {k: r.get(k) for k in ("version", "cuda", "cudnn", "device")}
        result["wall_s"] = time.time() - t_start
        tmp = a.output + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1)
        os.replace(tmp, a.output)

    save()
    for t in tasks():
        model, recipe, prec, side = t
        if (a.only and not re.search(a.only, task_id(t))) or t in done:
            continue
        left = deadline - time.time()
        need, cap = TASK_TIME[side]
        if left < need:
            result["not_run"].append({"task": task_id(t), "why": f"budget ({left:.0f} s left, "
                                                                f"needs {need} s)"})
            continue
        row = rows[(model, recipe, prec)]
        timeout = min(cap, left)
        t0 = time.time()
        if side == "trainbench":
            cfg = engine_config(model, row["batch_size"], row["data"], recipe, prec, a.steps,
                                a.warmup, a.device, a.data_dir, input_shapes[model])
            r = engine_run.run(a.engine, db, cfg, a.warmup, timeout=timeout)
            r["wall_s"] = time.time() - t0
            r["config"] = cfg
            row["trainbench"] = r
        else:
            r = torch_side(a, model, row["batch_size"], row["data"], recipe, prec, side, timeout)
            row["pytorch"][side] = r
        print(json.dumps({"task": task_id(t), "samples_per_s": r.get("samples_per_s"),
                          "peak_allocated_bytes": r.get("peak_allocated_bytes"),
                          **({"conv_workspace_max_bytes": r["conv_workspace_max_bytes"]}
                             if "conv_workspace_max_bytes" in r else {}),
                          "wall_s": round(time.time() - t0, 1),
                          "error": (r.get("error") or "")[:200] or None,
                          **({"tricks_not_applied": sorted(r["tricks_not_applied"])}
                             if r.get("tricks_not_applied") else {})}), flush=True)
        save()
    save()
    for row in rows.values():
        if row.get("ratios"):
            print(json.dumps({"row": f"{row['model']} {row['recipe']} {row['precision']}",
                              "ratios": row["ratios"],
                              "mfu_trainbench": row["mfu"].get("trainbench")}), flush=True)
    print(json.dumps({"targets": {k: [v["value"], v["met"]] for k, v in result["targets"].items()}}))
    print("wrote", a.output)


if __name__ == "__main__":
    main()
