"""A zoo of real models through the advisor: inspect on all, analyze on a subset, against an independent truth.

Builds 22 models from torchvision, timm and transformers (random weights; exported as each library documents:
`torch.export.export`, some with a dynamic batch or sequence, some `torch.jit.trace`), then:

1. **inspect** every file with the CLI (`npu-advisor inspect FILE --json`, the sandboxed path a user takes): a pass
   is exit 0 and the parameter count equal to the one counted when the model was built.
2. **analyze** a subset (`npu-advisor analyze FILE --local --format json`, production context, target cpu, every
   backend): the time to recommendation is the time to the CLI's answer line (`ranked: Use ...`, printed once the
   options are ranked, before the recommended option's details: advisor.core.early_answer), the whole run's time
   is recorded beside it.
3. **truth**, independently of the advisor's code: in a fresh process the same options (eager, Inductor default,
   Inductor max-autotune, ONNX Runtime) built with plain torch/onnxruntime calls and timed with
   `torch.utils.benchmark` (same torch threads; ONNX Runtime's intra-op threads set to the same number, not
   spinning, as the advisor's snippet configures the session it recommends), rounds
   interleaved over the options so drift hits all of them; an option is accurate when its outputs match eager's
   (`allclose`, rtol 1e-2, atol 1e-3). Its wall time (compiles + timing) is what a careful engineer spends by hand.
4. **regret** = truth latency of the pick / truth latency of the fastest accurate option (the quiet run's truth
   when there is one: the deployment is judged at its real speed), and time to recommendation / truth wall time.
5. with `--cold-truth`, a second denominator: the same truth with each option in a process of its own and an empty
   Inductor cache (its wall time summed over the options). The one-process truth compiles max-autotune after
   default, reusing default's in-process caches (~5 s instead of ~20 s cold); the advisor must time each option's
   cold compile, the break-even's input, so this is the independent measurement of what it reports.
6. the **plain script** (unless `--no-plain-script`): the script an engineer would write by hand, the truth's code with
   5 interleaved rounds of at least 0.3 s (PLAIN_ROUNDS, PLAIN_MIN_RUN_TIME), reported in a table of its own: time
   to the ranked answer / the script's wall time, and regret by the script's own numbers.

Every analysis runs quiet and then busy: one `while True` process per core, each in a session of its own (as
another job on the node would be), running through both the analysis and its truth.

Needs the `zoo` extra (`pip install -e '.[torch,export,quant,zoo]'`, which keeps torch 2.13.0), e.g. in .venv-zoo.
Run: `.venv-zoo/bin/python benchmarks/zoo.py [--dir data/zoo] [--analyze resnet18,...] [--loads quiet,busy]
[--via URL --tag T]`. Models are built once into --dir and reused. `--via` runs each analysis through a team server
(`npu-advisor analyze --server URL --tag T`, its worker measures), so /suites/T shows them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != _HERE)]

CLI = str(Path(sys.executable).with_name("npu-advisor"))
PRODUCTION = ["--stage", "production", "--model-changes", "frozen", "--target", "cpu"]
TRUTH_OPTIONS = ("eager:default", "inductor:default", "inductor:max-autotune", "onnxruntime:default")
DEFAULT_ANALYZE = "resnet18,mobilenet_v3_small,distilbert,gpt2"
# The plain script an engineer writes by hand (issue 46's denominator): the same options built once in one process,
# torch.utils.benchmark in 5 interleaved rounds of at least 0.3 s, nothing else.
PLAIN_ROUNDS, PLAIN_MIN_RUN_TIME = 5, 0.3


# ---------------------------------------------------------------------------------------------- the models
@dataclass(frozen=True)
class ZooModel:
    name: str
    library: str
    build: Callable[[], tuple[Any, tuple, dict]]  # -> (module in eval mode, args, kwargs)
    # export | export-dynamic | export-strict (non-strict export leaves a node its serializer refuses) | jit.trace
    saved_as: str = "export"
    dynamic: tuple[str, ...] = ()  # export-dynamic: the dims named dynamic ("batch", "seq")


def _import_torchvision() -> Any:
    """torchvision 0.28.0's only wheel here is CUDA-linked: its C++ ops (nms, roi_align) do not load on a CPU node,
    and registering their fake kernels then fails at import. The classification models never call them, so the two
    registration modules are skipped (timm imports torchvision too)."""
    import types

    for name in ("torchvision._meta_registrations", "torchvision._autograd_registrations"):
        sys.modules.setdefault(name, types.ModuleType(name))
    import torchvision

    return torchvision


def _vision(factory: str, batch: int = 1, **kwargs: Any) -> Callable[[], tuple[Any, tuple, dict]]:
    def build() -> tuple[Any, tuple, dict]:
        import torch

        torchvision = _import_torchvision()
        model = getattr(torchvision.models, factory)(weights=None, **kwargs).eval()
        return model, (torch.randn(batch, 3, 224, 224),), {}

    return build


def _timm(name: str, batch: int = 1) -> Callable[[], tuple[Any, tuple, dict]]:
    def build() -> tuple[Any, tuple, dict]:
        import torch

        _import_torchvision()
        import timm

        model = timm.create_model(name, pretrained=False).eval()
        return model, (torch.randn(batch, *model.default_cfg["input_size"]),), {}

    return build


def _text(config_name: str, model_name: str, seq: int = 32, batch: int = 1, **config: Any) -> Callable:
    def build() -> tuple[Any, tuple, dict]:
        import torch

        _import_torchvision()
        import transformers

        cfg = getattr(transformers, config_name)(**config)
        model = getattr(transformers, model_name)(cfg).eval()
        ids = torch.randint(0, cfg.vocab_size, (batch, seq))
        return model, (), {"input_ids": ids, "attention_mask": torch.ones(batch, seq, dtype=torch.long)}

    return build


def _hf_vit() -> tuple[Any, tuple, dict]:
    import torch

    _import_torchvision()
    import transformers

    cfg = transformers.ViTConfig(hidden_size=192, num_hidden_layers=6, num_attention_heads=3, intermediate_size=768)
    return transformers.ViTModel(cfg).eval(), (), {"pixel_values": torch.randn(1, 3, 224, 224)}


MODELS: tuple[ZooModel, ...] = (
    ZooModel("resnet18", "torchvision", _vision("resnet18", batch=2), "export-dynamic", ("batch",)),
    ZooModel("resnet50", "torchvision", _vision("resnet50")),
    ZooModel("mobilenet_v3_small", "torchvision", _vision("mobilenet_v3_small")),
    ZooModel("efficientnet_b0", "torchvision", _vision("efficientnet_b0")),
    ZooModel("densenet121", "torchvision", _vision("densenet121"), "jit.trace"),
    ZooModel("shufflenet_v2_x1_0", "torchvision", _vision("shufflenet_v2_x1_0")),
    ZooModel("squeezenet1_0", "torchvision", _vision("squeezenet1_0"), "jit.trace"),
    ZooModel("convnext_tiny", "torchvision", _vision("convnext_tiny")),
    ZooModel("regnet_y_400mf", "torchvision", _vision("regnet_y_400mf", batch=2), "export-dynamic", ("batch",)),
    ZooModel("mnasnet0_5", "torchvision", _vision("mnasnet0_5")),
    ZooModel("timm_vit_tiny", "timm", _timm("vit_tiny_patch16_224")),
    ZooModel("timm_deit_tiny", "timm", _timm("deit_tiny_patch16_224"), "jit.trace"),
    ZooModel("timm_convnext_atto", "timm", _timm("convnext_atto")),
    ZooModel("timm_mobilenetv3_small", "timm", _timm("mobilenetv3_small_100", batch=2), "export-dynamic", ("batch",)),
    ZooModel("timm_efficientnet_lite0", "timm", _timm("efficientnet_lite0")),
    ZooModel("timm_resnet26d", "timm", _timm("resnet26d"), "jit.trace"),
    ZooModel(
        "distilbert",
        "transformers",
        _text("DistilBertConfig", "DistilBertModel", batch=2),
        "export-dynamic",
        ("batch",),
    ),
    ZooModel(
        "bert_small",
        "transformers",
        _text(
            "BertConfig",
            "BertModel",
            hidden_size=256,
            num_hidden_layers=4,
            num_attention_heads=4,
            intermediate_size=1024,
        ),
        "export-dynamic",
        ("seq",),
    ),
    ZooModel("gpt2", "transformers", _text("GPT2Config", "GPT2Model", use_cache=False), "export-strict"),
    ZooModel(
        "llama_tiny",
        "transformers",
        _text(
            "LlamaConfig",
            "LlamaModel",
            hidden_size=256,
            intermediate_size=688,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=8000,
            use_cache=False,
        ),
        "export-strict",
    ),
    ZooModel(
        "roberta_small",
        "transformers",
        _text(
            "RobertaConfig",
            "RobertaModel",
            hidden_size=256,
            num_hidden_layers=4,
            num_attention_heads=4,
            intermediate_size=1024,
        ),
        "jit.trace",
    ),
    ZooModel("hf_vit_small", "transformers", _hf_vit),
)


def _save(entry: ZooModel, model: Any, args: tuple, kwargs: dict, stem: Path) -> Path:
    """Save as the library documents: torch.export (dims named dynamic where asked) or torch.jit.trace."""
    import torch

    if entry.saved_as == "jit.trace":
        inputs = args or tuple(kwargs.values())
        traced = torch.jit.trace(model, inputs, strict=False) if kwargs else torch.jit.trace(model, inputs)
        path = stem.with_suffix(".pt")
        torch.jit.save(traced, str(path))
        torch.save(tuple(inputs), str(stem.with_suffix(".inputs.pt")))
        return path
    dynamic_shapes = None
    if entry.saved_as == "export-dynamic":
        batch = torch.export.Dim("batch", min=1, max=64)
        seq = torch.export.Dim("seq", min=2, max=512)
        spec = {0: batch} if entry.dynamic == ("batch",) else {1: seq}
        dynamic_shapes = tuple(spec for _ in args) if args else dict.fromkeys(kwargs, spec)
    strict = entry.saved_as == "export-strict"
    program = torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict)
    path = stem.with_suffix(".pt2")
    torch.export.save(program, str(path))
    torch.save((args, kwargs), str(stem.with_suffix(".inputs.pt")))
    return path


def build_all(directory: Path, names: set[str] | None) -> dict[str, dict]:
    """Build and save each model not already in the manifest; the manifest (parameter counts, files, errors)."""
    import torch

    manifest_path = directory / "manifest.json"
    manifest: dict[str, dict] = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    for entry in MODELS:
        if (names and entry.name not in names) or (entry.name in manifest and "file" in manifest[entry.name]):
            continue
        started = time.perf_counter()
        try:
            model, args, kwargs = entry.build()
            params = sum(p.numel() for p in model.parameters())
            path = _save(entry, model, args, kwargs, directory / entry.name)
            manifest[entry.name] = {
                "library": entry.library,
                "saved_as": entry.saved_as,
                "file": path.name,
                "parameters": params,
                "size_mb": round(path.stat().st_size / 2**20, 1),
                "build_s": round(time.perf_counter() - started, 1),
            }
        except Exception as exc:  # noqa: BLE001 - a model that cannot be built is a row, not the end of the run
            manifest[entry.name] = {"library": entry.library, "error": f"{type(exc).__name__}: {exc}"[:400]}
        print(f"built {entry.name}: {manifest[entry.name]}", file=sys.stderr, flush=True)
        manifest_path.write_text(json.dumps(manifest, indent=1))
    return manifest


# ---------------------------------------------------------------------------------------------- inspect
def inspect_all(directory: Path, manifest: dict[str, dict]) -> dict[str, dict]:
    rows = {}
    order = [entry.name for entry in MODELS]
    for name, built in sorted(manifest.items(), key=lambda item: order.index(item[0]) if item[0] in order else 99):
        if "file" not in built:
            rows[name] = {"ok": False, "why": "not built: " + built.get("error", "?")}
            continue
        path = directory / built["file"]
        extra = ["--inputs", str(path.with_suffix(".inputs.pt"))] if built["saved_as"] == "jit.trace" else []
        started = time.perf_counter()
        done = subprocess.run(
            [CLI, "inspect", str(path), "--json", *extra], capture_output=True, text=True, timeout=900
        )
        wall = time.perf_counter() - started
        if done.returncode != 0:
            rows[name] = {"ok": False, "why": (done.stderr or done.stdout).strip()[-300:], "wall_s": wall}
            continue
        report = json.loads(done.stdout)
        counted = (report.get("parameters") or {}).get("count")
        rows[name] = {
            "ok": counted == built["parameters"],
            "why": "" if counted == built["parameters"] else f"parameters {counted} != {built['parameters']}",
            "wall_s": wall,
            "flops": report.get("flops"),
            "dynamic_dims": len(report.get("dynamic_dims") or []),
            "graph_breaks": (report.get("graph_breaks") or {}).get("count")
            if isinstance(report.get("graph_breaks"), dict)
            else report.get("graph_breaks"),
        }
        print(f"inspected {name}: {rows[name]}", file=sys.stderr, flush=True)
    return rows


# ---------------------------------------------------------------------------------------------- truth
def truth(path: str, inputs_path: str, options: list[str], rounds: int, min_run_time: float) -> dict[str, Any]:
    """The independent measurement (runs in its own process): plain torch/onnxruntime calls, torch.utils.benchmark."""

    import torch

    threads = torch.get_num_threads()
    started = time.perf_counter()
    if path.endswith(".pt2"):
        # transformers' output classes are registered with pytree without a serialized name, so their programs
        # load only with the advisor's stand-ins for those containers (loading is not what is timed here)
        from advisor.harness import custom_op_stubs, pytree_outputs

        pytree_outputs.register_stand_ins(custom_op_stubs.read_program_json(path))
        module = torch.export.load(path).module()
        args, kwargs = torch.load(inputs_path, weights_only=True)
    else:
        module = torch.jit.load(path)
        args, kwargs = torch.load(inputs_path, weights_only=True), {}
    args = tuple(args)
    with torch.no_grad():
        reference = module(*args, **kwargs)
    runners: dict[str, Callable[[], Any]] = {}
    out: dict[str, Any] = {"threads": threads, "options": {}}
    scratch = tempfile.mkdtemp(prefix="zoo-truth-")
    for option in options:
        option_started = time.perf_counter()
        try:
            runner = _build_option(option, module, args, kwargs, threads, scratch)
            with torch.no_grad():
                result = runner()
                result = runner()  # a second call: Inductor's and ORT's first-call work is not timed
            accurate = _allclose(result, reference)
            runners[option] = runner
            out["options"][option] = {"accurate": accurate, "build_s": time.perf_counter() - option_started}
        except Exception as exc:  # noqa: BLE001 - an option that fails is recorded, like the advisor does
            out["options"][option] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    medians = interleaved_round_medians(runners, rounds, min_run_time, threads)
    for option, values in medians.items():
        out["options"][option]["median_ms"] = statistics.median(values)
        out["options"][option]["round_medians_ms"] = [round(v, 4) for v in values]
    out["wall_s"] = time.perf_counter() - started
    return out


def interleaved_round_medians(
    runners: dict[str, Callable[[], Any]], rounds: int, min_run_time: float, threads: int
) -> dict[str, list[float]]:
    """Each runner's median per round (ms): `rounds` rounds over all runners in turn, so that drift hits every one,
    each a `torch.utils.benchmark` blocked_autorange of at least `min_run_time` s, under no_grad."""
    import torch
    import torch.utils.benchmark as tb

    medians: dict[str, list[float]] = {name: [] for name in runners}
    with torch.no_grad():
        for _ in range(rounds):
            for name, runner in runners.items():
                timer = tb.Timer(stmt="runner()", globals={"runner": runner}, num_threads=threads)
                medians[name].append(timer.blocked_autorange(min_run_time=min_run_time).median * 1e3)
    return medians


def _build_option(option: str, module: Any, args: tuple, kwargs: dict, threads: int, scratch: str) -> Callable:
    import torch

    if option == "eager:default":
        return lambda: module(*args, **kwargs)
    if option.startswith("inductor:"):
        mode = option.split(":", 1)[1]
        compiled = torch.compile(module, mode=None if mode == "default" else mode)
        return lambda: compiled(*args, **kwargs)
    if option == "onnxruntime:default":
        import onnxruntime

        onnx_path = os.path.join(scratch, "model.onnx")
        torch.onnx.export(module, args, onnx_path, kwargs=kwargs or None, dynamo=True)
        session_options = onnxruntime.SessionOptions()
        session_options.intra_op_num_threads = threads
        # as the advisor's snippet configures the session it recommends (advisor/core/snippets.py): ORT's default,
        # spinning threads, timed 1.6-1.8x slower under two busy loops (benchmarks/ort_spinning.py)
        session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = onnxruntime.InferenceSession(onnx_path, session_options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        flat = [t.numpy() for t in (*args, *kwargs.values())]
        feed = dict(zip(names, flat, strict=False))
        return lambda: session.run(None, feed)
    raise ValueError(f"no truth for {option}")


def _allclose(result: Any, reference: Any) -> bool:
    import torch

    def tensors(value: Any) -> list[torch.Tensor]:
        if isinstance(value, torch.Tensor):
            return [value]
        if hasattr(value, "shape") and hasattr(value, "dtype"):  # numpy from onnxruntime
            return [torch.from_numpy(value)]
        if isinstance(value, dict) or hasattr(value, "to_tuple"):
            value = value.to_tuple() if hasattr(value, "to_tuple") else tuple(value.values())
        if isinstance(value, list | tuple):
            return [t for item in value for t in tensors(item)]
        return []

    got, want = tensors(result), tensors(reference)
    want = [w for w in want if w.is_floating_point()]
    got = [g for g in got if g.is_floating_point()]
    return (
        bool(got)
        and len(got) >= len(want)
        and all(torch.allclose(g.float(), w.float(), rtol=1e-2, atol=1e-3) for g, w in zip(got, want, strict=False))
    )


# ---------------------------------------------------------------------------------------------- load and runs
class BusyLoad:
    """One busy loop per core, each in a session of its own (as another job's processes would be)."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self.children: list[subprocess.Popen] = []

    def __enter__(self) -> BusyLoad:
        for _ in range(self.processes):
            self.children.append(subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True))
        time.sleep(2)
        return self

    def __exit__(self, *_: object) -> None:
        for child in self.children:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()


