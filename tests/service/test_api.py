"""The HTTP contract (docs/usage.md "REST API") through FastAPI's TestClient against a temp-dir app."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import zipfile

import pytest

from advisor.core.calibration import MAX_CALIBRATION_BYTES
from tests.support.fixtures_decide import inspection, measurement, run
from tests.support.service_db import stored_files

CPU_CONTEXT = {"stage": "production", "target": "cpu"}


def submit(client, model_file, context=None, **form):  # noqa: ANN001, ANN003, ANN201
    data = {"context": json.dumps(CPU_CONTEXT if context is None else context), **form}
    with open(model_file, "rb") as fh:
        return client.post("/api/v1/analyze", files={"model": ("mlp.pt2", fh)}, data=data)


def register_worker(client, device_kind="cpu", backends=("eager", "inductor")) -> str:  # noqa: ANN001
    body = {"name": "test-worker", "device_kind": device_kind, "backends": list(backends), "environment": {}}
    response = client.post("/api/v1/workers/register", json=body)
    assert response.status_code == 200, response.text
    return response.json()["worker_id"]


def claim(client, worker_id: str, wait: float = 0):  # noqa: ANN001, ANN201
    return client.post(f"/api/v1/workers/{worker_id}/claim", params={"wait": wait})


def cpu_results(artifact_sha256: str | None = None) -> dict:
    """A worker's results; `artifact_sha256`: the job's artifact, which the inspection names (a real worker's does)."""
    return {
        "inspection": inspection() | ({"artifact_sha256": artifact_sha256} if artifact_sha256 else {}),
        "measurements": run(
            measurement("eager", median_ms=10.0, compile_s=None),
            measurement("inductor", median_ms=5.0, compile_s=8.0),
            device="cpu",
        ),
    }


def test_submit_stores_the_artifact_and_queues_an_analysis(client, model_file, settings):
    response = submit(client, model_file, model_name="my-mlp")
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "queued" and body["deduplicated"] is False
    assert set(body["links"]) == {"self", "report_md", "report_json", "cancel"}

    detail = client.get(body["links"]["self"]).json()
    assert detail["model_name"] == "my-mlp"
    assert (detail["format"], detail["target"], detail["queue_position"]) == ("exported_program", "cpu", 1)
    assert detail["context"]["stage"] == "production"
    sha = hashlib.sha256(model_file.read_bytes()).hexdigest()
    assert stored_files(settings) == [settings.artifacts_dir / sha[:2] / sha]


def test_root_analyze_alias_accepts_submissions(client, model_file):
    with open(model_file, "rb") as fh:
        response = client.post("/analyze", files={"model": ("m.pt2", fh)}, data={"context": json.dumps(CPU_CONTEXT)})
    assert response.status_code == 202


def test_identical_submission_is_deduplicated_unless_forced(client, model_file, clock, settings):
    first = submit(client, model_file).json()
    again = submit(client, model_file)
    assert again.status_code == 200
    assert again.json()["id"] == first["id"] and again.json()["deduplicated"] is True
    forced = submit(client, model_file, force="true")
    assert forced.status_code == 202 and forced.json()["id"] != first["id"]
    other_context = submit(client, model_file, context={"stage": "prototype", "target": "cpu"})
    assert other_context.json()["id"] not in (first["id"], forced.json()["id"])
    clock.advance(settings.cache_window_s + 1)
    assert submit(client, model_file).json()["deduplicated"] is False, "outside the cache window: measured again"


def test_invalid_context_lists_each_field(client, model_file):
    response = submit(client, model_file, context={"stage": "someday", "target": "tpu", "latency_target_ms": -1})
    assert response.status_code == 422
    fields = {problem["field"] for problem in response.json()["detail"]}
    assert {"stage", "target", "latency_target_ms"} <= fields
    assert all(problem["message"] for problem in response.json()["detail"])


def test_context_that_is_not_json_is_a_422_on_the_context_field(client, model_file):
    with open(model_file, "rb") as fh:
        response = client.post("/api/v1/analyze", files={"model": ("m.pt2", fh)}, data={"context": "{stage:"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["field"] == "context"
    assert "not valid JSON" in response.json()["detail"][0]["message"]


def test_missing_model_file_names_the_field(client):
    response = client.post("/api/v1/analyze", data={"context": "{}"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["field"] == "model"


def _zip(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


HOSTILE_UPLOADS = {
    "pickled_checkpoint": b"\x80\x04\x95" + b"\x00" * 64,
    "pickled_checkpoint_zip": _zip({"archive/data.pkl": b"\x80\x04.", "archive/version": b"3"}),
    "not_a_zip": b"this is a text file, not a model",
    "empty": b"",
    "unsafe_path": _zip({"../evil/data.pkl": b"x", "../evil/code/x.py": b"x"}),
    "unknown_archive": _zip({"stuff/readme.txt": b"hello"}),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_UPLOADS))
def test_hostile_upload_is_refused_with_the_sniffers_message_and_leaves_nothing(client, settings, kind, tmp_path):
    from advisor.core.artifacts import ArtifactRejected, sniff

    path = tmp_path / "upload.bin"
    path.write_bytes(HOSTILE_UPLOADS[kind])
    with pytest.raises(ArtifactRejected) as rejected:
        sniff(path)
    response = client.post(
        "/api/v1/analyze", files={"model": ("x.pt2", HOSTILE_UPLOADS[kind])}, data={"context": json.dumps(CPU_CONTEXT)}
    )
    assert response.status_code == (422 if kind == "unsafe_path" else 415)  # an unsafe archive vs. not a model
    assert response.json()["detail"] == str(rejected.value)
    assert stored_files(settings) == []
    assert client.get("/api/v1/analyses").json()["total"] == 0


def test_upload_over_the_cap_is_413_naming_the_limit_and_leaves_nothing(client, settings):
    too_big = b"\0" * (settings.max_upload_bytes + 1)
    response = client.post("/api/v1/analyze", files={"model": ("big.pt2", too_big)}, data={"context": "{}"})
    assert response.status_code == 413
    assert "4 MiB" in response.json()["detail"] and "ADVISOR_MAX_UPLOAD_MB" in response.json()["detail"]
    assert stored_files(settings) == []


def test_declared_oversize_request_is_refused_before_its_body_is_read(client, settings):
    limit = settings.max_upload_bytes + settings.max_inputs_bytes + MAX_CALIBRATION_BYTES + (1 << 20)
    response = client.post(
        "/api/v1/analyze",
        content=b"x",
        headers={"content-length": str(limit + 1), "content-type": "multipart/form-data"},
    )
    assert response.status_code == 413
    assert response.json()["limit_bytes"] == limit


def test_full_worker_round_trip_over_http(client, model_file):
    analysis_id = submit(client, model_file, model_name="mlp").json()["id"]
    worker_id = register_worker(client)
    claimed = claim(client, worker_id)
    assert claimed.status_code == 200, claimed.text
    lease = claimed.json()
    job, token = lease["job"], lease["lease_token"]
    assert job["analysis_id"] == analysis_id and job["attempt"] == 1 and job["inputs_url"] is None
    assert job["context"]["target"] == "cpu"

    artifact = client.get(job["artifact_url"])
    assert artifact.status_code == 200
    assert hashlib.sha256(artifact.content).hexdigest() == job["artifact_sha256"]

    beat = client.post(
        f"/api/v1/jobs/{job['id']}/heartbeat",
        headers={"X-Lease-Token": token},
        json={"stage": "measure:inductor:default", "progress": 0.4},
    )
    assert beat.status_code == 200 and beat.json()["cancel_requested"] is False
    running = client.get(f"/api/v1/analyses/{analysis_id}").json()
    assert (running["status"], running["stage"], running["progress"]) == ("running", "measure:inductor:default", 0.4)

    results = cpu_results(job["artifact_sha256"])
    done = client.post(f"/api/v1/jobs/{job['id']}/complete", headers={"X-Lease-Token": token}, json=results)
    assert done.json() == {"analysis_id": analysis_id, "status": "done"}
    repeat = client.post(f"/api/v1/jobs/{job['id']}/complete", headers={"X-Lease-Token": token}, json=results)
    assert repeat.status_code == 200, "complete is idempotent for the same lease"

    result = client.get(f"/api/v1/analyses/{analysis_id}").json()
    assert result["status"] == "done" and result["error"] is None
    assert result["recommendation"]["backend"] in ("eager", "inductor")
    assert result["recommendation"]["engine_version"]
    assert [row["backend"] for row in result["measurements"]["measurements"]] == ["eager", "inductor"]

    report = client.get(f"/api/v1/analyses/{analysis_id}/report.md")
    assert report.status_code == 200 and "mlp" in report.text
    assert client.get(f"/api/v1/analyses/{analysis_id}/report.json").json()["model_name"] == "mlp"

    redecided = client.post(f"/api/v1/analyses/{analysis_id}/redecide")
    assert redecided.status_code == 200
    assert redecided.json()["recommendation"]["backend"] == result["recommendation"]["backend"]

    listed = client.get("/api/v1/analyses", params={"backend": result["recommendation"]["backend"]}).json()
    assert [item["id"] for item in listed["items"]] == [analysis_id]


def test_stale_or_wrong_lease_token_gets_409(client, model_file):
    submit(client, model_file)
    worker_id = register_worker(client)
    job_id = claim(client, worker_id).json()["job"]["id"]
    for call, body in (("heartbeat", {}), ("complete", cpu_results()), ("fail", {"error": "x", "retryable": True})):
        response = client.post(f"/api/v1/jobs/{job_id}/{call}", headers={"X-Lease-Token": "not-the-token"}, json=body)
        assert response.status_code == 409, call
        assert "stop working on it" in response.json()["detail"]
    assert client.post("/api/v1/jobs/999/heartbeat", headers={"X-Lease-Token": "x"}, json={}).status_code == 404


def test_worker_failure_is_retried_then_reported_on_the_analysis(client, model_file, clock):
    analysis_id = submit(client, model_file).json()["id"]
    worker_id = register_worker(client)
    for expected_next in ("queued", "queued", "failed"):
        lease = claim(client, worker_id).json()
        response = client.post(
            f"/api/v1/jobs/{lease['job']['id']}/fail",
            headers={"X-Lease-Token": lease["lease_token"]},
            json={"error": "inductor crashed", "retryable": True},
        )
        assert response.json() == {"next": expected_next}
        clock.advance(3600)
    detail = client.get(f"/api/v1/analyses/{analysis_id}").json()
    assert (detail["status"], detail["error"]) == ("failed", "inductor crashed")


def test_cancel_queued_then_running_analysis(client, model_file):
    queued_id = submit(client, model_file).json()["id"]
    assert client.post(f"/api/v1/analyses/{queued_id}/cancel").json()["status"] == "cancelled"
    again = client.post(f"/api/v1/analyses/{queued_id}/cancel")
    assert again.status_code == 409 and "already cancelled" in again.json()["detail"]

    running_id = submit(client, model_file, force="true").json()["id"]
    lease = claim(client, register_worker(client)).json()
    headers = {"X-Lease-Token": lease["lease_token"]}
    assert client.post(f"/api/v1/analyses/{running_id}/cancel").json()["status"] == "running"
    beat = client.post(f"/api/v1/jobs/{lease['job']['id']}/heartbeat", headers=headers, json={})
    assert beat.json()["cancel_requested"] is True
    assert client.post(f"/api/v1/jobs/{lease['job']['id']}/cancelled", headers=headers).json()["status"] == "cancelled"
    assert client.get(f"/api/v1/analyses/{running_id}").json()["status"] == "cancelled"


def test_claim_answers_204_when_there_is_no_work_and_404_for_an_unknown_worker(client):
    worker_id = register_worker(client)
    assert claim(client, worker_id, wait=0.3).status_code == 204
    unknown = claim(client, "0123456789abcdef")
    assert unknown.status_code == 404 and "register again" in unknown.json()["detail"]


def test_claim_skips_jobs_for_other_devices(client, model_file):
    submit(client, model_file, context={"target": "npu"})
    assert claim(client, register_worker(client, "cpu")).status_code == 204
    assert claim(client, register_worker(client, "npu", ["eager", "torchair"])).status_code == 200


def test_deregister_puts_the_job_back_for_another_worker(client, model_file):
    submit(client, model_file)
    leaving = register_worker(client)
    job_id = claim(client, leaving).json()["job"]["id"]
    released = client.post(f"/api/v1/workers/{leaving}/deregister").json()
    assert released["released_jobs"] == [job_id]
    again = claim(client, register_worker(client)).json()
    assert again["job"]["id"] == job_id and again["job"]["attempt"] == 1


def test_inputs_file_is_stored_and_served_to_the_worker(client, model_file):
    with open(model_file, "rb") as fh:
        response = client.post(
            "/api/v1/analyze",
            files={"model": ("m.pt2", fh), "inputs": ("inputs.pt", b"tensor bytes")},
            data={"context": json.dumps(CPU_CONTEXT)},
        )
    lease = claim(client, register_worker(client)).json()
    assert lease["job"]["inputs_url"].endswith(f"/analyses/{response.json()['id']}/inputs")
    assert client.get(lease["job"]["inputs_url"]).content == b"tensor bytes"


def test_list_filters_sorts_and_paginates(client, model_file):
    ids = [submit(client, model_file, model_name=f"model-{i}", force="true").json()["id"] for i in range(5)]
    client.post(f"/api/v1/analyses/{ids[0]}/cancel")
    page = client.get("/api/v1/analyses", params={"per_page": 2, "page": 2, "sort": "id", "order": "asc"}).json()
    assert (page["total"], page["page"], page["per_page"]) == (5, 2, 2)
    assert [item["id"] for item in page["items"]] == ids[2:4]
    cancelled = client.get("/api/v1/analyses", params={"status": "cancelled"}).json()
    assert [item["id"] for item in cancelled["items"]] == [ids[0]]
    by_model = client.get("/api/v1/analyses", params={"model": "model-3"}).json()
    assert [item["model_name"] for item in by_model["items"]] == ["model-3"]
    assert client.get("/api/v1/analyses", params={"target": "npu"}).json()["total"] == 0
    bad = client.get("/api/v1/analyses", params={"sort": "password"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "sort"


def test_unknown_analysis_is_404(client):
    response = client.get("/api/v1/analyses/12345")
    assert response.status_code == 404 and "12345" in response.json()["detail"]
    assert client.post("/api/v1/analyses/12345/redecide").status_code == 404


def test_redecide_before_results_is_409(client, model_file):
    analysis_id = submit(client, model_file).json()["id"]
    response = client.post(f"/api/v1/analyses/{analysis_id}/redecide")
    assert response.status_code == 409 and "no results yet" in response.json()["detail"]


def test_ops_endpoints(client, model_file):
    submit(client, model_file)
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json()["status"] == "ready"
    depth = client.get("/api/v1/queue").json()
    assert depth["by_state"] == {"queued": {"cpu": 1}}
    assert depth["oldest_waiting"]["cpu"]["waiting_s"] >= 0
    metrics = client.get("/metrics").text
    assert 'advisor_queue_jobs{device="cpu",state="queued"} 1.0' in metrics
    assert 'advisor_analyses{status="queued"} 1.0' in metrics
    assert "advisor_job_duration_seconds" in metrics
    workers = client.get("/api/v1/workers").json()
    assert workers == []


def test_docs_work_offline(client):
    page = client.get("/docs").text
    assert "cdn." not in page and "unpkg" not in page
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
        assert f"/static-offline-docs/{asset}" in page
        assert client.get(f"/static-offline-docs/{asset}").status_code == 200
    assert "/api/v1/analyze" in client.get("/openapi.json").json()["paths"]


def test_server_restart_keeps_analyses_and_leases(make_app, model_file):
    from fastapi.testclient import TestClient

    with TestClient(make_app()) as first:
        analysis_id = submit(first, model_file).json()["id"]
        lease = claim(first, register_worker(first)).json()
    with TestClient(make_app()) as second:
        beat = second.post(
            f"/api/v1/jobs/{lease['job']['id']}/heartbeat",
            headers={"X-Lease-Token": lease["lease_token"]},
            json={"stage": "inspect"},
        )
        assert beat.status_code == 200
        assert second.get(f"/api/v1/analyses/{analysis_id}").json()["stage"] == "inspect"


def test_creating_the_app_does_not_import_torch(tmp_path):
    code = (
        "import sys\n"
        "from app.main import create_app\n"
        "from app.settings import Settings\n"
        f"create_app(Settings(data_dir={str(tmp_path)!r}))\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_background_reaper_dead_letters_an_abandoned_job(make_app, model_file, clock):
    import time

    from fastapi.testclient import TestClient

    with TestClient(make_app(reaper_interval_s=0.05, max_attempts=1)) as client:
        analysis_id = submit(client, model_file).json()["id"]
        assert claim(client, register_worker(client)).status_code == 200
        clock.advance(61)  # the worker went silent past its lease
        deadline = time.monotonic() + 10
        while client.get(f"/api/v1/analyses/{analysis_id}").json()["status"] != "failed":
            assert time.monotonic() < deadline, "the reaper did not fail the abandoned job"
            time.sleep(0.05)
        error = client.get(f"/api/v1/analyses/{analysis_id}").json()["error"]
        assert "stopped sending heartbeats" in error


def test_unexpected_file_field_and_bad_force_are_422_with_the_field(client, model_file, settings):
    with open(model_file, "rb") as fh:
        extra = client.post("/api/v1/analyze", files={"model": ("m.pt2", fh), "weights": ("w.bin", b"123")})
    assert extra.status_code == 422 and extra.json()["detail"][0]["field"] == "weights"
    bad_force = submit(client, model_file, force="perhaps")
    assert bad_force.status_code == 422 and bad_force.json()["detail"][0]["field"] == "force"
    assert [p for p in stored_files(settings) if ".incoming" in p.parts] == []


def test_unknown_backend_names_are_422_not_a_job_that_waits_forever(client, model_file, settings):
    typo = submit(client, model_file, backends="eager,indcutor")
    assert typo.status_code == 422
    detail = typo.json()["detail"][0]
    assert detail["field"] == "backends" and "indcutor" in detail["message"] and "inductor" in detail["message"]
    with_mode = submit(client, model_file, backends="inductor:max-autotune")
    assert with_mode.status_code == 422 and "every mode of each backend" in with_mode.json()["detail"][0]["message"]
    assert [p for p in stored_files(settings) if ".incoming" in p.parts] == []
    assert submit(client, model_file, backends="eager,inductor").status_code == 202


def test_a_form_of_too_many_parts_is_refused_with_a_clear_422(client, model_file, settings):
    from app.multipart_form import MAX_PARTS

    fields = [("context", (None, json.dumps(CPU_CONTEXT)))] + [(f"ctx.f{i}", (None, "1")) for i in range(MAX_PARTS)]
    with open(model_file, "rb") as fh:
        response = client.post("/api/v1/analyze", files=[*fields, ("model", ("m.pt2", fh))])
    assert response.status_code == 422
    [problem] = response.json()["detail"]
    assert problem["field"] == "request" and f"more than {MAX_PARTS} parts" in problem["message"]
    assert "`context` JSON field" in problem["message"]
    assert [p for p in stored_files(settings) if ".incoming" in p.parts] == []


def test_client_that_disconnects_mid_upload_leaves_nothing(make_app, settings):
    import asyncio
    import threading

    app = make_app()
    boundary = "b0undary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"; filename="m.pt2"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    messages = [
        {"type": "http.request", "body": head + b"PK" + b"\0" * 700_000, "more_body": True},
        {"type": "http.request", "body": b"\0" * 700_000, "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent: list[dict] = []

    async def receive() -> dict:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/v1/analyze",
        "raw_path": b"/api/v1/analyze",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", f"multipart/form-data; boundary={boundary}".encode()), (b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 1),
        "server": ("test", 80),
    }
    # A thread of its own: Playwright's sync API (browser tests, same session) keeps a loop running here.
    runner = threading.Thread(target=lambda: asyncio.run(app(scope, receive, send)))
    runner.start()
    runner.join(timeout=60)
    assert stored_files(settings) == [], "a half-received upload must not stay on disk"
    assert sent[0]["status"] == 400
