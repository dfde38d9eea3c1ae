"""Issue 44 item 6: an option named in `backends` that cannot run on the context's target device (onnxruntime:int8
is a CPU option; the target defaults to npu) is refused at submission, a 422 naming the field, the option and the
devices it runs on - never queued for a worker that can never offer it while an unmeasured answer for another option
stands in. The CLI prints the refusal and exits 2."""

from __future__ import annotations

import functools
import io
import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from app.target_devices import off_target, option_devices, options_on
from tests.support.service_db import stored_files

from .test_api import CPU_CONTEXT, submit

np = pytest.importorskip("numpy")


def _refusal(response: httpx.Response) -> str:
    assert response.status_code == 422, response.text
    [problem] = response.json()["detail"]
    assert problem["field"] == "backends"
    return problem["message"]


def test_an_int8_cpu_option_under_the_default_npu_target_is_refused_naming_the_option_and_its_devices(
    client, model_file, settings
) -> None:
    message = _refusal(submit(client, model_file, {"stage": "production"}, backends="onnxruntime:int8"))
    assert message.startswith("onnxruntime:int8 runs on cpu only, not on this analysis' target npu")
    assert "--target cpu" in message and "name options that run on npu: eager, inductor, torchair" in message
    assert stored_files(settings) == [] and client.get("/api/v1/analyses").json()["total"] == 0


def test_every_option_off_the_target_is_named_and_the_options_on_it_pass(client, model_file) -> None:
    cuda = {"stage": "production", "target": "cuda"}
    response = submit(client, model_file, cuda, backends="eager,inductor:pt2e-int8,openvino,onnxruntime")
    assert response.status_code == 422, response.text
    messages = [problem["message"] for problem in response.json()["detail"]]
    assert [m.split(" ", 1)[0] for m in messages] == ["inductor:pt2e-int8", "openvino"]  # eager, onnxruntime run there
    assert all("runs on cpu only, not on this analysis' target cuda" in m for m in messages)
    on_cpu = _refusal(submit(client, model_file, CPU_CONTEXT, backends="inductor,torchair"))
    assert on_cpu.startswith("torchair runs on npu only, not on this analysis' target cpu") and "--target npu" in on_cpu
    accepted = submit(client, model_file, CPU_CONTEXT, backends="eager,inductor:pt2e-int8,onnxruntime:int8")
    assert accepted.status_code == 202, accepted.text


def test_the_catalogues_devices_decide_and_unknown_names_are_left_to_the_name_check() -> None:
    assert option_devices("onnxruntime") == ("cpu", "cuda") and option_devices("onnxruntime:int8") == ("cpu",)
    assert option_devices("inductor:pt2e-int8") == ("cpu",) and option_devices("tensorrt") == ("cuda",)
    hostile = ["warp-drive", "onnxruntime:int8:x", ":int8", "", "<script>:int8", "torchair:int8", "eager:"]
    assert [option_devices(name) for name in hostile] == [(), (), (), (), (), (), ("cpu", "cuda", "npu")]
    assert off_target(hostile, "npu") == []  # unknown names are the name check's (a 422 before this one)
    assert off_target([], "npu") == [] and off_target(["eager"], "npu") == []
    assert "onnxruntime:int8" in options_on("cpu") and "onnxruntime:int8" not in options_on("cuda")
    assert "torchair" not in options_on("cpu") and options_on("npu") == ["eager", "inductor", "torchair"]


def _calibration(path: Path, shape: tuple[int, ...]) -> Path:
    buffer = io.BytesIO()
    np.savez(buffer, input0=np.zeros(shape, np.float32))
    path.write_bytes(buffer.getvalue())
    return path


