"""The source-side report on the server (issue 28 item 2): `analyze FILE.py:factory --server` uploads it with the
exported program; the server validates it (bounds, types, no unknown fields: 422 naming the field otherwise), stores
it with the analysis, decides with it, and shows it labelled and escaped on the page and in the reports.

The round trip runs the real CLI on a real small model (tests/source_models/logged.py: a graph break at line 16 that
torch.export does not mind) against the app in this process; the test is the worker. The hostile reports go through
the API directly."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import threading
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from advisor.core.source_report import MAX_UPLOAD_BYTES, SOURCE_LABEL, parse_source_report
from tests.core.test_source_rules import REPORT
from tests.support.fixtures_decide import inspection, measurement, run

MODELS = Path(__file__).resolve().parent.parent / "source_models"
CPU_CONTEXT = {"stage": "production", "target": "cpu"}
HOSTILE = "<script>alert(1)</script>"
LONGEST = {"reason": "r" * 2000, "explanation": "e" * 2000, "hints": ["h" * 2000] * 8}  # each text at its bound


def submit(client, model_file: Path, report, **form):  # noqa: ANN001, ANN003, ANN201
    data = {"context": json.dumps(CPU_CONTEXT), **form}
    if report is not None:
        data["source_report"] = report if isinstance(report, str) else json.dumps(report)
    with open(model_file, "rb") as fh:
        return client.post("/api/v1/analyze", files={"model": ("mlp.pt2", fh)}, data=data)


def finish_as_worker(client, analysis_id: int) -> None:  # noqa: ANN001
    """Register a CPU worker, claim the analysis' job and complete it with eager + Inductor measurements."""
    worker = client.post(
        "/api/v1/workers/register",
        json={"name": "w", "device_kind": "cpu", "backends": ["eager", "inductor"], "environment": {}},
    ).json()["worker_id"]
    lease = client.post(f"/api/v1/workers/{worker}/claim", params={"wait": 0}).json()
    job = lease["job"]
    assert job["analysis_id"] == analysis_id
    results = {
        "inspection": inspection() | {"artifact_sha256": job["artifact_sha256"]},
        "measurements": run(
            measurement("eager", median_ms=10.0, compile_s=None),
            measurement("inductor", median_ms=5.0, compile_s=8.0),
            device="cpu",
        ),
    }
    headers = {"X-Lease-Token": lease["lease_token"]}
    done = client.post(f"/api/v1/jobs/{job['id']}/complete", headers=headers, json=results)
    assert done.status_code == 200, done.text


def caveat_issues(analysis: dict) -> list[str]:
    return [c["issue"] for c in analysis["recommendation"]["caveats"]]


