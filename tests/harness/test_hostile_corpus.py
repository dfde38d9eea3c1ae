"""The hostile corpus (tests/support/hostile_corpus.py) against the worker's own inspection and measurement children.

Layer 1 on its own (no OS sandbox): every pickle, wherever it sits in the archive and whatever it is called,
is refused with status "rejected" naming the entry, and the marker never appears. Layers 2 and 3 (the
bubblewrap sandbox and the limits): TorchScript that reaches for host files leaves them unchanged, an endless
loop ends as "timeout", an unbounded allocation as "oom", a segfault as "crashed". Every child is forked
from one zygote, as a worker's job does; after all of them the zygote still serves a clean model."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.harness.isolated_inspection import inspect_isolated
from advisor.harness.isolation import NO_ISOLATION
from advisor.harness.measurement import measure_model, measurement_zygote
from tests.support.bubblewrap import require_bubblewrap

pytestmark = [pytest.mark.slow, pytest.mark.own_sandbox]  # own_sandbox: what a job's own sandbox shows a model


def _cases(corpus: dict, *expects: str) -> list:
    return [case for case in corpus["cases"] if case.expect in expects]


def test_the_corpus_has_at_least_thirty_files(hostile_corpus) -> None:
    assert len(hostile_corpus["cases"]) >= 30
    assert {case.expect for case in hostile_corpus["cases"]} >= {
        "upload",
        "rejected",
        "load_error",
        "confined",
        "timeout",
        "oom",
        "crashed",
    }


def test_no_pickle_runs_even_without_the_os_sandbox(hostile_corpus, monkeypatch) -> None:
    """The restricted unpickler alone stops every pickle in the corpus (the marker path is visible here)."""
    monkeypatch.setenv("ADVISOR_ISOLATION", "none")
    cases = _cases(hostile_corpus, "rejected", "load_error")
    with measurement_zygote("cpu", [str(case.path) for case in cases]) as zygote:
        assert zygote.isolation is NO_ISOLATION or zygote.isolation.kind == "none"
        for case in cases:
            result = inspect_isolated(str(case.path), input_shapes=case.input_shapes, zygote=zygote, timeout_s=120)
            assert result.status == case.expect, (case.name, result)
            if case.expect == "rejected":
                assert "never unpickles objects from uploads" in result.reason
                assert case.detail is None or f"`{case.detail}`" in result.reason, (case.name, result.reason)
            assert not hostile_corpus["marker"].exists(), f"{case.name}: a pickle ran"


def test_hostile_torchscript_is_confined_and_limited(hostile_corpus, monkeypatch) -> None:
    isolation = require_bubblewrap()
    monkeypatch.setenv("ADVISOR_ISOLATION", "bubblewrap")
    cases = _cases(hostile_corpus, "rejected", "confined", "timeout", "crashed")
    decoy: Path = hostile_corpus["decoy"]
    with measurement_zygote("cpu", [str(case.path) for case in cases]) as zygote:
        assert zygote.isolation == isolation
        for case in cases:
            timeout_s = 3 if case.expect == "timeout" else 120  # the endless loop spins a core until it ends
            result = inspect_isolated(
                str(case.path), input_shapes=case.input_shapes, zygote=zygote, timeout_s=timeout_s, memory_limit_mb=4096
            )
            if case.expect != "confined":
                assert result.status == case.expect, (case.name, result)
            assert decoy.read_bytes() == hostile_corpus["decoy_bytes"], f"{case.name} changed a host file"
            assert not hostile_corpus["marker"].exists(), f"{case.name}: a pickle ran"
        # the same zygote still serves the next job
        clean = next(case for case in cases if case.name == "script_extra_file_pickle.pt")
        again = inspect_isolated(str(clean.path), input_shapes=clean.input_shapes, zygote=zygote, timeout_s=120)
        assert again.status == "ok", again


def test_unbounded_allocation_is_recorded_as_oom(hostile_corpus) -> None:
    cases = _cases(hostile_corpus, "oom")
    # one sandbox of this test's own for both files (not one each): a child that ran out of memory takes only
    # itself down, as the zygote reuse in test_hostile_torchscript_is_confined_and_limited shows
    with measurement_zygote("cpu", [str(case.path) for case in cases]) as zygote:
        for case in cases:
            run = measure_model(
                str(case.path),
                backends=["eager"],
                input_shapes=list(case.input_shapes),
                timeout_s=120,
                memory_limit_mb=3072,
                zygote=zygote,
            )
            eager = run["measurements"][0]
            assert eager["status"] == "oom", (case.name, eager["status"], eager["reason"])
            assert hostile_corpus["decoy"].read_bytes() == hostile_corpus["decoy_bytes"]
