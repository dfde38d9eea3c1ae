"""Telling a model file's format from its zip container alone (advisor.artifacts.sniff)."""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from advisor.artifacts import ArtifactRejected, sniff

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import models

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
    subprocess.run([sys.executable, "-c", script, str(path)], cwd=REPO / "tests", check=True, capture_output=True)
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
        "import sys\nfrom advisor.artifacts import sniff\nprint(sniff(sys.argv[1]).format, 'torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(model_files["exported"])],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert out == ["exported_program", "False"]
