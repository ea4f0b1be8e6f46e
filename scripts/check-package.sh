#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Builds the Debian packages with CPack and checks them the way a user meets them:
# lintian (no errors), desktop-file-validate, appstreamcli validate-tree, installable
# with apt, unpacked into a scratch root (dpkg -x) and run from there with the
# source and build trees hidden: `trainbench-engine run --steps 5`, the GUI
# offscreen, `man -l` of both pages. One version everywhere: the package's,
# both programs' --version and the run store's engine_version.
#
# The CPU packages (trainbench, trainbench-engine) come from build/ when build/
# has no CUDA backend; otherwise from build-deb/ (TRAINBENCH_CUDA=OFF, programs
# only). When build/ has the CUDA backend, its trainbench-engine-cuda package is
# built and checked too, short of running on a GPU (none here).
set -euo pipefail
cd "$(dirname "$0")/.."
root_dir=$PWD
started=$SECONDS
jobs=${TRAINBENCH_JOBS:-$(nproc)}
say() { echo "check-package: $*"; }
# (grep without -q after a pipe: -q would stop reading early and, with pipefail,
# fail the writer with SIGPIPE.)
fail() { echo "check-package: FAILED: $*" >&2; exit 1; }

engine_package_of() {  # the engine package a configured build dir makes
  sed -n 's/^set(CPACK_DEBIAN_ENGINE_PACKAGE_NAME "\(.*\)")$/\1/p' "$1/CPackConfig.cmake" 2>/dev/null
}

cpu_build=build
if [ "$(engine_package_of build)" != "trainbench-engine" ]; then
  cpu_build=build-deb
  say "build/ has the CUDA backend (or is not configured): building the CPU packages in $cpu_build/"
  cmake -S . -B "$cpu_build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DTRAINBENCH_CUDA=OFF -DTRAINBENCH_TESTS=OFF >/dev/null
fi
cmake --build "$cpu_build" --parallel "$jobs"
[ "$(engine_package_of "$cpu_build")" = "trainbench-engine" ] || fail "$cpu_build/ is not a build without CUDA"

rm -rf "$cpu_build/packages"
(cd "$cpu_build" && cpack -G DEB >/dev/null && cpack --config CPackSourceConfig.cmake >/dev/null) ||
  fail "cpack in $cpu_build/"
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$cpu_build/CPackConfig.cmake")
arch=$(dpkg --print-architecture)
gui_deb=$cpu_build/packages/trainbench_${version}_${arch}.deb
engine_deb=$cpu_build/packages/trainbench-engine_${version}_${arch}.deb
source_tgz=$cpu_build/packages/trainbench-${version}.tar.gz
for f in "$gui_deb" "$engine_deb" "$source_tgz"; do [ -s "$f" ] || fail "cpack made no $f"; done
say "built $(cd "$cpu_build/packages" && ls ./*.deb ./*.tar.gz | tr '\n' ' ')"

scratch=$(mktemp -d /tmp/trainbench-package.XXXXXX)
trap 'rm -rf "$scratch"' EXIT

# The source tarball: the tree without build folders, .git or .deps.
tar tzf "$source_tgz" >"$scratch/source.list"
grep -qx "trainbench-$version/CMakeLists.txt" "$scratch/source.list" || fail "$source_tgz lacks CMakeLists.txt"
if grep -E "^trainbench-$version/(build[^/]*|\.git|\.deps)(/|$)" "$scratch/source.list"; then
  fail "$source_tgz holds build output or VCS files (above)"
fi

check_lintian() {  # no errors; warnings are shown
  local out ok=1
  out=$(lintian --fail-on error --display-level '>=warning' "$@" 2>&1) || ok=""
  out=$(printf '%s\n' "$out" | grep -v 'running with root privileges' || true)
  [ -n "$ok" ] || { echo "$out" >&2; fail "lintian reports errors (above)"; }
  say "lintian $(for d in "$@"; do basename "$d"; done | tr '\n' ' '): no errors${out:+; warnings:}"
  [ -z "$out" ] || echo "$out" | sed 's/^/    /'
}
check_lintian "$engine_deb" "$gui_deb"

