"""Options the upload names that cannot run on its target device: refused at submission, not queued forever.

A job is measured by a worker of its context's target device (`device_kind` = `target`), and such a worker offers
only the backends usable there (workers.capabilities). An option that runs on other devices only - `onnxruntime:int8`
is a CPU option (catalogue `mode_devices`), TorchAir an NPU one - would wait for a worker that can never offer it,
while the analysis showed an unmeasured answer for another option. The intake (app.intake) calls
`off_target` after the names themselves were checked (unknown names are refused there) and answers its problems as
a 422.
"""

from __future__ import annotations

from collections.abc import Sequence

from advisor.core import catalogue


def option_devices(spec: str) -> tuple[str, ...]:
    """The devices the option `spec` (`backend` or `backend:mode`) runs on, in the catalogue's order; () for a
    backend or mode the catalogue does not know."""
    backend, _, mode = spec.partition(":")
    info = catalogue.get(backend)
    if info is None or (mode and mode not in info.modes):
        return ()
    if not mode:
        return info.devices
    return tuple(device for device in info.devices if device in info.mode_devices.get(mode, info.devices))


def options_on(target: str) -> list[str]:
    """Every name the `backends` field accepts that runs on `target` (what to name instead)."""
    names = [info.name for info in catalogue.BACKENDS.values() if target in info.devices]
    int8 = [f"{name}:{mode}" for name in names for mode in catalogue.BACKENDS[name].quantized_modes]
    return [*names, *(spec for spec in int8 if target in option_devices(spec))]


def off_target(backends: Sequence[str], target: str) -> list[dict[str, str]]:
    """One {field: "backends", message} per named option that cannot run on `target`, naming the option, the devices
    it runs on and what to do instead; [] when every one can (or none is named)."""
    problems = []
    for spec in backends:
        devices = option_devices(spec)
        if not devices or target in devices:
            continue
        runs_on = " and ".join(devices)
        problems.append(
            {
                "field": "backends",
                "message": f"{spec} runs on {runs_on} only, not on this analysis' target {target}: no {target} "
                f"worker can measure it. Set the target to {' or '.join(devices)} (--target {devices[0]}, context "
                f"field target) to measure it, or name options that run on {target}: {', '.join(options_on(target))}",
            }
        )
    return problems
