"""Small example models the CLI can export itself, so a first run needs no model of your own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

EXAMPLES = ("mlp", "cnn", "gpt2-decode")
TINY_GPT2 = {"n_layer": 2, "n_head": 4, "n_embd": 128, "vocab_size": 1000, "n_positions": 128}


def build_example(name: str) -> tuple[Any, tuple[Any, ...]]:
    """(module in eval mode, example inputs) for one of EXAMPLES."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    if name == "mlp":
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
        return model.eval(), (torch.randn(8, 784),)
    if name == "cnn":
        model = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(32, 10),
        )
        return model.eval(), (torch.randn(2, 3, 32, 32),)
    raise ValueError(f"unknown example {name!r}; choose one of {', '.join(EXAMPLES)}")


def export_example(name: str, path: str | Path, fmt: str = "exported_program") -> Path:
    """Build an example and save it as an ExportedProgram (.pt2) or TorchScript (.pt) file; gpt2-decode is a
    generation archive (prefill + decode programs, static KV cache), an ExportedProgram format only."""
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if name == "gpt2-decode":
        if fmt != "exported_program":
            raise ValueError("gpt2-decode is a generation archive of ExportedPrograms; it has no TorchScript form")
        return export_gpt2_generation(path, TINY_GPT2)
    model, inputs = build_example(name)
    with torch.no_grad():
        if fmt == "exported_program":
            torch.export.save(torch.export.export(model, inputs), str(path))
        elif fmt == "torchscript":
            torch.jit.save(torch.jit.trace(model, inputs), str(path))
        else:
            raise ValueError(f"unknown format {fmt!r}; choose exported_program or torchscript")
    return path


def export_gpt2_generation(
    path: str | Path, config: dict[str, Any], prompt_tokens: int = 16, max_cache_len: int = 64, seed: int = 0
) -> Path:
    """A random-init GPT-2 (`transformers` GPT2Config(**config)) exported the way `transformers` documents for
    torch.export with a static KV cache (TorchExportableModuleForDecoderOnlyLM), as a generation archive: a
    `prefill` program for a `prompt_tokens` prompt and a `decode` program for one token, packaged together with
    torch.export.pt2_archive's package_pt2 (advisor.harness.loading.GENERATION_FORMAT)."""
    import torch
    from torch.export.pt2_archive._package import package_pt2

    try:
        from transformers import GPT2Config, GPT2LMHeadModel
        from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM
    except ImportError as exc:
        raise ValueError(
            f"gpt2-decode needs the transformers package (pip install 'transformers>=4.44'): {exc}"
        ) from exc

    torch.manual_seed(seed)
    settings = GPT2Config(**config)
    settings.bos_token_id = settings.eos_token_id = 0  # the default 50256 is outside a small vocabulary
    model = GPT2LMHeadModel(settings).eval()
    model.generation_config.cache_implementation = "static"
    exportable = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=max_cache_len)
    prompt = torch.randint(0, settings.vocab_size, (1, prompt_tokens), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        prefill = exportable.export(input_ids=prompt, cache_position=torch.arange(prompt_tokens))
        decode = exportable.export(input_ids=prompt[:, -1:], cache_position=torch.tensor([prompt_tokens]))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    package_pt2(str(path), exported_programs={"prefill": prefill, "decode": decode})
    return path