def test_analyze_server_with_a_cpu_int8_option_and_no_target_prints_the_refusal_and_exits_2(
    client, model_file, tmp_path, monkeypatch, settings
) -> None:
    """The issue's command: no --target (npu), onnxruntime:int8 and a calibration file that does not fit the model
    either. It used to exit 0 with an unmeasured TorchAir answer; the job waited for an NPU worker forever."""
    import advisor.cli.remote
    from advisor.cli import app as cli
    from advisor.cli.client import AdvisorClient

    class _Through(httpx.BaseTransport):  # the CLI's requests, answered by the test's app
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            answer = client.request(request.method, str(request.url), headers=request.headers, content=request.read())
            return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    monkeypatch.setattr(advisor.cli.remote, "AdvisorClient", functools.partial(AdvisorClient, transport=_Through()))
    wrong = _calibration(tmp_path / "cal.npz", (2, 7, 7))  # the model's input is [8, 784]
    args = ["analyze", str(model_file), "--server", "http://testserver", "--backends", "onnxruntime:int8"]
    result = CliRunner().invoke(cli, [*args, "--calibration", str(wrong)])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "the server rejected the request: backends: onnxruntime:int8 runs on cpu only" in said
    assert "target npu" in said and "--target cpu" in said and "Traceback" not in said
    assert stored_files(settings) == [] and client.get("/api/v1/analyses").json()["total"] == 0
    # with --target cpu the samples are checked against the ExportedProgram's inputs (from its JSON) at submission:
    # refused with the message the worker and `analyze --local` give (tests/service/test_calibration_upload.py)
    mismatched = CliRunner().invoke(cli, [*args, "--calibration", str(wrong), "--target", "cpu", "--no-wait"])
    assert mismatched.exit_code == 2, mismatched.output
    said = " ".join(mismatched.output.split())
    assert "calibration file does not match the model's example inputs" in said and "Traceback" not in said
    assert "input0 (input) samples have shape [7, 7], the example input [8, 784]" in said
    assert json.loads(client.get("/api/v1/analyses").text)["total"] == 0
    fits = _calibration(tmp_path / "fits.npz", (2, 8, 784))
    accepted = CliRunner().invoke(cli, [*args, "--calibration", str(fits), "--target", "cpu", "--no-wait"])
    assert accepted.exit_code == 0, accepted.output
    assert json.loads(client.get("/api/v1/analyses").text)["total"] == 1


def test_a_job_no_registered_worker_offers_the_backends_for_says_so_on_the_page_and_in_the_cli(
    client, model_file, monkeypatch, capsys
) -> None:
    """The options pass the device check (onnxruntime runs on cpu) but the only cpu worker offers eager: the page
    and `analyze --server`'s follow output say why it waits (the backend set, not only the device kind)."""
    from rich.console import Console

    from advisor.cli.client import AdvisorClient
    from advisor.cli.remote import _follow

    from .test_api import register_worker

    register_worker(client, device_kind="cpu", backends=("eager",))
    analysis_id = submit(client, model_file, CPU_CONTEXT, backends="onnxruntime:int8").json()["id"]
    note = "no cpu worker offers every backend this analysis asked for (onnxruntime:int8); it waits until one does"
    assert client.get(f"/api/v1/analyses/{analysis_id}").json()["waiting_for_worker"] == note
    assert note in client.get(f"/analyses/{analysis_id}").text

    class _Through(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            answer = client.request(request.method, str(request.url), headers=request.headers)
            return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    real = AdvisorClient.wait

    def cancelled_after_the_first_poll(self, analysis_id, **options):  # noqa: ANN001, ANN003, ANN202
        # the real polling loop; its pause cancels the analysis, so that following it ends (no timing involved)
        cancel = lambda _s: client.post(f"/api/v1/analyses/{analysis_id}/cancel")  # noqa: E731
        return real(self, analysis_id, **{**options, "sleep": cancel})

    monkeypatch.setattr(AdvisorClient, "wait", cancelled_after_the_first_poll)
    with AdvisorClient("http://testserver", None, transport=_Through()) as advisor_client:
        final = _follow(advisor_client, analysis_id, Console(stderr=True, width=400))
    assert final["status"] == "cancelled" and note in capsys.readouterr().err
