"""The npu-advisor API server: REST API, storage, queue and auth. Never imports torch."""
