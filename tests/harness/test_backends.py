"""The backend registry, each backend's availability here, compile-and-run parity with eager, and snippets."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from advisor.harness.backends import UnknownBackend, all_backends, get_backend, split_backend_spec
from advisor.harness.backends.base import Backend, CompileRequest, UnsupportedRequest, device_usable

INVENTED_FIELDS = [
    "optimization" + ".level",
    "memory" + ".",
    "cache" + ".enable_disk_cache",
    "cache" + ".cache_dir",
    "dynamic_shape" + ".",
]


class RecordingBackend(Backend):
    """Injected by path, like the harness's tests inject misbehaving backends."""

    name = "recording"
    family = "generic"
    devices = ("cpu",)
    modes = ("default",)

    def available(self, device: str) -> tuple[bool, str]:
        return device == "cpu", "" if device == "cpu" else "cpu only"

    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        return module

    def snippet(self, mode: str, options: dict[str, Any] | None = None, workload: str = "inference") -> str:
        return "output = model(*inputs)\n"


# ---------------------------------------------------------------- registry
def test_registry_lists_every_backend_with_its_family() -> None:
    families = {backend.name: backend.family for backend in all_backends()}
    assert families == {
        "eager": "baseline",
        "inductor": "generic",
        "torchair": "vendor",
        "onnxruntime": "export",
        "openvino": "vendor",
        "tensorrt": "vendor",
    }


def test_registry_loads_a_module_class_path() -> None:
    backend = get_backend(f"{__name__}:RecordingBackend")
    assert isinstance(backend, RecordingBackend) and backend.available("cpu") == (True, "")


def test_registry_resolves_name_mode_specs() -> None:
    assert split_backend_spec("torchair:npugraph_ex") == ("torchair", "npugraph_ex")
    assert split_backend_spec("tests.x:Cls") == ("tests.x:Cls", None)
    assert get_backend("torchair:npugraph_ex").name == "torchair"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("tvm", "known: eager, inductor, torchair"),
        ("no_such_module_xyz:Backend", "cannot load backend"),
        ("advisor.harness.backends.base:CompileRequest", "not a Backend subclass"),
    ],
)
def test_registry_rejects_what_is_not_a_backend(spec: str, message: str) -> None:
    with pytest.raises(UnknownBackend, match=message):
        get_backend(spec)


def test_listing_and_cpu_availability_do_not_import_torch() -> None:
    code = (
        "import sys, advisor.harness.backends as b\n"
        "[x.available('cpu') for x in b.all_backends()]\n"
        "print('torch' in sys.modules, 'onnxruntime' in sys.modules)"
    )
    repo_root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=repo_root).stdout
    assert out.split() == ["False", "False"]


# ---------------------------------------------------------------- availability here
def test_eager_and_inductor_are_available_on_cpu() -> None:
    assert get_backend("eager").available("cpu") == (True, "")
    assert get_backend("inductor").available("cpu") == (True, "")


def test_onnxruntime_availability_follows_its_packages() -> None:
    ok, reason = get_backend("onnxruntime").available("cpu")
    missing = [n for n in ("onnxruntime", "onnx", "onnxscript") if importlib.util.find_spec(n) is None]
    assert (ok, bool(missing)) == (not missing, bool(missing)), reason
    assert all(name in reason for name in missing)
    assert get_backend("onnxruntime").available("npu")[0] is False


def test_openvino_and_tensorrt_say_why_they_are_unavailable() -> None:
    ok, reason = get_backend("openvino").available("cpu")
    if importlib.util.find_spec("openvino") is None:
        assert not ok and "openvino package is not installed" in reason
    assert get_backend("openvino").available("cuda") == (
        False,
        "the OpenVINO backend is measured on cpu only, not on cuda",
    )
    ok, reason = get_backend("tensorrt").available("cpu")
    assert not ok and "NVIDIA" in reason
    ok, reason = get_backend("tensorrt").available("cuda")
    assert not ok and reason  # no torch_tensorrt, or no GPU, here


def test_unknown_device_is_a_reason_not_an_error() -> None:
    assert device_usable("tpu") == (False, "unknown device 'tpu' (cpu, cuda or npu)")


# ---------------------------------------------------------------- compile and run
def _mlp():
    from tests.support.models import mlp

    return mlp()


def test_eager_runs_inference_without_grad_and_training_with_it() -> None:
    model, inputs = _mlp()
    infer = get_backend("eager").compile(model, inputs, CompileRequest(mode="default", device="cpu"))
    train = get_backend("eager").compile(
        model, inputs, CompileRequest(mode="default", device="cpu", workload="training")
    )
    assert not infer(*inputs).requires_grad and train(*inputs).requires_grad


