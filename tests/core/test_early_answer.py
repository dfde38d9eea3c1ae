"""The answer published once the options are ranked (advisor.core.early_answer): what the reports and the CLI say
about a ranking whose details are still being measured, and nothing for a complete run or a stored shape that is
not a ranking."""

from __future__ import annotations

import pytest

from advisor.cli.remote import early_answer
from advisor.core.decision.engine import decide
from advisor.core.early_answer import RANKED_PREFIX, pending_details, pending_note, ranked_line
from advisor.core.report import render
from tests.support.fixtures_decide import measurement, run

CONTEXT = {"stage": "production", "target": "cpu", "model_changes": "frozen"}


def ranked_run(pending: object = ("inductor:default",)) -> dict:
    measured = run(
        measurement("eager", median_ms=10.0, compile_s=None),
        measurement("inductor", median_ms=4.0, compile_s=8.0, eager_ms=10.0),
        device="cpu",
    )
    measured["quality"] = {"noisy": False, "details": {"detailed": [], "pending": list(pending)}}
    return measured


def analysis(measured: dict, status: str = "running") -> dict:
    return {
        "id": 7,
        "status": status,
        "model_name": "m.pt2",
        "context": CONTEXT,
        "measurements": measured,
        "recommendation": dict(decide(CONTEXT, None, measured)),
    }


def test_a_ranking_names_the_details_still_to_come_and_a_complete_run_names_none():
    assert pending_details(ranked_run()) == ["inductor:default"]
    assert pending_note(ranked_run()).startswith("Ranked; the details of inductor:default")
    assert "eager's profile are still being measured" in pending_note(ranked_run()), "it, too, comes after ranked:"
    complete = ranked_run()
    complete["quality"]["details"] = {"detailed": ["inductor:default"], "others": "..."}
    assert pending_details(complete) == [] and pending_note(complete) is None
    assert pending_details(None) == [] and pending_details({"measurements": []}) == []


@pytest.mark.parametrize("quality", ["noisy", ["details"], {"details": "pending"}, {"details": {"pending": "x"}}])
def test_a_stored_quality_of_another_shape_is_not_a_ranking(quality):
    measured = ranked_run()
    measured["quality"] = quality
    assert pending_details(measured) == [] and pending_note(measured) is None


def test_the_reports_of_a_ranking_say_so_and_those_of_a_complete_run_do_not():
    text, markdown = render(analysis(ranked_run()), "text"), render(analysis(ranked_run()), "markdown")
    assert "Ranked; the details of inductor:default" in text
    assert "> Ranked; the details of inductor:default" in markdown
    complete = ranked_run(pending=())
    assert "Ranked;" not in render(analysis(complete), "text") + render(analysis(complete), "markdown")


def test_the_cli_line_leads_with_the_answer_and_the_remote_cli_prints_it_only_while_running():
    shown = analysis(ranked_run())
    line = ranked_line(shown["recommendation"], CONTEXT, shown["measurements"])
    assert line.startswith(f"{RANKED_PREFIX} Use torch.compile with Inductor on CPU (confidence ")
    assert line.endswith("; the details of inductor:default follow")
    assert early_answer(shown) == line
    assert early_answer(analysis(ranked_run(), status="done")) is None, "the report itself follows"
    assert early_answer(analysis(ranked_run(pending=()))) is None, "a complete run is no early answer"
    assert early_answer({**shown, "recommendation": None}) is None


def test_following_a_server_analysis_prints_the_answer_once_on_one_line():
    """`analyze --server` follows the analysis (advisor.cli.remote._follow): the ranking's answer line is printed
    when it appears, once however many polls see it, unwrapped however narrow the terminal."""
    from io import StringIO

    from rich.console import Console

    from advisor.cli.remote import _follow

    ranked = analysis(ranked_run())
    polls = [{**ranked, "recommendation": None, "measurements": None}, ranked, ranked, {**ranked, "status": "done"}]

    class Polled:
        def wait(self, analysis_id, on_update, until):  # noqa: ANN001, ANN201
            for state in polls:
                on_update(state)
            return polls[-1]

    err = Console(file=StringIO(), width=40, force_terminal=False)
    assert _follow(Polled(), 7, err)["status"] == "done"
    lines = [line for line in err.file.getvalue().splitlines() if line.startswith(RANKED_PREFIX)]
    assert lines == [early_answer(ranked)]
