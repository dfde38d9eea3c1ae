"""Which ops each graph compiler really receives for the ops of an exported graph.

An ExportedProgram holds the high-level "training IR" (linear, conv2d, batch_norm, layer_norm, sdpa, dropout...).
Under `torch.compile`, AOTAutograd traces Dynamo's graph with `make_fx`, which runs the CompositeImplicitAutograd
kernel of every such op (`OpOverload.decompose`) and applies the backend's decomposition table on top:

- TorchAir (`get_npu_backend`) passes `get_npu_default_decompositions()` (only two collectives:
  `npu_define.allgather`, `_c10d_functional.all_to_all_single`) and `add_npu_patch` re-points
  `aten.upsample_nearest2d.vec` at `aten.upsample_nearest2d.default` and keeps the latter whole
  (`_utils/adjust_implicit_decomposition.py` in the torch_npu wheel);
- Inductor passes `select_decomp_table()`.

In-place ops. torchair's `_npu_backend` (`python/torchair/npu_fx_compiler.py` in github.com/Ascend/torchair, read at
fced8842) calls `_compile_graph_with_aot`, which hands the graph to
`torch._functorch.aot_autograd.aot_module_simplified(gm, example_inputs, fw_compiler=..., inference_compiler=...,
decompositions=<get_npu_default_decompositions() + custom>, keep_inference_input_mutations=
bool(compiler_config.experimental_config.keep_inference_input_mutations))`, True by default. AOTAutograd always
functionalizes, so GE never receives `aten.add_.Tensor` / `aten.relu_.default` (whose converters are stubs): an
in-place op on an intermediate arrives as its functional form (`add.Tensor`, `relu.default`); one that writes a graph
input (a user input or a buffer) arrives as the functional form plus, with keep_inference_input_mutations, one
`aten.copy_.default(input, new_value)` at the end of the graph (torchair converts it to `ge.Assign`,
`_ge_concrete_graph/ge_converter/aten/copy_.py`); with it off, AOTAutograd's runtime wrapper copies outside the graph.
`_trace_calls` reproduces both (the copy_ as AOTAutograd's `_functionalized_f_helper` writes it).

`ep.run_decompositions` with the same tables reproduces those graphs (checked against a captured AOTAutograd
forward graph), and `node.meta["from_node"]` maps each resulting node back to the exported node it came from. The
inspection traces each distinct call on its own instead (the same answer, checked against the whole-graph
decomposition in tests/harness/test_decomposed_coverage.py, at a fraction of the cost for a model of repeated layers).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
from torch._C import DispatchKey
from torch.utils import _pytree as pytree

from advisor.core.text import first_line
from advisor.harness import coverage
from advisor.harness.coverage import op_name

ERROR_LINE_CHARS = 500  # an error's first line, as a coverage warning quotes it
# Runtime checks that export inserts (for `.to(...)`); Dynamo's graphs for torch.compile never contain them.
EXPORT_ONLY_OPS = frozenset({"aten._assert_tensor_metadata.default"})

DecompTable = Mapping[Any, Callable[..., Any]]
COPY_BACK = "aten.copy_.default"  # how AOTAutograd writes a mutated graph input back (keep_inference_input_mutations)


class CompilerTable(dict):
    """A decomposition table, plus the Python kernels the compiler's package re-registers on import: TorchAir's
    `adjust_implicit_decomposition` pops the Python CompositeImplicitAutograd/Autograd kernels of some ops (None
    here) and replaces others', which changes what AOTAutograd's Python dispatcher decomposes."""

    python_kernels: dict[Any, Callable[..., Any] | None]

    def __init__(self, table: DecompTable, python_kernels: Mapping[Any, Any] | None = None) -> None:
        super().__init__(table)
        self.python_kernels = dict(python_kernels or {})


# What a decomposed op can turn into that Inductor cannot generate code for.
_INDUCTOR_WEAK = {
    "fallback": "which it runs as a fallback kernel (no fusion across it)",
    "untraceable": "which has no fake kernel: torch.compile cannot trace it",
}

# Decompositions that pick a kernel for the device they are traced on (sdpa) name CPU kernels like this.
_CPU_KERNEL_MARK = "_for_cpu"
_EXPORT_ONLY_NOTE = "export inserts this check; the graphs torch.compile hands to TorchAir do not contain it"
_PER_DEVICE_NOTE = (
    "decomposes per device: on this CPU into {via}, which TorchAir never sees; on an NPU torch_npu picks the "
    "kernel when the graph is traced, so GE coverage of this op is only known there (measure it on an NPU node)"
)


def judge_on_received_ops(program: torch.export.ExportedProgram, ops: list[dict[str, Any]]) -> list[str]:
    """Judge each op's coverage on the ops the compilers really receive for it, in place.

    TorchAir: an op decomposed before TorchAir sees it takes the worst status of the ops it becomes
    (`torchair_via`); a status the table gives is kept with a `torchair_note` where it needs one.
    Inductor: a "decomposed" op keeps that status and lists what it becomes (`inductor_via`).
    Returns warnings (a decomposition into a fallback/untraceable op, or a decomposition that failed).
    """
    warnings: list[str] = []
    try:
        _judge_torchair(program, ops)
        warnings += _judge_inductor(program, ops)
    except Exception as error:  # keep the table's answers, and say what really failed (not a guessed op)
        warnings.append(
            f"coverage is judged on the exported ops themselves: decomposing the graph failed ({describe_error(error)})"
        )
    add_table_notes(ops)
    return warnings


def describe_error(error: BaseException) -> str:
    """`Type: first line` of the exception run_decompositions raised, and of its root cause when that is another
    exception (torch wraps the real error, e.g. in a BackendCompilerFailed or a RuntimeError "see above").
    First lines only: they say what failed without the paths of the machine it failed on."""
    text = first_line(error, limit=ERROR_LINE_CHARS)
    root = error
    seen = {id(root)}
    while (cause := root.__cause__ or root.__context__) is not None and id(cause) not in seen:
        seen.add(id(cause))
        root = cause
    if root is not error and first_line(root, limit=ERROR_LINE_CHARS) != text:
        text += f"; caused by {first_line(root, limit=ERROR_LINE_CHARS)}"
    return text


def add_table_notes(ops: list[dict[str, Any]]) -> None:
    """`coverage.torchair_note` for each op whose TorchAir status is the table's own and has no note yet."""
    for op in ops:
        if "torchair_via" not in op["coverage"] and (functional := _functional_form(op["name"])) is not None:
            # no graph to trace (a TorchScript graph that did not convert): judged by name, and on the cautious side
            # for a graph input's copy back
            statuses = [coverage.torchair_status(functional), coverage.torchair_status(COPY_BACK)]
            op["coverage"]["torchair"] = coverage.worst_torchair_status(statuses)
            op["coverage"]["torchair_via"] = [functional]
            op["coverage"]["torchair_note"] = _in_place_note([functional, COPY_BACK])
        if "torchair_note" not in op["coverage"] and "torchair_via" not in op["coverage"]:
            note = coverage.torchair_note(op["name"])
            if note:
                op["coverage"]["torchair_note"] = note
            if coverage.torchair_may_auto_convert(op["name"]):
                op["coverage"]["torchair_unknown"] = True


