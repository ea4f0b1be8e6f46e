#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The CPU engine against PyTorch CPU on the lent device machine's processor
# (an Intel Xeon with AVX-512 behind the H200 of 2026-11-26; the development
# machines are mostly AMD): bench/cpu_vs_pytorch.py on two of its CPUs, the
# engine as the .deb ships it (no CUDA, oneDNN, run-time ISA dispatch).
# Issue 28's targets: fmnist-cnn b64/b128 >= 1.5x, resnet18-cifar b64 >= 1.0x.
#
#   scripts/device-cpu-bench.sh stage [BUILD_DIR]   here
#       Builds trainbench-engine in BUILD_DIR (default build-deb, configured as
#       scripts/check-package.sh does when missing: Release, TRAINBENCH_CUDA=OFF)
#       and packs build-cpu-bench/: trainbench-cpu.tar.xz (the engine, libdnnl,
#       OpenBLAS and the rest it links, MANIFEST) and fashion-mnist.tar.xz (the
#       raw IDX files). Fails past the device tool's 64 MiB with the tree.
#   scripts/device-cpu-bench.sh run                 there (carry build-cpu-bench)
#       One call of at most DEVICE_CPU_SECONDS (default 270; give the call
#       timeout_s=300): fmnist-cnn b64,b128 then resnet18-cifar b64, each side's
#       threads = the 2 CPUs chosen (two cores, not SMT siblings, where the
#       topology allows; DEVICE_CPUS="a,b" picks them, e.g. two SMT siblings,
#       as a 2-vCPU cloud machine has), interleaved repeats; DEVICE_CPU_ARGS
#       adds options to both models' bench/cpu_vs_pytorch.py (e.g.
#       "--threads 1": one thread per core on siblings). With either set the
#       file names end in -cpus<a>-<b> so the default run's are not overwritten.
#       First (at most 45 s): trainbench-cpu-conv-dtypes, oneDNN's convolutions
#       in f32 and bf16 on the models' 3x3 layers (AMX where the processor has
#       it: what mixed precision would buy the CPU engine, bench/NOTES.md).
#       $OUT gets cpu-fmnist-cnn-vs-pytorch-<cpu>-<date>.json,
#       cpu-resnet18-cifar-vs-pytorch-<cpu>-<date>.json,
#       cpu-conv-dtypes-<cpu>-<date>.json and device-cpu-bench.log;
#       <cpu> names the vendor, family and model (lscpu) since a VM's model
#       name may be only "Intel(R) Xeon(R) Processor". Commit them as they are
#       under bench/results/ and state the ratios per family in README.md.
#       Stops at once (exit 3) on a processor that is not Intel: the
#       development machines are mostly AMD (one Intel one so far, 2026-11-28:
#       bench/results/*-intel-6-167-*). DEVICE_CPU_ANY_VENDOR=1 runs anyway, as
#       the dry run here does (this machine's figures, as real as any).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
# pack_binaries, pack_fashion_mnist, check_device_size, prefer_system_libstdcxx,
# unpack_xz.
source "$here/scripts/device-pack.sh"
stage_dir=build-cpu-bench
tarball=$stage_dir/trainbench-cpu.tar.xz
data_pack=$stage_dir/fashion-mnist.tar.xz

stage() {
  local src=${1:-build-deb}
  if [[ ! -f $src/CMakeCache.txt ]]; then
    echo "== configuring $src (Release, no CUDA: the engine the .deb ships)"
    cmake -S . -B "$src" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINBENCH_CUDA=OFF \
      -DTRAINBENCH_TESTS=OFF >/dev/null || exit 1
  fi
  echo "== building trainbench-engine and trainbench-cpu-conv-dtypes in $src"
  cmake --build "$src" --target trainbench-engine trainbench-cpu-conv-dtypes -j 2 || exit 1
  local engine=$src/bin/trainbench-engine
  ldd "$engine" | grep -q libdnnl || {
    echo "$engine links no libdnnl: the .deb's engine has oneDNN (install libdnnl-dev, reconfigure)" >&2; exit 2; }
  ! ldd "$engine" | grep -q libcudart || {
    echo "$engine links CUDA: stage from a build with TRAINBENCH_CUDA=OFF (build-deb)" >&2; exit 2; }

  local pack=$stage_dir/pack
  rm -rf "$stage_dir" && mkdir -p "$pack"
  pack_binaries "$pack" "$engine" "$src/bin/trainbench-cpu-conv-dtypes" || exit 1
  {
    echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"
    echo "staged $(date -u +%FT%TZ) from $src ($(grep -m1 '^CMAKE_BUILD_TYPE' "$src/CMakeCache.txt"))"
  } >"$pack/MANIFEST"
  echo "== packing (xz -9)"
  tar -C "$pack" -cf - MANIFEST lib bin | xz -9 -T2 >"$tarball" || exit 1
  rm -rf "$pack"
  pack_fashion_mnist "$data_pack" "both sides train on it" || exit $?
  check_device_size "$stage_dir" || exit 1
}

