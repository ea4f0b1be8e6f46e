#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which of bench/NOTES.md's predictions a GPU window's kernel table confirms.

    check_predictions.py PREDICTIONS.json STEP_KERNELS.tsv [--json OUT]

PREDICTIONS.json (bench/predictions/) lists, per prediction, a regular
expression on kernel names, the launches and the milliseconds expected
(inclusive ranges; null: none). STEP_KERNELS.tsv is the table
scripts/gpu-check.sh's step-kernels stage writes (kind, launches, total_us,
share, name). Each prediction's matching rows are summed and judged: "held"
inside both ranges, else "slower", "faster", "launches differ" or "no kernel
matched". Prints one line each; --json writes the verdicts. Exit status 0
whatever the verdicts (a refuted prediction is a finding, not an error); 2
when a file cannot be read.
"""
import argparse
import json
import re
import sys


def read_kernels(path):
    """[(name, launches, us)] from a step-kernels TSV (comment lines skipped)."""
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 5:
                raise ValueError(f"{path}:{n}: expected 5 tab-separated fields, got {len(parts)}")
            rows.append((parts[4], int(parts[1]), float(parts[2])))
    return rows


def judge(prediction, rows):
    """The verdict of one prediction on the kernel rows."""
    rx = re.compile(prediction["match"])
    hit = [r for r in rows if rx.search(r[0])]
    launches = sum(r[1] for r in hit)
    ms = sum(r[2] for r in hit) / 1000.0
    out = {"name": prediction["name"], "launches": launches, "ms": round(ms, 4),
           "predicted_launches": prediction.get("launches"), "predicted_ms": prediction.get("ms"),
           "kernels": len(hit)}
    lo_ms, hi_ms = prediction["ms"]
    want_n = prediction.get("launches")
    if not hit:
        out["verdict"] = "no kernel matched"
    elif ms > hi_ms:
        out["verdict"] = "slower"
    elif ms < lo_ms:
        out["verdict"] = "faster"
    elif want_n is not None and not (want_n[0] <= launches <= want_n[1]):
        out["verdict"] = "launches differ"
    else:
        out["verdict"] = "held"
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("predictions")
    p.add_argument("kernels")
    p.add_argument("--json")
    a = p.parse_args()
    try:
        preds = json.load(open(a.predictions))["predictions"]
        rows = read_kernels(a.kernels)
    except (OSError, ValueError, KeyError) as e:
        print(f"check_predictions: {e}", file=sys.stderr)
        return 2
    verdicts = [judge(pr, rows) for pr in preds]
    for v in verdicts:
        want_n = v["predicted_launches"]
        n = f"{v['launches']} launches" + (f" (predicted {want_n[0]}-{want_n[1]})" if want_n else "")
        print(f"   {v['verdict']:16s} {v['name']}: {v['ms']:.3f} ms (predicted "
              f"{v['predicted_ms'][0]}-{v['predicted_ms'][1]}), {n}")
    if a.json:
        json.dump({"predictions": a.predictions, "kernels": a.kernels, "verdicts": verdicts},
                  open(a.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
