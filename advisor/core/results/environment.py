"""Where a run was measured (advisor.core.schema.Environment, from advisor.harness.devices)."""

from __future__ import annotations

from advisor.core.results._base import DeviceLabel, Int, Label, Name, Open


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
