"""Synthetic analyses in the shapes of advisor.core.results, for page tests and the dashboard benchmark.

They are made-up numbers (clearly: measured_on = "synthetic"), never shown as measurements of anything.
`seed_analyses` writes them straight into the server's tables the way the server stores a finished job.
"""

from __future__ import annotations

import hashlib
import io
import random
import zipfile
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, insert, select
from sqlmodel import Session

from app.models import Analysis, Artifact, Job
from app.outcomes import recommendation_columns

DEFAULT_BACKENDS = (("eager", "default"), ("inductor", "default"), ("inductor", "max-autotune"))


def torchscript_zip() -> bytes:
    """A zip laid out like a TorchScript archive: enough for the server's sniffing (it never loads models)."""
    buffer = io.BytesIO()
    entries = {
        "tiny/data.pkl": b"\x80\x02}q\x00.",
        "tiny/code/__torch__.py": b"def forward(self, x):\n    return x\n",
        "tiny/version": b"3\n",
    }
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries.items():
            # a fixed time stamp: the same bytes (and sha256) on every call, whichever 2-second zip tick it falls in
            archive.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data)
    return buffer.getvalue()


def latency(median_ms: float, spread: float = 0.04) -> dict[str, Any]:
    return {
        "n": 200,
        "median_ms": median_ms,
        "p90_ms": median_ms * 1.08,
        "p99_ms": median_ms * 1.3,
        "mean_ms": median_ms * 1.02,
        "stdev_ms": median_ms * spread,
        "iqr_ms": median_ms * spread,
        "ci_low_ms": median_ms * (1 - spread),
        "ci_high_ms": median_ms * (1 + spread),
        "verdict": "valid",
    }


def measurement(backend: str, mode: str, median_ms: float, compile_s: float, eager_ms: float) -> dict[str, Any]:
    return {
        "backend": backend,
        "mode": mode,
        "family": "baseline" if backend == "eager" else ("vendor" if backend == "torchair" else "generic"),
        "device": "cpu",
        "workload": "inference",
        "status": "ok",
        "reason": None,
        "stderr_tail": None,
        "compile_s_cold": compile_s,
        "compile_s_warm": compile_s / 4 if compile_s else compile_s,
        "latency": latency(median_ms),
        "eager_latency": latency(eager_ms),
        "speedup_vs_eager": round(eager_ms / median_ms, 3),
        "speedup_ci": [round(eager_ms / median_ms * 0.95, 3), round(eager_ms / median_ms * 1.05, 3)],
        "peak_memory_mb": 40.0,
        "memory_kind": "rss",
        "accuracy": {
            "passed": True,
            "max_abs_err": 1e-6,
            "rmse": 2e-7,
            "reference_rmse": 2e-7,
            "rmse_ratio": 1.0,
            "cosine": 1.0,
            "atol": 1e-5,
            "rtol": 1.3e-6,
        },
        "graph_count": 1,
        "graph_breaks": 0,
        "recompiles": 0,
        "throughput": None,
        "dynamic": None,
        "wall_s": 3.0 + compile_s,
        "snippet": f"model = torch.compile(model, backend={backend!r})" if backend != "eager" else "model = model",
    }


def run(
    backends: tuple[tuple[str, str], ...] = DEFAULT_BACKENDS, *, measured_on: str = "synthetic", seed: int = 0
) -> dict[str, Any]:
    """A MeasurementRun where every compiled backend is faster than eager but pays a compile time."""
    rng = random.Random(seed)
    eager_ms = round(rng.uniform(1.0, 5.0), 3)
    rows = []
    for i, (backend, mode) in enumerate(backends):
        if backend == "eager":
            rows.append(measurement(backend, mode, eager_ms, 0.0, eager_ms))
        else:
            rows.append(measurement(backend, mode, round(eager_ms / (1.2 + 0.4 * i), 3), 2.0 + 6.0 * i, eager_ms))
    environment = {
        "device": "cpu",
        "device_name": "synthetic CPU",
        "torch_version": "2.13.0",
        "python_version": "3.11",
        "host": "test-host",
        "measured_on": measured_on,
    }
    return {"environment": environment, "workload": "inference", "measurements": rows}


def noisy_run(*, whole_run: bool = False, seed: int = 0) -> dict[str, Any]:
    """A run advisor.core.noise calls noisy: the last compiled row's side-by-side speedup CI spans 3x (unresolved);
    with whole_run, eager also ran twice as slow in one process (the machine's speed changed mid-run)."""
    noisy = run(seed=seed)
    last = noisy["measurements"][-1]
    speedup = last["speedup_vs_eager"]
    last["speedup_ci"] = [round(speedup * 0.5, 3), round(speedup * 1.5, 3)]
    if whole_run:
        second = noisy["measurements"][1]
        second["eager_latency"] = latency(second["eager_latency"]["median_ms"] * 2)
    return noisy


def inspection(custom_ops: tuple[str, ...] = ("npu.npu_rms_norm.default",)) -> dict[str, Any]:
    def op(name: str, count: int, inductor: str, torchair: str, fake: bool = True) -> dict[str, Any]:
        return {
            "name": name,
            "namespace": name.split(".", 1)[0],
            "count": count,
            "has_fake_kernel": fake,
            "coverage": {"inductor": inductor, "torchair": torchair},
        }

    customs = [op(name, 2, "fallback", "supported", fake=False) for name in custom_ops]
    ops = [op("aten.linear.default", 3, "lowered", "supported"), op("aten.relu.default", 2, "lowered", "supported")]
    return {
        "format": "exported_program",
        "saved_with_torch": "2.13.0",
        "parameters": {"count": 10_000, "bytes": 40_000},
        "flops": 1_200_000,
        "inputs": [{"name": "x", "shape": [8, 64], "dtype": "float32"}],
        "ops": ops + customs,
        "custom_ops": customs,
        "graph_breaks": {
            "analysed": True,
            "count": 1,
            "graph_count": 2,
            "reasons": [{"reason": "Data-dependent branch on .item()", "location": "model.py:12 in forward"}],
        },
        "dynamic_dims": [],
        "torchair_coverage": {"source": "table", "torch_npu_version": "2.6.0"},
        "runnable": {"ok": True, "reason": None},
        "warnings": [],
    }


