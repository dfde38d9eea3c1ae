"""The edge branch quantizes by default (issue 44 item 5): an edge inference analysis measures the exported int8 options
(ONNX Runtime's int8 export, OpenVINO's int8 IR) of the backends it measures without being asked; naming backends
still restricts the set; other stages, training and devices without the int8 modes measure what they did."""

from __future__ import annotations

import pytest

from advisor.core.context import parse_context
from advisor.harness.measurement import plan_variants, quantizes_by_default

pytest.importorskip("torch")


def test_only_an_edge_inference_analysis_quantizes_by_default() -> None:
    assert quantizes_by_default({"stage": "edge"}) and quantizes_by_default(parse_context({"stage": "edge"}))
    assert not quantizes_by_default({"stage": "edge"}, "training")
    assert not quantizes_by_default({"stage": "production"}) and not quantizes_by_default(None)
    # hostile shapes are not the edge stage: nothing is added, nothing raises
    for odd in ({"stage": ["edge"]}, {"stage": None}, "edge", 7, {"stage": "EDGE"}):
        assert not quantizes_by_default(odd)


def test_edge_adds_the_exported_int8_options_of_the_measured_backends() -> None:
    everything = plan_variants(None, "cpu", quantize=True)
    assert ("onnxruntime", "int8") in everything and ("openvino", "int8") in everything
    assert ("inductor", "pt2e-int8") not in everything  # an int8 torch.compile model is not an export
    assert everything[0] == ("eager", "default") and len(everything) == len(set(everything))
    assert set(plan_variants(None, "cpu")) == set(everything) - {("onnxruntime", "int8"), ("openvino", "int8")}


def test_naming_backends_still_restricts_the_set() -> None:
    assert plan_variants(["onnxruntime"], "cpu", quantize=True) == [
        ("eager", "default"),
        ("onnxruntime", "default"),
        ("onnxruntime", "int8"),
    ]
    assert ("openvino", "int8") not in plan_variants(["inductor", "onnxruntime"], "cpu", quantize=True)
    # a backend named with its mode is that mode only
    assert plan_variants(["onnxruntime:default"], "cpu", quantize=True) == [
        ("eager", "default"),
        ("onnxruntime", "default"),
    ]


def test_no_int8_mode_where_the_device_has_none() -> None:
    variants = plan_variants(["onnxruntime"], "cuda", quantize=True)
    assert variants == [("eager", "default"), ("onnxruntime", "default")]


def test_the_analysis_pipeline_plans_the_int8_options_for_the_edge_context() -> None:
    from advisor.harness.pipeline import AnalysisRequest, _variants

    request = AnalysisRequest(model="m.pt2", device="cpu", backends=["onnxruntime"], plan_context={"stage": "edge"})
    assert ("onnxruntime", "int8") in _variants(request)
    production = AnalysisRequest(model="m.pt2", device="cpu", backends=["onnxruntime"])
    assert ("onnxruntime", "int8") not in _variants(production)
    assert ("onnxruntime", "int8") in _variants(production, parse_context({"stage": "edge", "target": "cpu"}))


def test_the_reproduce_command_gives_back_the_edge_option_set() -> None:
    from advisor.core.reproduce import backends_argument

    measured = [("eager", "default"), ("onnxruntime", "default"), ("onnxruntime", "int8"), ("openvino", "default")]
    for quantize in (True, False):
        argument = backends_argument(measured, "cpu", quantize=quantize)
        again = plan_variants(argument.split(","), "cpu", quantize=quantize)
        assert sorted(again) == sorted(measured), (quantize, argument)
    edge = "eager,onnxruntime:default,onnxruntime:int8,openvino:default"
    assert backends_argument(measured, "cpu", quantize=True) == edge
    # an edge run that measured no int8 mode names its modes, so the rerun does not add one
    plain = [("eager", "default"), ("onnxruntime", "default")]
    assert plan_variants(backends_argument(plain, "cpu", quantize=True).split(","), "cpu", quantize=True) == plain
