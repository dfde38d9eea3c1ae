"""The worker's side of the HTTP queue protocol (docs/deployment.md, "The worker protocol").

One method per endpoint. Calls that must eventually land (register, upload, acknowledgements) go
through the bounded RetryPolicy; `claim` and `heartbeat` are tried once because their callers loop.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from advisor.core.job_wire import ClaimedJob
from advisor.core.progress import ProgressEvent
from workers.retry import ApiError, RetryPolicy, error_from_response

API = "/api/v1"


@dataclass(frozen=True)
class Registration:
    worker_id: str
    heartbeat_interval_s: float
    lease_ttl_s: float
    poll_timeout_s: float


@dataclass(frozen=True)
class Demand:
    """GET /workers/demand: `waiting` jobs a worker of the asked kind could claim now (next first); `unserved`, those
    no live idle worker will claim."""

    waiting: list[int]
    unserved: list[int]
    idle_workers: int


@dataclass(frozen=True)
class LeasedJob:
    """One claimed job and the lease that fences every later call about it."""

    job: ClaimedJob
    lease_token: str
    lease_expires_at: str | None

    @property
    def job_id(self) -> str:
        return str(self.job.id)


@dataclass(frozen=True)
class HeartbeatReply:
    lease_expires_at: str | None
    cancel_requested: bool


class LeaseLost(ApiError):
    """409 on a job call: the job was re-claimed, finished elsewhere or our token is stale. Stop, do not upload."""


class StoreUrlRefused(ApiError):
    """The object store refused a presigned URL (expired, or revoked credentials): the job can be tried again."""

    @property
    def retryable(self) -> bool:
        return True


class WorkerApi:
    """HTTP calls of one worker. `client` carries base_url and the bearer token (tests pass a MockTransport)."""

    def __init__(
        self,
        client: httpx.Client,
        retry: RetryPolicy | None = None,
        *,
        direct_transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.client = client
        self.retry = retry or RetryPolicy()
        self.direct_transport = direct_transport  # for the object store's presigned URLs (tests pass a mock)

    @classmethod
    def connect(cls, server: str, token: str | None, *, timeout_s: float = 30.0, **kwargs: Any) -> WorkerApi:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        client = httpx.Client(base_url=server.rstrip("/"), headers=headers, timeout=timeout_s, **kwargs)
        return cls(client)

    # ---------------------------------------------------------------- worker lifecycle
    def register(self, name: str, device_kind: str, backends: list[str], environment: dict) -> Registration:
        body = {"name": name, "device_kind": device_kind, "backends": backends, "environment": environment}
        data = self._post_retried(f"{API}/workers/register", "register", json=body).json()
        return Registration(
            worker_id=str(data["worker_id"]),
            heartbeat_interval_s=float(data.get("heartbeat_interval_s", 10)),
            lease_ttl_s=float(data.get("lease_ttl_s", 60)),
            poll_timeout_s=float(data.get("poll_timeout_s", 20)),
        )

    def claim(self, worker_id: str, wait_s: float) -> LeasedJob | None:
        """One long-poll claim attempt: a LeasedJob, or None when the server had no work (204)."""
        response = self._send_once(
            "POST",
            f"{API}/workers/{worker_id}/claim",
            "claim",
            params={"wait": int(wait_s)},
            timeout=wait_s + 15.0,
        )
        if response.status_code == 204:
            return None
        data = response.json()
        try:
            job = ClaimedJob.model_validate(data["job"])
        except ValidationError as exc:  # a server this worker cannot read: the lease runs out, the job is re-queued
            raise ApiError(f"claim: the server's job does not read as a job: {exc}") from None
        return LeasedJob(job=job, lease_token=data["lease_token"], lease_expires_at=data.get("lease_expires_at"))

    def demand(self, device_kind: str, backends: list[str]) -> Demand:
        """Which queued jobs a worker of this kind could run and no live worker will claim (a dispatcher's poll)."""
        params = {"device_kind": device_kind, "backends": ",".join(backends)}
        data = self._send_once("GET", f"{API}/workers/demand", "read the demand", params=params).json()
        return Demand(
            waiting=[int(i) for i in data["waiting"]],
            unserved=[int(i) for i in data["unserved"]],
            idle_workers=int(data.get("idle_workers", 0)),
        )

    def deregister(self, worker_id: str) -> None:
        """Release held jobs without spending an attempt; best effort on the way out."""
        self._post_retried(f"{API}/workers/{worker_id}/deregister", "deregister")

    # ---------------------------------------------------------------- one job
    def heartbeat(self, claim: LeasedJob, event: ProgressEvent) -> HeartbeatReply:
        response = self._send_once(
            "POST",
            f"{API}/jobs/{claim.job_id}/heartbeat",
            "heartbeat",
            json=event.wire(),
            headers=_lease(claim),
        )
        data = response.json()
        return HeartbeatReply(data.get("lease_expires_at"), bool(data.get("cancel_requested", False)))

    def ranked(self, claim: LeasedJob, inspection: dict | None, measurements: dict | None) -> dict:
        """The results once ranked, before the recommended option's details: sent once, never retried (the
        completion follows with the whole results; this only lets the analysis show its answer sooner)."""
        body = {"inspection": inspection, "measurements": measurements}
        return self._send_once(
            "POST", f"{API}/jobs/{claim.job_id}/ranked", "report the ranking", json=body, headers=_lease(claim)
        ).json()

    def complete(self, claim: LeasedJob, inspection: dict | None, measurements: dict | None) -> dict:
        body = {"inspection": inspection, "measurements": measurements}
        path = f"{API}/jobs/{claim.job_id}/complete"
        return self._post_retried(path, "upload results", json=body, headers=_lease(claim)).json()

    def fail(self, claim: LeasedJob, error: str, *, retryable: bool) -> dict:
        body = {"error": error, "retryable": retryable}
        path = f"{API}/jobs/{claim.job_id}/fail"
        return self._post_retried(path, "report failure", json=body, headers=_lease(claim)).json()

    def acknowledge_cancel(self, claim: LeasedJob) -> None:
        self._post_retried(f"{API}/jobs/{claim.job_id}/cancelled", "acknowledge cancel", headers=_lease(claim))

    def download(self, url: str, dest: Path, *, sha256: str | None = None) -> Path:
        """Stream `url` (absolute or server-relative) to `dest`; verify the sha256.

        From the server itself with the bearer token. From anywhere else only as the object store's presigned URL
        the server handed out with the job (one object, a bounded lifetime; app.object_store): fetched without the
        token, and only when the sha256 to check it against is known - given, or the content-addressed object's
        own name (the URL path's last segment). The URL's signature never appears in an error message. A URL the
        store refuses (expired, revoked) is asked of the server instead: `GET /api/v1/artifacts/{sha256}` with the token
        (allowed while this worker holds the job's lease; the server streams the object from the store).
        """
        target = self.client.base_url.join(url)
        base = self.client.base_url
        if (target.scheme, target.host, target.port) == (base.scheme, base.host, base.port):
            self._fetch(self.client, url, dest, sha256, f"download {url}")
            return dest
        expected = sha256 or _sha256_named_by(target.path)
        shown = f"{target.scheme}://{target.host}{target.path}"  # without the query: it holds the signature
        if expected is None or target.scheme not in ("http", "https"):
            raise ApiError(
                f"download {shown}: refusing to fetch from a host other than the server ({target.host}) without "
                "the sha256 to check it against"
            )
        refused: ApiError | None = None
        with httpx.Client(timeout=self.client.timeout, transport=self.direct_transport) as direct:  # no token
            try:
                self._fetch(direct, str(target), dest, expected, f"download {shown} from the artifact store")
            except ApiError as exc:
                if exc.status not in (400, 403):
                    raise
                refused = exc  # e.g. the presigned URL expired
        if refused is not None:
            try:
                self._fetch(self.client, f"{API}/artifacts/{expected}", dest, expected, f"download {expected[:12]}…")
            except ApiError:  # the server cannot either: the job goes back to the queue; its next claim gets a new URL
                raise StoreUrlRefused(str(refused), status=refused.status, body=None) from None
        return dest

    def _fetch(self, client: httpx.Client, url: str, dest: Path, sha256: str | None, describe: str) -> None:
        def attempt() -> httpx.Response:
            digest = hashlib.sha256()
            with client.stream("GET", url) as response:
                if response.status_code >= 400:
                    response.read()
                    return response
                with dest.open("wb") as out:
                    for chunk in response.iter_bytes(1 << 20):
                        digest.update(chunk)
                        out.write(chunk)
            if sha256 and digest.hexdigest() != sha256:
                dest.unlink(missing_ok=True)
                raise ApiError(f"{describe}: sha256 mismatch (got {digest.hexdigest()[:12]}…, want {sha256[:12]}…)")
            return response

        self.retry.call(attempt, describe)

    # ---------------------------------------------------------------- plumbing
    def _post_retried(self, path: str, describe: str, **kwargs: Any) -> httpx.Response:
        try:
            return self.retry.call(lambda: self.client.post(path, **kwargs), describe)
        except ApiError as exc:
            if exc.status == 409:
                raise LeaseLost(f"{describe}: lease lost (HTTP 409)", status=409, body=exc.body) from exc
            raise

    def _send_once(self, method: str, path: str, describe: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self.client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ApiError(f"{describe}: {type(exc).__name__}: {exc}") from exc
        if response.status_code == 409:
            raise LeaseLost(f"{describe}: lease lost (HTTP 409)", status=409)
        if response.status_code >= 400:
            raise error_from_response(response, describe)
        return response


def _sha256_named_by(path: str) -> str | None:
    """The sha256 a content-addressed object's path names (its last segment), or None."""
    name = path.rstrip("/").rsplit("/", 1)[-1].lower()
    return name if len(name) == 64 and all(c in "0123456789abcdef" for c in name) else None


def _lease(claim: LeasedJob) -> dict[str, str]:
    return {"X-Lease-Token": claim.lease_token}
