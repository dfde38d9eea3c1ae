"""Screenshots the browser tests keep for the README and docs/usage.md (docs/screenshots), only when asked to."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def copy_to_docs(path: Path) -> None:
    """Keep a screenshot for the docs when ADVISOR_UPDATE_SCREENSHOTS=1 (not on every CI run)."""
    if os.environ.get("ADVISOR_UPDATE_SCREENSHOTS") == "1":
        target = REPO / "docs" / "screenshots"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target / path.name)