# Two CPUs of this process's mask on different cores (SMT siblings only when
# the mask has no two cores), as "a,b"; DEVICE_CPUS overrides.
pick_cpus() {
  if [[ -n ${DEVICE_CPUS:-} ]]; then echo "$DEVICE_CPUS"; return; fi
  python3 - <<'PY'
import os
cpus = sorted(os.sched_getaffinity(0))
def core(c):
    try:
        with open(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list") as f:
            return f.read().strip()
    except OSError:
        return str(c)
picked, cores = [], set()
for c in cpus:
    if core(c) not in cores:
        picked.append(c)
        cores.add(core(c))
    if len(picked) == 2:
        break
for c in cpus:  # one core only: its two logical CPUs
    if len(picked) == 2:
        break
    if c not in picked:
        picked.append(c)
print(",".join(map(str, picked)))
PY
}

# The processor's name in file names: vendor, family and model from lscpu
# ("intel-6-143"), since a VM may show only "Intel(R) Xeon(R) Processor".
cpu_slug() {
  LC_ALL=C lscpu | awk -F: '
    /^Vendor ID/  { v = $2 } /^CPU family/ { f = $2 } /^Model:/ { m = $2 }
    END { gsub(/ /, "", v); gsub(/ /, "", f); gsub(/ /, "", m)
          v = (v == "GenuineIntel") ? "intel" : (v == "AuthenticAMD") ? "amd" : tolower(v)
          print v "-" f "-" m }'
}

run() {
  local t_start total root out log
  t_start=$(date +%s)
  total=${DEVICE_CPU_SECONDS:-270}
  root=${DEVICE_CPU_ROOT:-/tmp/trainbench-cpu}
  out=${OUT:-$here/$stage_dir/out}
  [[ -f $tarball && -f $data_pack ]] || {
    echo "no $tarball or $data_pack: run 'scripts/device-cpu-bench.sh stage' here and carry $stage_dir" >&2; exit 2; }
  rm -rf "$root" && mkdir -p "$root/fashion-mnist" "$out" || exit 2
  unpack_xz "$tarball" "$root" && unpack_xz "$data_pack" "$root/fashion-mnist" || exit 2
  prefer_system_libstdcxx "$root/lib"
  export LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  log=$out/device-cpu-bench.log
  local py=python3
  "$py" -c 'import torch' 2>/dev/null || py=/usr/bin/python3
  "$py" -c 'import torch' 2>/dev/null || { echo "no Python with torch (python3, /usr/bin/python3)" >&2; exit 2; }
  local cpus slug date commit
  cpus=$(pick_cpus)
  slug=$(cpu_slug)
  # Intel figures are the rare ones (the AMD family is measured on the
  # development machines): on another host, say so and stop
  # before spending the device's minutes (DEVICE_CPU_ANY_VENDOR=1 runs anyway).
  if [[ $slug != intel-* && -z ${DEVICE_CPU_ANY_VENDOR:-} ]]; then
    echo "this host's processor is $slug ($(LC_ALL=C lscpu | awk -F: '/^Model name/ {gsub(/^ +/, "", $2); print $2}')), not Intel: nothing run (DEVICE_CPU_ANY_VENDOR=1 runs anyway)"
    exit 3
  fi
  date=$(date -u +%F)
  commit=$(awk '/^commit /{print $2}' "$root/MANIFEST")
  local variant=""
  [[ -n ${DEVICE_CPUS:-}${DEVICE_CPU_ARGS:-} ]] && variant="-cpus${cpus//,/-}${DEVICE_CPU_ARGS:+-args}"
  {
    echo "== $(date -u +%FT%TZ) engine: $(cat "$root/MANIFEST" | paste -sd' ' -)"
    echo "== CPUs used: $cpus (of $(nproc --all)); PyTorch: $("$py" -c 'import torch; print(torch.__version__, torch.backends.mkldnn.is_available())')"
    LC_ALL=C lscpu
    ldd "$root/bin/trainbench-engine" | grep -E "not found|dnnl|openblas" || true
  } >>"$log" 2>&1
  grep -q "not found" "$log" && { echo "the engine misses libraries (see $log)" >&2; tail -n 20 "$log"; exit 2; }
  echo "CPUs $cpus; $(grep -m1 'Model name' <(LC_ALL=C lscpu) | tr -s ' '); PyTorch $("$py" -c 'import torch; print(torch.__version__)')"

  # One model within what is left; its JSON is written when it finishes.
  local rc=0
  bench() {
    local model=$1 budget=$2
    shift 2
    local left=$((t_start + total - $(date +%s)))
    (( budget > left )) && budget=$left
    if (( budget < 30 )); then
      echo "$model: skipped, $left s left"; rc=1; return
    fi
    local file=$out/cpu-$model-vs-pytorch-$slug-$date$variant.json
    echo "== $model (at most $budget s)" >>"$log"
    local t0=$(date +%s)
    timeout "$budget" taskset -c "$cpus" "$py" bench/cpu_vs_pytorch.py \
      --engine "$root/bin/trainbench-engine" --python "$py" --commit "$commit" \
      --data-dir "$root/fashion-mnist" --model "$model" --output "$file" "$@" \
      ${DEVICE_CPU_ARGS:-} >>"$log" 2>&1
    local r=$?
    echo "== $model: $(( $(date +%s) - t0 )) s, exit $r" >>"$log"
    # The rows it finished, also when it was cut short (the file is rewritten per repeat).
    [[ -f $file ]] && python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2] + ("" if d.get("complete") else " (incomplete)") + " in " + sys.argv[3] + " s: " + ", ".join(
    "b%d %.2fx (ours %.2f ms, PyTorch %.2f ms, RSS %.2fx, %d repeats)" % (
    r["batch_size"], r["speedup_vs_pytorch"], r["repeats"]["trainbench_median_ms"],
    r["repeats"]["pytorch_median_ms"], r["repeats"]["rss_ratio_trainbench_over_pytorch"],
    r.get("repeats_done", 0)) for r in d["results"]))' "$file" "$model" "$(( $(date +%s) - t0 ))"
    if (( r != 0 )); then
      echo "$model: failed or out of time (exit $r); the log's tail:"; tail -n 5 "$log"; rc=1
    fi
  }
  # oneDNN's f32 and bf16 convolutions on this processor, on the same two CPUs.
  local dtypes=$out/cpu-conv-dtypes-$slug-$date$variant.json
  if timeout 45 taskset -c "$cpus" "$root/bin/trainbench-cpu-conv-dtypes" --threads 2 --rounds 10 \
       --batch 64 >"$dtypes.tmp" 2>>"$log"; then
    python3 - "$dtypes.tmp" "$dtypes" "$commit" <<'PY'
