"""Upload benchmark (issue 30): concurrent distinct large uploads into S3-compatible object storage across two API
replicas, against the local directory store on one replica.

Starts an S3 protocol server (moto's server mode, its own process), then per scenario real API processes (`uvicorn
--factory app.main:create_app`, no worker) on one database (PostgreSQL when given - its public schema is DROPPED
first, use a scratch database - else one SQLite file), and sends `--uploads` concurrent submissions of distinct
`--size-mb` ExportedProgram-shaped zips, spread over the replicas in turn; a 429 / 503 is retried after its
Retry-After plus up to 1 s of jitter, as the CLI does. The models are streamed from one shared buffer (the large
entry is the same in all; a small entry and the central directory make each distinct), so the client holds one copy.

Reports per scenario: p50 / p95 / max upload time (first try to its 202, waits included), 429/503 answers, other
5xx, API-process peak RSS (VmHWM), and checks: every upload ends 202 with its analysis, every model stored once
under its hash (bucket objects / files), nothing left under incoming/ and no open multipart upload.

    .venv/bin/python benchmarks/s3_uploads.py --postgres-url postgresql+psycopg://...   # 100 x 50 MB
    .venv/bin/python benchmarks/s3_uploads.py --uploads 20 --size-mb 10                  # smaller, SQLite
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONTEXT = json.dumps({"stage": "production", "target": "cpu"})
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret"}
FIXED_TIME = (2026, 1, 1, 0, 0, 0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Models:
    """Distinct zips sharing one large first entry: `prefix` (shared bytes) + a per-seed tail."""

    def __init__(self, size_mb: int) -> None:
        self.pad = random.Random(0).randbytes(size_mb << 20)
        self.prefix = self._zip(0)[: self._split()]

    def _entries(self, seed: int) -> list[tuple[zipfile.ZipInfo, bytes]]:
        pad = zipfile.ZipInfo("archive/data/pad.bin", FIXED_TIME)
        meta = zipfile.ZipInfo("archive/models/model.json", FIXED_TIME)
        return [(pad, self.pad), (meta, json.dumps({"seed": seed}).encode())]

    def _zip(self, seed: int) -> bytes:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
            for info, data in self._entries(seed):
                archive.writestr(info, data)
        return buffer.getvalue()

    def _split(self) -> int:
        with zipfile.ZipFile(io.BytesIO(self._zip(0))) as archive:
            return archive.getinfo("archive/models/model.json").header_offset

    def tail(self, seed: int) -> bytes:
        """The bytes after the shared prefix (the pad's CRC is computed again per seed: ~50 ms for 50 MB)."""
        return self._zip(seed)[len(self.prefix) :]


class Body(io.RawIOBase):
    """prefix + tail as one seekable file, without copying the prefix."""

    def __init__(self, prefix: bytes, tail: bytes) -> None:
        self.parts = [memoryview(prefix), memoryview(tail)]
        self.size = len(prefix) + len(tail)
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = 0) -> int:
        self.position = {0: 0, 1: self.position, 2: self.size}[whence] + offset
        return self.position

    def readinto(self, buffer) -> int:  # noqa: ANN001
        start, written = self.position, 0
        for part in self.parts:
            if start >= len(part):
                start -= len(part)
                continue
            chunk = part[start : start + len(buffer) - written]
            buffer[written : written + len(chunk)] = chunk
            written += len(chunk)
            start = 0
            if written == len(buffer):
                break
        self.position += written
        return written


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_api(env: dict, data_dir: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app", "--port", str(port)]
    command += ["--log-level", "warning"]
    process_env = env | {"ADVISOR_DATA_DIR": str(data_dir), "ADVISOR_PORT": str(port)}
    process = subprocess.Popen(command, env=process_env, cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the API did not start:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the API never became ready:\n{log.read_text()[-3000:]}")


async def upload_all(urls: list[str], models: Models, uploads: int) -> tuple[list[float], Counter, list[dict]]:
    busy: Counter = Counter()
    times: list[float] = []
    accepted: list[dict] = []
    limits = httpx.Limits(max_connections=uploads + 10, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:

        async def one(seed: int) -> None:
            url = urls[seed % len(urls)]
            tail = await asyncio.to_thread(models.tail, seed)
            started = time.monotonic()
            for _ in range(200):
                body = Body(models.prefix, tail)
                response = await client.post(
                    f"{url}/api/v1/analyze",
                    files={"model": (f"m{seed}.pt2", body, "application/octet-stream")},
                    data={"context": CONTEXT},
                )
                if response.status_code in (429, 503) and "retry-after" in response.headers:
                    busy[response.status_code] += 1
                    await asyncio.sleep(float(response.headers["retry-after"]) + random.random())
                    continue
                if response.status_code >= 500:
                    busy["other 5xx"] += 1
                if response.status_code != 202:
                    raise RuntimeError(f"upload {seed}: {response.status_code} {response.text[:300]}")
                times.append(time.monotonic() - started)
                accepted.append(response.json() | {"via": url})
                return
            raise RuntimeError(f"upload {seed}: still refused after 200 tries")

        await asyncio.gather(*(one(seed) for seed in range(uploads)))
    return times, busy, accepted


def scenario(name: str, env: dict, replicas: int, models: Models, uploads: int, work: Path) -> dict:
    processes, urls = [], []
    try:
        for index in range(replicas):
            process, url = start_api(env, work / f"{name}-{index}", work / f"{name}-{index}.log")
            processes.append(process)
            urls.append(url)
        started = time.monotonic()
        times, busy, accepted = asyncio.run(upload_all(urls, models, uploads))
        wall = time.monotonic() - started
        rss = [peak_rss_mib(process.pid) for process in processes]
        listed = httpx.get(f"{urls[-1]}/api/v1/analyses", params={"per_page": 1}, timeout=30).json()["total"]
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)
    times.sort()
    return {
        "scenario": name,
        "replicas": replicas,
        "uploads": uploads,
        "size_mb": len(models.prefix) >> 20,
        "wall_s": round(wall, 1),
        "p50_s": round(statistics.median(times), 2),
        "p95_s": round(times[min(len(times) - 1, int(0.95 * len(times)))], 2),
        "max_s": round(times[-1], 2),
        "busy_answers": dict(busy),
        "api_peak_rss_mib": [round(value) for value in rss],
        "analyses_listed": listed,
        "accepted": len(accepted),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uploads", type=int, default=100)
    parser.add_argument("--size-mb", type=int, default=50)
    parser.add_argument("--postgres-url", default=os.environ.get("ADVISOR_TEST_POSTGRES_URL"))
    args = parser.parse_args()
    models = Models(args.size_mb)
    work = Path(tempfile.mkdtemp(prefix="s3-uploads-"))
    s3_port = free_port()
    moto = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(s3_port)],
        stdout=(work / "moto.log").open("ab"),
        stderr=subprocess.STDOUT,
        env=os.environ | CREDENTIALS,
    )
    failures = []
    results = []
    try:
        endpoint = f"http://127.0.0.1:{s3_port}"
        os.environ.update(CREDENTIALS)
        from app.object_store import s3_client

        client = s3_client(endpoint_url=endpoint, region="us-east-1")
        deadline = time.monotonic() + 30
        while True:
            try:
                client.create_bucket(Bucket="bench")
                break
            except Exception:  # noqa: BLE001 - not up yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        base = {k: v for k, v in os.environ.items() if not k.startswith("ADVISOR_")} | CREDENTIALS
        base |= {"ADVISOR_MAX_UPLOAD_MB": str(args.size_mb * 2), "ADVISOR_MAX_UPLOADS_PER_CLIENT": "0"}

        def database(name: str) -> dict:
            if not args.postgres_url:
                return {"ADVISOR_DATABASE_URL": f"sqlite:///{work / (name + '.db')}"}
            from sqlalchemy import create_engine, text

            engine = create_engine(args.postgres_url)
            with engine.begin() as connection:
                connection.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
            engine.dispose()
            return {"ADVISOR_DATABASE_URL": args.postgres_url, "ADVISOR_API_REPLICAS": "2"}

        s3_env = (
            base
            | database("s3")
            | {
                "ADVISOR_ARTIFACT_STORE": "s3://bench/team",
                "ADVISOR_S3_ENDPOINT_URL": endpoint,
                "ADVISOR_S3_REGION": "us-east-1",
            }
        )
        results.append(scenario("s3", s3_env, 2, models, args.uploads, work))
        objects = [
            item["Key"]
            for page in client.get_paginator("list_objects_v2").paginate(Bucket="bench")
            for item in page.get("Contents", [])
        ]
        stored = [key for key in objects if "/artifacts/" in key]
        leftovers = [key for key in objects if "/incoming/" in key]
        open_uploads = client.list_multipart_uploads(Bucket="bench").get("Uploads", [])
        results[-1] |= {"objects": len(stored), "incoming_left": len(leftovers), "open_multipart": len(open_uploads)}
        if len(stored) != args.uploads or leftovers or open_uploads:
            failures.append(f"s3: {len(stored)} objects, {len(leftovers)} incoming, {len(open_uploads)} multipart")

        local_env = base | database("local")
        local_env.pop("ADVISOR_API_REPLICAS", None)
        results.append(scenario("local", local_env, 1, models, args.uploads, work))
        files = [p for p in (work / "local-0" / "artifacts").rglob("*") if p.is_file()]
        results[-1] |= {"files": len(files)}
        if len(files) != args.uploads:
            failures.append(f"local: {len(files)} files stored")
    finally:
        moto.terminate()
        moto.wait(30)
    for result in results:
        print(json.dumps(result))
        if result["accepted"] != args.uploads or result["analyses_listed"] != args.uploads:
            failures.append(f"{result['scenario']}: {result['accepted']} accepted, {result['analyses_listed']} listed")
        if result["busy_answers"].get("other 5xx"):
            failures.append(f"{result['scenario']}: other 5xx")
    for failure in failures:
        print("FAIL", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
