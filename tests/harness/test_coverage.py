"""Per-op coverage: the Inductor classifier on real registries, the TorchAir table, the live-registry reader and
the table generator (on converter sources written by the test; nothing is downloaded)."""

from __future__ import annotations

import importlib.util
import inspect
import json
import operator
import subprocess
import sys
import textwrap
import types
import zipfile
from pathlib import Path

import pytest
import torch

from advisor.harness import coverage
from advisor.harness.coverage import LiveTorchAirRegistry, TorchAirTable
from tests.support.models import npu_op_model, register_npu_rms_norm

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh_torchair_source():
    coverage.active_torchair_coverage.cache_clear()
    yield
    coverage.active_torchair_coverage.cache_clear()


# ------------------------------------------------------------------ Inductor
@pytest.mark.parametrize(
    ("op", "expected"),
    [
        ("aten.addmm.default", "lowered"),
        ("aten.relu.default", "lowered"),
        ("aten.linear.default", "decomposed"),
        ("aten.scaled_dot_product_attention.default", "decomposed"),
        ("aten._scaled_dot_product_flash_attention_for_cpu.default", "fallback"),
        ("aten.cumsum.default", "fallback"),
    ],
)
def test_inductor_status_of_aten_ops_follows_the_installed_registries(op: str, expected: str) -> None:
    assert coverage.inductor_status(op) == expected
    assert coverage.inductor_status(coverage.resolve_op(op)) == expected


def test_inductor_status_accepts_the_spellings_users_paste() -> None:
    assert coverage.inductor_status("aten::linear") == "decomposed"  # TorchScript node kind: a packet
    assert coverage.has_fake_kernel("aten::linear")
    assert coverage.inductor_status("torch.ops.aten.linear.default") == "decomposed"
    assert coverage.inductor_status(operator.getitem) == "lowered"
    assert coverage.inductor_status(torch.ops.higher_order.cond) == "lowered"


def test_inductor_status_of_an_unknown_op_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not registered"):
        coverage.inductor_status("npu.never_registered_op.default")


def test_npu_op_without_fake_kernel_is_untraceable_and_torch_compile_fails_on_it() -> None:
    model, inputs = npu_op_model(with_fake=False)
    op = torch.ops.npu.test_rms_norm_nofake.default
    assert not coverage.has_fake_kernel(op)
    assert coverage.inductor_status(op) == "untraceable"
    with torch.no_grad(), pytest.raises(Exception, match="fake"):
        torch.compile(model, backend="eager", fullgraph=True)(*inputs)
    torch._dynamo.reset()


def test_npu_op_with_fake_kernel_is_an_inductor_fallback() -> None:
    register_npu_rms_norm("test_rms_norm")
    op = torch.ops.npu.test_rms_norm.default
    assert coverage.has_fake_kernel(op)
    assert coverage.inductor_status(op) == "fallback"


