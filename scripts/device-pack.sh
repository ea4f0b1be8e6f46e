# SPDX-License-Identifier: GPL-3.0-or-later
# What the scripts that run on the lent device machine share (sourced by
# scripts/gpu-check.sh and scripts/device-cpu-bench.sh): which libraries
# travel with the binaries, the device tool's 64 MiB, the bytes of the
# working tree it sends, and the packed libstdc++ as a fallback only.

device_limit_bytes=$((64 << 20))

# Libraries the device machine provides itself (driver, CUDA, glibc): never packed.
is_system_lib() {
  case "$(basename "$1")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libgcc_s.so*|linux-vdso*) return 0 ;;
    libcuda.so*|libcudart*|libcublas*|libcudnn*|libnvrtc*|libnvidia*|libnvJitLink*|libcupti*|libnvperf*) return 0 ;;
    # NCCL (218 MB, over the device tool's 64 MiB alone): the image's pip nvidia-nccl-cu13 has it.
    libnccl.so*) return 0 ;;
  esac
  return 1
}

# Copies each binary into DIR/bin and the libraries it links (ldd here, less
# the system ones) into DIR/lib.
pack_binaries() {
  local dir=$1 b lib
  shift
  mkdir -p "$dir/bin" "$dir/lib"
  for b in "$@"; do
    cp "$b" "$dir/bin/" || return 1
    ldd "$b" | awk '/=> \//{print $3}' | while read -r lib; do
      is_system_lib "$lib" || cp -L -n "$lib" "$dir/lib/"
    done
  done
}

# Fashion-MNIST as raw IDX files in one xz stream at PACK (26 MiB, Debian's
# .gz 30 MiB): the engine's loader and bench/torch_fmnist_cnn.py read them as
# they are once unpacked there. WHY says what needs it, for the error.
pack_fashion_mnist() {
  local pack=$1 why=$2 f raw
  raw=$(dirname "$pack")/fashion-mnist
  mkdir -p "$raw"
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    [[ -f /usr/share/datasets/fashion-mnist/$f.gz ]] || {
      echo "no Fashion-MNIST here (scripts/setup.sh installs it): $why" >&2; return 2; }
    gzip -dc "/usr/share/datasets/fashion-mnist/$f.gz" >"$raw/$f" || return 1
  done
  tar -C "$raw" -cf - . | xz -9e -T2 >"$pack" || return 1
  rm -rf "$raw"
}

# Says what DIR and the working tree weigh against the tool's 64 MiB; fails past it.
check_device_size() {
  local dir=$1 staged tree
  staged=$(du -sb "$dir" | cut -f1)
  tree=$(tree_bytes)
  echo "staged: $dir $(numfmt --to=iec-i "$staged")B ($(cd "$dir" && for f in *; do
         printf '%s %sB, ' "$f" "$(numfmt --to=iec-i "$(stat -c %s "$f")")"; done | sed 's/, $//'))" \
       "+ working tree $(numfmt --to=iec-i "$tree")B = $(numfmt --to=iec-i $((staged + tree)))B of 64MiB"
  (( staged + tree <= device_limit_bytes )) || { echo "too large for the device tool (64 MiB)" >&2; return 1; }
}

# Bytes the device tool would send: tracked and untracked-not-ignored files.
tree_bytes() {
  git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -L -c %s 2>/dev/null |
    awk '{s += $1} END {print s + 0}'
}

# The packed libstdc++ (from the build machine) is a fallback only: the
# device's own is newer, and cuDNN/cuBLAS may need its newer symbols. Removes
# LIBDIR's copy where the system's has every symbol version it has.
prefer_system_libstdcxx() {
  local libdir=$1 sys_stdcxx need
  sys_stdcxx=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/{p=$NF} END{print p}' || true)
  if [[ -n "$sys_stdcxx" && -f "$libdir/libstdc++.so.6" ]]; then
    need=$(grep -ao 'GLIBCXX_3\.4\.[0-9]*' "$libdir/libstdc++.so.6" | sort -V | tail -n 1 || true)
    if [[ -n "$need" ]] && grep -aqx "$need" <(grep -ao 'GLIBCXX_3\.4\.[0-9]*' "$sys_stdcxx"); then
      rm -f "$libdir/libstdc++.so.6"
    fi
  fi
}

# Unpacks an xz tarball into DIR, with python3's lzma where xz is missing.
unpack_xz() {
  local tarball=$1 dir=$2
  if command -v xz >/dev/null; then
    xz -dc "$tarball" | tar -C "$dir" -xf -
  else
    python3 -c 'import lzma, sys, tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])' \
      "$tarball" "$dir"
  fi
}
