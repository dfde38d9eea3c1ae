"""A saturated server answers 503 / 429 with Retry-After, never a 500 or a hang: the upload admission limit
(app.admission), the SQLite write gate (app.db.WriteGate) and a busy or unreachable database."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlmodel import Session

from app.db import DatabaseBusy, WriteGate
from tests.support.synthetic_models import exported_program_bytes

CPU_CONTEXT = json.dumps({"stage": "production", "target": "cpu"})


def upload_request(seed: int) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """Headers and body of a multipart upload of a small distinct model."""
    request = httpx.Request(
        "POST",
        "http://127.0.0.1/api/v1/analyze",
        files={"model": ("m.pt2", exported_program_bytes(seed))},
        data={"context": CPU_CONTEXT},
    )
    headers = [(b"host", b"127.0.0.1"), (b"content-type", request.headers["content-type"].encode())]
    return headers, request.read()


def scope_for(headers: list[tuple[bytes, bytes]], client: str = "127.0.0.1") -> dict:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/v1/analyze",
        "raw_path": b"/api/v1/analyze",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": (client, 50000),
        "server": ("127.0.0.1", 80),
    }


class Answer:
    def __init__(self) -> None:
        self.status: int | None = None
        self.headers: dict[bytes, bytes] = {}
        self.body = b""

    async def send(self, message: dict) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = dict(message.get("headers", []))
        elif message["type"] == "http.response.body":
            self.body += message.get("body", b"")


async def call(app, seed: int, client: str = "127.0.0.1") -> Answer:  # noqa: ANN001
    headers, body = upload_request(seed)
    sent = False

    async def receive() -> dict:
        nonlocal sent
        if sent:
            await asyncio.sleep(3600)  # the server answered without reading the body
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    answer = Answer()
    await app(scope_for(headers, client), receive, answer.send)
    return answer


async def held_upload(app, seed: int, admitted: asyncio.Event, release: asyncio.Event) -> Answer:  # noqa: ANN001
    """An upload whose body arrives in two halves, the second once `release` is set."""
    headers, body = upload_request(seed)
    halves = [body[: len(body) // 2], body[len(body) // 2 :]]

    async def receive() -> dict:
        if len(halves) == 1:
            await release.wait()
        else:
            admitted.set()  # the route is reading the body: the upload holds its slot
        chunk = halves.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(halves)}

    answer = Answer()
    await app(scope_for(headers), receive, answer.send)
    return answer


def run_in_thread(coroutine_factory):  # noqa: ANN001, ANN201
    """asyncio.run in a thread of its own (another test's event loop may be running in this one)."""
    result: list = []
    runner = threading.Thread(target=lambda: result.append(asyncio.run(coroutine_factory())))
    runner.start()
    runner.join(timeout=30)
    assert result, "the scenario did not finish"
    return result[0]


def test_an_upload_over_the_server_limit_is_503_with_retry_after_and_the_held_one_goes_through(make_app):
    app = make_app(max_concurrent_uploads=1, retry_after_s=3)

    async def scenario() -> tuple[Answer, Answer, Answer]:
        admitted, release = asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(held_upload(app, 1, admitted, release))
        await asyncio.wait_for(admitted.wait(), 10)
        refused = await asyncio.wait_for(call(app, 2), 10)
        release.set()
        held = await asyncio.wait_for(first, 10)
        return held, refused, await asyncio.wait_for(call(app, 2), 10)

    held, refused, later = run_in_thread(scenario)
    assert refused.status == 503 and refused.headers[b"retry-after"] == b"3"
    assert "ADVISOR_MAX_CONCURRENT_UPLOADS" in json.loads(refused.body)["detail"]
    assert held.status == 202 and later.status == 202


def test_a_client_over_its_share_gets_429_while_others_are_served(make_app):
    app = make_app(max_concurrent_uploads=4, max_uploads_per_client=1)

    async def scenario() -> tuple[Answer, Answer, Answer]:
        admitted, release = asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(held_upload(app, 1, admitted, release))
        await asyncio.wait_for(admitted.wait(), 10)
        same_client = await asyncio.wait_for(call(app, 2), 10)
        other_client = await asyncio.wait_for(call(app, 3, client="127.0.0.2"), 10)
        release.set()
        return await asyncio.wait_for(first, 10), same_client, other_client

    held, same_client, other_client = run_in_thread(scenario)
    assert same_client.status == 429 and int(same_client.headers[b"retry-after"]) >= 1
    assert "ADVISOR_MAX_UPLOADS_PER_CLIENT" in json.loads(same_client.body)["detail"]
    assert (held.status, other_client.status) == (202, 202)


@pytest.mark.exclusive
def test_a_held_write_lock_is_503_for_writers_while_readers_and_healthz_stay_fast(make_app):
    from fastapi.testclient import TestClient

    with TestClient(make_app(db_write_wait_s=0.3, retry_after_s=1)) as client:
        holder = Session(client.app.state.engine)
        holder.execute(text("SELECT 1"))  # a write transaction that keeps the process's SQLite write gate
        try:
            started = time.monotonic()
            model = ("m.pt2", exported_program_bytes(7))
            busy = client.post("/api/v1/analyze", files={"model": model}, data={"context": CPU_CONTEXT})
            assert busy.status_code == 503 and busy.headers["retry-after"] == "1", busy.text
            assert time.monotonic() - started < 5, "refused after the gate's wait, not the 5 s busy timeout"
            for path in ("/healthz", "/api/v1/analyses"):
                started = time.monotonic()
                assert client.get(path).status_code == 200
                assert time.monotonic() - started < 1, f"{path} does not wait for writers"
        finally:
            holder.close()
        assert client.post("/api/v1/analyze", files={"model": model}, data={"context": CPU_CONTEXT}).status_code == 202


@pytest.mark.exclusive
def test_a_full_write_queue_refuses_at_once():
    gate = WriteGate(wait_s=30, max_waiting=0)
    gate.acquire("holder")
    started = time.monotonic()
    with pytest.raises(DatabaseBusy, match="already waiting"):
        gate.acquire("another")
    assert time.monotonic() - started < 1
    gate.release("another")  # not the holder: nothing happens
    assert gate.held
    gate.release("holder")
    assert not gate.held


@pytest.mark.exclusive
def test_a_write_on_the_event_loop_thread_waits_only_briefly_for_the_gate():
    gate = WriteGate(wait_s=30, max_waiting=4)
    gate.acquire("holder")

    async def on_the_loop() -> float:
        started = time.monotonic()
        with pytest.raises(DatabaseBusy):
            gate.acquire("async route")
        return time.monotonic() - started

    assert run_in_thread(on_the_loop) < 1, "a loop thread must not wait the full 30 s"
    gate.release("holder")


@pytest.mark.parametrize(
    "error",
    [
        OperationalError("SELECT ...", {}, Exception("database is locked")),
        PoolTimeout("QueuePool limit of size 10 overflow 30 reached, connection timed out, timeout 5.00"),
        DatabaseBusy("16 database writes are already waiting; retry shortly"),
    ],
    ids=["locked", "pool", "gate"],
)
def test_a_busy_database_anywhere_is_503_with_retry_after_not_500(client, monkeypatch, error):
    import app.routes.analyses as routes

    def busy(*_args, **_kwargs):  # noqa: ANN002, ANN003, ANN202
        raise error

    monkeypatch.setattr(routes, "list_analyses", busy)
    response = client.get("/api/v1/analyses")
    assert response.status_code == 503, response.text
    assert int(response.headers["retry-after"]) >= 1
    assert "retry" in response.json()["detail"]
