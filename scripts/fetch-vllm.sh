#!/usr/bin/env bash
# Fetch the real vLLM server the vllm_server tests run over the simulated driver, into a venv
# of its own, target/vllm/venv (no root): vllm 0.33.0 and every package `pip install vllm==0.33.0`
# resolves for this Python (198 wheels: torch 2.14.0+cu130, triton 3.8.0, NCCL 2.30.7, cuBLAS
# 13.1.1.3, flashinfer-python 0.7.2.post1, ...), pinned exactly here and installed with
# `pip install --no-deps --no-index` from the downloaded wheels. vLLM's torch is not the
# frameworks' torch 2.15 (vllm 0.33.0 pins torch==2.14.0), hence the venv of its own.
# (0.34.0 pins flashinfer-python==0.7.3, which PyPI does not have: pip falls back to 0.33.0.)
# The wheels are cached in target/vllm/wheels (wheels already in target/frameworks/wheels, and
# in $VLLM_WHEELS when it names a folder of wheels, are reused, not downloaded again); the
# script returns at once when the pinned set is installed. When PyPI cannot be reached it writes
# the reason to target/vllm/unavailable and exits 0: the tests then skip with that one line.
# Sizes and times: README.md ("The real engines").
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# The physical path: a worktree whose target/vllm links to another checkout's shares its venv
# (whose scripts name the path it was made at) and must not rebuild it.
mkdir -p "$root/target/vllm" && base=$(cd "$root/target/vllm" && pwd -P)
py=${PYTHON:-python3}
pins=(
    vllm==0.33.0 apache-tvm-ffi==0.1.11 compressed-tensors==0.17.0 depyf==0.20.0
    flashinfer-python==0.7.2.post1 lark==1.2.2 lm-format-enforcer==0.11.3 numba==0.65.0
    nvtx==0.2.15 outlines_core==0.2.14 pynvvideocodec==2.0.4 quack-kernels==0.6.5 tilelang==0.1.12
    tokenspeed-mla==2.0.3 torch==2.14.0 torchaudio==2.11.0 torchvision==0.29.0 xgrammar==0.2.8
    nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cudnn-cu13==9.24.0.43
    nvidia-cusparselt-cu13==0.8.1 nvidia-cutlass-dsl-libs-base==4.8.0
    nvidia-cutlass-dsl-libs-cu12==4.8.0 nvidia-cutlass-dsl-libs-cu13==4.8.0
    nvidia-nccl-cu13==2.30.7 nvidia-nvshmem-cu13==3.4.5 nvidia-cublas==13.1.1.3
    nvidia-cuda-cupti==13.0.85 nvidia-cufft==12.0.0.61 nvidia-cufile==1.15.1.6
    nvidia-curand==10.4.0.35 nvidia-cusolver==12.0.4.66 nvidia-cusparse==12.6.3.3
    nvidia-cutlass-dsl-libs-core==4.8.0 nvidia-nvtx==13.0.85 aiohttp==3.14.5 anthropic==2.16.0
    certifi==2026.10.19.post1 fastsafetensors==0.5.0 filelock==4.3.2 huggingface_hub==2.4.0
    instanttensor==0.2.2 jsonschema==4.26.0 llguidance==1.7.6 mcp==2.3.0 mcp-types==2.3.0
    model-hosting-container-standards==0.1.16 multidict==7.2.1 numpy==2.3.5
    nvidia-cudnn-frontend==1.32.0 openai==3.60.0 opencv-python-headless==5.1.0.95
    opentelemetry-api==1.45.2 opentelemetry-exporter-otlp==1.45.2
    opentelemetry-exporter-otlp-proto-grpc==1.45.2 opentelemetry-exporter-otlp-proto-http==1.45.2
    opentelemetry-exporter-otlp-common==0.66b2 opentelemetry-exporter-otlp-proto-common==1.45.2
    opentelemetry-proto==1.45.2 opentelemetry-sdk==1.45.2
    opentelemetry-semantic-conventions==0.66b2 opentelemetry-semantic-conventions-ai==0.5.1
    orjson==3.13.0 oss-harmony==0.0.11 pillow==13.0.0 prometheus_client==0.26.0
    prometheus-fastapi-instrumentator==8.1.0 protobuf==7.36.2 pydantic==2.14.4
    pydantic_core==2.50.5 PyYAML==6.0.4 pyzmq==27.3.0 requests==2.34.2 safetensors==0.8.0
    starlette==1.10.0 tiktoken==0.14.0 tokenizers==0.23.3 torchcodec==0.17.0 tqdm==4.70.1
    transformers==5.20.2 regex==2026.11.19 typing_extensions==4.16.0 blake3==1.0.11
    cachetools==8.0.2 cbor2==6.3.0 cloudpickle==3.1.3 einops==0.8.2 ijson==3.6.0 msgspec==0.23.0
    ninja==1.13.2 partial-json-parser==0.2.1.1.post7 psutil==7.2.2 py-cpuinfo==9.0.0
    pybase64==1.5.1 python-json-logger==4.2.0 sentencepiece==0.2.3 setproctitle==1.3.8
    watchfiles==1.3.0 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 annotated-doc==0.0.7
    annotated-types==0.8.0 anyio==4.16.0 attrs==26.1.0 charset-normalizer==3.5.3 click==8.5.1
    cuda-python==13.4.4 cuda-bindings==13.4.4 cuda-tile==1.7.0 docstring_parser==0.18.0
    email-validator==2.4.0 fastar==0.12.0 frozenlist==1.8.0 fsspec==2026.9.0 hf-xet==1.8.0
    httpx==0.29.0 httpcore==1.0.9 httpx2==2.16.2 httpcore2==2.16.2 idna==3.20 interegular==0.3.3
    Jinja2==3.1.6 jiter==0.19.0 jsonschema-specifications==2025.9.1 llvmlite==0.47.0
    nccl-extensions==0.1.0 nccl4py==0.6.0 networkx==3.6.1 nvidia-cutlass-dsl==4.8.0 packaging==26.4
    propcache==0.5.4 pydantic-extra-types==2.11.1 pydantic-settings==2.16.3
    python-multipart==0.0.34 referencing==0.37.0 rpds-py==2026.9.1 setuptools==84.2.1
    sniffio==1.3.1 sse-starlette==3.7.1 supervisor==4.3.0 sympy==1.14.0
    tokenspeed-triton==3.9.10.post20261028 triton==3.8.0 typer==0.29.2 typing-inspection==0.4.5
    urllib3==2.8.0 uvicorn==0.55.0 yarl==1.25.1 z3-solver==4.15.4.0 astor==0.8.1 dill==0.4.1
    fastapi==0.136.3 humming-kernels==0.1.19 jmespath==1.1.0 loguru==0.7.3 mistral_common==1.13.1
    ml_dtypes==0.7.0 nvidia-cuda-cccl==13.3.5.0.6 nvidia-cuda-nvcc==13.5.37 nvidia-ml-py==13.615.71
    tabulate==0.10.0 torch_c_dlpack_ext==0.1.5 cryptography==50.0.2 cuda-core==1.2.2
    cuda-pathfinder==1.9.1 dnspython==2.9.2 fastapi-cloud-cli==0.28.0
    googleapis-common-protos==1.76.0 grpcio==1.85.3 h11==0.16.0 httptools==0.9.0 MarkupSafe==3.0.4
    mpmath==1.3.0 nvidia-nvjitlink==13.5.37 pycountry==26.2.16 python-dotenv==1.2.4 rich==15.0.0
    rich-toolkit==0.20.6 shellingham==1.5.4 truststore==0.10.5 uvloop==0.23.0 websockets==17.4
    cuda-toolkit==13.0.3.0 fastapi-cli==0.0.34 nvidia-cuda-crt==13.5.37 nvidia-nvvm==13.5.37
    PyJWT==2.15.1 agent-detector==2.0.0 cffi==2.1.1 detect-installer==0.2.1 markdown-it-py==4.3.0
    Pygments==2.21.0 rignore==0.8.1 sentry-sdk==2.75.0
    opentelemetry-exporter-http-transport==0.66b2 mdurl==0.1.2 pycparser==3.12
)
stamp="$("$py" -c 'import sys; print("cp%d%d" % sys.version_info[:2])') $base ${pins[*]}"
if [ -x "$base/venv/bin/python" ] && [ "$(cat "$base/venv/.pins" 2>/dev/null)" = "$stamp" ]; then
    exit 0
