"""The shape of the server's own ASGI middlewares (authorization before the body, body caps, lingering close,
security headers): each acts on HTTP requests only and hands lifespan and websocket scopes to the app untouched."""

from __future__ import annotations

from abc import ABC, abstractmethod

from starlette.types import ASGIApp, Receive, Scope, Send


class HttpMiddleware(ABC):
    """Calls `handle` for the HTTP requests it `applies_to`; everything else goes straight to the app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.applies_to(scope):
            await self.app(scope, receive, send)
            return
        await self.handle(scope, receive, send)

    def applies_to(self, scope: Scope) -> bool:
        """Whether this HTTP request is one the middleware acts on: every one, unless a middleware says otherwise."""
        return True

    @abstractmethod
    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """What the middleware does with an HTTP request it applies to (calling `self.app` to pass it on)."""
