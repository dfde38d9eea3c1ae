"""Issue 29's deliberate bug, pinned directly: a cap counted per chunk instead of per file (or per body) let three
600-byte writes through a 1 KiB cap. Each place that counts - the body cap in front of the routes
(app.body_limits), each artifact store's incoming file (the local directory and object storage: app.storage's one
receiving path, planted with the bug in either backend this fails) and a whole upload through the route - is given
exactly that: three 600-byte writes against 1 KiB."""

from __future__ import annotations

import hashlib
import io
import json

import pytest

from app.body_limits import BodySizeLimit
from app.storage import ArtifactStore, UploadTooLarge
from tests.support.asgi_driver import http_scope, run_app

KIB = 1024
WRITES = [b"x" * 600] * 3  # each far below 1 KiB; together 1800 bytes


def body_in_writes(pieces: list[bytes]):  # noqa: ANN201
    queue = list(pieces)

    async def receive() -> dict:
        piece = queue.pop(0) if queue else b""
        return {"type": "http.request", "body": piece, "more_body": bool(queue)}

    return receive


async def read_everything(scope, receive, send) -> None:  # noqa: ANN001
    """An app that reads its whole body and answers with its length."""
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = json.dumps({"read": size}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


class FakeApp:  # what BodySizeLimit reads of scope["app"]
    class state:  # noqa: N801
        settings = None


def through_the_cap(pieces: list[bytes]) -> tuple[int, dict]:
    answer: dict = {"status": 0, "body": b""}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
        else:
            answer["body"] += message.get("body", b"")

    scope = http_scope("POST", "/api/v1/workers/register", {"transfer-encoding": "chunked"}) | {"app": FakeApp}
    run_app(BodySizeLimit(read_everything, json_limit_bytes=KIB), scope, body_in_writes(pieces), send)
    return answer["status"], json.loads(answer["body"])


def test_the_body_cap_counts_the_whole_body_not_each_write():
    status, answer = through_the_cap(WRITES)
    assert status == 413 and answer["limit_bytes"] == KIB
    status, answer = through_the_cap([b"x" * 512, b"x" * 512])  # exactly the cap, in two writes: read in full
    assert (status, answer) == (200, {"read": KIB})


@pytest.fixture(params=["local", "s3"])
def artifact_store(request: pytest.FixtureRequest, tmp_path):  # noqa: ANN001, ANN201
    """Each backend, with a way to list everything it keeps (stored objects, incoming files, open multipart uploads)."""
    if request.param == "local":
        store = ArtifactStore(tmp_path / "artifacts")
        return store, lambda: [p for p in (tmp_path / "artifacts").rglob("*") if p.is_file()]
    from app.object_store import S3ArtifactStore, S3Location

    s3, bucket = request.getfixturevalue("s3"), request.getfixturevalue("bucket")

    def kept() -> list[str]:
        objects = [item["Key"] for item in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
        return objects + [upload["Key"] for upload in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]

    return S3ArtifactStore(S3Location.parse(f"s3://{bucket}/team"), s3), kept


def test_the_stored_file_cap_counts_the_whole_file_not_each_write(artifact_store):
    store, kept = artifact_store
    incoming = store.receive(max_bytes=KIB, what="model")
    incoming.write(WRITES[0])
    with pytest.raises(UploadTooLarge, match="model is larger than the server's limit of 1 KiB"):
        incoming.write(WRITES[1])
    incoming.discard()
    assert kept() == [], "nothing kept, not even incoming"


def test_a_file_of_exactly_the_cap_in_small_writes_is_stored_whole(artifact_store):
    store, kept = artifact_store
    incoming = store.receive(max_bytes=KIB, what="model")
    for piece in (b"a" * 512, b"b" * 511, b"c"):
        incoming.write(piece)
    stored, _ = incoming.commit()
    incoming.discard()
    assert (stored.size_bytes, stored.sha256) == (KIB, hashlib.sha256(b"a" * 512 + b"b" * 511 + b"c").hexdigest())
    assert store.exists(stored.sha256) and len(kept()) == 1


def test_save_counts_the_whole_stream_against_the_cap(artifact_store):
    store, kept = artifact_store
    with pytest.raises(UploadTooLarge):
        store.save(io.BytesIO(b"".join(WRITES)), max_bytes=KIB)
    assert kept() == []


def test_an_upload_over_a_1_kib_model_cap_in_600_byte_writes_is_413(make_app, settings):
    app = make_app(max_upload_mb=KIB / (1 << 20))  # the model file's cap: 1 KiB
    boundary = "cap-boundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"; filename="m.pt2"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    body = head + b"".join(WRITES) + f"\r\n--{boundary}--\r\n".encode()
    pieces = [body[i : i + 600] for i in range(0, len(body), 600)]
    answer: dict = {"status": 0, "body": b""}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")

    headers = {"content-type": f"multipart/form-data; boundary={boundary}"}
    run_app(app, http_scope("POST", "/api/v1/analyze", headers), body_in_writes(pieces), send)
    assert answer["status"] == 413, answer["body"][:300]
    assert "model" in json.loads(answer["body"])["detail"]
    assert not [p for p in settings.artifacts_dir.rglob("*") if p.is_file()], "nothing kept of the refused file"
