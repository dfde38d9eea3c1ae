"""Break-even calls between a fast-compiling and a fast-running option, and the flip across it."""

from __future__ import annotations

import pytest

from advisor.core.decision.break_even import break_even_calls, format_calls, total_cost_s
from advisor.core.decision.engine import decide
from tests.support.fixtures_decide import blog_run, inspection


def test_blog_figures_give_about_6071_calls() -> None:
    n_star = break_even_calls(3.2, 12.4, 28.7, 8.2)
    assert n_star == pytest.approx(6071.43, abs=0.01)
    assert format_calls(n_star) == "6,071"


def test_costs_are_equal_at_the_break_even() -> None:
    n_star = break_even_calls(3.2, 12.4, 28.7, 8.2)
    assert total_cost_s(3.2, 12.4, n_star) == pytest.approx(total_cost_s(28.7, 8.2, n_star))


def test_degenerate_cases() -> None:
    assert break_even_calls(5.0, 10.0, 4.0, 8.0) == 0.0  # B compiles no slower: pays off at once
    assert break_even_calls(3.0, 8.0, 9.0, 8.0) is None  # B runs no faster: never pays off
    assert format_calls(None) == "never"


@pytest.mark.parametrize(
    ("expected_calls", "backend"),
    [(1_000, "inductor"), (6_071, "inductor"), (6_072, "torchair"), (100_000, "torchair")],
)
def test_recommendation_flips_at_the_break_even(expected_calls: int, backend: str) -> None:
    rec = decide({"stage": "production", "expected_calls_per_compile": expected_calls}, inspection(), blog_run())
    assert rec["backend"] == backend
    assert rec["break_even"]["n_star"] == pytest.approx(6071.43, abs=0.01)
    assert rec["break_even"]["decided"] is True
    loser = "torchair:max-autotune" if backend == "inductor" else "inductor:default"
    assert loser in rec["why_not"]


def test_warm_cache_numbers_are_used_when_the_deployment_ships_a_cache() -> None:
    from tests.support.fixtures_decide import measurement, run

    rows = run(
        measurement("inductor", median_ms=12.4, compile_s=3.2, warm_s=1.2),
        measurement("torchair", mode="max-autotune", median_ms=8.2, compile_s=28.7, warm_s=2.0),
    )
    cold = decide({"expected_calls_per_compile": 1_000}, inspection(), rows)
    warm = decide({"expected_calls_per_compile": 1_000, "ships_compile_cache": True}, inspection(), rows)
    assert cold["backend"] == "inductor"
    assert warm["backend"] == "torchair"  # (2.0 - 1.2) s / 4.2 ms = 190 calls < 1,000
    assert warm["break_even"]["compile_kind"] == "warm"
    assert warm["break_even"]["n_star"] == pytest.approx(800 / 4.2)


def test_break_even_uses_latencies_normalised_by_side_by_side_speedups() -> None:
    from tests.support.fixtures_decide import measurement, run

    # eager timings of the three processes: 10, 8 and 15.6 ms -> reference 10 ms; side by side inductor runs
    # 2x eager (5 ms on the common scale) and torchair 4x (2.5 ms). Their raw medians, 4.0 and 3.9 ms, were
    # taken under different loads and would give N* = 25 s / 0.1 ms = 250,000.
    rows = run(
        measurement("eager", median_ms=10.0),
        measurement("inductor", median_ms=4.0, compile_s=3.0, eager_ms=8.0),
        measurement("torchair", mode="max-autotune", median_ms=3.9, compile_s=28.0, eager_ms=15.6),
    )
    for expected_calls, backend in ((9_000, "inductor"), (11_000, "torchair")):
        rec = decide({"stage": "production", "expected_calls_per_compile": expected_calls}, inspection(), rows)
        assert rec["backend"] == backend
        assert rec["break_even"]["n_star"] == pytest.approx(10_000)
        assert rec["break_even"]["latency_basis"] == "side_by_side"
        assert (rec["break_even"]["latency_a_ms"], rec["break_even"]["latency_b_ms"]) == pytest.approx((5.0, 2.5))
