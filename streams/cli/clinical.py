"""``clingate clinical``: deterministic clinical gates without Kafka.

``clingate clinical assess --in BUNDLE.json --as-of 2026-03-29T00:00:00Z`` parses and validates the
bundle (FHIR R4 via fhir.resources R4B), builds each patient's state with the same reducer the stream
uses, assesses it and prints the assessment JSON per the clinical-assessment contract (one object for
one patient, a JSON array for several). Invalid resources are reported on stderr and make the exit
code 2 (the stream sends them to the DLQ instead). Output is byte-identical for identical input.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from streams.runtime.settings import get_settings

app = typer.Typer(help="Deterministic clinical gates on FHIR R4.", no_args_is_help=True)


@app.callback()
def clinical() -> None:
    """Deterministic clinical gates on FHIR R4: Phase 0, NTI, traffic light, safety patterns."""


def _parse_as_of(value: str) -> datetime:
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise typer.BadParameter("--as-of needs a zone, e.g. 2026-03-29T00:00:00Z")
    return parsed.astimezone(UTC)


@app.command("assess")
def assess_command(
    bundle: Annotated[
        Path, typer.Option("--in", exists=True, dir_okay=False, help="FHIR R4 resource or Bundle JSON.")
    ],
    as_of: Annotated[str, typer.Option("--as-of", help="Assessment instant, ISO 8601 with zone.")],
    disposition: Annotated[
        str | None, typer.Option(help="Adversarial reviewer disposition (CONCUR, DISSENT, ...).")
    ] = None,
    subcategory: Annotated[
        str | None, typer.Option(help="Adversarial reviewer subcategory (DATA_GAP, ...).")
    ] = None,
    revisions: Annotated[
        int | None, typer.Option(help="Revision count (Rule B at >= 2 unless approved).")
    ] = None,
    audit_verdict: Annotated[
        str | None, typer.Option(help="Regulatory audit verdict (APPROVED, ...).")
    ] = None,
    automation_bias: Annotated[
        str | None, typer.Option(help="Automation-bias risk (LOW / HIGH); Rule A.")
    ] = None,
    tier_b: Annotated[
        bool | None,
        typer.Option(
            "--tier-b/--no-tier-b", help="ESC-021 Tier B class maps (env CLINGATE_CLINICAL_TIER_B)."
        ),
    ] = None,
    esc032: Annotated[
        bool | None,
        typer.Option("--esc032/--no-esc032", help="ESC-032 staleness rule (env CLINGATE_CLINICAL_ESC032)."),
    ] = None,
    esc033: Annotated[
        bool | None,
        typer.Option("--esc033/--no-esc033", help="ESC-033 compound rule (env CLINGATE_CLINICAL_ESC033)."),
    ] = None,
) -> None:
    """Assess the patients of a FHIR bundle and print the assessment JSON."""
    from processors.clinical.assess import assess
    from processors.clinical.fhir_input import parse_document
    from processors.clinical.knowledge import default_knowledge
    from processors.clinical.state import PatientUpdate, reduce_update
    from processors.clinical.traffic_light import ReviewInputs
    from streams.worker.clinical import gate_flags

    when = _parse_as_of(as_of)
    parsed = parse_document(json.loads(bundle.read_text(encoding="utf-8")))
    for bad in parsed.invalid:
        typer.echo(f"invalid {bad.resource_type}/{bad.resource_id}: {bad.error}", err=True)
    knowledge = default_knowledge()
    review = ReviewInputs(
        disposition=disposition,
        subcategory=subcategory,
        automation_bias_risk=automation_bias,
        revision_count=revisions,
        audit_verdict=audit_verdict,
    )
    flags = gate_flags(get_settings(), tier_b=tier_b, esc032=esc032, esc033=esc033)
    results = []
    for patient_id in sorted(parsed.changes):
        state, _ = reduce_update(
            None, PatientUpdate(patient_id=patient_id, changes=tuple(parsed.changes[patient_id])), when
        )
        results.append(assess(state, when, review, knowledge, flags).model_dump(mode="json"))
    payload = results[0] if len(results) == 1 else results
    sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    if parsed.invalid:
        raise typer.Exit(code=2)
