"""The clinical agent's reference: the pure stream processor fed as the agent feeds it.

:func:`pure_outputs` runs :func:`processors.clinical.assess.process_event` over patient-keyed events the
way the clinical agent does (FHIR updates validated by :func:`streams.worker.clinical.fhir_input`, each
event at its own event time, one state per patient); what the agent publishes must equal it (the
topology tests, the demo).
"""

from __future__ import annotations

from collections.abc import Iterable

from processors.clinical.assess import ClinicalStreamState, RunEvent, process_event
from processors.clinical.knowledge import default_knowledge
from schemas.clinical import AdversarialReview, Deliverable
from schemas.fhir import FhirUpdate
from streams.runtime.settings import Settings
from streams.worker.clinical import Published, fhir_input, gate_flags

ClinicalEvent = FhirUpdate | AdversarialReview | Deliverable | RunEvent
"""What the clinical agent consumes, keyed by patient."""


def pure_outputs(events: Iterable[ClinicalEvent], settings: Settings) -> list[Published]:
    """What the pure stream processor publishes for ``events``, in order: assessments, safety audits,
    gated drafts and revision routes.

    Each patient has its own state; a FHIR update contributes its valid changes only, at its ``ts``;
    every other event acts at its ``event_time``.
    """
    knowledge, flags = default_knowledge(), gate_flags(settings)
    states: dict[str, ClinicalStreamState] = {}
    emitted: list[Published] = []
    for event in events:
        if isinstance(event, FhirUpdate):
            item, now = fhir_input(event)[0], event.ts
        else:
            item, now = event, event.event_time
        if item is None:
            continue
        states[event.patient_id], outputs = process_event(
            states.get(event.patient_id), item, now, knowledge, flags
        )
        emitted += [o for o in outputs if isinstance(o, Published)]
    return emitted
