"""The dashboard's Reproduce command reproduces: the uploaded files' own names, the int8 modes, the calibration file,
and an option set that `npu-advisor analyze` measures again exactly (advisor.core.reproduce)."""

from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from advisor.core.reproduce import backends_argument, reproduce_command
from app.upload_names import clean_name

CPU_CONTEXT = {"stage": "edge", "target": "cpu", "needs_offline_export": True}


def _npz(shape: tuple[int, ...]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, input0=np.random.default_rng(0).normal(size=shape).astype(np.float32))
    return buffer.getvalue()


def test_the_api_keeps_the_uploaded_names_and_the_page_names_them(client, model_file: Path) -> None:  # noqa: ANN001
    with open(model_file, "rb") as fh:
        files = {
            "model": ("../../home/ann/my model (v2).pt2", fh),
            "calibration": ("C:\\data\\cal samples.npz", _npz((3, 8, 784))),
        }
        data = {
            "context": json.dumps(CPU_CONTEXT),
            "model_name": "mobilenet (upload page)",
            "backends": "onnxruntime:int8",
        }
        answer = client.post("/api/v1/analyze", files=files, data=data)
    assert answer.status_code == 202, answer.text
    detail = client.get(f"/api/v1/analyses/{answer.json()['id']}").json()
    assert detail["upload_names"] == {"model": "my model (v2).pt2", "calibration": "cal samples.npz"}
    page = client.get(f"/analyses/{answer.json()['id']}").text
    assert "my model (v2).pt2" in page and "cal samples.npz" in page


def test_hostile_file_names_are_cut_to_a_printable_base_name() -> None:
    assert clean_name("../../etc/passwd") == "passwd"
    assert clean_name("a\nb\x1b[31m.pt2") == "ab[31m.pt2"
    assert clean_name("..") is None and clean_name("") is None and clean_name("dir/") is None
    assert len(clean_name("x" * 5000) or "") == 200


def test_the_option_set_round_trips_through_the_clis_backends_parsing() -> None:
    pytest.importorskip("torch")
    from advisor.harness.measurement.plan import plan_variants

    for measured in (
        [("eager", "default"), ("onnxruntime", "int8")],
        [("eager", "default"), ("inductor", "default")],
        [("eager", "default"), ("inductor", "default"), ("inductor", "max-autotune"), ("onnxruntime", "default")],
        [("eager", "default"), ("inductor", "default"), ("onnxruntime", "int8"), ("openvino", "int8")],
    ):
        argument = backends_argument(measured, "cpu")
        assert set(plan_variants(argument.split(","), "cpu")) == set(measured), argument


@pytest.mark.slow
def test_running_the_printed_command_measures_the_same_options(tmp_path: Path, model_file: Path) -> None:
    """The command as the page prints it, run in a folder holding the user's files under their own names."""
    shutil.copy(model_file, tmp_path / "my model.pt2")
    (tmp_path / "cal samples.npz").write_bytes(_npz((3, 8, 784)))
    measured = [("eager", "default"), ("onnxruntime", "int8"), ("onnxruntime", "default")]
    lines = reproduce_command(
        context=CPU_CONTEXT,
        options=measured,
        device="cpu",
        model_file="my model.pt2",
        calibration_file="cal samples.npz",
    )
    assert "--calibration 'cal samples.npz'" in lines and "onnxruntime:int8" in lines
    script = lines + " --format json --out report.json\n"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    rows = report["measurements"]["measurements"]
    assert {(row["backend"], row["mode"]) for row in rows} == set(measured)
    assert shlex.split(lines.splitlines()[1])[2] == "my model.pt2"
