"""The deployment's ACL plan: least privilege per role, expressed only in catalog topics."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType
from typer.testing import CliRunner

from streams.cli import topics as topics_command
from topics.acls import DEFAULT_PLAN, AclPlanError, load_plan, plan_bindings, principal_bindings
from topics.catalog import (
    AGENT_PROPOSALS,
    AGENT_REQUESTS,
    AGENT_RESPONSES,
    AGENT_TRACES,
    CATALOG,
    CLINICAL_ASSESSMENTS,
    CLINICAL_AUDIT_REPORTS,
    CLINICAL_DELIVERABLES,
    CLINICAL_DRAFTS,
    CLINICAL_EVIDENCE,
    CLINICAL_EVIDENCE_REQUESTS,
    CLINICAL_EVIDENCE_REVIEWS,
    CLINICAL_GATED_DRAFTS,
    CLINICAL_QUERY_DECISIONS,
    CLINICAL_QUERY_PROPOSALS,
    CLINICAL_REVIEWS,
    CLINICAL_REVISION_ROUTES,
    CLINICAL_SAFETY_AUDITS,
    CONSOLE_AUDIT,
    CONSOLE_REQUEST_OUTCOMES,
    CONSOLE_REQUESTS,
    DBPM_CANDIDATES,
    DBPM_DECISIONS,
    DBPM_DISPATCHES,
    DBPM_NARRATIVES,
    DBPM_PROPAGATIONS,
    DBPM_TO_VERIFY,
    DBPM_VERDICTS,
    DBPM_VERIFIED,
    DOCS_CLASSIFICATIONS,
    DOCS_DISPOSITIONS,
    DOCS_GROUND_TRUTH,
    DOCS_REVIEW_PACKETS,
    DOCS_REVIEWS,
    FHIR_UPDATES,
    dlq_name,
)

PLAN = load_plan(DEFAULT_PLAN, app_id="clingate-dbpm", docs_group_id="clingate-docs")


def _written(name: str) -> set[str]:
    return set(PLAN.principal(name).write)


def test_generators_may_write_only_candidates_and_their_input_dead_letters() -> None:
    assert _written("clingate-generator") == {DBPM_CANDIDATES, "clingate.dbpm.narratives.dlq"}


def test_verifiers_may_write_verdicts_but_never_candidates_or_decisions() -> None:
    written = _written("clingate-verifier")
    assert DBPM_VERDICTS in written
    assert not written & {DBPM_CANDIDATES, DBPM_DECISIONS}


def test_downstream_consumers_only_read_decisions() -> None:
    downstream = PLAN.principal("clingate-downstream")
    assert not downstream.write and not downstream.owned_prefixes
    assert DBPM_DECISIONS in downstream.read


WRITES = {
    "clingate-worker": {
        DBPM_DECISIONS, DBPM_TO_VERIFY, DBPM_VERDICTS, DBPM_PROPAGATIONS, DBPM_DISPATCHES,
        CLINICAL_ASSESSMENTS, CLINICAL_SAFETY_AUDITS, CLINICAL_GATED_DRAFTS, CLINICAL_REVISION_ROUTES,
        CLINICAL_EVIDENCE_REQUESTS,
        *(dlq_name(t) for t in (DBPM_CANDIDATES, DBPM_VERDICTS, DBPM_PROPAGATIONS, DBPM_DISPATCHES,
                                FHIR_UPDATES, CLINICAL_REVIEWS, CLINICAL_DELIVERABLES, CLINICAL_EVIDENCE,
                                CLINICAL_DRAFTS, CLINICAL_AUDIT_REPORTS)),
    },
    "clingate-docs": {
        DOCS_DISPOSITIONS, DOCS_REVIEW_PACKETS, DOCS_GROUND_TRUTH, dlq_name(DOCS_CLASSIFICATIONS),
        dlq_name(DOCS_REVIEWS),
    },
    "clingate-generator": {DBPM_CANDIDATES, dlq_name(DBPM_NARRATIVES)},
    "clingate-verifier": {DBPM_VERDICTS, DBPM_VERIFIED, dlq_name(DBPM_TO_VERIFY)},
    "clingate-agent": {AGENT_RESPONSES, AGENT_TRACES, AGENT_PROPOSALS, dlq_name(AGENT_REQUESTS)},
    "clingate-console": {CONSOLE_AUDIT, CONSOLE_REQUESTS},
    "clingate-requests": {
        *(spec.name for spec in CATALOG if spec.dlq is not None and spec.name != CONSOLE_REQUESTS),
        CLINICAL_QUERY_DECISIONS, CLINICAL_EVIDENCE_REVIEWS, CONSOLE_REQUEST_OUTCOMES,
        dlq_name(CONSOLE_REQUESTS),
    },
    "clingate-downstream": set(),
    "clingate-upstream": {
        DBPM_NARRATIVES, FHIR_UPDATES, CLINICAL_REVIEWS, CLINICAL_DELIVERABLES, CLINICAL_QUERY_PROPOSALS,
        CLINICAL_EVIDENCE, CLINICAL_DRAFTS, CLINICAL_AUDIT_REPORTS, DOCS_CLASSIFICATIONS, AGENT_REQUESTS,
    },
}  # fmt: skip
"""What each principal may write: the plan states it, this test states it again."""


def test_each_principal_writes_exactly_what_its_role_needs() -> None:
    assert {p.name: set(p.write) for p in PLAN.principals} == WRITES


def test_the_console_writes_only_its_audit_trail_and_its_requests() -> None:
    """A forged verdict, FHIR update, ground truth, review, question or pharmacist's decision cannot come
    from the console's principal: every record its people make is a request the request runtime checks."""
    assert _written("clingate-console") == {CONSOLE_AUDIT, CONSOLE_REQUESTS}


