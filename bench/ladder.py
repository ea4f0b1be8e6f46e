#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""The optimization ladder of seed article 004 on the GPU with Trainbench's
engine: a baseline run, then the same run with one trick more per rung, each
rung keeping everything above it. Writes one JSON (bench/tables.py turns it
into bench/README.md's table: batch, memory, step time, samples/s, speed-up).

The rungs, their titles and what each sets are the engine's
(engine/ladder/rungs.cpp, read through `trainbench-engine ladder
--list-rungs --json -` on this script's baseline); each rung is a separate
`trainbench-engine run`, cumulative, in the engine's default order.

    bench/ladder.py --engine build/bin/trainbench-engine --output gpu-ladder.json
    bench/ladder.py --device cpu --steps 3 --warmup 2 --batch-scale 0.03 ...   # smoke
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_proc  # noqa: E402
import engine_run  # noqa: E402

MODEL = "resnet18-cifar"


def baseline(engine, device):
    """fp32, batch 128, a constant learning rate and every trick at the engine's
    default (off), on synthetic data of the model's input shape."""
    return {"model": MODEL, "dataset": "synthetic",
            "synthetic_shape": engine_run.model_input_shapes(engine)[MODEL], "batch_size": 128,
            "schedule": "constant", "test_limit": 512, "device": device}


def engine_rungs(engine, base):
    """The engine's rungs in its default order: (title, keys it sets on `base`)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(base, f)
    try:
        listed = json.loads(subprocess.run([engine, "ladder", "--list-rungs", "--config", f.name,
                                            "--json", "-"], check=True, capture_output=True,
                                           text=True).stdout)
    finally:
        os.unlink(f.name)
    by_id = {r["id"]: r for r in listed["rungs"]}
    return [(by_id[i]["title"], by_id[i]["sets"]) for i in listed["order"]]


def rung_configs(engine, device, steps, warmup, batch_scale=1.0):
    """(rung, added keys, full configuration) per rung, cumulative from the baseline."""
    cfg, out = baseline(engine, device), []
    for name, add in [("baseline", {})] + [("+ " + t, s) for t, s in engine_rungs(engine, cfg)]:
        cfg = {**cfg, **add}
        c = dict(cfg, name=f"ladder: {name}", max_steps=warmup + steps)
        for k in ("batch_size", "base_batch_size"):  # scaled alike: the lr scaling keeps its ratio
            if k in c:
                c[k] = max(2, int(round(cfg[k] * batch_scale)))
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
    configs = rung_configs(a.engine, a.device, a.steps, a.warmup, a.batch_scale)
    shape = "x".join(str(n) for n in configs[0][2]["synthetic_shape"])
    result = {"benchmark": "ladder", "seed": "004", "model": MODEL, "data": f"synthetic uint8 {shape}",
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "device_kind": a.device, "steps": a.steps, "warmup": a.warmup,
              "driver": "separate trainbench-engine runs (bench/ladder.py)", "rungs": []}
    result["nvidia_smi"] = bench_proc.nvidia_smi()
    db = os.path.join(tempfile.mkdtemp(prefix="ladder-"), "runs.db")
    base = None  # the first rung's row; without it no speed-up is stated
    for i, (name, add, cfg) in enumerate(configs):
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
            if i == 0:
                base = row
            # Against the baseline only: a later rung standing in for a failed
            # baseline would show 1.00x and shift every speed-up after it.
            if base is not None:
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