import json, sys, time
d = json.load(open(sys.argv[1]))
out = {"benchmark": "trainbench-cpu-conv-dtypes (bench/cpu_conv_dtypes.cpp)",
       "date": time.strftime("%Y-%m-%d"), "commit": sys.argv[3], **d}
json.dump(out, open(sys.argv[2], "w"), indent=1)
tot = {}
for r in d["results"]:
    for k, v in r["ms"].items():
        tot.setdefault(r["layer"], {}).setdefault(k, 0.0)
        tot[r["layer"]][k] += v["median"]
print("conv dtypes (%s, oneDNN %s): " % (" ".join(d["cpu_flags"]), d["onednn_isa"]) + "; ".join(
    l + " " + ", ".join("%s %.1f ms" % kv for kv in sorted(c.items())) for l, c in tot.items()))
PY
  else
    echo "conv dtypes: failed or out of time (see $log)"
    rc=1
  fi
  rm -f "$dtypes.tmp"
  # --onednn-verbose-steps: where the engine's oneDNN time went on this processor
  # (convolution kernels against the activation reorders between layers).
  bench fmnist-cnn 120 --batches 64,128 --steps 100 --warmup 20 --repeats 3 --pytorch-profile-steps 10 \
    --onednn-verbose-steps 10
  bench resnet18-cifar 180 --batches 64 --steps 10 --warmup 3 --repeats 3 --pytorch-profile-steps 2 \
    --engine-measure-every 5 --onednn-verbose-steps 1
  echo "done in $(( $(date +%s) - t_start )) s; files in $out"
  return $rc
}

case ${1:-} in
  stage) shift; stage "$@" ;;
  run) run ;;
  *) awk 'NR >= 3 && /^#/ { print } /^set -uo/ { exit }' "$0" >&2; exit 2 ;;
esac
