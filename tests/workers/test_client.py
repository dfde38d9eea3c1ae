"""The user SDK and `analyze --server` against a MockTransport fake of the analysis API."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

import advisor.cli.remote
from advisor.cli.client import AdvisorClient, AdvisorError
from advisor.cli.remote import analyze_remote, describe_progress


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "model.pt2"
    path.write_bytes(b"PK" + b"\x00" * 100)
    return path


class FakeAnalysisApi:
    """Answers POST /analyze and then walks one analysis through the given states on each GET."""

    def __init__(self, states: list[dict] | None = None) -> None:
        self.uploads: list[httpx.Request] = []
        self.states = states or [{"status": "done"}]
        self.gets = 0
        self.faults: list[int | Exception] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.faults:
            fault = self.faults.pop(0)
            if isinstance(fault, Exception):
                raise fault
            return httpx.Response(fault, json={"detail": "injected"})
        if request.method == "POST" and request.url.path == "/api/v1/analyze":
            self.uploads.append(request)
            base = "http://advisor.test/api/v1/analyses/7"  # absolute, as the real server's url_for makes them
            links = {"self": base, "report_md": f"{base}/report.md"}
            return httpx.Response(202, json={"id": 7, "status": "queued", "links": links})
        if request.method == "GET" and request.url.path == "/api/v1/analyses/7":
            state = self.states[min(self.gets, len(self.states) - 1)]
            self.gets += 1
            return httpx.Response(200, json={"id": 7, "model_name": "model.pt2", "context": {}, **state})
        return httpx.Response(404, json={"detail": "no such route"})


def client_for(api: FakeAnalysisApi, token: str | None = "u-token") -> AdvisorClient:
    return AdvisorClient("http://advisor.test", token, transport=httpx.MockTransport(api))


def test_submit_uploads_the_file_and_context_as_multipart(model_file: Path):
    api = FakeAnalysisApi()
    with client_for(api) as client:
        reply = client.submit(
            model_file, {"stage": "production", "target": "npu"}, model_name="resnet", force=True, tag="nightly"
        )
    assert reply["id"] == 7
    [request] = api.uploads
    assert request.headers["authorization"] == "Bearer u-token"
    body = request.read()
    assert b'name="context"' in body and b'{"stage": "production", "target": "npu"}' in body
    assert b'name="model"; filename="model.pt2"' in body and b"PK\x00\x00" in body
    assert b'name="force"\r\n\r\ntrue' in body and b'name="model_name"\r\n\r\nresnet' in body
    assert b'name="tag"\r\n\r\nnightly' in body


def test_a_missing_file_is_reported_before_any_upload(tmp_path: Path):
    api = FakeAnalysisApi()
    with client_for(api) as client, pytest.raises(AdvisorError, match="no such model file"):
        client.submit(tmp_path / "nope.pt2", {})
    assert api.uploads == []


@pytest.mark.parametrize(
    ("status", "detail", "expected"),
    [
        (413, "upload is larger than the 4096 MB limit", "4096 MB limit"),
        (415, "this is a pickled checkpoint, not a model", "pickled checkpoint"),
        (401, "missing token", "ADVISOR_TOKEN"),
        (422, [{"field": "stage", "message": "must be one of prototype, production, edge"}], "  stage: must be one"),
    ],
)
def test_server_rejections_become_readable_messages(model_file: Path, status: int, detail, expected: str):
    def reject(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"detail": detail})

    client = AdvisorClient("http://advisor.test", transport=httpx.MockTransport(reject))
    with pytest.raises(AdvisorError, match=expected) as caught:
        client.submit(model_file, {"stage": "nonsense"})
    assert caught.value.status == status


def test_an_unreachable_server_is_named_in_the_message(model_file: Path):
    client = AdvisorClient("http://127.0.0.1:9", timeout_s=2)
    with pytest.raises(AdvisorError, match=r"cannot reach the npu-advisor server at http://127.0.0.1:9"):
        client.submit(model_file, {})


def test_wait_follows_the_analysis_and_outlasts_a_short_outage():
    states = [
        {"status": "queued", "queue_position": 2},
        {"status": "running", "stage": "measure:inductor:default", "progress": 0.5},
        {"status": "done", "progress": 1.0},
    ]
    api = FakeAnalysisApi(states)
    seen: list[str] = []
    with client_for(api) as client:
        api.faults = [503, httpx.ConnectError("restarting")]
        final = client.wait(7, on_update=lambda a: seen.append(describe_progress(a)), sleep=lambda s: None)
    assert final["status"] == "done"
    assert seen == ["queued (position 2)", "running: measure:inductor:default", "done"]


def test_wait_gives_up_on_a_client_error():
    api = FakeAnalysisApi([{"status": "queued"}])
    with client_for(api) as client, pytest.raises(AdvisorError, match="not found"):
        client.wait(8, sleep=lambda s: None)


def _patch_client(monkeypatch: pytest.MonkeyPatch, api: FakeAnalysisApi) -> None:
    real = advisor.cli.remote.AdvisorClient
    monkeypatch.setattr(
        advisor.cli.remote,
        "AdvisorClient",
        lambda server, token, **options: real(server, token, transport=httpx.MockTransport(api), **options),
    )


def test_analyze_remote_without_wait_prints_the_id(monkeypatch, model_file: Path, capsys):
    _patch_client(monkeypatch, FakeAnalysisApi())
    code = analyze_remote(
        model=model_file, context={}, server="http://advisor.test", token=None, wait=False, fmt="text"
    )
    captured = capsys.readouterr()
    assert code == 0 and captured.out.strip() == "7"
    assert "follow it: http://advisor.test/api/v1/analyses/7\n" in captured.err  # not the server's URL twice


def test_analyze_remote_reports_a_failed_analysis(monkeypatch, model_file: Path, capsys):
    _patch_client(monkeypatch, FakeAnalysisApi([{"status": "failed", "error": "inspection failed: not a model"}]))
    code = analyze_remote(model=model_file, context={}, server="http://advisor.test", token=None, wait=True, fmt="text")
    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    assert "inspection failed: not a model" in captured.err


def test_analyze_remote_submission_error_exits_2(monkeypatch, model_file: Path, capsys):
    api = FakeAnalysisApi()
    api.faults = [415]
    _patch_client(monkeypatch, api)
    code = analyze_remote(model=model_file, context={}, server="http://advisor.test", token=None, wait=True, fmt="text")
    assert code == 2 and "error:" in capsys.readouterr().err


def test_analyze_remote_prints_the_same_report_as_local(monkeypatch, model_file: Path, capsys):
    from advisor.core import report

    recommendation = {"backend": "inductor", "mode": "default", "summary": "use inductor", "path": [], "caveats": []}
    stored = {"status": "done", "inspection": None, "measurements": None, "recommendation": recommendation}
    _patch_client(monkeypatch, FakeAnalysisApi([stored]))
    code = analyze_remote(model=model_file, context={}, server="http://advisor.test", token=None, wait=True, fmt="json")
    assert code == 0
    fields = {"model_name": "model.pt2", "context": {}, "inspection": None, "measurements": None}
    expected = report.render({**fields, "recommendation": recommendation}, "json")
    assert capsys.readouterr().out.strip() == expected.strip()
    assert json.loads(expected)  # the json format is JSON


def test_analyze_remote_sends_the_backends_and_writes_the_report_to_out(monkeypatch, model_file: Path, capsys):
    recommendation = {"backend": "inductor", "mode": "default", "summary": "use inductor", "path": [], "caveats": []}
    api = FakeAnalysisApi(
        [{"status": "done", "inspection": None, "measurements": None, "recommendation": recommendation}]
    )
    _patch_client(monkeypatch, api)
    out = model_file.parent / "report.md"
    code = analyze_remote(
        model=model_file,
        context={},
        server="http://advisor.test",
        token=None,
        wait=True,
        fmt="markdown",
        backends=["eager", "inductor"],
        force=True,
        out=out,
    )
    assert code == 0
    body = api.uploads[0].read()
    assert b'name="backends"\r\n\r\neager,inductor' in body and b'name="force"\r\n\r\ntrue' in body
    assert out.read_text().startswith("# npu-advisor report: model.pt2")
    captured = capsys.readouterr()
    assert captured.out == "" and f"report written to {out}" in captured.err


def test_analyze_remote_says_once_why_the_analysis_waits(monkeypatch, model_file: Path, capsys):
    note = "no worker for npu has been seen; the analysis waits in the queue until one joins"
    waiting = {"status": "queued", "waiting_for_worker": note}
    states = [waiting, waiting, {"status": "failed", "error": "cancelled by the test"}]
    _patch_client(monkeypatch, FakeAnalysisApi(states))
    monkeypatch.setattr(AdvisorClient, "wait", _fast_wait(AdvisorClient.wait))
    analyze_remote(model=model_file, context={}, server="http://advisor.test", token=None, wait=True, fmt="text")
    assert capsys.readouterr().err.count(note) == 1


def _fast_wait(wait):  # noqa: ANN001, ANN202 - the real polling loop without its one-second sleeps
    def fast(self, analysis_id, **options):  # noqa: ANN001, ANN003, ANN202
        return wait(self, analysis_id, **{**options, "sleep": lambda _s: None})

    return fast


def test_analyze_remote_prints_the_unmeasured_report_while_no_worker_can_measure(monkeypatch, model_file: Path, capsys):
    note = "no worker for npu has been seen; the recommendation below is unmeasured; it is measured when one joins"
    recommendation = {"backend": "torchair", "mode": "default", "measured": False, "path": [], "caveats": []}
    waiting = {"status": "queued", "waiting_for_worker": "no worker for npu has been seen; the analysis waits"}
    inspected = {"status": "queued", "waiting_for_worker": note, "recommendation": recommendation}
    never = {"status": "failed", "error": "the test's analysis never gets here"}
    _patch_client(monkeypatch, FakeAnalysisApi([waiting, inspected, never]))
    monkeypatch.setattr(AdvisorClient, "wait", _fast_wait(AdvisorClient.wait))
    code = analyze_remote(model=model_file, context={}, server="http://advisor.test", token=None, wait=True, fmt="json")
    captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out)["recommendation"]["measured"] is False
    said = " ".join(captured.err.split())  # as wrapped on the terminal
    assert said.count(note) == 1 and "the measurement stays queued" in said
