"""A completion must belong to its job (issue 26 item 6): the job and lease the worker holds, the job's artifact,
the backends the job asked for, finite and possible numbers. Anything else is a 422 naming the field, and the job
and its analysis are left as they were (still leased: the worker can fail it or complete it correctly). Worker
tokens download only the artifacts of jobs they hold a live lease on. The analysis names the worker that measured.
"""

from __future__ import annotations

import json
import math

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from app.auth import create_token
from app.job_queue import Actor, NotYourWorker, ResultsUpload
from app.models import Analysis, Job
from tests.support.fixtures_decide import inspection, measurement, run

from .test_api import submit

CONTEXT = json.dumps({"stage": "production", "target": "cpu"})


@pytest.fixture
def secured(make_app):  # noqa: ANN001, ANN201
    with TestClient(make_app(require_auth=True)) as client:
        yield client


def token_for(client: TestClient, role: str, name: str) -> dict[str, str]:
    with Session(client.app.state.engine) as session:
        _, token = create_token(session, role=role, name=name, now=client.app.state.queue.clock())
    return {"Authorization": f"Bearer {token}"}


def register(client: TestClient, headers: dict | None = None, name: str = "node-a", backends=("eager", "inductor")):  # noqa: ANN001, ANN201
    body = {"name": name, "device_kind": "cpu", "backends": list(backends), "environment": {}}
    response = client.post("/api/v1/workers/register", json=body, headers=headers or {})
    assert response.status_code == 200, response.text
    return response.json()["worker_id"]


def lease_for(client: TestClient, worker_id: str, headers: dict | None = None) -> dict:
    response = client.post(f"/api/v1/workers/{worker_id}/claim", headers=headers or {})
    assert response.status_code == 200, response.text
    return response.json()


def results_for(lease: dict) -> dict:
    """What an honest worker sends for `lease`: its artifact's sha256 in the inspection, eager and inductor rows."""
    return {
        "inspection": inspection() | {"artifact_sha256": lease["job"]["artifact_sha256"]},
        "measurements": run(
            measurement("eager", median_ms=10.0, compile_s=None),
            measurement("inductor", median_ms=5.0, compile_s=8.0, eager_ms=10.0),
            device="cpu",
        ),
    }


def post(client: TestClient, lease: dict, body: dict, headers: dict | None = None):  # noqa: ANN201
    """JSON as Python writes it, NaN and Infinity included (a worker's json.dumps sends them)."""
    return client.post(
        f"/api/v1/jobs/{lease['job']['id']}/complete",
        content=json.dumps(body),
        headers={"X-Lease-Token": lease["lease_token"], "Content-Type": "application/json", **(headers or {})},
    )


def job_row(client: TestClient, job_id: int) -> Job:
    with Session(client.app.state.engine) as session:
        return session.get(Job, job_id)


def assert_unchanged(client: TestClient, lease: dict, analysis_id: int, headers: dict | None = None) -> None:
    """The job is still running under the same lease, the analysis has no results, and the worker can still
    complete it correctly."""
    job = job_row(client, lease["job"]["id"])
    assert (job.status, job.lease_token, job.last_error) == ("running", lease["lease_token"], None)
    analysis = client.get(f"/api/v1/analyses/{analysis_id}", headers=headers or {}).json()
    assert analysis["status"] == "running" and analysis["measurements"] is None and analysis["inspection"] is None
    assert analysis["error"] is None and analysis["recommendation"] is None


def leased(client: TestClient, model_file, **form) -> tuple[int, dict]:  # noqa: ANN001, ANN003
    analysis_id = submit(client, model_file, force="true", **form).json()["id"]
    return analysis_id, lease_for(client, register(client))


# ------------------------------------------------------------------ the job and lease the worker holds
def test_another_workers_job_is_refused_and_left_as_it_was(secured, model_file):
    user = token_for(secured, "user", "alice")
    own, other = token_for(secured, "worker", "node-a"), token_for(secured, "worker", "node-b")
    with open(model_file, "rb") as fh:
        analysis_id = secured.post(
            "/api/v1/analyze", headers=user, files={"model": ("m.pt2", fh)}, data={"context": CONTEXT}
        ).json()["id"]
    lease = lease_for(secured, register(secured, own), own)
    register(secured, other, "node-b")

    refused = post(secured, lease, results_for(lease), other)  # even with the lease token itself
    assert refused.status_code == 403, refused.text
    assert_unchanged(secured, lease, analysis_id, user)
    assert post(secured, lease, results_for(lease), own).status_code == 200