fi
mkdir -p "$base/wheels"
rm -f "$base/unavailable"
links=()
for d in ${VLLM_WHEELS:+"$VLLM_WHEELS"} "$root/target/frameworks/wheels"; do
    [ -d "$d" ] && links+=(--find-links "$d")
done
echo "fetch-vllm: downloading vllm 0.33.0, torch 2.14.0 and the 196 other wheels pip resolves for it (about 5 GB) into $base" >&2
if ! log=$("$py" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    "${links[@]}" -d "$base/wheels" "${pins[@]}" 2>&1); then
    reason=$(printf '%s\n' "$log" | grep -m1 -iE "error|could not|failed" || printf '%s\n' "$log" | tail -n1)
    echo "PyPI could not be reached for the pinned vLLM wheels: $reason" > "$base/unavailable"
    echo "fetch-vllm: $(cat "$base/unavailable"); the real vLLM server tests will be skipped" >&2
    exit 0
fi
wheels=()
for pin in "${pins[@]}"; do
    name=${pin%%==*} ver=${pin#*==}
    norm=$(printf '%s' "$name" | tr 'A-Z-' 'a-z_')
    w=$(ls "$base/wheels/" | grep -i "^${norm}-${ver}-" | sed -n 1p); [ -n "$w" ] || { echo "fetch-vllm: no wheel for $pin" >&2; exit 1; }
    wheels+=("$base/wheels/$w")
done
rm -rf "$base/venv"
"$py" -m venv "$base/venv" || { echo "fetch-vllm: python -m venv failed" >&2; exit 1; }
"$base/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-index --no-compile \
    "${wheels[@]}" || { echo "fetch-vllm: pip install failed" >&2; rm -rf "$base/venv"; exit 1; }
echo "$stamp" > "$base/venv/.pins"
echo "fetch-vllm: installed in $base/venv (run with $base/venv/bin/python)" >&2
