"""`npu-advisor worker --once`: at most one job, then deregister and exit 0 - also when none came within the wait;
and the batch job a scheduler started it in, as the worker reports it at registration."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from advisor.cli.worker_cmd import batch_job_environment
from tests.support.bubblewrap import require_bubblewrap
from tests.support.fake_server import FakeServer
from workers.agent import AgentConfig, WorkerAgent
from workers.api import WorkerApi
from workers.retry import RetryPolicy

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fake_stages_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))


def once_agent(server: FakeServer, tmp_path: Path, stages: str = "tests.support.fake_stages:quick", **overrides):  # noqa: ANN201
    config = AgentConfig(
        name="once",
        device="cpu",
        backends=["eager"],
        work_dir=tmp_path / "work",
        claim_jitter_s=0.0,
        child_stop_grace_s=1.0,
        stages=stages,
        max_jobs=1,
        claim_deadline_s=0.3,
        **overrides,
    )
    return WorkerAgent(WorkerApi(server.client(), RetryPolicy(sleep=lambda s: None)), config)


def test_with_no_job_within_the_wait_it_deregisters_and_exits_0(tmp_path: Path):
    server = FakeServer()
    assert once_agent(server, tmp_path).run() == 0
    assert server.count("register") == 1 and server.count("claim") >= 1
    assert server.count("deregister") == 1
    assert server.count("heartbeat") == 0


def test_it_runs_one_job_and_leaves_the_next_in_the_queue(tmp_path: Path):
    server = FakeServer()
    server.add_job()
    second = server.add_job()
    assert once_agent(server, tmp_path).run() == 0
    [completed] = server.bodies("complete")
    assert completed["inspection"]["artifact_sha256"]  # the job's results went up, through the fenced upload
    assert server.count("claim") == 1 and server.count("deregister") == 1
    assert list(server.queue) == [second]  # the second job waits for another worker


def test_a_once_worker_prepares_one_sandbox_and_never_a_spare_beside_its_job(tmp_path: Path):
    require_bubblewrap()
    server = FakeServer()
    server.add_job()
    agent = once_agent(server, tmp_path, "tests.support.fake_stages:forked_from_warm", prepare_sandboxes=True)
    assert agent.run() == 0
    [completed] = server.bodies("complete")
    assert completed["inspection"]["child"]["torch_preloaded"] is True  # the job forked from its prepared sandbox
    assert agent.sandboxes is not None and agent.sandboxes.starts == 1  # no second interpreter beside it


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("4242", {"batch_job": {"scheduler": "slurm", "id": "4242"}}),
        ("", {}),
        ("12; rm -rf /", {}),
        ("<script>", {}),
        ("9" * 40, {}),
    ],
)
def test_the_batch_job_is_reported_only_as_a_slurm_job_id(monkeypatch: pytest.MonkeyPatch, value: str, expected):  # noqa: ANN001
    monkeypatch.delenv("ADVISOR_KUBERNETES_JOB", raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", value)
    assert batch_job_environment() == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("advisor-once-x7k2p", {"batch_job": {"scheduler": "kubernetes", "id": "advisor-once-x7k2p"}}),
        ("Advisor_Once", {}),
        ("-leading-dash", {}),
        ("a" * 64, {}),
        ("job\nname", {}),
    ],
)
def test_a_kubernetes_job_is_reported_by_its_name(monkeypatch: pytest.MonkeyPatch, value: str, expected):  # noqa: ANN001
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("ADVISOR_KUBERNETES_JOB", value)
    assert batch_job_environment() == expected


def test_outside_a_batch_job_nothing_is_reported(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("ADVISOR_KUBERNETES_JOB", raising=False)
    assert batch_job_environment() == {}
