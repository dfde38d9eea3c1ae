"""Issue 31 item 5: a user-supplied calibration file for the int8 options (.npz only, read without pickle), and
hostile ones refused with a clear error: a pickle whose payload would create a file, an oversized file, wrong shapes
and dtypes, garbage, a zip bomb, an object array."""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from advisor.cli import app
from advisor.core.calibration import (
    MAX_CALIBRATION_BYTES,
    MAX_SAMPLES,
    CalibrationRefused,
    check_against_inputs,
    check_file,
)

np = pytest.importorskip("numpy")
runner = CliRunner()
CNN_INPUT = [{"name": "x", "shape": [3, 16, 16], "dtype": "torch.float32"}]


class _Touch:
    """Unpickling this creates `path`: the test asserts it never exists."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):  # noqa: ANN204
        return (Path.touch, (self.path,))


def _npz(path: Path, **arrays) -> Path:  # noqa: ANN003
    np.savez(path, **arrays)
    return path


def _refused(path: Path, match: str) -> str:
    with pytest.raises(CalibrationRefused, match=match) as refused:
        check_file(path)
    return str(refused.value)


def test_a_well_formed_npz_is_described_and_matched_against_the_example_inputs(tmp_path) -> None:
    path = _npz(tmp_path / "c.npz", input0=np.zeros((5, 3, 16, 16), np.float32))
    info = check_file(path)
    assert info.samples == 5 and info.describe() == "5 sample(s): input0 float32[3, 16, 16]"
    check_against_inputs(info, CNN_INPUT)
    compressed = tmp_path / "z.npz"
    np.savez_compressed(compressed, input0=np.zeros((5, 3, 16, 16), np.float32), input1=np.ones((5, 8), np.int64))
    assert [a.dtype for a in check_file(compressed).arrays] == ["float32", "int64"]


def test_a_pickle_is_refused_and_never_unpickled(tmp_path) -> None:
    marker = tmp_path / "pwned"
    evil = tmp_path / "calibration.pkl"
    evil.write_bytes(pickle.dumps([_Touch(marker)]))
    assert "is a pickle" in _refused(evil, "never unpickled")
    # an .npz of an object array: numpy would pickle it; refused from its header, and numpy never loads it
    np.savez(tmp_path / "objects.npz", input0=np.array([_Touch(marker)], dtype=object))
    assert "object arrays need pickle: refused" in _refused(tmp_path / "objects.npz", "dtype '\\|O'")
    # and through the CLI: a clean message, exit 2, no traceback, no file created
    result = runner.invoke(app, ["analyze", str(evil), "--local", "--target", "cpu", "--calibration", str(evil)])
    assert result.exit_code == 2 and "never unpickled" in result.output and "Traceback" not in result.output
    assert not marker.exists()


def test_an_oversized_file_garbage_and_a_zip_bomb_are_refused_before_reading(tmp_path) -> None:
    big = tmp_path / "big.npz"
    with open(big, "wb") as handle:
        handle.truncate(MAX_CALIBRATION_BYTES + 1)  # sparse: nothing is written
    assert f"at most {MAX_CALIBRATION_BYTES:,}" in _refused(big, "too large")
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(os.urandom(4096).replace(b"PK", b"pk").replace(b"\x80", b"\x00"))
    _refused(garbage, "not an .npz")
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(_npz(tmp_path / "whole.npz", input0=np.zeros((4, 8), np.float32)).read_bytes()[:100])
    _refused(truncated, "not a readable .npz")
    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:  # 200 MiB of zeros in ~200 KiB
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (2, 26214400)})
        with archive.open("input0.npy", "w", force_zip64=True) as entry:
            entry.write(header.getvalue())
            for _ in range(200):
                entry.write(bytes(2**20))
    assert os.path.getsize(bomb) < 1 << 20
    _refused(bomb, r"a zip bomb, refused before reading")


def test_wrong_names_counts_shapes_and_dtypes_are_refused_naming_the_array(tmp_path) -> None:
    _refused(_npz(tmp_path / "a.npz", x=np.zeros((2, 3))), "expected input0.npy, input1.npy")
    _refused(_npz(tmp_path / "b.npz", input1=np.zeros((2, 3))), "must be input0..input0, got input1")
    _refused(
        _npz(tmp_path / "c.npz", input0=np.zeros((2, 3)), input1=np.zeros((3, 3))),
        "disagree on the sample count.*input0: 2, input1: 3",
    )
    _refused(_npz(tmp_path / "d.npz", input0=np.zeros((MAX_SAMPLES + 1, 1), np.int8)), f"1 to {MAX_SAMPLES}")
    _refused(_npz(tmp_path / "e.npz", input0=np.zeros((2, 3), ">f4")), "not a numeric little-endian dtype")
    _refused(_npz(tmp_path / "f.npz", input0=np.zeros((2, 3), "U4")), "not a numeric little-endian dtype")
    shapes = check_file(_npz(tmp_path / "g.npz", input0=np.zeros((4, 3, 8, 8), np.float64)))
    with pytest.raises(CalibrationRefused) as refused:
        check_against_inputs(shapes, CNN_INPUT)
    assert str(refused.value).endswith(
        "input0 (x) samples have shape [3, 8, 8], the example input [3, 16, 16]; input0 (x) is float64, the example "
        "input float32"
    )
    with pytest.raises(CalibrationRefused, match="2 array\\(s\\) for a model of 1 input"):
        check_against_inputs(check_file(_two(tmp_path)), CNN_INPUT)


def _two(tmp_path: Path) -> Path:
    return _npz(tmp_path / "two.npz", input0=np.zeros((2, 3, 16, 16), np.float32), input1=np.zeros((2, 4)))


# ------------------------------------------------------------------ used by the int8 options
def _cnn():
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)
    ).eval()
    return model, (torch.randn(4, 3, 16, 16),)


def test_the_harness_calibrates_on_the_files_samples_and_refuses_one_that_does_not_fit(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    from advisor.harness.calibration_samples import calibration_samples

    _, inputs = _cnn()
    path = _npz(tmp_path / "c.npz", input0=np.random.default_rng(0).normal(size=(3, 4, 3, 16, 16)).astype("f4"))
    samples, source = calibration_samples(str(path), inputs)
    assert (
        len(samples) == 3 and samples[0][0].shape == torch.Size([4, 3, 16, 16]) and samples[0][0].dtype is torch.float32
    )
    assert source == "the calibration file (3 sample(s): input0 float32[4, 3, 16, 16])"
    assert calibration_samples(None, inputs)[1] == "the example inputs (1 sample)"
    wrong = _npz(tmp_path / "w.npz", input0=np.zeros((3, 4, 3, 8, 8), np.float32))
    with pytest.raises(CalibrationRefused, match=r"samples have shape \[4, 3, 8, 8\], the example input \[4, 3, 16"):
        calibration_samples(str(wrong), inputs)


def test_pt2e_int8_calibrates_on_the_file(tmp_path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("torchao")
    from advisor.harness.backends.quantize import pt2e_int8

    model, inputs = _cnn()
    path = _npz(tmp_path / "c.npz", input0=np.random.default_rng(0).normal(size=(2, 4, 3, 16, 16)).astype("f4"))
    _, steps = pt2e_int8(model, inputs, str(path))
    assert steps["calibration"].startswith("the calibration file (2 sample(s)")


def test_onnxruntime_static_quantization_calibrates_on_the_file_and_the_snippet_reads_it(tmp_path, monkeypatch) -> None:
    torch = pytest.importorskip("torch")
    from advisor.harness.backends import get_backend

    ok, why = get_backend("onnxruntime").available("cpu")
    if not ok:
        pytest.skip(why)
    from advisor.core.quant_snippets import ort_int8_snippet
    from advisor.harness.backends.quantize import ort_int8

    model, inputs = _cnn()
    fp32 = str(tmp_path / "model.onnx")
    torch.onnx.export(model, inputs, dynamo=True).save(fp32)
    path = _npz(tmp_path / "c.npz", input0=np.random.default_rng(0).normal(size=(3, 4, 3, 16, 16)).astype("f4"))
    done = ort_int8(fp32, str(tmp_path / "model.int8.onnx"), inputs, str(path))
    assert (
        done["quantization"]
        == "static QDQ (calibrated on the calibration file (3 sample(s): input0 float32[4, 3, 16, 16]))"
    )
    # the snippet loops over the user's calibration.npz when it is there: a wrong-shaped one fails, so it is read
    monkeypatch.chdir(tmp_path)
    _npz(tmp_path / "calibration.npz", input0=np.zeros((2, 4, 3, 9, 9), np.float32))
    with pytest.raises(Exception, match="(?i)dimension|shape|index"):
        exec(compile(ort_int8_snippet(), "snippet", "exec"), {"model": model, "inputs": inputs})  # noqa: S102
    _npz(tmp_path / "calibration.npz", input0=np.random.default_rng(1).normal(size=(2, 4, 3, 16, 16)).astype("f4"))
    scope = {"model": model, "inputs": inputs}
    exec(compile(ort_int8_snippet(), "snippet", "exec"), scope)  # noqa: S102 - our own snippet
    assert len(scope["batches"]) == 2 and (tmp_path / "model.int8.onnx").is_file()


@pytest.fixture(scope="module")
def mlp_file(example_mlp_file: Path) -> Path:
    """The example MLP (`npu-advisor example mlp`), exported once per test worker (tests/conftest.py)."""
    return example_mlp_file


def test_analyze_local_refuses_a_calibration_file_that_does_not_match_the_model_before_measuring(
    mlp_file: Path, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    wrong = _npz(tmp_path / "wrong.npz", input0=np.zeros((2, 7, 7), np.int64))
    result = runner.invoke(
        app,
        [
            "analyze",
            str(mlp_file),
            "--local",
            "--target",
            "cpu",
            "--backends",
            "onnxruntime:int8",
            "--calibration",
            str(wrong),
        ],
    )
    assert result.exit_code == 2, result.output
    assert "calibration file does not match the model's example inputs" in result.output
    assert (
        "input0 (input) samples have shape [7, 7], the example input [8, 784]" in result.output
        and "is int64, the example input float32" in result.output
    )
    assert "Traceback" not in result.output and "measuring on" not in result.output
    # with --server a refused file is not uploaded: the same check stops it here, before the server is asked
    pickled = tmp_path / "calibration.npz"
    pickled.write_bytes(pickle.dumps([1, 2, 3]))
    on_server = runner.invoke(app, ["analyze", str(mlp_file), "--server", "http://x", "--calibration", str(pickled)])
    assert on_server.exit_code == 2 and "never unpickled" in on_server.output
    assert "cannot reach" not in on_server.output


@pytest.mark.slow
def test_the_measuring_child_reads_the_calibration_file_in_its_sandbox(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    from advisor.harness.backends import get_backend
    from advisor.harness.measurement import TimingPolicy, measure_model

    ok, why = get_backend("onnxruntime").available("cpu")
    if not ok:
        pytest.skip(why)
    model, inputs = _cnn()
    path = tmp_path / "cnn.pt2"
    torch.export.save(torch.export.export(model, inputs), str(path))
    samples = _npz(tmp_path / "c.npz", input0=np.random.default_rng(0).normal(size=(3, 4, 3, 16, 16)).astype("f4"))
    wrong = _npz(tmp_path / "w.npz", input0=np.zeros((3, 4, 3, 8, 8), np.float32))
    timing = TimingPolicy(
        min_iters=5, min_time_s=0.02, max_time_s=0.2, warmup_iters=1, warm_cache=False, dynamic_sizes=0
    )
    rows = {}
    for name, file in (("ok", samples), ("wrong", wrong)):
        measured = measure_model(
            str(path),
            backends=["onnxruntime:int8"],
            timing=timing,
            timeout_s=300,
            remeasure=False,
            calibration_file=str(file),
        )
        rows[name] = {(r["backend"], r["mode"]): r for r in measured["measurements"]}[("onnxruntime", "int8")]
    row = rows["ok"]
    assert row["status"] == "ok", (row["reason"], row["stderr_tail"])
    assert row["compile_breakdown"]["quantization"].startswith("static QDQ (calibrated on the calibration file (3 ")
    # a file that does not fit (the pipeline refuses it before measuring; measured directly, the row says why)
    assert rows["wrong"]["status"] != "ok"
    assert "samples have shape [4, 3, 8, 8], the example input [4, 3, 16, 16]" in rows["wrong"]["reason"]


def test_a_symbolic_dim_fits_any_sample_size_and_a_fixed_one_still_must_match(tmp_path) -> None:
    """An inspection records a dynamic dim by its symbol ("s0"): any size fits it, never a crash on int("s0")."""
    dynamic = [{"name": "ids", "shape": ["s0", 16], "dtype": "torch.int64"}]
    check_against_inputs(check_file(_npz(tmp_path / "a.npz", input0=np.zeros((2, 61, 16), np.int64))), dynamic)
    with pytest.raises(CalibrationRefused, match=r"samples have shape \[61, 8\], the example input \['s0', 16\]"):
        check_against_inputs(check_file(_npz(tmp_path / "b.npz", input0=np.zeros((2, 61, 8), np.int64))), dynamic)
    with pytest.raises(CalibrationRefused, match="samples have shape"):
        check_against_inputs(check_file(_npz(tmp_path / "c.npz", input0=np.zeros((2, 61), np.int64))), dynamic)
