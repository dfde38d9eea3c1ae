"""A user-supplied calibration file for the int8 options: checked without loading it (torch- and numpy-free).

The form is `.npz` only (`numpy.savez` / `savez_compressed`: a zip of `.npy` arrays), never a pickle. It holds one
array per flat example input, named `input0`, `input1`, ... in the order the inspection lists the inputs, each
shaped `[samples, *that input's shape]` with that input's dtype: sample `s` is one calibration call
`model(input0[s], input1[s], ...)`. The int8 exports are static at the example shape, so every sample has the
example input's shape exactly.

Checked here from the zip's directory and each `.npy` header alone (no array is read): the file's size, the entries
(names, count, declared sizes, compression ratio: a zip bomb is refused before anything expands), each header's
dtype (numeric only: an object array would need pickle) and shape, the sample count; and, once the model's inputs
are known (the inspection's `inputs`), shapes and dtypes against them. The measuring child then loads it with
`numpy.load(allow_pickle=False)` (advisor.harness.calibration_samples).
"""

from __future__ import annotations

import ast
import os
import re
import struct
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

MAX_CALIBRATION_BYTES = 64 * 2**20  # the file as uploaded
MAX_EXPANDED_BYTES = 256 * 2**20  # all arrays together, as declared by the zip and the .npy headers
MAX_SAMPLES = 1024
MAX_ENTRIES = 64
MAX_COMPRESSION_RATIO = 200  # a .npz of real samples compresses far less than this
MAX_HEADER_BYTES = 4096  # a .npy header is a short dict literal
ENTRY = re.compile(r"input(0|[1-9][0-9]?)\.npy")
# numpy dtype descriptors of the numeric dtypes the example inputs can have (no object, string or structured dtypes)
DTYPES = {
    "|b1": "bool",
    "|u1": "uint8",
    "|i1": "int8",
    "<i2": "int16",
    "<i4": "int32",
    "<i8": "int64",
    "<f2": "float16",
    "<f4": "float32",
    "<f8": "float64",
}
ITEMSIZE = {name: int(descr[2:]) for descr, name in DTYPES.items()}
PICKLE_PROTOCOL_BYTE = 0x80
NPY_MAGIC = b"\x93NUMPY"


class CalibrationRefused(ValueError):
    """The calibration file is not one the measurement may read; the message names the problem (and the entry)."""


@dataclass(frozen=True)
class CalibrationArray:
    name: str  # input0, input1, ...
    dtype: str  # torch's spelling without "torch.": float32, int64, ...
    shape: tuple[int, ...]  # [samples, *input shape]


@dataclass(frozen=True)
class CalibrationInfo:
    samples: int
    arrays: tuple[CalibrationArray, ...]

    def describe(self) -> str:
        shapes = ", ".join(f"{a.name} {a.dtype}{list(a.shape[1:])}" for a in self.arrays)
        return f"{self.samples} sample(s): {shapes}"


def check_file(path: str | os.PathLike[str]) -> CalibrationInfo:
    """The calibration file's arrays, checked as the module docstring says; CalibrationRefused otherwise."""
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise CalibrationRefused(f"calibration file not readable: {exc.strerror or exc}") from None
    if size > MAX_CALIBRATION_BYTES:
        raise CalibrationRefused(
            f"calibration file too large: {size:,} bytes (at most {MAX_CALIBRATION_BYTES:,}; a few hundred samples "
            "are enough to calibrate)"
        )
    with open(path, "rb") as handle:
        return check_stream(handle, size)


def check_stream(handle: IO[bytes], size: int) -> CalibrationInfo:
    """As `check_file`, for an open binary file of `size` bytes (the server's stored upload)."""
    head = handle.read(8)
    handle.seek(0)
    if head[:1] == bytes([PICKLE_PROTOCOL_BYTE]) or head[:1] in (b"(", b"c", b"]", b"}"):
        raise CalibrationRefused(
            "calibration file is a pickle (or not an .npz): refused, it is never unpickled; save the samples with "
            "numpy.savez('calibration.npz', input0=..., ...)"
        )
    if head.startswith(NPY_MAGIC):
        raise CalibrationRefused("calibration file is one .npy array: save an .npz (numpy.savez) of input0, ...")
    if not head.startswith(b"PK\x03\x04"):
        raise CalibrationRefused("calibration file is not an .npz (a zip of .npy arrays written by numpy.savez)")
    try:
        archive = zipfile.ZipFile(handle)
        infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise CalibrationRefused(f"calibration file is not a readable .npz: {exc}") from None
    with archive:
        return _check_entries(archive, infos, size)


