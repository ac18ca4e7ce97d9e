"""The clinical family: FHIR updates, reviews, runs through the output gates and deliverables, and the
assessments, safety audits, gated drafts, revision routes and evidence requests
:func:`processors.clinical.assess.process_event` gives them, patient by patient.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from typing import Any

from processors.clinical.assess import RunEvent, process_event
from processors.clinical.knowledge import default_knowledge
from schemas.clinical import (
    AdversarialReview,
    AuditReport,
    ClinicalAssessment,
    ClinicalDraft,
    Deliverable,
    EvidenceBundle,
    EvidencePacket,
    SafetyAudit,
)
from schemas.fhir import FhirUpdate
from schemas.serde import Serde
from streams.data.timeline import encounter, fhir_timeline
from streams.runtime.dlq import fits
from streams.runtime.settings import Settings
from streams.testing.poison.records import CLINICAL_FEEDS, LARGE, MIB, Expected, Record, Scale
from streams.testing.poison.references.common import Family, filler, json_ts, noise, too_large
from streams.worker.clinical import OUTPUT_TOPICS, Published, fhir_input, gate_flags
from topics.catalog import (
    CLINICAL_AUDIT_REPORTS,
    CLINICAL_DELIVERABLES,
    CLINICAL_DRAFTS,
    CLINICAL_EVIDENCE,
    CLINICAL_REVIEWS,
    FHIR_UPDATES,
)

_REVIEWS: tuple[dict[str, Any], ...] = (
    {
        "disposition": "CONCUR",
        "automation_bias_risk": "LOW",
        "revision_count": 2,
        "audit_verdict": "APPROVED",
    },
    {
        "disposition": "DISSENT",
        "automation_bias_risk": "LOW",
        "revision_count": 1,
        "audit_verdict": "APPROVED",
    },
    {
        "disposition": "DISSENT",
        "subcategory": "DATAGAP",
        "automation_bias_risk": "LOW",
        "revision_count": 1,
        "audit_verdict": "APPROVED",
    },
    {
        "disposition": "CONCUR",
        "automation_bias_risk": "LOW",
        "revision_count": 2,
        "audit_verdict": "MODIFICATION_REQUIRED",
    },
)
_DELIVERABLES = (
    "Hold digoxin; repeat level and potassium in 24 h.",
    "Continue warfarin 5 mg daily; recheck INR in one week.",
    "Start amiodarone 200 mg daily with warfarin; no dose change.",
    "Stop furosemide; monitor creatinine and potassium.",
)


LABEL = {
    "digoxin label": "Digoxin toxicity is more likely with hypokalemia. Check potassium before each dose.",
    "warfarin label": "Bleeding is the major risk of warfarin therapy. Amiodarone can raise the INR.",
}
"""The evidence packets of the suite's runs."""

_CITATIONS = (
    '[CRG: digoxin label — "Digoxin toxicity is more likely with hypokalemia."]',
    '[CRG: warfarin label — "Bleeding is the major risk of warfarin therapy. Amiodarone ... raise the INR."]',
    '[CRG: digoxin label — "Toxicity of digoxin is more likely with hypokalemia."]',
    '[CRG: digoxin label — "Amiodarone can raise the INR."]',
    '[CRG: warfarin label — "Warfarin is safe at any INR."]',
)
"""Citations of the suite's drafts: verified, ellipsis, paraphrase, wrong attribution, fabricated."""

_AUDITS = (
    {"violations": ["Rule 4.3: parametric leakage in the dosing section"], "cds_compliant": True},
    {"violations": ["[PARSER WARNING] no verdict line"], "cds_compliant": True},
    {"violations": ["Rule 4.14: quote integrity"], "cds_compliant": False},
    {"violations": ["Rule 4.3: ✅ PASS — No parametric leakage"], "cds_compliant": True},
    {"violations": [], "cds_compliant": True},
)
"""Audit reports of the suite's runs, one per router path."""


def _runs(tag: str, pids: list[str], when: datetime, rng: random.Random) -> list[RunEvent]:
    """A run of one revision (evidence, draft 0, its audit) per patient of ``pids`` (one run each: a
    patient's next run would replace the first before its audit), in feed order: every evidence bundle,
    then every draft, then every audit."""
    runs = []
    for i, pid in enumerate(pids):
        base = {"patient_id": pid, "run_id": f"{tag}-run-{i}", "event_time": when + timedelta(hours=i)}
        packets = [EvidencePacket(source=s, text=t) for s, t in LABEL.items()]
        cited = " ".join(rng.sample(_CITATIONS, k=rng.randint(1, len(_CITATIONS))))
        text = f"## HOLD DIGOXIN\nDiscontinue digoxin for now. {cited}\nMonitor potassium."
        report = json.dumps(rng.choice(_AUDITS), ensure_ascii=False)
        runs.append((
            EvidenceBundle(**base, packets=packets),
            ClinicalDraft(**base, revision=0, text=text),
            AuditReport(**base, revision=0, report=report),
        ))  # fmt: skip
    return [event for stage in zip(*runs, strict=True) for event in stage]


