"""Text made safe to put into Markdown that a viewer renders (report.md): one line, no markup, no HTML.

Every value the report did not write itself - a model or file name, a worker's reason, a source report's code line,
an op name, an engine sentence that quotes any of them - goes through one of these:

- `inline(text)`: one line (every line break - CR, LF, VT, FF, NEL, U+2028/9 - becomes a space, so a value can never
  start a heading, a list or a table row of its own), `& < >` as HTML entities (no tag, comment or autolink survives
  a renderer that passes HTML through), and the inline Markdown markers backslash-escaped: backslash, backtick,
  `*`, `~`, a `]` that a `(` follows (what makes a link or an image: a link reference cannot be defined
  inside a line, so other brackets stay readable), `_` where it could open or close emphasis (not between two
  letters or digits, so `graph_0_fused` stays readable), and, with `table=True` (a table cell), `|`;
- `line(text)`: `inline`, for a value that starts a line: a leading block marker (`#`, `>`, `-`, `+`, `=`, a number
  followed by `.` or `)`) escaped too;
- `code(text)`: one line as a code span, its fence longer than any backtick run inside (a renderer shows a code
  span's content as text, HTML included);
- `fence(text)`: the fence for a fenced code block of `text`, longer than any backtick run inside.

Torch-free.
"""

from __future__ import annotations

import re

_LINE_BREAKS = re.compile(r"[\r\n\x0b\x0c\x85\u2028\u2029]+")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_MARKERS = re.compile(r"[\\`*~]|\](?=\()|(?<![^\W_])_|_(?![^\W_])")
_TABLE_MARKERS = re.compile(_MARKERS.pattern + r"|\|")
_BLOCK_START = re.compile(r"^(\s*)(?:([#>+=-])|(\d+)([.)]))")
_BACKTICKS = re.compile(r"`+")


def one_line(text: object) -> str:
    return _LINE_BREAKS.sub(" ", str(text))


def inline(text: object, *, table: bool = False) -> str:
    """`text` as inert inline Markdown: one line, HTML as entities, markers escaped (`|` too in a table cell)."""
    flat = "".join(_HTML.get(char, char) for char in one_line(text))
    return (_TABLE_MARKERS if table else _MARKERS).sub(lambda match: "\\" + match.group(0), flat)


def line(text: object) -> str:
    """`inline(text)` for the start of a line: a leading block marker escaped as well."""

    def escaped(match: re.Match[str]) -> str:
        indent, marker, number, punct = match.groups()
        return indent + ("\\" + marker if marker else f"{number}\\{punct}")

    return _BLOCK_START.sub(escaped, inline(text), count=1)


def code(text: object) -> str:
    """`text` on one line as a code span."""
    flat = one_line(text)
    ticks = "`" * (max((len(run) for run in _BACKTICKS.findall(flat)), default=0) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") or not flat.strip() else ""
    return f"{ticks}{pad}{flat}{pad}{ticks}"


def fence(text: str) -> str:
    """A code fence for `text`: at least three backticks, more than its longest backtick run."""
    return "`" * max(3, max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
