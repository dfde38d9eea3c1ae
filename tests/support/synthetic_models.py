"""Small model archives that pass `advisor.core.artifacts.sniff` without torch: distinct bytes per seed."""

from __future__ import annotations

import io
import json
import random
import zipfile


def exported_program_bytes(seed: int, size: int = 8 * 1024) -> bytes:
    """A zip shaped like `torch.export.save` output (archive/models/model.json) with `size` bytes of padding."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/models/model.json", json.dumps({"seed": seed}))
        archive.writestr("archive/data/pad.bin", random.Random(seed).randbytes(size))
    return buffer.getvalue()
