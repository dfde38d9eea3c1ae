"""The artifact store (content-addressed uploads): the interface, the local directory and the factory.

Two implementations of `ArtifactStorage`: `ArtifactStore`, a directory `<data>/artifacts/<sha[:2]>/<sha>` (the
default), and `app.object_store.S3ArtifactStore`, S3-compatible object storage, chosen by `open_store(settings)` from
`ADVISOR_ARTIFACT_STORE` (empty: the directory; `s3://bucket/prefix`: the bucket). Below, the local directory:

An upload is written chunk by chunk into a temp file under the store's own `.incoming/` folder while
its sha256 and size are computed (never whole in memory), checked (size cap, then an optional content
check such as `advisor.core.artifacts.sniff`), and only then moved into place with `os.replace`, which is
atomic on one filesystem. So a file under its hash is always complete, and a refused or interrupted
upload leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, TypeVar

if TYPE_CHECKING:
    from app.settings import Settings

CHUNK_BYTES = 1 << 20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
Checked = TypeVar("Checked")


class UploadTooLarge(Exception):
    """The upload passed the size cap; the message names the cap."""

    def __init__(self, limit_bytes: int, what: str = "upload") -> None:
        self.limit_bytes = limit_bytes
        self.what = what
        super().__init__(f"{what} is larger than the server's limit of {_human(limit_bytes)} (ADVISOR_MAX_UPLOAD_MB)")


@dataclass(frozen=True)
class StoredFile:
    sha256: str
    size_bytes: int
    path: Path | None  # the local store's file; None in object storage


class Incoming(Protocol):
    """A file being received: `write` chunks (hashed, counted against the cap), then `commit` or `discard`."""

    size: int

    def write(self, chunk: bytes) -> None: ...

    def commit(self, check: Callable[[Any], Checked] | None = None) -> tuple[StoredFile, Checked | None]: ...

    def discard(self) -> None: ...


class ArtifactStorage(Protocol):
    """What the server needs of an artifact store (the local directory or object storage)."""

    kind: str  # "local" | "s3"

    def describe(self) -> str: ...

    def exists(self, sha256: str) -> bool: ...

    def receive(self, *, max_bytes: int, what: str = "upload") -> Incoming: ...

    def download_url(self, sha256: str, expires_s: float) -> str | None:
        """A URL a worker fetches the object from directly (bounded lifetime), or None: the server's own route."""
        ...

    def check_ready(self) -> None: ...

    def stored_before(self, cutoff: float) -> Iterator[str]: ...

    def remove_if_before(self, sha256: str, cutoff: float) -> bool: ...

    def discard_incomplete(self) -> int: ...


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


class ArtifactStore:
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

    def receive(self, *, max_bytes: int, what: str = "upload") -> IncomingFile:
        """Start receiving a file chunk by chunk (see IncomingFile)."""
        return IncomingFile(self, max_bytes=max_bytes, what=what)

    def save(
        self,
        source: BinaryIO,
        *,
        max_bytes: int,
        what: str = "upload",
        check: Callable[[Path], Checked] | None = None,
    ) -> tuple[StoredFile, Checked | None]:
        """Stream `source` into the store; (stored file, what `check` returned). `check` may raise to refuse."""
        incoming = self.receive(max_bytes=max_bytes, what=what)
        try:
            while chunk := source.read(CHUNK_BYTES):
                incoming.write(chunk)
            return incoming.commit(check)
        finally:
            incoming.discard()

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


class IncomingFile:
    """A file being received: written to `.incoming/` while hashed and counted, then committed or discarded."""

    def __init__(self, store: ArtifactStore, *, max_bytes: int, what: str) -> None:
        fd, name = tempfile.mkstemp(dir=store.incoming, prefix="upload-")
        self.store = store
        self.path = Path(name)
        self.max_bytes = max_bytes
        self.what = what
        self.size = 0
        self._digest = hashlib.sha256()
        self._out = os.fdopen(fd, "wb")

    def write(self, chunk: bytes) -> None:
        """Append a chunk; raises UploadTooLarge as soon as the cap is passed."""
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise UploadTooLarge(self.max_bytes, self.what)
        self._digest.update(chunk)
        self._out.write(chunk)

    def commit(self, check: Callable[[Path], Checked] | None = None) -> tuple[StoredFile, Checked | None]:
        """Make the file durable, run `check` on it (it may raise to refuse), move it under its sha256."""
        self._out.flush()
        os.fsync(self._out.fileno())
        self._out.close()
        checked = check(self.path) if check is not None else None
        sha = self._digest.hexdigest()
        final = self.store.path_for(sha)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.path, final)  # atomic; the same content under the same name replaces harmlessly
        os.utime(final)  # "stored now": the orphan sweep spares it until its artifact row is written
        return StoredFile(sha256=sha, size_bytes=self.size, path=final), checked

    def discard(self) -> None:
        """Remove the temp file unless it was committed (safe to call always)."""
        if not self._out.closed:
            self._out.close()
        self.path.unlink(missing_ok=True)


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
