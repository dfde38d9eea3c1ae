"""`bash dev.sh run` on a machine without bubblewrap says, in one line, how to get isolation."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

DEV_SH = Path(__file__).resolve().parents[2] / "dev.sh"


def _hint(path: Path) -> subprocess.CompletedProcess[str]:
    """dev.sh's `isolation_hint` function, run with only `path` on PATH (it uses shell builtins alone)."""
    function = re.search(r"^isolation_hint\(\) \{\n.*?^\}\n", DEV_SH.read_text(), re.MULTILINE | re.DOTALL)
    assert function is not None, "dev.sh defines isolation_hint"
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("needs bash")
    return subprocess.run(
        [bash, "-c", function.group() + "isolation_hint"],
        env={"PATH": str(path)},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_run_prints_one_line_on_how_to_get_isolation_when_bubblewrap_is_missing(tmp_path: Path) -> None:
    done = _hint(tmp_path)
    assert done.returncode == 0 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1
    assert "apt-get install bubblewrap" in lines[0] and "ADVISOR_ISOLATION=bubblewrap" in lines[0]


def test_run_says_nothing_when_bubblewrap_is_there(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    done = _hint(tmp_path)
    assert done.returncode == 0 and done.stderr == ""


def test_run_calls_the_hint() -> None:
    run = re.search(r"^  run\)\n(.*?)^    ;;", DEV_SH.read_text(), re.MULTILINE | re.DOTALL)
    assert run is not None and "    isolation_hint\n" in run.group(1)
