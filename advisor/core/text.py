"""Short forms of long text: the first line of a message or an exception.

Errors shown to users (and stored with a job) carry first lines only: they say what failed without the
tracebacks and machine paths that follow. One helper, so every place words it the same way.
"""

from __future__ import annotations


def first_line(value: BaseException | str, *, limit: int | None = None) -> str:
    """The first line of `value`.

    An exception reads `Type: first line of its message` (only `Type` when the message is empty); text reads as
    its first non-blank line (whitespace-only text comes back unchanged). `limit` caps the length of the result.
    """
    if isinstance(value, BaseException):
        first = (str(value).strip().splitlines() or [""])[0]
        line = f"{type(value).__name__}: {first}" if first else type(value).__name__
    else:
        stripped = value.strip()
        line = stripped.splitlines()[0] if stripped else value
    return line[:limit] if limit is not None else line
