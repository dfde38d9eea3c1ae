"""The torch_npu/torchair TEST DOUBLE itself: it must stay faithful to the real API (torchair.md), because the
TorchAir backend is only ever checked against it in CI."""

from __future__ import annotations

import pytest

from advisor.harness.backends.torchair_options import (
    CALLABLE,
    COMPILER_CONFIG_OPTIONS,
    NPUGRAPH_EX_OPTIONS,
    IntRange,
)
from tests.doubles.run_with_double import run_with_double

PROBE = """
import time, torch, torch_npu, torchair
from torchair import CompilerConfig
from torchair.configs._option_base import NpuBaseConfig, OptionValue, IntRangeValue
from torch_npu._npugraph_ex import ALLOWED_OPTIONS

def walk(config, prefix=""):
    for key in config._fixed_attrs:
        item = getattr(config, key)
        if isinstance(item, NpuBaseConfig):
            yield from walk(item, prefix + key + ".")
        else:
            optional = item.optional if isinstance(item.optional, (list, tuple)) else None
            yield prefix + key, [optional, type(item).__name__]

def error(fn):
    try:
        fn()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None

config = CompilerConfig()
class Plain:
    def forward(self, x):
        return x
model = torch.nn.Linear(2, 2)
tensor = torch.randn(4, 2)
torchair.inference.set_dim_gears(tensor, {0: [2, 4]})
start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
start.record(); time.sleep(0.02); end.record(); torch.npu.synchronize()
result = {
    "tree": dict(walk(config)),
    "npugraph_ex_keys": sorted(ALLOWED_OPTIONS),
    "unknown": error(lambda: setattr(config.ge_config, "oo_levle", "O1")),
    "bad_value": error(lambda: setattr(config.ge_config, "oo_level", "O2")),
    "bad_range": error(lambda: setattr(config.debug.aclgraph, "static_capture_size_limit", 0)),
    "mode_value": error(lambda: setattr(config, "mode", "max-autotune")) or config.mode.value,
    "bool_stored": (setattr(config.experimental_config, "frozen_parameter", True),
                    config.experimental_config.frozen_parameter.value)[1],
    "cache_function": error(lambda: torchair.inference.cache_compile(lambda x: x)),
    "cache_non_module": error(lambda: torchair.inference.cache_compile(Plain().forward)),
    "cache_method_ok": error(lambda: torchair.inference.cache_compile(model.forward, cache_dir="unused")),
    "gears_twice": error(lambda: torchair.inference.set_dim_gears(tensor, {0: [2, 4]})),
    "gears_one": error(lambda: torchair.inference.set_dim_gears(torch.randn(4, 2), {0: [4]})),
    "gears_zero": error(lambda: torchair.inference.set_dim_gears(torch.randn(4, 2), {0: [0, 4]})),
    "gears_attr": tensor.dim_gears,
    "ex_invalid": error(lambda: torch.compile(model, backend="npugraph_ex", options={"no_such": 1})(tensor)),
    "elapsed_ms": start.elapsed_time(end),
    "untimed": error(lambda: torch.npu.Event().elapsed_time(end)),
    "npu_is_torch_npu": torch.npu is torch_npu.npu,
    "is_available": torch.npu.is_available(),
    "device_name": torch.npu.get_device_name(),
    "max_memory": (torch.npu.reset_peak_memory_stats(), torch.npu.max_memory_allocated())[1],
    "soc": torch_npu.npu.utils.get_soc_version(),
    "cann": torch_npu.npu.utils.get_cann_version(module="CANN"),
    "version": torch_npu.__version__,
    "marked": torch_npu.__advisor_test_double__,
    "all": torchair.__all__,
}
"""


@pytest.fixture(scope="module")
def probe() -> dict:
    return run_with_double(PROBE)


def test_option_tree_matches_the_advisors_table(probe: dict) -> None:
    """Two independent transcriptions of torchair.md §2 (the double and torchair_options) must agree."""
    assert sorted(probe["tree"]) == sorted(COMPILER_CONFIG_OPTIONS)
    for name, (optional, kind) in probe["tree"].items():
        spec = COMPILER_CONFIG_OPTIONS[name]
        if isinstance(spec, tuple):
            assert optional is not None and sorted(map(repr, optional)) == sorted(map(repr, spec)), name
        elif isinstance(spec, IntRange):
            assert kind == "IntRangeValue", name
        elif spec == CALLABLE:
            assert kind == "CallableValue", name
        else:
            assert optional is None, name


def test_npugraph_ex_keys_match(probe: dict) -> None:
    assert probe["npugraph_ex_keys"] == sorted(NPUGRAPH_EX_OPTIONS)
    assert "Invalid option 'no_such', allowed options: [" in probe["ex_invalid"]


def test_config_errors_read_like_torchairs(probe: dict) -> None:
    assert probe["unknown"].startswith("ValueError: _GEConfig has no option oo_levle, all options [")
    assert (
        probe["bad_value"].startswith("ValueError: Value 'O2'")
        and "not in optional list ['O3', 'O1']" in probe["bad_value"]
    )
    assert probe["bad_range"].startswith("ValueError: Please set value in [1, ")
    assert probe["mode_value"] == "max-autotune"
    assert probe["bool_stored"] == "1"


def test_cache_compile_needs_a_bound_module_method(probe: dict) -> None:
    assert probe["cache_function"].startswith("ValueError: Only method can be cached now, got")
    assert probe["cache_non_module"] == "ValueError: Only torch.nn.Module method can be cached now"
    assert probe["cache_method_ok"] is None


def test_set_dim_gears_rules(probe: dict) -> None:
    assert probe["gears_attr"] == {"0": [2, 4]}
    assert "only once" in probe["gears_twice"]
    assert "2 to 100 gears" in probe["gears_one"]
    assert "gear 0" in probe["gears_zero"]


def test_runtime_surface(probe: dict) -> None:
    assert 15 <= probe["elapsed_ms"] < 2000
    assert "enable_timing=True" in probe["untimed"]
    assert probe["npu_is_torch_npu"] and probe["is_available"]
    assert "test double" in probe["device_name"]
    assert probe["max_memory"] == 0
    assert isinstance(probe["soc"], int) and 220 <= probe["soc"] <= 225  # an Ascend910B id
    assert probe["cann"] and "testdouble" in probe["version"]
    assert probe["marked"] is True
    assert probe["all"][:4] == ["get_compiler", "get_npu_backend", "dynamo_export", "CompilerConfig"]


def test_doubles_are_not_importable_without_the_path() -> None:
    result = run_with_double(
        "import importlib.util\nresult = [importlib.util.find_spec(n) is None for n in ('torch_npu', 'torchair')]",
        doubles=False,
    )
    assert result == [True, True]
