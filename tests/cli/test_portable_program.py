"""What leaves the submitting machine (advisor.harness.portable_program): the ExportedProgram that `analyze
file.py:factory --server` uploads names no absolute path - not the project's directory, the home directory, the
virtual environment or the interpreter - only the project's own files, relative, in its nodes' stack traces."""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from advisor.cli import app
from advisor.harness.portable_program import portable_spec, portable_stack_trace, project_path, project_root

runner = CliRunner()
LAYERS = """\
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x)) + 1  # the block's line
"""
MODEL = """\
import torch
from parts.layers import Block


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        return torch.nn.functional.gelu(self.block(x)) * 2  # the model's line


def make():
    return Net(), (torch.randn(2, 4),)
"""


def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "parts").mkdir(parents=True)
    (root / "parts" / "__init__.py").write_text("")
    (root / "parts" / "layers.py").write_text(LAYERS)
    (root / "model.py").write_text(MODEL)
    return root


def host_paths(tmp_path: Path) -> list[str]:
    """Absolute paths of this machine that must not travel."""
    advisor_dir = Path(__file__).resolve().parents[2] / "advisor"
    return [
        str(tmp_path),
        str(tmp_path.resolve()),
        os.path.expanduser("~") + os.sep,
        sys.prefix + os.sep,
        sys.base_prefix + os.sep,
        str(advisor_dir),
        "site-packages",
    ]


@pytest.mark.parametrize("where", ["from the project", "by absolute path from elsewhere"])
def test_the_uploaded_program_carries_only_the_projects_files_relative(tmp_path, monkeypatch, where):
    import torch

    from advisor.cli import analyze_cmd

    root = project(tmp_path)
    if where == "from the project":
        monkeypatch.chdir(root)
        spec = "model.py:make"
    else:
        (tmp_path / "elsewhere").mkdir()
        monkeypatch.chdir(tmp_path / "elsewhere")
        spec = f"{root / 'model.py'}:make"
    sent: dict = {}
    monkeypatch.setattr(analyze_cmd, "_analyze_on_server", lambda **remote: sent.update(remote) or 0)
    out = tmp_path / "upload.pt2"
    args = ["analyze", spec, "--server", "http://advisor.example:8000", "--target", "cpu", "--export-to", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert Path(sent["model"]) == out and sent["source_report"]["factory"] == "model.py:make"

    with zipfile.ZipFile(out) as archive:
        everything = b"".join(archive.read(name) + name.encode() for name in archive.namelist())
    for path in host_paths(tmp_path):
        assert path.encode() not in everything, path
    traces = [
        node.meta["stack_trace"]
        for node in torch.export.load(out).graph_module.graph.nodes
        if node.meta.get("stack_trace")
    ]
    assert any('File "model.py", line 11, in forward' in trace for trace in traces), traces
    assert any('File "parts/layers.py", line 10, in forward' in trace for trace in traces), traces
    assert any("# the block's line" in trace for trace in traces)  # the project's own source lines stay
    assert not any("linear.py" in trace or "functional" in trace.split("\n")[0] for trace in traces)


def test_a_stack_trace_keeps_only_project_frames(tmp_path):
    root = str(tmp_path / "proj")
    venv = f"{root}/.venv/lib/python3.11/site-packages/torch/nn/modules/linear.py"
    trace = (
        f'File "{root}/model.py", line 8, in forward\n    y = self.block(x)\n'
        f'  File "{venv}", line 134, in forward\n    return F.linear(input, self.weight, self.bias)\n'
        f'  File "{root}/parts/layers.py", line 7, in forward\n    return torch.relu(x)\n             ^^^^\n'
        '  File "<frozen importlib._bootstrap>", line 1, in <module>\n'
        '  File "/home/alice/other/helper.py", line 3, in help\n    secret()\n'
    )
    assert portable_stack_trace(trace, root) == (
        'File "model.py", line 8, in forward\n    y = self.block(x)\n'
        '  File "parts/layers.py", line 7, in forward\n    return torch.relu(x)\n             ^^^^'
    )
    assert portable_stack_trace(f'File "{venv}", line 1, in f\n    x()', root) is None
    assert portable_stack_trace("no frames at all /home/alice/x.py", root) is None


def test_paths_and_specs_outside_the_project_are_never_absolute(tmp_path):
    root = str(tmp_path / "proj")
    assert project_path(f"{root}/a/b.py", root) == "a/b.py"
    assert project_path(f"{root}/../proj2/b.py", root) is None
    assert project_path(f"{root}/dist-packages/x.py", root) is None
    assert project_path(f"{sys.prefix}/lib/x.py", sys.prefix) is None  # the interpreter's own files
    assert project_path("<string>", root) is None
    assert portable_spec(f"{root}/model.py:make", root) == "model.py:make"
    assert portable_spec("/elsewhere/model.py:make", root) == "model.py:make"
    assert portable_spec("pkg.models:make", root) == "pkg.models:make"


def test_the_project_is_never_the_filesystem_root_or_the_home_directory(tmp_path, monkeypatch):
    home = os.path.expanduser("~")
    monkeypatch.chdir(home)
    assert project_root(f"{tmp_path}/m.py:make") == str(tmp_path)
    assert project_root(os.path.join(home, "m.py") + ":make") == home  # a file directly in it: its own directory
    monkeypatch.chdir(os.sep)
    assert project_root(f"{tmp_path}/m.py:make") == str(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert project_root("sub/m.py:make") == str(tmp_path)
    assert project_root("pkg.mod:make") == str(tmp_path)
