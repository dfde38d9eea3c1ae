"""Inductor's CPU-feature probe replayed from the trusted build's answers (advisor.harness.vec_isa_checks): a
zygote on the CPU the answers were recorded on loads no test program and picks the trusted build's ISA; answers
recorded on another CPU, or a broken record, are not used, so every check runs for real."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.harness import vec_isa_checks
from advisor.harness.inductor_headers import VEC_ISA_FILE, trusted_headers
from tests.support.bubblewrap import require_bubblewrap

torch = pytest.importorskip("torch")

CPUINFO = "processor\t: 0\nflags\t\t: sse2 avx2 fma avx512f\n\nprocessor\t: 1\nflags\t\t: sse2 avx2 fma avx512f\n"


def _cpuinfo(tmp_path: Path, text: str = CPUINFO) -> str:
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    return str(path)


def _recorded(tmp_path: Path, content: object, cpuinfo: str) -> Path:
    folder = tmp_path / "headers"
    folder.mkdir(exist_ok=True)
    text = content if isinstance(content, str) else json.dumps(content)
    (folder / vec_isa_checks.CHECKS_FILE).write_text(text)
    return folder


def test_the_flags_are_the_first_processors_sorted(tmp_path: Path) -> None:
    assert vec_isa_checks.cpu_flags(_cpuinfo(tmp_path)) == "avx2 avx512f fma sse2"
    assert vec_isa_checks.cpu_flags(_cpuinfo(tmp_path, "processor\t: 0\n")) is None
    assert vec_isa_checks.cpu_flags(str(tmp_path / "absent")) is None


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        [1, 2],
        {"cpu_flags": "avx2 sse2", "checks": {"VecAVX2|-mavx2|x": True}},  # recorded on another CPU
        {"cpu_flags": "avx2 avx512f fma sse2", "checks": ["VecAVX2"]},
        {"checks": {"VecAVX2|-mavx2|x": True}},  # no flags recorded
    ],
)
def test_answers_from_another_cpu_or_a_broken_file_are_not_used(tmp_path: Path, content: object) -> None:
    cpuinfo = _cpuinfo(tmp_path)
    assert vec_isa_checks.load(str(_recorded(tmp_path, content, cpuinfo)), cpuinfo) == {}
    assert vec_isa_checks.load(str(tmp_path / "no-such-folder"), cpuinfo) == {}


def test_only_boolean_answers_are_kept(tmp_path: Path) -> None:
    cpuinfo = _cpuinfo(tmp_path)
    checks = {"VecAVX2|-mavx2|a": True, "VecAVX2|-mavx2|b": "yes", "VecAVX2|-mavx2|c": 1, "VecAVX2|-mavx2|d": False}
    folder = _recorded(tmp_path, {"cpu_flags": "avx2 avx512f fma sse2", "checks": checks}, cpuinfo)
    assert vec_isa_checks.load(str(folder), cpuinfo) == {"VecAVX2|-mavx2|a": True, "VecAVX2|-mavx2|d": False}


def test_a_recorded_check_is_answered_from_the_record_and_any_other_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._inductor.cpu_vec_isa import VecAVX2, VecISA

    ran: list[str] = []

    def real_check(self: VecISA, code: str) -> bool:
        ran.append(code)
        return code == "builds"

    monkeypatch.setattr(VecISA, "check_build", real_check)
    isa = VecAVX2()
    answers: dict[str, bool] = {}
    with vec_isa_checks.recording(answers):
        assert isa.check_build("builds") and not isa.check_build("fails")
    assert ran == ["builds", "fails"] and sorted(answers.values()) == [False, True]
    with vec_isa_checks.replaying({key: not answer for key, answer in answers.items()}):  # answers, not re-checks
        assert not isa.check_build("builds") and isa.check_build("fails")
        assert not isa.check_build("new")  # not recorded: the real check ran
    assert ran == ["builds", "fails", "new"]
    assert VecISA.check_build is real_check  # put back


PROBE = """
import json, sys
from torch._inductor.cpu_vec_isa import VecISA
loads = []
real = VecISA._probe_load
VecISA._probe_load = lambda self, path: loads.append(path) or real(self, path)
from advisor.harness.inductor_headers import probe_vec_isa
print(json.dumps({"isa": probe_vec_isa(sys.argv[1]), "loads": len(loads)}))
"""


def _probe_in_a_fresh_interpreter(headers: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, str(headers)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow
@pytest.mark.own_sandbox
def test_a_zygote_on_the_recorded_cpu_loads_no_test_program_and_picks_the_trusted_builds_isa() -> None:
    """The probe as a job's zygote runs it, in a fresh interpreter; on another CPU (`load` gives nothing) every
    check runs for real, as test_a_recorded_check_is_answered_from_the_record_and_any_other_runs shows."""
    headers = trusted_headers(require_bubblewrap())
    assert headers is not None and (Path(headers) / vec_isa_checks.CHECKS_FILE).is_file()
    replayed = _probe_in_a_fresh_interpreter(Path(headers))
    assert replayed == {"isa": (Path(headers) / VEC_ISA_FILE).read_text(), "loads": 0}
