#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Checking the CUDA backend on the lent GPU machine, in three calls at most.
#
# The GPU machine has the driver, nvcc, cuDNN/cuBLAS (in /usr/local/cuda/lib64
# and/or PyTorch's python nvidia.* packages) and PyTorch, but no Qt and no
# OpenBLAS, and only the working tree plus up to 8 ignored paths travel
# (64 MiB). So the binaries are built HERE and packed with the non-CUDA runtime
# libraries they need (Qt6Core/Qt6Test, ICU, OpenBLAS ...) into
# build-gpu/engine.tar.gz (the engine) and build-gpu-tests/tests.tar.gz (the
# test suites, with Qt); Fashion-MNIST goes into build-gpu-data/. See
# docs/gpu-check.md for the exact calls.
#
#   scripts/gpu-check.sh stage [BUILD_DIR]      (here, no GPU needed)
#       BUILD_DIR defaults to build-cuda; configured and built when missing
#       (-DTRAINBENCH_CUDA=ON -DTRAINBENCH_GUI=OFF -DCMAKE_CUDA_ARCHITECTURES=90).
#   scripts/gpu-check.sh run                    (on the GPU machine; carry build-gpu-tests)
#       nvidia-smi and library versions; every test suite with GPU slots;
#       compute-sanitizer memcheck and racecheck on the backend's own kernels;
#       $OUT/gpu-check-summary.json with pass/fail/skip counts per suite.
#       MEMCHECK=0 skips the sanitizers.
#   scripts/gpu-check.sh bench                  (GPU; carry build-gpu)
#       bench/gpu_vs_pytorch.py: Trainbench vs PyTorch side by side, then the
#       optimization ladder; $OUT/gpu-vs-pytorch.json. QUICK=1 for a short one.
#   scripts/gpu-check.sh ncu                    (GPU; carry build-gpu)
#       The tensor pipe active % (tensor_pipe_profiler.h) against Nsight Compute:
#       NCU_STEPS (default 6) steps of a CUDA run under `ncu` (every kernel, the
#       tensor pipe metric + gpu__time_duration), kernel-time weighted, and the
#       same steps with our profiler on every step but the first;
#       $OUT/tensor-pipe-vs-ncu.json. NCU_RUN_ARGS replaces the run's options.
#   scripts/gpu-check.sh accuracy               (GPU; carry build-gpu and build-gpu-data)
#       fmnist-cnn for 3 epochs and resnet18-cifar on Fashion-MNIST padded to
#       32x32 (EPOCHS, default 15) on the GPU; $OUT/gpu-accuracy.json.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
stage_dir=build-gpu              # the engine and the benchmark drivers
tests_dir=build-gpu-tests        # the test suites (with Qt)
data_dir=build-gpu-data          # Fashion-MNIST
engine_tarball=$stage_dir/engine.tar.gz
tests_tarball=$tests_dir/tests.tar.gz
# Test suites with GPU slots (each QSKIPs them where there is no device).
suites=(test_cuda_backend test_amp test_amp_training test_staging test_fused test_channels_last
        test_device_data test_tensor_pipe test_cuda_graphs)

# Libraries the GPU machine provides itself (driver, CUDA, glibc): never packed.
is_system_lib() {
  case "$(basename "$1")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libgcc_s.so*|linux-vdso*) return 0 ;;
    libcuda.so*|libcudart*|libcublas*|libcudnn*|libnvrtc*|libnvidia*|libnvJitLink*|libcupti*|libnvperf*) return 0 ;;
  esac
  return 1
}

# pack TARBALL BINARY...: the binaries and every shared library they resolve
# here, except the ones the device has.
pack() {
  local tarball=$1; shift
  local dir; dir=$(dirname "$tarball")/pack
  rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/lib" "$dir/bench"
  local b
  for b in "$@"; do
    cp "$b" "$dir/bin/"
    ldd "$b" | awk '/=> \//{print $3}' | while read -r lib; do
      is_system_lib "$lib" || cp -L "$lib" "$dir/lib/"
    done
  done
  cp bench/gpu_vs_pytorch.py bench/torch_train_step.py "$dir/bench/"
  tar -C "$dir" -czf "$tarball" .
  rm -rf "$dir"
  echo "staged $(du -h "$tarball" | cut -f1) in $tarball: $(tar -tzf "$tarball" | grep -c .) files"
}

