"""Generator side of the DBPM loop: deterministic hints, extraction prompts, candidates from answers.

Pure functions: the stream adapter (:mod:`streams.groups.generator`) makes the calls.

Input assembly (DocGemma §13, "deterministic entity extraction"): before any model call, code
pre-extracts patient identifiers with DocGemma's two regular expressions (UUIDs and the short form
``abc-123``) and drug mentions with a dictionary (the drug vocabulary of
:mod:`processors.clinical.vocabulary`, all its variants, loaded once by the caller and passed in), and
injects them as hints into the extraction prompt. Hints never become candidates themselves: the model
still proposes, the gate and the verifier dispose. Patient identifiers are hinted so the model does not
extract them as clinical entities.

Tasks and calls (paper §3.1, Table 14): one NER call and one RE call per narrative, and one
QA call per question template (paper QAR stage: code chooses the question and its category, the model
answers it; :data:`QA_TEMPLATES`). A QA answer of ``NOT_IN_NARRATIVE`` is an abstention and yields no
candidate (nothing to verify).

Candidate ids are content-derived (SHA-256 of patient, narrative event time, task and payload), so a
narrative processed twice (a crash before its offset was committed) yields the same ids and consumers
dedupe.

Time. A candidate's event time (``ts``) is when it was extracted, which the caller reads from its clock
and passes in: the memory decays on wall-clock time (paper Eq. 5, Appendix A.4), so a backfill of old
documents must not age the memory along the documents' dates. The narrative's own date travels as
``document_ts``: it identifies the narrative (the verifier finds the text by it, the coverage join
groups a narrative's candidates by it) and never drives decay.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from processors.clinical.vocabulary import DrugVocabulary
from schemas.dbpm import Candidate, Narrative, NerPayload, QaPayload, RePayload

QA_TEMPLATES: dict[str, tuple[str, str | None]] = {
    "diagnosis": ("What is the working diagnosis for this patient?", "Diagnosis"),
    "symptoms": ("Which symptoms brought the patient to care?", "Symptoms"),
    "tests": ("Which investigations were carried out?", "Tests"),
    "treatment": ("What treatment did the patient receive?", "Treatment"),
    "history": ("What past medical history is relevant?", "History"),
    "risk_factor": ("Which risk factors are documented?", "Risk_Factor"),
    "observation": ("What did the physical examination find?", "Observation"),
    "outcome_clinicalstatus": ("What was the clinical status at last follow-up?", "Outcome_ClinicalStatus"),
    "outcome_disposition": ("Where did the patient go after the admission?", "Outcome_Disposition"),
    "adverse_event": ("Did treatment cause an adverse event?", None),
    "outcome_mortality": ("Did the patient die during the reported course?", None),
}
"""The eleven QAR categories (paper §4.8): one question template each, and the NER bucket that grounds
it (None for the two categories without one). The questions are this project's wording."""

_UUID = re.compile(r"\b[a-f0-9]{8}(?:-[a-f0-9]{4}){3}-[a-f0-9]{12}\b", re.IGNORECASE)
_SHORT_ID = re.compile(r"\b[a-z]{3}-\d{3}\b", re.IGNORECASE)


def patient_id_hints(text: str) -> tuple[str, ...]:
    """Patient identifiers in ``text`` (DocGemma §13 patterns), in order of appearance, deduplicated."""
    found = sorted(
        [(m.start(), m.group()) for m in _UUID.finditer(text)]
        + [(m.start(), m.group()) for m in _SHORT_ID.finditer(text)]
    )
    return tuple(dict.fromkeys(value for _, value in found))


def drug_hints(text: str, vocabulary: DrugVocabulary) -> tuple[str, ...]:
    """Generic names of the drugs ``text`` mentions (brand names resolved), sorted."""
    return vocabulary.generics(text)


@dataclass(frozen=True, slots=True)
class Hints:
    """Deterministic pre-extraction results injected into extraction prompts."""

    patient_ids: tuple[str, ...] = ()
    drugs: tuple[str, ...] = ()

    def text(self) -> str:
        """The hint paragraph of a prompt ('' when there is nothing to say)."""
        lines = []
        if self.patient_ids:
            lines.append(f"Patient identifiers (not clinical entities): {', '.join(self.patient_ids)}")
        if self.drugs:
            lines.append(f"Drugs found by dictionary lookup: {', '.join(self.drugs)}")
        return "\n".join(lines)


def hints_for(text: str, vocabulary: DrugVocabulary) -> Hints:
    """All deterministic hints for a narrative."""
    return Hints(patient_id_hints(text), drug_hints(text, vocabulary))


_INSTRUCTIONS = {
    "ner": "Extract the clinical named entities of the narrative, each with its category. Copy each "
    "entity as written.",
    "re": "Extract the clinical relations the narrative states: head entity and type, relation label in "
    "UPPER_SNAKE_CASE, tail entity and type. Copy entities as written.",
    "qa": "Answer the question from the narrative only. If the narrative does not say, answer "
    "NOT_IN_NARRATIVE with an empty answer.",
}


def extraction_messages(
    task: str, narrative: str, hints: Hints, question: str | None = None
) -> list[dict[str, str]]:
    """The chat messages of one extraction call.

    Args:
        task: ``ner``, ``re`` or ``qa``.
        narrative: the narrative text.
        hints: deterministic pre-extraction results.
        question: the QA template question (``qa`` only).

    Returns:
        ``[{"role": "system", ...}, {"role": "user", ...}]``.
    """
    parts = [f"Narrative:\n{narrative}"]
    hint_text = hints.text()
    if hint_text:
        parts.append(f"Hints:\n{hint_text}")
    if question is not None:
        parts.append(f"Question: {question}")
    system = f"You extract clinical information from a patient narrative. {_INSTRUCTIONS[task]}"
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


_PAYLOADS = {"ner": NerPayload, "re": RePayload, "qa": QaPayload}


def candidate_id(narrative: Narrative, task: str, payload: Mapping[str, object]) -> str:
    """Content-derived candidate id: same narrative, task and payload, same id."""
    material = json.dumps(
        [narrative.patient_id, narrative.model_dump(mode="json")["ts"], task, payload], sort_keys=True
    )
    return f"{task}-{hashlib.sha256(material.encode()).hexdigest()[:24]}"


def candidates(
    narrative: Narrative, task: str, payloads: Sequence[Mapping[str, object]], extracted: datetime
) -> list[Candidate]:
    """The candidates of one extraction answer, duplicates (same payload) removed, order kept.

    Args:
        narrative: the source narrative (patient id and document date).
        task: ``ner``, ``re`` or ``qa``.
        payloads: payload objects with the fields of the task's payload record.
        extracted: when the answer was extracted: the candidates' event time.

    Returns:
        One candidate per distinct payload.
    """
    out: dict[str, Candidate] = {}
    for payload in payloads:
        cid = candidate_id(narrative, task, payload)
        if cid not in out:
            out[cid] = Candidate(
                ts=extracted, task=task, patient_id=narrative.patient_id, candidate_id=cid,
                payload=_PAYLOADS[task].model_validate(payload), document_ts=narrative.ts,
            )  # fmt: skip
    return list(out.values())


def qa_payload(category: str, answer: str) -> dict[str, object]:
    """The QA payload of a template answer."""
    question, _bucket = QA_TEMPLATES[category]
    return {"question": question, "answer": answer, "category": category}