def test_the_pharmacists_decisions_are_written_by_the_request_runtime_and_read_by_the_pipeline() -> None:
    decisions = {CLINICAL_QUERY_DECISIONS, CLINICAL_EVIDENCE_REVIEWS}
    assert {p.name for p in PLAN.principals if decisions & set(p.write)} == {"clingate-requests"}
    assert decisions <= set(PLAN.principal("clingate-upstream").read)
    console = set(PLAN.principal("clingate-console").read)
    assert decisions | {CLINICAL_QUERY_PROPOSALS, CLINICAL_EVIDENCE} <= console


def test_only_the_request_runtime_redrives_and_no_principal_writes_another_principals_dlq() -> None:
    """A dead-letter topic is written by the principal that consumes its source only (the stage that
    dead-letters), so no principal can put a record on another's DLQ for a re-drive to publish; the
    request runtime may write every re-drive target but its own input, and no DLQ but its own."""
    readers = {p.name: set(p.read) for p in PLAN.principals}
    for spec in CATALOG:
        if spec.dlq is None:
            continue
        writers = {p.name for p in PLAN.principals if spec.dlq.name in p.write}
        consumers = {
            name for name, read in readers.items() if spec.name in read and name != "clingate-requests"
        } | ({"clingate-requests"} if spec.name == CONSOLE_REQUESTS else set())
        assert writers <= consumers, (spec.dlq.name, writers)
        assert len(writers) <= 1, (spec.dlq.name, writers)
    requests = PLAN.principal("clingate-requests")
    redriven = {spec.name for spec in CATALOG if spec.dlq is not None} - {CONSOLE_REQUESTS}
    assert {dlq_name(topic) for topic in redriven} | redriven <= set(requests.read)
    assert CONSOLE_REQUESTS not in requests.write


def test_every_topic_has_exactly_one_writing_principal_but_verdicts_and_the_redrive_targets() -> None:
    """Verdicts come from the verifiers, from the workers' gate (the Ontology-Violation Filter) and from
    the request runtime (the operators' pins, and re-drives); the request runtime also re-drives dead
    letters to every topic that has a DLQ, beside that topic's own writer, and is the one writer of the
    SMEs' reviews (theirs, and re-drives of them); the clinicians' questions come from upstream and from
    the request runtime."""
    writers = Counter(topic for principal in PLAN.principals for topic in principal.write)
    outputs = [spec.name for spec in CATALOG if not spec.name.endswith(".dlq")]
    redriven = {spec.name for spec in CATALOG if spec.dlq is not None} - {CONSOLE_REQUESTS}
    expected = {topic: 1 + (topic in redriven) for topic in outputs} | {DBPM_VERDICTS: 3, DOCS_REVIEWS: 1}
    assert {topic: writers[topic] for topic in outputs} == expected
    assert {p.name for p in PLAN.principals if DBPM_VERDICTS in p.write} == {
        "clingate-requests",
        "clingate-verifier",
        "clingate-worker",
    }


def test_the_console_reads_every_dlq_and_its_requests_outcomes() -> None:
    console = PLAN.principal("clingate-console")
    consumed = {spec.name for spec in CATALOG if spec.dlq is not None}
    assert {dlq_name(topic) for topic in consumed} <= set(console.read)
    assert {CONSOLE_AUDIT, CONSOLE_REQUEST_OUTCOMES, AGENT_RESPONSES, AGENT_TRACES, AGENT_PROPOSALS} <= set(
        console.read
    )


