"""Two analyses side by side (model v1 vs v2, NPU node vs GPU node): rows of facts with differences marked.

Pure: two analysis dicts (the API shape) in, rows out. Text facts differ when they are not equal;
numbers differ when they are more than `RELATIVE_TOLERANCE` apart (timings are never bit-identical,
so an exact comparison would mark every row).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.web.charts import format_quantity
from app.web.detail_view import measurement_label
from app.web.tree import backend_label

RELATIVE_TOLERANCE = 0.05


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
    return CompareRow(section, label, _text(a), _text(b), _text(a) != _text(b))


def _measurements(analysis: Mapping) -> dict[str, Mapping]:
    rows = ((analysis.get("measurements") or {}).get("measurements")) or []
    return {measurement_label(m): m for m in rows}


def compare_rows(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[CompareRow]:
    rows = [
        _row("Analysis", "model", a.get("model_name"), b.get("model_name")),
        _row("Analysis", "format", a.get("format"), b.get("format")),
        _row("Analysis", "target", a.get("target"), b.get("target")),
        _row("Analysis", "status", a.get("status"), b.get("status")),
        _row("Analysis", "submitted by", a.get("submitted_by"), b.get("submitted_by")),
    ]
    rec_a, rec_b = a.get("recommendation") or {}, b.get("recommendation") or {}
    rows += [
        _row(
            "Recommendation",
            "backend",
            backend_label(rec_a.get("backend"), rec_a.get("mode")) if rec_a else None,
            backend_label(rec_b.get("backend"), rec_b.get("mode")) if rec_b else None,
        ),
        _row("Recommendation", "confidence", rec_a.get("confidence"), rec_b.get("confidence")),
        _row("Recommendation", "measured", rec_a.get("measured"), rec_b.get("measured")),
    ]
    ctx_a, ctx_b = a.get("context") or {}, b.get("context") or {}
    rows += [_row("Context", key, ctx_a.get(key), ctx_b.get(key)) for key in sorted(set(ctx_a) | set(ctx_b))]
    env_a = (a.get("measurements") or {}).get("environment") or {}
    env_b = (b.get("measurements") or {}).get("environment") or {}
    for key in (
        "measured_on",
        "device",
        "device_name",
        "soc_version",
        "torch_version",
        "torch_npu_version",
        "cann_version",
        "host",
    ):
        if key in env_a or key in env_b:
            rows.append(_row("Environment", key.replace("_", " "), env_a.get(key), env_b.get(key)))
    m_a, m_b = _measurements(a), _measurements(b)
    for label in list(m_a) + [name for name in m_b if name not in m_a]:
        x, y = m_a.get(label, {}), m_b.get(label, {})
        section = f"Backend {label}"
        rows += [
            _row(section, "status", x.get("status"), y.get("status")),
            _row(section, "median latency", _get(x, "latency", "median_ms"), _get(y, "latency", "median_ms"), " ms"),
            _row(section, "p99 latency", _get(x, "latency", "p99_ms"), _get(y, "latency", "p99_ms"), " ms"),
            _row(section, "speedup vs eager", x.get("speedup_vs_eager"), y.get("speedup_vs_eager"), "×"),
            _row(section, "compile (cold)", x.get("compile_s_cold"), y.get("compile_s_cold"), " s"),
            _row(section, "compile (warm)", x.get("compile_s_warm"), y.get("compile_s_warm"), " s"),
            _row(section, "peak memory", x.get("peak_memory_mb"), y.get("peak_memory_mb"), " MiB"),
            _row(section, "accuracy passed", _get(x, "accuracy", "passed"), _get(y, "accuracy", "passed")),
        ]
    ins_a, ins_b = a.get("inspection") or {}, b.get("inspection") or {}
    if ins_a or ins_b:
        rows += [
            _row("Model", "parameters", _get(ins_a, "parameters", "count"), _get(ins_b, "parameters", "count")),
            _row("Model", "FLOPs", ins_a.get("flops"), ins_b.get("flops")),
            _row("Model", "distinct ops", len(ins_a.get("ops") or []), len(ins_b.get("ops") or [])),
            _row("Model", "custom ops", _names(ins_a.get("custom_ops")), _names(ins_b.get("custom_ops"))),
            _row("Model", "graph breaks", _get(ins_a, "graph_breaks", "count"), _get(ins_b, "graph_breaks", "count")),
        ]
    return rows


def _get(data: Mapping, key: str, inner: str) -> Any:
    value = data.get(key)
    return value.get(inner) if isinstance(value, Mapping) else None


def _names(ops: list | None) -> str:
    return ", ".join(sorted(str(op.get("name")) for op in ops or [])) or "none"
