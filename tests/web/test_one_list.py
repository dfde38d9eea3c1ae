"""The dashboard's list (`/`) and the API's (`GET /api/v1/analyses`) are one query (app.analysis_list): for the same
filter, sort and page they list the same analyses in the same order, ties and analyses without a job included."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from app.models import Analysis
from tests.support.web_app import Db

ROW_IDS = re.compile(r'<tr data-analysis-id="(\d+)"')


def dashboard_ids(client: TestClient, params: dict[str, str]) -> list[int]:
    response = client.get("/", params=params)
    assert response.status_code == 200, response.text
    return [int(i) for i in ROW_IDS.findall(response.text)]


def api_ids(client: TestClient, params: dict[str, str]) -> list[int]:
    response = client.get("/api/v1/analyses", params=params)
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


@pytest.fixture
def listed(client: TestClient, seeded: Db) -> TestClient:
    """The 30 seeded analyses, three of them with the same model name in other cases (ties when sorted by name,
    and a case-insensitive search), one of them in a suite, and one analysis that has no job at all."""
    for analysis_id, name in ((4, "Shared_Name"), (9, "shared_name"), (17, "SHARED_NAME")):
        seeded.update(Analysis, analysis_id, model_name=name)
    seeded.update(Analysis, 9, tag="suite-a")
    template = seeded.get(Analysis, 1)
    with seeded.session() as session:
        session.add(
            Analysis(
                id=31,
                model_name="shared_name-orphan",
                format=template.format,
                target="cpu",
                submitted_by="anonymous",
                artifact_sha256=template.artifact_sha256,
                context={"target": "cpu"},
                backends=[],
                dedupe_key="orphan",
                created_at=template.created_at,
                updated_at=template.updated_at,
            )
        )
        session.commit()
    return client


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"order": "asc"},
        {"sort": "model_name", "order": "asc"},  # ties between the three equal names go by id, ascending
        {"sort": "model_name", "order": "desc"},
        {"sort": "model", "order": "asc"},  # the dashboard's earlier sort name means the same on both
        {"sort": "speedup", "order": "asc"},  # unmeasured last in either order
        {"sort": "speedup", "order": "desc"},
        {"sort": "status", "order": "asc"},
        {"sort": "backend", "order": "desc"},
        {"sort": "submitter", "order": "asc"},
        {"sort": "target", "order": "asc"},
        {"model": "SHARED_name"},  # part of the name, case-insensitive, `_` literal
        {"model": "d%n"},  # `%` literal: matches nothing
        {"status": "done", "sort": "speedup"},
        {"status": "failed"},
        {"target": "npu", "backend": "inductor"},
        {"submitter": "alice"},
        {"tag": "suite-a"},
        {"page": "2"},
    ],
)
def test_the_dashboard_and_the_api_list_the_same_rows(listed: TestClient, params: dict[str, str]):
    query = {"per_page": "25"} | params
    dashboard, api = dashboard_ids(listed, query), api_ids(listed, query)
    assert dashboard == api
    if not params.get("model", "").startswith("d%"):
        assert api, params  # each filter above matches something: the comparison is not of two empty lists


def test_an_analysis_without_a_job_is_listed_as_failed_by_both(listed: TestClient):
    assert dashboard_ids(listed, {"model": "orphan"}) == [31]
    assert ">failed<" in listed.get("/", params={"model": "orphan"}).text
    [item] = listed.get("/api/v1/analyses", params={"model": "orphan"}).json()["items"]
    assert (item["id"], item["status"]) == (31, "failed")


def test_only_the_dashboard_clamps_a_page_past_the_last(listed: TestClient):
    """The dashboard shows its last page; the API answers an empty page (its clients page until one is empty)."""
    assert dashboard_ids(listed, {"per_page": "25", "page": "9"}) == dashboard_ids(
        listed, {"per_page": "25", "page": "2"}
    )
    page = listed.get("/api/v1/analyses", params={"per_page": 25, "page": 9}).json()
    assert (page["items"], page["total"], page["page"]) == ([], 31, 9)
