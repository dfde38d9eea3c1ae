"""A worker's results at the boundary: made safe to store and render, then validated against the result models.

`accept_results(inspection, measurements)` (POST /api/v1/jobs/{id}/complete) returns the results as they will
be stored, or raises ResultsInvalid naming the field:

- a row's status must agree with its accuracy check (`_status_contradictions`): `ok` while `accuracy.passed` is
  false (or `fail_accuracy` while it is true) is refused, naming the row;
- the numbers a recommendation is made of must be possible (`_impossible_numbers`): a row's latency statistics
  (finite, at least a nanosecond - MIN_CALL_MS -, median <= p90 <= p99, the median inside its CI), its speedup
  (finite, positive, at most MAX_SPEEDUP, and eager's median over its own), its compile times and peak memory
  (finite, >= 0); anything else is refused, naming the field;
- every other non-finite number (NaN, Infinity; Python's json accepts them) becomes null, so no report or page
  fails on it later (JSON responses refuse NaN); one in a speedup interval makes the interval null (the harness
  sends an infinite upper bound when a CI reaches zero);
- free text is truncated with a marker, never refused: `stderr_tail` keeps its last 64 KiB, `snippet` its first
  16 KiB, every other string its first 4 KiB; object keys are cut at 200 characters;
- integers outside int64, nesting deeper than MAX_DEPTH, containers of more than MAX_CONTAINER_ITEMS items and
  more than MAX_NODES values in all are refused;
- then the shapes are checked with advisor.core.results (types, bounded lists such as at most 200 measurement
  rows, identifier lengths of the indexed columns).

`check_belongs_to_job(inspection, measurements, job)` then checks the accepted results against the job they were
posted for: the inspection names the job's artifact (`inspection.artifact_sha256`, the sha256 the worker verified
while downloading it), and every row is a backend the job asked for (eager, the baseline, always), in a mode that
backend has. A refused completion changes nothing: the job stays leased to its worker (app.job_queue).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from advisor.core.catalogue import BACKENDS
from advisor.core.early_answer import pending_value
from advisor.core.noise import label
from advisor.core.results import INT64, CompletedResults
from app.service_errors import ErrorCode, ServiceError

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


class ResultsInvalid(ServiceError, ValueError):
    """The results do not have the documented shape, hold impossible numbers or are not the job's. `problems`:
    `{"field", "message"}` each (the 422's detail), the field a dotted path such as
    `measurements.measurements.0.latency.median_ms`."""

    code = ErrorCode.INVALID

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = [
            {"field": clip(field, 200), "message": clip(message, 300)}
            for field, message in problems[:MAX_REPORTED_PROBLEMS]
        ]
        super().__init__("; ".join(f"{p['field']}: {p['message']}" for p in self.problems))

    @property
    def detail(self) -> list[dict]:
        return self.problems


def accept_results(inspection: Any, measurements: Any) -> tuple[dict | None, dict | None]:
    """The results to store (sanitised, validated); ResultsInvalid names the first bad field."""
    budget = _Budget()
    raw = {
        "inspection": _sanitise(inspection, ("inspection",), budget),
        "measurements": _sanitise(measurements, ("measurements",), budget),
    }
    if problems := _impossible_numbers(raw["measurements"]) + _status_contradictions(raw["measurements"]):
        raise ResultsInvalid(problems)
    _void_unknown_statistics(raw["measurements"])
    raw = _nulls_for_non_finite(raw)
    try:
        model = CompletedResults.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        raise ResultsInvalid([(".".join(str(part) for part in e["loc"]), _message(e["msg"])) for e in errors]) from None
    stored = model.model_dump(mode="json", exclude_unset=True)
    return stored.get("inspection"), stored.get("measurements")


@dataclass(frozen=True)
class JobBinding:
    """What a completion must match: the job's artifact and the backends its rows may name (the job's own, or,
    when it names none, those its worker registered; eager always)."""

    artifact_sha256: str
    backends: tuple[str, ...]


def check_belongs_to_job(inspection: Any, measurements: Any, job: JobBinding) -> None:
    """ResultsInvalid naming each field by which the (accepted) results are not the job's."""
    problems: list[tuple[str, str]] = []
    named = inspection.get("artifact_sha256") if isinstance(inspection, dict) else None
    if named != job.artifact_sha256:
        shown = f"names artifact {clip(str(named), 80)}" if named is not None else "names no artifact"
        problems.append(
            (
                "inspection.artifact_sha256",
                f"the inspection {shown}; this job's artifact is {job.artifact_sha256} (send the sha256 of the "
                "file the worker downloaded and verified)",
            )
        )
    allowed = {"eager", *(name.split(":", 1)[0] for name in job.backends)}
    rows = measurements.get("measurements") if isinstance(measurements, dict) else None
    for index, row in enumerate(rows if isinstance(rows, list) else ()):
        path = f"measurements.measurements.{index}"
        backend, mode = row.get("backend"), row.get("mode")
        if backend not in allowed:
            problems.append(
                (
                    f"{path}.backend",
                    f"{clip(str(backend), 80)!r} was not asked for: this job measures {', '.join(sorted(allowed))}",
                )
            )
        elif mode is not None and backend in BACKENDS and mode not in BACKENDS[backend].modes:
            modes = ", ".join(BACKENDS[backend].modes)
            problems.append((f"{path}.mode", f"{backend} has no mode {clip(str(mode), 80)!r} (its modes: {modes})"))
    if problems:
        raise ResultsInvalid(problems)


