"""One intake (app.intake) behind both ways in: the API's POST /api/v1/analyze and the dashboard's POST /upload
receive, check, store and submit through the same function, so a form means the same thing and is refused the
same way through either."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

import app.intake
from tests.support import synthetic_analyses as synthetic
from tests.web.test_upload_without_js import browser_form, incoming_files, post_upload


@pytest.fixture
def submitted(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What the intake hands to app.analyses.submit_analysis, call by call."""
    calls: list[dict[str, Any]] = []
    real = app.intake.submit_analysis

    def recording(session, queue, **fields: Any):  # noqa: ANN001, ANN202
        calls.append(fields)
        return real(session, queue, **fields)

    monkeypatch.setattr(app.intake, "submit_analysis", recording)
    return calls


def test_the_api_and_the_page_submit_the_same_form_through_the_one_intake(
    client: TestClient, submitted: list[dict[str, Any]]
) -> None:
    model = synthetic.torchscript_zip()
    api = client.post(
        "/api/v1/analyze",
        files={"model": ("tiny.pt", model)},
        data={
            "context": json.dumps({"stage": "edge", "target": "cpu"}),
            "backends": "onnxruntime,eager",
            "model_name": "both ways",
            "force": "true",
        },
    )
    assert api.status_code == 202, api.text
    page = post_upload(
        client,
        browser_form(
            model, stage="edge", target="cpu", backends="onnxruntime,eager", model_name="both ways", force="on"
        ),
    )
    assert page.status_code == 303, page.text
    through_api, through_page = submitted
    for key in ("context", "target", "model_name", "backends", "force", "tag", "source_report"):
        assert through_api[key] == through_page[key], key
    assert through_api["artifact"].sha256 == through_page["artifact"].sha256
    assert through_api["backends"] == ["eager", "onnxruntime"]


@pytest.mark.parametrize(
    ("backends", "field"),
    [("eager,<script>x</script>", "backends"), ("inductor:max-autotune", "backends")],
)
def test_a_hostile_field_is_refused_the_same_way_through_either_with_nothing_submitted(
    client: TestClient, submitted: list[dict[str, Any]], backends: str, field: str
) -> None:
    model = synthetic.torchscript_zip()
    api = client.post(
        "/api/v1/analyze",
        files={"model": ("tiny.pt", model)},
        data={"context": json.dumps({"target": "cpu"}), "backends": backends},
    )
    assert api.status_code == 422
    [problem] = api.json()["detail"]
    assert problem["field"] == field
    page = post_upload(client, browser_form(model, target="cpu", backends=backends))
    assert page.status_code == 422
    assert "unknown backend(s)" in problem["message"] and "unknown backend(s)" in page.text
    assert "<script>x</script>" not in page.text  # the page shows the intake's message escaped
    assert submitted == [] and incoming_files(client) == []
