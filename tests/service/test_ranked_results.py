"""A ranking before the details (advisor.core.early_answer): a measure job posts its results once the options are
ranked, before the recommended option's details, and the analysis shows the answer while the job runs on. Fenced and
checked like a completion; a late ranking or a late inspection never overwrites what came after it."""

from __future__ import annotations

import copy
import json

import pytest
from fastapi.testclient import TestClient

from tests.support.fixtures_decide import inspection

from .test_api import claim, register_worker, submit
from .test_completion_binding import (
    assert_unchanged,
    lease_for,
    leased,
    post,
    register,
    results_for,
    secured,  # noqa: F401 - the fixture
    token_for,
)
from .test_waiting_for_worker import complete, npu_results, submit_npu_with_a_cpu_worker

PENDING = {"detailed": [], "pending": ["inductor:default"], "others": "not a leading option"}


def ranking_of(body: dict) -> dict:
    """`body`'s results as a ranking: its run's quality names the details still to come."""
    ranked = copy.deepcopy(body)
    ranked["measurements"]["quality"] = {"noisy": False, "details": copy.deepcopy(PENDING)}
    return ranked


def post_ranked(client: TestClient, lease: dict, body: dict, headers: dict | None = None):  # noqa: ANN201
    return client.post(
        f"/api/v1/jobs/{lease['job']['id']}/ranked",
        content=json.dumps(body),
        headers={"X-Lease-Token": lease["lease_token"], "Content-Type": "application/json", **(headers or {})},
    )


def test_the_answer_shows_while_the_job_runs_and_the_completion_replaces_it(client, model_file):
    analysis_id, lease = leased(client, model_file)
    final = results_for(lease)
    answered = post_ranked(client, lease, ranking_of(final))
    assert answered.status_code == 200, answered.text
    assert answered.json() == {"analysis_id": analysis_id}

    view = client.get(f"/api/v1/analyses/{analysis_id}").json()
    assert view["status"] == "running", "the job runs on: its details are being measured"
    assert view["recommendation"]["backend"] == "inductor" and view["recommendation"]["measured"] is True
    assert view["measurements"]["quality"]["details"]["pending"] == ["inductor:default"]
    assert view["measured_by"] is None, "named once the job completes"
    page = client.get(f"/analyses/{analysis_id}").text
    assert 'data-testid="ranked-note"' in page and "the details of inductor:default" in page
    assert 'data-testid="recommended-backend"' in page
    assert 'data-measured="true"' in page
    assert client.get("/web/progress", params={"ids": str(analysis_id)}).json()[str(analysis_id)]["measured"] is True
    listed = client.get("/api/v1/analyses").json()["items"][0]
    assert (listed["status"], listed["recommended_backend"]) == ("running", "inductor")
    markdown = client.get(f"/api/v1/analyses/{analysis_id}/report.md").text
    assert "Ranked; the details of inductor:default" in markdown

    done = post(client, lease, final)
    assert done.status_code == 200 and done.json()["status"] == "done", done.text
    view = client.get(f"/api/v1/analyses/{analysis_id}").json()
    assert view["status"] == "done" and "details" not in (view["measurements"].get("quality") or {})
    assert 'data-testid="ranked-note"' not in client.get(f"/analyses/{analysis_id}").text


def test_a_detail_page_without_measurements_is_told_to_reload_when_they_come(client, model_file):
    analysis_id, lease = leased(client, model_file)
    assert 'data-measured="false"' in client.get(f"/analyses/{analysis_id}").text
    assert client.get("/web/progress", params={"ids": str(analysis_id)}).json()[str(analysis_id)]["measured"] is False


def test_a_ranking_after_the_completion_is_refused_and_changes_nothing(client, model_file):
    analysis_id, lease = leased(client, model_file)
    final = results_for(lease)
    assert post(client, lease, final).status_code == 200
    before = client.get(f"/api/v1/analyses/{analysis_id}").json()
    late = post_ranked(client, lease, ranking_of(final))
    assert late.status_code == 409, late.text
    assert client.get(f"/api/v1/analyses/{analysis_id}").json() == before


def test_a_ranking_under_a_stale_lease_is_a_409(client, model_file):
    analysis_id, lease = leased(client, model_file)
    stale = {**lease, "lease_token": "not-the-token"}
    assert post_ranked(client, stale, ranking_of(results_for(lease))).status_code == 409
    assert_unchanged(client, lease, analysis_id)


def test_another_workers_token_cannot_post_a_ranking(secured, model_file):  # noqa: F811
    own, other = token_for(secured, "worker", "node-a"), token_for(secured, "worker", "node-b")
    user = token_for(secured, "user", "alice")
    with open(model_file, "rb") as fh:
        context = json.dumps({"stage": "production", "target": "cpu"})
        analysis_id = secured.post(
            "/api/v1/analyze", headers=user, files={"model": ("m.pt2", fh)}, data={"context": context}
        ).json()["id"]
    lease = lease_for(secured, register(secured, own), own)
    register(secured, other, "node-b")
    refused = post_ranked(secured, lease, ranking_of(results_for(lease)), other)
    assert refused.status_code == 403, refused.text
    assert_unchanged(secured, lease, analysis_id, user)


