"""End to end in a browser: upload a small model through the form, watch it run, read the result.

Runs against the real `npu-advisor serve` (API + dashboard + embedded worker, eager backend only so
the measurement takes seconds). The model is built and exported here at test time.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.support.http_client import http
from tests.support.screenshots import copy_to_docs

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    torch = pytest.importorskip("torch")
    from tests.support.models import MLP

    model = MLP().eval()
    path = tmp_path_factory.mktemp("model") / "tiny-mlp.pt2"
    with torch.no_grad():
        torch.export.save(torch.export.export(model, (torch.randn(4, 64),)), str(path))
    return path


def test_upload_watch_progress_and_read_the_recommendation(page, live_service, model_file, shot):
    page.goto(live_service.url + "/upload")
    expect(page.get_by_text("prototype: still experimenting")).to_be_visible()  # context docs as help text
    page.get_by_label("Model file").set_input_files(str(model_file))
    page.get_by_label("Model name").fill("tiny-mlp from the browser")
    page.get_by_label("stage", exact=True).select_option("prototype")
    page.get_by_label("target", exact=True).select_option("cpu")
    page.get_by_label("expected calls per compile").fill("20000")
    copy_to_docs(shot(page, "upload"))
    page.get_by_role("button", name="Analyse").click()

    page.wait_for_url(re.compile(r"/analyses/\d+$"))
    analysis_id = int(page.url.rsplit("/", 1)[1])
    assert page.locator("h1").inner_text().startswith("tiny-mlp from the browser")
    status = page.locator("[data-live-status]").first.inner_text()
    assert status in ("queued", "running", "done")

    # The page follows the analysis by itself (progress poller) and reloads when it finishes.
    expect(page.get_by_test_id("recommended-backend")).to_be_visible(timeout=240_000)
    expect(page.locator("[data-live-status]").first).to_have_text("done")

    analysis = http.get(f"{live_service.url}/api/v1/analyses/{analysis_id}").json()
    measured = [m for m in analysis["measurements"]["measurements"] if m["status"] == "ok" and m.get("latency")]
    assert measured, analysis["measurements"]
    assert page.locator("svg.latency-chart rect.latency-bar").count() == len(measured)
    assert page.locator("#coverage tbody tr[data-op]").count() == len(analysis["inspection"]["ops"])
    assert "Not NPU-measured" in page.get_by_test_id("measured-on-note").inner_text()
    copy_to_docs(shot(page, "analysis-live"))

    page.get_by_role("link", name="Queue & workers").click()
    worker = page.locator('tr[data-worker="embedded"]')
    expect(worker).to_have_count(1)
    assert "lost" not in worker.inner_text()
    shot(page, "queue-live")


def test_hostile_model_name_is_text_and_cancel_button_stops_the_run(page, live_service, model_file):
    hostile = "<script>alert(1)</script>"
    with open(model_file, "rb") as fh:
        response = http.post(
            f"{live_service.url}/api/v1/analyze",
            files={"model": ("m.pt2", fh, "application/octet-stream")},
            data={"context": '{"target": "cpu"}', "model_name": hostile, "force": "true"},
        )
    assert response.status_code == 202, response.text
    analysis_id = response.json()["id"]
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(live_service.url + "/")
    expect(page.locator(f'tr[data-analysis-id="{analysis_id}"] td.name')).to_have_text(hostile)
    page.goto(f"{live_service.url}/analyses/{analysis_id}")
    assert page.locator("h1").inner_text().startswith(hostile)
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator("[data-live-status]").first).to_have_text("cancelled", timeout=60_000)
    assert dialogs == []
