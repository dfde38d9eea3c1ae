"""Ingest benchmark: upload a 1 GiB model through the real HTTP server (uvicorn in a subprocess).

The model is a generated, valid ExportedProgram zip container (a small models/model.json plus one large
stored weights entry): the server only sniffs the zip directory, so the content need not be a real model.
Reports the server's peak RSS growth during the upload (VmHWM after minus VmRSS before) and the upload
throughput as a ratio to a plain file copy of the same file on the same disk.

    .venv/bin/python benchmarks/ingest.py [--size-mib 1024] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import httpx

CHUNK = 1 << 20


def make_container(path: Path, size_mib: int) -> Path:
    """A valid ExportedProgram-layout zip whose weights entry is `size_mib` MiB of stored (uncompressed) bytes."""
    block = os.urandom(CHUNK)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        archive.writestr("model/models/model.json", json.dumps({"graph_module": {"graph": {"nodes": []}}}))
        archive.writestr("model/version", "1")
        with archive.open("model/data/weights/model.pt", "w", force_zip64=True) as out:
            for _ in range(size_mib):
                out.write(block)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


def start_server(data_dir: Path, port: int, size_mib: int) -> subprocess.Popen:
    env = dict(os.environ, ADVISOR_DATA_DIR=str(data_dir), ADVISOR_MAX_UPLOAD_MB=str(size_mib + 64))
    env["TMPDIR"] = str(data_dir)  # the multipart spool file lands on the same disk as the store
    server = subprocess.Popen(
        [
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
        ],
        env=env,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.2)
    server.kill()
    raise RuntimeError("the server did not become ready within 60 s")


def run(size_mib: int, workdir: Path) -> dict:
    model = make_container(workdir / "big.pt2", size_mib)
    size = model.stat().st_size

    started = time.perf_counter()
    shutil.copyfile(model, workdir / "copy.bin")
    os.sync()
    copy_s = time.perf_counter() - started
    (workdir / "copy.bin").unlink()

    port = free_port()
    server = start_server(workdir / "data", port, size_mib)
    try:
        baseline_kib = rss_kib(server.pid, "VmRSS")
        with open(model, "rb") as fh, httpx.Client(timeout=600) as client:
            started = time.perf_counter()
            response = client.post(
                f"http://127.0.0.1:{port}/api/v1/analyze",
                files={"model": ("big.pt2", fh, "application/octet-stream")},
                data={"context": json.dumps({"target": "cpu"})},
            )
            os.sync()
            upload_s = time.perf_counter() - started
        peak_kib = rss_kib(server.pid, "VmHWM")
    finally:
        server.terminate()
        server.wait(timeout=30)
    if response.status_code != 202:
        raise RuntimeError(f"upload failed: {response.status_code} {response.text[:300]}")
    return {
        "size_mib": round(size / CHUNK, 1),
        "status": response.status_code,
        "upload_s": round(upload_s, 2),
        "upload_mib_per_s": round(size / CHUNK / upload_s, 1),
        "plain_copy_s": round(copy_s, 2),
        "plain_copy_mib_per_s": round(size / CHUNK / copy_s, 1),
        "throughput_ratio_to_copy": round(copy_s / upload_s, 3),
        "server_rss_before_mib": round(baseline_kib / 1024, 1),
        "server_peak_rss_growth_mib": round((peak_kib - baseline_kib) / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--workdir", type=Path, default=None, help="a folder on the disk to test (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        print(json.dumps(run(args.size_mib, Path(tmp)), indent=2))


if __name__ == "__main__":
    main()