stage() {
  local src=${1:-build-cuda}
  if [[ ! -d "$src" ]]; then
    cmake -S . -B "$src" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINBENCH_CUDA=ON \
      -DTRAINBENCH_GUI=OFF -DCMAKE_CUDA_ARCHITECTURES=90
  fi
  local tests=() s
  for s in "${suites[@]}"; do
    [[ -f tests/engine/$s.cpp ]] && tests+=("$s")
  done
  # Two cores here: build only what the GPU runs need.
  cmake --build "$src" --target trainbench-engine "${tests[@]}" -j 2
  mkdir -p "$stage_dir" "$tests_dir"
  # Apart, so that each call carries only what it needs (64 MiB in all): the
  # test suites bring Qt and ICU (about 40 MiB), the engine does not.
  pack "$engine_tarball" "$src/bin/trainbench-engine"
  pack "$tests_tarball" "$src/bin/trainbench-engine" "${tests[@]/#/$src/bin/}"
  # The data set for the accuracy runs travels apart too.
  mkdir -p "$data_dir/fashion-mnist"
  cp /usr/share/datasets/fashion-mnist/*.gz "$data_dir/fashion-mnist/" 2>/dev/null ||
    echo "warning: no Fashion-MNIST here (scripts/setup.sh installs it); accuracy needs it" >&2
  du -sh "$stage_dir" "$tests_dir" "$data_dir"
}

# Folders holding libcudnn/libcublas/libcublasLt/libnvrtc/libcupti on the device
# (and libnvperf_host, which CUPTI's profiler API dlopens).
cuda_lib_dirs() {
  local roots=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/extras/CUPTI/lib64)
  local nv
  nv=$(python3 -c 'import nvidia, sys; print("\n".join(list(nvidia.__path__)))' 2>/dev/null || true)
  [[ -n "$nv" ]] && roots+=($nv)
  for name in libcudnn.so.9 libcublas.so.13 libcublasLt.so.13 libnvrtc.so.13 libcupti.so.13 libnvperf_host.so; do
    { find -H "${roots[@]}" -name "$name" 2>/dev/null || true; } | head -n 1 | xargs -r dirname || true
  done | awk '!seen[$0]++'
}

root=/tmp/trainbench-gpu
out=${OUT:-$here/build-gpu/out}

# unpack TARBALL FOLDER: the staged binaries into $root, libraries set up.
unpack() {
  mkdir -p "$out"
  [[ -f "$1" ]] || { echo "no $1: run 'scripts/gpu-check.sh stage' here first and carry $2" >&2; exit 2; }
  rm -rf "$root" && mkdir -p "$root" && tar -C "$root" -xzf "$1"
  # The packed libstdc++ (from the build machine) is a fallback only: the
  # device's own is newer there, and cuDNN/cuBLAS may need its newer symbols.
  local sys_stdcxx
  sys_stdcxx=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/{p=$NF} END{print p}' || true)
  if [[ -n "$sys_stdcxx" && -f "$root/lib/libstdc++.so.6" ]]; then
    local need
    need=$(grep -ao 'GLIBCXX_3\.4\.[0-9]*' "$root/lib/libstdc++.so.6" | sort -V | tail -n 1 || true)
    if [[ -n "$need" ]] && grep -aqx "$need" <(grep -ao 'GLIBCXX_3\.4\.[0-9]*' "$sys_stdcxx"); then
      rm -f "$root/lib/libstdc++.so.6"
    fi
  fi
  local dirs
  dirs=$(cuda_lib_dirs | paste -sd: - || true)
  export LD_LIBRARY_PATH="$root/lib${dirs:+:$dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export QT_QPA_PLATFORM=offscreen
}

environment() {
  {
    echo "== date"; date -u
    echo "== nvidia-smi"; nvidia-smi || true
    echo "== nvcc"; nvcc --version 2>/dev/null || echo "(no nvcc)"
    echo "== library folders"; echo "$LD_LIBRARY_PATH" | tr ':' '\n'
    echo "== libraries the engine resolves"; ldd "$root/bin/trainbench-engine"
    echo "== devices the engine sees"; "$root/bin/trainbench-engine" devices || true
    echo "== python packages"
    python3 -m pip list 2>/dev/null | grep -i -E '^(nvidia|torch)' || true
  } 2>&1 | tee "$out/environment.txt"
}

# "Totals: 12 passed, 0 failed, 3 skipped, ..." -> {"passed":12,...}
totals_json() {
  local line
  line=$(grep -a '^Totals:' "$1" | tail -n 1 || true)
  if [[ -z "$line" ]]; then echo '{"error":"no Totals line (crashed?)"}'; return; fi
  echo "$line" | sed -E 's/Totals: ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped.*/{"passed":\1,"failed":\2,"skipped":\3}/'
}

