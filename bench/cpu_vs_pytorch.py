#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Trains fmnist-cnn for the same number of steps in Trainbench (CPU backend)
and in PyTorch (CPU), several batch sizes, and writes one result JSON with the
machine, versions and date. Usage:

    bench/cpu_vs_pytorch.py --engine build/bin/trainbench-engine \
        --output bench/results/cpu-fmnist-cnn.json
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def trainbench(engine, batch, steps, warmup, threads, db):
    run = subprocess.run(
        [engine, "run", "--db", db, "--quiet", "--device", "cpu", "--batch-size", str(batch),
         "--steps", str(warmup + steps), "--test-limit", "1000", "--seed", "0",
         "--name", f"bench b{batch}"],
        check=True, capture_output=True, text=True,
        env=dict(os.environ, OPENBLAS_NUM_THREADS=str(threads)))
    runs = json.loads(subprocess.run([engine, "list", "--db", db, "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    run_id = max(r["id"] for r in runs)
    data = json.loads(subprocess.run([engine, "export", str(run_id), "--db", db, "--format", "json"],
                                     check=True, capture_output=True, text=True).stdout)
    step = {s: v for s, _, v in data["step_series"]["step_time_ms"]}
    wait = {s: v for s, _, v in data["step_series"]["data_wait_ms"]}
    timed = [s for s in step if s > warmup]
    compute = statistics.median(step[s] - wait[s] for s in timed)
    total = statistics.median(step[s] for s in timed)
    return {"framework": "trainbench", "version": data["environment"].get("engine_version"),
            "run_id": run_id, "batch_size": batch, "steps": steps,
            "median_step_ms": compute, "median_step_ms_with_data": total,
            "samples_per_s": batch * 1e3 / compute,
            "final_test_accuracy": data["summary"].get("final_test_accuracy")}


def pytorch(batch, steps, warmup, threads, python):
    out = subprocess.run([python, os.path.join(HERE, "torch_fmnist_cnn.py"), "--batch-size",
                          str(batch), "--steps", str(steps), "--warmup", str(warmup), "--threads",
                          str(threads)], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--engine", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--batches", default="64,256")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--python", default="/usr/bin/python3", help="a Python with torch")
    a = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "bench.db")
        for b in [int(x) for x in a.batches.split(",")]:
            tb = trainbench(a.engine, b, a.steps, a.warmup, a.threads, db)
            pt = pytorch(b, a.steps, a.warmup, a.threads, a.python)
            rows.append({"batch_size": b, "trainbench": tb, "pytorch": pt,
                         "speedup_vs_pytorch": pt["median_step_ms"] / tb["median_step_ms"]})
            print(f"batch {b}: trainbench {tb['median_step_ms']:.2f} ms/step, "
                  f"pytorch {pt['median_step_ms']:.2f} ms/step, "
                  f"ratio {rows[-1]['speedup_vs_pytorch']:.2f}x", file=sys.stderr)
    torch_version = rows[0]["pytorch"]["version"] if rows else None
    result = {
        "benchmark": "fmnist-cnn training step on the CPU, Trainbench vs PyTorch",
        "what": "median over timed steps of forward+backward+optimizer (data loading excluded on "
                "both sides; Trainbench's time with its own data loading is also given)",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": {"cpu": cpu_model(), "cores": os.cpu_count(), "threads_used": a.threads,
                   "kernel": platform.release()},
        "versions": {"pytorch": torch_version, "python": platform.python_version()},
        "steps": a.steps, "warmup_steps": a.warmup, "results": rows}
    os.makedirs(os.path.dirname(os.path.abspath(a.output)), exist_ok=True)
    with open(a.output, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
