"""The shell lines that re-run an analysis with `npu-advisor analyze`: the same file names, context, device and
option set (int8 modes and the calibration file included), so that running them measures the same options.

Torch-free: the dashboard builds them from a stored analysis. The option set is written so that the CLI's
`--backends` parsing (advisor.harness.measurement.plan.plan_variants) gives back exactly the measured options: a
backend whose measured modes are the ones it runs unnamed on that device is named bare (`inductor`), any other set
mode by mode (`onnxruntime:int8`, `inductor:default`); eager is always measured and leads.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from advisor.core import catalogue, quantized

CONTEXT_FILE = "context.json"


def backends_argument(options: Iterable[tuple[str, str]], device: str, *, quantize: bool = False) -> str:
    """`--backends` text for the measured (backend, mode) options on `device`. `quantize`: the context measures the
    exported int8 modes unasked (advisor.core.quantized.quantizes_by_default), so a bare name would run them too: such
    a backend is written mode by mode."""
    modes: dict[str, list[str]] = {}
    for backend, mode in options:
        if backend and mode not in modes.setdefault(backend, []):
            modes[backend].append(mode)
    words = ["eager"]
    for backend, measured in modes.items():
        if backend == "eager":
            continue
        known = catalogue.get(backend)
        unnamed = set(known.unnamed_modes_for(device)) if known is not None else set()
        int8 = known is not None and any((backend, m) in catalogue.EXPORTED_INT8 for m in known.modes_for(device))
        if quantize and int8:
            unnamed = set()  # a bare name adds its int8 exports: say every mode
        if unnamed and set(measured) == unnamed:
            words.append(backend)
        else:
            words.extend(f"{backend}:{mode}" for mode in measured)
    return ",".join(words)


def reproduce_command(
    *,
    context: Mapping[str, Any],
    options: Iterable[tuple[str, str]],
    device: str,
    model_file: str,
    inputs_file: str | None = None,
    calibration_file: str | None = None,
) -> str:
    """Two shell lines: write the context, then analyse the model with it (every word shell-quoted)."""
    command = ["npu-advisor", "analyze", model_file, "--context", CONTEXT_FILE, "--device", device]
    option_list = list(options)
    if option_list:
        quantize = quantized.quantizes_by_default(context)
        command += ["--backends", backends_argument(option_list, device, quantize=quantize)]
    if inputs_file:
        command += ["--inputs", inputs_file]
    if calibration_file:
        command += ["--calibration", calibration_file]
    written = json.dumps(dict(context), sort_keys=True, separators=(",", ":"))
    return f"printf %s {shlex.quote(written)} > {CONTEXT_FILE}\n" + " ".join(shlex.quote(str(w)) for w in command)


def model_file_name(upload_names: Mapping[str, str] | None, model_name: str, fmt: str | None) -> str:
    """The uploaded model file's own name; for an analysis stored without it, the model name with the format's
    suffix ("example-mlp.pt2" stays as it is)."""
    if upload_names and upload_names.get("model"):
        return upload_names["model"]
    suffix = "pt" if fmt == "torchscript" else "pt2"
    return model_name if model_name.endswith(f".{suffix}") else f"{model_name}.{suffix}"
