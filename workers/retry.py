"""Which HTTP failures are worth retrying, and how long to wait between tries.

Network errors, 429 and 5xx are transient: retry with capped exponential backoff and full jitter so
a fleet of workers does not hammer a recovering server in lockstep. Any other 4xx is final
(the same split as Buildkite's agent: `IsRetryableStatus` = 429 or >= 500).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx


class ApiError(Exception):
    """A call to the server that did not succeed. `status` is None for network errors and timeouts."""

    def __init__(self, message: str, *, status: int | None = None, body: object = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body

    @property
    def retryable(self) -> bool:
        return is_retryable_status(self.status)


def is_retryable_status(status: int | None) -> bool:
    """None (no response at all), 429 and 5xx are transient; other statuses are an answer."""
    return status is None or status == 429 or status >= 500


@dataclass
class RetryPolicy:
    """Bounded retries: at most `attempts` tries, waits of `base_s * 2**n` capped at `cap_s`, full jitter."""

    attempts: int = 6
    base_s: float = 0.5
    cap_s: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)

    def delay(self, retry_number: int, retry_after_s: float | None = None) -> float:
        """Seconds to wait before retry `retry_number` (0-based); honours a server's Retry-After up to the cap."""
        ceiling = min(self.cap_s, self.base_s * 2**retry_number)
        wait = self.rng.uniform(0, ceiling)
        if retry_after_s is not None:
            wait = max(wait, min(retry_after_s, self.cap_s))
        return wait

    def call(self, attempt: Callable[[], httpx.Response], describe: str) -> httpx.Response:
        """Run `attempt` until it returns a non-retryable response or the tries run out.

        Returns the first 2xx/3xx response; raises ApiError for a final 4xx at once, and for
        transient failures once `attempts` tries have failed.
        """
        last: ApiError | None = None
        for number in range(self.attempts):
            retry_after: float | None = None
            try:
                response = attempt()
            except httpx.TransportError as exc:  # connect errors, timeouts, dropped connections
                last = ApiError(f"{describe}: {type(exc).__name__}: {exc}".rstrip(": "))
            else:
                if response.status_code < 400:
                    return response
                last = error_from_response(response, describe)
                if not last.retryable:
                    raise last
                retry_after = _retry_after_s(response)
            if number + 1 < self.attempts:
                self.sleep(self.delay(number, retry_after))
        assert last is not None
        raise ApiError(f"{last} (gave up after {self.attempts} tries)", status=last.status, body=last.body)


def error_from_response(response: httpx.Response, describe: str) -> ApiError:
    """An ApiError whose message carries the server's own `detail` text where it sent one."""
    try:
        body: object = response.json()
    except ValueError:
        body = response.text
    detail = body.get("detail", body) if isinstance(body, dict) else body
    text = f"{describe}: HTTP {response.status_code}"
    if detail:
        text += f": {detail}"
    return ApiError(text, status=response.status_code, body=body)


def _retry_after_s(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
