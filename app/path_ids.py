"""Integer ids in paths outside the database's range answer 404, before any route runs.

`/api/v1/analyses/99999999999999999999` would otherwise reach SQLite, which cannot bind an integer past 64 bits
(OverflowError: a 500). No row can have such an id, so the honest answer is "no such analysis". The segment
after a collection name (`analyses`, `jobs`, in the API and on the dashboard) is read the way the routes read
it (pydantic's int parsing: "+5", "1_000", " 7" are ints too); one outside int64 ends the request here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# collection segment -> what its ids name, for the message
ID_COLLECTIONS: Mapping[str, str] = {"analyses": "analysis", "jobs": "job"}
_INT = TypeAdapter(int)


def out_of_range_id(path: str, collections: Mapping[str, str] = ID_COLLECTIONS) -> str | None:
    """What the path names with an id outside int64 ("analysis", "job"), or None."""
    segments = path.split("/")
    for collection, segment in zip(segments, segments[1:], strict=False):
        thing = collections.get(collection)
        if thing is not None and segment and _outside_int64(segment):
            return thing
    return None


def _outside_int64(segment: str) -> bool:
    digits = segment.strip().lstrip("+-").replace("_", "").lstrip("0")
    if digits.isascii() and digits.isdigit() and len(digits) > 19:
        return True  # more digits than any int64 has: no need to convert (slow for thousands of digits)
    if len(segment) > 64:
        return False  # not an integer the routes accept either way
    try:
        value = _INT.validate_python(segment)
    except ValidationError:
        return False  # not an integer: the route answers (422 or 404)
    return not INT64_MIN <= value <= INT64_MAX


def id_or_none(text: str | None) -> int | None:
    """A database id from query text ("12" -> 12), or None for anything else, ids outside int64 included
    (for query parameters the middleware does not see, e.g. the dashboard's /compare?a= and /web/progress?ids=)."""
    digits = (text or "").strip()
    if not (digits.isascii() and digits.isdigit()) or len(digits.lstrip("0")) > 19:
        return None
    value = int(digits)
    return value if value <= INT64_MAX else None


class PathIdRangeMiddleware:
    """ASGI middleware: 404 `{"detail": "no such <thing>: id out of range"}` for an out-of-range path id."""

    def __init__(self, app: ASGIApp, collections: Mapping[str, str] = ID_COLLECTIONS) -> None:
        self.app = app
        self.collections = collections

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            thing = out_of_range_id(scope.get("path", ""), self.collections)
            if thing is not None:
                response: Any = JSONResponse({"detail": f"no such {thing}: id out of range"}, status_code=404)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
