"""The one thing every job's sandbox receives from outside besides code: Inductor's trusted precompiled header
(advisor.harness.inductor_headers). It is state kept between jobs, so a job must not be able to carry anything
through it: the trusted build is read-only to jobs, and a job's own copy dies with its sandbox."""

from __future__ import annotations

import hashlib
from pathlib import Path

from advisor.harness.inductor_headers import NOT_INSTALLED
from advisor.harness.isolation import resolve_isolation
from advisor.harness.sandbox import run_in_sandbox
from tests.support.bubblewrap import require_bubblewrap
from workers.job_sandbox import JobSandboxes

TARGETS = "tests.workers.test_job_sandbox"
HERE = "tests.workers.test_job_sandbox_headers"


def installed_headers() -> Path:
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    return Path(default_cache_dir(), "precompiled_headers")


def header_digest(directory: str | None = None) -> dict[str, str]:
    root = Path(directory) if directory else installed_headers()
    skip = set(NOT_INSTALLED)  # what the zygote's probe reads, not copied in
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file() and not skip & set(p.relative_to(root).parts)
    }


def test_a_job_cannot_poison_the_header_the_next_job_compiles_against(tmp_path: Path):
    require_bubblewrap()
    from advisor.harness.inductor_headers import trusted_headers

    trusted = trusted_headers(resolve_isolation())
    assert trusted is not None
    expected = header_digest(trusted)
    assert expected
    pool = JobSandboxes("cpu", tmp_path / "work", inductor=True, spares=1)
    try:
        first = pool.take()
        assert first is not None
        options = {"zygote": first.zygote, "timeout_s": 120, "memory_limit_mb": None}
        tried = run_in_sandbox(f"{TARGETS}:overwrite_trusted_headers", {"directory": trusted}, **options)
        assert tried.status == "ok", tried
        assert set(tried.value["trusted"]) == {"Read-only file system"}  # the trusted build: read-only to jobs
        assert set(tried.value["own copy"]) == {"allowed"}  # its own copy: its to spoil, for itself alone
        second = pool.take()  # the first job ends, and its sandbox with it
        assert second is not None
        seen = run_in_sandbox(f"{HERE}:header_digest", {}, zygote=second.zygote, timeout_s=120, memory_limit_mb=None)
        assert seen.status == "ok" and seen.value == expected
        assert header_digest(trusted) == expected
    finally:
        pool.close()
