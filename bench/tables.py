#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""bench/README.md's tables from the result JSONs (a missing file gives the
rows with "not run on a GPU yet"):

    bench/tables.py --vs bench/results/gpu-vs-pytorch-h100.json \
        --ladder bench/results/gpu-ladder-h100.json --truth bench/results/gpu-truth-h100.json
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_vs_pytorch  # noqa: E402
import ladder  # noqa: E402

NOT_RUN = "not run on a GPU yet"


def load(path):
    return json.load(open(path)) if path and os.path.exists(path) else None


def num(v, fmt="{:.0f}"):
    return fmt.format(v) if isinstance(v, (int, float)) else "–"


def gib(v):
    return num(v / 2**30, "{:.2f}") if isinstance(v, (int, float)) else "–"


def sps(r):
    if not isinstance(r, dict):
        return "–"
    if "error" in r:
        return "failed" if not r.get("not_available") else "n/a"
    return num(r.get("samples_per_s"))


def vs_table(doc):
    head = ("| model | batch | recipe | Trainbench samples/s | PyTorch eager | compile | "
            "max-autotune | × eager | × best compiled | peak GiB TB / PT eager | MFU TB | MFU best PT |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    if doc is None:
        for model, batch, _ in gpu_vs_pytorch.MODELS:
            for recipe, prec in gpu_vs_pytorch.ROWS:
                lines.append(f"| {model} | {batch} | {recipe} {prec} | {NOT_RUN} |  |  |  |  |  |  |  |  |")
        return "\n".join(lines)
    for row in doc["rows"]:
        pt, rt, mfu = row.get("pytorch", {}), row.get("ratios", {}), row.get("mfu", {})
        tb = row.get("trainbench")
        best_pt = max((v for k, v in mfu.items() if k != "trainbench"), default=None)
        lines.append(
            f"| {row['model']} | {row['batch_size']} | {row['recipe']} {row['precision']} | "
            f"{sps(tb) if tb else 'not run'} | {sps(pt.get('eager'))} | {sps(pt.get('compile'))} | "
            f"{sps(pt.get('max-autotune'))} | {num(rt.get('vs_eager'), '{:.2f}')} | "
            f"{num(rt.get('vs_best_compiled'), '{:.2f}')} | "
            f"{gib((tb or {}).get('peak_allocated_bytes'))} / "
            f"{gib((pt.get('eager') or {}).get('peak_allocated_bytes'))} | "
            f"{num(mfu.get('trainbench'), '{:.1%}')} | {num(best_pt, '{:.1%}')} |")
    return "\n".join(lines)


def ladder_table(doc, engine):
    head = ("| rung | batch | peak GPU memory (GiB) | step time (ms) | samples/s | vs baseline |\n"
            "|---|---|---|---|---|---|")
    lines = [head]
    if doc is None:
        for name, _, cfg in ladder.rung_configs(engine, "cuda", 200, 30):
            lines.append(f"| {name} | {cfg['batch_size']} | {NOT_RUN} |  |  |  |")
        return "\n".join(lines)
    for r in doc["rungs"]:
        if "samples_per_s" not in r or "error" in r:
            why = r.get("not_run") or ("failed: " + (r.get("error") or "")[:60])
            lines.append(f"| {r['rung']} | {r.get('batch_size', '')} | {why} |  |  |  |")
            continue
        lines.append(f"| {r['rung']} | {r['batch_size']} | {gib(r.get('peak_allocated_bytes'))} | "
                     f"{num(r['median_step_ms'], '{:.2f}')} | {num(r['samples_per_s'])} | "
                     f"{num(r.get('speedup_vs_baseline'), '{:.2f}×')} |")
    return "\n".join(lines)


def truth_table(doc):
    head = "| check | figure | target | met |\n|---|---|---|---|"
    rows = []
    d = doc or {}
    for r in d.get("step", {}).get("runs", []):
        st = r.get("step_time", {})
        rows.append((f"step time: {r['name']}", num(st.get("difference_pct"), "{:+.2f} %"),
                     "within ±2 %", st.get("within_target")))
    for b in d.get("cost", {}).get("batches", []):
        rows.append((f"measurement cost, batch {b['batch_size']}",
                     num(b.get("default_cost_pct"), "{:+.2f} %"), "≤ 2 %", b.get("default_within_2pct")))
        rows.append((f"full profiler cost, batch {b['batch_size']}",
                     num(b.get("profiler_cost_pct"), "{:+.1f} %"), "measured, shown in the GUI", None))
    m = d.get("memory", {})
    if m:
        rows.append(("peak allocated, Trainbench / PyTorch",
                     num(m.get("peak_allocated_ratio_trainbench_over_pytorch"), "{:.2f}"), "≤ 1", None))
        tbm = m.get("trainbench", {})
        rows.append(("driver delta − allocator reserved (Trainbench)",
                     gib(tbm.get("driver_delta_minus_reserved_bytes")) + " GiB", "explained", None))
    tc = d.get("tensor_cores", {})
    for r in tc.get("configs", []):
        rows.append((f"Tensor Core share, {r['config']}", num(r.get("median_tensor_core_share"), "{:.2f}"),
                     "~0" if "fp32" in r["config"] else "clearly > 0", None))
    if "ncu" in tc:
        n = tc["ncu"]
        rows.append(("tensor pipe %, ours − ncu", num(n.get("difference_pct_points"), "{:+.1f} pt"),
                     "recorded with its reason", None))
    if not rows:
        for check in ("step time vs outside CUDA events", "measurement cost, batch 64 and 512",
                      "full profiler cost", "memory vs cudaMemGetInfo and PyTorch",
                      "Tensor Core share fp32 vs bf16/fp16", "tensor pipe % vs ncu"):
            rows.append((check, NOT_RUN, "", None))
    lines = [head] + [f"| {c} | {f} | {t} | {'yes' if m is True else 'no' if m is False else ''} |"
                      for c, f, t, m in rows]
    return "\n".join(lines)


def caption(doc):
    if not doc:
        return ""
    return f"_{doc.get('nvidia_smi', doc.get('device_kind', ''))}; {doc.get('date', '')}_\n\n"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vs", default="")
    p.add_argument("--ladder", default="")
    p.add_argument("--truth", default="")
    p.add_argument("--engine", default=os.path.join(HERE, os.pardir, "build", "bin", "trainbench-engine"),
                   help="the engine whose rungs name the ladder's rows when --ladder is not given")
    a = p.parse_args()
    vs, lad, truth = load(a.vs), load(a.ladder), load(a.truth)
    print("### Trainbench vs PyTorch\n\n" + caption(vs) + vs_table(vs) + "\n")
    print("### The ladder (seed 004) on the GPU\n\n" + caption(lad) + ladder_table(lad, a.engine) + "\n")
    print("### Truth of the measurements\n\n" + caption(truth) + truth_table(truth))


if __name__ == "__main__":
    main()
