"""Artifacts in S3-compatible object storage (issue 30, app.object_store), against a real S3 protocol server the tests
start (moto's server mode on 127.0.0.1): upload, dedupe, a refused upload leaves no object, an interrupted multipart
upload is aborted, presigned URLs expire, and a worker on a replica that never saw the upload measures it. The server
and the `s3` / `bucket` fixtures are tests/service/conftest.py's."""

from __future__ import annotations

import contextlib
import io
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")

from app.object_store import S3ArtifactStore, S3Location  # noqa: E402
from tests.support.http_client import http  # noqa: E402
from tests.support.s3_server import CREDENTIALS, REGION  # noqa: E402
from tests.support.synthetic_models import exported_program_bytes  # noqa: E402
from tests.support.waiting import free_port  # noqa: E402

CPU_CONTEXT = json.dumps({"stage": "production", "target": "cpu"})


@pytest.fixture
def s3_app(make_app, s3_endpoint: str, bucket: str):  # noqa: ANN001, ANN201
    """An app whose artifacts live in the bucket under `team/`, uploads up to 64 MiB."""
    from fastapi.testclient import TestClient

    app = make_app(
        artifact_store=f"s3://{bucket}/team",
        s3_endpoint_url=s3_endpoint,
        s3_region=REGION,
        max_upload_mb=64,
    )
    with TestClient(app) as client:
        yield client


def keys(s3, bucket: str) -> list[str]:  # noqa: ANN001
    return sorted(item["Key"] for item in s3.list_objects_v2(Bucket=bucket).get("Contents", []))


def open_multipart_uploads(s3, bucket: str) -> list[str]:  # noqa: ANN001
    return [upload["Key"] for upload in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


def send_half_an_upload(port: int, s3, bucket: str) -> socket.socket:  # noqa: ANN001
    """POST /analyze announcing 40 MiB and sending 20 MiB of it, returned once the server has started the multipart
    upload of its parts: the socket stays open (the caller closes it, or kills the server under it)."""
    boundary = "c" * 16
    preamble = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="context"\r\n\r\n{CPU_CONTEXT}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"; filename="m.pt2"\r\n\r\n'
    ).encode()
    head = (
        f"POST /api/v1/analyze HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {40 << 20}\r\n\r\n"
    ).encode()
    upload = socket.create_connection(("127.0.0.1", port))
    upload.sendall(head + preamble + b"\0" * (20 << 20))
    deadline = time.monotonic() + 20
    while not open_multipart_uploads(s3, bucket):  # parts are on their way to the store
        assert time.monotonic() < deadline, "no multipart upload started"
        time.sleep(0.05)
    return upload


def submit(client, data: bytes, **extra):  # noqa: ANN001, ANN003, ANN201
    return client.post("/api/v1/analyze", files={"model": ("m.pt2", data)}, data={"context": CPU_CONTEXT, **extra})


def test_an_upload_is_stored_under_its_hash_in_the_bucket_and_deduplicated(s3_app, s3, bucket, settings):
    import hashlib

    big = exported_program_bytes(1, size=20 << 20)  # three parts of a multipart upload
    small = exported_program_bytes(2)  # one request
    for data in (big, small):
        first = submit(s3_app, data)
        assert first.status_code == 202, first.text
        again = submit(s3_app, data)
        assert again.status_code == 200 and again.json()["deduplicated"] is True
        assert again.json()["id"] == first.json()["id"]
    shas = sorted(hashlib.sha256(data).hexdigest() for data in (big, small))
    assert keys(s3, bucket) == [f"team/artifacts/{sha[:2]}/{sha}" for sha in shas]
    assert open_multipart_uploads(s3, bucket) == []
    stored = s3.get_object(Bucket=bucket, Key=f"team/artifacts/{shas[0][:2]}/{shas[0]}")["Body"].read()
    assert stored in (big, small)
    assert not settings.artifacts_dir.exists() or not any(settings.artifacts_dir.rglob("*")), "nothing on local disk"
    # a user downloads it through the API (streamed from the store)
    sha = hashlib.sha256(big).hexdigest()
    assert s3_app.get(f"/api/v1/artifacts/{sha}").content == big


