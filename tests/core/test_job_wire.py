"""The job wire (advisor.core.job_wire): one typed claim on both sides, one place where a job's defaults apply."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from advisor.core.context import (
    DEFAULT_DECODE_TOKENS,
    DEFAULT_OPTIMIZER,
    DEFAULT_WORKLOAD,
    ContextError,
    DeploymentContext,
)
from advisor.core.job_wire import ClaimedJob, JobSpec

SHA = "ab" * 32


def claimed(**fields: Any) -> ClaimedJob:
    wire = {
        "id": 7,
        "analysis_id": 3,
        "attempt": 1,
        "artifact_sha256": SHA,
        "artifact_url": f"/api/v1/artifacts/{SHA}",
        "inputs_url": None,
        "context": {"stage": "production", "target": "cpu"},
        "backends": ["eager", "inductor"],
        **fields,
    }
    return ClaimedJob.model_validate(wire)


def spec_for(job: ClaimedJob, offered: list[str] | None = None) -> JobSpec:
    return JobSpec.for_job(
        job, offered=offered or ["eager", "inductor"], stages="m:f", artifact_path="/job/model", device="cpu"
    )


def test_a_context_naming_no_workload_gets_the_contexts_defaults() -> None:
    spec = spec_for(claimed(context={"stage": "prototype"}))
    assert (spec.workload, spec.optimizer, spec.decode_tokens) == (
        DEFAULT_WORKLOAD,
        DEFAULT_OPTIMIZER,
        DEFAULT_DECODE_TOKENS,
    )
    assert spec.accuracy_tolerance is None
    assert spec.context == DeploymentContext(stage="prototype")


def test_the_contexts_own_values_are_what_the_runner_measures_with() -> None:
    context = {"workload": "generation", "decode_tokens": 5, "accuracy_tolerance": {"atol": 0.5}}
    spec = spec_for(claimed(context=context))
    assert (spec.workload, spec.decode_tokens) == ("generation", 5)
    assert spec.accuracy_tolerance == {"atol": 0.5, "rtol": None, "quantized": None}


def test_a_job_without_a_context_plans_nothing_but_measures_with_the_defaults() -> None:
    """An older server's job: no plan (every variant measured), the default workload."""
    spec = spec_for(claimed(context={}))
    assert spec.context is None
    assert spec.workload == DEFAULT_WORKLOAD and spec.deployment == DeploymentContext()


def test_the_spec_survives_the_runners_file_unchanged() -> None:
    """The agent writes the spec as JSON and the runner reads it back (workers.stage_process, workers.stages)."""
    spec = spec_for(claimed(context={"workload": "training", "optimizer": "adamw"}))
    again = JobSpec.model_validate_json(spec.model_dump_json())
    assert again == spec and again.optimizer == "adamw"


def test_only_the_backends_this_worker_offers_are_run_else_eager() -> None:
    job = claimed(backends=["onnxruntime", "onnxruntime:int8", "inductor:pt2e-int8"])
    assert spec_for(job, offered=["eager", "onnxruntime"]).backends == ["onnxruntime", "onnxruntime:int8"]
    assert spec_for(claimed(backends=["torchair"]), offered=["eager"]).backends == ["eager"]
    assert spec_for(claimed(backends=[]), offered=["eager", "inductor"]).backends == ["eager", "inductor"]


def test_an_inspect_job_measures_nothing() -> None:
    assert spec_for(claimed(purpose="inspect")).measure is False
    assert spec_for(claimed()).measure is True  # no purpose: an older server's measure job


def test_a_newer_servers_extra_fields_are_ignored() -> None:
    job = claimed(priority="high")
    assert "priority" not in job.model_dump()


@pytest.mark.parametrize(
    "hostile",
    [
        {"id": "seven"},
        {"id": None},
        {"attempt": [1]},
        {"purpose": "exfiltrate"},
        {"backends": "eager"},
        {"context": "not an object"},
        {"artifact_url": None},
    ],
)
def test_a_claim_that_does_not_read_as_a_job_is_refused(hostile: dict) -> None:
    with pytest.raises(ValidationError):
        claimed(**hostile)


def test_a_context_the_worker_cannot_read_fails_the_spec_naming_the_field() -> None:
    with pytest.raises(ContextError, match="shape_traffic_typo: unknown field"):
        spec_for(claimed(context={"shape_traffic_typo": 1}))
    with pytest.raises(ContextError, match="decode_tokens"):
        spec_for(claimed(context={"decode_tokens": 10**9}))


def test_a_spec_refuses_fields_it_does_not_know() -> None:
    """The runner reads nothing untyped: a misspelt option fails where the agent builds the spec."""
    with pytest.raises(ValidationError, match="timeout"):
        spec_for(claimed()).model_validate({**spec_for(claimed()).model_dump(), "timeout": 5})
