"""`npu-advisor worker` refuses to run model children unconfined unless told to, and takes no token on argv."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from advisor.cli import app

runner = CliRunner()


@pytest.fixture
def no_bubblewrap(monkeypatch: pytest.MonkeyPatch) -> None:
    import advisor.harness.isolation as isolation

    monkeypatch.setattr(isolation.shutil, "which", lambda name: None)


def test_a_worker_that_cannot_isolate_refuses_to_start(no_bubblewrap, monkeypatch) -> None:
    monkeypatch.delenv("ADVISOR_ISOLATION", raising=False)
    result = runner.invoke(app, ["worker", "--server", "http://127.0.0.1:9"], env={"ADVISOR_TOKEN": "t"})
    assert result.exit_code == 2
    assert "cannot isolate model children" in result.output and "bubblewrap is not installed" in result.output
    assert "--no-isolation" in result.output


def test_no_isolation_is_registered_with_the_server(no_bubblewrap, monkeypatch) -> None:
    """With --no-isolation it starts, and what it registers says so (the queue page shows 'not isolated')."""
    import workers.agent
    import workers.capabilities
    from workers.capabilities import Capabilities

    seen: dict = {}

    class StopAfterConfig:
        def __init__(self, api, config) -> None:  # noqa: ANN001
            seen["environment"] = config.environment

        def install_signal_handlers(self) -> None:
            pass

        def run(self) -> int:
            return 0

    caps = Capabilities(device_kind="cpu", backends=["eager"], unavailable={}, environment={"device_name": "cpu"})
    monkeypatch.setattr(workers.capabilities, "detect_capabilities", lambda device, only: caps)
    monkeypatch.setattr(workers.agent, "WorkerAgent", StopAfterConfig)
    monkeypatch.setenv("ADVISOR_ISOLATION", "auto")
    result = runner.invoke(
        app, ["worker", "--server", "http://127.0.0.1:9", "--no-isolation"], env={"ADVISOR_TOKEN": "t"}
    )
    assert result.exit_code == 0, result.output
    assert seen["environment"]["isolation"]["kind"] == "none"
    assert "isolation: none" in result.output


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    token = tmp_path / "worker.token"
    token.write_text("wkr_123\n")
    token.chmod(0o644)
    result = runner.invoke(app, ["worker", "--server", "http://127.0.0.1:9", "--token-file", str(token)])
    assert result.exit_code == 2 and "readable by others" in result.output
    assert "wkr_123" not in result.output


def test_there_is_no_token_option_on_the_command_line() -> None:
    result = runner.invoke(app, ["worker", "--server", "http://127.0.0.1:9", "--token", "wkr_123"])
    assert result.exit_code == 2 and "No such option" in result.output
