#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Writes one stored run as a committed result: configuration, environment,
summary and per-epoch metrics, with the machine and the date.

    bench/record_run.py --engine build/bin/trainbench-engine --db runs.db --run 2 \
        --output bench/results/cpu-fmnist-cnn-accuracy.json
"""
import argparse
import datetime
import json
import os
import platform
import subprocess


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--engine", required=True)
    p.add_argument("--db", required=True)
    p.add_argument("--run", type=int, required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--what", default="", help="one line saying what the result shows")
    a = p.parse_args()
    run = json.loads(subprocess.run([a.engine, "export", str(a.run), "--db", a.db, "--format",
                                     "json"], check=True, capture_output=True, text=True).stdout)
    epochs = {}
    for name, points in run["epoch_series"].items():
        for epoch, step, _, value in points:
            epochs.setdefault(epoch, {"epoch": epoch + 1, "step": step})[name] = value
    result = {
        "what": a.what,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"kernel": platform.release(), "cores": os.cpu_count()},
        "run": {k: run[k] for k in ("name", "status", "started_at", "finished_at")},
        "environment": run["environment"],
        "config": run["config"],
        "summary": run["summary"],
        "epochs": [epochs[e] for e in sorted(epochs)],
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.output)), exist_ok=True)
    with open(a.output, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
