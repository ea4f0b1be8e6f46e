#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Writes the fuzzers' seed corpora into fuzz/corpus/<target>/ (committed; run
again only to change them): small valid inputs and near misses, so that
fuzzing starts inside the formats instead of at random bytes."""
import gzip
import json
import os
import struct

here = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    folder = os.path.join(here, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


# IDX: 2 images of 3x2, 3 labels; gzip; a truncated file; a wrong magic.
images = struct.pack(">IIII", 0x803, 2, 3, 2) + bytes(range(12))
labels = struct.pack(">II", 0x801, 3) + bytes([0, 9, 4])
write("idx", "images", images)
write("idx", "labels", labels)
write("idx", "images.gz", gzip.compress(images, mtime=0))
write("idx", "labels.gz", gzip.compress(labels, mtime=0))
write("idx", "images-truncated", images[:-5])
write("idx", "labels-bad-label", struct.pack(">II", 0x801, 2) + bytes([3, 200]))
write("idx", "huge-count", struct.pack(">IIII", 0x803, 0x7FFFFFFF, 28, 28))

# CIFAR-10: two records; a record and a half; a bad label.
record = bytes([7]) + bytes(i % 256 for i in range(3072))
write("cifar", "two-records", record + bytes([1]) + bytes(3072))
write("cifar", "one-and-a-half", record + record[:1500])
write("cifar", "bad-label", bytes([10]) + bytes(3072))

# Configurations: files and --set lines.
write("config", "defaults.json", json.dumps({}))
write("config", "small.json", json.dumps({
    "model": "mlp", "dataset": "synthetic", "synthetic_shape": [1, 8, 8],
    "synthetic_size": 64, "batch_size": 16, "max_steps": 2, "lr": 0.1,
    "optimizer": "adamw", "amp": "bf16", "workers": 2}))
write("config", "bad-types.json", json.dumps({
    "batch_size": "big", "epochs": -1, "synthetic_shape": [3, "x"], "device": "cuda:x"}))
write("config", "sets.txt", "batch_size=256\nlr=0.2\namp=fp16\nsynthetic_shape=[3,32,32]\n"
      "device=cuda:0\nname=\"run\"\n")
write("config", "bad-sets.txt", "batchsize=64\n=3\nlr\nseed=1e400\nmax_steps=-1\n")

# Event streams as the engine writes them, and as a killed engine leaves them.
started = {"v": 1, "type": "run_started", "t": 0.1, "run_id": 3, "name": "x",
           "config": {"model": "mlp"}, "environment": {"device": "cpu"}, "tricks": {},
           "model": "mlp", "parameters": 10, "train_size": 64, "test_size": 64,
           "steps_per_epoch": 4, "total_steps": 4, "epochs": 1}
step = {"v": 1, "type": "step", "t": 0.2, "step": 1, "epoch": 0,
        "metrics": {"loss": 2.3, "step_time_ms": 1.5, "lr": None}}
epoch = {"v": 1, "type": "epoch", "t": 0.3, "epoch": 0, "step": 4,
         "metrics": {"test_accuracy": 0.5}}
log = {"v": 1, "type": "log", "t": 0.0, "level": "warning", "message": "pin_memory not applied"}
finished = {"v": 1, "type": "finished", "t": 0.4, "status": "finished", "summary": {"steps": 4}}
failed = {"v": 1, "type": "failed", "t": 0.4, "run_id": 3, "error": "boom", "summary": {}}
lines = [json.dumps(e) for e in (log, started, step, epoch, finished)]
write("events", "finished.jsonl", "\n".join(lines) + "\n")
write("events", "failed.jsonl", "\n".join([lines[1], json.dumps(failed)]) + "\n")
write("events", "cut-short.jsonl", "\n".join(lines[:3]) + "\n" + lines[3][:25])
write("events", "wrong-shapes.jsonl",
      '{"type": 5}\n[1,2]\n{"type":"step","metrics":[]}\n{"type":"run_started","run_id":"x"}\nnot json\n')
