"""The decision engine's public API: what the report, the server and the CLI use (the modules are internals).

Backend facts (display names, devices, the option label) are in advisor.core.catalogue, snippets in
advisor.core.snippets.
"""

from advisor.core.catalogue import TORCHAIR_EXPORT_MODE
from advisor.core.decision.break_even import format_calls
from advisor.core.decision.engine import ENGINE_VERSION, decide
from advisor.core.decision.rules import InspectionFacts, torchair_status_unknown

__all__ = [
    "ENGINE_VERSION",
    "TORCHAIR_EXPORT_MODE",
    "InspectionFacts",
    "decide",
    "format_calls",
    "torchair_status_unknown",
]
