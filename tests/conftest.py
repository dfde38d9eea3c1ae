"""Shared fixtures. Tests that need torch import it themselves; torch-free tests stay fast."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# Every test run gets its own Inductor cache so cold/warm compile numbers mean what they say.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="npu-advisor-inductor-"))


@pytest.fixture
def out_dir() -> Path:
    """Where tests write artifacts a person may want to look at (screenshots, reports)."""
    path = Path(os.environ.get("ADVISOR_TEST_OUTPUT", Path(__file__).resolve().parent.parent / "test-output"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def mlp_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The MLP of tests/models.py saved with torch.export, shared read-only by the measurement tests."""
    from models import export_to, mlp

    model, inputs = mlp()
    return export_to(tmp_path_factory.mktemp("mlp") / "mlp.pt2", model, inputs)


@pytest.fixture(scope="session")
def hostile_corpus(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """tests/hostile_corpus.py written once: {"cases", "marker", "decoy", "decoy_bytes"}. The decoy is a host
    file outside every sandbox that hostile TorchScript aims at; the marker appears only if a pickle ran."""
    from hostile_corpus import build_corpus

    root = tmp_path_factory.mktemp("hostile")
    decoy = root / "host" / "decoy.bin"
    decoy.parent.mkdir()
    decoy.write_bytes(b"host file: must never change")
    marker = root / "host" / "MARKER"
    cases = build_corpus(root / "corpus", marker, decoy)
    return {"cases": cases, "marker": marker, "decoy": decoy, "decoy_bytes": decoy.read_bytes()}
