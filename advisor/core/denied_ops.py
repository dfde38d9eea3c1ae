"""Refused at the door: ops that touch files or the process, and code nested deep enough to crash torch's parser.

Torch-free (the API server uses it through advisor/core/artifacts.py). Two layers use `DENIED_OPS`:

1. Before anything loads the file (`scan_torchscript_code`, `scan_exported_json`, called by `artifacts.sniff`):
   a TorchScript archive's code files (`<top>/code/**/*.py`, and any other `.py` entry) are read as text, with
   strings and comments blanked the way TorchScript's own lexer reads them, and refused when they refer to a
   denied op by any spelling `torch.jit.load` accepts: `torch.from_file`, `torch.autograd.from_file`,
   `ops.aten.from_file`, an alias of `torch` / `ops.aten` (`t = torch; t.from_file(...)`) or of the function
   itself - any attribute access `.from_file` -, and `getattr(torch, "from_" "file")`. This covers
   `__setstate__`, which runs inside `torch.jit.load`. The same pass refuses brackets nested deeper than
   `MAX_CODE_NESTING` (torch.jit.load's recursive parser segfaults on ~3,000 nested `[` and ~10,000 `(`) and
   runs of more than `MAX_UNARY_RUN` prefix operators (`- - - x`, which crash it at ~5,000), and any expression
   nested deeper than `MAX_EXPRESSION_DEPTH` by whatever the parser recurses on - operator chains, conditional
   expressions, calls, subscripts, attributes (advisor.core.code_depth). An ExportedProgram's `models/*.json` is
   scanned for node targets `torch.ops.<ns>.<op>` naming a denied op.
2. After loading, before any example or forward call (advisor/harness/loading.py): every TorchScript method
   and function graph and every ExportedProgram graph node is checked with `denied_reason`, which also refuses
   any op, of any library, whose schema takes a `str` argument named like a file (`FILE_ARGUMENT`).

A refusal is `OpRefused` (an `ArtifactRejected`, HTTP 422 at upload; status "rejected" in a sandbox child).
The OS sandbox still has to hold without these checks; they only turn a known attack into a clear refusal.
"""

from __future__ import annotations

import re
import zipfile
import zlib
from collections.abc import Iterable

from advisor.core.artifacts import ArtifactRejected
from advisor.core.code_depth import MAX_EXPRESSION_DEPTH, expression_depth_excess

# Derived from torch 2.13's schemas (`torch._C._jit_get_all_schemas()`, every registered op, 4,374 schemas):
# (a) every op with a `str` argument whose name matches FILE_ARGUMENT (filename, path, file, dir): aten::from_file
#     (reads or, with shared=True, maps a file for writing) and aten::save (writes one) - there is no aten::_save
#     or aten::load; tests/core/test_denied_ops.py re-derives this set, so a new torch op with such an argument
#     fails it;
# (b) by reading the remaining ops that take a `str` (names, modes, reductions, messages, group names) and the
#     namespaces' names for file/process words: debugprims::load_tensor reads a tensor from a content store on
#     disk, by name; nothing else opens files or processes (profiler::* record in memory, prim::Print and
#     aten::warn write only to the child's own log; c10d / _c10d_functional / symm_mem need a process group,
#     which a model file cannot create);
# (c) file I/O ops of libraries a model may name though they are not installed here: torchvision::read_file /
#     write_file. Layer 2 also refuses, by its schema, any op of any library loaded at the time whose `str`
#     argument is named like a file (e.g. a torchaudio loader).
DENIED_OPS: dict[str, str] = {
    "aten::from_file": "reads or maps a file by its path",
    "aten::save": "writes a file by its path",
    "debugprims::load_tensor": "reads a tensor from a store on disk",
    "torchvision::read_file": "reads a file by its path",
    "torchvision::write_file": "writes a file by its path",
}
FILE_ARGUMENT = re.compile(r"file|path|dir", re.IGNORECASE)
# Real exported code nests brackets a few levels deep (a traced ResNet: 3; a chain of 1,000 inlined
# elementwise ops: see tests/core/test_denied_ops.py); torch.jit.load segfaults near 3,000 nested `[`.
MAX_CODE_NESTING = 200
MAX_UNARY_RUN = 100
MAX_CODE_BYTES = 64 * 1024**2  # all code files together, decompressed

