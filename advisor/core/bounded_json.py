"""JSON from a process the parent does not trust (or an uploaded archive's, advisor.core.archive_inputs), bounded in
nesting depth before it is parsed.

`json.loads` recurses once per nesting level: a child that sends a progress line or a result 60,000 levels deep makes
the trusted parent raise `RecursionError` (or worse, deeper in C). So the parent measures the depth first, without
recursing and in linear time over the bytes, at C speed: escapes and strings are removed, every other byte but the
brackets is dropped, and the running depth is summed a megabyte at a time. A document deeper than `limit` - closed
or not - is refused with `TooDeep`, which names the limit. Torch-free.
"""

from __future__ import annotations

import json
import re
from array import array
from itertools import accumulate
from typing import Any

MAX_DEPTH = 64  # above the server's own bound on a result (app.results.MAX_DEPTH): nothing real comes near it

_STRING = re.compile(rb'"[^"]*"')  # linear: after escapes are gone no string holds a quote
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # as signed bytes: +1, -1
_CHUNK = 1 << 20
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


class TooDeep(ValueError):
    """The document nests deeper than the parent accepts; `str()` says how deep it may be."""

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(f"{what} is nested deeper than {limit} levels")
        self.limit = limit


def nesting_depth(data: bytes | str, limit: int = MAX_DEPTH) -> int:
    """The bracket depth of `data` (outside strings), or a number above `limit` once it is deeper than that.
    Unclosed brackets count as nesting, so a truncated document cannot hide its depth."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")  # escaped backslashes, then escaped quotes
    steps = _STRING.sub(b"", raw).translate(_STEPS, _NOT_BRACKETS)  # +1 per opening, -1 per closing bracket
    depth = deepest = 0
    for start in range(0, len(steps), _CHUNK):
        chunk = array("b", steps[start : start + _CHUNK])
        deepest = max(deepest, max(accumulate(chunk, initial=depth)))
        if deepest > limit:
            return deepest
        depth += sum(chunk)
    return deepest


def loads(data: bytes | str, what: str = "the document", limit: int = MAX_DEPTH) -> Any:
    """`json.loads`, after refusing a document deeper than `limit` (`TooDeep`, a ValueError)."""
    if nesting_depth(data, limit) > limit:
        raise TooDeep(what, limit)
    return json.loads(data)
