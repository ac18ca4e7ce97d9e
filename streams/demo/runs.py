"""The golden cases' runs through the output gates, as the demo publishes them.

Each golden patient has one clinical reasoning run (``data/runs/<case>/``): its evidence packets, a draft
per revision and the regulatory audit of each, written to reproduce the supplement's Supplementary
Table 4 (citation outcomes per case and revision) and the Rule B inputs of the case's published run
(revision count and audit verdict, Table 3 Part C), which the demo's adversarial reviews therefore no
longer carry: the routes give them.

An upstream that answers the gates publishes a revision only once the previous one was routed, so the
run is fed in stages (:func:`run_stages`): every run's evidence, then, for a run whose evidence lacks
must-retrieve sources, the retrieval step's answer to the gates' evidence request (the evidence again
with those sources), then revision 0's drafts, their audits,
revision 1's drafts, ..., and last the pharmacist's deliverable (the final gated draft), whose safety
audit records the run. The feeder waits for the clinical loop to consume each stage before producing
the next (the loop reads several topics, and Kafka orders records within a partition only).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from processors.clinical.assess import RunEvent
from processors.drafts.inputs import parse_evidence
from schemas.clinical import AuditReport, ClinicalDraft, Deliverable, EvidenceBundle, EvidencePacket
from streams.data import RUNS
from topics.catalog import CLINICAL_AUDIT_REPORTS, CLINICAL_DELIVERABLES, CLINICAL_DRAFTS, CLINICAL_EVIDENCE

Stage = tuple[str, list[RunEvent | Deliverable]]
"""A topic and the records produced to it at once."""


@dataclass(frozen=True)
class GoldenRun:
    """One golden case's run: evidence, then a draft and its audit per revision."""

    case: str
    run_id: str
    evidence: EvidenceBundle
    drafts: list[ClinicalDraft]
    audits: list[AuditReport]
    retrieved: EvidenceBundle | None = None
    """The evidence again with the must-retrieve sources the first bundle lacked, as the retrieval step
    publishes it when the gates ask for them (ESC-002; the seed's pipeline injects the NTI map's sources
    before reasoning); None: nothing was missing."""


def golden_runs(cases: list[str], when: datetime) -> list[GoldenRun]:
    """The runs of ``cases`` (each has a directory under :data:`~streams.data.RUNS`) at ``when``."""
    runs = []
    for case in cases:
        folder = RUNS / case
        run_id = f"{case}-demo-run"
        base = {"patient_id": case, "run_id": run_id, "event_time": when}
        packets = parse_evidence(json.loads((folder / "evidence.json").read_text("utf-8")))
        evidence = EvidenceBundle(
            **base, packets=[EvidencePacket(source=p.source, text=p.text) for p in packets]
        )
        revisions = range(len(list(folder.glob("draft-*.md"))))
        drafts = [
            ClinicalDraft(**base, revision=r, text=(folder / f"draft-{r}.md").read_text("utf-8"))
            for r in revisions
        ]
        audits = [
            AuditReport(**base, revision=r, report=(folder / f"audit-{r}.json").read_text("utf-8"))
            for r in revisions
        ]
        runs.append(GoldenRun(case, run_id, evidence, drafts, audits))
    return runs


def run_stages(runs: list[GoldenRun], deliverables: list[Deliverable]) -> list[Stage]:
    """The runs' records in the order an upstream answering the gates publishes them (module doc)."""
    stages: list[Stage] = [(CLINICAL_EVIDENCE, [r.evidence for r in runs])]
    if retrieved := [r.retrieved for r in runs if r.retrieved is not None]:
        stages.append((CLINICAL_EVIDENCE, list(retrieved)))
    for revision in range(max(len(r.drafts) for r in runs)):
        stages.append((CLINICAL_DRAFTS, [r.drafts[revision] for r in runs if revision < len(r.drafts)]))
        stages.append(
            (CLINICAL_AUDIT_REPORTS, [r.audits[revision] for r in runs if revision < len(r.audits)])
        )
    stages.append((CLINICAL_DELIVERABLES, list(deliverables)))
    return stages


def deliverable(run: GoldenRun, final_draft: str) -> Deliverable:
    """The pharmacist's deliverable of ``run``: its final gated draft."""
    return Deliverable(
        patient_id=run.case,
        deliverable_id=f"{run.run_id}-care-plan",
        event_time=run.evidence.event_time,
        text=final_draft,
    )


def with_retrieved(run: GoldenRun, missing: list[str]) -> GoldenRun:
    """``run`` with the retrieval step's answer to an evidence request for ``missing`` (the run's evidence
    and a packet per missing source, named as the NTI map names it)."""
    packets = [
        *run.evidence.packets,
        *(EvidencePacket(source=source, text=f"{source}, retrieved for the NTI map's must-retrieve list.")
          for source in missing),
    ]  # fmt: skip
    retrieved = run.evidence.model_copy(update={"packets": packets})
    return GoldenRun(run.case, run.run_id, run.evidence, run.drafts, run.audits, retrieved)