run() {
  unpack "$tests_tarball" "$tests_dir"
  environment
  local rc=0 summary="" s
  for s in "${suites[@]}"; do
    [[ -x "$root/bin/$s" ]] || continue
    set +e
    timeout 300 "$root/bin/$s" -o "$out/$s.txt,txt" -o -,txt >/dev/null 2>"$out/$s.stderr"
    local st=$?
    set -e
    (( st == 0 )) || rc=1
    echo "$s exit status: $st" | tee -a "$out/environment.txt"
    summary+="\"$s\": {\"exit\": $st, \"totals\": $(totals_json "$out/$s.txt")},"
  done

  local sanitizers=""
  if [[ "${MEMCHECK:-1}" != 0 ]] && command -v compute-sanitizer >/dev/null; then
    # The backend's own kernels (cuDNN/cuBLAS internals are not ours to check).
    # The allocator test is left out: its 1 PiB request is an expected failure.
    local tool
    for tool in memcheck racecheck; do
      set +e
      timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 99 \
        "$root/bin/test_cuda_backend" copyRoundTrip fillValues layoutConversion pointwise \
        softmaxCrossEntropy sumSquares pooling linear batchnorm optimizers \
        >"$out/$tool.txt" 2>&1
      local mc=$?
      set -e
      tail -n 5 "$out/$tool.txt"
      echo "$tool exit status: $mc (99 = errors found)" | tee -a "$out/environment.txt"
      sanitizers+="\"$tool\": $mc,"
    done
  fi
  local gpu
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1 || echo unknown)
  cat >"$out/gpu-check-summary.json" <<EOF
{"date": "$(date -u +%FT%TZ)", "gpu": "$gpu",
 "engine_devices": $(python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()))' < <("$root/bin/trainbench-engine" devices 2>&1 || true)),
 "suites": {${summary%,}},
 "sanitizers": {${sanitizers%,}}}
EOF
  cat "$out/gpu-check-summary.json"
  return $rc
}

bench() {
  unpack "$engine_tarball" "$stage_dir"
  environment >/dev/null
  local args=()
  [[ "${QUICK:-0}" != 0 ]] && args+=(--quick)
  PYTHONUNBUFFERED=1 python3 "$root/bench/gpu_vs_pytorch.py" --engine "$root/bin/trainbench-engine" \
    --output "$out/gpu-vs-pytorch.json" "${args[@]}"
}

accuracy() {
  unpack "$engine_tarball" "$stage_dir"
  environment >/dev/null
  local data="$here/$data_dir/fashion-mnist"
  [[ -f "$data/train-images-idx3-ubyte.gz" ]] || { echo "no $data: carry build-gpu-data" >&2; exit 2; }
  local db="$out/accuracy.db" epochs=${EPOCHS:-15}
  local eng="$root/bin/trainbench-engine"
  "$eng" run --db "$db" --quiet --device cuda --epochs 3 --set data_dir="$data" \
    --set name="fmnist-cnn gpu 3 epochs" || true
  "$eng" run --db "$db" --quiet --device cuda --set data_dir="$data" --set model=resnet18-cifar \
    --set pad_to_32=true --set random_crop_padding=4 --set horizontal_flip=true \
    --batch-size 256 --set lr=0.1 --epochs "$epochs" --set workers=8 --set pin_memory=true \
    --set non_blocking=true --set amp=bf16 --set channels_last=true \
    --set name="resnet18-cifar gpu fmnist-32 $epochs epochs" || true
  "$eng" list --db "$db" --json >"$out/gpu-accuracy.json"
  cat "$out/gpu-accuracy.json"
}

