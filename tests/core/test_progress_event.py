"""The one progress event (advisor.core.progress) and the one first-line helper (advisor.core.text)."""

from __future__ import annotations

import pytest

from advisor.core.progress import ProgressEvent
from advisor.core.text import first_line


def test_a_progress_event_survives_the_runner_stdout_and_labels_the_api_stage():
    child = {"backend": "inductor", "mode": None, "stage": "done", "status": "ok", "iterations": 12, "timed_s": 0.5}
    event = ProgressEvent.from_measurement(child, 0.55)
    assert event.label == "measure:inductor:default" and event.phase == "done"
    assert ProgressEvent.from_json(event.to_json()) == event
    assert ProgressEvent("inspect").label == "inspect"
    assert ProgressEvent("upload", 1.7).wire() == {"stage": "upload", "progress": 1.0}


@pytest.mark.parametrize("line", [[1, 2], {"stage": "inspect", "progress": 0.1}, {"step": 3}, "text"])
def test_anything_else_on_the_runner_stdout_is_not_an_event(line):
    with pytest.raises((ValueError, TypeError, KeyError)):
        ProgressEvent.from_json(line)


def test_first_line_of_text_and_of_exceptions():
    assert first_line("\n  boom\n  at /home/x/model.py:3\n") == "boom"
    assert first_line("   ") == "   "
    assert first_line(ValueError("bad value\ntraceback...")) == "ValueError: bad value"
    assert first_line(KeyError()) == "KeyError"
    assert first_line(RuntimeError("x" * 600), limit=500) == ("RuntimeError: " + "x" * 600)[:500]