field() { dpkg-deb -f "$1" "$2"; }
[ "$(field "$engine_deb" Version)" = "$version" ] || fail "engine package version"
field "$gui_deb" Depends | grep "trainbench-engine (= $version)" >/dev/null || fail "trainbench does not depend on trainbench-engine (= $version)"
field "$engine_deb" Recommends | grep -w dataset-fashion-mnist >/dev/null || fail "trainbench-engine does not recommend dataset-fashion-mnist"
for deb in "$engine_deb" "$gui_deb"; do
  if field "$deb" Depends | grep -Ei 'nvidia|cuda|cudnn|cublas' >/dev/null; then
    fail "$(basename "$deb") depends on NVIDIA packages: $(field "$deb" Depends)"
  fi
done
# Installable: apt resolves every dependency from the Debian archive (simulated).
apt-get install --simulate -qq "./$engine_deb" "./$gui_deb" >"$scratch/apt.log" 2>&1 ||
  { cat "$scratch/apt.log" >&2; fail "apt cannot install the packages (above; are apt's lists there: apt-get update?)"; }
say "apt can install both packages (simulated)"

root=$scratch/root
dpkg -x "$engine_deb" "$root"
dpkg -x "$gui_deb" "$root"
app_id=$(basename "$(ls "$root"/usr/share/applications/*.desktop)" .desktop)
desktop-file-validate "$root/usr/share/applications/$app_id.desktop" || fail "desktop-file-validate"
# validate-tree: the metainfo, and that its launchable desktop entry is installed.
appstreamcli validate-tree --no-net --explain "$root" || fail "appstreamcli validate-tree"
for size in 16x16 22x22 24x24 32x32 48x48 64x64 128x128 256x256 512x512; do
  png=$root/usr/share/icons/hicolor/$size/apps/$app_id.png
  file "$png" | grep "PNG image data, ${size/x/ x }," >/dev/null || fail "no $size icon: $png"
done
[ -s "$root/usr/share/icons/hicolor/scalable/apps/$app_id.svg" ] || fail "no scalable icon"
say "desktop entry, metainfo and icons of $app_id are valid"

