"""A second layer behind escaping (app.security_headers): every HTML page - and every other answer - carries a strict
Content-Security-Policy, refuses framing, `nosniff` and a same-origin referrer policy; and the pages are built for the
policy (no inline script, style or event handler), so it costs them nothing.
tests/browser/test_content_security_policy.py shows them working under it in Chromium."""

from __future__ import annotations

import base64
import hashlib
import re

from fastapi.testclient import TestClient
from sqlalchemy import select

from app.authorization import iter_route_contexts
from app.models import Analysis
from app.security_headers import POLICY, docs_policy

REQUIRED = {
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}
DOCS = ("/docs", "/redoc", "/docs/oauth2-redirect")
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE)
INLINE_HANDLER = re.compile(r"<[^>]*\son[a-z]+\s*=", re.IGNORECASE)
INLINE_STYLE = re.compile(r"<[^>]*\sstyle\s*=|<style", re.IGNORECASE)


def b64sha256(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def directives(policy: str) -> dict[str, list[str]]:
    parsed = {}
    for part in policy.split(";"):
        name, *values = part.split()
        parsed[name] = values
    return parsed


def every_get_page(client: TestClient, seeded) -> list[str]:  # noqa: ANN001
    """A URL for every GET route of the app (path parameters filled from the seeded data)."""
    done = seeded.first(select(Analysis).where(Analysis.recommended_backend.is_not(None)).order_by(Analysis.id))
    seeded.update(Analysis, done.id, tag="suite-a")
    values = {"analysis_id": str(done.id), "tag": "suite-a", "sha256": "0" * 64}
    urls = []
    for route in iter_route_contexts(client.app.router.routes):
        if "GET" not in (getattr(route, "methods", None) or ()):
            continue
        path = str(route.path_format)
        names = re.findall(r"{(\w+)}", path)
        if any(name not in values for name in names):
            continue  # API routes on workers and jobs: JSON, covered by the every-answer test below
        urls.append(re.sub(r"{(\w+)}", lambda m: values[m.group(1)], path))
    return urls + [f"/compare?a={done.id}&b={done.id + 1}", f"/analyses/{done.id + 10_000}", "/no-such-page"]


def test_every_html_page_carries_the_headers_and_the_strict_policy(client, seeded):
    html_pages = []
    for url in every_get_page(client, seeded):
        answer = client.get(url, follow_redirects=False)
        for name, value in REQUIRED.items():
            assert answer.headers.get(name) == value, (url, name, answer.status_code)
        assert "content-security-policy" in answer.headers, url
        if answer.headers.get("content-type", "").startswith("text/html"):
            html_pages.append(url.split("?")[0])
            if url not in DOCS:
                assert answer.headers["content-security-policy"] == POLICY, url
    pages = {"/", "/upload", "/queue", "/suites", "/suites/suite-a", "/compare", "/login", *DOCS}
    assert pages <= set(html_pages), sorted(html_pages)
    assert any(page.startswith("/analyses/") for page in html_pages)


def test_the_policy_allows_only_this_server_and_no_inline_code():
    policy = directives(POLICY)
    for name in ("default-src", "script-src", "style-src", "img-src", "connect-src", "font-src", "form-action"):
        assert policy[name] == ["'self'"], name
    assert policy["frame-ancestors"] == ["'none'"] and policy["object-src"] == ["'none'"]
    assert policy["base-uri"] == ["'none'"]
    assert not re.search(r"unsafe|https?:|\*|data:|blob:", POLICY)


def test_the_pages_have_no_inline_script_style_or_handler(client, seeded):
    for url in every_get_page(client, seeded):
        answer = client.get(url)
        if url in DOCS or not answer.headers.get("content-type", "").startswith("text/html"):
            continue
        html = answer.text
        assert not INLINE_SCRIPT.search(html), url
        assert not INLINE_HANDLER.search(html), (url, INLINE_HANDLER.search(html))
        assert not INLINE_STYLE.search(html), (url, INLINE_STYLE.search(html))
        assert not re.search(r"(src|href)=\"(https?:)?//", html), url  # nothing from another origin


def test_refusals_redirects_and_static_files_carry_the_headers_too(locked):
    client, _user, worker = locked
    answers = {
        "sign-in redirect": client.get("/", follow_redirects=False),
        "401": client.get("/api/v1/analyses"),
        "403 worker on a user route": client.get("/api/v1/analyses", headers={"Authorization": f"Bearer {worker}"}),
        "static js": client.get("/static/web.js"),
        "static css": client.get("/static/web.css"),
        "health": client.get("/healthz"),
    }
    for what, answer in answers.items():
        for name, value in REQUIRED.items():
            assert answer.headers.get(name) == value, (what, name)
        assert answer.headers["content-security-policy"] == POLICY, what


def test_the_docs_pages_allow_exactly_their_own_inline_scripts(client):
    for url in DOCS:
        answer = client.get(url)
        assert answer.status_code == 200, url
        policy = directives(answer.headers["content-security-policy"])
        assert policy["frame-ancestors"] == ["'none'"] and policy["object-src"] == ["'none'"], url
        scripts = INLINE_SCRIPT.findall(answer.text)
        hashes = [value for value in policy["script-src"] if value.startswith("'sha256-")]
        assert len(hashes) == len(scripts), url
        assert "'unsafe-inline'" not in policy["script-src"] and "'unsafe-eval'" not in policy["script-src"], url
        assert not any(re.match(r"'?https?:", value) for values in policy.values() for value in values), url
    own, other = b"SwaggerUIBundle({})", b"alert(document.cookie)"
    allowed = directives(docs_policy(b"<script>" + own + b"</script>"))["script-src"]
    assert allowed == ["'self'", f"'sha256-{b64sha256(own)}'"] and f"'sha256-{b64sha256(other)}'" not in allowed