def test_the_queue_itself_refuses_a_worker_token_acting_for_another_worker(client, model_file):
    """Defence in depth: the queue checks who acts, not only the HTTP layer in front of it."""
    analysis_id, lease = leased(client, model_file)
    queue = client.app.state.queue
    body = results_for(lease)
    with Session(client.app.state.engine) as session, pytest.raises(NotYourWorker):
        queue.complete_with_results(
            session,
            ResultsUpload(
                job_id=lease["job"]["id"],
                lease_token=lease["lease_token"],
                inspection=body["inspection"],
                measurements=body["measurements"],
                actor=Actor(token_id=424242, admin=False),
            ),
        )
    assert_unchanged(client, lease, analysis_id)


# ------------------------------------------------------------------ the job's artifact
@pytest.mark.parametrize("sha", ["0" * 64, None], ids=["another-artifact", "unnamed"])
def test_an_inspection_of_another_artifact_is_a_422_and_the_job_is_unchanged(client, model_file, sha):
    analysis_id, lease = leased(client, model_file)
    body = results_for(lease)
    if sha is None:
        del body["inspection"]["artifact_sha256"]
    else:
        body["inspection"]["artifact_sha256"] = sha
    refused = post(client, lease, body)
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["field"] == "inspection.artifact_sha256"
    assert_unchanged(client, lease, analysis_id)

    done = post(client, lease, results_for(lease))  # the same worker, now with the right results
    assert done.status_code == 200 and done.json()["status"] == "done"


# ------------------------------------------------------------------ the backends and modes the job asked for
def test_a_row_for_a_backend_the_job_did_not_ask_for_is_a_422(client, model_file):
    analysis_id, lease = leased(client, model_file, backends="eager,inductor")
    body = results_for(lease)
    body["measurements"]["measurements"].append(measurement("onnxruntime", median_ms=1.0, eager_ms=10.0))
    refused = post(client, lease, body)
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["field"] == "measurements.measurements.2.backend"
    assert "onnxruntime" in refused.json()["detail"][0]["message"]
    assert_unchanged(client, lease, analysis_id)


def test_without_requested_backends_the_workers_own_backends_bound_the_rows(client, model_file):
    """A job that names no backends is measured with every backend its worker registered, and no other."""
    analysis_id, lease = leased(client, model_file)
    assert lease["job"]["backends"] == []
    body = results_for(lease)
    body["measurements"]["measurements"][1] = measurement("tensorrt", median_ms=1.0, eager_ms=10.0)
    refused = post(client, lease, body)
    assert refused.status_code == 422 and refused.json()["detail"][0]["field"] == "measurements.measurements.1.backend"
    assert_unchanged(client, lease, analysis_id)


def test_a_mode_the_backend_does_not_have_is_a_422(client, model_file):
    analysis_id, lease = leased(client, model_file)
    body = results_for(lease)
    body["measurements"]["measurements"][1]["mode"] = "turbo"
    refused = post(client, lease, body)
    assert refused.status_code == 422 and refused.json()["detail"][0]["field"] == "measurements.measurements.1.mode"
    assert_unchanged(client, lease, analysis_id)


# ------------------------------------------------------------------ finite, possible numbers
def _set(path: str, value):  # noqa: ANN001, ANN202
    def change(body: dict) -> None:
        *parents, last = path.split(".")
        node = body["measurements"]["measurements"]
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[last] = value

    return change


def _forged_speedup(body: dict) -> None:
    """The issue's forgery: a 0.001 ms median and a speedup of 9999 next to an eager median of 10 ms."""
    row = body["measurements"]["measurements"][1]
    row["latency"] |= {"median_ms": 0.001, "ci_low_ms": 0.001, "ci_high_ms": 0.001, "p90_ms": 0.001, "p99_ms": 0.001}
    row["speedup_vs_eager"] = 9999.0


def _seeded(measured_s: float):  # noqa: ANN202
    """A bounded cold compile (MeasurementRow.compile_seeded) whose measured part is `measured_s` (of a row whose
    `compile_s_cold` says 8 s)."""
    return _set("1.compile_seeded", {"from_option": "inductor:default", "measured_s": measured_s, "floor_cold_s": 1.0})


