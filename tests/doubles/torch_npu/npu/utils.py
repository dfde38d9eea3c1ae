"""TEST DOUBLE — not torch_npu.npu.utils."""

SOC_VERSION = 222  # Ascend910B2 in NpuVariables.h


def get_soc_version() -> int:
    return SOC_VERSION


def get_cann_version(module="CANN") -> str:
    if module != "CANN":
        raise ValueError(f"test double knows only module='CANN', got {module!r}")
    return "8.5.0.testdouble"
