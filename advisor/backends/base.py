"""What every backend looks like to the measurement harness.

A backend turns a loaded module into a callable the harness can time, and can print the
exact code a user pastes to get the same thing. Backends import their packages lazily so
listing them never imports torch or a vendor SDK.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Family = Literal["baseline", "generic", "vendor", "export"]


@dataclass
class CompileRequest:
    """Everything a backend needs to compile one (mode, device, workload) variant."""

    mode: str
    device: str  # "cpu" | "cuda" | "npu"
    workload: str = "inference"  # "inference" | "training"
    options: dict[str, Any] = field(default_factory=dict)
    cache_dir: str | None = None  # this variant's own compile-cache directory
    dynamic: bool = False


class Backend(ABC):
    name: str
    family: Family
    devices: tuple[str, ...]
    modes: tuple[str, ...]

    @abstractmethod
    def available(self, device: str) -> tuple[bool, str]:
        """(True, "") when this backend can run on `device` here, else (False, the reason)."""

    @abstractmethod
    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        """Return a callable taking the example inputs. Compilation may be lazy (first call)."""

    @abstractmethod
    def snippet(self, mode: str, options: dict[str, Any] | None = None, workload: str = "inference") -> str:
        """The code a user pastes to get this variant; only real API names."""

    def modes_for(self, device: str) -> tuple[str, ...]:
        return self.modes
