"""The dedupe cache never serves a noisy run as the answer to a new submission, through the real path (issue 29:
only the helper was tested, and serving a noisy run from the cache passed the whole suite)."""

from __future__ import annotations

from advisor.core import noise

from .test_api import claim, cpu_results, register_worker, submit


def complete(client, quality_noisy: bool) -> int:  # noqa: ANN001
    """Claim the next job and complete it, its run marked noisy or quiet as a worker's assessment says."""
    lease = claim(client, register_worker(client)).json()
    results = cpu_results(lease["job"]["artifact_sha256"])
    quality = noise.assess(results["measurements"])
    if quality_noisy:
        reason = "eager's median drifted 40 % between its two processes"
        quality.update(noisy=True, reasons=[reason], whole_run=True, run_reasons=[reason])
    results["measurements"]["quality"] = quality
    done = client.post(
        f"/api/v1/jobs/{lease['job']['id']}/complete", headers={"X-Lease-Token": lease["lease_token"]}, json=results
    )
    assert done.status_code == 200, done.text
    return lease["job"]["analysis_id"]


def test_a_noisy_run_is_measured_again_and_a_quiet_one_is_served(client, model_file):
    first = submit(client, model_file).json()
    assert complete(client, quality_noisy=True) == first["id"]
    assert client.get(f"/api/v1/analyses/{first['id']}").json()["status"] == "done"

    again = submit(client, model_file)
    assert again.status_code == 202, again.text
    assert again.json()["deduplicated"] is False and again.json()["id"] != first["id"]  # measured again

    assert complete(client, quality_noisy=False) == again.json()["id"]
    served = submit(client, model_file)
    assert served.status_code == 200 and served.json()["deduplicated"] is True
    assert served.json()["id"] == again.json()["id"]  # the quiet run is the cached answer
