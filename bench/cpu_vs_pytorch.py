#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Trains fmnist-cnn (or resnet18-cifar, --model) for the same number of steps
in Trainbench (CPU backend) and in PyTorch (CPU), several batch sizes, and
writes one result JSON with the machine (lscpu's model and flags), versions,
date, the load average around each measurement, the peak RSS of each side's
process and Trainbench's CPU convolution paths (the run's kernel_paths). With --repeats N each batch size is measured N times,
Trainbench and PyTorch interleaved, and the medians are compared. With
--max-isa avx2 both sides run as on a processor without AVX-512 (most
laptops): each library that picks its kernels at run time is told so by its
own environment variable (MAX_ISA_ENVIRONMENT), and the result records them. Usage:

    bench/cpu_vs_pytorch.py --engine build/bin/trainbench-engine \
        --output bench/results/cpu-fmnist-cnn.json
    bench/cpu_vs_pytorch.py --engine build/bin/trainbench-engine --model resnet18-cifar \
        --batches 64 --steps 20 --warmup 3 --output bench/results/cpu-resnet18.json

Both sides take as many threads as the CPUs the process may use (taskset) unless
--threads says; --data-dir gives both Fashion-MNIST's files (.gz or raw), --commit
the engine's commit where the tree is no git checkout (scripts/device-cpu-bench.sh
runs it so on the lent device machine's processor). The result is rewritten after
every repeat ("complete" says whether all were measured; a row's "repeats_done" how
many of its repeats).
"""
import argparse
import datetime
import json
import os
import platform
import re
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


def lscpu():
    """lscpu's fields (model name, vendor, flags, ...) as a dict, or why not."""
    try:
        out = subprocess.run(["lscpu"], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return {"error": str(e)}
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return {k.strip(): v.strip() for k, v in fields.items()}


# What each library reads to cap the instruction set it picks at run time:
# oneDNN (both sides' convolutions: PyTorch 1.13 on Debian links the same
# libdnnl), OpenBLAS's DYNAMIC_ARCH core, PyTorch's own kernels, and the
# engine's loops (engine/core/cpu_features.h).
MAX_ISA_ENVIRONMENT = {
    # MKL: the BLAS of PyPI's PyTorch (Debian's links OpenBLAS).
    "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "OPENBLAS_CORETYPE": "Haswell",
             "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
             "TRAINBENCH_CPU_ISA": "avx2"},
}


def load_average():
    return os.getloadavg()[0]