@dataclass
class _Exited:
    returncode: int
    tail: str
    answer_line: str | None  # the CLI's early answer (advisor.core.early_answer), when it printed one
    timeline: list[tuple[float, str]]  # (seconds from the start, stderr line) up to the early answer


def where_the_seconds_go(timeline: list[tuple[float, str]]) -> dict[str, float]:
    """The seconds before the early answer by phase, from the CLI's progress lines (`  inductor:default compiling`,
    ...): `inspect` until measuring starts, then per option of the first pass its compile (loading to timing: load,
    float64 reference, compile, accuracy) and its timing (timing to done: the timed window; eager's profile, once
    here, comes after the answer now, in the details), then the re-measure rounds (from the first line that repeats
    one of the first pass's)."""
    phases: dict[str, float] = {}
    marks: dict[tuple[str, str], float] = {}  # the first pass's: a re-measure round's lines are counted apart
    rounds_from: float | None = None
    for at, line in timeline:
        if line.startswith("measuring on"):
            phases["inspect"] = at
        words = line.split()
        if len(words) == 2 and ":" in words[0]:
            if (words[0], words[1]) in marks and rounds_from is None:
                rounds_from = at
            if rounds_from is None:
                marks[(words[0], words[1])] = at
    for (option, stage), at in marks.items():
        if stage == "timing" and (option, "loading") in marks:
            phases[f"{option} compile"] = at - marks[(option, "loading")]
            if (option, "done") in marks:
                phases[f"{option} timing"] = marks[(option, "done")] - at
    if rounds_from is not None and timeline:
        phases["re-measure rounds"] = timeline[-1][0] - rounds_from
    return phases


