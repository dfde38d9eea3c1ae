"""The artifact store (content-addressed uploads): the interface, the one receiving path, the local directory.

Two backends: `ArtifactStore`, a directory `<data>/artifacts/<sha[:2]>/<sha>` (the default), and
`app.object_store.S3ArtifactStore`, S3-compatible object storage, chosen by `open_store(settings)` from
`ADVISOR_ARTIFACT_STORE` (empty: the directory; `s3://bucket/prefix`: the bucket).

Every upload, whichever the backend, goes through one `IncomingFile`: each chunk is counted against the file's cap
(the whole file's, never one chunk's), hashed with sha256 and handed to the backend's `Sink`, which only keeps
bytes (never whole in memory); at commit the complete file is checked (an optional content check such as
`advisor.core.artifacts.sniff`) and only then placed under its hash, atomically. So an object under its hash is
always complete, and a refused or interrupted upload leaves nothing behind. The backends differ only in where the
bytes go (`Sink`): here, a temp file under the store's own `.incoming/` folder moved into place with `os.replace`
(atomic on one filesystem); in object storage, a multipart upload copied into place (app.object_store).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, TypeVar

from app.service_errors import ErrorCode, ServiceError

if TYPE_CHECKING:
    from app.settings import Settings

CHUNK_BYTES = 1 << 20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
Checked = TypeVar("Checked")


class UploadTooLarge(ServiceError):
    """The upload passed the size cap; the message names the cap (the answer also carries `limit_bytes`)."""

    code = ErrorCode.TOO_LARGE

    def __init__(self, limit_bytes: int, what: str = "upload") -> None:
        self.limit_bytes = limit_bytes
        self.what = what
        super().__init__(f"{what} is larger than the server's limit of {_human(limit_bytes)} (ADVISOR_MAX_UPLOAD_MB)")

    def extra(self) -> dict[str, Any]:
        return {"limit_bytes": self.limit_bytes}


@dataclass(frozen=True)
class StoredFile:
    sha256: str
    size_bytes: int
    path: Path | None  # the local store's file; None in object storage


class Sink(Protocol):
    """Where one upload's bytes go: a backend's half of an `IncomingFile`, which counts, caps and hashes them."""

    def append(self, chunk: bytes) -> None:
        """Keep `chunk` (after the ones before it)."""
        ...

    def complete(self) -> AbstractContextManager[Any]:
        """Every byte is in: the whole file, for a content check to read (a Path, or a seekable binary reader)."""
        ...

    def place(self, sha256: str) -> Path | None:
        """Make the complete file visible under its hash, atomically; the local file's path, or None."""
        ...

    def discard(self) -> None:
        """Remove what was kept unless it was placed (safe to call always, any number of times)."""
        ...


class IncomingFile:
    """A file being received, in any backend: `write` chunks (each counted against the whole file's cap and hashed
    before its `Sink` keeps it), then `commit` (check, place under the sha256) or `discard`."""

    def __init__(self, sink: Sink, *, max_bytes: int, what: str) -> None:
        self.sink = sink
        self.max_bytes = max_bytes
        self.what = what
        self.size = 0
        self._digest = hashlib.sha256()

    def write(self, chunk: bytes) -> None:
        """Append a chunk; raises UploadTooLarge as soon as the file's total passes the cap."""
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise UploadTooLarge(self.max_bytes, self.what)
        self._digest.update(chunk)
        self.sink.append(chunk)

    def commit(self, check: Callable[[Any], Checked] | None = None) -> tuple[StoredFile, Checked | None]:
        """Run `check` on the complete file (it may raise to refuse: nothing is kept), then place it under its
        sha256. `check` gets the local store's temp Path or object storage's seekable reader."""
        with self.sink.complete() as whole:
            checked = check(whole) if check is not None else None
        sha = self._digest.hexdigest()
        return StoredFile(sha256=sha, size_bytes=self.size, path=self.sink.place(sha)), checked

    def discard(self) -> None:
        """Remove the received bytes unless they were committed (safe to call always)."""
        self.sink.discard()


Incoming = IncomingFile  # what the routes and the form parser hold


class ArtifactStorage(Protocol):
    """What the server needs of an artifact store (the local directory or object storage)."""

    kind: str  # "local" | "s3"

    def describe(self) -> str: ...

    def exists(self, sha256: str) -> bool: ...

    def receive(self, *, max_bytes: int, what: str = "upload") -> IncomingFile: ...

    def save(
        self, source: BinaryIO, *, max_bytes: int, what: str = "upload", check: Callable[[Any], Checked] | None = None
    ) -> tuple[StoredFile, Checked | None]: ...

    def download_url(self, sha256: str, expires_s: float) -> str | None:
        """A URL a worker fetches the object from directly (bounded lifetime), or None: the server's own route."""
        ...

    def check_ready(self) -> None: ...

    def stored_before(self, cutoff: float) -> Iterator[str]: ...

    def remove_if_before(self, sha256: str, cutoff: float) -> bool: ...

    def discard_incomplete(self) -> int: ...


