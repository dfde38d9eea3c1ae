"""A corpus of hostile model files, each with what npu-advisor must do with it (tests/harness/test_hostile_corpus.py).

Run as a script to write the corpus somewhere to look at: `python tests/support/hostile_corpus.py OUT_DIR`.

Every pickle payload creates the file `marker` when it runs (the path is baked into the payload, so it does
not depend on the child's environment); every TorchScript model that touches the host aims at `decoy`, a
file outside any sandbox scratch directory. Expectations:
- `("upload", code)`: the torch-free server check refuses it with that `ArtifactRejected.code`;
- `("rejected", entry)`: the loader refuses the pickle inside, naming that entry (status "rejected");
- `("load_error", None)`: torch cannot load it, and says so (status "load_error");
- `("timeout" | "oom", None)`: the child is ended by its limit, with that status;
- `("confined", None)`: it runs, but cannot touch the host: any status, the decoy unchanged.
"""

from __future__ import annotations

import io
import json
import pickle
import struct
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TS_INPUT_SHAPES = ["x=2x4:float32"]


@dataclass(frozen=True)
class Case:
    name: str
    path: Path
    expect: str
    detail: str | None = None  # the upload code, or the entry a refusal must name
    input_shapes: tuple[str, ...] = ()


class RunsCode:
    """A pickle payload: unpickling it calls eval, which creates `marker`. Proof that a pickle ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (eval, (f"open({self.marker!r}, 'w').close()",))


def payload(marker: Path, protocol: int = 4) -> bytes:
    return pickle.dumps(RunsCode(marker), protocol=protocol)


def text_payload(marker: Path) -> bytes:
    """Protocol 0, GLOBAL opcode with `os system` - the oldest spelling of the same attack."""
    return f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()


# ------------------------------------------------------------------ ExportedProgram surgery
def _exported_program(tmp: Path) -> Path:
    import torch

    class WithConstant(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x) + torch.tensor([1.0, 2.0, 3.0, 4.0])

    path = tmp / "m.pt2"  # torch.export.save names the archive's top folder after the file: "m/"
    if not path.exists():
        torch.export.save(torch.export.export(WithConstant(), (torch.randn(2, 4),)), path)
    return path


def _rewrite(
    source: Path,
    target: Path,
    *,
    rename: str | None = None,
    replace: dict[str, bytes] | None = None,
    add: dict[str, bytes] | None = None,
    compression: int = zipfile.ZIP_STORED,
) -> Path:
    """Copy an archive, renaming program `model` to `rename`, replacing/adding entries (names after renaming)."""
    replace, add = replace or {}, add or {}
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w", compression=compression) as dst:
        for info in src.infolist():
            name = info.filename
            if rename:
                name = name.replace("/model.json", f"/{rename}.json").replace("/model_", f"/{rename}_")
                name = name.replace("sample_inputs/model.pt", f"sample_inputs/{rename}.pt")
            data = replace.get(name, src.read(info))
            dst.writestr(name, data)
        for name, data in add.items():
            dst.writestr(name, data)
    return target


def _with_pickled_constant(
    source: Path,
    target: Path,
    marker: Path,
    *,
    program: str = "model",
    prefix: str = "opaque_obj",
    pad: int = 0,
    compression: int = zipfile.ZIP_STORED,
    data: bytes | None = None,
) -> Path:
    config_name = f"m/data/constants/{program}_constants_config.json"
    with zipfile.ZipFile(source) as src:
        config = json.loads(src.read("m/data/constants/model_constants_config.json"))
    config["config"]["evil"] = {"path_name": f"{prefix}_0", "is_param": False, "use_pickle": True, "tensor_meta": None}
    text = json.dumps(config).encode() + b" " * pad
    return _rewrite(
        source,
        target,
        rename=program if program != "model" else None,
        replace={config_name: text},
        add={f"m/data/constants/{prefix}_0": data if data is not None else payload(marker)},
        compression=compression,
    )


def _generation_archive_with_pickled_constant(source: Path, target: Path, marker: Path) -> Path:
    """A generation archive (programs `prefill` and `decode`, read with load_pt2, not torch.export.load) whose
    decode program has a constant marked `use_pickle`, holding a payload."""
    evil = _with_pickled_constant(source, target.with_suffix(".decode.pt2"), marker, program="decode")
    prefill = _rewrite(source, target.with_suffix(".prefill.pt2"), rename="prefill")
    with zipfile.ZipFile(evil) as first, zipfile.ZipFile(prefill) as second, zipfile.ZipFile(target, "w") as dst:
        names = set()
        for archive in (first, second):
            for info in archive.infolist():
                if info.filename not in names:  # shared entries (version, weights) once
                    names.add(info.filename)
                    dst.writestr(info.filename, archive.read(info))
    evil.unlink()
    prefill.unlink()
    return target


def _with_pickled_payload(source: Path, target: Path, marker: Path, folder: str) -> Path:
    """The first entry of `folder`'s config (weights or constants) marked `use_pickle`, holding a torch.save payload."""
    config_name = f"m/data/{folder}/model_{folder}_config.json"
    with zipfile.ZipFile(source) as src:
        config = json.loads(src.read(config_name))
    first = next(iter(config["config"].values()))
    first["use_pickle"] = True
    evil = io.BytesIO()
    _torch_save(RunsCode(marker), evil)
    return _rewrite(
        source,
        target,
        replace={config_name: json.dumps(config).encode(), f"m/data/{folder}/{first['path_name']}": evil.getvalue()},
    )


