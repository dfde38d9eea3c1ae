"""A small SDK for the npu-advisor service: submit a model, follow the analysis, fetch its report.

    from advisor.cli.client import AdvisorClient
    with AdvisorClient("http://127.0.0.1:8000", token=None) as client:
        submitted = client.submit("model.pt2", {"stage": "production", "target": "npu"})
        analysis = client.wait(submitted["id"], on_update=print)
        print(client.report(analysis["id"], "md"))

Torch-free. Every failure is an `AdvisorError` whose message is meant for a person. A busy server's 429 /
503 is waited out: the request is sent again after its `Retry-After` (plus a little jitter), at most
`busy_retries` times, and `on_busy` (the CLI prints it) hears of each wait.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import httpx

from advisor.core.status import TERMINAL_ANALYSIS_STATUSES

API = "/api/v1"
TOKEN_ENV = "ADVISOR_TOKEN"
BUSY_STATUSES = frozenset({429, 503})
BUSY_RETRIES = 8
BUSY_DEFAULT_WAIT_S = 2.0  # a 429 / 503 without Retry-After (a proxy's)
BUSY_MAX_WAIT_S = 60.0
PRECHECK_ABOVE_BYTES = 1 << 20  # larger uploads first ask the server's caps (GET /api/v1/limits)


class AdvisorError(Exception):
    """A readable failure talking to the service. `status` is the HTTP status (None: no answer)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class AdvisorClient:
    def __init__(
        self,
        server: str,
        token: str | None = None,
        *,
        timeout_s: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        busy_retries: int = BUSY_RETRIES,
        on_busy: Callable[[str], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """`busy_retries`: how many times a 429 / 503 is retried after its Retry-After; `on_busy` gets one
        line per wait (e.g. "server busy (HTTP 503): retrying in 2 s (1/8)")."""
        self.server = server.rstrip("/")
        self.busy_retries = busy_retries
        self.on_busy = on_busy
        self._sleep = sleep
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.server, headers=headers, timeout=timeout_s, transport=transport)

    def __enter__(self) -> AdvisorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # ---------------------------------------------------------------- analyses
    def submit(
        self,
        model: str | Path,
        context: dict[str, Any],
        *,
        inputs: str | Path | None = None,
        model_name: str | None = None,
        force: bool = False,
        backends: list[str] | None = None,
        tag: str | None = None,
        source_report: dict[str, Any] | None = None,
        calibration: str | Path | None = None,
    ) -> dict[str, Any]:
        """Upload a model (streamed) with its deployment context: `{"id", "status", "links", ...}`.

        `backends`: the backends the job measures (e.g. ["eager", "inductor"]); None leaves it to the server.
        `tag`: the model suite it belongs to (the server summarises a suite at /suites/TAG).
        `source_report`: the source-side report of the model's code (advisor.core.source_report), uploaded with it.
        `calibration`: the int8 options' calibration .npz (advisor.core.calibration), streamed like the model."""
        model = Path(model)
        if not model.is_file():
            raise AdvisorError(f"no such model file: {model}")
        if inputs is not None and not Path(inputs).is_file():
            raise AdvisorError(f"no such inputs file: {inputs}")
        if calibration is not None and not Path(calibration).is_file():
            raise AdvisorError(f"no such calibration file: {calibration}")
        named = {"model": model, "inputs": inputs, "calibration": calibration}
        self._refuse_oversized({field: Path(path) for field, path in named.items() if path is not None})
        data = {"context": json.dumps(context), "model_name": model_name or model.name}
        if force:
            data["force"] = "true"
        if backends:
            data["backends"] = ",".join(backends)
        if tag:
            data["tag"] = tag
        if source_report is not None:
            from advisor.core.source_report import upload_text

            data["source_report"] = upload_text(source_report)
        with contextlib.ExitStack() as opened:
            files: dict[str, Any] = {
                field: (Path(path).name, opened.enter_context(Path(path).open("rb")), "application/octet-stream")
                for field, path in named.items()
                if path is not None
            }
            return self._json("POST", f"{API}/analyze", data=data, files=files)

    def _refuse_oversized(self, files: dict[str, Path]) -> None:
        """Refuse a file over the server's cap before sending a byte of it (GET /api/v1/limits); a server without
        that route, or one that cannot say, is left to refuse the upload itself. Uploads of at most
        PRECHECK_ABOVE_BYTES in all are cheaper to send than to ask about."""
        if sum(path.stat().st_size for path in files.values()) <= PRECHECK_ABOVE_BYTES:
            return
        try:
            response = self._http.get(f"{API}/limits")
            limits = response.json() if response.status_code == 200 else {}
        except (httpx.HTTPError, ValueError):
            return
        for field, path in files.items():
            limit = limits.get(f"{field}_bytes") if isinstance(limits, dict) else None
            size = path.stat().st_size
            if isinstance(limit, int) and size > limit:
                raise AdvisorError(
                    f"the {field} file {path.name} is {_size(size)}; the server takes at most {_size(limit)} "
                    "(nothing was sent)",
                    status=413,
                )

    def get(self, analysis_id: str | int) -> dict[str, Any]:
        return self._json("GET", f"{API}/analyses/{analysis_id}")

    def list(self, **filters: Any) -> dict[str, Any]:
        """`{"items", "total", "page", "per_page"}`; filters: status, target, backend, model, sort, page, ..."""
        params = {name: value for name, value in filters.items() if value is not None}
        return self._json("GET", f"{API}/analyses", params=params)

    def cancel(self, analysis_id: str | int) -> dict[str, Any]:
        return self._json("POST", f"{API}/analyses/{analysis_id}/cancel")

    def report(self, analysis_id: str | int, fmt: str = "md") -> str:
        """The stored report as Markdown ("md") or JSON text ("json")."""
        if fmt not in ("md", "json"):
            raise AdvisorError(f"unknown report format {fmt!r}; choose md or json")
        return self._send("GET", f"{API}/analyses/{analysis_id}/report.{fmt}").text

    def wait(
        self,
        analysis_id: str | int,
        *,
        on_update: Callable[[dict[str, Any]], None] | None = None,
        until: Callable[[dict[str, Any]], bool] | None = None,
        poll_s: float = 1.0,
        timeout_s: float | None = None,
        outage_tolerance_s: float = 120.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> dict[str, Any]:
        """Poll until the analysis is done, failed or cancelled (or `until(analysis)` holds); `on_update` sees every
        poll's analysis.

        A server that is briefly unreachable (a restart) is waited out for `outage_tolerance_s`.
        """
        started = time.monotonic()
        outage_started: float | None = None
        while True:
            try:
                analysis = self.get(analysis_id)
                outage_started = None
            except AdvisorError as exc:
                if exc.status is not None and exc.status < 500:
                    raise
                outage_started = outage_started or time.monotonic()
                if time.monotonic() - outage_started > outage_tolerance_s:
                    raise
            else:
                if on_update is not None:
                    on_update(analysis)
                if analysis.get("status") in TERMINAL_ANALYSIS_STATUSES or (until is not None and until(analysis)):
                    return analysis
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                raise AdvisorError(f"analysis {analysis_id} did not finish within {timeout_s:g} s")
            sleep(poll_s)

    # ---------------------------------------------------------------- plumbing
    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        return self._send(method, path, **kwargs).json()

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request; a 429 / 503 is sent again after its Retry-After, at most `busy_retries` times (file
        parts are read again from the start: the server refused the request before acting on it)."""
        for retry in range(self.busy_retries + 1):
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                raise AdvisorError(f"cannot reach the npu-advisor server at {self.server}: {exc}") from exc
            if response.status_code not in BUSY_STATUSES or retry == self.busy_retries:
                break
            wait = retry_after_s(response)
            wait += random.uniform(0, min(1.0, wait / 2))  # jitter: busy clients do not come back in lockstep
            if self.on_busy is not None:
                self.on_busy(
                    f"server busy (HTTP {response.status_code}): retrying in {wait:.0f} s "
                    f"({retry + 1}/{self.busy_retries})"
                )
            self._sleep(wait)
            _rewind(kwargs.get("files"))
        if response.status_code >= 400:
            raise AdvisorError(describe_error(response), status=response.status_code)
        return response


def retry_after_s(response: httpx.Response) -> float:
    """The wait a 429 / 503 asks for: Retry-After in seconds or as an HTTP date, within [0, BUSY_MAX_WAIT_S]."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return BUSY_DEFAULT_WAIT_S
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):
            return BUSY_DEFAULT_WAIT_S
    if math.isnan(seconds):
        return BUSY_DEFAULT_WAIT_S
    return min(max(seconds, 0.0), BUSY_MAX_WAIT_S)


def _rewind(files: dict[str, Any] | None) -> None:
    for part in (files or {}).values():
        handle = part[1] if isinstance(part, tuple) else part
        if hasattr(handle, "seek"):
            handle.seek(0)


def describe_error(response: httpx.Response) -> str:
    """One readable message for an error response, with the server's own words where it sent some."""
    try:
        detail: Any = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = response.text.strip() or None
    status = response.status_code
    if status == 422 and isinstance(detail, list):
        lines = [f"  {item.get('field') or _loc(item)}: {item.get('message') or item.get('msg')}" for item in detail]
        return "the server rejected the request:\n" + "\n".join(lines)
    if status == 401:
        hint = f"the server needs a valid token (set {TOKEN_ENV} or pass --token-file)"
        return hint + (f": {detail}" if detail else "")
    if status == 403:
        return "this token is not allowed to do that" + (f": {detail}" if detail else "")
    if status == 404:
        return f"not found: {response.request.url.path}" + (f" ({detail})" if detail else "")
    return f"HTTP {status}: {detail}" if detail else f"HTTP {status} from {response.request.url}"


def _loc(item: dict[str, Any]) -> str:
    return ".".join(str(part) for part in item.get("loc", []) if part != "body") or "request"


def _size(n_bytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes} bytes"
