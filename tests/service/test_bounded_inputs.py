"""Bounded inputs over HTTP (issue 12): path ids outside int64 are 404 on every endpoint that takes one, and a
context with huge or deep values is a 422 naming the field, never a 500 and never an echo of the value."""

from __future__ import annotations

import json
import re

import pytest
from fastapi.testclient import TestClient

from app.path_ids import PathIdRangeMiddleware, out_of_range_id

from .test_api import submit

INT64_MAX = 2**63 - 1
DASHBOARD_ID_PATHS = [("GET", "/analyses/{analysis_id}"), ("POST", "/analyses/{analysis_id}/cancel")]


@pytest.fixture
def guarded(make_app):  # noqa: ANN001, ANN201
    """The app with PathIdRangeMiddleware (added here too until app.main registers it)."""
    app = make_app()
    if not any(middleware.cls is PathIdRangeMiddleware for middleware in app.user_middleware):
        app.add_middleware(PathIdRangeMiddleware)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def id_endpoints(client: TestClient) -> list[tuple[str, str]]:
    """(method, path template) of every API operation with an integer path id, from the OpenAPI schema, and the
    dashboard's."""
    found = []
    for path, operations in client.get("/openapi.json").json()["paths"].items():
        for method, operation in operations.items():
            parameters = operation.get("parameters", [])
            if any(p["in"] == "path" and p["schema"].get("type") == "integer" for p in parameters):
                found.append((method.upper(), path))
    return found + DASHBOARD_ID_PATHS


def test_the_schema_has_the_id_endpoints_the_issue_counted(guarded):
    assert len(id_endpoints(guarded)) >= 11


@pytest.mark.parametrize(
    "value", [str(INT64_MAX + 1), str(2**64), "9" * 5000, str(-(2**63) - 1), "1_000_000_000_000_000_000_000"]
)
def test_ids_outside_int64_are_404_everywhere(guarded, value):
    for method, template in id_endpoints(guarded):
        path = re.sub(r"\{\w+\}", value, template)
        response = guarded.request(method, path, headers={"X-Lease-Token": "t"}, json={})
        assert response.status_code == 404, (method, template, response.text[:200])
        assert response.json()["detail"].endswith("id out of range")


def test_the_largest_int64_id_is_an_ordinary_404_not_a_500(guarded):
    for method, template in id_endpoints(guarded):
        path = re.sub(r"\{\w+\}", str(INT64_MAX), template)
        response = guarded.request(method, path, headers={"X-Lease-Token": "t"}, json={"error": "x"})
        assert response.status_code in (404, 409, 422), (method, template, response.status_code, response.text[:200])


def test_only_id_segments_are_read():
    assert out_of_range_id("/api/v1/analyses/" + "9" * 30 + "/report.md") == "analysis"
    assert out_of_range_id("/api/v1/jobs/" + "9" * 30 + "/complete") == "job"
    assert out_of_range_id("/api/v1/artifacts/" + "9" * 64) is None  # a sha256 that happens to be digits
    assert out_of_range_id("/api/v1/workers/" + "9" * 30 + "/claim") is None  # worker ids are strings
    assert out_of_range_id(f"/api/v1/analyses/{INT64_MAX}") is None
    assert out_of_range_id("/api/v1/analyses/abc") is None


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"target": "cpu", "expected_calls_per_compile": ' + "9" * 5000 + "}", "expected_calls_per_compile"),
        ('{"target": "cpu", "expected_calls_per_compile": ' + "1" + "0" * 400 + "}", "expected_calls_per_compile"),
        ('{"target": "cpu", "latency_target_ms": 1e400}', "latency_target_ms"),
        ('{"target": "cpu", "shape_ranges": ' + "[" * 20_000 + "]" * 20_000 + "}", "context"),
        ('{"target": "cpu", "extra": ' + '{"a": ' * 30 + "1" + "}" * 31, "extra"),
    ],
    ids=["5000-digits", "10**400", "1e400", "deep-json", "deep-dict"],
)
def test_huge_or_deep_context_values_are_a_422_naming_the_field(guarded, model_file, raw, field):
    with open(model_file, "rb") as fh:
        response = guarded.post("/api/v1/analyze", files={"model": ("m.pt2", fh)}, data={"context": raw})
    assert response.status_code == 422, response.text[:300]
    problems = response.json()["detail"]
    assert any(problem["field"].split(".")[0] == field for problem in problems), problems
    assert len(response.content) < 2048, "a 422 never echoes the value back"


def test_the_largest_accepted_context_is_stored_and_its_pages_render(guarded, model_file):
    from advisor.core import context as ctx

    context = {
        "target": "cpu",
        "expected_calls_per_compile": ctx.MAX_CALLS_PER_COMPILE,
        "latency_target_ms": ctx.MAX_LATENCY_TARGET_MS,
        "memory_budget_mb": ctx.MAX_MEMORY_BUDGET_MB,
    }
    response = submit(guarded, model_file, context=context)
    assert response.status_code == 202, response.text
    analysis_id = response.json()["id"]
    assert guarded.get(f"/api/v1/analyses/{analysis_id}").json()["context"]["expected_calls_per_compile"] == 10**15
    assert guarded.get(f"/analyses/{analysis_id}").status_code == 200
    assert json.loads(guarded.get(f"/api/v1/analyses/{analysis_id}/report.json").text)


def test_query_ids_are_read_within_int64():
    from app.path_ids import id_or_none

    assert [id_or_none(text) for text in ("12", " 7 ", str(INT64_MAX))] == [12, 7, INT64_MAX]
    assert [id_or_none(text) for text in ("", None, "abc", "-1", str(INT64_MAX + 1), "9" * 5000)] == [None] * 6
