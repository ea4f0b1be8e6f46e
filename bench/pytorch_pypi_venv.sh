#!/bin/sh
# SPDX-License-Identifier: GPL-3.0-or-later
# A current PyTorch from PyPI as the CPU peer, beside Debian's 1.13: the
# device machine's image runs PyTorch 2.x (its own oneDNN 3.x and MKL), so
# scripts/device-cpu-bench.sh compares the engine with that, and this is the
# way to the same kind of peer on a development machine.
#
#   bench/pytorch_pypi_venv.sh /tmp/torch-pypi          # makes the venv
#   bench/cpu_vs_pytorch.py --python /tmp/torch-pypi/python ...
#
# PyPI's wheel is built with CUDA and links its libraries even when run on the
# CPU. CUDA's runtime, cuBLAS and cuDNN come from /usr/local/cuda (this
# project's machines have it); the four it links that the toolkit lacks or has
# too old (NCCL, cuSPARSELt, NVSHMEM, cuFile) come from their PyPI wheels,
# without their dependencies: about 1.3 GB of downloads instead of the 3 GB a
# full `pip install torch` pulls. `python` in the venv's root is a wrapper
# that sets the library path.
set -eu
venv=${1:?usage: pytorch_pypi_venv.sh DIR}
torch_version=${TORCH_VERSION:-2.15.0}
cuda_lib=${CUDA_LIB:-/usr/local/cuda/lib64}

[ -e "$cuda_lib/libcudart.so.13" ] || {
  echo "pytorch_pypi_venv.sh: $cuda_lib/libcudart.so.13 not found (CUDA_LIB names CUDA 13's libraries)" >&2
  exit 1
}
python3 -m venv "$venv"
pip="$venv/bin/pip"
"$pip" install --quiet --no-warn-conflicts --no-deps "torch==$torch_version"
# What the wheel's own metadata pins, for the libraries the toolkit does not give.
pinned() {
  "$venv/bin/python" - "$1" <<'EOF'
import importlib.metadata as m, re, sys
for r in m.requires("torch") or []:
    name = re.split(r"[=<>;\s]", r, maxsplit=1)[0]
    if name == sys.argv[1]:
        print(r.split(";")[0].strip())
        break
else:
    print(sys.argv[1])
EOF
}
for lib in nvidia-nccl-cu13 nvidia-cusparselt-cu13 nvidia-nvshmem-cu13; do
  "$pip" install --quiet --no-warn-conflicts --no-deps "$(pinned $lib)"
done
# cuFile: the cu13 name is a source package that does not build here; the
# plain wheel holds the same libcufile.so.0.
"$pip" install --quiet --no-warn-conflicts --no-deps nvidia-cufile
"$pip" install --quiet --no-warn-conflicts numpy typing_extensions sympy filelock jinja2 networkx fsspec

libs=$(find "$venv" \( -name 'libnccl.so.2' -o -name 'libcusparseLt.so.0' \
  -o -name 'libnvshmem_host.so.3' -o -name 'libcufile.so.0' \) -exec dirname {} \; |
  sort -u | tr '\n' ':')
cat >"$venv/python" <<EOF
#!/bin/sh
LD_LIBRARY_PATH=$libs$cuda_lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec "$venv/bin/python" "\$@"
EOF
chmod +x "$venv/python"
"$venv/python" -c 'import torch; print("torch", torch.__version__, "oneDNN", torch.backends.mkldnn.is_available())'