class ReceivingStore(ABC):
    """The receiving half both backends share: `receive` and `save` over the backend's `open_sink`."""

    @abstractmethod
    def open_sink(self) -> Sink:
        """Where one incoming file's bytes go: a local temp file or an object-storage upload."""

    def receive(self, *, max_bytes: int, what: str = "upload") -> IncomingFile:
        """Start receiving a file chunk by chunk (see IncomingFile)."""
        return IncomingFile(self.open_sink(), max_bytes=max_bytes, what=what)

    def save(
        self, source: BinaryIO, *, max_bytes: int, what: str = "upload", check: Callable[[Any], Checked] | None = None
    ) -> tuple[StoredFile, Checked | None]:
        """Stream `source` into the store in CHUNK_BYTES reads; (stored file, what `check` returned). `check` may
        raise to refuse."""
        incoming = self.receive(max_bytes=max_bytes, what=what)
        try:
            while chunk := source.read(CHUNK_BYTES):
                incoming.write(chunk)
            return incoming.commit(check)
        finally:
            incoming.discard()


def open_store(settings: Settings) -> ArtifactStorage:
    """The store the settings select: `ADVISOR_ARTIFACT_STORE=s3://bucket/prefix`, else the local directory."""
    location = (settings.artifact_store or "").strip()
    if not location:
        return ArtifactStore(settings.artifacts_dir)
    from app.object_store import S3ArtifactStore, S3Location, s3_client

    client = s3_client(
        endpoint_url=settings.s3_endpoint_url,
        region=settings.s3_region,
        addressing_style=settings.s3_addressing_style,
    )
    return S3ArtifactStore(S3Location.parse(location), client, incomplete_min_age_s=settings.s3_incomplete_min_age_s)


class ArtifactStore(ReceivingStore):
    """The local directory store."""

    kind = "local"

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.incoming = self.root / ".incoming"
        self.incoming.mkdir(parents=True, exist_ok=True)

    def path_for(self, sha256: str) -> Path:
        if not _SHA256.match(sha256):
            raise ValueError(f"not a sha256 hex digest: {sha256!r}")
        return self.root / sha256[:2] / sha256

    def exists(self, sha256: str) -> bool:
        return _SHA256.match(sha256) is not None and self.path_for(sha256).is_file()

    def describe(self) -> str:
        return str(self.root)

    def download_url(self, sha256: str, expires_s: float) -> None:
        """None: workers download through the server's own route (GET /api/v1/artifacts/{sha256})."""
        return None

    def check_ready(self) -> None:
        """Raises when the directory cannot be written (/readyz)."""
        if not os.access(self.incoming, os.W_OK):
            raise OSError(f"{self.incoming} is not writable")

    def open_sink(self) -> TempFileSink:
        return TempFileSink(self)

    def stored_before(self, cutoff: float) -> Iterator[str]:
        """The sha256 of every stored file last written before `cutoff` (a time.time() value)."""
        for folder in self.root.iterdir():
            if len(folder.name) != 2 or not folder.is_dir():
                continue
            for path in folder.iterdir():
                if _SHA256.match(path.name) and _mtime(path) < cutoff:
                    yield path.name

    def remove_if_before(self, sha256: str, cutoff: float) -> bool:
        """Remove the file under `sha256` if it still was last written before `cutoff` (an upload of the same
        content since then rewrote it: keep it)."""
        path = self.path_for(sha256)
        if _mtime(path) >= cutoff:
            return False
        path.unlink(missing_ok=True)
        return True

    def discard_incomplete(self) -> int:
        """Remove temp files an interrupted server left behind (called at start)."""
        removed = 0
        for leftover in self.incoming.glob("upload-*"):
            leftover.unlink(missing_ok=True)
            removed += 1
        return removed


class TempFileSink:
    """The local store's bytes: a temp file under `.incoming/`, made durable, then moved under its hash."""

    def __init__(self, store: ArtifactStore) -> None:
        fd, name = tempfile.mkstemp(dir=store.incoming, prefix="upload-")
        self.store = store
        self.path = Path(name)
        self._out = os.fdopen(fd, "wb")

    def append(self, chunk: bytes) -> None:
        self._out.write(chunk)

    @contextmanager
    def complete(self) -> Iterator[Path]:
        """The durable temp file's path (flushed, fsynced, closed)."""
        self._out.flush()
        os.fsync(self._out.fileno())
        self._out.close()
        yield self.path

    def place(self, sha256: str) -> Path:
        final = self.store.path_for(sha256)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.path, final)  # atomic; the same content under the same name replaces harmlessly
        os.utime(final)  # "stored now": the orphan sweep spares it until its artifact row is written
        return final

    def discard(self) -> None:
        if not self._out.closed:
            self._out.close()
        self.path.unlink(missing_ok=True)  # gone already once placed


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return float("inf")


def _human(size: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:g} {unit}" if unit == "bytes" else f"{size:.4g} {unit}"
        size /= 1024
    return f"{size} bytes"
