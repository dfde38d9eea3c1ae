"""Issue 31 item 5 through the team server: the user's calibration file is a `calibration` field of POST /analyze,
checked before it is stored (advisor.core.calibration: never unpickled, never expanded), stored as an artifact, part
of the dedupe key, handed to the worker with its sha256, and used by the int8 option it calibrates; a hostile one is
a 422 naming the problem with nothing left in the store."""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile
from pathlib import Path

import pytest
from sqlmodel import Session, select

from advisor.core.calibration import MAX_CALIBRATION_BYTES
from app.models import Analysis, Artifact
from tests.support.http_client import http
from tests.support.service_db import stored_files
from tests.support.service_env import FAST_TIMING_ENV
from workers.agent import AgentConfig, WorkerAgent
from workers.api import WorkerApi
from workers.retry import RetryPolicy

from .test_api import CPU_CONTEXT, claim, register_worker

np = pytest.importorskip("numpy")


class _Touch:
    """Unpickling this creates `path`: the hostile test asserts it never exists."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):  # noqa: ANN204
        return (Path.touch, (self.path,))


def _npz(**arrays) -> bytes:  # noqa: ANN003
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _upload(client, model: Path, calibration: bytes | None, **form):  # noqa: ANN001, ANN003, ANN202
    data = {"context": json.dumps(CPU_CONTEXT), **form}
    with open(model, "rb") as fh:
        files = {"model": (model.name, fh)}
        if calibration is not None:
            files["calibration"] = ("calibration.npz", calibration)
        return client.post("/api/v1/analyze", files=files, data=data)


@pytest.fixture(scope="module")
def cnn_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real convolutional ExportedProgram (input [2, 3, 32, 32] float32): ONNX Runtime quantizes it statically,
    so its int8 option is calibrated."""
    from advisor.harness.examples import export_example

    return export_example("cnn", tmp_path_factory.mktemp("models") / "cnn.pt2")


def _samples(count: int = 3, shape: tuple[int, ...] = (2, 3, 32, 32), seed: int = 0) -> bytes:
    return _npz(input0=np.random.default_rng(seed).normal(size=(count, *shape)).astype(np.float32))


# ------------------------------------------------------------------ hostile uploads
def _refused(response, *expected: str) -> str:  # noqa: ANN001
    assert response.status_code == 422, response.text
    (problem,) = response.json()["detail"]
    assert problem["field"] == "calibration"
    for text in expected:
        assert text in problem["message"], problem["message"]
    return problem["message"]


def _nothing_kept(client, settings) -> None:  # noqa: ANN001
    assert stored_files(settings) == [], "a refused upload leaves no file in the store (the model's neither)"
    assert client.get("/api/v1/analyses").json()["total"] == 0


def test_a_pickle_with_a_file_creating_payload_is_refused_never_unpickled_and_nothing_is_stored(
    client, model_file, settings, tmp_path
) -> None:
    marker = tmp_path / "pwned"
    message = _refused(_upload(client, model_file, pickle.dumps([_Touch(marker)])), "is a pickle", "never unpickled")
    assert "numpy.savez" in message
    # an .npz whose array is of objects: numpy would unpickle it on load; refused from its .npy header
    objects = _npz(input0=np.array([_Touch(marker)], dtype=object))
    _refused(_upload(client, model_file, objects), "object arrays need pickle: refused")
    assert not marker.exists()
    _nothing_kept(client, settings)


def test_garbage_an_oversized_file_and_a_zip_bomb_are_refused_with_nothing_stored(client, model_file, settings) -> None:
    garbage = os.urandom(4096).replace(b"PK", b"pk").replace(b"\x80", b"\x00")
    _refused(_upload(client, model_file, garbage), "not an .npz")
    oversized = b"PK\x03\x04" + bytes(MAX_CALIBRATION_BYTES)  # one byte over: stopped while it streams in
    _refused(_upload(client, model_file, oversized), "too large", f"{MAX_CALIBRATION_BYTES:,} bytes")
    bomb = io.BytesIO()  # 200 MiB of zeros declared by one .npy in well under 1 MiB
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (2, 26214400)})
        with archive.open("input0.npy", "w", force_zip64=True) as entry:
            entry.write(header.getvalue())
            for _ in range(200):
                entry.write(bytes(2**20))
    assert len(bomb.getvalue()) < 1 << 20
    _refused(_upload(client, model_file, bomb.getvalue()), "a zip bomb, refused before reading")
    _refused(_upload(client, model_file, _npz(x=np.zeros((2, 3), np.float32))), "expected input0.npy")
    _nothing_kept(client, settings)


