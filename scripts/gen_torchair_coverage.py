"""Generate advisor/harness/data/torchair_coverage.json: which ops TorchAir's GE mode converts, per torch_npu release.

    python scripts/gen_torchair_coverage.py                      # downloads torch_npu 2.14.0 (~44 MB, not installed)
    python scripts/gen_torchair_coverage.py --version 2.13.0
    python scripts/gen_torchair_coverage.py --wheel torch_npu-2.14.0-cp311-cp311-manylinux_2_28_x86_64.whl

Nothing is installed or imported from the wheel (torchair needs CANN to import); its sources are parsed with `ast`.

Converters: `torch_npu/dynamo/torchair/_ge_concrete_graph/ge_converter/**/*.py`. A converter is a function
registered with `@register_fx_node_ge_converter(target)` (stacked decorators register several targets) or with
the call form `register_fx_node_ge_converter(target)(fn)`. Targets are written as `torch.ops.ns.op.overload`,
`torch.ops.ns.op` (a packet), `getattr(torch.ops.ns.op, "overload", None)`, or a Python builtin (`operator.add`,
`math.floor`, `torch.sym_float`); their names become "ns.op.overload", "ns.op", "operator.add".
`lite/` (only active in the lite export mode) and `mkldnn/` (never imported by torchair) are skipped. When a
target is registered twice, the module torchair imports last wins (its import order is mirrored below).

Status of each converter (`advisor.harness.coverage.classify_converter`, shared with the live-registry reader):
- stub: the body (after the docstring) is a single `raise`, e.g. `raise NotImplementedError("torch.ops.aten.amax
  .default ge_converter is not implemented!")` or the `.out` variants' `raise RuntimeError("... is not supported!")`;
- partial: converts some cases but raises `NotImplementedError` for others (torchair's own partial marker in
  `torchair.fx_summary._get_converter_status`), or raises an error whose message says a case is "not implemented",
  "not supported", "unsupported", "only support(ed) ..." (int8 mm, batch norm in training mode, tensor-valued
  sizes, ...). Raises that merely validate arguments ("padding length should be at least 2") do not count, and
  `@declare_supported` is not a marker: it only lists test cases;
- supported: every other registered converter. An op absent from the table has no converter ("none").

Meta kernels of `npu::` ops: `torch_npu/op_plugin/meta/*.py`, i.e. `@impl(lib, "name[.overload]")` where
`lib = Library("npu", "IMPL", "Meta")`, and `register_fake("npu::name[.overload]")`. An op with neither may still
have a C++ Meta kernel; the runtime check is `torch._C._dispatch_has_kernel_for_dispatch_key(name, "Meta")`.

The coverage is that of the GE graph mode (`CompilerConfig().mode = "max-autotune"`); npugraph_ex and
reduce-overhead capture eager kernels and use no converters.
"""

from __future__ import annotations

import argparse
import ast
import collections
import datetime
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from advisor.harness.coverage import classify_converter  # noqa: E402 - needs the repo root on sys.path

DEFAULT_VERSION = "2.14.0"
DEFAULT_OUTPUT = REPO_ROOT / "advisor" / "harness" / "data" / "torchair_coverage.json"
CONVERTER_DIR = "torch_npu/dynamo/torchair/_ge_concrete_graph/ge_converter/"
META_DIR = "torch_npu/op_plugin/meta/"
SKIPPED_CONVERTER_DIRS = ("lite/", "mkldnn/")
# torchair's import order (ge_converter/__init__.py, then custom on first use, experimental from torchair/__init__).
IMPORT_ORDER = (
    "prim/",
    "higher_order/",
    "quantized/",
    "rngprims/",
    "c10d_functional/",
    "builtin_converters.py",
    "prims/",
    "aten/",
    "custom/",
    "experimental/",
)
REGISTER = "register_fx_node_ge_converter"
SourceFile = tuple[str, str]  # (path relative to its directory, source text)


# ------------------------------------------------------------------ converters
def parse_converters(files: Iterable[SourceFile]) -> dict[str, str]:
    """Map every converter target ("aten.amax.default") to supported / partial / stub."""
    statuses: dict[str, str] = {}
    for path, source in sorted(files, key=lambda item: _import_rank(item[0])):
        if path.startswith(SKIPPED_CONVERTER_DIRS):
            continue
        for target, status in _converters_in(source, path):
            statuses[target] = status
    return statuses


