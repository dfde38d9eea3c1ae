"""The recompile check with inputs nested in dicts and lists (issue 43): a dict-input model is analysed (it used to
say "the example inputs hold no tensor at the top level"), and a tensor plus a dict gets every tensor resized (it
used to double only the tensor, so the check's own call failed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from typer.testing import CliRunner

from advisor.cli import app

runner = CliRunner()
MODEL = os.path.relpath(Path(__file__).resolve().parents[1] / "source_models" / "nested_inputs.py")


def inspect_json(factory: str, *extra: str) -> dict:
    result = runner.invoke(app, ["inspect", f"{MODEL}:{factory}", "--json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_dict_input_models_recompiles_are_analysed() -> None:
    recompiles = inspect_json("make_dict")["recompiles"]
    assert recompiles["analysed"] is True, recompiles
    assert recompiles["base_shapes"] == {"batch.input_ids": [2, 6], "batch.mask": [2, 6]}
    (point,) = recompiles["points"]
    assert point["shapes"] == {"batch.input_ids": [4, 6], "batch.mask": [4, 6]}
    assert point["error"] is None and point["recompiled"] is True
    assert recompiles["marked_dynamic"]["dims"] == [
        {"input": "batch.input_ids", "dim": 0},
        {"input": "batch.mask", "dim": 0},
    ]


def test_a_tensor_plus_a_dict_input_has_every_tensor_resized() -> None:
    recompiles = inspect_json("make_tensor_and_dict")["recompiles"]
    assert recompiles["analysed"] is True
    (point,) = recompiles["points"]
    assert point["shapes"] == {"x": [4, 8], "extra.scale": [4, 8], "extra.parts.0": [4, 8]}
    assert point["error"] is None, point["error"]
    assert point["recompiled"] is True


def test_the_traffics_shapes_are_replayed_with_what_each_plan_compiles(tmp_path: Path) -> None:
    traffic = tmp_path / "calls.jsonl"
    lengths = {3: 40, 6: 30, 9: 5, 12: 2}
    traffic.write_text(
        "".join(
            json.dumps({"batch.input_ids": [2, n], "batch.mask": [2, n], "count": count}) + "\n"
            for n, count in lengths.items()
        )
    )
    report = inspect_json("make_dict", "--shape-traffic", str(traffic), "--max-graphs", "2")
    recompiles = report["recompiles"]
    swept = [point["shapes"]["batch.input_ids"][1] for point in recompiles["points"]]
    assert set(swept) <= set(lengths) | {4, 8} and {3, 12} <= set(swept)  # the ends are always called
    assert all(point["error"] is None for point in recompiles["points"])
    static = recompiles["static"]
    assert static["error"] is None and static["shapes"] == len(swept) + 1
    assert static["graphs_per_shape"] == [1] * static["shapes"]  # no graph break: one graph per shape or bucket
    assert static["compiled_again"] == []
    assert recompiles["marked_dynamic"]["recompiles"] == 0
    text = runner.invoke(app, ["inspect", f"{MODEL}:make_dict", "--shape-traffic", str(traffic)]).output
    assert "static shapes (automatic dynamic off):" in text and "1 graph(s) per bucket" in text


def test_bad_traffic_for_inspect_is_named_and_nothing_runs(tmp_path: Path) -> None:
    traffic = tmp_path / "calls.jsonl"
    traffic.write_text('{"batch.input_ids": [2, 3]}\n{"batch.input_ids": [2]}\n')
    result = runner.invoke(app, ["inspect", f"{MODEL}:make_dict", "--shape-traffic", str(traffic)])
    assert result.exit_code == 2 and "line 2: batch.input_ids has rank 1, earlier lines 2" in result.output
