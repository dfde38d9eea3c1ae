"""Dashboard benchmark: fill the database with N analyses, then time the list and detail pages.

The app is the real one (`app.main.create_app`) on a temp-file SQLite database; the analyses are
synthetic (tests/support/synthetic_analyses.py: about half finished, with inspection, measurements and recommendation
like a real finished job). Each scenario is requested `--repeat` times through an
in-process client after warm-up; the time is the full request (routing, queries, template) as the server
handles it, without a network.

    .venv/bin/python benchmarks/dashboard.py [--analyses 50000] [--repeat 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # for tests.support.synthetic_analyses

from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy import func, select  # noqa: E402
from sqlmodel import Session  # noqa: E402

from app.main import create_app  # noqa: E402
from app.models import Analysis  # noqa: E402
from app.settings import Settings  # noqa: E402
from tests.support import synthetic_analyses as synthetic  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = (len(ordered) - 1) * q
    low = int(index)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (index - low)


def time_requests(client: TestClient, url: str, repeat: int) -> dict:
    for _ in range(3):
        assert client.get(url).status_code == 200, url
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        response = client.get(url)
        samples.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    return {
        "url": url,
        "median_ms": round(statistics.median(samples), 1),
        "p95_ms": round(percentile(samples, 0.95), 1),
        "max_ms": round(max(samples), 1),
        "bytes": len(response.content),
    }


def run(analyses: int, repeat: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(Settings(data_dir=Path(tmp), reaper_interval_s=3600))
        started = time.perf_counter()
        with Session(app.state.engine, expire_on_commit=False) as session:
            synthetic.seed_analyses(session, analyses)
            done_id = session.scalar(select(func.max(Analysis.id)).where(Analysis.recommendation.is_not(None)))
            waiting_id = session.scalar(select(func.max(Analysis.id)).where(Analysis.recommendation.is_(None)))
        seed_s = time.perf_counter() - started
        db_mb = (Path(tmp) / "advisor.db").stat().st_size / 2**20
        last_page = (analyses + 24) // 25
        scenarios = {
            "list: newest first (default)": "/",
            "list: status=done": "/?status=done",
            "list: target=npu, backend=inductor": "/?target=npu&backend=inductor",
            "list: search model name": "/?model=bert-4",
            "list: sort by model name": "/?sort=model&order=asc",
            "list: sort by speedup": "/?sort=speedup&order=desc",
            "list: sort by speedup, ascending": "/?sort=speedup&order=asc",
            f"list: last page ({last_page})": f"/?page={last_page}",
            "detail: finished analysis": f"/analyses/{done_id}",
            "detail: unfinished analysis": f"/analyses/{waiting_id}",
        }
        with TestClient(app) as client:
            results = {name: time_requests(client, url, repeat) for name, url in scenarios.items()}
        app.state.engine.dispose()
    return {"analyses": analyses, "seed_s": round(seed_s, 1), "database_mb": round(db_mb, 1), "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--analyses", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--json", action="store_true", help="print the raw result as JSON")
    args = parser.parse_args()
    report = run(args.analyses, args.repeat)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{report['analyses']:,} analyses seeded in {report['seed_s']} s, database {report['database_mb']} MiB")
    print(f"{'scenario':42} {'median':>9} {'p95':>9} {'max':>9} {'KiB':>6}")
    for name, r in report["results"].items():
        print(f"{name:42} {r['median_ms']:>7} ms {r['p95_ms']:>6} ms {r['max_ms']:>6} ms {r['bytes'] / 1024:>6.0f}")


if __name__ == "__main__":
    main()