# ------------------------------------------------------------------ stored, deduplicated, handed to the worker
def test_the_file_is_stored_as_an_artifact_part_of_the_dedupe_key_and_handed_to_the_worker_with_its_sha256(
    client, model_file, engine_of
) -> None:
    samples, other = _samples(shape=(8, 784)), _samples(shape=(8, 784), seed=1)
    first = _upload(client, model_file, samples, backends="onnxruntime:int8")
    assert first.status_code == 202, first.text
    again = _upload(client, model_file, samples, backends="onnxruntime:int8")
    assert (again.status_code, again.json()["id"]) == (200, first.json()["id"])  # the same question
    for calibration in (other, None):  # another file, or none: another question, measured again
        response = _upload(client, model_file, calibration, backends="onnxruntime:int8")
        assert response.status_code == 202 and response.json()["id"] != first.json()["id"], response.text
    with Session(engine_of(client)) as session:
        analysis = session.get(Analysis, first.json()["id"])
        row = session.get(Artifact, analysis.calibration_sha256)
        assert (row.kind, row.size_bytes) == ("calibration", len(samples))
        kinds = sorted(a.kind for a in session.exec(select(Artifact)))
        assert kinds == ["calibration", "calibration", "model"]
    rerun = client.post(f"/api/v1/analyses/{first.json()['id']}/rerun")  # measured again with the same file
    assert rerun.status_code == 202, rerun.text
    with Session(engine_of(client)) as session:
        assert session.get(Analysis, rerun.json()["id"]).calibration_sha256 == analysis.calibration_sha256
    worker = register_worker(client, backends=("eager", "onnxruntime"))
    job = claim(client, worker).json()["job"]
    assert job["analysis_id"] == first.json()["id"] and job["calibration_sha256"] == analysis.calibration_sha256
    fetched = client.get(job["calibration_url"])  # the server's own route: the worker holds the job's lease
    assert fetched.status_code == 200 and fetched.content == samples


def test_analyze_server_calibration_uploads_the_file_with_the_model(
    client, model_file, tmp_path, monkeypatch, engine_of
) -> None:
    """`npu-advisor analyze MODEL --server URL --calibration F.npz`: the CLI's client streams it as the form's
    `calibration` file (here into the test's app through its transport)."""
    import functools
    import hashlib

    import httpx
    from typer.testing import CliRunner

    import advisor.cli.remote
    from advisor.cli import app as cli
    from advisor.cli.client import AdvisorClient

    class _Through(httpx.BaseTransport):  # the CLI's requests, answered by the test's app
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            answer = client.request(request.method, str(request.url), headers=request.headers, content=request.read())
            return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    monkeypatch.setattr(advisor.cli.remote, "AdvisorClient", functools.partial(AdvisorClient, transport=_Through()))
    samples = tmp_path / "calibration.npz"
    samples.write_bytes(_samples(shape=(8, 784)))
    args = ["analyze", str(model_file), "--server", "http://testserver", "--target", "cpu", "--no-wait"]
    result = CliRunner().invoke(cli, [*args, "--backends", "onnxruntime:int8", "--calibration", str(samples)])
    assert result.exit_code == 0, result.output
    with Session(engine_of(client)) as session:
        (analysis,) = session.exec(select(Analysis)).all()
    assert analysis.calibration_sha256 == hashlib.sha256(samples.read_bytes()).hexdigest()


def test_a_worker_token_downloads_the_calibration_file_only_while_it_holds_the_job(make_app, model_file) -> None:
    import hashlib

    from fastapi.testclient import TestClient

    from .test_auth import token_for

    with TestClient(make_app(require_auth=True)) as secured:
        user, worker = token_for(secured, "user"), token_for(secured, "worker", "int8-node")
        samples = _samples(shape=(8, 784))
        with open(model_file, "rb") as fh:
            files = {"model": ("mlp.pt2", fh), "calibration": ("c.npz", samples)}
            data = {"context": json.dumps(CPU_CONTEXT), "backends": "onnxruntime:int8"}
            assert secured.post("/api/v1/analyze", headers=user, files=files, data=data).status_code == 202
        url = f"/api/v1/artifacts/{hashlib.sha256(samples).hexdigest()}"
        assert secured.get(url, headers=worker).status_code == 404  # no job of its own yet: the same 404 as none
        body = {"name": "n", "device_kind": "cpu", "backends": ["eager", "onnxruntime"]}
        worker_id = secured.post("/api/v1/workers/register", headers=worker, json=body).json()["worker_id"]
        job = secured.post(f"/api/v1/workers/{worker_id}/claim", headers=worker).json()["job"]
        assert job["calibration_url"].endswith(url)
        fetched = secured.get(url, headers=worker)
        assert fetched.status_code == 200 and fetched.content == samples


