"""The upload page without JavaScript: the browser posts the form (one part per context field) to POST /upload,
which folds the `ctx.*` fields into the API's context and submits through the API's own code path."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlmodel import Session

from advisor.core.context import parse_context
from app.main import create_app
from app.models import Analysis, Artifact
from app.web.upload_form import context_form_fields
from tests.support import synthetic_analyses as synthetic
from tests.support.web_app import Db, make_settings

OWN_PAGE = {"Origin": "http://127.0.0.1:8000"}
HOSTILE = "<script>alert(1)</script>"


def browser_form(model: bytes | None, filename: str = "tiny.pt", **ctx: str) -> list:
    """The parts a browser without script sends for the upload form, in document order: file inputs always
    (an empty, unnamed part when left empty), text inputs and selects always (selects at their shown choice),
    checkboxes only when checked. `ctx` overrides a context field (`"on"` ticks a checkbox); `model_name` and
    `force` are passed the same way."""
    model_name = ctx.pop("model_name", "")
    force = ctx.pop("force", None)
    parts: list = [
        ("model", (filename if model is not None else "", model or b"", "application/octet-stream")),
        ("model_name", (None, model_name)),
        ("inputs", ("", b"", "application/octet-stream")),
    ]
    if force:
        parts.append(("force", (None, "true")))
    for field in context_form_fields():
        value = ctx.pop(field.name, None)
        if field.kind == "checkbox":
            if value if value is not None else field.default:
                parts.append((field.input_name, (None, "true")))
        else:
            parts.append(
                (
                    field.input_name,
                    (None, value if value is not None else field.default_text if field.kind == "choice" else ""),
                )
            )
    assert not ctx, f"not context fields: {ctx}"
    return parts


def post_upload(client: TestClient, parts: list, headers: dict | None = None):
    return client.post("/upload", files=parts, headers=OWN_PAGE if headers is None else headers, follow_redirects=False)


def incoming_files(client: TestClient) -> list:
    return [p for p in client.app.state.store.incoming.iterdir() if p.is_file()]


def test_the_form_posts_to_the_page_without_script(client: TestClient):
    html = client.get("/upload").text
    assert '<form id="upload-form" method="post" action="/upload"' in html
    assert 'enctype="multipart/form-data"' in html and "<noscript>" not in html


def test_a_plain_form_post_creates_the_analysis_and_redirects_to_it(client: TestClient, db: Db):
    parts = browser_form(
        synthetic.torchscript_zip(),
        stage="edge",
        target="cpu",
        needs_offline_export="on",
        latency_target_ms="",
        model_name="no script",
    )
    response = post_upload(client, parts)
    assert response.status_code == 303, response.text
    [analysis] = db.all(select(Analysis))
    assert response.headers["location"] == f"/analyses/{analysis.id}"
    expected = parse_context({"stage": "edge", "target": "cpu", "needs_offline_export": True}).model_dump(mode="json")
    assert analysis.context == expected
    assert analysis.context["latency_target_ms"] is None and analysis.context["resource_constrained"] is False
    assert analysis.model_name == "no script" and analysis.target == "cpu" and analysis.inputs_sha256 is None
    assert "waiting for a worker" in client.get(response.headers["location"]).text
    assert incoming_files(client) == []


def test_numbers_json_and_every_checkbox_are_folded_like_the_script_does(client: TestClient, db: Db):
    from app.upload_form import MAX_PARTS

    ranges = [{"input": "x", "dim": 0, "min": 1, "max": 8}]
    checkboxes = {f.name: "on" for f in context_form_fields() if f.kind == "checkbox"}
    parts = browser_form(
        synthetic.torchscript_zip(),
        expected_calls_per_compile="5000",
        memory_budget_mb="512.5",
        shape_ranges=json.dumps(ranges),
        force="on",
        **checkboxes,
    )
    assert len(parts) > MAX_PARTS  # the whole form: more parts than the API takes (the page has its own cap)
    response = post_upload(client, parts)
    assert response.status_code == 303, response.text
    [analysis] = db.all(select(Analysis))
    expected = {"expected_calls_per_compile": 5000, "memory_budget_mb": 512.5, "shape_ranges": ranges}
    expected |= dict.fromkeys(checkboxes, True)
    assert analysis.context == parse_context(expected).model_dump(mode="json")
    assert analysis.model_name == "tiny"  # the file name when no name is given


def test_a_bad_field_value_shows_the_form_again_with_its_message(client: TestClient, db: Db):
    parts = browser_form(
        synthetic.torchscript_zip(),
        expected_calls_per_compile="0",
        stage="edge",
        resource_constrained="on",
        model_name=HOSTILE,
    )
    response = post_upload(client, parts)
    assert response.status_code == 422 and response.headers["content-type"].startswith("text/html")
    html = response.text
    slot = html[html.index('data-error-for="expected_calls_per_compile"') :]
    assert slot.startswith('data-error-for="expected_calls_per_compile">Input should be greater than or equal to 1<')
    assert "Fix the fields marked below." in html
    # what was entered is kept (and escaped)
    assert '<option value="edge" selected>' in html
    assert 'name="ctx.resource_constrained" value="true" data-kind="checkbox"' in html
    assert (
        'id="ctx-resource_constrained" name="ctx.resource_constrained" value="true" data-kind="checkbox" '
        'aria-describedby="help-resource_constrained" checked>' in html
    )
    assert 'value="0"' in html
    assert HOSTILE not in html and 'value="&lt;script&gt;alert(1)&lt;/script&gt;"' in html
    assert "Traceback" not in html
    assert db.all(select(Analysis)) == [] and db.all(select(Artifact)) == []
    assert incoming_files(client) == []


def test_text_that_is_not_a_number_or_not_json_is_named(client: TestClient, db: Db):
    parts = browser_form(synthetic.torchscript_zip(), latency_target_ms="fast", accuracy_tolerance="{oops")
    response = post_upload(client, parts)
    assert response.status_code == 422
    assert 'data-error-for="latency_target_ms">not a number<' in response.text
    assert 'data-error-for="accuracy_tolerance">not valid JSON' in response.text
    assert ">{oops</textarea>" in response.text
    assert db.all(select(Analysis)) == []


def test_a_non_model_file_gets_the_sniffers_message(client: TestClient, db: Db):
    response = post_upload(client, browser_form(b"hello", filename="notes.txt"))
    assert response.status_code == 415 and response.headers["content-type"].startswith("text/html")
    assert "not a model archive" in response.text
    assert db.all(select(Analysis)) == [] and incoming_files(client) == []


def test_no_model_file_is_named_at_the_model_field(client: TestClient, db: Db):
    response = post_upload(client, browser_form(None))
    assert response.status_code == 422
    assert 'data-error-for="model">Field required: the model file<' in response.text
    assert db.all(select(Analysis)) == []


def test_a_model_over_the_limit_is_413_on_the_page(tmp_path):
    app = create_app(make_settings(tmp_path, max_upload_mb=1))
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        big = synthetic.torchscript_zip() + b"\0" * (2 << 20)
        response = post_upload(client, browser_form(big))
        assert response.status_code == 413 and response.headers["content-type"].startswith("text/html")
        assert "the model file is larger than the server&#39;s limit of 1 MiB" in response.text
        assert incoming_files(client) == []


def test_a_cross_site_post_is_refused_like_the_other_page_posts(client: TestClient, db: Db):
    response = post_upload(
        client, browser_form(synthetic.torchscript_zip()), headers={"Origin": "https://evil.example"}
    )
    assert response.status_code == 403 and "cross-site form post refused" in response.text
    assert db.all(select(Analysis)) == []


def test_a_locked_server_needs_a_signed_in_user_and_proof_of_origin(locked):
    client, user, worker = locked
    form = browser_form(synthetic.torchscript_zip())
    anonymous = post_upload(client, form)
    assert anonymous.status_code == 303 and anonymous.headers["location"].startswith("/login")
    assert client.post("/login", data={"token": worker}).status_code == 403  # a worker token cannot sign in
    assert post_upload(client, form).status_code == 303  # so the post is still anonymous: to /login
    client.post("/login", data={"token": user})
    assert post_upload(client, form, headers={}).status_code == 403  # signed in by cookie: Origin required
    signed = post_upload(client, form)
    assert signed.status_code == 303 and signed.headers["location"].startswith("/analyses/")
    analysis_id = int(signed.headers["location"].rsplit("/", 1)[1])
    with Session(client.app.state.engine) as session:
        assert session.get(Analysis, analysis_id).submitted_by == "alice"
