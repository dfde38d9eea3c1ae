"""Server settings: one pydantic-settings class read from `ADVISOR_*` environment variables."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.queue_policy import QueuePolicy
from app.service_errors import ErrorCode, ServiceError

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


class Settings(BaseSettings):
    """Everything the server can be configured with. Tests build their own instance."""

    model_config = SettingsConfigDict(env_prefix="ADVISOR_", env_ignore_empty=True, extra="ignore")

    data_dir: Path = Path("./data")
    database_url: str | None = None  # default: sqlite:///<data_dir>/advisor.db
    host: str = "127.0.0.1"
    port: int = 8000
    require_auth: bool | None = None  # None: required exactly when `host` is not loopback
    # the embedded worker's token for `npu-advisor serve` (app.worker_token); None: serve keeps its own
    worker_token: SecretStr | None = None

    max_upload_mb: float = 4096  # the model file
    max_inputs_mb: float = 1024  # the optional inputs file
    max_results_mb: float = 16  # a worker's results (POST /jobs/{id}/complete)
    max_json_mb: float = 1  # every other JSON body
    # open loopback mode answers only loopback Host names (DNS rebinding); more names, comma-separated
    allowed_hosts: str = ""
    # how many API processes serve this database and store (several hosts behind one address); more than one needs
    # PostgreSQL (refused on SQLite) and, unless the data dir is shared, object storage (artifact_store)
    api_replicas: int = 1
    # where uploads are stored: empty = <data_dir>/artifacts; "s3://bucket/prefix" = S3-compatible object storage
    # (app.object_store), credentials from boto3's usual chain (AWS_* environment, ~/.aws files, instance role)
    artifact_store: str = ""
    s3_endpoint_url: str | None = None  # MinIO / Ceph RGW / a test server; None: AWS
    s3_region: str | None = None
    s3_addressing_style: str = "auto"  # "path" for most MinIO setups
    artifact_url_ttl_s: float = 900  # the presigned URL a worker gets with a job: valid this long, one object
    # multipart uploads / incoming objects a killed server left: removed when older (another replica may be writing)
    s3_incomplete_min_age_s: float = 3600
    cache_window_s: float = 7 * 24 * 3600  # identical submissions inside it are deduplicated

    heartbeat_interval_s: float = 10
    poll_timeout_s: float = 25
    claim_poll_interval_s: float = 0.5
    reaper_interval_s: float = 15
    # the queue's policy (app.queue_policy, where the defaults are): QueuePolicy.of(settings) reads these
    lease_ttl_s: float = QueuePolicy.lease_ttl_s
    max_attempts: int = QueuePolicy.max_attempts
    backoff_base_s: float = QueuePolicy.backoff_base_s
    backoff_cap_s: float = QueuePolicy.backoff_cap_s
    backoff_jitter: float = QueuePolicy.backoff_jitter
    worker_lost_after_s: float = QueuePolicy.worker_lost_after_s
    max_releases: int = QueuePolicy.max_releases  # that many graceful releases of one job dead-letter it

    # saturation (app.admission, app.db): beyond these the server answers 503/429 with Retry-After
    max_concurrent_uploads: int = 8  # uploads received at once; more: 503
    max_uploads_per_client: int = 4  # at once per token (or address without one); more: 429. 0: no per-client cap
    retry_after_s: int = 2  # the Retry-After of a 503/429 (clients add jitter)
    # a refused request's body (503/429, and every 401/403/413/421 sent before the body: app.lingering) is read and
    # dropped after the answer (so the client, still sending, reads it), up to this much and this long; then the
    # connection is closed anyway
    refused_upload_linger_mb: float = 64
    refused_upload_linger_s: float = 30
    db_write_wait_s: float = 5  # SQLite: how long a write waits for the process's write gate; then 503
    db_max_write_waiting: int = 16  # SQLite: writes queued for the gate beyond which a write is refused at once
    db_pool_size: int = 10
    db_max_overflow: int = 30
    db_pool_timeout_s: float = 5  # no free connection within it: 503
    # stored files no artifact row refers to (a submission that failed after storing its file) are removed
    # once older than orphan_min_age_s, at start and every orphan_sweep_interval_s
    orphan_min_age_s: float = 600
    orphan_sweep_interval_s: float = 600

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'advisor.db'}"

    @property
    def artifacts_dir(self) -> Path:
        return self.data_dir / "artifacts"

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 1024 * 1024)

    @property
    def max_inputs_bytes(self) -> int:
        return int(self.max_inputs_mb * 1024 * 1024)


class ReplicaSettingsError(ServiceError, RuntimeError):
    """Settings that several API replicas cannot run with; the message says what to set."""

    code = ErrorCode.MISCONFIGURED


def check_replica_settings(settings: Settings) -> None:
    """Refuse what several replicas cannot share (raises ReplicaSettingsError): SQLite is one host's file."""
    if settings.api_replicas <= 1:
        return
    if settings.resolved_database_url.startswith("sqlite"):
        raise ReplicaSettingsError(
            f"ADVISOR_API_REPLICAS={settings.api_replicas} needs PostgreSQL: SQLite is a file on one host, which "
            "replicas on other hosts cannot share. Set ADVISOR_DATABASE_URL=postgresql+psycopg://user@host/db "
            "(pip install 'npu-advisor[postgres]'), or run one API process (ADVISOR_API_REPLICAS=1)."
        )


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings from the environment (tests pass their own to `create_app`)."""
    return Settings()


@dataclass(frozen=True)
class AuthMode:
    required: bool
    message: str  # one line the serve command logs at start


def auth_mode(settings: Settings) -> AuthMode:
    """Decide whether bearer tokens are required, and say why (the serve command logs this)."""
    loopback = settings.host in LOOPBACK_HOSTS
    if settings.require_auth is not None:
        required = settings.require_auth
        why = "ADVISOR_REQUIRE_AUTH is set"
    else:
        required = not loopback
        why = f"listening on {settings.host}"
    if required:
        return AuthMode(True, f"auth: bearer tokens required ({why}); create one with `npu-advisor token create`")
    if not loopback:
        return AuthMode(False, f"auth: OPEN on {settings.host} because ADVISOR_REQUIRE_AUTH=false - anyone can use it")
    return AuthMode(False, f"auth: open ({why}, loopback only); tokens are required when listening beyond loopback")
