#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# One command for the lent GPU machine: check the CUDA backend there.
#
# The GPU machine has the driver, nvcc, cuDNN/cuBLAS (in /usr/local/cuda/lib64
# and/or PyTorch's python nvidia.* packages) but no Qt and no OpenBLAS, and
# only the working tree plus up to 8 ignored paths travel (64 MiB). So the
# test binaries are built HERE and packed with the non-CUDA runtime libraries
# they need (Qt6Core/Qt6Test, ICU, OpenBLAS ...) into build-gpu/stage.tar.gz,
# which the run tool carries. See docs/gpu-check.md for the exact call.
#
#   scripts/gpu-check.sh stage [BUILD_DIR | TEST_BINARY]   (here, no GPU needed)
#       BUILD_DIR defaults to build-cuda; it is configured and built when missing
#       (-DTRAINBENCH_CUDA=ON -DTRAINBENCH_GUI=OFF -DCMAKE_CUDA_ARCHITECTURES=90).
#       A path to a test binary stages that binary alone.
#   scripts/gpu-check.sh run                                (on the GPU machine)
#       prints nvidia-smi and library versions, runs the CUDA test suite, then
#       compute-sanitizer memcheck on a subset of it, and copies logs to $OUT.
#       MEMCHECK=0 skips the sanitizer run.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
stage_dir=build-gpu
tarball=$stage_dir/stage.tar.gz

# Libraries the GPU machine provides itself (driver, CUDA, glibc): never packed.
is_system_lib() {
  case "$(basename "$1")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libgcc_s.so*|linux-vdso*) return 0 ;;
    libcuda.so*|libcudart*|libcublas*|libcudnn*|libnvrtc*|libnvidia*|libnvJitLink*) return 0 ;;
  esac
  return 1
}

stage() {
  local src=${1:-build-cuda}
  local bins=()
  if [[ -f "$src" ]]; then
    bins=("$src")
  else
    if [[ ! -d "$src" ]]; then
      cmake -S . -B "$src" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINBENCH_CUDA=ON \
        -DTRAINBENCH_GUI=OFF -DCMAKE_CUDA_ARCHITECTURES=90
    fi
    # Two cores here: build only what the GPU run needs.
    cmake --build "$src" --target test_cuda_backend -j 2
    bins=("$src/bin/test_cuda_backend")
  fi
  rm -rf "$stage_dir/pack"
  mkdir -p "$stage_dir/pack/bin" "$stage_dir/pack/lib"
  for b in "${bins[@]}"; do
    cp "$b" "$stage_dir/pack/bin/test_cuda_backend"
    # Every shared library it resolves here, except the ones the device has.
    ldd "$b" | awk '/=> \//{print $3}' | while read -r lib; do
      is_system_lib "$lib" || cp -L "$lib" "$stage_dir/pack/lib/"
    done
  done
  tar -C "$stage_dir/pack" -czf "$tarball" .
  rm -rf "$stage_dir/pack"
  echo "staged $(du -h "$tarball" | cut -f1) in $tarball:"
  tar -tzf "$tarball" | sed 's/^/  /'
  local mib=$(( $(stat -c %s "$tarball") / 1048576 ))
  if (( mib > 56 )); then
    echo "warning: $mib MiB; the working tree and carried paths must stay under 64 MiB" >&2
  fi
}

# Folders holding libcudnn/libcublas/libcublasLt/libnvrtc on the device.
cuda_lib_dirs() {
  local roots=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib)
  local nv
  nv=$(python3 -c 'import nvidia, sys; print("\n".join(list(nvidia.__path__)))' 2>/dev/null || true)
  [[ -n "$nv" ]] && roots+=($nv)
  for name in libcudnn.so.9 libcublas.so.13 libcublasLt.so.13 libnvrtc.so.13; do
    { find -H "${roots[@]}" -name "$name" 2>/dev/null || true; } | head -n 1 | xargs -r dirname || true
  done | awk '!seen[$0]++'
}

run() {
  local out=${OUT:-$here/build-gpu/out}
  mkdir -p "$out"
  [[ -f "$tarball" ]] || { echo "no $tarball: run 'scripts/gpu-check.sh stage' first and carry build-gpu" >&2; exit 2; }
  local root=/tmp/trainbench-gpu
  rm -rf "$root" && mkdir -p "$root" && tar -C "$root" -xzf "$tarball"
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

  {
    echo "== date"; date -u
    echo "== nvidia-smi"; nvidia-smi || true
    echo "== nvcc"; nvcc --version 2>/dev/null || echo "(no nvcc)"
    echo "== library folders"; echo "$LD_LIBRARY_PATH" | tr ':' '\n'
    echo "== libraries the test resolves"; ldd "$root/bin/test_cuda_backend"
    echo "== python nvidia packages"
    python3 -m pip list 2>/dev/null | grep -i -E '^(nvidia|torch)' || true
  } 2>&1 | tee "$out/environment.txt"

  # Qt Test writes the plain log to stdout and a JUnit file beside it.
  local rc=0
  set +e
  QT_QPA_PLATFORM=offscreen timeout 480 "$root/bin/test_cuda_backend" \
    -o "$out/test_cuda_backend.txt,txt" -o "$out/test_cuda_backend.xml,junitxml" -o -,txt
  rc=$?
  set -e
  echo "test_cuda_backend exit status: $rc" | tee -a "$out/environment.txt"

  if [[ "${MEMCHECK:-1}" != 0 ]] && command -v compute-sanitizer >/dev/null; then
    # The backend's own kernels (cuDNN/cuBLAS internals are not ours to check).
    # The allocator test is left out: its 1 PiB request is an expected failure.
    set +e
    timeout 300 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 99 \
      "$root/bin/test_cuda_backend" copyRoundTrip fillValues layoutConversion pointwise \
      softmaxCrossEntropy sumSquares pooling linear batchnorm optimizers \
      >"$out/memcheck.txt" 2>&1
    local mc=$?
    set -e
    tail -n 20 "$out/memcheck.txt"
    echo "memcheck exit status: $mc (99 = errors found)" | tee -a "$out/environment.txt"
  fi
  ls -l "$out"
  return $rc
}

case "${1:-run}" in
  stage) shift; stage "$@" ;;
  run) run ;;
  *) echo "usage: $0 stage [BUILD_DIR|TEST_BINARY] | run" >&2; exit 2 ;;
esac
