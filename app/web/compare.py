"""Two analyses side by side (model v1 vs v2, NPU node vs GPU node): rows of facts with differences marked.

Pure: two analysis dicts (the API shape) in, rows out; their results are read leniently as typed models
(advisor.core.results), so an analysis stored by an older version compares too. Text facts differ when they are
not equal; numbers differ when they are more than `RELATIVE_TOLERANCE` apart (timings are never bit-identical,
so an exact comparison would mark every row).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from advisor.core import claims
from advisor.core.catalogue import option_label
from advisor.core.common_scale import SCALED_HEADER, ComparableTime, comparable_times
from advisor.core.results import Inspection, MeasurementRow, MeasurementRun, OpInfo, Recommendation, read
from app.web.charts import format_quantity
from app.web.tree import backend_label

RELATIVE_TOLERANCE = 0.05
ENVIRONMENT_KEYS = (
    "measured_on",
    "device",
    "device_name",
    "soc_version",
    "torch_version",
    "torch_npu_version",
    "cann_version",
    "host",
)


@dataclass(frozen=True)
class CompareRow:
    section: str
    label: str
    a: str
    b: str
    differs: bool
    change: str | None = None  # "+12%" for numbers, b relative to a


def _text(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return format_quantity(value)
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _row(section: str, label: str, a: Any, b: Any, unit: str = "") -> CompareRow:
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (a, b))
    if numeric:
        base = max(abs(a), abs(b))
        differs = base > 0 and abs(a - b) / base > RELATIVE_TOLERANCE
        change = f"{(b - a) / a * 100:+.0f}%" if a else None
        return CompareRow(section, label, _text(a) + unit, _text(b) + unit, differs, change if differs else None)
    return CompareRow(section, label, _with_unit(a, unit), _with_unit(b, unit), _text(a) != _text(b))


def _with_unit(value: Any, unit: str) -> str:
    """A number with its unit (beside "–" on the other side too: "12 ms" vs "–"), anything else as text."""
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    return _text(value) + unit if is_number else _text(value)


def _verdict(row: MeasurementRow | None) -> str | None:
    """A row's speedup against eager in words by its 95% CI (advisor.core.claims: faster only when the CI excludes
    1), with the CI; None without a speedup."""
    if row is None or row.speedup_vs_eager is None:
        return None
    interval = row.speedup_ci
    if not interval or len(interval) != 2:
        return "no interval: not ranked against eager"
    low, high = claims.fmt_bound(interval[0]), claims.fmt_bound(interval[1])
    return f"{claims.speedup_verdict(interval)} (95% CI {low}–{high}×)"


def _measurements(run: MeasurementRun | None) -> dict[str, MeasurementRow]:
    return {backend_label(m.backend, m.mode): m for m in (run.measurements if run else None) or []}


def compare_rows(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[CompareRow]:
    rows = [
        _row("Analysis", "model", a.get("model_name"), b.get("model_name")),
        _row("Analysis", "format", a.get("format"), b.get("format")),
        _row("Analysis", "target", a.get("target"), b.get("target")),
        _row("Analysis", "status", a.get("status"), b.get("status")),
        _row("Analysis", "submitted by", a.get("submitted_by"), b.get("submitted_by")),
    ]
    rec_a, rec_b = (read(Recommendation, x.get("recommendation")) for x in (a, b))
    rows += [
        _row(
            "Recommendation",
            "backend",
            backend_label(rec_a.backend, rec_a.mode) if rec_a else None,
            backend_label(rec_b.backend, rec_b.mode) if rec_b else None,
        ),
        _row("Recommendation", "confidence", _attr(rec_a, "confidence"), _attr(rec_b, "confidence")),
        _row("Recommendation", "measured", _attr(rec_a, "measured"), _attr(rec_b, "measured")),
    ]
    ctx_a, ctx_b = a.get("context") or {}, b.get("context") or {}
    rows += [_row("Context", key, ctx_a.get(key), ctx_b.get(key)) for key in sorted(set(ctx_a) | set(ctx_b))]
    run_a, run_b = (read(MeasurementRun, x.get("measurements")) for x in (a, b))
    env_a, env_b = _attr(run_a, "environment"), _attr(run_b, "environment")
    for key in ENVIRONMENT_KEYS:
        if _has(env_a, key) or _has(env_b, key):
            rows.append(_row("Environment", key.replace("_", " "), _attr(env_a, key), _attr(env_b, key)))
    m_a, m_b = _measurements(run_a), _measurements(run_b)
    # each option's times on its own analysis's reference eager scale, as the analysis page quotes them
    times_a, times_b = (comparable_times(x.get("measurements"))[1] for x in (a, b))
    for label in list(m_a) + [name for name in m_b if name not in m_a]:
        x, y = m_a.get(label), m_b.get(label)
        time_x, time_y = _time_of(times_a, x), _time_of(times_b, y)
        acc_x, acc_y = _attr(x, "accuracy"), _attr(y, "accuracy")
        section = f"Backend {label}"
        rows += [
            _row(section, "status", _attr(x, "status"), _attr(y, "status")),
            _row(section, f"median, {SCALED_HEADER}", _time(time_x, "median_ms"), _time(time_y, "median_ms"), " ms"),
            _row(section, f"p99, {SCALED_HEADER}", _time(time_x, "p99_ms"), _time(time_y, "p99_ms"), " ms"),
            _row(section, "time scale", _scale(time_x), _scale(time_y)),
            _row(section, "speedup vs eager", _attr(x, "speedup_vs_eager"), _attr(y, "speedup_vs_eager"), "×"),
            _row(section, "against eager", _verdict(x), _verdict(y)),
            _row(section, "compile (cold)", _attr(x, "compile_s_cold"), _attr(y, "compile_s_cold"), " s"),
            _row(section, "compile (warm)", _attr(x, "compile_s_warm"), _attr(y, "compile_s_warm"), " s"),
            _row(section, "peak memory", _attr(x, "peak_memory_mb"), _attr(y, "peak_memory_mb"), " MiB"),
            _row(section, "accuracy passed", _attr(acc_x, "passed"), _attr(acc_y, "passed")),
        ]
    ins_a, ins_b = (read(Inspection, x.get("inspection")) for x in (a, b))
    if ins_a or ins_b:
        params_a, params_b = _attr(ins_a, "parameters"), _attr(ins_b, "parameters")
        breaks_a, breaks_b = _attr(ins_a, "graph_breaks"), _attr(ins_b, "graph_breaks")
        rows += [
            _row("Model", "parameters", _attr(params_a, "count"), _attr(params_b, "count")),
            _row("Model", "FLOPs", _attr(ins_a, "flops"), _attr(ins_b, "flops")),
            _row("Model", "distinct ops", len(_attr(ins_a, "ops") or []), len(_attr(ins_b, "ops") or [])),
            _row("Model", "custom ops", _names(_attr(ins_a, "custom_ops")), _names(_attr(ins_b, "custom_ops"))),
            _row("Model", "graph breaks", _attr(breaks_a, "count"), _attr(breaks_b, "count")),
        ]
    return rows


def _time_of(times: dict[str, ComparableTime], row: MeasurementRow | None) -> ComparableTime | None:
    return times.get(option_label(row.backend, row.mode)) if row is not None else None


def _time(time: ComparableTime | None, field: str) -> float | None:
    return getattr(time, field) if time is not None else None


def _scale(time: ComparableTime | None) -> str | None:
    """Whether a row's times are on the reference eager's scale, or its own process's (no eager timed beside it)."""
    if time is None:
        return None
    return "reference eager's" if time.scaled else "its own process's (no eager beside it)"


def _attr(model: BaseModel | None, name: str) -> Any:
    """A field of a part that may be missing (None): the other analysis may have it."""
    return getattr(model, name, None) if model is not None else None


def _has(model: BaseModel | None, name: str) -> bool:
    """Whether the stored part has the field at all (absent environment facts get no row)."""
    return model is not None and name in model.model_fields_set


def _names(ops: list[OpInfo] | None) -> str:
    return ", ".join(sorted(str(op.name) for op in ops or [])) or "none"