def check_pending_details(measurements: dict | None, *, ranking: bool) -> None:
    """A ranking's run names the options whose details are still to come (advisor.core.early_answer): a non-empty
    list of labels of its own rows. A completion's names none: its details are in. ResultsInvalid otherwise."""
    pending = pending_value(measurements)
    field = "measurements.quality.details.pending"
    if not ranking:
        if pending is not None:
            raise ResultsInvalid([(field, "a completion has no details still to come; a ranking goes to /ranked")])
        return
    labels = {label(row) for row in (measurements or {}).get("measurements") or [] if isinstance(row, dict)}
    if not isinstance(pending, list) or not pending:
        raise ResultsInvalid([(field, "a ranking names the options whose details are still to come")])
    unknown = [label for label in pending if label not in labels]
    if unknown:
        shown = ", ".join(repr(label)[:80] for label in unknown[:5])
        raise ResultsInvalid([(field, f"not options of this run: {shown}")])


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


# Statistics that are times of a model call (> 0) and spreads or interval bounds (>= 0); `n` is a Count.
POSITIVE_STATISTICS = ("median_ms", "p90_ms", "p99_ms", "mean_ms")
NON_NEGATIVE_STATISTICS = ("stdev_ms", "iqr_ms", "ci_low_ms", "ci_high_ms")
NON_NEGATIVE_ROW_NUMBERS = ("compile_s_cold", "compile_s_warm", "peak_memory_mb")
SEEDED_COMPILE_NUMBERS = ("measured_s", "floor_cold_s")  # a bounded cold compile's parts (core.results.SeededCompile)
SPEEDUP_RELATIVE_TOLERANCE = 1e-6  # the harness computes speedup_vs_eager as eager's median over the row's
# Physical bounds. No model call completes in under a nanosecond (a kernel launch alone takes microseconds), so a
# time statistic below MIN_CALL_MS is a timing fault, not a measurement. No graph mode runs the same computation
# more than MAX_SPEEDUP times faster than eager on the same device: compilation removes Python and launch overhead
# and fuses kernels, which is worth tens, at the extreme thousands of times, never 100,000.
MIN_CALL_MS = 1e-6
MAX_SPEEDUP = 1e5


def _status_contradictions(run: Any) -> list[tuple[str, str]]:
    """Each row whose status and accuracy check disagree, named by its status: `ok` while its check failed
    (`accuracy.passed` false), or `fail_accuracy` while it passed. The harness derives the one from the other
    (advisor.harness.measurement.child), so a row with both is a worker's bug; the engine would otherwise rank an
    inaccurate option as a valid one."""
    problems: list[tuple[str, str]] = []
    rows = run.get("measurements") if isinstance(run, dict) else None
    for index, row in enumerate(rows if isinstance(rows, list) else ()):
        accuracy = row.get("accuracy") if isinstance(row, dict) else None
        passed = accuracy.get("passed") if isinstance(accuracy, dict) else None
        status = row.get("status") if isinstance(row, dict) else None
        if (status, passed) in (("ok", False), ("fail_accuracy", True)):
            checked = "failed" if passed is False else "passed"
            label = f"{clip(str(row.get('backend')), 80)}:{clip(str(row.get('mode')), 80)}"
            problems.append(
                (
                    f"measurements.measurements.{index}.status",
                    f"row {index} ({label}) has status {status!r} while its accuracy check {checked} "
                    f"(accuracy.passed is {str(passed).lower()}): a row whose check fails has status 'fail_accuracy'",
                )
            )
    return problems


