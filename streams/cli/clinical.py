"""``clingate clinical``: deterministic clinical gates without Kafka.

``clingate clinical assess --in BUNDLE.json --as-of 2026-03-29T00:00:00Z`` parses and validates the
bundle (FHIR R4 via fhir.resources R4B), builds each patient's state with the same reducer the stream
uses, assesses it and prints the assessment JSON per the clinical-assessment contract (one object for
one patient, a JSON array for several). Invalid resources are reported on stderr and make the exit
code 2 (the stream sends them to the DLQ instead). Output is byte-identical for identical input.

``clingate clinical gate-draft`` and ``clingate clinical route`` run the output gates on an LLM's draft
and on a regulatory audit (:mod:`processors.drafts`) and print the output-gates contract's JSON; an
input that is not what the contract describes is reported on stderr with exit code 2.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from streams.runtime.settings import env_help, get_settings

T = TypeVar("T")

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
            "--tier-b/--no-tier-b",
            help=f"ESC-021 Tier B class maps {env_help('clinical_tier_b_class_maps')}.",
        ),
    ] = None,
    esc032: Annotated[
        bool | None,
        typer.Option(
            "--esc032/--no-esc032", help=f"ESC-032 staleness rule {env_help('clinical_esc032_staleness')}."
        ),
    ] = None,
    esc033: Annotated[
        bool | None,
        typer.Option(
            "--esc033/--no-esc033", help=f"ESC-033 compound rule {env_help('clinical_esc033_compound')}."
        ),
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
    _print(results[0] if len(results) == 1 else results)
    if parsed.invalid:
        raise typer.Exit(code=2)


def _read_input(path: Path, what: str, parse: Callable[[object], T]) -> T:
    """``parse`` of the JSON in ``path``; what is not JSON or not the contract's shape exits with 2."""
    from processors.drafts.inputs import DraftInputError

    try:
        return parse(json.loads(path.read_text(encoding="utf-8")))
    except json.JSONDecodeError as error:
        typer.echo(f"{what} {path} is not JSON: {error}", err=True)
        raise typer.Exit(code=2) from error
    except DraftInputError as error:
        typer.echo(f"{what} {path}: {error}", err=True)
        raise typer.Exit(code=2) from error


def _print(payload: object) -> None:
    sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")


@app.command("gate-draft")
def gate_draft_command(
    draft: Annotated[Path, typer.Option("--draft", exists=True, dir_okay=False, help="The LLM's draft.")],
    evidence: Annotated[
        Path, typer.Option("--evidence", exists=True, dir_okay=False, help='{"packets": [...]} JSON.')
    ],
    previous: Annotated[
        Path | None,
        typer.Option("--previous", exists=True, dir_okay=False, help="The previous revision's gated draft."),
    ] = None,
    revision: Annotated[int, typer.Option("--revision", min=0, help="0 for the first draft.")] = 0,
) -> None:
    """Gate a draft: content preservation, lint (revision 0), citation fidelity; print the result JSON."""
    from processors.drafts import gate_draft
    from processors.drafts.inputs import parse_evidence

    packets = _read_input(evidence, "evidence", parse_evidence)
    before = previous.read_text(encoding="utf-8") if previous is not None else None
    _print(gate_draft(draft.read_text(encoding="utf-8"), packets, before, revision).contract())


@app.command("route")
def route_command(
    audit: Annotated[Path, typer.Option("--audit", exists=True, dir_okay=False, help="The audit JSON.")],
    revision: Annotated[int, typer.Option("--revision", min=0, help="The audited draft's revision.")],
) -> None:
    """Route a regulatory audit: CLL_REVISION or PROCEED, with each violation's bucket; print the JSON."""
    from processors.drafts import route_audit
    from processors.drafts.inputs import parse_audit

    report = _read_input(audit, "audit", parse_audit)
    _print(route_audit(report.violations, report.cds_compliant, revision).contract())
