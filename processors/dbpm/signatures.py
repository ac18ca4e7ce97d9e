"""Signatures (paper §3.1, replay contract): the canonical key under which evidence is grouped.

* NER: the entity, stripped of surrounding whitespace and lower-cased.
* RE: ``HEAD_TYPE|RELATION|TAIL_TYPE``, each part stripped and upper-cased. The relation is kept as
  written (not alias-normalised): aliases matter only to the ontology check (Eq. 6).
* QA: the question, stripped and lower-cased; a failing verdict that carries an error class is keyed
  ``qa::<category>|<error_class>`` instead (each part stripped and lower-cased, an empty category
  reads ``other``), the error-class disambiguator of §3.1 / §4.8.

Any other task is keyed like NER on the payload's ``entity`` field (the open task set).
"""

from __future__ import annotations

from collections.abc import Mapping

from processors.dbpm.config import NER, QA, RE

QA_CLASS_PREFIX = "qa::"
"""The prefix of a QA error-class signature, ``qa::<category>|<error_class>``."""


def is_qa_class(sig: str) -> bool:
    """Whether ``sig`` is a QA error-class signature: it groups failed verdicts by category and class
    (feeding the category's fail rate, Eq. 7), and no candidate is gated under it."""
    return sig.startswith(QA_CLASS_PREFIX)


def ner_signature(entity: str) -> str:
    """The NER signature of an entity string (also the key of the preemption set)."""
    return entity.strip().lower()


def re_signature(head_type: str, relation: str, tail_type: str) -> str:
    """The RE signature ``HEAD_TYPE|RELATION|TAIL_TYPE``."""
    return f"{head_type.strip().upper()}|{relation.strip().upper()}|{tail_type.strip().upper()}"


def qa_category(category: str) -> str:
    """The normalised QA category: stripped, lower-cased, ``other`` when empty."""
    return category.strip().lower() or "other"


def qa_class_prefix(category: str) -> str:
    """``qa::<category>|``: what every error-class signature of the (normalised) category starts with."""
    return f"{QA_CLASS_PREFIX}{qa_category(category)}|"


def qa_signature(question: str, category: str, error_class: str | None) -> str:
    """The QA signature: ``qa::<category>|<error_class>`` for classified fails, else the question."""
    if error_class and error_class.strip():
        return qa_class_prefix(category) + error_class.strip().lower()
    return question.strip().lower()


def signature(task: str, payload: Mapping[str, object], error_class: str | None = None) -> str:
    """The signature of a candidate of ``task`` with ``payload`` (replay-contract field names).

    Args:
        task: the task name.
        payload: the candidate payload.
        error_class: for QA fails only, the verdict's error class (None for gates and successes).
    """
    if task == RE:
        return re_signature(payload["head_type"], payload["relation"], payload["tail_type"])  # type: ignore[arg-type]
    if task == QA:
        return qa_signature(payload["question"], payload["category"], error_class)  # type: ignore[arg-type]
    if task == NER or "entity" in payload:
        return ner_signature(payload["entity"])  # type: ignore[arg-type]
    raise KeyError(f"no signature rule for task {task!r} without an 'entity' field")


def signature_payload(task: str, sig: str) -> dict[str, str]:
    """A payload whose signature is ``sig`` normalised (what a pin of a signature carries): the NER
    entity, the RE types and relation with empty entities, the QA question; blank fields elsewhere.

    ``signature(task, signature_payload(task, text))`` is therefore the signature ``text`` names, as
    typed: that is how a typed signature is normalised.

    Raises:
        ValueError: ``sig`` is blank, or an RE signature is not ``HEAD_TYPE|RELATION|TAIL_TYPE``.
    """
    if not sig.strip():
        raise ValueError("a signature must not be blank")
    if task == RE:
        parts = sig.split("|")
        if len(parts) != 3 or not all(part.strip() for part in parts):
            raise ValueError(f"an RE signature is HEAD_TYPE|RELATION|TAIL_TYPE, got {sig!r}")
        head_type, relation, tail_type = parts
        return {"head": "", "head_type": head_type, "relation": relation, "tail": "", "tail_type": tail_type}
    if task == QA:
        return {"question": sig, "answer": "", "category": ""}
    return {"entity": sig, "category": ""}
