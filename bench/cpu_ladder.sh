#!/bin/sh
# SPDX-License-Identifier: GPL-3.0-or-later
# The committed CPU ladder of fmnist-cnn: the engine's default rungs on the
# CPU backend, 3 interleaved repeats, accuracy runs for the rungs that change
# the numbers, and the machine's load sampled every 30 s while it runs (the
# development machines are shared; interleaving is there for that drift).
#
#   bench/cpu_ladder.sh [build/bin/trainbench-engine] [bench/results]
#
# The committed table uses the engine as the .deb ships it
# (build-deb/bin/trainbench-engine: no CUDA, scripts/check-package.sh builds
# it): a CUDA build's process also holds the CUDA libraries (~180 MiB of the
# peak memory column). The result records which binary ran.
#
# OMP_WAIT_POLICY=passive: on an oversubscribed machine OpenMP threads that
# spin at barriers wait for a descheduled partner; passive waiting keeps the
# measurement about the step, not about the spinning. Recorded in the result.
set -eu
ENGINE=${1:-build/bin/trainbench-engine}
OUT=${2:-bench/results}
NAME=cpu-fmnist-cnn-ladder
DB=$(mktemp -d)/ladder.db
LOAD=$(mktemp)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

(while true; do echo "$(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)" >> "$LOAD"; sleep 30; done) &
SAMPLER=$!
trap 'kill $SAMPLER 2>/dev/null || true' EXIT

"$ENGINE" --db "$DB" ladder --device cpu --name "fmnist-cnn CPU ladder" \
  --repeats 3 --warmup-steps 5 --measured-steps 20 --accuracy \
  --set train_limit=10000 --set test_limit=2000 --set epochs=1 \
  --set target_accuracy=0.75 --set eval_every_steps=25 \
  --json "$OUT/$NAME.json" --markdown "$OUT/$NAME.md" --csv "$OUT/$NAME.csv"

kill $SAMPLER 2>/dev/null || true
/usr/bin/python3 - "$OUT/$NAME.json" "$LOAD" "$ENGINE" <<'EOF'
import json, os, subprocess, sys
path, load, engine = sys.argv[1], sys.argv[2], sys.argv[3]
doc = json.load(open(path))
libs = subprocess.run(["ldd", engine], capture_output=True, text=True).stdout
doc["engine_binary"] = {"path": engine, "links_cuda": "libcudart" in libs or "libcudnn" in libs,
                        "links_onednn": "libdnnl" in libs}
doc["environment"] = {k: os.environ[k] for k in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS") if k in os.environ}
doc["load_samples"] = [l.split() for l in open(load) if l.strip()]  # [time, 1, 5, 15 min load]
# The source the engine was built from: the commit, and whether the tree had
# uncommitted changes besides this ladder's own result files.
def git(*args):  # porcelain lines start with a space: strip the newlines only
    return subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip("\n")
doc["commit"] = git("rev-parse", "HEAD") or None
ours = {os.path.normpath(path[:-len(".json")] + ext) for ext in (".json", ".md", ".csv")}
changed = [l[3:] for l in git("status", "--porcelain", "--untracked-files=no").splitlines()]
doc["tree_clean"] = all(os.path.normpath(f) in ours for f in changed) if doc["commit"] else None
json.dump(doc, open(path, "w"), indent=2)
print("wrote", path, "with", len(doc["load_samples"]), "load samples")
EOF
