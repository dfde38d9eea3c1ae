"""The TorchAir backend end to end against the torch_npu/torchair TEST DOUBLE (tests/doubles), in subprocesses.

Real-NPU verification is a separate run on an NPU node; here the double checks that the backend uses the real
API names, options and call rules, and that what it compiles gives eager's numbers.
"""

from __future__ import annotations

import importlib.util
import re

import pytest

from advisor.harness.backends import get_backend
from advisor.harness.backends.base import CompileRequest
from advisor.harness.backends.torchair_options import COMPILER_CONFIG_OPTIONS, validate_options
from tests.doubles.run_with_double import run_with_double

# Blog-post fields that do not exist in TorchAir, spelled so that no line here reads like a use of them.
INVENTED_FIELDS = [
    "optimization" + ".level",
    "memory" + ".optimization_level",
    "memory" + ".enable_shared_pool",
    "cache" + ".enable_disk_cache",
    "cache" + ".cache_dir",
    "dynamic_shape" + ".enable",
    "dynamic_shape" + ".dims_range",
]

SCENARIOS = """
import torch, tempfile
import torchair
from tests.support.models import mlp
from advisor.harness.backends import get_backend
from advisor.harness.backends.base import CompileRequest
from advisor.harness.backends.torchair import build_compiler_config

backend = get_backend("torchair")
result = {"available": list(backend.available("npu"))}
model, (x,) = mlp()

def run(name, request, calls):
    torch._dynamo.reset()
    before = len(torchair.backend_calls())
    example = calls[0]
    try:
        fn = backend.compile(model, example, request)
        errs = []
        for inputs in calls:
            with torch.no_grad():
                errs.append(float((fn(*inputs) - model(*inputs)).abs().max()))
        result[name] = {"max_err": max(errs), "calls": torchair.backend_calls()[before:]}
    except Exception as exc:
        result[name] = {"error": f"{type(exc).__name__}: {exc}"}

ge = CompileRequest(mode="max-autotune", device="npu",
                    options={"ge_config.oo_level": "O1", "experimental_config.frozen_parameter": True})
run("ge", ge, [(x,)])
run("npugraph_ex", CompileRequest(mode="npugraph_ex", device="npu", options={"frozen_parameter": True}), [(x,)])
run("ge_misspelt", CompileRequest(mode="max-autotune", device="npu", options={"ge_config.oo_levle": "O1"}), [(x,)])
run("ge_bad_value", CompileRequest(mode="max-autotune", device="npu", options={"ge_config.oo_level": "O2"}), [(x,)])
run("ex_misspelt", CompileRequest(mode="npugraph_ex", device="npu", options={"frozen_parameters": True}), [(x,)])
x4 = torch.randn(4, 64)
gears = CompileRequest(mode="max-autotune", device="npu", dim_gears={"0": {"0": [4, 8]}})
run("gears", gears, [(x4,), (torch.randn(8, 64),)])
result["gear_calls"] = torchair.dim_gear_calls()
run("gears_in_npugraph_ex", CompileRequest(mode="npugraph_ex", device="npu", dim_gears={0: {0: [4, 8]}}), [(x,)])
try:
    build_compiler_config({"ge_config.oo_levle": "O1"})
except ValueError as exc:
    result["real_config_error"] = str(exc)

torch._dynamo.reset()
snippet = backend.snippet("max-autotune", {"ge_config.oo_level": "O1"})
pasted_model, _ = mlp()
namespace = {"model": pasted_model, "inputs": (x,)}
exec(snippet, namespace)
result["snippet_err"] = float((namespace["output"] - model(x)).abs().max())

result["eager_npu"] = list(get_backend("eager").available("npu"))
result["inductor_npu"] = list(get_backend("inductor").available("npu"))
torch._dynamo.reset()
before = len(torchair.backend_calls())
train = backend.compile(model, (x,), CompileRequest(mode="max-autotune", device="npu", workload="training"))
train(x).sum().backward()
result["training"] = {"grad_enabled": torchair.backend_calls()[before]["grad_enabled"],
                      "weight_has_grad": model.net[0].weight.grad is not None}
"""