def _with_sample_inputs(source: Path, target: Path, marker: Path, program: str = "model") -> Path:
    evil = io.BytesIO()
    _torch_save(((RunsCode(marker),), {}), evil)
    return _rewrite(
        source,
        target,
        rename=program if program != "model" else None,
        replace={f"m/data/sample_inputs/{program}.pt": evil.getvalue()},
    )


def _torch_save(obj: Any, fh: Any) -> None:
    import torch

    torch.save(obj, fh)


# ------------------------------------------------------------------ TorchScript
def _script(tmp: Path, name: str, source: str) -> Path:
    """A TorchScript module whose forward(x) is `source` (TorchScript, indented by 8)."""
    import torch

    namespace: dict[str, Any] = {"torch": torch}
    code = "class Hostile(torch.nn.Module):\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n" + source
    module_file = tmp / f"_{name}_src.py"
    module_file.write_text("import torch\n" + code)
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"hostile_{name}", module_file)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    del namespace
    path = tmp / f"{name}.pt"
    torch.jit.save(torch.jit.script(module.Hostile()), path)
    return path


def _script_with_entry(source: Path, target: Path, suffix: str, data: bytes) -> Path:
    with zipfile.ZipFile(source) as src:
        top = src.namelist()[0].split("/")[0]
    return _rewrite(source, target, replace={f"{top}/{suffix}": data})