@pytest.mark.parametrize(
    "spoil",
    [
        lambda body: body["inspection"].update(artifact_sha256="0" * 64),  # another artifact
        lambda body: body.update(measurements=None),  # a ranking without measurements
        lambda body: body["measurements"]["measurements"][1].update(mode="turbo"),  # a mode inductor lacks
        lambda body: body["measurements"]["measurements"][1]["latency"].update(median_ms=-1.0),  # impossible
    ],
    ids=["another-artifact", "no-measurements", "unknown-mode", "negative-latency"],
)
def test_a_refused_ranking_is_a_422_and_the_job_runs_on_unchanged(client, model_file, spoil):
    analysis_id, lease = leased(client, model_file)
    body = ranking_of(results_for(lease))
    spoil(body)
    refused = post_ranked(client, lease, body)
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["field"].startswith(("inspection", "measurements"))
    assert_unchanged(client, lease, analysis_id)
    assert post(client, lease, results_for(lease)).json()["status"] == "done", "the completion still goes through"


def test_an_inspect_job_has_no_ranking_and_a_late_inspection_never_overwrites_one(client, model_file):
    """The inspect job a target without workers gets meanwhile (app.job_queue) cannot post a ranking, and its
    completion, arriving after the measure job's ranking, leaves the ranking on the analysis."""
    analysis_id, cpu_worker = submit_npu_with_a_cpu_worker(client, model_file)
    inspecting = claim(client, cpu_worker).json()
    assert inspecting["job"]["purpose"] == "inspect"
    named = {"artifact_sha256": inspecting["job"]["artifact_sha256"]}
    body = {"inspection": inspection() | named, "measurements": npu_results()}
    refused = post_ranked(client, inspecting, body)
    assert refused.status_code == 422 and "inspect job" in refused.json()["detail"][0]["message"]

    npu_worker = register_worker(client, device_kind="npu", backends=("eager", "torchair"))
    measuring = claim(client, npu_worker).json()
    ranked = {"inspection": inspection() | named, "measurements": npu_results()}
    ranked["measurements"]["quality"] = {"noisy": False, "details": {**PENDING, "pending": ["torchair:max-autotune"]}}
    assert post_ranked(client, measuring, ranked).status_code == 200
    shown = client.get(f"/api/v1/analyses/{analysis_id}").json()
    assert complete(client, inspecting, inspection_=inspection(ops=[])).status_code == 200
    after = client.get(f"/api/v1/analyses/{analysis_id}").json()
    assert (after["measurements"], after["recommendation"]) == (shown["measurements"], shown["recommendation"])
    assert after["recommendation"]["measured"] is True


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:You should not use the .timeout. argument with the TestClient")
def test_a_real_worker_posts_its_ranking_before_it_completes(client, model_file, tmp_path, monkeypatch):
    """The whole path: the stage runner's pipeline ranks, writes the ranking, the agent posts it, the details follow
    and the completion replaces it (the job's events say in which order)."""
    from sqlmodel import Session, select

    from app.models import JobEvent
    from tests.support.service_env import FAST_TIMING_ENV
    from workers.agent import AgentConfig, WorkerAgent
    from workers.api import WorkerApi
    from workers.retry import RetryPolicy

    for name, value in FAST_TIMING_ENV.items():
        monkeypatch.setenv(name, value)
    analysis_id = submit(client, model_file, force="true", backends="eager").json()["id"]
    config = AgentConfig(
        name="ranking", device="cpu", backends=["eager"], work_dir=tmp_path / "work", claim_jitter_s=0.0, max_jobs=1
    )
    agent = WorkerAgent(WorkerApi(client, RetryPolicy(sleep=lambda _s: None)), config, sleep=lambda _s: None)
    assert agent.run() == 0

    detail = client.get(f"/api/v1/analyses/{analysis_id}").json()
    assert detail["status"] == "done", detail.get("error")
    assert detail["measurements"]["quality"]["details"]["detailed"] == ["eager:default"]
    assert "pending" not in detail["measurements"]["quality"]["details"]
    with Session(client.app.state.engine) as session:
        events = [e.type for e in session.scalars(select(JobEvent).order_by(JobEvent.id)).all()]
    assert "ranked" in events and events.index("ranked") < events.index("completed"), events


# ------------------------------------------------------------------ a ranking belongs to its attempt
def shows_nothing(client: TestClient, analysis_id: int) -> dict:
    view = client.get(f"/api/v1/analyses/{analysis_id}").json()
    assert (view["measurements"], view["recommendation"]) == (None, None), "the ranking was dropped"
    listed = client.get("/api/v1/analyses").json()["items"][0]
    assert (listed["recommended_backend"], listed["speedup_vs_eager"]) == (None, None)
    return view


