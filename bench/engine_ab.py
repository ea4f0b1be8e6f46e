#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Two engine binaries on the same CPU workload, interleaved (A B, B A, ...), so
that a shared or drifting machine slows both alike: each run's median step and
its layer profile by kind (cpu_vs_pytorch.py's trainbench()), the medians of
each side, and where the difference sits. For a change to one op, the layer
rows show it even when the machine's own spread hides it in the step.

    bench/engine_ab.py --a OLD/bin/trainbench-engine --a-lib OLD/lib \\
        --b build-deb/bin/trainbench-engine --model fmnist-cnn --batch 128 \\
        --rounds 6 --output ab.json

--a-lib / --b-lib: a library folder for that binary (LD_LIBRARY_PATH), as
scripts/device-cpu-bench.sh stages it (an older staged engine unpacked with
its own libraries). --a-set / --b-set KEY=VALUE (repeatable): settings of
that side, so one binary can be its own baseline:

    bench/engine_ab.py --a build-deb/bin/trainbench-engine --a-set cpu_layout=nchw \
        --b build-deb/bin/trainbench-engine --b-set cpu_layout=blocked ..."""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_vs_pytorch as cvp  # noqa: E402


def run_one(engine, lib, settings, a, db):
    env = {"LD_LIBRARY_PATH": ":".join(filter(None, [lib, os.environ.get("LD_LIBRARY_PATH")]))} \
        if lib else None
    return cvp.trainbench(engine, a.batch, a.steps, a.warmup, a.threads, db, a.model,
                          measure_every=a.measure_every, env=env, settings=settings)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True, help="the first engine binary (the baseline)")
    p.add_argument("--b", required=True, help="the second engine binary")
    p.add_argument("--a-lib")
    p.add_argument("--b-lib")
    p.add_argument("--a-set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--b-set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--a-name", default="a")
    p.add_argument("--b-name", default="b")
    p.add_argument("--model", default="fmnist-cnn", choices=sorted(cvp.ENGINE_DATA))
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--measure-every", type=int,
                   help="the engine's measure_every (its layer profile's sampled steps)")
    p.add_argument("--commit", help="the engines' source commit (default: this tree's; for "
                   "two binaries of two commits, say both)")
    p.add_argument("--output", required=True)
    a = p.parse_args()
    sides = {a.a_name: (a.a, a.a_lib, a.a_set), a.b_name: (a.b, a.b_lib, a.b_set)}
    runs = {name: [] for name in sides}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            order = list(sides) if r % 2 == 0 else list(sides)[::-1]
            for name in order:
                engine, lib, settings = sides[name]
                t = run_one(engine, lib, settings, a, os.path.join(tmp, f"{name}.db"))
                runs[name].append({"round": r, "load_average_1min": cvp.load_average(),
                                   "activation_layout": t["activation_layout"],
                                   "median_step_ms": t["median_step_ms"],
                                   "layer_kinds_ms": t["layer_kinds_ms"]})
                print(f"{name} round {r}: {t['median_step_ms']:.2f} ms", file=sys.stderr)
    summary = {}
    for name, rs in runs.items():
        kinds = sorted({k for r in rs for k in r["layer_kinds_ms"]})
        summary[name] = {
            "median_step_ms": statistics.median(r["median_step_ms"] for r in rs),
            "layer_kinds_median_ms": {k: statistics.median(r["layer_kinds_ms"].get(k, 0.0)
                                                           for r in rs) for k in kinds}}
    first, second = list(sides)
    diff = {k: round(summary[second]["layer_kinds_median_ms"].get(k, 0.0) - v, 3)
            for k, v in summary[first]["layer_kinds_median_ms"].items()}
    result = {
        "benchmark": "two engines, the same CPU workload, interleaved",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": cvp.device_record(a.threads),
        "commit": a.commit or cvp.source_commit(),
        "model": a.model, "batch_size": a.batch, "steps": a.steps, "warmup_steps": a.warmup,
        "rounds": a.rounds,
        "engines": {name: {"binary": e, "lib": lib, "settings": st}
                    for name, (e, lib, st) in sides.items()},
        "summary": summary,
        "step_ratio": summary[second]["median_step_ms"] / summary[first]["median_step_ms"],
        "layer_kinds_difference_ms": dict(sorted(diff.items(), key=lambda kv: kv[1])),
        "runs": runs}
    with open(a.output, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(f"{second} / {first} median step: {result['step_ratio']:.3f}", file=sys.stderr)


if __name__ == "__main__":
    main()
