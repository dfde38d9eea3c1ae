"""Racing (issue 46 item 2): an option stops being timed only once a stated rule rules it out - clearly behind the
leader beyond the noise, or a filter of the context - and the pick never depends on that: over generated rows, every
eliminated option's interval is behind the leader's at elimination time and the recommendation is never one of
them."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.core.context import parse_context
from advisor.core.decision import racing
from advisor.core.decision.candidates import beats, measured_options, paired_ratio
from advisor.core.decision.engine import decide
from tests.support.fixtures_decide import measurement, run

PRODUCTION = parse_context({"target": "cpu", "stage": "production", "model_changes": "frozen"})


def option_row(backend: str, mode: str, median_ms: float, spread: float, eager_ms: float = 10.0) -> dict[str, Any]:
    verdict = "noisy" if spread > 0.1 else "valid"
    return measurement(
        backend, mode=mode, median_ms=median_ms, eager_ms=eager_ms, spread=spread, verdict=verdict, device="cpu"
    )


def eager_row(median_ms: float = 10.0, spread: float = 0.02) -> dict[str, Any]:
    return measurement("eager", median_ms=median_ms, spread=spread, device="cpu")


def inaccurate(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "status": "fail_accuracy", "reason": "inaccurate output", "accuracy": {"passed": False}}


def test_an_option_clearly_behind_the_leader_is_eliminated_naming_the_leader_and_the_interval() -> None:
    rows = run(
        eager_row(),
        option_row("inductor", "default", 2.0, 0.02),  # 5x eager, tight: the leader
        option_row("onnxruntime", "default", 8.0, 0.15),  # noisy, but far behind
        device="cpu",
    )
    out = racing.eliminations(rows, PRODUCTION)
    assert set(out) == {"onnxruntime:default"}
    assert out["onnxruntime:default"].leader == "inductor:default"
    reason = out["onnxruntime:default"].reason
    assert reason.startswith("clearly behind inductor:default") and "faster beyond the noise" in reason


def test_options_within_noise_of_the_leader_stay_in_the_race() -> None:
    rows = run(
        eager_row(),
        option_row("inductor", "default", 5.0, 0.3),  # wide: unresolved
        option_row("inductor", "max-autotune", 4.5, 0.3),
        option_row("onnxruntime", "default", 4.8, 0.05),
        device="cpu",
    )
    assert racing.eliminations(rows, PRODUCTION) == {}


def test_eager_and_a_row_whose_eager_saw_another_machine_are_never_eliminated() -> None:
    slow_machine = option_row("onnxruntime", "default", 40.0, 0.02, eager_ms=45.0)  # its eager 4.5x the others'
    rows = run(eager_row(), option_row("inductor", "default", 2.0, 0.02), slow_machine, device="cpu")
    out = racing.eliminations(rows, PRODUCTION)
    assert "eager:default" not in out and "onnxruntime:default" not in out


def test_an_option_whose_accuracy_failed_is_ruled_out_even_when_it_is_the_fastest() -> None:
    rows = run(
        eager_row(),
        option_row("inductor", "default", 5.0, 0.02),
        inaccurate(option_row("onnxruntime", "default", 1.0, 0.02)),
        device="cpu",
    )
    out = racing.eliminations(rows, PRODUCTION)
    assert out["onnxruntime:default"].leader is None
    assert out["onnxruntime:default"].reason.startswith("ruled out:")


def test_the_first_window_races_against_the_best_low_end_of_a_qualified_option() -> None:
    rows = run(
        eager_row(),
        option_row("inductor", "default", 5.0, 0.02),
        inaccurate(option_row("onnxruntime", "default", 1.0, 0.02)),  # faster, but cannot be the leader
        device="cpu",
    )
    bound = racing.race_bound(rows, PRODUCTION)
    inductor = next(o for o in measured_options(rows) if o.label == "inductor:default")
    assert bound is not None and bound.leader == "inductor:default"
    assert bound.speedup_low == inductor.speedup_ci[0]  # type: ignore[index]
    only_eager = racing.race_bound(run(eager_row(), device="cpu"), PRODUCTION)
    assert only_eager == racing.RaceBound("eager:default", 1.0)  # no compiled option yet: no window stops ahead
    assert only_eager.field_high is None


def test_a_window_stops_ahead_only_above_the_highest_reach_of_every_qualified_compiled_option() -> None:
    rows = run(
        eager_row(),
        option_row("inductor", "default", 5.0, 0.02),  # ~2x, tight
        option_row("inductor", "max-autotune", 4.0, 0.3),  # ~2.5x, wide: reaches highest
        inaccurate(option_row("onnxruntime", "default", 1.0, 0.02)),  # 10x, but cannot be recommended
        device="cpu",
    )
    options = {o.label: o for o in measured_options(rows)}
    bound = racing.race_bound(rows, PRODUCTION)
    assert bound is not None and bound.field == "inductor:max-autotune"
    assert bound.field_high == options["inductor:max-autotune"].speedup_ci[1]  # type: ignore[index]
    assert bound.leader == "inductor:default"  # the racing bound stays the best low end
    reach = bound.field_high
    assert racing.ahead(reach * 1.01, reach) and not racing.ahead(reach, reach)
    assert not racing.ahead(2.0, float("inf"))
    reason = bound.ahead_reason({"speedup_ci": [reach * 1.01, reach * 1.1]})
    assert reason.startswith("clearly ahead:") and "inductor:max-autotune" in reason


def test_first_windows_race_only_where_the_steady_state_speed_decides() -> None:
    assert racing.races(PRODUCTION, "inference")
    assert not racing.races(PRODUCTION, "training")
    assert not racing.races(None, "inference")
    assert not racing.races(parse_context({"target": "cpu", "stage": "prototype"}), "inference")
    assert not racing.races(parse_context({"target": "cpu", "stage": "edge"}), "inference")  # size may decide
    with_calls = parse_context({"target": "cpu", "stage": "production", "expected_calls_per_compile": 1000})
    assert not racing.races(with_calls, "inference")  # a slower option compiling faster can still be the pick


def test_the_window_stop_rule_implies_the_leader_beats_the_option_paired() -> None:
    leader = option_row("inductor", "default", 4.0, 0.05)
    rows = run(eager_row(), leader, option_row("onnxruntime", "default", 6.0, 0.05), device="cpu")
    options = {o.label: o for o in measured_options(rows)}
    lead, behind = options["inductor:default"], options["onnxruntime:default"]
    assert racing.behind(behind.speedup_ci[1], lead.speedup_ci[0])  # type: ignore[index]
    assert paired_ratio(behind, lead)[1][0] > 1.0  # type: ignore[index]
    assert not racing.behind(float("inf"), 2.0) and not racing.behind(2.0, 2.0)


OPTIONS = [("inductor", "default"), ("inductor", "max-autotune"), ("onnxruntime", "default"), ("openvino", "default")]


@st.composite
def recorded_runs(draw: st.DrawFn) -> dict[str, Any]:
    """A run as the first pass records it: eager, then 1-4 options with any speed, any noise, some inaccurate."""
    rows = [eager_row(draw(st.floats(8.0, 12.0)), draw(st.sampled_from([0.02, 0.1, 0.4])))]
    for backend, mode in draw(st.lists(st.sampled_from(OPTIONS), min_size=1, max_size=4, unique=True)):
        median = draw(st.floats(1.0, 20.0))
        spread = draw(st.sampled_from([0.01, 0.03, 0.1, 0.3, 0.6]))
        row = option_row(backend, mode, median, spread, eager_ms=draw(st.floats(8.0, 12.0)))
        rows.append(inaccurate(row) if draw(st.integers(0, 9)) == 0 else row)
    return run(*rows, device="cpu")


@settings(max_examples=300, deadline=None)
@given(recorded_runs())
def test_an_eliminated_option_was_clearly_behind_a_leader_and_is_never_the_pick(rows: dict[str, Any]) -> None:
    options = {o.label: o for o in measured_options(rows)}
    pick = decide(PRODUCTION, None, rows)
    picked = f"{pick['backend']}:{pick['mode']}" if pick.get("backend") else None
    for label, out in racing.eliminations(rows, PRODUCTION).items():
        assert label != "eager:default" and label != picked, (label, out.reason)
        if out.leader is None:
            assert options[label].row["status"] != "ok" or out.reason.startswith("ruled out:")  # type: ignore[index]
            continue
        assert beats(options[out.leader], options[label]), out.reason  # its ratio interval excludes 1
        assert options[out.leader].latency_ms < options[label].latency_ms  # type: ignore[operator]
