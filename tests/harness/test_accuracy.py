"""Accuracy checks: allclose, then RMSE relative to eager's own error against float64, then cosine."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from advisor.harness.accuracy import compare_outputs, tolerance_for  # noqa: E402


def _reference(n: int = 4096):
    gen = torch.Generator().manual_seed(0)
    fp64 = torch.randn(n, dtype=torch.float64, generator=gen)
    return fp64, fp64.float()


def test_identical_output_passes_with_zero_error():
    fp64, eager = _reference()
    acc = compare_outputs([eager.clone()], [eager], [fp64])
    assert acc["passed"] and acc["max_abs_err"] == 0.0
    assert acc["cosine"] == pytest.approx(1.0)
    assert (acc["atol"], acc["rtol"]) == tolerance_for(torch.float32)


def test_reordered_float32_arithmetic_passes_via_the_rmse_rule_even_when_allclose_fails():
    fp64, eager = _reference()
    # Same magnitude of error as eager's own rounding, but pushed just outside allclose at 1e-4 on one element.
    result = (fp64 + torch.randn(fp64.shape, dtype=torch.float64) * 1e-8).float()
    result[0] = eager[0] + 3e-4
    acc = compare_outputs([result], [eager], [fp64])
    assert acc["passed"], acc
    assert acc["reference_rmse"] > 0 and acc["rmse_ratio"] is not None


def test_a_wrong_offset_fails_with_a_readable_reason():
    fp64, eager = _reference()
    acc = compare_outputs([eager + 1.0], [eager], [fp64])
    assert not acc["passed"]
    assert acc["max_abs_err"] == pytest.approx(1.0)
    assert acc["rmse_ratio"] > 1e3
    assert "float64 reference" in acc["reason"]


def test_a_tolerance_override_loosens_or_tightens_the_check():
    _, eager = _reference()
    strict = compare_outputs([eager + 5e-5], [eager], [eager.double()], {"atol": 1e-6, "rtol": 0.0})
    assert not strict["passed"] and (strict["atol"], strict["rtol"]) == (1e-6, 0.0)
    assert compare_outputs([eager + 5e-5], [eager], [eager.double()])["passed"]  # the default accepts it
    loose = compare_outputs([eager + 5e-2], [eager], [eager.double()], {"atol": 0.1, "rtol": None})
    assert loose["passed"] and (loose["atol"], loose["rtol"]) == (0.1, tolerance_for(torch.float32)[1])


def test_without_a_float64_reference_cosine_decides():
    _, eager = _reference()
    assert compare_outputs([eager * 1.0001], [eager], None)["passed"]
    flipped = compare_outputs([-eager], [eager], None)
    assert not flipped["passed"] and "cosine" in flipped["reason"]


def test_nan_where_eager_has_a_number_fails():
    fp64, eager = _reference()
    result = eager.clone()
    result[5] = float("nan")
    assert not compare_outputs([result], [eager], [fp64])["passed"]


def test_shape_and_count_mismatches_fail_with_the_difference_named():
    fp64, eager = _reference()
    assert "shape" in compare_outputs([eager[:10]], [eager], [fp64])["reason"]
    assert "2 outputs" in compare_outputs([eager, eager], [eager], [fp64])["reason"]


def test_integer_outputs_must_match_exactly_and_half_types_get_looser_tolerances():
    ids = torch.arange(10)
    assert compare_outputs([ids.clone()], [ids], [ids])["passed"]
    assert not compare_outputs([ids + 1], [ids], [ids])["passed"]
    assert tolerance_for(torch.bfloat16)[1] > tolerance_for(torch.float16)[1] > tolerance_for(torch.float32)[1]