def _encounter(pid: str, rid: str, when: datetime, text: str) -> FhirUpdate:
    """A FHIR update of one finished Encounter whose reason is ``text``."""
    resource = json.dumps(encounter(pid, rid, text))
    return FhirUpdate(ts=when, patient_id=pid, resource_type="Encounter", resource=resource)


def clinical_family(tag: str, scale: Scale, rng: random.Random, serde: Serde) -> Family:
    """The good FHIR updates, reviews, runs through the output gates and deliverables, and the
    assessments, gated drafts, routes and audits they produce, in the order the suite feeds them
    (:data:`~streams.testing.poison.records.CLINICAL_FEEDS`).

    With ``scale.large``: updates and deliverables of :data:`LARGE` text, and patients whose 3 MiB
    updates grow their state until it would not fit the patient table's changelog (the update that would
    is bad: the runtime must dead-letter it and keep the state it had).
    """
    good = scale.good
    patients = good // 2 + 1  # about half the patients' weeks have an update: enough updates
    updates = []
    for update in fhir_timeline(patients, rng.randrange(1 << 30))[:good]:
        text = update.resource_json().replace("PT-DEMO-", f"{tag}-pt-")
        pid = update.patient_id.replace("PT-DEMO-", f"{tag}-pt-")
        updates.append(FhirUpdate(ts=update.ts, patient_id=pid, resource_type="Bundle", resource=text))
    pids = sorted({u.patient_id for u in updates})
    last = max(u.ts for u in updates)
    for j in range(scale.large):
        updates.append(_encounter(f"{tag}-pt-large-{j}", "e0", last, filler(LARGE, rng)))
        heavy = f"{tag}-pt-heavy-{j}"
        updates += [
            _encounter(heavy, f"e{n}", last + timedelta(hours=n), filler(3 * MIB, rng)) for n in range(3)
        ]
    reviews = [
        AdversarialReview(
            patient_id=pids[i % len(pids)],
            review_id=f"{tag}-review-{i}",
            event_time=last + timedelta(hours=i + 1),
            **rng.choice(_REVIEWS),
        )
        for i in range(good)
    ]
    deliverables = [
        Deliverable(
            patient_id=pids[i % len(pids)],
            deliverable_id=f"{tag}-deliverable-{i}",
            event_time=last + timedelta(days=2, hours=i),
            text=filler(LARGE, rng) if i >= good else rng.choice(_DELIVERABLES),
        )
        for i in range(good + scale.large)
    ]
    knowledge, flags = default_knowledge(), gate_flags(Settings())
    states: dict[str, Any] = {}
    family = Family({topic: [] for topic in CLINICAL_FEEDS})
    run_topics = {
        EvidenceBundle: CLINICAL_EVIDENCE,
        ClinicalDraft: CLINICAL_DRAFTS,
        AuditReport: CLINICAL_AUDIT_REPORTS,
    }
    runs = _runs(tag, pids[:good], last + timedelta(days=1), rng)
    inputs: list[tuple[str, FhirUpdate | AdversarialReview | RunEvent | Deliverable, str]] = [
        *((FHIR_UPDATES, u, f"{u.patient_id}@{json_ts(u.ts)}") for u in updates),
        *((CLINICAL_REVIEWS, r, r.review_id) for r in reviews),
        *((run_topics[type(e)], e, f"{e.run_id}|{type(e).__name__}") for e in runs),
        *((CLINICAL_DELIVERABLES, d, d.deliverable_id) for d in deliverables),
    ]
    for topic, value, ident in inputs:
        event: Any
        if isinstance(value, FhirUpdate):
            event, errors = fhir_input(value)
            if event is None or errors:
                raise RuntimeError(f"a generated FHIR update is not valid: {errors}")
            now = value.ts
        else:
            event, now = value, value.event_time
        key = value.patient_id.encode()
        record = Record(topic, key, serde.encode(value, topic=topic), noise(rng, topic), ident=ident)
        before = states.get(value.patient_id)
        state, outputs = process_event(before, event, now, knowledge, flags)
        if state != before and not fits(topic, key, state.model_dump_json().encode()):
            family.feeds[topic].append(too_large(record, "StateTooLarge"))
            continue
        states[value.patient_id] = state
        family.feeds[topic].append(record)
        for out in outputs:
            if isinstance(out, Published):
                name = OUTPUT_TOPICS[type(out)]
                family.expected.append(
                    Expected(name, key, serde.encode(out, topic=name), (), topic, _ident(out))
                )
    return family


def _ident(out: Published) -> str:
    """How the report names a clinical output."""
    if isinstance(out, ClinicalAssessment):
        return f"{out.patient_id}@{out.as_of}"
    if isinstance(out, SafetyAudit):
        return out.audit_id
    return f"{out.run_id}|{out.revision}|{type(out).__name__}"
