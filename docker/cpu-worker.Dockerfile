# npu-advisor worker for CPU nodes (eager, inductor, onnxruntime; openvino when installed).
# Build from the repository root:  docker build -f docker/cpu-worker.Dockerfile -t npu-advisor-cpu-worker .
# Run:  docker run -e ADVISOR_TOKEN=<worker token> npu-advisor-cpu-worker --server http://advisor:8000
FROM python:3.11-slim

# g++ is Inductor's CPU code generator.
RUN apt-get update && apt-get install -y --no-install-recommends g++ && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1

WORKDIR /opt/npu-advisor
COPY pyproject.toml README.md ./
COPY advisor ./advisor
COPY app ./app
COPY workers ./workers
# The CPU build of torch from PyTorch's own index (PyPI's default build carries CUDA libraries).
RUN pip install --extra-index-url https://download.pytorch.org/whl/cpu '.[torch,export]' \
 && useradd --system --create-home advisor

USER advisor
# SIGTERM (docker stop): no new claims; the running job gets --grace seconds, then is released.
STOPSIGNAL SIGTERM
ENTRYPOINT ["npu-advisor", "worker", "--device", "cpu", "--grace", "30"]
