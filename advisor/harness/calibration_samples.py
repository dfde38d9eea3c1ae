"""The calibration samples of the int8 options, read in the measuring child from the user's `.npz`.

The file was checked from its headers (advisor.core.calibration) before the analysis; here it is checked again
against the child's own example inputs, then loaded with `numpy.load(allow_pickle=False)`: no pickle is ever read.
Without a file, the example inputs are the one calibration sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from advisor.core.calibration import CalibrationRefused, check_against_inputs, check_file


def calibration_samples(path: str | None, example_inputs: Sequence[Any]) -> tuple[list[tuple[Any, ...]], str]:
    """The calibration calls (each a tuple of tensors like `example_inputs`) and where they come from, for the row's
    `compile_breakdown["calibration"]`. CalibrationRefused when the file does not fit the example inputs."""
    if path is None:
        return [tuple(example_inputs)], "the example inputs (1 sample)"
    import numpy
    import torch

    info = check_file(path)
    described = [
        {"name": f"input{i}", "shape": list(t.shape), "dtype": str(t.dtype)}
        if isinstance(t, torch.Tensor)
        else {"name": f"input{i}", "shape": [], "dtype": type(t).__name__}
        for i, t in enumerate(example_inputs)
    ]
    check_against_inputs(info, described)
    try:
        with numpy.load(path, allow_pickle=False) as archive:
            arrays = [numpy.ascontiguousarray(archive[a.name]) for a in info.arrays]
    except (ValueError, OSError, EOFError) as exc:
        raise CalibrationRefused(f"calibration file could not be read: {exc}") from None
    device = next((t.device for t in example_inputs if isinstance(t, torch.Tensor)), torch.device("cpu"))
    samples = [
        tuple(torch.from_numpy(array[index].copy()).to(device) for array in arrays) for index in range(info.samples)
    ]
    return samples, f"the calibration file ({info.describe()})"
