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
    checkboxes only when checked. `ctx` overrides a context field (`"on"` ticks a checkbox); `model_name`,
    `force`, `backends` and `calibration` (the file's bytes) are passed the same way."""
    model_name = ctx.pop("model_name", "")
    force = ctx.pop("force", None)
    calibration = ctx.pop("calibration", None)
    parts: list = [
        ("model", (filename if model is not None else "", model or b"", "application/octet-stream")),
        ("model_name", (None, model_name)),
        ("inputs", ("", b"", "application/octet-stream")),
        ("backends", (None, ctx.pop("backends", ""))),
        ("calibration", ("calibration.npz" if calibration is not None else "", calibration or b"", "application/zip")),
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
    from app.multipart_form import MAX_PARTS

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


# ------------------------------------------------------------------ backends and the calibration file (issue 31)
def _npz(**arrays) -> bytes:  # noqa: ANN003
    import io

    import numpy as np

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def test_the_form_offers_every_backend_and_int8_mode_the_api_accepts_and_a_calibration_file(client: TestClient):
    from app.intake import backend_choices

    html = client.get("/upload").text
    assert 'name="backends"' in html and 'data-error-for="backends"' in html
    assert '<input type="file" name="calibration" accept=".npz"' in html and 'data-error-for="calibration"' in html
    for choice in backend_choices():
        assert choice in html
    assert "measured only when named: inductor:pt2e-int8, onnxruntime:int8, openvino:int8" in html


def test_int8_modes_and_a_calibration_file_reach_the_analysis_like_through_the_api(client: TestClient, db: Db):
    np = __import__("pytest").importorskip("numpy")
    samples = _npz(input0=np.zeros((2, 1, 4), np.float32))
    parts = browser_form(
        synthetic.torchscript_zip(),
        backends=" onnxruntime:int8, openvino:int8,eager ",
        calibration=samples,
        target="cpu",  # CPU options: under the default target (npu) they are refused at their field (below)
    )
    response = post_upload(client, parts)
    assert response.status_code == 303, response.text
    [analysis] = db.all(select(Analysis))
    assert analysis.backends == ["eager", "onnxruntime:int8", "openvino:int8"]  # as the API stores them: sorted
    calibration = db.all(select(Artifact).where(Artifact.kind == "calibration"))
    assert [a.sha256 for a in calibration] == [analysis.calibration_sha256] and analysis.calibration_sha256
    # left empty, the two fields change nothing: no backends named, no calibration file stored
    response = post_upload(client, browser_form(synthetic.torchscript_zip(), model_name="plain", force="on"))
    assert response.status_code == 303, response.text
    plain = db.all(select(Analysis).where(Analysis.model_name == "plain"))[0]
    assert plain.backends in ([], None) and plain.calibration_sha256 is None


def test_an_unknown_backend_with_markup_is_named_at_its_field_escaped_with_nothing_stored(client: TestClient, db: Db):
    for hostile in (f"onnxruntime,{HOSTILE}", "onnxruntime:fp16", "eager:int8"):
        response = post_upload(client, browser_form(synthetic.torchscript_zip(), backends=hostile))
        assert response.status_code == 422 and response.headers["content-type"].startswith("text/html")
        html = response.text
        slot = html[html.index('data-error-for="backends">') :]
        assert slot.startswith('data-error-for="backends">unknown backend(s) ')
        assert HOSTILE not in html and "Traceback" not in html
        assert (HOSTILE in hostile) == ("&lt;script&gt;alert(1)&lt;/script&gt;" in html)  # named escaped, kept escaped
    assert "the int8 ones, which are named: inductor:pt2e-int8, onnxruntime:int8, openvino:int8" in html
    assert db.all(select(Analysis)) == [] and db.all(select(Artifact)) == [] and incoming_files(client) == []


def test_a_garbage_pickled_or_oversized_calibration_file_is_named_at_its_field_with_nothing_stored(
    client: TestClient, db: Db
):
    import os
    import pickle

    from advisor.core.calibration import MAX_CALIBRATION_BYTES

    garbage = os.urandom(4096).replace(b"PK", b"pk")
    refusals = {
        "not an .npz": garbage,
        "pickle": pickle.dumps({"input0": [1.0]}),
        "too large": b"PK\x03\x04" + bytes(MAX_CALIBRATION_BYTES),  # one byte over: stopped while it streams in
    }
    for expected, payload in refusals.items():
        response = post_upload(client, browser_form(synthetic.torchscript_zip(), calibration=payload))
        assert response.status_code == 422, (expected, response.text[:500])
        html = response.text
        slot = html[html.index('data-error-for="calibration">') :]
        assert expected in slot[: slot.index("</span>")], (expected, slot[:300])
        assert "choose the model file (and the inputs and calibration files) again" in html
    assert db.all(select(Analysis)) == [] and db.all(select(Artifact)) == [] and incoming_files(client) == []


def test_an_option_that_cannot_run_on_the_target_is_named_at_the_backends_field_with_nothing_stored(
    client: TestClient, db: Db
):
    parts = browser_form(synthetic.torchscript_zip(), backends="eager,onnxruntime:int8", target="npu")
    response = post_upload(client, parts)
    assert response.status_code == 422 and response.headers["content-type"].startswith("text/html")
    slot = response.text[response.text.index('data-error-for="backends">') :]
    assert slot.startswith('data-error-for="backends">onnxruntime:int8 runs on cpu only, not on this analysis')
    assert "--target cpu" in slot[: slot.index("</span>")]
    assert db.all(select(Analysis)) == [] and db.all(select(Artifact)) == []
