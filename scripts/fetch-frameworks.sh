#!/usr/bin/env bash
# Fetch the real frameworks the framework tests run over the simulated driver, as pinned wheels
# from PyPI, into target/frameworks/site (`pip install --no-deps --target`, no root):
#   torch 2.15.0 (cu132 build, the one PyPI serves) and what it needs to import and to load
#     libtorch_cuda.so (its DT_NEEDED: cudart 13.2.86, cuBLAS, cuFFT, cuFile, cuSPARSE(Lt),
#     cuSOLVER, cuDNN, NCCL, NVSHMEM, NVRTC, CUPTI, nvJitLink; Python: sympy, networkx, jinja2,
#     fsspec, filelock, typing-extensions, setuptools); triton (only torch.compile uses it) and
#     the CCCL headers are left out;
#   cupy-cuda13x 14.2.0 with cuda-pathfinder, cuda-bindings and numpy;
#   nvidia-nccl-cu13 2.30.7 (torch.distributed's NCCL backend).
# The wheels (about 2.7 GB) are cached in target/frameworks/wheels; the script returns at once
# when the pinned set is installed. When PyPI cannot be reached it writes the reason to
# target/frameworks/unavailable and exits 0: the tests then skip with that one line.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base="$root/target/frameworks"
py=${PYTHON:-python3}
. "$root/scripts/pinned-wheels.sh"
pins=(
    torch==2.15.0 cupy-cuda13x==14.2.0 nvidia-nccl-cu13==2.30.7
    nvidia-cuda-runtime==13.2.86 nvidia-cublas==13.4.1.3 nvidia-cuda-cupti==13.2.86
    nvidia-cuda-nvrtc==13.2.86 nvidia-cufft==12.2.0.57 nvidia-cufile==1.17.1.22
    nvidia-cusolver==12.2.0.11 nvidia-cusparse==12.7.10.12 nvidia-cusparselt-cu13==0.8.1
    nvidia-cudnn-cu13==9.26.0.51 nvidia-nvshmem-cu13==3.7.2 nvidia-nvjitlink==13.5.37
    nvidia-nvtx==13.2.86 cuda-toolkit==13.2.2 cuda-bindings==13.5.0 cuda-pathfinder==1.9.1
    numpy==2.4.6 sympy==1.14.0 mpmath==1.3.0 networkx==3.6.1 Jinja2==3.1.6 MarkupSafe==3.0.4
    fsspec==2026.9.0 filelock==4.3.1 typing_extensions==4.16.0 setuptools==84.2.1
)
stamp="$("$py" -c 'import sys; print("cp%d%d" % sys.version_info[:2])') ${pins[*]}"
if [ -f "$base/site/torch/__init__.py" ] && [ "$(cat "$base/site/.pins" 2>/dev/null)" = "$stamp" ]; then
    exit 0
fi
echo "fetch-frameworks: downloading torch 2.15.0, cupy-cuda13x 14.2.0, nvidia-nccl-cu13 2.30.7 and the CUDA 13 libraries they load (about 2.7 GB of wheels) into $base" >&2
pinned_download fetch-frameworks "$base" framework "${pins[@]}" || exit 0
pinned_install fetch-frameworks "$base" "$base/site.tmp" "${pins[@]}"
echo "$stamp" > "$base/site.tmp/.pins"
rm -rf "$base/site"
mv "$base/site.tmp" "$base/site"
echo "fetch-frameworks: installed in $base/site" >&2
