"""A target no worker can serve says so (API, CLI, pages) instead of a silent "queued" forever."""

from __future__ import annotations

from tests.support.fixtures_decide import inspection, measurement, run

from .test_api import claim, register_worker, submit


def test_an_npu_analysis_without_an_npu_worker_says_why_it_waits(client, model_file):
    register_worker(client, device_kind="cpu")  # a worker of another kind changes nothing
    analysis_id = submit(client, model_file, {"stage": "production", "target": "npu"}).json()["id"]
    view = client.get(f"/api/v1/analyses/{analysis_id}").json()
    assert view["status"] == "queued"
    assert view["waiting_for_worker"].startswith("no worker for npu has been seen")
    page = client.get(f"/analyses/{analysis_id}").text
    assert "no worker for npu has been seen" in page
    assert "No worker for npu has been seen" in client.get("/queue").text

    register_worker(client, device_kind="npu", backends=("eager", "torchair"))
    assert client.get(f"/api/v1/analyses/{analysis_id}").json()["waiting_for_worker"] is None
    assert "No worker for npu" not in client.get("/queue").text


def test_a_worker_without_a_requested_backend_cannot_serve_it(client, model_file):
    register_worker(client, device_kind="cpu", backends=("eager",))
    analysis_id = submit(client, model_file, {"stage": "production", "target": "cpu"}, backends="inductor").json()["id"]
    note = client.get(f"/api/v1/analyses/{analysis_id}").json()["waiting_for_worker"]
    assert note.startswith("no cpu worker offers every backend") and "inductor" in note


# ---------------------------------------------------------------- an unmeasured recommendation meanwhile
NPU_CONTEXT = {"stage": "production", "target": "npu"}
UNMEASURED_NOTE = "no worker for npu has been seen; the recommendation below is unmeasured"


def complete(client, lease: dict, inspection_=None, measurements=None):  # noqa: ANN001, ANN201
    named = {"artifact_sha256": lease["job"]["artifact_sha256"]}  # the job's artifact, as a real worker names it
    body = {"inspection": (inspection_ or inspection()) | named, "measurements": measurements}
    return client.post(
        f"/api/v1/jobs/{lease['job']['id']}/complete", headers={"X-Lease-Token": lease["lease_token"]}, json=body
    )


def npu_results() -> dict:
    torchair = measurement("torchair", mode="max-autotune", median_ms=4.0)  # a mode TorchAir has (the GE graph)
    return run(measurement("eager", median_ms=10.0, compile_s=None), torchair)


def submit_npu_with_a_cpu_worker(client, model_file) -> tuple[int, str]:  # noqa: ANN001
    cpu_worker = register_worker(client, device_kind="cpu")
    return submit(client, model_file, NPU_CONTEXT).json()["id"], cpu_worker


def test_a_cpu_worker_inspects_an_npu_analysis_at_once_and_it_shows_an_unmeasured_recommendation(client, model_file):
    analysis_id, cpu_worker = submit_npu_with_a_cpu_worker(client, model_file)
    lease = claim(client, cpu_worker).json()
    assert lease["job"]["purpose"] == "inspect" and lease["job"]["analysis_id"] == analysis_id
    assert claim(client, cpu_worker).status_code == 204, "the npu measurement is not a cpu worker's to take"
    done = complete(client, lease)
    assert done.status_code == 200 and done.json()["status"] == "queued", done.text

    view = client.get(f"/api/v1/analyses/{analysis_id}").json()
    assert view["status"] == "queued" and view["queue_position"] == 1
    assert view["inspection"]["format"] == inspection()["format"] and view["measurements"] is None
    assert view["recommendation"]["measured"] is False
    assert view["waiting_for_worker"].startswith(UNMEASURED_NOTE)
    page = client.get(f"/analyses/{analysis_id}").text
    assert UNMEASURED_NOTE in page
    assert page.index(UNMEASURED_NOTE) < page.index('data-testid="recommended-backend"'), "the note, then the answer"
    assert "unmeasured (tree and coverage only)" in page
    queue_page = client.get("/queue").text
    assert "No worker for npu has been seen" in queue_page and "unmeasured recommendation" in queue_page
    assert client.get("/api/v1/analyses", params={"status": "queued"}).json()["total"] == 1


