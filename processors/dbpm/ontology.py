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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType

import yaml

from processors.dbpm.config import RE, RULE_BASED

_PACKAGE_DATA = "ontology.yaml"


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
            pair = (str(entry["head_type"]).strip().upper(), str(entry["tail_type"]).strip().upper())
            labels = {aliases.get(str(r).strip().upper(), str(r).strip().upper()) for r in entry["relations"]}
            priors[pair] = priors.get(pair, frozenset()) | frozenset(labels)
        return cls(MappingProxyType(priors), MappingProxyType(aliases))

    def alias(self, relation: str) -> str:
        """The canonical label of ``relation``."""
        label = relation.strip().upper()
        return self.aliases.get(label, label)

    def _allowed(self, head_type: str, tail_type: str) -> frozenset[str] | None:
        return self.priors.get((head_type.strip().upper(), tail_type.strip().upper()))

    def violates(self, head_type: str, relation: str, tail_type: str) -> bool:
        """Eq. 6: the pair is listed and the alias-normalised relation is not allowed for it."""
        allowed = self._allowed(head_type, tail_type)
        return allowed is not None and self.alias(relation) not in allowed

    def admits(self, head_type: str, relation: str, tail_type: str) -> bool:
        """The pair is listed and the alias-normalised relation is allowed for it."""
        allowed = self._allowed(head_type, tail_type)
        return allowed is not None and self.alias(relation) in allowed

    def violation_event(self, gate_event: Mapping[str, object]) -> dict[str, object] | None:
        """The Filter's rule-based hard_fail for an RE gate event in the replay format, if it violates.

        A live pipeline calls this on every relation candidate and publishes the result on the
        verdict stream; in a replay stream these events are already present (replay contract).
        """
        if gate_event.get("task") != RE:
            return None
        payload = gate_event["payload"]
        if not self.violates(payload["head_type"], payload["relation"], payload["tail_type"]):  # type: ignore[index]
            return None
        return {
            "kind": "verdict",
            "ts": gate_event["ts"],
            "task": RE,
            "verdict": "hard_fail",
            "source": RULE_BASED,
            "patient_id": gate_event["patient_id"],
            "payload": dict(payload),  # type: ignore[call-overload]
        }


def load_ontology(text: str | None = None) -> Ontology:
    """Parse an ontology YAML document; without ``text``, the one shipped with the package.

    Args:
        text: YAML text in the shipped file's format, or None for the packaged ``data/ontology.yaml``.
    """
    if text is None:
        text = resources.files("processors.dbpm").joinpath("data", _PACKAGE_DATA).read_text("utf-8")
    return Ontology.from_mapping(yaml.safe_load(text))
