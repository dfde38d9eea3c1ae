"""An in-memory fake of the server's worker protocol, served through httpx.MockTransport.

It keeps the state the worker's behaviour depends on (leases, cancel flags, what was uploaded) and
lets a test inject failures per route: `server.inject("complete", 503, 503)` makes the next two
complete calls answer 503; `httpx.ReadTimeout` instances are raised instead of answered.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
import uuid
from collections import defaultdict, deque
from typing import Any

import httpx

ROUTES = [
    ("register", "POST", r"/api/v1/workers/register"),
    ("claim", "POST", r"/api/v1/workers/(?P<worker>[^/]+)/claim"),
    ("deregister", "POST", r"/api/v1/workers/(?P<worker>[^/]+)/deregister"),
    ("heartbeat", "POST", r"/api/v1/jobs/(?P<job>[^/]+)/heartbeat"),
    ("complete", "POST", r"/api/v1/jobs/(?P<job>[^/]+)/complete"),
    ("ranked", "POST", r"/api/v1/jobs/(?P<job>[^/]+)/ranked"),
    ("fail", "POST", r"/api/v1/jobs/(?P<job>[^/]+)/fail"),
    ("cancelled", "POST", r"/api/v1/jobs/(?P<job>[^/]+)/cancelled"),
    ("artifact", "GET", r"/api/v1/artifacts/(?P<sha>[0-9a-f]+)"),
]

ARTIFACT = b"PK\x05\x06" + b"\x00" * 18  # the worker never opens it in these tests; only its sha256 matters
ARTIFACT_SHA = hashlib.sha256(ARTIFACT).hexdigest()
_JOB_IDS = itertools.count(1001)


class FakeServer:
    def __init__(self, *, heartbeat_interval_s: float = 0.2, lease_ttl_s: float = 5.0, token: str = "w-token") -> None:
        self.token = token
        self.heartbeat_interval_s = heartbeat_interval_s
        self.lease_ttl_s = lease_ttl_s
        self.queue: deque[dict[str, Any]] = deque()
        self.leases: dict[str, str] = {}  # job id -> current lease token
        self.cancel: set[str] = set()
        self.calls: list[tuple[str, dict[str, Any]]] = []  # (route, parsed body), in order
        self.faults: dict[str, deque[Any]] = defaultdict(deque)
        self.lock = threading.Lock()
        self.transport = httpx.MockTransport(self.handle)

    # ---------------------------------------------------------------- test API
    def add_job(self, **fields: Any) -> dict[str, Any]:
        job = {
            "id": fields.pop("id", str(next(_JOB_IDS))),  # the server's ids are numbers; the routes carry them as text
            "analysis_id": 1,
            "attempt": 1,
            "artifact_sha256": ARTIFACT_SHA,
            "artifact_url": f"/api/v1/artifacts/{ARTIFACT_SHA}",
            "inputs_url": None,
            "context": {"stage": "production"},
            "backends": ["eager"],
            **fields,
        }
        self.queue.append(job)
        return job

    def inject(self, route: str, *faults: Any) -> None:
        """Answer the next calls to `route` with these statuses (int) or raise these exceptions."""
        self.faults[route].extend(faults)

    def count(self, route: str) -> int:
        return sum(1 for name, _ in self.calls if name == route)

    def bodies(self, route: str) -> list[dict[str, Any]]:
        return [body for name, body in self.calls if name == route]

    def client(self, token: str | None = None) -> httpx.Client:
        token = self.token if token is None else token
        return httpx.Client(
            base_url="http://advisor.test", transport=self.transport, headers={"Authorization": f"Bearer {token}"}
        )

    # ---------------------------------------------------------------- the fake
    def handle(self, request: httpx.Request) -> httpx.Response:
        route, params = self._route(request)
        body = json.loads(request.content) if request.content else {}
        with self.lock:
            self.calls.append((route, body))
            fault = self.faults[route].popleft() if self.faults[route] else None
        if isinstance(fault, Exception):
            raise fault
        if isinstance(fault, int):
            return httpx.Response(fault, json={"detail": f"injected {fault}"})
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return httpx.Response(401, json={"detail": "missing or invalid token"})
        return getattr(self, f"_{route}")(request, body, **params)

    def _route(self, request: httpx.Request) -> tuple[str, dict[str, str]]:
        for name, method, pattern in ROUTES:
            match = re.fullmatch(pattern, request.url.path)
            if match and request.method == method:
                return name, match.groupdict()
        raise AssertionError(f"unexpected call {request.method} {request.url.path}")

    def _register(self, request: httpx.Request, body: dict) -> httpx.Response:
        return httpx.Response(
            200,
            json={
                "worker_id": "w-1",
                "heartbeat_interval_s": self.heartbeat_interval_s,
                "lease_ttl_s": self.lease_ttl_s,
                "poll_timeout_s": 1,
            },
        )

    def _claim(self, request: httpx.Request, body: dict, worker: str) -> httpx.Response:
        with self.lock:
            if not self.queue:
                return httpx.Response(204)
            job = self.queue.popleft()
            lease = uuid.uuid4().hex
            self.leases[job["id"]] = lease
        return httpx.Response(200, json={"job": job, "lease_token": lease, "lease_expires_at": "2030-01-01T00:00:00Z"})

    def _lease_ok(self, request: httpx.Request, job: str) -> bool:
        return self.leases.get(job) == request.headers.get("x-lease-token")

    def _heartbeat(self, request: httpx.Request, body: dict, job: str) -> httpx.Response:
        if not self._lease_ok(request, job):
            return httpx.Response(409, json={"detail": "lease lost"})
        reply = {"lease_expires_at": "2030-01-01T00:00:00Z", "cancel_requested": job in self.cancel}
        return httpx.Response(200, json=reply)

    def _complete(self, request: httpx.Request, body: dict, job: str) -> httpx.Response:
        if not self._lease_ok(request, job):
            return httpx.Response(409, json={"detail": "stale lease"})
        return httpx.Response(200, json={"analysis_id": "a-1", "status": "done"})

    def _ranked(self, request: httpx.Request, body: dict, job: str) -> httpx.Response:
        if not self._lease_ok(request, job):
            return httpx.Response(409, json={"detail": "stale lease"})
        return httpx.Response(200, json={"analysis_id": "a-1"})

    def _fail(self, request: httpx.Request, body: dict, job: str) -> httpx.Response:
        if not self._lease_ok(request, job):
            return httpx.Response(409, json={"detail": "stale lease"})
        return httpx.Response(200, json={"next": "queued" if body.get("retryable") else "failed"})

    def _cancelled(self, request: httpx.Request, body: dict, job: str) -> httpx.Response:
        if not self._lease_ok(request, job):
            return httpx.Response(409, json={"detail": "stale lease"})
        return httpx.Response(200, json={"status": "cancelled"})

    def _deregister(self, request: httpx.Request, body: dict, worker: str) -> httpx.Response:
        with self.lock:
            self.leases.clear()  # releases held jobs
        return httpx.Response(200, json={})

    def _artifact(self, request: httpx.Request, body: dict, sha: str) -> httpx.Response:
        return httpx.Response(200, content=ARTIFACT if sha == ARTIFACT_SHA else b"corrupt")
