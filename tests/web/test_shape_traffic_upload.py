"""Shape traffic through the dashboard's upload form and the API (issue 43): JSON Lines of calls pasted into the
form are aggregated into the context; a bad line is named at the field with nothing stored."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient
from sqlalchemy import select

from app.models import Analysis, Artifact
from tests.support import synthetic_analyses as synthetic
from tests.support.web_app import Db
from tests.web.test_upload_without_js import browser_form, incoming_files, post_upload

CALLS = '{"ids": [1, 61]}\n{"ids": [1, 9], "count": 4}\n{"ids": [1, 61]}\n'


def test_json_lines_in_the_form_become_the_contexts_traffic(client: TestClient, db: Db) -> None:
    html = client.get("/upload").text
    assert 'name="ctx.shape_traffic" data-kind="jsonl"' in html and 'name="ctx.max_graphs"' in html
    response = post_upload(client, browser_form(synthetic.torchscript_zip(), shape_traffic=CALLS, max_graphs="4"))
    assert response.status_code == 303, response.text
    [analysis] = db.all(select(Analysis))
    assert analysis.context["shape_traffic"] == [
        {"shapes": {"ids": [1, 9]}, "weight": 4},
        {"shapes": {"ids": [1, 61]}, "weight": 2},
    ]
    assert analysis.context["max_graphs"] == 4


def test_the_aggregate_is_taken_as_json_too(client: TestClient, db: Db) -> None:
    traffic = [{"shapes": {"batch.input_ids": [2, 7]}, "weight": 3}]
    response = post_upload(client, browser_form(synthetic.torchscript_zip(), shape_traffic=json.dumps(traffic)))
    assert response.status_code == 303, response.text
    [analysis] = db.all(select(Analysis))
    assert analysis.context["shape_traffic"] == traffic


def test_a_bad_line_is_named_at_the_field_and_nothing_is_stored(client: TestClient, db: Db) -> None:
    bad = '{"ids": [1, 61]}\n{"ids": [1, -2]}\n'
    response = post_upload(client, browser_form(synthetic.torchscript_zip(), shape_traffic=bad))
    assert response.status_code == 422
    slot = response.text[response.text.index('data-error-for="shape_traffic"') :]
    assert "line 2: ids: every size must be an integer from 1" in slot.split("</span>")[0]
    assert db.all(select(Analysis)) == [] and db.all(select(Artifact)) == []
    assert incoming_files(client) == []


def test_the_api_refuses_traffic_over_the_bound_of_distinct_shapes(client: TestClient, db: Db) -> None:
    traffic = "".join(json.dumps({"x": [n]}) + "\n" for n in range(1, 300))
    response = post_upload(client, browser_form(synthetic.torchscript_zip(), shape_traffic=traffic))
    assert response.status_code == 422
    assert "line 257: more than 256 distinct shapes" in response.text
    assert db.all(select(Analysis)) == []
