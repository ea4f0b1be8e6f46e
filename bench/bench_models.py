# SPDX-License-Identifier: GPL-3.0-or-later
"""The benchmark models in PyTorch, written to match engine/nn/models.cpp layer
for layer, and the one place where a model's FLOPs per training sample are
counted (both sides of bench/gpu_vs_pytorch.py use this number for MFU).

    python3 bench/bench_models.py            # FLOPs per sample of every model
"""
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


def train_flops_per_sample(name, shape=None, classes=10):
    """Matrix FLOPs of one training sample: every convolution's and linear
    layer's forward (2 x multiply-adds), weight gradient (the same) and input
    gradient (the same, except the first layer's, which neither side computes).
    Batch norm, activations, pooling, the loss and the optimizer are left out,
    as MFU counts the work the matrix units are for."""
    shape = tuple(shape or SHAPES[name])
    net = make_model(name, shape, classes).eval()
    layers = []  # forward FLOPs per matrix layer, in execution order

    def conv_hook(m, inp, out):
        k = m.kernel_size[0] * m.kernel_size[1] * (m.in_channels // m.groups)
        layers.append(2 * out.shape[1] * out.shape[2] * out.shape[3] * k)

    def linear_hook(m, inp, out):
        layers.append(2 * m.in_features * m.out_features)

    hooks = []
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            hooks.append(m.register_forward_hook(conv_hook))
        elif isinstance(m, nn.Linear):
            hooks.append(m.register_forward_hook(linear_hook))
    with torch.no_grad():
        net(torch.zeros(1, *shape))
    for h in hooks:
        h.remove()
    forward = sum(layers)
    return {"forward": forward, "train": 3 * forward - layers[0],
            "convention": "fwd + weight grad + input grad of every conv/linear "
                          "(no input grad for the first layer); BN, pointwise, loss excluded"}


if __name__ == "__main__":
    for name, shape in SHAPES.items():
        f = train_flops_per_sample(name, shape)
        print(f"{name} {shape}: forward {f['forward'] / 1e6:.1f} MFLOP, "
              f"train {f['train'] / 1e6:.1f} MFLOP per sample")
