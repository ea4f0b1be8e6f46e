#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the default step-time measurement costs: the same short run with the
phase breakdown on and off (TRAINBENCH_MEASURE=off keeps only step_time_ms),
alternating on/off to share machine noise, compared by the median of the
per-run median step times. The target is at most 2 % of step time.

    bench/measurement_cost.py --engine build/bin/trainbench-engine \
        --output bench/results/measurement-cost-cpu-fmnist-cnn.json

CPU only for now; on the CUDA backend the same script measures the host
timers until CudaStepTimer is wired in.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import tempfile


def one_run(engine, db, args, measure):
    env = dict(os.environ, TRAINBENCH_MEASURE="on" if measure else "off")
    cmd = [engine, "--db", db, "run", "--events", "jsonl", "--dataset", "synthetic",
           "--set", "synthetic_shape=[1,28,28]", "--set", f"synthetic_size={args.batch * 8}",
           "--model", args.model, "--device", args.device, "--steps", str(args.steps),
           "-b", str(args.batch), "--test-limit", str(args.batch), "--seed", "1"]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    steps, summary = [], None
    for line in out.splitlines():
        e = json.loads(line)
        if e["type"] == "step":
            steps.append(e["metrics"])
        elif e["type"] == "finished":
            summary = e["summary"]
    # The breakdown is present exactly when measurement is on.
    assert all(("forward_ms" in m) == measure for m in steps), "measure switch not honoured"
    warm = [m["step_time_ms"] for m in steps[args.warmup:]]
    return statistics.median(warm), summary


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--engine", required=True)
    p.add_argument("--output", default="")
    p.add_argument("--model", default="fmnist-cnn")
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()

    on, off = [], []
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "runs.db")
        for _ in range(a.repeats):
            off.append(one_run(a.engine, db, a, False)[0])
            ms, summary = one_run(a.engine, db, a, True)
            on.append(ms)
    med_on, med_off = statistics.median(on), statistics.median(off)
    cost_pct = 100.0 * (med_on - med_off) / med_off
    result = {
        "what": "step-time cost of the default measurement (phase breakdown) vs measurement off",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "device": summary.get("device") if summary else a.device,
        "model": a.model, "batch_size": a.batch, "steps": a.steps, "warmup_steps": a.warmup,
        "repeats": a.repeats,
        "median_step_ms_measure_on": on, "median_step_ms_measure_off": off,
        "median_on_ms": med_on, "median_off_ms": med_off,
        "cost_pct": cost_pct, "target_pct": 2.0, "within_target": cost_pct <= 2.0,
        "note": "negative cost is noise: the two are indistinguishable at this run length",
    }
    text = json.dumps(result, indent=2)
    print(text)
    if a.output:
        with open(a.output, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
