#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
# A stand-in for trainbench-engine used by the GUI tests: it speaks the
# JSON-lines event stream of docs/events.md without training anything.
# FAKE_STEPS (default 20), FAKE_DELAY seconds per step (default 0.01),
# FAKE_MODE: normal | crash (dies after FAKE_STEPS/2 steps, last words on stderr)
# | hang (ignores SIGTERM, so only SIGKILL ends it). FAKE_GPU=1 adds GPU series
# (made-up numbers: for looking at the GPU panels, never for docs).
import json, os, signal, sys, time

if len(sys.argv) < 2 or sys.argv[1] != "run":
    print("fake engine: only 'run' is supported", file=sys.stderr)
    sys.exit(2)

stop = False
def on_term(signum, frame):
    global stop
    stop = True

mode = os.environ.get("FAKE_MODE", "normal")
signal.signal(signal.SIGTERM, signal.SIG_IGN if mode == "hang" else on_term)
steps = int(os.environ.get("FAKE_STEPS", "20"))
delay = float(os.environ.get("FAKE_DELAY", "0.01"))
start = time.monotonic()

def gpu_series(step):
    """FAKE_GPU=1: the CUDA backend's series with made-up values, to look at the GPU panels."""
    if os.environ.get("FAKE_GPU") != "1":
        return {}
    return {"gpu_mem_allocated_bytes": 2.0e9 + 1e7 * step, "gpu_mem_reserved_bytes": 3.0e9,
            "gpu_mem_peak_bytes": 2.5e9, "gpu_mem_used_bytes": 3.5e9,
            "tensor_core_share": 0.6 + 0.01 * (step % 5), "tensor_pipe_active_pct": 35.0 + step % 4,
            "h2d_ms": 0.3}

def emit(kind, **fields):
    event = {"v": 1, "type": kind, "t": time.monotonic() - start}
    event.update(fields)
    print(json.dumps(event), flush=True)

config = {}
if "--config" in sys.argv:
    with open(sys.argv[sys.argv.index("--config") + 1]) as f:
        config = json.load(f)
per_epoch = 10
emit("run_started", run_id=0, name=config.get("name", "fake"), config=config,
     environment={"device": "cpu"}, tricks={"pin_memory": {"requested": config.get("pin_memory", False),
                                                          "applied": False, "reason": "fake engine"}},
     steps_per_epoch=per_epoch, total_steps=steps)
print("fake engine: started", file=sys.stderr, flush=True)
for step in range(1, steps + 1):
    if stop:
        emit("finished", status="stopped", summary={"steps": step - 1})
        sys.exit(130)
    if mode == "crash" and step > steps // 2:
        print("fake engine: CUDA error: an illegal memory access was encountered", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    emit("step", step=step, epoch=(step - 1) // per_epoch,
         metrics={"step_time_ms": 10.0 + step % 3, "data_wait_ms": 1.0, "forward_ms": 4.0,
                  "backward_ms": 4.0, "optimizer_ms": 1.0, "other_ms": 0.5,
                  "samples_per_s": 6400.0, "loss": 2.3 / step, "lr": 0.1, "my_custom_metric": step * 2.0,
                  **gpu_series(step)})
    # eval_every_steps: an evaluation between epochs (docs/events.md)
    every = int(config.get("eval_every_steps", 0))
    if every > 0 and step % every == 0:
        emit("evaluation", step=step, epoch=(step - 1) // per_epoch,
             metrics={"test_loss": 1.2 / step, "test_accuracy": min(0.9, 0.05 * step), "eval_time_s": 0.01})
    if step % per_epoch == 0:
        emit("epoch", epoch=step // per_epoch - 1, step=step,
             metrics={"train_loss": 1.0 / step, "test_loss": 1.1 / step, "train_accuracy": 0.5, "test_accuracy": 0.6})
    time.sleep(delay)
emit("finished", status="finished", summary={"steps": steps, "median_step_time_ms": 11.0, "samples_per_s": 6400.0})