@pytest.fixture(scope="module")
def scenarios() -> dict:
    return run_with_double(SCENARIOS)


def test_available_with_the_double(scenarios: dict) -> None:
    assert scenarios["available"] == [True, ""]


def test_ge_mode_matches_eager_and_passes_options_to_compiler_config(scenarios: dict) -> None:
    ge = scenarios["ge"]
    assert ge.get("max_err", 1.0) < 1e-5, ge
    (call,) = ge["calls"]
    assert call["backend"] == "torchair" and call["mode"] == "max-autotune"
    assert call["options"]["ge_config.oo_level"] == "O1"
    assert call["options"]["experimental_config.frozen_parameter"] == "1"  # torchair stores bools as "1"/"0"
    assert call["grad_enabled"] is False  # inference compiles under no_grad


def test_npugraph_ex_mode_matches_eager_and_passes_options(scenarios: dict) -> None:
    ex = scenarios["npugraph_ex"]
    assert ex.get("max_err", 1.0) < 1e-5, ex
    (call,) = ex["calls"]
    assert call["backend"] == "npugraph_ex" and call["options"] == {"frozen_parameter": True}


def test_misspelt_options_fail_with_the_valid_names(scenarios: dict) -> None:
    assert scenarios["ge_misspelt"]["error"].startswith("ValueError")
    assert "ge_config.oo_level" in scenarios["ge_misspelt"]["error"]
    assert "'O2'" in scenarios["ge_bad_value"]["error"] and "O1" in scenarios["ge_bad_value"]["error"]
    assert "frozen_parameter," in scenarios["ex_misspelt"]["error"]
    # Past our own check, the (double of the) real CompilerConfig rejects it the way torchair does.
    assert re.match(r"_GEConfig has no option oo_levle, all options \[.*'oo_level'", scenarios["real_config_error"])


def test_dim_gears_compile_one_dynamic_graph_that_serves_every_gear(scenarios: dict) -> None:
    gears = scenarios["gears"]
    assert gears.get("max_err", 1.0) < 1e-5, gears
    (call,) = gears["calls"]  # batch 4 and 8: one graph, no recompile
    assert any(shape[-1] == "64" and not shape[0].isdigit() for shape in call["input_shapes"]), call  # symbolic batch
    assert scenarios["gear_calls"] == [{"shape": [4, 64], "dim_gears": {"0": [4, 8]}}]
    assert "max-autotune" in scenarios["gears_in_npugraph_ex"]["error"]


def test_training_workload_compiles_with_grad(scenarios: dict) -> None:
    assert scenarios["training"] == {"grad_enabled": True, "weight_has_grad": True}


def test_other_backends_see_the_npu_of_the_double(scenarios: dict) -> None:
    assert scenarios["eager_npu"] == [True, ""]
    if importlib.util.find_spec("triton") is None:
        assert scenarios["inductor_npu"] == [False, "Inductor on NPU needs the triton-ascend package (not installed)"]


def test_ge_snippet_runs_as_pasted(scenarios: dict) -> None:
    assert scenarios["snippet_err"] < 1e-5


CACHE_RUN = """
import torch, torchair
from tests.support.models import mlp
from advisor.harness.backends import get_backend
from advisor.harness.backends.base import CompileRequest
model, (x,) = mlp()
fn = get_backend("torchair").compile(model, (x,), CompileRequest(mode="max-autotune", device="npu", cache_dir=CACHE))
result = {"err": float((fn(x) - model(x)).abs().max()), "events": [e["event"] for e in torchair.cache_events()],
          "forward_untouched": "forward" not in vars(model)}
"""


def test_cache_compile_writes_then_reuses_the_cache_dir(tmp_path) -> None:
    code = f"CACHE = {str(tmp_path / 'torchair-cache')!r}\n" + CACHE_RUN
    cold = run_with_double(code)
    warm = run_with_double(code)
    assert cold["err"] < 1e-5 and warm["err"] < 1e-5
    assert cold["events"] == ["miss"] and warm["events"] == ["hit"]
    assert cold["forward_untouched"]  # the harness's eager runs of the same module stay eager
    assert list((tmp_path / "torchair-cache").rglob("*.json"))