def test_a_bounded_compile_that_is_the_sum_of_its_parts_is_accepted(client, model_file):
    analysis_id, lease = leased(client, model_file)
    body = results_for(lease)
    _seeded(7.0)(body)  # 7 s from inductor:default's kernels + its own 1 s cold compile = the row's 8 s
    assert post(client, lease, body).json()["status"] == "done"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (_set("1.latency.median_ms", 0.0), "measurements.measurements.1.latency.median_ms"),
        (_set("1.latency.median_ms", -5.0), "measurements.measurements.1.latency.median_ms"),
        (_set("1.latency.median_ms", math.nan), "measurements.measurements.1.latency.median_ms"),
        (_set("1.latency.median_ms", math.inf), "measurements.measurements.1.latency.median_ms"),
        (_set("0.eager_latency.p99_ms", math.inf), "measurements.measurements.0.eager_latency.p99_ms"),
        (_set("1.latency.p90_ms", 1.0), "measurements.measurements.1.latency.p90_ms"),  # below the median
        (_set("1.speedup_vs_eager", math.nan), "measurements.measurements.1.speedup_vs_eager"),
        (_set("1.speedup_vs_eager", -2.0), "measurements.measurements.1.speedup_vs_eager"),
        (_set("1.speedup_vs_eager", 9999.0), "measurements.measurements.1.speedup_vs_eager"),
        (_forged_speedup, "measurements.measurements.1.speedup_vs_eager"),
        (_set("1.compile_s_cold", -1.0), "measurements.measurements.1.compile_s_cold"),
        (_set("1.compile_s_cold", math.inf), "measurements.measurements.1.compile_s_cold"),
        (_set("1.peak_memory_mb", -1.0), "measurements.measurements.1.peak_memory_mb"),
        (_set("1.peak_memory_mb", math.nan), "measurements.measurements.1.peak_memory_mb"),
        (_seeded(-3.0), "measurements.measurements.1.compile_seeded.measured_s"),
        (_seeded(math.nan), "measurements.measurements.1.compile_seeded.measured_s"),
        (_seeded(2.0), "measurements.measurements.1.compile_s_cold"),  # 8 s stated, 2 + 1 s measured
    ],
    ids=[
        "median-zero",
        "median-negative",
        "median-nan",
        "median-inf",
        "eager-p99-inf",
        "p90-below-median",
        "speedup-nan",
        "speedup-negative",
        "speedup-not-the-ratio",
        "issue-forgery",
        "compile-negative",
        "compile-inf",
        "memory-negative",
        "memory-nan",
        "seeded-compile-negative",
        "seeded-compile-nan",
        "seeded-bound-not-the-sum",
    ],
)
def test_impossible_numbers_are_a_422_naming_the_field_and_the_job_is_unchanged(client, model_file, change, field):
    analysis_id, lease = leased(client, model_file)
    body = results_for(lease)
    change(body)
    refused = post(client, lease, body)
    assert refused.status_code == 422, refused.text
    assert field in [problem["field"] for problem in refused.json()["detail"]]
    assert_unchanged(client, lease, analysis_id)
    fail = client.post(
        f"/api/v1/jobs/{lease['job']['id']}/fail",
        headers={"X-Lease-Token": lease["lease_token"]},
        json={"error": "the server rejected the results", "retryable": False},
    )
    assert fail.status_code == 200 and fail.json()["next"] == "failed"  # the worker can still fail it


# ------------------------------------------------------------------ artifact downloads by worker tokens
def test_a_worker_token_downloads_only_artifacts_of_jobs_it_holds(secured, model_file):
    user = token_for(secured, "user", "alice")
    worker, thief = token_for(secured, "worker", "node-a"), token_for(secured, "worker", "node-b")
    with open(model_file, "rb") as fh:
        submitted = secured.post(
            "/api/v1/analyze", headers=user, files={"model": ("m.pt2", fh)}, data={"context": CONTEXT}
        )
    with Session(secured.app.state.engine) as session:
        sha = session.get(Analysis, submitted.json()["id"]).artifact_sha256
    url = f"/api/v1/artifacts/{sha}"
    register(secured, thief, "node-b")
    # queued, nobody holds it: the thief (and the worker) get what an unknown sha256 gets
    unknown = secured.get("/api/v1/artifacts/" + "0" * 64, headers=thief)
    for headers in (thief, worker):
        refused = secured.get(url, headers=headers)
        assert refused.status_code == unknown.status_code == 404
        assert refused.json()["detail"].replace(sha, "0" * 64) == unknown.json()["detail"]

    lease = lease_for(secured, register(secured, worker), worker)
    assert secured.get(url, headers=worker).status_code == 200  # held: the file
    assert secured.get(url, headers=thief).status_code == 404  # another worker token: still nothing
    assert secured.get(url, headers=user).status_code == 200  # other roles keep what they had
    assert secured.get(url, headers=token_for(secured, "admin", "root")).status_code == 200

    assert post(secured, lease, results_for(lease), worker).status_code == 200
    assert secured.get(url, headers=worker).status_code == 404  # the lease ended with the job


# ------------------------------------------------------------------ who measured
def test_the_analysis_json_and_page_name_the_worker_that_measured(client, model_file):
    analysis_id = submit(client, model_file, force="true").json()["id"]
    worker_id = register(client, name="npu-node-<7>")
    lease = lease_for(client, worker_id)
    assert post(client, lease, results_for(lease)).status_code == 200

    analysis = client.get(f"/api/v1/analyses/{analysis_id}").json()
    assert analysis["measured_by"] == {"worker_id": worker_id, "name": "npu-node-<7>", "batch_job": None}
    page = client.get(f"/analyses/{analysis_id}").text
    assert "npu-node-&lt;7&gt;" in page and "npu-node-<7>" not in page
    assert worker_id in page
