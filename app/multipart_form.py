"""Receive a multipart/form-data upload straight into the artifact store.

Starlette's form parser spools every file part to a temp file before the handler runs, and our store
would then copy it a second time. Here the multipart stream is parsed as it arrives: file parts go
into `IncomingFile`s (hashed, counted against their cap, never whole in memory) in 1 MiB writes done
off the event loop; small text fields are kept in memory, each capped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from python_multipart import MultipartParser
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import parse_options_header
from starlette.requests import ClientDisconnect

from app.storage import ArtifactStorage, Incoming

WRITE_BYTES = 1 << 20
MAX_FIELD_BYTES = 1 << 20  # each text field; over it: 422 naming the field
# The API's form has 9 fields (model, inputs, calibration, context, model_name, tag, backends, force,
# source_report); more parts than this are refused with a 422 that says so, before any further part is read (a cap
# on per-part bookkeeping).
MAX_PARTS = 16


@dataclass
class FileLimit:
    max_bytes: int
    what: str  # "the model file": used in the 413 message


@dataclass
class ReceivedForm:
    fields: dict[str, str] = field(default_factory=dict)
    files: dict[str, Incoming] = field(default_factory=dict)
    filenames: dict[str, str] = field(default_factory=dict)

    def discard(self) -> None:
        """Remove every received file that was not committed to the store."""
        for incoming in self.files.values():
            incoming.discard()


class _Part:
    def __init__(self) -> None:
        self.header_name = b""
        self.header_value = b""
        self.disposition = b""
        self.name = ""
        self.filename: str | None = None
        self.data = bytearray()
        self.incoming: Incoming | None = None


class _FormReader:
    """The multipart parser's callbacks: each part's headers and data, routed into `form` as they arrive.

    File data is queued in `ready` in WRITE_BYTES batches for the caller to write off the event loop."""

    def __init__(self, store: ArtifactStorage, limits: dict[str, FileLimit], max_parts: int) -> None:
        self.store = store
        self.limits = limits
        self.max_parts = max_parts
        self.form = ReceivedForm()
        self.parts: list[_Part] = []
        self.ready: list[tuple[Incoming, bytes]] = []

    def callbacks(self) -> dict[str, object]:
        return {
            "on_part_begin": self.on_part_begin,
            "on_header_field": self.on_header_field,
            "on_header_value": self.on_header_value,
            "on_header_end": self.on_header_end,
            "on_headers_finished": self.on_headers_finished,
            "on_part_data": self.on_part_data,
            "on_part_end": self.on_part_end,
        }

    def take_ready(self) -> list[tuple[Incoming, bytes]]:
        batch = self.ready[:]
        self.ready.clear()
        return batch

    def on_part_begin(self) -> None:
        if len(self.parts) >= self.max_parts:
            hint = (
                "; send only the fields model, inputs, calibration, context, model_name, tag, backends, force and "
                "source_report (the deployment context as one `context` JSON field)"
                if self.max_parts == MAX_PARTS
                else ""
            )
            raise _invalid("request", f"the form has more than {self.max_parts} parts{hint}")
        self.parts.append(_Part())

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self.parts[-1].header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self.parts[-1].header_value += data[start:end]

    def on_header_end(self) -> None:
        part = self.parts[-1]
        if part.header_name.lower() == b"content-disposition":
            part.disposition = part.header_value
        part.header_name, part.header_value = b"", b""

    def on_headers_finished(self) -> None:
        part = self.parts[-1]
        _, disposition = parse_options_header(part.disposition)
        part.name = disposition.get(b"name", b"").decode("utf-8", "replace")
        if b"filename" in disposition:
            part.filename = disposition[b"filename"].decode("utf-8", "replace")
            limit = self.limits.get(part.name)
            if limit is None:
                raise _invalid(part.name or "request", f"unexpected file field; send only {', '.join(self.limits)}")
            if part.name in self.form.files:
                raise _invalid(part.name, "sent twice")
            part.incoming = self.store.receive(max_bytes=limit.max_bytes, what=limit.what)
            self.form.files[part.name] = part.incoming
            self.form.filenames[part.name] = part.filename

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        part = self.parts[-1]
        part.data += data[start:end]
        if part.incoming is None and len(part.data) > MAX_FIELD_BYTES:
            raise _invalid(part.name, f"longer than {MAX_FIELD_BYTES // 1024} KiB")
        if part.incoming is not None and len(part.data) >= WRITE_BYTES:
            self.ready.append((part.incoming, bytes(part.data)))
            part.data.clear()

    def on_part_end(self) -> None:
        part = self.parts[-1]
        if part.incoming is not None:
            self.ready.append((part.incoming, bytes(part.data)))
        else:
            self.form.fields[part.name] = part.data.decode("utf-8", "replace")
        part.data = bytearray()


async def receive_form(
    request: Request, store: ArtifactStorage, limits: dict[str, FileLimit], *, max_parts: int = MAX_PARTS
) -> ReceivedForm:
    """Parse the request body; file parts must be named in `limits`. The caller discards the form when done.

    `max_parts` is the API's cap unless a caller's own form needs more (the dashboard's no-script upload form
    sends one part per context field)."""
    content_type, options = parse_options_header(request.headers.get("content-type", ""))
    if content_type != b"multipart/form-data" or b"boundary" not in options:
        raise _invalid("model", "no model file: send multipart/form-data with a `model` file and a `context` field")
    reader = _FormReader(store, limits, max_parts)
    parser = MultipartParser(options[b"boundary"], reader.callbacks())
    try:
        async for chunk in request.stream():
            parser.write(chunk)
            if reader.ready:
                await run_in_threadpool(_write_all, reader.take_ready())
        parser.finalize()
        await run_in_threadpool(_write_all, reader.take_ready())
    except FormParserError as exc:
        reader.form.discard()
        raise _invalid("request", f"malformed multipart body: {exc}") from None
    except ClientDisconnect:
        reader.form.discard()
        raise HTTPException(400, detail="the upload was interrupted: the client disconnected") from None
    except BaseException:
        reader.form.discard()
        raise
    return reader.form


def _write_all(batch: list[tuple[Incoming, bytes]]) -> None:
    for incoming, data in batch:
        if data:
            incoming.write(data)


def _invalid(field_name: str, message: str) -> HTTPException:
    return HTTPException(422, detail=[{"field": field_name, "message": message}])
