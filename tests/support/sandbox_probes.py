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


def inherited_inductor_setup(compile_after: bool) -> dict:
    """What this forked child inherited of Inductor's once-per-process setup from its zygote (the CPU-feature probe,
    the pattern tables), its threads, and - with `compile_after` - whether a compile then built pattern tables of its
    own and matched eager (without the inherited probe a compile first runs it: ~10 s of g++ unconfined)."""
    import threading

    import torch
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list
    from torch._inductor.fx_passes import joint_graph, post_grad

    tables = (joint_graph.lazy_init, post_grad.lazy_init)
    seen = {
        "vec_isa": valid_vec_isa_list.cache_info().currsize > 0,
        "patterns": [table.cache_info().currsize for table in tables],
        "threads": threading.active_count(),
    }
    if not compile_after:
        return seen
    misses = [table.cache_info().misses for table in tables]
    x = torch.randn(8, 16)
    with torch.no_grad():
        compiled = torch.compile(lambda t: torch.relu(t @ t.T).sum(dim=1))(x)
    seen["matches_eager"] = bool(torch.allclose(compiled, torch.relu(x @ x.T).sum(dim=1), atol=1e-5))
    seen["tables_built_by_the_compile"] = [t.cache_info().misses - m for t, m in zip(tables, misses, strict=True)]
    return seen


def probe_keyrings(host_key: int, host_description: str, leave_description: str) -> dict:
    """Every way a job could reach the host's kernel keys or leave one for the next job: the kernel's answers
    (a serial, a payload, or -errno) and whether /proc/keys names the host's key."""
    from tests.support import keyrings as k

    payload = k.read_key(host_key)
    rings = {
        "session": k.KEY_SPEC_SESSION_KEYRING,
        "user": k.KEY_SPEC_USER_KEYRING,
        "user_session": k.KEY_SPEC_USER_SESSION_KEYRING,
    }
    seen = {
        "read_host_key": payload.decode(errors="replace") if isinstance(payload, bytes) else payload,
        "request_host_key": k.request_user_key(host_description),
        "link_user_keyring": k.keyctl(k.KEYCTL_LINK, k.KEY_SPEC_USER_KEYRING, k.KEY_SPEC_SESSION_KEYRING),
        "join_session_keyring": k.join_session_keyring(None),
        "proc_keys_names_host_key": k.listed(host_description),
    }
    for name, ring in rings.items():
        seen[f"search_{name}"] = k.search(ring, host_description)
        seen[f"add_{name}"] = k.add_user_key(leave_description, b"left by a job", ring)
    return seen


def keyring_view(description: str) -> dict:
    """Without the seccomp filter (the session keyring as the only wall): this process's session keyring, whether
    it finds a key so described there, and the key it adds there for the next one to look for."""
    from tests.support import keyrings as k

    return {
        "session": k.session_keyring(),
        "found": k.search(k.KEY_SPEC_SESSION_KEYRING, description),
        "added": k.add_user_key(description, b"left by a job", k.KEY_SPEC_SESSION_KEYRING),
    }


def _deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def send_deep_progress(levels: int, then_sleep_s: float) -> None:
    """A progress event, then a progress line `levels` deep written raw (json.dumps would refuse it), then a hang:
    the parent must stop it at once rather than at its timeout."""
    import time

    from advisor.harness import sandbox

    sandbox.report_progress({"stage": "before", "iterations": 1})
    fd = sandbox._progress_fd
    assert fd is not None
    os.write(fd, b'{"stage": "deep", "value": ' + _deep(levels) + b"}\n")
    time.sleep(then_sleep_s)


def send_deep_result(levels: int) -> None:
    """A result document `levels` deep, written raw to the result pipe (found as a hostile child would: the one pipe
    it holds besides its output and progress), then a clean exit."""
    from advisor.harness import sandbox

    document = b'{"status": "ok", "value": ' + _deep(levels) + b"}"
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd in (0, 1, 2, sandbox._progress_fd):
            continue
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                os.write(fd, document)
        except OSError:
            continue
    os._exit(0)


def torch_free_preload(**_kwargs: object) -> None:
    """A zygote preload that imports nothing: for tests of what a job's sandbox confines, which bubblewrap, the
    seccomp filter and the zygote's own code decide and torch's import does not (tests/workers/test_job_sandbox.py)."""


def onnx_exporter_setup(export_to: str | None) -> dict:
    """Whether this forked child inherited the ONNX exporter's setup from its zygote (onnxscript's torch library
    loaded), its threads, and - given a path - whether an export then works."""
    import sys
    import threading

    seen = {"torchlib": "onnxscript.function_libs.torch_lib.ops" in sys.modules, "threads": threading.active_count()}
    if export_to:
        import torch

        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()).eval()
        torch.onnx.export(model, (torch.randn(2, 4),), export_to, dynamo=True)
        seen["exported"] = Path(export_to).stat().st_size > 0
    return seen
