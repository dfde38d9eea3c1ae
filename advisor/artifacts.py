"""Tell an uploaded model file's format from its zip container alone, without deserializing anything.

Torch-free on purpose: the API server sniffs uploads with it. It reads the zip's end-of-central-directory
record itself before handing the file to `zipfile`, so an archive that declares millions of entries is
rejected before its directory is parsed, and it only ever decompresses one member (the ExportedProgram's
`models/*.json`), as a bounded stream, to find custom-op names. Nothing is unpickled.
"""

from __future__ import annotations

import os
import re
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO

DEFAULT_MAX_ENTRIES = 20_000
DEFAULT_MAX_UNCOMPRESSED_BYTES = 16 * 1024**3  # 16 GiB, summed over all entries as declared
BUILTIN_OP_NAMESPACES = frozenset({"aten", "prims", "higher_order"})

_EOCD_SIGNATURE = b"PK\x05\x06"
_ZIP64_LOCATOR_SIGNATURE = b"PK\x06\x07"
_ZIP64_EOCD_SIGNATURE = b"PK\x06\x06"
_LOCAL_HEADER_SIGNATURE = b"PK\x03\x04"
_EOCD_SIZE = 22
_MAX_COMMENT = 0xFFFF
_OP_TARGET = re.compile(rb'"target":\s*"torch\.ops\.([A-Za-z_][\w]*)\.([A-Za-z_][\w]*)\.([A-Za-z_][\w]*)"')
_SCAN_CHUNK = 1 << 20


