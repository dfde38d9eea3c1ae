"""Draws a recommendation's path through the selection tree as an SVG.

The decision engine records the rules it walked (`Recommendation.path`, one `RuleStep` each) and
why every other backend lost (`why_not`). The drawing is a spine of the rules taken, top to bottom,
ending in a fork: the recommended backend (highlighted) and one dimmed leaf per rejected backend
with its reason. Pure: recommendation dict in, escaped SVG out.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape

from advisor.core.catalogue import option_label

_CHARS_PER_LINE = 74
_LINE_H = 16
_BOX_W = 600
_LEAF_W = 560
_GAP = 18
_X = 28


@dataclass(frozen=True)
class TreeNode:
    """One box of the drawing: a rule taken (with its outcome) or a leaf (a backend)."""

    kind: str  # "rule" | "chosen" | "rejected"
    heading: str
    detail: str = ""
    tooltip: str = ""
    children: list[TreeNode] = field(default_factory=list)


def backend_label(backend: str | None, mode: str | None) -> str:
    """'inductor:max-autotune', or just 'eager' when the mode is the default or absent."""
    if not backend:
        return "no backend qualifies"
    return option_label(backend, mode, short=True)


def selection_tree(recommendation: Mapping) -> TreeNode:
    """The rules taken as a chain of nodes; the last one forks into the chosen and rejected backends."""
    leaves = [
        TreeNode(
            "chosen",
            backend_label(recommendation.get("backend"), recommendation.get("mode")),
            str(recommendation.get("summary") or ""),
        )
    ]
    why_not = recommendation.get("why_not") or {}
    leaves += [TreeNode("rejected", str(name), str(reason)) for name, reason in why_not.items()]
    steps: Sequence[Mapping] = recommendation.get("path") or []
    if not steps:
        return TreeNode("rule", "No rule recorded", "the engine returned no path", "", leaves)
    node: TreeNode | None = None
    for step in reversed(steps):
        node = TreeNode(
            "rule",
            str(step.get("question") or step.get("rule") or ""),
            f"→ {step.get('outcome', '')}",
            f"rule {step.get('rule', '')}; evidence {_evidence(step)}",
            [node] if node else leaves,
        )
    assert node is not None
    return node


def _evidence(step: Mapping) -> str:
    return json.dumps(step.get("evidence", {}), sort_keys=True, default=str)


def _lines(text: str, width: int = _CHARS_PER_LINE) -> list[str]:
    return textwrap.wrap(text, width, break_long_words=True) or [""]


def _box(node: TreeNode, x: float, y: float, width: float) -> tuple[str, float]:
    heading, detail = _lines(node.heading), _lines(node.detail) if node.detail else []
    height = (len(heading) + len(detail)) * _LINE_H + 14
    texts = [
        f'<tspan x="{x + 10}" dy="{_LINE_H if i else _LINE_H - 2}" class="heading">{escape(line)}</tspan>'
        for i, line in enumerate(heading)
    ] + [f'<tspan x="{x + 10}" dy="{_LINE_H}" class="detail">{escape(line)}</tspan>' for line in detail]
    tooltip = f"<title>{escape(node.tooltip or node.heading + ' ' + node.detail)}</title>"
    svg = (
        f'<g class="node {node.kind}" data-node="{escape(node.heading, quote=True)}">{tooltip}'
        f'<rect x="{x}" y="{y}" width="{width}" height="{height}" rx="6"/>'
        f'<text x="{x + 10}" y="{y + 4}">{"".join(texts)}</text></g>'
    )
    return svg, height


def tree_svg(recommendation: Mapping, title: str = "Path through the selection tree") -> str:
    """The whole drawing. An analysis without a recommendation yet gives a short placeholder."""
    root = selection_tree(recommendation)
    parts: list[str] = []
    y = 8.0
    node: TreeNode | None = root
    while node is not None:
        svg, height = _box(node, _X, y, _BOX_W)
        if y > 8:
            parts.append(f'<path class="edge taken" d="M{_X + 20} {y - _GAP}V{y}"/>')
        parts.append(svg)
        y += height + _GAP
        nxt = node.children[0] if len(node.children) == 1 and node.children[0].kind == "rule" else None
        if nxt is None:
            fork_top = y - _GAP
            for leaf in node.children:
                leaf_x = _X + 40
                svg, height = _box(leaf, leaf_x, y, _LEAF_W)
                edge = "taken" if leaf.kind == "chosen" else "not-taken"
                parts.append(f'<path class="edge {edge}" d="M{_X + 20} {fork_top}V{y + height / 2}H{leaf_x}"/>')
                parts.append(svg)
                y += height + 10
        node = nxt
    # edges first so boxes are drawn over them
    edges = [p for p in parts if p.startswith("<path")]
    boxes = [p for p in parts if p and not p.startswith("<path")]
    steps = len(recommendation.get("path") or [])
    desc = f"{steps} rule(s) taken, ending in {root_leaf_label(recommendation)}"
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="tree" role="img" viewBox="0 0 {_X + _BOX_W + 20} {y:.0f}" '
        f'width="100%" preserveAspectRatio="xMinYMin meet" aria-label="{escape(title, quote=True)}">'
        f"<title>{escape(title)}</title><desc>{escape(desc)}</desc>"
    )
    return head + "".join(edges) + "".join(boxes) + "</svg>"


def root_leaf_label(recommendation: Mapping) -> str:
    return backend_label(recommendation.get("backend"), recommendation.get("mode"))
