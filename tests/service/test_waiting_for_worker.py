"""A target no worker can serve says so (API, CLI, pages) instead of a silent "queued" forever."""

from __future__ import annotations

from .test_api import register_worker, submit


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
