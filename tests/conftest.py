"""Shared fixtures. Tests that need torch import it themselves; torch-free tests stay fast."""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# Every test run gets its own Inductor cache so cold/warm compile numbers mean what they say; the workers of one
# pytest-xdist run share it, so in-process compiles pay Inductor's CPU-feature probe and header build once per run.
_RUN_ID = os.environ.get("PYTEST_XDIST_TESTRUNUID")
if _RUN_ID:
    _cache = Path(tempfile.gettempdir()) / f"npu-advisor-inductor-{_RUN_ID}"
    _cache.mkdir(exist_ok=True)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(_cache))
else:
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="npu-advisor-inductor-"))


@pytest.fixture(autouse=True)
def machine_share(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Under pytest-xdist (`bash dev.sh test` runs the suite on several workers), a test marked `exclusive` has the
    machine to itself: it asserts a wall-clock bound that another worker's compile would break. Every other test
    holds a shared lock; an exclusive one waits for the running ones to end and keeps new ones out (it takes the
    turnstile first, so a stream of shared tests cannot starve it). Without xdist there is nothing to share."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    root = tmp_path_factory.getbasetemp().parent  # shared by every worker of this run
    exclusive = request.node.get_closest_marker("exclusive") is not None
    with open(root / "machine.turnstile", "a") as turnstile, open(root / "machine.lock", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if exclusive:
            fcntl.flock(lock, fcntl.LOCK_EX)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        else:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            fcntl.flock(lock, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


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
