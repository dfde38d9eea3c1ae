"""One option timed at each point of a shape sweep (advisor.harness.measurement.sweep), as stored."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from advisor.core.results._base import MAX_ITEMS, MAX_SHAPE_DIMS, Count, Label, Name, Open

Shape = Annotated[list[Annotated[int, Field(ge=0)]], Field(max_length=MAX_SHAPE_DIMS)]


class StaticCompile(Open):
    """The same point under a static compile (Dynamo's automatic dynamic shapes off: one specialised graph per
    shape, each compiled on its first call)."""

    median_ms: float | None = None
    speedup: float | None = None  # vs eager, side by side
    compile_s: float | None = None  # the first call at this shape minus the steady median
    recompiles: Count | None = None
    peak_memory_mb: float | None = None  # as SweepPoint's, for this static compile's first call at the shape
    memory_kind: Label | None = None  # device | rss


class SweepPoint(Open):
    label: Name = None  # type: ignore[assignment]  # "x=32x64"
    shape: dict[Name, Shape] | None = Field(default=None, max_length=MAX_ITEMS)
    median_ms: float | None = None
    eager_median_ms: float | None = None  # eager, interleaved in the same window (compiled options)
    speedup: float | None = None
    recompiles: Count | None = None  # Dynamo frames compiled at this point (automatic dynamic shapes)
    first_call_s: float | None = None  # the first call at this shape: includes a recompile when there is one
    # the first call at this shape (its compile when it needs one, and the run) above what was resident before it:
    # the device allocator's peak (cuda/npu, "device") or the process's RSS high-water mark (cpu: host, "rss")
    peak_memory_mb: float | None = None
    memory_kind: Label | None = None  # device | rss
    static: StaticCompile | None = None
    error: str | None = None  # this point could not run (e.g. outside an export's dynamic range)
