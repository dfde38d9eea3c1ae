"""What the tests that start real servers and workers share: a free local port, and waiting for a condition with a
deadline that says what did not happen (and the logs that may say why)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str, logs: Callable[[], str] = str) -> Any:
    """The first truthy value of `predicate` within `timeout_s`, else an AssertionError naming `what` with `logs()`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout_s:g} s\n{logs()}")
