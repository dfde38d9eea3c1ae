"""Issue 44 item 6: `analyze file.py:factory` whose file fails to import names the user's own file and line first -
not the library frame the error was raised in (transformers' lazy `__getattr__`), which follows it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner

from advisor.cli import app

runner = CliRunner()
FACTORY = "\n\ndef make():\n    return torch.nn.Linear(2, 2), (torch.zeros(1, 2),)\n"


def _analyze(spec: str) -> str:
    result = runner.invoke(app, ["analyze", spec, "--target", "cpu", "--skip-measure"])
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    return " ".join(result.output.split())  # as wrapped on the terminal


def test_an_error_raised_inside_an_installed_library_names_the_users_line_first(tmp_path, monkeypatch) -> None:
    """A stand-in library, installed (under a site-packages directory), whose import fails in its own code."""
    installed = tmp_path / "venv" / "lib" / "site-packages" / "fancylib"
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("def __getattr__(name):\n    raise ImportError(f'no {name} here')\n")
    project = tmp_path / "project"
    project.mkdir()
    (project / "model.py").write_text(
        "import sys\nimport torch\n"
        f"sys.path.insert(0, {str(installed.parent)!r})\n"
        "from fancylib import NoSuchThing  # line 4" + FACTORY
    )
    monkeypatch.chdir(project)
    said = _analyze("model.py:make")
    assert "importing model.py failed: ImportError: " in said
    assert "(at model.py:4 in <module>; raised in fancylib/__init__.py:2 in __getattr__)" in said


def test_a_failing_import_in_the_users_own_helper_module_names_that_file(tmp_path, monkeypatch) -> None:
    (tmp_path / "helpers.py").write_text("x = 1\nfrom collections import NoSuchThing\n")
    (tmp_path / "model.py").write_text("import torch\nimport helpers" + FACTORY)
    monkeypatch.chdir(tmp_path)
    said = _analyze("model.py:make")
    assert "cannot import name 'NoSuchThing' from 'collections'" in said and "(at helpers.py:2 in <module>)" in said


def test_the_transformers_import_errors_name_the_users_line(tmp_path, monkeypatch) -> None:
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    (tmp_path / "named.py").write_text("import torch\nfrom transformers import NoSuchThing" + FACTORY)
    (tmp_path / "lazy.py").write_text("import torch\nimport transformers\nAuto = transformers.NoSuchThing" + FACTORY)
    monkeypatch.chdir(tmp_path)
    assert "(at named.py:2 in <module>)" in _analyze("named.py:make")
    lazy = _analyze(str(Path("lazy.py")) + ":make")
    assert "AttributeError" in lazy and "(at lazy.py:3 in <module>; raised in transformers/" in lazy
