"""Hostile bodies: the caller is checked before a byte of the body is read, and every body is capped.

Most tests drive the ASGI app directly with a `receive` that counts what the server pulls, so "not read"
is measured, not inferred; one sends a 1 GiB declared body to a real uvicorn server over a socket.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlmodel import Session

from advisor.core.calibration import MAX_CALIBRATION_BYTES
from app.auth import create_token
from app.body_limits import JSON_LIMIT_BYTES, LOGIN_LIMIT_BYTES, RESULTS_LIMIT_BYTES
from app.lingering import LINGER_BYTES
from tests.support.asgi_driver import http_scope, run_app

GIB = 1 << 30
CHUNK = 64 * 1024


@dataclass
class Exchange:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    pulled: int = 0  # request body bytes the server asked for before it answered
    read: int = 0  # all it asked for: after a refusal the rest is drained (app.lingering), bounded

    def json(self) -> dict:
        return json.loads(self.body)


def drive(app, method: str, path: str, headers: dict[str, str], *, body_limit: int | None = None) -> Exchange:  # noqa: ANN001
    """One request through the ASGI app; the body is endless 64 KiB chunks (or stops at `body_limit` bytes)."""
    exchange = Exchange()

    async def receive() -> dict:
        if body_limit is not None and exchange.read >= body_limit:
            return {"type": "http.request", "body": b"", "more_body": False}
        exchange.read += CHUNK
        if not exchange.status:
            exchange.pulled = exchange.read
        return {"type": "http.request", "body": b"x" * CHUNK, "more_body": True}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            exchange.status = message["status"]
            exchange.headers = {k.decode(): v.decode() for k, v in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            exchange.body += message.get("body", b"")

    run_app(app, http_scope(method, path, headers), receive, send)
    return exchange


def token(app, role: str) -> str:  # noqa: ANN001
    with Session(app.state.engine) as session:
        return create_token(session, role=role, name=role, now=app.state.queue.clock())[1]


@pytest.fixture
def locked(make_app):  # noqa: ANN001, ANN201
    return make_app(require_auth=True, reaper_interval_s=3600)


JSON = {"content-type": "application/json"}
CAPS = (
    ("/api/v1/jobs/1/complete", RESULTS_LIMIT_BYTES),
    ("/api/v1/jobs/1/ranked", RESULTS_LIMIT_BYTES),  # a ranking is results too (advisor.core.early_answer)
    ("/api/v1/workers/register", JSON_LIMIT_BYTES),
)
DECLARED_GIB = JSON | {"content-length": str(GIB)}


def test_a_gib_of_json_without_a_token_is_refused_before_a_byte_is_read(locked):
    for path in ("/api/v1/jobs/1/complete", "/api/v1/workers/register", "/api/v1/analyses/1/cancel"):
        refused = drive(locked, "POST", path, DECLARED_GIB)
        assert (refused.status, refused.pulled) == (401, 0), path
        assert refused.read <= LINGER_BYTES + 2 * CHUNK, "the rest is drained after the answer, bounded"
        assert refused.headers["connection"] == "close" and refused.headers["www-authenticate"] == "Bearer"
    unknown = drive(locked, "POST", "/api/v1/jobs/1/complete", DECLARED_GIB | {"authorization": "Bearer npa_nope"})
    assert (unknown.status, unknown.pulled) == (401, 0) and "unknown or revoked" in unknown.json()["detail"]
    chunked = drive(locked, "POST", "/api/v1/jobs/1/complete", JSON | {"transfer-encoding": "chunked"})
    assert (chunked.status, chunked.pulled) == (401, 0)


def test_the_role_is_checked_before_the_body_too(locked):
    user = {"authorization": f"Bearer {token(locked, 'user')}"}
    worker = {"authorization": f"Bearer {token(locked, 'worker')}"}
    for path, caller in (
        ("/api/v1/jobs/1/complete", user),
        ("/api/v1/jobs/1/ranked", user),
        ("/api/v1/analyze", worker),
        ("/analyze", worker),
    ):
        refused = drive(locked, "POST", path, DECLARED_GIB | caller)
        assert (refused.status, refused.pulled) == (403, 0), path
        assert "cannot use this endpoint" in refused.json()["detail"]


def test_a_declared_body_over_the_cap_is_413_at_once(locked):
    worker = {"authorization": f"Bearer {token(locked, 'worker')}"}
    for path, limit in CAPS:
        over = drive(locked, "POST", path, JSON | worker | {"content-length": str(limit + 1)})
        assert (over.status, over.pulled) == (413, 0), path
        assert over.json()["limit_bytes"] == limit


def test_a_chunked_body_is_stopped_at_the_first_chunk_over_the_cap(locked):
    worker = {"authorization": f"Bearer {token(locked, 'worker')}"}
    for path, limit in CAPS:
        over = drive(locked, "POST", path, JSON | worker | {"transfer-encoding": "chunked"})
        assert over.status == 413, (path, over.body)
        assert limit < over.pulled <= limit + CHUNK, path  # it stopped reading at the first chunk over
    under = drive(
        locked, "POST", "/api/v1/workers/register", JSON | worker | {"transfer-encoding": "chunked"}, body_limit=CHUNK
    )
    assert under.status == 422  # read in full (64 KiB of "x" is not JSON): the cap did not interfere


def test_login_refuses_a_huge_multipart_without_spooling_it(locked, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "spool"))
    (tmp_path / "spool").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    multipart = {"content-type": "multipart/form-data; boundary=b"}
    declared = drive(locked, "POST", "/login", multipart | {"content-length": str(GIB)})
    assert (declared.status, declared.pulled) == (413, 0)
    streamed = drive(locked, "POST", "/login", multipart | {"transfer-encoding": "chunked"})
    assert streamed.status == 413 and streamed.pulled <= LOGIN_LIMIT_BYTES + CHUNK
    assert list((tmp_path / "spool").iterdir()) == []


def test_uploads_keep_their_own_larger_cap(locked, settings):
    user = {"authorization": f"Bearer {token(locked, 'user')}"}
    limit = settings.max_upload_bytes + settings.max_inputs_bytes + MAX_CALIBRATION_BYTES + (1 << 20)
    declared = drive(
        locked,
        "POST",
        "/api/v1/analyze",
        user | {"content-type": "multipart/form-data; boundary=b", "content-length": str(limit + 1)},
    )
    assert (declared.status, declared.pulled) == (413, 0)


def test_a_busy_database_during_the_token_lookup_is_answered_by_the_apps_handler(locked, monkeypatch):
    from fastapi.responses import JSONResponse

    import app.authorization

    class Busy(Exception):
        pass

    def busy(*_args, **_kwargs):  # noqa: ANN002, ANN003, ANN202
        raise Busy("database is locked")

    monkeypatch.setattr(app.authorization, "identify", busy)
    locked.add_exception_handler(Busy, lambda _r, _e: JSONResponse({"detail": "busy"}, 503, {"Retry-After": "2"}))
    answer = drive(locked, "POST", "/api/v1/workers/register", DECLARED_GIB)
    assert (answer.status, answer.pulled, answer.headers["retry-after"]) == (503, 0, "2")


# ------------------------------------------------------------------ a real server over a socket
def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


@pytest.mark.exclusive
def test_a_real_server_answers_a_gib_declared_body_without_a_token_at_once(locked):
    import uvicorn

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(locked, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        before = _rss_bytes()
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(
                b"POST /api/v1/jobs/1/complete HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {GIB}\r\n\r\n".encode()
                + b"[" * (256 * 1024)
            )
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                answer += chunk
        elapsed = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
        assert elapsed < 5, elapsed
        assert _rss_bytes() - before < 64 * (1 << 20)  # the 1 GiB (and the 256 KiB sent) were never buffered
    finally:
        server.should_exit = True
        thread.join(timeout=10)
