#!/usr/bin/env bash
# Fetch the real SGLang server the sglang_server tests run over the simulated driver, as pinned
# wheels from PyPI, into target/sglang (`pip install --no-deps --target`, no root):
#   sglang 0.5.23, sglang-kernel 0.4.10 and what `python -m sglang.launch_server` imports to
#   serve a LlamaForCausalLM (found by importing and launching it, one module at a time:
#   shared/real-sglang-notes.md), triton 3.9.0 (torch 2.15's own pin; SGLang imports it
#   unconditionally), torchvision 0.29.2 (its pure-Python wheel accepts torch >= 2.14) and
#   nvidia-cutlass-dsl 4.8.0 (SGLang builds a Llama MLP through `cutlass`).
# torch is NOT fetched here: it is the frameworks' torch 2.15.0 (scripts/fetch-frameworks.sh,
# target/frameworks/site), never replaced (sglang 0.5.23 itself pins torch 2.14.1). The tests
# run target/sglang/venv/bin/python, a venv without the system's site-packages whose .pth adds
# target/sglang/site and then target/frameworks/site as site directories (their own .pth files,
# e.g. nvidia-cutlass-dsl's, apply).
# The wheels (about 830 MB; 2.3 GB installed) are cached in target/sglang/wheels; the script
# returns at once when the pinned set is installed. When PyPI cannot be reached it writes the
# reason to target/sglang/unavailable and exits 0: the tests then skip with that one line.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base="$root/target/sglang"
py=${PYTHON:-python3}
. "$root/scripts/pinned-wheels.sh"
pins=(
    sglang==0.5.23 sglang-kernel==0.4.10 triton==3.9.0 torchvision==0.29.2
    nvidia-cutlass-dsl==4.8.0 nvidia-cutlass-dsl-libs-base==4.8.0 nvidia-cutlass-dsl-libs-core==4.8.0
    nvidia-cutlass-dsl-libs-cu13==4.8.0 nvidia-ml-py==13.580.82 apache-tvm-ffi==0.1.11 xgrammar==0.2.7
    transformers==5.19.0 tokenizers==0.23.2 huggingface-hub==1.33.0 hf-xet==1.8.0 safetensors==0.8.0
    compressed-tensors==0.18.0 sentencepiece==0.2.1 gguf==0.19.0 einops==0.8.2 dill==0.4.1
    loguru==0.7.3 msgspec==0.23.0 orjson==3.13.0 pybase64==1.5.1 pyzmq==27.3.0 psutil==7.2.2
    setproctitle==1.3.8 soundfile==0.13.1 cffi==2.1.1 pycparser==3.12 pillow==13.0.0
    fastapi==0.165.0 starlette==1.10.0 uvicorn==0.55.0 uvloop==0.23.0 h11==0.16.0 anyio==4.16.0
    sniffio==1.3.1 python-multipart==0.0.34 annotated-doc==0.0.7 opentelemetry-api==1.45.2
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
    openai==2.8.0 jiter==0.19.0 distro==1.9.0 httpx==0.29.0 httpcore==1.0.9
    requests==2.34.2 urllib3==2.8.0 idna==3.20 certifi==2026.10.19.post1 charset-normalizer==3.5.3
    aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 attrs==26.1.0 frozenlist==1.8.0
    multidict==7.2.1 propcache==0.5.4 yarl==1.25.1 prometheus-client==0.26.0 protobuf==7.36.2
    jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
    partial-json-parser==0.2.1.1.post7 click==8.5.1 tqdm==4.70.1 regex==2026.11.19 pyyaml==6.0.4
    packaging==26.4 ipython==9.18.1 ipython-pygments-lexers==1.1.1 traitlets==5.16.1
    decorator==5.3.1 jedi==0.20.1 parso==0.8.7 pexpect==4.9.0 ptyprocess==0.7.0
    prompt-toolkit==3.0.53 wcwidth==0.9.4 pygments==2.21.0 stack-data==0.6.3 asttokens==3.0.2
    executing==2.3.0 pure-eval==0.2.4 matplotlib-inline==0.2.2
)
stamp="$("$py" -c 'import sys; print("cp%d%d" % sys.version_info[:2])') $root ${pins[*]}"
if [ -f "$base/site/sglang/__init__.py" ] && [ -x "$base/venv/bin/python" ] \
    && [ "$(cat "$base/site/.pins" 2>/dev/null)" = "$stamp" ]; then
    exit 0
fi
echo "fetch-sglang: downloading sglang 0.5.23, sglang-kernel 0.4.10 and what the server imports (about 830 MB of wheels) into $base" >&2
pinned_download fetch-sglang "$base" SGLang "${pins[@]}" || exit 0
pinned_install fetch-sglang "$base" "$base/site.tmp" "${pins[@]}"
rm -rf "$base/venv"
"$py" -m venv --without-pip "$base/venv" || { echo "fetch-sglang: python -m venv failed" >&2; exit 1; }
purelib=$("$base/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf "import site; site.addsitedir('%s'); site.addsitedir('%s')\n" "$base/site" "$root/target/frameworks/site" \
    > "$purelib/culedger_sglang.pth"
echo "$stamp" > "$base/site.tmp/.pins"
rm -rf "$base/site"
mv "$base/site.tmp" "$base/site"
echo "fetch-sglang: installed in $base/site (run with $base/venv/bin/python)" >&2
