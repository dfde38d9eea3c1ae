"""The Host check of an open loopback server (DNS rebinding), before anything else reads the request.

An open server (tokens not required) listening on loopback answers only requests whose `Host` names the loopback
(127.0.0.0/8, localhost, [::1], any port) or one of `settings.allowed_hosts`; any other is a 421. A DNS-rebinding
page (evil.example resolving to 127.0.0.1) reaches the port, but with its own name as Host. A server requiring
tokens, or listening elsewhere, checks no Host.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from app.early_answers import has_body, send_json
from app.settings import LOOPBACK_HOSTS

# Only starlette's in-process TestClient sets this extension; no network server does, and no client can.
TEST_CLIENT_EXTENSION = "http.response.debug"


class LoopbackHostCheck:
    """ASGI middleware: 421 for a Host that does not name the loopback on an open loopback server."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = host_refusal(scope)
            if refusal is not None:
                await send_json(send, 421, {"detail": refusal}, close=has_body(scope))
                return
        await self.app(scope, receive, send)


def host_refusal(scope: Scope) -> str | None:
    """Why this request's Host is refused (open loopback mode only); None when it is fine."""
    state = scope["app"].state
    settings = getattr(state, "settings", None)
    mode = getattr(state, "auth_mode", None)
    if settings is None or mode is None or mode.required or settings.host not in LOOPBACK_HOSTS:
        return None
    raw = next((value for name, value in scope["headers"] if name.lower() == b"host"), None)
    if raw is None:  # HTTP/1.0 without Host: not a browser
        return None
    host = raw.decode("latin-1")
    extra = getattr(settings, "allowed_hosts", ()) or ()
    if host_allowed(host, extra, in_process_test=TEST_CLIENT_EXTENSION in (scope.get("extensions") or {})):
        return None
    shown = host if len(host) <= 100 else host[:100] + "…"
    return (
        f"Host {shown!r} refused: this server runs open (no tokens) on loopback, so it answers only requests "
        "addressed to a loopback name (127.0.0.1, localhost, [::1]); another name is how a DNS-rebinding web "
        "page reaches it. Use http://127.0.0.1:<port>/, list the name in ADVISOR_ALLOWED_HOSTS, or require tokens."
    )


def host_allowed(host: str, extra: Iterable[str] | str = (), *, in_process_test: bool = False) -> bool:
    """`host` (a Host header: name[:port]) names the loopback, or is listed in `extra` (with or without port)."""
    host = host.strip().lower()
    if host.startswith("["):
        name = host[1 : host.find("]")] if "]" in host else host[1:]
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    name = name.rstrip(".")
    entries = extra.split(",") if isinstance(extra, str) else extra  # a list, or "a.lan,b.lan" from the environment
    listed = {entry.strip().lower().rstrip(".") for entry in entries if entry.strip()}
    if name == "localhost" or name in listed or host in listed:
        return True
    if name == "testserver" and in_process_test:  # starlette's TestClient default, in-process only
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