def _judge_torchair(program: torch.export.ExportedProgram, ops: list[dict[str, Any]]) -> None:
    """Each op's TorchAir status from the ops it is decomposed into before TorchAir sees it (the table answers for
    an op that is not decomposed, or whose decomposition could not be traced back)."""
    table = torchair_table()
    candidates = [
        op
        for op in ops
        if op["name"] not in EXPORT_ONLY_OPS and (_decomposed(op["name"], table) or _in_place(op["name"]))
    ]
    received = received_ops(program, [op["name"] for op in candidates], table) if candidates else {}
    for op in ops:
        via = [] if op["name"] in EXPORT_ONLY_OPS else received.get(op["name"])
        if via is not None and via != [op["name"]]:
            _judge_torchair_via(op, [name for name in via if name not in EXPORT_ONLY_OPS])


def _judge_torchair_via(op: dict[str, Any], via: list[str]) -> None:
    """`op`'s TorchAir coverage from the ops `via` it becomes: unknown when one is a per-device kernel, else the
    worst of their statuses, with a note saying why."""
    if any(_CPU_KERNEL_MARK in name for name in via):
        op["coverage"]["torchair_note"] = _PER_DEVICE_NOTE.format(via=", ".join(via))
        op["coverage"]["torchair_unknown"] = True
        return
    statuses = {name: coverage.torchair_status(name) for name in via}
    op["coverage"]["torchair"] = coverage.worst_torchair_status(statuses.values())
    op["coverage"]["torchair_via"] = via
    note = _torchair_via_note(op["name"], via, statuses)
    if note is not None:
        op["coverage"]["torchair_note"] = note