def test_no_usable_npu_is_reported_cleanly() -> None:
    result = run_with_double(
        "from advisor.harness.backends import get_backend\nresult = get_backend('torchair').available('npu')",
        env={"ADVISOR_TEST_DOUBLE_NPU": "0"},
    )
    assert result[0] is False and result[1].startswith("no usable NPU")


def test_unavailable_without_torch_npu() -> None:
    if importlib.util.find_spec("torch_npu") is not None:
        pytest.skip("needs a host without torch_npu; this one has it installed")
    ok, reason = get_backend("torchair").available("npu")
    assert not ok and "torch_npu is not installed" in reason
    ok, reason = get_backend("torchair").available("cpu")
    assert not ok and "only on Ascend NPUs" in reason


# ---------------------------------------------------------------- snippets and options (torch-free)
SNIPPET_REQUESTS = [
    CompileRequest(mode="max-autotune", device="npu"),
    CompileRequest(
        mode="max-autotune",
        device="npu",
        options={
            "ge_config.oo_level": "O1",
            "experimental_config.frozen_parameter": True,
            "inference_config.dynamic_gears_merge_policy": "product",
        },
    ),
    CompileRequest(mode="max-autotune", device="npu", cache_dir="/srv/cache", dim_gears={0: {0: [1, 8, 16]}}),
    CompileRequest(mode="npugraph_ex", device="npu", options={"frozen_parameter": True, "capture_limit": 32}),
]


@pytest.mark.parametrize("request_", SNIPPET_REQUESTS, ids=lambda r: r.mode + ("+opts" if r.options else ""))
def test_snippets_use_only_real_api_names(request_: CompileRequest) -> None:
    snippet = get_backend("torchair").snippet_for(request_)
    compile(snippet, "<snippet>", "exec")  # valid Python
    for name in re.findall(r"^config\.([\w.]+) = ", snippet, flags=re.M):
        assert name in COMPILER_CONFIG_OPTIONS, name
    assert not any(field in snippet for field in INVENTED_FIELDS)
    assert "import torch_npu" in snippet
    if request_.mode == "max-autotune":
        assert snippet.index("import torch_npu") < snippet.index("import torchair")
        assert 'config.mode = "max-autotune"' in snippet
    else:
        assert 'backend="npugraph_ex"' in snippet and "'capture_limit': 32" in snippet


def test_snippet_for_cache_and_gears_uses_cache_compile_and_set_dim_gears() -> None:
    snippet = get_backend("torchair").snippet_for(SNIPPET_REQUESTS[2])
    assert "model.forward = torchair.inference.cache_compile(model.forward, config=config" in snippet
    # the measurement's own (temporary) cache dir never leaks into the snippet: a placeholder the user owns
    assert "cache_dir='./torchair_cache'" in snippet and "/srv/cache" not in snippet and "dynamic=True" in snippet
    assert "torchair.inference.set_dim_gears(inputs[0], dim_gears={0: [1, 8, 16]})" in snippet


@pytest.mark.parametrize("field", INVENTED_FIELDS)
def test_invented_blog_fields_are_rejected(field: str) -> None:
    with pytest.raises(ValueError, match="valid options: .*ge_config.oo_level"):
        validate_options("max-autotune", {field: 1})


def test_option_values_are_checked_against_the_real_lists() -> None:
    validate_options(
        "max-autotune",
        {
            "ge_config.oo_level": "O1",
            "debug.aclgraph.static_capture_size_limit": 8,
            "experimental_config.aclgraph._super_kernel_optimize": True,
        },
    )
    for bad in (
        {"ge_config.oo_level": "O2"},
        {"debug.aclgraph.static_capture_size_limit": 0},
        {"experimental_config.frozen_parameter": "yes"},
        {"mode": "npugraph_ex"},
    ):
        with pytest.raises(ValueError):
            validate_options("max-autotune", bad)
    with pytest.raises(ValueError, match="unknown TorchAir mode"):
        validate_options("reduce-overhead", {})
