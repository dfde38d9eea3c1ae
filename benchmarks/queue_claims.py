"""Queue benchmark: N concurrent workers (threads, each with its own session and connection) claim M jobs.

Checks that no job is claimed twice and reports claims per second. Default: 16 workers, 2,000 jobs, a
temp-file SQLite database (or --database-url postgresql+psycopg://...).

    .venv/bin/python benchmarks/queue_claims.py [--workers 16] [--jobs 2000] [--database-url URL]
"""

from __future__ import annotations

import argparse  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path

from sqlmodel import Session  # noqa: E402

from app.db import create_db_engine, upgrade_database  # noqa: E402
from app.job_queue import JobQueue, QueuePolicy  # noqa: E402
from app.models import Analysis, Artifact  # noqa: E402


def seed(engine, queue: JobQueue, jobs: int) -> None:  # noqa: ANN001
    now = datetime.now(UTC)
    with Session(engine) as session:
        session.add(Artifact(sha256="0" * 64, size_bytes=1, created_at=now))
        session.commit()
        analyses = [
            Analysis(
                model_name=f"m{i}",
                target="cpu",
                artifact_sha256="0" * 64,
                context={},
                dedupe_key=str(i),
                created_at=now,
                updated_at=now,
            )
            for i in range(jobs)
        ]
        session.add_all(analyses)
        session.commit()
        for analysis in analyses:
            queue.enqueue(session, analysis_id=analysis.id, device_kind="cpu")


def run(workers: int, jobs: int, database_url: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        url = database_url or f"sqlite:///{Path(tmp) / 'bench.db'}"
        engine = create_db_engine(url)
        upgrade_database(engine)
        queue = JobQueue(QueuePolicy(lease_ttl_s=3600))
        seed(engine, queue, jobs)
        worker_ids = []
        with Session(engine) as session:
            for i in range(workers):
                worker_ids.append(queue.register_worker(session, name=f"w{i}", device_kind="cpu", backends=[]).id)
        claimed: list[int] = []
        per_worker = Counter()
        errors: list[str] = []
        lock = threading.Lock()
        start_gate = threading.Barrier(workers)

        def work(worker_id: str) -> None:
            start_gate.wait()
            with Session(engine, expire_on_commit=False) as session:
                try:
                    while (lease := queue.claim(session, worker_id=worker_id)) is not None:
                        with lock:
                            claimed.append(lease.job.id)
                            per_worker[worker_id] += 1
                except Exception as exc:  # noqa: BLE001 - counted and reported
                    errors.append(f"{type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=work, args=(w,)) for w in worker_ids]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
        engine.dispose()
    counts = Counter(claimed)
    return {
        "database": "postgresql" if database_url and database_url.startswith("postgresql") else "sqlite (file, WAL)",
        "workers": workers,
        "jobs": jobs,
        "claimed": len(claimed),
        "distinct_claimed": len(counts),
        "double_claims": sum(1 for c in counts.values() if c > 1),
        "errors": errors[:5],
        "elapsed_s": round(elapsed, 3),
        "claims_per_s": round(len(claimed) / elapsed, 1),
        "claims_per_worker_min_max": [min(per_worker.values(), default=0), max(per_worker.values(), default=0)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    result = run(args.workers, args.jobs, args.database_url)
    print(json.dumps(result, indent=2))
    if result["double_claims"] or result["distinct_claimed"] != args.jobs or result["errors"]:
        raise SystemExit("FAILED: double claims, missed jobs or errors (see above)")


if __name__ == "__main__":
    main()
