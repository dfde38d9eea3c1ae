"""The worker's per-job cost: a cold sandbox against a sandbox prepared ahead of time, in one run (issues 15, 26).

Each job runs the way the worker runs it: the stage runner (`python -m workers.stages`, workers.stage_process) in a
process of its own, with the job's files in its sandbox's inbox. "cold": the runner starts the job's own zygote
(`import torch`, Dynamo, Inductor, Inductor's CPU probe) before its first child. "prepared": the job forks from a
zygote of its own that workers.job_sandbox started ahead of time - a fresh sandbox per job, never one that ran
another job's code; the next one starts as each job starts, and the job's first timed window waits until it is up,
as the agent does.
The prepared jobs of a model run back to back after an idle spell (in which the worker readies its spares, two by
default); a spare still starting when a job arrives shows as `sandbox wait` on that job's critical path, and a job
held before its first timed window until the next job's spare is up shows it in its fixed cost (both are part of its
wall time).

Jobs:
- an inspect-only job of the tests' tiny MLP: almost all of its wall time is the per-job fixed cost (target
  prepared <= 1 s);
- whole measure jobs (eager + Inductor default, production context) of ResNet-50 (batch 1, 224x224) and BERT-base
  (seq 128, batch 1), as exported by benchmarks/seed_table.py and benchmarks/plan_by_context.py: wall time against
  the unavoidable work, compile (cold + warm) plus timed windows.

Run: `.venv/bin/python benchmarks/warm_worker.py [--models mlp,resnet,bert] [--repeats 2] [--json out.json]`.
Prints Markdown for benchmarks/RESULTS.md with the load average and drift before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
_HERE = REPO / "benchmarks"
sys.path[:] = [str(REPO), *(p for p in sys.path if Path(p or ".").resolve() != _HERE)]

from benchmarks.plan_by_context import export_bert  # noqa: E402
from benchmarks.seed_table import drift, export_resnet50  # noqa: E402

KEYS = ("wall_s", "compile_s", "timed_s", "inspect_s", "variants_s", "remeasure_s", "wait_s")
# the measurement child's progress stages (advisor.harness.measurement.child), in order; a warm-cache child's have the
# prefix "warm cache: " and are counted with them
CHILD_STAGES = ("loading", "reference", "compiling", "accuracy", "timing", "profiling")
CONTEXT = {"stage": "production", "model_changes": "frozen"}
BACKENDS = ["eager", "inductor:default"]


def export(name: str, directory: Path) -> str:
    path = directory / f"{name}.pt2"
    if name == "mlp":
        from advisor.harness.examples import export_example

        return str(export_example("mlp", path))
    if name == "resnet":
        return export_resnet50(path, batch=1)
    return export_bert(path, base=True, seq=128, batch=1)


def run_job(
    model: str,
    *,
    measure: bool,
    zygote: dict | None,
    pass_fds: tuple[int, ...],
    job_dir: Path,
    gate_fd: int | None = None,
) -> dict:
    """One job through the stage runner, as the agent runs it; its wall time and what it spent on real work.
    `gate_fd`: the agent's readiness pipe (workers.job_sandbox): the job's first timed window waits on it."""
    from advisor.core.context import parse_context
    from advisor.core.job_wire import JobSpec
    from workers.stage_process import StageProcess
    from workers.stages import DEFAULT_STAGES

    timed: list[float] = []
    inspect_at: list[float] = []  # when the inspection started and ended (its child and its fork)
    spans: list[list[float]] = []  # [start, end, timed s] of each measured variant: the first pass, then re-measures
    stage_s = dict.fromkeys(CHILD_STAGES, 0.0)  # seconds in each child stage, over all of the job's children
    current: list[Any] = [None, 0.0]  # the child stage under way, and since when

    def on_progress(event: Any) -> None:
        now = time.perf_counter()
        if current[0] is not None:
            stage_s[current[0]] += now - current[1]
        stage = (event.phase or "").removeprefix("warm cache: ")
        current[:] = [stage if event.step == "measure" and stage in stage_s else None, now]
        if event.step == "inspect":
            inspect_at.append(now)
        if event.phase == "starting":
            spans.append([now, now, 0.0])
        if event.phase == "done":
            if spans:
                spans[-1][1:] = [now, event.timed_s or 0.0]
            if event.timed_s:
                timed.append(event.timed_s)

    spec = JobSpec(
        stages=DEFAULT_STAGES,
        artifact_path=model,
        device="cpu",
        backends=BACKENDS,
        context=parse_context(CONTEXT),
        measure=measure,
        zygote=zygote,
        measure_gate_fd=gate_fd,
    )
    started = time.perf_counter()
    process = StageProcess(spec, job_dir, on_progress, pass_fds=(*pass_fds, *([gate_fd] if gate_fd else [])))
    if gate_fd is not None:
        os.close(gate_fd)
    process.wait()
    wall = time.perf_counter() - started
    result = process.result()
    if result is None or result.get("error"):
        raise SystemExit(f"job failed: {(result or {}).get('error') or process.stderr_tail()}")
    rows = (result.get("measurements") or {}).get("measurements") or []
    compile_s = sum((r.get("compile_s_cold") or 0.0) + (r.get("compile_s_warm") or 0.0) for r in rows)
    children_s = sum(r.get("wall_s") or 0.0 for r in rows)
    inspect_s = inspect_at[-1] - inspect_at[0]
    measured = sum(1 for r in rows if r.get("status") != "skipped")
    return {
        # the noisy rows timed again (advisor.harness.measurement.run._remeasure_noisy): a fresh child each, which
        # loads, compiles from the warm cache, times and profiles again: their timed windows count in timed_s, the
        # rest (part of the other child work) here
        "remeasure_s": sum(end - start - timed_s for start, end, timed_s in spans[measured:]),
        "wall_s": wall,
        "compile_s": compile_s,
        "timed_s": sum(timed),
        "inspect_s": inspect_s,
        "variants_s": children_s,
        "stage_s": stage_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,resnet,bert")
    parser.add_argument("--repeats", type=int, default=2, help="cold jobs, then prepared jobs back to back, per model")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--from-json", type=Path, help="print the tables of an earlier run's --json")
    args = parser.parse_args()
    if args.from_json:
        print_markdown(json.loads(args.from_json.read_text()))
        return
    from workers.job_sandbox import JobSandboxes

    work = Path(tempfile.mkdtemp(prefix="job-sandbox-bench-"))
    pool = JobSandboxes("cpu", work, inductor=True)
    started = time.perf_counter()
    pool.prepare()
    first = pool.take()
    assert first is not None, "no job sandbox could start"
    start_s = time.perf_counter() - started
    pool.end_job()
    before = {"load": os.getloadavg()[0], "drift": drift()}
    results: dict[str, list[dict]] = {}
    for name in args.models.split(","):
        print(f"[{name}] exporting ...", file=sys.stderr)
        exported = export(name, work)
        for kind in ("cold", "prepared"):
            if kind == "prepared":
                fill(pool)  # the worker idled before this burst of jobs: its spares are ready
            for repeat in range(args.repeats):
                job_inbox = work / f"inbox-cold-{name}-{repeat}"
                waited = 0.0
                if kind == "prepared":  # back to back: the spare was started when the last job's timing ended
                    claimed = time.perf_counter()
                    sandbox = pool.take()
                    waited = time.perf_counter() - claimed
                    assert sandbox is not None
                    job_inbox = sandbox.inbox
                job_inbox.mkdir(parents=True, exist_ok=True)
                model = str(shutil.copy(exported, job_inbox / "model"))  # the job's download
                handle, fds, gate = None, (), None
                if kind == "prepared":  # as the agent does: the next job's sandbox starts with this job
                    handle, fds = sandbox.handle()
                    pool.prepare()
                    gate = pool.readiness_fd()
                job = run_job(
                    model, measure=name != "mlp", zygote=handle, pass_fds=fds, job_dir=work / "job-dir", gate_fd=gate
                )
                job["wait_s"] = waited
                job["wall_s"] += waited  # the claim-to-result time: a spare still starting is on the critical path
                job.update(model=name, kind=kind, repeat=repeat)
                results.setdefault(name, []).append(job)
                print(f"[{name}] {kind} #{repeat}: {json.dumps(job)}", file=sys.stderr)
                if kind == "prepared":
                    pool.end_job()
                    pool.prepare()  # as the agent does after a job (a no-op when the spare is already starting)
                else:
                    shutil.rmtree(job_inbox, ignore_errors=True)
        if args.json:
            args.json.write_text(json.dumps({"results": results}, indent=1))
    after = {"load": os.getloadavg()[0], "drift": drift()}
    pool.close()
    report = {"results": results, "before": before, "after": after, "zygote_start_s": start_s, "starts": pool.starts}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    print_markdown(report)


def fill(pool: Any) -> None:
    """What a worker's idle polls do: start spares one at a time until `pool.spares` are ready."""
    for _ in range(pool.spares):
        pool.prepare()
        gate = pool.readiness_fd()
        select.select([gate], [], [], 300)
        os.close(gate)


