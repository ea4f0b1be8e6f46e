#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""The engine's CPU time (user + sys of a whole fmnist-cnn run) with the CPU
convolutions on auto's path against blas (TRAINBENCH_CPU_CONV), alternating.
With OMP_WAIT_POLICY=passive an idle OpenMP thread sleeps, so the CPU time
counts work, not waiting, and other processes on a shared machine delay a run
without adding to it: an A/B of the work a path saves that holds under load,
where wall-clock step times do not. Prints one JSON object. Usage:

    bench/cpu_conv_cpu_time.py --engine build/bin/trainbench-engine --batch 128 --steps 100 --repeats 3
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import tempfile


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--engine", required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    cpu_s = {"auto": [], "blas": []}
    loads = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.repeats):
            for mode in cpu_s:
                loads.append(os.getloadavg()[0])
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                subprocess.run([a.engine, "run", "--db", os.path.join(tmp, f"{mode}-{r}.db"),
                                "--quiet", "--device", "cpu", "--batch-size", str(a.batch),
                                "--steps", str(a.steps), "--test-limit", "100", "--seed", "0",
                                "--name", mode],
                               check=True, capture_output=True,
                               env=dict(os.environ, TRAINBENCH_CPU_CONV=mode,
                                        OMP_WAIT_POLICY="passive"))
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu_s[mode].append((after.ru_utime - before.ru_utime) +
                                   (after.ru_stime - before.ru_stime))
    med = {k: statistics.median(v) for k, v in cpu_s.items()}
    print(json.dumps({"model": "fmnist-cnn", "batch_size": a.batch, "steps": a.steps,
                      "cpu_s": cpu_s, "median_cpu_s": med,
                      "auto_saves": 1.0 - med["auto"] / med["blas"],
                      "load_average_before_each_run": loads}, indent=2))


if __name__ == "__main__":
    main()