@pytest.fixture
def engine_of():  # noqa: ANN201
    return lambda client: client.app.state.engine


# ------------------------------------------------------------------ the round trip, measured
def _run_one_job(client, tmp_path: Path) -> None:  # noqa: ANN001
    config = AgentConfig(
        name="calibrating",
        device="cpu",
        backends=["eager", "onnxruntime"],
        work_dir=tmp_path / "work",
        claim_jitter_s=0.0,
        max_jobs=1,
    )
    agent = WorkerAgent(WorkerApi(client, RetryPolicy(sleep=lambda _s: None)), config, sleep=lambda _s: None)
    assert agent.run() == 0


def _int8_row(detail: dict) -> dict:
    rows = {(r["backend"], r.get("mode")): r for r in detail["measurements"]["measurements"]}
    return rows[("onnxruntime", "int8")]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:You should not use the .timeout. argument with the TestClient")
def test_a_real_worker_calibrates_onnxruntime_int8_on_the_uploaded_file(
    client, cnn_file, tmp_path, monkeypatch
) -> None:
    from advisor.harness.backends import get_backend

    ok, why = get_backend("onnxruntime").available("cpu")
    if not ok:
        pytest.skip(why)
    for name, value in FAST_TIMING_ENV.items():
        monkeypatch.setenv(name, value)
    submitted = _upload(client, cnn_file, _samples(count=3), backends="onnxruntime:int8", force="true")
    assert submitted.status_code == 202, submitted.text
    _run_one_job(client, tmp_path)
    detail = client.get(submitted.json()["links"]["self"]).json()
    assert detail["status"] == "done", detail.get("error")
    row = _int8_row(detail)
    assert row["status"] == "ok", row.get("reason")
    assert row["compile_breakdown"]["quantization"] == (
        "static QDQ (calibrated on the calibration file (3 sample(s): input0 float32[2, 3, 32, 32]))"
    )


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:You should not use the .timeout. argument with the TestClient")
def test_a_file_that_does_not_fit_the_models_inputs_fails_the_job_naming_the_arrays(
    client, cnn_file, tmp_path, monkeypatch
) -> None:
    """Where the server cannot tell the model's inputs (a TorchScript archive; here an ExportedProgram whose JSON read
    is made to say "cannot tell"), the worker refuses the file after its inspection - with the message the server
    gives at submission where it can tell (issue 44 item 6)."""
    import advisor.core.archive_inputs

    for name, value in FAST_TIMING_ENV.items():
        monkeypatch.setenv(name, value)
    wrong = _npz(input0=np.zeros((2, 2, 3, 16, 16), np.float64))  # a well-formed .npz, checked on upload
    at_submission = _refused(_upload(client, cnn_file, wrong, backends="onnxruntime:int8", force="true"))
    monkeypatch.setattr(advisor.core.archive_inputs, "exported_inputs", lambda handle, name: None)
    submitted = _upload(client, cnn_file, wrong, backends="onnxruntime:int8", force="true")
    assert submitted.status_code == 202, submitted.text
    _run_one_job(client, tmp_path)
    detail = client.get(submitted.json()["links"]["self"]).json()
    assert detail["status"] == "failed"
    error = detail["error"]
    assert error.startswith("measurement could not start: calibration file does not match the model's example inputs")
    assert "samples have shape [2, 3, 16, 16], the example input [2, 3, 32, 32]" in error
    assert "is float64, the example input float32" in error
    assert error == f"measurement could not start: {at_submission}"


