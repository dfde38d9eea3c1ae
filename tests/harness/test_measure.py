"""The measurement harness with real children: every status, side-by-side timing, accuracy, caches, shapes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from advisor.harness.measurement import MeasureError, MeasurementCancelled, TimingPolicy, measure_model  # noqa: E402
from tests.support.models import export_dynamic_batch, mlp  # noqa: E402

T = "tests.support.backends_for_tests"
# with remeasure=False where the timing quality is not the subject (tests/harness/test_measure_noise.py): a
# re-measure is one more child per noisy row of these short windows
FAST = TimingPolicy(min_iters=10, min_time_s=0.05, max_time_s=0.3, warmup_iters=2, warm_cache=False)
DOUBLES = Path(__file__).resolve().parents[1] / "doubles"


def _rows(run) -> dict[str, dict]:
    return {row["backend"]: row for row in run["measurements"]}


def test_every_way_a_backend_can_fail_becomes_a_readable_status(mlp_file):
    backends = [
        f"{T}:{cls}"
        for cls in (
            "AbortingBackend",
            "HangingBackend",
            "MemoryHogBackend",
            "WrongNumbersBackend",
            "MissingPackageBackend",
            "FailingCompileBackend",
            "FailingAtRuntimeBackend",
        )
    ]
    # the hanging backend costs the whole timeout: 15 s still leaves the other children twice what they need
    run = measure_model(mlp_file, backends=backends, timing=FAST, timeout_s=15, memory_limit_mb=4096, remeasure=False)
    rows = _rows(run)
    expected = {
        "eager": "ok",
        "test-abort": "crashed",
        "test-hang": "timeout",
        "test-oom": "oom",
        "test-wrong": "fail_accuracy",
        "test-missing": "unavailable",
        "test-compile-error": "compile_error",
        "test-runtime-error": "runtime_error",
    }
    assert {name: row["status"] for name, row in rows.items()} == expected
    assert "SIGABRT" in rows["test-abort"]["reason"]
    assert "15 s" in rows["test-hang"]["reason"]
    assert "memory" in rows["test-oom"]["reason"].lower()
    assert "float64 reference" in rows["test-wrong"]["reason"] and not rows["test-wrong"]["accuracy"]["passed"]
    assert "advisor_test_missing_vendor_sdk" in rows["test-missing"]["reason"]
    assert "no lowering for aten.linear.default" in rows["test-compile-error"]["reason"]
    assert "device lost after 3 calls" in rows["test-runtime-error"]["reason"]
    for name, row in rows.items():
        assert row["snippet"], name
        if row["status"] != "ok":
            assert row["reason"], name
    # the inaccurate backend was still timed, side by side with eager
    assert rows["test-wrong"]["latency"]["n"] >= 10 and rows["test-wrong"]["eager_latency"]["n"] >= 10


def test_the_contexts_accuracy_tolerance_replaces_the_dtype_defaults(mlp_file):
    wrong = f"{T}:WrongNumbersBackend"  # every output off by exactly 1.0
    tolerance = {"atol": 1.5, "rtol": None}
    loose = _rows(measure_model(mlp_file, backends=[wrong], timing=FAST, accuracy_tolerance=tolerance, remeasure=False))
    assert loose["test-wrong"]["status"] == "ok" and loose["test-wrong"]["accuracy"]["atol"] == 1.5
    assert loose["test-wrong"]["accuracy"]["rtol"] == pytest.approx(1e-4)  # None keeps float32's default


def test_eager_baseline_row_has_statistics_memory_accuracy_and_environment(mlp_file):
    events: list[dict] = []
    run = measure_model(
        mlp_file, backends=["torchair:max-autotune"], timing=FAST, progress=events.append, timeout_s=120
    )
    row, torchair = run["measurements"]
    # a backend for another device is unavailable, without starting a child for it
    assert torchair["status"] == "unavailable" and "npu" in torchair["reason"] and torchair["wall_s"] == 0.0
    assert (row["backend"], row["family"], row["status"], row["workload"]) == ("eager", "baseline", "ok", "inference")
    stats = row["latency"]
    assert stats["n"] >= 10
    assert stats["ci_low_ms"] <= stats["median_ms"] <= stats["ci_high_ms"]
    assert stats["median_ms"] <= stats["p90_ms"] <= stats["p99_ms"]
    assert row["speedup_vs_eager"] == 1.0 and row["compile_s_cold"] == 0.0
    assert row["accuracy"]["passed"] and row["accuracy"]["max_abs_err"] == 0.0
    assert row["memory_kind"] == "rss" and row["peak_memory_mb"] is not None
    assert row["throughput"]["samples_per_s"] == pytest.approx(4 * 1e3 / stats["median_ms"])
    assert "torch.no_grad()" in row["snippet"]
    env = run["environment"]
    assert env["measured_on"] == "cpu" and env["torch_version"] == torch.__version__
    # the quoted latency's window, and the load the child read at its timed window's ends (issue 27 item 4)
    # (a noisy first window is timed again and the quieter one kept: the row names the one it quotes)
    kept = (run["quality"].get("kept") or {}).get("eager:default", "first")
    assert row["latency_window"] == ("first window" if kept == "first" else "re-measured window")
    assert all(row["timing_load"][when]["cores"] >= 1 for when in ("start", "end"))
    assert env["torch_threads"] >= 1 and env["load"]["before"]["cores"] >= 1
    assert env["load"]["during"] in (row["timing_load"]["start"], row["timing_load"]["end"])
    stages = {e["stage"] for e in events}
    assert {"starting", "loading", "reference", "timing", "done"} <= stages


def test_dynamo_backend_is_timed_side_by_side_and_dynamic_sizes_count_recompiles(tmp_path):
    model, inputs = mlp()
    path = export_dynamic_batch(tmp_path / "dyn.pt2", model, inputs, max_batch=64)
    run = measure_model(path, backends=[f"{T}:DynamoEagerBackend"], timing=FAST, timeout_s=120, remeasure=False)
    row = _rows(run)["test-dynamo-eager"]
    assert row["status"] == "ok", row["reason"]
    assert row["graph_count"] >= 1 and row["graph_breaks"] == 0
    assert row["compile_s_cold"] > 0
    low, high = row["speedup_ci"]
    assert low <= row["speedup_vs_eager"] <= high
    assert row["eager_latency"]["n"] >= 10
    sizes = [entry["shape"]["x"][0] for entry in row["dynamic"]]
    assert sizes == [8, 16]
    # Dynamo compiles batch 4 statically, recompiles once with a dynamic batch at 8, then reuses it at 16.
    assert [entry["recompiles"] for entry in row["dynamic"]] == [1, 0]
    assert row["recompiles"] == 1
    assert all(entry["median_ms"] > 0 and entry["eager_median_ms"] > 0 for entry in row["dynamic"])


def test_bad_inputs_are_clear_errors_before_any_child_runs(tmp_path, mlp_file):
    with pytest.raises(MeasureError, match="model file not found"):
        measure_model(str(tmp_path / "nope.pt2"))
    junk = tmp_path / "junk.pt2"
    junk.write_bytes(b"not a zip at all")
    with pytest.raises(MeasureError) as info:
        measure_model(str(junk))
    assert "zip" in str(info.value).lower()
    with pytest.raises(MeasureError, match="unknown backend 'nonexistent'"):
        measure_model(mlp_file, backends=["nonexistent"])
    with pytest.raises(MeasureError, match="no mode 'turbo'"):
        measure_model(mlp_file, backends=["inductor:turbo"])


def test_cancel_kills_the_running_child_and_stops_the_measurement(mlp_file):
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(MeasurementCancelled):
        measure_model(mlp_file, backends=[f"{T}:HangingBackend"], timing=FAST, timeout_s=120, cancel=cancel)
    assert time.monotonic() - started < 30


def test_npu_test_double_is_labelled_test_double_never_npu(mlp_file, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(DOUBLES))
    run = measure_model(
        mlp_file, backends=["torchair:max-autotune"], device="npu", timing=FAST, timeout_s=180, remeasure=False
    )
    assert run["environment"]["measured_on"] == "test-double"
    assert run["environment"]["device"] == "npu"
    rows = _rows(run)
    assert rows["eager"]["status"] == "ok"
    assert rows["torchair"]["status"] == "ok", rows["torchair"]["reason"]
    assert "torchair" in rows["torchair"]["snippet"]


@pytest.mark.slow
def test_inductor_cold_and_warm_compile_are_both_measured(mlp_file):
    # loaded_min_iters=20: every window waits for its 20 samples even on a loaded host (asserted below)
    policy = TimingPolicy(min_iters=20, min_time_s=0.2, max_time_s=1.0, loaded_min_iters=20)
    # no re-measure: no timing quality is asserted here, and a noisy host would start a third Inductor child
    stages: list[str] = []
    run = measure_model(
        mlp_file,
        backends=["inductor:default"],
        timing=policy,
        timeout_s=300,
        remeasure=False,
        progress=lambda event: stages.append(str(event.get("stage"))),
    )
    row = _rows(run)["inductor"]
    assert row["status"] == "ok", (row["reason"], row["stderr_tail"])
    assert row["accuracy"]["passed"]
    assert row["graph_count"] == 1 and row["graph_breaks"] == 0
    # A warm FX-graph cache skips C++ codegen and g++: a clearly smaller compile time (facts: ~9 s vs ~1.4 s).
    assert 0 < row["compile_s_warm"] < row["compile_s_cold"] * 0.7
    # the warm-cache child compiles and checks, and times nothing: its steady latency is the cold child's
    warm = [stage for stage in stages if stage.startswith("warm cache: ")]
    assert "warm cache: compiling" in warm and "warm cache: accuracy" in warm
    assert not any("timing" in stage for stage in warm), warm
    assert row["speedup_vs_eager"] > 0 and row["eager_latency"]["n"] >= 20
    assert "torch.compile" in row["snippet"]


def test_a_re_measured_baseline_reads_the_reference_its_first_child_wrote(mlp_file, tmp_path, monkeypatch):
    """A noisy run times eager again; that child must compare against the first child's reference, not compute the
    float64 reference and the two eager calls again (nor overwrite the file the other rows were checked against)."""
    from dataclasses import asdict

    import torch

    from advisor.harness.measurement import child

    stages: list[str] = []
    monkeypatch.setattr(child, "report_progress", lambda event: stages.append(event["stage"]))
    reference = tmp_path / "reference.pt"
    policy = TimingPolicy(min_iters=5, min_time_s=0.05, max_time_s=0.2, warm_cache=False, profile=False)
    kwargs = {
        "model_path": mlp_file,
        "backend_spec": "eager",
        "mode": "default",
        "device": "cpu",
        "workload": "inference",
        "inputs_file": None,
        "input_shapes": None,
        "reference_path": str(reference),
        "is_baseline": True,
        "policy": asdict(policy),
    }
    first = child.measure_variant(**kwargs)
    assert first["status"] == "ok" and "reference" in stages and "determinism" in first
    # a reference the re-measure could only fail against by reading it
    saved = torch.load(reference, weights_only=True)
    saved["eager_out"] = [t * 2 + 1 for t in saved["eager_out"]]
    saved["fp64_out"] = [t * 2 + 1 for t in saved["fp64_out"]]
    torch.save(saved, reference)
    tampered = reference.read_bytes()
    stages.clear()
    again = child.measure_variant(**kwargs, reference_exists=True)
    assert "reference" not in stages and "determinism" not in again
    assert again["status"] == "fail_accuracy", "the existing reference was not the one compared against"
    assert reference.read_bytes() == tampered, "the re-measure overwrote the reference"
    assert again["latency"]["n"] >= 5


# ------------------------------------------------------------------ the device layer
@pytest.mark.parametrize("kind", ["cpu", "npu"])
def test_torch_npu_without_an_npu_gets_backend_autoload_switched_off_before_torch_is_imported(monkeypatch, kind):
    from advisor.harness.devices import npu_hardware_present
    from advisor.harness.sandbox import run_in_sandbox

    if npu_hardware_present():
        pytest.skip("this host has /dev/davinci* devices: autoload stays on for the real NPU")
    monkeypatch.setenv("PYTHONPATH", str(DOUBLES))  # makes a torch_npu package findable
    monkeypatch.delenv("TORCH_DEVICE_BACKEND_AUTOLOAD", raising=False)
    result = run_in_sandbox(f"{T}:autoload_after_prepare", {"kind": kind}, timeout_s=60, memory_limit_mb=None)
    assert result.value == {"autoload": "0", "torch_imported": False}


def test_cpu_device_times_calls_and_reports_peak_rss_above_the_baseline():
    from advisor.harness.devices import open_device

    dev = open_device("cpu")
    seconds, value = dev.timer()(lambda: sum(range(10_000)))
    assert value == 49995000 and 0 < seconds < 1
    dev.reset_peak_memory()
    block = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
    peak_mb, kind = dev.peak_memory_mb()
    del block
    assert kind == "rss" and 60 <= peak_mb < 200
    assert dev.describe()["measured_on"] == "cpu"


def busy(seconds: float):
    """A call that keeps a core busy for `seconds` (a stand-in runtime whose length the test knows)."""

    def call() -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    return call


@pytest.mark.exclusive  # busy-waits of 100 us: preemption on a loaded node stretches them to a block's length
def test_fast_calls_are_timed_in_blocks_and_each_sample_is_the_block_mean():
    from advisor.harness.devices import open_device
    from advisor.harness.measurement.timing import time_side_by_side

    policy = TimingPolicy(min_iters=10, min_time_s=0.05, max_time_s=0.5, warmup_iters=2, sample_time_s=0.001)
    fns = {"backend": busy(100e-6), "eager": busy(2e-3)}
    samples, calls_per_sample, timed_s, block_sizes, raced, ahead = time_side_by_side(
        fns, (), open_device("cpu"), policy, lambda n: None
    )
    # 100 us calls: about 10 per 1 ms sample; 2 ms calls are already long enough to time one by one
    assert 5 <= calls_per_sample["backend"] <= 11 and calls_per_sample["eager"] == 1
    assert len(samples["backend"]) >= 10 and len(samples["eager"]) >= 10 and timed_s > 0
    # samples are per-call seconds (block time / k), never less than the busy-wait itself
    assert min(samples["backend"]) >= 100e-6 and sorted(samples["backend"])[len(samples["backend"]) // 2] < 300e-6
    assert min(samples["eager"]) >= 2e-3
    # blocks alternate: both callables got the same number of blocks, and they account for every sample
    assert len(block_sizes["backend"]) == len(block_sizes["eager"]) >= 1
    assert sum(block_sizes["backend"]) == len(samples["backend"]) and sum(block_sizes["eager"]) == len(samples["eager"])


def compile_and_count_cache_files(zygote_cache: str) -> dict:
    """Sandbox target: one Inductor compile; how many files it left in this child's own cache dir. One extern matmul:
    Inductor still writes its FX-graph entry and wrapper code there but runs no g++ (~5 s, not ~30 s on two cores;
    C++ kernels are the measurement tests' and test_inductor_headers' subject)."""
    import os
    import sys

    preloaded = "torch._inductor.compile_fx" in sys.modules  # imported by the zygote, before this child forked
    compiled = torch.compile(lambda x: x @ x)
    compiled(torch.ones(8, 8))
    root = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    return {
        "files": sum(len(files) for _, _, files in os.walk(root)),
        "zygote_cache_files": sum(len(files) for _, _, files in os.walk(zygote_cache)),
        "parent": os.getppid(),
        "inductor_preloaded": preloaded,
    }


@pytest.mark.slow
def test_max_autotune_compiles_from_the_kernels_default_built_in_the_same_job(mlp_file):
    """Real children: max-autotune's child starts from a copy of default's compile cache, checks right with the
    kernels it found there, and its row states the cold compile as a bound (harness.measurement.seeded_cache)."""
    run = measure_model(
        mlp_file, backends=["inductor:default", "inductor:max-autotune"], timing=FAST, remeasure=False, timeout_s=300
    )
    default, autotuned = run["measurements"][1], run["measurements"][2]
    assert default["status"] == autotuned["status"] == "ok", (autotuned["reason"], autotuned["stderr_tail"])
    assert autotuned["accuracy"]["passed"]
    assert "compile_seeded" not in default
    seeded = autotuned["compile_seeded"]
    assert seeded["from_option"] == "inductor:default" and seeded["files_seeded"] > 0
    assert seeded["floor_cold_s"] == default["compile_s_cold"]
    assert autotuned["compile_s_cold"] == pytest.approx(seeded["measured_s"] + default["compile_s_cold"])


@pytest.mark.slow
def test_children_forked_from_the_preloaded_zygote_compile_into_their_own_cache_dir(tmp_path):
    """The zygote of a job that compiles with Inductor imported torch, Dynamo and Inductor's compile path and probed
    the CPU (against the trusted build); the cache dir must still be the child's, not the zygote's."""
    import os

    from advisor.harness.inductor_headers import trusted_headers
    from advisor.harness.isolation import resolve_isolation
    from advisor.harness.measurement.plan import PRELOAD
    from advisor.harness.sandbox import Zygote, run_in_sandbox

    isolation = resolve_isolation()
    headers = trusted_headers(isolation)
    preload = {"device": "cpu", "trusted_headers": headers, "compiles_inductor": True}
    with Zygote(PRELOAD, preload, isolation=isolation, readable=[headers] if headers else []) as zygote:
        zygote_cache = f"{zygote.scratch}/zygote-cache"  # the cache dir in the zygote's own environment
        result = run_in_sandbox(
            "tests.harness.test_measure:compile_and_count_cache_files",
            {"zygote_cache": zygote_cache},
            timeout_s=180,
            memory_limit_mb=None,
            cache_dir=os.path.join(zygote.scratch, "child"),
            zygote=zygote,
        )
        assert result.status == "ok", result
        assert result.value["parent"] != os.getpid()  # forked from the zygote, not spawned
        assert result.value["files"] > 0
        assert result.value["zygote_cache_files"] == 0
        assert result.value["inductor_preloaded"] is True


def test_the_timing_env_override_replaces_only_the_default_policy(monkeypatch):
    """advisor.harness.measurement.run.TIMING_ENV (tests/support/service_env.py): read when no `timing` is passed,
    strict."""
    from advisor.harness.measurement.run import TIMING_ENV, default_timing

    monkeypatch.delenv(TIMING_ENV, raising=False)
    assert default_timing() == TimingPolicy()
    monkeypatch.setenv(TIMING_ENV, '{"max_time_s": 0.3, "warm_cache": false}')
    assert default_timing() == TimingPolicy(max_time_s=0.3, warm_cache=False)
    monkeypatch.setenv(TIMING_ENV, '{"max_time": 0.3}')
    with pytest.raises(TypeError):
        default_timing()


@pytest.mark.exclusive  # busy-waits of 1 ms: on a node loaded past its cores, preemption stretches them past 25 ms
def test_the_first_sample_after_a_switch_of_callable_is_not_kept():
    """A runtime whose first call after another runtime's calls is slow (its threads waking, the caches the
    other's): those calls would make the row noisy and its median wrong; the window drops them."""
    from advisor.harness.devices import open_device
    from advisor.harness.measurement.timing import time_side_by_side

    last: dict[str, str | None] = {"name": None}
    switches = [0]

    def runtime(name: str, seconds: float):
        def call() -> None:
            switched = last["name"] not in (None, name)
            switches[0] += switched
            last["name"] = name
            end = time.perf_counter() + seconds * (30 if switched else 1)
            while time.perf_counter() < end:
                pass

        return call

    # blocks of about three 1 ms samples; a call after a switch lasts 30 ms. Were the first sample of each block
    # kept, every switch would leave a kept sample >= 30 ms; a busy machine may stretch the odd 1 ms call, not most
    policy = TimingPolicy(min_iters=12, min_time_s=0.1, max_time_s=0.4, warmup_iters=2, block_time_s=0.003)
    fns = {"backend": runtime("backend", 1e-3), "eager": runtime("eager", 1e-3)}
    window = time_side_by_side(fns, (), open_device("cpu"), policy, lambda n: None)
    slow = [s for name in fns for s in window.samples[name] if s >= 25e-3]
    assert switches[0] >= 4, switches  # several switches happened
    assert len(slow) <= switches[0] // 4, (switches, sorted(slow))


