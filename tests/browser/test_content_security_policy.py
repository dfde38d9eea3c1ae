"""The dashboard works under its Content-Security-Policy (app.security_headers) in Chromium: no page reports a
violation, the SVG charts are drawn, web.js runs (copy buttons, the live progress poller), and the API docs render.
tests/browser/test_ranked_reload.py shows the live reload under the same policy."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect
from sqlalchemy import select
from sqlmodel import Session

from app.models import Analysis

pytestmark = pytest.mark.browser

WATCH_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(`${e.violatedDirective} blocked ${e.blockedURI || "inline"} at ${e.sourceFile}`);
});
"""


@pytest.fixture
def watched(page):
    """`page` with every CSP violation collected, as events and as console errors."""
    console: list[str] = []
    page.add_init_script(WATCH_VIOLATIONS)
    page.on("console", lambda m: console.append(m.text) if "Content Security Policy" in m.text else None)

    def visit(url: str) -> None:
        answer = page.goto(url)
        assert answer is not None and "frame-ancestors 'none'" in answer.headers["content-security-policy"], url
        page.wait_for_load_state("networkidle")

    def violations() -> list[str]:
        return page.evaluate("window.__cspViolations") + console

    return page, visit, violations


def analysis_with(engine, condition) -> Analysis:  # noqa: ANN001
    with Session(engine, expire_on_commit=False) as session:
        return session.scalars(select(Analysis).where(condition).order_by(Analysis.id.desc()).limit(1)).one()


def test_no_page_reports_a_violation_and_the_charts_and_copy_button_work(watched, seeded_server):
    page, visit, violations = watched
    done = analysis_with(seeded_server.engine, Analysis.recommended_backend == "inductor")
    for path in ("/", "/queue", "/upload", "/suites", "/login", f"/compare?a={done.id}&b={done.id - 3}"):
        visit(seeded_server.url + path)
        assert violations() == [], path
    visit(f"{seeded_server.url}/analyses/{done.id}")
    for chart in ("svg.latency-chart", "svg.break-even-chart", "svg.compile-chart"):
        box = page.locator(chart).bounding_box()
        assert box is not None and box["width"] > 100 and box["height"] > 50, chart
    assert page.locator("svg.latency-chart rect.latency-bar").count() >= 2
    width = page.locator("svg.latency-chart rect.latency-bar").first.bounding_box()["width"]
    assert width > 0, "the bars are drawn with their classes' styles"
    copy = page.locator('button[data-copy-target="snippet"]')
    expect(copy).to_be_visible()  # web.js ran: it shows the copy buttons
    copy.click()
    expect(copy).to_have_text("Copied")
    card_margin = page.locator("#break-even").evaluate("el => getComputedStyle(el).marginTop")
    assert card_margin == "16px", "the moved inline style applies from web.css"
    assert violations() == []


def test_the_live_progress_poller_runs_under_the_policy(watched, seeded_server):
    page, visit, violations = watched
    running = analysis_with(seeded_server.engine, Analysis.id.in_(running_ids(seeded_server.engine)))
    with page.expect_request(lambda request: "/web/progress?ids=" in request.url, timeout=10_000):
        visit(f"{seeded_server.url}/analyses/{running.id}")
    assert violations() == []


def running_ids(engine) -> list[int]:  # noqa: ANN001
    from app.models import Job

    with Session(engine) as session:
        return list(session.scalars(select(Job.analysis_id).where(Job.status == "running")))


def test_the_api_docs_render_under_their_policy_and_fetch_nothing_from_outside(browser, seeded_server):
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.add_init_script(WATCH_VIOLATIONS)
    fetched: list[str] = []
    refused: list[str] = []
    page.on("requestfinished", lambda request: fetched.append(request.url))
    page.on("requestfailed", lambda request: refused.append(f"{request.url} {request.failure}"))
    try:
        page.goto(seeded_server.url + "/docs")
        expect(page.locator(".swagger-ui .info .title")).to_contain_text("npu-advisor")
        expect(page.locator(".opblock").first).to_be_visible()
        assert page.evaluate("window.__cspViolations") == []
        page.goto(seeded_server.url + "/redoc")
        expect(page.locator("h1").first).to_contain_text("npu-advisor")
        expect(page.get_by_text("Prometheus metrics").first).to_be_attached()
        # ReDoc's own "powered by" logo is on a third-party CDN: the policy refuses it, as it should
        violations = page.evaluate("window.__cspViolations")
        assert [v for v in violations if "cdn.redoc.ly" not in v] == []
    finally:
        context.close()
    local = (seeded_server.url, "blob:" + seeded_server.url, "data:")
    assert [url for url in fetched if not url.startswith(local)] == []
    # a request of our own page cut short by the next navigation (the favicon of /docs, when /redoc loads) is neither
    # an outside fetch nor a refusal by the policy
    refused = [line for line in refused if not (line.startswith(local) and line.endswith(" net::ERR_ABORTED"))]
    assert all("cdn.redoc.ly" in line and line.endswith(" csp") for line in refused), refused