# ------------------------------------------------------------------------------------------ round trip
def test_cli_round_trip_with_a_real_model(client, monkeypatch, tmp_path):  # noqa: ANN001
    """`analyze tests/source_models/logged.py:make --server URL --wait`: the factory runs here, the program and the
    report go to the server, a worker measures the program, and the server's decision names the graph break at line
    16; the CLI's report (rendered from the stored analysis) lists the report labelled, as the page does."""
    import advisor.cli.remote
    from advisor.cli import app as cli

    def forward(request: httpx.Request) -> httpx.Response:  # the CLI's requests, to the app in this process
        answer = client.request(
            request.method, request.url.raw_path.decode(), headers=dict(request.headers), content=request.read()
        )
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    real = advisor.cli.remote.AdvisorClient
    monkeypatch.setattr(
        advisor.cli.remote,
        "AdvisorClient",
        lambda server, token, **options: real(server, token, transport=httpx.MockTransport(forward), **options),
    )
    spec = f"{os.path.relpath(MODELS / 'logged.py')}:make"
    out = tmp_path / "logged.pt2"
    args = ["analyze", spec, "--server", "http://testserver", "--target", "cpu", "--export-to", str(out)]
    result: dict = {}

    def analyze() -> None:
        result["cli"] = CliRunner().invoke(cli, [*args, "--format", "markdown"])

    thread = threading.Thread(target=analyze)
    thread.start()
    deadline = time.monotonic() + 300
    while not (items := client.get("/api/v1/analyses").json()["items"]):
        assert thread.is_alive() and time.monotonic() < deadline, result.get("cli") and result["cli"].output
        time.sleep(0.2)
    analysis_id = items[0]["id"]
    finish_as_worker(client, analysis_id)
    thread.join(timeout=120)
    assert not thread.is_alive()
    output = result["cli"]
    assert output.exit_code == 0, output.output
    assert "does not store" not in output.output

    stored = client.get(f"/api/v1/analyses/{analysis_id}").json()
    report = stored["source_report"]
    assert report["factory"] == spec
    (item,) = report["graph_breaks"]["breaks"]
    assert (item["file"], item["line"]) == (os.path.relpath(MODELS / "logged.py"), 16)
    assert "source_report" not in stored["inspection"]  # the worker's inspection stays the worker's
    (breaks,) = [issue for issue in caveat_issues(stored) if "graph break" in issue]
    assert breaks.startswith(f"1 graph break(s) in {os.path.relpath(MODELS / 'logged.py')}")
    assert "Fix line 16 first" in breaks and SOURCE_LABEL in breaks

    markdown = output.stdout  # the CLI's report, from the stored analysis
    assert f"Your code {spec} ({SOURCE_LABEL}; torch " in markdown
    assert "Fix line 16 first" in markdown
    md = client.get(f"/api/v1/analyses/{analysis_id}/report.md").text
    assert md.rstrip("\n") == markdown.rstrip("\n")  # the server's report.md says the same
    as_json = client.get(f"/api/v1/analyses/{analysis_id}/report.json").json()
    assert as_json["source_report_label"] == SOURCE_LABEL
    assert as_json["inspection"]["source_report"]["graph_breaks"]["break_count"] == 1
    assert as_json["measurements"]["measurements"][0]["backend"] == "eager"  # next to the worker's measurements
    page = client.get(f"/analyses/{analysis_id}").text
    assert SOURCE_LABEL in page and 'id="source-report"' in page
    assert "logged.py:16 in forward: Failed to trace builtin operator" in page


# ------------------------------------------------------------------------------------------ decision, reports, page
def test_the_server_decides_with_the_report_and_shows_it_escaped(client, model_file):  # noqa: ANN001
    hostile = copy.deepcopy(REPORT)
    hostile["factory"] = f"model.py:{HOSTILE}"[:300]
    hostile["graph_breaks"]["breaks"][0]["code"] = f"if x.sum() > 0:  # {HOSTILE}"
    hostile["graph_breaks"]["breaks"][1]["kind"] = '<img src=x onerror="alert(2)">'
    response = submit(client, model_file, hostile)
    assert response.status_code == 202, response.text
    analysis_id = response.json()["id"]
    finish_as_worker(client, analysis_id)

    stored = client.get(f"/api/v1/analyses/{analysis_id}").json()
    assert stored["source_report"] == parse_source_report(hostile).model_dump(mode="json")  # as sent, validated
    issues = caveat_issues(stored)
    (breaks,) = [issue for issue in issues if "graph break" in issue]
    assert breaks.startswith("3 graph break(s) in model.py") and "Fix lines 41 and 57 first" in breaks
    assert any("compiled again" in issue for issue in issues)  # the recompile, with the failed guard

    page = client.get(f"/analyses/{analysis_id}").text
    assert SOURCE_LABEL in page
    assert HOSTILE not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;img src=x" in page

    markdown = client.get(f"/api/v1/analyses/{analysis_id}/report.md").text
    assert f"({SOURCE_LABEL}; torch 2.13.0):" in markdown
    assert "1\\. model.py:41 in forward: Data-dependent branching (x2)" in markdown  # no nested list
    assert HOSTILE not in markdown and "&lt;script&gt;alert(1)&lt;/script&gt;" in markdown  # not HTML in report.md

    redecided = client.post(f"/api/v1/analyses/{analysis_id}/redecide").json()
    assert any("graph break" in issue for issue in caveat_issues(redecided))  # re-deciding keeps reading it
    rerun = client.post(f"/api/v1/analyses/{analysis_id}/rerun").json()
    assert client.get(f"/api/v1/analyses/{rerun['id']}").json()["source_report"] == stored["source_report"]


