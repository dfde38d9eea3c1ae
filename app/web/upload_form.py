"""The upload form's context fields, generated from `advisor.core.context.DeploymentContext`.

Each field's input kind comes from its type (choices for Literals, numbers, checkboxes, JSON for
nested values) and its help text is the field's own description, so the form never drifts from the
context the API validates. The page's script folds the fields into the API's `context` JSON; validation stays
with the API (`parse_context`), whose per-field errors the page shows next to each field.
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass
from typing import Any

from advisor.core.context import DeploymentContext

FIELD_PREFIX = "ctx."
JSON_LINES_FIELDS = {"shape_traffic"}  # also take JSON Lines text (advisor.core.shape_traffic), as users have it


@dataclass(frozen=True)
class ContextField:
    name: str
    kind: str  # "choice" | "number" | "integer" | "checkbox" | "json" | "jsonl" | "text"
    help: str
    default: Any
    choices: tuple[str, ...] = ()
    optional: bool = False

    @property
    def input_name(self) -> str:
        return FIELD_PREFIX + self.name

    @property
    def label(self) -> str:
        return self.name.replace("_", " ")

    @property
    def default_text(self) -> str:
        if self.default is None or self.kind == "checkbox":
            return ""
        return json.dumps(self.default) if self.kind == "json" else str(self.default)


def _kind(annotation: Any) -> tuple[str, tuple[str, ...], bool]:
    args = typing.get_args(annotation)
    optional = type(None) in args
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        annotation = inner[0] if len(inner) == 1 else annotation
    if typing.get_origin(annotation) is typing.Literal:
        return "choice", tuple(str(a) for a in typing.get_args(annotation)), optional
    if annotation is bool:
        return "checkbox", (), optional
    if annotation is int:
        return "integer", (), optional
    if annotation is float:
        return "number", (), optional
    if annotation is str:
        return "text", (), optional
    return "json", (), optional


def context_form_fields() -> list[ContextField]:
    fields = []
    for name, info in DeploymentContext.model_fields.items():
        kind, choices, optional = _kind(info.annotation)
        kind = "jsonl" if name in JSON_LINES_FIELDS else kind
        default = info.get_default(call_default_factory=True)
        fields.append(ContextField(name, kind, info.description or "", default, choices, optional))
    return fields
