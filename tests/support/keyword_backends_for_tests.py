"""TEST-ONLY backend for the keyword-input tests (tests/harness/test_hf_models.py). Never use it outside the test suite.

Passed to `measure_model` as "tests.support.keyword_backends_for_tests:MaskOnesBackend". Kept apart from the test module
so the measurement child that imports it does not import transformers (the child must rebuild the model's output types
from the archive alone). Nothing here imports torch at module level.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from advisor.harness.backends.base import Backend, CompileRequest


class MaskOnesBackend(Backend):
    """Runs the real model with its last input (a BERT export's `attention_mask=` keyword) replaced by ones: the
    output differs from eager's exactly when eager really received the mask with its zeros."""

    name = "test-mask-ones"
    family = "generic"
    devices = ("cpu",)
    modes = ("default",)

    def available(self, device: str) -> tuple[bool, str]:
        return True, ""

    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        import torch

        def without_mask(*inputs: Any) -> Any:
            with torch.no_grad():
                return module(*inputs[:-1], torch.ones_like(inputs[-1]))

        return without_mask

    def snippet(self, mode: str, options: dict[str, Any] | None = None, workload: str = "inference") -> str:
        return f"# {self.name}: a test-only backend, nothing to paste\n"
