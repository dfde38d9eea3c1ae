"""npu-advisor: measure which graph mode a PyTorch model should use, and say why.

Importing this package (or ``advisor.core.decision.engine``, ``advisor.core.context``, ``advisor.core.report``,
``advisor.core.artifacts`` sniffing) never imports torch: the API server relies on that.
"""

__version__ = "0.1.0"
