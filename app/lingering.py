"""Lingering close: a refused request's client reads its answer even while it is still sending the body.

A server that answers before it has read the whole request body (a 401 from the credential check, a 413 over the
cap, a 429/503 from back-pressure, any route that does not read its body) and then closes the connection leaves
unread bytes in its socket: the kernel answers them with a reset, and a client still sending gets `Broken pipe`
(or `Connection reset`, which also throws away the answer it had not read yet) instead of the status and
Retry-After. nginx's answer is a lingering close, and so is this outermost ASGI middleware's: when a response ends
while its request's body has not, the answer's last message is held back, the rest of the body is read and dropped
- bounded by `linger_bytes` in all, `linger_s` in all and `idle_s` without a byte - and only then is the response
ended (and, with `Connection: close`, the connection closed). The answer itself is already on the wire: a client
that reads while it sends sees it at once. Past the bounds the connection is closed anyway.

What the server decided before the body is unchanged: the refusal is sent before a byte is read; only then is the
rest read, into nothing.
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.http_middleware import HttpMiddleware

LINGER_BYTES = 64 << 20  # at most this much of a refused body is read (and dropped) after the answer
LINGER_S = 30.0  # and for at most this long
IDLE_S = 5.0  # a client that sends nothing for this long is not waited for


class LingeringClose(HttpMiddleware):
    """ASGI middleware: the last message of a response that ends before its request body does waits while the rest
    of the body is drained (bounded; see the module docstring)."""

    def __init__(
        self, app: ASGIApp, *, linger_bytes: int = LINGER_BYTES, linger_s: float = LINGER_S, idle_s: float = IDLE_S
    ) -> None:
        super().__init__(app)
        self.linger_bytes = linger_bytes
        self.linger_s = linger_s
        self.idle_s = idle_s

    def applies_to(self, scope: Scope) -> bool:
        return has_body(scope)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        ended = False

        async def tracked() -> Message:
            nonlocal ended
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                ended = True  # the last body message, or the client went away
            return message

        async def lingering(message: Message) -> None:
            if message["type"] != "http.response.body" or message.get("more_body", False) or ended:
                await send(message)
                return
            await send({**message, "more_body": True})  # the answer goes out now; its end waits for the drain
            await self._drain(tracked)
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        await self.app(scope, tracked, lingering)

    async def _drain(self, receive: Receive) -> None:
        try:
            await asyncio.wait_for(drain(receive, self.linger_bytes, idle_s=self.idle_s), self.linger_s)
        except TimeoutError:
            pass


async def drain(receive: Receive, max_bytes: int, *, idle_s: float | None = None) -> bool:
    """Read and drop the request body, up to `max_bytes` (each read waiting at most `idle_s`); whether it ended (or
    the client went away) within them."""
    received = 0
    while True:
        try:
            message = await asyncio.wait_for(receive(), idle_s) if idle_s else await receive()
        except TimeoutError:
            return False
        if message["type"] != "http.request" or not message.get("more_body", False):
            return True
        received += len(message.get("body", b""))
        if received > max_bytes:
            return False


def has_body(scope: Scope) -> bool:
    """Whether the request announces a body (a non-zero Content-Length, or Transfer-Encoding)."""
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False