def run_with_peak_rss(cmd, env=None):
    """Runs cmd to its end; returns (stdout, the process's peak RSS in bytes,
    from its own rusage: wait4's ru_maxrss). Raises CalledProcessError."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if p.returncode != 0:
        raise subprocess.CalledProcessError(p.returncode, cmd, stdout, stderr)
    return stdout, usage.ru_maxrss * 1024  # KiB on Linux


# The data each model trains on here: Fashion-MNIST on disk, else synthetic
# images of the model's input shape (no CIFAR-10 on the benchmark machines).
ENGINE_DATA = {"fmnist-cnn": [], "resnet18-cifar": ["--dataset", "synthetic"]}


def layer_kinds_ms(profile):
    """The engine's per-layer profile summed by phase and kind ("backward conv2d": ms),
    largest first: where a step's time went, kept so that a one-off run on another
    machine can be read without running it again."""
    sums = {}
    for r in (profile or {}).get("rows", []):
        key = f"{r['phase']} {r['kind']}".strip()
        sums[key] = sums.get(key, 0.0) + r["time_ms"]
    return dict(sorted(((k, round(v, 3)) for k, v in sums.items()), key=lambda kv: -kv[1]))


def engine_cmd(engine, db, model, batch, total_steps, test_limit, threads, data_dir, name,
               extra=()):
    """`trainbench-engine run` on the CPU backend for one model, batch and data."""
    args = list(ENGINE_DATA[model])
    if data_dir and not args:
        args = ["--set", f"data_dir={data_dir}"]
    return [engine, "run", "--db", db, "--quiet", "--device", "cpu", "--batch-size", str(batch),
            "--steps", str(total_steps), "--test-limit", str(test_limit), "--seed", "0",
            "--model", model, *args, *extra, "--name", name, "--set", f"cpu_threads={threads}"]


def trainbench(engine, batch, steps, warmup, threads, db, model="fmnist-cnn", data_dir=None,
               measure_every=None, env=None, settings=()):
    """One timed engine run; env: more environment for the engine (engine_ab.py's libraries);
    settings: more KEY=VALUE settings (engine_ab.py's --a-set / --b-set)."""
    # The layer profile samples steps N+1, 2N+1, ...
    extra = ["--set", f"measure_every={measure_every}"] if measure_every else []
    for kv in settings:
        extra += ["--set", kv]
    _, peak_rss = run_with_peak_rss(
        engine_cmd(engine, db, model, batch, warmup + steps, 1000, threads, data_dir,
                   f"bench {model} b{batch}", extra),
        env=dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), **(env or {})))
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
            "cpu_isa": env.get("cpu_isa"), "threads": env.get("threads"),
            "peak_rss_bytes": peak_rss,
            "run_id": run_id, "batch_size": batch, "steps": steps,
            # Which CPU convolution path each shape ran (docs/cpu-conv-paths.md).
            "onednn": env.get("onednn"), "cpu_conv_setting": os.environ.get("TRAINBENCH_CPU_CONV", "auto"),
            "kernel_paths": env.get("kernel_paths"),
            # The activations' memory order between layers (cpu_layout).
            "activation_layout": env.get("activation_layout"),
            "median_step_ms": compute, "median_step_ms_with_data": total,
            "samples_per_s": batch * 1e3 / compute,
            "layer_kinds_ms": layer_kinds_ms(data.get("layer_profile")),
            "final_test_accuracy": data["summary"].get("final_test_accuracy")}


ONEDNN_WARMUP_STEPS = 3


def onednn_activation_reorder(descs, problem, batch):
    """Whether a reorder line moves activations (4-D, the batch first, neither side
    blocked on dim 0 as filters are: "abcd" <-> "aBcd16b") rather than filters."""
    dims = problem.split("x")
    tags = re.findall(r"blocked:(\w+)", descs)
    return (len(dims) == 4 and dims[0] == str(batch) and tags
            and not any("A" in t for t in tags))


def onednn_primitives(engine, batch, steps, threads, db, model="fmnist-cnn", data_dir=None):
    """Where the engine's oneDNN time goes, from a run of its own under ONEDNN_VERBOSE=1
    (never a timed one): onednn_steps over ONEDNN_WARMUP_STEPS + steps + 1 steps (the
    last, with the evaluation after it, is left out)."""
    out, _ = run_with_peak_rss(
        engine_cmd(engine, db, model, batch, ONEDNN_WARMUP_STEPS + steps + 1, 1, threads,
                   data_dir, f"onednn verbose {model} b{batch}"),
        env=dict(os.environ, ONEDNN_VERBOSE="1"))
    return onednn_steps(out.splitlines(), batch, ONEDNN_WARMUP_STEPS, steps)


