"""Where a model's example inputs come from: an inputs file, `--input-shape` flags, or generated from specs.

An inputs file is loaded with `torch.load(weights_only=True)`: tensors, tuples/lists of tensors or a dict
name -> tensor, never arbitrary pickled objects.

Example inputs are always one flat tuple, in the order of the model's inputs (an ExportedProgram's user inputs:
positional arguments first, then keyword arguments in the order the program lists them). A model that takes
keyword arguments (`torch.export.export(model, (ids,), kwargs={"attention_mask": mask})`) or nested inputs is
wrapped in `KeywordCall`, which takes that flat tuple and calls the model as it was exported:
`model(ids, attention_mask=mask)`. Eager, every backend, the accuracy references and the training step call
the wrapper, so the keyword arguments reach the model wherever it runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from advisor.core.text import first_line

_SHAPE_FLAG = re.compile(r"^(?P<name>[A-Za-z_]\w*)=(?P<dims>\d+(?:x\d+)*|)(?::(?P<dtype>\w+))?$")


class InputsError(ValueError):
    """A user-facing problem with the inputs file or the --input-shape flags."""


@dataclass
class ShapeFlag:
    name: str
    shape: list[int]
    dtype: torch.dtype


def parse_shape_flag(text: str) -> ShapeFlag:
    """Parse "NAME=1x3x224x224:float32" (dtype optional, default float32; "NAME=:int64" is a scalar)."""
    match = _SHAPE_FLAG.match(text.strip())
    if not match:
        raise InputsError(f"--input-shape {text!r} is not NAME=1x3x224x224[:dtype] (e.g. x=8x784:float32).")
    dtype_name = match["dtype"] or "float32"
    dtype = getattr(torch, dtype_name, None)
    if not isinstance(dtype, torch.dtype):
        raise InputsError(f"--input-shape {text!r}: unknown dtype {dtype_name!r} (e.g. float32, float16, int64).")
    shape = [int(dim) for dim in match["dims"].split("x")] if match["dims"] else []
    return ShapeFlag(match["name"], shape, dtype)


def tensors_from_flags(flags: list[str], names: list[str], *, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """One generated tensor per forward argument in `names`, shaped by the matching flag."""
    parsed = {flag.name: flag for flag in map(parse_shape_flag, flags)}
    unknown = sorted(set(parsed) - set(names))
    if unknown:
        raise InputsError(f"--input-shape names {unknown} are not inputs of this model; its inputs are {names}.")
    missing = [name for name in names if name not in parsed]
    if missing:
        raise InputsError(f"--input-shape is missing for input(s) {missing}; this model's inputs are {names}.")
    generator = torch.Generator().manual_seed(seed)
    return tuple(generate_tensor(parsed[name].shape, parsed[name].dtype, generator) for name in names)


def generate_tensor(shape: list[int], dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    """Random normal floats; ones for integers and bools (valid token ids and an all-ones mask)."""
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=generator).to(dtype)
    return torch.ones(shape, dtype=dtype)


def resized_like(template: torch.Tensor, shape: list[int], generator: torch.Generator) -> torch.Tensor:
    """A tensor of `shape` standing in for `template` at another size: random floats, all-true masks, integers
    within the template's own range (token ids stay valid ids)."""
    if template.is_floating_point():
        return torch.randn(shape, generator=generator, dtype=template.dtype)
    if template.dtype == torch.bool:
        return torch.ones(shape, dtype=torch.bool)
    low, high = (int(template.min()), int(template.max())) if template.numel() else (0, 1)
    return torch.randint(low, high + 1, shape, generator=generator, dtype=template.dtype)


def load_inputs_file(path: str | Path, names: list[str]) -> tuple[Any, ...]:
    """Positional example inputs from a `torch.save`d tensor, tuple/list, or dict keyed by input name."""
    try:
        data = torch.load(str(path), map_location="cpu", weights_only=True)
    except FileNotFoundError as exc:
        raise InputsError(f"Inputs file {str(path)!r} does not exist.") from exc
    except Exception as exc:  # noqa: BLE001 - anything torch.load refuses is the user's file's problem
        raise InputsError(
            f"Inputs file {str(path)!r} could not be loaded as plain tensors (torch.load weights_only=True): "
            f"{first_line(str(exc).strip()) or type(exc).__name__}"
        ) from exc
    if isinstance(data, torch.Tensor):
        return (data,)
    if isinstance(data, (tuple, list)):
        return tuple(data)
    if isinstance(data, dict):
        missing = [name for name in names if name not in data]
        if missing:
            raise InputsError(f"Inputs file {str(path)!r} has no entry for input(s) {missing}; expected {names}.")
        return tuple(data[name] for name in names)
    raise InputsError(
        f"Inputs file {str(path)!r} holds a {type(data).__name__}; expected a tensor, a tuple/list of tensors, "
        "or a dict mapping input names to tensors."
    )


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ------------------------------------------------------------------ keyword inputs
@dataclass
class InSpecSplit:
    """An ExportedProgram's input spec ((args...), {kwargs...}) as the harness needs it."""

    in_spec: Any  # the TreeSpec itself
    positional: int  # top-level positional arguments
    positional_leaves: int  # input leaves (program inputs) that come from the positional arguments
    keywords: list[str] = field(default_factory=list)  # keyword argument names, in the program's order
    flat: bool = True  # every argument is one input (no tuple/dict/dataclass argument)


def split_in_spec(in_spec: Any) -> InSpecSplit | None:
    """Split an ExportedProgram's `call_spec.in_spec`; None when it is not the usual (args, kwargs) pair."""
    from torch.utils._pytree import TreeSpec

    if not isinstance(in_spec, TreeSpec) or in_spec.type is not tuple or in_spec.num_children != 2:
        return None
    args_spec, kwargs_spec = in_spec.children()
    if args_spec.type is not tuple or kwargs_spec.type is not dict:
        return None
    keywords = [str(name) for name in kwargs_spec.context]
    flat = all(child.is_leaf() for child in (*args_spec.children(), *kwargs_spec.children()))
    return InSpecSplit(
        in_spec=in_spec,
        positional=args_spec.num_children,
        positional_leaves=args_spec.num_leaves,
        keywords=keywords,
        flat=flat,
    )


class KeywordCall(torch.nn.Module):
    """`model` called the way it was exported, from the flat example inputs: `KeywordCall(m, split)(ids, mask)`
    runs `m(ids, attention_mask=mask)`. Nested inputs are rebuilt with the program's input spec. The model is a
    submodule, so parameters, `.to()`, deep copies and compilers see it as usual."""

    def __init__(self, model: Any, split: InSpecSplit) -> None:
        super().__init__()
        self.model = model
        self.positional = split.positional
        self.keywords = tuple(split.keywords)
        self.in_spec = None if split.flat else split.in_spec

    def forward(self, *inputs: Any) -> Any:
        if self.in_spec is None:
            n = self.positional
            return self.model(*inputs[:n], **dict(zip(self.keywords, inputs[n:], strict=True)))
        from torch.utils._pytree import tree_unflatten

        args, kwargs = tree_unflatten(list(inputs), self.in_spec)
        return self.model(*args, **kwargs)
