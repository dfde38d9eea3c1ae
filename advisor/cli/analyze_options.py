"""The options of `npu-advisor analyze` (advisor.cli.analyze_cmd), each declared once as an `Annotated` type (those
every model-loading command takes: advisor.cli.model_options).

The deployment-context flags list every value their context field accepts, read from its Literal, so --help never
drifts from the context the engine validates. Torch-free, like the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, get_args

import typer

from advisor.core.context import Fleet, ModelChanges, Optimizer, Stage, Target, Workload
from advisor.core.report import FORMATS


def _choices(field_type: Any) -> str:
    """`a | b | c`: every value a context field accepts, read from its Literal so --help lists each one."""
    return " | ".join(get_args(field_type))


Model = Annotated[
    Path,
    typer.Argument(
        help="a TorchScript (.pt) or ExportedProgram (.pt2) file, or your code: path/to/file.py:factory or "
        "package.module:factory (exported here, then analysed; graph breaks, recompiles and export problems too)",
    ),
]

# where the analysis runs
Local = Annotated[bool, typer.Option("--local/--no-local", help="run everything on this machine (the default)")]
Server = Annotated[str | None, typer.Option("--server", help="a team server URL: analyse there instead")]
TokenFile = Annotated[
    Path | None,
    typer.Option("--token-file", help="file holding the API token for --server (mode 0600); default: $ADVISOR_TOKEN"),
]
Wait = Annotated[bool, typer.Option("--wait/--no-wait", help="with --server: follow the analysis to the end")]
Force = Annotated[
    bool, typer.Option("--force", help="with --server: measure again even if an identical analysis exists")
]
Tag = Annotated[
    str | None,
    typer.Option("--tag", help="with --server: the model suite this analysis belongs to (summarised at /suites/TAG)"),
]

# the deployment context: a file, and a flag per field (advisor.cli.analyze_cmd._FLAG_FIELDS)
ContextFile = Annotated[Path | None, typer.Option("--context", help="deployment context as a JSON file")]
StageFlag = Annotated[str | None, typer.Option(help=_choices(Stage))]
ModelChangesFlag = Annotated[str | None, typer.Option("--model-changes", help=_choices(ModelChanges))]
WorkloadFlag = Annotated[
    str | None, typer.Option(help=f"{_choices(Workload)} (generation: a causal LM's prefill and decode)")
]
OptimizerFlag = Annotated[str | None, typer.Option(help=f"training only: {_choices(Optimizer)} (default sgd)")]
TargetFlag = Annotated[str | None, typer.Option(help=f"the production device: {_choices(Target)}")]
FleetFlag = Annotated[str | None, typer.Option(help=f"{_choices(Fleet)} (mixed: developed on CPU/GPU, served on NPU)")]
ExpectedCalls = Annotated[int | None, typer.Option("--expected-calls", help="calls served per compile")]
LatencyTarget = Annotated[float | None, typer.Option("--latency-target-ms", help="p99 latency target")]
MemoryBudget = Annotated[float | None, typer.Option("--memory-budget-mb", help="peak memory budget in MiB")]
OfflineExport = Annotated[
    bool | None,
    typer.Option("--offline-export/--no-offline-export", help="the model must be exported to run without Python"),
]
ResourceConstrained = Annotated[
    bool | None,
    typer.Option(
        "--resource-constrained/--not-resource-constrained", help="the serving device is short of memory or compute"
    ),
]
ShipsCache = Annotated[
    bool | None, typer.Option("--ships-cache/--no-ships-cache", help="the deployment ships a warm compile cache")
]
ShapeTraffic = Annotated[
    Path | None,
    typer.Option(
        "--shape-traffic",
        help='JSON Lines of observed calls ({"ids": [1, 61], "count": 3} per line): plan dynamic vs static vs '
        "bucketed graphs for them",
    ),
]
MaxGraphs = Annotated[
    int | None,
    typer.Option("--max-graphs", help="graph budget of the shape plan (default: the target's: npu 64, cpu/cuda 8)"),
]

# what is measured, and how
Backends = Annotated[
    list[str] | None, typer.Option("--backends", help="backends to measure, e.g. inductor,torchair:npugraph_ex")
]
Device = Annotated[str | None, typer.Option("--device", help="where to measure here (default: the target)")]
SkipMeasure = Annotated[bool, typer.Option("--skip-measure", help="inspect only: an unmeasured recommendation")]
Calibration = Annotated[
    Path | None,
    typer.Option("--calibration", help="int8 options: calibration samples, an .npz of input0, input1, ... (no pickle)"),
]

# the report, and the export of file.py:factory
Format = Annotated[str, typer.Option("--format", help=f"report format: {' | '.join(FORMATS)}")]
Out = Annotated[Path | None, typer.Option("--out", help="write the report to this file instead of stdout")]
ExportTo = Annotated[
    Path | None,
    typer.Option(
        "--export-to",
        help="for a file.py:factory model, where the ExportedProgram is written (default ./<file>-<factory>.pt2)",
    ),
]
