"""The topic catalog: names, derived dead-letter topics and scaling, without a broker."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topics.catalog import (
    BROKER_DEFAULT_MAX_MESSAGE_BYTES,
    CATALOG,
    DATA_MAX_MESSAGE_BYTES,
    DEAD_LETTER_SCHEMA,
    DLQ_HEADROOM_BYTES,
    DLQ_PARTITIONS,
    Catalog,
    TopicSpec,
    build_catalog,
    dlq_name,
)

# The value schema of every declared topic, as agreed with the schemas/ owners.
EXPECTED_VALUE_SCHEMAS = {
    "clingate.dbpm.narratives": "clingate.dbpm.Narrative",
    "clingate.dbpm.candidates": "clingate.dbpm.Candidate",
    "clingate.dbpm.verdicts": "clingate.dbpm.Verdict",
    "clingate.dbpm.propagations": "clingate.dbpm.Propagation",
    "clingate.dbpm.dispatches": "clingate.dbpm.Dispatch",
    "clingate.dbpm.decisions": "clingate.dbpm.GateDecision",
    "clingate.dbpm.to-verify": "clingate.dbpm.GateDecision",
    "clingate.dbpm.verified": "clingate.dbpm.Candidate",
    "clingate.fhir.updates": "clingate.fhir.FhirUpdate",
    "clingate.clinical.reviews": "clingate.clinical.AdversarialReview",
    "clingate.clinical.deliverables": "clingate.clinical.Deliverable",
    "clingate.clinical.assessments": "clingate.clinical.ClinicalAssessment",
    "clingate.clinical.safety-audits": "clingate.clinical.SafetyAudit",
    "clingate.clinical.evidence": "clingate.clinical.EvidenceBundle",
    "clingate.clinical.drafts": "clingate.clinical.ClinicalDraft",
    "clingate.clinical.audit-reports": "clingate.clinical.AuditReport",
    "clingate.clinical.gated-drafts": "clingate.clinical.GatedDraft",
    "clingate.clinical.revision-routes": "clingate.clinical.RevisionRoute",
    "clingate.clinical.evidence-requests": "clingate.clinical.EvidenceRequest",
    "clingate.clinical.query-proposals": "clingate.clinical.QueryProposal",
    "clingate.clinical.query-decisions": "clingate.clinical.QueryDecision",
    "clingate.clinical.evidence-reviews": "clingate.clinical.EvidenceReview",
    "clingate.agent.requests": "clingate.agent.AgentRequest",
    "clingate.agent.responses": "clingate.agent.AgentResponse",
    "clingate.agent.traces": "clingate.agent.AgentTrace",
    "clingate.agent.proposals": "clingate.agent.AgentProposal",
    "clingate.console.audit": "clingate.console.ConsoleAction",
    "clingate.console.requests": "clingate.console.ConsoleRequest",
    "clingate.console.request-outcomes": "clingate.console.ConsoleRequestOutcome",
    "clingate.docs.classifications": "clingate.docs.ClassificationRequest",
    "clingate.docs.dispositions": "clingate.docs.Disposition",
    "clingate.docs.review-packets": "clingate.docs.ReviewPacket",
    "clingate.docs.reviews": "clingate.docs.Review",
    "clingate.docs.ground-truth": "clingate.docs.GroundTruth",
}


def _declared(catalog: Catalog) -> list[TopicSpec]:
    return [spec for spec in catalog if spec.value_schema != DEAD_LETTER_SCHEMA]


def test_topic_names_are_unique():
    assert len(set(CATALOG.names)) == len(CATALOG)


def test_every_declared_topic_has_its_agreed_value_schema():
    assert {spec.name: spec.value_schema for spec in _declared(CATALOG)} == EXPECTED_VALUE_SCHEMAS


def test_names_follow_clingate_area_stream_pattern():
    pattern = re.compile(r"^clingate\.(dbpm|fhir|clinical|docs|agent|console)\.[a-z]+(-[a-z]+)*(\.dlq)?$")
    assert all(pattern.match(name) for name in CATALOG.names), CATALOG.names


def test_every_consumed_topic_has_a_dead_letter_topic_in_the_catalog():
    consumed = [spec for spec in CATALOG if spec.consumed]
    assert consumed
    for spec in consumed:
        assert spec.dlq is not None
        assert CATALOG.get(dlq_name(spec.name)) == spec.dlq


def test_dead_letter_topics_are_derived_never_declared():
    dead_letters = [spec for spec in CATALOG if spec.value_schema == DEAD_LETTER_SCHEMA]
    derived = {spec.dlq for spec in CATALOG if spec.dlq is not None}
    assert set(dead_letters) == derived
    assert all(spec.name == dlq_name(spec.name.removesuffix(".dlq")) for spec in dead_letters)


def test_topics_clingate_only_writes_have_no_dead_letter_topic():
    for spec in CATALOG:
        if not spec.consumed:
            assert spec.dlq is None
            assert dlq_name(spec.name) not in CATALOG


def test_dead_letter_topics_have_no_dead_letter_topic_of_their_own():
    assert all(spec.dlq.dlq is None for spec in CATALOG if spec.dlq is not None)


def test_latest_value_topics_are_compacted():
    assert CATALOG.get("clingate.clinical.assessments").cleanup_policy == "compact,delete"
    assert CATALOG.get("clingate.docs.dispositions").cleanup_policy == "compact,delete"
    assert CATALOG.get("clingate.docs.ground-truth").cleanup_policy == "compact"


def test_topic_configs_carry_cleanup_retention_min_isr_and_record_size():
    spec = CATALOG.get("clingate.clinical.assessments")
    assert spec.configs == {
        "cleanup.policy": "compact,delete",
        "retention.ms": str(30 * 24 * 3600 * 1000),
        "min.insync.replicas": "1",
        "max.message.bytes": str(DATA_MAX_MESSAGE_BYTES),
    }


def test_unknown_topic_lookup_names_the_known_topics():
    with pytest.raises(KeyError, match=re.escape("clingate.dbpm.verdicts")):
        CATALOG.get("clingate.dbpm.verdict")


def test_catalog_rejects_duplicate_names():
    spec = CATALOG.get("clingate.dbpm.verdicts")
    with pytest.raises(ValueError, match="unique"):
        Catalog((spec, spec))


@given(partitions=st.integers(min_value=1, max_value=64), replication=st.integers(min_value=1, max_value=5))
def test_scale_applies_to_every_data_topic_and_dead_letter_topics_keep_one_partition(partitions, replication):
    catalog = build_catalog(partitions=partitions, replication=replication)
    assert catalog.names == CATALOG.names
    for spec in catalog:
        expected = DLQ_PARTITIONS if spec.value_schema == DEAD_LETTER_SCHEMA else partitions
        assert spec.partitions == expected
        assert spec.replication == replication
        assert spec.configs["min.insync.replicas"] == ("2" if replication >= 3 else "1")


@pytest.mark.parametrize(("partitions", "replication"), [(0, 1), (1, 0)])
def test_scale_below_one_is_rejected(partitions, replication):
    with pytest.raises(ValueError):
        build_catalog(partitions=partitions, replication=replication)


def test_every_dead_letter_topic_admits_more_than_its_source_topic():
    for spec in CATALOG:
        if spec.dlq is not None:
            assert spec.max_message_bytes is not None
            dlq = CATALOG.get(spec.dlq.name)
            assert int(dlq.configs["max.message.bytes"]) == spec.max_message_bytes + DLQ_HEADROOM_BYTES


def test_declared_data_topics_admit_five_megabyte_records():
    assert all(int(spec.configs["max.message.bytes"]) > 5 * 1024 * 1024 for spec in _declared(CATALOG))


@given(st.one_of(st.none(), st.integers(min_value=1, max_value=2**30)))
def test_a_dead_letter_limit_exceeds_its_source_limit_even_when_the_source_keeps_the_default(
    limit: int | None,
):
    source = TopicSpec("clingate.test.source", "k", "v", consumed=True, max_message_bytes=limit)
    assert source.dlq is not None and source.dlq.max_message_bytes is not None
    assert source.dlq.max_message_bytes >= (limit or BROKER_DEFAULT_MAX_MESSAGE_BYTES) + DLQ_HEADROOM_BYTES


def test_verdicts_are_keyed_by_task_and_signature():
    assert CATALOG.get("clingate.dbpm.verdicts").key.startswith("task|signature")