def test_an_analysis_without_a_report_is_as_before(client, model_file):  # noqa: ANN001
    analysis_id = submit(client, model_file, None).json()["id"]
    finish_as_worker(client, analysis_id)
    stored = client.get(f"/api/v1/analyses/{analysis_id}").json()
    assert stored["source_report"] is None
    assert not any("graph break" in issue for issue in caveat_issues(stored))
    assert "source_report_label" not in client.get(f"/api/v1/analyses/{analysis_id}/report.json").json()
    assert 'id="source-report"' not in client.get(f"/analyses/{analysis_id}").text


# ------------------------------------------------------------------------------------------ hostile reports
def _spoiled(spoil) -> dict:  # noqa: ANN001
    report = copy.deepcopy(REPORT)
    spoil(report)
    return report


@pytest.mark.parametrize(
    ("report", "field", "words"),
    [
        (
            _spoiled(lambda r: r["graph_breaks"].update(break_count="three")),
            "source_report.graph_breaks.break_count",
            "valid integer",
        ),
        (_spoiled(lambda r: r.update(extra={HOSTILE: 1})), "source_report.extra", "Extra inputs are not permitted"),
        (
            _spoiled(lambda r: r["graph_breaks"]["breaks"][0].update(reason="x" * 2001)),
            "source_report.graph_breaks.breaks.0.reason",
            "at most 2000 characters",
        ),
        (
            _spoiled(lambda r: r["graph_breaks"]["breaks"][0].update(line=-1)),
            "source_report.graph_breaks.breaks.0.line",
            "greater than or equal to 0",
        ),
        (
            _spoiled(lambda r: r["export"]["attempts"][0].update(seconds=float("nan"))),
            "source_report.export.attempts.0.seconds",
            "",
        ),
        (_spoiled(lambda r: r.update(version=2)), "source_report.version", "1"),
        ("not json", "source_report", "Invalid JSON"),
        ("[" * 5000 + "]" * 5000, "source_report", "recursion limit"),
        (
            '{"version": 1, "factory": "m.py:f", "graph_breaks": {"analysed": true, "break_count": 1'
            + "0" * 400
            + "}}",
            "source_report.graph_breaks.break_count",
            "",
        ),
        ("[]", "source_report", "object"),
    ],
    ids=[
        "bad-type",
        "extra-field",
        "long-text",
        "negative-line",
        "nan",
        "version",
        "not-json",
        "deep",
        "huge-int",
        "not-an-object",
    ],
)
def test_a_hostile_report_is_refused_with_a_422_naming_the_field(client, model_file, settings, report, field, words):  # noqa: ANN001
    response = submit(client, model_file, report if isinstance(report, str) else json.dumps(report, allow_nan=True))
    assert response.status_code == 422, response.text
    problems = response.json()["detail"]
    assert any(p["field"] == field and words in p["message"] for p in problems), problems
    assert HOSTILE not in response.text and "Traceback" not in response.text  # never the value, never a stack
    assert client.get("/api/v1/analyses").json()["total"] == 0  # nothing submitted


def test_an_oversized_report_is_refused(client, model_file):  # noqa: ANN001
    report = copy.deepcopy(REPORT)
    item = report["graph_breaks"]["breaks"][0] | LONGEST
    report["graph_breaks"]["breaks"] = [item | {"line": n} for n in range(60)]  # within every bound, 1.3 MB in all
    over_form_cap = submit(client, model_file, report)
    assert over_form_cap.status_code == 422
    assert over_form_cap.json()["detail"] == [{"field": "source_report", "message": "longer than 1024 KiB"}]
    report["graph_breaks"]["breaks"] = report["graph_breaks"]["breaks"][:20]  # ~430 KB: under the form's cap
    over_report_cap = submit(client, model_file, report)
    assert over_report_cap.status_code == 422
    (problem,) = over_report_cap.json()["detail"]
    assert problem["field"] == "source_report" and f"(at most {MAX_UPLOAD_BYTES})" in problem["message"]
    assert client.get("/api/v1/analyses").json()["total"] == 0


