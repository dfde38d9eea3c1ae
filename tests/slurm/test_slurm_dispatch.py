"""`npu-advisor dispatch --executor slurm` against a real Slurm (scripts/slurm_single_node.sh; CI starts it in
.ci/run): analyses submitted to `serve --no-worker` are measured by `worker --once` batch jobs the dispatcher
submits; a cancelled analysis leaves nothing in Slurm; a batch job killed mid-measurement leaves a lease that
expires and the job is measured again by a new batch job; a stopped dispatcher leaves nothing queued in Slurm.

One server (tokens required, 6 s leases) and two dispatchers for the module: a cpu one whose batch jobs run, and a
cuda one whose batch jobs are submitted held (`--sbatch-arg=--hold`), so they stay pending for as long as a test
needs. Without a reachable Slurm the module skips, saying so; under CI=true it fails instead."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.slurm_stack import SLURM_SCRIPT, Stack, kill_batch_job, slurm_problem, tagged, wait_for

pytestmark = pytest.mark.slow

TAG = f"t{os.getpid()}"  # this run's batch jobs only
HELD_TAG = f"h{os.getpid()}"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    problem = slurm_problem()
    if problem is not None:
        message = f"needs a running Slurm (start one with {SLURM_SCRIPT.name} as root): {problem}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    running = Stack(tmp_path_factory.mktemp("slurm-stack"))
    try:
        running.serve()
        running.dispatch(TAG, "--max-pending", "2", "--max-running", "2")
        running.dispatch(HELD_TAG, "--sbatch-arg=--hold", device="cuda", name="held")
        yield running
    finally:
        running.stop_all()
        leftovers = list(tagged(TAG)) + list(tagged(HELD_TAG))
        if leftovers:
            subprocess.run(["scancel", *leftovers], check=False)


def test_a_pending_batch_job_is_cancelled_with_its_analysis(stack: Stack, example_mlp_file: Path):
    analysis = stack.submit(example_mlp_file, target="cuda")
    [pending] = wait_for(lambda: tagged(HELD_TAG), 30, "a held batch job for the analysis", stack.logs)
    assert tagged(HELD_TAG)[pending].endswith("PENDING")
    stack.cancel(analysis)
    wait_for(lambda: not tagged(HELD_TAG), 20, "the pending batch job cancelled", stack.logs)
    assert stack.analysis(analysis)["status"] == "cancelled"


def test_analyses_are_measured_by_batch_jobs_and_one_killed_mid_measurement_is_retried(
    stack: Stack, example_mlp_file: Path
):
    """Two analyses, one batch job each (never two for one queued job). One batch job is killed mid-measurement, as a
    node failure would kill it: its job's lease expires and a new batch job measures it again."""
    kept, killed = stack.submit(example_mlp_file), stack.submit(example_mlp_file)

    def measuring() -> str | None:
        view = stack.analysis(killed)
        if not (view.get("stage") or "").startswith("measure"):
            return None
        return stack.batch_job_running(view["job"]["id"])

    victim = wait_for(measuring, 120, "the second analysis measured in a batch job", stack.logs)
    _no_token_in_any_process(stack.worker_token_file.read_text().strip())
    assert kill_batch_job(victim), f"batch job {victim} had no processes"

    def done() -> list[dict] | None:
        views = [stack.analysis(kept), stack.analysis(killed)]
        assert all(view["status"] not in ("failed", "cancelled") for view in views), views
        return views if all(view["status"] == "done" for view in views) else None

    first, second = wait_for(done, 150, "both analyses measured", stack.logs)
    assert first["job"]["attempts"] == 1
    assert second["job"]["attempts"] == 2  # the killed attempt counted: its lease expired, a new batch job claimed it
    ran_in = {first["measured_by"]["batch_job"], second["measured_by"]["batch_job"]}
    assert len(ran_in) == 2 and f"Slurm job {victim}" not in ran_in, (ran_in, victim)
    submitted = [
        line.rsplit(" ", 1)[-1] for line in stack.log("dispatch").splitlines() if "submitted batch job" in line
    ]
    assert len(submitted) == 3, stack.log("dispatch")  # one per queued job, one more for the retry
    assert ran_in <= {f"Slurm job {job}" for job in submitted}
    wait_for(lambda: not tagged(TAG), 30, "the batch jobs ended after their one job", stack.logs)
    queue_page = stack.page("/queue")
    assert all(label in queue_page for label in ran_in)  # each worker's row names its batch job
    assert f"in {second['measured_by']['batch_job']}" in stack.page(f"/analyses/{killed}")


def test_cancelling_a_running_analysis_leaves_nothing_running_in_slurm(stack: Stack, example_mlp_file: Path):
    analysis = stack.submit(example_mlp_file)
    wait_for(lambda: stack.analysis(analysis)["status"] == "running", 90, "the analysis running", stack.logs)
    assert tagged(TAG)
    stack.cancel(analysis)
    wait_for(lambda: not tagged(TAG), 30, "its batch job ended", stack.logs)
    assert stack.analysis(analysis)["status"] == "cancelled"


def test_stopping_the_dispatcher_leaves_nothing_queued_in_slurm(stack: Stack, example_mlp_file: Path):
    analysis = stack.submit(example_mlp_file, target="cuda")
    wait_for(lambda: tagged(HELD_TAG), 30, "a held batch job for the analysis", stack.logs)
    assert stack.stop("held") == 0
    assert not tagged(HELD_TAG), stack.log("held")
    assert stack.analysis(analysis)["status"] == "queued"  # the queue keeps the job; only the batch job went


def _no_token_in_any_process(token: str) -> None:
    """The worker token is in no process's command line or environment (a batch job reads it from its file)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        for part in ("cmdline", "environ"):
            try:
                data = (proc / part).read_bytes()
            except OSError:
                continue
            assert token.encode() not in data, f"the token is in /proc/{proc.name}/{part}"
