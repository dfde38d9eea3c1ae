"""Telling a model file's format from its zip container alone (advisor.core.artifacts.sniff)."""

from __future__ import annotations

import io
import struct
import subprocess
import sys
import time
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest

from advisor.core import artifacts
from advisor.core.artifacts import ArtifactRejected, sniff
from tests.support.forked_script import run_script

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from tests.support import models

    folder = tmp_path_factory.mktemp("artifacts")
    module, inputs = models.mlp()
    return {
        "exported": Path(models.export_to(folder / "mlp.pt2", module, inputs)),
        "torchscript": Path(models.trace_to(folder / "mlp.pt", module, inputs)),
    }


@pytest.fixture(scope="module")
def npu_file_from_subprocess(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ExportedProgram using npu::subproc_rms_norm, made by a process that registered the op; this one has not."""
    path = tmp_path_factory.mktemp("subproc") / "npu.pt2"
    script = (
        "import sys; import models\n"
        "models.register_npu_rms_norm('subproc_rms_norm')\n"
        "m = models.NpuOpModel('subproc_rms_norm').eval()\n"
        "import torch; models.export_to(sys.argv[1], m, (torch.randn(4, 32),))\n"
    )
    run_script(script, cwd=REPO / "tests" / "support", argv=[str(path)])
    return path


def test_exported_program_is_recognised(model_files: dict[str, Path]) -> None:
    info = sniff(model_files["exported"])
    assert info.format == "exported_program"
    assert info.archive_name == "mlp"
    assert info.size_bytes == model_files["exported"].stat().st_size
    assert info.custom_op_names == []


def test_torchscript_is_recognised(model_files: dict[str, Path]) -> None:
    info = sniff(str(model_files["torchscript"]))
    assert info.format == "torchscript"
    assert info.entries == len(zipfile.ZipFile(model_files["torchscript"]).namelist())


def test_custom_ops_are_listed_without_the_op_being_registered(npu_file_from_subprocess: Path) -> None:
    assert sniff(npu_file_from_subprocess).custom_op_names == ["npu.subproc_rms_norm.default"]


class CountingReader(io.RawIOBase):
    """A seekable file object that records how many bytes were read through it."""

    def __init__(self, data: bytes) -> None:
        self._buffer = io.BytesIO(data)
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._buffer.seek(offset, whence)

    def tell(self) -> int:
        return self._buffer.tell()

    def readinto(self, target) -> int:  # type: ignore[override]
        chunk = self._buffer.read(len(target))
        target[: len(chunk)] = chunk
        self.bytes_read += len(chunk)
        return len(chunk)


def test_file_object_is_sniffed_without_reading_the_weights(model_files: dict[str, Path]) -> None:
    """The API server sniffs a streamed upload: only the directory and model.json may be read, not the weights."""
    original = zipfile.ZipFile(model_files["exported"])
    padded = io.BytesIO()
    with zipfile.ZipFile(padded, "w") as archive:
        for info in original.infolist():
            archive.writestr(info, original.read(info))
        archive.writestr("mlp/data/weights/big_weight", b"\0" * (8 << 20))  # stored, 8 MiB
    reader = CountingReader(padded.getvalue())
    info = sniff(reader)
    assert info.format == "exported_program"
    assert reader.bytes_read < 1 << 20


def test_legacy_exported_program_layout_is_recognised(tmp_path: Path) -> None:
    path = tmp_path / "old.pt2"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("old/serialized_exported_program.json", b'{"nodes": []}')
        archive.writestr("old/serialized_state_dict.pt", b"")
    assert sniff(path).format == "exported_program"


def test_limits_are_parameters(model_files: dict[str, Path]) -> None:
    path = model_files["exported"]
    with pytest.raises(ArtifactRejected) as too_many:
        sniff(path, max_entries=3)
    assert too_many.value.code == "zip_bomb"
    with pytest.raises(ArtifactRejected) as too_big:
        sniff(path, max_uncompressed_bytes=1000)
    assert too_big.value.code == "zip_bomb"


def test_sniff_imports_no_torch(model_files: dict[str, Path]) -> None:
    script = (
        "import sys\nfrom advisor.core.artifacts import sniff\n"
        "print(sniff(sys.argv[1]).format, 'torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(model_files["exported"])],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert out == ["exported_program", "False"]


# Hostile zip containers, built byte by byte where zipfile would refuse to write them (or is too slow to).


@dataclass
class RawEntry:
    name: str
    data: bytes = b""  # as stored in the archive: already compressed when method is deflate
    method: int = zipfile.ZIP_STORED
    file_size: int | None = None  # declared uncompressed size; len(data) unless given
    flags: int = 0


def raw_zip(entries: list[RawEntry], *, declared_entries: int | None = None) -> bytes:
    """A plain (non-ZIP64) zip archive, fast to build even with tens of thousands of entries."""
    body = bytearray()
    directory = bytearray()
    for entry in entries:
        name = entry.name.encode()
        size = len(entry.data) if entry.file_size is None else entry.file_size
        crc = zlib.crc32(entry.data) if entry.method == zipfile.ZIP_STORED else 0
        fields = (entry.flags, entry.method, 0, 0x21, crc, len(entry.data), size, len(name))
        directory += struct.pack("<4sHH", b"PK\x01\x02", 20, 20) + struct.pack("<HHHHIIIH", *fields)
        directory += struct.pack("<HHHHII", 0, 0, 0, 0, 0, len(body)) + name
        body += struct.pack("<4sH", b"PK\x03\x04", 20) + struct.pack("<HHHHIIIH", *fields) + b"\0\0" + name
        body += entry.data
    count = len(entries) if declared_entries is None else declared_entries
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, count, count, len(directory), len(body), 0)
    return bytes(body + directory + end)


def forge_entry_count(data: bytes, count: int) -> bytes:
    """The same archive with its end-of-central-directory record declaring `count` entries."""
    pos = data.rfind(b"PK\x05\x06")
    return data[: pos + 8] + struct.pack("<HH", count, count) + data[pos + 12 :]


def deflated(data: bytes) -> bytes:
    compressor = zlib.compressobj(1, zlib.DEFLATED, -15)
    return compressor.compress(data) + compressor.flush()


def exported_layout(count: int) -> list[RawEntry]:
    """A legit-looking ExportedProgram container: model.json plus `count` - 1 empty stored weights."""
    weights = [RawEntry(f"m/data/weights/w{i:06d}") for i in range(count - 1)]
    return [RawEntry("m/models/model.json", b'{"nodes": []}'), *weights]


def reject(data: bytes, tmp_path: Path, **limits: int) -> ArtifactRejected:
    path = tmp_path / "hostile.pt2"
    path.write_bytes(data)
    with pytest.raises(ArtifactRejected) as rejected:
        sniff(path, **limits)
    return rejected.value


@pytest.fixture(scope="module")
def many_entries() -> bytes:
    """25,000 real (empty, stored) entries: over the default limit of 20,000."""
    return raw_zip(exported_layout(25_000))


def test_raw_archives_are_real_zips() -> None:
    data = raw_zip(exported_layout(50) + [RawEntry("m/data/weights/deflated", deflated(b"abc" * 100), 8, 300)])
    assert len(zipfile.ZipFile(io.BytesIO(data)).namelist()) == 51
    assert sniff(io.BytesIO(data)).entries == 51


def test_more_real_entries_than_the_limit_behind_a_small_declared_count(many_entries: bytes, tmp_path: Path) -> None:
    rejected = reject(forge_entry_count(many_entries, 5), tmp_path)
    assert rejected.code == "zip_bomb"
    assert "more than 20000 entries, over the limit of 20000" in str(rejected)
    assert "declares 5" in str(rejected)


def test_counting_entries_stops_at_the_limit_before_zipfile_parses_anything(many_entries: bytes) -> None:
    reader = CountingReader(forge_entry_count(many_entries, 5))
    directory_bytes = 25_000 * (46 + len("m/data/weights/w000000"))
    with pytest.raises(ArtifactRejected) as rejected:
        sniff(reader, max_entries=1000)
    assert rejected.value.code == "zip_bomb"
    assert "more than 1000 entries" in str(rejected.value)
    assert reader.bytes_read < 512 * 1024 < directory_bytes


def test_declared_count_below_the_real_count_is_rejected(tmp_path: Path) -> None:
    rejected = reject(raw_zip(exported_layout(101), declared_entries=5), tmp_path)
    assert rejected.code == "forged_directory"
    assert "declares 5 entries but its central directory holds 101" in str(rejected)


def test_declared_count_above_the_real_count_is_rejected(tmp_path: Path) -> None:
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("m/models/model.json", b"{}")
        out.writestr("m/data/weights/w", b"\0" * 64)
    rejected = reject(forge_entry_count(archive.getvalue(), 300), tmp_path)
    assert rejected.code == "forged_directory"
    assert "declares 300 entries but its central directory holds 2" in str(rejected)


def zip64_archive(monkeypatch: pytest.MonkeyPatch, entries: int) -> bytes:
    """A small archive that zipfile writes with ZIP64 end records (as it does past 65,535 entries)."""
    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 2)
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as out:
        for entry in exported_layout(entries):
            out.writestr(entry.name, entry.data)
    monkeypatch.undo()
    return archive.getvalue()


def test_zip64_entry_count_is_checked_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    data = zip64_archive(monkeypatch, 30)
    record = data.rfind(b"PK\x06\x06")
    assert record > 0 and data.rfind(b"PK\x06\x07") > record
    assert sniff(io.BytesIO(data)).entries == 30
    forged = data[: record + 24] + struct.pack("<QQ", 7, 7) + data[record + 40 :]
    rejected = reject(forged, tmp_path)
    assert rejected.code == "forged_directory"
    assert "declares 7 entries but its central directory holds 30" in str(rejected)
    over = data[: record + 24] + struct.pack("<QQ", 10**9, 10**9) + data[record + 40 :]
    assert reject(over, tmp_path).code == "zip_bomb"


def test_zip64_locator_pointing_elsewhere_is_rejected(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    data = zip64_archive(monkeypatch, 10)
    locator = data.rfind(b"PK\x06\x07")
    forged = data[: locator + 8] + struct.pack("<Q", 0) + data[locator + 16 :]
    assert reject(forged, tmp_path).code == "forged_directory"


def test_directory_elsewhere_than_the_end_record_says_is_rejected(tmp_path: Path) -> None:
    data = raw_zip(exported_layout(20))
    end = data.rfind(b"PK\x05\x06")
    (offset,) = struct.unpack("<I", data[end + 16 : end + 20])
    forged = data[: end + 16] + struct.pack("<I", offset - 46) + data[end + 20 :]
    rejected = reject(forged, tmp_path)
    assert rejected.code == "forged_directory"
    assert "central directory" in str(rejected)


def test_oversized_central_directory_is_rejected(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(artifacts, "MAX_DIRECTORY_BYTES", 64 * 1024)
    rejected = reject(raw_zip(exported_layout(2000)), tmp_path)
    assert rejected.code == "zip_bomb"
    assert "central directory" in str(rejected) and str(64 * 1024) in str(rejected)


def test_garbage_inside_the_directory_is_a_damaged_archive(tmp_path: Path) -> None:
    data = bytearray(raw_zip(exported_layout(20)))
    end = data.rfind(b"PK\x05\x06")
    (offset,) = struct.unpack("<I", data[end + 16 : end + 20])
    data[offset + 46 * 3 + 200 : offset + 46 * 3 + 204] = b"JUNK"
    rejected = reject(bytes(data), tmp_path)
    assert rejected.code == "truncated"
    assert "damaged or truncated" in str(rejected)


def test_deflated_model_json_over_the_metadata_cap_is_rejected(tmp_path: Path) -> None:
    """Valid JSON followed by 65 MiB of spaces: ~300 KB on disk, far under the 16 GiB declared-size limit."""
    padded = b'{"nodes": []}' + b" " * (65 << 20)
    entries = [RawEntry("m/models/model.json", deflated(padded), zipfile.ZIP_DEFLATED, len(padded))]
    data = raw_zip(entries + [RawEntry("m/data/weights/w", b"\0" * 64)])
    assert len(data) < 1 << 20
    rejected = reject(data, tmp_path)
    assert rejected.code == "metadata_too_large"
    assert "'m/models/model.json'" in str(rejected)
    assert str(artifacts.MAX_METADATA_ENTRY_BYTES) in str(rejected)


@pytest.mark.parametrize("name", ["m/data.pkl", "m/code/__torch__/m.py", "m/extra/notes", "m/version", "m/x.json"])
def test_any_metadata_entry_over_the_cap_is_rejected(name: str, tmp_path: Path) -> None:
    """Declared sizes are checked before anything is decompressed, so a forged declaration is enough here."""
    lying = RawEntry(name, deflated(b"0" * 1000), zipfile.ZIP_DEFLATED, artifacts.MAX_METADATA_ENTRY_BYTES + 1)
    rejected = reject(raw_zip(exported_layout(3) + [lying]), tmp_path)
    assert rejected.code == "metadata_too_large"
    assert repr(name) in str(rejected)


def test_model_jsons_share_one_scan_budget(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(artifacts, "MAX_METADATA_ENTRY_BYTES", 1000)
    jsons = [RawEntry(f"m/models/part{i}.json", b"{}" + b" " * 598) for i in range(3)]
    rejected = reject(raw_zip(jsons + [RawEntry("m/data/weights/w", b"\0" * 64)]), tmp_path)
    assert rejected.code == "metadata_too_large"
    assert "1800 bytes together, over the limit of 1000" in str(rejected)


def test_high_ratio_weight_entry_is_rejected(tmp_path: Path) -> None:
    zeros = b"\0" * (4 << 20)
    bomb = RawEntry("m/data/weights/w", deflated(zeros), zipfile.ZIP_DEFLATED, len(zeros))
    rejected = reject(raw_zip(exported_layout(2) + [bomb]), tmp_path)
    assert rejected.code == "compression_ratio"
    assert "'m/data/weights/w'" in str(rejected)
    assert f"limit of {artifacts.MAX_COMPRESSION_RATIO} times" in str(rejected)


def test_stored_weights_of_a_few_megabytes_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "stored.pt2"
    with zipfile.ZipFile(path, "w") as out:
        out.writestr("m/models/model.json", b'{"nodes": []}')
        out.writestr("m/data/weights/w", b"\0" * (6 << 20))  # stored: ratio 1, however compressible
        out.writestr("m/data/weights/small", b"\0" * (512 << 10), compress_type=zipfile.ZIP_DEFLATED)
    info = sniff(path)
    assert (info.format, info.entries) == ("exported_program", 3)


def test_real_torch_files_pass_every_container_check(model_files: dict[str, Path]) -> None:
    for kind, path in model_files.items():
        info = sniff(path, max_entries=len(zipfile.ZipFile(path).namelist()))
        assert info.entries == len(zipfile.ZipFile(path).namelist()), kind


def test_declared_size_smaller_than_the_stream_is_not_inflated_past_it(tmp_path: Path) -> None:
    """A model.json declaring 100 bytes whose stream inflates to 32 MiB: read stops at 100, the CRC fails."""
    lying = RawEntry("m/models/model.json", deflated(b" " * (32 << 20)), zipfile.ZIP_DEFLATED, 100)
    reader = CountingReader(raw_zip([lying, RawEntry("m/data/weights/w", b"\0" * 64)]))
    with pytest.raises(ArtifactRejected) as rejected:
        sniff(reader)
    assert rejected.value.code == "truncated"
    assert reader.bytes_read < 512 * 1024


def test_corrupt_model_json_stream_is_a_damaged_archive(tmp_path: Path) -> None:
    stream = bytearray(deflated(b'{"target": "torch.ops.npu.x.default"}' * 1000))
    stream[10:20] = b"\xff" * 10
    corrupt = RawEntry("m/models/model.json", bytes(stream), zipfile.ZIP_DEFLATED, 38_000)
    rejected = reject(raw_zip([corrupt, RawEntry("m/data/weights/w", b"\0" * 64)]), tmp_path)
    assert rejected.code == "truncated"


def test_compression_torch_cannot_read_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "bz2.pt2"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_BZIP2) as out:
        out.writestr("m/models/model.json", b"{}" * 100)
    with pytest.raises(ArtifactRejected) as rejected:
        sniff(path)
    assert rejected.value.code == "unsupported_compression"
    assert "'m/models/model.json'" in str(rejected.value)


def test_encrypted_entry_is_rejected(tmp_path: Path) -> None:
    entries = [RawEntry("m/models/model.json", b"{}", flags=0x1), RawEntry("m/data/weights/w", b"\0" * 64)]
    rejected = reject(raw_zip(entries), tmp_path)
    assert rejected.code == "encrypted"


@pytest.mark.exclusive
def test_sniffing_fifteen_thousand_entries_stays_fast() -> None:
    data = raw_zip(exported_layout(15_000))
    times = []
    for _ in range(3):  # the fastest of three: a guard against quadratic work, not against a busy machine
        started = time.perf_counter()
        info = sniff(io.BytesIO(data))
        times.append(time.perf_counter() - started)
    assert (info.format, info.entries) == ("exported_program", 15_000)
    assert min(times) < 2.0, times  # ~0.2-0.3 s here; zipfile's own directory parsing is most of it (one CI run: 2.7 s)
