#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""The matrix peak that MFU is measured against, measured in the same call:
a large square GEMM through PyTorch (cuBLAS) in bf16, fp16 and fp32 with TF32
off, on random data (never zeros: they run faster), the median of the timed
products after a warm-up, CUDA-event timed. Prints one JSON object.

    python3 bench/matrix_peak.py [--size 8192] [--device cuda]

On the CPU (--device cpu) the same at a small size, timed with the host clock:
a smoke run of the plumbing, not a figure to quote.
"""
import argparse
import json
import statistics
import time

import torch


def peak(dtype, n, reps, dev):
    a = torch.randn(n, n, device=dev).to(dtype)
    b = torch.randn(n, n, device=dev).to(dtype)
    c = torch.empty(n, n, device=dev, dtype=dtype)
    for _ in range(3):
        torch.matmul(a, b, out=c)
    times = []
    if dev.type == "cuda":
        torch.cuda.synchronize()
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            torch.matmul(a, b, out=c)
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) / 1e3)
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            torch.matmul(a, b, out=c)
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return {"size": n, "reps": reps, "median_s": med, "tflops": 2 * n ** 3 / med / 1e12,
            "finite": bool(torch.isfinite(c.float()).all())}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--size", type=int, default=0, help="default 8192 on a GPU, 512 on the CPU")
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args()
    dev = torch.device(a.device)
    n = a.size or (8192 if dev.type == "cuda" else 512)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    r = {"what": "square GEMM peak through torch.matmul, TF32 off, random data",
         "torch": torch.__version__,
         "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
         "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32)):
        if dev.type == "cpu" and dtype == torch.float16:
            r[name] = {"error": "not measured: fp16 GEMM on the CPU says nothing about a GPU"}
            continue
        try:
            r[name] = peak(dtype, n, a.reps, dev)
        except Exception as e:  # report, do not hide
            r[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    print(json.dumps(r))


if __name__ == "__main__":
    main()