def ranked_attempt(client: TestClient, model_file) -> tuple[int, dict]:  # noqa: ANN001
    analysis_id, lease = leased(client, model_file)
    assert post_ranked(client, lease, ranking_of(results_for(lease))).status_code == 200
    assert client.get(f"/api/v1/analyses/{analysis_id}").json()["recommendation"] is not None
    return analysis_id, lease


def fail(client: TestClient, lease: dict, retryable: bool):  # noqa: ANN201
    return client.post(
        f"/api/v1/jobs/{lease['job']['id']}/fail",
        headers={"X-Lease-Token": lease["lease_token"]},
        json={"error": "the details child crashed", "retryable": retryable},
    )


@pytest.mark.parametrize("retryable", [True, False], ids=["retried", "dead-letter"])
def test_an_attempt_that_fails_after_its_ranking_takes_the_ranking_with_it(client, model_file, retryable):
    analysis_id, lease = ranked_attempt(client, model_file)
    assert fail(client, lease, retryable).json()["next"] == ("queued" if retryable else "failed")
    view = shows_nothing(client, analysis_id)
    assert view["status"] == ("queued" if retryable else "failed")
    assert "Ranked;" not in client.get(f"/api/v1/analyses/{analysis_id}/report.md").text


def test_a_cancelled_or_released_attempt_takes_its_ranking_with_it(client, model_file):
    analysis_id, lease = ranked_attempt(client, model_file)
    assert client.post(f"/api/v1/analyses/{analysis_id}/cancel").status_code == 200
    acknowledged = client.post(
        f"/api/v1/jobs/{lease['job']['id']}/cancelled", headers={"X-Lease-Token": lease["lease_token"]}
    )
    assert acknowledged.status_code == 200
    assert shows_nothing(client, analysis_id)["status"] == "cancelled"

    analysis_id = submit(client, model_file, force="true").json()["id"]
    worker = register(client, name="node-b")
    lease = lease_for(client, worker)
    assert post_ranked(client, lease, ranking_of(results_for(lease))).status_code == 200
    assert client.post(f"/api/v1/workers/{worker}/deregister").status_code == 200  # its jobs go back to the queue
    assert shows_nothing(client, analysis_id)["status"] == "queued"


def test_a_new_attempt_after_a_lost_lease_starts_without_the_old_ranking(client, model_file, clock):
    analysis_id, lease = ranked_attempt(client, model_file)
    clock.advance(3600)  # the worker went silent: its lease expired
    again = lease_for(client, register(client, name="node-b"))
    assert again["job"]["id"] == lease["job"]["id"] and again["job"]["attempt"] == 2
    assert shows_nothing(client, analysis_id)["status"] == "running"
    assert post_ranked(client, again, ranking_of(results_for(again))).status_code == 200, "its own ranking"


# ------------------------------------------------------------------ what a ranking may say
def test_one_ranking_per_attempt(client, model_file):
    analysis_id, lease = ranked_attempt(client, model_file)
    again = post_ranked(client, lease, ranking_of(results_for(lease)))
    assert again.status_code == 422 and "one per attempt" in again.json()["detail"][0]["message"]


@pytest.mark.parametrize(
    "pending",
    [None, [], ["tensorrt:default"], ["inductor:default\n\n<script>alert(1)</script>"], "inductor:default"],
    ids=["none", "empty", "not-a-row", "hostile-text", "not-a-list"],
)
def test_a_ranking_names_only_its_own_rows_as_still_to_come(client, model_file, pending):
    analysis_id, lease = leased(client, model_file)
    body = ranking_of(results_for(lease))
    body["measurements"]["quality"]["details"]["pending"] = pending
    refused = post_ranked(client, lease, body)
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["field"] == "measurements.quality.details.pending"
    assert_unchanged(client, lease, analysis_id)


def test_a_completion_that_says_details_are_still_to_come_is_refused(client, model_file):
    analysis_id, lease = leased(client, model_file)
    refused = post(client, lease, ranking_of(results_for(lease)))
    assert refused.status_code == 422 and "/ranked" in refused.json()["detail"][0]["message"]
    assert_unchanged(client, lease, analysis_id)


def test_re_deciding_waits_for_the_job_to_finish(client, model_file):
    analysis_id, lease = ranked_attempt(client, model_file)
    refused = client.post(f"/api/v1/analyses/{analysis_id}/redecide")
    assert refused.status_code == 409 and "being measured" in refused.json()["detail"]
    assert post(client, lease, results_for(lease)).status_code == 200
    assert client.post(f"/api/v1/analyses/{analysis_id}/redecide").status_code == 200


def test_a_suite_counts_a_ranking_only_once_its_job_completes(client, model_file):
    analysis_id, lease = leased(client, model_file, tag="nightly")
    assert post_ranked(client, lease, ranking_of(results_for(lease))).status_code == 200
    assert client.get("/api/v1/suites/nightly").json()["models"] == []
    assert post(client, lease, results_for(lease)).status_code == 200
    assert len(client.get("/api/v1/suites/nightly").json()["models"]) == 1