@pytest.mark.parametrize(
    "data, status",
    [
        (b"\x80\x04" + b"\0" * (12 << 20), 415),  # a pickled checkpoint, refused after it was received (multipart)
        (b"\x80\x04" + b"\0" * 1000, 415),  # the same, small (one request)
        (exported_program_bytes(3, size=(64 << 20) + (512 << 10)), 413),  # over the cap: stopped while it arrives
    ],
    ids=["refused-large", "refused-small", "too-large"],
)
def test_a_refused_upload_leaves_no_object_and_no_multipart_upload(s3_app, s3, bucket, data, status):
    answer = submit(s3_app, data)
    assert answer.status_code == status, answer.text
    assert keys(s3, bucket) == []
    assert open_multipart_uploads(s3, bucket) == []


def test_an_interrupted_upload_is_aborted_and_a_killed_servers_leftovers_are_swept(s3_endpoint, s3, bucket):
    store = S3ArtifactStore(S3Location.parse(f"s3://{bucket}/team"), s3)
    interrupted = store.receive(max_bytes=64 << 20)
    interrupted.write(b"\0" * (9 << 20))  # one part sent: the multipart upload exists
    assert open_multipart_uploads(s3, bucket) == [interrupted.sink.key]
    interrupted.discard()  # what the server does when the client goes away mid-upload
    assert open_multipart_uploads(s3, bucket) == [] and keys(s3, bucket) == []

    left = store.receive(max_bytes=64 << 20)
    left.write(b"\0" * (9 << 20))  # ... and a server killed here leaves this one
    assert store.discard_incomplete() == 0, "a young upload may be another replica's: kept"
    assert store.discard_incomplete(min_age_s=0) == 1
    assert open_multipart_uploads(s3, bucket) == [] and keys(s3, bucket) == []