class ArtifactRejected(ValueError):
    """The file is not a model we accept. `str()` is the user-facing message, `.code` a short slug."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class ArtifactInfo:
    format: str  # "exported_program" | "torchscript"
    size_bytes: int
    entries: int
    archive_name: str  # the top-level folder inside the zip ("model" for model/models/model.json)
    custom_op_names: list[str] = field(default_factory=list)  # "npu.npu_rms_norm.default", sorted


def sniff(
    source: str | os.PathLike[str] | BinaryIO,
    *,
    max_entries: int = DEFAULT_MAX_ENTRIES,
    max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
) -> ArtifactInfo:
    """Classify a model file (path or seekable binary file object) or raise `ArtifactRejected`."""
    if isinstance(source, (str, os.PathLike)):
        with open(Path(source), "rb") as fh:
            return _sniff_stream(fh, max_entries, max_uncompressed_bytes)
    return _sniff_stream(source, max_entries, max_uncompressed_bytes)


def _sniff_stream(fh: BinaryIO, max_entries: int, max_uncompressed_bytes: int) -> ArtifactInfo:
    size = fh.seek(0, os.SEEK_END)
    if size == 0:
        raise ArtifactRejected("empty", "The file is empty (0 bytes).")
    fh.seek(0)
    head = fh.read(4)
    if not head.startswith(b"PK"):
        if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
            raise ArtifactRejected("pickled_checkpoint", _pickled_checkpoint_message())
        raise ArtifactRejected(
            "not_a_zip", "This is not a model archive: TorchScript and ExportedProgram files are zip archives."
        )
    entry_count, directory_end = _read_end_of_directory(fh, size)
    if entry_count > max_entries:
        raise ArtifactRejected(
            "zip_bomb", f"The archive declares {entry_count} entries, over the limit of {max_entries}."
        )
    fh.seek(0)
    try:
        archive = zipfile.ZipFile(fh)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ArtifactRejected("truncated", f"The zip archive is damaged or truncated ({exc}).") from exc
    with archive:
        infos = archive.infolist()
        _check_declared_sizes(infos, size, directory_end, max_uncompressed_bytes)
        names = [info.filename for info in infos]
        _check_entry_names(names)
        fmt, archive_name = _classify(names)
        custom_ops = []
        if fmt == "exported_program":
            custom_ops = _custom_op_names(archive, archive_name, max_uncompressed_bytes)
    return ArtifactInfo(fmt, size, len(infos), archive_name, custom_ops)


def _pickled_checkpoint_message() -> str:
    return (
        "This is a pickled checkpoint (torch.save), not a TorchScript/ExportedProgram file; export it with "
        "torch.export.save(torch.export.export(model, example_inputs), 'model.pt2') or save it with "
        "torch.jit.save(torch.jit.trace(model, example_inputs), 'model.pt'). Pickles are never loaded here."
    )


def _read_end_of_directory(fh: BinaryIO, size: int) -> tuple[int, int]:
    """(declared entry count, offset where the central directory ends) from the EOCD / ZIP64 records."""
    tail_len = min(size, _EOCD_SIZE + _MAX_COMMENT)
    fh.seek(size - tail_len)
    tail = fh.read(tail_len)
    pos = tail.rfind(_EOCD_SIGNATURE)
    if pos < 0 or pos + _EOCD_SIZE > len(tail):
        raise ArtifactRejected(
            "truncated", "The zip archive is truncated: its end-of-directory record is missing (incomplete upload?)."
        )
    (_, _, _, _, entries, directory_size, directory_offset, _) = struct.unpack("<4sHHHHIIH", tail[pos : pos + 22])
    eocd_offset = size - tail_len + pos
    if 0xFFFF in (entries,) or 0xFFFFFFFF in (directory_size, directory_offset):
        entries, directory_size, directory_offset = _read_zip64_end_of_directory(fh, eocd_offset)
    directory_end = directory_offset + directory_size
    if directory_end > size:
        raise ArtifactRejected("truncated", "The zip archive is truncated: its directory points past the file end.")
    return entries, directory_end


def _read_zip64_end_of_directory(fh: BinaryIO, eocd_offset: int) -> tuple[int, int, int]:
    if eocd_offset < 20:
        raise ArtifactRejected("truncated", "The zip archive is truncated: its ZIP64 directory locator is missing.")
    fh.seek(eocd_offset - 20)
    locator = fh.read(20)
    if not locator.startswith(_ZIP64_LOCATOR_SIGNATURE):
        raise ArtifactRejected("truncated", "The zip archive is truncated: its ZIP64 directory locator is missing.")
    (record_offset,) = struct.unpack("<Q", locator[8:16])
    fh.seek(record_offset)
    record = fh.read(56)
    if len(record) < 56 or not record.startswith(_ZIP64_EOCD_SIGNATURE):
        raise ArtifactRejected("truncated", "The zip archive is truncated: its ZIP64 directory record is missing.")
    entries, directory_size, directory_offset = struct.unpack("<QQQ", record[32:56])
    return entries, directory_size, directory_offset


def _check_declared_sizes(
    infos: list[zipfile.ZipInfo], size: int, directory_end: int, max_uncompressed_bytes: int
) -> None:
    total = sum(info.file_size for info in infos)
    if total > max_uncompressed_bytes:
        raise ArtifactRejected(
            "zip_bomb",
            f"The archive declares {total} uncompressed bytes, over the limit of {max_uncompressed_bytes}.",
        )
    for info in infos:
        if info.header_offset + info.compress_size > size:
            raise ArtifactRejected(
                "truncated", f"The zip archive is truncated: entry {info.filename!r} extends past the file end."
            )


def _check_entry_names(names: list[str]) -> None:
    for name in names:
        parts = name.replace("\\", "/").split("/")
        if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name) or ".." in parts or "\x00" in name:
            raise ArtifactRejected("unsafe_path", f"The archive contains an unsafe entry name {name!r}.")


def _classify(names: list[str]) -> tuple[str, str]:
    """("exported_program" | "torchscript", archive_name) or raise with the specific reason."""
    by_suffix = {PurePosixPath(name).parts[1:]: PurePosixPath(name).parts[0] for name in names if "/" in name}
    for parts, top in by_suffix.items():
        if parts[:1] == ("models",) and parts[-1].endswith(".json") and len(parts) == 2:
            return "exported_program", top
        if parts == ("serialized_exported_program.json",):
            return "exported_program", top
    tops_with_pickle = {top for parts, top in by_suffix.items() if parts == ("data.pkl",)}
    tops_with_code = {top for parts, top in by_suffix.items() if parts[:1] == ("code",)}
    if tops_with_pickle & tops_with_code:
        return "torchscript", sorted(tops_with_pickle & tops_with_code)[0]
    if tops_with_pickle:
        raise ArtifactRejected("pickled_checkpoint", _pickled_checkpoint_message())
    raise ArtifactRejected(
        "unknown_archive",
        "This zip archive is neither a TorchScript file (data.pkl + code/) nor an ExportedProgram "
        "(models/*.json from torch.export.save).",
    )


def _custom_op_names(archive: zipfile.ZipFile, archive_name: str, max_uncompressed_bytes: int) -> list[str]:
    """Op targets outside aten/prims named in the ExportedProgram's JSON, scanned as a bounded stream."""
    found: set[str] = set()
    for info in archive.infolist():
        parts = PurePosixPath(info.filename).parts
        is_model_json = parts[:2] == (archive_name, "models") and info.filename.endswith(".json")
        if not (is_model_json or parts[1:] == ("serialized_exported_program.json",)):
            continue
        found |= _scan_op_targets(archive, info, max_uncompressed_bytes)
    return sorted(found)


def _scan_op_targets(archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> set[str]:
    found: set[str] = set()
    carry = b""
    read = 0
    with archive.open(info) as member:
        while chunk := member.read(_SCAN_CHUNK):
            read += len(chunk)
            if read > limit:
                raise ArtifactRejected("zip_bomb", f"Entry {info.filename!r} decompresses past {limit} bytes.")
            window = carry + chunk
            for match in _OP_TARGET.finditer(window):
                namespace, name, overload = (part.decode() for part in match.groups())
                if namespace not in BUILTIN_OP_NAMESPACES:
                    found.add(f"{namespace}.{name}.{overload}")
            carry = window[-512:]
    return found
