# npu-advisor API server + dashboard. Torch-free: the server never loads a model.
# Build from the repository root:  docker build -f docker/api.Dockerfile -t npu-advisor-api .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    ADVISOR_DATA_DIR=/data ADVISOR_HOST=0.0.0.0 ADVISOR_PORT=8000

WORKDIR /opt/npu-advisor
COPY pyproject.toml README.md ./
COPY advisor ./advisor
COPY app ./app
COPY workers ./workers
# The base install has no torch; [postgres] adds the PostgreSQL driver for team deployments.
RUN pip install '.[postgres]' && useradd --system --create-home advisor && mkdir -p /data && chown advisor /data

USER advisor
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"
# Listening beyond loopback: bearer tokens are required (create them with `npu-advisor token create`).
CMD ["npu-advisor", "serve", "--host", "0.0.0.0", "--port", "8000", "--no-worker", "--data-dir", "/data"]