def _torchair_via_note(name: str, via: list[str], statuses: dict[str, str]) -> str | None:
    if name in EXPORT_ONLY_OPS:
        return _EXPORT_ONLY_NOTE
    if uncovered := [op for op, status in statuses.items() if status in ("none", "stub")]:
        return f"decomposed before TorchAir: no working GE converter for {', '.join(uncovered)}"
    if _in_place(name):
        return _in_place_note(via)
    return None


def _judge_inductor(program: torch.export.ExportedProgram, ops: list[dict[str, Any]]) -> list[str]:
    names = [op["name"] for op in ops if op["coverage"]["inductor"] == "decomposed"]
    received = received_ops(program, names, inductor_table()) if names else {}
    warnings = []
    for op in ops:
        via = received.get(op["name"])
        if via is None:
            continue
        op["coverage"]["inductor_via"] = via
        for name in via:
            status = coverage.inductor_status(name) if name != op["name"] else "decomposed"
            if status in _INDUCTOR_WEAK:
                where = " (on CPU; other devices pick their own kernel)" if _CPU_KERNEL_MARK in name else ""
                warnings.append(f"Inductor decomposes {op['name']} into {name}{where}, {_INDUCTOR_WEAK[status]}")
    return warnings


def received_ops(
    program: torch.export.ExportedProgram, op_names: Iterable[str], table: DecompTable
) -> dict[str, list[str] | None]:
    """For each op name of `program`'s graph in `op_names`: the ops its nodes become after decomposing with `table`
    (first-seen order, Python builtins such as getitem left out; `[]` when they vanish), or None when the answer
    cannot be trusted (see `received_ops_whole_program`).

    Each distinct call (op, argument shapes/dtypes/strides, constant arguments) is decomposed on its own, as
    AOTAutograd would decompose it inside the whole graph: a BERT-base's 12 identical layers are one trace, not
    twelve, which is what makes `inspect` cost about one load (benchmarks/inspect_floor.py). When a call cannot be
    traced on its own (no fake value recorded for an argument...), the whole graph is decomposed instead."""
    wanted = set(op_names)
    try:
        return _received_per_call(program, wanted, table)
    except Exception:  # noqa: BLE001 - the whole-graph decomposition is the reference; it reports its own failure
        return received_ops_whole_program(program, wanted, table)


def received_ops_whole_program(
    program: torch.export.ExportedProgram, op_names: Iterable[str], table: DecompTable
) -> dict[str, list[str] | None]:
    """`received_ops` by decomposing the whole graph (`ep.run_decompositions`) and following each resulting node's
    `from_node` provenance back to the exported node it came from. None for an op when some node of the decomposed
    graph cannot be traced back, so an empty answer cannot be trusted."""
    wanted = set(op_names)
    originals = {node.name: op_name(node.target) for node in _call_nodes(program)}
    decomposed = program.run_decompositions(dict(table))
    via: dict[str, dict[str, None]] = {name: {} for name in wanted}
    untraced = False
    for node in _call_nodes(decomposed):
        origin = _origin(node, originals)
        if origin is None:
            untraced = untraced or not _is_shape_read(node.target)
        elif origin in wanted and isinstance(node.target, torch._ops.OpOverload | torch._ops.HigherOrderOperator):
            via[origin][op_name(node.target)] = None
    return {name: list(ops) if ops or not untraced else None for name, ops in via.items()}


