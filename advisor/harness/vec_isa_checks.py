"""Inductor's CPU-feature probe, answered once per node and replayed in each job's zygote.

`pick_vec_isa` checks every vector ISA the CPU advertises (and sub-features such as AVX-512 VNNI) with
`VecISA.check_build`: build a test program, then load it in a fresh interpreter that dlopens it next to libtorch -
six such interpreters on an AVX-512 node, ~1 s of CPU in every process that compiles. The trusted header build
(advisor.harness.inductor_headers) records each check's answer together with the CPU's flags; a zygote on a CPU
with the same flags replays those answers and really runs only a check the build did not see. Both sides run the
same torch and compiler (the trusted cache's key covers them), and jobs cannot write the recorded file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

CHECKS_FILE = ".vec-isa-checks.json"
_CPUINFO = "/proc/cpuinfo"
Check = Callable[[Any, str], bool]  # VecISA.check_build: (the ISA, a test program) -> it builds and loads


def cpu_flags(cpuinfo: str = _CPUINFO) -> str | None:
    """The first processor's feature flags, sorted (what the ISA checks depend on besides torch and the compiler);
    None where /proc/cpuinfo has none (then nothing is replayed)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                if name.strip() in ("flags", "Features"):
                    return " ".join(sorted(value.split()))
    except OSError:
        return None
    return None


def _key(isa: Any, code: str) -> str:
    """One check: the ISA's class, the compiler flags it builds with (its sub-feature checks add some) and the
    test program."""
    digest = hashlib.sha256(code.encode()).hexdigest()[:16]
    return f"{type(isa).__name__}|{isa.build_arch_flags()}|{digest}"


@contextlib.contextmanager
def recording(answers: dict[str, bool]) -> Iterator[None]:
    """Run Inductor's real checks, writing each answer into `answers`."""

    def recorded(check: Check) -> Check:
        def run(isa: Any, code: str) -> bool:
            answers[_key(isa, code)] = answer = bool(check(isa, code))
            return answer

        return run

    with _checks_wrapped(recorded):
        yield


@contextlib.contextmanager
def replaying(answers: dict[str, bool]) -> Iterator[None]:
    """Answer the checks `answers` holds from it; run any other for real."""

    def replayed(check: Check) -> Check:
        def run(isa: Any, code: str) -> bool:
            answer = answers.get(_key(isa, code))
            return check(isa, code) if answer is None else answer

        return run

    with _checks_wrapped(replayed):
        yield


@contextlib.contextmanager
def _checks_wrapped(wrap: Callable[[Check], Check]) -> Iterator[None]:
    """`VecISA.check_build` replaced by `wrap(the real one)` for a while (every ISA class inherits it)."""
    from torch._inductor.cpu_vec_isa import VecISA

    check = VecISA.check_build
    VecISA.check_build = wrap(check)  # type: ignore[method-assign]
    try:
        yield
    finally:
        VecISA.check_build = check  # type: ignore[method-assign]


def save(directory: str, answers: dict[str, bool]) -> None:
    with open(os.path.join(directory, CHECKS_FILE), "w", encoding="utf-8") as fh:
        json.dump({"cpu_flags": cpu_flags(), "checks": answers}, fh)


def load(directory: str, cpuinfo: str = _CPUINFO) -> dict[str, bool]:
    """The recorded answers when they were recorded on a CPU with this one's flags; else none."""
    try:
        with open(os.path.join(directory, CHECKS_FILE), encoding="utf-8") as fh:
            recorded = json.load(fh)
    except (OSError, ValueError):
        return {}
    flags = cpu_flags(cpuinfo)
    if not isinstance(recorded, dict) or flags is None or recorded.get("cpu_flags") != flags:
        return {}
    checks = recorded.get("checks")
    if not isinstance(checks, dict):
        return {}
    return {key: answer for key, answer in checks.items() if isinstance(key, str) and isinstance(answer, bool)}