def _check_entries(archive: zipfile.ZipFile, infos: list[zipfile.ZipInfo], size: int) -> CalibrationInfo:
    if not infos:
        raise CalibrationRefused("calibration file holds no arrays")
    if len(infos) > MAX_ENTRIES:
        raise CalibrationRefused(f"calibration file has {len(infos)} entries (at most {MAX_ENTRIES})")
    expanded = sum(info.file_size for info in infos)
    if expanded > MAX_EXPANDED_BYTES:
        raise CalibrationRefused(
            f"calibration file expands to {expanded:,} bytes (at most {MAX_EXPANDED_BYTES:,}): refused before reading"
        )
    if expanded > MAX_COMPRESSION_RATIO * max(size, 1):
        raise CalibrationRefused(
            f"calibration file expands {expanded / max(size, 1):.0f}x (at most {MAX_COMPRESSION_RATIO}x): a zip bomb, "
            "refused before reading"
        )
    arrays: dict[int, CalibrationArray] = {}
    for info in infos:
        match = ENTRY.fullmatch(info.filename)
        if match is None:
            raise CalibrationRefused(
                f"calibration entry {info.filename[:80]!r}: expected input0.npy, input1.npy, ... (one array per input, "
                "numpy.savez(path, input0=..., input1=...))"
            )
        if info.flag_bits & 0x1:
            raise CalibrationRefused(f"calibration entry {info.filename}: encrypted")
        arrays[int(match.group(1))] = _check_array(archive, info)
    if sorted(arrays) != list(range(len(arrays))):
        raise CalibrationRefused(f"calibration arrays must be input0..input{len(arrays) - 1}, got {_names(arrays)}")
    ordered = tuple(arrays[index] for index in sorted(arrays))
    counts = {a.shape[0] for a in ordered}
    if len(counts) != 1:
        listed = ", ".join(f"{a.name}: {a.shape[0]}" for a in ordered)
        raise CalibrationRefused(f"calibration arrays disagree on the sample count (the first axis): {listed}")
    samples = counts.pop()
    if not 1 <= samples <= MAX_SAMPLES:
        raise CalibrationRefused(f"calibration file has {samples} samples (1 to {MAX_SAMPLES})")
    return CalibrationInfo(samples, ordered)


def _names(arrays: Mapping[int, CalibrationArray]) -> str:
    return ", ".join(arrays[i].name for i in sorted(arrays))


def _check_array(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> CalibrationArray:
    """The entry's array as its .npy header declares it: a numeric dtype, [samples, ...], no more data than stored."""
    name = info.filename.removesuffix(".npy")
    fields = _npy_header(archive, info)
    descr, shape = fields["descr"], fields["shape"]
    dtype = DTYPES.get(descr) if isinstance(descr, str) else None
    if dtype is None:
        shown = descr if isinstance(descr, str) else type(descr).__name__
        pickled = " (object arrays need pickle: refused)" if shown in ("|O", "O") else ""
        raise CalibrationRefused(
            f"calibration {name}: dtype {str(shown)[:40]!r} is not a numeric little-endian dtype{pickled}; allowed: "
            f"{', '.join(DTYPES.values())}"
        )
    if not (isinstance(shape, tuple) and shape and all(type(d) is int and d >= 0 for d in shape)):
        raise CalibrationRefused(f"calibration {name}: shape {str(shape)[:80]} is not [samples, *input shape]")
    declared = ITEMSIZE[dtype]
    for dim in shape:
        declared *= dim
    if declared > info.file_size:
        raise CalibrationRefused(f"calibration {name}: its header declares more data than the entry holds")
    return CalibrationArray(name, dtype, shape)


def _npy_header(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> dict[str, Any]:
    """The entry's .npy header dict, read alone (at most MAX_HEADER_BYTES of the entry) and parsed as a literal."""
    try:
        with archive.open(info) as entry:
            header = entry.read(min(MAX_HEADER_BYTES, info.file_size))
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError) as exc:
        raise CalibrationRefused(f"calibration entry {info.filename}: unreadable ({exc})") from None
    if not header.startswith(NPY_MAGIC) or len(header) < 10:
        raise CalibrationRefused(f"calibration entry {info.filename}: not an .npy array")
    major = header[6]
    if major == 1:
        (length,), start = struct.unpack("<H", header[8:10]), 10
    elif major in (2, 3):
        (length,), start = struct.unpack("<I", header[8:12]), 12
    else:
        raise CalibrationRefused(f"calibration entry {info.filename}: unknown .npy version {major}")
    if start + length > len(header):
        raise CalibrationRefused(f"calibration entry {info.filename}: .npy header too long or truncated")
    try:
        fields = ast.literal_eval(header[start : start + length].decode("latin-1").strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise CalibrationRefused(f"calibration entry {info.filename}: unreadable .npy header") from None
    if not isinstance(fields, dict) or set(fields) != {"descr", "fortran_order", "shape"}:
        raise CalibrationRefused(f"calibration entry {info.filename}: not an .npy header")
    return fields


def check_against_inputs(info: CalibrationInfo, inputs: Sequence[Mapping[str, Any]]) -> None:
    """CalibrationRefused naming every array whose shape (past the sample axis) or dtype is not its example input's.

    `inputs`: the inspection's `inputs` ([{"name", "shape", "dtype"}], dtype as "float32" or "torch.float32")."""
    problems = []
    if len(info.arrays) != len(inputs):
        problems.append(f"{len(info.arrays)} array(s) for a model of {len(inputs)} input(s)")
    for array, expected in zip(info.arrays, inputs, strict=False):
        label = f"{array.name} ({expected.get('name') or 'input'})"
        want_shape = [_static_dim(d) for d in expected.get("shape") or []]
        want_dtype = str(expected.get("dtype") or "").removeprefix("torch.")
        if not _fits(list(array.shape[1:]), want_shape):
            problems.append(f"{label} samples have shape {list(array.shape[1:])}, the example input {want_shape}")
        if want_dtype and array.dtype != want_dtype:
            problems.append(f"{label} is {array.dtype}, the example input {want_dtype}")
    if problems:
        raise CalibrationRefused(
            "calibration file does not match the model's example inputs (the int8 exports are static at the example "
            "shape): " + "; ".join(problems)
        )


def _static_dim(dim: Any) -> int | str:
    """A dim as the inspection records it: an int, or a symbolic size ("s0") that any sample size fits."""
    if isinstance(dim, int) or (isinstance(dim, str) and dim.isdigit()):
        return int(dim)
    return str(dim)


def _fits(shape: list[int], want: list[int | str]) -> bool:
    return len(shape) == len(want) and all(isinstance(w, str) or s == w for s, w in zip(shape, want, strict=True))
