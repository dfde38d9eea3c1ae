"""Inductor's once-per-process setup, made in a CPU job's zygote so that every variant forked from it inherits it.

The first Inductor compile in a process also builds tables no model changes: the pattern-matcher's replacement
patterns (`joint_graph.lazy_init`, `post_grad.lazy_init`: each pattern traced under a fake mode), the hash of torch's
own sources that keys Inductor's caches (`codecache.torch_key`), the code generators of each device and a few modules
Dynamo imports on its first trace. On this project's 2-core VM that was ~0.65 s of the ~1.1 s of Python a forked
child spent compiling the example MLP (measured with `/usr/bin/time`-style process time, 2026-12-08). Like the
CPU-feature probe (advisor.harness.inductor_headers.probe_vec_isa), it is a cost of the process, not of the model: a
long-running process pays it once. So a CPU job's zygote pays it once and each variant's cold compile is its model's.
CPU only: on an accelerator the patterns are traced for that device, which must not be initialised before a fork.
"""

from __future__ import annotations


def prepare_process() -> None:
    """In a CPU job's zygote, after `import torch._inductor.compile_fx`: build what Inductor's first compile in a
    process would, leaving no thread behind (a zygote forks)."""
    import sympy.tensor.tensor  # noqa: F401 - imported by sympy on Inductor's first index simplification
    import torch
    from torch._inductor.codecache import torch_key
    from torch._inductor.codegen.common import init_backend_registration
    from torch._inductor.fx_passes import joint_graph, post_grad

    if torch.distributed.is_available():
        import torch.distributed.tensor.experimental  # noqa: F401 - imported by Dynamo's first trace
    torch_key()
    init_backend_registration()
    # the keys Inductor calls them with on CPU (functools.cache: positional device, as joint_graph_passes passes it)
    joint_graph.lazy_init(torch.device("cpu"))
    post_grad.lazy_init()
    _stop_progress_monitor()


def _stop_progress_monitor() -> None:
    """The pattern tracing runs an fx Interpreter, whose (disabled) tqdm bar starts tqdm's monitor thread. A zygote
    forks only from a single thread; a child that makes a bar later starts a monitor of its own."""
    try:
        from tqdm import tqdm
    except ImportError:
        return
    monitor = tqdm.monitor
    if monitor is not None:
        monitor.exit()
        tqdm.monitor = None
