"""`npu-advisor inspect MODEL`: what is inside a model, before any device time is spent."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from advisor.cli import model_options as model_opt
from advisor.cli.errors import one_line_errors
from advisor.core.decision import torchair_status_unknown
from advisor.harness.isolated_inspection import INSPECT_MEMORY_LIMIT_MB, INSPECT_TIMEOUT_S

_COVERAGE_STYLE = {
    "lowered": "green",
    "decomposed": "green",
    "supported": "green",
    "fallback": "yellow",
    "partial": "yellow",
    "stub": "red",
    "untraceable": "red",
    "none": "red",
    "unknown": "yellow",
}
VIA_SHOWN = 3  # ops of a decomposition shown in a cell; the rest are counted


def inspect(
    model: Path = typer.Argument(
        ...,
        help="a TorchScript (.pt) or ExportedProgram (.pt2) file, or your code: path/to/file.py:factory or "
        "package.module:factory (graph breaks, recompiles and torch.export, run in a child process)",
    ),
    inputs: model_opt.Inputs = None,
    input_shape: model_opt.InputShape = None,
    as_json: bool = typer.Option(False, "--json", help="print the inspection as JSON"),
    timeout_s: float = typer.Option(
        INSPECT_TIMEOUT_S, "--timeout", help="wall-clock limit of the inspection, in seconds"
    ),
    memory_limit_mb: int | None = typer.Option(
        None,
        "--memory-limit-mb",
        help=f"address-space limit of the inspection (default {INSPECT_MEMORY_LIMIT_MB} for a file, none for your "
        "code)",
    ),
    export_to: Path | None = typer.Option(
        None,
        "--export-to",
        help="for a file.py:factory model, write the ExportedProgram here when torch.export succeeds",
    ),
    shape_traffic: Path | None = typer.Option(
        None,
        "--shape-traffic",
        help="JSON Lines of observed calls (with file.py:factory only): the recompile check replays their shapes",
    ),
    max_graphs: int | None = typer.Option(None, "--max-graphs", help="with --shape-traffic: the graph budget"),
    target: str = typer.Option("npu", "--target", help="with --shape-traffic: npu | cuda | cpu (the budget's default)"),
    strict_export: model_opt.StrictExport = False,
) -> None:
    """Show a model's ops with their Inductor/TorchAir coverage, graph breaks, inputs and size."""
    from advisor.cli.source_front import inspect_source, is_source_spec

    if is_source_spec(model):
        inspect_source(
            str(model),
            as_json=as_json,
            export_to=export_to,
            timeout_s=timeout_s,
            memory_limit_mb=memory_limit_mb,
            strict_export=strict_export,
            sweep=traffic_sweep_spec(shape_traffic, max_graphs, target),
        )
        return
    if shape_traffic is not None:
        typer.echo("error: --shape-traffic applies to path/to/file.py:factory only", err=True)
        raise typer.Exit(2)
    if export_to is not None or strict_export:
        typer.echo("error: --export-to and --strict-export apply to path/to/file.py:factory only", err=True)
        raise typer.Exit(2)
    result = _inspect_file(model, inputs, input_shape, timeout_s, memory_limit_mb)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
    else:
        print_inspection(result, Console())


def _inspect_file(
    model: Path, inputs: Path | None, input_shape: list[str] | None, timeout_s: float, memory_limit_mb: int | None
) -> dict:
    """A model file's inspection: sniffed here first (torch-free: a file we refuse is refused before torch is even
    imported), then inspected in a sandboxed, limited child (advisor.harness.isolation): the model is untrusted even
    on your own machine. A refused or failed inspection exits with its reason."""
    from advisor.core.artifacts import ArtifactRejected, sniff

    if not model.is_file():
        typer.echo(f"error: {model} does not exist or is not a file", err=True)
        raise typer.Exit(2)
    with one_line_errors("inspection", expected=(ArtifactRejected,)):
        sniff(model)
    from advisor.harness.isolated_inspection import inspect_isolated

    with one_line_errors("inspection"):
        done = inspect_isolated(
            str(model),
            inputs_file=str(inputs) if inputs else None,
            input_shapes=input_shape,
            timeout_s=timeout_s,
            memory_limit_mb=memory_limit_mb,
        )
    if done.status != "ok":
        typer.echo(f"error: {done.reason or f'inspection failed ({done.status})'}", err=True)
        raise typer.Exit(2 if done.status in ("rejected", "load_error") else 1)
    return done.value


def traffic_sweep_spec(path: Path | None, max_graphs: int | None, target: str) -> dict | None:
    """The shapes the recompile check calls the model at for --shape-traffic (those an analysis would time);
    None without it. A bad file or budget fails here, naming the line or the field."""
    if path is None:
        return None
    from advisor.cli.analyze_cmd import read_traffic
    from advisor.core.context import ContextError, parse_context
    from advisor.core.shape_sweep import sweep_spec

    try:
        context = parse_context({"shape_traffic": read_traffic(path), "max_graphs": max_graphs, "target": target})
    except ContextError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    return sweep_spec(context)


def print_inspection(result: dict, console: Console) -> None:
    """The readable form: summary, ops by namespace (custom ops highlighted), TorchAir notes, graph breaks,
    warnings."""
    notes = _torchair_notes(result["ops"])
    console.print(_summary(result))
    console.print(_ops_table(result, notes))
    if notes:
        console.print("TorchAir notes:")
        console.print(_hanging_list([f"[{number}]" for number in range(1, len(notes) + 1)], notes))
    _print_graph_breaks(result["graph_breaks"], console)
    warnings = result["warnings"]
    if warnings:
        console.print(f"[yellow]Warnings ({len(warnings)}):[/yellow]")
        console.print(_hanging_list(["-"] * len(warnings), warnings))


