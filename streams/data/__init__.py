"""Bundled data, installed with the package: the inputs of ``clingate demo``, the benchmarks and the tests.

It imports nothing of clingate, so every layer above may read it.

* ``clinical/``: the golden FHIR R4 bundles PT-TEST-008, -009, -010 and -012 (synthetic, built from
  the case descriptions of the PharmMesh escape register supplement; see
  ``tests/unit/clinical/test_clinical_golden.py`` for the published outputs they reproduce).
* ``runs/``: each golden case's run through the output gates (``evidence.json``, ``draft-<N>.md``,
  ``audit-<N>.json`` per revision; written for clingate, reproducing the citation outcomes of the
  supplement's Supplementary Table 4 and the Rule B inputs of Table 3 Part C: see
  ``tests/unit/processors/drafts/test_golden_runs.py``).
* ``agent/questions.json``: the clinician's questions the demo and the agent benchmark ask, each with the
  model answers a competent model gives at each call (:mod:`streams.testing.agent_session`).
* ``timeline.py``: the generated FHIR stream (patients whose records change over simulated weeks).
* ``docs/``: document bundles and classification outputs of the classification-arbiter examples (the
  seed's slide 2 genomic report and clinical note, a Quest CBC, a requisition) with their trap cases.

There is one copy of these files; the tests read them from here.
"""

from __future__ import annotations

from pathlib import Path

CLINICAL = Path(__file__).parent / "clinical"
"""Directory of the golden FHIR bundles, one ``<case>.json`` per patient."""

RUNS = Path(__file__).parent / "runs"
"""Directory of the golden runs through the output gates, one ``<case>/`` per patient."""

AGENT_QUESTIONS = Path(__file__).parent / "agent" / "questions.json"
"""The agent's scripted questions (see :func:`streams.testing.agent_session.demo_questions`)."""

DOCS = Path(__file__).parent / "docs"
"""Directory of the classification-arbiter examples (``bundle_*.json``, ``classification_*.json``)."""

DOCS_EXAMPLES: dict[str, tuple[str, str]] = {
    "clean": ("classification_doc2_6_clean", "bundle_doc2_6"),
    "share_sum": ("classification_doc2_6_share_sum", "bundle_doc2_6"),
    "segment_count": ("classification_doc2_6_segment_count", "bundle_doc2_6"),
    "fabricated": ("classification_doc2_6_fabricated", "bundle_doc2_6"),
    "header_footer": ("classification_doc2_6_header_footer", "bundle_doc2_6"),
    "quest": ("classification_quest_genomic", "bundle_quest_cbc"),
    "requisition": ("classification_requisition", "bundle_requisition"),
}
"""Each example: ``case -> (classification file stem, bundle file stem)`` under :data:`DOCS`."""

GOLDEN_REVIEWS: dict[str, dict[str, str | int | None]] = {
    "PT-TEST-008": {
        "disposition": "CONCUR",
        "subcategory": None,
        "automation_bias_risk": "LOW",
        "revision_count": 2,
        "audit_verdict": "MODIFICATION_REQUIRED",
    },
    "PT-TEST-009": {
        "disposition": "DISSENT",
        "subcategory": None,
        "automation_bias_risk": "LOW",
        "revision_count": 1,
        "audit_verdict": "APPROVED",
    },
    "PT-TEST-010": {
        "disposition": "CONCUR",
        "subcategory": None,
        "automation_bias_risk": "LOW",
        "revision_count": 2,
        "audit_verdict": "APPROVED",
    },
    "PT-TEST-012": {
        "disposition": "DISSENT",
        "subcategory": "DATAGAP",
        "automation_bias_risk": "LOW",
        "revision_count": 1,
        "audit_verdict": "APPROVED",
    },
}
"""The review inputs of each golden case's published run (Supplementary Table 3 Part C of the
PharmMesh escape register supplement): keyword arguments of ``ReviewInputs``."""

GOLDEN_AS_OF = "2026-03-29T00:00:00Z"
"""The assessment instant of the golden cases (the system date of their published runs)."""
