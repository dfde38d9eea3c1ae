"""POST /api/v1/analyses/{id}/rerun: the stored artifact measured again with the same context, as a new analysis."""

from __future__ import annotations

import json

from sqlmodel import Session

from app.models import Analysis

from .test_api import CPU_CONTEXT, claim, register_worker, submit


def test_rerun_queues_a_new_analysis_of_the_same_artifact_and_context(client, model_file):
    first = submit(client, model_file, model_name="mlp", context=CPU_CONTEXT | {"latency_target_ms": 50}).json()
    again = client.post(f"/api/v1/analyses/{first['id']}/rerun")
    assert again.status_code == 202, again.text
    body = again.json()
    assert body["id"] != first["id"] and body["status"] == "queued" and body["deduplicated"] is False
    assert body["links"]["self"].endswith(f"/api/v1/analyses/{body['id']}")
    old, new = (client.get(f"/api/v1/analyses/{i}").json() for i in (first["id"], body["id"]))
    assert (new["model_name"], new["context"], new["target"]) == (old["model_name"], old["context"], old["target"])
    with Session(client.app.state.engine) as session:
        shas = [session.get(Analysis, i).artifact_sha256 for i in (first["id"], body["id"])]
    assert shas[0] == shas[1]
    # force semantics: both are measured, even while the first is still queued (no dedupe onto it)
    first_job, second_job = (claim(client, register_worker(client)).json()["job"] for _ in range(2))
    assert {first_job["analysis_id"], second_job["analysis_id"]} == {first["id"], body["id"]}


def test_rerun_of_a_missing_analysis_or_a_deleted_artifact_is_refused_clearly(client, model_file):
    assert client.post("/api/v1/analyses/424242/rerun").status_code == 404
    analysis_id = submit(client, model_file).json()["id"]
    with Session(client.app.state.engine) as session:
        sha = session.get(Analysis, analysis_id).artifact_sha256
    client.app.state.store.path_for(sha).unlink()
    refused = client.post(f"/api/v1/analyses/{analysis_id}/rerun")
    assert refused.status_code == 409 and "no longer stored" in refused.json()["detail"]


def test_rerun_is_in_the_openapi_document(client):
    paths = json.loads(client.get("/openapi.json").text)["paths"]
    assert "post" in paths["/api/v1/analyses/{analysis_id}/rerun"]
