"""Headless Debian Chromium driven by Playwright, against two servers:

- `seeded_server`: the app in a uvicorn thread on a temp database filled with synthetic analyses
  (fast; for the list, detail, compare and queue pages);
- `live_service`: the real `npu-advisor serve` (API + dashboard + embedded worker) as a subprocess,
  its worker restricted to the eager backend so a measurement takes seconds, for the upload flow.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlmodel import Session

from tests.support.http_client import http
from tests.support.service_env import service_environment
from tests.support.waiting import free_port

CHROMIUM = os.environ.get("ADVISOR_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT = {"width": 1366, "height": 768}  # a laptop screen
REPO = Path(__file__).resolve().parents[2]


def wait_healthy(url: str, timeout_s: float, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited with code {process.returncode} before answering /healthz")
        try:
            if http.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer /healthz within {timeout_s:.0f} s")


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"needs Debian's chromium at {CHROMIUM} (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(15_000)
    external: list[str] = []
    local = ("http://127.0.0.1", "data:")
    page.on("request", lambda r: None if r.url.startswith(local) else external.append(r.url))
    yield page
    context.close()
    assert external == [], f"the page fetched something from outside the server: {external}"


@dataclass
class SeededServer:
    url: str
    engine: object


@pytest.fixture(scope="module")
def seeded_server(tmp_path_factory) -> Iterator[SeededServer]:
    from app.main import create_app
    from app.settings import Settings
    from tests.support import synthetic_analyses as synthetic

    data = tmp_path_factory.mktemp("seeded")
    app = create_app(Settings(data_dir=data, reaper_interval_s=3600))
    with Session(app.state.engine, expire_on_commit=False) as session:
        synthetic.seed_analyses(session, 60)
    with served(app, "seeded-uvicorn") as url:
        yield SeededServer(url, app.state.engine)


@contextmanager
def served(app: Any, name: str) -> Iterator[str]:
    """`app` in a uvicorn thread on a free port, until the block ends; yields its URL once it answers /healthz."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, name=name, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.config.port}"
    try:
        wait_healthy(url, 30)
        yield url
    finally:
        server.should_exit = True
        thread.join(10)


@dataclass
class LiveService:
    url: str
    data_dir: Path
    log: Path


@pytest.fixture(scope="module")
def live_service(tmp_path_factory) -> Iterator[LiveService]:
    """`npu-advisor serve` on a free port with a temp data dir; its embedded worker measures eager only."""
    if not (REPO / "advisor" / "cli" / "serve_cmd.py").exists():
        pytest.skip("needs `npu-advisor serve` (advisor/cli/serve_cmd.py)")
    root = tmp_path_factory.mktemp("live")
    port = free_port()
    log = root / "serve.log"
    env = service_environment()  # no ADVISOR_* settings of this process; short timing windows
    command = [
        sys.executable,
        "-c",
        "from advisor.cli import app; app()",
        "serve",
        "--port",
        str(port),
        "--data-dir",
        str(root / "data"),
        "--worker-backends",
        "eager",
    ]
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, 60, process)
        yield LiveService(url, root / "data", log)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture
def shot(out_dir: Path):
    """shot(page, name): a full-page screenshot in test-output/screenshots/, its path returned."""
    folder = out_dir / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)

    def take(page, name: str) -> Path:
        path = folder / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take
