"""TEST DOUBLE — not torch_npu. Fakes the torch_npu API surface the advisor uses; tensors stay on the CPU.

Importing it, like the real package: makes `torch.npu` this package's `npu` module and registers the
"npugraph_ex" Dynamo backend. Set ADVISOR_TEST_DOUBLE_NPU=0 to make `torch.npu.is_available()` False.
"""

import torch

from torch_npu import npu
from torch_npu._npugraph_ex import npugraph_ex_backend

__advisor_test_double__ = True
__version__ = "2.13.0+testdouble"

torch.npu = npu
torch._dynamo.register_backend(npugraph_ex_backend, name="npugraph_ex")

__all__ = ["npu"]
