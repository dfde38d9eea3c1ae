"""The built-in backends as data: names, devices, modes, families and the other facts every layer needs.

Torch-free, so the decision engine and the API server can know the backends without importing the harness;
the harness's backend classes read their name, family, devices and modes from here (tests/core/test_catalogue.py
checks that they agree). Order matters: it is the order the backends are listed and measured in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Family = Literal["baseline", "generic", "vendor", "export"]
Device = Literal["cpu", "cuda", "npu"]

TORCHAIR_GE_MODE = "max-autotune"
TORCHAIR_NPUGRAPH_EX_MODE = "npugraph_ex"
INDUCTOR_INT8_MODE = "pt2e-int8"  # torchao PT2E int8 static, X86InductorQuantizer, compiled by Inductor (CPU)
ORT_INT8_MODE = "int8"  # onnxruntime.quantization: static QDQ for convolutional graphs, dynamic otherwise (CPU)
OPENVINO_INT8_MODE = "int8"  # openvino.convert_model + nncf.quantize (post-training int8 static), an IR (CPU)
TORCHAIR_EXPORT_MODE = "dynamo_export"  # torchair.dynamo_export -> .air -> atc -> .om; recommended, never measured
EXPORT_DISPLAY_NAME = "TorchAir's offline export (torchair.dynamo_export, then atc)"
UNKNOWN_SIMPLICITY_RANK = 5  # a backend the catalogue does not know ranks after every known one


@dataclass(frozen=True)
class BackendInfo:
    """One backend's facts. `mode_devices` narrows a mode to some of `devices` (absent: every device)."""

    name: str
    display_name: str
    family: Family
    devices: tuple[str, ...]
    modes: tuple[str, ...]
    simplicity_rank: int  # ties between equally fast options go to the simpler backend (lower rank)
    default_mode: str = "default"
    packages: tuple[str, ...] = ()  # import names it needs besides torch (on every device it runs on)
    workloads: tuple[str, ...] = ("inference", "training")
    needs_own_process: bool = False  # compiling changes process-wide state: never share a process
    mode_devices: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    # mode -> the mode whose whole compile it does first, then more (so it never compiles faster); the plan uses
    # the measured compile of the latter as a floor for the former (advisor.core.decision.plan_pruning)
    compile_floor: Mapping[str, str] = field(default_factory=dict, hash=False)
    builds_inductor_cpp: bool = False  # compiles C++ kernels with Inductor on CPU (its zygote prepares for that)
    # int8 modes: measured only when named with the mode (`-b onnxruntime:int8`), inference only, and judged by
    # their drift from the float model (advisor.harness.accuracy.quantized_drift), not by allclose alone
    quantized_modes: tuple[str, ...] = ()
    # mode -> what that option is, where it is not "<display_name>, mode <mode>" (an export IR is not torch.compile)
    mode_display: Mapping[str, str] = field(default_factory=dict, hash=False)
    # its runtime runs its own kernels outside torch.profiler: a profile sees only the glue around the call
    outside_profiler: bool = False
    # every mode starts with torch.onnx.export(dynamo=True): a graph the exporter cannot take rules the backend out
    # before it is measured (advisor.core.decision.cheap_evidence)
    exports_onnx: bool = False

    def modes_for(self, device: str) -> tuple[str, ...]:
        """The modes that mean something on `device`: all but those `mode_devices` keeps to other devices
        (whether the backend runs on `device` at all is `devices`' question)."""
        return tuple(mode for mode in self.modes if device in self.mode_devices.get(mode, (device,)))

    def unnamed_modes_for(self, device: str) -> tuple[str, ...]:
        """The modes measured when only the backend is named (`-b inductor`): `modes_for` less the opt-in
        quantized ones, which change the model's numbers and are measured only when asked for by name."""
        return tuple(mode for mode in self.modes_for(device) if mode not in self.quantized_modes)


def _foreign_runtime(int8_mode: str, int8_display: str, **facts: Any) -> BackendInfo:
    """A backend whose kernels are another runtime's (ONNX Runtime, OpenVINO): inference only, run outside
    torch.profiler, with an opt-in int8 mode (`int8_display`) from that runtime's own quantizer beside the float one."""
    return BackendInfo(
        modes=("default", int8_mode),
        workloads=("inference",),
        quantized_modes=(int8_mode,),
        mode_display={int8_mode: int8_display},
        outside_profiler=True,
        **facts,
    )


