"""The dispatcher's rounds against a fake scheduler and a scripted demand, and the Slurm executor's commands against
a fake `subprocess.run`: one batch job per queued job, limits, cancels, stop, and the token kept off every command
line and environment. (tests/slurm/ runs the same code against a real Slurm.)"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from workers.api import Demand, WorkerApi
from workers.dispatch.dispatcher import Dispatcher, DispatchLimits
from workers.dispatch.executor import BatchJob, ExecutorError, WorkerLaunch, batch_job_name, queue_job_of
from workers.dispatch.slurm import SlurmExecutor
from workers.retry import ApiError

TOKEN = "s3cret-worker-token"


class FakeScheduler:
    """Batch jobs in memory; `listed` False hides new ones from `list` (a scheduler that lags)."""

    def __init__(self) -> None:
        self.jobs: dict[str, BatchJob] = {}
        self.cancelled: list[str] = []
        self.listed = True
        self._next = 100

    def submit(self, queue_job_id: int) -> str:
        self._next += 1
        batch_id = str(self._next)
        self.jobs[batch_id] = BatchJob(batch_id, queue_job_id, "pending")
        return batch_id

    def list(self) -> list[BatchJob]:
        return list(self.jobs.values()) if self.listed else []

    def cancel(self, batch_job_ids: list[str]) -> None:
        self.cancelled += batch_job_ids
        for batch_id in batch_job_ids:
            self.jobs.pop(batch_id, None)

    def start(self, batch_id: str) -> None:
        self.jobs[batch_id] = BatchJob(batch_id, self.jobs[batch_id].queue_job_id, "running")


class ScriptedApi(WorkerApi):
    def __init__(self) -> None:
        self.demands: list[Demand] = []
        self.error: ApiError | None = None

    def demand(self, device_kind: str, backends: list[str]) -> Demand:
        if self.error is not None:
            raise self.error
        return self.demands[0] if len(self.demands) == 1 else self.demands.pop(0)


def dispatcher(api: ScriptedApi, scheduler: FakeScheduler, **limits: float) -> Dispatcher:
    return Dispatcher(
        api, scheduler, device="cpu", backends=["eager"], limits=DispatchLimits(**{"poll_s": 0.01, **limits})
    )


def test_one_batch_job_per_unserved_job_and_never_a_second_one_for_it():
    api, scheduler = ScriptedApi(), FakeScheduler()
    api.demands = [Demand(waiting=[1, 2], unserved=[1, 2], idle_workers=0)]
    dispatch = dispatcher(api, scheduler)
    assert dispatch.round().submitted == {1: "101", 2: "102"}
    assert dispatch.round().submitted == {}  # the scheduler lists both: nothing more
    scheduler.start("101")
    assert dispatch.round().submitted == {}  # a running batch job still covers its queued job
    assert len(scheduler.jobs) == 2


def test_a_batch_job_the_scheduler_does_not_list_yet_is_not_submitted_again():
    api, scheduler = ScriptedApi(), FakeScheduler()
    api.demands = [Demand(waiting=[7], unserved=[7], idle_workers=0)]
    scheduler.listed = False
    dispatch = dispatcher(api, scheduler)
    assert dispatch.round().submitted == {7: "101"}
    assert dispatch.round().submitted == {}
    assert list(scheduler.jobs) == ["101"]


def test_the_limits_hold_pending_and_running_batch_jobs():
    api, scheduler = ScriptedApi(), FakeScheduler()
    api.demands = [Demand(waiting=[1, 2, 3, 4, 5], unserved=[1, 2, 3, 4, 5], idle_workers=0)]
    dispatch = dispatcher(api, scheduler, max_pending=2, max_running=3)
    assert list(dispatch.round().submitted) == [1, 2]  # two pending at most
    scheduler.start("101")
    scheduler.start("102")
    assert list(dispatch.round().submitted) == [3]  # three pending or running at most
    assert dispatch.round().submitted == {}


def test_a_pending_batch_job_whose_queue_job_no_longer_waits_is_cancelled_a_running_one_is_not():
    api, scheduler = ScriptedApi(), FakeScheduler()
    api.demands = [Demand(waiting=[1, 2], unserved=[1, 2], idle_workers=0)]
    dispatch = dispatcher(api, scheduler)
    dispatch.round()
    scheduler.start("102")
    api.demands = [Demand(waiting=[], unserved=[], idle_workers=0)]  # job 1 cancelled, job 2 taken by its worker
    report = dispatch.round()
    assert report.cancelled == ["101"] and scheduler.cancelled == ["101"]
    assert list(scheduler.jobs) == ["102"]


def test_a_duplicate_pending_batch_job_is_cancelled_and_the_running_one_kept():
    api, scheduler = ScriptedApi(), FakeScheduler()
    scheduler.jobs = {"5": BatchJob("5", 3, "pending"), "4": BatchJob("4", 3, "running")}
    api.demands = [Demand(waiting=[3], unserved=[3], idle_workers=0)]
    report = dispatcher(api, scheduler).round()
    assert report.cancelled == ["5"] and report.submitted == {}


def test_a_job_served_by_an_idle_worker_gets_no_batch_job_but_keeps_one_it_has():
    api, scheduler = ScriptedApi(), FakeScheduler()
    api.demands = [Demand(waiting=[1, 2], unserved=[2], idle_workers=1)]
    dispatch = dispatcher(api, scheduler)
    assert dispatch.round().submitted == {2: "101"}
    api.demands = [Demand(waiting=[1, 2], unserved=[], idle_workers=2)]  # its own worker registered: idle for now
    assert dispatch.round().cancelled == []


def test_stopping_cancels_the_pending_batch_jobs_and_leaves_running_ones():
    api, scheduler = ScriptedApi(), FakeScheduler()
    api.demands = [Demand(waiting=[1, 2], unserved=[1, 2], idle_workers=0)]
    dispatch = dispatcher(api, scheduler)
    dispatch.round()
    scheduler.start("101")
    dispatch.stop()
    assert dispatch.run() == 0
    assert scheduler.cancelled == ["102"] and list(scheduler.jobs) == ["101"]


def test_a_refused_token_ends_the_dispatcher_with_code_1():
    api, scheduler = ScriptedApi(), FakeScheduler()
    api.error = ApiError("read the demand: HTTP 403", status=403)
    assert dispatcher(api, scheduler).run() == 1


# ---------------------------------------------------------------- the Slurm executor's commands
class FakeRun:
    def __init__(self, stdout: str = "", returncode: int = 0) -> None:
        self.calls: list[dict] = []
        self.stdout = stdout
        self.returncode = returncode

    def __call__(self, args: list[str], **kwargs) -> subprocess.CompletedProcess:  # noqa: ANN003
        self.calls.append({"args": args, **kwargs})
        return subprocess.CompletedProcess(args, self.returncode, self.stdout, "sbatch: error: refused")


def launch(tmp_path: Path, server: str = "http://advisor:8000") -> WorkerLaunch:
    token_file = tmp_path / "worker.token"
    token_file.write_text(TOKEN)
    return WorkerLaunch(
        command="/opt/venv/bin/npu-advisor",
        server=server,
        token_file=token_file,
        device="npu",
        backends=["eager", "torchair"],
        wait_s=30,
    )


def test_sbatch_gets_the_script_on_stdin_naming_the_token_file_never_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("ADVISOR_TOKEN", TOKEN)
    monkeypatch.setenv("ADVISOR_WORKER_TOKEN", TOKEN)
    run = FakeRun(stdout="4242;cluster\n")
    slurm = SlurmExecutor(
        launch(tmp_path),
        tag="npu",
        sbatch_args=["--partition=ascend", "--gres=npu:1", "--exclusive"],
        log_dir=tmp_path,
        run=run,
    )
    assert slurm.submit(17) == "4242"
    [call] = run.calls
    assert call["args"][:2] == ["sbatch", "--parsable"]
    assert "--job-name=npu-advisor-npu-q17" in call["args"]
    assert call["args"][-3:] == ["--partition=ascend", "--gres=npu:1", "--exclusive"]  # the operator's come last
    assert TOKEN not in " ".join(call["args"]) and TOKEN not in call["input"]
    assert not any(TOKEN in value for value in call["env"].values())  # nor in the batch job's exported environment
    command = call["input"].splitlines()[-1]
    assert shlex.split(command) == ["exec", *launch(tmp_path).argv()]
    assert f"--token-file {tmp_path / 'worker.token'}" in command and "--once" in command


def test_a_hostile_server_url_stays_one_argument_of_the_worker(tmp_path: Path):
    hostile = "http://x/$(touch pwned); touch pwned2 `id`"
    script = launch(tmp_path, server=hostile).script(1)
    words = shlex.split(script.splitlines()[-1])
    assert words[words.index("--server") + 1] == hostile
    checked = subprocess.run(["sh", "-n"], input=script, text=True, capture_output=True)
    assert checked.returncode == 0


@pytest.mark.parametrize("answer", ["", "Submitted batch job 12", "12abc", "; rm -rf /"])
def test_an_sbatch_answer_that_is_not_a_job_id_is_an_error(tmp_path: Path, answer: str):
    with pytest.raises(ExecutorError, match="not a job id"):
        SlurmExecutor(launch(tmp_path), tag="npu", run=FakeRun(stdout=answer)).submit(1)


def test_a_failing_scheduler_command_is_an_executor_error_with_its_message(tmp_path: Path):
    with pytest.raises(ExecutorError, match="refused"):
        SlurmExecutor(launch(tmp_path), tag="npu", run=FakeRun(returncode=1)).submit(1)


def test_squeue_lists_only_this_dispatchers_batch_jobs(tmp_path: Path):
    listing = "\n".join(
        [
            "11|npu-advisor-npu-q3|PENDING",
            "12|npu-advisor-npu-q4|RUNNING",
            "13|npu-advisor-npu-q5|COMPLETING",
            "14|npu-advisor-cpu-q6|PENDING",  # another dispatcher's
            "15|training-run|RUNNING",  # the user's own job
            "16|npu-advisor-npu-q7x|PENDING",
            "garbage line",
            "",
        ]
    )
    run = FakeRun(stdout=listing)
    jobs = SlurmExecutor(launch(tmp_path), tag="npu", run=run).list()
    assert jobs == [BatchJob("11", 3, "pending"), BatchJob("12", 4, "running"), BatchJob("13", 5, "running")]
    assert run.calls[0]["args"][:2] == ["squeue", "--me"]


@pytest.mark.parametrize(
    "name", ["npu-advisor-npu-q", "npu-advisor-npu-q-1", "npu-advisor-npu-q1 ", "npu-advisor-npuq1", "x" * 300]
)
def test_a_name_not_of_this_dispatcher_names_no_queue_job(name: str):
    assert queue_job_of(name, "npu") is None


def test_a_batch_job_name_round_trips():
    assert queue_job_of(batch_job_name("cpu-a", 123), "cpu-a") == 123
    assert queue_job_of(batch_job_name("cpu-a", 123), "cpu") is None
