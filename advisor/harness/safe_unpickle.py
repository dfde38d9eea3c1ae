"""No pickle from an upload can run code: a process-wide restricted unpickler, armed while upload bytes are read.

`install()` runs first thing in every sandbox child and zygote (advisor.harness.sandbox), before torch is imported,
and replaces the unpickler of the `pickle` and `_pickle` modules (`Unpickler`, `load`, `loads`, and the
pure-Python `_Unpickler`, `_load`, `_loads`) with subclasses whose `find_class` refuses, while armed, every
global outside `ALLOWED_GLOBALS` (the tensor-rebuild functions and the plain types a state dict holds). Every
torch code path that unpickles goes through those names - `torch.load(weights_only=False)` subclasses
`pickle.Unpickler`, `torch.export.load` calls `pickle.loads` for opaque constants - so the refusal does not
depend on what an archive entry is called, how big it is, or how it is compressed. TorchScript custom objects
(`torch._C._pickle_load_obj`) are refused outright while armed.

`refusing_pickled_objects()` arms it around model loading (advisor.harness.loading). It is not armed for the rest of
a child's life: torch.compile's own caches (Inductor's FX-graph cache, compile-worker results) are pickles the
child itself wrote into its private scratch directory, and they hold arbitrary compiler classes.
"""

from __future__ import annotations

import _pickle
import contextlib
import io
import pickle
import sys
import threading
from collections.abc import Iterator
from typing import Any

_DTYPE_STORAGES = (
    "Float",
    "Double",
    "Half",
    "BFloat16",
    "Long",
    "Int",
    "Short",
    "Char",
    "Byte",
    "Bool",
    "ComplexFloat",
    "ComplexDouble",
    "QInt8",
    "QUInt8",
    "QInt32",
    "Untyped",
)
ALLOWED_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        ("torch._utils", "_rebuild_tensor"),
        ("torch._utils", "_rebuild_tensor_v2"),
        ("torch._utils", "_rebuild_tensor_v3"),
        ("torch._utils", "_rebuild_parameter"),
        ("torch._utils", "_rebuild_parameter_with_state"),
        ("torch._utils", "_rebuild_qtensor"),
        ("torch._tensor", "_rebuild_from_type_v2"),
        ("torch.storage", "UntypedStorage"),
        ("torch", "Size"),
        ("torch", "device"),
        ("torch", "Tensor"),
        ("torch.nn.parameter", "Parameter"),
        ("collections", "OrderedDict"),
        *(("torch", f"{dtype}Storage") for dtype in _DTYPE_STORAGES),
    }
)

_armed = 0
_lock = threading.Lock()
_installed = False


class PickledObjectRefused(pickle.UnpicklingError):
    """An upload held a pickle that names a global outside the allow-list. `entry` is filled in by the loader."""

    sandbox_status = "rejected"  # advisor.harness.sandbox reports this status instead of a crash

    def __init__(self, global_name: str, entry: str | None = None) -> None:
        self.global_name = global_name
        self.entry = entry
        super().__init__(self.message())

    def message(self) -> str:
        where = f" (`{self.entry}`)" if self.entry else ""
        return (
            f"the archive holds a pickled Python object{where}; npu-advisor never unpickles objects from uploads "
            f"(it refers to `{self.global_name}`, which is not a tensor)"
        )

    def __str__(self) -> str:
        return self.message()


def _check(module: str, name: str) -> None:
    if _armed and (module, name) not in ALLOWED_GLOBALS:
        raise PickledObjectRefused(f"{module}.{name}")


class _GuardedUnpickler(_pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        _check(module, name)
        return super().find_class(module, name)


class _GuardedPyUnpickler(pickle._Unpickler):  # type: ignore[name-defined]  # noqa: SLF001 - same protection
    def find_class(self, module: str, name: str) -> Any:
        _check(module, name)
        return super().find_class(module, name)


def _factory(cls: type) -> tuple[Any, Any]:
    def load(
        file: Any, *, fix_imports: bool = True, encoding: str = "ASCII", errors: str = "strict", buffers: Any = None
    ) -> Any:
        return cls(file, fix_imports=fix_imports, encoding=encoding, errors=errors, buffers=buffers).load()

    def loads(
        data: Any, /, *, fix_imports: bool = True, encoding: str = "ASCII", errors: str = "strict", buffers: Any = None
    ) -> Any:
        if isinstance(data, str):
            raise TypeError("Can't load pickle from unicode string")
        return load(io.BytesIO(data), fix_imports=fix_imports, encoding=encoding, errors=errors, buffers=buffers)

    return load, loads


def install() -> None:
    """Replace the `pickle`/`_pickle` unpicklers process-wide (idempotent). Does not arm them."""
    global _installed
    if _installed:
        return
    load, loads = _factory(_GuardedUnpickler)
    py_load, py_loads = _factory(_GuardedPyUnpickler)
    for module in (pickle, _pickle):
        module.Unpickler = _GuardedUnpickler  # type: ignore[misc]
        module.load = load  # type: ignore[assignment]
        module.loads = loads  # type: ignore[assignment]
    pickle._Unpickler = _GuardedPyUnpickler  # type: ignore[attr-defined,misc]
    pickle._load = py_load  # type: ignore[attr-defined]
    pickle._loads = py_loads  # type: ignore[attr-defined]
    _installed = True


@contextlib.contextmanager
def refusing_pickled_objects() -> Iterator[None]:
    """Arm the refusal (installing it first if needed) for the duration; TorchScript custom objects too."""
    global _armed
    install()
    torch_c = sys.modules.get("torch._C")
    original_load_obj = getattr(torch_c, "_pickle_load_obj", None)

    def refuse_custom_object(*_args: Any, **_kwargs: Any) -> Any:
        raise PickledObjectRefused("torch.classes (a TorchScript custom object)")

    with _lock:
        _armed += 1
        if original_load_obj is not None:
            torch_c._pickle_load_obj = refuse_custom_object  # type: ignore[union-attr]
    try:
        yield
    finally:
        with _lock:
            _armed -= 1
            if original_load_obj is not None and not _armed:
                torch_c._pickle_load_obj = original_load_obj  # type: ignore[union-attr]
