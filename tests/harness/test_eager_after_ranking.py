"""What of eager waits until the options are ranked (issue 46 item 2): its profile moves to a leading option's
details child, and its own first window stops at a looser CI - nothing any option is ranked on. The children are
stood in for here (advisor.harness.measurement.details routes, the child measures: tests/harness/
test_plan_by_context.py runs them)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from advisor.core.context import parse_context
from advisor.harness.measurement import details
from advisor.harness.measurement.timing import TimingPolicy

POLICY = asdict(TimingPolicy())
PRODUCTION = parse_context({"stage": "production", "target": "cpu", "model_changes": "frozen"})
VARIANTS = [("eager", "default"), ("inductor", "default"), ("onnxruntime", "default")]


def _rows(*statuses: str) -> list[dict[str, Any]]:
    return [
        {"backend": name, "mode": mode, "status": status, "latency": {"median_ms": 10.0 + i}, "time_breakdown": None}
        for i, ((name, mode), status) in enumerate(zip(VARIANTS, statuses, strict=True))
    ]


def _children(monkeypatch: pytest.MonkeyPatch, failing: set[str] = frozenset()) -> list[tuple[str, bool, dict]]:
    """Stand-in details children: each call recorded as (label, carries eager's profile, its policy); a child
    named in `failing` returns nothing, as a details child that died leaves its row as it was."""
    calls: list[tuple[str, bool, dict]] = []

    def child(spec, mode, is_baseline, row, common, sandbox, cache_dir, policy, eager=None) -> None:
        label = f"{spec}:{mode}"
        calls.append((label, eager is not None, policy))
        if label in failing:
            return
        row["time_breakdown"] = {"entries": [], "calls": 3, "of": label}
        if eager is not None:
            eager["time_breakdown"] = {"entries": [], "calls": 3, "of": f"eager, in {label}'s child"}

    monkeypatch.setattr(details, "measure_details", child)
    return calls


def _detail(wanted: list[str], rows: list[dict[str, Any]], policy: dict = POLICY) -> dict:
    run = {"measurements": rows}
    return details.measure_leading_details(wanted, run, VARIANTS, {}, {}, Path("/nonexistent"), policy)


def test_eager_is_profiled_in_the_recommended_options_details_child(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _children(monkeypatch)
    rows = _rows("ok", "ok", "ok")
    quality = _detail(["onnxruntime:default", "inductor:default"], rows)
    assert [(label, carried) for label, carried, _ in calls] == [
        ("inductor:default", True),  # the first leading option's child takes eager's profile: no child of its own
        ("onnxruntime:default", False),
    ]
    assert rows[0]["time_breakdown"]["of"] == "eager, in inductor:default's child"
    assert quality["detailed"] == ["inductor:default", "onnxruntime:default"], "eager got its profile, not details"


def test_eager_in_the_lead_profiles_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _children(monkeypatch)
    rows = _rows("ok", "ok", "ok")
    _detail(["eager:default", "inductor:default"], rows)
    assert [(label, carried) for label, carried, _ in calls] == [("eager:default", False), ("inductor:default", False)]
    assert rows[0]["time_breakdown"]["of"] == "eager:default"


def test_a_failed_carrier_passes_eager_on_and_the_last_resort_is_a_profile_only_child(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _children(monkeypatch, failing={"inductor:default"})
    rows = _rows("ok", "ok", "ok")
    _detail(["inductor:default", "onnxruntime:default"], rows)
    assert [(label, carried) for label, carried, _ in calls] == [
        ("inductor:default", True),
        ("onnxruntime:default", True),
    ]
    assert rows[0]["time_breakdown"]["of"] == "eager, in onnxruntime:default's child"

    calls = _children(monkeypatch, failing={"inductor:default", "onnxruntime:default"})
    rows = _rows("ok", "ok", "ok")
    _detail(["inductor:default", "onnxruntime:default"], rows)
    last_label, last_carried, last_policy = calls[-1]
    assert (last_label, last_carried) == ("eager:default", False), calls
    assert last_policy["dynamic_sizes"] == 0 and last_policy["profile"], "the profile only, not eager's other sizes"
    assert rows[0]["time_breakdown"]["of"] == "eager:default"


def test_no_profile_asked_or_no_eager_timed_means_no_eager_profile_child(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _children(monkeypatch)
    _detail(["inductor:default"], _rows("ok", "ok", "ok"), {**POLICY, "profile": False})
    assert calls == [("inductor:default", False, {**POLICY, "profile": False})]

    calls = _children(monkeypatch)
    rows = _rows("fail_accuracy", "ok", "ok")
    rows[0]["latency"] = None
    _detail(["inductor:default"], rows)
    assert [label for label, _, _ in calls] == ["inductor:default"]


def test_the_first_pass_leaves_every_profile_and_eager_times_a_shorter_window() -> None:
    eager = details.first_pass_policy(PRODUCTION, "inference", POLICY, True)
    option = details.first_pass_policy(PRODUCTION, "inference", POLICY, False)
    assert not eager["profile"] and not option["profile"]
    assert eager["ci_target"] == 2 * POLICY["ci_target"] and eager["max_time_s"] == POLICY["max_time_s"] / 2
    assert eager["min_iters"] == POLICY["min_iters"] and eager["min_time_s"] == POLICY["min_time_s"]
    assert option["ci_target"] == POLICY["ci_target"] and option["max_time_s"] == POLICY["max_time_s"]
    short = details.first_pass_policy(PRODUCTION, "inference", {**POLICY, "min_time_s": 0.5, "max_time_s": 0.6}, True)
    assert short["max_time_s"] == 0.5, "never under its minimum time"


def test_eager_keeps_its_full_window_where_its_own_numbers_decide() -> None:
    """A latency target is checked on each option's own p99, eager's included; without a context (`measure`) or
    for training, every child times as the policy says."""
    target = parse_context({"stage": "production", "target": "cpu", "latency_target_ms": 50})
    assert details.first_pass_policy(target, "inference", POLICY, True)["ci_target"] == POLICY["ci_target"]
    assert details.first_pass_policy(None, "inference", POLICY, True) == POLICY
    assert details.first_pass_policy(PRODUCTION, "training", POLICY, True) == POLICY
