"""Caps count every byte of a body or file, however it is split (issue 29: a cap counted per chunk instead of per
file let three 600-byte writes through a 1 KiB cap, and no test sent a body in small writes).

The ASGI app is driven directly with a `receive` that hands the body over in small messages, as a slow client's
TCP segments arrive."""

from __future__ import annotations

import json

from app.body_limits import JSON_LIMIT_BYTES
from tests.support.asgi_driver import http_scope, run_app
from tests.support.service_db import stored_files

WRITE = 600  # bytes per message: far below every cap


def drive_in_small_writes(app, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict]:  # noqa: ANN001
    """POST `body` to `path` in WRITE-byte messages; the status and JSON answer."""
    chunks = [body[i : i + WRITE] for i in range(0, len(body), WRITE)] or [b""]
    answer: dict = {"status": 0, "body": b""}

    async def receive() -> dict:
        chunk = chunks.pop(0) if chunks else b""
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")

    run_app(app, http_scope("POST", path, headers), receive, send)
    try:
        return answer["status"], json.loads(answer["body"] or b"{}")
    except ValueError:
        return answer["status"], {}


def multipart(field: str, filename: str, content: bytes, boundary: str = "npa-boundary") -> tuple[bytes, str]:
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    body += content + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def test_a_model_over_the_per_file_cap_sent_in_small_writes_is_413_and_leaves_nothing(make_app, settings):
    app = make_app()
    body, content_type = multipart("model", "big.pt2", b"\0" * (settings.max_upload_bytes + WRITE))
    status, answer = drive_in_small_writes(app, "/api/v1/analyze", {"content-type": content_type}, body)
    assert status == 413, answer
    assert "larger than the server's limit" in answer["detail"]
    assert stored_files(settings) == []  # nothing kept of the refused file, not even in .incoming


def test_a_json_body_over_its_cap_sent_in_small_writes_is_413(make_app):
    app = make_app()
    body = b'{"name": "' + b"x" * (JSON_LIMIT_BYTES + WRITE) + b'"}'
    status, answer = drive_in_small_writes(app, "/api/v1/workers/register", {"content-type": "application/json"}, body)
    assert status == 413, answer
    assert "limit" in answer["detail"]
