#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Builds the libFuzzer targets (fuzz/, clang, ASan + UBSan) in build-fuzz/,
# replays every crash kept in fuzz/regressions/<target>/ (they must all pass
# now), then fuzzes each target for FUZZ_SECONDS (default 60) from its seed
# corpus fuzz/corpus/<target>/. A new crash is copied into
# fuzz/regressions/<target>/ (commit it with the fix) and fails the check.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
jobs=${TRAINBENCH_JOBS:-$(nproc)}
t0=$(date +%s)
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DTRAINBENCH_CUDA=OFF -DTRAINBENCH_GUI=OFF -DTRAINBENCH_TESTS=OFF -DTRAINBENCH_FUZZ=ON >/dev/null
targets=()
for src in fuzz/*_fuzzer.cpp; do targets+=("$(basename "$src" .cpp)"); done
cmake --build build-fuzz --parallel "$jobs" --target "${targets[@]}"
t1=$(date +%s)
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=()
for target in "${targets[@]}"; do
  name=${target%_fuzzer}
  bin=build-fuzz/bin/$target
  regressions=fuzz/regressions/$name
  if compgen -G "$regressions/*" >/dev/null; then
    echo "check-fuzz: $target: replaying $regressions"
    "$bin" -runs=1 "$regressions"/* || { failed+=("$target (a kept regression)"); continue; }
  fi
  corpus=build-fuzz/corpus/$name
  artifacts=build-fuzz/artifacts/$name
  mkdir -p "$corpus" "$artifacts"
  echo "check-fuzz: $target: fuzzing for $seconds s"
  if ! "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
       -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" "fuzz/corpus/$name" \
       2>"build-fuzz/$target.log"; then
    tail -n 60 "build-fuzz/$target.log"
    mkdir -p "$regressions"
    for crash in "$artifacts"/*; do
      [ -f "$crash" ] && cp "$crash" "$regressions/" && echo "check-fuzz: kept $regressions/$(basename "$crash")"
    done
    failed+=("$target")
  else
    grep -E "stat::number_of_executed_units|stat::new_units_added" "build-fuzz/$target.log" |
      sed "s/^/check-fuzz: $target: /"
  fi
done
t2=$(date +%s)
echo "check-fuzz: build $((t1 - t0)) s, fuzzing $((t2 - t1)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "check-fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
