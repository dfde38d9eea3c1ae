"""Stand-ins for the container types an ExportedProgram's input/output specs name but this process does not know.

An export from transformers returns e.g. `transformers.modeling_outputs.BaseModelOutputWithPooling`; timm,
torchvision and user code return registered dataclasses or namedtuples. `torch.export.save` writes each such
container into the program's `in_spec`/`out_spec` (models/model.json) by its *serialized type name* plus a JSON
context (the keys), and `torch.export.load` only rebuilds types registered under that name in this process.
Loading must never import the user's library (the name is data from an upload), so before loading every
unknown name gets a stand-in pytree node registered under exactly that name, rebuilt from the spec alone:

- mapping (a transformers `ModelOutput`: the context is the list of keys): a dict with attribute access and
  integer indexing (`out.last_hidden_state`, `out["last_hidden_state"]`, `out[0]`), like ModelOutput;
- dataclass (`torch.export.register_dataclass`: the context is [field names, None-valued field names]): the
  same dict, with the None fields present as None;
- namedtuple (`collections.namedtuple` nodes name their class in the context; field names are in the
  archive's `treespec_namedtuple_fields`): a namedtuple with those fields;
- anything else: a tuple of the children that keeps the JSON context.

Contexts are parsed with plain `json.loads` (torch's default hook would import the module an enum key names).
Leaves, order and context are exactly the serialized ones, so flattening a stand-in gives back the same spec.
Torch is imported lazily (callers are the loading children).
"""

from __future__ import annotations

import collections
import json
import keyword
import re
import sys
from collections.abc import Iterator
from typing import Any

MAX_STAND_INS = 1_000  # distinct unknown container types in one archive (real models: a handful)
MAX_NAME_CHARS = 400
_NAMEDTUPLE = "collections.namedtuple"
_NOT_IDENTIFIER = re.compile(r"\W")


class SpecError(ValueError):
    """The archive's specs cannot be rebuilt safely here; `str()` says why (a user-facing load failure)."""


class OutputRecord(dict):
    """A rebuilt `ModelOutput`/dataclass container: a dict in key order, readable like the original
    (`out.name`, `out["name"]`, `out[0]`, `out.to_tuple()`). `serialized_type_name` is the archive's type name."""

    serialized_type_name = ""

    def __getattr__(self, name: str) -> Any:
        try:
            return dict.__getitem__(self, name)
        except KeyError:
            raise AttributeError(f"{self.serialized_type_name or type(self).__name__} has no field {name!r}") from None

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, slice)):
            return self.to_tuple()[key]
        return dict.__getitem__(self, key)

    def to_tuple(self) -> tuple:
        """The non-None values in order, as `ModelOutput.to_tuple()` gives them."""
        return tuple(value for value in self.values() if value is not None)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict.__repr__(self)})"


class OpaqueNode(tuple):
    """A rebuilt container of unknown semantics: its children in order; `pytree_context` is the JSON context."""

    serialized_type_name = ""
    pytree_context: Any = None


def unknown_type_names(programs: list[dict]) -> dict[str, str]:
    """{serialized type name: kind} for every container type the programs' specs name that is not registered
    here; kind is "mapping", "dataclass", "namedtuple" or "opaque". Raises SpecError for a spec that would
    make torch import a module (an enum key naming a module that is not imported)."""
    return {name: kind for name, (kind, _arity) in _scan(programs).items()}


def register_stand_ins(programs: list[dict]) -> list[str]:
    """Register a stand-in for every unknown container type the programs' specs name; returns those names.

    `programs`: the parsed models/model.json of each program in the archive (advisor.harness.custom_op_stubs)."""
    unknown = _scan(programs)
    fields = _namedtuple_fields(programs)
    for name, (kind, arity) in unknown.items():
        if kind == "namedtuple":
            _register_namedtuple(name, fields.get(name), arity)
        else:
            _register_node(name, kind)
    return sorted(set(unknown) | (_named_types(programs) & set(stand_in_names())))


