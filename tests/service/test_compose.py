"""docker/compose.yaml's `replicas` profile (issue 30 item 5) read as data: no Docker engine runs here, so these
check what a typo would break - every ADVISOR_* name the containers get is a setting (app/settings.py) and the
replicas' environment is one the server accepts for several replicas on an S3 store; the one address (nginx) names
the replica services; no credential sits on a command line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.settings import Settings, check_replica_settings
from app.storage import open_store

yaml = pytest.importorskip("yaml")

DOCKER = Path(__file__).resolve().parents[2] / "docker"
WORKER_ENV = {"ADVISOR_TOKEN"}  # read by the worker CLI (advisor.cli.client.TOKEN_ENV), not a server setting
REPLICAS = ("api-a", "api-b")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def expand(value: str) -> str:
    """Compose's `${NAME:-default}` with the default (what a trial run without an .env file gets)."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", str(value))


def test_the_replicas_profile_has_the_store_two_replicas_one_address_and_a_worker(compose):
    services = compose["services"]
    profile = {name for name, service in services.items() if "replicas" in service.get("profiles", ())}
    assert profile == {"minio", "minio-bucket", "api-a", "api-b", "api-lb", "replica-worker"}
    assert "profiles" not in services["postgres"], "the replicas share the default profile's PostgreSQL"
    for name in REPLICAS:
        assert services[name]["depends_on"]["postgres"] == {"condition": "service_healthy"}
        assert services[name]["depends_on"]["minio-bucket"] == {"condition": "service_completed_successfully"}
        assert "ports" not in services[name], "reached through the one address only"
    assert services["api-lb"]["ports"] == ["8080:8080"]
    assert services["replica-worker"]["command"][:2] == ["--server", "http://api-lb:8080"]


def test_every_advisor_name_is_a_setting_and_the_replicas_environment_is_accepted(compose, monkeypatch, tmp_path):
    fields = {f"ADVISOR_{name.upper()}" for name in Settings.model_fields}
    for name, service in compose["services"].items():
        unknown = {key for key in service.get("environment", {}) if key.startswith("ADVISOR_")} - fields - WORKER_ENV
        assert not unknown, f"{name}: not settings: {sorted(unknown)}"

    for name in REPLICAS:
        environment = {key: expand(value) for key, value in compose["services"][name]["environment"].items()}
        for key, value in environment.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("ADVISOR_DATA_DIR", str(tmp_path))
        settings = Settings()
        assert settings.api_replicas == 2 and settings.resolved_database_url.startswith("postgresql+psycopg://")
        check_replica_settings(settings)  # several replicas: PostgreSQL, accepted
        store = open_store(settings)  # boto3 client only: nothing is contacted
        assert (store.kind, store.describe()) == ("s3", "s3://advisor/team/")
        assert environment["AWS_SECRET_ACCESS_KEY"] == expand("${MINIO_ROOT_PASSWORD:-advisor-minio-secret}")
    minio = compose["services"]["minio"]["environment"]
    bucket = compose["services"]["minio-bucket"]
    assert bucket["entrypoint"][-1] == "store/" + Settings().artifact_store.removeprefix("s3://").split("/")[0]
    assert set(minio) == {"MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD"}


def test_no_credential_on_a_command_line(compose):
    for name, service in compose["services"].items():
        for key in ("command", "entrypoint"):
            line = " ".join(map(str, service.get(key) or []))
            assert not re.search(r"PASSWORD|SECRET|TOKEN|npa_|://[^/]*:[^/]*@", line, re.I), (name, key, line)


def test_the_one_address_sends_to_both_replicas_and_streams_uploads(compose):
    conf = (DOCKER / "replicas-nginx.conf").read_text()
    upstreams = re.findall(r"^\s*server\s+([\w-]+):(\d+)", conf, re.M)
    assert upstreams == [(name, "8000") for name in REPLICAS]
    assert "client_max_body_size 0;" in conf and "proxy_request_buffering off;" in conf
    mounted = compose["services"]["api-lb"]["volumes"][0].split(":")[0]
    assert (DOCKER / mounted).resolve() == (DOCKER / "replicas-nginx.conf").resolve()
