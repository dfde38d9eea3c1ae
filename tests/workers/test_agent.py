"""The worker agent against a fake of the server's protocol: retries, final errors, lease loss, cancel, signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from advisor.harness.sandbox import scrubbed_environment
from tests.support.bubblewrap import require_bubblewrap
from tests.support.fake_server import ARTIFACT_SHA, FakeServer
from tests.support.fake_stages import PID_FILE_ENV, SLEEP_S_ENV
from workers.agent import AgentConfig, WorkerAgent
from workers.api import LeaseLost, WorkerApi
from workers.retry import ApiError, RetryPolicy

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fake_stages_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stage runner child imports `tests.support.fake_stages` from the checkout."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def api(server: FakeServer, sleeps: list[float]) -> WorkerApi:
    return WorkerApi(server.client(), RetryPolicy(sleep=sleeps.append))


def make_agent(
    api: WorkerApi, tmp_path: Path, stages: str = "tests.support.fake_stages:quick", **overrides
) -> WorkerAgent:
    config = AgentConfig(
        name="test-worker",
        device="cpu",
        backends=["eager", "inductor"],
        work_dir=tmp_path / "work",
        claim_jitter_s=0.0,
        child_stop_grace_s=1.0,
        stages=stages,
        **{"max_jobs": 1, **overrides},
    )
    return WorkerAgent(api, config, sleep=lambda s: None)


def knobs(monkeypatch: pytest.MonkeyPatch, *, pid_file: Path | None = None, sleep_s: float | None = None) -> None:
    """The fake stages' knobs, through the runner's environment (tests.support.fake_stages)."""
    if pid_file is not None:
        monkeypatch.setenv(PID_FILE_ENV, str(pid_file))
    if sleep_s is not None:
        monkeypatch.setenv(SLEEP_S_ENV, str(sleep_s))


def claim_one(api: WorkerApi, server: FakeServer):
    server.add_job()
    return api.claim("w-1", 0)


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def wait_for_file(path: Path, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def run_in_thread(agent: WorkerAgent) -> tuple[threading.Thread, list[int]]:
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(agent.run()), daemon=True)
    thread.start()
    return thread, codes


# ---------------------------------------------------------------- retry policy
def test_transient_failures_on_upload_are_retried_until_it_lands(api: WorkerApi, server: FakeServer, sleeps):
    claim = claim_one(api, server)
    server.inject("complete", 503, 429, httpx.ReadTimeout("slow"), httpx.ConnectError("refused"))
    assert api.complete(claim, {"format": "exported_program"}, None)["status"] == "done"
    assert server.count("complete") == 5
    assert len(sleeps) == 4


def test_retries_are_bounded(api: WorkerApi, server: FakeServer, sleeps):
    claim = claim_one(api, server)
    server.inject("complete", *[502] * 20)
    with pytest.raises(ApiError, match="gave up after 6 tries") as caught:
        api.complete(claim, None, None)
    assert caught.value.status == 502
    assert server.count("complete") == 6
    assert len(sleeps) == 5


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_other_client_errors_are_final(api: WorkerApi, server: FakeServer, sleeps, status: int):
    claim = claim_one(api, server)
    server.inject("complete", status)
    with pytest.raises(ApiError) as caught:
        api.complete(claim, None, None)
    assert caught.value.status == status and not caught.value.retryable
    assert server.count("complete") == 1 and sleeps == []


def test_409_on_upload_means_the_lease_is_lost(api: WorkerApi, server: FakeServer):
    claim = claim_one(api, server)
    server.leases[claim.job_id] = "re-claimed-by-someone-else"
    with pytest.raises(LeaseLost):
        api.complete(claim, None, None)
    assert server.count("complete") == 1


def test_backoff_grows_exponentially_is_capped_and_honours_retry_after():
    policy = RetryPolicy(base_s=1.0, cap_s=8.0)
    ceilings = [max(policy.delay(n) for _ in range(300)) for n in range(6)]
    assert ceilings[0] <= 1.0 and 2.0 < ceilings[2] <= 4.0 and all(c <= 8.0 for c in ceilings)
    assert ceilings[5] > 4.0  # capped, not stuck at the first ceiling
    assert policy.delay(0, retry_after_s=5.0) >= 5.0
    assert policy.delay(0, retry_after_s=600.0) <= 8.0


def test_download_verifies_sha256(api: WorkerApi, tmp_path: Path):
    api.download(f"/api/v1/artifacts/{ARTIFACT_SHA}", tmp_path / "ok.pt2", sha256=ARTIFACT_SHA)
    with pytest.raises(ApiError, match="sha256 mismatch"):
        api.download(f"/api/v1/artifacts/{'0' * 64}", tmp_path / "bad.pt2", sha256="0" * 64)


def test_downloads_only_come_from_the_server_so_the_token_stays_there(api: WorkerApi, tmp_path: Path):
    with pytest.raises(ApiError, match="refusing to fetch from a host other than the server"):
        api.download("http://elsewhere.example/api/v1/analyses/7/inputs", tmp_path / "x")  # names no sha256
    api.download(f"http://advisor.test/api/v1/artifacts/{ARTIFACT_SHA}", tmp_path / "y", sha256=ARTIFACT_SHA)


def test_runner_environment_has_no_secrets():
    env = scrubbed_environment(
        {"PATH": "/bin", "ADVISOR_TOKEN": "t", "AWS_SECRET_ACCESS_KEY": "k", "OMP_NUM_THREADS": "2", "ADVISOR_X": "1"},
        allow_list=False,
    )
    assert env == {"PATH": "/bin", "OMP_NUM_THREADS": "2", "ADVISOR_X": "1"}


# ---------------------------------------------------------------- the agent loop
def test_job_runs_in_a_child_and_its_result_is_uploaded(
    api: WorkerApi, server: FakeServer, tmp_path: Path, monkeypatch
):
    server.add_job(backends=["eager", "inductor", "torchair"])
    knobs(monkeypatch, sleep_s=0.6)
    assert make_agent(api, tmp_path, "tests.support.fake_stages:slow").run() == 0
    assert server.count("complete") == 1 and server.count("fail") == 0
    stages = [body["stage"] for body in server.bodies("heartbeat")]
    assert "inspect" in stages  # the heartbeat carries the stage the child reported
    assert server.count("deregister") == 1


def test_the_ranking_is_posted_once_before_the_completion(
    api: WorkerApi, server: FakeServer, tmp_path: Path, monkeypatch
):
    job = server.add_job()
    knobs(monkeypatch, sleep_s=1.0)
    assert make_agent(api, tmp_path, "tests.support.fake_stages:ranked_then_details").run() == 0
    routes = [name for name, _ in server.calls if name in ("ranked", "complete")]
    assert routes == ["ranked", "complete"]
    (ranking,) = server.bodies("ranked")
    assert ranking["measurements"]["quality"]["details"]["pending"] == ["eager"]
    assert ranking["inspection"]["artifact_sha256"] == job["artifact_sha256"], "checked by the server as a completion"


def test_a_refused_ranking_is_not_retried_and_the_job_still_completes(
    api: WorkerApi, server: FakeServer, tmp_path: Path, sleeps, monkeypatch
):
    server.add_job()
    knobs(monkeypatch, sleep_s=1.0)
    server.inject("ranked", 503)
    assert make_agent(api, tmp_path, "tests.support.fake_stages:ranked_then_details").run() == 0
    assert server.count("ranked") == 1 and server.count("complete") == 1 and server.count("fail") == 0


def test_only_backends_this_worker_has_are_run(api: WorkerApi, server: FakeServer, tmp_path: Path):
    server.add_job(backends=["eager", "inductor", "torchair"])
    make_agent(api, tmp_path).run()
    assert server.bodies("complete")[0]["measurements"]["backends_run"] == ["eager", "inductor"]


def test_the_completion_names_the_artifact_the_worker_verified(api: WorkerApi, server: FakeServer, tmp_path: Path):
    """The server accepts results only for the job's artifact (issue 26 item 6): the inspection carries the sha256
    the download was verified against."""
    job = server.add_job(backends=["eager"])
    make_agent(api, tmp_path).run()
    (body,) = server.bodies("complete")
    assert body["inspection"]["artifact_sha256"] == job["artifact_sha256"]
    assert body["inspection"]["format"]  # the stage's own inspection, with the sha256 added


def test_the_jobs_workload_optimizer_and_tolerance_reach_the_measurement(
    api: WorkerApi, server: FakeServer, tmp_path: Path
):
    server.add_job(
        context={
            "stage": "production",
            "workload": "training",
            "optimizer": "adamw",
            "accuracy_tolerance": {"atol": 1e-3, "rtol": None},
        }
    )
    server.add_job(context={"stage": "production"})
    make_agent(api, tmp_path, max_jobs=2).run()
    ran = [
        (
            body["measurements"]["workload_run"],
            body["measurements"]["optimizer_run"],
            body["measurements"]["tolerance_run"],
        )
        for body in server.bodies("complete")
    ]
    assert ran == [("training", "adamw", {"atol": 1e-3, "rtol": None}), ("inference", "sgd", None)]
    # the whole context too: the measurement plan follows it (advisor.core.decision.plan_pruning)
    assert [body["measurements"]["context_run"]["stage"] for body in server.bodies("complete")] == ["production"] * 2


def test_an_inspect_job_runs_the_inspection_alone(api: WorkerApi, server: FakeServer, tmp_path: Path):
    server.add_job(purpose="inspect", backends=[])
    server.add_job()  # a measure job (no purpose: an older server's)
    make_agent(api, tmp_path, "tests.support.fake_stages:inspect_or_measure", max_jobs=2).run()
    inspected, measured = server.bodies("complete")
    assert inspected["inspection"] is not None and inspected["measurements"] is None
    assert measured["measurements"] is not None


def test_a_worker_started_before_the_server_waits_for_it(api: WorkerApi, server: FakeServer, tmp_path: Path):
    server.inject("register", *[httpx.ConnectError("connection refused")] * 8, 503)
    server.add_job()
    assert make_agent(api, tmp_path).run() == 0
    assert server.count("register") == 10 and server.count("complete") == 1


def test_a_server_that_forgot_the_worker_gets_it_registered_again(api: WorkerApi, server: FakeServer, tmp_path: Path):
    server.inject("claim", 404)
    server.add_job()
    assert make_agent(api, tmp_path).run() == 0
    assert server.count("register") == 2 and server.count("complete") == 1


def test_claim_errors_back_off_and_the_worker_recovers(api: WorkerApi, server: FakeServer, tmp_path: Path):
    server.inject("claim", 503, httpx.ConnectTimeout("down"), 500)
    server.add_job()
    waits: list[float] = []
    agent = make_agent(api, tmp_path)
    agent._sleep = waits.append
    assert agent.run() == 0
    assert server.count("complete") == 1
    assert len(waits) >= 3


def test_lost_lease_on_heartbeat_stops_the_child_and_nothing_is_uploaded(
    api: WorkerApi, server: FakeServer, tmp_path: Path, monkeypatch
):
    pid_file = tmp_path / "runner.pid"
    job = server.add_job()
    knobs(monkeypatch, pid_file=pid_file, sleep_s=60)
    thread, codes = run_in_thread(make_agent(api, tmp_path, "tests.support.fake_stages:slow"))
    pid = int(wait_for_file(pid_file))
    server.leases[job["id"]] = "re-claimed-by-another-worker"  # the next heartbeat gets 409
    thread.join(timeout=20)
    assert not thread.is_alive() and codes == [0]
    assert not alive(pid)
    assert server.count("complete") == 0 and server.count("fail") == 0


def test_cancel_stops_the_child_and_is_acknowledged(api: WorkerApi, server: FakeServer, tmp_path: Path, monkeypatch):
    pid_file = tmp_path / "runner.pid"
    job = server.add_job()
    knobs(monkeypatch, pid_file=pid_file, sleep_s=60)
    thread, _ = run_in_thread(make_agent(api, tmp_path, "tests.support.fake_stages:slow"))
    pid = int(wait_for_file(pid_file))
    server.cancel.add(job["id"])
    thread.join(timeout=20)
    assert not thread.is_alive() and not alive(pid)
    assert server.count("cancelled") == 1 and server.count("complete") == 0


def test_cancel_also_stops_the_sandboxed_stage_in_its_own_session(
    api: WorkerApi, server: FakeServer, tmp_path: Path, monkeypatch
):
    pid_file = tmp_path / "runner.pid"
    job = server.add_job()
    knobs(monkeypatch, pid_file=pid_file)
    thread, _ = run_in_thread(make_agent(api, tmp_path, "tests.support.fake_stages:sandboxed_sleep"))
    runner_pid = int(wait_for_file(pid_file))
    sandbox_pid = int(wait_for_file(Path(f"{pid_file}.sandbox")))
    assert os.getsid(sandbox_pid) != os.getsid(runner_pid)  # out of reach of the runner's process group
    server.cancel.add(job["id"])
    thread.join(timeout=20)
    assert not thread.is_alive()
    assert not alive(runner_pid) and not alive(sandbox_pid)
    assert server.count("cancelled") == 1


def test_each_job_forks_from_a_prepared_sandbox_of_its_own_and_leaves_nothing(
    api: WorkerApi, server: FakeServer, tmp_path: Path
):
    require_bubblewrap()
    server.add_job()
    server.add_job()
    agent = make_agent(api, tmp_path, "tests.support.fake_stages:forked_from_warm", prepare_sandboxes=True, max_jobs=2)
    assert agent.run() == 0
    first, second = (body["inspection"]["child"] for body in server.bodies("complete"))
    for child in (first, second):
        assert child["status"] == "ok", child
        assert child["torch_preloaded"] is True  # forked from a zygote prepared before the job: torch was imported
        assert child["sha256"] == ARTIFACT_SHA  # the job's own download, read through its inbox
        assert child["model"].startswith(str(tmp_path / "work" / "inbox-"))
    assert first["zygote"] != second["zygote"]  # a sandbox per job: the second job never ran in the first's
    assert Path(first["model"]).parent != Path(second["model"]).parent  # and each its own inbox
    assert agent.sandboxes is not None and agent.sandboxes.starts >= 2
    assert not list((tmp_path / "work").glob("inbox-*"))  # every sandbox closed with its job or the worker


def test_a_crashing_runner_is_reported_as_a_retryable_failure(api: WorkerApi, server: FakeServer, tmp_path: Path):
    server.add_job()
    make_agent(api, tmp_path, "tests.support.fake_stages:crash").run()
    [failure] = server.bodies("fail")
    assert failure["retryable"] is True
    assert "code 3" in failure["error"] and "Segmentation fault" in failure["error"]
    assert server.count("complete") == 0


def test_a_runner_sending_a_too_deep_progress_line_is_stopped_and_the_job_fails_for_good(
    api: WorkerApi, server: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    knobs(monkeypatch, pid_file=tmp_path / "runner.pid")
    server.add_job()
    started = time.monotonic()
    make_agent(api, tmp_path, "tests.support.fake_stages:deep_progress").run()
    assert time.monotonic() - started < 30, "stopped when the line came, not after the runner's 60 s"
    [failure] = server.bodies("fail")
    assert failure["retryable"] is False, "no retry storm"
    assert "progress line nested deeper than 64 levels" in failure["error"]
    assert not alive(int((tmp_path / "runner.pid").read_text()))


def test_a_model_that_cannot_be_inspected_fails_for_good(api: WorkerApi, server: FakeServer, tmp_path: Path):
    server.add_job()
    make_agent(api, tmp_path, "tests.support.fake_stages:bad_model").run()
    [failure] = server.bodies("fail")
    assert failure == {"error": "inspection failed: not a model", "retryable": False}


def test_a_corrupt_download_never_reaches_a_runner(api: WorkerApi, server: FakeServer, tmp_path: Path):
    server.add_job(artifact_sha256="f" * 64)
    make_agent(api, tmp_path).run()
    [failure] = server.bodies("fail")
    assert "sha256 mismatch" in failure["error"]
    assert server.count("complete") == 0


def test_a_wrong_token_stops_the_worker_with_a_clear_message(server: FakeServer, tmp_path: Path, caplog):
    api = WorkerApi(server.client(token="wrong"), RetryPolicy(sleep=lambda s: None))
    assert make_agent(api, tmp_path).run() == 1
    assert "worker token is missing or wrong" in caplog.text
    assert server.count("register") == 1  # 401 is final: no retries


# ---------------------------------------------------------------- signals (a real process)
def start_signal_agent(tmp_path: Path, sleep_s: float, grace_s: float) -> tuple[subprocess.Popen, int, Path]:
    summary, pid_file = tmp_path / "summary.json", tmp_path / "runner.pid"
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.signal_agent", str(summary), str(pid_file), str(sleep_s), str(grace_s)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return process, int(wait_for_file(pid_file)), summary


def test_sigterm_lets_the_running_job_finish_and_upload(tmp_path: Path):
    process, runner_pid, summary = start_signal_agent(tmp_path, sleep_s=2.0, grace_s=30.0)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    counts = json.loads(summary.read_text())
    assert counts["complete"] == 1 and counts["deregister"] == 1
    assert counts["claim"] == 1  # no claim after the signal


def test_sigterm_releases_a_job_that_outlasts_the_grace_period(tmp_path: Path):
    process, runner_pid, summary = start_signal_agent(tmp_path, sleep_s=60.0, grace_s=0.5)
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0
    assert time.monotonic() - started < 10
    counts = json.loads(summary.read_text())
    assert counts["complete"] == 0 and counts["deregister"] == 1  # deregister releases the job
    assert not alive(runner_pid)


def test_a_second_signal_exits_at_once(tmp_path: Path):
    process, runner_pid, summary = start_signal_agent(tmp_path, sleep_s=60.0, grace_s=60.0)
    process.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=5) == 128 + signal.SIGTERM
    deadline = time.monotonic() + 5
    while alive(runner_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(runner_pid)
    assert not summary.exists()


# ---------------------------------------------------------------- capabilities
def test_capabilities_are_probed_in_a_child_and_can_be_narrowed():
    from workers.capabilities import detect_capabilities

    capabilities = detect_capabilities("cpu", ["eager"])
    assert capabilities.device_kind == "cpu" and capabilities.backends == ["eager"]
    assert capabilities.environment["torch_version"] and capabilities.environment["measured_on"] == "cpu"


def test_a_device_this_node_lacks_is_refused_with_the_reason():
    from workers.capabilities import CapabilityError, detect_capabilities

    if Path("/dev/nvidia0").exists():
        pytest.skip("this host has a CUDA device node; the test needs a host without CUDA")
    with pytest.raises(CapabilityError, match="no usable CUDA GPU"):
        detect_capabilities("cuda")


def test_the_agent_process_never_imports_torch():
    """A crash in torch must cost a job, not the worker: only the children import it."""
    code = (
        "import sys, workers.agent, workers.capabilities, advisor.cli.worker_cmd\n"
        "import advisor.harness.sandbox, advisor.harness.measurement\n"
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_asking_for_a_backend_this_node_lacks_says_why():
    from workers.capabilities import Capabilities, CapabilityError, restrict

    probed = Capabilities("cpu", ["eager", "inductor"], {"torchair": "torch_npu is not installed"})
    with pytest.raises(CapabilityError, match="torchair: torch_npu is not installed"):
        restrict(probed, ["eager", "torchair"])
    assert restrict(probed, ["inductor"]).backends == ["inductor"]


# ---------------------------------------------------------------- the job wire (advisor.core.job_wire)
def test_a_claim_that_does_not_read_as_a_job_is_an_api_error_not_a_crash(api: WorkerApi, server: FakeServer):
    server.add_job(id="not-a-number", attempt="first")
    with pytest.raises(ApiError, match="does not read as a job"):
        api.claim("w-1", 0)


def test_a_job_whose_context_this_worker_cannot_read_fails_and_the_worker_goes_on(
    api: WorkerApi, server: FakeServer, tmp_path: Path
):
    server.add_job(context={"stage": "production", "a_field_from_the_future": True})
    server.add_job()
    assert make_agent(api, tmp_path, max_jobs=2).run() == 0
    [failure] = server.bodies("fail")
    assert failure["retryable"] is True and "a_field_from_the_future: unknown field" in failure["error"]
    assert server.count("complete") == 1
