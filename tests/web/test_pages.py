"""Server-side page tests (TestClient): escaping, filters, charts, actions, sign-in, offline assets."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

from fastapi.testclient import TestClient
from sqlalchemy import select

from app.cookie_auth import COOKIE_NAME
from app.models import Analysis, Job
from tests.support import synthetic_analyses as synthetic
from tests.support.web_app import Db

HOSTILE = "<script>alert(1)</script>"
ROW_IDS = re.compile(r'<tr data-analysis-id="(\d+)"')


def listed_ids(html: str) -> list[int]:
    return [int(i) for i in ROW_IDS.findall(html)]


def status_of(db: Db, analysis_id: int) -> str:
    return db.first(select(Job.status).where(Job.analysis_id == analysis_id))


# ------------------------------------------------------------------ escaping
def test_hostile_model_name_renders_as_text_on_every_page(client: TestClient, seeded: Db):
    seeded.update(Analysis, 1, model_name=HOSTILE)
    for url in ("/?per_page=50", "/analyses/1", "/compare?a=1&b=2", f"/?model={HOSTILE}"):
        html = client.get(url).text
        assert HOSTILE not in html, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html, url


def test_hostile_why_not_and_evidence_are_escaped_in_the_detail_page(client: TestClient, seeded: Db):
    done = seeded.first(select(Analysis).where(Analysis.recommendation.is_not(None)))
    recommendation = dict(done.recommendation)
    recommendation["why_not"] = {"torchair": '<img src=x onerror="alert(2)">'}
    recommendation["path"][0]["evidence"] = {"note": "</code><script>alert(3)</script>"}
    seeded.update(Analysis, done.id, recommendation=recommendation)
    html = client.get(f"/analyses/{done.id}").text
    assert "<img src=x" not in html and "<script>alert(3)" not in html
    assert "&lt;img src=x" in html


# ------------------------------------------------------------------ list: filters, sort, pages
def test_list_filters_by_status_target_backend_and_model(client: TestClient, seeded: Db):
    statuses = {a: status_of(seeded, a) for a in range(1, 31)}
    done_ids = sorted((a for a, s in statuses.items() if s == "succeeded"), reverse=True)
    assert listed_ids(client.get("/?status=done").text) == done_ids

    npu = client.get("/?target=npu").text
    expected = seeded.all(select(Analysis.id).where(Analysis.target == "npu"))
    assert sorted(listed_ids(npu)) == sorted(expected)

    eager = listed_ids(client.get("/?backend=eager").text)
    assert eager and all(seeded.get(Analysis, i).recommended_backend == "eager" for i in eager)

    seeded.update(Analysis, 7, model_name="Special_Model%v2")
    assert listed_ids(client.get("/?model=special_model%25").text) == [7]  # contains, case-insensitive, % literal


def test_list_paginates_and_sorts(client: TestClient, seeded: Db):
    first = client.get("/?per_page=25").text
    assert listed_ids(first) == list(range(30, 5, -1))
    assert "page 1 of 2" in first and 'rel="next"' in first
    assert listed_ids(client.get("/?per_page=25&page=2").text) == list(range(5, 0, -1))
    assert listed_ids(client.get("/?page=99").text) == list(range(5, 0, -1))  # clamped to the last page

    by_name = listed_ids(client.get("/?sort=model&order=asc&per_page=50").text)
    names = [seeded.get(Analysis, i).model_name for i in by_name]
    assert names == sorted(names)

    by_speedup = client.get("/?sort=speedup&order=desc&status=done").text
    # each speedup with the recommendation's confidence beside it (issue 44: marks wherever a speedup is shown)
    cell = r'<td class="num">([\d.]+)×(?: <span class="badge [a-z]+" data-testid="list-confidence"[^<]*</span>)?</td>'
    speedups = [float(s) for s in re.findall(cell, by_speedup)]
    assert 'data-testid="list-confidence"' in by_speedup
    assert speedups and speedups == sorted(speedups, reverse=True)

    done = seeded.all(select(Analysis.id).where(Analysis.recommendation.is_not(None)).order_by(Analysis.id))[:3]
    for value, analysis_id in zip((0.5, 9.0, 4.0), done, strict=True):  # the stored column is what sorts
        seeded.update(Analysis, analysis_id, speedup_vs_eager=value)
    assert listed_ids(client.get("/?sort=speedup&order=desc").text)[:2] == [done[1], done[2]]
    ascending = listed_ids(client.get("/?sort=speedup&order=asc&per_page=100").text)
    assert ascending[0] == done[0]
    unmeasured = seeded.all(select(Analysis.id).where(Analysis.speedup_vs_eager.is_(None)))
    assert set(ascending[-len(unmeasured) :]) == set(unmeasured)  # no speedup: last in either order


def test_empty_filter_result_says_so(client: TestClient, seeded: Db):
    html = client.get("/?model=no-such-model").text
    assert "No analyses match these filters" in html and listed_ids(html) == []


# ------------------------------------------------------------------ detail
def test_detail_shows_recommendation_charts_coverage_and_honesty_note(client: TestClient, seeded: Db):
    done = seeded.first(select(Analysis).where(Analysis.recommended_backend == "inductor"))
    html = client.get(f"/analyses/{done.id}").text
    assert 'data-testid="recommended-backend">inductor:max-autotune<' in html
    measured = [m["backend"] for m in done.measurements["measurements"] if m["status"] == "ok"]
    assert html.count('class="bar latency-bar') == len(measured) == 3
    assert 'class="chart compile-chart"' in html and 'class="chart break-even-chart"' in html
    assert '<svg xmlns="http://www.w3.org/2000/svg" class="tree"' in html
    coverage = html[html.index('id="coverage"') :]
    assert coverage.index("npu.npu_rms_norm.default") < coverage.index("aten.linear.default")
    assert "fallback kernel (runs eagerly)" in coverage  # status in words, not colour alone
    assert "Not NPU-measured" in html
    assert f'href="/api/v1/analyses/{done.id}/report.md" download="analysis-{done.id}.md"' in html
    assert 'id="snippet"' in html and 'id="reproduce"' in html


def test_running_analysis_page_refreshes_itself_and_missing_one_is_404(client: TestClient, seeded: Db):
    running = seeded.first(select(Job).where(Job.status == "running"))
    html = client.get(f"/analyses/{running.analysis_id}").text
    assert 'data-reload-on-done="true"' in html and f'data-live="{running.analysis_id}"' in html
    assert "measure:inductor:default" in html
    state = client.get(f"/web/progress?ids={running.analysis_id}").json()[str(running.analysis_id)]
    assert state == {
        "status": "running",
        "stage": "measure:inductor:default",
        "progress": 0.4,
        "measured": False,
        "queue_position": None,
    }
    assert client.get("/analyses/99999").status_code == 404


# ------------------------------------------------------------------ queue and workers
def test_queue_page_says_which_workers_run_models_without_isolation(client: TestClient, seeded: Db):
    sandboxes = {
        "boxed": {"kind": "bubblewrap", "version": "0.8.0", "note": None},
        "open": {"kind": "none", "version": None, "note": "isolation switched off (--no-isolation)"},
    }
    for name, isolation in sandboxes.items():
        registered = client.post(
            "/api/v1/workers/register",
            json={"name": name, "device_kind": "cpu", "backends": ["eager"], "environment": {"isolation": isolation}},
        )
        assert registered.status_code == 200, registered.text
    html = client.get("/queue").text
    boxed = html.split('data-worker="boxed"')[1].split("</tr>")[0]
    unboxed = html.split('data-worker="open"')[1].split("</tr>")[0]
    assert ">isolated</span>" in boxed and "not isolated" not in boxed
    assert ">not isolated</span>" in unboxed and "--no-isolation" in unboxed


def test_queue_page_lists_jobs_and_workers_and_marks_lost_ones(client: TestClient, seeded: Db):
    for name in ("npu-node-1", "cpu-node-2"):
        registered = client.post(
            "/api/v1/workers/register",
            json={"name": name, "device_kind": "cpu", "backends": ["eager", "inductor"], "environment": {}},
        )
        assert registered.status_code == 200, registered.text
    from app.models import Worker

    lost = seeded.first(select(Worker.id).where(Worker.name == "cpu-node-2"))
    seeded.update(Worker, lost, last_seen_at=datetime(2025, 1, 1, tzinfo=UTC))
    html = client.get("/queue").text
    assert 'data-worker="npu-node-1"' in html and 'data-worker="cpu-node-2" class="lost"' in html
    assert html.count('<span class="badge lost">lost</span>') == 1

    leaving = seeded.first(select(Worker.id).where(Worker.name == "npu-node-1"))
    assert client.post(f"/api/v1/workers/{leaving}/deregister").status_code == 200
    html = client.get("/queue").text
    row = html[html.index('data-worker="npu-node-1"') :].split("</tr>", 1)[0]
    assert '<span class="badge stopped">stopped</span>' in row and re.search(r"stopped \d+ s ago", row)
    assert "measure:inductor:default" in html  # running jobs show their stage
    assert "Oldest waiting" in html and "waiting " in html


# ------------------------------------------------------------------ upload and actions
def test_upload_form_documents_every_context_field(client: TestClient):
    from advisor.core.context import DeploymentContext

    html = client.get("/upload").text
    for name, info in DeploymentContext.model_fields.items():
        assert f'name="ctx.{name}"' in html
        assert (info.description or "")[:40].replace("'", "&#39;") in html


def upload(client: TestClient, context: dict, model: bytes, **fields: str):
    """What the upload page's script sends: the API's multipart shape, to the form's action (the API itself)."""
    assert 'id="upload-form" method="post" action="/upload" data-api="/api/v1/analyze"' in client.get("/upload").text
    data = {"context": json.dumps(context), **fields}
    return client.post(
        "/api/v1/analyze",
        data=data,
        files={"model": ("tiny.pt", model, "application/octet-stream")},
        headers={"Origin": "http://127.0.0.1:8000"},
    )