# Nothing in the CPU packages needs an NVIDIA library or points into a build tree.
for exe in "$root"/usr/bin/*; do
  if readelf -d "$exe" | grep -E '(RPATH|RUNPATH)' >/dev/null; then fail "$exe has an RPATH/RUNPATH"; fi
  if ldd "$exe" | grep -Ei 'libcuda|libcudart|libcublas|libcudnn|libnvrtc|libcupti|libnv|not found'; then fail "$exe needs the libraries above"; fi
done

# Run the installed programs from the scratch root with the checkout hidden
# (a private mount namespace with an empty tmpfs over it), a fresh HOME and no
# build folders on PATH.
mkdir -p "$scratch/home"
hide=(unshare --mount -- sh -c 'mount -t tmpfs trainbench-hidden "$0" && exec "$@"' "$root_dir")
if ! "${hide[@]}" true 2>/dev/null; then
  say "NOTE: cannot hide the checkout here (unshare --mount needs root); running from the scratch root beside it"
  hide=()
fi
installed() {
  (cd "$scratch" && "${hide[@]}" env -i PATH="$root/usr/bin:/usr/bin:/bin" HOME="$scratch/home" \
     XDG_RUNTIME_DIR="$scratch" LANG=C.UTF-8 QT_QPA_PLATFORM=offscreen "$@")
}

[ "$(installed trainbench-engine --version)" = "trainbench-engine $version" ] ||
  fail "installed trainbench-engine --version: $(installed trainbench-engine --version)"
[ "$(installed trainbench --version 2>/dev/null)" = "trainbench $version" ] ||
  fail "installed trainbench --version: $(installed trainbench --version 2>&1)"

db=$scratch/runs.db
installed trainbench-engine run --steps 5 --db "$db" --quiet || fail "installed trainbench-engine run --steps 5"
read -r status engine_version < <(sqlite3 -separator ' ' "$db" "SELECT status, engine_version FROM runs WHERE id = 1") || true
[ "$status" = "finished" ] || fail "the installed engine's run is $status, not finished"
[ "$engine_version" = "$version" ] || fail "the run store's engine_version is $engine_version, the package's $version"
say "installed trainbench-engine $version: run --steps 5 finished, engine_version $engine_version in the store"

# The GUI offscreen: loads its presets and trick texts from the installed data
# folder, shows the stored run, and launches a 5-step run on the engine it finds
# beside itself (the run's row is written by that engine).
echo '{"max_steps": 5, "train_limit": 2000, "test_limit": 500}' >"$scratch/five-steps.json"
installed trainbench --db "$db" --preset Baseline --config "$scratch/five-steps.json" --open-run 1 --run \
  --screenshot "$scratch/gui.png" --screenshot-delay 8000 >"$scratch/gui.log" 2>&1 ||
  { cat "$scratch/gui.log" >&2; fail "installed trainbench"; }
if grep -Ei 'no preset|does not exist|cannot|not found' "$scratch/gui.log"; then fail "the installed GUI warned (above)"; fi
file "$scratch/gui.png" | grep 'PNG image data' >/dev/null || fail "the installed GUI saved no picture"
read -r status engine_version < <(sqlite3 -separator ' ' "$db" "SELECT status, engine_version FROM runs WHERE id = 2") || true
[ "$engine_version" = "$version" ] || fail "the GUI's run was not recorded by the installed engine $version"
say "installed trainbench started offscreen, applied a preset, opened run 1, ran run 2 on the installed engine ($status)"

for prog in trainbench trainbench-engine; do
  page=$root/usr/share/man/man1/$prog.1.gz
  LC_ALL=C MANWIDTH=80 man --warnings -l "$page" >"$scratch/$prog.txt" 2>"$scratch/$prog.err" || fail "man -l $page"
  [ ! -s "$scratch/$prog.err" ] || { cat "$scratch/$prog.err" >&2; fail "man -l $page warned"; }
  grep -q "^NAME" "$scratch/$prog.txt" || fail "man -l $page rendered no NAME section"
  PATH="$root/usr/bin:$PATH" QT_QPA_PLATFORM=offscreen XDG_RUNTIME_DIR="$scratch" packaging/man/check-man-page.sh "$root/usr/bin/$prog" "$page"
done
say "man -l renders both pages ($(wc -l <"$scratch/trainbench-engine.txt") and $(wc -l <"$scratch/trainbench.txt") lines)"

# The CUDA engine package, from build/ when it has the CUDA backend.
if [ "$(engine_package_of build)" = "trainbench-engine-cuda" ]; then
  cmake --build build --parallel "$jobs" --target trainbench-engine packaging_files
  rm -rf build/packages
  (cd build && cpack -G DEB >/dev/null) || fail "cpack in build/"
  cuda_deb=build/packages/trainbench-engine-cuda_${version}_${arch}.deb
  [ -s "$cuda_deb" ] || fail "cpack made no $cuda_deb"
  check_lintian "$cuda_deb"
  field "$cuda_deb" Provides | grep "trainbench-engine (= $version)" >/dev/null || fail "trainbench-engine-cuda does not provide trainbench-engine"
  field "$cuda_deb" Conflicts | grep -w trainbench-engine >/dev/null || fail "trainbench-engine-cuda does not conflict with trainbench-engine"
  dpkg -x "$cuda_deb" "$scratch/cuda-root"
  ldd "$scratch/cuda-root/usr/bin/trainbench-engine" | grep libcublas >/dev/null || fail "the CUDA engine does not link cuBLAS"
  [ "$("$scratch/cuda-root/usr/bin/trainbench-engine" --version)" = "trainbench-engine $version" ] ||
    fail "trainbench-engine-cuda --version"
  say "trainbench-engine-cuda $version built, lintian-clean, starts (not run on a GPU: none here)"
else
  say "build/ has no CUDA backend: no trainbench-engine-cuda package checked"
fi

say "all checks passed in $((SECONDS - started)) s"