def _converters_in(source: str, path: str) -> Iterator[tuple[str, str]]:
    tree = ast.parse(source, filename=path)
    imported = _imported_names(tree)
    functions = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                target = _registered_target(decorator, imported)
                if target:
                    yield target, classify_converter(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Call) and node.args:
            # register_fx_node_ge_converter(target)(fn)
            target = _registered_target(node.func, imported)
            function = functions.get(node.args[0].id) if isinstance(node.args[0], ast.Name) else None
            if target and function is not None:
                yield target, classify_converter(function)


def _registered_target(call: ast.expr, imported: dict[str, str]) -> str | None:
    if not (isinstance(call, ast.Call) and _dotted(call.func).endswith(REGISTER) and call.args):
        return None
    return target_name(call.args[0], imported)


def target_name(expr: ast.expr, imported: dict[str, str] | None = None) -> str | None:
    """ "aten.amax.default" for `torch.ops.aten.amax.default`, `getattr(torch.ops.aten.amax, "default", None)`;
    "operator.add" for `operator.add`; None for an expression that names no op."""
    if isinstance(expr, ast.Call) and _dotted(expr.func) == "getattr" and len(expr.args) >= 2:
        packet, overload = target_name(expr.args[0], imported), expr.args[1]
        if packet and isinstance(overload, ast.Constant) and isinstance(overload.value, str):
            return f"{packet}.{overload.value}"
        return None
    dotted = _dotted(expr)
    if not dotted:
        return None
    if dotted.startswith("torch.ops."):
        return dotted.removeprefix("torch.ops.")
    if "." not in dotted and imported and dotted in imported:
        return imported[dotted]
    return dotted


def _dotted(expr: ast.expr) -> str:
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return ""
    parts.append(expr.id)
    return ".".join(reversed(parts))


def _imported_names(tree: ast.Module) -> dict[str, str]:
    """`from torch import sym_sqrt` -> {"sym_sqrt": "torch.sym_sqrt"} (module names without a leading "_")."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):  # also inside `try:` blocks; the first import of a name wins
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                names.setdefault(alias.asname or alias.name, f"{node.module.lstrip('_')}.{alias.name}")
    return names


def _import_rank(path: str) -> tuple[int, str]:
    ranks = [rank for rank, prefix in enumerate(IMPORT_ORDER) if path.startswith(prefix)]
    return (ranks[0] if ranks else len(IMPORT_ORDER), path)


# ------------------------------------------------------------------ Meta kernels of npu:: ops
def parse_npu_meta(files: Iterable[SourceFile]) -> list[str]:
    """The `npu::` ops ("npu.npu_rms_norm.default") with a Python Meta kernel or fake impl."""
    found: set[str] = set()
    for path, source in files:
        tree = ast.parse(source, filename=path)
        meta_libraries = _npu_meta_libraries(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            called = _dotted(node.func).rsplit(".", 1)[-1]
            first = node.args[0]
            if called == "impl" and len(node.args) >= 2 and _dotted(first) in meta_libraries:
                name = _constant_str(node.args[1])
                if name:
                    found.add(_npu_op_name(name))
            elif called in ("register_fake", "impl_abstract"):
                name = _constant_str(first)
                if name and name.startswith("npu::"):
                    found.add(_npu_op_name(name.removeprefix("npu::")))
    return sorted(found)


def _npu_meta_libraries(tree: ast.Module) -> set[str]:
    """Names bound to `Library("npu", "IMPL", "Meta")`."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            call = node.value
            args = [_constant_str(arg) for arg in call.args]
            if _dotted(call.func).endswith("Library") and args[:1] == ["npu"] and "Meta" in args[1:]:
                names.update(_dotted(target) for target in node.targets)
    return names


def _npu_op_name(name: str) -> str:
    return f"npu.{name}" if "." in name else f"npu.{name}.default"


def _constant_str(expr: ast.expr) -> str | None:
    return expr.value if isinstance(expr, ast.Constant) and isinstance(expr.value, str) else None


# ------------------------------------------------------------------ the wheel and the table
def wheel_sources(wheel: zipfile.ZipFile, directory: str) -> list[SourceFile]:
    return [
        (name.removeprefix(directory), wheel.read(name).decode("utf-8"))
        for name in wheel.namelist()
        if name.startswith(directory) and name.endswith(".py")
    ]


