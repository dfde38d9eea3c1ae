"""Inductor's precompiled header for sandboxed jobs (advisor.harness.inductor_headers): built once by trusted code,
handed to every job's sandbox as a private copy, never writable from a job."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from advisor.harness import inductor_headers
from advisor.harness.inductor_headers import CACHE_ENV, VEC_ISA_FILE, trusted_headers
from advisor.harness.isolation import NO_ISOLATION, Isolation
from advisor.harness.sandbox import Zygote, run_in_sandbox
from tests.support.bubblewrap import require_bubblewrap
from tests.support.job_zygote import run_in_job_zygote

pytestmark = [pytest.mark.slow, pytest.mark.own_sandbox]  # how a job's own zygote gets the header


def test_unconfined_children_use_the_hosts_own_cache() -> None:
    assert trusted_headers(NO_ISOLATION) is None


def test_jobs_starting_together_on_a_fresh_node_build_the_header_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several workers of one node starting their first jobs at once: one builds, the others wait and use its copy
    (each build is ~30 s of g++ on a 2-core node)."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "header-cache"))
    builds: list[Path] = []

    def slow_build(isolation: Isolation, target: Path) -> str:
        builds.append(target)
        time.sleep(0.5)
        (target / "precompiled_headers").mkdir(parents=True)
        (target / ".complete").touch()
        return str(target / "precompiled_headers")

    monkeypatch.setattr(inductor_headers, "_build", slow_build)
    sandboxed = Isolation(kind="bubblewrap", bwrap="/usr/bin/bwrap")
    found: list[str | None] = []
    threads = [threading.Thread(target=lambda: found.append(trusted_headers(sandboxed))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1 and len(found) == 4 and len(set(found)) == 1 and found[0] is not None


def test_a_sandboxed_job_compiles_against_the_trusted_header_and_cannot_change_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The node's own cache, as a worker uses it: built by the first sandboxed job on this machine (this test or
    # another of the run, ~30 s of g++ once), reused after. How concurrent first jobs build it once:
    # test_jobs_starting_together_on_a_fresh_node_build_the_header_once.
    isolation = require_bubblewrap()
    headers = trusted_headers(isolation)
    assert headers is not None
    built = sorted(p.name for p in Path(headers).iterdir())
    assert any(name.endswith(".gch") for name in built), built
    assert trusted_headers(isolation) == headers, "built once, then reused"
    snapshot = {p: p.read_bytes()[:4096] for p in Path(headers).iterdir() if p.is_file()}

    with Zygote(
        "advisor.harness.measurement.child:preload",
        {"device": "cpu", "trusted_headers": headers, "compiles_inductor": True},
        isolation=isolation,
        readable=[headers],
    ) as zygote:
        seen = run_in_sandbox(
            "tests.support.sandbox_probes:compile_with_inductor_headers",
            {},
            timeout_s=300,
            memory_limit_mb=None,
            zygote=zygote,
        )
        gch = next(p for p in snapshot if p.name.endswith(".gch"))
        poison = run_in_sandbox(
            "tests.support.sandbox_probes:overwrite_file",
            {"path": str(gch)},
            timeout_s=120,
            memory_limit_mb=None,
            zygote=zygote,
            readable=[headers],
        )
    assert seen.status == "ok", seen
    assert seen.value["before"] == [name for name in built if not name.startswith(".")], "copied in before compiling"
    built_for = (Path(headers) / VEC_ISA_FILE).read_text()
    assert seen.value["vec_isa"] == built_for, "the job's compiler flags differ from the trusted build's"
    assert seen.value["inherited_probe"], "the zygote ran Inductor's CPU-feature probe once for every variant"
    assert seen.value["after"] == seen.value["before"], "the compile reused the copy instead of building another"
    assert poison.status == "ok" and poison.value.startswith("refused"), poison
    assert {p: p.read_bytes()[:4096] for p in snapshot} == snapshot


@pytest.mark.parametrize("compiles_inductor", [True, False])
def test_an_unconfined_job_that_compiles_probes_the_cpu_once_in_its_zygote(compiles_inductor: bool) -> None:
    """Without a sandbox there is no trusted build to load the probe from: the zygote of a job that compiles with
    Inductor builds it once for all its variants (each paid ~4.7 s in its cold compile), one that does not never.
    The same zygote builds Inductor's pattern tables (advisor.harness.inductor_setup): a variant's compile then
    builds none and gives eager's numbers; and it leaves no thread running (it forks)."""
    seen = run_in_job_zygote(
        {"device": "cpu", "trusted_headers": None, "compiles_inductor": compiles_inductor},
        "tests.support.sandbox_probes:inherited_inductor_setup",
        {"compile_after": compiles_inductor},
    )
    assert seen.status == "ok", seen
    assert seen.value["vec_isa"] is compiles_inductor
    assert seen.value["patterns"] == ([1, 1] if compiles_inductor else [0, 0])
    assert seen.value["threads"] == 1, "a zygote forks from one thread"
    if compiles_inductor:
        assert seen.value["matches_eager"] and seen.value["tables_built_by_the_compile"] == [0, 0]
