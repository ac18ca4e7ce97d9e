"""Output gates on an LLM's clinical draft (PharmMesh): the draft gate and the audit router.

Pure and deterministic: the draft, its evidence and the audit in; the gated draft, the corrections,
observations and route out. Lists and thresholds are data (``data/gates.yaml``).
"""

from processors.drafts.citations import Evidence, Observation
from processors.drafts.gate import DraftGateResult, gate_draft
from processors.drafts.router import RouteResult, Violation, route_audit
from processors.drafts.rules import GateRules, gate_rules

__all__ = [
    "DraftGateResult",
    "Evidence",
    "GateRules",
    "Observation",
    "RouteResult",
    "Violation",
    "gate_draft",
    "gate_rules",
    "route_audit",
]
