"""One principal, one client: the per-client upload cap (app.admission.ClientShareLimiter) counts the authenticated
token, however its `Authorization` header is spelled and also through the dashboard's cookie; only anonymous callers
are counted by address."""

from __future__ import annotations

import asyncio
import json

from sqlmodel import Session

from app.auth import create_token
from app.cookie_auth import COOKIE_NAME
from tests.service.test_saturation import Answer, run_in_thread, scope_for, upload_request

SPELLINGS = ("Bearer {}", "bearer {}", "BEARER {}", "Bearer    {}", "bEaReR {}  ")


async def upload(app, seed: int, extra: list[tuple[bytes, bytes]], client: str = "127.0.0.1", hold=None) -> Answer:  # noqa: ANN001
    """An upload with `extra` headers; with `hold` = (admitted, release), its body's second half waits for release."""
    headers, body = upload_request(seed)
    halves = [body[: len(body) // 2], body[len(body) // 2 :]] if hold else [body]

    async def receive() -> dict:
        if not halves:
            await asyncio.sleep(3600)  # the server answered without reading the body
        if hold and len(halves) == 1:
            await hold[1].wait()
        elif hold:
            hold[0].set()  # the route is reading the body: the upload holds its slot
        chunk = halves.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(halves)}

    answer = Answer()
    await app(scope_for(headers + extra, client), receive, answer.send)
    return answer


def tokens_for(app, *names: str) -> list[str]:  # noqa: ANN001
    with Session(app.state.engine) as session:
        return [create_token(session, role="user", name=name, now=app.state.queue.clock())[1] for name in names]


def auth(spelling: str, token: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", spelling.format(token).encode())]


def test_every_spelling_of_one_token_and_its_cookie_share_one_cap(make_app):
    app = make_app(require_auth=True, max_concurrent_uploads=16, max_uploads_per_client=len(SPELLINGS) - 1)
    token, other = tokens_for(app, "alice", "bob")

    async def scenario() -> tuple[list[Answer], list[Answer]]:
        release = asyncio.Event()
        held = []
        for seed, spelling in enumerate(SPELLINGS[:-1], start=1):  # the cap's worth, each spelled its own way
            admitted = asyncio.Event()
            held.append(asyncio.create_task(upload(app, seed, auth(spelling, token), hold=(admitted, release))))
            await asyncio.wait_for(admitted.wait(), 10)
        cookie = [(b"cookie", f"{COOKIE_NAME}={token}".encode()), (b"origin", b"http://127.0.0.1")]
        refused = [
            await asyncio.wait_for(upload(app, 20, auth(SPELLINGS[-1], token)), 10),
            await asyncio.wait_for(upload(app, 21, auth(SPELLINGS[0], token), client="10.9.9.9"), 10),
            await asyncio.wait_for(upload(app, 22, cookie), 10),
        ]
        served = await asyncio.wait_for(upload(app, 23, auth(SPELLINGS[2], other)), 10)
        release.set()
        return [await asyncio.wait_for(task, 10) for task in held] + [served], refused

    served, refused = run_in_thread(scenario)
    assert [answer.status for answer in refused] == [429, 429, 429], [answer.body for answer in refused]
    assert all("ADVISOR_MAX_UPLOADS_PER_CLIENT" in json.loads(answer.body)["detail"] for answer in refused)
    assert [answer.status for answer in served] == [202] * len(SPELLINGS), [answer.body for answer in served]


def test_a_malformed_or_unknown_token_is_401_and_takes_no_share(make_app):
    app = make_app(require_auth=True, max_uploads_per_client=1)
    (token,) = tokens_for(app, "alice")

    async def scenario() -> list[Answer]:
        answers = [await asyncio.wait_for(upload(app, n, auth(s, "npa_unknown")), 10) for n, s in enumerate(SPELLINGS)]
        answers.append(await asyncio.wait_for(upload(app, 9, auth("Basic {}", token)), 10))
        answers.append(await asyncio.wait_for(upload(app, 10, auth("bearer  {} ", token)), 10))
        return answers

    answers = run_in_thread(scenario)
    assert [answer.status for answer in answers] == [401] * (len(SPELLINGS) + 1) + [202]


def test_anonymous_callers_of_an_open_server_are_counted_by_address(make_app):
    app = make_app(max_uploads_per_client=1)

    async def scenario() -> tuple[Answer, Answer, Answer]:
        admitted, release = asyncio.Event(), asyncio.Event()
        held = asyncio.create_task(upload(app, 1, [], hold=(admitted, release)))
        await asyncio.wait_for(admitted.wait(), 10)
        same = await asyncio.wait_for(upload(app, 2, []), 10)
        elsewhere = await asyncio.wait_for(upload(app, 3, [], client="127.0.0.2"), 10)
        release.set()
        return await asyncio.wait_for(held, 10), same, elsewhere

    held, same, elsewhere = run_in_thread(scenario)
    assert (held.status, same.status, elsewhere.status) == (202, 429, 202)
