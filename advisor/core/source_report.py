"""The source-side report: what `npu-advisor inspect|analyze path/file.py:factory` found by running the user's own
Python code on the user's own machine (graph breaks, recompiles, torch.export).

It is data the submitting machine produced, never measured by a worker, so everything in it is bounded and
validated here (`SourceReport.model_validate`) before anything else reads it: the decision engine
(advisor.core.decision.source_rules) and, when it is uploaded, the server. Texts are capped (a longer one is
refused, not truncated: the child truncates its own texts with `clip` before it builds the report), lists are
capped, numbers are bounded. Torch-free.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

SOURCE_LABEL = "from the submitting machine, not measured by a worker"

MAX_TEXT = 2000  # a reason, an error, a draft_export problem
MAX_SHORT = 300  # a file path, a function name, a kind, the factory spec
MAX_CODE = 500  # one source line's text
MAX_BREAKS = 200
MAX_HINTS = 8
MAX_POINTS = 16
MAX_GUARDS = 20
MAX_PROBLEMS = 50
MAX_INPUTS = 64
MAX_DIMS = 64
MAX_COUNT = 10**9
MAX_DIM_SIZE = 2**31 - 1
# The report as the API's `source_report` form field (JSON text): a longer one is refused (422). The CLI fits a report
# to it before uploading (`fit_for_upload`); a real one is a few KiB.
MAX_UPLOAD_BYTES = 256 * 1024
MAX_UPLOAD_PROBLEMS = 20  # the validation problems a 422 lists

Text = Annotated[str, Field(max_length=MAX_TEXT)]
Short = Annotated[str, Field(max_length=MAX_SHORT)]
Code = Annotated[str, Field(max_length=MAX_CODE)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Shape = Annotated[list[Annotated[int, Field(ge=0, le=MAX_DIM_SIZE)]], Field(max_length=MAX_DIMS)]
Shapes = Annotated[dict[Short, Shape], Field(max_length=MAX_INPUTS)]
Seconds = Annotated[float, Field(ge=0, le=10**7, allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SourceBreak(_Strict):
    """One distinct graph break: Dynamo's kind (the first line of its message), where in the user's code, the
    source line's text, Dynamo's own explanation and hints, and how often it was hit."""

    kind: Short
    reason: Text
    file: Short | None = None
    line: Annotated[int, Field(ge=0, le=10**7)] | None = None
    function: Short | None = None
    code: Code | None = None
    explanation: Text | None = None
    hints: Annotated[list[Text], Field(max_length=MAX_HINTS)] = []
    count: Annotated[int, Field(ge=1, le=MAX_COUNT)] = 1

    @property
    def where(self) -> str:
        if self.file is None:
            return "an unknown location"
        return f"{self.file}:{self.line}" if self.line is not None else self.file


class GraphBreakReport(_Strict):
    analysed: bool
    note: Text | None = None
    graph_count: Count | None = None
    break_count: Count | None = None
    breaks: Annotated[list[SourceBreak], Field(max_length=MAX_BREAKS)] = []


class RecompilePoint(_Strict):
    """One call at another shape: did Dynamo compile again, and which guards failed."""

    shapes: Shapes
    recompiled: bool
    graphs_compiled: Count = 0
    guard_failures: Annotated[list[Text], Field(max_length=MAX_GUARDS)] = []
    error: Text | None = None


class DynamicDim(_Strict):
    input: Short
    dim: Annotated[int, Field(ge=0, le=MAX_DIMS)]


class MarkedDynamic(_Strict):
    """The calls with the varying dims marked dynamic (torch._dynamo.mark_dynamic) from the first: how many compile
    again (advisor.harness.source_probe.marked_dynamic reads it from the calls already made, with Dynamo's guards)."""

    dims: Annotated[list[DynamicDim], Field(max_length=MAX_INPUTS)]
    recompiles: Count | None = None  # calls after the first that compiled again; None when it could not run
    guard_failures: Annotated[list[Text], Field(max_length=MAX_GUARDS)] = []
    error: Text | None = None


class StaticReplay(_Strict):
    """The example's and the swept shapes called twice each with Dynamo's automatic dynamic shapes off: the graphs a
    static (one graph per shape) or bucket plan (one per bucket) compiles, and the shapes that compiled again on
    their second call (a guard on data, not on shapes: such a plan recompiles anyway)."""

    shapes: Count = 0
    graphs_per_shape: Annotated[list[Count], Field(max_length=MAX_POINTS + 1)] = []
    compiled_again: Annotated[list[Shapes], Field(max_length=MAX_POINTS + 1)] = []
    error: Text | None = None

    @property
    def graphs(self) -> int:
        return sum(self.graphs_per_shape)


class RecompileReport(_Strict):
    analysed: bool
    note: Text | None = None
    base_shapes: Shapes = {}
    points: Annotated[list[RecompilePoint], Field(max_length=MAX_POINTS)] = []
    marked_dynamic: MarkedDynamic | None = None
    static: StaticReplay | None = None  # only for a sweep's shapes (the context's sweep, ranges or traffic)

    @property
    def recompiles(self) -> int:
        return sum(1 for point in self.points if point.recompiled)


class ExportAttempt(_Strict):
    strict: bool
    ok: bool
    error: Text | None = None
    seconds: Seconds | None = None


class DraftProblem(_Strict):
    kind: Short
    message: Text
    location: Short | None = None


class DraftReport(_Strict):
    ran: bool
    ok: bool = False  # draft_export produced a program (with the problems below worked around)
    problems: Annotated[list[DraftProblem], Field(max_length=MAX_PROBLEMS)] = []
    error: Text | None = None


class ExportReport(_Strict):
    attempts: Annotated[list[ExportAttempt], Field(max_length=2)] = []
    draft: DraftReport | None = None
    written: Short | None = None  # the ExportedProgram file's name, when one was written
    save_error: Text | None = None

    @property
    def ok(self) -> bool:
        return any(attempt.ok for attempt in self.attempts) and self.save_error is None


class SourceReport(_Strict):
    version: Literal[1] = 1
    factory: Short
    torch_version: Annotated[str, Field(max_length=64)] | None = None
    graph_breaks: GraphBreakReport
    recompiles: RecompileReport
    export: ExportReport


def parse_source_report(data: Any) -> SourceReport:
    """Validate `data` (a dict, e.g. decoded JSON); raises pydantic's ValidationError with every bad field."""
    return SourceReport.model_validate(data)


def source_report_or_none(data: Any) -> SourceReport | None:
    """The report when `data` is a valid one, else None (the decision engine never fails on a bad report)."""
    if data is None:
        return None
    if isinstance(data, SourceReport):
        return data
    try:
        return SourceReport.model_validate(data)
    except ValidationError:
        return None


class SourceReportRefused(ValueError):
    """An uploaded report that is not a valid SourceReport; `problems` are `{"field", "message"}`, never the value."""

    def __init__(self, problems: list[dict[str, str]]) -> None:
        super().__init__("; ".join(f"{p['field']}: {p['message']}" for p in problems))
        self.problems = problems


def parse_uploaded_report(raw: str | bytes, *, field: str = "source_report") -> SourceReport:
    """The JSON text of an uploaded report, decoded and validated (pydantic's JSON parser: no Python recursion on deep
    nesting, no NaN or Infinity); SourceReportRefused naming each bad field (`source_report.graph_breaks.breaks.0.
    reason: ...`), never echoing a value. Text over MAX_UPLOAD_BYTES is refused before it is parsed."""
    size = len(raw.encode("utf-8", "replace") if isinstance(raw, str) else raw)
    if size > MAX_UPLOAD_BYTES:
        raise SourceReportRefused(
            [{"field": field, "message": f"too large: {size} bytes (at most {MAX_UPLOAD_BYTES})"}]
        )
    try:
        return SourceReport.model_validate_json(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        problems = [
            {"field": ".".join(str(part) for part in (field, *err["loc"])), "message": clip(err["msg"], 300) or ""}
            for err in errors[:MAX_UPLOAD_PROBLEMS]
        ]
        if len(errors) > MAX_UPLOAD_PROBLEMS:
            problems.append({"field": field, "message": f"{len(errors) - MAX_UPLOAD_PROBLEMS} more problem(s)"})
        raise SourceReportRefused(problems) from None


def upload_text(report: SourceReport | dict[str, Any]) -> str:
    """The report as the compact JSON text that is uploaded (and hashed by `report_digest`)."""
    data = report.model_dump(mode="json") if isinstance(report, SourceReport) else report
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def report_digest(report: SourceReport | dict[str, Any]) -> str:
    """sha256 of the report without its timings (each export attempt's `seconds`): two runs of the same code give the
    same digest, so the server's dedupe treats them as the same question (app.analyses.dedupe_key)."""
    data = (report.model_dump(mode="json") if isinstance(report, SourceReport) else copy.deepcopy(report)) or {}
    for attempt in (data.get("export") or {}).get("attempts") or []:
        if isinstance(attempt, dict):
            attempt.pop("seconds", None)
    return hashlib.sha256(upload_text(data).encode()).hexdigest()


def fit_for_upload(report: dict[str, Any], max_bytes: int = MAX_UPLOAD_BYTES) -> dict[str, Any]:
    """`report` (valid) cut until its upload text fits `max_bytes`: the longest of its lists (breaks, draft_export's
    problems, guard failures) halved, keeping the first items, until it fits; the graph-break note says how many
    breaks were left out. `npu-advisor inspect FILE.py:factory` still shows everything."""
    if len(upload_text(report).encode()) <= max_bytes:
        return report
    data = copy.deepcopy(report)
    total_breaks = len(data["graph_breaks"].get("breaks") or [])
    for _ in range(100):
        longest = max(_cuttable_lists(data), key=len)
        if len(longest) <= 1:
            break
        del longest[(len(longest) + 1) // 2 :]
        kept = len(data["graph_breaks"].get("breaks") or [])
        if kept < total_breaks:
            data["graph_breaks"]["note"] = (
                f"{kept} of {total_breaks} distinct graph breaks uploaded (the rest would go over the upload's size "
                "limit); `npu-advisor inspect` lists them all"
            )
        if len(upload_text(data).encode()) <= max_bytes:
            return data
    raise ValueError(f"the source-side report does not fit {max_bytes} bytes even cut down")


def _cuttable_lists(data: dict[str, Any]) -> list[list[Any]]:
    recompiles, export = data["recompiles"], data["export"]
    points = recompiles.setdefault("points", [])
    marked = recompiles.get("marked_dynamic") or {}
    draft = export.get("draft") or {}
    return [
        data["graph_breaks"].setdefault("breaks", []),
        points,
        *(point.setdefault("guard_failures", []) for point in points),
        marked.get("guard_failures") if isinstance(marked.get("guard_failures"), list) else [],
        draft.get("problems") if isinstance(draft.get("problems"), list) else [],
    ]


def with_source_report(inspection: Any, report: Any) -> Any:
    """A copy of `inspection` (a worker's, or None) carrying the submitter's report as `source_report`, where the
    decision engine (advisor.core.decision.source_rules) and the reports read it; `inspection` itself when there is no
    report. The stored inspection stays the worker's own."""
    if report is None:
        return inspection
    return {**(inspection if isinstance(inspection, dict) else {}), "source_report": report}


def clip(text: str | None, limit: int = MAX_TEXT) -> str | None:
    """`text` cut to `limit` characters with a marker of how much was left out."""
    if text is None or len(text) <= limit:
        return text
    keep = max(limit - 40, 0)
    return f"{text[:keep]} ... [{len(text) - keep} more characters]"


# ---------------------------------------------------------------------------------------------- as text
def inspection_source_lines(inspection: Any) -> list[str]:
    """The lines of the source-side report an inspection carries (`inspection["source_report"]`, also an extra field
    of advisor.core.results.Inspection), headed with where it comes from; none when it carries no valid one."""
    data = inspection.get("source_report") if isinstance(inspection, dict) else None
    if data is None and isinstance(inspection, BaseModel):
        data = (inspection.model_extra or {}).get("source_report")
    report = source_report_or_none(data)
    if report is None:
        return []
    return [f"Your code {report.factory} ({SOURCE_LABEL}; torch {report.torch_version or '?'}):", *report_lines(report)]


def report_lines(report: SourceReport) -> list[str]:
    """The report as plain lines: `inspect FILE.py:factory` prints them, the analysis reports list them."""
    return [*_break_lines(report.graph_breaks), *_recompile_lines(report.recompiles), *_export_lines(report.export)]


def _break_lines(breaks: GraphBreakReport) -> list[str]:
    """The graph breaks: how many, then each where it is, its kind, code, why and hints."""
    if not breaks.analysed:
        return [f"Graph breaks: not analysed - {breaks.note or ''}"]
    lines = [f"Graph breaks: {breaks.break_count} ({breaks.graph_count} graph(s))"]
    if breaks.note:
        lines.append(f"  note: {breaks.note}")
    for number, item in enumerate(breaks.breaks, 1):
        times = f" (x{item.count})" if item.count > 1 else ""
        where = f"{item.where} in {item.function}" if item.function else item.where
        lines.append(f"  {number}. {where}: {item.kind}{times}")
        if item.code:
            lines.append(f"       {item.code}")
        if item.explanation:
            lines.append(f"       why: {item.explanation}")
        lines += [f"       hint: {hint}" for hint in item.hints]
    return lines


def _recompile_lines(recompiles: RecompileReport) -> list[str]:
    """The recompiles: how many of the other shapes recompiled, each shape with its failed guards, and the calls
    made again with the varying dims marked dynamic."""
    if not recompiles.analysed:
        return [f"Recompiles: not analysed - {recompiles.note or ''}"]
    lines = [
        f"Recompiles: {recompiles.recompiles} of {len(recompiles.points)} other shape(s)",
        f"  example shapes: {shapes_text(recompiles.base_shapes)}",
    ]
    for point in recompiles.points:
        state = "recompiled" if point.recompiled else "no recompile"
        lines.append(f"  at {shapes_text(point.shapes)}: {state}" + (f" - error: {point.error}" if point.error else ""))
        lines += [f"       guard failed: {guard}" for guard in point.guard_failures]
    if recompiles.marked_dynamic is not None:
        lines += _marked_lines(recompiles.marked_dynamic)
    if recompiles.static is not None:
        lines += _static_lines(recompiles.static)
    return lines


def _static_lines(static: StaticReplay) -> list[str]:
    """What a static or bucket plan compiles: graphs per shape (more than one: graph breaks), shapes compiled again."""
    if static.error:
        return [f"  static shapes (automatic dynamic off): could not run - {static.error}"]
    per_shape = max(static.graphs_per_shape, default=0)
    lines = [
        f"  static shapes (automatic dynamic off): {static.graphs} graph(s) for {static.shapes} shape(s); a bucket "
        f"plan compiles {per_shape} graph(s) per bucket" + (" (graph breaks split each shape)" if per_shape > 1 else "")
    ]
    lines += [f"       compiled again on a second call at {shapes_text(s)}" for s in static.compiled_again]
    return lines


def _marked_lines(marked: MarkedDynamic) -> list[str]:
    """The calls with the varying dims marked dynamic: could not run, no recompiles, or still some (and why)."""
    dims = ", ".join(f"{d.input}[{d.dim}]" for d in marked.dims)
    if marked.recompiles is None:
        return [f"  marked dynamic ({dims}): could not run - {marked.error}"]
    if marked.recompiles == 0:
        return [f"  marked dynamic ({dims}): no recompiles"]
    return [
        f"  marked dynamic ({dims}): still {marked.recompiles} recompile(s)",
        *(f"       guard failed: {guard}" for guard in marked.guard_failures),
    ]


def _export_lines(export: ExportReport) -> list[str]:
    """torch.export: each attempt's outcome, draft_export's problems, where the ExportedProgram was written."""
    lines: list[str] = []
    if not export.attempts:
        return lines
    for attempt in export.attempts:
        name = "strict" if attempt.strict else "non-strict"
        error = "\n       ".join((attempt.error or "").splitlines()[:4])
        outcome = "ok" if attempt.ok else f"failed: {error}"
        lines.append(f"torch.export ({name}): {outcome}")
    if [(a.strict, a.ok) for a in export.attempts] == [(False, True)]:
        lines.append("torch.export (strict): not tried - non-strict exported it (`--strict-export` tries both)")
    if export.draft is not None:
        lines += _draft_lines(export.draft)
    if export.written:
        lines.append(f"ExportedProgram written to {export.written}")
    if export.save_error:
        lines.append(f"not written: {export.save_error}")
    return lines


def _draft_lines(draft: DraftReport) -> list[str]:
    """draft_export after torch.export failed: its own failure, or the problems to fix."""
    if draft.error:
        return [f"draft_export: failed too: {draft.error}"]
    lines = [f"draft_export: {len(draft.problems)} problem(s) to fix before torch.export succeeds"]
    for problem in draft.problems:
        at = f" at {problem.location}" if problem.location else ""
        said = " ".join(problem.message.splitlines()[:2])
        lines.append(f"  - {problem.kind}{at}: {said}")
    return lines


def shapes_text(shapes: dict[str, list[int]]) -> str:
    return ", ".join(f"{name}={'x'.join(map(str, shape)) or 'scalar'}" for name, shape in shapes.items())
