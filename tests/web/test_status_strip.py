"""Issue 44 item 6: the analysis page's status strip says one thing. A just-uploaded analysis reads "queued", "waiting
for a worker" and its place in the queue - never "running" beside a queue position, nor a stage an earlier attempt
left behind - and the live poller keeps it so once a worker takes it; a cancelled (or failed) analysis whose answer
came from the inspection alone says that the answer is unmeasured."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlmodel import select

from app.models import Analysis, Job
from app.web.status_strip import StatusStrip, status_strip
from tests.support import synthetic_analyses as synthetic
from tests.support.web_app import Db

UNMEASURED = {**synthetic.recommendation("torchair", "max-autotune"), "measured": False}


def _seed(db: Db, status: str) -> tuple[int, int]:
    """One analysis whose measure job is `status`; (analysis id, job id)."""
    with db.session() as session:
        synthetic.seed_analyses(session, 1, statuses=(status,))
    job = db.first(select(Job).order_by(Job.id.desc()))  # the one just seeded
    return job.analysis_id, job.id


def _strip(client: TestClient, analysis_id: int) -> str:
    html = client.get(f"/analyses/{analysis_id}").text
    start = html.index('data-testid="status-strip"')
    return html[start : html.index("</dd>", start)]


def _shown(strip: str) -> str:
    """The strip's visible words: tags and hidden parts dropped."""
    visible = re.sub(r"<span[^>]*\bhidden\b[^>]*>.*?</span>", "", strip, flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", visible.split(">", 1)[1]).split())


def test_the_strip_words_agree_with_the_status() -> None:
    queued = {"status": "queued", "stage": "inspect", "queue_position": 1}  # a stage a failed attempt left behind
    assert status_strip(queued) == StatusStrip("queued", "waiting for a worker", 1, None)
    running = {"status": "running", "stage": "inspect", "queue_position": 1}
    assert status_strip(running) == StatusStrip("running", "inspect", None, None)
    assert status_strip({"status": "running"}).stage == "starting"
    cancelled = {"status": "cancelled", "stage": "measure", "queue_position": 2, "recommendation": UNMEASURED}
    assert status_strip(cancelled) == StatusStrip(
        "cancelled", "", None, "cancelled before it was measured: this answer is unmeasured"
    )
    assert status_strip({**cancelled, "status": "failed"}).note == "the measurement failed: this answer is unmeasured"
    measured = {**cancelled, "recommendation": synthetic.recommendation()}
    assert status_strip(measured).note is None and status_strip({**cancelled, "recommendation": None}).note is None
    assert status_strip({**cancelled, "status": "done"}).note is None


def test_hostile_or_missing_values_give_an_empty_strip_not_an_error() -> None:
    for analysis in (
        {},
        {"status": "<script>", "stage": "<b>x</b>", "queue_position": 3},
        {"status": "queued", "queue_position": "1"},
        {"status": "queued", "queue_position": -4},
        {"status": "queued", "queue_position": True},
        {"status": "cancelled", "recommendation": "not a mapping"},
    ):
        strip = status_strip(analysis)
        assert strip.position is None and strip.note is None, analysis
        assert strip.stage in ("", "waiting for a worker"), analysis


def test_a_just_uploaded_analysis_reads_queued_then_running_without_a_stale_position(client: TestClient, db: Db):
    analysis_id, job_id = _seed(db, "queued")
    db.update(Job, job_id, stage="inspect", progress=0.2)  # left by an attempt that failed and was retried
    shown = _shown(_strip(client, analysis_id))
    assert shown == "queued waiting for a worker position 1 in the queue"
    assert f'data-live="{analysis_id}"' in _strip(client, analysis_id) and "data-live-position" in _strip(
        client, analysis_id
    )
    state = client.get(f"/web/progress?ids={analysis_id}").json()[str(analysis_id)]
    assert (state["status"], state["stage"], state["queue_position"]) == ("queued", "waiting for a worker", 1)

    db.update(Job, job_id, status="running", stage="inspect")  # a worker took it: the poller sees it first
    state = client.get(f"/web/progress?ids={analysis_id}").json()[str(analysis_id)]
    assert (state["status"], state["stage"], state["queue_position"]) == ("running", "inspect", None)
    strip = _strip(client, analysis_id)
    assert _shown(strip).startswith("running") and "inspect" in _shown(strip) and "queue" not in _shown(strip)
    assert re.search(r"<span[^>]*data-live-position[^>]*hidden", strip), "kept for the poller, hidden and empty"


def test_a_cancelled_analysis_marks_its_unmeasured_answer(client: TestClient, db: Db):
    analysis_id, _ = _seed(db, "cancelled")
    db.update(Analysis, analysis_id, recommendation=UNMEASURED, inspection=synthetic.inspection())
    strip = _strip(client, analysis_id)
    assert _shown(strip) == "cancelled cancelled before it was measured: this answer is unmeasured"
    assert "data-live=" not in strip.replace("data-live-", ""), "an ended analysis is not polled"
    html = client.get(f"/analyses/{analysis_id}").text
    assert 'data-testid="recommended-backend">torchair:max-autotune<' in html  # the answer stays, marked
    done_id, _ = _seed(db, "done")
    assert 'data-testid="status-note"' not in _strip(client, done_id)
