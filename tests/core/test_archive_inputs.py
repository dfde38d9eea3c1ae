"""advisor.core.archive_inputs: an ExportedProgram's user inputs from its JSON alone (never torch.load or pickle), so
the server can refuse a calibration file that does not fit at submission (issue 44 item 6); a crafted archive whose
JSON is deep, huge, malformed or of an unexpected shape is "cannot tell" (None), fast, never an exception."""

from __future__ import annotations

import io
import json
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from advisor.core.archive_inputs import MAX_JSON_BYTES, exported_inputs
from advisor.core.calibration import CalibrationArray, CalibrationInfo, CalibrationRefused, check_against_inputs

ENTRY = "m/models/model.json"


def _archive(model_json: bytes | None, *, extra: dict[str, bytes] | None = None) -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        if model_json is not None:
            archive.writestr(ENTRY, model_json)
        for name, data in (extra or {}).items():
            archive.writestr(name, data)
    buffer.seek(0)
    return buffer


def _program(inputs: list[dict[str, Any]], values: dict[str, Any]) -> bytes:
    specs = [{"parameter": {"arg": {"name": "p_w"}, "parameter_name": "w"}}, *inputs]
    graph = {"inputs": [], "tensor_values": values}
    return json.dumps({"graph_module": {"graph": graph, "signature": {"input_specs": specs}}}).encode()


def _user(name: str) -> dict[str, Any]:
    return {"user_input": {"arg": {"as_tensor": {"name": name}}}}


def test_a_real_archive_names_its_inputs_as_the_inspection_does(example_mlp_file: Path) -> None:
    with zipfile.ZipFile(example_mlp_file) as archive:
        top = archive.namelist()[0].split("/", 1)[0]
    with open(example_mlp_file, "rb") as handle:
        assert exported_inputs(handle, top) == [{"name": "input", "shape": [8, 784], "dtype": "float32"}]


def test_symbolic_sizes_keep_their_expression_and_fit_any_sample_size() -> None:
    values = {"x": {"dtype": 7, "sizes": [{"as_expr": {"expr_str": "s77", "hint": 4}}, {"as_int": 16}]}}
    inputs = exported_inputs(_archive(_program([_user("x")], values)), "m")
    assert inputs == [{"name": "x", "shape": ["s77", 16], "dtype": "float32"}]
    check_against_inputs(CalibrationInfo(2, (CalibrationArray("input0", "float32", (2, 9, 16)),)), inputs)
    with pytest.raises(CalibrationRefused, match=r"input0 \(x\) samples have shape \[9, 15\], the example input"):
        check_against_inputs(CalibrationInfo(2, (CalibrationArray("input0", "float32", (2, 9, 15)),)), inputs)


@pytest.mark.parametrize(
    "model_json",
    [
        b"{not json",
        b"[" * 200_000 + b"]" * 200_000,  # deeper than any parser should recurse
        b'{"graph_module": ' * 5000 + b"1" + b"}" * 5000,
        json.dumps({"graph_module": {"signature": {"input_specs": "x"}, "graph": {"tensor_values": {}}}}).encode(),
        json.dumps([1, 2, 3]).encode(),
        _program([_user("x")], {}),  # the input's tensor is not described
        _program([_user("x")], {"x": {"dtype": 99, "sizes": [{"as_int": 2}]}}),  # an unknown dtype
        _program([_user("x")], {"x": {"dtype": 7, "sizes": [{"as_int": -1}]}}),
        _program([_user("x")], {"x": {"dtype": 7, "sizes": [{"as_int": True}]}}),
        _program([_user("x")], {"x": {"dtype": 7, "sizes": [{"as_int": 1}] * 17}}),
        _program([{"user_input": {"arg": {"as_int": 3}}}], {}),  # a non-tensor user input
        _program([_user("x")] * 101, {"x": {"dtype": 7, "sizes": []}}),
    ],
)
def test_a_crafted_json_is_cannot_tell_and_fast(model_json: bytes) -> None:
    started = time.perf_counter()
    assert exported_inputs(_archive(model_json), "m") is None
    assert time.perf_counter() - started < 2.0


def test_a_huge_or_missing_entry_and_a_non_zip_are_cannot_tell_without_reading_them() -> None:
    huge = b" " * (MAX_JSON_BYTES + 1)
    started = time.perf_counter()
    assert exported_inputs(_archive(huge), "m") is None
    assert time.perf_counter() - started < 2.0
    assert exported_inputs(_archive(None, extra={"m/code/x.py": b"pass"}), "m") is None  # TorchScript: no JSON
    assert exported_inputs(io.BytesIO(b"PK\x03\x04 not a zip"), "m") is None
    assert exported_inputs(io.BytesIO(b""), "m") is None
    assert exported_inputs(_archive(_program([], {})), "other") is None  # not where the sniff found the archive
    assert exported_inputs(_archive(_program([], {})), "m") == []  # no user inputs: nothing to check against
