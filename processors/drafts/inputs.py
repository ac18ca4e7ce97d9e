"""The gates' inputs as their contract writes them (specs/output-gates.md), checked.

``{"packets": [{"source": str, "text": str}, ...]}`` is a run's evidence; ``{"violations": [str, ...],
"cds_compliant": bool, "text": str}`` a regulatory audit (``cds_compliant`` defaults to true: an audit
that does not say otherwise found the draft compliant; ``text``, the audit agent's report as written, is
optional and only its length is used, for the register's T-001). Anything else is a
:class:`DraftInputError` naming what is wrong, which the command reports and the stream sends to the
dead-letter topic.
"""

from __future__ import annotations

from dataclasses import dataclass

from processors.drafts.citations import Evidence


class DraftInputError(ValueError):
    """An input that is not what the contract describes."""


@dataclass(frozen=True)
class AuditFindings:
    """A regulatory audit's findings."""

    violations: list[str]
    cds_compliant: bool
    text_length: int | None = None
    """Characters of the audit agent's report (``text``), where the audit carries it (T-001)."""


def parse_evidence(data: object) -> list[Evidence]:
    """The evidence packets of ``data`` (parsed JSON)."""
    if not isinstance(data, dict) or not isinstance(data.get("packets"), list):
        raise DraftInputError('evidence must be an object with a "packets" list')
    packets = []
    for index, packet in enumerate(data["packets"]):
        if not isinstance(packet, dict) or not all(
            isinstance(packet.get(k), str) for k in ("source", "text")
        ):
            raise DraftInputError(f'evidence packet {index} must have string "source" and "text"')
        packets.append(Evidence(packet["source"], packet["text"]))
    return packets


def parse_audit(data: object) -> AuditFindings:
    """The audit report of ``data`` (parsed JSON)."""
    if not isinstance(data, dict) or not isinstance(data.get("violations"), list):
        raise DraftInputError('an audit must be an object with a "violations" list')
    if not all(isinstance(v, str) for v in data["violations"]):
        raise DraftInputError("every violation must be a string")
    compliant = data.get("cds_compliant", True)
    if not isinstance(compliant, bool):
        raise DraftInputError('"cds_compliant" must be true or false')
    text = data.get("text")
    if text is not None and not isinstance(text, str):
        raise DraftInputError('"text" must be the audit report as a string')
    return AuditFindings(list(data["violations"]), compliant, None if text is None else len(text))
