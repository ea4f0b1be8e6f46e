#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU tables of bench/README.md, README.md's headline table and its CPU
table, made from the committed result JSONs (COMMITTED below; a missing GPU
file gives its rows with "not run on a GPU yet"). Each table names where it was measured (device,
versions, date, commit: the file's "provenance" object, else what the driver
wrote).

    bench/tables.py              print every table from the committed files
    bench/tables.py --write      rewrite the marked blocks of both READMEs and
                                 resources/measurement/costs.json (each
                                 measurement mode's cost, for the GUI's tooltips)
    bench/tables.py --check      exit 1 when a committed README's block or the
                                 costs file differs from what this renders
                                 (a CTest test)
    bench/tables.py --vs a.json --vs b.json --ladder l.json --truth t.json
                                 print from other files (e.g. a new run)
"""
import argparse
import difflib
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import gpu_vs_pytorch  # noqa: E402
import ladder  # noqa: E402

NOT_RUN = "not run on a GPU yet"

# The committed GPU results the READMEs show (bench/results/).
COMMITTED = {
    # The second GPU window (one H200, 2026-11-28, commit 8013ca6); the first
    # (2026-11-26, b0014f2) is listed in bench/README.md.
    "vs": ["gpu-vs-pytorch-h200-2026-11-28.json"],
    "ladder": "gpu-ladder-h200-2026-11-28.json",
    "truth": "gpu-truth-h200-2026-11-28.json",
    "accuracy": ["gpu-accuracy-h200-2026-11-28.json"],
    "suites": "gpu-check-summary-h200-2026-11-28.json",
    "cost_cpu": "cpu-truth-cost-fmnist-cnn-amd-25-17-2026-11-27.json",
    # bench/cpu_vs_pytorch.py (or scripts/device-cpu-bench.sh): the newest
    # comparison of each processor, instruction-set cap and peer. README.md's
    # CPU table has a row per (processor, cap, peer); earlier files are listed
    # in bench/README.md.
    "cpu_vs": [
        "cpu-fmnist-cnn-vs-pytorch-amd-25-17-winograd-2026-11-27.json",
        "cpu-resnet18-cifar-vs-pytorch-amd-25-17-winograd-2026-11-27.json",
        "cpu-fmnist-cnn-vs-pytorch-2.15-amd-25-17-winograd-2026-11-27.json",
        "cpu-resnet18-cifar-vs-pytorch-2.15-amd-25-17-winograd-2026-11-27.json",
        "cpu-fmnist-cnn-vs-pytorch-amd-25-17-max-avx2-first-layer-blas-2026-11-27.json",
        "cpu-resnet18-cifar-vs-pytorch-amd-25-17-max-avx2-nchw-2026-11-27.json",
        "cpu-fmnist-cnn-vs-pytorch-2.15-amd-25-17-max-avx2-rerun-2026-11-27.json",
        "cpu-resnet18-cifar-vs-pytorch-2.15-amd-25-17-max-avx2-nchw-2026-11-27.json",
        "cpu-fmnist-cnn-vs-pytorch-intel-6-167-2026-11-28.json",
        "cpu-resnet18-cifar-vs-pytorch-intel-6-167-2026-11-28.json",
        "cpu-fmnist-cnn-vs-pytorch-2.15-intel-6-167-2026-11-28.json",
        "cpu-resnet18-cifar-vs-pytorch-2.15-intel-6-167-2026-11-28.json",
        "cpu-fmnist-cnn-vs-pytorch-intel-6-167-max-avx2-2026-11-28.json",
        "cpu-resnet18-cifar-vs-pytorch-intel-6-167-max-avx2-2026-11-28.json",
        "cpu-fmnist-cnn-vs-pytorch-2.15-intel-6-167-max-avx2-2026-11-28.json",
        "cpu-resnet18-cifar-vs-pytorch-2.15-intel-6-167-max-avx2-2026-11-28.json",
    ],
}

# What a committed cost figure does not say itself, by file.
COST_NOTES = {
    "gpu-truth-h200-2026-11-26.json":
        "measured before the default became sampled (CUPTI off unless asked, telemetry every "
        "measure_every steps); not re-measured on a GPU since",
}

# The measured cost of each measurement mode, for the GUI's tooltip of the
# control that selects it (resources/measurement/costs.json, installed beside
# the trick texts). Written by --write, compared by --check.
COSTS_FILE = "resources/measurement/costs.json"

# (file, block): the generated part of a README lies between these markers.
BLOCKS = [("bench/README.md", "results"), ("README.md", "headline"), ("README.md", "cpu")]


def marker(kind, block):
    return f"<!-- {kind}: bench/tables.py {block} (edit the JSON or tables.py, then --write) -->"


def load(path):
    if not path or not os.path.exists(path):
        return None
    doc = json.load(open(path))
    # A JSON's own location (from the repository root), for the caption.
    if isinstance(doc, dict):
        doc["_file"] = os.path.relpath(os.path.abspath(path), ROOT)
    return doc


def num(v, fmt="{:.0f}"):
    return fmt.format(v) if isinstance(v, (int, float)) else "–"


def gib(v):
    return num(v / 2**30, "{:.2f}") if isinstance(v, (int, float)) else "–"


def sps(r):
    if not isinstance(r, dict):
        return "–"
    if r.get("error"):
        return "failed" if not r.get("not_available") else "n/a"
    return num(r.get("samples_per_s"), "{:,.0f}")


def where(docs, base="bench"):
    """Where and when the documents were measured, e.g. "one NVIDIA H200 ...,
    2026-11-26, commit b0014f2"; the drivers' own fields where a file has no
    provenance object. Links are relative to base (the README's folder)."""
    docs = [d for d in docs if d]
    if not docs:
        return ""
    p = docs[0].get("provenance")
    if p:
        text = (f"{p['device']}; driver {p['driver']}, CUDA {p['cuda']}, cuDNN {p['cudnn']}, "
                f"cuBLAS {p['cublas']}")
        if any("pytorch" in d for d in docs):
            text += f", PyTorch {p['pytorch']}"
        text += f"; {p['date']}, commit {p['commit'][:7]}"
    else:
        d = docs[0]
        text = f"{d.get('nvidia_smi', d.get('device_kind', ''))}; {str(d.get('date', ''))[:10]}; commit not recorded"
    files = ", ".join(f"[`{os.path.basename(d['_file'])}`]({os.path.relpath(d['_file'], base)})"
                      for d in docs)
    return f"_Measured on {text} ({files})._\n\n"


def vs_rows(docs):
    """The side-by-side rows, one per (model, batch, recipe, precision), each
    from the file that ran it."""
    rows = {}
    for doc in docs:
        for row in doc["rows"]:
            key = (row["model"], row["batch_size"], row["recipe"], row["precision"])
            if row.get("trainbench") or row.get("pytorch") or key not in rows:
                rows[key] = row
    return rows


def vs_table(docs):
    head = ("| model | batch | recipe | Trainbench samples/s | PyTorch eager | compile | "
            "max-autotune | × eager | × best compiled | peak GiB TB / PT eager | MFU TB | MFU best PT |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    if not docs:
        for model, batch, _ in gpu_vs_pytorch.MODELS:
            for recipe, prec in gpu_vs_pytorch.ROWS:
                lines.append(f"| {model} | {batch} | {recipe} {prec} | {NOT_RUN} |  |  |  |  |  |  |  |  |")
        return "\n".join(lines)
    for row in vs_rows(docs).values():
        pt, rt, mfu = row.get("pytorch", {}), row.get("ratios", {}), row.get("mfu", {})
        tb = row.get("trainbench")
        if not tb and not pt:
            lines.append(f"| {row['model']} | {row['batch_size']} | {row['recipe']} {row['precision']} | "
                         "not run (not in these calls) |  |  |  |  |  |  |  |  |")
            continue
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


TARGET_NAMES = {
    "samples_per_s_vs_eager": ("samples/s, × PyTorch eager", "{:.2f}", "≥ {}"),
    "samples_per_s_vs_best_compiled": ("samples/s, × best compiled PyTorch", "{:.2f}", "≥ {}"),
    "peak_memory_vs_lowest_pytorch": ("peak memory, × lowest PyTorch", "{:.2f}", "≤ {}"),
    "mfu": ("MFU", "{:.1%}", "≥ {:.0%}"),
}


def targets_table(docs):
    """The targets of the all-tricks resnet18-cifar bf16 row, from the file that measured it."""
    measured = [d for d in docs if any(t.get("value") is not None for t in d.get("targets", {}).values())]
    if not measured:
        return ""
    lines = ["| target (resnet18-cifar all-tricks bf16) | measured | target | met |", "|---|---|---|---|"]
    for key, t in measured[0]["targets"].items():
        name, fmt, tfmt = TARGET_NAMES.get(key, (key, "{:.2f}", "{}"))
        met = "yes" if t.get("met") is True else "no" if t.get("met") is False else ""
        lines.append(f"| {name} | {num(t.get('value'), fmt)} | {tfmt.format(t.get('target'))} | {met} |")
    return "\n".join(lines)


def headline_table(docs):
    """README.md's status table: the side-by-side rows that ran."""
    lines = ["| model, batch, recipe | Trainbench samples/s | PyTorch eager | × eager | "
             "peak GiB Trainbench / PyTorch eager | × memory |", "|---|---|---|---|---|---|"]
    for row in vs_rows(docs).values():
        tb, pt = row.get("trainbench"), row.get("pytorch", {})
        eager = pt.get("eager")
        if not tb or not eager:
            continue
        r = row.get("ratios", {})
        compiled = f" (compile {sps(pt['compile'])})" if pt.get("compile") else ""
        lines.append(f"| {row['model']} b{row['batch_size']} {row['recipe']} {row['precision']} | "
                     f"{sps(tb)} | {sps(eager)}{compiled} | {num(r.get('vs_eager'), '{:.2f}×')} | "
                     f"{gib(tb.get('peak_allocated_bytes'))} / {gib(eager.get('peak_allocated_bytes'))} | "
                     f"{num(r.get('peak_memory_vs_eager'), '{:.1f}×')} |")
    return "\n".join(lines)


# issue 28's targets, against the peer at the same threads: fmnist-cnn at
# batch 64 and 128, resnet18-cifar at batch 64.
CPU_TARGETS = {("fmnist-cnn", 64): 1.5, ("fmnist-cnn", 128): 1.5, ("resnet18-cifar", 64): 1.0}


def cpu_processor(doc):
    """"AMD EPYC (family 25 model 17), AVX-512" from cpu_vs_pytorch.py's device
    record; "AVX2 only" where both sides were capped (--max-isa avx2)."""
    dev = doc.get("device", {})
    name = dev.get("cpu", "?")
    if dev.get("cpu_family"):
        name += f" (family {dev['cpu_family']} model {dev.get('cpu_model', '?')})"
    cap = (doc.get("max_isa") or {}).get("requested")
    isa = ("AVX2 only (both sides capped)" if cap == "avx2"
           else "AVX-512" if "avx512f" in dev.get("flags", []) else "AVX2" if "avx2" in dev.get("flags", [])
           else "no AVX2")
    return f"{name}, {isa}"


def cpu_table(docs, base="."):
    """README.md's CPU table: the engine against PyTorch on the CPU, a row per
    processor, instruction-set cap and peer, each ratio from its file."""
    rows = {}
    for d in docs:
        key = (cpu_processor(d), "PyTorch " + str(d.get("versions", {}).get("pytorch", "?")).split("+")[0])
        row = rows.setdefault(key, {"cells": {}, "rss": {}, "docs": []})
        row["docs"].append(d)
        for r in d.get("results", []):
            cell = (d.get("model"), r.get("batch_size"))
            if cell in CPU_TARGETS and isinstance(r.get("speedup_vs_pytorch"), (int, float)):
                row["cells"][cell] = r
    head = ["| processor (2 threads) | peer | fmnist-cnn b64 | fmnist-cnn b128 | resnet18-cifar b64 "
            "| peak RSS, Trainbench / peer | engine, date | files |", "|---|---|---|---|---|---|---|---|"]
    lines = []
    for (proc, peer), row in rows.items():
        cells = []
        for cell, target in CPU_TARGETS.items():
            r = row["cells"].get(cell)
            if not r:
                cells.append("not measured")
                continue
            v = r["speedup_vs_pytorch"]
            mark = f"**{v:.2f}×**" if v >= target else f"{v:.2f}× (target {target:g}×)"
            cells.append(mark)
        rss = []
        for model in ("fmnist-cnn", "resnet18-cifar"):
            rs = [r for (m, _), r in row["cells"].items() if m == model]
            if rs:
                mib = lambda side: [x[side].get("peak_rss_bytes", 0) / 2**20 for x in rs]  # noqa: E731
                tb, pt = mib("trainbench"), mib("pytorch")
                span = lambda v: f"{min(v):.0f}" if round(min(v)) == round(max(v)) else f"{min(v):.0f}–{max(v):.0f}"  # noqa: E731
                rss.append(f"{model} {span(tb)} / {span(pt)} MiB")
        # "+": the tree had changes not committed when it ran (cpu_vs_pytorch.py's own record).
        commits = sorted({str(d.get("commit", "?")).split("+")[0][:7] + ("+" if "+" in str(d.get("commit")) else "")
                          for d in row["docs"]})
        dates = sorted({str(d.get("date", "?"))[:10] for d in row["docs"]})
        files = ", ".join(f"[{d.get('model')}]({os.path.relpath(d['_file'], base)})"
                          + ("" if d.get("complete") else " (incomplete: not every repeat ran)")
                          for d in row["docs"])
        lines.append(f"| {proc} | {peer} | {' | '.join(cells)} | {'; '.join(rss) or '–'} | "
                     f"{', '.join(commits)}, {', '.join(dates)} | {files} |")
    if not lines:
        return "No CPU comparison committed."
    return "\n".join(head + lines)


def ladder_table(doc, engine):
    head = ("| rung | batch | peak GPU memory (GiB) | step time (ms) | samples/s | vs baseline |\n"
            "|---|---|---|---|---|---|")
    lines = [head]
    if doc is None:
        for name, _, cfg in ladder.rung_configs(engine, "cuda", 200, 30):
            lines.append(f"| {name} | {cfg['batch_size']} | {NOT_RUN} |  |  |  |")
        return "\n".join(lines)
    for r in doc["rungs"]:
        if "samples_per_s" not in r or r.get("error"):
            why = r.get("not_run") or ("failed: " + (r.get("error") or "")[:60])
            lines.append(f"| {r['rung']} | {r.get('batch_size', '')} | {why} |  |  |  |")
            continue
        lines.append(f"| {r['rung']} | {r['batch_size']} | {gib(r.get('peak_allocated_bytes'))} | "
                     f"{num(r['median_step_ms'], '{:.2f}')} | {num(r['samples_per_s'], '{:,.0f}')} | "
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
    for r in d.get("step", {}).get("runs", []):
        m = r.get("memory", {})
        if "driver_delta_minus_reserved_bytes" in m:
            rows.append((f"driver used delta − allocator reserved: {r['name']}",
                         gib(m["driver_delta_minus_reserved_bytes"]) + " GiB", "explained", None))
    for b in d.get("cost", {}).get("batches", []):
        rows.append((f"measurement cost, batch {b['batch_size']}",
                     num(b.get("default_cost_pct"), "{:+.1f} %"), "≤ 2 %", b.get("default_within_2pct")))
        rows.append((f"full profiler cost, batch {b['batch_size']}",
                     num(b.get("profiler_cost_pct"), "{:+.1f} %"), "measured, shown in the GUI", None))
    m = d.get("memory", {})
    if m:
        rows.append(("peak allocated, Trainbench / PyTorch",
                     num(m.get("peak_allocated_ratio_trainbench_over_pytorch"), "{:.2f}"), "≤ 1", None))
        tbm = m.get("trainbench", {})
        rows.append(("driver delta − allocator reserved (Trainbench)",
                     gib(tbm.get("driver_delta_minus_reserved_bytes")) + " GiB", "explained", None))
    elif doc:
        rows.append(("memory vs PyTorch (truth-memory stage)", "not run (not in this call)", "≤ 1", None))
    tc = d.get("tensor_cores", {})
    for r in tc.get("configs", []):
        rows.append((f"Tensor Core share, {r['config']}", num(r.get("median_tensor_core_share"), "{:.3f}"),
                     "~0" if "fp32" in r["config"] else "clearly > 0", None))
    if "ncu" in tc:
        n = tc["ncu"]
        rows.append((f"tensor pipe %, ours {num(n.get('ours_mean_pct'), '{:.1f}')} − "
                     f"ncu {num(n.get('ncu_weighted_pct'), '{:.1f}')}",
                     num(n.get("difference_pct_points"), "{:+.1f} pt"), "recorded with its reason", None))
    if not rows:
        for check in ("step time vs outside CUDA events", "measurement cost, batch 64 and 512",
                      "full profiler cost", "memory vs cudaMemGetInfo and PyTorch",
                      "Tensor Core share fp32 vs bf16/fp16", "tensor pipe % vs ncu"):
            rows.append((check, NOT_RUN, "", None))
    lines = [head] + [f"| {c} | {f} | {t} | {'yes' if m is True else 'no' if m is False else ''} |"
                      for c, f, t, m in rows]
    return "\n".join(lines)


def accuracy_table(docs):
    lines = ["| run | epochs | test accuracy | time (s) | median step (ms) |", "|---|---|---|---|---|"]
    # {"provenance", "runs"} as committed; a bare list as `trainbench-engine list --json` writes
    runs = [r for d in docs for r in (d if isinstance(d, list) else d.get("runs", []))]
    if not runs:
        lines.append(f"| fmnist-cnn, resnet18-cifar on padded Fashion-MNIST | | {NOT_RUN} | | |")
    for r in runs:
        s = r.get("summary", {})
        acc = num(s.get("final_test_accuracy"), "{:.4f}") if r.get("status") == "finished" else r.get("status")
        lines.append(f"| {r['name']} | {s.get('epochs', '–')} | {acc} | {num(s.get('total_time_s'), '{:.1f}')} | "
                     f"{num(s.get('median_step_time_ms'), '{:.2f}')} |")
    return "\n".join(lines)


def suites_table(doc):
    lines = ["| suite | passed | failed | skipped | slots failed (F) or skipped (S) |", "|---|---|---|---|---|"]
    if not doc:
        lines.append(f"| every GPU suite | {NOT_RUN} | | | |")
        return "\n".join(lines)
    for name, s in doc.get("suites", {}).items():
        slots = [f"`{x}` (F)" for x in sorted({f["slot"] for f in s.get("failures", [])})]
        slots += [f"`{x}` (S)" for x in sorted({k["slot"] for k in s.get("skips", [])})]
        lines.append(f"| `{name}` | {s.get('passed')} | {s.get('failed')} | {s.get('skipped')} | "
                     f"{', '.join(slots)} |")
    note = doc.get("provenance", {}).get("note")
    return "\n".join(lines) + (f"\n\nThe file's provenance note: {note}." if note else "")


def provenance_note(doc):
    note = (doc or {}).get("provenance", {}).get("note")
    return f"\n\n{note}" if note else ""


def render(vs, lad, truth, acc, suites, engine, cpu=()):
    """Each block's text, by block name."""
    targets = targets_table(vs)
    results = (
        "### Trainbench vs PyTorch\n\n" + where(vs) + vs_table(vs) + "\n\n"
        + (targets + "\n\n" if targets else "")
        + "### The ladder (seed 004) on the GPU\n\n" + where([lad])
        + "`resnet18-cifar` on synthetic uint8 3×32×32, each rung keeping every trick\n"
          "above it; the rungs are the engine's (`trainbench-engine ladder --list-rungs`).\n\n"
        + ladder_table(lad, engine) + provenance_note(lad) + "\n\n"
        + "### Truth of the measurements\n\n" + where([truth]) + truth_table(truth) + "\n\n"
        + "### Accuracy on the GPU\n\n" + where(acc) + accuracy_table(acc) + "\n\n"
        + "### The GPU check's suites\n\n" + where([suites])
        + "Slots per suite (data rows counted one by one; `initTestCase` and\n"
          "`cleanupTestCase` not counted), `scripts/gpu-check.sh run`, one call.\n\n"
        + suites_table(suites))
    headline = where(vs, base=".") + (headline_table(vs) if vs else f"Side by side: {NOT_RUN}.")
    return {"results": results, "headline": headline, "cpu": cpu_table(cpu)}


def truth_cost_figures(truth, figures):
    """Adds a truth.py cost section's figures (GPU or CPU) to figures, by settings key."""
    if not (truth and truth.get("cost")):
        return
    c, prov = truth["cost"], truth.get("provenance", {})
    device = re.sub(r"\s*\(.*\)", "", prov.get("device", "a GPU")).removeprefix("one ")
    where_ = (f"{device}, {c.get('model', '')}, {prov.get('date', c.get('date', ''))[:10]}, "
              f"commit {prov.get('commit', '?')[:7]}")
    notes = [COST_NOTES.get(os.path.basename(truth["_file"]), "")]
    spreads = [b["off_spread_pct"] for b in c.get("batches", [])
               if isinstance(b.get("off_spread_pct"), (int, float))]
    if spreads:  # a cost inside the machine's own run-to-run spread is none measured
        lo, hi = f"{min(spreads):.1f}", f"{max(spreads):.1f}"
        notes.append(f"runs with measurement off differed by {lo if lo == hi else lo + '-' + hi} % "
                     "among themselves: a figure within that is no measurable cost")
    note = "; ".join(n for n in notes if n)
    for key, field in (("measure_every", "default_cost_pct"), ("profiler", "profiler_cost_pct"),
                       ("cupti_sampling", "cupti_sampling_cost_pct")):
        # Whole percents, but a tenth below 10 (a +1.4 % default cost is not "+1 %").
        def pct(v):
            digits = 0 if abs(v) >= 10 else 1
            return f"{round(v, digits) + 0.0:+.{digits}f} %"  # + 0.0: no "-0.0"
        per_batch = [f"{pct(b[field])} at batch {b['batch_size']}"
                     for b in c.get("batches", []) if isinstance(b.get(field), (int, float))]
        if per_batch:
            figures[key].append({"text": f"{', '.join(per_batch)} of the step ({where_})",
                                 "note": note, "file": truth["_file"]})


def costs_doc(truth, cpu):
    """The measured cost of each mode by the settings key that selects it: the GPU's
    truth run, then the CPU's (both bench/truth.py cost)."""
    figures = {"measure_every": [], "profiler": [], "cupti_sampling": []}
    truth_cost_figures(truth, figures)
    truth_cost_figures(cpu, figures)
    return {"about": "The measured step-time cost of each measurement mode against measurement off, "
                     "by the settings key that selects the mode; the GUI shows it in that control's "
                     "tooltip. Generated by bench/tables.py --write from bench/results/: do not edit.",
            "costs": figures}


def costs_text(truth, cpu):
    return json.dumps(costs_doc(truth, cpu), indent=1, ensure_ascii=False) + "\n"


def block_span(text, path, block):
    begin, end = marker("begin", block), marker("end", block)
    if text.count(begin) != 1 or text.count(end) != 1:
        sys.exit(f"{path}: needs exactly one line {begin!r} and one {end!r}")
    i, j = text.index(begin) + len(begin), text.index(end)
    if j < i:
        sys.exit(f"{path}: {end!r} comes before {begin!r}")
    return i, j


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vs", action="append", help="a gpu-vs-pytorch JSON (repeatable)")
    p.add_argument("--ladder")
    p.add_argument("--truth")
    p.add_argument("--accuracy", action="append", help="a gpu-accuracy-style JSON (repeatable)")
    p.add_argument("--suites", help="a gpu-check-summary JSON")
    p.add_argument("--engine", default=os.path.join(HERE, os.pardir, "build", "bin", "trainbench-engine"),
                   help="the engine whose rungs name the ladder's rows when --ladder is not given")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the READMEs' blocks")
    mode.add_argument("--check", action="store_true", help="fail when a README's block is stale")
    a = p.parse_args()
    res = lambda name: os.path.join(HERE, "results", name)  # noqa: E731
    given = a.vs or a.ladder or a.truth or a.accuracy or a.suites
    if given and (a.write or a.check):
        p.error("--write and --check use the committed files (COMMITTED in tables.py)")
    if not given:
        a.vs = [res(f) for f in COMMITTED["vs"]]
        a.ladder, a.truth = res(COMMITTED["ladder"]), res(COMMITTED["truth"])
        a.accuracy = [res(f) for f in COMMITTED["accuracy"]]
        a.suites = res(COMMITTED["suites"])
    if given or not (a.write or a.check):
        for path in [*(a.vs or []), a.ladder, a.truth, *(a.accuracy or []), a.suites]:
            if path and not os.path.exists(path):
                print(f"tables.py: {path} does not exist: its rows say '{NOT_RUN}'", file=sys.stderr)
    vs = [d for d in map(load, a.vs or []) if d]
    acc = [d for d in map(load, a.accuracy or []) if d]
    cpu = [d for d in (load(res(f)) for f in COMMITTED["cpu_vs"]) if d]
    blocks = render(vs, load(a.ladder), load(a.truth), acc, load(a.suites), a.engine, cpu)
    if not (a.write or a.check):
        print(blocks["results"] + "\n\n### Headline (README.md)\n\n" + blocks["headline"]
              + "\n\n### CPU (README.md)\n\n" + blocks["cpu"])
        return 0
    stale = []
    costs_path = os.path.join(ROOT, COSTS_FILE)
    costs = costs_text(load(a.truth), load(res(COMMITTED["cost_cpu"])))
    committed = open(costs_path, encoding="utf-8").read() if os.path.exists(costs_path) else ""
    if committed != costs:
        if a.write:
            os.makedirs(os.path.dirname(costs_path), exist_ok=True)
            open(costs_path, "w", encoding="utf-8").write(costs)
            print(f"tables.py: rewrote {COSTS_FILE}")
        else:
            stale.append(COSTS_FILE)
            sys.stdout.writelines(difflib.unified_diff(
                committed.splitlines(True), costs.splitlines(True), f"{COSTS_FILE} (committed)",
                f"{COSTS_FILE} (bench/tables.py renders)"))
    for rel, block in BLOCKS:
        path = os.path.join(ROOT, rel)
        text = open(path, encoding="utf-8").read()
        i, j = block_span(text, rel, block)
        want = "\n" + blocks[block] + "\n"
        if text[i:j] == want:
            continue
        if a.write:
            open(path, "w", encoding="utf-8").write(text[:i] + want + text[j:])
            print(f"tables.py: rewrote {rel} ({block})")
        else:
            stale.append(rel)
            sys.stdout.writelines(difflib.unified_diff(
                text[i:j].splitlines(True), want.splitlines(True), f"{rel} (committed)",
                f"{rel} (bench/tables.py renders)"))
    if stale:
        print(f"tables.py: {', '.join(stale)} differ from the committed results: "
              "run bench/tables.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