def test_upload_creates_an_analysis(client: TestClient, db: Db):
    context = {"stage": "prototype", "target": "cpu", "expected_calls_per_compile": 5000}
    response = upload(client, context, synthetic.torchscript_zip(), model_name="tiny via form")
    assert response.status_code == 202, response.text
    analysis = db.get(Analysis, response.json()["id"])
    assert analysis.model_name == "tiny via form" and analysis.target == "cpu"
    assert analysis.context["stage"] == "prototype" and analysis.context["expected_calls_per_compile"] == 5000
    assert "waiting for a worker" in client.get(f"/analyses/{analysis.id}").text


def test_upload_errors_name_the_field_or_the_problem(client: TestClient):
    bad_field = upload(client, {"latency_target_ms": -3}, synthetic.torchscript_zip())
    assert bad_field.status_code == 422
    assert [e["field"] for e in bad_field.json()["detail"]] == ["latency_target_ms"]
    not_a_model = upload(client, {}, b"hello")
    assert not_a_model.status_code == 415 and "not a model archive" in not_a_model.json()["detail"]


def test_upload_is_refused_from_another_site(client: TestClient):
    response = client.post(
        "/api/v1/analyze",
        data={"context": "{}"},
        files={"model": ("tiny.pt", synthetic.torchscript_zip(), "x/y")},
        headers={"Origin": "https://evil.example"},
    )
    assert response.status_code == 403


