"""Publishing the ranking early (advisor.harness.measurement.details.publish_ranked) is a courtesy: its callback gets
a copy it may keep or change, and an error in it never becomes the measurement's."""

from __future__ import annotations

import logging

import pytest

from advisor.harness.measurement.details import details_to_come, publish_ranked


def test_the_callback_gets_a_copy_and_its_errors_are_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    run = {"measurements": [{"backend": "eager", "mode": "default"}], "quality": {"details": details_to_come(["x:y"])}}
    seen: list[dict] = []

    def keep_and_spoil(ranked: dict) -> None:
        seen.append(ranked)
        ranked["measurements"].clear()

    publish_ranked(keep_and_spoil, run)
    assert seen[0]["quality"]["details"]["pending"] == ["x:y"]
    assert run["measurements"] == [{"backend": "eager", "mode": "default"}], "the run itself is untouched"

    def broken(ranked: dict) -> None:
        raise OSError("No space left on device: ranked.json")

    with caplog.at_level(logging.WARNING):
        publish_ranked(broken, run)  # does not raise
    assert "the complete results follow" in caplog.text and "No space left" in caplog.text
