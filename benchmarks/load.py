"""Load benchmark: concurrent distinct uploads while the dashboard is read, against the real server.

Starts the server (`uvicorn --factory app.main:create_app` subprocess, no embedded worker) with tokens
required, creates `--clients` user tokens, then at once: `--uploads` concurrent submissions of distinct
~8 KiB ExportedProgram-shaped zips (spread over the tokens; a 429 / 503 is retried after its Retry-After plus
up to 1 s of jitter, as the CLI does), `--readers` dashboard readers (signed in through /login like a
browser; each loops over GET / and GET /api/v1/analyses with 0.1 s between) and a /healthz poller (every
0.2 s). Uploaders, readers and poller run in three processes, so one's client-side work is not timed as
another's latency; each upload try uses a new connection, as a CLI process does. Afterwards it checks the
database: every 202 id has its analysis and exactly one job, no analysis lacks a job, no stored file lacks
its artifact row.

Checks (exit status 1 if any fails): every submission ends 202 (or 200) after 0 or more explicit 429 / 503 with
Retry-After; 0 other 5xx or unanswered requests; every 202 in the database; dashboard p95 < 500 ms;
/healthz max < 1 s.

    .venv/bin/python benchmarks/load.py                          # SQLite
    .venv/bin/python benchmarks/load.py --postgres-url URL       # SQLite, then PostgreSQL (its public schema
                                                                 # is DROPPED first: use a scratch database)
    ADVISOR_TEST_POSTGRES_URL=URL .venv/bin/python benchmarks/load.py   # the same
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import multiprocessing
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONTEXT = json.dumps({"stage": "production", "target": "cpu"})
MAX_ATTEMPTS = 100
DASHBOARD_P95_LIMIT_MS = 500
HEALTHZ_MAX_LIMIT_MS = 1000


def model_bytes(seed: int, size: int = 8 * 1024) -> bytes:
    """A distinct ~8 KiB zip shaped like torch.export.save output (passes advisor.core.artifacts.sniff)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/models/model.json", json.dumps({"seed": seed}))
        archive.writestr("archive/data/pad.bin", random.Random(seed).randbytes(size))
    return buffer.getvalue()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def prepare_database(url: str, clients: int) -> list[str]:
    """Migrate (PostgreSQL: from an empty public schema) and create `clients` user tokens."""
    from sqlalchemy import text
    from sqlmodel import Session

    from app.auth import create_token
    from app.db import create_db_engine, upgrade_database
    from app.job_queue import utcnow

    engine = create_db_engine(url)
    if url.startswith("postgresql"):
        with engine.begin() as connection:
            connection.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    upgrade_database(engine)
    with Session(engine) as session:
        tokens = [create_token(session, role="user", name=f"load-{n}", now=utcnow())[1] for n in range(clients)]
    engine.dispose()
    return tokens


def start_server(data_dir: Path, url: str, port: int, log: Path) -> subprocess.Popen:
    env = dict(os.environ, ADVISOR_DATA_DIR=str(data_dir), ADVISOR_DATABASE_URL=url, ADVISOR_REQUIRE_AUTH="true")
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "--factory",
        "app.main:create_app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    server = subprocess.Popen(command, env=env, cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.2)
    server.kill()
    raise RuntimeError(f"the server did not become ready within 60 s; its log: {log}")


@dataclass
class Uploads:
    final: Counter = field(default_factory=Counter)  # each submission's last status (or the transport error)
    busy: Counter = field(default_factory=Counter)  # 429 / 503 answers on the way
    busy_without_retry_after: int = 0
    attempts: list[int] = field(default_factory=list)
    accepted_ids: list[int] = field(default_factory=list)
    submit_s: list[float] = field(default_factory=list)  # first try to final answer
    elapsed_s: float = 0.0


@dataclass
class Observers:
    reads: dict[str, list[float]] = field(default_factory=dict)  # path -> latencies (ms)
    read_statuses: Counter = field(default_factory=Counter)
    healthz_ms: list[float] = field(default_factory=list)
    healthz_failures: int = 0


