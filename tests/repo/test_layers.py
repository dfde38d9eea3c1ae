"""The layers (docs/development.md "Architecture") are structure, not convention: import-linter's contracts hold
(function-level imports included), and a whole upload-to-dashboard round trip through the server imports no torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

ROUND_TRIP = """
import json, sys
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.support.fixtures_decide import inspection, measurement, run
from tests.support.synthetic_analyses import torchscript_zip

app = create_app(Settings(data_dir=sys.argv[1]))
with TestClient(app) as client:
    context = json.dumps({"stage": "production", "target": "cpu"})
    submitted = client.post("/api/v1/analyze", files={"model": ("tiny.pt", torchscript_zip())},
                            data={"context": context, "model_name": "tiny"})
    assert submitted.status_code == 202, submitted.text
    analysis_id = submitted.json()["id"]
    worker = client.post("/api/v1/workers/register",
                         json={"name": "w", "device_kind": "cpu", "backends": ["eager", "inductor"]}).json()
    lease = client.post(f"/api/v1/workers/{worker['worker_id']}/claim").json()
    job, token = lease["job"], lease["lease_token"]
    results = {"inspection": inspection(), "measurements": run(
        measurement("eager", median_ms=10.0, compile_s=None),
        measurement("inductor", median_ms=5.0, compile_s=8.0), device="cpu")}
    results["inspection"]["artifact_sha256"] = job["artifact_sha256"]
    done = client.post(f"/api/v1/jobs/{job['id']}/complete", headers={"X-Lease-Token": token}, json=results)
    assert done.json()["status"] == "done", done.text
    pages = ["/", f"/analyses/{analysis_id}", "/queue", f"/compare?ids={analysis_id}",
             f"/api/v1/analyses/{analysis_id}", f"/api/v1/analyses/{analysis_id}/report.md"]
    for page in pages:
        response = client.get(page)
        assert response.status_code == 200, (page, response.status_code)
print("torch" in sys.modules, sorted(name for name in sys.modules if name.startswith("advisor.harness")))
"""


def test_import_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint), "--no-cache"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_upload_to_dashboard_round_trip_imports_no_torch(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", ROUND_TRIP, str(tmp_path / "data")],
        cwd=REPO_ROOT,
        env={"PYTHONPATH": f"{REPO_ROOT}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.strip().splitlines()[-1] == "False []", "the server imported torch or the harness"