# ------------------------------------------------------------------ raw archives
def _zip(path: Path, members: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def _forged_count(path: Path, real: int, declared: int) -> Path:
    _zip(path, {"m/models/model.json": b"{}", **{f"m/data/{i}": b"" for i in range(real - 1)}}, zipfile.ZIP_STORED)
    data = bytearray(path.read_bytes())
    eocd = data.rfind(b"PK\x05\x06")
    struct.pack_into("<HH", data, eocd + 8, declared, declared)
    path.write_bytes(bytes(data))
    return path


def _spaces_json(path: Path, spaces: int) -> Path:
    """Valid JSON followed by `spaces` spaces, deflated: tiny on disk, huge when read."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("m/models/model.json", "w", force_zip64=True) as member:
            member.write(b'{"graph_module": {}}')
            chunk = b" " * (1 << 20)
            for _ in range(spaces >> 20):
                member.write(chunk)
        archive.writestr("m/data/weights/model_weights_config.json", b'{"config": {}}')
    return path


# ------------------------------------------------------------------ the corpus
def build_corpus(out: Path, marker: Path, decoy: Path) -> list[Case]:
    """Write every hostile file under `out`; return them with their expectations (at least 30)."""
    out.mkdir(parents=True, exist_ok=True)
    ep = _exported_program(out)
    cases: list[Case] = []

    def add(
        name: str,
        builder: Callable[[Path], Path],
        expect: str,
        detail: str | None = None,
        input_shapes: tuple[str, ...] = (),
    ) -> None:
        cases.append(Case(name, builder(out / name), expect, detail, input_shapes))

    # pickles at every place torch.export.load reads one, under renamed programs, padded, stored and deflated
    opaque = "data/constants/opaque_obj_0"
    add("opaque_constant.pt2", lambda p: _with_pickled_constant(ep, p, marker), "rejected", opaque)
    add(
        "opaque_constant_renamed.pt2",
        lambda p: _with_pickled_constant(ep, p, marker, program="evil"),
        "rejected",
        opaque,
    )
    add(
        "generation_archive_opaque_constant.pt2",
        lambda p: _generation_archive_with_pickled_constant(ep, p, marker),
        "rejected",
        opaque,
    )
    add(
        "opaque_constant_padded_8mib.pt2",
        lambda p: _with_pickled_constant(ep, p, marker, pad=8 << 20),
        "rejected",
        opaque,
    )
    add(
        "opaque_constant_renamed_padded.pt2",
        lambda p: _with_pickled_constant(ep, p, marker, program="x", pad=8 << 20),
        "rejected",
        opaque,
    )
    add(
        "opaque_constant_deflated.pt2",
        lambda p: _with_pickled_constant(ep, p, marker, compression=zipfile.ZIP_DEFLATED),
        "rejected",
        opaque,
    )
    add(
        "opaque_constant_protocol0.pt2",
        lambda p: _with_pickled_constant(ep, p, marker, data=text_payload(marker)),
        "rejected",
        None,
    )
    add(
        "opaque_constant_protocol2.pt2",
        lambda p: _with_pickled_constant(ep, p, marker, data=payload(marker, 2)),
        "rejected",
        opaque,
    )
    add(
        "custom_object_constant.pt2",
        lambda p: _with_pickled_constant(ep, p, marker, prefix="custom_obj"),
        "rejected",
        None,
    )
    add("pickled_weight.pt2", lambda p: _with_pickled_payload(ep, p, marker, "weights"), "rejected", None)
    add("pickled_tensor_constant.pt2", lambda p: _with_pickled_payload(ep, p, marker, "constants"), "rejected", None)
    add("pickled_sample_inputs.pt2", lambda p: _with_sample_inputs(ep, p, marker), "rejected", None)
    add("pickled_sample_inputs_renamed.pt2", lambda p: _with_sample_inputs(ep, p, marker, "other"), "rejected", None)
    # TorchScript: data.pkl / constants.pkl / extra files
    plain = _script(out, "plain_script", "        return x + 1\n")
    add(
        "script_data_pkl.pt",
        lambda p: _script_with_entry(plain, p, "data.pkl", payload(marker, 2)),
        "load_error",
        input_shapes=tuple(TS_INPUT_SHAPES),
    )
    add(
        "script_constants_pkl.pt",
        lambda p: _script_with_entry(plain, p, "constants.pkl", payload(marker, 2)),
        "load_error",
        input_shapes=tuple(TS_INPUT_SHAPES),
    )
    add(
        "script_extra_file_pickle.pt",
        lambda p: _rewrite(plain, p, add={"plain_script/extra/evil.pkl": payload(marker)}),
        "confined",
        input_shapes=tuple(TS_INPUT_SHAPES),
    )
    # TorchScript that reaches for the host without any pickle, loops forever, or eats memory
    add(
        "script_writes_host_file.pt",
        lambda p: _script(
            out,
            "writes",
            (
                f"        t = torch.from_file({str(decoy)!r}, True, 8, dtype=torch.uint8)\n"
                "        t.fill_(65)\n        return x + 1\n"
            ),
        ).rename(p),
        "confined",
        input_shapes=tuple(TS_INPUT_SHAPES),
    )
    add(
        "script_reads_host_file.pt",
        lambda p: _script(
            out,
            "reads",
            (
                f"        t = torch.from_file({str(decoy)!r}, False, 8, dtype=torch.uint8)\n"
                "        return x + t.sum().float()\n"
            ),
        ).rename(p),
        "confined",
        input_shapes=tuple(TS_INPUT_SHAPES),
    )
    add(
        "script_reads_proc.pt",
        lambda p: _script(
            out,
            "proc",
            (
                "        t = torch.from_file('/proc/1/environ', False, 64, dtype=torch.uint8)\n"
                "        return x + t.sum().float()\n"
            ),
        ).rename(p),
        "confined",
        input_shapes=tuple(TS_INPUT_SHAPES),
    )
    add(
        "script_endless_loop.pt",
        lambda p: _script(
            out,
            "loop",
            (
                "        i = 0\n        while i >= 0:\n            x = x * 1.0\n            i = i + 1 - 1\n"
                "        return x\n"
            ),
        ).rename(p),
        "timeout",
        input_shapes=tuple(TS_INPUT_SHAPES),
    )
    add(
        "script_allocates_without_bound.pt",
        lambda p: _script(
            out,
            "hog",
            (
                "        y = torch.ones(1 << 20)\n        for _ in range(40):\n            y = torch.cat([y, y])\n"
                "        return x + y[0]\n"
            ),
        ).rename(p),
        "oom",
        input_shapes=tuple(TS_INPUT_SHAPES),
    )
    add(
        "script_one_huge_allocation.pt",
        lambda p: _script(out, "huge", ("        y = torch.ones(1 << 40)\n        return x + y[0]\n")).rename(p),
        "oom",
        input_shapes=tuple(TS_INPUT_SHAPES),
    )
    add(
        "script_segfaults.pt",
        lambda p: _script(
            out,
            "segv",
            (
                "        index = torch.tensor([[1 << 40], [0]])\n"
                "        sparse = torch.ops.aten._sparse_coo_tensor_unsafe(index, torch.ones(1), [2, 2])\n"
                "        return x + sparse.to_dense().sum()\n"
            ),
        ).rename(p),
        "crashed",
        input_shapes=tuple(TS_INPUT_SHAPES),
    )  # an unchecked out-of-bounds write: SIGSEGV
    # archive-level attacks, refused by the server before anything is stored
    add("json_spaces_bomb.pt2", lambda p: _spaces_json(p, 256 << 20), "upload", "metadata_too_large")
    add(
        "deflated_zero_weights.pt2",
        lambda p: _zip(p, {"m/models/model.json": b"{}", "m/data/weights/weight_0": b"\0" * (64 << 20)}),
        "upload",
        "compression_ratio",
    )
    # an AOTInductor package inside an ExportedProgram archive: torch.export.load / load_pt2 would dlopen its library
    add(
        "aotinductor_library.pt2",
        lambda p: _rewrite(ep, p, add={"m/data/aotinductor/model/model.so": b"\x7fELF" + b"\0" * 64}),
        "upload",
        "native_code",
    )
    add(
        "shared_library_in_extra.pt2",
        lambda p: _rewrite(ep, p, add={"m/extra/libhook.so.1": b"\x7fELF" + b"\0" * 64}),
        "upload",
        "native_code",
    )
    add("forged_count_small.pt2", lambda p: _forged_count(p, 15_000, 5), "upload", "forged_directory")
    add("forged_count_large.pt2", lambda p: _forged_count(p, 10, 9), "upload", "forged_directory")
    add("too_many_entries.pt2", lambda p: _forged_count(p, 25_000, 25_000 & 0xFFFF), "upload", "zip_bomb")
    add(
        "traversal_name.pt2",
        lambda p: _zip(p, {"m/models/model.json": b"{}", "m/../../etc/cron.d/x": b"x"}),
        "upload",
        "unsafe_path",
    )
    add(
        "absolute_name.pt2",
        lambda p: _zip(p, {"m/models/model.json": b"{}", "/etc/passwd": b"x"}),
        "upload",
        "unsafe_path",
    )
    add("plain_pickle.pt", lambda p: _write(p, payload(marker, 2)), "upload", "pickled_checkpoint")
    add("torch_save_checkpoint.pt", lambda p: _saved(p, {"state": RunsCode(marker)}), "upload", "pickled_checkpoint")
    add(
        "pickle_in_zip_without_code.pt",
        lambda p: _zip(p, {"m/data.pkl": payload(marker, 2)}),
        "upload",
        "pickled_checkpoint",
    )
    add("not_a_zip.pt2", lambda p: _write(p, b"GIF89a" + bytes(4096)), "upload", "not_a_zip")
    add("empty.pt2", lambda p: _write(p, b""), "upload", "empty")
    add("truncated.pt2", lambda p: _write(p, ep.read_bytes()[: ep.stat().st_size // 2]), "upload", "truncated")
    return cases


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _saved(path: Path, obj: Any) -> Path:
    with open(path, "wb") as fh:
        _torch_save(obj, fh)
    return path


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "hostile-corpus")
    built = build_corpus(target, target / "MARKER", target / "decoy.bin")
    for case in built:
        print(f"{case.expect:10} {case.detail or '':28} {case.path}")
    print(f"{len(built)} files in {target}")
