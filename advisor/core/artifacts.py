"""Tell an uploaded model file's format from its zip container alone, without deserializing anything.

Torch-free on purpose: the API server sniffs uploads with it, so everything here is cheap and bounded
whatever the upload claims about itself:

- It reads the zip's end-of-central-directory record (and its ZIP64 form) itself, then walks the central
  directory records itself, in chunks, counting them: an archive that declares, or merely holds, more than
  `max_entries` entries, or whose declared entry count differs from the records actually there, is rejected
  before `zipfile` parses its directory (which `zipfile` reads whole, at most `MAX_DIRECTORY_BYTES`).
- From the directory it refuses, before decompressing anything: more than `max_uncompressed_bytes` declared
  in all; an entry that expands more than `MAX_COMPRESSION_RATIO`-fold (torch writes its entries stored, so
  real models have a ratio of about 1); a JSON / pickle / code / version entry (anything that is not tensor
  payload) declaring more than `MAX_METADATA_ENTRY_BYTES`; compression methods torch cannot read; encryption.
- It only ever decompresses the ExportedProgram's `models/*.json` (no weights), as a bounded stream of at
  most `MAX_METADATA_ENTRY_BYTES` in all, to find custom-op names, and a TorchScript archive's code files: both
  are refused when they call an op that touches files or the process, or nest too deeply (advisor/core/
  denied_ops.py). Nothing is unpickled.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

DEFAULT_MAX_ENTRIES = 20_000
DEFAULT_MAX_UNCOMPRESSED_BYTES = 16 * 1024**3  # 16 GiB, summed over all entries as declared
# The central directory `zipfile` reads into memory whole. Torch's entries take ~100 bytes each there, so
# 20,000 legitimate entries need ~2 MB; past this it can only be padding (64 KiB names, extras, comments).
MAX_DIRECTORY_BYTES = 64 * 1024**2
# A JSON / pickle / TorchScript-code / version entry: a model's models/model.json or data.pkl is KBs to a
# few MB. Also the most the op-target scan decompresses, over all the JSON it reads.
MAX_METADATA_ENTRY_BYTES = 64 * 1024**2
# torch.export.save and torch.jit.save store tensor payload uncompressed (ratio 1) and deflate at most small
# code files; an entry expanding more than this, once past COMPRESSION_RATIO_FLOOR_BYTES, is a bomb.
MAX_COMPRESSION_RATIO = 100
COMPRESSION_RATIO_FLOOR_BYTES = 1024**2  # entries up to 1 MiB uncompressed are never refused for their ratio
BUILTIN_OP_NAMESPACES = frozenset({"aten", "prims", "higher_order"})

_EOCD_SIGNATURE = b"PK\x05\x06"
_ZIP64_LOCATOR_SIGNATURE = b"PK\x06\x07"
_ZIP64_EOCD_SIGNATURE = b"PK\x06\x06"
_CENTRAL_HEADER_SIGNATURE = b"PK\x01\x02"
_LOCAL_HEADER_SIGNATURE = b"PK\x03\x04"
_EOCD_SIZE = 22
_ZIP64_LOCATOR_SIZE = 20
_ZIP64_EOCD_SIZE = 56
_CENTRAL_HEADER_SIZE = 46  # fixed part; then name, extra field and comment, their lengths at offset 28
_MAX_COMMENT = 0xFFFF
_DIRECTORY_CHUNK = 256 * 1024
_OP_TARGET = re.compile(rb'"target":\s*"torch\.ops\.([A-Za-z_][\w]*)\.([A-Za-z_][\w]*)\.([A-Za-z_][\w]*)"')
_SCAN_CHUNK = 1 << 20
_READABLE_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}  # all torch's reader knows
# Not tensor payload: what torch.export.save / torch.jit.save write besides storages and weights.
_METADATA_SUFFIXES = (".json", ".pkl", ".debug_pkl", ".py")
_METADATA_FOLDERS = frozenset({"code", "extra", ".data"})
_METADATA_NAMES = frozenset(
    {
        "version",
        "byteorder",
        "archive_format",
        "archive_version",
        "serialization_id",
        ".format_version",
        ".storage_alignment",
    }
)


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


@dataclass(frozen=True)
class _Directory:
    declared_entries: int
    offset: int
    size: int


def sniff(
    source: str | os.PathLike[str] | BinaryIO,
    *,
    max_entries: int = DEFAULT_MAX_ENTRIES,
    max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
) -> ArtifactInfo:
    """Classify a model file (path or seekable binary file object) or raise `ArtifactRejected`."""
    with opened(source) as fh:
        return _sniff_stream(fh, max_entries, max_uncompressed_bytes)


@contextlib.contextmanager
def opened(source: str | os.PathLike[str] | BinaryIO) -> Iterator[BinaryIO]:
    """A stored file as a binary stream: a path opened (and closed after), a file object (object storage's reader)
    as it is - the two forms an artifact store hands its checks."""
    if isinstance(source, (str, os.PathLike)):
        with open(Path(source), "rb") as fh:
            yield fh
    else:
        yield source


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
    directory = _read_end_of_directory(fh, size)
    if directory.declared_entries > max_entries:
        raise ArtifactRejected(
            "zip_bomb", f"The archive declares {directory.declared_entries} entries, over the limit of {max_entries}."
        )
    if directory.size > MAX_DIRECTORY_BYTES:
        raise ArtifactRejected(
            "zip_bomb",
            f"The archive's central directory is {directory.size} bytes, over the limit of {MAX_DIRECTORY_BYTES}.",
        )
    entry_count = _count_directory_records(fh, directory, max_entries)
    if entry_count != directory.declared_entries:
        raise ArtifactRejected(
            "forged_directory",
            f"The archive's end record declares {directory.declared_entries} entries but its central directory "
            f"holds {entry_count}.",
        )
    fh.seek(0)
    try:
        archive = zipfile.ZipFile(fh)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ArtifactRejected("truncated", f"The zip archive is damaged or truncated ({exc}).") from exc
    with archive:
        infos = archive.infolist()
        if len(infos) != entry_count:  # zipfile read another directory than the one walked: never accept that
            raise ArtifactRejected(
                "forged_directory", f"The archive's central directory holds {entry_count} entries, not {len(infos)}."
            )
        _check_declared_sizes(infos, size, max_uncompressed_bytes)
        names = [info.filename for info in infos]
        _check_entry_names(names)
        _check_no_native_code(names)
        fmt, archive_name = _classify(names)
        custom_ops = []
        if fmt == "exported_program":
            custom_ops = _custom_op_names(archive, archive_name, min(max_uncompressed_bytes, MAX_METADATA_ENTRY_BYTES))
        else:  # refused at the door: code that touches files or the process, or nests deep enough to crash torch
            from advisor.core.denied_ops import scan_torchscript_code

            scan_torchscript_code(archive, archive_name)
    return ArtifactInfo(fmt, size, len(infos), archive_name, custom_ops)


def _pickled_checkpoint_message() -> str:
    return (
        "This is a pickled checkpoint (torch.save), not a TorchScript/ExportedProgram file; export it with "
        "torch.export.save(torch.export.export(model, example_inputs), 'model.pt2') or save it with "
        "torch.jit.save(torch.jit.trace(model, example_inputs), 'model.pt'). Pickles are never loaded here."
    )


def _read_end_of_directory(fh: BinaryIO, size: int) -> _Directory:
    """The directory as the EOCD / ZIP64 records declare it, located exactly where `zipfile` will look for it.

    Like `zipfile`, a ZIP64 locator directly before the EOCD record takes precedence over the EOCD's own
    fields, and the ZIP64 record must sit directly before the locator; the directory must end where those
    records begin (`zipfile` would otherwise shift every offset, and read a directory other than the declared).
    """
    tail_len = min(size, _EOCD_SIZE + _MAX_COMMENT)
    fh.seek(size - tail_len)
    tail = fh.read(tail_len)
    pos = tail.rfind(_EOCD_SIGNATURE)
    if pos < 0 or pos + _EOCD_SIZE > len(tail):
        raise ArtifactRejected(
            "truncated", "The zip archive is truncated: its end-of-directory record is missing (incomplete upload?)."
        )
    (_, _, _, _, entries, directory_size, directory_offset, _) = struct.unpack(
        "<4sHHHHIIH", tail[pos : pos + _EOCD_SIZE]
    )
    eocd_offset = size - tail_len + pos
    records_start = eocd_offset
    locator = b""
    if eocd_offset >= _ZIP64_LOCATOR_SIZE:
        fh.seek(eocd_offset - _ZIP64_LOCATOR_SIZE)
        locator = fh.read(_ZIP64_LOCATOR_SIZE)
    if locator.startswith(_ZIP64_LOCATOR_SIGNATURE):
        entries, directory_size, directory_offset, records_start = _read_zip64_end_of_directory(
            fh, eocd_offset, locator
        )
    elif entries == 0xFFFF or 0xFFFFFFFF in (directory_size, directory_offset):
        raise ArtifactRejected("truncated", "The zip archive is truncated: its ZIP64 directory locator is missing.")
    directory_end = directory_offset + directory_size
    if directory_end > size:
        raise ArtifactRejected("truncated", "The zip archive is truncated: its directory points past the file end.")
    if directory_end != records_start:
        raise ArtifactRejected(
            "forged_directory",
            f"The archive's end record places its central directory at bytes {directory_offset}-{directory_end}, "
            f"but the directory must end where the end records begin, at byte {records_start}.",
        )
    return _Directory(entries, directory_offset, directory_size)


def _read_zip64_end_of_directory(fh: BinaryIO, eocd_offset: int, locator: bytes) -> tuple[int, int, int, int]:
    """(declared entries, directory size, directory offset, record offset) from the ZIP64 records."""
    (record_offset,) = struct.unpack("<Q", locator[8:16])
    expected_offset = eocd_offset - _ZIP64_LOCATOR_SIZE - _ZIP64_EOCD_SIZE
    if record_offset != expected_offset:
        raise ArtifactRejected(
            "forged_directory",
            f"The archive's ZIP64 locator points to byte {record_offset}, not to the ZIP64 record before it "
            f"(byte {expected_offset}).",
        )
    fh.seek(record_offset)
    record = fh.read(_ZIP64_EOCD_SIZE)
    if len(record) < _ZIP64_EOCD_SIZE or not record.startswith(_ZIP64_EOCD_SIGNATURE):
        raise ArtifactRejected("truncated", "The zip archive is truncated: its ZIP64 directory record is missing.")
    entries, directory_size, directory_offset = struct.unpack("<QQQ", record[32:56])
    return entries, directory_size, directory_offset, record_offset


def _count_directory_records(fh: BinaryIO, directory: _Directory, max_entries: int) -> int:
    """The number of central directory records really there, read in chunks; stops once past `max_entries`."""
    fh.seek(directory.offset)
    unread = directory.size
    buffer = b""
    pos = 0

    def have(n: int) -> bool:
        nonlocal buffer, pos, unread
        while len(buffer) - pos < n and unread:
            chunk = fh.read(min(_DIRECTORY_CHUNK, unread))
            if not chunk:
                raise ArtifactRejected("truncated", "The zip archive is truncated: its directory ends early.")
            buffer = buffer[pos:] + chunk
            pos = 0
            unread -= len(chunk)
        return len(buffer) - pos >= n

    count = 0
    while pos < len(buffer) or unread:
        where = directory.offset + directory.size - unread - (len(buffer) - pos)
        if not have(_CENTRAL_HEADER_SIZE) or buffer[pos : pos + 4] != _CENTRAL_HEADER_SIGNATURE:
            raise ArtifactRejected(
                "truncated", f"The zip archive is damaged or truncated (bad central directory record at byte {where})."
            )
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", buffer, pos + 28)
        record_len = _CENTRAL_HEADER_SIZE + name_len + extra_len + comment_len
        if not have(record_len):
            raise ArtifactRejected(
                "truncated",
                f"The zip archive is damaged or truncated (central directory record at byte {where} runs past "
                "the directory's end).",
            )
        pos += record_len
        count += 1
        if count > max_entries:
            raise ArtifactRejected(
                "zip_bomb",
                f"The archive holds more than {max_entries} entries, over the limit of {max_entries} "
                f"(its end record declares {directory.declared_entries}).",
            )
    return count


def _check_declared_sizes(infos: list[zipfile.ZipInfo], size: int, max_uncompressed_bytes: int) -> None:
    total = sum(info.file_size for info in infos)
    if total > max_uncompressed_bytes:
        raise ArtifactRejected(
            "zip_bomb",
            f"The archive declares {total} uncompressed bytes, over the limit of {max_uncompressed_bytes}.",
        )
    for info in infos:
        name = info.filename
        if info.header_offset + info.compress_size > size:
            raise ArtifactRejected(
                "truncated", f"The zip archive is truncated: entry {name!r} extends past the file end."
            )
        if info.compress_type not in _READABLE_METHODS:
            raise ArtifactRejected(
                "unsupported_compression",
                f"Entry {name!r} uses zip compression method {info.compress_type}; model archives may only use "
                "stored or deflated entries (all torch can read).",
            )
        if info.flag_bits & 0x1:
            raise ArtifactRejected("encrypted", f"Entry {name!r} is encrypted; torch cannot read encrypted archives.")
        if info.file_size > MAX_METADATA_ENTRY_BYTES and _is_metadata(name):
            raise ArtifactRejected(
                "metadata_too_large",
                f"Entry {name!r} declares {info.file_size} uncompressed bytes, over the limit of "
                f"{MAX_METADATA_ENTRY_BYTES} for a JSON, pickle, code or version entry.",
            )
        if info.file_size > COMPRESSION_RATIO_FLOOR_BYTES and info.file_size > MAX_COMPRESSION_RATIO * max(
            info.compress_size, 1
        ):
            raise ArtifactRejected(
                "compression_ratio",
                f"Entry {name!r} expands {info.compress_size} bytes to {info.file_size}, over the limit of "
                f"{MAX_COMPRESSION_RATIO} times for entries over {COMPRESSION_RATIO_FLOOR_BYTES} bytes "
                "(torch stores its entries uncompressed).",
            )


def _is_metadata(name: str) -> bool:
    """Whether an entry is JSON / pickle / TorchScript code / a version marker rather than tensor payload."""
    parts = _parts(name.replace("\\", "/").lower())
    inner = parts[1:] if len(parts) > 1 else parts  # below the archive's top-level folder
    if not inner:
        return False
    return inner[0] in _METADATA_FOLDERS or inner[-1] in _METADATA_NAMES or inner[-1].endswith(_METADATA_SUFFIXES)


def _parts(name: str) -> tuple[str, ...]:
    """`PurePosixPath(name).parts`, without its cost (it dominates sniffing a 20,000-entry archive)."""
    root = ""
    if name.startswith("/"):
        root = "//" if name.startswith("//") and not name.startswith("///") else "/"
    rest = tuple(part for part in name.split("/") if part and part != ".")
    return (root, *rest) if root else rest


def _check_entry_names(names: list[str]) -> None:
    for name in names:
        parts = name.replace("\\", "/").split("/")
        if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name) or ".." in parts or "\x00" in name:
            raise ArtifactRejected("unsafe_path", f"The archive contains an unsafe entry name {name!r}.")


_NATIVE_LIBRARY = re.compile(r"\.(so(\.\d+)*|dll|dylib|pyd)$", re.IGNORECASE)


def _check_no_native_code(names: list[str]) -> None:
    """A PT2 archive may carry AOTInductor models (`data/aotinductor/<name>/`, compiled shared libraries):
    torch.export.load and load_pt2 load every one they find, i.e. run its native code. An upload never gets
    there: such archives, and any shared library in any archive, are refused before anything reads them."""
    for name in names:
        parts = name.replace("\\", "/").lower().split("/")
        aoti = any(parts[i : i + 2] == ["data", "aotinductor"] for i in range(len(parts) - 1))
        if aoti or _NATIVE_LIBRARY.search(name):
            raise ArtifactRejected(
                "native_code",
                f"The archive contains {name!r}: compiled native code (an AOTInductor package or a shared "
                "library), which loading would run. npu-advisor accepts ExportedPrograms and TorchScript only.",
            )


def _classify(names: list[str]) -> tuple[str, str]:
    """("exported_program" | "torchscript", archive_name) or raise with the specific reason."""
    by_suffix = {parts[1:]: parts[0] for parts in map(_parts, names) if len(parts) > 1}
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


def _custom_op_names(archive: zipfile.ZipFile, archive_name: str, limit: int) -> list[str]:
    """Op targets outside aten/prims named in the ExportedProgram's JSON, scanned as a bounded stream.

    At most `limit` bytes are decompressed over all the JSON entries scanned, whatever they declare.
    """
    scanned = []
    for info in archive.infolist():
        parts = _parts(info.filename)
        is_model_json = parts[:2] == (archive_name, "models") and info.filename.endswith(".json")
        if is_model_json or parts[1:] == ("serialized_exported_program.json",):
            scanned.append(info)
    declared = sum(info.file_size for info in scanned)
    if declared > limit:
        raise ArtifactRejected(
            "metadata_too_large",
            f"The model's JSON entries ({', '.join(repr(info.filename) for info in scanned[:3])}"
            f"{', ...' if len(scanned) > 3 else ''}) declare {declared} bytes together, over the limit of {limit}.",
        )
    found: set[str] = set()
    for info in scanned:
        found |= _scan_op_targets(archive, info, limit)
        limit -= info.file_size
    return sorted(found)


def _scan_op_targets(archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> set[str]:
    from advisor.core.denied_ops import scan_exported_json  # refuses node targets that touch files or the process

    found: set[str] = set()
    carry = b""
    read = 0
    try:
        with archive.open(info) as member:
            while chunk := member.read(min(_SCAN_CHUNK, limit - read + 1)):
                read += len(chunk)
                if read > limit:
                    raise ArtifactRejected("zip_bomb", f"Entry {info.filename!r} decompresses past {limit} bytes.")
                window = carry + chunk
                scan_exported_json(window, info.filename)
                for match in _OP_TARGET.finditer(window):
                    namespace, name, overload = (part.decode() for part in match.groups())
                    if namespace not in BUILTIN_OP_NAMESPACES:
                        found.add(f"{namespace}.{name}.{overload}")
                carry = window[-512:]
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
        raise ArtifactRejected("truncated", f"The zip archive is damaged or truncated ({exc}).") from exc
    return found
