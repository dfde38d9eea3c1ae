"""What the suite page draws from a SuiteSummary: the history of each option's geomean speedup."""

from __future__ import annotations

from advisor.core.catalogue import EAGER_LABEL
from advisor.core.suite_summary import SuiteSummary
from app.web.charts import speedup_series_chart

MAX_LINES = 6  # the options with the most passing models; the table below the chart has all of them


def suite_history_chart(summary: SuiteSummary) -> str:
    days = [point.day.isoformat() for point in summary.history]
    compiled = [o for o in summary.options if o.label != EAGER_LABEL and o.geomean_speedup is not None]
    shown = sorted(compiled, key=lambda o: (-o.passed, o.label))[:MAX_LINES]
    series = {
        option.label: [
            next((o.geomean_speedup for o in point.options if o.label == option.label), None)
            for point in summary.history
        ]
        for option in sorted(shown, key=lambda o: o.label)
    }
    return speedup_series_chart(days, series, f"Geomean speedup vs eager over time: suite {summary.tag}")
