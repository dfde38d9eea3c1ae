"""`npu-advisor worker --server URL --token T`: measure jobs from a team server on this node's device."""

from __future__ import annotations

import logging
import shutil
import socket
import tempfile
from pathlib import Path

import typer

from advisor.client import TOKEN_ENV


def worker(
    server: str = typer.Option(..., "--server", help="the npu-advisor server, e.g. http://advisor:8000"),
    token: str | None = typer.Option(None, "--token", envvar=TOKEN_ENV, help="a token with the worker role"),
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
) -> None:
    """Register with the server, then claim and measure jobs until stopped (Ctrl-C / SIGTERM: graceful)."""
    from workers.agent import AgentConfig, WorkerAgent
    from workers.api import WorkerApi
    from workers.capabilities import CapabilityError, detect_capabilities

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request drowns the job log
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
    stage_options = {"timeout_s": stage_timeout_s, "memory_limit_mb": memory_limit_mb}
    own_work_dir = work_dir is None
    config = AgentConfig(
        name=name or f"{socket.gethostname()}-{capabilities.device_kind}",
        device=capabilities.device_kind,
        backends=capabilities.backends,
        environment=capabilities.environment,
        work_dir=work_dir or Path(tempfile.mkdtemp(prefix="npu-advisor-worker-")),
        grace_s=grace_s,
        max_jobs=max_jobs,
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


def register(app: typer.Typer) -> None:
    app.command("worker")(worker)