def test_an_npu_worker_that_joins_measures_it_and_the_measured_recommendation_replaces_the_unmeasured_one(
    client, model_file
):
    analysis_id, cpu_worker = submit_npu_with_a_cpu_worker(client, model_file)
    assert complete(client, claim(client, cpu_worker).json()).status_code == 200
    npu_worker = register_worker(client, device_kind="npu", backends=("eager", "torchair"))
    assert client.get(f"/api/v1/analyses/{analysis_id}").json()["waiting_for_worker"] is None
    lease = claim(client, npu_worker).json()
    assert lease["job"]["purpose"] == "measure" and lease["job"]["analysis_id"] == analysis_id
    assert complete(client, lease, measurements=npu_results()).json()["status"] == "done"
    view = client.get(f"/api/v1/analyses/{analysis_id}").json()
    assert view["status"] == "done" and view["recommendation"]["measured"] is True
    assert view["measurements"]["environment"]["device"] == "npu"


def test_an_inspection_that_finishes_after_the_measurement_changes_nothing(client, model_file):
    analysis_id, cpu_worker = submit_npu_with_a_cpu_worker(client, model_file)
    inspecting = claim(client, cpu_worker).json()
    npu_worker = register_worker(client, device_kind="npu", backends=("eager", "torchair"))
    assert complete(client, claim(client, npu_worker).json(), measurements=npu_results()).status_code == 200
    measured = client.get(f"/api/v1/analyses/{analysis_id}").json()
    beat = client.post(
        f"/api/v1/jobs/{inspecting['job']['id']}/heartbeat",
        headers={"X-Lease-Token": inspecting["lease_token"]},
        json={},
    )
    assert beat.json()["cancel_requested"] is True, "the measurement made the inspection moot"
    assert complete(client, inspecting, inspection_=inspection(ops=[])).status_code == 200
    after = client.get(f"/api/v1/analyses/{analysis_id}").json()
    assert after["status"] == "done"
    assert (after["inspection"], after["measurements"], after["recommendation"]) == (
        measured["inspection"],
        measured["measurements"],
        measured["recommendation"],
    )


def test_cancelling_the_analysis_cancels_both_jobs(client, model_file):
    analysis_id, cpu_worker = submit_npu_with_a_cpu_worker(client, model_file)
    assert client.post(f"/api/v1/analyses/{analysis_id}/cancel").json()["status"] == "cancelled"
    assert claim(client, cpu_worker).status_code == 204, "its inspection was cancelled too"
    depth = client.get("/api/v1/queue").json()["by_state"]
    assert depth == {"cancelled": {"npu": 1, "any": 1}}
    metrics = client.get("/metrics").text
    assert 'advisor_analyses{status="cancelled"} 1.0' in metrics, "one analysis, however many jobs"
    assert 'advisor_queue_jobs{device="any",state="cancelled"} 1.0' in metrics


def test_the_queue_position_ignores_inspections(client, model_file):
    cpu_worker = register_worker(client, device_kind="cpu")
    first = submit(client, model_file, NPU_CONTEXT).json()["id"]
    second = submit(client, model_file, {**NPU_CONTEXT, "stage": "prototype"}).json()["id"]
    positions = [client.get(f"/api/v1/analyses/{i}").json()["queue_position"] for i in (first, second)]
    assert positions == [1, 2]
    cpu_job = submit(client, model_file).json()["id"]  # a cpu target has a worker: no inspection of its own
    assert client.get(f"/api/v1/analyses/{cpu_job}").json()["queue_position"] == 1
    assert client.get("/queue").text.count("inspection only") == 2  # listed as what they are
    claimed = [claim(client, cpu_worker).json()["job"] for _ in range(3)]
    assert [(job["purpose"], job["analysis_id"]) for job in claimed] == [
        ("inspect", first),
        ("inspect", second),
        ("measure", cpu_job),
    ]


def test_an_identical_submission_gets_no_second_inspection(client, model_file):
    analysis_id, cpu_worker = submit_npu_with_a_cpu_worker(client, model_file)
    again = submit(client, model_file, NPU_CONTEXT).json()
    assert again["id"] == analysis_id and again["deduplicated"] is True
    assert claim(client, cpu_worker).json()["job"]["purpose"] == "inspect"
    assert claim(client, cpu_worker).status_code == 204


def test_with_no_worker_at_all_nothing_is_inspected_ahead(client, model_file):
    """The first worker to join may be one that measures it: an inspection first would be work thrown away."""
    analysis_id = submit(client, model_file, NPU_CONTEXT).json()["id"]
    cpu_worker = register_worker(client, device_kind="cpu")
    assert claim(client, cpu_worker).status_code == 204
    assert (
        client.get(f"/api/v1/analyses/{analysis_id}")
        .json()["waiting_for_worker"]
        .startswith("no worker for npu has been seen; the analysis waits in the queue")
    )
