# SPDX-License-Identifier: GPL-3.0-or-later
"""subprocess.run with a time limit that ends the whole process tree: a
torch.compile that outlives its budget leaves compile workers, and an engine
run its loader, which would otherwise keep the GPU or the cores busy while the
next benchmark is being timed."""
import os
import signal
import subprocess


def descendants(pid):
    """Every process below pid (from /proc), children first."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                # the command may hold spaces and parentheses: the ppid follows the last ')'
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def run(cmd, timeout=None, **kw):
    """Like subprocess.run(cmd, capture_output=True, text=True, timeout=...);
    on a timeout every process below the child ends too, then TimeoutExpired."""
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    with subprocess.Popen(cmd, text=True, **kw) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for pid in [*descendants(p.pid), p.pid]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            p.communicate()
            raise
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def nvidia_smi():
    """The GPU's name, driver and memory as nvidia-smi gives them, or why not."""
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              check=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"unavailable: {e}"
