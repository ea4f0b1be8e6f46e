#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every benchmark of bench/ in one call of the lent GPU, under per-stage
budgets (scripts/gpu-check.sh bench runs it after unpacking the staged
binaries; docs/gpu-check.md has the device tool call).

Stages, in priority order, each a subprocess with its own time limit, each
leaving its JSON in --out as soon as it ends (a timeout loses only what that
stage had not written yet):

  env            nvidia-smi, PyTorch and CUDA versions, the binaries' libraries
  side-by-side   gpu_vs_pytorch.py (the matrix peak first) -> gpu-vs-pytorch.json
  truth-step     truth.py step          -> gpu-truth.json
  truth-memory   truth.py memory        -> gpu-truth.json
  truth-cost     truth.py cost          -> gpu-truth.json
  ladder         ladder.py              -> gpu-ladder.json
  tensor-cores   truth.py tensor-cores  -> gpu-truth.json
  ncu            scripts/gpu-check.sh ncu (Nsight Compute against the tensor
                 pipe figure), merged into gpu-truth.json's tensor_cores

--out gets at most 5 files: bench-summary.json (per stage status, seconds,
the errors found in its JSON), bench-logs.tar.gz (every stage's log, packed
after every stage), and the three result JSONs. stdout: one line per stage
and the first lines of every error.
"""
import argparse
import json
import os
import subprocess
import sys
import tarfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_proc  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# (stage, planned seconds at the default 530 s budget) in priority order.
STAGES = [("env", 15), ("side-by-side", 200), ("truth-step", 60), ("truth-memory", 30),
          ("truth-cost", 75), ("ladder", 90), ("tensor-cores", 30), ("ncu", 60)]


def errors_in(node, path="", found=None):
    """Every "error" string in a result JSON, with where it is."""
    found = [] if found is None else found
    if isinstance(node, dict):
        for k, v in node.items():
            # "error", and one side's error beside its figures ("trainbench_error")
            if (k == "error" or k.endswith("_error")) and isinstance(v, str) and v:
                found.append(f"{path}{'/' + k if k != 'error' else ''}: {v}")
            elif isinstance(v, (dict, list)):
                errors_in(v, f"{path}/{k}", found)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            d = v if isinstance(v, dict) else {}
            # a row names itself (model recipe precision, rung, name, config) where it can
            label = " ".join(str(d[k]) for k in ("model", "recipe", "precision") if k in d) or \
                d.get("rung") or d.get("name") or d.get("config") or str(i)
            errors_in(v, f"{path}[{label}]", found)
    return found


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True, help="trainbench-engine and trainbench-step-truth")
    p.add_argument("--out", required=True)
    p.add_argument("--logs", required=True)
    p.add_argument("--data-dir", required=True, help="Fashion-MNIST (.gz)")
    p.add_argument("--seconds", type=float, default=530)
    p.add_argument("--device", default="cuda", help="cpu: a dry run of the plumbing")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--stages", default="", help="comma-separated subset")
    p.add_argument("--only", default="", help="side-by-side: gpu_vs_pytorch.py --only")
    p.add_argument("--merge", default="", help="side-by-side: gpu_vs_pytorch.py --merge")
    p.add_argument("--gpu-check-root", default="/tmp/trainbench-bench-ncu")
    a = p.parse_args()
    t_start = time.time()
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.logs, exist_ok=True)
    dry = a.device != "cuda"
    # A dry run on the CPU: tiny steps and batches, the same plumbing.
    steps = ["--steps", "3", "--warmup", "2"] if dry else []
    scale = ["--batch-scale", "0.03"] if dry else []
    engine = os.path.join(a.bin, "trainbench-engine")
    py = [a.python]
    summary_path = os.path.join(a.out, "bench-summary.json")
    summary = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "budget_s": a.seconds,
               "device_kind": a.device, "stages": {}}
    truth = os.path.join(a.out, "gpu-truth.json")
    truth_args = ["--bin", a.bin, "--output", truth, "--device", a.device, "--python", a.python,
                  *(["--quick", "--steps", "3", "--warmup", "2", "--repeats", "1", *scale]
                    if dry else [])]
    commands = {
        "env": None,
        "side-by-side": [*py, os.path.join(HERE, "gpu_vs_pytorch.py"), "--engine", engine,
                         "--output", os.path.join(a.out, "gpu-vs-pytorch.json"), "--device", a.device,
                         "--python", a.python, "--data-dir", a.data_dir, *steps, *scale,
                         *(["--only", a.only] if a.only else []),
                         *(["--merge", a.merge] if a.merge else [])],
        "truth-step": [*py, os.path.join(HERE, "truth.py"), "step", *truth_args],
        "truth-memory": [*py, os.path.join(HERE, "truth.py"), "memory", *truth_args],
        "truth-cost": [*py, os.path.join(HERE, "truth.py"), "cost", *truth_args],
        "ladder": [*py, os.path.join(HERE, "ladder.py"), "--engine", engine, "--output",
                   os.path.join(a.out, "gpu-ladder.json"), "--device", a.device, *steps, *scale],
        "tensor-cores": [*py, os.path.join(HERE, "truth.py"), "tensor-cores", *truth_args],
        "ncu": ["bash", os.path.join(ROOT, "scripts", "gpu-check.sh"), "ncu"],
    }
    results = {"side-by-side": "gpu-vs-pytorch.json", "truth-step": "gpu-truth.json",
               "truth-memory": "gpu-truth.json", "truth-cost": "gpu-truth.json",
               "ladder": "gpu-ladder.json", "tensor-cores": "gpu-truth.json"}
    wanted = [s for s in a.stages.split(",") if s]
    planned_total = sum(b for s, b in STAGES if not wanted or s in wanted)

    def save():
        summary["wall_s"] = round(time.time() - t_start, 1)
        with open(summary_path + ".tmp", "w") as f:
            json.dump(summary, f, indent=1)
        os.replace(summary_path + ".tmp", summary_path)
        with tarfile.open(os.path.join(a.out, "bench-logs.tar.gz.tmp"), "w:gz") as t:
            t.add(a.logs, arcname="logs")
        os.replace(os.path.join(a.out, "bench-logs.tar.gz.tmp"), os.path.join(a.out, "bench-logs.tar.gz"))

    print(f"== bench: budget {a.seconds:.0f} s, device {a.device}"
          + (" (DRY RUN: plumbing only, no figure counts)" if dry else ""), flush=True)
    for i, (stage, planned) in enumerate(STAGES):
        if wanted and stage not in wanted:
            continue
        left = t_start + a.seconds - time.time()
        # Its planned share (scaled to the budget) plus what earlier stages
        # left unused, never more than leaves the later stages half of theirs.
        scale = a.seconds / planned_total
        mine = planned * scale
        later = sum(b for s, b in STAGES[i + 1:] if not wanted or s in wanted) * scale
        budget = min(mine + max(0.0, left - mine - later), left - 0.5 * later)
        budget = max(0.0, min(budget, left))
        if budget < 10:
            summary["stages"][stage] = {"status": "skipped: out of time", "seconds": 0}
            print(f"== {stage}: skipped: out of time ({left:.0f} s left)", flush=True)
            save()
            continue
        log = os.path.join(a.logs, f"{stage}.log")
        t0 = time.time()
        status, detail = "ok", {}
        if stage == "env":
            with open(log, "w") as f:
                for cmd in (["nvidia-smi"], ["nvcc", "--version"],
                            [a.python, "-c", "import torch, sys; print(sys.version); print('torch', "
                             "torch.__version__, 'cuda', torch.version.cuda, 'cudnn', "
                             "torch.backends.cudnn.version(), 'device', torch.cuda.get_device_name() "
                             "if torch.cuda.is_available() else None)"],
                            ["ldd", engine], ["ldd", os.path.join(a.bin, "trainbench-step-truth")]):
                    f.write(f"== {' '.join(cmd)}\n")
                    f.flush()
                    try:
                        subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=budget)
                    except (OSError, subprocess.TimeoutExpired) as e:
                        f.write(f"({e})\n")
            text = open(log, errors="replace").read()
            missing = sorted({l.split()[0] for l in text.splitlines() if "=> not found" in l})
            torch_line = next((l for l in text.splitlines() if l.startswith("torch ")), None)
            detail = {"torch": torch_line, "libraries_not_found": missing}
            if missing:
                status = "libraries not found"
                print("!!!!!!!!!! NOT FOUND: " + " ".join(missing), flush=True)
            print(f"   {torch_line}", flush=True)
        else:
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            if stage == "ncu":
                env.update({"GPU_CHECK_ROOT": a.gpu_check_root, "OUT": os.path.join(a.logs, "ncu"),
                            "NCU_STEPS": os.environ.get("NCU_STEPS", "3")})
            if stage == "ncu" and dry:
                status = "skipped: no GPU (dry run)"
                summary["stages"][stage] = {"status": status, "seconds": 0}
                print(f"== {stage}: {status}", flush=True)
                save()
                continue
            # The drivers that fit their tasks to a budget get the stage's, less
            # a margin for writing their result: a task that would not fit is
            # listed as not run instead of being killed half-way.
            cmd = commands[stage] + (["--budget", f"{max(1.0, budget - 10):.0f}"]
                                     if stage in ("side-by-side", "ladder") else [])
            with open(log, "w") as f:
                try:
                    rc = bench_proc.run(cmd, stdout=f, stderr=subprocess.STDOUT,
                                        timeout=budget, env=env, cwd=ROOT).returncode
                    status = "ok" if rc == 0 else f"exit {rc}"
                except subprocess.TimeoutExpired:
                    status = f"timed out at its {budget:.0f} s budget"
            # Lines the stage printed as JSON (its progress) go to stdout, shortened.
            for line in open(log, errors="replace"):
                if line.startswith("{"):
                    print("   " + line.strip()[:220], flush=True)
            if stage == "ncu":
                ncu_json = os.path.join(a.logs, "ncu", "tensor-pipe-vs-ncu.json")
                if os.path.exists(ncu_json) and os.path.exists(truth):
                    res = json.load(open(truth))
                    res.setdefault("tensor_cores", {})["ncu"] = json.load(open(ncu_json))
                    with open(truth, "w") as f:
                        json.dump(res, f, indent=1)
                elif not os.path.exists(ncu_json):
                    status += ", no tensor-pipe-vs-ncu.json"
            if stage in results and os.path.exists(os.path.join(a.out, results[stage])):
                errs = errors_in(json.load(open(os.path.join(a.out, results[stage]))))
                if errs:
                    detail["errors"] = errs[:20]
                    for e in errs[:6]:
                        print("   !! " + e[:300].replace("\n", " | "), flush=True)
                    if len(errs) > 6:
                        print(f"   !! ... {len(errs)} errors in all: bench-summary.json", flush=True)
        secs = round(time.time() - t0, 1)
        summary["stages"][stage] = {"status": status, "seconds": secs, "budget_s": round(budget),
                                    **({"detail": detail} if detail else {})}
        if status != "ok":
            tail = open(log, errors="replace").read().strip().splitlines()[-3:]
            for l in tail:
                print("   | " + l[:220], flush=True)
        save()
        print(f"== {stage}: {status} ({secs:.0f} s of {budget:.0f}; "
              f"{t_start + a.seconds - time.time():.0f} s left)", flush=True)
    save()
    print("== summary: " + json.dumps({s: v["status"] for s, v in summary["stages"].items()}))
    # exit 1 when a stage did not finish cleanly (the device tool's rc says so at a glance)
    return int(any(v["status"] != "ok" and not v["status"].startswith("skipped: no GPU")
                   for v in summary["stages"].values()))


if __name__ == "__main__":
    sys.exit(main())