def _scan(programs: list[dict]) -> dict[str, tuple[str, int]]:
    import torch.utils._pytree as pytree

    found: dict[str, tuple[str, int]] = {}
    for program in programs:
        for node in _spec_nodes(program):
            type_name = node.get("type")
            if type_name is None:
                continue
            if not isinstance(type_name, str):
                raise SpecError(f"the archive's input/output spec has a non-string type name: {type_name!r}")
            _refuse_enum_imports(type_name, node.get("context"))
            arity = len(node.get("children_spec") or [])
            if type_name == _NAMEDTUPLE:
                name = _namedtuple_name(node.get("context"))
                if name is not None and name not in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
                    found.setdefault(name, ("namedtuple", arity))
                continue
            if type_name not in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
                found.setdefault(type_name, (_kind(node), arity))
    for name in found:
        if len(name) > MAX_NAME_CHARS:
            raise SpecError(f"the archive names a container type of {len(name)} characters (at most {MAX_NAME_CHARS})")
    if len(found) > MAX_STAND_INS:
        raise SpecError(f"the archive names {len(found)} unknown container types (at most {MAX_STAND_INS})")
    return found


def stand_in_names() -> list[str]:
    """Serialized type names that currently resolve to a stand-in (for tests and messages)."""
    import torch.utils._pytree as pytree

    return sorted(
        name for name, cls in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE.items() if getattr(cls, "_advisor_stand_in", False)
    )


# ------------------------------------------------------------------ reading the specs
def _named_types(programs: list[dict]) -> set[str]:
    """Every container type name the programs' specs use (namedtuples by their class's name)."""
    names = set()
    for program in programs:
        for node in _spec_nodes(program):
            type_name = node.get("type")
            if type_name == _NAMEDTUPLE:
                type_name = _namedtuple_name(node.get("context"))
            if isinstance(type_name, str):
                names.add(type_name)
    return names


def _spec_nodes(program: dict) -> Iterator[dict]:
    """Every node of every in_spec/out_spec string in the program's module call graph."""
    graph_module = program.get("graph_module") or {}
    for entry in graph_module.get("module_call_graph") or []:
        signature = (entry or {}).get("signature") or {}
        for key in ("in_spec", "out_spec"):
            text = signature.get(key)
            if not isinstance(text, str) or not text:
                continue
            try:
                protocol_and_schema = json.loads(text)
            except ValueError as exc:
                raise SpecError(f"the archive's {key} is not valid JSON: {exc}") from exc
            if not (isinstance(protocol_and_schema, list) and len(protocol_and_schema) == 2):
                continue  # torch reports an unknown protocol itself
            yield from _walk(protocol_and_schema[1])


def _walk(node: Any) -> Iterator[dict]:
    stack = [node]
    while stack:
        current = stack.pop()
        if not isinstance(current, dict):
            continue
        yield current
        children = current.get("children_spec") or []
        if isinstance(children, list):
            stack.extend(reversed(children))