def _hanging_list(markers: list[str], texts: list[str]) -> Table:
    """Indented items whose wrapped lines stay aligned with their text."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=1)
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column()
    for marker, text in zip(markers, texts, strict=True):
        grid.add_row("", marker, Text(text))
    return grid


def _summary(result: dict) -> Table:
    table = Table(show_header=False, box=None, title="Model", title_justify="left")
    params = result["parameters"]
    table.add_row("format", result["format"])
    table.add_row("saved with torch", result["saved_with_torch"] or "unknown")
    table.add_row("parameters", f"{params['count']:,} ({params['bytes'] / 1e6:.1f} MB)")
    table.add_row("FLOPs (forward)", f"{result['flops']:,}" if result["flops"] is not None else "not counted")
    for spec in result["inputs"]:
        shape = "x".join(str(dim) for dim in spec["shape"]) or "scalar"
        table.add_row(f"input {spec['name']}", f"{shape} {spec['dtype']}")
    for dim in result["dynamic_dims"]:
        high = "inf" if dim["max"] is None else dim["max"]
        table.add_row("dynamic dim", f"{dim['input']}[{dim['dim']}] = {dim['symbol']} in [{dim['min']}, {high}]")
    runnable = result["runnable"]
    table.add_row("runs here", "yes" if runnable["ok"] else f"[red]no[/red]: {runnable['reason']}")
    source = result["torchair_coverage"]
    table.add_row("TorchAir coverage", f"{source['source']} (torch_npu {source['torch_npu_version'] or 'unknown'})")
    return table


def _ops_table(result: dict, notes: list[str]) -> Table:
    by_namespace: dict[str, list[dict]] = defaultdict(list)
    for op in result["ops"]:
        by_namespace[op["namespace"]].append(op)
    table = Table(
        title='Ops by namespace, calls in brackets (custom ops highlighted; "via": the ops the compiler '
        "really receives, which the status was judged on)",
        title_justify="left",
    )
    table.add_column("namespace")
    table.add_column("op", no_wrap=True)
    table.add_column("calls", justify="right")
    table.add_column("Inductor", overflow="fold")
    table.add_column("TorchAir", overflow="fold")
    table.add_column("fake kernel", no_wrap=True)
    custom = {op["name"] for op in result["custom_ops"]}
    for namespace in sorted(by_namespace, key=lambda ns: (ns in ("aten", "prims", "higher_order"), ns)):
        ops = by_namespace[namespace]
        for index, op in enumerate(ops):
            style = "bold magenta" if op["name"] in custom else None
            table.add_row(
                f"{namespace} ({sum(o['count'] for o in ops)})" if index == 0 else "",
                op["name"].removeprefix(f"{namespace}."),
                str(op["count"]),
                _inductor_cell(op["coverage"]),
                _torchair_cell(op["coverage"], notes),
                "yes" if op["has_fake_kernel"] else "[red]no[/red]",
                style=style,
                end_section=index == len(ops) - 1,
            )
    return table


def _styled(status: str) -> str:
    style = _COVERAGE_STYLE.get(status, "white")
    return f"[{style}]{escape(status)}[/{style}]"


def _via(names: list[str]) -> str:
    """ "(via t, addmm)": the ops a decomposed op becomes, short names, the first few."""
    if not names:
        return "[dim](vanishes)[/dim]"
    short = [escape(_short_name(name)) for name in names[:VIA_SHOWN]]
    more = f" +{len(names) - VIA_SHOWN}" if len(names) > VIA_SHOWN else ""
    return f"[dim](via {', '.join(short)}{more})[/dim]"


def _short_name(name: str) -> str:
    """ "aten.addmm.default" -> "addmm", "aten.add.Tensor" -> "add"; other namespaces keep the whole name."""
    namespace, _, rest = name.partition(".")
    return rest.split(".")[0] if namespace in ("aten", "prims") else name


def _inductor_cell(coverage: dict) -> str:
    cell = _styled(coverage["inductor"])
    return f"{cell} {_via(coverage['inductor_via'])}" if "inductor_via" in coverage else cell


def _torchair_cell(coverage: dict, notes: list[str]) -> str:
    """The status (or "unknown" where only an NPU node can tell), what it was judged on, its note's number."""
    unknown = torchair_status_unknown(coverage)
    cell = _styled("unknown") + " [dim](known on an NPU)[/dim]" if unknown else _styled(coverage["torchair"])
    if "torchair_via" in coverage:
        cell += f" {_via(coverage['torchair_via'])}"
    note = coverage.get("torchair_note")
    if note:
        cell += f" [{notes.index(note) + 1}]"
    return cell


def _torchair_notes(ops: list[dict]) -> list[str]:
    """The distinct TorchAir notes, in the order of the table's rows (they are listed once under it)."""
    return list(dict.fromkeys(op["coverage"]["torchair_note"] for op in ops if op["coverage"].get("torchair_note")))


def _print_graph_breaks(breaks: dict, console: Console) -> None:
    if not breaks["analysed"]:
        console.print(f"[yellow]Graph breaks: not analysed[/yellow] - {breaks.get('note', '')}")
        return
    console.print(f"Graph breaks: [bold]{breaks['count']}[/bold] ({breaks['graph_count']} graph(s))")
    for item in breaks["reasons"]:
        console.print(f"  - {item['reason']}" + (f" [dim]at {item['location']}[/dim]" if item["location"] else ""))


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect)
