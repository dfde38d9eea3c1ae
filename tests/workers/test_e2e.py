"""End to end, as a user runs it: `serve --no-worker`, a `worker`, `analyze --server --wait`, and a server crash.

Real processes on a free port with a temp data dir; the worker measures with eager only, in short timing windows
(tests/support/service_env.py), to stay fast.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.http_client import http
from tests.support.service_env import service_environment
from tests.support.waiting import free_port, wait_for

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-c", "from advisor.cli import app; app()"]


class Services:
    """The processes of one test; everything still running is stopped at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data_dir = tmp_path / "data"
        self.env = service_environment()
        self.processes: list[subprocess.Popen] = []

    def start(self, *args: str, log: str) -> subprocess.Popen:
        out = (self.tmp_path / log).open("ab")
        process = subprocess.Popen([*CLI, *args], stdout=out, stderr=subprocess.STDOUT, env=self.env)
        self.processes.append(process)
        return process

    def serve(self) -> subprocess.Popen:
        process = self.start(
            "serve", "--no-worker", "--port", str(self.port), "--data-dir", str(self.data_dir), log="serve.log"
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert process.poll() is None, self.log("serve.log")
            try:
                if http.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return process
            except httpx.TransportError:
                time.sleep(0.2)
        raise AssertionError(f"server never became healthy:\n{self.log('serve.log')}")

    def worker(self) -> subprocess.Popen:
        return self.start("worker", "--server", self.url, "--backends", "eager", "--name", "e2e", log="worker.log")

    def analyze(self, model: Path, *flags: str) -> subprocess.CompletedProcess:
        command = [*CLI, "analyze", str(model), "--server", self.url, "--target", "cpu", *flags]
        return subprocess.run(command, capture_output=True, text=True, env=self.env, timeout=300)

    def analyses(self) -> list[dict]:
        return http.get(f"{self.url}/api/v1/analyses", params={"per_page": 50}, timeout=10).json()["items"]

    def log(self, name: str) -> str:
        path = self.tmp_path / name
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    running = Services(tmp_path)
    try:
        yield running
    finally:
        running.stop_all()


@pytest.fixture(scope="module")
def example_model(example_mlp_file: Path) -> Path:
    """The example MLP (`npu-advisor example mlp`), exported once per test worker (tests/conftest.py)."""
    return example_mlp_file


def wait_until(predicate, timeout_s: float, what: str, services: Services):  # noqa: ANN001, ANN201
    return wait_for(predicate, timeout_s, what, lambda: f"worker log:\n{services.log('worker.log')}")


def test_queued_jobs_survive_a_server_crash_and_analyze_waits_for_the_stored_report(
    services: Services, example_model: Path
):
    # 1. Three jobs queued while no worker runs.
    server = services.serve()
    contexts = [
        ("--stage", "production"),
        ("--stage", "prototype", "--fleet", "mixed"),
        # a target the MLP's p99 meets even when other tests' compiles share the cores (50 ms once did not)
        ("--stage", "production", "--latency-target-ms", "5000", "--expected-calls", "10"),
    ]
    for flags in contexts:
        submitted = services.analyze(example_model, *flags, "--no-wait")
        assert submitted.returncode == 0, submitted.stderr
    assert [a["status"] for a in services.analyses()] == ["queued"] * 3

    # 2. The server is killed (-9) and comes back on the same data dir: nothing is lost.
    server.kill()
    server.wait()
    services.serve()
    assert [a["status"] for a in services.analyses()] == ["queued"] * 3

    # 3. A worker joins; the user asks again and waits: the same report as --local, stored and listed.
    services.worker()
    result = services.analyze(example_model, "--stage", "production", "--wait")
    assert result.returncode == 0, result.stderr + services.log("worker.log")
    assert "Use eager PyTorch" in result.stdout  # only eager was measured, so eager is recommended

    def all_done() -> list[dict] | None:
        listed = services.analyses()
        return listed if all(a["status"] == "done" for a in listed) else None

    listed = wait_until(all_done, 300, "every queued analysis should be processed after the restart", services)
    assert len(listed) >= 3
    completed = [job for job, kind, _ in _events(services) if kind == "completed"]
    assert len(completed) == len(set(completed)) == len(listed), "each job finished exactly once"
    for item in listed:
        stored = http.get(f"{services.url}/api/v1/analyses/{item['id']}", timeout=10).json()
        assert stored["recommendation"]["backend"] == "eager"
        assert [row["status"] for row in stored["measurements"]["measurements"]] == ["ok"]
        assert stored["inspection"]["format"] == "exported_program"


def test_hostile_uploads_end_with_a_clear_status_and_the_worker_takes_the_next_job(
    services: Services, example_model: Path, hostile_corpus: dict, tmp_path: Path
):
    """Issue 11's corpus through the real path: upload -> queue -> isolated worker. A segfault, an endless loop,
    a pickle payload and a host-file writer each end their own job with a clear reason; the host file and the
    marker are untouched; the same worker process then measures a clean model."""
    import torch

    from tests.support.bubblewrap import require_bubblewrap

    require_bubblewrap("a working bubblewrap sandbox for an isolated worker")
    inputs = tmp_path / "inputs.pt"
    torch.save((torch.zeros(2, 4),), inputs)
    cases = {case.name: case for case in hostile_corpus["cases"]}
    expected = {
        "script_segfaults.pt": "inspection failed (crashed)",
        "script_endless_loop.pt": "inspection failed (timeout)",
        "opaque_constant_renamed.pt2": "rejected: the archive holds a pickled Python object",
        "script_writes_host_file.pt": None,  # any outcome, as long as the host file is unchanged
    }
    services.serve()
    worker = services.start(
        "worker",
        "--server",
        services.url,
        "--backends",
        "eager",
        "--name",
        "hostile",
        "--stage-timeout",  # the endless loop spins a core this long; the clean model's stages take 1-3 s
        "10",
        log="worker.log",
    )
    ids = {}
    for name in [*expected, "clean"]:
        path = example_model if name == "clean" else cases[name].path
        files = {"model": (path.name, path.read_bytes())}
        if path.suffix == ".pt":
            files["inputs"] = ("inputs.pt", inputs.read_bytes())
        context = json.dumps({"stage": "production", "target": "cpu"})
        answer = http.post(f"{services.url}/api/v1/analyze", files=files, data={"context": context}, timeout=30)
        assert answer.status_code == 202, answer.text
        ids[name] = answer.json()["id"]

    def final() -> dict | None:
        views = {name: http.get(f"{services.url}/api/v1/analyses/{i}", timeout=10).json() for name, i in ids.items()}
        return views if all(v["status"] in ("done", "failed") for v in views.values()) else None

    views = wait_until(final, 300, "every hostile job and the clean one should finish", services)
    for name, reason in expected.items():
        if reason is not None:
            assert views[name]["status"] == "failed", (name, views[name]["status"])
            assert views[name]["error"].startswith(reason), (name, views[name]["error"])
    assert views["clean"]["status"] == "done", views["clean"]["error"]
    assert worker.poll() is None, "the worker should still be running:\n" + services.log("worker.log")
    assert hostile_corpus["decoy"].read_bytes() == hostile_corpus["decoy_bytes"]
    assert not hostile_corpus["marker"].exists()


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def test_the_embedded_worker_stops_when_serve_is_killed(services: Services):
    """`serve` killed with SIGKILL (no shutdown handler runs): its embedded worker notices and exits."""
    serve = services.start(
        "serve",
        "--port",
        str(services.port),
        "--data-dir",
        str(services.data_dir),
        "--worker-backends",
        "eager",
        log="serve.log",
    )

    def registered() -> list[dict] | None:
        try:
            workers = http.get(f"{services.url}/api/v1/workers", timeout=2).json()
        except (httpx.TransportError, ValueError):
            return None
        return workers or None

    wait_until(registered, 120, "the embedded worker should register", services)
    workers = _children(serve.pid)
    assert workers, "serve should have started its worker as a child process"
    serve.kill()
    serve.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in workers):
        time.sleep(0.5)
    survivors = [
        pid
        for pid in workers
        if Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    ]
    assert not survivors, f"the embedded worker outlived serve:\n{services.log('serve.log')}"


