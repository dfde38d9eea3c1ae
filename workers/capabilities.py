"""What this node can measure: its device kind, the backends usable there, and its environment.

The probe imports torch (and torch_npu on NPU nodes), so the agent runs it in a sandboxed child:
a broken driver stack shows up as a readable error instead of killing the worker.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from typing import Any

DEVICE_KINDS = ("cpu", "cuda", "npu")


class CapabilityError(RuntimeError):
    """The node cannot serve as a worker as asked (no such device, no usable backend); the message says why."""


@dataclass
class Capabilities:
    device_kind: str
    backends: list[str]
    unavailable: dict[str, str] = field(default_factory=dict)  # backend -> why not here
    environment: dict[str, Any] = field(default_factory=dict)


def probe_capabilities(device: str | None = None) -> dict[str, Any]:
    """Runs in the child: open the device through the device layer (the best usable one unless given),
    then ask every backend whether it runs there."""
    from advisor.harness.devices import DeviceUnavailable, npu_hardware_present, open_device, prepare_environment

    prepare_environment(device or ("npu" if npu_hardware_present() else "cpu"))  # before torch is imported
    reasons: dict[str, str] = {}
    opened = None
    for kind in [device] if device else ["npu", "cuda", "cpu"]:
        try:
            opened = open_device(kind)
            break
        except DeviceUnavailable as exc:
            reasons[kind] = str(exc)
    if opened is None:
        raise CapabilityError(f"device {device} is not usable here: {reasons.get(str(device))}")

    from advisor.harness.backends import all_backends

    backends: list[str] = []
    unavailable: dict[str, str] = {}
    for backend in all_backends():
        if opened.kind not in backend.devices:
            continue
        ok, reason = backend.available(opened.kind)
        if ok:
            backends.append(backend.name)
        else:
            unavailable[backend.name] = reason
    environment = {**opened.describe(), "platform": platform.platform()}
    return {"device_kind": opened.kind, "backends": backends, "unavailable": unavailable, "environment": environment}


def detect_capabilities(
    device: str | None = None, only_backends: list[str] | None = None, *, timeout_s: float = 180.0
) -> Capabilities:
    """Probe in a sandboxed child, then keep only `only_backends` when given. Raises CapabilityError."""
    from advisor.harness.sandbox import run_in_sandbox

    if device is not None and device not in DEVICE_KINDS:
        raise CapabilityError(f"unknown device '{device}'; choose one of {', '.join(DEVICE_KINDS)}")
    result = run_in_sandbox(
        "workers.capabilities:probe_capabilities",
        {"device": device},
        timeout_s=timeout_s,
        memory_limit_mb=None,
        stage="capabilities",
    )
    if result.status != "ok":
        detail = result.reason or result.stderr_tail or result.status
        raise CapabilityError(f"could not probe this node's device and backends ({result.status}): {detail}")
    probed = Capabilities(**result.value)
    return restrict(probed, only_backends)


def restrict(capabilities: Capabilities, only_backends: list[str] | None) -> Capabilities:
    """Keep the requested backends; a requested backend that is not usable here is an error that says why."""
    if only_backends:
        missing = [name for name in only_backends if name not in capabilities.backends]
        if missing:
            reasons = "; ".join(f"{n}: {capabilities.unavailable.get(n, 'not a known backend')}" for n in missing)
            raise CapabilityError(f"backend(s) not usable on {capabilities.device_kind} here - {reasons}")
        capabilities.backends = [name for name in capabilities.backends if name in only_backends]
    if not capabilities.backends:
        raise CapabilityError(f"no backend is usable on {capabilities.device_kind} here: {capabilities.unavailable}")
    return capabilities
