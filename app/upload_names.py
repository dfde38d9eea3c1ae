"""The names of the files a user uploaded, kept for the reproduce command (a file name the user has).

A client sends whatever name it likes in a multipart part's `filename`: only the base name is kept, at most
MAX_NAME_CHARS characters of printable text; a name that is empty after that (or only dots) is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping

MAX_NAME_CHARS = 200
UPLOADED_FILES = ("model", "inputs", "calibration")


def upload_names(filenames: Mapping[str, str | None], present: set[str]) -> dict[str, str]:
    """{field: base name} for each uploaded file in `present` whose part named one."""
    names: dict[str, str] = {}
    for field in UPLOADED_FILES:
        name = clean_name(filenames.get(field)) if field in present else None
        if name:
            names[field] = name
    return names


def clean_name(name: str | None) -> str | None:
    if not name:
        return None
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    printable = "".join(ch for ch in base if ch.isprintable())[:MAX_NAME_CHARS].strip()
    return printable if printable.strip(".") else None