def _parse_context(text: Any) -> Any:
    """A node's context string as plain JSON data (never an import); None when it is not JSON."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return None


def _kind(node: dict) -> str:
    context = _parse_context(node.get("context"))
    children = node.get("children_spec") or []
    if _is_names(context) and len(context) == len(children):
        return "mapping"
    if (
        isinstance(context, list)
        and len(context) == 2
        and _is_names(context[0])
        and _is_names(context[1])
        and len(context[0]) == len(children)
    ):
        return "dataclass"
    return "opaque"


def _is_names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _namedtuple_name(context: Any) -> str | None:
    """A namedtuple node's context is its class's serialized name (a bare string, or JSON-quoted)."""
    if not isinstance(context, str):
        return None
    parsed = _parse_context(context)
    return parsed if isinstance(parsed, str) else context


def _namedtuple_fields(programs: list[dict]) -> dict[str, list[str]]:
    fields: dict[str, list[str]] = {}
    for program in programs:
        table = (program.get("graph_module") or {}).get("treespec_namedtuple_fields") or {}
        if not isinstance(table, dict):
            continue
        for name, definition in table.items():
            names = (definition or {}).get("field_names") if isinstance(definition, dict) else None
            if _is_names(names):
                fields[name] = names
    return fields


def _refuse_enum_imports(type_name: str, context: Any) -> None:
    """torch decodes `{"__enum__": ..., "fqn": "module:Class"}` in a context by importing the module: refuse
    unless that module is already imported here (then nothing new runs)."""
    if not isinstance(context, str) or "__enum__" not in context:
        return
    for value in _json_objects(_parse_context(context)):
        if "__enum__" in value:
            module = str(value.get("fqn", "")).partition(":")[0]
            if module not in sys.modules:
                raise SpecError(
                    f"the archive's spec for {type_name} has an enum key of {module!r}, which would be "
                    "imported to read it; uploads never import modules"
                )


def _json_objects(value: Any) -> Iterator[dict]:
    stack = [value]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            yield current
            stack.extend(current.values())
        elif isinstance(current, list):
            stack.extend(current)


# ------------------------------------------------------------------ registering
def _class_name(serialized_name: str) -> str:
    tail = serialized_name.rpartition(".")[2] or "Output"
    name = _NOT_IDENTIFIER.sub("_", tail)
    if not name.isidentifier() or keyword.iskeyword(name):
        name = f"_{name}"
    return name


def _register_node(serialized_name: str, kind: str) -> None:
    import torch.utils._pytree as pytree

    base = OpaqueNode if kind == "opaque" else OutputRecord
    cls = type(
        _class_name(serialized_name),
        (base,),
        {
            "__module__": __name__,
            "__doc__": f"Stand-in for {serialized_name} (rebuilt from the archive's spec; the class is not imported).",
            "serialized_type_name": serialized_name,
            "_advisor_stand_in": True,
        },
    )

    if kind == "mapping":

        def flatten(obj: Any) -> tuple[list, Any]:
            return list(obj.values()), list(obj.keys())

        def unflatten(values: Any, context: Any) -> Any:
            return cls(zip(context, values, strict=True))

        def flatten_with_keys(obj: Any) -> tuple[list, Any]:
            return [(pytree.MappingKey(k), v) for k, v in obj.items()], list(obj.keys())

    elif kind == "dataclass":

        def flatten(obj: Any) -> tuple[list, Any]:
            present = [k for k, v in obj.items() if v is not None]
            return [obj[k] for k in present], [present, [k for k, v in obj.items() if v is None]]

        def unflatten(values: Any, context: Any) -> Any:
            names, none_names = context
            return cls([*zip(names, values, strict=True), *((name, None) for name in none_names)])

        def flatten_with_keys(obj: Any) -> tuple[list, Any]:
            values, context = flatten(obj)
            return [(pytree.GetAttrKey(k), v) for k, v in zip(context[0], values, strict=True)], context

    else:

        def flatten(obj: Any) -> tuple[list, Any]:
            return list(obj), obj.pytree_context

        def unflatten(values: Any, context: Any) -> Any:
            node = cls(values)
            node.pytree_context = context
            return node

        def flatten_with_keys(obj: Any) -> tuple[list, Any]:
            return [(pytree.SequenceKey(i), v) for i, v in enumerate(obj)], obj.pytree_context

    pytree.register_pytree_node(
        cls,
        flatten,
        unflatten,
        serialized_type_name=serialized_name,
        to_dumpable_context=_dump_context,
        from_dumpable_context=_load_context,
        flatten_with_keys_fn=flatten_with_keys,
    )


def _register_namedtuple(serialized_name: str, field_names: list[str] | None, arity: int) -> None:
    """A namedtuple with the archive's field names (f0, f1, ... when it does not record as many as it has)."""
    import torch.utils._pytree as pytree

    names = field_names if field_names and len(field_names) == arity else [f"f{i}" for i in range(arity)]
    cls = collections.namedtuple(_class_name(serialized_name), names, rename=True)  # type: ignore[misc]
    cls.__module__ = __name__
    cls._advisor_stand_in = True  # type: ignore[attr-defined]
    cls.serialized_type_name = serialized_name  # type: ignore[attr-defined]
    pytree._register_namedtuple(cls, serialized_type_name=serialized_name)


def _dump_context(context: Any) -> str:
    return json.dumps(context)


def _load_context(text: str) -> Any:
    return json.loads(text)
