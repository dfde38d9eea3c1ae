"""Every refusal reaches a client that is still sending its body (issue 30 item 3, app.lingering): a real uvicorn
server, many concurrent raw-socket clients that send a whole large body before they read, refused for each reason
the request guard and back-pressure have (401, 403, 413 declared, 413 counted in a chunked body, 429). Each must
read its status (and Retry-After), never `Broken pipe` / `Connection reset`; and the drain after the answer is
bounded: a client that never stops sending is cut off."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import uvicorn
from sqlmodel import Session

from app.auth import create_token
from tests.support.raw_http import read_answer

pytestmark = pytest.mark.slow

BIG = 6 << 20  # far over what the kernel's socket buffers hold: without a drain the server resets the connection
BLOCK = 256 << 10
CLIENTS_PER_CASE = 6


@contextlib.contextmanager
def serve(app) -> Iterator[int]:  # noqa: ANN001
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=20)


@pytest.fixture
def guarded(make_app):  # noqa: ANN001, ANN201
    """A server requiring tokens, one upload at a time per client, the refused bodies drained up to 16 MiB."""
    app = make_app(
        require_auth=True,
        reaper_interval_s=3600,
        max_uploads_per_client=1,
        retry_after_s=3,
        refused_upload_linger_mb=16,
        refused_upload_linger_s=20,
    )
    tokens = {}
    with Session(app.state.engine) as session:
        for role in ("user", "worker"):
            tokens[role] = create_token(session, role=role, name=role, now=app.state.queue.clock())[1]
    with serve(app) as port:
        yield port, tokens


def send_then_read(port: int, head: str, body: Iterator[bytes]) -> tuple[int, dict[str, str], bytes] | str:
    """A client that sends its whole request before it reads (as most HTTP clients do); its answer, or the error that
    stopped it (the bug: `Broken pipe` / `Connection reset`)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(head.encode())
            for piece in body:
                sock.sendall(piece)
            return read_answer(sock)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def plain(size: int) -> Iterator[bytes]:
    block = b"[" * BLOCK
    for start in range(0, size, BLOCK):
        yield block[: min(BLOCK, size - start)]


def chunked(size: int) -> Iterator[bytes]:
    for piece in plain(size):
        yield f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    yield b"0\r\n\r\n"


def request(path: str, headers: dict[str, str]) -> str:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return "\r\n".join(lines) + "\r\n\r\n"


def test_every_refusal_is_read_by_clients_still_sending_a_large_body(guarded):
    port, tokens = guarded
    user = f"Bearer {tokens['user']}"
    worker = f"Bearer {tokens['worker']}"
    json_body = {"Content-Type": "application/json", "Content-Length": str(BIG)}
    upload = {"Content-Type": "multipart/form-data; boundary=b", "Content-Length": str(BIG)}

    # one upload holds the user's only slot (its head sent, its body held back): the user's other uploads are 429
    holder = socket.create_connection(("127.0.0.1", port), timeout=30)
    holder.sendall(request("/api/v1/analyze", upload | {"Authorization": user}).encode() + b"--b\r\n")
    time.sleep(0.5)

    cases: dict[str, tuple[int, Callable[[], tuple | str]]] = {
        "no token": (
            401,
            lambda: send_then_read(port, request("/api/v1/jobs/1/complete", json_body), plain(BIG)),
        ),
        "wrong role": (
            403,
            lambda: send_then_read(
                port, request("/api/v1/jobs/1/complete", json_body | {"Authorization": user}), plain(BIG)
            ),
        ),
        "declared over the cap": (
            413,
            lambda: send_then_read(
                port, request("/api/v1/workers/register", json_body | {"Authorization": worker}), plain(BIG)
            ),
        ),
        "counted over the cap": (
            413,
            lambda: send_then_read(
                port,
                request(
                    "/api/v1/workers/register",
                    {"Content-Type": "application/json", "Transfer-Encoding": "chunked", "Authorization": worker},
                ),
                chunked(BIG),
            ),
        ),
        "over the client's share": (
            429,
            lambda: send_then_read(port, request("/api/v1/analyze", upload | {"Authorization": user}), plain(BIG)),
        ),
    }
    jobs = [(name, want, call) for name, (want, call) in cases.items() for _ in range(CLIENTS_PER_CASE)]
    answers: list = [None] * len(jobs)

    def run(index: int) -> None:
        answers[index] = jobs[index][2]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        holder.close()

    failed = [(jobs[i][0], answer) for i, answer in enumerate(answers) if not isinstance(answer, tuple)]
    assert not failed, f"{len(failed)} of {len(jobs)} refused clients did not read their answer: {failed[:4]}"
    for (name, want, _), (status, headers, body) in zip(jobs, answers, strict=True):
        assert status == want, (name, status, body[:200])
        assert headers.get("connection") == "close", name
        if want == 429:
            assert headers["retry-after"] == "3" and "ADVISOR_MAX_UPLOADS_PER_CLIENT" in json.loads(body)["detail"]
        if want == 413:
            assert "limit of 1 MiB" in json.loads(body)["detail"], name


def test_a_client_that_never_stops_sending_reads_its_answer_and_is_cut_off(make_app):
    app = make_app(require_auth=True, reaper_interval_s=3600, refused_upload_linger_mb=2, refused_upload_linger_s=3)
    with serve(app) as port:
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.sendall(request("/api/v1/jobs/1/complete", {"Content-Length": str(1 << 40)}).encode())
        sent = 0
        stopped: list[str] = []

        def flood() -> None:
            nonlocal sent
            try:
                while True:
                    sock.sendall(b"[" * BLOCK)
                    sent += BLOCK
            except OSError as exc:
                stopped.append(type(exc).__name__)

        started = time.monotonic()
        sender = threading.Thread(target=flood, daemon=True)
        sender.start()
        status, _headers, _body = read_answer(sock)  # the answer arrives while the client is still sending
        assert status == 401
        sender.join(30)
        elapsed = time.monotonic() - started
        sock.close()
        assert stopped, "the server never closed the connection"
        assert elapsed < 3 + 5, f"the drain was not bounded in time: {elapsed:.1f} s"
        # bounded in bytes: the 2 MiB drained plus what socket buffers hold, not the terabyte declared
        assert sent < 64 << 20, sent
