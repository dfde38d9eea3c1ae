# npu-advisor worker for Ascend NPU nodes: CANN + torch_npu (TorchAir ships inside torch_npu).
#
# UNBUILT: no Docker engine or NPU was available where this file was written. The image names and
# version pairs below follow Ascend's published compatibility table (torch_npu 2.9.0 <-> CANN 8.5.0,
# torch_npu 2.11/2.12 <-> CANN 9.1.0); check them against your driver before building, e.g.
#   docker build -f docker/npu-worker.Dockerfile \
#     --build-arg CANN_IMAGE=quay.io/ascend/cann:8.5.0-910b-ubuntu22.04-py3.11 \
#     --build-arg TORCH_VERSION=2.9.0 --build-arg TORCH_NPU_VERSION=2.9.0 -t npu-advisor-npu-worker .
#
# The driver stays on the host: run with the Ascend devices and the driver mounted, one worker per card
# (see docker/compose.yaml, profile "npu"):
#   docker run --device /dev/davinci0 --device /dev/davinci_manager --device /dev/devmm_svm --device /dev/hisi_hdc \
#     -v /usr/local/Ascend/driver:/usr/local/Ascend/driver:ro -v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi:ro \
#     -e ADVISOR_TOKEN=<worker token> npu-advisor-npu-worker --server http://advisor:8000 --name npu0
ARG CANN_IMAGE=quay.io/ascend/cann:8.5.0-910b-ubuntu22.04-py3.11
FROM ${CANN_IMAGE}

ARG TORCH_VERSION=2.9.0
ARG TORCH_NPU_VERSION=2.9.0

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1

WORKDIR /opt/npu-advisor
COPY pyproject.toml README.md ./
COPY advisor ./advisor
COPY app ./app
COPY workers ./workers
# torch from the CPU index (the NPU build is torch_npu on top of it); torch_npu pins the torch it needs.
# TorchAir also needs protobuf and packaging, which torch_npu does not declare.
RUN pip install --extra-index-url https://download.pytorch.org/whl/cpu \
      "torch==${TORCH_VERSION}" "torch-npu==${TORCH_NPU_VERSION}" numpy pyyaml "protobuf>=3.13" packaging \
 && pip install '.[export]'

# CANN's environment (library paths, ASCEND_* variables) must be loaded before Python starts.
COPY docker/npu-entrypoint.sh /usr/local/bin/npu-advisor-entrypoint
RUN chmod +x /usr/local/bin/npu-advisor-entrypoint
STOPSIGNAL SIGTERM
ENTRYPOINT ["npu-advisor-entrypoint", "npu-advisor", "worker", "--device", "npu", "--grace", "60"]
