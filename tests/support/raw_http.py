"""Reading an HTTP/1.1 answer off a raw socket: the back-pressure and lingering tests send their requests by hand
(a body the server refuses before it has been sent), which an HTTP client library would not let them do."""

from __future__ import annotations

import socket


def read_answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The status, the headers (lower-case names) and as much of the body as Content-Length says or the peer sent."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before an answer: {data[:200]!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    while len(rest) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return int(lines[0].split()[1]), headers, rest
