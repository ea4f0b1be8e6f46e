# SPDX-License-Identifier: GPL-3.0-or-later
"""Where PyTorch's CPU step goes, op by op: a few extra steps under
torch.profiler after the timed ones (never inside them: the profiler slows
what it watches), self CPU time per op per step, the costliest first. The
engine's side of the same question is its layer profile (cpu_vs_pytorch.py
keeps both), so a one-off run on another machine can be read op against op.
"""
import torch


def op_ms_per_step(step, steps, top=15):
    """Runs step(i) for i in range(steps) under the profiler; returns
    {"steps": steps, "ops": {name: self CPU ms per step}} for the `top` costliest
    ops, "other" holding the rest's sum."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities) as prof:
        for i in range(steps):
            step(i)
    rows = sorted(((e.key, e.self_cpu_time_total / 1e3 / steps) for e in prof.key_averages()),
                  key=lambda kv: -kv[1])
    ops = {k: round(v, 3) for k, v in rows[:top]}
    ops["other"] = round(sum(v for _, v in rows[top:]), 3)
    return {"steps": steps, "ops": ops}
