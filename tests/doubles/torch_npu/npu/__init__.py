"""TEST DOUBLE — not torch_npu.npu. Runtime calls with the real signatures; the "device" is the CPU."""

import os
import time

from torch_npu.npu import utils

__all__ = [
    "Event",
    "current_device",
    "device_count",
    "get_device_name",
    "is_available",
    "max_memory_allocated",
    "memory_allocated",
    "reset_peak_memory_stats",
    "set_device",
    "synchronize",
    "utils",
]

DEVICE_NAME = "Ascend910B2 (test double)"


def is_available() -> bool:
    return os.environ.get("ADVISOR_TEST_DOUBLE_NPU", "1") != "0"


def device_count() -> int:
    return 1 if is_available() else 0


def current_device() -> int:
    return 0


def set_device(device) -> None:
    if str(device) not in ("0", "npu", "npu:0"):
        raise RuntimeError(f"test double has one NPU (0), got {device!r}")


def get_device_name(device_name=None) -> str:
    return DEVICE_NAME


def synchronize(device=None) -> None:
    """CPU work is already finished when a call returns."""


def max_memory_allocated(device=None) -> int:
    """No device memory exists here: always 0 bytes."""
    return 0


def memory_allocated(device=None) -> int:
    return 0


def reset_peak_memory_stats(device=None) -> None:
    pass


class Event:
    """Like torch.npu.Event: record() marks a time, elapsed_time() gives milliseconds between two events."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.enable_timing = enable_timing
        self._time = None

    def record(self, stream=None) -> None:
        self._time = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end_event: "Event") -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._time is None or end_event._time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._time - self._time) * 1000.0
