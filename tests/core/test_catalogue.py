"""The backend catalogue (advisor.core.catalogue) and the snippets (advisor.core.snippets): one set of facts that
the harness's backend classes, the decision engine and the API server all read, and snippets that do not change
with where they are written."""

from __future__ import annotations

import pytest
from fastapi import HTTPException

from advisor.core import catalogue, snippets
from advisor.core.decision import decide
from advisor.harness.backends import BUILTIN_BACKENDS, all_backends, get_backend
from app.intake import _check_backend_names
from tests.support.fixtures_decide import inspection, measurement, run

DEVICES = ("cpu", "cuda", "npu")


# ---------------------------------------------------------------- the backend classes agree with the catalogue
def test_the_registry_lists_the_catalogue_backends_in_its_order() -> None:
    assert list(BUILTIN_BACKENDS) == catalogue.names() == [b.name for b in all_backends()]


@pytest.mark.parametrize("name", catalogue.names())
def test_every_backend_class_agrees_with_its_catalogue_entry(name: str) -> None:
    backend, entry = get_backend(name), catalogue.info(name)
    assert (backend.name, backend.family, backend.devices, backend.modes) == (
        entry.name,
        entry.family,
        entry.devices,
        entry.modes,
    )
    assert backend.needs_own_process == entry.needs_own_process
    assert entry.default_mode in entry.modes
    for device in DEVICES:
        assert backend.modes_for(device) == entry.modes_for(device)


def test_cuda_graphs_are_an_inductor_mode_on_cuda_only() -> None:
    inductor = catalogue.info("inductor")
    assert inductor.modes_for("cuda") == ("default", "max-autotune", "reduce-overhead")
    assert inductor.modes_for("npu") == ("default", "max-autotune")
    assert inductor.modes_for("cpu") == ("default", "max-autotune", "pt2e-int8")  # the int8 mode is CPU-only
    assert inductor.unnamed_modes_for("cpu") == ("default", "max-autotune")  # and measured only when named


def test_unknown_backends_get_no_assumed_facts() -> None:
    assert catalogue.get("mystery") is None and catalogue.devices_of("mystery") is None
    assert catalogue.display_name("mystery") == "mystery"
    assert catalogue.simplicity_rank("mystery") > max(e.simplicity_rank for e in catalogue.BACKENDS.values())
    with pytest.raises(KeyError, match="known: eager, inductor"):
        catalogue.info("mystery")


def test_option_labels_are_spelled_one_way() -> None:
    assert catalogue.option_label("inductor", "max-autotune") == "inductor:max-autotune"
    assert catalogue.option_label("eager", None) == "eager:default"
    assert catalogue.option_label(None, None) == "unknown:default"
    assert catalogue.option_label("eager", "default", short=True) == "eager"
    assert catalogue.option_label("torchair", "npugraph_ex", short=True) == "torchair:npugraph_ex"


# ---------------------------------------------------------------- the server knows the names without the harness
def test_the_server_rejects_unknown_backends_naming_the_catalogue() -> None:
    _check_backend_names(["eager", "tensorrt"])  # known: no error
    with pytest.raises(HTTPException) as raised:
        _check_backend_names(["eager", "indcutor"])
    message = raised.value.detail[0]["message"]
    assert message == f"unknown backend(s) indcutor; known: {', '.join(catalogue.names())}"
    with pytest.raises(HTTPException) as raised:
        _check_backend_names(["inductor:max-autotune"])
    assert "modes are not chosen here" in raised.value.detail[0]["message"]


# ---------------------------------------------------------------- snippets
EAGER_INFERENCE = "# eager PyTorch: no compilation\nwith torch.no_grad():\n    output = model(*inputs)\n"
INDUCTOR_MAX_AUTOTUNE = (
    "import os\n"
    "# Keep compiled kernels between runs (set before the first compile):\n"
    'os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", "/path/to/inductor-cache")\n'
    "import torch\n"
    "\n"
    'model = torch.compile(model, mode="max-autotune")\n'
    "with torch.no_grad():\n"
    "    output = model(*inputs)  # first call compiles\n"
)
TORCHAIR_GE = (
    "import torch\n"
    "import torch_npu\n"
    "import torchair\n"
    "from torchair import CompilerConfig\n"
    "\n"
    "config = CompilerConfig()\n"
    'config.mode = "max-autotune"\n'
    "npu_backend = torchair.get_npu_backend(compiler_config=config)\n"
    "model = torch.compile(model, backend=npu_backend, dynamic=False)\n"
    "with torch.no_grad():\n"
    "    output = model(*inputs)  # first call compiles\n"
)