def recommendation(backend: str = "inductor", mode: str = "max-autotune") -> dict[str, Any]:
    return {
        "backend": backend,
        "mode": mode,
        "confidence": "high",
        "measured": True,
        "tie": False,
        "layered": None,
        "summary": f"{backend} {mode} is the fastest accurate option and pays off its compile time.",
        "path": [
            {
                "rule": "hard_filters",
                "question": "Which backends ran, were accurate and fit the budgets?",
                "evidence": {"excluded": []},
                "outcome": "all measured backends qualify",
            },
            {
                "rule": "production_prefers_steady_state",
                "question": "Is the model a fixed production model?",
                "evidence": {"stage": "production", "model_changes": "occasional"},
                "outcome": "favour steady-state speed",
            },
        ],
        "why_not": {"eager": "slowest steady state", "torchair": "unavailable: no NPU on this node"},
        "break_even": {"against": "eager", "calls": 4200},
        "caveats": [{"issue": "1 graph break", "fix": "remove the .item() branch"}],
        "snippet": f'model = torch.compile(model, backend="{backend}", mode="{mode}")',
        "engine_version": "test",
    }


def analysis_dict(analysis_id: int = 1, model_name: str = "tiny-mlp", *, status: str = "done") -> dict[str, Any]:
    """The API's analysis shape (`GET /api/v1/analyses/{id}`) of a finished analysis."""
    done = status == "done"
    return {
        "id": analysis_id,
        "status": status,
        "stage": None,
        "progress": 1.0 if done else 0.3,
        "model_name": model_name,
        "format": "exported_program",
        "target": "cpu",
        "context": {"stage": "production", "target": "cpu", "expected_calls_per_compile": 100_000},
        "inspection": inspection() if done else None,
        "measurements": run() if done else None,
        "recommendation": recommendation() if done else None,
        "error": None,
        "submitted_by": "alice",
        "created_at": datetime(2026, 12, 1, 10, 0, tzinfo=UTC),
        "updated_at": datetime(2026, 12, 1, 10, 5, tzinfo=UTC),
        "queue_position": None,
    }


_JOB_STATUS = {"done": "succeeded"} | {s: s for s in ("queued", "running", "failed", "cancelled")}


def seed_analyses(
    session: Session,
    count: int,
    *,
    names: tuple[str, ...] = ("resnet-lite", "tiny-bert", "mlp", "ranker-v2", "whisper-enc"),
    statuses: tuple[str, ...] = ("done", "done", "done", "failed", "queued", "running"),
    targets: tuple[str, ...] = ("cpu", "npu", "cuda"),
    seed: int = 0,
    batch: int = 2000,
) -> None:
    """Insert `count` analyses with their artifact and job rows (bulk inserts, one commit)."""
    rng = random.Random(seed)
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=count + 5)  # oldest first, all in the past
    first_id = (session.scalar(select(func.max(Analysis.id))) or 0) + 1
    sha = hashlib.sha256(b"synthetic model").hexdigest()
    if session.get(Artifact, sha) is None:
        session.add(Artifact(sha256=sha, kind="model", format="exported_program", size_bytes=1, created_at=start))
        session.flush()
    shared_run = run(seed=seed)
    shared_inspection = inspection()
    for offset in range(0, count, batch):
        analyses, jobs = [], []
        for i in range(offset, min(count, offset + batch)):
            analysis_id = first_id + i
            status = statuses[rng.randrange(len(statuses))]
            done = status == "done"
            backend, mode = ("inductor", "max-autotune") if rng.random() < 0.7 else ("eager", "default")
            created = start + timedelta(minutes=i)
            analyses.append(
                {
                    "id": analysis_id,
                    "model_name": f"{names[i % len(names)]}-{i}",
                    "format": "exported_program",
                    "target": targets[i % len(targets)],
                    "submitted_by": ("alice", "bob", "carol")[i % 3],
                    "artifact_sha256": sha,
                    "inputs_sha256": None,
                    "context": {"stage": ("production", "prototype", "edge")[i % 3], "target": targets[i % 3]},
                    "backends": ["eager", "inductor"],
                    "dedupe_key": f"synthetic-{analysis_id}",
                    "inspection": shared_inspection if done else None,
                    "measurements": shared_run if done else None,
                    "recommendation": recommendation(backend, mode) if done else None,
                    **recommendation_columns(recommendation(backend, mode) if done else None, shared_run),
                    "engine_version": "test" if done else None,
                    "created_at": created,
                    "updated_at": created,
                }
            )
            jobs.append(
                {
                    "analysis_id": analysis_id,
                    "device_kind": targets[i % len(targets)],
                    "priority": 0,
                    "max_attempts": 3,
                    "backends": ["eager", "inductor"],
                    "status": _JOB_STATUS[status],
                    "attempts": 1 if status != "queued" else 0,
                    "available_at": created,
                    "created_at": created,
                    "stage": "measure:inductor:default" if status == "running" else None,
                    "progress": 0.4 if status == "running" else None,
                    "last_error": "worker crashed twice" if status == "failed" else None,
                }
            )
        session.execute(insert(Analysis), analyses)
        session.execute(insert(Job), jobs)
    session.commit()
