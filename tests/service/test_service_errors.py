"""One error base for the service (app.service_errors): every domain error is a ServiceError with a code, and the one
code -> HTTP status table at the edge answers it; no domain error names an HTTP status of its own."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

import app.main  # noqa: F401 - loads every module that defines a ServiceError
from app.db import DatabaseBusy
from app.job_queue import InvalidTransition, JobNotFound, NotYourWorker, QueueError, StaleLease, WorkerNotFound
from app.results import ResultsInvalid
from app.service_errors import HTTP_STATUS, ErrorCode, ServiceError, refusal_status, service_error_response
from app.storage import UploadTooLarge


def every_service_error() -> list[type[ServiceError]]:
    found, todo = [], [ServiceError]
    while todo:
        kind = todo.pop()
        found.append(kind)
        todo.extend(kind.__subclasses__())
    return found


def test_every_service_error_has_a_code_in_the_one_table_and_no_status_of_its_own():
    kinds = every_service_error()
    assert len(kinds) >= 12, [kind.__name__ for kind in kinds]
    for kind in kinds:
        assert kind.code in HTTP_STATUS, kind.__name__
        assert "status_code" not in vars(kind) or kind is ServiceError, f"{kind.__name__} names an HTTP status"
    assert set(HTTP_STATUS) == set(ErrorCode), "every code has its status"


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (QueueError("refused"), 409),
        (JobNotFound("job 1 does not exist"), 404),
        (WorkerNotFound("worker w is not registered"), 404),
        (StaleLease("this lease is no longer valid"), 409),
        (InvalidTransition("job 1 is already succeeded"), 409),
        (NotYourWorker("another token"), 403),
        (DatabaseBusy("busy"), 503),
        (ResultsInvalid([("measurements", "none")]), 422),
        (UploadTooLarge(1024, "the model file"), 413),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else str(value),
)
def test_the_edge_answers_each_error_with_its_codes_status_and_message(error, status):
    # in a thread of its own, as tests/service/test_api.py does: a browser test earlier on the same xdist worker can
    # leave an event loop running on this thread (playwright's sync API), and asyncio.run refuses to nest in it
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(asyncio.run, service_error_response(None, error)).result()  # type: ignore[arg-type]
    assert answer.status_code == status == error.status_code
    body = json.loads(answer.body)
    if isinstance(error, ResultsInvalid):
        assert body == {"detail": [{"field": "measurements", "message": "none"}]}
    elif isinstance(error, UploadTooLarge):
        message = "the model file is larger than the server's limit of 1 KiB (ADVISOR_MAX_UPLOAD_MB)"
        assert body == {"detail": message, "limit_bytes": 1024}
    else:
        assert body == {"detail": str(error)}


def test_an_error_given_a_code_answers_with_that_codes_status():
    from app.analyses import RerunRefused
    from app.analysis_actions import ActionRefused

    assert RerunRefused("gone").status_code == 409
    assert RerunRefused("no such analysis", ErrorCode.NOT_FOUND).status_code == 404
    assert ActionRefused("not yours", ErrorCode.FORBIDDEN).status_code == 403


@pytest.mark.parametrize(
    ("slug", "status"),
    [("zip_bomb", 413), ("denied_op", 422), ("native_code", 422), ("not_a_model", 415), ("<script>", 415)],
)
def test_an_uploaded_file_refused_by_the_core_is_answered_through_the_same_table(slug, status):
    assert refusal_status(slug) == status


def test_a_route_raising_a_service_error_is_answered_by_the_edge(client):
    beat = client.post("/api/v1/jobs/424242/heartbeat", json={}, headers={"X-Lease-Token": "t"})
    assert (beat.status_code, beat.json()) == (404, {"detail": "job 424242 does not exist"})
