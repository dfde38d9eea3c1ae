"""Layer 2 on its own: a child in the bubblewrap sandbox cannot reach the host, whatever code it runs."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from advisor.harness.isolation import NO_ISOLATION, IsolationUnavailable, resolve_isolation
from advisor.harness.sandbox import Zygote, run_in_sandbox
from tests.support.bubblewrap import require_bubblewrap

PROBE = "tests.support.sandbox_probes:probe_host"


@pytest.fixture(scope="module")
def bubblewrap():
    return require_bubblewrap()


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A secret the child must not see, a model file it may only read, a listening socket it must not reach."""
    secret = tmp_path / "secret" / "worker.token"
    secret.parent.mkdir()
    secret.write_text("wkr_secret")
    model = tmp_path / "models" / "model.pt2"
    model.parent.mkdir()
    model.write_text("model bytes")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    data = tmp_path / "server-data"
    data.mkdir()
    (data / "advisor.db").write_text("db")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    monkeypatch.setenv("ADVISOR_TOKEN", "wkr_secret_in_env")
    kwargs = {
        "secret_file": str(secret),
        "readable_file": str(model),
        "scratch_file": str(scratch / "out"),
        "project_data": str(data),
        "port": listener.getsockname()[1],
    }
    yield {"kwargs": kwargs, "model": model, "scratch": scratch}
    listener.close()


def _check_confined(seen: dict, host: dict) -> None:
    assert seen["uid"] == 65534, "the child runs as the unprivileged sandbox uid"
    assert int(seen["capabilities"], 16) == 0, "the child holds no capabilities"
    assert os.getpid() not in seen["pids"] and max(seen["pids"]) < 100, "own PID namespace: the worker is invisible"
    assert "ADVISOR_TOKEN" not in seen["environment"], "no token in the child's environment"
    assert seen["read_secret"].startswith("refused"), "files outside the bound paths do not exist for it"
    assert seen["list_project_data"].startswith("refused"), "the server's data directory is not visible"
    assert seen["read_shadow"].startswith("refused"), "/etc is only its harmless parts"
    assert seen["read_readable"] == "model bytes", "the model file is readable"
    assert seen["write_readable"].startswith("refused"), "...but read-only"
    assert seen["write_system"].startswith("refused"), "system directories are read-only"
    assert seen["network"].startswith("refused") and seen["interfaces"] == ["lo"], "no network"
    assert host["model"].read_text() == "model bytes"


def test_a_spawned_child_is_confined(bubblewrap, host) -> None:
    result = run_in_sandbox(
        PROBE,
        host["kwargs"],
        timeout_s=60,
        memory_limit_mb=None,
        isolation=bubblewrap,
        readable=[str(host["model"])],
        writable=[str(host["scratch"])],
    )
    assert result.status == "ok", result
    _check_confined(result.value, host)
    assert result.value["write_scratch"] == "allowed", "its scratch directory is writable"
    assert (host["scratch"] / "out").read_text() == "scratch"


def test_a_child_forked_from_an_isolated_zygote_is_confined(bubblewrap, host) -> None:
    with Zygote(
        "tests.support.backends_for_tests:echo", {"value": None}, isolation=bubblewrap, readable=[str(host["model"])]
    ) as zygote:
        result = run_in_sandbox(
            PROBE, host["kwargs"], timeout_s=60, memory_limit_mb=None, zygote=zygote, readable=[str(host["model"])]
        )
    assert result.status == "ok", result
    _check_confined(result.value, host)
    assert result.value["write_scratch"].startswith("refused"), "only the zygote's own scratch is writable"


def test_without_isolation_the_same_probe_sees_the_host(host) -> None:
    """The control: the probe really detects access, so the confined results above mean something."""
    result = run_in_sandbox(PROBE, host["kwargs"], timeout_s=60, memory_limit_mb=None, isolation=NO_ISOLATION)
    assert result.status == "ok", result
    assert result.value["read_secret"] == "allowed" and result.value["network"] == "allowed"
    assert result.value["write_readable"] == "allowed"


def test_isolation_required_but_missing_is_an_error_not_a_silent_fallback(monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    import advisor.harness.isolation as isolation

    monkeypatch.setattr(isolation.shutil, "which", lambda name: None)
    with pytest.raises(IsolationUnavailable, match="not installed"):
        resolve_isolation("bubblewrap")
    auto = resolve_isolation("auto")
    assert auto.kind == "none" and "not installed" in (auto.note or "")


def test_bubblewrap_older_than_0_8_still_isolates_without_the_flags_it_lacks() -> None:
    """Ubuntu 22.04 ships bubblewrap 0.6: `--size` and `--disable-userns` would make every sandbox fail to start."""
    from advisor.harness.isolation import Isolation

    old = Isolation("bubblewrap", "/usr/bin/bwrap", "0.6.1").command(["true"], writable=[])
    new = Isolation("bubblewrap", "/usr/bin/bwrap", "0.8.0").command(["true"], writable=[])
    assert "--size" not in old and "--disable-userns" not in old and "--remount-ro" in old
    assert new.count("--size") == 2 and "--disable-userns" in new


@pytest.mark.parametrize("ci", ["true", ""])
def test_a_sandbox_test_without_bubblewrap_fails_in_ci_and_skips_elsewhere(monkeypatch, ci: str) -> None:
    """A CI run without bubblewrap would otherwise be green while confinement goes unchecked."""
    import advisor.harness.isolation as isolation

    monkeypatch.setattr(isolation.shutil, "which", lambda name: None)
    monkeypatch.setenv("CI", ci)
    outcome = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(outcome, match="bubblewrap is not installed") as stopped:
        require_bubblewrap()
    assert ("CI=true" in str(stopped.value)) == bool(ci)