def print_markdown(report: dict) -> None:
    print(
        f"A job sandbox starts in {report['zygote_start_s']:.1f} s (import torch, Dynamo, Inductor, the CPU probe; "
        f"{report['starts']} sandboxes started in the whole run, one per prepared job). "
        f"Load {report['before']['load']:.2f} -> {report['after']['load']:.2f}; "
        f"half-second drift {report['before']['drift']['min']:.2f}-{report['before']['drift']['max']:.2f} before, "
        f"{report['after']['drift']['min']:.2f}-{report['after']['drift']['max']:.2f} after.\n"
    )
    print(
        "| model (job) | sandbox | job wall s: median (each) | fixed cost s | of which sandbox wait s | inspection s "
        "| compile s | timed s | other child work s | of which re-measure s | wall / (compile + timed) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, jobs in report["results"].items():
        medians = {}
        for kind in ("cold", "prepared"):
            mine = [j for j in jobs if j["kind"] == kind]
            medians[kind] = {k: statistics.median(j.get(k, 0.0) for j in mine) for k in KEYS}
            medians[kind]["each"] = ", ".join(f"{j['wall_s']:.1f}" for j in mine)
        # the inspection's own work: its phase in a prepared job (its child and one fork); a cold job's inspection
        # phase also holds the zygote's start. Fixed cost: everything that is neither the inspection nor a variant's
        # child (the wait for a spare still starting included).
        inspection = medians["prepared"]["inspect_s"]
        for kind in ("cold", "prepared"):
            m = medians[kind]
            m["fixed_s"] = m["wall_s"] - inspection - m["variants_s"]
            work = m["compile_s"] + m["timed_s"]
            ratio = f"{m['wall_s'] / work:.2f}" if work else "- (inspect only)"
            other = m["variants_s"] - work  # in the variants' children, beyond compiling and timing: loading, checks
            what = "inspect" if name == "mlp" else "measure eager + inductor"
            print(
                f"| {name} ({what}) | {kind} | {m['wall_s']:.1f} ({m['each']}) | {m['fixed_s']:.2f} "
                f"| {m['wait_s']:.2f} | {inspection:.1f} | {m['compile_s']:.1f} | {m['timed_s']:.1f} | {other:.1f} "
                f"| {m['remeasure_s']:.1f} | {ratio} |"
            )
    print(
        "\nWhere the measurement children's time goes, summed over each job's children (from their progress events, "
        "as the runner receives them; `compiling` is the compile and first call, `timing` the warm-up and timed "
        "windows):\n"
    )
    print(f"| model | sandbox | {' | '.join(f'{stage} s' for stage in CHILD_STAGES)} |")
    print(f"|---|---|{'---|' * len(CHILD_STAGES)}")
    for name, jobs in report["results"].items():
        for kind in ("cold", "prepared"):
            mine = [j["stage_s"] for j in jobs if j["kind"] == kind and "stage_s" in j]
            if mine and name != "mlp":
                cells = " | ".join(f"{statistics.median(s[stage] for s in mine):.1f}" for stage in CHILD_STAGES)
                print(f"| {name} | {kind} | {cells} |")


if __name__ == "__main__":
    main()
