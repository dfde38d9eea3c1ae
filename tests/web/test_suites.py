"""Model suites: a tag on submissions, its summary per option (geomean speedup, pass rate, compile time, memory)
and its history with regressions, on the dashboard and over the API."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

from fastapi.testclient import TestClient

from app.models import Analysis
from tests.support import synthetic_analyses as synthetic
from tests.support.web_app import Db

CONTEXT = {"stage": "production", "target": "cpu", "expected_calls_per_compile": 100_000}
HOSTILE = "<script>alert(9)</script>"


def submit(client: TestClient, model_name: str, **fields: str):
    return client.post(
        "/api/v1/analyze",
        data={"context": json.dumps(CONTEXT), "model_name": model_name, **fields},
        files={"model": ("tiny.pt", synthetic.torchscript_zip(), "application/octet-stream")},
    )


def measured(db: Db, analysis_id: int, day: int, speedups: dict[str, float], failed: tuple[str, ...] = ()) -> None:
    """Store a finished run on the analysis: eager plus one row per option with its speedup (2 ms eager)."""
    rows = [synthetic.measurement("eager", "default", 2.0, 0.0, 2.0)]
    for label, speedup in speedups.items():
        backend, mode = label.split(":")
        row = synthetic.measurement(backend, mode, 2.0 / speedup, 10.0, 2.0)
        row["peak_memory_mb"] = 80.0  # eager's is 40: twice eager's memory
        if label in failed:
            row["status"], row["reason"] = "compile_error", "no lowering"
        rows.append(row)
    rows.append({**synthetic.measurement("onnxruntime", "default", 1.0, 1.0, 2.0), "status": "unavailable"})
    run = {**synthetic.run(), "measurements": rows}
    at = datetime(2026, 12, day, 9, 0, tzinfo=UTC)
    db.update(
        Analysis,
        analysis_id,
        measurements=run,
        created_at=at,
        recommended_backend="inductor",
        recommended_mode="default",
    )


def suite_of_three(client: TestClient, db: Db) -> dict[str, int]:
    """Day 1: three models; day 2: model b again, slower under inductor:default and failing max-autotune."""
    ids = {}
    for name in ("a", "b", HOSTILE):
        response = submit(client, name, tag="nightly-cv", force="true")
        assert response.status_code == 202, response.text
        ids[name] = response.json()["id"]
    measured(db, ids["a"], 1, {"inductor:default": 2.0, "inductor:max-autotune": 4.0})
    measured(db, ids["b"], 1, {"inductor:default": 8.0, "inductor:max-autotune": 4.0})
    measured(db, ids[HOSTILE], 1, {"inductor:default": 1.0}, failed=("inductor:default",))
    again = submit(client, "b", tag="nightly-cv", force="true").json()["id"]
    measured(db, again, 2, {"inductor:default": 2.0, "inductor:max-autotune": 4.0}, failed=("inductor:max-autotune",))
    ids["b again"] = again
    return ids


def test_the_summary_uses_each_models_latest_analysis_and_the_history_shows_the_regression(client: TestClient, db: Db):
    ids = suite_of_three(client, db)
    suite = client.get("/api/v1/suites/nightly-cv").json()
    options = {o["label"]: o for o in suite["options"]}
    assert list(options) == ["eager:default", "inductor:default", "inductor:max-autotune"]  # onnxruntime: unavailable
    default = options["inductor:default"]  # latest: a 2.0x, b (day 2) 2.0x, the hostile one failed
    assert (default["attempted"], default["passed"]) == (3, 2) and math.isclose(default["pass_rate"], 2 / 3)
    assert math.isclose(default["geomean_speedup"], 2.0) and math.isclose(default["memory_vs_eager"], 2.0)
    assert math.isclose(default["median_compile_s"], 10.0)
    autotune = options["inductor:max-autotune"]  # a passed, b (day 2) failed
    assert (autotune["attempted"], autotune["passed"], autotune["geomean_speedup"]) == (2, 1, 4.0)
    assert [m["analysis_id"] for m in suite["models"] if m["model_name"] == "b"] == [ids["b again"]]
    day1, day2 = suite["history"]
    assert (day1["day"], day1["models"], day2["models"]) == ("2026-12-01", 3, 1)
    day1_default = next(o for o in day1["options"] if o["label"] == "inductor:default")
    assert math.isclose(day1_default["geomean_speedup"], 4.0)  # sqrt(2 * 8)
    assert {(r["option"], r["what"]) for r in suite["regressions"]} == {
        ("inductor:default", "geomean speedup 4.00x -> 2.00x"),
        ("inductor:max-autotune", "pass rate 100% -> 0%"),
    }


def test_suite_page_draws_history_and_regressions_with_user_text_escaped(client: TestClient, db: Db):
    ids = suite_of_three(client, db)
    html = client.get("/suites/nightly-cv").text
    assert HOSTILE not in html and "&lt;script&gt;alert(9)&lt;/script&gt;" in html
    assert 'class="chart series-chart"' in html and html.count("<polyline") == 1  # one option has 2 points
    assert "inductor:default</strong> geomean speedup 4.00x -&gt; 2.00x" in html
    assert '<tr data-option="inductor:default">' in html and "67%" in html
    assert f'href="/analyses/{ids["b again"]}"' in html and f'href="/analyses/{ids["b"]}"' not in html
    listing = client.get("/suites").text
    assert 'href="/suites/nightly-cv"' in listing and ">3</td>" in listing  # 3 models
    assert 'data-testid="suite-link">nightly-cv<' in client.get(f"/analyses/{ids['a']}").text


def test_a_tag_is_checked_and_keeps_its_own_dedupe(client: TestClient, db: Db):
    for hostile in (HOSTILE, "x" * 65, "-starts-with-dash", "has space", "../etc"):
        refused = submit(client, "m", tag=hostile)
        assert refused.status_code == 422 and refused.json()["detail"][0]["field"] == "tag", hostile
    first = submit(client, "m", tag="suite-a").json()
    assert submit(client, "m", tag="suite-a").json() == {**first, "status": first["status"], "deduplicated": True}
    other = submit(client, "m", tag="suite-b").json()  # the same question in another suite is measured for it
    untagged = submit(client, "m").json()
    assert len({first["id"], other["id"], untagged["id"]}) == 3 and not other["deduplicated"]
    assert db.get(Analysis, other["id"]).tag == "suite-b" and db.get(Analysis, untagged["id"]).tag is None
    again = client.post(f"/api/v1/analyses/{first['id']}/rerun")  # a re-run stays in its suite
    assert again.status_code == 202 and db.get(Analysis, again.json()["id"]).tag == "suite-a"
    listed = client.get("/api/v1/analyses", params={"tag": "suite-a", "sort": "created_at", "order": "asc"}).json()
    assert [item["id"] for item in listed["items"]] == [first["id"], again.json()["id"]]
    assert {item["tag"] for item in listed["items"]} == {"suite-a"}


def test_unknown_suite_is_404_and_a_suite_without_measurements_says_so(client: TestClient, db: Db):
    assert client.get("/api/v1/suites/none-such").status_code == 404
    assert client.get("/suites/none-such").status_code == 404
    assert submit(client, "m", tag="waiting").status_code == 202
    html = client.get("/suites/waiting").text
    assert "No speedups measured yet." in html
    assert client.get("/api/v1/suites/waiting").json()["options"] == []
