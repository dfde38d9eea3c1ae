"""The API's analysis typed with advisor.core.results: documented in /openapi.json, served as stored (older
shapes included), and compared on the dashboard."""

from __future__ import annotations

import copy

from sqlalchemy import select

from app.models import Analysis
from app.web.compare import compare_rows
from tests.support import synthetic_analyses as synthetic
from tests.support.older_results import OLDER_ANALYSIS

PARTS = ("inspection", "measurements", "recommendation")


def test_openapi_documents_the_results(client) -> None:
    spec = client.get("/openapi.json").json()
    for path, method in (("", "get"), ("/cancel", "post"), ("/redecide", "post")):
        response = spec["paths"][f"/api/v1/analyses/{{analysis_id}}{path}"][method]["responses"]["200"]
        assert response["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/AnalysisDetail"}
    detail = spec["components"]["schemas"]["AnalysisDetail"]["properties"]
    for part, model in zip(PARTS, ("Inspection", "MeasurementRun", "Recommendation"), strict=True):
        assert {"$ref": f"#/components/schemas/{model}"} in detail[part]["anyOf"]
    row = spec["components"]["schemas"]["MeasurementRow"]["properties"]
    assert {"backend", "status", "latency", "speedup_vs_eager"} <= set(row)


def test_results_are_served_as_stored(client, db) -> None:
    analysis_id = _seed_one(db)
    body = client.get(f"/api/v1/analyses/{analysis_id}").json()
    for part in PARTS:
        assert body[part] == getattr(db.get(Analysis, analysis_id), part), part


def test_an_analysis_stored_by_an_older_version_is_served_and_reported(client, db) -> None:
    analysis_id = _seed_one(db)
    db.update(Analysis, analysis_id, **{part: copy.deepcopy(OLDER_ANALYSIS[part]) for part in PARTS})
    body = client.get(f"/api/v1/analyses/{analysis_id}").json()
    for part in PARTS:
        assert body[part] == OLDER_ANALYSIS[part], part  # nothing added, unknown fields kept
    report = client.get(f"/api/v1/analyses/{analysis_id}/report.md")
    assert report.status_code == 200 and "| inductor:max-autotune | ok |" in report.text
    rows = compare_rows(body, synthetic.analysis_dict())
    assert any(row.section == "Backend torchair:max-autotune" and row.a == "unavailable" for row in rows)


def test_a_field_no_version_could_read_does_not_fail_the_response(client, db) -> None:
    analysis_id = _seed_one(db)
    broken = copy.deepcopy(OLDER_ANALYSIS["measurements"])
    broken["measurements"][0]["latency"] = "fast"
    db.update(Analysis, analysis_id, measurements=broken)
    body = client.get(f"/api/v1/analyses/{analysis_id}").json()
    assert "latency" not in body["measurements"]["measurements"][0]
    assert body["measurements"]["measurements"][1] == OLDER_ANALYSIS["measurements"]["measurements"][1]


def _seed_one(db) -> int:  # noqa: ANN001
    with db.session() as session:
        synthetic.seed_analyses(session, 1, statuses=("done",))
    return db.first(select(Analysis.id))
