"""Driving the ASGI app directly, with a `receive` and `send` a test controls (what the server pulls, in what
pieces), in a thread of its own: another test (the browser tests' Playwright) may leave a loop running in this one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import anyio


def http_scope(method: str, path: str, headers: dict[str, str]) -> dict:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:8000")] + [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


def run_app(
    app,  # noqa: ANN001
    scope: dict,
    receive: Callable[[], Awaitable[dict]],
    send: Callable[[dict], Awaitable[None]],
) -> None:
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(anyio.run, app, scope, receive, send).result()
