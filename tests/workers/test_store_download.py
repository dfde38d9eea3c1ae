"""Workers fetch models from the object store through the presigned URL of their job (issue 30, workers/api.py):
without the bearer token, checked against the sha256 (given, or named by the content-addressed object's path); an
expired URL is asked of the server instead, and only when that fails too is it a retryable failure (the next
claim gets a fresh URL); its signature never shows in an error."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest

from workers.api import StoreUrlRefused, WorkerApi
from workers.retry import ApiError, RetryPolicy

MODEL = b"PK\x05\x06" + b"\x00" * 18
SHA = hashlib.sha256(MODEL).hexdigest()
STORE = "http://store.example:9000"


def store_transport(seen: list[httpx.Request], *, status: int = 200, body: bytes = MODEL) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, content=body)

    return httpx.MockTransport(handle)


def server_api(direct: httpx.MockTransport, *, server_has: bytes | None = None) -> WorkerApi:
    """A worker whose server serves `/api/v1/artifacts/{SHA}` (with its token) when `server_has` is given and answers
    anything else with a failed test."""

    def server(request: httpx.Request) -> httpx.Response:
        if server_has is not None and request.url.path == f"/api/v1/artifacts/{SHA}":
            assert request.headers["authorization"] == "Bearer w-token"
            return httpx.Response(200, content=server_has)
        if server_has is not None:
            return httpx.Response(404, json={"detail": "no artifact"})
        raise AssertionError(f"the server was asked for {request.url}")

    client = httpx.Client(
        base_url="http://advisor.test",
        headers={"Authorization": "Bearer w-token"},
        transport=httpx.MockTransport(server),
    )
    return WorkerApi(client, RetryPolicy(sleep=lambda _s: None), direct_transport=direct)


def test_a_presigned_url_is_fetched_without_the_token_and_checked(tmp_path: Path):
    seen: list[httpx.Request] = []
    api = server_api(store_transport(seen))
    url = f"{STORE}/bucket/advisor/artifacts/{SHA[:2]}/{SHA}?X-Amz-Signature=secret&X-Amz-Expires=900"
    api.download(url, tmp_path / "model", sha256=SHA)
    assert (tmp_path / "model").read_bytes() == MODEL
    assert "authorization" not in seen[0].headers, "the bearer token never leaves for the store"
    api.download(url, tmp_path / "inputs")  # no sha256 given (inputs): the object's own name is checked
    assert (tmp_path / "inputs").read_bytes() == MODEL


def test_wrong_bytes_from_the_store_are_refused_and_not_kept(tmp_path: Path):
    api = server_api(store_transport([], body=b"something else"))
    with pytest.raises(ApiError, match="sha256 mismatch"):
        api.download(f"{STORE}/bucket/artifacts/{SHA[:2]}/{SHA}?X-Amz-Signature=secret", tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_a_url_elsewhere_naming_no_sha256_is_refused(tmp_path: Path):
    seen: list[httpx.Request] = []
    api = server_api(store_transport(seen))
    with pytest.raises(ApiError, match="refusing to fetch from a host other than the server"):
        api.download(f"{STORE}/bucket/models/latest?X-Amz-Signature=secret", tmp_path / "m")
    assert not seen


def test_an_expired_url_is_asked_of_the_server_instead(tmp_path: Path):
    """A store that refuses the URL (expired: S3 answers 403 AccessDenied) costs the job nothing: the worker asks the
    server, which streams the object while the worker holds the lease."""
    seen: list[httpx.Request] = []
    expired = store_transport(seen, status=403, body=b"<Error><Code>AccessDenied</Code></Error>")
    api = server_api(expired, server_has=MODEL)
    url = f"{STORE}/bucket/artifacts/{SHA[:2]}/{SHA}?X-Amz-Signature=secret&X-Amz-Expires=900"
    api.download(url, tmp_path / "m", sha256=SHA)
    assert (tmp_path / "m").read_bytes() == MODEL and len(seen) == 1


def test_an_expired_url_the_server_cannot_serve_either_is_retryable_and_its_signature_is_not_shown(tmp_path: Path):
    api = server_api(store_transport([], status=403, body=b"<Error><Code>AccessDenied</Code></Error>"), server_has=b"")
    with pytest.raises(StoreUrlRefused) as refused:
        api.download(f"{STORE}/bucket/artifacts/{SHA[:2]}/{SHA}?X-Amz-Signature=secret", tmp_path / "m", sha256=SHA)
    assert refused.value.retryable, "the job goes back to the queue; its next claim carries a fresh URL"
    assert "secret" not in str(refused.value)
    assert not (tmp_path / "m").exists()
