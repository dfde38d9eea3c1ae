"""A bounded property-based fuzz run of the OpenAPI schema (schemathesis, issue 12): no request ends in a 5xx.

One app with auth required, seeded with a finished, a running and a queued analysis, so that small generated
ids hit real rows. Every operation of /openapi.json gets schemathesis' examples, coverage (boundary values such
as 2**63 for ids) and fuzzing phases, valid and invalid inputs ("all" modes), sent with a user token (or a
worker token for the worker protocol), and only one check: `not_a_server_error`. Deterministic (a fixed seed,
no example database), so a failure reproduces; one and a half minutes on two cores. FUZZ_EXAMPLES raises the fuzzing
phase's examples per operation for a longer local run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import schemathesis
from fastapi.testclient import TestClient
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from sqlmodel import Session

from app.auth import create_token
from app.main import create_app
from app.path_ids import PathIdRangeMiddleware
from app.settings import Settings

from .test_results_boundary import cpu_results

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "20"))
WORKER_TAGS = {"workers", "jobs", "artifacts"}
CONFIG = {
    "seed": 12,
    "generation": {"mode": "all", "max-examples": EXAMPLES, "deterministic": True, "database": "none"},
    "suppress-health-check": ["all"],
}


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory, model_file: Path):  # noqa: ANN201
    """(schema, user headers, worker headers) for an app seeded with analyses in every state."""
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("fuzz"),
        require_auth=True,
        max_upload_mb=4,
        max_inputs_mb=1,
        poll_timeout_s=0.2,  # a generated `wait` on claim blocks no longer than this
        claim_poll_interval_s=0.1,
    )
    app = create_app(settings)
    if not any(middleware.cls is PathIdRangeMiddleware for middleware in app.user_middleware):
        app.add_middleware(PathIdRangeMiddleware)  # until app.main registers it
    with Session(app.state.engine) as session:
        _, user = create_token(session, role="user", name="fuzz-user", now=app.state.queue.clock())
        _, worker = create_token(session, role="worker", name="fuzz-worker", now=app.state.queue.clock())
    users, workers = ({"Authorization": f"Bearer {token}"} for token in (user, worker))
    with TestClient(app, base_url="http://testserver") as client:
        _seed(client, model_file, users, workers)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=SchemathesisConfig.from_dict(CONFIG))
    return schema, users, workers


def _seed(client: TestClient, model_file: Path, users: dict, workers: dict) -> None:
    """Analysis 1 done, 2 running (claimed), 3 queued; one registered worker."""
    for number in range(3):
        with open(model_file, "rb") as fh:
            response = client.post(
                "/api/v1/analyze",
                headers=users,
                files={"model": ("mlp.pt2", fh)},
                data={"context": json.dumps({"target": "cpu"}), "force": "true", "model_name": f"fuzz-{number}"},
            )
        assert response.status_code == 202, response.text
    body = {"name": "fuzz-worker", "device_kind": "cpu", "backends": ["eager", "inductor"], "environment": {}}
    worker_id = client.post("/api/v1/workers/register", headers=workers, json=body).json()["worker_id"]
    first = client.post(f"/api/v1/workers/{worker_id}/claim", headers=workers).json()
    results = cpu_results()
    results["inspection"]["artifact_sha256"] = first["job"]["artifact_sha256"]
    done = client.post(
        f"/api/v1/jobs/{first['job']['id']}/complete",
        headers={**workers, "X-Lease-Token": first["lease_token"]},
        json=results,
    )
    assert done.status_code == 200, done.text
    assert client.post(f"/api/v1/workers/{worker_id}/claim", headers=workers).status_code == 200


@pytest.fixture
def api_schema(fuzzed):  # noqa: ANN001, ANN201
    return fuzzed[0]


@pytest.fixture
def tokens(fuzzed):  # noqa: ANN001, ANN201
    return {"user": fuzzed[1], "worker": fuzzed[2]}


@pytest.fixture(autouse=True)
def _node_id_for_schemathesis(request: pytest.FixtureRequest) -> None:
    """schemathesis' lazy schemas (4.32) read `node._nodeid`, which pytest 9 no longer has."""
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
def test_no_operation_answers_a_server_error(case, tokens):  # noqa: ANN001
    role = "worker" if WORKER_TAGS & set(case.operation.tags or ()) else "user"
    case.call_and_validate(headers=tokens[role], checks=[not_a_server_error])
