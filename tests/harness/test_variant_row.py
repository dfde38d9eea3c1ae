"""How a measurement child's value becomes the row users read (advisor.harness.measurement.variant)."""

from __future__ import annotations

from advisor.harness.measurement.variant import _fill_from_child


def _child_value(accuracy_reason: str | None) -> dict:
    latency = {"median_ms": 10.0, "n": 20}
    return {
        "status": "fail_accuracy",
        "latency": latency,
        "eager_latency": latency,
        "first_call_s": 1.0,
        "speedup_vs_eager": 1.0,
        "speedup_ci": [0.9, 1.1],
        "peak_memory_mb": 100.0,
        "memory_kind": "rss",
        "accuracy": {"passed": False, "reason": accuracy_reason},
        "determinism": {"deterministic": False, "max_abs_diff": 0.003},
    }


def test_a_nondeterministic_model_keeps_why_its_accuracy_failed():
    """The determinism note is added to the comparison's reason: a user still reads which output differed."""
    row: dict = {}
    _fill_from_child(row, _child_value("output 0 has shape (2, 3), eager gave (2, 4)"), is_baseline=False)
    reason = row["accuracy"]["reason"]
    assert "output 0 has shape (2, 3), eager gave (2, 4)" in reason
    assert "the model is nondeterministic" in reason


def test_without_a_reason_of_its_own_the_note_is_the_reason():
    row: dict = {}
    _fill_from_child(row, _child_value(None), is_baseline=False)
    assert row["accuracy"]["reason"] == "two eager runs differ by up to 0.003: the model is nondeterministic"
