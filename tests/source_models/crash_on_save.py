"""A model whose process dies in the middle of torch.export.save: half a file written, then SIGSEGV."""

import os
import signal
from pathlib import Path

import torch


def make():
    def half_then_crash(program, path, *args, **kwargs):
        Path(path).write_bytes(b"PK\x03\x04 half an archive")
        os.kill(os.getpid(), signal.SIGSEGV)

    torch.export.save = half_then_crash
    return torch.nn.Linear(8, 4).eval(), (torch.randn(2, 8),)