BACKENDS: dict[str, BackendInfo] = {
    info.name: info
    for info in (
        BackendInfo(
            name="eager",
            display_name="eager PyTorch (no compilation)",
            family="baseline",
            devices=("cpu", "cuda", "npu"),
            modes=("default",),
            simplicity_rank=0,
        ),
        BackendInfo(
            name="inductor",
            display_name="torch.compile with Inductor",
            family="generic",
            devices=("cpu", "cuda", "npu"),
            modes=("default", "max-autotune", "reduce-overhead", INDUCTOR_INT8_MODE),
            simplicity_rank=1,
            # reduce-overhead means CUDA graphs; on other devices it silently runs like default. The X86 Inductor
            # quantizer's int8 kernels are CPU ones.
            mode_devices={"reduce-overhead": ("cuda",), INDUCTOR_INT8_MODE: ("cpu",)},
            quantized_modes=(INDUCTOR_INT8_MODE,),
            mode_display={
                INDUCTOR_INT8_MODE: "torch.compile with Inductor on a PT2E int8 model (torchao, X86InductorQuantizer)"
            },
            # max-autotune lowers the graph as default does, then benchmarks kernel choices; reduce-overhead
            # compiles as default does, then records CUDA graphs
            compile_floor={"max-autotune": "default", "reduce-overhead": "default"},
            builds_inductor_cpp=True,
        ),
        BackendInfo(
            name="torchair",
            display_name="TorchAir",
            family="vendor",
            devices=("npu",),
            modes=(TORCHAIR_GE_MODE, TORCHAIR_NPUGRAPH_EX_MODE),
            simplicity_rank=4,
            default_mode=TORCHAIR_GE_MODE,
            packages=("torch_npu",),
            mode_display={TORCHAIR_EXPORT_MODE: EXPORT_DISPLAY_NAME},
        ),
        _foreign_runtime(
            ORT_INT8_MODE,
            "int8 ONNX export (onnxruntime.quantization) + ONNX Runtime",
            name="onnxruntime",
            display_name="ONNX export + ONNX Runtime",
            family="export",
            devices=("cpu", "cuda"),
            simplicity_rank=2,
            packages=("onnxruntime", "onnx", "onnxscript"),
            mode_devices={ORT_INT8_MODE: ("cpu",)},
            exports_onnx=True,  # advisor.harness.backends.ort: the int8 mode quantizes the float export
        ),
        _foreign_runtime(
            OPENVINO_INT8_MODE,
            # not torch.compile: the model converted to an IR (openvino.convert_model), quantized with NNCF, compiled;
            # it needs nncf besides openvino (advisor.harness.backends.ov_int8)
            "OpenVINO int8 IR (openvino.convert_model + NNCF) + OpenVINO runtime",
            name="openvino",
            display_name="torch.compile with OpenVINO",
            family="vendor",
            devices=("cpu",),
            simplicity_rank=3,
            packages=("openvino",),
            needs_own_process=True,
        ),
        BackendInfo(
            name="tensorrt",
            display_name="torch.compile with TensorRT",
            family="vendor",
            devices=("cuda",),
            modes=("default",),
            simplicity_rank=3,
            packages=("torch_tensorrt",),
            workloads=("inference",),
        ),
    )
}


def names() -> list[str]:
    """Every built-in backend's name, in catalogue order."""
    return list(BACKENDS)


def get(name: str) -> BackendInfo | None:
    """The catalogue entry for `name`, or None for a backend it does not know (e.g. one a test injects)."""
    return BACKENDS.get(name)


def info(name: str) -> BackendInfo:
    """The catalogue entry for `name`; KeyError naming the known backends otherwise."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise KeyError(f"unknown backend '{name}'; known: {', '.join(BACKENDS)}") from None


def display_name(backend: str) -> str:
    """What the user reads for a backend ("torch.compile with Inductor"); the name itself when unknown."""
    entry = BACKENDS.get(backend)
    return entry.display_name if entry else backend


def option_display(backend: str | None, mode: str | None) -> str:
    """What one option is, in words, the same in the headline, the `ranked:` line, the reports and the summary: a
    torch.compile backend ("torch.compile with Inductor, mode max-autotune"), an export runtime ("ONNX export + ONNX
    Runtime") or an exported int8 IR ("OpenVINO int8 IR (openvino.convert_model + NNCF) + OpenVINO runtime"); an
    unknown backend or mode reads as its name."""
    backend = backend or "unknown"
    entry = BACKENDS.get(backend)
    mode = mode or (entry.default_mode if entry else "default")
    if entry is not None and mode in entry.mode_display:
        return entry.mode_display[mode]
    if mode == TORCHAIR_EXPORT_MODE:
        return EXPORT_DISPLAY_NAME
    name = display_name(backend)
    return name if mode == "default" or backend == "eager" else f"{name}, mode {mode}"


def outside_profiler(backend: str | None) -> bool:
    """Whether `backend`'s runtime runs its kernels outside torch.profiler (ONNX Runtime, OpenVINO)."""
    entry = BACKENDS.get(backend or "")
    return entry is not None and entry.outside_profiler


def simplicity_rank(backend: str) -> int:
    entry = BACKENDS.get(backend)
    return entry.simplicity_rank if entry else UNKNOWN_SIMPLICITY_RANK


def may_build_inductor_cpp(backend: str) -> bool:
    """Whether `backend` may compile C++ kernels with Inductor; True for a backend the catalogue does not know."""
    entry = BACKENDS.get(backend)
    return entry.builds_inductor_cpp if entry else True


def is_quantized(backend: str | None, mode: str | None) -> bool:
    """Whether (backend, mode) is one of the catalogue's int8 options."""
    entry = BACKENDS.get(backend or "")
    return entry is not None and (mode or entry.default_mode) in entry.quantized_modes


def devices_of(backend: str) -> tuple[str, ...] | None:
    """The devices `backend` runs on; None when the catalogue does not know it (then nothing is assumed)."""
    entry = BACKENDS.get(backend)
    return entry.devices if entry else None


# the int8 options that are offline exports a runtime runs without Python (model.int8.onnx; OpenVINO's int8 IR): the
# edge branch weighs them (advisor.core.decision.edge_rules) and an edge analysis measures them unasked
# (advisor.harness.measurement.plan.quantizes_by_default)
EXPORTED_INT8: tuple[tuple[str, str], ...] = (("onnxruntime", ORT_INT8_MODE), ("openvino", OPENVINO_INT8_MODE))

EAGER_LABEL = "eager:default"  # option_label("eager", "default"): the baseline every speedup is relative to


def option_label(backend: str | None, mode: str | None, *, short: bool = False) -> str:
    """The one spelling of an option: "backend:mode" ("inductor:default"; a missing backend or mode reads
    "unknown" / "default"). `short` drops a default mode ("eager"), as the web pages show it."""
    backend = backend or "unknown"
    mode = mode or "default"
    return backend if short and mode == "default" else f"{backend}:{mode}"
