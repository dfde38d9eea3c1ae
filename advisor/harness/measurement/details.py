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
    ranking - eager's profile included, which a leading option's details child takes (`measure_leading_details`) -
    and, for the eager baseline, a shorter window (`eager_window`)."""
    if context is None or workload != "inference":
        return policy
    first = {
        **policy,
        "dynamic_sizes": 0,
        "profile": False,
        "warm_cache": bool(policy["warm_cache"]) and context.ships_compile_cache,
    }
    return eager_window(first) if is_baseline and context.latency_target_ms is None else first


def eager_window(policy: dict) -> dict:
    """Eager's own first window, where the options are ranked: its CI target doubled (+-4 % by default) and half
    the cap, as long as `min_iters` and `min_time_s` still hold.

    Why it may be looser: no option is ranked against it. Each option's speedup comes from the eager timed beside
    it in its own child, and options rank against each other by those speedups (candidates.compare, paired_ratio);
    eager's own row sits at 1.0x exactly. Its window's numbers serve as one of the eager medians whose lower middle
    is the reference of the common scale (candidates.reference_eager_ms: the tables' ms, not any "faster"), as
    eager's row in the tables, and as noise evidence (its spread, its blocks' drift, its median against the other
    eagers': noise.EAGER_DRIFT_MAX_RATIO is 1.5x, far beyond +-4 %). With a latency target the full window stays:
    eager's own p99 is then checked against it (candidates: over the latency target)."""
    return {
        **policy,
        "ci_target": policy["ci_target"] * 2,
        "max_time_s": max(policy["min_time_s"], policy["max_time_s"] / 2),
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
    sizes; the quality then names them (`swept`) and why the others were not (`not_swept`).

    Eager's profile (the report's "where the time goes" shows eager's beside the recommended option's) is taken
    here too, not in eager's first child: the first leading option's details child also profiles the eager module it
    loaded (`eager_profile_ms`), or eager's own details child when eager leads; only when neither gave one does a
    child of its own profile eager (`_profile_eager`)."""
    rows = run["measurements"]
    eager = rows[0]
    sweep, swept_for = plan_sweep or (None, [])
    detailed: list[str] = []
    swept: list[str] = []
    for index, (spec, mode) in enumerate(variants):
        row, label = rows[index], noise.label(rows[index])
        if label not in wanted or not _timed(row):
            continue
        child_common = {**common, "sweep": sweep if label in swept_for else None}  # never a first-pass sweep again
        carry = eager if index > 0 and policy["profile"] and _awaits_profile(eager) else None
        cache_dir = workdir / f"cache-{index}"
        measure_details(spec, mode, index == 0, row, child_common, sandbox, cache_dir, policy, eager=carry)
        detailed.append(label)
        if row.get("sweep"):
            swept.append(label)
    if policy["profile"] and _awaits_profile(eager):
        _profile_eager(variants, eager, {**common, "sweep": None}, sandbox, workdir, policy)
    details: dict[str, Any] = {"detailed": detailed, "others": NOT_DETAILED}
    if sweep is not None:
        details.update(swept=swept, not_swept=NOT_SWEPT)
    return details


def _timed(row: dict[str, Any]) -> bool:
    return row["status"] in ("ok", "fail_accuracy") and bool(row.get("latency"))


def _awaits_profile(eager: dict[str, Any]) -> bool:
    """Whether the eager row has no profile yet and could have one (it was timed)."""
    return eager.get("backend") == "eager" and _timed(eager) and eager.get("time_breakdown") is None


def _profile_eager(
    variants: list[tuple[str, str]], eager: dict[str, Any], common: dict, sandbox: dict, workdir: Path, policy: dict
) -> None:
    """Eager's profile in a details child of its own, when no leading option's details child took it: only the
    profile (no other sizes of the dynamic dims, no plan sizes: those are a leading option's details)."""
    spec, mode = variants[0]
    profile_only = {**policy, "dynamic_sizes": 0}
    measure_details(spec, mode, True, eager, common, sandbox, workdir / "cache-0", profile_only)
