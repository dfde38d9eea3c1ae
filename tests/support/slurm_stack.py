"""A real npu-advisor stack next to a real Slurm: `serve --no-worker` with tokens required, worker and user tokens in
files, and `dispatch --executor slurm` or a resident `worker` as processes. Used by tests/slurm/ and
benchmarks/slurm_dispatch.py; the Slurm itself is scripts/slurm_single_node.sh's (CI starts it in .ci/run)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.http_client import http
from tests.support.service_env import FAST_TIMING_ENV, service_environment
from tests.support.waiting import free_port, wait_for

CLI = [sys.executable, "-c", "from advisor.cli import app; app()"]
SLURM_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm_single_node.sh"


def slurm_problem() -> str | None:
    """Why no Slurm can take batch jobs here (None when `sinfo` answers and shows a node that is up)."""
    try:
        done = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sinfo did not answer: {exc}"
    if done.returncode != 0:
        return f"sinfo failed: {done.stderr.strip()[-300:]}"
    states = done.stdout.split()
    if not any(state.rstrip("*") in ("idle", "mixed", "allocated", "completing") for state in states):
        return f"no Slurm node is up (sinfo: {', '.join(states) or 'no nodes'})"
    return None


def squeue_names() -> dict[str, str]:
    """Every batch job Slurm lists for this user: id -> 'name state'."""
    out = subprocess.run(
        ["squeue", "--me", "-h", "-o", "%i %j %T"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    return {line.split()[0]: " ".join(line.split()[1:]) for line in out.splitlines() if line.strip()}


def tagged(tag: str) -> dict[str, str]:
    """The batch jobs of the dispatcher with this tag: id -> 'name state'."""
    return {job: info for job, info in squeue_names().items() if info.startswith(f"npu-advisor-{tag}-q")}


def kill_batch_job(job_id: str) -> list[int]:
    """Kill every process of a batch job at once with SIGKILL, as a node failure would (nothing is released, no
    signal handler runs); the pids killed."""
    out = subprocess.run(["scontrol", "listpids", job_id], capture_output=True, text=True, timeout=30).stdout
    pids = [int(line.split()[0]) for line in out.splitlines()[1:] if line.split() and line.split()[0].isdigit()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


class Stack:
    """A server with tokens required and short leases; every process it started is stopped by `stop_all`."""

    def __init__(self, root: Path, *, lease_ttl_s: float = 6.0, fast_timing: bool = True) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data_dir = root / "data"
        self.env = service_environment()
        if not fast_timing:  # the product's own timing windows (a benchmark's), not the tests' short ones
            self.env = {key: value for key, value in self.env.items() if key not in FAST_TIMING_ENV}
        self.server_env = self.env | {
            "ADVISOR_DATA_DIR": str(self.data_dir),
            "ADVISOR_REQUIRE_AUTH": "true",
            "ADVISOR_LEASE_TTL_S": f"{lease_ttl_s:g}",
            "ADVISOR_HEARTBEAT_INTERVAL_S": "1",
            "ADVISOR_POLL_TIMEOUT_S": "5",
            "ADVISOR_CACHE_WINDOW_S": "0",  # the same model twice is two analyses
            "ADVISOR_REAPER_INTERVAL_S": "2",
        }
        self.processes: dict[str, subprocess.Popen] = {}
        self.worker_token_file = self._token("worker")
        self.user_token = self._token("user").read_text().strip()
        self.client = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.user_token}"}, timeout=30
        )

    def _token(self, role: str) -> Path:
        """A token of `role` in the server's database (what `npu-advisor token create` does), in a 0600 file."""
        from sqlmodel import Session

        from app.auth import create_token
        from app.clock import utcnow
        from app.db import create_db_engine, upgrade_database
        from app.settings import Settings

        engine = create_db_engine(Settings(data_dir=self.data_dir).resolved_database_url)
        try:
            upgrade_database(engine)
            with Session(engine) as session:
                _, token = create_token(session, role=role, name=role, now=utcnow())
        finally:
            engine.dispose()
        path = self.root / f"{role}.token"
        path.touch(mode=0o600)
        path.write_text(token + "\n")
        return path

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        out = (self.root / f"{name}.log").open("ab")
        process = subprocess.Popen(
            [*CLI, *args], stdout=out, stderr=subprocess.STDOUT, env=env or self.env, start_new_session=True
        )
        self.processes[name] = process
        return process

    def serve(self) -> None:
        args = ("serve", "--no-worker", "--port", str(self.port), "--data-dir", str(self.data_dir))
        process = self.start("serve", *args, env=self.server_env)

        def healthy() -> bool:
            assert process.poll() is None, self.log("serve")
            try:
                return http.get(f"{self.url}/healthz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(healthy, 60, "the server answers /healthz", lambda: self.log("serve"))

    def dispatch(self, tag: str, *extra: str, device: str = "cpu", name: str = "dispatch") -> subprocess.Popen:
        return self.start(
            name,
            "dispatch",
            *("--executor", "slurm", "--server", self.url, "--token-file", str(self.worker_token_file)),
            *("--device", device, "--backends", "eager", "--tag", tag, "--poll", "0.5", "--wait", "20"),
            *("--log-dir", str(self.root)),
            *extra,
        )

    def resident_worker(self) -> subprocess.Popen:
        args = ("--server", self.url, "--token-file", str(self.worker_token_file), "--backends", "eager")
        return self.start("worker", "worker", *args, "--device", "cpu", "--name", "resident")

    def submit(self, model: Path, *, target: str = "cpu") -> int:
        context = json.dumps({"stage": "production", "target": target})
        with model.open("rb") as handle:
            reply = self.client.post(
                "/api/v1/analyze", files={"model": (model.name, handle)}, data={"context": context}
            )
        assert reply.status_code == 202, reply.text
        return int(reply.json()["id"])

    def batch_job_running(self, job_id: int) -> str | None:
        """The batch job whose worker holds queue job `job_id` now (from the workers' registrations), or None."""
        for worker in self.client.get("/api/v1/workers").json():
            if worker.get("current_job_id") == job_id and worker["state"] == "active":
                return (worker["environment"].get("batch_job") or {}).get("id")
        return None

    def analysis(self, analysis_id: int) -> dict:
        return self.client.get(f"/api/v1/analyses/{analysis_id}").json()

    def cancel(self, analysis_id: int) -> None:
        reply = self.client.post(f"/api/v1/analyses/{analysis_id}/cancel")
        assert reply.status_code < 300, reply.text

    def page(self, path: str) -> str:
        """A dashboard page as a signed-in user sees it (the sign-in form's cookie, from this server's own origin)."""
        with httpx.Client(base_url=self.url, timeout=30) as browser:
            signed_in = browser.post("/login", data={"token": self.user_token}, headers={"Origin": self.url})
            assert signed_in.status_code == 303, signed_in.text
            reply = browser.get(path)
            assert reply.status_code == 200, reply.text
            return reply.text

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def logs(self) -> str:
        batch = sorted(self.root.glob("npu-advisor-worker-*.out"))
        parts = [f"--- {name}.log\n{self.log(name)}" for name in self.processes]
        parts += [f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}" for path in batch[-3:]]
        return "\n".join(parts)

    def stop(self, name: str, timeout_s: float = 30) -> int | None:
        process = self.processes.get(name)
        if process is None or process.poll() is not None:
            return process.returncode if process else None
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            return process.wait()

    def stop_all(self) -> None:
        for name in [name for name in self.processes if name != "serve"] + ["serve"]:
            self.stop(name)
        self.client.close()
