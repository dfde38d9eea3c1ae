"""What a sandbox child sends back, through pipes the parent made: its output, its progress events, its result.

The parent never opens a path a child could control (a child can replace any file in a directory it may write
with a symlink to a host file, then make the parent read it). Instead the parent creates three pipes, hands the
write ends to the child (inherited by a spawned child, passed over the zygote's socket to a forked one) and reads
the read ends itself, each with a cap: the output keeps its last `TAIL_BYTES`, a progress line longer than
`PROGRESS_LINE_BYTES` is dropped, a result beyond `RESULT_BYTES` makes the run a failure rather than a memory
hog. Depth is bounded as well as size (advisor.core.bounded_json): a progress line nested deeper than
`bounded_json.MAX_DEPTH` is a `violation` - the parent stops the child at once and reports it - and so is such a
result, which is never parsed. Torch-free.
"""

from __future__ import annotations

import contextlib
import os
import select
from collections.abc import Callable

from advisor.core.bounded_json import TooDeep, loads

TAIL_BYTES = 64 * 1024
PROGRESS_LINE_BYTES = 64 * 1024
RESULT_BYTES = 64 * 1024 * 1024
_CHUNK = 65536


class ChildStreams:
    """Three pipes: output (the child's stdout and stderr), progress (JSON lines), result (one JSON document)."""

    def __init__(self) -> None:
        self._output_r, self.output_w = os.pipe()
        self._progress_r, self.progress_w = os.pipe()
        self._result_r, self.result_w = os.pipe()
        for fd in (self._output_r, self._progress_r, self._result_r):
            os.set_blocking(fd, False)
        self._open = {self._output_r, self._progress_r, self._result_r}
        self._tail = bytearray()
        self._progress = b""
        self._result = bytearray()
        self.result_too_large = False
        self.violation: str | None = None  # what the child sent that no child may send (the parent kills it)

    @property
    def write_ends(self) -> tuple[int, int, int]:
        """(output, progress, result): what the child gets."""
        return self.output_w, self.progress_w, self.result_w

    def close_write_ends(self) -> None:
        """The parent's copies, once the child holds its own (so the child's exit is seen as end of file)."""
        for name in ("output_w", "progress_w", "result_w"):
            fd = getattr(self, name)
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, name, -1)

    def pump(self, on_progress: Callable[[dict], None] | None, timeout_s: float = 0.0) -> int:
        """Read what is there (waiting up to `timeout_s` for something), passing complete progress lines on;
        returns how many bytes it read."""
        if not self._open:
            return 0
        ready, _, _ = select.select(list(self._open), [], [], timeout_s)
        taken = 0
        for fd in ready:
            while fd in self._open:
                try:
                    chunk = os.read(fd, _CHUNK)
                except BlockingIOError:
                    break
                except OSError:
                    chunk = b""
                if not chunk:
                    self._open.discard(fd)
                    os.close(fd)
                    break
                taken += len(chunk)
                self._take(fd, chunk, on_progress)
        return taken

    def close(self) -> None:
        self.close_write_ends()
        for fd in self._open:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._open.clear()

    def output_tail(self, chars: int) -> str | None:
        text = bytes(self._tail).decode("utf-8", errors="replace")[-chars:].strip()
        return text or None

    def result(self) -> dict | None:
        """The child's result document, or None (none written, not JSON, too large, too deep: then `violation`)."""
        if self.result_too_large or not self._result:
            return None
        try:
            value = loads(bytes(self._result), "its result")
        except TooDeep as exc:
            self.violation = self.violation or f"sent a result nested deeper than {exc.limit} levels"
            return None
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def _take(self, fd: int, chunk: bytes, on_progress: Callable[[dict], None] | None) -> None:
        if fd == self._output_r:
            self._tail += chunk
            del self._tail[:-TAIL_BYTES]
        elif fd == self._result_r:
            if len(self._result) + len(chunk) > RESULT_BYTES:
                self.result_too_large = True
                self._result.clear()
            elif not self.result_too_large:
                self._result += chunk
        else:
            self._progress += chunk
            *lines, self._progress = self._progress.split(b"\n")
            if len(self._progress) > PROGRESS_LINE_BYTES:
                self._progress = b""  # an endless line: dropped, not buffered
            for line in lines:
                if self.violation is None and len(line) <= PROGRESS_LINE_BYTES:
                    self._take_progress(line, on_progress)

    def _take_progress(self, line: bytes, on_progress: Callable[[dict], None] | None) -> None:
        try:
            event = loads(line, "a progress line")
        except TooDeep as exc:
            self.violation = f"sent a progress line nested deeper than {exc.limit} levels"
            return
        except ValueError:
            return
        if on_progress is not None and isinstance(event, dict):
            on_progress(event)


def memfd_with(data: bytes, name: str) -> int:
    """A close-on-exec memory file holding `data`, positioned at its start: how a spec reaches a child."""
    fd = os.memfd_create(name, 0)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