def _received_per_call(
    program: torch.export.ExportedProgram, wanted: set[str], table: DecompTable
) -> dict[str, list[str] | None]:
    """`received_ops`, one trace per distinct call. Raises when a call cannot be traced on its own."""
    representatives: dict[tuple, list[torch.fx.Node]] = {}
    for node in _live_call_nodes(program):
        if op_name(node.target) in wanted:
            calls = _with_view_chain(node)
            key = (*(_call_signature(call) for call in calls), _graph_inputs_read(calls))
            representatives.setdefault(key, calls)
    via: dict[str, dict[str, None]] = {name: {} for name in wanted}
    for calls in representatives.values():
        for target in _decompose_last_call(calls, table):
            via[op_name(calls[-1].target)][target] = None
    return {name: list(ops) for name, ops in via.items()}


def _live_call_nodes(program: torch.export.ExportedProgram) -> list[torch.fx.Node]:
    """`_call_nodes` whose results reach an output or that have side effects: the whole-graph decomposition
    removes the rest as dead code (e.g. the pooler of a BERT whose forward returns only its hidden states)."""
    live: set[torch.fx.Node] = set()
    for module in program.graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            pending = [node for node in module.graph.nodes if node.op == "output" or node.is_impure()]
            while pending:
                node = pending.pop()
                if node not in live:
                    live.add(node)
                    pending.extend(node.all_input_nodes)
    return [node for node in _call_nodes(program) if node in live]


def _with_view_chain(node: torch.fx.Node) -> list[torch.fx.Node]:
    """[view calls..., node]: an in-place op on a view is functionalized against the view's base (the view is
    replayed after it), so its trace needs the views that made its arguments; any other call is traced alone."""
    if not (isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable):
        return [node]
    chain: list[torch.fx.Node] = []
    pending = list(node.all_input_nodes)
    while pending:
        source = pending.pop()
        if source.op == "call_function" and getattr(source.target, "is_view", False) and source not in chain:
            chain.append(source)
            pending.extend(source.all_input_nodes)
    order = {graph_node: index for index, graph_node in enumerate(node.graph.nodes)}
    return sorted(chain, key=order.__getitem__) + [node]


def _graph_inputs_read(calls: list[torch.fx.Node]) -> tuple[bool, ...]:
    """For a chain ending in an in-place op: which of its inputs are graph inputs (a write to one is copied back at
    the end of the graph, see the module doc); () for other calls, whose trace does not depend on it."""
    if not (isinstance(calls[-1].target, torch._ops.OpOverload) and calls[-1].target._schema.is_mutable):
        return ()
    return tuple(source.op == "placeholder" for source in _chain_inputs(calls))


def _chain_inputs(calls: list[torch.fx.Node]) -> list[torch.fx.Node]:
    inside = set(calls)
    return list(dict.fromkeys(source for call in calls for source in call.all_input_nodes if source not in inside))


def _call_signature(node: torch.fx.Node) -> tuple:
    """What a decomposition can depend on: the op, its tensors' shapes, strides, dtypes and devices, the rest."""
    flat, spec = pytree.tree_flatten((node.args, node.kwargs))
    return (op_name(node.target), str(spec), tuple(_argument_key(item) for item in flat))


def _argument_key(item: Any) -> tuple:
    if not isinstance(item, torch.fx.Node):
        return ("constant", repr(item))
    value = item.meta.get("val")
    if isinstance(value, torch.Tensor):
        return ("tensor", str(tuple(value.shape)), str(value.stride()), str(value.dtype), str(value.device))
    return ("value", repr(value))


def _decompose_last_call(calls: list[torch.fx.Node], table: DecompTable) -> list[str]:
    """The ops the last of `calls` becomes: what the chain traces to, less what the chain before it traces to."""
    whole = _trace_calls(calls, table)
    remaining = Counter(whole) - Counter(_trace_calls(calls[:-1], table) if len(calls) > 1 else [])
    ops = []
    for name in reversed(whole):  # the replayed views come last: keep the last occurrences
        if remaining[name] > 0:
            remaining[name] -= 1
            ops.append(name)
    return ops[::-1]


