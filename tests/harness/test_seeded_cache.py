"""A mode that compiles its floor mode's graph first (Inductor max-autotune after default) starts from the kernels the
floor built in the same job, and its row says its cold compile is then a bound, not a measurement."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from advisor.core import noise
from advisor.core.report import render
from advisor.core.results import MeasurementRun
from advisor.harness import measurement as measure
from advisor.harness.measurement import run as measurement_run
from advisor.harness.measurement.seeded_cache import floor_index, seed_compile_cache, state_seeded_compile
from tests.harness.test_measure_noise import QUIET, FakeZygote
from tests.support.fixtures_decide import measurement


def _cache(root: Path) -> Path:
    (root / "ab").mkdir(parents=True)
    (root / "ab" / "kernel.so").write_bytes(b"built once")
    (root / "fxgraph" / "xy").mkdir(parents=True)
    (root / "fxgraph" / "xy" / "entry").write_bytes(b"default's graph")
    (root / "locks").mkdir()
    (root / "locks" / "ab.lock").write_bytes(b"")
    return root


def test_a_seeded_cache_holds_the_floors_kernels_and_replacing_one_leaves_the_floors_cache_alone(tmp_path) -> None:
    floor = _cache(tmp_path / "cache-1")
    target = tmp_path / "cache-2"
    target.mkdir()
    (target / "own").write_bytes(b"already here")

    assert seed_compile_cache(floor, target) == 2  # the kernel and the graph entry; no lock file
    assert (target / "ab" / "kernel.so").read_bytes() == b"built once"
    assert os.path.samefile(target / "ab" / "kernel.so", floor / "ab" / "kernel.so")  # linked, not copied
    assert not (target / "locks").exists()  # a lock is per cache
    assert (target / "own").read_bytes() == b"already here"

    # Inductor writes a cache file by renaming a new one over it: the floor's copy must not change
    fresh = target / "ab" / "kernel.so.tmp"
    fresh.write_bytes(b"max-autotune's")
    fresh.replace(target / "ab" / "kernel.so")
    assert (floor / "ab" / "kernel.so").read_bytes() == b"built once"
    assert seed_compile_cache(tmp_path / "missing", target) == 0


def test_a_cache_that_cannot_be_copied_leaves_a_cold_compile_not_a_failed_variant(tmp_path, monkeypatch) -> None:
    """A full scratch directory: neither a link nor a copy can be made. The child compiles cold, and its row claims
    no bound (state_seeded_compile with no files seeded keeps the measured compile as the cold one)."""
    import shutil

    floor = _cache(tmp_path / "cache-1")

    def full(*_: Any, **__: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "link", full)
    monkeypatch.setattr(shutil, "copy2", full)
    assert seed_compile_cache(floor, tmp_path / "cache-2") == 0
    row = measurement("inductor", mode="max-autotune", compile_s=3.0, device="cpu")
    for nothing in (0, None):
        state_seeded_compile(row, measurement("inductor", compile_s=12.0, device="cpu"), files_seeded=nothing)
        assert row["compile_s_cold"] == 3.0 and "compile_seeded" not in row


def test_the_answer_says_at_most_for_a_bounded_compile_and_the_warm_number_as_measured() -> None:
    from advisor.core.decision.candidates import Option

    row = measurement("inductor", mode="max-autotune", compile_s=15.0, warm_s=0.5, device="cpu")
    row["compile_seeded"] = {"from_option": "inductor:default", "measured_s": 3.0, "floor_cold_s": 12.0}
    option = Option("inductor", "max-autotune", "generic", row=row)
    assert option.compile_phrase(warm=False) == "at most 15 s"
    assert option.compile_phrase(warm=True) == "0.5 s"  # the warm compile was measured from its own cache
    del row["compile_seeded"]
    assert option.compile_phrase(warm=False) == "15 s"


def test_the_floor_is_the_compiled_default_row_of_the_same_backend() -> None:
    eager = measurement("eager", device="cpu")
    default = measurement("inductor", compile_s=12.0, device="cpu")
    failed = measurement("inductor", status="compile_error", device="cpu")
    ort = measurement("onnxruntime", device="cpu")
    assert floor_index("inductor", "max-autotune", [eager, default, ort]) == 1
    assert floor_index("inductor", "max-autotune", [eager, failed]) is None  # it built nothing to start from
    assert floor_index("inductor", "max-autotune", [eager, ort]) is None  # default not measured
    assert floor_index("inductor", "default", [eager, default]) is None  # default compiles from scratch
    assert floor_index("onnxruntime", "default", [eager, default]) is None  # another backend: nothing to share


def _fake_children(monkeypatch: pytest.MonkeyPatch, default_status: str = "ok") -> list[tuple[str, Any]]:
    """Children that record the seed each variant got; max-autotune's "measured" compile is 3 s, default's 12 s."""
    seen: list[tuple[str, Any]] = []

    def measure_one(spec: str, mode: str, is_baseline: bool, *args: Any, seed: Any = None, **_: Any) -> tuple:
        seen.append((f"{spec}:{mode}", seed))
        if is_baseline:
            return measurement("eager", median_ms=10.0, device="cpu"), {"device": "cpu", "measured_on": "cpu"}
        compile_s = 12.0 if mode == "default" else 3.0
        status = default_status if mode == "default" else "ok"
        row = measurement(spec, mode=mode, median_ms=5.0, eager_ms=10.0, compile_s=compile_s, status=status)
        row["device"] = "cpu"
        if seed is not None:
            state_seeded_compile(row, seed[1], files_seeded=2)
        return row, {"device": "cpu", "measured_on": "cpu"}

    monkeypatch.setattr(measurement_run, "measure_one", measure_one)
    monkeypatch.setattr(measurement_run, "check_model_file", lambda path, inputs: None)
    monkeypatch.setattr(noise, "read_load", lambda *_: QUIET)
    return seen


def test_max_autotune_starts_from_defaults_cache_and_states_its_cold_compile_as_a_bound(monkeypatch, tmp_path):
    seen = _fake_children(monkeypatch)
    run = measure.measure_model(
        "model.pt2", backends=["inductor:default", "inductor:max-autotune"], zygote=FakeZygote(tmp_path)
    )
    seeds = dict(seen)
    assert seeds["eager:default"] is None and seeds["inductor:default"] is None
    cache, floor_row = seeds["inductor:max-autotune"]
    assert cache == Path(f"{tmp_path}/measure/cache-1") and floor_row["mode"] == "default"

    row = run["measurements"][2]
    assert row["compile_s_cold"] == 15.0  # 3 s measured from default's kernels + default's own 12 s cold compile
    assert row["compile_seeded"] == {
        "from_option": "inductor:default",
        "measured_s": 3.0,
        "floor_cold_s": 12.0,
        "files_seeded": 2,
    }

    analysis = {"status": "done", "measurements": MeasurementRun.model_validate(run).model_dump(), "recommendation": {}}
    text = render(analysis, "markdown")
    assert "≤ 15 s" in text
    assert "cold at most 15 s, not measured cold - it compiled in 3 s starting from the kernels inductor:default" in (
        text
    )


def test_without_a_compiled_default_max_autotune_compiles_cold(monkeypatch, tmp_path) -> None:
    seen = _fake_children(monkeypatch, default_status="compile_error")
    run = measure.measure_model(
        "model.pt2", backends=["inductor:default", "inductor:max-autotune"], zygote=FakeZygote(tmp_path)
    )
    assert dict(seen)["inductor:max-autotune"] is None
    assert run["measurements"][2]["compile_s_cold"] == 3.0 and "compile_seeded" not in run["measurements"][2]
