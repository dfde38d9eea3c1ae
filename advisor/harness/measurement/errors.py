"""How a failure in a measurement child becomes a row status: out of memory, the model failing in eager mode,
or a backend failing at a named step (StageError carries the status)."""

from __future__ import annotations

from advisor.harness.sandbox import StageError

OOM_MARKERS = ("can't allocate memory", "out of memory", "outofmemory")
ERROR_CHARS = 4000  # a backend's error is kept whole up to this length: the useful part is often after its first line


def error_text(exc: BaseException, limit: int = ERROR_CHARS) -> str:
    """`Type: message`, every line of it (ONNX Runtime's "Got invalid dimensions for input: x for the following
    indices" names the dims on the next line), cut at `limit` characters with a note of how much was left out."""
    message = str(exc).strip()
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    if len(text) <= limit:
        return text
    marker = f" ... [{len(text) - limit} more characters]"
    return text[: limit - len(marker)] + marker


def is_out_of_memory(exc: BaseException, message: str) -> bool:
    return isinstance(exc, MemoryError) or any(marker in message.lower() for marker in OOM_MARKERS)


def eager_failure(exc: BaseException, what: str) -> StageError:
    """An allocation failure is "oom" (the memory limit or the machine), anything else a runtime error."""
    message = error_text(exc)
    if is_out_of_memory(exc, message):
        return StageError("oom", f"{what}: out of memory: {message}")
    return StageError("runtime_error", f"{what}: {message}")


def stage_error(exc: BaseException, during: str, default: str = "runtime_error") -> StageError:
    """Compiler exceptions are compile errors, allocation failures are oom, the rest runtime errors."""
    message = error_text(exc)
    if is_out_of_memory(exc, message):
        return StageError("oom", f"out of memory during {during}: {message}")
    module = type(exc).__module__ or ""
    if module.startswith(("torch._dynamo", "torch._inductor")) or type(exc).__name__ == "BackendCompilerFailed":
        return StageError("compile_error", f"compilation failed: {message}")
    return StageError(
        default, f"{'compilation' if default == 'compile_error' else 'the run'} failed during {during}: {message}"
    )
