"""Plausible numbers only: a completion or ranking whose numbers no measurement can produce (sub-nanosecond or
non-positive times, a speedup beyond MAX_SPEEDUP, a CI without its median, NaN/Infinity) is a 422 naming the field,
changes nothing of the job, and the job names the worker that sent it (a `results_refused` event)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from sqlalchemy import select
from sqlmodel import Session

from app.models import JobEvent
from app.results import MAX_SPEEDUP, MIN_CALL_MS
from tests.support.fixtures_decide import inspection, measurement, run

from .test_completion_binding import assert_unchanged, job_row, leased, post
from .test_ranked_results import post_ranked, ranking_of


def results(lease: dict, *, median_ms: float, eager_ms: float = 10.0) -> dict:
    """An honest-looking upload whose inductor row has `median_ms` (its speedup and CI computed from it, as the
    harness does)."""
    return {
        "inspection": inspection() | {"artifact_sha256": lease["job"]["artifact_sha256"]},
        "measurements": run(
            measurement("eager", median_ms=eager_ms, compile_s=None),
            measurement("inductor", median_ms=median_ms, compile_s=8.0, eager_ms=eager_ms),
            device="cpu",
        ),
    }


def inductor(body: dict) -> dict:
    return body["measurements"]["measurements"][1]


def set_latency(**values: float) -> Callable[[dict], None]:
    return lambda body: inductor(body)["latency"].update(values)


ROW = "measurements.measurements.1"
IMPOSSIBLE = {
    # the case: a 1e-300 ms median, its speedup computed consistently from it
    "sub-nanosecond-median": (lambda lease: results(lease, median_ms=1e-300), f"{ROW}.latency.median_ms"),
    "half-a-nanosecond": (lambda lease: results(lease, median_ms=MIN_CALL_MS / 2), f"{ROW}.latency.median_ms"),
    "zero-median": (lambda lease: spoiled(lease, set_latency(median_ms=0.0)), f"{ROW}.latency.median_ms"),
    "negative-mean": (lambda lease: spoiled(lease, set_latency(mean_ms=-5.0)), f"{ROW}.latency.mean_ms"),
    "nan-median": (lambda lease: spoiled(lease, set_latency(median_ms=math.nan)), f"{ROW}.latency.median_ms"),
    "infinite-p99": (lambda lease: spoiled(lease, set_latency(p99_ms=math.inf)), f"{ROW}.latency.p99_ms"),
    # 10 ns against eager's 10 ms: each time possible, the ratio (1e6) beyond any graph mode's gain
    "speedup-beyond-bound": (lambda lease: results(lease, median_ms=1e-5), f"{ROW}.speedup_vs_eager"),
    "ci-above-median": (lambda lease: spoiled(lease, set_latency(ci_low_ms=6.0, ci_high_ms=7.0)), f"{ROW}.latency"),
    "ci-below-median": (lambda lease: spoiled(lease, set_latency(ci_low_ms=1.0, ci_high_ms=2.0)), f"{ROW}.latency"),
    "infinite-speedup": (lambda lease: spoiled(lease, lambda b: inductor(b).update(speedup_vs_eager=math.inf)), ROW),
}


def spoiled(lease: dict, change: Callable[[dict], None]) -> dict:
    body = results(lease, median_ms=5.0)
    change(body)
    return body


def refusals(client, job_id: int) -> list[JobEvent]:  # noqa: ANN001
    with Session(client.app.state.engine) as session:
        query = select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.type == "results_refused")
        return list(session.scalars(query.order_by(JobEvent.id)))


@pytest.mark.parametrize("route", ["complete", "ranked"])
@pytest.mark.parametrize("case", sorted(IMPOSSIBLE))
def test_impossible_numbers_are_a_422_naming_the_field_and_the_job_names_the_sender(client, model_file, case, route):
    analysis_id, lease = leased(client, model_file)
    make, field = IMPOSSIBLE[case]
    body = make(lease)
    answer = post(client, lease, body) if route == "complete" else post_ranked(client, lease, ranking_of(body))
    assert answer.status_code == 422, answer.text
    fields = [problem["field"] for problem in answer.json()["detail"]]
    assert any(name.startswith(field) for name in fields), fields
    assert_unchanged(client, lease, analysis_id)
    (event,) = refusals(client, lease["job"]["id"])
    assert event.worker_id == job_row(client, lease["job"]["id"]).worker_id is not None and event.attempt == 1
    assert event.detail["route"] == route and event.detail["problems"] == answer.json()["detail"]
    (summary,) = client.get("/api/v1/analyses").json()["items"]
    assert summary["id"] == analysis_id and summary["speedup_vs_eager"] is None


def test_the_bound_is_stated_and_fast_but_possible_numbers_are_kept(client, model_file):
    """A microsecond call 10,000 times faster than eager's 10 ms: extreme, possible, stored as measured."""
    assert MIN_CALL_MS == 1e-6 and MAX_SPEEDUP == 1e5
    analysis_id, lease = leased(client, model_file)
    ranked = post_ranked(client, lease, ranking_of(results(lease, median_ms=1e-3)))
    assert ranked.status_code == 200, ranked.text
    done = post(client, lease, results(lease, median_ms=1e-3))
    assert done.status_code == 200 and done.json()["status"] == "done", done.text
    (summary,) = client.get("/api/v1/analyses").json()["items"]
    assert summary["id"] == analysis_id and summary["speedup_vs_eager"] == pytest.approx(1e4)
    assert refusals(client, lease["job"]["id"]) == []
