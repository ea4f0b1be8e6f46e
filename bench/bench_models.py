# SPDX-License-Identifier: GPL-3.0-or-later
"""The benchmark models in PyTorch, written to match engine/nn/models.cpp layer
for layer, and a model's FLOPs per training sample as the engine counts them
(`trainbench-engine work`; both sides of bench/gpu_vs_pytorch.py use this
number for MFU).

    python3 bench/bench_models.py            # FLOPs per sample of every model
"""
import json
import os
import subprocess

import torch
from torch import nn

# model -> (C, H, W) of one sample in the benchmarks
SHAPES = {"fmnist-cnn": (1, 28, 28), "resnet18-cifar": (3, 32, 32), "resnet9": (3, 32, 32)}


def conv_bn_relu(cin, cout, bias):
    return [nn.Conv2d(cin, cout, 3, 1, 1, bias=bias), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]


def fmnist_cnn(in_ch, classes, bias=True):
    return nn.Sequential(
        *conv_bn_relu(in_ch, 32, bias), nn.MaxPool2d(2),
        *conv_bn_relu(32, 64, bias), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(inplace=True), nn.Linear(128, classes))


class BasicBlock(nn.Module):
    """ResNet basic block: relu(bn(conv(relu(bn(conv(x))))) + shortcut(x))."""

    def __init__(self, cin, cout, stride, bias):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=bias), nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, 1, 1, bias=bias), nn.BatchNorm2d(cout))
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=bias),
                                       nn.BatchNorm2d(cout))

    def forward(self, x):
        return torch.relu(self.main(x) + self.short(x))


def resnet18_cifar(in_ch, classes, bias=True):
    layers = conv_bn_relu(in_ch, 64, bias)
    cin = 64
    for stage, width in enumerate([64, 128, 256, 512]):
        for block in range(2):
            layers.append(BasicBlock(cin, width, 2 if stage > 0 and block == 0 else 1, bias))
            cin = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


class Residual(nn.Module):
    """ResNet-9's residual: x + f(x), no activation after the add."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return x + self.inner(x)


def resnet9(in_ch, classes, bias=True):
    def stage(cin, cout, residual):
        layers = conv_bn_relu(cin, cout, bias) + [nn.MaxPool2d(2)]
        if residual:
            layers.append(Residual(nn.Sequential(*conv_bn_relu(cout, cout, bias),
                                                 *conv_bn_relu(cout, cout, bias))))
        return layers
    return nn.Sequential(*conv_bn_relu(in_ch, 64, bias), *stage(64, 128, True),
                         *stage(128, 256, False), *stage(256, 512, True),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes))


BUILDERS = {"fmnist-cnn": fmnist_cnn, "resnet18-cifar": resnet18_cifar, "resnet9": resnet9}


def make_model(name, shape, classes=10, conv_bias=True):
    return BUILDERS[name](shape[0], classes, bias=conv_bias)


def engine_work(engine=None):
    """`trainbench-engine work --json`: the engine's counted work of every
    registered model (engine/nn/layer_work.cpp, the one place FLOPs are
    counted). engine: the binary; default $TRAINBENCH_ENGINE, else the build
    tree's build/bin/trainbench-engine."""
    engine = engine or os.environ.get("TRAINBENCH_ENGINE") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "build", "bin", "trainbench-engine")
    proc = subprocess.run([engine, "work", "--json"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{engine} work --json failed: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout)


def train_flops_per_sample(name, shape=None, classes=10, engine=None):
    """Matrix FLOPs of one training sample, as the engine counts them
    (`trainbench-engine work`): every convolution's and linear layer's forward
    (2 x multiply-adds), weight gradient (the same) and input gradient (the
    same, except the first layer's, which neither side computes). Batch norm,
    activations, pooling, the loss and the optimizer are left out, as MFU
    counts the work the matrix units are for. The engine counts each model at
    its registry shape with 10 classes; another shape or class count is refused."""
    work = engine_work(engine)[name]
    if (shape and list(shape) != work["input_shape"]) or classes != work["classes"]:
        raise ValueError(f"{name}: the engine counts {work['input_shape']} with "
                         f"{work['classes']} classes, not {list(shape or [])} with {classes}")
    return {k: work[k] for k in ("forward", "train", "convention")}


if __name__ == "__main__":
    for name, shape in SHAPES.items():
        f = train_flops_per_sample(name, shape)
        print(f"{name} {shape}: forward {f['forward'] / 1e6:.1f} MFLOP, "
              f"train {f['train'] / 1e6:.1f} MFLOP per sample")