def test_custom_op_fake_kernel_is_detected_through_its_opdef() -> None:
    """torch.library.custom_op registers a Meta kernel that only raises until register_fake is called."""

    @torch.library.custom_op("npu::coverage_scale", mutates_args=())
    def scale(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    assert coverage.inductor_status("npu.coverage_scale.default") == "untraceable"
    scale.register_fake(lambda x: torch.empty_like(x))
    assert coverage.has_fake_kernel(torch.ops.npu.coverage_scale.default)
    assert coverage.inductor_status("npu.coverage_scale.default") == "fallback"


@pytest.mark.slow
def test_fallback_op_really_runs_as_an_extern_kernel_and_keeps_its_class_after_compiling() -> None:
    from torch._inductor.utils import run_and_get_code

    register_npu_rms_norm("test_rms_norm")

    def relu_then_rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return torch.ops.npu.test_rms_norm.default(torch.relu(x), weight, 1e-6)

    with torch.no_grad():
        _, codes = run_and_get_code(torch.compile(relu_then_rms_norm), torch.randn(4, 8), torch.ones(8))
    assert "torch.ops.npu.test_rms_norm.default(" in "\n".join(codes)
    assert coverage.inductor_status("npu.test_rms_norm.default") == "fallback"
    assert coverage.inductor_status("aten.relu.default") == "lowered"


def test_coverage_module_imports_without_torch() -> None:
    """The table generator and torch-free callers import the coverage module; torch loads only when an op is asked."""
    code = "import sys, advisor.harness.coverage; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT)


# ------------------------------------------------------------------ TorchAir table (the committed one)
def test_worst_torchair_status_is_the_least_covered() -> None:
    assert coverage.worst_torchair_status(["supported", "partial", "supported"]) == "partial"
    assert coverage.worst_torchair_status(["partial", "stub", "none"]) == "none"
    assert coverage.worst_torchair_status(["stub", "supported"]) == "stub"
    assert coverage.worst_torchair_status([]) == "supported"  # an op that becomes nothing needs no converter


def test_committed_table_knows_the_published_facts(fresh_torchair_source) -> None:
    assert coverage.torchair_status("npu.npu_rms_norm.default") == "supported"
    assert coverage.torchair_status("aten.amax.default") == "stub"
    assert coverage.torchair_status("aten.abs.out") == "stub"
    assert coverage.torchair_status("aten.addmm.default") == "supported"
    assert coverage.torchair_status("npu.npu_rotary_mul.default") == "partial"
    assert coverage.torchair_status("aten.definitely_not_an_op.default") == "none"
    assert coverage.torchair_source() == {"source": "table", "torch_npu_version": "2.14.0"}


def test_none_status_carries_what_it_means_per_namespace(fresh_torchair_source) -> None:
    assert coverage.torchair_status("npu.npu_moe_token_permute.default") == "none"
    assert "auto-generate" in coverage.torchair_note("npu.npu_moe_token_permute.default")
    assert "fails" in coverage.torchair_note("aten.definitely_not_an_op.default")
    assert coverage.torchair_note("npu.npu_rms_norm.default") is None


def test_custom_ops_without_a_converter_are_unknown_until_an_npu_not_uncovered(fresh_torchair_source) -> None:
    from advisor.core.decision.rules import InspectionFacts
    from advisor.harness.decomposed_coverage import add_table_notes

    names = ("npu.npu_moe_token_permute.default", "aten.definitely_not_an_op.default", "npu.npu_rms_norm.default")
    assert [coverage.torchair_may_auto_convert(name) for name in names] == [True, False, False]
    ops = [
        {"name": name, "count": 1, "coverage": {"inductor": "fallback", "torchair": coverage.torchair_status(name)}}
        for name in names
    ]
    add_table_notes(ops)  # type: ignore[arg-type]
    facts = InspectionFacts.of({"ops": ops[1:2], "custom_ops": [ops[0], ops[2]]})
    assert facts.torchair_unknown == ("npu.npu_moe_token_permute.default",)
    assert facts.torchair_uncovered == ("aten.definitely_not_an_op.default",)  # a built-in op: compile fails
    # an inspection stored before the marker, with the note's earlier wording, is read the same way
    old_note = (
        "no explicit TorchAir converter; at compile time TorchAir tries to auto-generate one from an Ascend IR "
        "registered under the CamelCase name of the op, which works only when such an IR exists"
    )
    stored = {
        "name": "npu.npu_moe_token_permute.default",
        "count": 1,
        "coverage": {"inductor": "fallback", "torchair": "none", "torchair_note": old_note},
    }
    assert InspectionFacts.of({"ops": [], "custom_ops": [stored]}).torchair_unknown == (stored["name"],)


def test_table_records_which_npu_ops_torch_npu_gives_a_meta_kernel() -> None:
    assert coverage.torch_npu_registers_meta("npu.npu_rms_norm.default") is True
    assert coverage.torch_npu_registers_meta("npu.npu_grouped_matmul.List") is True
    assert coverage.torch_npu_registers_meta("npu.npu_rms_norm") is True
    assert coverage.torch_npu_registers_meta("npu.npu_format_cast.default") is False
    assert coverage.torch_npu_registers_meta("aten.addmm.default") is None


def test_committed_table_is_traceable_to_its_wheel_and_small() -> None:
    path = REPO_ROOT / "advisor" / "harness" / "data" / "torchair_coverage.json"
    assert path.stat().st_size < 1_000_000
    table = json.loads(path.read_text())
    assert table["wheel"].startswith(f"torch_npu-{table['torch_npu_version']}-")
    assert len(table["wheel_sha256"]) == 64
    recounted: dict[str, dict[str, int]] = {}
    for name, status in table["ops"].items():
        per_namespace = recounted.setdefault(name.split(".", 1)[0], {})
        per_namespace[status] = per_namespace.get(status, 0) + 1
    assert recounted == table["counts"]
    assert set(table["ops"].values()) <= {"supported", "partial", "stub"}


def test_table_falls_back_between_overload_and_packet() -> None:
    table = TorchAirTable({"ops": {"npu.packet_only": "partial", "aten.amax.default": "stub"}})
    assert table.status("npu.packet_only.default") == "partial"
    assert table.status("npu::packet_only.Tensor") == "partial"
    assert table.status("aten.amax") == "stub"
    assert table.status("aten.amax.out") == "none"


# ------------------------------------------------------------------ live registry (fake torchair surface)
def _torchair_get_converter_status(converter):
    """Mirrors torchair.fx_summary._get_converter_status: a text search of the converter's source."""
    if converter is None:
        return "未注册"
    source = inspect.getsource(converter)
    unsupported = "raise NotImplementedError" in inspect.getsource(converter.__wrapped__)
    supported = "return " in source
    if unsupported and supported:
        return "部分支持"
    if unsupported:
        return "未实现"
    if supported:
        return "已支持"
    return "未知状态，请查看源码"


def _wrapped(fn):
    def converter(*args, **kwargs):
        return fn(*args, **kwargs)

    converter.__wrapped__ = fn
    return converter


def _convert_full(x, weight, eps):
    return ("Rms", x, weight, eps)


def _convert_partial(x, weight, eps):
    if eps == 0:
        raise NotImplementedError("eps=0 ge_converter is not implemented")
    return ("Rms", x, weight, eps)


def _convert_stub(x, weight, eps):
    raise NotImplementedError("torch.ops.npu.live_stub.default ge_converter is not implemented!")


def _convert_int8_unsupported(x, weight, eps):
    if x.dtype == torch.int8:
        raise RuntimeError("live_int8 ge_converter is not support int8 dtype!")
    return ("Rms", x, weight, eps)


def _convert_only_runtime_error(x, weight, eps):
    raise RuntimeError("torch.ops.npu.live_out.default ge_converter is not supported!")


def _fake_torchair(builtin_converters: dict | None = None) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        fx_summary=types.SimpleNamespace(_get_converter_status=_torchair_get_converter_status),
        _ge_concrete_graph=types.SimpleNamespace(
            fx2ge_converter=types.SimpleNamespace(_CONVERTERS=builtin_converters or {})
        ),
    )