def _sleeping(durations: list[float]):
    """A call that sleeps the next of `durations` (cycling): sleeping, not spinning, so load barely moves it."""
    calls = [0]

    def call() -> None:
        time.sleep(durations[calls[0] % len(durations)])
        calls[0] += 1

    return call


@pytest.mark.exclusive  # "steady" means sleep's overshoot stays inside a 10% IQR: on a loaded CI node it did not
@pytest.mark.parametrize("spread", ["steady", "loaded"])
def test_a_slow_window_past_its_cap_waits_for_min_iters_unless_its_samples_say_the_node_is_loaded(spread):
    """Slow calls: the cap yields to `min_iters` so a slow model gets usable statistics; but samples spread as on a
    loaded node (half of them twice as slow) stop it at `loaded_min_iters` - more of them only take longer."""
    from advisor.harness.devices import open_device
    from advisor.harness.measurement.timing import time_side_by_side

    # 50 ms calls: a loaded CI machine's sleep overshoot (a few ms) stays well inside the 10% IQR a "steady" row
    # may show; 20 ms ones spread past it there and stopped at the loaded floor. Both below the 0.1 s of slow calls.
    backend = _sleeping([0.05] if spread == "steady" else [0.05, 0.09])
    policy = TimingPolicy(
        min_iters=24, loaded_min_iters=6, min_time_s=0.1, max_time_s=0.3, warmup_iters=1, block_time_s=0.001
    )
    window = time_side_by_side(
        {"backend": backend, "eager": _sleeping([0.05])}, (), open_device("cpu"), policy, lambda n: None
    )
    kept = min(len(window.samples["backend"]), len(window.samples["eager"]))
    if spread == "steady":
        assert kept >= 24, kept  # past the 0.3 s cap: one sample per callable per round, ~24 rounds
    else:
        assert 6 <= kept <= 9, kept  # the floor, reached after the cap (a round or two may pass the check)


