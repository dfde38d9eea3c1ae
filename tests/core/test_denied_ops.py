"""Refused at the door (issue 26 item 5): ops that touch files or the process, and code nested deep enough to
crash torch's parser, are refused before any of the model's code runs - torch-free on the archive's text, and
again after loading on every graph (each layer shown on its own)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from advisor.core.artifacts import sniff
from advisor.core.denied_ops import DENIED_OPS, FILE_ARGUMENT, MAX_CODE_NESTING, OpRefused

pytestmark = pytest.mark.own_sandbox

REPO = Path(__file__).resolve().parents[2]
SHAPES = ["x=2x4:float32"]


@pytest.fixture
def decoy(tmp_path: Path) -> Path:
    path = tmp_path / "host" / "decoy.bin"
    path.parent.mkdir()
    path.write_bytes(b"host file: must never change")
    return path


def _scripted(tmp_path: Path, name: str, source: str) -> Path:
    """torch.jit.save of a module whose class body is `source` (module-level TorchScript, `torch` imported)."""
    module_file = tmp_path / f"_{name}_src.py"
    module_file.write_text("import torch\nfrom typing import Tuple\n" + source)
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"denied_{name}", module_file)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = tmp_path / f"{name}.pt"
    torch.jit.save(torch.jit.script(module.Model()), path)
    return path


def _forward_from_file(tmp_path: Path, decoy: Path) -> Path:
    return _scripted(
        tmp_path,
        "forward_from_file",
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
        f"        t = torch.from_file({str(decoy)!r}, True, 8, dtype=torch.uint8)\n"
        "        t.fill_(65)\n"
        "        return x + t.sum().float()\n",
    )


def _setstate_from_file(tmp_path: Path, decoy: Path) -> Path:
    """`__setstate__` runs inside torch.jit.load, before anything can look at the loaded graphs."""
    return _scripted(
        tmp_path,
        "setstate_from_file",
        "class Model(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.t = torch.zeros(8, dtype=torch.uint8)\n"
        "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
        "        return x + 1\n"
        "    @torch.jit.export\n"
        "    def __getstate__(self) -> Tuple[torch.Tensor, bool]:\n"
        "        return (self.t, self.training)\n"
        "    @torch.jit.export\n"
        "    def __setstate__(self, state: Tuple[torch.Tensor, bool]) -> None:\n"
        f"        self.t = torch.from_file({str(decoy)!r}, True, 8, dtype=torch.uint8)\n"
        "        self.t.fill_(66)\n"
        "        self.training = state[1]\n",
    )


def _code(path: Path) -> str:
    with zipfile.ZipFile(path) as archive:
        return "".join(archive.read(n).decode() for n in archive.namelist() if n.endswith(".py"))


def _replace_code(source: Path, target: Path, edit) -> Path:  # noqa: ANN001
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as out:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith(".py"):
                data = edit(data.decode()).encode()
            out.writestr(info, data)
    return target


def _without_archive_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Layer 2 on its own: the torch-free scan of the archive's text does nothing."""
    import advisor.core.denied_ops as denied_ops

    monkeypatch.setattr(denied_ops, "scan_torchscript_code", lambda archive, name: None)
    monkeypatch.setattr(denied_ops, "scan_exported_json", lambda window, where: None)


# ------------------------------------------------------------------ the deny list
def test_the_deny_list_holds_every_op_whose_string_argument_is_a_file_name() -> None:
    """Re-derived from the installed torch's schemas: a new op taking a file name must join DENIED_OPS."""
    derived = {
        schema.name
        for schema in torch._C._jit_get_all_schemas()
        if any(str(arg.type) in ("str", "Optional[str]") and FILE_ARGUMENT.search(arg.name) for arg in schema.arguments)
    }
    assert derived >= {"aten::from_file", "aten::save"}
    assert derived <= set(DENIED_OPS), f"ops taking a file name missing from DENIED_OPS: {derived - set(DENIED_OPS)}"


# ------------------------------------------------------------------ TorchScript
def test_forward_calling_from_file_is_refused_before_loading(tmp_path: Path, decoy: Path) -> None:
    with pytest.raises(OpRefused, match=r"aten::from_file") as refused:
        sniff(_forward_from_file(tmp_path, decoy))
    assert refused.value.code == "denied_op"
    assert "forward" not in str(refused.value) or "line" in str(refused.value)


