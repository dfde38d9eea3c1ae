"""An export backend's saved file (ONNX Runtime's model.onnx, openvino:int8's IR), reused by the variant's later
children (the warm compile) only while a fingerprint beside it says it was made from the same model and inputs.

The cache directory belongs to one measurement of one model; the fingerprint guards against a stale file.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def fingerprint(module: Any, example_inputs: Sequence[Any], facts: dict[str, Any]) -> str:
    """What a saved file is made from: `facts` (package versions, the request's fields that change the file) and
    the inputs' and the weights' names, shapes and dtypes."""
    import torch

    def describe(value: Any) -> Any:
        return [list(value.shape), str(value.dtype)] if isinstance(value, torch.Tensor) else type(value).__name__

    state = module.state_dict() if isinstance(module, torch.nn.Module) else {}
    data = {
        **facts,
        "torch": torch.__version__,
        "inputs": [describe(v) for v in example_inputs],
        "state": [[name, describe(value)] for name, value in state.items()],
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class SavedExport:
    """`model_file` in `directory`, with its fingerprint in `fingerprint_file` beside it."""

    directory: str
    model_file: str
    fingerprint_file: str

    def matches(self, expected: str) -> bool:
        """True when the directory holds the file, saved (by an earlier run) from what `expected` describes."""
        try:
            with open(os.path.join(self.directory, self.fingerprint_file), encoding="utf-8") as handle:
                recorded = handle.read().strip()
        except OSError:
            return False
        return recorded == expected and os.path.isfile(os.path.join(self.directory, self.model_file))

    def record(self, saved_from: str) -> None:
        """Write the fingerprint of the file just saved."""
        with open(os.path.join(self.directory, self.fingerprint_file), "w", encoding="utf-8") as handle:
            handle.write(saved_from)