def test_an_interrupted_upload_over_a_socket_leaves_nothing(s3_app, s3, bucket):
    """The client sends part of a large upload and goes away: the server aborts the multipart upload."""
    import threading

    import uvicorn

    server = uvicorn.Server(uvicorn.Config(s3_app.app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        send_half_an_upload(server.config.port, s3, bucket).close()
        deadline = time.monotonic() + 20
        while open_multipart_uploads(s3, bucket):
            assert time.monotonic() < deadline, "the interrupted upload's multipart upload was not aborted"
            time.sleep(0.05)
        assert keys(s3, bucket) == []
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_presigned_url_serves_one_object_for_a_bounded_time(s3, bucket):
    """moto's server does not check signatures or expiry (it serves an expired URL), so the lifetime is checked in
    the URL the store signs; a store's refusal of an expired URL is tests/workers/test_store_download.py's."""
    from urllib.parse import parse_qs, urlparse

    store = S3ArtifactStore(S3Location.parse(f"s3://{bucket}/team"), s3)
    stored, _ = store.save(io.BytesIO(b"model bytes"), max_bytes=1 << 20)
    url = store.download_url(stored.sha256, expires_s=30)
    assert http.get(url).content == b"model bytes"
    query = parse_qs(urlparse(url).query)
    assert query["X-Amz-Expires"] == ["30"] and query["X-Amz-SignedHeaders"] == ["host"]
    assert urlparse(url).path.endswith(f"/team/artifacts/{stored.sha256[:2]}/{stored.sha256}"), "one object"
    capped = parse_qs(urlparse(store.download_url(stored.sha256, expires_s=10**9)).query)
    assert capped["X-Amz-Expires"] == [str(7 * 24 * 3600)], "never longer than SigV4 allows"


def test_the_server_hands_out_presigned_urls_with_the_job(s3_app, s3_endpoint, bucket):
    import hashlib

    data = exported_program_bytes(9)
    assert submit(s3_app, data).status_code == 202
    worker = s3_app.post(
        "/api/v1/workers/register", json={"name": "w", "device_kind": "cpu", "backends": ["eager"], "environment": {}}
    ).json()["worker_id"]
    job = s3_app.post(f"/api/v1/workers/{worker}/claim").json()["job"]
    sha = hashlib.sha256(data).hexdigest()
    assert job["artifact_sha256"] == sha
    assert job["artifact_url"].startswith(f"{s3_endpoint}/{bucket}/team/artifacts/{sha[:2]}/{sha}?")
    assert "X-Amz-Expires=900" in job["artifact_url"]
    assert http.get(job["artifact_url"]).content == data


def test_readyz_reports_the_store_and_the_database(make_app, s3_endpoint, bucket):
    from fastapi.testclient import TestClient

    with TestClient(make_app(artifact_store=f"s3://{bucket}", s3_endpoint_url=s3_endpoint, s3_region=REGION)) as ok:
        ready = ok.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["store"] == {"ready": True, "kind": "s3", "detail": f"artifact store s3://{bucket}/"}
        assert ready.json()["database"]["ready"] is True
    missing = make_app(artifact_store="s3://no-such-bucket-here", s3_endpoint_url=s3_endpoint, s3_region=REGION)
    with TestClient(missing) as gone:
        answer = gone.get("/readyz")
        assert answer.status_code == 503
        assert answer.json()["store"]["ready"] is False and "no-such-bucket-here" in answer.json()["reason"]


# ---------------------------------------------------------------------------- replicas
CLI = [sys.executable, "-c", "from advisor.cli import app; app()"]


@pytest.mark.slow
def test_a_worker_on_a_replica_that_never_saw_the_upload_measures_it(
    tmp_path: Path, s3_endpoint: str, bucket: str, model_file: Path
):
    from tests.support.service_env import service_environment

    env = (
        service_environment()
        | CREDENTIALS
        | {
            "ADVISOR_ARTIFACT_STORE": f"s3://{bucket}/team",
            "ADVISOR_S3_ENDPOINT_URL": s3_endpoint,
            "ADVISOR_S3_REGION": REGION,
            "ADVISOR_DATABASE_URL": f"sqlite:///{tmp_path / 'shared.db'}",
        }
    )
    processes: list[subprocess.Popen] = []

    def start(*args: str, log: str) -> subprocess.Popen:
        out = (tmp_path / log).open("ab")
        process = subprocess.Popen([*CLI, *args], stdout=out, stderr=subprocess.STDOUT, env=env)
        processes.append(process)
        return process

    def replica(name: str) -> str:
        port = free_port()
        process = start("serve", "--no-worker", "--port", str(port), "--data-dir", str(tmp_path / name), log=name)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, (tmp_path / name).read_text()
            try:
                if http.get(f"{url}/healthz", timeout=1).status_code == 200:
                    return url
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (tmp_path / name).read_text()
            time.sleep(0.2)

    try:
        a = replica("a")
        b = replica("b")
        files = {"model": (model_file.name, model_file.read_bytes())}
        accepted = http.post(f"{a}/api/v1/analyze", files=files, data={"context": CPU_CONTEXT}, timeout=60)
        assert accepted.status_code == 202, accepted.text
        analysis_id = accepted.json()["id"]
        assert not list((tmp_path / "b").rglob("artifacts/*/*")), "replica b holds no copy"
        start("worker", "--server", b, "--backends", "eager", "--name", "on-b", log="worker.log")
        deadline = time.monotonic() + 240
        while True:
            view = http.get(f"{b}/api/v1/analyses/{analysis_id}", timeout=10).json()
            if view["status"] in ("done", "failed"):
                break
            assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-3000:]
            time.sleep(0.5)
        assert view["status"] == "done", (view.get("error"), (tmp_path / "worker.log").read_text()[-3000:])
        assert view["measured_by"]["name"] == "on-b"
        assert [row["status"] for row in view["measurements"]["measurements"]] == ["ok"]
        assert "X-Amz-Signature" not in (tmp_path / "worker.log").read_text(), "no presigned URL in the logs"
        assert "/api/v1/artifacts/" not in (tmp_path / "b").read_text(), "the model came from the store, not replica b"
        assert "GET /api/v1/artifacts/" not in (tmp_path / "a").read_text()
    finally:
        for process in processes[::-1]:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()


@contextlib.contextmanager
def _two_replicas(tmp_path: Path, bucket: str, s3_endpoint: str) -> Iterator[tuple[dict, dict, dict]]:
    """Two API replicas (`serve --no-worker`, a and b) on one empty PostgreSQL and one S3 store, started together (they
    migrate the database one at a time) and ready; their ports, processes and environment. Extra processes a test
    adds to `processes` are stopped with them."""
    from tests.support.service_db import empty_postgres
    from tests.support.service_env import service_environment

    with empty_postgres() as url:
        env = (
            service_environment()
            | CREDENTIALS
            | {
                "ADVISOR_ARTIFACT_STORE": f"s3://{bucket}/team",
                "ADVISOR_S3_ENDPOINT_URL": s3_endpoint,
                "ADVISOR_S3_REGION": REGION,
                "ADVISOR_DATABASE_URL": url,
                "ADVISOR_API_REPLICAS": "2",
                "ADVISOR_S3_INCOMPLETE_MIN_AGE_S": "3",
                "ADVISOR_ORPHAN_SWEEP_INTERVAL_S": "1",
                "ADVISOR_REAPER_INTERVAL_S": "0.5",
            }
        )
        ports = {name: free_port() for name in ("a", "b")}
        processes = {
            name: subprocess.Popen(
                [*CLI, "serve", "--no-worker", "--port", str(port), "--data-dir", str(tmp_path / name)],
                stdout=(tmp_path / name).open("ab"),
                stderr=subprocess.STDOUT,
                env=env,
            )
            for name, port in ports.items()
        }
        try:
            for name, port in ports.items():
                deadline = time.monotonic() + 60
                while True:
                    assert processes[name].poll() is None, (tmp_path / name).read_text()
                    try:
                        if http.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    assert time.monotonic() < deadline, (tmp_path / name).read_text()
                    time.sleep(0.2)
            yield ports, processes, env
        finally:
            for process in processes.values():
                if process.poll() is None:
                    process.terminate()
            for process in processes.values():
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()


@pytest.mark.slow
def test_a_replica_killed_mid_upload_and_mid_completion_loses_and_double_counts_nothing(
    tmp_path: Path, s3_endpoint: str, bucket: str, s3
):
    """Two replicas on one PostgreSQL and one store, started together; replica a is SIGKILLed while it receives an
    upload and a worker's completion. Replica b keeps serving: the worker's retry of the completion lands there once,
    the analysis is done with its results, and a's half-received upload is swept from the store."""
    import hashlib
    import signal

    with _two_replicas(tmp_path, bucket, s3_endpoint) as (ports, processes, env):
        urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
        a, b = urls["a"], urls["b"]

        # an upload half received by a
        upload = send_half_an_upload(ports["a"], s3, bucket)

        # a job submitted through b and claimed; its completion half received by a
        model = exported_program_bytes(42)
        sha = hashlib.sha256(model).hexdigest()
        accepted = http.post(
            f"{b}/api/v1/analyze", files={"model": ("m.pt2", model)}, data={"context": CPU_CONTEXT}, timeout=30
        )
        assert accepted.status_code == 202, accepted.text
        analysis_id = accepted.json()["id"]
        register = {"name": "w", "device_kind": "cpu", "backends": ["eager", "inductor"], "environment": {}}
        worker = http.post(f"{b}/api/v1/workers/register", json=register, timeout=10).json()["worker_id"]
        lease = http.post(f"{a}/api/v1/workers/{worker}/claim", timeout=10).json()
        job_id, token = lease["job"]["id"], lease["lease_token"]
        results = json.dumps(_results(sha)).encode()
        completion = socket.create_connection(("127.0.0.1", ports["a"]))
        completion.sendall(
            (
                f"POST /api/v1/jobs/{job_id}/complete HTTP/1.1\r\nHost: 127.0.0.1:{ports['a']}\r\n"
                f"Content-Type: application/json\r\nX-Lease-Token: {token}\r\n"
                f"Content-Length: {len(results)}\r\n\r\n"
            ).encode()
            + results[: len(results) // 2]
        )
        time.sleep(0.3)
        processes["a"].send_signal(signal.SIGKILL)
        processes["a"].wait(10)
        upload.close()
        completion.close()

        # b keeps serving: the worker's retry of the completion lands there, once
        for _ in range(2):
            done = http.post(
                f"{b}/api/v1/jobs/{job_id}/complete",
                content=results,
                timeout=30,
                headers={"X-Lease-Token": token, "Content-Type": "application/json"},
            )
            assert done.status_code == 200, done.text
        view = http.get(f"{b}/api/v1/analyses/{analysis_id}", timeout=10).json()
        assert view["status"] == "done" and view["job"]["attempts"] == 1
        assert [row["backend"] for row in view["measurements"]["measurements"]] == ["eager", "inductor"]
        listed = http.get(f"{b}/api/v1/analyses", timeout=10).json()
        assert listed["total"] == 1, "one analysis: nothing double-counted, the half upload submitted nothing"
        assert http.get(f"{b}/api/v1/artifacts/{sha}", timeout=10).content == model

        deadline = time.monotonic() + 30  # b sweeps what a left in the store
        while open_multipart_uploads(s3, bucket) or [k for k in keys(s3, bucket) if "/incoming/" in k]:
            assert time.monotonic() < deadline, "the killed replica's multipart upload was never aborted"
            time.sleep(0.5)
        assert keys(s3, bucket) == [f"team/artifacts/{sha[:2]}/{sha}"]


def _results(sha: str) -> dict:
    from tests.support.fixtures_decide import inspection, measurement, run

    return {
        "inspection": inspection() | {"artifact_sha256": sha},
        "measurements": run(
            measurement("eager", median_ms=10.0, compile_s=None),
            measurement("inductor", median_ms=5.0, compile_s=8.0),
            device="cpu",
        ),
    }


class OneAddress:
    """The one address of the replicas (nginx in docker/compose.yaml): each connection goes to the first replica that
    accepts it. `cut_completion` arms it to pass on half of the next job completion it sees, call `then` (kill that
    replica) and drop the connection: a completion killed in the middle, as the worker sends it."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.then: Callable[[], None] | None = None
        self.cut = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut_completion(self, then: Callable[[], None]) -> None:
        self.then = then

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        for port in self.ports:
            try:
                upstream = socket.create_connection(("127.0.0.1", port), timeout=2)
                break
            except OSError:
                continue
        else:
            client.close()
            return
        upstream.settimeout(None)
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()
        with client, upstream:
            while chunk := _recv(client):
                head = chunk.split(b"\r\n", 1)[0]
                if self.then is not None and head.startswith(b"POST /api/v1/jobs/") and b"/complete " in head:
                    then, self.then = self.then, None
                    upstream.sendall(chunk[: len(chunk) // 2])
                    time.sleep(0.3)  # the replica is reading the completion
                    then()
                    self.cut.set()
                    return
                upstream.sendall(chunk)

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := _recv(source):
                sink.sendall(chunk)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.listener.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(1 << 16)
    except OSError:
        return b""


@pytest.mark.slow
def test_a_real_worker_behind_one_address_survives_a_replica_killed_mid_upload_and_mid_completion(
    tmp_path: Path, s3_endpoint: str, bucket: str, s3, model_file: Path
):
    """Two replicas on one PostgreSQL and one store behind one address, a real worker process (`worker --cold`) and a
    user. Replica a (the one the address prefers) is SIGKILLed while it receives an upload and, later, while it
    receives the worker's completion; the worker's retry reaches replica b through the same address and lands once:
    the analysis is done, measured by that worker, one attempt, one analysis, the model under its hash, nothing of
    the half upload left in the store."""
    import hashlib
    import signal

    with _two_replicas(tmp_path, bucket, s3_endpoint) as (ports, processes, env):
        address = OneAddress([ports["a"], ports["b"]])
        one = f"http://127.0.0.1:{address.port}"
        try:
            # the user's analysis, and an upload left half received by a
            files = {"model": (model_file.name, model_file.read_bytes())}
            accepted = http.post(f"{one}/api/v1/analyze", files=files, data={"context": CPU_CONTEXT}, timeout=60)
            assert accepted.status_code == 202, accepted.text
            analysis_id = accepted.json()["id"]
            upload = send_half_an_upload(address.port, s3, bucket)

            # the worker measures through the one address; a dies under the upload and the completion
            address.cut_completion(lambda: processes["a"].send_signal(signal.SIGKILL))
            worker_log = tmp_path / "worker.log"
            worker = subprocess.Popen(
                [*CLI, "worker", "--server", one, "--backends", "eager", "--name", "real", "--cold", "--max-jobs", "1"],
                stdout=worker_log.open("ab"),
                stderr=subprocess.STDOUT,
                env=env,
            )
            processes["worker"] = worker
            assert address.cut.wait(120), worker_log.read_text()[-3000:]
            processes["a"].wait(10)
            upload.close()
            assert worker.wait(60) == 0, worker_log.read_text()[-3000:]

            b = f"http://127.0.0.1:{ports['b']}"
            view = http.get(f"{b}/api/v1/analyses/{analysis_id}", timeout=10).json()
            assert view["status"] == "done", (view.get("error"), worker_log.read_text()[-3000:])
            assert view["measured_by"]["name"] == "real" and view["job"]["attempts"] == 1
            assert [row["status"] for row in view["measurements"]["measurements"]] == ["ok"]
            assert http.get(f"{b}/api/v1/analyses", timeout=10).json()["total"] == 1, "nothing double-counted"
            assert "/complete" not in (tmp_path / "a").read_text(), "a died before it answered the completion"
            assert (tmp_path / "b").read_text().count('/complete HTTP/1.1" 200') == 1, "the retry landed on b, once"
            sha = hashlib.sha256(model_file.read_bytes()).hexdigest()
            deadline = time.monotonic() + 30  # b sweeps what a left in the store
            while open_multipart_uploads(s3, bucket) or [k for k in keys(s3, bucket) if "/incoming/" in k]:
                assert time.monotonic() < deadline, "the killed replica's multipart upload was never aborted"
                time.sleep(0.5)
            assert keys(s3, bucket) == [f"team/artifacts/{sha[:2]}/{sha}"]
        finally:
            address.close()