def onednn_steps(verbose_lines, batch, warmup, steps):
    """oneDNN's verbose execution lines summed by kind a step: each primitive's time as
    oneDNN measures it around its execution, over `steps` training steps after `warmup`.
    A step starts at each execution of its first forward convolution; lines of another
    batch size (evaluation) are left out, and the filter reorders, which name no batch,
    go to the step they follow (so the step after the last kept one must have been run).
    Reorders of activations (blocked <-> plain between layers) are counted apart from the
    filters' and with the bytes they read: what a blocked layout kept between layers
    would save."""
    step_lines, first, impls = [], None, {}
    for line in verbose_lines:
        if not line.startswith(("onednn_verbose,", "dnnl_verbose,")):
            continue
        f = line.split(",")
        # oneDNN 2.x: onednn_verbose,exec,cpu,<kind>,<impl>,<prop>,<memory descs>,...;
        # 3.x puts "v1,primitive," (and a timestamp where asked) before "exec".
        if "exec" not in f[1:4]:
            continue
        i = f.index("exec", 1)
        try:
            kind, impl, prop, descs = f[i + 2], f[i + 3], f[i + 4], f[i + 5]
            problem, ms = f[-2], float(f[-1])
        except (IndexError, ValueError):
            continue
        if kind == "reorder":
            if "x" not in problem:
                continue
            key = ("reorder activations" if onednn_activation_reorder(descs, problem, batch)
                   else "reorder filters")
        else:
            m = re.match(r"(?:\w+:)?mb(\d+)", problem)
            if not m or int(m.group(1)) != batch:
                continue  # evaluation's batch
            key = f"{kind} {prop}"
            if first is None and kind == "convolution" and prop.startswith("forward"):
                first = problem
            if problem == first and prop.startswith("forward"):
                step_lines.append([])
        if step_lines:
            step_lines[-1].append((key, ms, problem if key == "reorder activations" else None))
            impls.setdefault(key, set()).add(impl)
    kept = step_lines[warmup:warmup + steps]
    if len(step_lines) <= warmup + steps:
        return {"error": f"{len(step_lines)} steps seen in oneDNN's verbose output, "
                         f"{warmup + steps + 1} wanted"}
    ms, calls, reorder_bytes = {}, {}, 0
    for step in kept:
        for key, t, problem in step:
            ms[key] = ms.get(key, 0.0) + t
            calls[key] = calls.get(key, 0) + 1
            if problem:
                n = 1
                for d in problem.split("x"):
                    n *= int(d)
                reorder_bytes += 4 * n  # f32 read (and as many written)
    k = len(kept)
    return {"steps": k,
            "how": "ONEDNN_VERBOSE=1, a run of its own; oneDNN's time around each execution",
            "ms_per_step": dict(sorted(((key, round(v / k, 3)) for key, v in ms.items()),
                                       key=lambda kv: -kv[1])),
            "calls_per_step": {key: calls[key] / k for key in sorted(calls)},
            "implementations": {key: sorted(v) for key, v in sorted(impls.items())},
            "activation_reorder_mb_read_per_step": round(reorder_bytes / k / 1e6, 2)}


def pytorch_cmd(threads, python, model, data_dir):
    """The PyTorch side's script for the model, less its batch and step counts."""
    if model == "fmnist-cnn":
        cmd = [python, os.path.join(HERE, "torch_fmnist_cnn.py"), "--threads", str(threads)]
        return cmd + ["--data-dir", data_dir] if data_dir else cmd
    # the baseline recipe: the engine's defaults (torch_train_step.py's docstring)
    return [python, os.path.join(HERE, "torch_train_step.py"), "--device", "cpu", "--model",
            model, "--data", "synthetic", "--recipe", "baseline"]