def test_forward_calling_from_file_is_refused_after_loading_alone(
    tmp_path: Path, decoy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from advisor.harness.inspection import inspect_model

    path = _forward_from_file(tmp_path, decoy)
    _without_archive_scan(monkeypatch)
    assert sniff(path).format == "torchscript"
    with pytest.raises(OpRefused, match=r"aten::from_file .* the TorchScript method forward"):
        inspect_model(str(path), input_shapes=SHAPES)
    assert decoy.read_bytes() == b"host file: must never change"


def test_setstate_calling_from_file_is_refused_before_loading(tmp_path: Path, decoy: Path) -> None:
    from advisor.harness.loading import load_model

    path = _setstate_from_file(tmp_path, decoy)
    decoy.write_bytes(b"host file: must never change")  # torch.jit.save ran __getstate__ only; make sure
    with pytest.raises(OpRefused, match=r"aten::from_file"):
        sniff(path)
    with pytest.raises(OpRefused, match=r"aten::from_file"):
        load_model(str(path), input_shapes=SHAPES)
    assert decoy.read_bytes() == b"host file: must never change"  # __setstate__ never ran


def test_setstate_calling_from_file_is_refused_after_loading_alone(
    tmp_path: Path, decoy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the text scan torch.jit.load runs __setstate__ (only the OS sandbox contains that); the graph walk
    still refuses the model before its forward or any example call."""
    from advisor.harness.inspection import inspect_model

    path = _setstate_from_file(tmp_path, tmp_path / "scratch.bin")
    (tmp_path / "scratch.bin").write_bytes(bytes(8))
    _without_archive_scan(monkeypatch)
    with pytest.raises(OpRefused, match=r"aten::from_file .* the TorchScript method __setstate__"):
        inspect_model(str(path), input_shapes=SHAPES)


@pytest.mark.parametrize(
    "spelling",
    [
        "torch.autograd.from_file",
        "ops.aten.from_file",
        "torch . from_file",
        "(torch\n.from_file)",
        "getattr(torch, 'from_' \"file\")",
        "getattr(torch, 'from\\x5ffile')",
    ],
)
def test_every_spelling_torch_jit_load_accepts_is_refused(tmp_path: Path, decoy: Path, spelling: str) -> None:
    plain = _forward_from_file(tmp_path, decoy)
    path = _replace_code(plain, tmp_path / "spelled.pt", lambda code: code.replace("torch.from_file", spelling))
    with pytest.raises(OpRefused, match=r"aten::from_file"):
        sniff(path)


def test_an_alias_of_torch_is_refused(tmp_path: Path, decoy: Path) -> None:
    plain = _forward_from_file(tmp_path, decoy)

    def alias(code: str) -> str:
        return re.sub(r"( +)(t = )torch\.from_file", r"\1self = torch\n\1\2self.from_file", code)

    path = _replace_code(plain, tmp_path / "alias.pt", alias)
    assert "self = torch" in _code(path)
    with pytest.raises(OpRefused, match=r"aten::from_file"):
        sniff(path)


def test_save_is_refused(tmp_path: Path) -> None:
    path = _scripted(
        tmp_path,
        "saves",
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
        f"        torch.save(x, {str(tmp_path / 'out.bin')!r})\n"
        "        return x\n",
    )
    with pytest.raises(OpRefused, match=r"aten::save \(writes a file"):
        sniff(path)


def test_a_normal_model_is_not_refused(tmp_path: Path) -> None:
    """A parameter, attribute and method named like a file, strings naming the ops, a Sequential (getattr)."""
    from advisor.harness.loading import load_model

    path = _scripted(
        tmp_path,
        "normal",
        "class Model(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.path = torch.nn.Parameter(torch.ones(4))\n"
        "        self.layers = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())\n"
        "        self.note = 'see torch.from_file( and torch.save( # not code'\n"
        "    def filename(self, x: torch.Tensor) -> torch.Tensor:\n"
        "        return x * self.path\n"
        "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
        "        label = 'from_file'\n"
        "        if self.note == label:\n"
        "            x = x + 1\n"
        "        return self.layers(self.filename(x))\n",
    )
    code = _code(path)
    assert "getattr(" in code and "from_file" in code  # the scan had something to get wrong
    assert sniff(path).format == "torchscript"
    loaded = load_model(str(path), input_shapes=SHAPES)
    assert loaded.module(torch.ones(2, 4)).shape == (2, 4)


# ------------------------------------------------------------------ nesting
def test_deeply_nested_code_is_refused_and_nothing_crashes(tmp_path: Path) -> None:
    plain = _scripted(
        tmp_path,
        "plain",
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
        "        return x + 1\n",
    )
    nested = "(" * 100_000 + "x" + ")" * 100_000
    path = _replace_code(plain, tmp_path / "nested.pt", lambda code: code.replace("torch.add(x, 1)", nested))
    with pytest.raises(OpRefused, match=rf"nested more than {MAX_CODE_NESTING} deep") as refused:
        sniff(path)
    assert refused.value.code == "nested_code"
    # the loader refuses it too, in a child process that would die of SIGSEGV if torch.jit.load read it
    probe = (
        "import sys; from advisor.harness.loading import load_model; from advisor.core.denied_ops import OpRefused\n"
        "try:\n    load_model(sys.argv[1], input_shapes=['x=2x4'])\n"
        "except OpRefused as exc:\n    print('REFUSED', exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, str(path)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "REFUSED" in result.stdout and "torch.jit.load" in result.stdout


def test_real_models_nest_far_below_the_bound(tmp_path: Path) -> None:
    from advisor.core.denied_ops import _BRACKET, _blank_strings_and_comments
    from tests.support import models

    class ResidualBlock(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x + self.bn(self.conv(x)))

    resnet_like = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), *[ResidualBlock() for _ in range(8)])
    deepest = 0
    for name, (module, inputs) in {
        "resnet_like": (resnet_like.eval(), (torch.randn(1, 3, 16, 16),)),
        "tiny_bert": models.tiny_bert(),
    }.items():
        path = models.trace_to(tmp_path / f"{name}.pt", module, inputs)
        assert sniff(path).format == "torchscript"
        with zipfile.ZipFile(path) as archive:
            for entry in (n for n in archive.namelist() if n.endswith(".py")):
                code, _ = _blank_strings_and_comments(archive.read(entry).decode(), entry)
                depth = 0
                for bracket in _BRACKET.finditer(code):
                    depth += 1 if bracket.group() in "([{" else -1
                    deepest = max(deepest, depth)
    assert 0 < deepest <= MAX_CODE_NESTING // 20, deepest


# ------------------------------------------------------------------ ExportedProgram
def _exported(tmp_path: Path) -> Path:
    from tests.support import models

    module, inputs = models.mlp()
    return Path(models.export_to(tmp_path / "mlp.pt2", module, inputs))


def test_an_exported_graph_naming_a_denied_op_is_refused_at_the_door(tmp_path: Path) -> None:
    clean = _exported(tmp_path)
    assert sniff(clean).format == "exported_program"
    target = tmp_path / "from_file.pt2"
    with zipfile.ZipFile(clean) as src, zipfile.ZipFile(target, "w") as out:
        for info in src.infolist():
            data = src.read(info)
            if re.search(r"/models/[^/]+\.json$", info.filename):
                program = json.loads(data)
                text = json.dumps(program)
                first = re.search(r'"target": "torch\.ops\.aten\.[a-z_]+\.default"', text)
                assert first, "the program has an aten node"
                text = text.replace(first.group(), '"target": "torch.ops.aten.from_file.default"', 1)
                data = text.encode()
            out.writestr(info, data)
    with pytest.raises(OpRefused, match=r"aten::from_file .*torch\.ops\.aten\.from_file") as refused:
        sniff(target)
    assert refused.value.code == "denied_op"
    escaped = tmp_path / "escaped.pt2"
    with zipfile.ZipFile(target) as src, zipfile.ZipFile(escaped, "w") as out:
        for info in src.infolist():
            data = src.read(info)
            out.writestr(info, data.replace(b"aten.from_file", b"aten.from\\u005ffile"))
    with pytest.raises(OpRefused, match=r"u005f"):
        sniff(escaped)


def test_an_exported_graph_calling_a_denied_op_is_refused_after_loading_alone(tmp_path: Path) -> None:
    from advisor.harness.loading import load_model, refuse_denied_ops_in_programs

    loaded = load_model(str(_exported(tmp_path)))
    refuse_denied_ops_in_programs([loaded.exported_program])  # clean: nothing raised
    graph = loaded.exported_program.graph
    output = next(node for node in graph.nodes if node.op == "output")
    with graph.inserting_before(output):
        graph.call_function(torch.ops.aten.from_file.default, ("/etc/hostname", False, 4))
    with pytest.raises(OpRefused, match=r"aten::from_file\.default .* node from_file"):
        refuse_denied_ops_in_programs([loaded.exported_program])