async def submit(client: httpx.AsyncClient, token: str, seed: int, tally: Uploads) -> None:
    data = model_bytes(seed)
    started = time.monotonic()
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            response = await client.post(
                "/api/v1/analyze",
                files={"model": (f"load-{seed}.pt2", data, "application/octet-stream")},
                data={"context": CONTEXT, "model_name": f"load-{seed}"},
                headers={"Authorization": f"Bearer {token}"},
            )
        except httpx.HTTPError as exc:
            tally.final[f"no answer ({type(exc).__name__})"] += 1
            tally.attempts.append(attempt)
            return
        if response.status_code in (429, 503):
            tally.busy[response.status_code] += 1
            retry_after = response.headers.get("retry-after")
            if retry_after is None:
                tally.busy_without_retry_after += 1
            await asyncio.sleep(float(retry_after or 1) + random.uniform(0, 1))
            continue
        tally.final[response.status_code] += 1
        tally.attempts.append(attempt)
        tally.submit_s.append(time.monotonic() - started)
        if response.status_code in (200, 202):
            tally.accepted_ids.append(response.json()["id"])
        return
    tally.final["still busy after 100 tries"] += 1


def upload_burst(base: str, tokens: list[str], uploads: int) -> Uploads:
    """All uploads at once, in a process of its own (so the observers' timings are not the uploaders' loop)."""

    async def burst() -> Uploads:
        tally = Uploads()
        # a connection per try, as a CLI process makes: a kept-alive one could be closed by the server's idle
        # timeout while a retry (2-3 s later) is sent on it, which no server can answer
        limits = httpx.Limits(max_connections=uploads + 10, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as client:
            started = time.monotonic()
            await asyncio.gather(*(submit(client, tokens[n % len(tokens)], n, tally) for n in range(uploads)))
            tally.elapsed_s = time.monotonic() - started
        return tally

    return asyncio.run(burst())


async def read_dashboard(base: str, token: str, done: asyncio.Event, seen: Observers) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        signed_in = await client.post("/login", data={"token": token, "next": "/"}, follow_redirects=False)
        assert signed_in.status_code == 303, f"sign-in failed: {signed_in.status_code} {signed_in.text[:200]}"
        while not done.is_set():
            for path in ("/", "/api/v1/analyses"):
                started = time.monotonic()
                try:
                    response = await client.get(path)
                    seen.read_statuses[response.status_code] += 1
                except httpx.HTTPError as exc:
                    seen.read_statuses[f"no answer ({type(exc).__name__})"] += 1
                seen.reads.setdefault(path, []).append((time.monotonic() - started) * 1000)
                await asyncio.sleep(0.1)


def poll_healthz(base: str, stop, results) -> None:  # noqa: ANN001 - multiprocessing Event / Queue
    """GET /healthz every 0.2 s until `stop` is set, in a process of its own; puts (latencies ms, failures)."""
    latencies, failures = [], 0
    with httpx.Client(base_url=base, timeout=5) as client:
        while not stop.is_set():
            started = time.monotonic()
            try:
                ok = client.get("/healthz").status_code == 200
            except httpx.HTTPError:
                ok = False
            latencies.append((time.monotonic() - started) * 1000)
            failures += not ok
            time.sleep(0.2)
    results.put((latencies, failures))


async def drive(base: str, tokens: list[str], uploads: int, readers: int) -> tuple[Uploads, Observers]:
    """Readers here; the /healthz poller and the uploaders each in a process of their own, so that one's
    client-side work does not show up as another's latency."""
    seen = Observers()
    done = asyncio.Event()
    spawn = multiprocessing.get_context("spawn")
    stop, healthz = spawn.Event(), spawn.Queue()
    poller = spawn.Process(target=poll_healthz, args=(base, stop, healthz), daemon=True)
    poller.start()
    observers = [asyncio.create_task(read_dashboard(base, tokens[n % len(tokens)], done, seen)) for n in range(readers)]
    await asyncio.sleep(1)  # the readers and the poller are running before the burst
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
        tally = await asyncio.get_running_loop().run_in_executor(pool, upload_burst, base, tokens, uploads)
    await asyncio.sleep(1)
    done.set()
    stop.set()
    await asyncio.gather(*observers)
    seen.healthz_ms, seen.healthz_failures = healthz.get(timeout=30)
    poller.join(timeout=30)
    return tally, seen


def check_database(url: str, store_dir: Path, accepted: list[int]) -> dict:
    from sqlalchemy import func, select
    from sqlmodel import Session

    from app.db import create_db_engine
    from app.models import Analysis, Artifact, Job

    engine = create_db_engine(url)
    with Session(engine) as session:
        jobs = dict(
            session.execute(
                select(Analysis.id, func.count(Job.id))
                .select_from(Analysis)
                .outerjoin(Job, Job.analysis_id == Analysis.id)
                .group_by(Analysis.id)
            ).all()
        )
        artifacts = set(session.scalars(select(Artifact.sha256)))
    engine.dispose()
    files = {path.name for path in store_dir.glob("??/*")}
    return {
        "analyses": len(jobs),
        "accepted_ids_missing": sum(1 for analysis_id in accepted if jobs.get(analysis_id) != 1),
        "analyses_without_exactly_one_job": sum(1 for count in jobs.values() if count != 1),
        "stored_files_without_row": len(files - artifacts),
    }


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(name: str, url: str, uploads: int, readers: int, clients: int, workdir: Path) -> dict:
    data_dir = workdir / name
    data_dir.mkdir()
    if url == "sqlite":
        url = f"sqlite:///{data_dir / 'advisor.db'}"
    tokens = prepare_database(url, clients)
    port = free_port()
    log = workdir / f"{name}-server.log"
    server = start_server(data_dir, url, port, log)
    try:
        tally, seen = asyncio.run(drive(f"http://127.0.0.1:{port}", tokens, uploads, readers))
    finally:
        server.terminate()
        server.wait(timeout=30)
    database = check_database(url, data_dir / "artifacts", tally.accepted_ids)
    server_log = log.read_text(errors="replace")
    reads = [ms for values in seen.reads.values() for ms in values]
    other_5xx = sum(n for status, n in tally.final.items() if not isinstance(status, int) or status >= 500)
    other_5xx += sum(n for status, n in seen.read_statuses.items() if not isinstance(status, int) or status >= 500)
    result = {
        "database": name,
        "uploads": uploads,
        "clients (tokens)": clients,
        "readers": readers,
        "final statuses": dict(tally.final),
        "429 answers (retried)": tally.busy[429],
        "503 answers (retried)": tally.busy[503],
        "429/503 without Retry-After": tally.busy_without_retry_after,
        "tries per submission (max)": max(tally.attempts, default=0),
        "all submitted in": f"{tally.elapsed_s:.1f} s",
        "submission p50 / p95 (with retries)": f"{percentile(tally.submit_s, 0.5):.2f} / "
        f"{percentile(tally.submit_s, 0.95):.2f} s",
        "other 5xx or no answer": other_5xx,
        "dashboard requests": len(reads),
        "dashboard statuses": dict(seen.read_statuses),
        **{
            f"{path} p50 / p95 / max": f"{percentile(ms, 0.5):.0f} / {percentile(ms, 0.95):.0f} / {max(ms):.0f} ms"
            for path, ms in seen.reads.items()
        },
        "dashboard p95": round(percentile(reads, 0.95)),
        "/healthz polls": len(seen.healthz_ms),
        "/healthz p50": round(percentile(seen.healthz_ms, 0.5)),
        "/healthz max": round(max(seen.healthz_ms, default=float("nan"))),
        "/healthz failures": seen.healthz_failures,
        **database,
        "server log: tracebacks": server_log.count("Traceback"),
        "server log: 'database is locked'": server_log.count("database is locked"),
        "server log: 'QueuePool limit'": server_log.count("QueuePool limit"),
    }
    result["checks"] = {
        "every submission accepted": set(tally.final) <= {200, 202} and sum(tally.final.values()) == uploads,
        "every 429/503 had Retry-After": tally.busy_without_retry_after == 0,
        "0 other 5xx / unanswered": other_5xx == 0 and seen.healthz_failures == 0,
        "every 202 has its analysis and one job": database["accepted_ids_missing"] == 0
        and database["analyses_without_exactly_one_job"] == 0
        and database["analyses"] == len(tally.accepted_ids),
        f"dashboard p95 < {DASHBOARD_P95_LIMIT_MS} ms": result["dashboard p95"] < DASHBOARD_P95_LIMIT_MS,
        f"/healthz max < {HEALTHZ_MAX_LIMIT_MS} ms": result["/healthz max"] < HEALTHZ_MAX_LIMIT_MS,
    }
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uploads", type=int, default=100)
    parser.add_argument("--readers", type=int, default=8)
    parser.add_argument("--clients", type=int, default=4, help="user tokens the uploads are spread over")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("ADVISOR_TEST_POSTGRES_URL"),
        help="also run on this PostgreSQL database (its public schema is dropped first)",
    )
    parser.add_argument("--skip-sqlite", action="store_true")
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--workdir", type=Path, help="keep data and server logs here (default: a temp dir)")
    args = parser.parse_args()
    targets = [] if args.skip_sqlite else [("sqlite", "sqlite")]
    if args.postgres_url:
        targets.append(("postgresql", args.postgres_url))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for name, url in targets:
            result = run(name, url, args.uploads, args.readers, args.clients, workdir)
            results.append(result)
            print(json.dumps(result, indent=2, default=str), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    failed = [f"{r['database']}: {check}" for r in results for check, ok in r["checks"].items() if not ok]
    print("FAILED: " + "; ".join(failed) if failed else "all checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
