"""`npu-advisor analyze FILE --server URL` run through the CLI with the remote call captured: what the CLI would
submit (context, backends, token, ...), without a server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from advisor.cli import app

SERVER = "http://advisor.example:8000"


def server_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *extra: str) -> tuple[Any, dict[str, Any]]:
    """(the CLI's result, the keyword arguments `analyze_remote` got) for `analyze m.pt2 --server SERVER
    --token-file F *extra`; the token file holds "t0k"."""
    import advisor.cli.remote

    model = tmp_path / "m.pt2"
    model.write_bytes(b"x")
    seen: dict[str, Any] = {}

    def fake_remote(**kwargs: Any) -> int:
        seen.update(kwargs)
        return 0

    monkeypatch.setattr(advisor.cli.remote, "analyze_remote", fake_remote)
    token_file = tmp_path / "token"
    token_file.write_text("t0k\n")
    token_file.chmod(0o600)
    args = ["analyze", str(model), "--server", SERVER, "--token-file", str(token_file)]
    return CliRunner().invoke(app, [*args, *extra]), seen
