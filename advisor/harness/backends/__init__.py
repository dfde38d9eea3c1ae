"""The backend registry: built-in backends by name, and any other backend by "package.module:Class" path.

Listing backends never imports torch or a vendor SDK; each backend imports what it needs when it runs.
"""

from __future__ import annotations

import importlib

from advisor.harness.backends.base import Backend, CompileRequest, UnsupportedRequest

__all__ = [
    "Backend",
    "CompileRequest",
    "UnknownBackend",
    "UnsupportedRequest",
    "all_backends",
    "get_backend",
    "split_backend_spec",
]

BUILTIN_BACKENDS: dict[str, str] = {
    "eager": "advisor.harness.backends.eager:EagerBackend",
    "inductor": "advisor.harness.backends.inductor:InductorBackend",
    "torchair": "advisor.harness.backends.torchair:TorchAirBackend",
    "onnxruntime": "advisor.harness.backends.ort:OnnxRuntimeBackend",
    "openvino": "advisor.harness.backends.openvino_backend:OpenVinoBackend",
    "tensorrt": "advisor.harness.backends.tensorrt_backend:TensorRtBackend",
}


class UnknownBackend(ValueError):
    """The name or path does not resolve to a backend; the message says what would."""


def split_backend_spec(spec: str) -> tuple[str, str | None]:
    """ "torchair:npugraph_ex" -> ("torchair", "npugraph_ex"); "pkg.mod:Class" and "inductor" -> (spec, None)."""
    name, sep, rest = spec.partition(":")
    if sep and name in BUILTIN_BACKENDS:
        return name, rest or None
    return spec, None


def get_backend(name_or_path: str) -> Backend:
    """A built-in backend by name ("inductor", or "torchair:npugraph_ex" - the mode is ignored here),
    or an instance of the class at "package.module:Class" (how tests inject backends)."""
    name, _mode = split_backend_spec(name_or_path)
    path = BUILTIN_BACKENDS.get(name, name)
    if ":" not in path:
        raise UnknownBackend(
            f"unknown backend '{name_or_path}'; known: {', '.join(BUILTIN_BACKENDS)} (or a 'package.module:Class' path)"
        )
    module_name, _, class_name = path.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise UnknownBackend(f"cannot load backend '{name_or_path}': {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise UnknownBackend(f"'{name_or_path}' is not a Backend subclass")
    return cls()


def all_backends() -> list[Backend]:
    """Every built-in backend, available here or not (ask each one's `available(device)`)."""
    return [get_backend(name) for name in BUILTIN_BACKENDS]
