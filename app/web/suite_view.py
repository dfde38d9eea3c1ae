"""What the suite page draws from a SuiteSummary: the history of each option's geomean speedup."""

from __future__ import annotations

from advisor.core.catalogue import EAGER_LABEL
from advisor.core.suite_summary import SuiteSummary
from app.web.charts import speedup_series_chart


def suite_history_chart(summary: SuiteSummary) -> str:
    """Every compiled option any point of the history has a geomean speedup for (an int8 option measured on only some
    days included): one line each, by label."""
    days = [point.day.isoformat() for point in summary.history]
    labels = {o.label for o in summary.options if o.geomean_speedup is not None}
    labels |= {o.label for point in summary.history for o in point.options if o.geomean_speedup is not None}
    shown = sorted(labels - {EAGER_LABEL})
    series = {
        label: [next((o.geomean_speedup for o in point.options if o.label == label), None) for point in summary.history]
        for label in shown
    }
    return speedup_series_chart(days, series, f"Geomean speedup vs eager over time: suite {summary.tag}")