def _run_timing_the_answer(command: list[str], started: float, timeout_s: float = 3600) -> tuple[float | None, _Exited]:
    """Run the CLI (killed past `timeout_s`), reading its stderr as it comes: seconds from `started` to its early
    answer line (None when it printed none) and how it exited (the last stderr lines)."""
    from advisor.core.early_answer import RANKED_PREFIX

    answered: float | None = None
    line_seen: str | None = None
    tail: list[str] = []
    timeline: list[tuple[float, str]] = []
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as child:
        watchdog = threading.Timer(timeout_s, child.kill)
        watchdog.start()
        assert child.stderr is not None
        for line in child.stderr:
            if answered is None:
                timeline.append((time.perf_counter() - started, line.strip()))
            if answered is None and line.startswith(RANKED_PREFIX):
                answered, line_seen = time.perf_counter() - started, line.strip()
            tail = [*tail[-20:], line]
        watchdog.cancel()
    return answered, _Exited(child.returncode, "".join(tail).strip(), line_seen, timeline)


def analyse(path: Path, built: dict, server: str = "", tag: str = "") -> dict[str, Any]:
    """`npu-advisor analyze` as a user runs it: here (--local), or through a team server's worker with a suite tag
    (--server URL --tag T --force: measured again even when the server already has the file)."""
    out = path.with_suffix(".analysis.json")
    extra = ["--inputs", str(path.with_suffix(".inputs.pt"))] if built["saved_as"] == "jit.trace" else []
    where = ["--server", server, "--tag", tag, "--force"] if server else ["--local"]
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    answered_s, exited = _run_timing_the_answer(
        [CLI, "analyze", str(path), *where, *PRODUCTION, *extra, "--format", "json", "--out", str(out)], started
    )
    wall = time.perf_counter() - started
    if not out.exists() or exited.returncode != 0:
        return {"ok": False, "why": exited.tail[-400:], "wall_s": wall}
    report = json.loads(out.read_text())
    rec = report["recommendation"]
    from advisor.core.early_answer import RANKED_PREFIX
    from advisor.core.report import headline

    # the early answer must be the report's: the details it came before do not change the pick
    early_same = exited.answer_line is None or exited.answer_line.startswith(
        f"{RANKED_PREFIX} {headline(rec, report.get('context') or {})} ("
    )
    rows = {
        f"{r['backend']}:{r['mode']}": {
            "status": r["status"],
            "median_ms": (r.get("latency") or {}).get("median_ms"),
            "accurate": (r.get("accuracy") or {}).get("passed"),
            "speedup_ci": r.get("speedup_ci"),
            "samples": (r.get("latency") or {}).get("n"),
            # racing: it stopped being timed behind the leader (its first window or a re-measure round left it out),
            # or its first window stopped clearly ahead of the others
            "window_stopped": "behind" if r.get("eliminated") else "ahead" if r.get("stopped_ahead") else None,
        }
        for r in report["measurements"]["measurements"]
    }
    return {
        "ok": True,
        "wall_s": wall,
        # the time to recommendation: the CLI's early answer line (advisor.core.early_answer), else the whole run
        "answer_s": answered_s if answered_s is not None else wall,
        "answer_line": exited.answer_line,
        "early_answer_same": early_same,
        "pick": f"{rec['backend']}:{rec['mode']}",
        "confidence": rec.get("confidence"),
        "summary": rec.get("summary"),
        "rows": rows,
        "load_before": load_before,
        "environment_load": report["measurements"]["environment"].get("load"),
        "before_answer": where_the_seconds_go(exited.timeline),
    }


