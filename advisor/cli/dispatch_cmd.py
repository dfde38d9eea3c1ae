"""`npu-advisor dispatch --executor slurm`: start one-shot workers through the cluster's scheduler, on demand.

Runs on a login node (it measures nothing and needs no accelerator): it watches the server's queue for measurement
jobs a worker of `--device` and `--backends` could serve and no live worker will claim, and submits a batch job per
such job that runs `npu-advisor worker --once` with the same server, token file, device and backends
(workers.dispatch.dispatcher). The token reaches the batch job as `--token-file`, a path it reads (a shared
filesystem), never as a value on a command line or in its environment. SIGTERM / Ctrl-C: cancel the pending batch
jobs and exit; running ones finish their job.
"""

from __future__ import annotations

import logging
import shutil
import signal
import sys
from pathlib import Path

import typer

from advisor.cli.token_file import read_token

EXECUTORS = ("slurm",)


def dispatch(
    executor: str = typer.Option("slurm", "--executor", help="the scheduler to submit workers to: slurm"),
    server: str = typer.Option(..., "--server", help="the npu-advisor server, as the compute nodes reach it"),
    token_file: Path = typer.Option(
        ..., "--token-file", help="a worker-role token (mode 0600), at a path the batch jobs can read too"
    ),
    device: str = typer.Option(..., "--device", help="the device kind the batch jobs' workers measure: cpu, cuda, npu"),
    backends: str = typer.Option(..., "--backends", help="comma-separated backends those workers offer"),
    sbatch_args: list[str] = typer.Option(
        [], "--sbatch-arg", help="an sbatch option per use: --sbatch-arg=--partition=ascend --sbatch-arg=--exclusive"
    ),
    max_pending: int = typer.Option(4, "--max-pending", min=1, max=1000, help="batch jobs waiting in Slurm at once"),
    max_running: int = typer.Option(4, "--max-running", min=1, max=1000, help="batch jobs pending or running at once"),
    wait_s: float = typer.Option(
        60.0, "--wait", min=0, max=3600, help="how long a started worker waits for a job before it exits (seconds)"
    ),
    poll_s: float = typer.Option(5.0, "--poll", min=0.2, max=600, help="seconds between looks at the queue"),
    tag: str | None = typer.Option(
        None, "--tag", help="names this dispatcher's batch jobs (npu-advisor-TAG-q<job>); default: the device kind"
    ),
    worker_command: str | None = typer.Option(
        None, "--worker-command", help="the npu-advisor executable on the compute nodes (default: this one)"
    ),
    worker_args: list[str] = typer.Option(
        [], "--worker-arg", help="one more `worker` option per use, e.g. --worker-arg=--memory-limit-mb=8000"
    ),
    log_dir: Path | None = typer.Option(None, "--log-dir", help="batch jobs' output directory (default: sbatch's)"),
) -> None:
    """Submit `npu-advisor worker --once` batch jobs while the queue has work no live worker takes."""
    from workers.api import WorkerApi
    from workers.dispatch.dispatcher import Dispatcher, DispatchLimits
    from workers.dispatch.executor import TAG_PATTERN, WorkerLaunch
    from workers.dispatch.slurm import SlurmExecutor

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if executor not in EXECUTORS:
        _refuse(f"unknown executor {executor!r}; one of: {', '.join(EXECUTORS)}")
    offered = [name.strip() for name in backends.split(",") if name.strip()]
    tag = tag or device
    if not offered or not TAG_PATTERN.match(tag) or device not in ("cpu", "cuda", "npu"):
        _refuse("--device is cpu, cuda or npu, --backends names at least one, --tag is [a-z0-9-] (32 at most)")
    if shutil.which("sbatch") is None:
        _refuse("sbatch is not on PATH: run the dispatcher on a node that submits Slurm jobs (a login node)")
    token = read_token(token_file)  # checked here: mode 0600, not empty; the batch jobs read the same file
    launch = WorkerLaunch(
        command=worker_command or _this_executable(),
        server=server,
        token_file=token_file.resolve(),
        device=device,
        backends=offered,
        wait_s=wait_s,
        extra_args=list(worker_args),
    )
    slurm = SlurmExecutor(launch, tag=tag, sbatch_args=sbatch_args, log_dir=log_dir.resolve() if log_dir else None)
    limits = DispatchLimits(max_pending=max_pending, max_running=max_running, poll_s=poll_s)
    dispatcher = Dispatcher(WorkerApi.connect(server, token), slurm, device=device, backends=offered, limits=limits)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: dispatcher.stop())
    raise typer.Exit(dispatcher.run())


def _this_executable() -> str:
    """The npu-advisor beside this interpreter (a virtual environment's), else the one on PATH."""
    beside = Path(sys.executable).with_name("npu-advisor")
    if beside.exists():
        return str(beside)
    return shutil.which("npu-advisor") or "npu-advisor"


def _refuse(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.command("dispatch")(dispatch)
