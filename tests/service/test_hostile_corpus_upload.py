"""Layer 4 through the API: every archive-level attack of the hostile corpus is refused at upload with its own
4xx naming what is wrong, nothing is stored, and nothing inside it ever runs."""

from __future__ import annotations

import json

import pytest

from advisor.core.artifacts import ArtifactRejected, sniff
from tests.support.service_db import stored_files

CPU_CONTEXT = {"stage": "production", "target": "cpu"}
EXPECTED_STATUS = {
    "metadata_too_large": 413,
    "compression_ratio": 413,
    "zip_bomb": 413,
    "forged_directory": 422,
    "unsafe_path": 422,
    "native_code": 422,
    "truncated": 422,
}


def test_every_archive_attack_is_refused_at_upload_with_its_specific_status(client, settings, hostile_corpus):
    uploads = [case for case in hostile_corpus["cases"] if case.expect == "upload"]
    assert len(uploads) >= 12
    for case in uploads:
        with pytest.raises(ArtifactRejected) as rejected:
            sniff(case.path)
        assert rejected.value.code == case.detail, case.name
        response = client.post(
            "/api/v1/analyze",
            files={"model": (case.path.name, case.path.read_bytes())},
            data={"context": json.dumps(CPU_CONTEXT)},
        )
        assert response.status_code == EXPECTED_STATUS.get(case.detail, 415), (case.name, response.text)
        assert response.json()["detail"] == str(rejected.value)
    assert stored_files(settings) == []
    assert client.get("/api/v1/analyses").json()["total"] == 0
    assert not hostile_corpus["marker"].exists()