def measure_truth(path: Path, options: list[str], rounds: int, min_run_time: float) -> dict[str, Any]:
    started = time.perf_counter()
    cold = tempfile.mkdtemp(prefix="zoo-inductor-")  # compiles start cold, as the advisor's own children do
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--truth-of",
            str(path),
            "--options",
            ",".join(options),
            "--rounds",
            str(rounds),
            "--min-run-time",
            str(min_run_time),
        ],
        capture_output=True,
        text=True,
        timeout=3600,
        env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cold},
    )
    wall = time.perf_counter() - started
    shutil.rmtree(cold, ignore_errors=True)
    if done.returncode != 0:
        return {"ok": False, "why": done.stderr.strip()[-400:], "process_wall_s": wall}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {"ok": True, "process_wall_s": wall, **result}


def measure_cold_truth(path: Path, options: list[str], rounds: int, min_run_time: float) -> dict[str, Any]:
    """The truth with each option alone in a fresh process and an empty Inductor cache: every compile is cold."""
    walls: dict[str, float] = {}
    for option in options:
        one = measure_truth(path, [option], rounds, min_run_time)
        if not one.get("ok"):
            return {"ok": False, "why": f"{option}: {one.get('why', '')}"[:400]}
        walls[option] = round(one["process_wall_s"], 1)
    return {"ok": True, "process_wall_s": sum(walls.values()), "per_option_s": walls}


