#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""The PyTorch side of bench/gpu_vs_pytorch.py: the same model, batch, data
shape, optimizer and tricks as a Trainbench run, timed the way Trainbench's
step is timed. Prints one JSON object.

Recipes (the same keys gpu_vs_pytorch.py sets on Trainbench's side):
  baseline    fp32 host batches (pageable, normalised on the host), blocking
              copies, NCHW, conv bias before BN, cuDNN heuristics, per-tensor
              SGD, gradients zeroed, the loss read back every step (the
              engine's sync_every_step default); TF32 off.
  all-tricks  uint8 host batches in pinned memory, non-blocking copies,
              normalised on the device, channels-last, no conv bias before BN,
              cudnn.benchmark, multi-tensor (foreach) SGD, set_to_none, no
              per-step read-back; plus --precision bf16|fp16 (autocast; fp16
              with GradScaler) and --compile default|max-autotune (CUDA graphs
              come with max-autotune).

Timing: one CUDA event per step boundary on the current stream (the host
clock on the CPU), so a step's time includes any gap where the GPU waits for
the host, as Trainbench's CUDA-event step time does; the median over the timed
steps after the warm-up (the warm-up holds compilation and autotuning).
Fresh data: a pool of distinct random batches (real Fashion-MNIST images for
fmnist-cnn), a different one every step; never zeros. Memory: the caching
allocator's peak allocated and reserved bytes, and the driver's used-bytes
delta (torch.cuda.mem_get_info) from before the model was built.

CPU smoke runs (--device cpu, Debian's torch 1.13): fp32 and bf16 autocast
eager only; torch.compile does not exist there and fp16 autocast does not run
on the CPU, and the script says so instead of pretending.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402
import torch_fmnist_cnn  # noqa: E402
import torch_op_profile  # noqa: E402

MEAN, STD = 0.5, 0.25  # normalisation of the uint8 pixels (the values do not change the speed)


def read_idx_images(path):
    """An IDX image file (.gz or raw: torch_fmnist_cnn.read_idx) as uint8 (N, 1, H, W)."""
    data = torch_fmnist_cnn.read_idx(path)
    n, h, w = (int.from_bytes(data[i:i + 4], "big") for i in (4, 8, 12))
    return torch.frombuffer(bytearray(data[16:]), dtype=torch.uint8).reshape(n, 1, h, w)


def batch_pool(a, shape, gen):
    """`a.pool` distinct (uint8 images, int64 labels) batches on the host."""
    if a.data == "fashion-mnist":
        images = read_idx_images(os.path.join(a.data_dir, "train-images-idx3-ubyte"))
        pool = []
        for _ in range(a.pool):
            idx = torch.randint(0, images.shape[0], (a.batch_size,), generator=gen)
            pool.append(images[idx].contiguous())
    else:
        pool = [torch.randint(0, 256, (a.batch_size, *shape), dtype=torch.uint8, generator=gen)
                for _ in range(a.pool)]
    labels = [torch.randint(0, 10, (a.batch_size,), generator=gen) for _ in range(a.pool)]
    return pool, labels


def fail(a, message, **extra):
    print(json.dumps({"framework": "pytorch", "version": torch.__version__, "model": a.model,
                      "recipe": a.recipe, "precision": a.precision, "compile": a.compile,
                      "error": message, **extra}))
    sys.exit(0)  # a configuration that cannot run here is a result, not a crash


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="fmnist-cnn", choices=sorted(bench_models.BUILDERS))
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--recipe", default="baseline", choices=["baseline", "all-tricks"])
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    p.add_argument("--compile", default="none", choices=["none", "default", "max-autotune"])
    p.add_argument("--device", default="cuda")
    p.add_argument("--data", default="synthetic", choices=["synthetic", "fashion-mnist"])
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--pool", type=int, default=32, help="distinct host batches, cycled")
    p.add_argument("--cudnn-benchmark", default="recipe", choices=["recipe", "on", "off"],
                   help="override the recipe's cudnn.benchmark (truth.py memory: off, as its engine run)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile-steps", type=int, default=0,
                   help="after the timed steps, this many more under torch.profiler "
                        "(torch_op_profile.py; on the CPU): self CPU ms per op per step")
    a = p.parse_args()

    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    tricks = a.recipe == "all-tricks"
    if cuda and not torch.cuda.is_available():
        fail(a, "no CUDA device visible to PyTorch")
    if a.compile != "none" and not hasattr(torch, "compile"):
        fail(a, f"not available: torch {torch.__version__} has no torch.compile", not_available=True)
    if not cuda and a.precision == "fp16":
        fail(a, "not available: fp16 autocast does not run on the CPU", not_available=True)

    # Trainbench computes fp32 convolutions and GEMMs without TF32: so does this side.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    benchmark = tricks if a.cudnn_benchmark == "recipe" else a.cudnn_benchmark == "on"
    torch.backends.cudnn.benchmark = benchmark
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed)

    used_before = None
    if cuda:
        torch.cuda.init()
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        used_before = total - free
        torch.cuda.reset_peak_memory_stats()

    shape = bench_models.SHAPES[a.model]
    net = bench_models.make_model(a.model, shape, 10, conv_bias=not tricks).to(dev)
    fmt = torch.channels_last if tricks else torch.contiguous_format
    net = net.to(memory_format=fmt)
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-4,
                          foreach=tricks)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.precision)
    use_scaler = a.precision == "fp16"
    scaler = torch.amp.GradScaler("cuda", enabled=True) if use_scaler else None
    loss_fn = nn.CrossEntropyLoss()
    model = net
    if a.compile != "none":
        model = torch.compile(net, mode=None if a.compile == "default" else a.compile)
    mark_step = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)

    images, labels = batch_pool(a, shape, gen)
    if tricks:
        if cuda:
            images = [x.pin_memory() for x in images]
            labels = [y.pin_memory() for y in labels]
    else:  # the baseline's loader hands over normalised fp32 batches
        images = [(x.float() / 255.0 - MEAN) / STD for x in images]

    def step(i):
        x, y = images[i % len(images)], labels[i % len(labels)]
        x = x.to(dev, non_blocking=tricks)
        y = y.to(dev, non_blocking=tricks)
        if tricks:
            x = ((x.float() / 255.0 - MEAN) / STD).contiguous(memory_format=fmt)
        opt.zero_grad(set_to_none=tricks)
        if a.compile == "max-autotune" and mark_step:
            mark_step()
        with torch.autocast(dev.type, dtype=dtype, enabled=dtype is not None):
            loss = loss_fn(model(x), y)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        if not tricks:
            loss.item()  # the baseline reads the loss back every step
        return loss

    # Warm-up: compilation, autotuning, cuDNN's benchmark, allocator growth.
    t0 = time.perf_counter()
    try:
        for i in range(a.warmup):
            loss = step(i)
        if cuda:
            torch.cuda.synchronize()
    except Exception as e:  # e.g. a compile failure: report it, do not hide it
        fail(a, f"{type(e).__name__}: {str(e)[:1500]}")
    warmup_s = time.perf_counter() - t0

    n = a.steps
    if cuda:
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
        marks[0].record()
        for i in range(n):
            loss = step(a.warmup + i)
            marks[i + 1].record()
        torch.cuda.synchronize()
        times = [marks[i].elapsed_time(marks[i + 1]) for i in range(n)]
    else:
        times, last = [], time.perf_counter()
        for i in range(n):
            loss = step(a.warmup + i)
            now = time.perf_counter()
            times.append((now - last) * 1e3)
            last = now
    final_loss = float(loss)
    times_sorted = sorted(times)
    med = statistics.median(times)
    r = {"framework": "pytorch", "version": torch.__version__,
         "device": torch.cuda.get_device_name() if cuda else "cpu",
         "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version() if cuda else None,
         "model": a.model, "recipe": a.recipe, "precision": a.precision, "compile": a.compile,
         "batch_size": a.batch_size, "data": a.data, "steps": n, "warmup": a.warmup,
         "clock": "CUDA events at step boundaries" if cuda else "host perf_counter",
         "median_step_ms": med, "p10_step_ms": times_sorted[n // 10],
         "p90_step_ms": times_sorted[(9 * n) // 10], "samples_per_s": a.batch_size * 1e3 / med,
         "warmup_s": warmup_s, "final_loss": final_loss,
         "tricks": {"channels_last": tricks, "cudnn_benchmark": benchmark, "pinned_uint8_h2d": tricks,
                    "non_blocking": tricks, "foreach_sgd": tricks, "set_to_none": tricks,
                    "conv_bias_before_bn": not tricks, "grad_scaler": use_scaler,
                    "tf32": False, "cuda_graphs": a.compile == "max-autotune"}}
    if cuda:
        free, total = torch.cuda.mem_get_info()
        r.update({"peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
                  "reserved_end_bytes": torch.cuda.memory_reserved(),
                  "device_used_delta_bytes": (total - free) - used_before})
    if a.profile_steps > 0 and not cuda:
        first = a.warmup + n
        r["op_profile"] = torch_op_profile.op_ms_per_step(lambda i: step(first + i),
                                                          a.profile_steps)
    if not (final_loss == final_loss and abs(final_loss) < 1e6):
        r["error"] = f"loss is not finite: {final_loss}"
    print(json.dumps(r))


if __name__ == "__main__":
    main()
