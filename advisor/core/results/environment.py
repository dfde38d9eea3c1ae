"""Where a run was measured (from advisor.harness.devices)."""

from __future__ import annotations

from typing import Any, Literal

from advisor.core.results._base import Count, DeviceLabel, Int, Label, Name, Open

DeviceKind = Literal["cpu", "cuda", "npu"]  # the devices advisor.harness.devices opens


class Environment(Open):
    device: DeviceLabel | None = None  # cpu | cuda | npu
    device_name: Name | None = None
    soc_version: Int | None = None
    cann_version: Label | None = None
    driver_version: Label | None = None
    torch_version: Label | None = None
    torch_npu_version: Label | None = None
    python_version: Label | None = None
    host: Name | None = None
    measured_on: Label | None = None  # "npu" only when the numbers came from an Ascend NPU; "test-double" in CI
    torch_threads: Count | None = None  # torch.get_num_threads() in the measuring child
    cpu_model: Name | None = None  # /proc/cpuinfo's "model name"
    load: dict[str, Any] | None = None  # {"before", "during", "after"}: {"load", "cores"} (advisor.core.noise)
