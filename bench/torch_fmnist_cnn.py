#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""PyTorch peer of Trainbench's fmnist-cnn training step, for side-by-side timing.

Same model (conv32-BN-ReLU-pool, conv64-BN-ReLU-pool, fc128-ReLU-fc10), same
optimizer (SGD, momentum 0.9, weight decay 5e-4), same batch, on real
Fashion-MNIST batches already in memory. Prints one JSON object: median step
time (forward + backward + optimizer) over the timed steps.
"""
import argparse
import gzip
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402
import torch_op_profile  # noqa: E402


def read_idx(path):
    """An IDX file's bytes: path + ".gz" (Debian's package), else path as it is
    (the raw files scripts/gpu-check.sh and device-cpu-bench.sh carry)."""
    if os.path.exists(path + ".gz"):
        with gzip.open(path + ".gz", "rb") as f:
            return f.read()
    with open(path, "rb") as f:
        return f.read()


def read_idx_images(path):
    data = read_idx(path)
    n, h, w = int.from_bytes(data[4:8], "big"), int.from_bytes(data[8:12], "big"), int.from_bytes(data[12:16], "big")
    return np.frombuffer(data, dtype=np.uint8, offset=16).reshape(n, 1, h, w)


def read_idx_labels(path):
    data = read_idx(path)
    return np.frombuffer(data, dtype=np.uint8, offset=8).astype(np.int64)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--profile-steps", type=int, default=0,
                   help="after the timed steps, this many more under torch.profiler "
                        "(torch_op_profile.py): self CPU ms per op per step")
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    x = read_idx_images(f"{a.data_dir}/train-images-idx3-ubyte")
    y = read_idx_labels(f"{a.data_dir}/train-labels-idx1-ubyte")
    x = (torch.from_numpy(x.astype(np.float32)) / 255.0 - 0.2860) / 0.3530
    y = torch.from_numpy(y)
    net = bench_models.fmnist_cnn(1, 10)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    perm = torch.randperm(x.shape[0])
    def batch(step):
        idx = perm[(step * a.batch_size) % (x.shape[0] - a.batch_size):][: a.batch_size]
        return x[idx], y[idx]

    def train_step(xb, yb):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(xb), yb)
        loss.backward()
        opt.step()
        return loss

    times = []
    for step in range(a.warmup + a.steps):
        xb, yb = batch(step)
        t0 = time.perf_counter()
        loss = train_step(xb, yb)
        t1 = time.perf_counter()
        if step >= a.warmup:
            times.append((t1 - t0) * 1e3)
    med = statistics.median(times)
    r = {"framework": "pytorch", "version": torch.__version__, "threads": torch.get_num_threads(),
         "batch_size": a.batch_size, "steps": a.steps, "median_step_ms": med,
         "samples_per_s": a.batch_size * 1e3 / med, "final_loss": float(loss)}
    if a.profile_steps > 0:
        first = a.warmup + a.steps
        r["op_profile"] = torch_op_profile.op_ms_per_step(
            lambda i: train_step(*batch(first + i)), a.profile_steps)
    print(json.dumps(r))


if __name__ == "__main__":
    main()
