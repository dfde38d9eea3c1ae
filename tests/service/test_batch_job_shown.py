"""The batch job a worker ran in (its registration's environment["batch_job"], set by `worker --once` under Slurm)
is shown beside the job it runs on the queue page and beside the worker an analysis was measured by; an entry
that is not well formed is shown nowhere."""

from __future__ import annotations

import pytest

from app.batch_jobs import batch_job_label

from .test_api import claim, cpu_results, submit


def register(client, environment: dict) -> str:  # noqa: ANN001
    body = {"name": "once", "device_kind": "cpu", "backends": ["eager", "inductor"], "environment": environment}
    return client.post("/api/v1/workers/register", json=body).json()["worker_id"]


def test_the_queue_page_and_the_analysis_name_the_slurm_job_that_ran_it(client, model_file):
    analysis = submit(client, model_file).json()["id"]
    worker = register(client, {"batch_job": {"scheduler": "slurm", "id": "4242"}})
    lease = claim(client, worker).json()
    assert "Slurm job 4242" in client.get("/queue").text  # the running job's row and the worker's row
    headers = {"X-Lease-Token": lease["lease_token"]}
    results = cpu_results(lease["job"]["artifact_sha256"])
    assert client.post(f"/api/v1/jobs/{lease['job']['id']}/complete", headers=headers, json=results).status_code == 200
    view = client.get(f"/api/v1/analyses/{analysis}").json()
    assert view["measured_by"]["batch_job"] == "Slurm job 4242"
    assert "in Slurm job 4242" in client.get(f"/analyses/{analysis}").text


@pytest.mark.parametrize(
    "entry",
    [
        {"scheduler": "slurm", "id": "<script>alert(1)</script>"},
        {"scheduler": "pbs", "id": "12"},
        {"scheduler": "slurm", "id": 12},
        {"scheduler": "slurm", "id": "1" * 64},
        "slurm 12",
        None,
    ],
)
def test_a_batch_job_entry_that_is_not_well_formed_is_not_shown(client, model_file, entry):  # noqa: ANN001
    submit(client, model_file)
    claim(client, register(client, {"batch_job": entry}))
    page = client.get("/queue").text
    assert "<script>alert(1)</script>" not in page and 'data-testid="batch-job"' not in page
    assert batch_job_label({"batch_job": entry}) is None


def test_labels():
    assert batch_job_label({"batch_job": {"scheduler": "kubernetes", "id": "advisor-once-x7k2p"}}) == (
        "Kubernetes job advisor-once-x7k2p"
    )
    assert batch_job_label({}) is None and batch_job_label(None) is None
