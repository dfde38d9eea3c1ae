"""What one measurement child measures with, once its backend is opened and its model loaded.

One bundle for every workload: the inference and training steps (advisor.harness.measurement.child) and the
generation phases (advisor.harness.measurement.generation) read the same fields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from advisor.harness import devices
from advisor.harness.measurement.timing import TimingPolicy


@dataclass
class Variant:
    """One (backend, mode) in one child: what it compiles with, where, how it is timed and how it reports."""

    backend: Any
    request: Any
    dev: devices.Device
    loaded: Any
    timing: TimingPolicy
    is_baseline: bool
    warm_run: bool
    progress: Callable[..., None]
    inputs: tuple = ()
    module: Any = None
    steps: Any = None  # the training steps (advisor.harness.measurement.training), None for inference
    compiled: Any = None
