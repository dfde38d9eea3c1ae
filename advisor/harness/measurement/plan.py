"""What a measurement will run: the (backend, mode) variants for a device, and the checks before any child starts."""

from __future__ import annotations

import os

DEFAULT_TIMEOUT_S = 900.0


DEFAULT_MEMORY_LIMIT_MB = 16384


class MeasureError(RuntimeError):
    """The measurement could not start (bad model file, unknown backend, ...); `str()` is the user message."""


def plan_variants(backends: list[str] | None, device: str, *, quantize: bool = False) -> list[tuple[str, str]]:
    """(backend spec, mode) pairs to measure, eager first. "name" means all its modes on `device` but the quantized
    ones, which are measured only when named with their mode ("onnxruntime:int8") - or, with `quantize`
    (quantizes_by_default: the edge stage), also the backend's exported int8 modes (catalogue.EXPORTED_INT8)."""
    from advisor.core import catalogue
    from advisor.harness.backends import UnknownBackend, all_backends, get_backend, split_backend_spec

    try:
        specs = [b.name for b in all_backends()] if not backends else list(backends)
        variants: list[tuple[str, str]] = [("eager", "default")]
        for spec in specs:
            name, mode = split_backend_spec(spec)
            backend = get_backend(name)
            if backend.name == "eager":
                continue
            if mode is not None and mode not in backend.modes:
                raise MeasureError(f"{backend.name} has no mode '{mode}'; modes: {', '.join(backend.modes)}")
            # quantized modes (catalogue `quantized_modes`) only when named: `-b onnxruntime:int8`
            unnamed = backend.info.unnamed_modes_for(device) if backend.info is not None else backend.modes_for(device)
            if quantize and backend.info is not None:
                int8 = [m for m in backend.info.modes_for(device) if (backend.name, m) in catalogue.EXPORTED_INT8]
                unnamed = (*unnamed, *int8)
            modes = [mode] if mode else list(unnamed or backend.modes[:1])
            variants.extend((name, m) for m in modes if (name, m) not in variants)
        return variants
    except UnknownBackend as exc:
        raise MeasureError(str(exc)) from exc


# ------------------------------------------------------------------ checks and environment
def check_workload(workload: str, optimizer: str) -> None:
    from advisor.harness.training_step import OPTIMIZERS

    if workload not in ("inference", "training", "generation"):
        raise MeasureError(f"unknown workload '{workload}' (inference, training or generation)")
    if optimizer not in OPTIMIZERS:
        raise MeasureError(f"unknown optimizer '{optimizer}' ({' or '.join(OPTIMIZERS)})")


def check_model_file(path: str, inputs_file: str | None) -> None:
    """Fail fast, before any child starts, with the specific message for a missing or unusable file."""
    if not os.path.isfile(path):
        raise MeasureError(f"model file not found: {path}")
    if inputs_file is not None and not os.path.isfile(inputs_file):
        raise MeasureError(f"inputs file not found: {inputs_file}")
    try:
        from advisor.core.artifacts import ArtifactRejected, sniff
    except ImportError:  # artifact sniffing not installed: the child's loader reports instead
        return
    try:
        sniff(path)
    except ArtifactRejected as exc:
        raise MeasureError(str(exc)) from exc


CHILD = "advisor.harness.measurement.child:measure_variant"


PRELOAD = "advisor.harness.measurement.child:preload"


class MeasurementCancelled(RuntimeError):
    """The caller's cancel signal stopped the measurement; the running child was killed."""
