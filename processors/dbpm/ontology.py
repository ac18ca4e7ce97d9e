"""The clinical relation ontology of the Ontology-Violation Filter (paper §4.7, Eq. 6).

``PRIORS`` maps a (head type, tail type) pair to the relation labels a generator may propose for it
(29 pairs); ``alias`` canonicalises relation spellings (32 entries). Both are data: the package ships
them in ``data/ontology.yaml`` (with its attribution header) and :func:`load_ontology` reads it once;
callers pass the resulting :class:`Ontology` into the engine, whose decisions stay pure.

Semantics (all comparisons case-insensitive, whitespace-stripped):

* ``alias(r)`` is the alias map's value for ``r``, or ``r`` itself when it has no entry;
* a triple **violates** (Eq. 6) iff its pair is listed and ``alias(r)`` is not among the aliases of
  that pair's allowed labels; an unlisted pair never violates;
* a triple is **admitted** iff its pair is listed and ``alias(r)`` is among them. The relation gate
  ALLOWs admitted triples (the RE gate's whitelist, see :mod:`processors.dbpm.gates`).

:func:`filter_verdict` is the Filter on a live candidate: the gate calls it on every relation it
decides and publishes the verdict on the verdict topic, where it feeds the RE blocklist like any
verdict (a replay stream already holds these verdicts, replay contract). Its id is reserved:
:func:`misfiled_filter_verdict` says why a verdict under it is not the Filter's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType

import yaml

from processors.dbpm.config import RE, RULE_BASED
from processors.dbpm.events import GateEvent, VerdictEvent
from schemas.dbpm import RePayload, Verdict, VerdictLabel

_PACKAGE_DATA = "ontology.yaml"


def type_pair(head_type: str, tail_type: str) -> tuple[str, str]:
    """The (head type, tail type) key of the priors: stripped and upper-cased."""
    return head_type.strip().upper(), tail_type.strip().upper()


@dataclass(frozen=True, slots=True)
class Ontology:
    """Admissible relations per (head type, tail type), alias-normalised and upper-cased."""

    priors: Mapping[tuple[str, str], frozenset[str]]
    aliases: Mapping[str, str]

    @classmethod
    def from_mapping(cls, data: Mapping[str, object]) -> Ontology:
        """Build from the YAML document's structure (``priors`` list and ``aliases`` map)."""
        aliases = {str(k).strip().upper(): str(v).strip().upper() for k, v in data["aliases"].items()}  # type: ignore[union-attr]
        priors: dict[tuple[str, str], frozenset[str]] = {}
        for entry in data["priors"]:  # type: ignore[union-attr]
            pair = type_pair(str(entry["head_type"]), str(entry["tail_type"]))
            labels = {aliases.get(str(r).strip().upper(), str(r).strip().upper()) for r in entry["relations"]}
            priors[pair] = priors.get(pair, frozenset()) | frozenset(labels)
        return cls(MappingProxyType(priors), MappingProxyType(aliases))

    def alias(self, relation: str) -> str:
        """The canonical label of ``relation``."""
        label = relation.strip().upper()
        return self.aliases.get(label, label)

    def _allowed(self, head_type: str, tail_type: str) -> frozenset[str] | None:
        return self.priors.get(type_pair(head_type, tail_type))

    def violates(self, head_type: str, relation: str, tail_type: str) -> bool:
        """Eq. 6: the pair is listed and the alias-normalised relation is not allowed for it."""
        allowed = self._allowed(head_type, tail_type)
        return allowed is not None and self.alias(relation) not in allowed

    def admits(self, head_type: str, relation: str, tail_type: str) -> bool:
        """The pair is listed and the alias-normalised relation is allowed for it."""
        allowed = self._allowed(head_type, tail_type)
        return allowed is not None and self.alias(relation) in allowed


FILTER_STAGE = "gatekeeper"
"""The rejection log's stage of the Filter's verdicts (paper Table 7, "Stage 1 (Gatekeeper)")."""

FILTER_ID_SUFFIX = ":ontology"
"""Appended to the candidate id to give the Filter's verdict an id of its own: the memory applies one
verdict per id (:mod:`processors.dbpm.ledger`), and the verifier's verdict on the same candidate
carries the candidate's own id, so both are kept."""


def filter_verdict(ontology: Ontology, candidate: GateEvent) -> Verdict | None:
    """The Ontology-Violation Filter on one candidate: a ``rule_based`` ``hard_fail`` if it violates.

    Only a relation candidate can violate (Eq. 6). The verdict is about the candidate's own triple, so
    it carries the candidate's signature (its payload), patient and event time: the Filter is part of
    the gate, which decides at the candidate's time, so deciding a candidate again gives the same
    verdict, byte for byte. Its weight is the source's (Table 4: 0.5). Rejection log: stage
    ``gatekeeper``, reason ``Ontology_Mismatch_<head type>`` (Table 7 names mismatches by clinical
    category; the head type is the category the inadmissible relation starts from), confidence 1.0
    (a deterministic rule). The candidate is the engine's event, which the gate decides without a
    model: the verdict's model is built for a violation only.

    Returns:
        The verdict, or None when the candidate is not a relation or its triple does not violate.
    """
    if candidate.task != RE:
        return None
    payload = candidate.payload
    head_type, tail_type = str(payload["head_type"]), str(payload["tail_type"])
    if not ontology.violates(head_type, str(payload["relation"]), tail_type):
        return None
    return Verdict(
        ts=candidate.ts,  # type: ignore[arg-type]
        task=RE,
        verdict=VerdictLabel.HARD_FAIL,
        source=RULE_BASED,
        patient_id=candidate.patient_id,
        payload=RePayload.model_validate({field: payload[field] for field in RePayload.model_fields}),
        candidate_id=candidate.candidate_id + FILTER_ID_SUFFIX,
        stage=FILTER_STAGE,
        reason=f"Ontology_Mismatch_{head_type.strip()}",
        confidence=1.0,
    )


def misfiled_filter_verdict(event: VerdictEvent) -> str | None:
    """Why a verdict under a Filter id (``<candidate_id>:ontology``) cannot be the Filter's, or None.

    The id is reserved for :func:`filter_verdict`, which judges relation triples only, as
    ``rule_based``. Learnt anyway, a verdict under that id on another task or from another source
    would occupy the ledger entry of a Filter verdict and teach a channel the Filter never feeds; the
    memory writer dead-letters it (stage ``validate``) with this reason.
    """
    candidate_id = event.candidate_id
    if candidate_id is None or not candidate_id.endswith(FILTER_ID_SUFFIX):
        return None
    if event.task != RE:
        return (
            f"verdict {candidate_id!r} has the Ontology-Violation Filter's id but is about a "
            f"{event.task!r} candidate: the Filter judges relation candidates only"
        )
    if event.source != RULE_BASED:
        return (
            f"verdict {candidate_id!r} has the Ontology-Violation Filter's id but source "
            f"{event.source!r}: the Filter's verdicts are {RULE_BASED!r}"
        )
    return None


def load_ontology(text: str | None = None) -> Ontology:
    """Parse an ontology YAML document; without ``text``, the one shipped with the package.

    Args:
        text: YAML text in the shipped file's format, or None for the packaged ``data/ontology.yaml``.
    """
    if text is None:
        text = resources.files("processors.dbpm").joinpath("data", _PACKAGE_DATA).read_text("utf-8")
    return Ontology.from_mapping(yaml.safe_load(text))