def test_cancel_and_rerun_buttons_post_and_come_back(client: TestClient, seeded: Db):
    queued = seeded.first(select(Job).where(Job.status == "queued"))
    page = client.get(f"/analyses/{queued.analysis_id}").text
    assert f'action="/analyses/{queued.analysis_id}/cancel"' in page
    response = client.post(f"/analyses/{queued.analysis_id}/cancel", follow_redirects=False)
    assert response.status_code == 303 and status_of(seeded, queued.analysis_id) == "cancelled"

    cross_site = client.post(
        f"/analyses/{queued.analysis_id}/rerun", headers={"Origin": "https://evil.example"}, follow_redirects=False
    )
    assert cross_site.status_code == 403

    store = client.app.state.store
    analysis = seeded.get(Analysis, queued.analysis_id)
    path = store.path_for(analysis.artifact_sha256)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"synthetic")
    rerun = client.post(f"/analyses/{queued.analysis_id}/rerun", follow_redirects=False)
    assert rerun.status_code == 303
    new_id = int(rerun.headers["location"].rsplit("/", 1)[1])
    assert new_id != queued.analysis_id and seeded.get(Analysis, new_id).model_name == analysis.model_name


# ------------------------------------------------------------------ sign-in
def test_locked_server_asks_for_a_token_and_keeps_it_in_a_strict_cookie(locked):
    client, user, _ = locked
    first = client.get("/analyses/2?x=1", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] == "/login?next=%2Fanalyses%2F2%3Fx%3D1"
    assert client.get("/web/progress?ids=1").status_code == 401
    wrong = client.post("/login", data={"token": "npa_wrong", "next": "/"})
    assert wrong.status_code == 401 and "unknown or revoked" in wrong.text
    signed = client.post("/login", data={"token": user, "next": "https://evil.example/"}, follow_redirects=False)
    assert signed.status_code == 303 and signed.headers["location"] == "/"  # no open redirect
    cookie = signed.headers["set-cookie"]
    assert COOKIE_NAME in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    page = client.get("/")
    assert page.status_code == 200 and "signed in as alice (user)" in page.text
    client.post("/logout")
    assert client.get("/", follow_redirects=False).status_code == 303


def test_worker_token_cannot_sign_in(locked):
    client, _, worker = locked
    refused = client.post("/login", data={"token": worker}, follow_redirects=False)
    assert refused.status_code == 403 and "worker token cannot sign in" in refused.text
    assert client.get("/analyses/1", follow_redirects=False).status_code == 303  # still signed out
    own_page = {"Origin": "http://127.0.0.1:8000"}
    assert client.post("/analyses/1/cancel", headers=own_page, follow_redirects=False).status_code == 303


# ------------------------------------------------------------------ offline
def test_pages_reference_no_external_assets(client: TestClient, seeded: Db):
    for url in ("/", "/analyses/1", "/analyses/4", "/compare?a=1&b=4", "/queue", "/upload", "/login"):
        html = client.get(url).text
        external = re.findall(r'(?:src|href)="(?:https?:)?//[^"]+"', html)
        assert external == [], (url, external)
    assert client.get("/static/web.css").status_code == 200 and client.get("/static/web.js").status_code == 200
