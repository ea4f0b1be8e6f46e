#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Trains fmnist-cnn for the same number of steps in Trainbench (CPU backend)
and in PyTorch (CPU), several batch sizes, and writes one result JSON with the
machine (processor model and flags), the load average around each run,
versions, Trainbench's CPU convolution paths (the run's kernel_paths) and the
date. With --repeats N each batch size alternates the two N times and reports
the median of the runs' medians (every run is kept). Usage:

    bench/cpu_vs_pytorch.py --engine build/bin/trainbench-engine \
        --output bench/results/cpu-fmnist-cnn.json --batches 64,128 --repeats 3
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


def cpuinfo_field(name):
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.split(":", 1)[0].strip() == name:
                return line.split(":", 1)[1].strip()
    return None


def cpu_model():
    return cpuinfo_field("model name") or platform.processor()


# The flags that decide which kernels the libraries pick (OpenBLAS, oneDNN, PyTorch).
SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512dq", "avx512bw", "avx512vl",
              "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")


def cpu_flags():
    flags = set((cpuinfo_field("flags") or "").split())
    return [f for f in SIMD_FLAGS if f in flags]


def load_average():
    return os.getloadavg()[0]


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
    env = data["environment"]
    return {"framework": "trainbench", "version": env.get("engine_version"),
            "run_id": run_id, "batch_size": batch, "steps": steps,
            "onednn": env.get("onednn"), "cpu_conv_setting": os.environ.get("TRAINBENCH_CPU_CONV", "auto"),
            "kernel_paths": env.get("kernel_paths"),
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
    p.add_argument("--repeats", type=int, default=1,
                   help="runs of each framework per batch size, alternating; the result is the "
                        "median of the runs' medians")
    a = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "bench.db")
        for b in [int(x) for x in a.batches.split(",")]:
            tbs, pts = [], []
            for _ in range(a.repeats):
                load = load_average()
                tbs.append(trainbench(a.engine, b, a.steps, a.warmup, a.threads, db))
                tbs[-1]["load_average_before"] = load
                load = load_average()
                pts.append(pytorch(b, a.steps, a.warmup, a.threads, a.python))
                pts[-1]["load_average_before"] = load
                print(f"batch {b}: trainbench {tbs[-1]['median_step_ms']:.2f} ms/step, "
                      f"pytorch {pts[-1]['median_step_ms']:.2f} ms/step (load {load:.2f})",
                      file=sys.stderr)
            tb_ms = statistics.median(r["median_step_ms"] for r in tbs)
            pt_ms = statistics.median(r["median_step_ms"] for r in pts)
            row = {"batch_size": b, "trainbench_median_step_ms": tb_ms,
                   "pytorch_median_step_ms": pt_ms, "speedup_vs_pytorch": pt_ms / tb_ms}
            if a.repeats == 1:
                row.update({"trainbench": tbs[0], "pytorch": pts[0]})
            else:
                row.update({"trainbench_runs": tbs, "pytorch_runs": pts})
            rows.append(row)
            print(f"batch {b}: median of {a.repeats}: trainbench {tb_ms:.2f} ms/step, "
                  f"pytorch {pt_ms:.2f} ms/step, ratio {pt_ms / tb_ms:.2f}x", file=sys.stderr)
    first = rows[0] if rows else {}
    torch_version = (first.get("pytorch") or (first.get("pytorch_runs") or [{}])[0]).get("version")
    result = {
        "benchmark": "fmnist-cnn training step on the CPU, Trainbench vs PyTorch",
        "what": "median over timed steps of forward+backward+optimizer (data loading excluded on "
                "both sides; Trainbench's time with its own data loading is also given)",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": {"cpu": cpu_model(), "vendor": cpuinfo_field("vendor_id"),
                   "family": cpuinfo_field("cpu family"), "model": cpuinfo_field("model"),
                   "flags": cpu_flags(), "cores": os.cpu_count(), "threads_used": a.threads,
                   "kernel": platform.release()},
        "versions": {"pytorch": torch_version, "python": platform.python_version()},
        "steps": a.steps, "warmup_steps": a.warmup, "repeats": a.repeats,
        "load_average_at_end": load_average(), "results": rows}
    os.makedirs(os.path.dirname(os.path.abspath(a.output)), exist_ok=True)
    with open(a.output, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