def _trace_calls(calls: list[torch.fx.Node], table: DecompTable) -> list[str]:
    """The ops `calls` (in graph order) become under AOTAutograd with `table`, traced on the fake values export
    recorded for their inputs: CompositeImplicitAutograd kernels through the Python dispatcher (where torch
    registers its Python decompositions, e.g. inference dropout -> clone), functionalized as AOTAutograd does
    (add_ -> add), a data mutation of a graph input copied back into it (`aten.copy_.default`, as
    keep_inference_input_mutations=True has AOTAutograd do), dead nodes removed (a batch norm's unused statistics)."""
    from torch._functorch._aot_autograd.functional_utils import (
        from_fun,
        has_data_mutation,
        sync_functional_tensor,
        to_fun,
    )
    from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    inputs = _chain_inputs(calls)
    values = [source.meta.get("val") for source in inputs]
    if any(value is None for value in values):
        raise ValueError(f"{calls[-1].name}: an argument has no recorded value")

    def replay(*traced_inputs: Any) -> Any:
        with FunctionalTensorMode():
            env = {
                source: to_fun(value) if isinstance(value, torch.Tensor) else value
                for source, value in zip(inputs, traced_inputs, strict=True)
            }
            for call in calls:
                args, kwargs = torch.fx.node.map_arg((call.args, call.kwargs), env.__getitem__)
                env[call] = call.target(*args, **kwargs)
            result = env[calls[-1]]
        result = pytree.tree_map(lambda value: from_fun(value) if isinstance(value, torch.Tensor) else value, result)
        for source, before in zip(inputs, traced_inputs, strict=True):
            after = env[source]
            if source.op == "placeholder" and isinstance(after, FunctionalTensor) and has_data_mutation(after):
                sync_functional_tensor(after)
                before.copy_(from_fun(after))
        return result

    with _python_kernels_replaced(getattr(table, "python_kernels", {})):  # make_fx enables the Python dispatcher
        traced = make_fx(replay, decomposition_table=dict(table), tracing_mode="symbolic")(*values)
    traced.graph.eliminate_dead_code()
    return [
        op_name(node.target)
        for node in traced.graph.nodes
        if node.op == "call_function"
        and isinstance(node.target, torch._ops.OpOverload | torch._ops.HigherOrderOperator)
    ]


@contextlib.contextmanager
def _python_kernels_replaced(kernels: Mapping[Any, Callable[..., Any] | None]) -> Iterator[None]:
    """Re-register Python kernels as a compiler package does on import (None: removed), for one trace only."""
    keys = (DispatchKey.CompositeImplicitAutograd, DispatchKey.Autograd)
    saved = {op: {key: op.py_kernels[key] for key in keys if key in op.py_kernels} for op in kernels}
    try:
        for op, kernel in kernels.items():
            for key in saved[op]:
                if kernel is None:
                    del op.py_kernels[key]
                else:
                    op.py_kernels[key] = kernel
            op._dispatch_cache.clear()
        yield
    finally:
        for op, previous in saved.items():
            op.py_kernels.update(previous)
            op._dispatch_cache.clear()


def torchair_table() -> CompilerTable:
    """What AOTAutograd applies for TorchAir: every CompositeImplicitAutograd kernel, with TorchAir's patch."""
    from torch._export.utils import _collect_all_valid_cia_ops, _get_decomp_for_cia

    aten = torch.ops.aten
    # TorchAir removes .default's Python CIA kernel (kept whole) and re-points .vec at .default
    kernels = {aten.upsample_nearest2d.default: None, aten.upsample_nearest2d.vec: _upsample_nearest2d_vec}
    table = {op: _get_decomp_for_cia(op) for op in _collect_all_valid_cia_ops()}
    for op, kernel in kernels.items():  # the whole-graph decomposition sees the patch through the table
        if kernel is None:
            table.pop(op, None)
        else:
            table[op] = kernel
    return CompilerTable(table, kernels)


def inductor_table() -> dict[Any, Callable[..., Any]]:
    """What AOTAutograd applies for Inductor: every CompositeImplicitAutograd kernel, then Inductor's table."""
    import torch._inductor.lowering  # noqa: F401 - Inductor's max-pool decomposition asks it, without importing it
    from torch._export.utils import _collect_all_valid_cia_ops, _get_decomp_for_cia
    from torch._inductor.decomposition import select_decomp_table

    table = {op: _get_decomp_for_cia(op) for op in _collect_all_valid_cia_ops()}
    table.update(select_decomp_table())
    return table


