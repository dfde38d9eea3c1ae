"""`npu-advisor inspect|analyze path/file.py:factory`: graph breaks at known lines, recompiles until a dim is marked
dynamic, export failures with draft_export's report, factories that raise / hang / crash, no partial file left.

The models live in tests/source_models/ (real small models written for these tests); each command runs the user's
code in a child process, once per model (module-scoped fixtures)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from advisor.cli import app

runner = CliRunner()
MODELS = Path(__file__).resolve().parents[1] / "source_models"


def _spec(name: str, factory: str) -> str:
    """The spec as a user types it from the current directory (paths in the report are relative to it)."""
    return f"{os.path.relpath(MODELS / name)}:{factory}"


def _where(name: str) -> str:
    return os.path.relpath(MODELS / name)


def inspect_json(spec: str, *extra: str) -> dict:
    result = runner.invoke(app, ["inspect", spec, "--json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def breaks_report() -> dict:
    return inspect_json(_spec("breaks.py", "make"))


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("batch") / "mlp.pt2"
    return inspect_json(_spec("dynamic_batch.py", "make"), "--export-to", str(out)), out


@pytest.fixture(scope="module")
def data_dependent(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("dd") / "gate.pt2"
    return inspect_json(_spec("data_dependent.py", "make"), "--export-to", str(out)), out


# ------------------------------------------------------------------------------------------ graph breaks
def test_graph_breaks_at_known_lines_with_source_text(breaks_report: dict) -> None:
    breaks = breaks_report["graph_breaks"]
    assert breaks["analysed"] is True
    assert breaks["break_count"] >= 2 and breaks["graph_count"] >= 3
    where = [(b["file"], b["line"]) for b in breaks["breaks"]]
    assert where == [(_where("breaks.py"), 14), (_where("breaks.py"), 16)]  # deduplicated, in line order
    branch, printing = breaks["breaks"]
    assert branch["code"] == "if y.sum() > 0:  # line 14: data-dependent branch"
    assert branch["function"] == "forward"
    assert printing["code"].startswith('print("shape", y.shape)')
    # Dynamo's own words: the kind is its message's first line, the hints its "Hint:" lines
    for item in breaks["breaks"]:
        assert item["kind"] and item["hints"], item
        assert not any(h.startswith("Hint:") for h in item["hints"])


def test_graph_breaks_printed_readably(breaks_report: dict) -> None:
    from advisor.cli.source_front import print_source_report

    console = Console(file=io.StringIO(), width=250)
    print_source_report(breaks_report, console)
    text = console.file.getvalue()
    assert f"1. {_where('breaks.py')}:14 in forward: " in text
    assert "if y.sum() > 0:" in text
    assert "from the submitting machine, not measured by a worker" in text


# ------------------------------------------------------------------------------------------ recompiles
def test_second_batch_size_recompiles_until_marked_dynamic(batch: tuple[dict, Path]) -> None:
    batch_report, _ = batch
    recompiles = batch_report["recompiles"]
    assert recompiles["analysed"] is True
    assert recompiles["base_shapes"] == {"x": [2, 8]}
    (point,) = recompiles["points"]
    assert point["shapes"] == {"x": [4, 8]}
    assert point["recompiled"] is True
    assert any("x" in guard and "size" in guard for guard in point["guard_failures"]), point
    marked = recompiles["marked_dynamic"]
    assert marked["dims"] == [{"input": "x", "dim": 0}]
    assert marked["recompiles"] == 0
    assert batch_report["graph_breaks"]["break_count"] == 0
    # non-strict exported it: strict is not tried (`--strict-export` tries both)
    assert [(a["strict"], a["ok"]) for a in batch_report["export"]["attempts"]] == [(False, True)]


def test_shape_sweep_points_are_the_calls(tmp_path: Path) -> None:
    from advisor.harness.source_probe import sweep_shapes

    base = {"x": [2, 8], "mask": [2, 8]}
    points = sweep_shapes(base, ["x", "mask"], {"points": [{"x": [4, 8]}, {"x": [2, 8]}]})
    assert points == [{"x": [4, 8], "mask": [2, 8]}]  # the example's own shape is no other shape
    ranges = sweep_shapes(base, ["x"], {"ranges": [{"input": "x", "dim": 0, "min": 1, "max": 16}]})
    assert [p["x"][0] for p in ranges] == [1, 4, 16]
    assert sweep_shapes({"x": [1, 8]}, ["x"], None) == [{"x": [2, 8]}]


# ------------------------------------------------------------------------------------------ export
def test_data_dependent_op_fails_export_with_draft_report(data_dependent: tuple[dict, Path]) -> None:
    report, out = data_dependent
    attempts = report["export"]["attempts"]
    assert [a["ok"] for a in attempts] == [False, False]
    assert all(a["error"] for a in attempts)
    draft = report["export"]["draft"]
    assert draft["ran"] is True and draft["ok"] is True, draft
    assert draft["problems"], draft
    (problem,) = draft["problems"]
    assert problem["kind"] == "data_dependent_error"
    assert problem["location"] == f"{_where('data_dependent.py')}:13 in forward"  # int(... .item())
    assert "torch._check" in problem["message"]
    assert report["export"].get("written") is None
    assert not out.exists()
    assert not list(out.parent.iterdir())  # no partial file either


def test_failed_save_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from advisor.harness import source_probe

    target = tmp_path / "model.pt2"
    target.write_bytes(b"the previous export")

    def half_written(program: object, path: str) -> None:
        Path(path).write_bytes(b"PK\x03\x04 half")
        raise RuntimeError("SerializeError: Failed serializing node flat_apply")

    monkeypatch.setattr(torch.export, "save", half_written)
    with pytest.raises(RuntimeError, match="flat_apply"):
        source_probe.save_atomically(object(), str(target))
    assert target.read_bytes() == b"the previous export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt2"]


def test_exported_program_written_on_success(batch: tuple[dict, Path]) -> None:
    import torch

    report, out = batch
    assert report["export"]["written"] == "mlp.pt2"
    assert sorted(p.name for p in out.parent.iterdir()) == ["mlp.pt2"]
    umask = os.umask(0o022)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # as a plain torch.export.save leaves it
    program = torch.export.load(out)
    assert program.module()(torch.ones(2, 8)).shape == (2, 4)


# ------------------------------------------------------------------------------------------ bad factories
@pytest.mark.parametrize(
    ("factory", "code", "words"),
    [
        ("raises", 1, ["raised ValueError: no weights at /nonexistent", "bad_factories.py:8 in raises"]),
        ("segfaults", 1, ["crashed", "SIGSEGV"]),
        ("wrong_shape", 2, ["returned str"]),
        ("missing", 2, ["has no function 'missing'"]),
    ],
)
def test_bad_factory_is_reported_not_fatal(factory: str, code: int, words: list[str]) -> None:
    result = runner.invoke(app, ["inspect", _spec("bad_factories.py", factory)])
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    for word in words:
        assert word in result.output


def test_hanging_factory_is_killed() -> None:
    result = runner.invoke(app, ["inspect", _spec("bad_factories.py", "hangs"), "--timeout", "3"])
    assert result.exit_code == 1, result.output
    assert "did not finish within 3 s" in result.output


def test_spec_forms() -> None:
    from advisor.cli.source_front import default_export_path, is_source_spec

    assert is_source_spec("models/net.py:make")
    assert is_source_spec("my_pkg.models:build_model")
    assert not is_source_spec("model.pt2")
    assert not is_source_spec("model.py:not-a-name")
    assert default_export_path("a/b/net.py:make") == Path("net-make.pt2")
    assert default_export_path("pkg.mod:build") == Path("mod-build.pt2")


# ------------------------------------------------------------------------------------------ analyze --local
def test_analyze_local_exports_then_decides_with_the_source_report(tmp_path: Path) -> None:
    """`package.module:factory` (the checkout is on the import path), the context's shape sweep as the other shapes; the
    usual analysis runs on the written file, and the recompile is a caveat of its recommendation."""
    context = tmp_path / "context.json"
    context.write_text(json.dumps({"target": "cpu", "shape_sweep": [{"x": [4, 8]}, {"x": [16, 8]}]}))
    out = tmp_path / "mlp.pt2"
    args = ["analyze", "tests.source_models.dynamic_batch:make", "--local", "--skip-measure", "--context", str(context)]
    result = runner.invoke(app, [*args, "--export-to", str(out), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert out.is_file()
    analysis = json.loads(result.stdout)
    report = analysis["inspection"]["source_report"]
    assert [p["shapes"]["x"][0] for p in report["recompiles"]["points"]] == [4, 16]
    assert [p["recompiled"] for p in report["recompiles"]["points"]] == [True, False]  # then automatic dynamic
    assert analysis["inspection"]["format"] == "exported_program"
    (caveat,) = [c for c in analysis["recommendation"]["caveats"] if "compiled again" in c["issue"]]
    assert "torch._dynamo.mark_dynamic(x, 0)" in caveat["fix"]
    assert "Recompiles: 1 of 2 other shape(s)" in result.output  # the source report, on stderr


def test_analyze_local_without_an_exported_program_exits_1(tmp_path: Path) -> None:
    out = tmp_path / "gate.pt2"
    spec = _spec("data_dependent.py", "make")
    result = runner.invoke(
        app, ["analyze", spec, "--local", "--skip-measure", "--target", "cpu", "--export-to", str(out)]
    )
    assert result.exit_code == 1, result.output
    assert "could not be exported" in result.output
    assert "draft_export" in result.output
    assert not list(tmp_path.iterdir())


def test_a_crash_in_the_middle_of_the_save_leaves_no_partial_file(tmp_path: Path) -> None:
    out = tmp_path / "linear.pt2"
    result = runner.invoke(app, ["inspect", _spec("crash_on_save.py", "make"), "--export-to", str(out)])
    assert result.exit_code == 1, result.output
    assert "SIGSEGV" in result.output
    assert not list(tmp_path.iterdir())  # the half-written temporary file was removed by the parent


def test_analyze_server_uploads_the_exported_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from advisor.cli import analyze_cmd

    sent: dict = {}

    def on_server(**remote: object) -> int:
        sent.update(remote)
        return 0

    monkeypatch.setattr(analyze_cmd, "_analyze_on_server", on_server)
    out = tmp_path / "mlp.pt2"
    spec = _spec("dynamic_batch.py", "make")
    args = ["analyze", spec, "--server", "http://advisor.example:8000", "--target", "cpu", "--export-to", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert Path(sent["model"]) == out and out.is_file()  # the exported file is what is uploaded
    report = sent["source_report"]  # with the source-side report, as validated here
    assert report["factory"] == spec and report["recompiles"]["points"][0]["recompiled"] is True
    assert "the report above is uploaded with the program (from the submitting machine" in result.output
    assert "does not store" not in result.output


# ------------------------------------------------------------------------------------------ the calls, read once
class _Bucketed(__import__("torch").nn.Module):
    """Specialises on the batch size (a shape-dependent branch): marking the batch dynamic does not save a compile."""

    def forward(self, x):  # noqa: ANN001, ANN201
        if x.shape[0] > 3:
            return x * 2
        return x + 1


@pytest.mark.parametrize(
    ("name", "base", "sweep"),
    [
        ("dynamic_batch", 2, None),  # marking removes the recompile
        ("dynamic_batch", 1, None),  # a batch of 1 is specialised: it does not
        ("logged", 2, {"points": [{"x": [3, 8]}, {"x": [8, 8]}]}),  # the frame resumed after the break is not marked
        ("breaks", 2, None),
        ("bucketed", 2, None),
        ("bucketed", 2, {"points": [{"x": [3, 8]}, {"x": [8, 8]}]}),
    ],
)
def test_marked_dynamic_read_from_the_calls_is_what_marking_gives(name: str, base: int, sweep: dict | None) -> None:
    """`marked_dynamic` reads from the calls already made what calling again with the dims marked would give (one
    dynamic trace fewer per model): the same number of recompiles as the calls made again with the marks, and Dynamo's
    guard failures of the frames a mark does not reach."""
    import importlib
    import sys

    import torch

    from advisor.harness import source_probe

    sys.path.insert(0, str(MODELS))
    try:
        model = _Bucketed() if name == "bucketed" else importlib.import_module(name).make()[0]
    finally:
        sys.path.remove(str(MODELS))
    x = torch.randn(base, 8)
    report, _, first = source_probe.recompiles(model, (x,), {}, ["x"], sweep)
    inferred = report["marked_dynamic"]
    shapes = [point["shapes"] for point in report["points"]]

    def inputs_at(point: dict, dims: list = ()) -> tuple:  # noqa: ANN001
        value = source_probe.resized(x, point["x"])
        for _, dim in dims:
            torch._dynamo.mark_dynamic(value, dim)
        return (value,), {}

    literal, _ = source_probe._calls(model, [{"x": [base, 8]}, *shapes], inputs_at, [("x", 0)])
    assert inferred["recompiles"] == sum(1 for call in literal[1:] if call.compiled), (inferred, literal)
    resumed = [f for call in literal[1:] for f in call.guard_failures if not f.startswith("0/")]
    assert [f for f in inferred["guard_failures"] if not f.startswith("0/")] == resumed
    assert first is not None and first.graph_count >= 1


def test_graph_breaks_from_the_first_call_are_explains(breaks_report: dict) -> None:
    """The recompile check's first call captures what `torch._dynamo.explain` does: the same breaks, no trace of
    their own."""
    import sys

    from advisor.harness import source_probe

    sys.path.insert(0, str(MODELS))
    try:
        import breaks as module
    finally:
        sys.path.remove(str(MODELS))
    model, args = module.make()
    explained = source_probe.graph_breaks(model, args, {})
    assert (explained["break_count"], explained["graph_count"]) == (
        breaks_report["graph_breaks"]["break_count"],
        breaks_report["graph_breaks"]["graph_count"],
    )
    assert [b["line"] for b in explained["breaks"]] == [b["line"] for b in breaks_report["graph_breaks"]["breaks"]]


def test_strict_export_on_request(tmp_path: Path) -> None:
    report = inspect_json(_spec("dynamic_batch.py", "make"), "--strict-export")
    assert [(a["strict"], a["ok"]) for a in report["export"]["attempts"]] == [(False, True), (True, True)]
