"""Sandbox targets that try what a hostile model would try, and report what happened (tests/harness/test_isolation.py).

Each returns a dict of observations instead of asserting, so the test in the parent judges them."""

from __future__ import annotations

import os
import socket
from pathlib import Path


def _attempt(action) -> str:  # noqa: ANN001 - a zero-argument callable
    try:
        action()
    except OSError as exc:
        return f"refused: {type(exc).__name__}: {exc.strerror or exc}"
    return "allowed"


def probe_host(secret_file: str, readable_file: str, scratch_file: str, project_data: str, port: int) -> dict:
    """Identity, what it can read and write, which processes it sees, whether it can reach the network."""
    status = Path("/proc/self/status").read_text()
    caps = next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:"))

    def connect() -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass

    def overwrite_readable() -> None:
        with open(readable_file, "r+b") as fh:
            fh.write(b"X")

    def write_system() -> None:
        Path("/usr/npu-advisor-was-here").write_text("x")

    return {
        "uid": os.getuid(),
        "capabilities": caps,
        "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
        "environment": dict(os.environ),
        "read_secret": _attempt(lambda: Path(secret_file).read_bytes()),
        "read_readable": Path(readable_file).read_text(),
        "write_readable": _attempt(overwrite_readable),
        "write_system": _attempt(write_system),
        "write_scratch": _attempt(lambda: Path(scratch_file).write_text("scratch")),
        "list_project_data": _attempt(lambda: os.listdir(project_data)),
        "read_shadow": _attempt(lambda: Path("/etc/shadow").read_bytes()),
        "network": _attempt(connect),
        "interfaces": sorted(name for _, name in socket.if_nameindex()),
    }


def compile_with_inductor_headers() -> dict:
    """Which precompiled headers this sandbox holds before and after one Inductor compile, and whether it can
    write to the trusted copy it was handed (advisor.harness.inductor_headers)."""
    import torch
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    folder = Path(default_cache_dir()) / "precompiled_headers"

    def listing() -> list[str]:
        if not folder.is_dir():
            return []
        return sorted(p.name for p in folder.glob("*") if p.name != "locks" and not p.name.startswith("."))

    from torch._inductor.cpu_vec_isa import pick_vec_isa, valid_vec_isa_list

    inherited_probe = valid_vec_isa_list.cache_info().currsize > 0  # the zygote probed the CPU before forking us
    before = listing()
    torch.compile(lambda x: (x * 3).cos().sum(dim=0))(torch.randn(4, 32))
    return {"before": before, "after": listing(), "vec_isa": str(pick_vec_isa()), "inherited_probe": inherited_probe}


def overwrite_file(path: str) -> str:
    def write() -> None:
        with open(path, "r+b") as fh:
            fh.write(b"poisoned")

    return _attempt(write)


def vec_isa_probed() -> bool:
    """Whether this forked child inherited Inductor's CPU-feature probe from its zygote (no compile here)."""
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list

    return valid_vec_isa_list.cache_info().currsize > 0