@pytest.mark.parametrize("call_s", [0.02, 0.12])
def test_only_samples_shorter_than_a_tenth_of_a_second_get_a_settle_call_after_a_switch(call_s):
    """A switch costs a few ms: a 20 ms sample pays for one settle call per block, a 120 ms one does not (it would
    double the time per kept sample of a loaded node's slow eager calls for a <3% effect)."""
    from advisor.harness.devices import open_device
    from advisor.harness.measurement.timing import time_side_by_side

    calls = {"backend": 0, "eager": 0}

    def sleeper(name: str):
        def call() -> None:
            time.sleep(call_s)
            calls[name] += 1

        return call

    policy = TimingPolicy(min_iters=4, min_time_s=0.0, max_time_s=0.0, warmup_iters=1, block_time_s=0.001)
    fns = {name: sleeper(name) for name in calls}
    window = time_side_by_side(fns, (), open_device("cpu"), policy, lambda n: None)
    extra = {name: calls[name] - 1 - len(window.samples[name]) for name in calls}  # less the one warm-up call
    if call_s < 0.1:
        # blocks alternate A B, B A: every other block of each callable follows the other one's
        rounds = len(window.block_sizes["backend"])
        assert rounds >= 2 and all(extra[name] >= rounds // 2 for name in calls), (extra, rounds)
    else:
        assert extra == {"backend": 0, "eager": 0}, extra


@pytest.mark.parametrize("call_s", [0.02, 0.15])
def test_a_slow_loaded_window_past_its_cap_stops_at_five_samples_a_fast_one_at_its_floor(call_s):
    """A loaded node (half the samples twice as slow): past the cap, callables whose samples last 0.1 s or more stop
    at LOADED_SLOW_MIN_ITERS (each costs what a fast model's whole block does), faster ones at `loaded_min_iters`."""
    from advisor.harness.devices import open_device
    from advisor.harness.measurement.timing import LOADED_SLOW_MIN_ITERS, time_side_by_side

    policy = TimingPolicy(
        min_iters=24, loaded_min_iters=8, min_time_s=0.0, max_time_s=0.0, warmup_iters=1, block_time_s=0.001
    )
    fns = {"backend": _sleeping([call_s, 2 * call_s]), "eager": _sleeping([call_s])}
    window = time_side_by_side(fns, (), open_device("cpu"), policy, lambda n: None)
    kept = min(len(window.samples["backend"]), len(window.samples["eager"]))
    floor = LOADED_SLOW_MIN_ITERS if call_s >= 0.1 else 8
    assert floor <= kept <= floor + 1, kept  # one sample per callable per round: stops in the round it gets there


@pytest.mark.parametrize(("call_s", "calls"), [(0.01, 3), (0.15, 2)])
def test_a_slow_call_is_warmed_up_twice_a_fast_one_as_the_policy_says(call_s, calls):
    from advisor.harness.measurement.timing import _warm_up

    made = []

    def timer(call):  # noqa: ANN001, ANN202
        made.append(call())
        return call_s, None

    assert _warm_up(timer, lambda: "called", iters=3) == call_s
    assert len(made) == calls


def test_a_fast_callable_next_to_a_slow_one_takes_enough_per_block_to_reach_its_floor_with_the_slow_one():
    """ONNX Runtime's 43 ms calls next to a loaded eager's 500 ms: one sample per round made its floor of samples
    (`loaded_min_iters`) wait for as many eager calls; with loaded_min_iters / LOADED_SLOW_MIN_ITERS per block it
    gets there in the rounds eager needs for its own floor."""
    from advisor.harness.devices import open_device
    from advisor.harness.measurement.timing import LOADED_SLOW_MIN_ITERS, time_side_by_side

    policy = TimingPolicy(
        min_iters=3, loaded_min_iters=10, min_time_s=0.0, max_time_s=0.0, warmup_iters=1, block_time_s=0.001
    )
    fns = {"backend": _sleeping([0.01]), "eager": _sleeping([0.12])}
    window = time_side_by_side(fns, (), open_device("cpu"), policy, lambda n: None)
    assert window.block_sizes["eager"][0] == 1
    assert window.block_sizes["backend"][0] == 10 // LOADED_SLOW_MIN_ITERS
    both_slow = {"backend": _sleeping([0.11]), "eager": _sleeping([0.12])}
    window = time_side_by_side(both_slow, (), open_device("cpu"), policy, lambda n: None)
    assert window.block_sizes["backend"][0] == window.block_sizes["eager"][0] == 1


def test_an_extra_shapes_window_of_slow_steady_calls_stops_at_five_samples_past_its_cap():
    """An extra shape's row quotes a median: past the cap, five samples of calls of 0.1 s or more are enough even on
    a steady node (the first shape's window still waits for `min_iters`: see the test above)."""
    from advisor.harness.devices import open_device
    from advisor.harness.measurement.timing import LOADED_SLOW_MIN_ITERS, short_policy, time_side_by_side

    short = short_policy(TimingPolicy(max_time_s=0.4))  # a quarter of the cap, at least 0.2 s
    fns = {"backend": _sleeping([0.12]), "eager": _sleeping([0.12])}
    window = time_side_by_side(fns, (), open_device("cpu"), short, lambda n: None)
    kept = min(len(window.samples["backend"]), len(window.samples["eager"]))
    assert LOADED_SLOW_MIN_ITERS <= kept <= LOADED_SLOW_MIN_ITERS + 1, kept
    assert short.min_iters > LOADED_SLOW_MIN_ITERS  # faster calls still get their CI's samples


@pytest.mark.exclusive  # busy-waits of 2-6 ms: preempted on a loaded node, 6 ms calls took 6-50 ms and never raced
@pytest.mark.parametrize("backend_s, raced", [(6e-3, True), (1e-3, False)])
def test_a_window_racing_a_leader_stops_at_its_floor_once_clearly_behind(backend_s: float, raced: bool):
    """Racing (issue 46 item 2): eager's 2 ms calls beside an option 3x slower - its speedup interval lies wholly
    below the leader's 1.0x - stop at the floor of samples instead of the policy's 200; a faster one is timed in
    full."""
    from advisor.harness.devices import open_device
    from advisor.harness.measurement.timing import time_side_by_side

    policy = TimingPolicy(min_iters=200, min_time_s=0.0, max_time_s=2.0, warmup_iters=1, race_below=1.0)
    fns = {"backend": busy(backend_s), "eager": busy(2e-3)}
    window = time_side_by_side(fns, (), open_device("cpu"), policy, lambda n: None)
    assert window.raced is raced
    counts = [len(window.samples[name]) for name in ("backend", "eager")]
    assert all(n >= policy.loaded_min_iters for n in counts), counts
    if raced:  # a loaded node may cut the full window short too (past the cap), never below the floor
        assert all(n < policy.min_iters for n in counts), counts
