"""An analysis' plan in two passes: rank the options first, then take the details of the leading ones only.

Why: what a recommendation rests on is each option's compile, accuracy and side-by-side timing at the model's
shape. The rest - other sizes of the dynamic dims (with the recompiles each triggers), the profiled "where the time
goes" and the warm-cache compile - is reported for the option you will deploy, and measuring it for every option
took most of an analysis' time (ResNet-18: 74 of 161 s went to other sizes, 2-3 s to each warm-cache child). With a
deployment context the first pass leaves these out; once the options are ranked (after any re-measure rounds), the
recommendation and the leading options get one more child each, from their first child's compile cache, which
measures them (advisor.harness.measurement.child: `details_median_ms`). Their rows' timings stay the first pass's.

A context's shape traffic waits for the ranking too (issue 43): its plan is drawn for the recommendation against its
closest rival, so only those two (`plan_swept_options`) are timed at the plan's sizes, in their details children;
an explicit sweep or shape ranges are still timed for every option in the first pass, as before.

The warm-cache compile does change a recommendation when the deployment ships a compile cache (the break-even then
counts the warm compile): such a plan measures it for every option in the first pass, as before. Without a context
(`npu-advisor measure`), every child measures everything, as it always did. Since none of the details changes the
pick, the ranked run is published before they are measured (`publish_ranked`; advisor.core.early_answer). Torch-free.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from advisor.core import noise
from advisor.core.context import DeploymentContext
from advisor.core.decision.shape_rules import NOT_SWEPT
from advisor.core.early_answer import PENDING_KEY
from advisor.harness.measurement.variant import measure_details

log = logging.getLogger(__name__)
NOT_DETAILED = "not a leading option: other sizes, profile and warm compile were measured for the leading ones"


def first_pass_policy(context: DeploymentContext | None, workload: str, policy: dict, is_baseline: bool) -> dict:
    """The timing policy of a variant's first child (and of its re-measures): `policy` less what waits for the
    ranking. The eager baseline keeps its profile: it is what every option's "where the time goes" is read against."""
    if context is None or workload != "inference":
        return policy
    return {
        **policy,
        "dynamic_sizes": 0,
        "profile": bool(policy["profile"]) and is_baseline,
        "warm_cache": bool(policy["warm_cache"]) and context.ships_compile_cache,
    }


def details_to_come(wanted: list[str]) -> dict[str, Any]:
    """The run quality's `details` while they are being measured: what the ranked run `on_ranked` gets says which
    options' details are still to come (advisor.core.early_answer reads it)."""
    return {"detailed": [], PENDING_KEY: list(wanted), "others": NOT_DETAILED}


def publish_ranked(on_ranked: Callable[[dict[str, Any]], None], run: dict[str, Any]) -> None:
    """Call `on_ranked` with a copy of the ranked `run`; an error in it is logged, never the measurement's."""
    try:
        on_ranked(copy.deepcopy(run))
    except Exception:  # noqa: BLE001 - the early answer is a courtesy: the measurement goes on without it
        log.warning("publishing the ranking before the details failed; the complete results follow", exc_info=True)


def measure_leading_details(
    wanted: list[str],
    run: dict[str, Any],
    variants: list[tuple[str, str]],
    common: dict,
    sandbox: dict,
    workdir: Path,
    policy: dict,
    plan_sweep: tuple[dict, list[str]] | None = None,
) -> dict[str, Any]:
    """One details child for each option of `wanted` (`detailed_options`) that measured ok; returns what the run's
    quality records of it: which options got their details, and why the others did not. `plan_sweep`: (a traffic
    sweep spec, the options it is for: `plan_swept_options`, all in `wanted`) - those children also time the plan's
    sizes; the quality then names them (`swept`) and why the others were not (`not_swept`)."""
    rows = run["measurements"]
    sweep, swept_for = plan_sweep or (None, [])
    detailed: list[str] = []
    swept: list[str] = []
    for index, (spec, mode) in enumerate(variants):
        row, label = rows[index], noise.label(rows[index])
        if label not in wanted or row["status"] not in ("ok", "fail_accuracy") or not row.get("latency"):
            continue
        child_common = {**common, "sweep": sweep if label in swept_for else None}  # never a first-pass sweep again
        measure_details(spec, mode, index == 0, row, child_common, sandbox, workdir / f"cache-{index}", policy)
        detailed.append(label)
        if row.get("sweep"):
            swept.append(label)
    details: dict[str, Any] = {"detailed": detailed, "others": NOT_DETAILED}
    if sweep is not None:
        details.update(swept=swept, not_swept=NOT_SWEPT)
    return details