def test_modes_outside_the_device_are_refused() -> None:
    model, inputs = _mlp()
    inductor = get_backend("inductor")
    assert "reduce-overhead" not in inductor.modes_for("cpu") and "reduce-overhead" in inductor.modes_for("cuda")
    with pytest.raises(UnsupportedRequest, match="does not run on cpu"):
        inductor.compile(model, inputs, CompileRequest(mode="reduce-overhead", device="cpu"))
    with pytest.raises(UnsupportedRequest, match="either a mode or Inductor options"):
        inductor.compile(model, inputs, CompileRequest(mode="max-autotune", device="cpu", options={"freezing": True}))


def test_onnxruntime_matches_eager_and_serves_other_batch_sizes(tmp_path) -> None:
    import torch

    model, inputs = _mlp()
    request = CompileRequest(mode="default", device="cpu", cache_dir=str(tmp_path), dynamic=True)
    run = get_backend("onnxruntime").compile(model, inputs, request)
    bigger = (torch.randn(9, 64),)
    with torch.no_grad():
        for args in (inputs, bigger):
            torch.testing.assert_close(run(*args), model(*args), rtol=1e-4, atol=1e-5)
    assert (tmp_path / "model.onnx").exists()
    cold = run.compile_breakdown
    assert cold["cached"] is False and cold["export_s"] > cold["session_s"] > 0
    # the same model again (a warm-cache run): the session comes from the saved file, no export
    again = get_backend("onnxruntime").compile(model, inputs, request)
    assert again.compile_breakdown["cached"] is True and again.compile_breakdown["export_s"] == 0.0
    with torch.no_grad():
        torch.testing.assert_close(again(*inputs), model(*inputs), rtol=1e-4, atol=1e-5)
    with pytest.raises(UnsupportedRequest, match="inference only"):
        get_backend("onnxruntime").compile(
            model, inputs, CompileRequest(mode="default", device="cpu", workload="training")
        )


@pytest.mark.slow
def test_inductor_matches_eager_and_uses_the_requests_cache_dir(tmp_path, monkeypatch) -> None:
    import torch

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "unused"))  # restored after the test
    torch._dynamo.reset()
    # one Linear: Inductor calls the extern addmm and writes only its Python wrapper, so this test of where the
    # cache goes does not pay a cold g++ build of a kernel and its headers (~15 s; every measured Inductor row does)
    model, inputs = torch.nn.Linear(16, 8).eval(), (torch.randn(4, 16),)
    request = CompileRequest(mode="default", device="cpu", cache_dir=str(tmp_path / "variant"))
    assert get_backend("inductor").environment(request) == {"TORCHINDUCTOR_CACHE_DIR": request.cache_dir}
    run = get_backend("inductor").compile(model, inputs, request)
    with torch.no_grad():
        torch.testing.assert_close(run(*inputs), model(*inputs), rtol=1e-4, atol=1e-5)
    assert any((tmp_path / "variant").rglob("*.py")), "Inductor wrote nothing into the request's cache dir"


# ---------------------------------------------------------------- snippets
@pytest.mark.parametrize(
    "name, mode, options",
    [
        ("eager", "default", None),
        ("inductor", "default", None),
        ("inductor", "max-autotune", None),
        ("inductor", "default", {"freezing": True}),
        ("torchair", "max-autotune", {"ge_config.oo_level": "O1"}),
        ("torchair", "npugraph_ex", {"clone_input": False}),
        ("onnxruntime", "default", None),
        ("openvino", "default", None),
        ("tensorrt", "default", None),
    ],
)
def test_snippets_are_python_with_only_real_api_names(name: str, mode: str, options: dict | None) -> None:
    snippet = get_backend(name).snippet(mode, options)
    compile(snippet, f"<{name} snippet>", "exec")
    assert not any(field in snippet for field in INVENTED_FIELDS)


def test_inductor_snippet_names_mode_and_cache_dir() -> None:
    snippet = get_backend("inductor").snippet("max-autotune")
    assert 'torch.compile(model, mode="max-autotune")' in snippet and "TORCHINDUCTOR_CACHE_DIR" in snippet
    assert "torch.no_grad()" in snippet
    assert "torch.no_grad()" not in get_backend("inductor").snippet("default", workload="training")


def test_export_and_vendor_snippets_show_the_real_calls() -> None:
    ort = get_backend("onnxruntime").snippet("default")
    assert "torch.onnx.export(model, tuple(inputs), dynamo=True)" in ort
    assert 'add_session_config_entry("session.intra_op.allow_spinning", "0")' in ort and "atc --model=" in ort
    openvino = get_backend("openvino").snippet("default")
    assert "import openvino.torch" in openvino and "'INFERENCE_PRECISION_HINT': 'f32'" in openvino
    assert 'backend="tensorrt"' in get_backend("tensorrt").snippet("default")
