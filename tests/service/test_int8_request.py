"""Issue 31: the int8 modes are measured only when named (`onnxruntime:int8`), so the server must let a user name
them: the API accepts them, the job keeps them, a worker offering the backend claims it and measures the mode."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import HTTPException

from advisor.core.job_wire import ClaimedJob
from app.intake import _check_backend_names
from workers.agent import AgentConfig, WorkerAgent
from workers.api import LeasedJob

from .test_api import claim, register_worker, submit


def test_the_int8_modes_are_accepted_by_name_and_other_modes_still_refused_naming_them() -> None:
    _check_backend_names(["onnxruntime", "onnxruntime:int8", "inductor:pt2e-int8"])
    for spec in ("inductor:max-autotune", "onnxruntime:fp16", "eager:int8"):
        with pytest.raises(HTTPException) as raised:
            _check_backend_names([spec])
        message = raised.value.detail[0]["message"]
        assert spec in message and "the int8 ones, which are named: inductor:pt2e-int8, onnxruntime:int8" in message


def test_a_job_naming_onnxruntime_int8_is_claimed_by_a_worker_offering_onnxruntime_and_keeps_the_mode(
    client, model_file
) -> None:
    response = submit(client, model_file, backends="onnxruntime,onnxruntime:int8")
    assert response.status_code == 202, response.text
    detail = client.get(response.json()["links"]["self"]).json()
    assert detail["backends"] == ["onnxruntime", "onnxruntime:int8"]
    without = register_worker(client, backends=("eager", "inductor"))
    assert claim(client, without).status_code == 204  # it offers no onnxruntime
    worker = register_worker(client, backends=("eager", "onnxruntime"))
    leased = claim(client, worker)
    assert leased.status_code == 200, leased.text
    assert leased.json()["job"]["backends"] == ["onnxruntime", "onnxruntime:int8"]


class _Downloads:
    def download(self, url: str, dest: Path, *, sha256: str | None = None) -> Path:
        dest.write_bytes(b"x")
        return dest


def test_the_worker_hands_the_named_int8_mode_to_the_measurement(tmp_path) -> None:
    config = AgentConfig(name="w", device="cpu", backends=["eager", "onnxruntime"], work_dir=tmp_path)
    agent = WorkerAgent(_Downloads(), config)  # type: ignore[arg-type]
    job = ClaimedJob(
        id=1,
        analysis_id=1,
        attempt=1,
        artifact_sha256="0" * 64,
        artifact_url="/a",
        inputs_url=None,
        context={},
        backends=["onnxruntime", "onnxruntime:int8", "inductor:pt2e-int8"],
    )
    spec = agent._spec(LeasedJob(job=job, lease_token="t", lease_expires_at=None), tmp_path)
    assert spec.backends == ["onnxruntime", "onnxruntime:int8"]  # inductor is not offered here
