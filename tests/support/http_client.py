"""One HTTP client for the tests' calls to the real servers they start (not named `http`: tests run scripts with
tests/support as their working directory, where that name would shadow the standard library's `http`).

`httpx.get(...)` builds a client per call, and building one costs ~20 ms of CPU (its TLS context loads the CA bundle)
even for plain HTTP: the tests that poll a server every 0.25 s made hundreds of such calls (the hostile-upload
end-to-end test spent ~11 s of CPU on them). This client keeps no connection alive, so each call still opens its own,
as `httpx.get` did: a server a test kills leaves no pooled connection behind."""

from __future__ import annotations

import httpx

http = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))
