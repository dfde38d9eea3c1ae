"""Which variants the inspection already rules out: skipped before their child starts, whatever the context.

The second reason a plan leaves a variant out (the first, advisor.core.decision.plan_pruning, asks whether its
best result could change the recommendation). The ONNX Runtime options (the catalogue's `exports_onnx`: float and
int8) start with `torch.onnx.export(dynamo=True)`, which translates every op of the graph from its registry after
decomposing the ops that decompose (a CompositeImplicitAutograd kernel). A custom op with neither - a
`torch.library.custom_op`, a vendor's npu:: op - fails that export after seconds of work
(tests/harness/test_onnx_custom_ops.py shows it with the installed torch). The inspection child records, per custom
op, how the exporter takes it (OpCoverage.onnx: translated | decomposed | none; advisor.harness.coverage); a variant
is skipped only on an explicit "none" for an op whose name reads as an op, so an older inspection without the field,
a stubbed op (unknown) or a garbled value skips nothing.

The inspection comes from a sandboxed child that ran the user's model: everything here reads it as untrusted JSON
(any type, any size) and never raises. A variant asked for by its mode is not asked about (the caller passes no
context, as for plan pruning): it is measured and fails with the exporter's own error. Torch-free.
"""

from __future__ import annotations

import re
from typing import Any

from advisor.core import catalogue
from advisor.core.artifacts import BUILTIN_OP_NAMESPACES
from advisor.core.decision.rules import short_list
from advisor.core.results._base import MAX_OPS

ONNX_NO_TRANSLATION = "none"  # OpCoverage.onnx: neither a translation nor a decomposition
MAX_NAMED = 4  # ops named in a reason; the rest are counted
# "mylib.scale.default", "npu.npu_rms_norm.default": namespace.op[.overload], as the inspection names ops
OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}(\.[A-Za-z_][A-Za-z0-9_]{0,99}){1,2}")


def skip_reason(inspection: Any, backend: str, mode: str) -> str | None:
    """Why (backend, mode) need not be measured, from the inspection alone; None: measure it."""
    info = catalogue.get(backend)
    if info is None or not info.exports_onnx:
        return None
    blocked = onnx_untranslatable_ops(inspection)
    if not blocked:
        return None
    named = short_list(blocked, MAX_NAMED)
    one = len(blocked) == 1
    label = catalogue.option_label(backend, mode)
    return (
        f"not measured: the graph calls {named}, {'a custom op' if one else 'custom ops'} the ONNX exporter has no "
        f"translation for ({'it does' if one else 'they do'} not decompose to aten ops either), so "
        "torch.onnx.export would fail; the inspection showed this before any export was tried. Measure it anyway to "
        f"see the exporter's error: npu-advisor measure MODEL -b {label}."
    )


def onnx_untranslatable_ops(inspection: Any) -> list[str]:
    """The custom ops the inspection found the ONNX exporter cannot take (OpCoverage.onnx == "none"), sorted; []
    for anything else, however malformed."""
    if not isinstance(inspection, dict):
        return []
    ops = inspection.get("custom_ops")
    if not isinstance(ops, list):
        return []
    blocked: set[str] = set()
    for op in ops[:MAX_OPS]:
        if not isinstance(op, dict):
            continue
        name, coverage = op.get("name"), op.get("coverage")
        if not isinstance(name, str) or not isinstance(coverage, dict) or not OP_NAME.fullmatch(name):
            continue
        if coverage.get("onnx") == ONNX_NO_TRANSLATION and name.split(".")[0] not in BUILTIN_OP_NAMESPACES:
            blocked.add(name)
    return sorted(blocked)