# The tensor pipe figure against ncu on the same run configuration.
ncu_check() {
  unpack "$engine_tarball" "$stage_dir"
  environment >/dev/null
  local ncu_bin
  ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1 || true)
  [[ -n "$ncu_bin" ]] || { echo '{"error": "no ncu on this machine"}' | tee "$out/tensor-pipe-vs-ncu.json"; exit 2; }
  local eng="$root/bin/trainbench-engine" steps=${NCU_STEPS:-6}
  local args
  read -r -a args <<<"${NCU_RUN_ARGS:---set dataset=synthetic --set model=resnet9 --set synthetic_size=4096 --set test_limit=256 --batch-size 256 --set amp=fp16 --set channels_last=true}"
  # Ours: every step from the second (the first holds cuDNN's autotuning).
  set +e
  TRAINBENCH_TENSOR_PIPE_EVERY=1 "$eng" run --db "$out/ncu-ours.db" --device cuda --steps "$steps" \
    --events jsonl "${args[@]}" >"$out/ours-events.jsonl" 2>"$out/ours.stderr"
  echo "our run exit status: $?"
  # ncu: every kernel of the same steps, replayed one by one. The metric our
  # profiler chose comes first; then the same candidates it tries.
  local chosen candidates=() m ok=""
  chosen=$(grep -ao 'tensor pipe counters on: [^,]*' "$out/ours-events.jsonl" | head -n 1 | sed 's/.*on: //; s/ + /,/g' || true)
  [[ -n "$chosen" ]] && candidates+=("$chosen")
  candidates+=(sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"
    sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active)
  for m in "${candidates[@]}"; do
    timeout 540 "$ncu_bin" --metrics "$m,gpu__time_duration.sum" --csv --print-units base \
      --target-processes all --log-file "$out/ncu.csv" \
      "$eng" run --db "$out/ncu-ncu.db" --quiet --device cuda --steps "$steps" "${args[@]}" \
      >"$out/ncu-run.stdout" 2>"$out/ncu-run.stderr"
    local st=$?
    echo "ncu with $m: exit status $st"
    if (( st == 0 )) && grep -q gpu__time_duration "$out/ncu.csv"; then ok=$m; break; fi
  done
  set -e
  NCU_METRICS="$ok" python3 - "$out/ncu.csv" "$out/ours-events.jsonl" "$out/tensor-pipe-vs-ncu.json" <<'PY'
import csv, json, os, sys
ncu_csv, ours_jsonl, dest = sys.argv[1:4]
metrics = [m for m in os.environ.get("NCU_METRICS", "").split(",") if m]
res = {"ncu_metrics": metrics}
# ncu: one row per (kernel launch, metric); the tensor pipe figure of a kernel
# is the sum of the chosen pipes, weighted by the kernel's duration.
kern = {}
if metrics and os.path.exists(ncu_csv):
    lines = [l for l in open(ncu_csv, errors="replace") if l.startswith('"')]
    for row in csv.DictReader(lines):
        try:
            v = float(row["Metric Value"].replace(",", ""))
        except (KeyError, ValueError):
            continue
        k = kern.setdefault(row["ID"], {"ns": None, "pct": 0.0, "name": row.get("Kernel Name", "")})
        if row["Metric Name"] == "gpu__time_duration.sum":
            k["ns"] = v
        elif row["Metric Name"] in metrics:
            k["pct"] += v
    timed = [k for k in kern.values() if k["ns"]]
    total = sum(k["ns"] for k in timed)
    if total > 0:
        res["ncu_weighted_pct"] = sum(k["pct"] * k["ns"] for k in timed) / total
        res["ncu_kernels"] = len(timed)
        res["ncu_kernel_time_ms"] = total / 1e6
if not kern:
    res["ncu_error"] = "no ncu figures (see ncu-run.stderr and ncu.csv)"
# Ours: the step events' tensor_pipe_active_pct, and what the run logged.
vals, logs = [], []
for line in open(ours_jsonl, errors="replace"):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if e.get("type") == "step" and "tensor_pipe_active_pct" in e.get("metrics", {}):
        vals.append([e["step"], e["metrics"]["tensor_pipe_active_pct"]])
    if e.get("type") == "log" and "tensor pipe" in e.get("message", ""):
        logs.append(e["message"])
res["ours_steps"] = vals
res["ours_log"] = logs
if vals:
    res["ours_mean_pct"] = sum(v for _, v in vals) / len(vals)
if "ours_mean_pct" in res and "ncu_weighted_pct" in res:
    res["difference_pct_points"] = res["ours_mean_pct"] - res["ncu_weighted_pct"]
res["note"] = ("ncu covers every kernel of every step (the first step and the "
               "end-of-run evaluation included), each replayed alone with caches flushed; "
               "ours covers steps 2.. in place, one range per step")
json.dump(res, open(dest, "w"), indent=1)
print(json.dumps(res, indent=1))
PY
}
case "${1:-run}" in
  stage) shift; stage "$@" ;;
  run) run ;;
  bench) bench ;;
  accuracy) accuracy ;;
  ncu) ncu_check ;;
  *) echo "usage: $0 stage [BUILD_DIR] | run | bench | accuracy | ncu" >&2; exit 2 ;;
esac
