# SGLang's official image with culedger: every process of the server writes its report into
# /reports (mount a host directory there). Build after `make wheel` (or docker/Dockerfile):
#   docker build -f docker/sglang.Dockerfile -t sglang-culedger .
#   docker run --gpus all --ipc=host -v $PWD/reports:/reports sglang-culedger \
#       python3 -m sglang.launch_server --model-path M --tp 8
# The image has no server entrypoint of its own (SGLang's docker/compose.yaml sets
# `entrypoint: python3 -m sglang.launch_server`), so the command is given in full.
ARG SGLANG_IMAGE=lmsysorg/sglang:latest
FROM ${SGLANG_IMAGE}
COPY target/wheels/ /tmp/culedger-wheels/
# pip picks the wheel of the image's architecture; PEP 668 images need the override.
# Only the wheels built from this checkout are reachable (--no-index): nothing to pin.
# hadolint ignore=DL3013
RUN PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir --no-index \
        --find-links /tmp/culedger-wheels culedger \
    && rm -rf /tmp/culedger-wheels
VOLUME /reports
ENTRYPOINT ["culedger", "run", "-o", "/reports", "--"]
CMD ["python3", "-m", "sglang.launch_server", "--help"]