def _impossible_numbers(run: Any) -> list[tuple[str, str]]:
    """Each number a recommendation rests on that no measurement can produce, with its field: a non-finite,
    zero or negative latency statistic, percentiles out of order, a median outside its CI, a speedup that is not
    eager's median over the row's, a negative or non-finite compile time or memory. Values of the wrong type are
    left to the result models."""
    problems: list[tuple[str, str]] = []
    rows = run.get("measurements") if isinstance(run, dict) else None
    for index, row in enumerate(rows if isinstance(rows, list) else ()):
        if not isinstance(row, dict):
            continue
        path = f"measurements.measurements.{index}"
        medians = {}
        for key in ("latency", "eager_latency"):
            stats = row.get(key)
            if isinstance(stats, dict):
                medians[key] = _latency_problems(stats, f"{path}.{key}", problems)
        for key in NON_NEGATIVE_ROW_NUMBERS:
            if (problem := _number_problem(row.get(key), positive=False)) is not None:
                problems.append((f"{path}.{key}", problem))
        seeded = row.get("compile_seeded")
        if isinstance(seeded, dict):
            _seeded_compile_problems(row, seeded, path, problems)
        speedup = row.get("speedup_vs_eager")
        if (problem := _number_problem(speedup, positive=True)) is not None:
            problems.append((f"{path}.speedup_vs_eager", problem))
        elif _is_number(speedup) and speedup > MAX_SPEEDUP:
            problems.append(
                (
                    f"{path}.speedup_vs_eager",
                    f"{speedup:.6g}× is beyond {MAX_SPEEDUP:.0f}×, more than any graph mode gains over eager on one "
                    "device: a timing fault",
                )
            )
        elif _is_number(speedup) and medians.get("latency") and medians.get("eager_latency"):
            ratio = medians["eager_latency"] / medians["latency"]
            if not math.isclose(speedup, ratio, rel_tol=SPEEDUP_RELATIVE_TOLERANCE):
                problems.append(
                    (
                        f"{path}.speedup_vs_eager",
                        f"{speedup:.6g} is not eager's median over this row's ({ratio:.6g}), which it must be",
                    )
                )
    return problems


def _seeded_compile_problems(row: dict, seeded: dict, path: str, problems: list[tuple[str, str]]) -> None:
    """A bounded cold compile (core.results.SeededCompile): its parts are possible numbers and the row's
    `compile_s_cold` is their sum, the bound the harness states (advisor.harness.measurement.seeded_cache)."""
    found = len(problems)
    for key in SEEDED_COMPILE_NUMBERS:
        if (problem := _number_problem(seeded.get(key), positive=False)) is not None:
            problems.append((f"{path}.compile_seeded.{key}", problem))
    parts, bound = [seeded.get(key) for key in SEEDED_COMPILE_NUMBERS], row.get("compile_s_cold")
    if len(problems) > found or not all(_is_number(value) for value in (*parts, bound)):
        return
    if not math.isclose(bound, sum(parts), rel_tol=1e-6, abs_tol=1e-6):
        problems.append(
            (
                f"{path}.compile_s_cold",
                f"{bound:.6g} is not the sum of compile_seeded's measured_s and floor_cold_s ({sum(parts):.6g}), the "
                "bound it must state",
            )
        )


def _latency_problems(stats: dict, path: str, problems: list[tuple[str, str]]) -> float | None:
    """Add the problems of one latency's statistics; its median when that is possible (else None)."""
    found = len(problems)
    for names, positive in ((POSITIVE_STATISTICS, True), (NON_NEGATIVE_STATISTICS, False)):
        for name in names:
            if (problem := _number_problem(stats.get(name), positive=positive)) is not None:
                problems.append((f"{path}.{name}", problem))
            elif positive and _is_number(value := stats.get(name)) and value < MIN_CALL_MS:
                problems.append((f"{path}.{name}", f"{value:.6g} ms is under a nanosecond: no model call is that fast"))
    if len(problems) > found:
        return None
    median = stats.get("median_ms")
    if not _is_number(median):
        return None
    for name, low, high in (
        ("p90_ms", median, stats.get("p99_ms")),
        ("ci_low_ms", None, median),
        ("ci_high_ms", median, None),
    ):
        value = stats.get(name)
        if not _is_number(value):
            continue
        if _is_number(low) and value < low * (1 - 1e-9):
            problems.append((f"{path}.{name}", f"{value:.6g} is below {low:.6g}: impossible for these statistics"))
        elif _is_number(high) and value > high * (1 + 1e-9):
            problems.append((f"{path}.{name}", f"{value:.6g} is above {high:.6g}: impossible for these statistics"))
    return median if len(problems) == found else None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number_problem(value: Any, *, positive: bool) -> str | None:
    """Why `value` (as sanitised: NON_FINITE for NaN and Infinity) is impossible; None when fine or not a number."""
    if value is NON_FINITE:
        return "not a finite number (NaN or Infinity)"
    if not _is_number(value):
        return None
    if positive and value <= 0:
        return f"{value:.6g} is not positive"
    if value < 0:
        return f"{value:.6g} is negative"
    return None


def _void_unknown_statistics(run: Any) -> None:
    """A non-finite number voids what it belongs to: a speedup interval, a latency (any of its other
    statistics, e.g. `drift`, once `_impossible_numbers` has refused the ones it checks)."""
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
