"""TEST-ONLY misbehaving backends and sandbox targets. Never use these outside the test suite.

The backends are passed to `measure_model` as "tests.support.backends_for_tests:ClassName" paths; the
sandbox targets to `run_in_sandbox` as "tests.support.backends_for_tests:function". Each one misbehaves
in exactly one way so a test can check that the harness turns it into the right status.
Nothing here imports torch at module level: the sandbox tests stay torch-free and fast.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from advisor.harness.backends.base import Backend, CompileRequest
from advisor.harness.sandbox import StageError, report_progress


class _TestBackend(Backend):
    family = "generic"
    devices = ("cpu", "cuda", "npu")
    modes = ("default",)

    def available(self, device: str) -> tuple[bool, str]:
        return True, ""

    def snippet(self, mode: str, options: dict[str, Any] | None = None, workload: str = "inference") -> str:
        return f"# {self.name}: a test-only backend, nothing to paste\n"


class AbortingBackend(_TestBackend):
    """The compiled callable kills its own process with SIGABRT (like a segfaulting vendor runtime)."""

    name = "test-abort"

    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        return lambda *args: os.abort()


class HangingBackend(_TestBackend):
    """The compiled callable never returns (like a deadlocked compiler)."""

    name = "test-hang"

    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        def hang(*args: Any) -> Any:
            while True:
                time.sleep(1)

        return hang


class MemoryHogBackend(_TestBackend):
    """The compiled callable allocates 1 GiB blocks until the address-space limit stops it."""

    name = "test-oom"

    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        import torch

        def hog(*args: Any) -> Any:
            blocks = [torch.empty(1 << 30, dtype=torch.uint8) for _ in range(256)]  # untouched: no real RSS
            return blocks[0]

        return hog


class WrongNumbersBackend(_TestBackend):
    """Runs the real model and then adds 1.0 to every floating-point output (a silent miscompile)."""

    name = "test-wrong"

    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        import torch
        from torch.utils._pytree import tree_map

        def wrong(*args: Any) -> Any:
            with torch.no_grad():
                out = module(*args)
            return tree_map(lambda t: t + 1.0 if isinstance(t, torch.Tensor) and t.is_floating_point() else t, out)

        return wrong


class SlowToCompileWrongNumbersBackend(WrongNumbersBackend):
    """WrongNumbersBackend whose compile takes 1.5 s: a test that starts load when this row starts can be sure the
    load runs before the row is timed (the parent reads progress from a pipe as it comes; the busy loops it starts
    spin within a few hundred milliseconds even on a loaded node)."""

    name = "test-slow-wrong"

    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        import time

        time.sleep(1.5)
        return super().compile(module, example_inputs, request)


class MissingPackageBackend(_TestBackend):
    """Needs a vendor package that is not installed anywhere."""

    name = "test-missing"
    package = "advisor_test_missing_vendor_sdk"

    def available(self, device: str) -> tuple[bool, str]:
        if importlib.util.find_spec(self.package) is None:
            return False, f"the Python package '{self.package}' is not installed"
        return True, ""

    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        raise AssertionError("never called: the backend is unavailable")


class FailingCompileBackend(_TestBackend):
    """Compilation raises (like a lowering error in a vendor compiler)."""

    name = "test-compile-error"

    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        raise RuntimeError("test backend: no lowering for aten.linear.default")


class FailingAtRuntimeBackend(_TestBackend):
    """Compiles and runs fine a few times, then raises during the timed calls."""

    name = "test-runtime-error"

    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        calls = {"n": 0}

        def flaky(*args: Any) -> Any:
            calls["n"] += 1
            if calls["n"] > 3:
                raise RuntimeError("test backend: device lost after 3 calls")
            return module(*args)

        return flaky


class DynamoEagerBackend(_TestBackend):
    """torch.compile with Dynamo's "eager" backend: real graph capture and recompiles, no code generation (fast)."""

    name = "test-dynamo-eager"

    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        import torch

        return torch.compile(module, backend="eager")


class SlowerBy20msBackend(_TestBackend):
    """Right numbers, 20 ms later: an option clearly slower than eager on a small model, whatever the load on the
    node (a fixed multiple of eager's time is not: under load eager's own spread can cover it)."""

    name = "test-slower-by-20ms"

    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        def call(*args: Any) -> Any:
            time.sleep(0.02)
            return module(*args)

        return call


# ------------------------------------------------------------------ sandbox targets (torch-free)
def echo(value: Any) -> Any:
    return {"echo": value, "pid": os.getpid()}


def abort_now() -> None:
    os.abort()


def sleep_for(seconds: float) -> str:
    time.sleep(seconds)
    return "woke up"


def allocate_until_limit(block_mb: int = 64, max_blocks: int = 4096) -> int:
    blocks = []
    for _ in range(max_blocks):
        blocks.append(bytearray(block_mb << 20))
    return len(blocks)


def read_environment(names: list[str]) -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in names}


def raise_stage_error(status: str, reason: str) -> None:
    raise StageError(status, reason)  # type: ignore[arg-type]


def raise_value_error(message: str) -> None:
    raise ValueError(message)


def exit_with(code: int) -> None:
    sys.stdout.flush()
    os._exit(code)


def report_then_sleep(events: int, seconds: float) -> int:
    for i in range(events):
        report_progress({"stage": "timing", "iterations": i + 1})
    time.sleep(seconds)
    return events


def spawn_grandchild_and_hang(pid_file: str, tag: str = "") -> None:
    """Start a long-lived grandchild (like an Inductor compile worker), record its pid, then hang.
    `tag` lands on the grandchild's command line, so the host can find it whatever PID namespace it is in."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", tag])
    with open(pid_file, "w") as fh:
        fh.write(str(proc.pid))
    time.sleep(600)


def autoload_after_prepare(kind: str) -> dict:
    """What `prepare_environment` decides in a fresh interpreter (before torch is imported)."""
    from advisor.harness.devices import AUTOLOAD_ENV, prepare_environment

    prepare_environment(kind)
    return {"autoload": os.environ.get(AUTOLOAD_ENV), "torch_imported": "torch" in sys.modules}


# ------------------------------------------------------------------ training
class DroppedGradientBackend(_TestBackend):
    """Runs the real model but with its last parameter detached, so that parameter never gets a gradient
    (like a compiler that loses a backward edge). Forward outputs are exactly eager's."""

    name = "test-dropped-grad"

    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        import torch

        name, parameter = list(module.named_parameters())[-1]

        def forward_without_one_gradient(*args: Any) -> Any:
            return torch.func.functional_call(module, {name: parameter.detach()}, args)

        return forward_without_one_gradient


class NegatedOutputsBackend(_TestBackend):
    """Runs the real model and negates every floating-point output: a generation's greedy tokens become the
    least likely ones (a miscompile that adding a constant, as WrongNumbersBackend does, would not show)."""

    name = "test-negated"

    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        import torch
        from torch.utils._pytree import tree_map

        def negated(*args: Any, **kwargs: Any) -> Any:
            with torch.no_grad():
                out = module(*args, **kwargs)
            return tree_map(lambda t: -t if isinstance(t, torch.Tensor) and t.is_floating_point() else t, out)

        return negated
