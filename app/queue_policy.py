"""The queue's timing policy: leases, attempts, backoff and when a worker counts as lost.

Its defaults are the server's (app.settings reads them from here, so each is written once); tests and benchmarks
build their own."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class QueuePolicy:
    lease_ttl_s: float = 60
    max_attempts: int = 3
    backoff_base_s: float = 15
    backoff_cap_s: float = 600
    backoff_jitter: float = 0.1
    worker_lost_after_s: float = 90
    max_releases: int = 5  # the max_releases-th graceful release of one job sends it to the dead letter

    @classmethod
    def of(cls, settings: Any) -> QueuePolicy:
        """The policy `settings` (app.settings.Settings) configures: each field read from the setting of its name."""
        return cls(**{policy_field.name: getattr(settings, policy_field.name) for policy_field in fields(cls)})
