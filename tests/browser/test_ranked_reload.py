"""In a browser: a detail page open on a running analysis shows the answer as soon as its job posts the ranking
(advisor.core.early_answer), before the job completes, and then the complete report."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import expect

from tests.support.fixtures_decide import inspection, measurement, run

from .conftest import served

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def empty_server(tmp_path) -> Iterator[str]:  # noqa: ANN001
    """The app in a uvicorn thread on an empty database (no worker: the test plays the worker over HTTP)."""
    from app.main import create_app
    from app.settings import Settings

    with served(create_app(Settings(data_dir=tmp_path / "data", reaper_interval_s=3600)), "ranked-uvicorn") as url:
        yield url


def test_the_page_shows_the_ranked_answer_and_then_the_complete_one(page, empty_server, example_mlp_file):
    api = httpx.Client(base_url=empty_server + "/api/v1")
    with open(example_mlp_file, "rb") as fh:
        context = json.dumps({"stage": "production", "target": "cpu"})
        analysis_id = api.post("/analyze", files={"model": ("m.pt2", fh)}, data={"context": context}).json()["id"]
    worker = {"name": "played", "device_kind": "cpu", "backends": ["eager", "inductor"], "environment": {}}
    worker_id = api.post("/workers/register", json=worker).json()["worker_id"]
    lease = api.post(f"/workers/{worker_id}/claim").json()
    headers = {"X-Lease-Token": lease["lease_token"]}
    measured = run(
        measurement("eager", median_ms=10.0, compile_s=None),
        measurement("inductor", median_ms=4.0, compile_s=8.0, eager_ms=10.0),
        device="cpu",
    )
    final = {
        "inspection": inspection() | {"artifact_sha256": lease["job"]["artifact_sha256"]},
        "measurements": measured,
    }
    ranking = json.loads(json.dumps(final))
    ranking["measurements"]["quality"] = {"noisy": False, "details": {"detailed": [], "pending": ["inductor:default"]}}

    page.goto(f"{empty_server}/analyses/{analysis_id}")
    expect(page.get_by_text("Measuring…")).to_be_visible()
    assert api.post(f"/jobs/{lease['job']['id']}/ranked", json=ranking, headers=headers).status_code == 200
    # the poller sees the measurements arrive and reloads: the answer, said to be ranked, while the job still runs
    expect(page.get_by_test_id("ranked-note")).to_be_visible(timeout=15_000)
    expect(page.get_by_test_id("recommended-backend")).to_have_text("inductor")
    expect(page.locator("[data-live-status]").first).to_have_text("running")

    assert api.post(f"/jobs/{lease['job']['id']}/complete", json=final, headers=headers).status_code == 200
    expect(page.locator("[data-live-status]").first).to_have_text("done", timeout=15_000)
    expect(page.get_by_test_id("ranked-note")).to_have_count(0)