@pytest.fixture(scope="module")
def live_ops():
    """npu:: test ops carrying `_ge_converter` the way torchair's register_fx_node_ge_converter leaves them."""
    converters = {
        "live_full": _convert_full,
        "live_partial": _convert_partial,
        "live_stub": _convert_stub,
        "live_int8": _convert_int8_unsupported,
        "live_out": _convert_only_runtime_error,
    }
    for name in [*converters, "live_without"]:
        register_npu_rms_norm(name)
    for name, fn in converters.items():
        getattr(torch.ops.npu, name).default._ge_converter = _wrapped(fn)
    register_npu_rms_norm("live_packet")
    torch.ops.npu.live_packet._ge_converter = _wrapped(_convert_full)
    yield
    for name in converters:
        del getattr(torch.ops.npu, name).default._ge_converter
    del torch.ops.npu.live_packet._ge_converter


def test_live_registry_maps_torchairs_verdicts(live_ops) -> None:
    live = LiveTorchAirRegistry(_fake_torchair(), torch_npu_version="2.14.0")
    assert live.status("npu.live_full.default") == "supported"
    assert live.status("npu.live_partial.default") == "partial"
    assert live.status("npu.live_stub.default") == "stub"
    assert live.status("npu.live_without.default") == "none"
    assert live.status("npu.live_packet.default") == "supported"  # registered on the packet
    assert live.status("npu.not_registered_anywhere.default") == "none"
    assert live.source() == {"source": "live", "torch_npu_version": "2.14.0"}


def test_live_registry_agrees_with_the_table_rule_where_torchairs_text_search_cannot_tell(live_ops) -> None:
    live = LiveTorchAirRegistry(_fake_torchair())
    assert _torchair_get_converter_status(torch.ops.npu.live_int8.default._ge_converter) == "已支持"
    assert live.status("npu.live_int8.default") == "partial"
    assert _torchair_get_converter_status(torch.ops.npu.live_out.default._ge_converter) == "未知状态，请查看源码"
    assert live.status("npu.live_out.default") == "stub"