def pytorch(batch, steps, warmup, threads, python, model="fmnist-cnn", data_dir=None,
            profile_steps=0):
    cmd = pytorch_cmd(threads, python, model, data_dir)
    if profile_steps > 0:
        cmd += ["--profile-steps", str(profile_steps)]
    out, peak_rss = run_with_peak_rss(
        cmd + ["--batch-size", str(batch), "--steps", str(steps), "--warmup", str(warmup)],
        env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    r = json.loads(out)
    # A diverged run (a non-finite loss) or a refused configuration has no
    # figure to compare: an error, not a speed.
    if r.get("error") or "median_step_ms" not in r:
        raise RuntimeError(f"PyTorch's {model} b{batch} run gave no step time: "
                           f"{r.get('error') or 'no median_step_ms'}")
    return dict(r, peak_rss_bytes=peak_rss)


def pytorch_onednn_primitives(batch, steps, threads, python, model="fmnist-cnn", data_dir=None):
    """PyTorch's oneDNN time a step by primitive kind, as onednn_primitives has the
    engine's: its script once more under ONEDNN_VERBOSE=1 (its convolutions are oneDNN's;
    batch norm, pooling and the rest are its own and do not show)."""
    out, _ = run_with_peak_rss(
        pytorch_cmd(threads, python, model, data_dir)
        + ["--batch-size", str(batch), "--steps", str(steps + 1),
           "--warmup", str(ONEDNN_WARMUP_STEPS)],
        env=dict(os.environ, OMP_NUM_THREADS=str(threads), ONEDNN_VERBOSE="1"))
    return onednn_steps(out.splitlines(), batch, ONEDNN_WARMUP_STEPS, steps)


def median_row(batch, tbs, pts, loads):
    """One batch size over its repeats: every repeat's figures and the medians."""
    tb_ms = statistics.median(t["median_step_ms"] for t in tbs)
    pt_ms = statistics.median(p["median_step_ms"] for p in pts)
    return {"batch_size": batch, "trainbench": tbs[-1], "pytorch": pts[-1],
            "speedup_vs_pytorch": pt_ms / tb_ms, "repeats_done": len(tbs),
            "repeats": {"trainbench_median_step_ms": [t["median_step_ms"] for t in tbs],
                        "pytorch_median_step_ms": [p["median_step_ms"] for p in pts],
                        "trainbench_peak_rss_bytes": [t["peak_rss_bytes"] for t in tbs],
                        "pytorch_peak_rss_bytes": [p["peak_rss_bytes"] for p in pts],
                        "load_average_1min": loads,
                        "trainbench_median_ms": tb_ms, "pytorch_median_ms": pt_ms,
                        "rss_ratio_trainbench_over_pytorch": statistics.median(
                            t["peak_rss_bytes"] for t in tbs) / statistics.median(
                                p["peak_rss_bytes"] for p in pts)}}


def source_commit():
    """The commit the benchmarked tree is at, "+dirty" when it has changes (or why not known)."""
    git = ["git", "-C", HERE]
    try:
        head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no"], check=True,
                               capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"unknown ({e})"
    return head + ("+dirty" if dirty else "")


def allowed_cpus():
    """The CPUs this process may run on, and each one's SMT siblings (the
    logical CPUs of its core, from sysfs; absent where sysfs does not say)."""
    cpus = sorted(os.sched_getaffinity(0))
    siblings = {}
    for c in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list") as f:
                siblings[str(c)] = f.read().strip()
        except OSError:
            pass
    return cpus, siblings


def device_record(threads):
    """The machine, read once a run: lscpu's fields, the CPUs used and their siblings."""
    cpu = lscpu()
    cpus, siblings = allowed_cpus()
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "threads_used": threads,
            "cpus_allowed": cpus, "smt_siblings": siblings,
            "threads_per_core": cpu.get("Thread(s) per core"),
            "kernel": platform.release(), "vendor": cpu.get("Vendor ID"),
            "cpu_family": cpu.get("CPU family"), "cpu_model": cpu.get("Model"),
            "hypervisor": cpu.get("Hypervisor vendor"),
            "flags": cpu.get("Flags", "").split()}


