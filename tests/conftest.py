"""Shared fixtures. Tests that need torch import it themselves; torch-free tests stay fast."""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

import pytest

# Every test run gets its own Inductor cache so cold/warm compile numbers mean what they say.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="npu-advisor-inductor-"))
# The trusted precompiled header (advisor.harness.inductor_headers), one per venv and kept between runs. The default
# cache is keyed by torch, Python and compiler versions only, but Inductor's header hash also covers the include
# paths, i.e. the venv's location: a header built from another checkout's venv is offered, never matches, and every
# sandboxed Inductor compile of the run then precompiles its own 155 MB header (~30 s each on two cores).
os.environ.setdefault(
    "ADVISOR_INDUCTOR_HEADER_CACHE",
    str(
        Path.home()
        / ".cache"
        / "npu-advisor"
        / "test-inductor-headers"
        / hashlib.sha256(sys.prefix.encode()).hexdigest()[:16]
    ),
)


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