def test_live_registry_reads_builtin_converters(live_ops) -> None:
    live = LiveTorchAirRegistry(_fake_torchair({operator.add: _wrapped(_convert_full)}))
    assert live.status(coverage.op_name(operator.add)) == "supported"
    assert live.status("operator.sub") == "none"


def test_live_registry_is_chosen_only_with_a_real_torch_npu(monkeypatch, fresh_torchair_source) -> None:
    fake = _fake_torchair()
    monkeypatch.setitem(sys.modules, "torchair", fake)
    monkeypatch.setitem(sys.modules, "torchair.fx_summary", fake.fx_summary)
    monkeypatch.setitem(sys.modules, "torchair._ge_concrete_graph.fx2ge_converter", fake._ge_concrete_graph)
    double = types.ModuleType("torch_npu")
    double.__version__ = "2.14.0"
    double.__advisor_test_double__ = True
    monkeypatch.setitem(sys.modules, "torch_npu", double)
    assert coverage.torchair_source()["source"] == "table"

    coverage.active_torchair_coverage.cache_clear()
    real = types.ModuleType("torch_npu")
    real.__version__ = "2.99.0"
    monkeypatch.setitem(sys.modules, "torch_npu", real)
    assert coverage.torchair_source() == {"source": "live", "torch_npu_version": "2.99.0"}
    assert coverage.torchair_status("aten.definitely_not_an_op.default") == "none"


