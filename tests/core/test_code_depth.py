"""No expression shape crashes torch's parser: the door bounds what it recurses on (advisor.core.code_depth).

A generated corpus of deep shapes - every one of which ends torch.jit.load with SIGSEGV at 100,000 levels (torch
2.13) - is refused at the door with a clear reason naming the depth, just past the bound as well as far past it;
the same shapes a little deep, and real models, still pass."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from advisor.core.code_depth import MAX_EXPRESSION_DEPTH, expression_depth_excess
from advisor.core.denied_ops import OpRefused, scan_code_text

REPO = Path(__file__).resolve().parents[2]

SHAPES: dict[str, Callable[[int], str]] = {
    "power chain": lambda n: "x" + " ** x" * n,
    "sum chain": lambda n: "x" + " + x" * n,
    "comparison chain": lambda n: "x" + " < x" * n,
    "boolean chain": lambda n: "x" + " and x" * n,
    "conditional chain": lambda n: "x if c else " * n + "x",
    "conditional in condition": lambda n: "x if " * n + "c" + " else x" * n,
    "attribute chain": lambda n: "x" + ".T" * n,
    "call chain": lambda n: "f" + "(x)" * n,
    "subscript chain": lambda n: "x" + "[0]" * n,
    "unary and binary": lambda n: "x" + " - -x" * n,
    "lambda chain": lambda n: "lambda: " * n + "x",
    "calls nested in a chain": lambda n: "x" + " + f(x" * n + ")" * n,
    "chain over lines in brackets": lambda n: "(x" + "\n    + x" * n + ")",
    "chain over continued lines": lambda n: "x" + " \\\n    + x" * n,
    "strings chained": lambda n: "'a'" + " + 'a'" * n,
}


def _function(expression: str) -> str:
    return f"def forward(self, x: Tensor) -> Tensor:\n    return {expression}\n"


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("levels", [MAX_EXPRESSION_DEPTH + 10, 100_000])
def test_every_deep_shape_is_refused_cleanly_naming_the_depth(shape: str, levels: int) -> None:
    with pytest.raises(OpRefused) as refused:
        scan_code_text(_function(SHAPES[shape](levels)), "code/__torch__.py")
    assert refused.value.code == "nested_code"
    assert "torch.jit.load" in str(refused.value)
    # the bound it went past: this module's, or the door's older ones for brackets and prefix-operator runs
    assert re.search(r"(nested )?more than \d+ (deep|prefix operators)", str(refused.value))
    assert "code/__torch__.py line " in str(refused.value)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_same_shapes_a_little_deep_pass(shape: str) -> None:
    scan_code_text(_function(SHAPES[shape](40)), "code/__torch__.py")


def test_siblings_do_not_add_up() -> None:
    """Arguments, list items, statements and keyword values are siblings, not levels."""
    many_arguments = "torch.cat([" + ", ".join(["x.a.b + 1"] * 5_000) + "])"
    many_statements = "".join(f"    _{i} = torch.add(x, x) * 2\n" for i in range(5_000))
    code = f"def f(x):\n{many_statements}    return {many_arguments}\n"
    assert expression_depth_excess(code) is None


def test_a_large_file_is_scanned_in_linear_time() -> None:
    line = "    _12 = torch.add(torch.mul(x, self.weight), self.bias, alpha=1)\n"
    code = "def forward(self, x):\n" + line * 150_000  # 10 MB
    started = time.monotonic()
    assert expression_depth_excess(code) is None
    assert time.monotonic() - started < 30


def _archive_with(tmp_path: Path, name: str, expression: str) -> Path:
    import torch

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    plain = tmp_path / "plain.pt"
    if not plain.exists():
        torch.jit.save(torch.jit.script(Model()), plain)
    target = tmp_path / f"{name}.pt"
    with zipfile.ZipFile(plain) as source, zipfile.ZipFile(target, "w") as out:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith(".py"):
                data = data.decode().replace("torch.add(x, 1)", expression).encode()
            out.writestr(info, data, compress_type=zipfile.ZIP_STORED)  # as torch writes them
    return target


@pytest.mark.own_sandbox
def test_deep_shapes_in_a_model_file_are_refused_before_torch_reads_them(tmp_path: Path) -> None:
    """Upload (sniff) and loader both refuse; the loader, in a child that torch.jit.load would kill by SIGSEGV."""
    pytest.importorskip("torch")
    from advisor.core.artifacts import sniff

    paths = []
    for shape in ("power chain", "conditional chain", "sum chain", "subscript chain"):
        path = _archive_with(tmp_path, shape.replace(" ", "_"), SHAPES[shape](100_000))
        with pytest.raises(OpRefused, match=f"nested more than {MAX_EXPRESSION_DEPTH} deep"):
            sniff(path)
        paths.append(str(path))
    normal = _archive_with(tmp_path, "normal", "(x * 2 + 1) ** 2 if bool(x.sum() > 0) else x.T.T[0:2] - x")
    assert sniff(normal).format == "torchscript"
    probe = (
        "import sys; from advisor.harness.loading import load_model; from advisor.core.denied_ops import OpRefused\n"
        "for path in sys.argv[2:]:\n"
        "    try:\n        load_model(path, input_shapes=['x=2x4'])\n"
        "    except OpRefused as exc:\n        print('REFUSED', exc)\n"
        "import torch\n"
        "print('NORMAL', tuple(load_model(sys.argv[1], input_shapes=['x=2x4']).module(torch.ones(2, 4)).shape))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, str(normal), *paths], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("REFUSED") == len(paths), result.stdout
    assert "NORMAL (2, 4)" in result.stdout
