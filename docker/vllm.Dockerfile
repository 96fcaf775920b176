# vLLM's official OpenAI-server image with culedger: every process of the server writes its
# report into /reports (mount a host directory there). Build after `make wheel`:
#   docker build -f docker/vllm.Dockerfile -t vllm-culedger .
#   docker run --gpus all --ipc=host -v $PWD/reports:/reports vllm-culedger M --tensor-parallel-size 2
# Arguments are those of `vllm serve`, as with the official image (whose final stage,
# vllm-openai in vLLM's docker/Dockerfile, starts the server as its ENTRYPOINT).
ARG VLLM_IMAGE=vllm/vllm-openai:latest
FROM ${VLLM_IMAGE}
COPY target/wheels/ /tmp/culedger-wheels/
# pip picks the wheel of the image's architecture; PEP 668 images need the override.
# Only the wheels built from this checkout are reachable (--no-index): nothing to pin.
# hadolint ignore=DL3013
RUN PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir --no-index \
        --find-links /tmp/culedger-wheels culedger \
    && rm -rf /tmp/culedger-wheels
VOLUME /reports
ENTRYPOINT ["culedger", "run", "-o", "/reports", "--", "vllm", "serve"]
