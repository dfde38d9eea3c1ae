"""The one way a test asks for a working bubblewrap sandbox.

Without one the test skips, naming what is missing - except in CI (`CI=true`), where it fails: a CI run without
bubblewrap would otherwise be green while confinement goes unchecked."""

from __future__ import annotations

import os

import pytest

from advisor.harness.isolation import Isolation, IsolationUnavailable, probe_bubblewrap


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require_bubblewrap(what: str = "a working bubblewrap sandbox") -> Isolation:
    """The probed isolation; skips (fails in CI) when bubblewrap cannot start a sandbox here."""
    try:
        return probe_bubblewrap()
    except IsolationUnavailable as exc:
        message = f"needs {what}: {exc}"
        if in_ci():
            pytest.fail(f"{message} (CI=true: a sandbox test may not skip; install bubblewrap on the runner)")
        pytest.skip(message)
