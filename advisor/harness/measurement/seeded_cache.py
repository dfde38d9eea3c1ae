"""A variant's compile cache seeded with the kernels its floor mode already built in the same job.

Inductor's max-autotune lowers the graph as default does and then benchmarks kernel choices
(advisor.core.catalogue's `compile_floor`), so most of the C++/Triton kernels it builds are the ones default just
built, and Inductor finds a built kernel by the hash of its source in its cache directory. An independent
measurement that compiles default and then max-autotune in one process pays for those kernels once; compiled cold
in a fresh cache, max-autotune paid for them again (MobileNetV3-small on 2 quiet cores: 15.5 s cold with the CPU probe
and headers warm, 5.4 s with default's cache; on a busy node ~40 s against the independent measurement's 5 s).

So the variant's first child starts from a copy of its floor's cache (hard links: Inductor replaces a cache file by
renaming a new one over it, never writes into one, so the floor's cache stays as it was). Its measured compile is
then not a cold one: the row keeps it as `compile_seeded.measured_s` and states the cold compile as an upper bound,
that plus the floor's own cold compile (which built every kernel the seeded compile could reuse), in
`compile_s_cold` - what break-even points use, erring towards "compiling does not pay off".

Both children are the same job's, in the same sandbox: nothing crosses between jobs. Torch-free.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from advisor.core import catalogue

_NOT_COPIED = shutil.ignore_patterns("locks", "*.lock")  # a lock file is per cache: never share one


def seed_compile_cache(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> int:
    """Link (copy where a link cannot be made) every file of the cache at `source` into `target`, keeping what
    `target` already has; the number of files added. A missing `source` adds none."""
    added = 0
    src = Path(source)
    if not src.is_dir():
        return 0

    def link(from_path: str, to_path: str) -> None:
        nonlocal added
        if os.path.lexists(to_path):
            return
        try:
            os.link(from_path, to_path)
        except OSError:
            shutil.copy2(from_path, to_path)
        added += 1

    try:
        shutil.copytree(src, target, symlinks=True, ignore=_NOT_COPIED, copy_function=link, dirs_exist_ok=True)
    except (OSError, shutil.Error):
        pass  # a cache that could not be copied whole (a full scratch directory): what is there is still valid
    return added


def floor_index(spec: str, mode: str, rows: list[dict[str, Any]]) -> int | None:
    """The index in `rows` of the measured row whose compile cache this variant starts from: the mode the catalogue
    says it compiles first (`compile_floor`), measured in this job and compiled (its status ok or fail_accuracy)."""
    info = catalogue.BACKENDS.get(spec)  # a plugin backend names no floor
    floor_mode = info.compile_floor.get(mode) if info else None
    if info is None or floor_mode is None:
        return None
    for index, row in enumerate(rows):
        if (row.get("backend"), row.get("mode")) != (info.name, floor_mode):
            continue
        compiled = row.get("status") in ("ok", "fail_accuracy") and row.get("compile_s_cold") is not None
        return index if compiled else None
    return None


def state_seeded_compile(row: dict[str, Any], floor: dict[str, Any], files_seeded: int | None = None) -> None:
    """Turn a seeded child's measured compile into the row's record: `compile_seeded` says what was measured and
    from which option's cache (`files_seeded`: how many of its files the child found to start from); `compile_s_cold`
    becomes the upper bound of a cold compile (see the module). A child that found none (or was given no cache
    directory) compiled cold: no bound."""
    measured = row.get("compile_s_cold")
    floor_cold = floor.get("compile_s_cold")
    if measured is None or floor_cold is None or not files_seeded:
        return  # nothing to start from: the compile was a cold one
    row["compile_seeded"] = {
        "from_option": catalogue.option_label(str(floor["backend"]), str(floor["mode"])),
        "measured_s": measured,
        "floor_cold_s": floor_cold,
        "files_seeded": files_seeded,
    }
    row["compile_s_cold"] = measured + floor_cold
