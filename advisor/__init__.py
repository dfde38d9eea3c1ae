"""npu-advisor: measure which graph mode a PyTorch model should use, and say why.

Importing this package (or ``advisor.decide``, ``advisor.context``, ``advisor.report``,
``advisor.artifacts`` sniffing) never imports torch: the API server relies on that.
"""

__version__ = "0.1.0"
