"""Refused at the door through the API: a TorchScript upload whose code calls an op that touches files, or whose
code nests deep enough to crash torch.jit.load, is a 422 naming the op or the bound; nothing is stored."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import torch

from tests.support.service_db import stored_files

CPU_CONTEXT = {"stage": "production", "target": "cpu"}


class _Reads(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.from_file("/etc/hostname", False, 4, dtype=torch.uint8).sum().float()


class _Plain(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


def _upload(client, path: Path):  # noqa: ANN001, ANN202
    return client.post(
        "/api/v1/analyze",
        files={"model": (path.name, path.read_bytes())},
        data={"context": json.dumps(CPU_CONTEXT)},
    )


def test_an_upload_calling_from_file_is_refused_naming_the_op(client, settings, tmp_path: Path) -> None:
    path = tmp_path / "reads.pt"
    torch.jit.save(torch.jit.script(_Reads()), path)
    response = _upload(client, path)
    assert response.status_code == 422, response.text
    assert "aten::from_file" in response.json()["detail"]
    assert stored_files(settings) == []


def test_an_upload_with_deeply_nested_code_is_refused(client, settings, tmp_path: Path) -> None:
    plain = tmp_path / "plain.pt"
    torch.jit.save(torch.jit.script(_Plain()), plain)
    nested = tmp_path / "nested.pt"
    with zipfile.ZipFile(plain) as src, zipfile.ZipFile(nested, "w") as out:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith(".py"):
                data = data.replace(b"torch.add(x, 1)", b"(" * 100_000 + b"x" + b")" * 100_000)
            out.writestr(info, data)
    response = _upload(client, nested)
    assert response.status_code == 422, response.text
    assert "nested more than" in response.json()["detail"]
    assert stored_files(settings) == []
