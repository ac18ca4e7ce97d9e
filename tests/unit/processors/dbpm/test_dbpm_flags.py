"""Every flag of the DBPM configuration (Table 12, §4.7, §4.9) and its observable effect."""

from __future__ import annotations

import pytest
from dbpm_harness import DAY, T0, make, ner, qa, rel

from processors.dbpm import DBPMConfig, Flags

VIOLATING = rel(relation="DIAGNOSES")  # Treatment -> Diagnosis does not admit DIAGNOSES


def _block_ner(h) -> None:
    for _ in range(3):
        h.verdict("ner", "hard_fail", ner("sepsis"))


def test_defaults_are_the_deployed_configuration():
    flags = DBPMConfig().flags
    assert flags == Flags(
        cross_task=True, three_tier=True, uncertainty=True, source_weights=True, ontology_filter=True,
        ontology_tag_only=False, qa_hard_block=False, disabled=False, downgrade_first=False, maintenance=True,
    )  # fmt: skip


@pytest.mark.parametrize("cross_task", [True, False])
def test_cross_task_flag_controls_all_three_propagation_directions(cross_task):
    h = make(cross_task=cross_task)
    h.verdict("re", "hard_fail", rel())
    h.verdict("qa", "hard_fail", qa(answer="pneumonia"))
    h.verdict("ner", "hard_fail", ner("the patient"))
    mem = h.memory()
    assert (mem.pattern("ner", "metformin") is not None) is cross_task
    assert (mem.pattern("ner", "pneumonia") is not None) is cross_task
    assert h.gate("re", rel(head="the patient")).decision == ("BLOCK" if cross_task else "ALLOW")


@pytest.mark.parametrize("three_tier", [True, False])
def test_three_tier_off_collapses_the_gate_to_block_or_allow(three_tier):
    h = make(three_tier=three_tier)
    h.verdict("ner", "hard_fail", ner("fever"))
    _block_ner(h)
    band = h.gate("ner", ner("fever"))
    assert band.decision == ("DOWNGRADE" if three_tier else "ALLOW")
    assert band.policy == (() if three_tier else ("three_tier_off",))
    assert h.gate("ner", ner("sepsis")).decision == "BLOCK"


@pytest.mark.parametrize("uncertainty", [True, False])
def test_uncertainty_off_treats_ambiguous_qa_verdicts_as_success(uncertainty):
    h = make(uncertainty=uncertainty)
    h.verdict("qa", "soft_downgrade", qa())
    h.verdict("ner", "soft_downgrade", ner("fever"))
    mem = h.memory()
    assert (mem.pattern("qa", "what is the diagnosis?") is not None) is uncertainty
    assert (mem.white("qa", "what is the diagnosis?") is not None) is not uncertainty
    assert mem.pattern("ner", "fever") is not None, "only QA verdicts are affected"


@pytest.mark.parametrize(("source_weights", "expected"), [(True, 0.25), (False, 0.50)])
def test_source_weights_off_weighs_every_source_one(source_weights, expected):
    h = make(source_weights=source_weights)
    h.verdict("ner", "hard_fail", ner("sepsis"), source="rule_based")
    h.verdict("re", "hard_fail", rel())
    assert h.severity("ner", "sepsis", T0) == pytest.approx(expected)
    assert h.severity("ner", "metformin", T0) == pytest.approx((0.3 if source_weights else 1.0) * 0.25 / 2)


@pytest.mark.parametrize("ontology_filter", [True, False])
def test_ontology_filter_off_ignores_rule_based_relation_verdicts(ontology_filter):
    h = make(ontology_filter=ontology_filter)
    h.verdict("re", "hard_fail", VIOLATING, source="rule_based")
    h.verdict("re", "hard_fail", rel(head_type="Anatomy"))
    mem = h.memory()
    assert (mem.pattern("re", "TREATMENT|DIAGNOSES|DIAGNOSIS") is not None) is ontology_filter
    assert mem.pattern("re", "ANATOMY|TREATS|DIAGNOSIS") is not None
    assert mem.patient_counts("p1")[0] == (2 if ontology_filter else 1)


@pytest.mark.parametrize("tag_only", [True, False])
def test_ontology_tag_only_keeps_the_rule_based_channel_downgrade_first(tag_only):
    h = make(ontology_tag_only=tag_only)
    for _ in range(6):
        h.verdict("re", "hard_fail", VIOLATING, source="rule_based")
    for _ in range(3):
        h.verdict("re", "hard_fail", rel(head_type="Anatomy"))
    ontology = h.gate("re", VIOLATING)
    assert ontology.decision == ("DOWNGRADE" if tag_only else "BLOCK")
    assert ontology.policy == (("ontology_tag_only",) if tag_only else ())
    assert h.gate("re", rel(head_type="Anatomy")).decision == "BLOCK", "verifier-fed patterns still block"


@pytest.mark.parametrize("hard_block", [True, False])
def test_qa_hard_block_turns_qa_tags_into_blocks(hard_block):
    h = make(qa_hard_block=hard_block)
    decision = h.gate("qa", qa(category="diagnosis"))
    assert decision.decision == ("BLOCK" if hard_block else "DOWNGRADE")
    h.verdict("ner", "hard_fail", ner("fever"))
    assert h.gate("ner", ner("fever")).decision == "DOWNGRADE", "only the QA gate is affected"


def test_master_switch_allows_everything_and_records_nothing():
    h = make(disabled=True)
    _block_ner(h)
    h.verdict("ner", "hard_fail", ner("the patient"))
    decisions = [h.gate("ner", ner("sepsis")), h.gate("re", rel(head="the patient")), h.gate("qa", qa())]
    assert [d.decision for d in decisions] == ["ALLOW"] * 3
    assert {d.rule for d in decisions} == {"disabled"}
    assert len(h.store) == 0


@pytest.mark.parametrize("downgrade_first", [True, False])
def test_downgrade_first_mode_never_emits_block(downgrade_first):
    h = make(downgrade_first=downgrade_first)
    _block_ner(h)
    h.verdict("ner", "hard_fail", ner("the patient"))
    expected = "DOWNGRADE" if downgrade_first else "BLOCK"
    blocked = h.gate("ner", ner("sepsis"))
    assert blocked.decision == expected
    assert blocked.multiplier == (0.70 if downgrade_first else 0.0)
    assert h.gate("re", rel(head="the patient")).decision == expected


@pytest.mark.parametrize("maintenance", [True, False])
def test_maintenance_flag_controls_pruning_and_counter_decay(maintenance):
    h = make(maintenance=maintenance)
    h.verdict("ner", "hard_fail", ner("sepsis"))
    for _ in range(3):
        h.verdict("re", "hard_fail", rel())
    h.verdict("ner", "success", ner("cough"), at=T0 + 60 * DAY)
    mem = h.memory()
    assert (mem.pattern("ner", "sepsis") is None) is maintenance
    if not maintenance:
        assert mem.kappa(mem.pattern("ner", "metformin"), T0 + 60 * DAY) == 3
