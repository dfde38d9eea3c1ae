"""Shared fixtures. Tests that need torch import it themselves; torch-free tests stay fast."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

# imported before any test patches advisor.harness.measurement.measurement_zygote: the real one
from advisor.harness.measurement.run import measurement_zygote as _real_measurement_zygote
from advisor.harness.sandbox import Zygote
from tests.support.service_env import FAST_TIMING_ENV

# Every test run gets its own Inductor cache so cold/warm compile numbers mean what they say; the workers of one
# pytest-xdist run share it, so in-process compiles pay Inductor's CPU-feature probe and header build once per run.
# The process that starts the run (xdist's controller, or pytest without xdist) names it and removes the run's
# directories when the run ends; its workers find the name in PYTEST_XDIST_TESTRUNUID.
_WORKER = "PYTEST_XDIST_WORKER" in os.environ
_RUN_ID = os.environ.get("PYTEST_XDIST_TESTRUNUID") if _WORKER else uuid.uuid4().hex
_CACHE = Path(tempfile.gettempdir()) / f"npu-advisor-inductor-{_RUN_ID}"
_SHARED_DIR = Path(tempfile.gettempdir()) / f"npu-advisor-tests-{_RUN_ID}"  # what the run's xdist workers share
_HOME = os.getcwd()  # where the run started: tests that change directory get their source-front children spawned
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    _CACHE.mkdir(exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(_CACHE)


# Tests time in short windows, as the end-to-end services do (tests/support/service_env.py), unless a test passes its
# own TimingPolicy or sets this variable itself: the defaults' windows (up to 5 s each, and longer still on a machine
# that other tests keep busy) check nothing more here. tests/harness/test_measure.py checks the defaults themselves.
for _name, _value in FAST_TIMING_ENV.items():
    os.environ.setdefault(_name, _value)

_EXCLUSIVE_KEY = pytest.StashKey[int]()


# Inductor's trusted precompiled header (advisor.harness.inductor_headers), which every sandboxed job that compiles
# copies in, is built once per machine and venv, on first use (~20 s on 2 cores). On a fresh machine (CI) the first
# use was an exclusive test's analysis, so the other workers sat idle through the build; xdist's controller starts it
# while the workers collect instead, and a test that needs it before it is done waits for it, as a job would.
_HEADER_BUILD: list[subprocess.Popen] = []


def _start_header_build() -> subprocess.Popen:
    """`bash dev.sh test` started one already, before the lint: this one then waits for its lock, or finds it built."""
    command = [sys.executable, "-m", "advisor.harness.inductor_headers"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def pytest_configure(config: pytest.Config) -> None:
    if not _WORKER and getattr(config.option, "testrunuid", "unset") is None:
        config.option.testrunuid = _RUN_ID  # the name xdist hands its workers
    if not _WORKER and getattr(config.option, "numprocesses", None):
        _HEADER_BUILD.append(_start_header_build())


@pytest.hookimpl(trylast=True)  # after `-k`/`-m` deselected: the count is of the exclusive tests this run runs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Exclusive tests first (a stable sort): under xdist each worker then runs its exclusive tests before any
    other, and the other tests wait for all of them (see `machine_share`) - one quiet phase at the start, instead of
    draining every worker's running tests once per exclusive test."""
    items.sort(key=lambda item: not _is_exclusive(item))
    config.stash[_EXCLUSIVE_KEY] = sum(1 for item in items if _is_exclusive(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Count the finished exclusive tests, skipped ones included, in a directory the run's workers share."""
    try:
        return (yield)
    finally:
        if _WORKER and _is_exclusive(item):
            with open(_shared_dir() / "exclusive.done", "a") as done:
                done.write(item.nodeid + "\n")


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """An xdist worker ends here: its session finished (its zygote closed, its fixtures torn down) and xdist sent
    the controller its last report, which the controller marks the worker done by. What normally follows only
    collects garbage and frees the modules: with torch, Dynamo and Inductor loaded, 3-5 s of CPU per worker at the
    end of every run (sampled), while the controller waits for the workers' processes to end."""
    if _WORKER and os.environ.get("ADVISOR_TEST_WORKER_FULL_EXIT") != "1":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _is_exclusive(item: pytest.Item) -> bool:
    return item.get_closest_marker("exclusive") is not None


def _shared_dir() -> Path:
    _SHARED_DIR.mkdir(exist_ok=True)
    return _SHARED_DIR


def _wait_for_exclusive_phase(expected: int, limit_s: float = 900.0) -> None:
    """Until the `expected` exclusive tests of this run have finished (on whichever worker), or `limit_s` passed."""
    deadline = time.monotonic() + limit_s
    while expected and time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError):
            if len((_shared_dir() / "exclusive.done").read_text().splitlines()) >= expected:
                return
        time.sleep(0.2)


@pytest.fixture(autouse=True)
def machine_share(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Under pytest-xdist (`bash dev.sh test` runs the suite on several workers), a test marked `exclusive` has the
    machine to itself: it asserts a wall-clock bound that another worker's compile would break. Every other test
    holds a shared lock; an exclusive one waits for the running ones to end and keeps new ones out (it takes the
    turnstile first, so a stream of shared tests cannot starve it). The exclusive tests run first and the others
    start after all of them. Without xdist there is nothing to share."""
    if not _WORKER:
        yield
        return
    root = tmp_path_factory.getbasetemp().parent  # shared by every worker of this run
    exclusive = _is_exclusive(request.node)
    if not exclusive:
        _wait_for_exclusive_phase(request.config.stash.get(_EXCLUSIVE_KEY, 0))
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
    """The MLP of tests/support/models.py saved with torch.export, shared read-only by the measurement tests."""
    from tests.support.models import export_to, mlp

    model, inputs = mlp()
    return export_to(tmp_path_factory.mktemp("mlp") / "mlp.pt2", model, inputs)


@pytest.fixture(scope="session")
def example_mlp_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`npu-advisor example mlp` (advisor.harness.examples), exported once per test worker and shared read-only by
    the service, CLI, calibration and end-to-end tests instead of each module exporting its own copy."""
    from advisor.harness.examples import export_example

    return export_example("mlp", tmp_path_factory.mktemp("example-mlp") / "mlp.pt2")


@pytest.fixture(scope="session")
def hostile_corpus(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """tests/support/hostile_corpus.py written once: {"cases", "marker", "decoy", "decoy_bytes"}. The decoy is a host
    file outside every sandbox that hostile TorchScript aims at; the marker appears only if a pickle ran."""
    from tests.support.hostile_corpus import build_corpus

    root = tmp_path_factory.mktemp("hostile")
    decoy = root / "host" / "decoy.bin"
    decoy.parent.mkdir()
    decoy.write_bytes(b"host file: must never change")
    marker = root / "host" / "MARKER"
    cases = build_corpus(root / "corpus", marker, decoy)
    return {"cases": cases, "marker": marker, "decoy": decoy, "decoy_bytes": decoy.read_bytes()}


# ------------------------------------------------------------------ one shared sandbox per test worker
# A test worker's zygote, shared by the tests' analyses and measurements instead of each starting their own (import
# torch, Dynamo, Inductor, the CPU probe: ~4-5 CPU-seconds, about a hundred times a run). Tests are trusted code,
# not jobs: a worker gives every job a sandbox of its own (workers.job_sandbox, tests/workers/test_job_sandbox.py). Its
# sandbox reads this worker's pytest temp directory, where the tests' models are; each measurement discards its work
# directory inside it when it ends. Tests marked `own_sandbox` (the hostile files: they show what a job's own sandbox
# lets a model see) and any call it cannot serve (another device, isolation or environment, a file elsewhere) get
# their own, as before.
_SHARED: list[Zygote] = []  # one, once a test asked for a zygote
_OWN_SANDBOX = [False]  # the running test is marked own_sandbox: the redirections below leave its calls alone


def pytest_sessionfinish(session: pytest.Session) -> None:
    for zygote in _SHARED:
        zygote.close()
    from tests.support import forked_script

    forked_script.close()
    for build in _HEADER_BUILD:
        with contextlib.suppress(subprocess.TimeoutExpired):
            build.wait(600)
    if not _WORKER:  # the run is over: its shared Inductor cache and its workers' shared directory go
        for path in (_CACHE, _SHARED_DIR):
            shutil.rmtree(path, ignore_errors=True)


def _shared_zygote(basetemp: Path) -> Zygote | None:
    if _SHARED and not _SHARED[0].start():  # it died (a test killed it): start another
        _SHARED.pop().close()
    if not _SHARED:
        _SHARED.append(_real_measurement_zygote("cpu", [str(basetemp)], inductor=True, onnx=True))
    return _SHARED[0] if _SHARED[0].start() else None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the test's fixtures are set up (module-scoped ones included): whether its sandboxes are its own."""
    _OWN_SANDBOX[0] = item.get_closest_marker("own_sandbox") is not None


@pytest.fixture(scope="session", autouse=True)
def shared_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The redirections below, installed for the whole session: a module- or session-scoped fixture that measures
    or inspects (set up before any function-scoped fixture) forks from the shared zygote as its tests would."""
    if os.environ.get("ADVISOR_TEST_OWN_SANDBOXES"):
        yield  # ADVISOR_TEST_OWN_SANDBOXES=1: every analysis starts its own, as `npu-advisor analyze` does
        return
    import advisor.harness.measurement
    import advisor.harness.measurement.run as run

    def shared_handle(device: str, readable) -> dict | None:  # noqa: ANN001
        """The shared zygote's handle when it can serve a child of `device` reading `readable`; else None."""
        from advisor.harness.isolation import resolve_isolation

        if _OWN_SANDBOX[0]:
            return None
        zygote = _shared_zygote(tmp_path_factory.getbasetemp()) if device == "cpu" else None
        serves = (
            zygote is not None
            and zygote.isolation.isolated
            and zygote.isolation == resolve_isolation()
            and zygote.covers([p for p in readable if p], [])
        )
        return zygote.handle() if serves else None

    def shared_or_own(device: str, readable=(), *, inductor: bool = True, onnx: bool = False):  # noqa: ANN001, ANN202
        handle = shared_handle(device, readable)
        if handle is None:
            return _real_measurement_zygote(device, readable, inductor=inductor, onnx=onnx)
        return Zygote.attach(handle)  # its close() lets go of it

    # `npu-advisor inspect` run in-process: its one child forks from the same zygote where it can, instead of
    # spawning an interpreter that imports torch (an analysis's inspection already does, through measurement_zygote)
    from advisor.harness import isolated_inspection

    own_inspection = isolated_inspection.inspect_isolated

    def inspect_in_shared(path: str, *, zygote=None, inputs_file=None, **options):  # noqa: ANN001, ANN003, ANN202
        files = [os.path.abspath(path), inputs_file and os.path.abspath(inputs_file)]
        handle = None if zygote is not None else shared_handle("cpu", files)
        if handle is None:
            return own_inspection(path, zygote=zygote, inputs_file=inputs_file, **options)
        with Zygote.attach(handle) as shared:
            return own_inspection(path, zygote=shared, inputs_file=inputs_file, **options)

    # the CLI's source front: its factory children fork from this worker's unconfined zygote where they can
    import advisor.harness.sandbox
    from tests.support import source_zygote

    own_run = advisor.harness.sandbox.run_in_sandbox
    forking = source_zygote.forking_source_probes(own_run, _HOME)

    def run_in_sandbox(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        return (own_run if _OWN_SANDBOX[0] else forking)(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run, "measurement_zygote", shared_or_own)
        patch.setattr(advisor.harness.measurement, "measurement_zygote", shared_or_own)
        patch.setattr(isolated_inspection, "inspect_isolated", inspect_in_shared)
        patch.setattr(advisor.harness.sandbox, "run_in_sandbox", run_in_sandbox)
        yield