def test_snippets_keep_their_text() -> None:
    assert get_backend("eager").snippet("default") == snippets.snippet("eager", "default") == EAGER_INFERENCE
    assert get_backend("inductor").snippet("max-autotune") == INDUCTOR_MAX_AUTOTUNE
    assert get_backend("torchair").snippet("max-autotune") == TORCHAIR_GE


@pytest.mark.parametrize("name", catalogue.names())
@pytest.mark.parametrize("workload", ["inference", "training"])
def test_backend_snippets_are_the_core_snippets(name: str, workload: str) -> None:
    backend = get_backend(name)
    for mode in backend.modes:
        text = backend.snippet(mode, None, workload)
        assert text == snippets.snippet(name, mode, None, workload)
        compile(text, f"<{name}:{mode} snippet>", "exec")


def test_a_recommendation_shows_the_measured_backends_snippet() -> None:
    rows = [measurement("eager", median_ms=10.0, device="cpu"), measurement("inductor", median_ms=2.0, device="cpu")]
    rec = decide({"target": "cpu"}, inspection(), run(*rows, device="cpu"))
    assert (rec["backend"], rec["mode"]) == ("inductor", "default")
    assert rec["snippet"] == get_backend("inductor").snippet("default")


# ---------------------------------------------------------------- models with keyword inputs
def _keyword_inspection() -> dict:
    found = inspection()
    found["inputs"] = [
        {"name": "input_ids", "shape": [1, 16], "dtype": "int64"},
        {"name": "attention_mask", "shape": [1, 16], "dtype": "int64", "keyword": True},
    ]
    return found


@pytest.mark.parametrize("target", ["cpu", "npu"])
def test_snippets_pass_keyword_inputs_by_keyword(target: str) -> None:
    rec = decide({"target": target}, _keyword_inspection(), None)
    assert "model(*args, **kwargs)" in rec["snippet"] and "model(*inputs)" not in rec["snippet"]
    assert "attention_mask" in rec["snippet"]  # the comment says what kwargs holds
    compile(rec["snippet"], "<snippet>", "exec")


def test_snippets_of_positional_models_are_unchanged() -> None:
    rec = decide({"target": "cpu"}, inspection(), None)
    assert "model(*inputs)" in rec["snippet"] and "kwargs" not in rec["snippet"]


@pytest.mark.parametrize("name", catalogue.names())
def test_every_backend_snippet_can_call_with_keywords(name: str) -> None:
    for mode in catalogue.info(name).modes:
        for workload in ("inference", "training"):
            text = snippets.recommendation_snippet(name, mode, workload, snippets.KEYWORD_CALL)
            compile(text, f"<{name}:{mode}>", "exec")
            assert "model(*inputs)" not in text and "tuple(inputs)" not in text


def test_the_training_loop_unpacks_keyword_inputs() -> None:
    text = snippets.eager_snippet("training", snippets.KEYWORD_CALL)
    assert "for (args, kwargs), targets in batches:" in text
    assert "loss = loss_fn(model(*args, **kwargs), targets)" in text


def test_a_measured_rows_snippet_calls_the_model_with_its_keyword_inputs() -> None:
    """The snippet of a measured variant is the configuration that was measured: a model that takes keyword
    inputs is called `model(*args, **kwargs)` (ONNX Runtime feeds every input by name either way)."""
    from advisor.core.snippets import KEYWORD_CALL, POSITIONAL_CALL
    from advisor.harness.backends import CompileRequest, all_backends

    for backend in all_backends():
        if backend.name == "onnxruntime":
            continue
        device = backend.devices[0]
        mode = backend.modes_for(device)[0]
        keyword = backend.snippet_for(CompileRequest(mode=mode, device=device, call=KEYWORD_CALL))
        positional = backend.snippet_for(CompileRequest(mode=mode, device=device))
        assert KEYWORD_CALL in keyword and POSITIONAL_CALL not in keyword, (backend.name, keyword)
        assert POSITIONAL_CALL in positional, (backend.name, positional)
