"""Back-pressure answers reach the client (issue 30): many concurrent uploads from one client to a real server
(`serve --no-worker` on 127.0.0.1, plain sockets as clients), every refused one reads its 429 and Retry-After,
also a client still sending a body larger than what the server drains before answering (app.admission: the
answer goes first, then the rest of the body is read and dropped, bounded, before the connection closes)."""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.http_client import http
from tests.support.raw_http import read_answer
from tests.support.service_env import service_environment
from tests.support.waiting import free_port

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-c", "from advisor.cli import app; app()"]
BIG = 6 << 20  # over app.admission.DRAIN_BYTES: answered first, then drained
SMALL = 8 << 10  # drained first, answered on a kept connection


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """A real server whose one client (this test, by address) may upload one file at a time."""
    port = free_port()
    env = service_environment() | {
        "ADVISOR_MAX_UPLOADS_PER_CLIENT": "1",
        "ADVISOR_MAX_CONCURRENT_UPLOADS": "64",
        "ADVISOR_RETRY_AFTER_S": "3",
    }
    log = (tmp_path / "serve.log").open("ab")
    command = [*CLI, "serve", "--no-worker", "--port", str(port), "--data-dir", str(tmp_path / "data")]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if http.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def upload_head(address: str, size: int) -> tuple[bytes, bytes, bytes]:
    """(request head, multipart preamble, multipart end) of an upload whose model part holds `size` bytes."""
    boundary = uuid.uuid4().hex
    preamble = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="context"\r\n\r\n{{"target": "cpu"}}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"; filename="m.pt2"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    end = f"\r\n--{boundary}--\r\n".encode()
    head = (
        f"POST /api/v1/analyze HTTP/1.1\r\nHost: {address}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
        f"Content-Length: {len(preamble) + size + len(end)}\r\n\r\n"
    ).encode()
    return head, preamble, end


def connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


def refused_upload(address: str, size: int) -> tuple[int, dict[str, str], bytes] | str:
    """Send a whole upload of `size` bytes as a client that reads only once it has sent everything; its answer,
    or the error that stopped it (the bug: `Broken pipe` / `Connection reset` instead of the 429)."""
    head, preamble, end = upload_head(address, size)
    try:
        with connect(address) as sock:
            sock.sendall(head + preamble)
            block = b"\0" * (256 << 10)
            left = size
            while left:
                sock.sendall(block[: min(left, len(block))])
                left -= min(left, len(block))
            sock.sendall(end)
            return read_answer(sock)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def test_every_refused_concurrent_upload_reads_its_429_and_retry_after(server: str):
    # one upload holds the client's only slot: its head and part of its body sent, the rest held back
    head, preamble, _ = upload_head(server, 1 << 20)
    holder = connect(server)
    try:
        holder.sendall(head + preamble + b"\0" * 1024)
        deadline = time.monotonic() + 10
        while True:  # the slot is taken once a small upload of the same client is refused
            answer = refused_upload(server, SMALL)
            if not isinstance(answer, str) and answer[0] == 429:
                break
            assert time.monotonic() < deadline, f"the held upload never took the slot: {answer}"
            if select.select([holder], [], [], 0)[0]:  # on a loaded node the probe got in first: the holder was
                holder.close()  # answered 429 itself - hold the slot again with a new one
                holder = connect(server)
                holder.sendall(head + preamble + b"\0" * 1024)
            time.sleep(0.1)

        sizes = [BIG, SMALL] * 12
        answers: list = [None] * len(sizes)

        def client(index: int) -> None:
            answers[index] = refused_upload(server, sizes[index])

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(sizes))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        holder.close()

    failed = [(sizes[i], answer) for i, answer in enumerate(answers) if isinstance(answer, str) or answer is None]
    assert not failed, f"{len(failed)} of {len(sizes)} refused clients did not read their answer: {failed[:3]}"
    for status, headers, body in answers:
        assert status == 429, (status, body)
        assert headers.get("retry-after") == "3"
        assert "ADVISOR_MAX_UPLOADS_PER_CLIENT" in json.loads(body)["detail"]