def tree_sources(root: Path) -> list[SourceFile]:
    return [(path.relative_to(root).as_posix(), path.read_text(encoding="utf-8")) for path in root.rglob("*.py")]


def build_table(wheel_path: Path, *, generated: str | None = None) -> dict:
    with zipfile.ZipFile(wheel_path) as wheel:
        converters = parse_converters(wheel_sources(wheel, CONVERTER_DIR))
        npu_meta = parse_npu_meta(wheel_sources(wheel, META_DIR))
        version, git_version = _wheel_version(wheel)
    return {
        "torch_npu_version": version,
        "torch_npu_git_version": git_version,
        "wheel": wheel_path.name,
        "wheel_sha256": hashlib.sha256(wheel_path.read_bytes()).hexdigest(),
        "generated": generated or datetime.date.today().isoformat(),
        "generator": "scripts/gen_torchair_coverage.py",
        "applies_to": "TorchAir GE mode (max-autotune); npugraph_ex and reduce-overhead use no converters",
        "counts": count_by_namespace(converters),
        "ops": dict(sorted(converters.items())),
        "npu_meta": npu_meta,
    }


def count_by_namespace(converters: dict[str, str]) -> dict[str, dict[str, int]]:
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for name, status in converters.items():
        counts[name.split(".", 1)[0]][status] += 1
    return {namespace: dict(sorted(counter.items())) for namespace, counter in sorted(counts.items())}


def _wheel_version(wheel: zipfile.ZipFile) -> tuple[str | None, str | None]:
    try:
        text = wheel.read("torch_npu/version.py").decode("utf-8")
    except KeyError:
        return None, None
    found = dict(re.findall(r"^(__version__|git_version)\s*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE))
    return found.get("__version__"), found.get("git_version")


def download_wheel(version: str, directory: Path) -> Path:
    """`pip download` the cp311 manylinux torch_npu wheel (no dependencies, nothing installed)."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        f"torch_npu=={version}",
        "--python-version",
        "3.11",
        "--platform",
        "manylinux_2_28_x86_64",
        "--only-binary=:all:",
        "--dest",
        str(directory),
    ]
    result = subprocess.run(command, check=False)
    wheels = sorted(directory.glob("torch_npu-*.whl"))
    if result.returncode != 0 or not wheels:
        raise SystemExit(
            f"error: could not download torch_npu=={version} (pip exit status {result.returncode}); "
            "check the version and the package index, or pass --wheel PATH to a wheel you already have"
        )
    return wheels[0]


def write_table(table: dict, output: Path) -> None:
    """One op per line: small diffs between torch_npu versions, well under 1 MB."""
    lines = ["{"]
    header = {key: value for key, value in table.items() if key not in ("ops", "npu_meta")}
    for key, value in header.items():
        lines.append(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)},")
    lines.append('  "ops": {')
    ops = [f"    {json.dumps(name)}: {json.dumps(status)}" for name, status in table["ops"].items()]
    lines.append(",\n".join(ops))
    lines.append("  },")
    lines.append(f'  "npu_meta": {json.dumps(table["npu_meta"])}')
    lines.append("}")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--version", default=DEFAULT_VERSION, help="torch_npu version to download")
    parser.add_argument("--wheel", type=Path, help="use this torch_npu wheel instead of downloading one")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    if args.wheel is not None and not zipfile.is_zipfile(args.wheel):
        raise SystemExit(f"error: {args.wheel} is not a wheel (zip) file")
    with tempfile.TemporaryDirectory(prefix="torch-npu-wheel-") as tmp:
        wheel = args.wheel or download_wheel(args.version, Path(tmp))
        table = build_table(wheel)
    if not table["ops"]:
        raise SystemExit(f"error: {wheel.name} has no TorchAir converters under {CONVERTER_DIR}")
    write_table(table, args.output)
    print(f"{args.output}: {len(table['ops'])} converter targets from {table['wheel']}")
    for namespace, counts in table["counts"].items():
        print(f"  {namespace:<20} {sum(counts.values()):>5}  {counts}")
    print(f"  npu ops with a Python Meta/fake kernel: {len(table['npu_meta'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
