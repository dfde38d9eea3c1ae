"""A worker's results at the boundary: made safe to store and render, then validated against the result models.

`accept_results(inspection, measurements)` (POST /api/v1/jobs/{id}/complete) returns the results as they will
be stored, or raises ResultsInvalid naming the field:

- non-finite numbers (NaN, Infinity; Python's json accepts them) become null, so no report or page fails on
  them later (JSON responses refuse NaN); one among a latency's statistics makes the whole latency null, one in
  a speedup interval the interval (the views draw them whole);
- free text is truncated with a marker, never refused: `stderr_tail` keeps its last 64 KiB, `snippet` its first
  16 KiB, every other string its first 4 KiB; object keys are cut at 200 characters;
- integers outside int64, nesting deeper than MAX_DEPTH, containers of more than MAX_CONTAINER_ITEMS items and
  more than MAX_NODES values in all are refused;
- then the shapes are checked with advisor.core.results (types, bounded lists such as at most 200 measurement
  rows, identifier lengths of the indexed columns).
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import ValidationError

from advisor.core.results import INT64, CompletedResults

STDERR_TAIL_CHARS = 64 * 1024
SNIPPET_CHARS = 16 * 1024
TEXT_CHARS = 4 * 1024
KEY_CHARS = 200
ERROR_CHARS = 8 * 1024  # a worker's or the engine's error message on a failed job
MAX_DEPTH = 32
MAX_CONTAINER_ITEMS = 20_000
MAX_NODES = 1_000_000
_TEXT_LIMITS = {"stderr_tail": STDERR_TAIL_CHARS, "snippet": SNIPPET_CHARS}


MAX_REPORTED_PROBLEMS = 20


class ResultsInvalid(ValueError):
    """The results do not have the documented shape. `problems`: `{"field", "message"}` each (the 422's detail),
    the field a dotted path such as `measurements.measurements.0.latency.median_ms`."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = [
            {"field": clip(field, 200), "message": clip(message, 300)}
            for field, message in problems[:MAX_REPORTED_PROBLEMS]
        ]
        super().__init__("; ".join(f"{p['field']}: {p['message']}" for p in self.problems))

    @property
    def job_error(self) -> str:
        """The reason the job fails with: the first problems, with their fields."""
        shown = "; ".join(f"{p['field']}: {p['message']}" for p in self.problems[:3])
        more = f" (and {len(self.problems) - 3} more)" if len(self.problems) > 3 else ""
        return f"the worker's results do not have the documented shape: {shown}{more}"


def accept_results(inspection: Any, measurements: Any) -> tuple[dict | None, dict | None]:
    """The results to store (sanitised, validated); ResultsInvalid names the first bad field."""
    budget = _Budget()
    raw = {
        "inspection": _sanitise(inspection, ("inspection",), budget),
        "measurements": _sanitise(measurements, ("measurements",), budget),
    }
    _void_unknown_statistics(raw["measurements"])
    raw = _nulls_for_non_finite(raw)
    try:
        model = CompletedResults.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        raise ResultsInvalid([(".".join(str(part) for part in e["loc"]), _message(e["msg"])) for e in errors]) from None
    stored = model.model_dump(mode="json", exclude_unset=True)
    return stored.get("inspection"), stored.get("measurements")


def finite_json(value: Any) -> Any:
    """`value` with every non-finite float as None: what the decision engine computes from extreme but finite
    inputs (a ratio over a zero bound is Infinity) must still be servable as strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(item) for item in value]
    return value


def truncate_text(text: str, limit: int, *, keep: str = "head") -> str:
    """`text` cut to at most `limit` characters, a marker saying how much went included; keep "head", "tail"
    (stderr) or "both" (an error message: its summary and its last lines)."""
    if len(text) <= limit:
        return text
    marker, room = "", limit
    for _ in range(4):  # the marker's length depends on the count it states
        marker = f"\n[… {len(text) - room} characters truncated …]\n"
        if room == (room := max(0, limit - len(marker))):
            break
    if keep == "tail":
        return (marker.lstrip("\n") + text[len(text) - room :])[-limit:] if room else text[-limit:]
    if keep == "both":
        head = room // 2
        return text[:head] + marker + text[len(text) - (room - head) :] if room else text[:limit]
    return text[:room] + marker.rstrip("\n") if room else text[:limit]


def clip(text: str, limit: int) -> str:
    """A short echo of a name or message (an ellipsis when cut)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _NonFinite:
    """Where a NaN or Infinity was, until `_void_unknown_statistics` and `_nulls_for_non_finite` have run."""

    def __repr__(self) -> str:
        return "NON_FINITE"


NON_FINITE = _NonFinite()
# A latency's statistics are known together or not at all (the views draw median, CI and p99 as one).
LATENCY_STATISTICS = ("n", "median_ms", "p90_ms", "p99_ms", "mean_ms", "stdev_ms", "iqr_ms", "ci_low_ms", "ci_high_ms")


def _void_unknown_statistics(run: Any) -> None:
    """A non-finite number voids what it belongs to: a latency (any of its statistics), a speedup interval."""
    rows = run.get("measurements") if isinstance(run, dict) else None
    for row in rows if isinstance(rows, list) else ():
        if not isinstance(row, dict):
            continue
        for key in ("latency", "eager_latency"):
            stats = row.get(key)
            if isinstance(stats, dict) and any(stats.get(name) is NON_FINITE for name in LATENCY_STATISTICS):
                row[key] = None
        interval = row.get("speedup_ci")
        if isinstance(interval, list) and any(bound is NON_FINITE for bound in interval):
            row["speedup_ci"] = None


def _nulls_for_non_finite(value: Any) -> Any:
    """Every other non-finite number as null ("not known")."""
    if value is NON_FINITE:
        return None
    if isinstance(value, dict):
        return {key: _nulls_for_non_finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_nulls_for_non_finite(item) for item in value]
    return value


class _Budget:
    def __init__(self) -> None:
        self.nodes = 0


def _sanitise(value: Any, path: tuple[str, ...], budget: _Budget) -> Any:
    budget.nodes += 1
    if budget.nodes > MAX_NODES:
        raise _invalid(path, f"too many values (at most {MAX_NODES} in all)")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not -INT64 - 1 <= value <= INT64:
            raise _invalid(path, "integer out of range (64-bit integers only)")
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else NON_FINITE
    if isinstance(value, str):
        key = path[-1] if path else ""
        if key in _TEXT_LIMITS:
            return truncate_text(value, _TEXT_LIMITS[key], keep="tail" if key == "stderr_tail" else "head")
        return truncate_text(value, TEXT_CHARS)
    if isinstance(value, dict | list):
        if len(path) > MAX_DEPTH:
            raise _invalid(path, f"nested too deeply (at most {MAX_DEPTH} levels)")
        if len(value) > MAX_CONTAINER_ITEMS:
            raise _invalid(path, f"too many items ({len(value)}; at most {MAX_CONTAINER_ITEMS})")
        if isinstance(value, list):
            return [_sanitise(item, (*path, str(index)), budget) for index, item in enumerate(value)]
        cleaned = {}
        for key, item in value.items():
            name = clip(str(key), KEY_CHARS)
            cleaned[name] = _sanitise(item, (*path, name), budget)
        return cleaned
    raise _invalid(path, f"not a JSON value ({type(value).__name__})")


def _message(msg: str) -> str:
    """pydantic's message without the model class names ("a valid dictionary or instance of InspectionModel")."""
    return re.sub(r" or instance of \w+", "", msg)


def _invalid(path: tuple[str, ...], message: str) -> ResultsInvalid:
    return ResultsInvalid([(".".join(path), message)])
