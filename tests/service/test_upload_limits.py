"""An oversized file is refused by the client before a byte of it is sent (GET /api/v1/limits)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from advisor.cli.client import AdvisorClient, AdvisorError


class _Through(httpx.BaseTransport):
    """The client's requests answered by the test's app; counts the request bytes it was handed."""

    def __init__(self, client) -> None:  # noqa: ANN001
        self.client = client
        self.sent: list[tuple[str, int]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        self.sent.append((request.url.path, len(body)))
        answer = self.client.request(request.method, str(request.url), headers=request.headers, content=body)
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)


def test_the_server_says_its_per_file_caps(client, settings) -> None:  # noqa: ANN001
    limits = client.get("/api/v1/limits").json()
    assert limits["model_bytes"] == settings.max_upload_bytes == 4 * 1024 * 1024
    assert limits["inputs_bytes"] == settings.max_inputs_bytes
    assert limits["calibration_bytes"] > 0


@pytest.mark.parametrize("field", ["model", "inputs"])
def test_a_file_over_the_cap_is_refused_before_its_body_is_sent(client, tmp_path: Path, field: str) -> None:  # noqa: ANN001
    big = tmp_path / "big.pt2"
    big.write_bytes(b"PK" + b"\0" * (5 * 1024 * 1024))  # over the model cap (4 MiB) and the inputs cap (1 MiB)
    small = tmp_path / "small.pt2"
    small.write_bytes(b"PK" + b"\0" * 100)
    transport = _Through(client)
    files = {"model": big, "inputs": None} if field == "model" else {"model": small, "inputs": big}
    with AdvisorClient("http://testserver", transport=transport) as advisor, pytest.raises(AdvisorError) as refused:
        advisor.submit(files["model"], {"stage": "prototype", "target": "cpu"}, inputs=files["inputs"])
    assert refused.value.status == 413
    assert f"the {field} file big.pt2 is 5.0 MiB; the server takes at most" in str(refused.value)
    assert "nothing was sent" in str(refused.value)
    assert transport.sent == [("/api/v1/limits", 0)]  # no upload started


def test_a_server_without_the_limits_route_still_gets_the_upload(tmp_path: Path) -> None:
    """An older server (404 on /limits) refuses or takes the upload itself, as before."""
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if request.url.path == "/api/v1/limits":
            return httpx.Response(404, json={"detail": "Not Found"})
        return httpx.Response(413, json={"detail": "the upload is larger than the server's limit"})

    model = tmp_path / "m.pt2"
    model.write_bytes(b"PK" + b"\0" * (2 << 20))  # over the size worth asking about
    with AdvisorClient("http://s", transport=httpx.MockTransport(answer)) as advisor, pytest.raises(AdvisorError):
        advisor.submit(model, {"stage": "prototype"})
    assert seen == ["/api/v1/limits", "/api/v1/analyze"]


def test_a_small_upload_is_sent_without_asking(client, tmp_path: Path) -> None:  # noqa: ANN001
    model = tmp_path / "small.pt2"
    model.write_bytes(b"PK" + b"\0" * 100)
    transport = _Through(client)
    with AdvisorClient("http://testserver", transport=transport) as advisor, pytest.raises(AdvisorError):
        advisor.submit(model, {"stage": "prototype", "target": "cpu"})  # not a real archive: refused by the server
    assert [path for path, _ in transport.sent] == ["/api/v1/analyze"]
