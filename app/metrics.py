"""Prometheus metrics: queue depth and analyses by outcome (read from the DB at scrape time), job durations."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import Engine, func, select
from sqlmodel import Session

from advisor.core.status import AnalysisStatus
from app.models import MEASURE, Job, JobStatus

JOB_DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, float("inf"))


class _DatabaseCollector(Collector):
    """Counts read at scrape time, so they survive restarts and are right with several server processes."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily("advisor_queue_jobs", "Jobs per state and device kind", labels=["state", "device"])
        outcomes = GaugeMetricFamily("advisor_analyses", "Analyses per status (outcome)", labels=["status"])
        with Session(self.engine) as session:
            rows = session.execute(
                select(Job.status, Job.device_kind, Job.purpose, func.count()).group_by(
                    Job.status, Job.device_kind, Job.purpose
                )
            ).all()
        per_status: dict[str, int] = dict.fromkeys(AnalysisStatus, 0)
        per_depth: dict[tuple[str, str], int] = {}
        for status, device, purpose, count in rows:
            per_depth[status, device] = per_depth.get((status, device), 0) + count
            if purpose == MEASURE:  # an analysis' status is its measure job's (inspect jobs: device "any")
                per_status[JobStatus(status).analysis_status] += count
        for (status, device), count in per_depth.items():
            depth.add_metric([status, device], count)
        for status, count in per_status.items():
            outcomes.add_metric([status], count)
        yield depth
        yield outcomes


class ServiceMetrics:
    """One registry per app (tests create many apps in one process)."""

    def __init__(self, engine: Engine) -> None:
        self.registry = CollectorRegistry()
        self.job_duration = Histogram(
            "advisor_job_duration_seconds",
            "Wall time from claim to the job's end, by outcome",
            labelnames=["outcome"],
            buckets=JOB_DURATION_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_DatabaseCollector(engine))

    def render(self) -> bytes:
        return generate_latest(self.registry)
