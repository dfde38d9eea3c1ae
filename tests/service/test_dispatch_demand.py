"""GET /api/v1/workers/demand: the queued jobs a dispatcher should start a worker for (app.dispatch_demand) -
claimable by a worker of the asked device kind and backends, less those a live idle worker will claim."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from .test_api import claim, register_worker, submit
from .test_auth import token_for

CPU = {"stage": "production", "target": "cpu"}


@pytest.fixture
def client(make_app):  # noqa: ANN001, ANN201
    """An open loopback server that does not deduplicate: the same model twice is two analyses, two jobs."""
    with TestClient(make_app(cache_window_s=0)) as test_client:
        yield test_client


def demand(client, backends: str = "eager,inductor", device_kind: str = "cpu", **headers) -> dict:  # noqa: ANN001, ANN003
    reply = client.get("/api/v1/workers/demand", params={"device_kind": device_kind, "backends": backends}, **headers)
    assert reply.status_code == 200, reply.text
    return reply.json()


def job_of(client, analysis_id: int) -> int:  # noqa: ANN001
    return client.get(f"/api/v1/analyses/{analysis_id}").json()["job"]["id"]


def two_jobs(client, model_file, clock) -> tuple[int, int]:  # noqa: ANN001
    first = job_of(client, submit(client, model_file, CPU).json()["id"])
    clock.advance(1)  # outside the (zero) deduplication window: the same model again is a second analysis
    return first, job_of(client, submit(client, model_file, CPU).json()["id"])


def test_with_no_worker_every_claimable_job_is_unserved_next_first(client, model_file, clock):
    first, second = two_jobs(client, model_file, clock)
    assert demand(client) == {"waiting": [first, second], "unserved": [first, second], "idle_workers": 0}


def test_an_idle_live_worker_serves_the_next_job_and_a_busy_one_serves_none(client, model_file, clock):
    first, second = two_jobs(client, model_file, clock)
    worker = register_worker(client)
    assert demand(client) == {"waiting": [first, second], "unserved": [second], "idle_workers": 1}
    assert claim(client, worker).json()["job"]["id"] == first
    assert demand(client) == {"waiting": [second], "unserved": [second], "idle_workers": 0}


def test_an_idle_worker_silent_for_a_while_is_not_counted_on(client, model_file, clock):
    job = job_of(client, submit(client, model_file, CPU).json()["id"])
    register_worker(client)
    clock.advance(20)  # it stopped polling (killed while idle): it will not claim
    assert demand(client)["unserved"] == [job]


def test_a_job_whose_lease_expired_is_demand_again(client, model_file, clock):
    job = job_of(client, submit(client, model_file, CPU).json()["id"])
    claim(client, register_worker(client))
    assert demand(client)["waiting"] == []
    clock.advance(61)  # its worker died (the lease is 60 s): the job is claimable again, its worker holds it
    assert demand(client) == {"waiting": [job], "unserved": [job], "idle_workers": 0}


def test_only_jobs_of_the_device_kind_whose_backends_are_offered(client, model_file):
    submit(client, model_file, {"stage": "production", "target": "npu"})
    wants_inductor = job_of(client, submit(client, model_file, CPU, backends="inductor").json()["id"])
    assert demand(client, backends="eager")["waiting"] == []
    assert demand(client, backends="eager,inductor")["unserved"] == [wants_inductor]
    assert demand(client, device_kind="npu", backends="eager,torchair")["waiting"] != []


def test_a_cancelled_job_is_no_longer_demand(client, model_file):
    analysis = submit(client, model_file, CPU).json()["id"]
    assert demand(client)["waiting"] == [job_of(client, analysis)]
    assert client.post(f"/api/v1/analyses/{analysis}/cancel").status_code < 300
    assert demand(client) == {"waiting": [], "unserved": [], "idle_workers": 0}


@pytest.mark.parametrize(
    "params",
    [
        {"device_kind": "gpu", "backends": "eager"},
        {"device_kind": "cpu", "backends": ""},
        {"device_kind": "cpu", "backends": "eager;rm -rf /"},
        {"device_kind": "cpu", "backends": "eager,,inductor"},
        {"device_kind": "cpu", "backends": "EAGER"},
        {"device_kind": "cpu", "backends": ",".join(["eager"] * 33)},
        {"device_kind": "cpu", "backends": "e" * 33},
        {"device_kind": "cpu"},
        {"backends": "eager"},
    ],
)
def test_hostile_parameters_are_refused(client, params):
    assert client.get("/api/v1/workers/demand", params=params).status_code == 422


def test_only_worker_and_admin_tokens_may_read_it(make_app):
    with TestClient(make_app(require_auth=True)) as secured:
        params = {"device_kind": "cpu", "backends": "eager"}
        assert secured.get("/api/v1/workers/demand", params=params).status_code == 401
        user = token_for(secured, "user")
        assert secured.get("/api/v1/workers/demand", params=params, headers=user).status_code == 403
        for role in ("worker", "admin"):
            assert demand(secured, "eager", headers=token_for(secured, role))["waiting"] == []