def test_the_console_reads_what_the_memory_explorer_shows() -> None:
    plan = load_plan(DEFAULT_PLAN, app_id="ward-7", docs_group_id="clingate-docs")
    console = plan.principal("clingate-console")
    assert {DBPM_VERDICTS, "clingate.dbpm.propagations", DBPM_DECISIONS} <= set(console.read)
    assert console.read_prefixes == ("ward-7-dbpm-memory",)
    assert not console.owned_prefixes and not console.transactional_prefixes


def test_every_consumed_topic_is_readable_by_some_principal() -> None:
    readable = {topic for principal in PLAN.principals for topic in principal.read}
    assert {spec.name for spec in CATALOG if spec.consumed} <= readable


def test_workers_own_their_topics_and_groups_by_application_id() -> None:
    plan = load_plan(DEFAULT_PLAN, app_id="ward-7", docs_group_id="clingate-docs")
    worker = principal_bindings(plan.principal("clingate-worker"))
    owned = {(b.name, b.operation) for b in worker if b.resource_pattern_type is ResourcePatternType.PREFIXED}
    assert ("ward-7-", AclOperation.CREATE) in owned
    assert any(b.restype is ResourceType.GROUP and b.name == "ward-7-" for b in worker)


def test_each_transactional_loop_may_write_only_as_its_own_transactional_producers() -> None:
    plan = load_plan(DEFAULT_PLAN, app_id="ward-7", docs_group_id="clingate-docs")
    transactional = {
        (principal.name, binding.name, binding.operation)
        for principal in plan.principals
        for binding in principal_bindings(principal)
        if binding.restype is ResourceType.TRANSACTIONAL_ID
    }
    assert transactional == {
        ("clingate-worker", "ward-7-memory-", AclOperation.WRITE),
        ("clingate-worker", "ward-7-memory-", AclOperation.DESCRIBE),
        ("clingate-worker", "ward-7-clinical-", AclOperation.WRITE),
        ("clingate-worker", "ward-7-clinical-", AclOperation.DESCRIBE),
        ("clingate-worker", "ward-7-gate-", AclOperation.WRITE),
        ("clingate-worker", "ward-7-gate-", AclOperation.DESCRIBE),
        ("clingate-docs", "clingate-docs-", AclOperation.WRITE),
        ("clingate-docs", "clingate-docs-", AclOperation.DESCRIBE),
        ("clingate-generator", "clingate-generator-", AclOperation.WRITE),
        ("clingate-generator", "clingate-generator-", AclOperation.DESCRIBE),
        ("clingate-verifier", "clingate-verifier-", AclOperation.WRITE),
        ("clingate-verifier", "clingate-verifier-", AclOperation.DESCRIBE),
        ("clingate-agent", "clingate-agent-", AclOperation.WRITE),
        ("clingate-agent", "clingate-agent-", AclOperation.DESCRIBE),
        ("clingate-requests", "ward-7-requests-", AclOperation.WRITE),
        ("clingate-requests", "ward-7-requests-", AclOperation.DESCRIBE),
    }


def test_only_allow_bindings_without_duplicates() -> None:
    bindings = plan_bindings(PLAN)
    assert len(bindings) == len(set(bindings))
    assert all(b.permission_type.name == "ALLOW" and b.host == "*" for b in bindings)
    assert dlq_name(DBPM_CANDIDATES) in {b.name for b in bindings}


def test_a_topic_outside_the_catalog_is_refused(tmp_path: Path) -> None:
    plan = tmp_path / "acls.yaml"
    plan.write_text("super_user: admin\nprincipals:\n  p:\n    role: r\n    write: [clingate.dbpm.typo]\n")
    with pytest.raises(AclPlanError, match=r"clingate\.dbpm\.typo"):
        load_plan(plan, app_id="a", docs_group_id="d")


def test_an_unknown_placeholder_or_field_is_refused(tmp_path: Path) -> None:
    plan = tmp_path / "acls.yaml"
    plan.write_text("super_user: admin\nprincipals:\n  p:\n    role: r\n    groups: ['{tenant}']\n")
    with pytest.raises(AclPlanError, match="tenant"):
        load_plan(plan, app_id="a", docs_group_id="d")
    plan.write_text("super_user: admin\nprincipals:\n  p:\n    role: r\n    delete: [x]\n")
    with pytest.raises(AclPlanError, match="delete"):
        load_plan(plan, app_id="a", docs_group_id="d")


def test_acls_command_refuses_an_invalid_plan_before_contacting_any_cluster(tmp_path: Path) -> None:
    plan = tmp_path / "acls.yaml"
    plan.write_text("super_user: admin\nprincipals:\n  p:\n    role: r\n    read: [nope]\n")
    arguments = ["acls", "--plan", str(plan), "--bootstrap", "127.0.0.1:1"]
    result = CliRunner().invoke(topics_command.app, arguments)
    assert result.exit_code == 2
    assert "nope" in result.output
