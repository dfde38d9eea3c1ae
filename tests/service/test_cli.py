"""`npu-advisor db upgrade` and `npu-advisor token create`."""

from __future__ import annotations

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from advisor.cli import app as cli
from app.settings import get_settings


def run_cli(monkeypatch, data_dir, *args: str):  # noqa: ANN001, ANN201
    monkeypatch.setenv("ADVISOR_DATA_DIR", str(data_dir))
    get_settings.cache_clear()
    try:
        return CliRunner().invoke(cli, list(args))
    finally:
        get_settings.cache_clear()


def test_db_upgrade_creates_then_reports_up_to_date(monkeypatch, tmp_path):
    first = run_cli(monkeypatch, tmp_path, "db", "upgrade")
    assert first.exit_code == 0 and "upgraded from empty" in first.output
    second = run_cli(monkeypatch, tmp_path, "db", "upgrade")
    assert second.exit_code == 0 and "already up to date" in second.output


def test_token_create_prints_a_token_the_server_accepts(monkeypatch, tmp_path, make_app, settings):
    result = run_cli(monkeypatch, settings.data_dir, "token", "create", "--role", "user", "--name", "ci")
    assert result.exit_code == 0, result.output
    token = result.stdout.strip().splitlines()[0]
    with TestClient(make_app(require_auth=True)) as client:
        assert client.get("/api/v1/analyses", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        assert client.get("/api/v1/analyses").status_code == 401


def test_token_create_refuses_an_unknown_role(monkeypatch, tmp_path):
    result = run_cli(monkeypatch, tmp_path, "token", "create", "--role", "root")
    assert result.exit_code == 2


def test_token_revoke_stops_the_token_working(monkeypatch, tmp_path, make_app, settings):
    created = run_cli(monkeypatch, settings.data_dir, "token", "create", "--role", "user", "--name", "leaver")
    token = created.stdout.strip().splitlines()[0]
    listed = run_cli(monkeypatch, settings.data_dir, "token", "list")
    assert listed.exit_code == 0 and "leaver" in listed.stdout and token not in listed.stdout
    token_id = next(line.split("\t")[0] for line in listed.stdout.splitlines() if "leaver" in line)
    revoked = run_cli(monkeypatch, settings.data_dir, "token", "revoke", token_id)
    assert revoked.exit_code == 0, revoked.output
    with TestClient(make_app(require_auth=True)) as client:
        assert client.get("/api/v1/analyses", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    assert run_cli(monkeypatch, settings.data_dir, "token", "revoke", "9999").exit_code == 1