def _events(services: Services) -> list[tuple[int, str, str | None]]:
    import sqlite3

    with sqlite3.connect(services.data_dir / "advisor.db") as db:
        return db.execute("SELECT job_id, type, worker_id FROM job_event ORDER BY id").fetchall()


def test_a_worker_killed_mid_job_loses_it_to_another_that_finishes_it_once(services: Services, example_model: Path):
    """kill -9 of the worker holding a job: after the lease expires another worker claims it and the result is
    stored exactly once (one `completed` event), whatever the dead worker had started."""
    services.env |= {"ADVISOR_LEASE_TTL_S": "6", "ADVISOR_HEARTBEAT_INTERVAL_S": "2", "ADVISOR_REAPER_INTERVAL_S": "2"}
    services.serve()
    submitted = services.analyze(example_model, "--stage", "production", "--no-wait")
    assert submitted.returncode == 0, submitted.stderr
    first = services.start(
        "worker", "--server", services.url, "--backends", "eager", "--name", "first", log="worker.log"
    )
    wait_until(lambda: services.analyses()[0]["status"] == "running", 120, "the first worker should claim", services)
    first.kill()
    first.wait()
    services.start("worker", "--server", services.url, "--backends", "eager", "--name", "second", log="worker.log")
    wait_until(lambda: services.analyses()[0]["status"] == "done", 240, "the second worker should finish", services)
    events = _events(services)
    claims = [worker for _, kind, worker in events if kind == "claimed"]
    assert len(claims) == 2 and claims[0] != claims[1], events
    assert [kind for _, kind, _ in events].count("completed") == 1, events