def regret(pick: str, judged_by: dict[str, Any]) -> float | None:
    options = judged_by.get("options") or {}
    accurate = [o["median_ms"] for o in options.values() if o.get("accurate") and "median_ms" in o]
    chosen = (options.get(pick) or {}).get("median_ms")
    return chosen / min(accurate) if accurate and chosen else None


# ---------------------------------------------------------------------------------------------- report
def print_plain_script_table(runs: list[dict]) -> None:
    """Time to the ranked answer against the plain script's wall time, and regret by the script's own numbers."""
    plain_runs = [run for run in runs if (run.get("plain_script") or {}).get("ok")]
    if not plain_runs:
        return
    print("\n### against the plain script (one process, 5 interleaved rounds of >= 0.3 s)\n")
    print("| model | load | pick | script's fastest accurate | regret by the script | answer s | script s | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for run in plain_runs:
        analysis, plain = run["analysis"], run["plain_script"]
        accurate = {k: v["median_ms"] for k, v in plain["options"].items() if v.get("accurate") and "median_ms" in v}
        best = min(accurate, key=accurate.get) if accurate else "-"
        r = regret(analysis.get("pick", ""), plain) if analysis["ok"] else None
        answer_s = analysis.get("answer_s", analysis["wall_s"])
        ratio = answer_s / plain["process_wall_s"] if analysis["ok"] else None
        print(
            f"| {run['model']} | {run['load']} | {analysis.get('pick', 'FAILED')} | {best} | "
            f"{f'{r:.2f}' if r else '-'} | {answer_s:.0f} | {plain['process_wall_s']:.0f} | "
            f"{f'{ratio:.2f}' if ratio else '-'} |"
        )


def print_seconds_table(runs: list[dict]) -> None:
    """Where each second before the early answer went, per analysis (from its progress lines)."""
    timed = [run for run in runs if run["analysis"].get("before_answer")]
    if not timed:
        return
    print("\n### where the seconds before `ranked:` go (s)\n")
    for run in timed:
        phases = run["analysis"]["before_answer"]
        parts = ", ".join(f"{name} {seconds:.1f}" for name, seconds in phases.items())
        print(f"- {run['model']} ({run['load']}), answer {run['analysis']['answer_s']:.0f} s: {parts}")


def print_tables(inspected: dict[str, dict], manifest: dict[str, dict], runs: list[dict]) -> None:
    passed = sum(1 for row in inspected.values() if row["ok"])
    print(f"## inspect: {passed} of {len(inspected)} pass\n")
    print("| model | library | saved as | parameters | MiB | inspect s | result |")
    print("|---|---|---|---|---|---|---|")
    for name, row in inspected.items():
        built = manifest.get(name, {})
        print(
            f"| {name} | {built.get('library', '?')} | {built.get('saved_as', '-')} | {built.get('parameters', '-')} "
            f"| {built.get('size_mb', '-')} | {row.get('wall_s', 0):.1f} | {'ok' if row['ok'] else row['why']} |"
        )
    if not runs:
        return
    ok = sum(1 for run in runs if run["analysis"]["ok"])
    print(f"\n## analyze (production, target cpu): {ok} of {len(runs)} pass\n")
    print(
        "| model | load | pick (confidence) | fastest accurate in truth | regret (by) | answer s | whole analysis s "
        "| truth s | ratio | cold truth s | ratio to cold | load avg before |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        analysis, judged = run["analysis"], run["judged_by"]
        fastest = "-"
        if judged.get("ok"):
            accurate = {
                k: v["median_ms"] for k, v in judged["options"].items() if v.get("accurate") and "median_ms" in v
            }
            if accurate:
                best = min(accurate, key=accurate.get)
                fastest = f"{best} {accurate[best]:.2f} ms"
        r = regret(analysis.get("pick", ""), judged) if analysis["ok"] and judged.get("ok") else None
        judged_by = "quiet truth" if run.get("judged_by_quiet") else "own truth"
        # time to recommendation: to the answer (the CLI's early answer line; runs recorded before it had one: the
        # whole analysis)
        answer_s = analysis.get("answer_s", analysis["wall_s"])
        truth_wall = run["truth"].get("process_wall_s")
        ratio = answer_s / truth_wall if analysis["ok"] and truth_wall else None
        cold_wall = (run.get("cold_truth") or {}).get("process_wall_s")
        cold_ratio = answer_s / cold_wall if analysis["ok"] and cold_wall else None
        print(
            f"| {run['model']} | {run['load']} | "
            f"{analysis.get('pick', 'FAILED: ' + analysis.get('why', '')[:80])} ({analysis.get('confidence', '-')})"
            f"{'' if analysis.get('early_answer_same', True) else ' EARLY ANSWER DIFFERED'} | "
            f"{fastest} | {f'{r:.2f}' if r else '-'} ({judged_by}) | "
            f"{answer_s:.0f} | {analysis['wall_s']:.0f} | "
            f"{f'{truth_wall:.0f}' if truth_wall else '-'} | {f'{ratio:.2f}' if ratio else '-'} | "
            f"{f'{cold_wall:.0f}' if cold_wall else '-'} | {f'{cold_ratio:.2f}' if cold_ratio else '-'} | "
            f"{analysis.get('load_before', 0):.2f} |"
        )
    print_plain_script_table(runs)
    print_seconds_table(runs)
    print("\nTruth latencies (median of round medians, ms) and the advisor's own numbers:\n")
    for run in runs:
        t = run["truth"]
        if not t.get("ok"):
            print(f"- {run['model']} ({run['load']}): truth failed: {t.get('why', '')[:200]}")
            continue
        cells = []
        for option, row in t["options"].items():
            mine = (run["analysis"].get("rows") or {}).get(option, {})
            shown = f"{row['median_ms']:.2f}" if "median_ms" in row else row.get("error", "?")[:60]
            advisor = f"{mine['median_ms']:.2f}" if mine.get("median_ms") else mine.get("status", "-")
            cells.append(
                f"{option} truth {shown}{'' if row.get('accurate', True) else ' (inaccurate)'} / advisor {advisor}"
            )
        print(f"- {run['model']} ({run['load']}, {t['threads']} threads): " + "; ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=ROOT / "data" / "zoo")
    parser.add_argument("--only", default="", help="build/inspect only these models (comma-separated)")
    parser.add_argument("--analyze", default=DEFAULT_ANALYZE, help="models to analyze ('' for none)")
    parser.add_argument("--loads", default="quiet,busy")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-run-time", type=float, default=0.5)
    parser.add_argument("--skip-inspect", action="store_true")
    parser.add_argument("--via", default="", help="a team server URL: analyse there (its worker measures), --tag")
    parser.add_argument("--tag", default="zoo", help="with --via: the model suite the analyses belong to")
    parser.add_argument("--json", type=Path, help="write every number here too")
    parser.add_argument(
        "--analyses-from", type=Path, help="an earlier run's --json: reuse its analyses, measure the truth again"
    )
    parser.add_argument(
        "--quiet-truth", type=Path, help="an earlier run's --json: judge this run's picks by its quiet truth"
    )
    parser.add_argument(
        "--cold-truth", action="store_true", help="also time the truth with each option alone, compiled cold"
    )
    parser.add_argument(
        "--no-plain-script", action="store_true", help="skip the plain script (5 rounds of >= 0.3 s, one process)"
    )
    parser.add_argument("--truth-of", help=argparse.SUPPRESS)
    parser.add_argument("--options", default=",".join(TRUTH_OPTIONS), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.truth_of:  # the child of measure_truth
        path = args.truth_of
        inputs = str(Path(path).with_suffix(".inputs.pt"))
        print(json.dumps(truth(path, inputs, args.options.split(","), args.rounds, args.min_run_time)))
        return

    names = {n for n in args.only.split(",") if n} or None
    manifest = build_all(args.dir, names)
    inspected = (
        {}
        if args.skip_inspect
        else inspect_all(args.dir, {k: v for k, v in manifest.items() if not names or k in names})
    )
    runs: list[dict] = []
    quiet_truth: dict[str, dict] = {}
    reused: dict[tuple[str, str], dict] = {}
    if args.analyses_from:
        reused = {(r["model"], r["load"]): r["analysis"] for r in json.loads(args.analyses_from.read_text())["runs"]}
    if args.quiet_truth:
        earlier = json.loads(args.quiet_truth.read_text())["runs"]
        quiet_truth = {run["model"]: run["truth"] for run in earlier if run["load"] == "quiet" and run["truth"]["ok"]}
    for load in [x for x in args.loads.split(",") if x]:
        for name in [n for n in args.analyze.split(",") if n]:
            built = manifest.get(name, {})
            if "file" not in built:
                continue
            path = args.dir / built["file"]
            with BusyLoad(os.cpu_count() or 1) if load == "busy" else _Quiet():
                analysis = reused.get((name, load)) or analyse(path, built, args.via, args.tag)
                measured = measure_truth(path, list(TRUTH_OPTIONS), args.rounds, args.min_run_time)
                cold = (
                    measure_cold_truth(path, list(TRUTH_OPTIONS), args.rounds, args.min_run_time)
                    if args.cold_truth
                    else None
                )
                plain = (
                    measure_truth(path, list(TRUTH_OPTIONS), PLAIN_ROUNDS, PLAIN_MIN_RUN_TIME)
                    if not args.no_plain_script
                    else None
                )
            if load == "quiet" and measured.get("ok"):
                quiet_truth[name] = measured
            runs.append(
                {
                    "model": name,
                    "load": load,
                    "analysis": analysis,
                    "truth": measured,
                    "cold_truth": cold,
                    "plain_script": plain,
                    "judged_by": quiet_truth.get(name, measured),
                    "judged_by_quiet": name in quiet_truth,
                }
            )
            answered = (
                f"in {analysis['answer_s']:.0f} s (report {analysis['wall_s']:.0f} s)"
                if analysis["ok"]
                else (f"FAILED after {analysis['wall_s']:.0f} s")
            )
            print(
                f"analysed {name} ({load}): pick {analysis.get('pick')} {answered}; "
                f"truth {measured.get('process_wall_s', 0):.0f} s"
                + (f", cold truth {cold.get('process_wall_s', 0):.0f} s" if cold else ""),
                file=sys.stderr,
                flush=True,
            )
    print(
        f"\nnode: {os.cpu_count()} cores; torch threads as each process defaults; load average now "
        f"{os.getloadavg()[0]:.2f}\n"
    )
    print_tables(inspected, manifest, runs)
    if args.json:
        args.json.write_text(json.dumps({"manifest": manifest, "inspect": inspected, "runs": runs}, indent=1))


class _Quiet:
    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *_: object) -> None:
        return None


if __name__ == "__main__":
    main()
