"""What every result model shares: an open base, the bounds of the trust boundary, and the lenient reader.

The same models serve two purposes. At the boundary (a worker's posted results, app.results) they refuse wrong
types and out-of-range identifiers with the field named. On the way out (the API, the report, the dashboard) they
read what is stored, which may come from an older version: `read` never raises, a field that does not validate
reads as absent instead of failing the page.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

MAX_MEASUREMENTS = 200  # rows of one MeasurementRun
MAX_OPS = 10_000  # distinct ops of one model (real models: tens to a few hundred)
MAX_ITEMS = 1_000  # inputs, dynamic dims, graph-break reasons, warnings, dynamic-shape rows, via lists
MAX_SHAPE_DIMS = 64
INT64 = 2**63 - 1
MAX_REPAIRS = 8  # rounds of dropping invalid fields before `read` gives up on a stored object

Int = Annotated[int, Field(ge=-INT64 - 1, le=INT64)]
Count = Annotated[int, Field(ge=0, le=INT64)]
Name = Annotated[str, Field(max_length=200)]
Label = Annotated[str, Field(max_length=64)]
DeviceLabel = Annotated[str, Field(max_length=16)]  # app.models' device columns

M = TypeVar("M", bound=BaseModel)


class Open(BaseModel):
    """Typed where present, optional (older and test workers send less), unknown fields kept (workers send
    more than documented). A field that is absent stays unset, so `model_dump(exclude_unset=True)` gives back
    exactly the stored object."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


def read(model: type[M], data: Any) -> M | None:
    """Stored JSON as `model`, leniently: None for None (or anything that is not an object); a field that does
    not validate (a shape from an older version) is dropped and reads as absent. Never raises."""
    if data is None or isinstance(data, model):
        return data
    if not isinstance(data, Mapping):
        return None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
    repaired = copy.deepcopy(dict(data))
    for _ in range(MAX_REPAIRS):
        for error in errors:
            _drop(repaired, error["loc"])
        repaired = _without_dropped(repaired)
        try:
            return model.model_validate(repaired)
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False)
    return model()


_DROPPED = object()  # marks a list item `_drop` removed, until `_without_dropped` prunes it


def _drop(data: dict, loc: tuple[int | str, ...]) -> None:
    """Remove what the error at `loc` is about: an item of a list of objects (a bad row), else the innermost
    object field on the path (a bad value in a list of numbers voids the whole list, not one number of it)."""
    parent: dict | None = None
    key: str | None = None
    item: tuple[list, int] | None = None
    node: Any = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            parent, key, item, node = node, part, None, node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            item, node = (node, part), node[part]
        else:
            break  # a union's tag ("int", "str"): the error is about `node` itself
    if item is not None and any(isinstance(other, dict) for other in item[0]):
        item[0][item[1]] = _DROPPED
    elif parent is not None:
        parent.pop(key, None)


def _without_dropped(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_dropped(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_dropped(item) for item in value if item is not _DROPPED]
    return value
