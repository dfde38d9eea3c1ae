"""The dashboard in headless Chromium against a server seeded with synthetic analyses."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect
from sqlalchemy import select
from sqlmodel import Session

from app.models import Analysis, Job
from tests.support.http_client import http
from tests.support.screenshots import copy_to_docs

pytestmark = pytest.mark.browser

HOSTILE = "<script>alert(1)</script>"


def first_done(engine) -> Analysis:  # noqa: ANN001
    with Session(engine, expire_on_commit=False) as session:
        return session.scalars(
            select(Analysis).where(Analysis.recommended_backend == "inductor").order_by(Analysis.id.desc()).limit(1)
        ).one()


def test_list_filters_search_and_sort(page, seeded_server, shot):
    page.goto(seeded_server.url + "/")
    assert page.locator("tbody tr[data-analysis-id]").count() == 25
    copy_to_docs(shot(page, "analyses"))

    page.get_by_label("Status").select_option("done")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"status=done"))
    badges = page.locator("tbody tr[data-analysis-id] [data-live-status]").all_inner_texts()
    assert badges and set(badges) == {"done"}

    page.get_by_label("Model name").fill("bert")
    page.get_by_label("Model name").press("Enter")  # keyboard submits the filter form
    page.wait_for_url(re.compile(r"model=bert"))
    names = page.locator("tbody td.name").all_inner_texts()
    assert names and all("bert" in name for name in names)

    page.get_by_role("link", name="Model").click()  # sort by model name
    page.wait_for_url(re.compile(r"sort=model"))
    names = page.locator("tbody td.name").all_inner_texts()
    assert names == sorted(names)


def test_hostile_model_name_renders_as_text_and_fires_no_dialog(page, seeded_server):
    with Session(seeded_server.engine, expire_on_commit=False) as session:
        analysis = session.get(Analysis, 1)
        analysis.model_name = HOSTILE
        session.add(analysis)
        session.commit()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(seeded_server.url + "/?model=script")
    assert page.locator("tbody td.name").inner_text() == HOSTILE
    page.goto(seeded_server.url + "/analyses/1")
    assert page.locator("h1").inner_text().startswith(HOSTILE)
    page.goto(seeded_server.url + "/compare?a=1&b=2")
    page.wait_for_timeout(300)
    assert dialogs == []


OVERLAPPING_TEXTS = """svg => {
  const boxes = [...svg.querySelectorAll("text")].map(t => [t.textContent, t.getBBox()]);
  const hits = [];
  boxes.forEach(([a, p], i) => boxes.slice(i + 1).forEach(([b, q]) => {
    if (p.x < q.x + q.width && q.x < p.x + p.width && p.y < q.y + q.height && q.y < p.y + p.height) hits.push([a, b]);
  }));
  return hits;
}"""


def test_detail_page_shows_recommendation_charts_and_coverage(page, seeded_server, shot):
    analysis = first_done(seeded_server.engine)
    page.goto(f"{seeded_server.url}/analyses/{analysis.id}")
    first_card = page.locator("main .card").first
    assert first_card.get_attribute("id") == "answer"  # the page leads with the answer
    assert first_card.get_by_test_id("recommended-backend").inner_text() == "inductor:max-autotune"
    speedup = first_card.get_by_test_id("answer-speedup").inner_text()
    # the interval's verdict beside it (advisor.core.claims): [1.90-2.10] excludes 1
    assert re.fullmatch(r"\d+\.\d\d× 95% CI \d+\.\d\d–\d+\.\d\d× faster than eager", speedup), speedup
    assert first_card.get_by_test_id("answer-confidence").inner_text().split()[0] in ("high", "medium", "low")
    wrap = page.locator("#measurements .table-wrap")  # every column visible on a laptop screen, no scrolling
    assert wrap.evaluate("el => el.scrollWidth <= el.clientWidth + 1")
    last_header = page.locator("#measurements thead th").last.bounding_box()
    assert last_header["x"] + last_header["width"] <= wrap.bounding_box()["x"] + wrap.bounding_box()["width"] + 1
    for chart in ("svg.latency-chart", "svg.break-even-chart", "svg.compile-chart"):  # real fonts, real boxes
        assert page.locator(chart).evaluate(OVERLAPPING_TEXTS) == [], chart
    ticks = page.locator("svg.break-even-chart text.x-tick").evaluate_all("els => els.map(e => e.dataset.value)")
    assert ticks and all(float(t).is_integer() for t in ticks)
    measured = [m for m in analysis.measurements["measurements"] if m["status"] == "ok"]
    bars = page.locator("svg.latency-chart rect.latency-bar")
    assert bars.count() == len(measured)
    assert sorted(bars.evaluate_all("els => els.map(e => e.dataset.backend)")) == sorted(
        m["backend"] if m["mode"] == "default" else f"{m['backend']}:{m['mode']}" for m in measured
    )
    assert page.locator("svg.break-even-chart circle.crossing").count() >= 1
    assert page.locator("svg.tree g.node.chosen").count() == 1
    first_op = page.locator("#coverage tbody tr").first
    assert "custom op" in first_op.inner_text()
    assert "Not NPU-measured" in page.get_by_test_id("measured-on-note").inner_text()
    copy = page.locator('button[data-copy-target="snippet"]')
    copy.click()
    expect(copy).to_have_text("Copied")
    copy_to_docs(shot(page, "analysis-detail"))


def test_keyboard_reaches_content_and_navigation(page, seeded_server):
    page.goto(seeded_server.url + "/queue")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")
    assert page.evaluate("location.hash") == "#main"
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    focused = page.evaluate("document.activeElement.tagName + ' ' + document.activeElement.textContent")
    assert focused.startswith("A ") or focused.startswith("BUTTON "), focused


def test_queue_and_compare_pages(page, seeded_server, shot):
    registered = http.post(
        seeded_server.url + "/api/v1/workers/register",
        json={
            "name": "npu-node-7",
            "device_kind": "npu",
            "backends": ["eager", "inductor", "torchair"],
            "environment": {"device_name": "Ascend910B (test double)", "measured_on": "test-double"},
        },
    )
    assert registered.status_code == 200
    page.goto(seeded_server.url + "/queue")
    assert page.locator('tr[data-worker="npu-node-7"]').count() == 1
    with Session(seeded_server.engine) as session:
        running = len(session.scalars(select(Job.id).where(Job.status == "running")).all())
    assert page.locator("table.running tbody tr").count() == running
    copy_to_docs(shot(page, "queue"))

    done = first_done(seeded_server.engine)
    page.goto(f"{seeded_server.url}/compare?a={done.id}&b={done.id - 3}")
    assert page.locator("tr.differs").count() >= 1
    copy_to_docs(shot(page, "compare"))


def test_upload_form_shows_the_servers_field_errors_next_to_the_fields(page, seeded_server, tmp_path):
    from tests.support.synthetic_analyses import torchscript_zip

    model = tmp_path / "tiny.pt"
    model.write_bytes(torchscript_zip())
    page.goto(seeded_server.url + "/upload")
    page.get_by_label("Model file").set_input_files(str(model))
    page.get_by_label("latency target ms").fill("-3")
    page.get_by_role("button", name="Analyse").click()
    expect(page.locator('[data-error-for="latency_target_ms"]')).to_contain_text("greater than 0")
    assert page.url.endswith("/upload")  # the form and what was typed stay
    assert page.get_by_label("latency target ms").input_value() == "-3"


def test_the_scripted_upload_sends_backends_and_the_calibration_file_and_places_their_errors(
    page, seeded_server, tmp_path
):
    """web.js sends the two issue-31 fields to the API like the no-script form does; the API's 422s land at them."""
    from tests.support.synthetic_analyses import torchscript_zip

    model, calibration = tmp_path / "tiny.pt", tmp_path / "calibration.npz"
    model.write_bytes(torchscript_zip())
    calibration.write_bytes(b"<b>not an npz</b>" * 64)
    page.goto(seeded_server.url + "/upload")
    page.get_by_label("Model file").set_input_files(str(model))
    page.get_by_label("Backends (optional)").fill("onnxruntime:int8,<i>nope</i>")
    page.get_by_role("button", name="Analyse").click()
    expect(page.locator('[data-error-for="backends"]')).to_contain_text("unknown backend(s) <i>nope</i>")
    assert page.locator('[data-error-for="backends"] i').count() == 0  # shown as text, never as markup
    page.get_by_label("Backends (optional)").fill("onnxruntime:int8")
    page.get_by_label("target", exact=True).select_option("cpu")  # an int8 export runs on cpu (npu: refused first)
    page.get_by_label("Calibration file (optional)").set_input_files(str(calibration))
    page.get_by_role("button", name="Analyse").click()
    expect(page.locator('[data-error-for="calibration"]')).to_contain_text("not an .npz")
    assert page.url.endswith("/upload")
