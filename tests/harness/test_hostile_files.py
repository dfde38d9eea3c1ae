"""Hostile uploads are rejected with their specific message, and nothing inside them ever runs."""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from advisor.core.artifacts import ArtifactRejected, sniff

pytestmark = pytest.mark.own_sandbox  # what a job's own sandbox shows a model

REPO = Path(__file__).resolve().parents[2]
MARKER_ENV = "ADVISOR_TEST_MARKER"


class CreatesMarker:
    """Unpickling this creates the file named in $ADVISOR_TEST_MARKER: proof that the pickle ran."""

    def __reduce__(self):
        return (eval, (f"open({os.environ[MARKER_ENV]!r}, 'w').close()",))


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "pwned"
    monkeypatch.setenv(MARKER_ENV, str(path))
    return path


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def evil_pickle(tmp: Path) -> Path:
    path = tmp / "evil.pt"
    path.write_bytes(pickle.dumps(CreatesMarker()))
    return path


def evil_torch_save(tmp: Path) -> Path:
    import torch

    path = tmp / "evil_checkpoint.pt"
    torch.save({"state": CreatesMarker()}, path)
    return path


def random_bytes(tmp: Path) -> Path:
    path = tmp / "random.pt2"
    path.write_bytes(os.urandom(4096))
    return path


def empty(tmp: Path) -> Path:
    path = tmp / "empty.pt2"
    path.write_bytes(b"")
    return path


def truncated(tmp: Path) -> Path:
    full = _zip(tmp / "full.pt2", {"m/models/model.json": b"{}" * 5000, "m/data/weights/w": os.urandom(20000)})
    path = tmp / "truncated.pt2"
    path.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    return path


def tail_cut(tmp: Path) -> Path:
    full = _zip(tmp / "full.pt2", {"m/models/model.json": b"{}", "m/data/weights/w": b"x" * 100})
    path = tmp / "tail_cut.pt2"
    path.write_bytes(full.read_bytes()[:-10])
    return path


def too_many_entries(tmp: Path) -> Path:
    return _zip(tmp / "many.pt2", {f"m/data/{i}": b"" for i in range(60)} | {"m/models/model.json": b"{}"})


def decompresses_huge(tmp: Path) -> Path:
    return _zip(tmp / "bomb.pt2", {"m/models/model.json": b"{}", "m/data/zeros": b"\0" * (4 << 20)})


def dot_dot_name(tmp: Path) -> Path:
    return _zip(tmp / "traversal.pt2", {"m/models/model.json": b"{}", "m/../../etc/cron.d/evil": b"x"})


def absolute_name(tmp: Path) -> Path:
    return _zip(tmp / "absolute.pt2", {"m/models/model.json": b"{}", "/etc/passwd": b"x"})


def neither_format(tmp: Path) -> Path:
    return _zip(tmp / "docs.zip", {"readme.txt": b"hello", "folder/notes.md": b"# notes"})


# builder, expected code, a phrase the message must contain
HOSTILE: list[tuple[Callable[[Path], Path], str, str]] = [
    (evil_pickle, "pickled_checkpoint", "export it with torch.export.save"),
    (evil_torch_save, "pickled_checkpoint", "not a TorchScript/ExportedProgram file"),
    (random_bytes, "not_a_zip", "not a model archive"),
    (empty, "empty", "empty"),
    (truncated, "truncated", "truncated"),
    (tail_cut, "truncated", "truncated"),
    (too_many_entries, "zip_bomb", "entries"),
    (decompresses_huge, "zip_bomb", "uncompressed bytes"),
    (dot_dot_name, "unsafe_path", "../../etc/cron.d/evil"),
    (absolute_name, "unsafe_path", "/etc/passwd"),
    (neither_format, "unknown_archive", "neither a TorchScript file"),
]
LIMITS = {"max_entries": 50, "max_uncompressed_bytes": 1 << 20}


@pytest.mark.parametrize(("build", "code", "phrase"), HOSTILE, ids=[case[0].__name__ for case in HOSTILE])
def test_rejected_with_specific_message(
    build: Callable[[Path], Path], code: str, phrase: str, tmp_path: Path, marker: Path
) -> None:
    path = build(tmp_path)
    with pytest.raises(ArtifactRejected) as rejected:
        sniff(path, **LIMITS)
    assert rejected.value.code == code
    assert phrase in str(rejected.value)
    assert not marker.exists()


def test_loading_refuses_a_pickle_and_runs_nothing(tmp_path: Path, marker: Path) -> None:
    from advisor.harness.loading import LoadError, load_model

    for build in (evil_pickle, evil_torch_save):
        with pytest.raises(LoadError, match="pickled checkpoint"):
            load_model(str(build(tmp_path)))
    assert not marker.exists()


def test_pickle_hidden_in_an_exported_program_does_not_run(tmp_path: Path, marker: Path) -> None:
    """torch.export.load unpickles sample inputs with a weights_only=False fallback; the loader forbids it."""
    import torch

    from advisor.harness.loading import load_model
    from advisor.harness.safe_unpickle import PickledObjectRefused
    from tests.support import models

    module, inputs = models.mlp()
    clean = Path(models.export_to(tmp_path / "clean.pt2", module, inputs))
    evil_inputs = io.BytesIO()
    torch.save(((CreatesMarker(),), {}), evil_inputs)
    poisoned = tmp_path / "poisoned.pt2"
    with zipfile.ZipFile(clean) as source, zipfile.ZipFile(poisoned, "w") as target:
        for info in source.infolist():
            hidden = info.filename.endswith("sample_inputs/model.pt")
            target.writestr(info, evil_inputs.getvalue() if hidden else source.read(info))
    assert sniff(poisoned).format == "exported_program"  # the container is fine; the payload is not
    with pytest.raises(PickledObjectRefused, match="never unpickles objects from uploads") as refused:
        load_model(str(poisoned))
    assert refused.value.entry == "data/sample_inputs/model.pt"
    assert not marker.exists()


def test_pickle_in_a_torchscript_archive_does_not_run(tmp_path: Path, marker: Path) -> None:
    """torch.jit.load's own unpickler only builds TorchScript types: a Python-level __reduce__ cannot run."""
    from advisor.harness.loading import LoadError, load_model

    path = _zip(
        tmp_path / "fake_script.pt",
        {"m/data.pkl": pickle.dumps(CreatesMarker(), protocol=2), "m/code/__torch__/m.py": b"", "m/version": b"2"},
    )
    assert sniff(path).format == "torchscript"
    with pytest.raises(LoadError, match="torch.jit.load could not load"):
        load_model(str(path), input_shapes=["x=1x4"])
    assert not marker.exists()


def test_cli_rejects_a_hostile_file_without_traceback(tmp_path: Path, marker: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", "from advisor.cli import app; app()", "inspect", str(evil_pickle(tmp_path))],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=os.environ | {MARKER_ENV: str(marker)},
        timeout=120,
    )
    assert result.returncode == 2
    assert "pickled checkpoint" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not marker.exists()
