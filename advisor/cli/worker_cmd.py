"""`npu-advisor worker --server URL`: measure jobs from a team server on this node's device.

The token comes from $ADVISOR_TOKEN or `--token-file` (mode 0600), never from the command line: a command
line is readable by every process on the node through /proc. Every child that touches a model runs under
bubblewrap (advisor.harness.isolation); a worker that cannot isolate refuses to start unless told `--no-isolation`.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
from pathlib import Path

import typer

from advisor.cli.client import TOKEN_ENV
from advisor.cli.token_file import read_token
from advisor.harness.owned_temp import owned_temp_dir, sweep_stale_temp_dirs


def worker(
    server: str = typer.Option(..., "--server", help="the npu-advisor server, e.g. http://advisor:8000"),
    token_file: Path | None = typer.Option(
        None, "--token-file", help=f"file holding a worker-role token (mode 0600); default: ${TOKEN_ENV}"
    ),
    no_isolation: bool = typer.Option(
        False, "--no-isolation", help="run model children without the bubblewrap sandbox (trusted models only)"
    ),
    device: str | None = typer.Option(None, "--device", help="cpu, cuda or npu (default: the best usable one)"),
    name: str | None = typer.Option(None, "--name", help="how the server lists this worker (default: host-device)"),
    backends: str | None = typer.Option(
        None, "--backends", help="comma-separated subset to measure, e.g. eager,inductor (default: all usable)"
    ),
    work_dir: Path | None = typer.Option(None, "--work-dir", help="where downloaded models go (default: a temp dir)"),
    grace_s: float = typer.Option(30.0, "--grace", help="seconds a running job may still take after SIGTERM"),
    stage_timeout_s: float | None = typer.Option(None, "--stage-timeout", help="wall-clock limit per measured stage"),
    memory_limit_mb: int | None = typer.Option(None, "--memory-limit-mb", help="address-space limit per stage"),
    max_jobs: int | None = typer.Option(None, "--max-jobs", help="exit after this many jobs"),
    once: bool = typer.Option(
        False,
        "--once",
        help="claim at most one job, run it, deregister and exit 0 (also when none came within --wait): for a "
        "batch job a scheduler started (`npu-advisor dispatch`)",
    ),
    wait_s: float = typer.Option(
        60.0, "--wait", min=0, max=3600, help="with --once: how long to wait for a job before exiting (seconds)"
    ),
    cold: bool = typer.Option(
        False,
        "--cold",
        help="do not prepare each job's sandbox ahead of time: each job's runner starts its own (import torch then "
        "lies on the job's critical path)",
    ),
    spare_sandboxes: int = typer.Option(
        2,
        "--spare-sandboxes",
        envvar="ADVISOR_SPARE_SANDBOXES",
        min=0,
        max=8,
        help="prepared sandboxes kept ready for the next jobs (each holds an interpreter with torch imported); 0: "
        "none waits, each job's sandbox starts when the job is claimed",
    ),
) -> None:
    """Register with the server, then claim and measure jobs until stopped (Ctrl-C / SIGTERM: graceful); with
    --once, one job at most."""
    from advisor.cli.parent_watch import exit_with_parent
    from workers.agent import AgentConfig, WorkerAgent
    from workers.api import WorkerApi

    exit_with_parent()  # a worker started by `serve` stops when serve is gone
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    token = read_token(token_file)
    isolation = _isolation(no_isolation)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request drowns the job log
    capabilities = _capabilities(device, backends)
    stage_options = {"timeout_s": stage_timeout_s, "memory_limit_mb": memory_limit_mb}
    if stale := sweep_stale_temp_dirs():  # a killed worker's job files (an OOM kill cannot clean up)
        typer.echo(f"removed {len(stale)} temporary directories of worker processes that were killed", err=True)
    own_work_dir = work_dir is None
    config = AgentConfig(
        name=name or f"{socket.gethostname()}-{capabilities.device_kind}",
        device=capabilities.device_kind,
        backends=capabilities.backends,
        environment={**capabilities.environment, "isolation": isolation.describe(), **batch_job_environment()},
        work_dir=work_dir or Path(owned_temp_dir("npu-advisor-worker-")),
        grace_s=grace_s,
        max_jobs=1 if once else max_jobs,
        claim_deadline_s=wait_s if once else None,
        prepare_sandboxes=not cold,
        spare_sandboxes=1 if once else spare_sandboxes,
        stage_options={key: value for key, value in stage_options.items() if value is not None},
    )
    agent = WorkerAgent(WorkerApi.connect(server, token), config)
    agent.install_signal_handlers()
    try:
        code = agent.run()
    finally:
        if own_work_dir:
            shutil.rmtree(config.work_dir, ignore_errors=True)
    raise typer.Exit(code)


def _isolation(no_isolation: bool):  # noqa: ANN202 - advisor.harness.isolation's, imported late (no torch at --help)
    """The sandbox model children run in, announced to the stage runner by environment; exit 2 when unavailable."""
    from advisor.harness.isolation import ISOLATION_ENV, IsolationUnavailable, resolve_isolation

    try:
        isolation = resolve_isolation("none" if no_isolation else "bubblewrap")
    except IsolationUnavailable as exc:
        typer.echo(
            f"error: this worker cannot isolate model children: {exc}. Pass --no-isolation only if every "
            "uploader is trusted; the server then lists this worker as not isolated.",
            err=True,
        )
        raise typer.Exit(2) from None
    os.environ[ISOLATION_ENV] = isolation.kind  # the stage runner and every sandbox child it starts use the same
    typer.echo(f"isolation: {isolation.kind}" + (f" ({isolation.note})" if isolation.note else ""), err=True)
    return isolation


def _capabilities(device: str | None, backends: str | None):  # noqa: ANN202 - workers.capabilities', imported late
    """This node's device kind and usable backends (`--backends` narrows them); exit 2 when there are none."""
    from workers.capabilities import CapabilityError, detect_capabilities

    only = [item.strip() for item in backends.split(",") if item.strip()] if backends else None
    typer.echo("probing this node's device and backends ...", err=True)
    try:
        capabilities = detect_capabilities(device, only)
    except CapabilityError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    skipped = ", ".join(f"{n} ({why})" for n, why in capabilities.unavailable.items())
    typer.echo(f"device {capabilities.device_kind}; measuring with {', '.join(capabilities.backends)}", err=True)
    if skipped:
        typer.echo(f"not usable here: {skipped}", err=True)
    return capabilities


KUBERNETES_JOB_ENV = "ADVISOR_KUBERNETES_JOB"  # docker/k8s-worker-once-job.yaml sets it from the pod's job-name label


def batch_job_environment() -> dict[str, dict[str, str]]:
    """The batch job this worker runs in, when a scheduler started it: {"batch_job": {"scheduler", "id"}} (the
    queue page shows it beside the job the worker ran), else {}. Slurm sets SLURM_JOB_ID in every batch job; a
    Kubernetes Job's pod gets its job's name in $ADVISOR_KUBERNETES_JOB from the manifest."""
    slurm_job = os.environ.get("SLURM_JOB_ID", "").strip()
    if slurm_job.isdigit() and len(slurm_job) <= 20:
        return {"batch_job": {"scheduler": "slurm", "id": slurm_job}}
    kubernetes_job = os.environ.get(KUBERNETES_JOB_ENV, "").strip()
    if re.fullmatch(r"[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?", kubernetes_job):  # a Kubernetes object name
        return {"batch_job": {"scheduler": "kubernetes", "id": kubernetes_job}}
    return {}


def register(app: typer.Typer) -> None:
    app.command("worker")(worker)
