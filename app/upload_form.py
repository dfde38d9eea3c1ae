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


async def receive_form(
    request: Request, store: ArtifactStorage, limits: dict[str, FileLimit], *, max_parts: int = MAX_PARTS
) -> ReceivedForm:
    """Parse the request body; file parts must be named in `limits`. The caller discards the form when done.

    `max_parts` is the API's cap unless a caller's own form needs more (the dashboard's no-script upload form
    sends one part per context field)."""
    content_type, options = parse_options_header(request.headers.get("content-type", ""))
    if content_type != b"multipart/form-data" or b"boundary" not in options:
        raise _invalid("model", "no model file: send multipart/form-data with a `model` file and a `context` field")
    form = ReceivedForm()
    parts: list[_Part] = []
    ready: list[tuple[Incoming, bytes]] = []

    def on_part_begin() -> None:
        if len(parts) >= max_parts:
            hint = (
                "; send only the fields model, inputs, calibration, context, model_name, tag, backends, force and "
                "source_report (the deployment context as one `context` JSON field)"
                if max_parts == MAX_PARTS
                else ""
            )
            raise _invalid("request", f"the form has more than {max_parts} parts{hint}")
        parts.append(_Part())

    def on_header_field(data: bytes, start: int, end: int) -> None:
        parts[-1].header_name += data[start:end]

    def on_header_value(data: bytes, start: int, end: int) -> None:
        parts[-1].header_value += data[start:end]

    def on_header_end() -> None:
        part = parts[-1]
        if part.header_name.lower() == b"content-disposition":
            part.disposition = part.header_value
        part.header_name, part.header_value = b"", b""

    def on_headers_finished() -> None:
        part = parts[-1]
        _, disposition = parse_options_header(part.disposition)
        part.name = disposition.get(b"name", b"").decode("utf-8", "replace")
        if b"filename" in disposition:
            part.filename = disposition[b"filename"].decode("utf-8", "replace")
            limit = limits.get(part.name)
            if limit is None:
                raise _invalid(part.name or "request", f"unexpected file field; send only {', '.join(limits)}")
            if part.name in form.files:
                raise _invalid(part.name, "sent twice")
            part.incoming = store.receive(max_bytes=limit.max_bytes, what=limit.what)
            form.files[part.name] = part.incoming
            form.filenames[part.name] = part.filename

    def on_part_data(data: bytes, start: int, end: int) -> None:
        part = parts[-1]
        part.data += data[start:end]
        if part.incoming is None and len(part.data) > MAX_FIELD_BYTES:
            raise _invalid(part.name, f"longer than {MAX_FIELD_BYTES // 1024} KiB")
        if part.incoming is not None and len(part.data) >= WRITE_BYTES:
            ready.append((part.incoming, bytes(part.data)))
            part.data.clear()

    def on_part_end() -> None:
        part = parts[-1]
        if part.incoming is not None:
            ready.append((part.incoming, bytes(part.data)))
        else:
            form.fields[part.name] = part.data.decode("utf-8", "replace")
        part.data = bytearray()

    parser = MultipartParser(
        options[b"boundary"],
        {
            "on_part_begin": on_part_begin,
            "on_header_field": on_header_field,
            "on_header_value": on_header_value,
            "on_header_end": on_header_end,
            "on_headers_finished": on_headers_finished,
            "on_part_data": on_part_data,
            "on_part_end": on_part_end,
        },
    )
    try:
        async for chunk in request.stream():
            parser.write(chunk)
            if ready:
                batch = ready[:]
                ready.clear()
                await run_in_threadpool(_write_all, batch)
        parser.finalize()
        await run_in_threadpool(_write_all, ready)
    except FormParserError as exc:
        form.discard()
        raise _invalid("request", f"malformed multipart body: {exc}") from None
    except ClientDisconnect:
        form.discard()
        raise HTTPException(400, detail="the upload was interrupted: the client disconnected") from None
    except BaseException:
        form.discard()
        raise
    return form


def _write_all(batch: list[tuple[Incoming, bytes]]) -> None:
    for incoming, data in batch:
        if data:
            incoming.write(data)


def _invalid(field_name: str, message: str) -> HTTPException:
    return HTTPException(422, detail=[{"field": field_name, "message": message}])