# ------------------------------------------------------------------ the generator script
@pytest.fixture(scope="module")
def generator():
    script = REPO_ROOT / "scripts" / "gen_torchair_coverage.py"
    spec = importlib.util.spec_from_file_location("gen_torchair_coverage", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CONVERTERS = {
    "aten/amax.py": '''
        from torchair._ge_concrete_graph.ge_converter.converter_utils import *

        @register_fx_node_ge_converter(torch.ops.aten.amax.default)
        def conveter_aten_amax_default(self, dim=(), keepdim=False, meta_outputs=None):
            """NB: aten::amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
            raise NotImplementedError("torch.ops.aten.amax.default ge_converter is not implemented!")

        @register_fx_node_ge_converter(torch.ops.aten.abs.out)
        def conveter_aten_abs_out(self, *, out=None, meta_outputs=None):
            raise RuntimeError("torch.ops.aten.abs.out ge_converter is not supported!")
    ''',
    "aten/mm.py": """
        @declare_supported([Support(F32(2, 2), F32(2, 2))])
        @register_fx_node_ge_converter(torch.ops.aten.mm.default)
        def conveter_aten_mm(self, mat2, meta_outputs=None):
            if self.dtype == DataType.DT_INT8:
                raise RuntimeError("torch.ops.aten.mm.default ge_converter is not support int8 dtype!")
            return ge.MatMul(self, mat2)

        @register_fx_node_ge_converter(torch.ops.aten.pad.default)
        def conveter_aten_pad(self, pad, meta_outputs=None):
            if len(pad) % 2:
                raise AssertionError("Length of pad must be even")
            return ge.Pad(self, pad)

        @register_fx_node_ge_converter(torch.ops.aten.mean.default)
        @register_fx_node_ge_converter(getattr(torch.ops.aten.mean, "names_dim", None))
        def conveter_aten_mean(self, meta_outputs=None):
            if isinstance(self, list):
                raise NotImplementedError("list input")
            return ge.ReduceMean(self)
    """,
    "builtin_converters.py": """
        try:
            from torch import sym_sqrt
        except ImportError:
            from torch.fx.experimental.symbolic_shapes import sym_sqrt

        @register_fx_node_ge_converter(operator.add)
        def conveter_operator_add(self, other, meta_outputs=None):
            return ge.Add(self, other)

        @register_fx_node_ge_converter(sym_sqrt)
        def conveter_sym_sqrt(self, meta_outputs=None):
            return ge.Sqrt(self)
    """,
    "custom/rms_norm.py": """
        @register_fx_node_ge_converter(torch.ops.npu.npu_rms_norm.default)
        def conveter_npu_rms_norm(x, gamma, epsilon=1e-6, meta_outputs=None):
            return ge.RmsNorm(x, gamma, epsilon=epsilon)

        def conveter_npu_gmm(x, weight, meta_outputs=None):
            return ge.GroupedMatmul(x, weight)

        register_fx_node_ge_converter(torch.ops.npu.npu_grouped_matmul.default)(conveter_npu_gmm)
        register_fx_node_ge_converter(torch.ops.npu.npu_grouped_matmul)(conveter_npu_gmm)

        @register_fx_node_ge_converter(torch.ops.aten.amax.default)
        def conveter_amax_again(self, dim=(), keepdim=False, meta_outputs=None):
            return ge.ReduceMax(self, dim)
    """,
    "lite/quant.py": """
        @register_fx_node_ge_converter(torch.ops.npu.npu_quant_matmul.default)
        def conveter_lite(x, meta_outputs=None):
            return ge.QuantMatmul(x)
    """,
}

META = {
    "_meta_registrations.py": """
        from torch.library import Library, impl
        m = Library("npu", "IMPL", "Meta")
        m_aten = Library("aten", "IMPL", "Meta")

        @impl(m, "npu_rms_norm")
        def npu_rms_norm_meta(x, gamma, epsilon=1e-6):
            return torch.empty_like(x)

        @impl(m, "npu_grouped_matmul.List")
        def gmm_meta(x, weight):
            return x

        @impl(m_aten, "matmul_backward")
        def matmul_backward_meta(grad, self, other, mask):
            return grad

        if "2.1." in torch.__version__:
            @impl(m, "npu_old_attention")
            def old_meta(q):
                return q
    """,
    "_fake_registrations.py": """
        @torch.library.register_fake("npu::npu_fusion_attention_v3")
        def fa_v3_fake(q, k, v):
            return q
    """,
}


def _write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return root


def test_generator_parses_every_registration_form_and_classifies_bodies(generator, tmp_path) -> None:
    statuses = generator.parse_converters(generator.tree_sources(_write_tree(tmp_path, CONVERTERS)))
    assert statuses == {
        "aten.abs.out": "stub",
        "aten.amax.default": "supported",  # re-registered in custom/, which torchair imports after aten/
        "aten.mm.default": "partial",
        "aten.pad.default": "supported",  # argument validation is not a partial marker
        "aten.mean.default": "partial",
        "aten.mean.names_dim": "partial",
        "operator.add": "supported",
        "torch.sym_sqrt": "supported",
        "npu.npu_rms_norm.default": "supported",
        "npu.npu_grouped_matmul.default": "supported",
        "npu.npu_grouped_matmul": "supported",
    }


def test_generator_finds_npu_meta_and_fake_kernels(generator, tmp_path) -> None:
    found = generator.parse_npu_meta(generator.tree_sources(_write_tree(tmp_path, META)))
    assert found == [
        "npu.npu_fusion_attention_v3.default",
        "npu.npu_grouped_matmul.List",
        "npu.npu_old_attention.default",
        "npu.npu_rms_norm.default",
    ]


def test_generated_table_is_what_the_advisor_reads(generator, tmp_path) -> None:
    wheel_path = tmp_path / "torch_npu-9.9.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel_path, "w") as wheel:
        wheel.writestr("torch_npu/version.py", "__version__ = '9.9.0'\ngit_version = 'abc123'\n")
        for name, source in CONVERTERS.items():
            wheel.writestr(generator.CONVERTER_DIR + name, textwrap.dedent(source))
        for name, source in META.items():
            wheel.writestr(generator.META_DIR + name, textwrap.dedent(source))
    table = generator.build_table(wheel_path, generated="2026-01-01")
    output = tmp_path / "coverage.json"
    generator.write_table(table, output)

    written = json.loads(output.read_text())
    assert written["torch_npu_version"] == "9.9.0"
    assert written["torch_npu_git_version"] == "abc123"
    assert written["counts"]["aten"] == {"partial": 3, "stub": 1, "supported": 2}
    loaded = TorchAirTable.load(output)
    assert loaded.source() == {"source": "table", "torch_npu_version": "9.9.0"}
    assert loaded.status("aten.abs.out") == "stub"
    assert loaded.status("npu.npu_grouped_matmul.List") == "supported"  # falls back to the packet
    assert loaded.has_npu_meta("npu.npu_rms_norm.default") is True