def _decomposed(name: str, table: DecompTable) -> bool:
    """Whether AOTAutograd rewrites the op: it is in `table` or has a CompositeImplicitAutograd kernel (export
    leaves some of those out of its CIA list, e.g. aten.dropout, but decomposes them all the same)."""
    from torch._export.utils import _is_cia_op

    op = coverage.resolve_op(name)
    return isinstance(op, torch._ops.OpOverload) and (op in table or _is_cia_op(op))


def _in_place(name: str) -> bool:
    """An aten op that writes one of its arguments (add_, relu_, copy_, index_put_...): AOTAutograd functionalizes
    it before TorchAir sees it. Custom ops stay with the table: they are functionalized into auto_functionalized,
    which torchair turns back into the op itself."""
    op = coverage.resolve_op(name)
    return isinstance(op, torch._ops.OpOverload) and op.namespace == "aten" and op._schema.is_mutable


def _functional_form(name: str) -> str | None:
    """ "aten.add.Tensor" for "aten.add_.Tensor", the op functionalization replaces an in-place op with (same
    overload, the name without its trailing underscore); None for other ops or when there is no such op."""
    if not _in_place(name):
        return None
    namespace, base, *overload = coverage.op_name(name).split(".")
    if not base.endswith("_") or base.endswith("__"):
        return None
    functional = ".".join([namespace, base[:-1], *overload])
    op = coverage.resolve_op(functional)
    if not isinstance(op, torch._ops.OpOverload) or op._schema.is_mutable:
        return None
    return functional


def _in_place_note(via: list[str]) -> str:
    functional = ", ".join(name for name in via if name != COPY_BACK) or "nothing"
    note = f"in-place: functionalized by AOTAutograd before TorchAir sees it, GE receives {functional}"
    if COPY_BACK in via:
        note += (
            f" and, where it writes a graph input, {COPY_BACK} back into the input at the end of the graph "
            "(TorchAir calls AOTAutograd with keep_inference_input_mutations=True, its default; GE Assign)"
        )
    return note


def _upsample_nearest2d_vec(input_tensor: torch.Tensor, output_size: Any, scale_factors: Any) -> torch.Tensor:
    """torchair._utils.adjust_implicit_decomposition.new_upsample_nearest2d_vec."""
    from torch._decomp.decompositions import get_scale_value, upsample_compute_output_size

    osize = upsample_compute_output_size(input_tensor.size(), output_size, scale_factors)
    scale_h = get_scale_value(scale_factors, 0)
    scale_w = get_scale_value(scale_factors, 1)
    return torch.ops.aten.upsample_nearest2d(input_tensor, osize, scale_h, scale_w)


def _call_nodes(program: torch.export.ExportedProgram) -> list[torch.fx.Node]:
    """The call_function nodes of the graph and of its subgraphs (the branches of cond, the body of map...)."""
    return [
        node
        for module in program.graph_module.modules()
        if isinstance(module, torch.fx.GraphModule)
        for node in module.graph.nodes
        if node.op == "call_function"
    ]


def _is_shape_read(target: Any) -> bool:
    """aten.sym_size.int & co.: the tracer re-creates these for dynamic input shapes, without provenance."""
    return op_name(target).startswith("aten.sym_")


def _origin(node: torch.fx.Node, originals: Mapping[str, str]) -> str | None:
    """The op name of the exported node `node` was decomposed from, following `from_node` provenance."""
    pending = list(node.meta.get("from_node") or ())
    seen: set[int] = set()
    while pending:
        source = pending.pop()
        if id(source) in seen:
            continue
        seen.add(id(source))
        if originals.get(source.name) == _target_name(source.target):
            return originals[source.name]
        pending.extend(source.from_node or ())
    return None


def _target_name(target: Any) -> str:
    """NodeSource keeps the target as a string ("aten.linear.default") in recent torch, as an object before."""
    return target if isinstance(target, str) else op_name(target)
