"""The SDK and `npu-advisor analyze --server` wait out a busy server's 429 / 503 after its Retry-After."""

from __future__ import annotations

import functools
from pathlib import Path

import httpx
import pytest

import advisor.cli.remote
from advisor.cli.client import AdvisorClient, AdvisorError, retry_after_s

ACCEPTED = {"id": 7, "status": "queued", "deduplicated": False, "links": {"self": "/api/v1/analyses/7"}}


def busy_then_accepted(answers: list[httpx.Response], seen: list[bytes]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.read())
        return answers.pop(0) if answers else httpx.Response(202, json=ACCEPTED)

    return httpx.MockTransport(handle)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "m.pt2"
    path.write_bytes(b"PK model bytes " * 100)
    return path


def test_submit_retries_after_each_retry_after_and_sends_the_whole_file_again(model):
    seen: list[bytes] = []
    answers = [
        httpx.Response(503, headers={"Retry-After": "3"}, json={"detail": "busy"}),
        httpx.Response(429, headers={"Retry-After": "1"}, json={"detail": "your share"}),
    ]
    waits: list[float] = []
    lines: list[str] = []
    transport = busy_then_accepted(answers, seen)
    with AdvisorClient("http://s", transport=transport, sleep=waits.append, on_busy=lines.append) as client:
        assert client.submit(model, {"target": "cpu"}) == ACCEPTED
    assert len(seen) == 3 and all(model.read_bytes() in body for body in seen)
    assert 3 <= waits[0] <= 4 and 1 <= waits[1] <= 1.5, waits
    assert lines[0].startswith("server busy (HTTP 503): retrying in") and "(1/8)" in lines[0]


def test_retries_are_bounded_and_then_the_error_is_reported(model):
    seen: list[bytes] = []
    forever = [httpx.Response(503, headers={"Retry-After": "2"}, json={"detail": "still busy"})] * 10
    waits: list[float] = []
    transport = busy_then_accepted(forever, seen)
    with AdvisorClient("http://s", transport=transport, sleep=waits.append, busy_retries=3) as client:
        with pytest.raises(AdvisorError, match="still busy") as failed:
            client.submit(model, {"target": "cpu"})
    assert failed.value.status == 503 and len(seen) == 4 and len(waits) == 3


def test_other_errors_are_not_retried(model):
    seen: list[bytes] = []
    transport = busy_then_accepted([httpx.Response(500, json={"detail": "bug"})], seen)
    with AdvisorClient("http://s", transport=transport, sleep=pytest.fail) as client:
        with pytest.raises(AdvisorError):
            client.submit(model, {"target": "cpu"})
    assert len(seen) == 1


@pytest.mark.parametrize(
    ("header", "expected"),
    [("5", 5.0), ("0", 0.0), ("-3", 0.0), ("100000", 60.0), ("soon", 2.0), (None, 2.0), ("nan", 2.0)],
)
def test_retry_after_values(header, expected):
    headers = {"Retry-After": header} if header is not None else {}
    assert retry_after_s(httpx.Response(503, headers=headers)) == expected


def test_retry_after_as_an_http_date():
    from email.utils import formatdate
    from time import time

    wait = retry_after_s(httpx.Response(503, headers={"Retry-After": formatdate(time() + 10, usegmt=True)}))
    assert 8 <= wait <= 10


def test_the_cli_says_it_waits_for_a_busy_server(model, monkeypatch, capsys):
    seen: list[bytes] = []
    transport = busy_then_accepted([httpx.Response(503, headers={"Retry-After": "1"}, json={"detail": "busy"})], seen)
    waits: list[float] = []
    client = functools.partial(AdvisorClient, transport=transport, sleep=waits.append)
    monkeypatch.setattr(advisor.cli.remote, "AdvisorClient", client)
    code = advisor.cli.remote.analyze_remote(
        model=model, context={"target": "cpu"}, server="http://s", token=None, wait=False, fmt="md"
    )
    captured = capsys.readouterr()
    assert code == 0 and captured.out.strip() == "7" and len(seen) == 2
    assert "server busy (HTTP 503): retrying in" in captured.err