def test_the_cli_fits_a_long_report_to_the_upload_limit(client, model_file):  # noqa: ANN001
    from advisor.cli.source_front import upload_ready

    report = copy.deepcopy(REPORT)
    item = report["graph_breaks"]["breaks"][0] | LONGEST
    report["graph_breaks"]["breaks"] = [item | {"line": n} for n in range(200)]
    fitted = upload_ready(report)
    assert 0 < len(fitted["graph_breaks"]["breaks"]) < 200
    assert "distinct graph breaks uploaded" in fitted["graph_breaks"]["note"]
    assert submit(client, model_file, fitted).status_code == 202


# ------------------------------------------------------------------------------------------ dedupe
def test_dedupe_keeps_each_report(client, model_file):  # noqa: ANN001
    """The same program with the same report (only the export timings differ) is the same question; with another
    report it is another question: a new analysis that stores and decides with that report, never the earlier
    analysis' answer with the second report lost. Without a report the key is what it always was."""
    first = submit(client, model_file, REPORT)
    assert first.status_code == 202
    timed = copy.deepcopy(REPORT)
    for attempt in timed["export"]["attempts"]:
        attempt["seconds"] = 1.5
    again = submit(client, model_file, timed)
    assert (again.status_code, again.json()["id"], again.json()["deduplicated"]) == (200, first.json()["id"], True)

    fixed = copy.deepcopy(REPORT)
    fixed["graph_breaks"] = {"analysed": True, "graph_count": 1, "break_count": 0, "breaks": []}
    second = submit(client, model_file, fixed)
    assert second.status_code == 202 and second.json()["id"] != first.json()["id"]
    stored = {
        response.json()["id"]: client.get(f"/api/v1/analyses/{response.json()['id']}").json()["source_report"]
        for response in (first, second)
    }
    assert stored[first.json()["id"]]["graph_breaks"]["break_count"] == 3
    assert stored[second.json()["id"]]["graph_breaks"]["break_count"] == 0

    plain = submit(client, model_file, None)
    assert plain.status_code == 202 and plain.json()["id"] not in stored


def test_the_dedupe_key_without_a_report_is_unchanged() -> None:
    from app.analyses import dedupe_key

    question = {"artifact_sha256": "a" * 64, "inputs_sha256": None, "context": {}, "target": "cpu", "backends": []}
    assert dedupe_key(**question) == dedupe_key(**question, source_digest=None)
    assert dedupe_key(**question) != dedupe_key(**question, source_digest="0" * 64)
    before = {"a": "a" * 64, "i": None, "c": {}, "t": "cpu", "b": []}  # the key before source-side reports existed
    assert dedupe_key(**question) == hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()


def test_openapi_documents_the_field(client) -> None:  # noqa: ANN001
    schema = client.get("/openapi.json").json()
    form = schema["paths"]["/api/v1/analyze"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert form["properties"]["source_report"]["maxLength"] == MAX_UPLOAD_BYTES
    assert "SourceReport" in json.dumps(schema["components"]["schemas"])


def test_on_postgresql_the_report_is_stored_and_decided_with(make_app, model_file):  # noqa: ANN001
    """The column (migration 0006) on PostgreSQL: the report is stored as sent, decided with, and deduplicated by."""
    from fastapi.testclient import TestClient

    from tests.support.service_db import empty_postgres

    with empty_postgres() as url, TestClient(make_app(database_url=url)) as client:
        first = submit(client, model_file, REPORT)
        assert first.status_code == 202, first.text
        assert submit(client, model_file, REPORT).json()["deduplicated"] is True
        analysis_id = first.json()["id"]
        finish_as_worker(client, analysis_id)
        stored = client.get(f"/api/v1/analyses/{analysis_id}").json()
        assert stored["source_report"] == parse_source_report(REPORT).model_dump(mode="json")
        assert any(issue.startswith("3 graph break(s) in model.py") for issue in caveat_issues(stored))
