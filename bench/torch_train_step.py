#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""The PyTorch side of bench/gpu_vs_pytorch.py: the same model, batch and
tricks as a Trainbench run, timed the way Trainbench times a step on the GPU
(CUDA events around host-to-device copy + forward + backward + optimizer,
medians after a warm-up). Prints one JSON object.

Models: fmnist-cnn (28x28x1) and resnet18-cifar (32x32, 3x3 stem, no max-pool),
written here to match engine/nn/models.cpp layer for layer (conv bias before BN
as Trainbench's default). Inputs are fresh random images in page-locked host
memory, copied every step.
"""
import argparse
import json
import statistics

import torch
from torch import nn


def fmnist_cnn(in_ch, classes):
    return nn.Sequential(
        nn.Conv2d(in_ch, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, classes))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1), nn.BatchNorm2d(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, 1, 1), nn.BatchNorm2d(cout))
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0), nn.BatchNorm2d(cout))

    def forward(self, x):
        return torch.relu(self.main(x) + self.short(x))


def resnet18_cifar(in_ch, classes):
    layers = [nn.Conv2d(in_ch, 64, 3, 1, 1), nn.BatchNorm2d(64), nn.ReLU()]
    cin = 64
    for stage, width in enumerate([64, 128, 256, 512]):
        for block in range(2):
            layers.append(BasicBlock(cin, width, 2 if stage > 0 and block == 0 else 1))
            cin = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="fmnist-cnn", choices=["fmnist-cnn", "resnet18-cifar"])
    p.add_argument("--shape", default="1,28,28", help="C,H,W of one image")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--amp", default="off", choices=["off", "fp16", "bf16"])
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--cudnn-benchmark", action="store_true")
    p.add_argument("--foreach", action="store_true")
    a = p.parse_args()

    torch.backends.cudnn.benchmark = a.cudnn_benchmark
    # Trainbench computes fp32 convolutions and GEMMs without TF32 unless asked.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    dev = torch.device("cuda")
    c, h, w = (int(v) for v in a.shape.split(","))
    net = (fmnist_cnn if a.model == "fmnist-cnn" else resnet18_cifar)(c, 10).to(dev)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    net = net.to(memory_format=fmt)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4,
                          foreach=a.foreach)
    scaler = torch.amp.GradScaler("cuda", enabled=a.amp == "fp16")
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.amp)
    loss_fn = nn.CrossEntropyLoss()
    xs = [torch.randn(a.batch_size, c, h, w).pin_memory() for _ in range(4)]
    ys = [torch.randint(0, 10, (a.batch_size,)).pin_memory() for _ in range(4)]

    start = [torch.cuda.Event(enable_timing=True) for _ in range(a.steps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(a.steps)]
    for step in range(a.warmup + a.steps):
        i = step - a.warmup
        if i >= 0:
            start[i].record()
        x = xs[step % 4].to(dev, non_blocking=True).to(memory_format=fmt)
        y = ys[step % 4].to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
            loss = loss_fn(net(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if i >= 0:
            end[i].record()
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) for s, e in zip(start, end)]
    med = statistics.median(times)
    print(json.dumps({
        "framework": "pytorch", "version": torch.__version__,
        "cudnn": torch.backends.cudnn.version(), "model": a.model, "batch_size": a.batch_size,
        "amp": a.amp, "channels_last": a.channels_last, "steps": a.steps,
        "median_step_ms": med, "samples_per_s": a.batch_size * 1e3 / med,
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
        "final_loss": float(loss)}))


if __name__ == "__main__":
    main()
