"""Generation workloads: a causal LM with a static KV cache, prefill and decode timed per backend, greedy tokens
checked against eager's, and a recommendation layered by phase when the phases disagree."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402

from advisor.cli import app  # noqa: E402
from advisor.core.decision import decide  # noqa: E402
from advisor.core.report import render_markdown  # noqa: E402
from advisor.harness.loading import LoadError, load_model  # noqa: E402
from advisor.harness.measurement import TimingPolicy, measure_model  # noqa: E402

FAST = TimingPolicy(min_iters=10, min_time_s=0.05, max_time_s=0.3, warmup_iters=2, warm_cache=False, dynamic_sizes=0)
T = "tests.support.backends_for_tests"
CONTEXT = {"stage": "production", "target": "cpu", "workload": "generation", "decode_tokens": 6}


@pytest.fixture(scope="module")
def gpt2_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """`npu-advisor example gpt2-decode`: a random-init GPT-2 with prefill and decode programs."""
    path = tmp_path_factory.mktemp("gpt2") / "gpt2-decode.pt2"
    result = CliRunner().invoke(app, ["example", "gpt2-decode", str(path)])
    assert result.exit_code == 0, result.output
    return str(path)


def test_the_example_archive_holds_a_prefill_and_a_decode_program_sharing_their_cache(gpt2_file):
    loaded = load_model(gpt2_file)
    assert sorted(loaded.programs) == ["decode", "prefill"]
    assert [spec["name"] for spec in loaded.input_specs] == ["input_ids", "cache_position"]
    prefill_buffers = {n for n, _ in loaded.programs["prefill"].module().named_buffers() if "cache" in n}
    assert prefill_buffers and prefill_buffers <= {n for n, _ in loaded.programs["decode"].module().named_buffers()}


def test_inductor_prefill_and_decode_are_timed_against_eager_and_its_tokens_checked(gpt2_file):
    backends = ["inductor:default", f"{T}:NegatedOutputsBackend"]
    run = measure_model(
        gpt2_file,
        backends=backends,
        workload="generation",
        decode_tokens=6,
        timing=FAST,
        timeout_s=600,
        remeasure=False,
    )
    rows = {row["backend"]: row for row in run["measurements"]}
    eager, inductor, negated = rows["eager"], rows["inductor"], rows["test-negated"]
    assert eager["status"] == "ok" and eager["generation"]["tokens_match"]
    assert eager["generation"]["prompt_tokens"] == 16 and eager["generation"]["decode_tokens"] == 6
    assert inductor["status"] == "ok", (inductor["reason"], inductor["stderr_tail"])
    generation = inductor["generation"]
    for phase in ("prefill", "decode"):
        numbers = generation[phase]
        assert numbers["latency"]["median_ms"] > 0 and numbers["eager_latency"]["median_ms"] > 0
        assert numbers["speedup_ci"][0] <= numbers["speedup_vs_eager"] <= numbers["speedup_ci"][1]
        assert numbers["compile_s"] > 0  # each phase's own first call compiles
    assert generation["tokens_match"] and generation["first_mismatch"] is None
    assert inductor["latency"] == generation["decode"]["latency"]  # the row's latency is the time per token
    assert generation["tokens_per_s"] == pytest.approx(1e3 / generation["decode"]["latency"]["median_ms"])
    # the greedy loop's own decode steps (after the first, which compiled): 6 tokens = prefill + 5 steps
    assert generation["decode_steps"]["n"] == 4 and generation["eager_decode_steps"]["median_ms"] > 0
    profile = inductor["time_breakdown"]  # the decode step's: generated kernels, and the attention Inductor leaves
    assert profile["fused_kernels"] >= 1 and profile["entries"]  # to its CPU flash-attention fallback
    assert any("scaled_dot_product" in op for op in profile["fallback_ops"]), profile["fallback_ops"]
    assert inductor["compile_s_cold"] >= generation["prefill"]["compile_s"] + generation["decode"]["compile_s"] - 1e-6
    # a backend whose logits are wrong picks other greedy tokens: not accurate, and it says which token differed
    assert negated["status"] == "fail_accuracy" and "greedy token 0 differs" in negated["reason"]

    recommendation = decide(CONTEXT, None, run)
    [step] = [s for s in recommendation["path"] if s["rule"] == "generation_phases"]
    assert set(step["evidence"]["by_option"]) >= {"eager:default", "inductor:default"}
    report = render_markdown(
        {"model_name": "gpt2", "context": CONTEXT, "measurements": run, "recommendation": recommendation}
    )
    assert "## Generation (prompt of 16 tokens)" in report and "- inductor:default: prefill" in report


def test_a_decode_program_alone_is_measured_from_its_example_token(gpt2_file, tmp_path):
    loaded = load_model(gpt2_file)
    decode_only = tmp_path / "decode.pt2"
    torch.export.save(loaded.programs["decode"], str(decode_only))
    run = measure_model(str(decode_only), backends=["eager"], workload="generation", decode_tokens=4, timing=FAST)
    [row] = run["measurements"]
    assert row["status"] == "ok" and row["generation"]["prefill"] is None and row["generation"]["prompt_tokens"] == 0
    assert row["generation"]["decode_tokens"] == 4 and row["generation"]["decode"]["latency"]["median_ms"] > 0
    assert all(row["timing_load"][when]["cores"] >= 1 for when in ("start", "end"))  # the load while timing


def test_an_archive_of_several_programs_without_a_decode_one_is_refused_by_name(gpt2_file, tmp_path):
    from torch.export.pt2_archive._package import package_pt2

    loaded = load_model(gpt2_file)
    odd = tmp_path / "odd.pt2"
    package_pt2(str(odd), exported_programs={"prefill": loaded.programs["prefill"], "other": loaded.programs["decode"]})
    with pytest.raises(LoadError, match="programs other, prefill;.*'decode'"):
        load_model(str(odd))
