"""`npu-advisor serve`: the API + dashboard on SQLite, plus an embedded worker for this machine's device.

The worker runs as a separate process (`npu-advisor worker`), started once the API answers
/healthz, and is stopped first on shutdown so it can release its job while the API is still up. If serve
dies without a shutdown (kill -9), the worker notices and stops too (advisor.cli.parent_watch).
With auth off (loopback, no tokens) it needs no token; otherwise it uses ADVISOR_WORKER_TOKEN or a
worker token that serve creates at each start and passes to the worker by environment, never in a file
(app.worker_token).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType

import httpx
import typer
import uvicorn

from advisor.cli.parent_watch import PARENT_ENV

WORKER_STOP_GRACE_S = 15.0
HEALTH_WAIT_S = 60.0


def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (beyond loopback needs tokens)"),
    port: int = typer.Option(8000, "--port"),
    no_worker: bool = typer.Option(False, "--no-worker", help="API only; workers connect with `npu-advisor worker`"),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="database and uploads (default: ./data)"),
    worker_backends: str | None = typer.Option(
        None, "--worker-backends", help="the embedded worker's backends, e.g. eager,inductor (default: all usable)"
    ),
) -> None:
    """Run the npu-advisor service: REST API, web dashboard, queue and (unless --no-worker) a local worker.

    When tokens are required, the local worker uses ADVISOR_WORKER_TOKEN, or else a worker token serve creates at
    each start (the previous start's is revoked) and hands over in memory, never in a file.
    """
    from app.settings import Settings, auth_mode

    os.environ["ADVISOR_HOST"] = host
    os.environ["ADVISOR_PORT"] = str(port)
    if data_dir is not None:
        os.environ["ADVISOR_DATA_DIR"] = str(data_dir)
    settings = Settings()
    mode = auth_mode(settings)
    url = f"http://{_url_host(host)}:{port}"
    typer.echo(f"npu-advisor {url}  (data: {settings.data_dir.resolve()})", err=True)
    typer.echo(mode.message, err=True)

    worker = None
    if not no_worker:
        token = _embedded_worker_token(settings) if mode.required else None
        worker = EmbeddedWorker(url, token, worker_backends)
        threading.Thread(target=worker.start_when_healthy, name="embedded-worker", daemon=True).start()
    config = uvicorn.Config("app.main:create_app", factory=True, host=host, port=port, log_level="info")
    server = ServerStoppingWorkerFirst(config, worker)
    try:
        server.run()
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it handled gracefully
        pass
    finally:
        if worker is not None:
            worker.stop()
    if not server.started:
        typer.echo(f"error: the server did not start (is port {port} already in use?)", err=True)
        raise typer.Exit(1)


class EmbeddedWorker:
    """`npu-advisor worker` as a child process in its own session (a terminal's Ctrl-C reaches serve only)."""

    def __init__(self, url: str, token: str | None, backends: str | None) -> None:
        self.url = url
        self.token = token
        self.backends = backends
        self.process: subprocess.Popen | None = None
        self.stopping = threading.Event()

    @staticmethod
    def _isolation_flags() -> list[str]:
        """The embedded worker sandboxes models like any worker; where bubblewrap is missing it runs without,
        says so here, and the queue page lists it as not isolated (an external worker would refuse to start)."""
        from advisor.harness.isolation import IsolationUnavailable, resolve_isolation

        try:
            isolation = resolve_isolation()
        except IsolationUnavailable:
            return []  # ADVISOR_ISOLATION=bubblewrap was asked for: the worker refuses to start and says why
        if isolation.isolated:
            return []
        typer.echo(
            f"warning: the embedded worker runs models WITHOUT a sandbox ({isolation.note}); "
            "install bubblewrap before letting others upload",
            err=True,
        )
        return ["--no-isolation"]

    def start_when_healthy(self) -> None:
        if not _wait_healthy(self.url, HEALTH_WAIT_S, self.stopping):
            return
        command = [sys.executable, "-c", "from advisor.cli import app; app()", "worker", "--server", self.url]
        command += ["--name", "embedded", "--grace", "10"]
        if self.backends:
            command += ["--backends", self.backends]
        command += self._isolation_flags()
        env = dict(os.environ)
        env[PARENT_ENV] = str(os.getpid())  # it exits when serve is gone (advisor.cli.parent_watch)
        env.pop("ADVISOR_TOKEN", None)
        if self.token:
            env["ADVISOR_TOKEN"] = self.token  # by environment, not argv: argv is visible in `ps`
        self.process = subprocess.Popen(command, env=env, start_new_session=True)
        code = self.process.wait()
        if not self.stopping.is_set():
            typer.echo(f"embedded worker exited with code {code}; the API keeps running without it", err=True)

    def stop(self) -> None:
        """SIGTERM (the worker releases its job and deregisters), SIGKILL after a grace period."""
        self.stopping.set()
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(WORKER_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class ServerStoppingWorkerFirst(uvicorn.Server):
    """uvicorn.Server whose first exit signal stops the embedded worker before the API goes down."""

    def __init__(self, config: uvicorn.Config, worker: EmbeddedWorker | None) -> None:
        super().__init__(config)
        self.worker = worker

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        worker = self.worker
        if worker is None or self.should_exit or worker.stopping.is_set():
            return super().handle_exit(sig, frame)

        def stop_worker_then_exit() -> None:
            worker.stop()
            super(ServerStoppingWorkerFirst, self).handle_exit(sig, frame)

        threading.Thread(target=stop_worker_then_exit, name="stop-embedded-worker", daemon=True).start()


def _embedded_worker_token(settings) -> str:  # noqa: ANN001 - app.settings.Settings
    """ADVISOR_WORKER_TOKEN if set, else a new worker token for this start (app.worker_token)."""
    from datetime import UTC, datetime

    from app.worker_token import embedded_worker_token

    found = embedded_worker_token(settings, now=datetime.now(UTC))
    typer.echo(f"embedded worker: using {found.source}", err=True)
    return found.token


def _wait_healthy(url: str, timeout_s: float, stopping: threading.Event) -> bool:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as client:  # one client: building one costs ~20 ms of CPU (its TLS context)
        while time.monotonic() < deadline and not stopping.is_set():
            try:
                if client.get(f"{url}/healthz").status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            time.sleep(0.3)
    return False


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
