"""A deregistered worker is `stopped`: listed as such, and a claim still in flight neither revives it nor leases."""

from __future__ import annotations

from .test_api import claim, register_worker, submit


def worker_states(client) -> dict[str, str]:  # noqa: ANN001
    return {w["id"]: w["state"] for w in client.get("/api/v1/workers").json()}


def test_deregistered_worker_is_listed_as_stopped(client):
    leaving, staying = register_worker(client), register_worker(client)
    assert client.post(f"/api/v1/workers/{leaving}/deregister").status_code == 200
    assert worker_states(client) == {leaving: "stopped", staying: "active"}


def test_claim_after_deregistration_gets_404_and_leaves_the_job_queued(client, model_file):
    leaving = register_worker(client)
    client.post(f"/api/v1/workers/{leaving}/deregister")
    analysis_id = submit(client, model_file).json()["id"]
    late = claim(client, leaving)
    assert late.status_code == 404 and "register again" in late.json()["detail"]
    assert worker_states(client)[leaving] == "stopped"
    assert client.get(f"/api/v1/analyses/{analysis_id}").json()["status"] == "queued"
    assert claim(client, register_worker(client)).json()["job"]["analysis_id"] == analysis_id