_DENIED_NAMES = {qualified.split("::", 1)[1]: qualified for qualified in DENIED_OPS}
_NAMES = "|".join(sorted(map(re.escape, _DENIED_NAMES), key=len, reverse=True))
# what TorchScript skips between tokens: spaces, tabs, newlines inside brackets, a backslash-newline
_GAP = r"(?:[ \t\r\n\f\v]|\\\n)*"
_ATTRIBUTE = re.compile(rf"\.{_GAP}({_NAMES})(?![A-Za-z0-9_])")
_GETATTR = re.compile(r"(?<![A-Za-z0-9_])getattr(?![A-Za-z0-9_])")
_UNARY_RUN = re.compile(rf"(?:(?:[-+~]|(?<![A-Za-z0-9_])not(?![A-Za-z0-9_])){_GAP}){{{MAX_UNARY_RUN + 1}}}")
_QUOTE_OR_COMMENT = re.compile(r"[\"'#]")
_BRACKET = re.compile(r"[()\[\]{}]")
_SINGLE_END = {q: re.compile(rf"(?:[^{q}\\\n]|\\[\s\S])*{q}") for q in "\"'"}
_TRIPLE_END = {q: re.compile(rf"(?:[^{q}\\]|\\[\s\S]|{q}(?!{q}{q}))*{q}{q}{q}") for q in "\"'"}
# an ExportedProgram node target; JSON written by torch never \u-escapes a printable ASCII character
_JSON_TARGET = re.compile(rb"torch\.ops\.([A-Za-z_]\w*)\.([A-Za-z_]\w*)")
_JSON_ESCAPED_ASCII = re.compile(rb"\\u00[2-7][0-9a-fA-F]")
_JSON_CHUNK = 1 << 20


class OpRefused(ArtifactRejected):
    """A model refused for what its code would do: a denied op, or code nested deep enough to crash torch."""

    sandbox_status = "rejected"  # advisor.harness.sandbox reports this status, not a crash


def denied_reason(qualified_name: str, string_arguments: Iterable[str] = ()) -> str | None:
    """Why an op (`ns::name`, any overload) is denied, or None. `string_arguments`: its `str` arguments' names."""
    base = qualified_name.split(".", 1)[0]
    if base in DENIED_OPS:
        return DENIED_OPS[base]
    named_like_a_file = [name for name in string_arguments if FILE_ARGUMENT.search(name)]
    if named_like_a_file:
        return f"takes a file name ({', '.join(named_like_a_file)})"
    return None


def refusal(qualified_name: str, reason: str, where: str) -> OpRefused:
    return OpRefused(
        "denied_op",
        f"The model calls {qualified_name} ({reason}) in {where}: ops that touch files or the process are refused "
        "before any of the model's code runs.",
    )


# ------------------------------------------------------------------ TorchScript code, as text
def scan_torchscript_code(archive: zipfile.ZipFile, archive_name: str) -> None:
    """Refuse a TorchScript archive whose code refers to a denied op or nests too deeply (see the module doc)."""
    budget = MAX_CODE_BYTES
    for info in archive.infolist():
        if info.is_dir() or not info.filename.endswith(".py"):
            continue
        try:
            with archive.open(info) as member:
                data = member.read(budget + 1)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
            raise ArtifactRejected("truncated", f"The zip archive is damaged or truncated ({exc}).") from exc
        budget -= len(data)
        if budget < 0:
            raise ArtifactRejected(
                "metadata_too_large", f"The archive's code files decompress past {MAX_CODE_BYTES} bytes together."
            )
        scan_code_text(data.decode("latin-1"), info.filename)


def scan_code_text(text: str, where: str) -> None:
    """One TorchScript source file: raise `OpRefused` for a denied op, deep nesting or an unterminated string."""
    code, strings = _blank_strings_and_comments(text, where)
    match = _ATTRIBUTE.search(code)
    if match:
        name = match.group(1)
        raise _text_refusal(name, where, _line(text, match.start(1)))
    if _GETATTR.search(code):
        for literal, offset in strings:
            if literal in _DENIED_NAMES:
                raise _text_refusal(literal, where, _line(text, offset), via_getattr=True)
    run = _UNARY_RUN.search(code)
    if run:
        raise OpRefused(
            "nested_code",
            f"{where} line {_line(text, run.start())}: more than {MAX_UNARY_RUN} prefix operators in a row; "
            "code like this crashes torch.jit.load, so it is refused unread.",
        )
    depth = 0
    for bracket in _BRACKET.finditer(code):
        if bracket.group() in "([{":
            depth += 1
            if depth > MAX_CODE_NESTING:
                raise OpRefused(
                    "nested_code",
                    f"{where} line {_line(text, bracket.start())}: brackets nested more than {MAX_CODE_NESTING} "
                    "deep; code like this crashes torch.jit.load, so it is refused unread.",
                )
        else:
            depth = max(depth - 1, 0)
    deep = expression_depth_excess(code)
    if deep is not None:
        raise OpRefused(
            "nested_code",
            f"{where} line {_line(text, deep)}: an expression nested more than {MAX_EXPRESSION_DEPTH} deep (operators, "
            "conditionals, calls, subscripts and attributes chained, brackets included); code like this crashes "
            "torch.jit.load, so it is refused unread.",
        )


