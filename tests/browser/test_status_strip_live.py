"""In a browser: the analysis page open on a just-uploaded analysis reads "queued", "waiting for a worker" and its
queue position; when a worker takes it, the live poller turns it into "running" with the worker's stage and takes
the queue position away (it used to keep "position 1 in the queue" beside "running / inspect")."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import expect

from .conftest import served

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def empty_server(tmp_path) -> Iterator[str]:  # noqa: ANN001
    from app.main import create_app
    from app.settings import Settings

    with served(create_app(Settings(data_dir=tmp_path / "data", reaper_interval_s=3600)), "strip-uvicorn") as url:
        yield url


def test_the_strip_follows_the_job_from_queued_to_running_without_a_stale_position(
    page, empty_server, example_mlp_file
):
    api = httpx.Client(base_url=empty_server + "/api/v1")
    worker = {"name": "played", "device_kind": "cpu", "backends": ["eager"], "environment": {}}
    worker_id = api.post("/workers/register", json=worker).json()["worker_id"]
    with open(example_mlp_file, "rb") as fh:
        context = json.dumps({"stage": "production", "target": "cpu"})
        analysis_id = api.post("/analyze", files={"model": ("m.pt2", fh)}, data={"context": context}).json()["id"]

    page.goto(f"{empty_server}/analyses/{analysis_id}")
    strip = page.get_by_test_id("status-strip")
    expect(strip.locator("[data-live-status]")).to_have_text("queued")
    expect(strip.locator("[data-live-stage]")).to_have_text("waiting for a worker")
    expect(strip.locator("[data-live-position]")).to_have_text("position 1 in the queue")

    lease = api.post(f"/workers/{worker_id}/claim").json()
    beat = {"stage": "inspect", "progress": 0.05}
    headers = {"X-Lease-Token": lease["lease_token"]}
    assert api.post(f"/jobs/{lease['job']['id']}/heartbeat", json=beat, headers=headers).status_code == 200
    expect(strip.locator("[data-live-status]")).to_have_text("running", timeout=15_000)
    expect(strip.locator("[data-live-stage]")).to_have_text("inspect", timeout=15_000)
    expect(strip.locator("[data-live-position]")).to_be_hidden()
    expect(strip).not_to_contain_text("in the queue")
