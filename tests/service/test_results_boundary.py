"""A worker's results at the boundary (issue 12): typed, finite, capped; a bad shape fails the job with its reason."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.models import AnalysisSummary
from app.results import STDERR_TAIL_CHARS, ResultsInvalid, accept_results, truncate_text
from tests.support.fixtures_decide import inspection, measurement, run

from .test_api import claim, register_worker, submit

# What real workers send (trimmed from `npu-advisor inspect --json` / `measure --json` of the example MLP on a CPU)
# and what the test doubles send: the models must accept them unchanged.
REAL_INSPECTION = {
    "format": "exported_program",
    "saved_with_torch": "2.13.0+cpu",
    "parameters": {"count": 669706, "bytes": 2678824},
    "flops": 10698752,
    "inputs": [{"name": "input", "shape": [8, 784], "dtype": "float32"}],
    "ops": [
        {
            "name": "aten.linear.default",
            "namespace": "aten",
            "count": 3,
            "has_fake_kernel": True,
            "coverage": {
                "inductor": "decomposed",
                "torchair": "partial",
                "torchair_via": ["aten.t.default", "aten.addmm.default"],
                "inductor_via": ["aten.permute.default", "aten.addmm.default"],
            },
        }
    ],
    "custom_ops": [],
    "graph_breaks": {"analysed": True, "count": 0, "graph_count": 1, "reasons": []},
    "dynamic_dims": [],
    "torchair_coverage": {"source": "table", "torch_npu_version": "2.14.0"},
    "runnable": {"ok": True, "reason": None},
    "warnings": ["example inputs: stored in the archive"],
}
REAL_LATENCY = {
    "n": 284,
    "median_ms": 0.43,
    "p90_ms": 1.52,
    "p99_ms": 3.24,
    "mean_ms": 0.63,
    "stdev_ms": 0.61,
    "iqr_ms": 0.12,
    "ci_low_ms": 0.42,
    "ci_high_ms": 0.44,
    "verdict": "noisy",
    "calls_per_sample": 3,
    "drift": 1.25,
}
REAL_RUN = {
    "environment": {
        "device": "cpu",
        "device_name": "Intel(R) Xeon(R) Processor (2 cores)",
        "soc_version": None,
        "cann_version": None,
        "driver_version": None,
        "torch_version": "2.13.0+cpu",
        "torch_npu_version": None,
        "python_version": "3.11.7",
        "host": "sandbox",
        "measured_on": "cpu",
    },
    "workload": "inference",
    "measurements": [
        {
            "backend": "eager",
            "mode": "default",
            "family": "baseline",
            "device": "cpu",
            "workload": "inference",
            "status": "ok",
            "reason": None,
            "stderr_tail": None,
            "compile_s_cold": 0.0,
            "compile_s_warm": 0.0,
            "latency": REAL_LATENCY,
            "eager_latency": REAL_LATENCY,
            "speedup_vs_eager": 1.0,
            "speedup_ci": None,
            "peak_memory_mb": 5.9,
            "memory_kind": "rss",
            "accuracy": {
                "passed": True,
                "max_abs_err": 0.0,
                "rmse": 1.9e-08,
                "reference_rmse": 1.9e-08,
                "rmse_ratio": 1.0,
                "cosine": 0.99,
                "atol": 0.0001,
                "rtol": 0.0001,
            },
            "graph_count": None,
            "graph_breaks": None,
            "recompiles": None,
            "throughput": {"samples_per_s": 18405.7, "tokens_per_s": None},
            "dynamic": None,
            "wall_s": 6.9,
            "snippet": "# eager PyTorch: no compilation\n",
            "training": {"optimizer": "sgd", "state_mb": {"parameters": 2.5}},
        }
    ],
}
DOUBLE_RESULT = {  # tests/support/fake_stages.py
    "inspection": {"format": "exported_program", "ops": []},
    "measurements": {
        "environment": {"device": "cpu"},
        "workload": "inference",
        "measurements": [],
        "backends_run": ["eager"],
        "tolerance_run": None,
    },
}


def cpu_results() -> dict:
    return {
        "inspection": inspection(),
        "measurements": run(
            measurement("eager", median_ms=10.0, compile_s=None),
            measurement("inductor", median_ms=5.0, compile_s=8.0, eager_ms=10.0),
            device="cpu",
        ),
    }


def leased_job(client, model_file) -> tuple[int, int, str]:  # noqa: ANN001
    analysis_id = submit(client, model_file, force="true").json()["id"]
    lease = claim(client, register_worker(client)).json()
    return analysis_id, lease["job"]["id"], lease["lease_token"]


def post_results(client, job_id: int, token: str, body: dict):  # noqa: ANN001, ANN201
    """JSON as Python writes it: NaN and Infinity included, as a worker's json.dumps would send them. An object
    inspection names the job's artifact, as a real worker's does (tests/service/test_completion_binding.py)."""
    from sqlmodel import Session

    from app.models import Analysis, Job

    if isinstance(body.get("inspection"), dict):
        with Session(client.app.state.engine) as session:
            sha = session.get(Analysis, session.get(Job, job_id).analysis_id).artifact_sha256
        body = body | {"inspection": body["inspection"] | {"artifact_sha256": sha}}
    return client.post(
        f"/api/v1/jobs/{job_id}/complete",
        content=json.dumps(body),
        headers={"X-Lease-Token": token, "Content-Type": "application/json"},
    )


@pytest.mark.parametrize(
    "results",
    [{"inspection": REAL_INSPECTION, "measurements": REAL_RUN}, DOUBLE_RESULT, cpu_results(), {}],
    ids=["real", "double", "fixtures", "empty"],
)
def test_what_workers_send_is_accepted_unchanged(results):
    assert accept_results(results.get("inspection"), results.get("measurements")) == (
        results.get("inspection"),
        results.get("measurements"),
    )


def test_wrong_types_are_a_422_naming_the_field_and_the_job_is_unchanged(client, model_file):
    """A refused completion changes nothing (issue 26): the job stays leased; a real worker then fails it with the
    server's answer as the reason (workers/agent.py), or sends correct results."""
    analysis_id, job_id, token = leased_job(client, model_file)
    body = cpu_results()
    body["measurements"]["measurements"][1]["latency"]["median_ms"] = "fast"
    body["inspection"]["ops"][0]["count"] = {"many": True}
    response = post_results(client, job_id, token, body)
    assert response.status_code == 422
    fields = [problem["field"] for problem in response.json()["detail"]]
    assert fields == ["inspection.ops.0.count", "measurements.measurements.1.latency.median_ms"]

    analysis = client.get(f"/api/v1/analyses/{analysis_id}").json()
    assert analysis["status"] == "running" and analysis["measurements"] is None and analysis["error"] is None
    again = post_results(client, job_id, token, body)  # a retried upload: the same answer, nothing changes
    assert again.status_code == 422
    assert client.get(f"/api/v1/analyses/{analysis_id}").json()["job"]["attempts"] == 1
    assert post_results(client, job_id, token, cpu_results()).status_code == 200


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda body: body.update(inspection=[1, 2]), "inspection"),
        (lambda body: body["measurements"].update(measurements=[{"backend": "eager"}] * 201), "measurements"),
        (lambda body: body["measurements"]["measurements"][0].update(backend="b" * 65), "backend"),
        (lambda body: body["measurements"]["measurements"][0].update(graph_count=2**64), "graph_count"),
        (lambda body: body["measurements"].update(workload="inference+training"), "workload"),
    ],
    ids=["not-an-object", "too-many-rows", "long-backend", "int-out-of-range", "unknown-workload"],
)
def test_other_bad_shapes_are_refused(client, model_file, change, field):
    analysis_id, job_id, token = leased_job(client, model_file)
    body = cpu_results()
    change(body)
    response = post_results(client, job_id, token, body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["field"].endswith(field)
    assert client.get(f"/api/v1/analyses/{analysis_id}").json()["status"] == "running"


@pytest.mark.parametrize(
    ("status", "passed", "checked"),
    [("ok", False, "failed"), ("fail_accuracy", True, "passed")],
    ids=["ok-but-inaccurate", "fail-but-accurate"],
)
def test_a_row_whose_status_and_accuracy_disagree_is_a_422_naming_the_row(client, model_file, status, passed, checked):
    """The engine would rank an `ok` row whose accuracy check failed as a valid option: the boundary refuses it,
    for a completion and a ranking alike, and the job runs on unchanged."""
    analysis_id, job_id, token = leased_job(client, model_file)
    body = cpu_results()
    row = body["measurements"]["measurements"][1]  # inductor:default
    row["status"], row["accuracy"]["passed"] = status, passed
    response = post_results(client, job_id, token, body)
    assert response.status_code == 422, response.text
    [problem] = response.json()["detail"]
    assert problem["field"] == "measurements.measurements.1.status"
    assert f"row 1 (inductor:default) has status '{status}' while its accuracy check {checked}" in problem["message"]
    pending = {"quality": {"details": {"pending": ["inductor:default"]}}}
    ranking = dict(body, measurements=body["measurements"] | pending)
    ranked = client.post(f"/api/v1/jobs/{job_id}/ranked", json=ranking, headers={"X-Lease-Token": token})
    assert ranked.status_code == 422 and ranked.json()["detail"][0]["field"] == problem["field"], ranked.text
    analysis = client.get(f"/api/v1/analyses/{analysis_id}").json()
    assert analysis["status"] == "running" and analysis["measurements"] is None
    with pytest.raises(ResultsInvalid):
        accept_results(None, body["measurements"])
    row["status"], row["accuracy"]["passed"] = ("ok", True) if status == "ok" else ("fail_accuracy", False)
    assert post_results(client, job_id, token, body).status_code == 200, "agreeing rows are accepted"


def test_non_finite_numbers_are_stored_as_null_and_every_view_still_renders(client, model_file):
    """Where a non-finite number can be honest (an accuracy ratio over a zero error, a latency's drift, a speedup
    interval whose CI reaches zero); the numbers a recommendation rests on are refused instead
    (tests/service/test_completion_binding.py)."""
    analysis_id, job_id, token = leased_job(client, model_file)
    body = cpu_results()
    row = body["measurements"]["measurements"][1]
    row["accuracy"]["rmse_ratio"], row["accuracy"]["cosine"], row["speedup_ci"] = -math.inf, math.nan, [1.5, math.inf]
    row["latency"]["drift"] = math.nan
    response = post_results(client, job_id, token, body)
    assert response.status_code == 200, response.text

    stored = client.get(f"/api/v1/analyses/{analysis_id}").json()
    row = stored["measurements"]["measurements"][1]
    assert (row["speedup_ci"], row["accuracy"]["rmse_ratio"], row["accuracy"]["cosine"]) == (None, None, None)
    assert row["latency"]["drift"] is None
    assert client.get(f"/api/v1/analyses/{analysis_id}/report.json").status_code == 200
    assert client.get(f"/api/v1/analyses/{analysis_id}/report.md").status_code == 200
    assert client.get("/api/v1/analyses").status_code == 200
    assert client.get(f"/analyses/{analysis_id}").status_code == 200  # the dashboard's detail page


def test_a_non_finite_statistic_is_refused_or_voids_its_interval_and_explicit_nulls_there_are_refused():
    body = cpu_results()
    rows = body["measurements"]["measurements"]
    rows[1]["latency"]["p99_ms"] = math.inf
    with pytest.raises(ResultsInvalid) as info:
        accept_results(body["inspection"], body["measurements"])
    assert info.value.problems[0]["field"] == "measurements.measurements.1.latency.p99_ms"
    rows[1]["latency"]["p99_ms"] = rows[1]["latency"]["median_ms"] * 1.1
    rows[1]["eager_latency"]["drift"] = math.nan
    rows[1]["speedup_ci"] = [math.nan, 2.0]
    _, stored = accept_results(body["inspection"], body["measurements"])
    row = stored["measurements"][1]
    assert row["latency"]["median_ms"] == 5.0 and row["speedup_ci"] is None
    assert row["eager_latency"]["drift"] is None and row["eager_latency"]["median_ms"] == 10.0
    rows[0]["latency"]["ci_low_ms"] = None
    with pytest.raises(ResultsInvalid) as info:
        accept_results(body["inspection"], body["measurements"])
    assert info.value.problems[0]["field"] == "measurements.measurements.0.latency.ci_low_ms"


def test_an_engine_infinity_is_stored_as_null(client, model_file):
    """A speedup interval with a zero bound makes the engine compute an infinite ratio; report.json stays JSON."""
    analysis_id, job_id, token = leased_job(client, model_file)
    body = cpu_results()
    body["measurements"]["measurements"][1]["speedup_ci"] = [0.0, 2.0]
    assert post_results(client, job_id, token, body).status_code == 200
    assert client.get(f"/api/v1/analyses/{analysis_id}/report.json").status_code == 200
    assert client.get(f"/analyses/{analysis_id}").status_code == 200


def test_a_huge_stderr_tail_and_free_text_are_truncated_not_refused(client, model_file):
    analysis_id, job_id, token = leased_job(client, model_file)
    body = cpu_results()
    row = body["measurements"]["measurements"][1]
    row["stderr_tail"] = "start\n" + "x" * (4 << 20) + "\nthe last line"
    row["reason"] = "r" * 100_000
    body["inspection"]["warnings"] = ["w" * 100_000]
    response = post_results(client, job_id, token, body)
    assert response.status_code == 200, response.text

    stored = client.get(f"/api/v1/analyses/{analysis_id}").json()["measurements"]["measurements"][1]
    assert len(stored["stderr_tail"]) <= STDERR_TAIL_CHARS
    assert stored["stderr_tail"].startswith("[… ") and stored["stderr_tail"].endswith("the last line")
    assert len(stored["reason"]) <= 4096 and "characters truncated" in stored["reason"]


def test_a_long_failure_message_or_stage_is_truncated_not_refused(client, model_file):
    analysis_id, job_id, token = leased_job(client, model_file)
    beat = client.post(f"/api/v1/jobs/{job_id}/heartbeat", headers={"X-Lease-Token": token}, json={"stage": "s" * 500})
    assert beat.status_code == 200, beat.text
    assert len(client.get(f"/api/v1/analyses/{analysis_id}").json()["stage"]) <= 120
    error = "Traceback (most recent call last):\n" + "  frame\n" * 50_000 + "RuntimeError: the real reason"
    failed = client.post(
        f"/api/v1/jobs/{job_id}/fail", headers={"X-Lease-Token": token}, json={"error": error, "retryable": False}
    )
    assert failed.status_code == 200 and failed.json()["next"] == "failed"
    stored = client.get(f"/api/v1/analyses/{analysis_id}").json()["error"]
    assert len(stored) <= 8192 and stored.startswith("Traceback") and stored.endswith("RuntimeError: the real reason")


def test_list_items_are_summaries(client, model_file):
    """GET /api/v1/analyses answers app.models.AnalysisSummary items: no context, results or recommendation."""
    analysis_id, job_id, token = leased_job(client, model_file)
    body = cpu_results()
    body["measurements"]["measurements"][1]["stderr_tail"] = "x" * 60_000
    assert post_results(client, job_id, token, body).status_code == 200
    listed = client.get("/api/v1/analyses")
    item = listed.json()["items"][0]
    assert set(item) == set(AnalysisSummary.model_fields)
    assert item["id"] == analysis_id and item["recommended_backend"] in ("eager", "inductor")
    assert len(listed.content) < 4096
    # typed in the API's schema: the page's items are AnalysisSummary, not free-form objects
    schema = client.get("/openapi.json").json()
    ok = schema["paths"]["/api/v1/analyses"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    page = schema["components"]["schemas"][ok["$ref"].rsplit("/", 1)[1]]
    assert page["properties"]["items"]["items"] == {"$ref": "#/components/schemas/AnalysisSummary"}


def test_summary_of_a_failed_analysis_cuts_the_error(client, model_file):
    from sqlmodel import Session

    from app.models import Analysis, Job
    from app.summaries import analysis_summary

    analysis_id, job_id, token = leased_job(client, model_file)
    client.post(f"/api/v1/jobs/{job_id}/fail", headers={"X-Lease-Token": token}, json={"error": "e" * 5000})
    with Session(client.app.state.engine) as session:
        summary = analysis_summary(
            session, client.app.state.queue, session.get(Analysis, analysis_id), session.get(Job, job_id)
        )
    assert isinstance(summary, AnalysisSummary) and summary.status == "failed"  # the model the API lists, typed
    assert len(summary.error) <= 500 and "characters truncated" in summary.error


def test_truncation_keeps_what_matters():
    text = "head " + "x" * 10_000 + " tail"
    assert truncate_text(text, 100).startswith("head ")
    assert truncate_text(text, 100, keep="tail").endswith(" tail")
    both = truncate_text(text, 100, keep="both")
    assert both.startswith("head ") and both.endswith(" tail")
    assert all(len(truncate_text(text, 100, keep=keep)) <= 100 for keep in ("head", "tail", "both"))
    cut = truncate_text("y" * 10_100, 100)
    assert f"{10_100 - cut.count('y')} characters truncated" in cut


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=30,
)
SHAPED = st.fixed_dictionaries(
    {},
    optional={
        "environment": st.dictionaries(st.sampled_from(["device", "host", "soc_version"]), JSON, max_size=3),
        "workload": st.sampled_from(["inference", "training"]) | JSON,
        "measurements": st.lists(
            st.dictionaries(
                st.sampled_from(["backend", "mode", "status", "latency", "speedup_vs_eager", "stderr_tail", "x"]),
                JSON,
            ),
            max_size=3,
        ),
    },
)


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(inspection=JSON, measurements=SHAPED | JSON)
def test_any_json_is_either_refused_with_a_field_or_stored_as_strict_json(inspection, measurements):
    try:
        stored = accept_results(inspection, measurements)
    except ResultsInvalid as exc:
        assert exc.problems and all(problem["field"] for problem in exc.problems)
        return
    json.dumps(stored, allow_nan=False)  # what report.json and the pages serve