def _text_refusal(name: str, where: str, line: int, *, via_getattr: bool = False) -> OpRefused:
    qualified = _DENIED_NAMES[name]
    how = f'getattr(..., "{name}")' if via_getattr else f".{name}"
    return refusal(qualified, DENIED_OPS[qualified], f"{where} line {line} (`{how}`)")


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _blank_strings_and_comments(text: str, where: str) -> tuple[str, list[tuple[str, int]]]:
    """The code with string literals and comments replaced by spaces, and the strings' values (adjacent literals
    concatenated, as TorchScript does) with their offsets. Follows torch/csrc/jit/frontend/lexer.h: a `#` starts
    a comment unless it is a `# type:` annotation; strings use 1 or 3 quotes, a backslash escapes the next
    character, a 1-quote string may not hold a newline (torch then refuses the file: so do we)."""
    parts: list[str] = []
    strings: list[tuple[str, int]] = []
    pos = 0
    last_string_end = -1
    while True:
        found = _QUOTE_OR_COMMENT.search(text, pos)
        if found is None:
            parts.append(text[pos:])
            break
        start = found.start()
        parts.append(text[pos:start])
        char = found.group()
        if char == "#":
            if text.startswith("# type:", start):  # torch parses these: scan them as code
                parts.append("#")
                pos = start + 1
                continue
            end = text.find("\n", start)
            end = len(text) if end < 0 else end
            parts.append(" " * (end - start))
            pos = end
            continue
        if text.startswith(char * 3, start):
            closed = _TRIPLE_END[char].match(text, start + 3)
            end = closed.end() if closed else len(text)  # unterminated: the rest is string to torch's lexer too
            body = text[start + 3 : end - 3 if closed else end]
        else:
            closed = _SINGLE_END[char].match(text, start + 1)
            if closed is None:
                raise OpRefused(
                    "unreadable_code",
                    f"{where} line {_line(text, start)}: a string is not closed on its line, which TorchScript "
                    "cannot read; the file was not written by torch.jit.save.",
                )
            end = closed.end()
            body = text[start + 1 : end - 1]
        value = _unescape(body)
        between = text[last_string_end:start] if last_string_end >= 0 else None
        if strings and between is not None and re.fullmatch(_GAP, between):
            previous, offset = strings[-1]
            strings[-1] = (previous + value, offset)
        else:
            strings.append((value, start))
        last_string_end = end
        parts.append(" " * (end - start))
        pos = end
    return "".join(parts), strings


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "\n": ""}


def _unescape(body: str) -> str:
    r"""A string literal's value, escapes resolved (\xNN, \uNNNN and the one-letter ones); lenient."""

    def one(match: re.Match[str]) -> str:
        escaped = match.group(1)
        if escaped[0] in "xuU" and len(escaped) > 1:
            try:
                return chr(int(escaped[1:], 16))
            except (ValueError, OverflowError):
                return escaped
        if escaped[0] in "01234567":
            return chr(int(escaped, 8))
        return _ESCAPES.get(escaped, escaped)

    return re.sub(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{1,3}|[\s\S])", one, body)


# ------------------------------------------------------------------ ExportedProgram JSON
def scan_exported_json(window: bytes, where: str) -> None:
    """One window of an ExportedProgram's JSON: raise `OpRefused` for a node target naming a denied op, or for
    a printable ASCII character written as a \\u escape (which torch never writes; it could hide a target)."""
    for match in _JSON_TARGET.finditer(window):
        qualified = f"{match.group(1).decode()}::{match.group(2).decode()}"
        if qualified in DENIED_OPS:
            raise refusal(qualified, DENIED_OPS[qualified], f"{where} (`{match.group().decode()}`)")
    escaped = _JSON_ESCAPED_ASCII.search(window)
    if escaped:
        raise OpRefused(
            "unreadable_code",
            f"{where} writes a printable character as `{escaped.group().decode()}`, which torch.export.save never "
            "does; such escapes could hide an op, so the file is refused.",
        )
