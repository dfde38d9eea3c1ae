"""A real S3 protocol server for the object-storage tests: moto's server mode on a free port of 127.0.0.1, with the
credentials boto3 reads from the environment (tests/service/conftest.py's `s3_endpoint`, `s3` and `bucket`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.support.waiting import free_port

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "advisor-test", "AWS_SECRET_ACCESS_KEY": "advisor-test-secret"}
REGION = "us-east-1"


@contextlib.contextmanager
def moto_endpoint() -> Iterator[str]:
    """The URL of a moto S3 server running until the block ends (the test skips without boto3 and moto)."""
    pytest.importorskip("boto3")
    moto_server = pytest.importorskip("moto.server")
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