def test_a_file_that_does_not_fit_an_exported_programs_inputs_is_refused_at_submission_as_the_worker_would(
    client, model_file, settings
) -> None:
    """The ExportedProgram's input specs are in its JSON (read with zipfile and bounded JSON, never torch.load): the
    submission is a 422 whose message is the one the worker and `analyze --local` give after their inspection."""
    from advisor.core.calibration import CalibrationRefused, check_against_inputs, check_stream
    from advisor.harness.loading import load_model

    wrong = _npz(input0=np.zeros((2, 7, 7), np.float32))  # the mlp's input is float32 [8, 784]
    message = _refused(_upload(client, model_file, wrong, backends="onnxruntime:int8"), "[7, 7]", "[8, 784]")
    with pytest.raises(CalibrationRefused) as inspected:  # what the pipeline says after loading the model
        check_against_inputs(check_stream(io.BytesIO(wrong), len(wrong)), load_model(str(model_file)).input_specs)
    assert message == str(inspected.value)
    assert client.get("/api/v1/analyses").json()["total"] == 0
    assert not any(str(path).endswith(_sha(model_file)) for path in stored_files(settings)), "the model is not kept"
    fits = _upload(client, model_file, _samples(shape=(8, 784)), backends="onnxruntime:int8")
    assert fits.status_code == 202, fits.text


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _with_model_json(model: Path, replacement: bytes, target: Path) -> Path:
    """The real archive with its models/model.json replaced, deflated (every other entry as it was, stored)."""
    with zipfile.ZipFile(model) as source, zipfile.ZipFile(target, "w") as out:
        for info in source.infolist():
            if info.filename.endswith("/models/model.json"):
                out.writestr(info.filename, replacement, compress_type=zipfile.ZIP_DEFLATED)
            else:
                out.writestr(info.filename, source.read(info))
    return target


@pytest.mark.parametrize(
    "replacement",
    [
        b"{not json at all",
        b"[" * 300_000 + b"]" * 300_000,
        b'{"graph_module": {"signature": {"input_specs": [' + b'{"user_input": 1},' * 200_000 + b"{}]}}}",
        json.dumps({"graph_module": {"graph": {"tensor_values": "x"}, "signature": {"input_specs": []}}}).encode(),
        b" " * (9 * 2**20),  # larger than the reader takes
    ],
)
def test_a_crafted_archive_json_with_a_calibration_is_a_clean_4xx_or_cannot_tell(
    client, model_file, tmp_path, replacement: bytes
) -> None:
    import time

    crafted = _with_model_json(model_file, replacement, tmp_path / "crafted.pt2")
    started = time.perf_counter()
    response = _upload(client, crafted, _npz(input0=np.zeros((2, 7, 7), np.float32)), backends="onnxruntime:int8")
    assert time.perf_counter() - started < 10.0
    assert response.status_code == 202 or 400 <= response.status_code < 500, response.text
    if response.status_code == 422:  # never the calibration refusal from a JSON that could not be read
        assert "does not match the model's example inputs" not in response.text


# ------------------------------------------------------------------ object storage
@pytest.fixture
def s3_app(make_app, monkeypatch):  # noqa: ANN001, ANN201
    """An app whose artifacts live in a fresh bucket of a real S3 protocol server (moto), as in test_object_store."""
    pytest.importorskip("boto3")
    moto_server = pytest.importorskip("moto.server")
    from fastapi.testclient import TestClient

    from app.object_store import s3_client

    from .test_object_store import CREDENTIALS, REGION, free_port

    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        s3 = s3_client(endpoint_url=endpoint, region=REGION)
        s3.create_bucket(Bucket="calibration")
        app = make_app(artifact_store="s3://calibration/team", s3_endpoint_url=endpoint, s3_region=REGION)
        with TestClient(app) as client:
            yield client, s3, endpoint
    finally:
        server.stop()


def test_in_object_storage_a_refused_file_leaves_no_object_and_a_stored_one_is_handed_out_presigned(
    s3_app, model_file
) -> None:
    import hashlib

    client, s3, endpoint = s3_app

    def objects() -> list[str]:
        return sorted(item["Key"] for item in s3.list_objects_v2(Bucket="calibration").get("Contents", []))

    big_garbage = b"PK\x03\x04" + os.urandom(9 << 20)  # past one 8 MiB part: checked through ranged reads
    _refused(_upload(client, model_file, big_garbage), "not a readable .npz")
    _refused(_upload(client, model_file, pickle.dumps([1])), "never unpickled")
    assert objects() == [] and s3.list_multipart_uploads(Bucket="calibration").get("Uploads", []) == []
    samples = _samples(count=360, shape=(8, 784))  # 9 MiB: a multipart upload, checked before it is copied
    assert len(samples) > 8 << 20
    assert _upload(client, model_file, samples, backends="onnxruntime:int8").status_code == 202
    sha = hashlib.sha256(samples).hexdigest()
    assert f"team/artifacts/{sha[:2]}/{sha}" in objects()
    worker = register_worker(client, backends=("eager", "onnxruntime"))
    job = claim(client, worker).json()["job"]
    assert job["calibration_sha256"] == sha
    assert job["calibration_url"].startswith(f"{endpoint}/calibration/team/artifacts/{sha[:2]}/{sha}?")
    assert http.get(job["calibration_url"]).content == samples