def write_result(a, rows, planned, device, commit, isa_environment, load_before):
    """The result JSON as it stands: written after every repeat, so that a run cut short
    (a device call's time limit) keeps what it finished ("complete": false)."""
    torch_version = rows[0]["pytorch"]["version"] if rows else None
    result = {
        "benchmark": f"{a.model} training step on the CPU, Trainbench vs PyTorch",
        "what": "median over timed steps of forward+backward+optimizer (data loading excluded on "
                "both sides; Trainbench's time with its own data loading is also given)",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device,
        "model": a.model,
        "peak_rss": "each side's process, from its own rusage (ru_maxrss): the engine's whole "
                    "run (data, evaluation, the peaks probe when not cached) and PyTorch's "
                    "script (its data held as float32 for fmnist-cnn)",
        "versions": {"pytorch": torch_version, "python": platform.python_version()},
        "commit": commit,
        "max_isa": {"requested": a.max_isa, "environment": isa_environment} if a.max_isa else None,
        "steps": a.steps, "warmup_steps": a.warmup, "repeats": a.repeats,
        "engine_measure_every": a.engine_measure_every,
        "onednn_verbose_steps": a.onednn_verbose_steps,
        "load_average": {"before": load_before, "after": load_average()},
        "complete": len(rows) == planned and all(r["repeats_done"] == a.repeats for r in rows),
        "results": rows}
    os.makedirs(os.path.dirname(os.path.abspath(a.output)), exist_ok=True)
    tmp = a.output + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    os.replace(tmp, a.output)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--engine", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--batches", default="64,256")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                   help="both sides' threads (default: the CPUs this process may use)")
    p.add_argument("--data-dir", help="Fashion-MNIST's IDX files, .gz or raw (default: each "
                   "side's own, /usr/share/datasets/fashion-mnist)")
    p.add_argument("--pytorch-profile-steps", type=int, default=0,
                   help="in the last repeat, this many more PyTorch steps under torch.profiler "
                        "after the timed ones: its time per op (op_profile), beside the "
                        "engine's per-layer figures (layer_kinds_ms)")
    p.add_argument("--onednn-verbose-steps", type=int, default=0,
                   help="after the repeats, one more run of each side under ONEDNN_VERBOSE=1: "
                        "its oneDNN time a step by primitive kind over this many steps "
                        "(onednn_primitives; activation reorders apart)")
    p.add_argument("--engine-measure-every", type=int,
                   help="the engine's measure_every (default its own, 20): its layer profile "
                        "samples steps N+1, 2N+1, ..., so a run of 20 steps or fewer needs less")
    p.add_argument("--commit", help="the engine's source commit, where this tree is no git "
                   "checkout (default: this tree's HEAD)")
    p.add_argument("--python", default="/usr/bin/python3", help="a Python with torch")
    p.add_argument("--model", default="fmnist-cnn", choices=sorted(ENGINE_DATA))
    p.add_argument("--repeats", type=int, default=1,
                   help="measure each batch size this many times, the two sides interleaved")
    p.add_argument("--max-isa", choices=sorted(MAX_ISA_ENVIRONMENT),
                   help="run both sides as on a processor with at most this instruction set")
    a = p.parse_args()
    isa_environment = MAX_ISA_ENVIRONMENT.get(a.max_isa, {})
    os.environ.update(isa_environment)  # both sides' processes inherit it
    rows = []
    batches = [int(x) for x in a.batches.split(",")]
    device, commit = device_record(a.threads), a.commit or source_commit()
    load_before = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "bench.db")
        for b in batches:
            tbs, pts, loads = [], [], []
            for r in range(a.repeats):
                loads.append(load_average())
                tbs.append(trainbench(a.engine, b, a.steps, a.warmup, a.threads, db, a.model,
                                      a.data_dir, a.engine_measure_every))
                last = r == a.repeats - 1
                pts.append(pytorch(b, a.steps, a.warmup, a.threads, a.python, a.model,
                                   a.data_dir, a.pytorch_profile_steps if last else 0))
                print(f"{a.model} batch {b} repeat {r + 1}/{a.repeats} (load {loads[-1]:.2f}): "
                      f"trainbench {tbs[-1]['median_step_ms']:.2f} ms/step "
                      f"({tbs[-1]['peak_rss_bytes'] / 2**20:.0f} MiB), "
                      f"pytorch {pts[-1]['median_step_ms']:.2f} ms/step "
                      f"({pts[-1]['peak_rss_bytes'] / 2**20:.0f} MiB)", file=sys.stderr)
                if not last:  # the repeats so far, kept if the run is cut short
                    write_result(a, rows + [median_row(b, tbs, pts, loads)], len(batches),
                                 device, commit, isa_environment, load_before)
            rows.append(median_row(b, tbs, pts, loads))
            write_result(a, rows, len(batches), device, commit, isa_environment, load_before)
            if a.onednn_verbose_steps > 0:  # after the row is written: a cut-short run keeps it
                rows[-1]["trainbench"]["onednn_primitives"] = onednn_primitives(
                    a.engine, b, a.onednn_verbose_steps, a.threads, db, a.model, a.data_dir)
                rows[-1]["pytorch"]["onednn_primitives"] = pytorch_onednn_primitives(
                    b, a.onednn_verbose_steps, a.threads, a.python, a.model, a.data_dir)
                write_result(a, rows, len(batches), device, commit, isa_environment, load_before)
            print(f"batch {b}: ratio {rows[-1]['speedup_vs_pytorch']:.2f}x (medians)",
                  file=sys.stderr)


if __name__ == "__main__":
    main()
