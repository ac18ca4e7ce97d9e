"""Each equation of the DBPM paper on hand-computed values (Eq. 3-9, Algorithm 1, §4.4, §4.6)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from dbpm_harness import DAY, T0, make, ner, qa, rel

from processors.dbpm import DBPMConfig, GateEvent, TaskParams, load_ontology, parse_event
from processors.dbpm.config import DEFAULT_TASKS
from processors.dbpm.gates import patient_difficulty, qa_fail_rate
from processors.dbpm.maintenance import maintain
from processors.dbpm.memory import Memory, Pattern, decayed, order_key
from processors.dbpm.ontology import filter_verdict
from processors.dbpm.signatures import qa_signature, re_signature

approx = pytest.approx


# -- Eq. 3 and the initial severities (§4.2, §4.3) ---------------------------------------------


@pytest.mark.parametrize(
    ("verdict", "source", "expected"),
    [
        ("hard_fail", "verifier_mmed", 0.50),
        ("hard_fail", "rule_based", 0.25),
        ("soft_downgrade", "verifier_mmed", 0.25),
        ("soft_downgrade", "cross_task", 0.125),
        ("hard_fail", "some_new_source", 0.50),
    ],
)
def test_first_failure_starts_at_source_weighted_initial_severity(verdict, source, expected):
    h = make()
    h.verdict("ner", verdict, ner("Sepsis"), source=source)
    assert h.severity("ner", "sepsis", T0) == approx(expected)


def test_repeat_failure_applies_in_run_decay_then_weighted_learning_rate():
    h = make()
    for _ in range(2):
        h.verdict("ner", "hard_fail", ner("sepsis"))
        h.verdict("re", "hard_fail", rel())
        h.verdict("qa", "soft_downgrade", qa())
    assert h.severity("ner", "sepsis", T0) == approx(0.99 * 0.50 + 0.15)
    assert h.severity("re", "TREATMENT|TREATS|DIAGNOSIS", T0) == approx(0.99 * 0.50 + 0.20)
    assert h.severity("qa", "what is the diagnosis?", T0) == approx(0.985 * 0.25 + 0.05)


def test_severity_is_clipped_at_one():
    h = make()
    for _ in range(40):
        h.verdict("re", "hard_fail", rel())
    pattern = h.memory().pattern("re", "TREATMENT|TREATS|DIAGNOSIS")
    assert pattern.severity <= 1.0
    assert pattern.count == 40


def test_success_takes_the_whitelist_path_and_leaves_severity_alone():
    h = make()
    h.verdict("ner", "hard_fail", ner("sepsis"))
    h.verdict("ner", "success", ner("sepsis"))
    h.verdict("ner", "success", ner("sepsis"))
    mem = h.memory()
    assert mem.white("ner", "sepsis").confidence == approx(0.90 + 0.03)
    assert mem.white("ner", "sepsis").count == 2
    assert mem.pattern("ner", "sepsis").count == 1
    assert h.severity("ner", "sepsis", T0) == approx(0.50)


def test_whitelist_confidence_rises_by_the_task_success_rate_to_the_ceiling():
    h = make()
    for _ in range(3):
        h.verdict("qa", "success", qa())
    assert h.memory().white("qa", "what is the diagnosis?").confidence == approx(0.90 + 2 * 0.04)
    for _ in range(20):
        h.verdict("qa", "success", qa())
    assert h.memory().white("qa", "what is the diagnosis?").confidence == 0.99


# -- Eq. 5: lazy wall-clock decay ---------------------------------------------------------------


def test_severity_halves_every_half_life_of_event_time():
    h = make()
    h.verdict("ner", "hard_fail", ner("sepsis"))
    h.verdict("re", "hard_fail", rel())
    assert h.severity("ner", "sepsis", T0 + 5 * DAY) == approx(0.25)
    assert h.severity("ner", "sepsis", T0 + 10 * DAY) == approx(0.125)
    assert h.severity("re", "TREATMENT|TREATS|DIAGNOSIS", T0 + 10 * DAY) == approx(0.25)


def test_update_starts_from_the_severity_effective_at_the_event_time():
    h = make()
    h.verdict("ner", "hard_fail", ner("sepsis"))
    h.verdict("ner", "hard_fail", ner("sepsis"), at=T0 + 5 * DAY)
    assert h.severity("ner", "sepsis", T0 + 5 * DAY) == approx(0.99 * 0.25 + 0.15)
    assert h.severity("ner", "sepsis", T0 + 10 * DAY) == approx((0.99 * 0.25 + 0.15) / 2)


def test_an_event_older_than_the_reference_time_decays_nothing():
    assert decayed(0.5, T0, T0 - DAY, 5 * DAY) == 0.5


def test_eviction_order_key_sorts_like_effective_severity_at_any_time():
    h = 5 * DAY
    patterns = [(0.9, T0), (0.5, T0 + 3 * DAY), (0.2, T0 + 9 * DAY), (0.7, T0 + DAY)]
    by_key = sorted(patterns, key=lambda p: order_key(p[0], p[1], h))
    for t in (T0 + 9 * DAY, T0 + 30 * DAY):
        assert by_key == sorted(patterns, key=lambda p: decayed(p[0], p[1], t, h))


# -- Eq. 4: the three tiers ---------------------------------------------------------------------


def test_ner_gate_downgrades_in_the_band_and_blocks_with_minimum_support():
    h = make()
    assert h.gate("ner", ner("sepsis")).rule == "no_evidence"
    h.verdict("ner", "hard_fail", ner("sepsis"))
    first = h.gate("ner", ner("sepsis"))
    assert (first.decision, first.severity, first.support) == ("DOWNGRADE", approx(0.5), 1)
    assert first.multiplier == 0.70
    h.verdict("ner", "hard_fail", ner("sepsis"))
    assert h.gate("ner", ner("sepsis")).decision == "DOWNGRADE"  # 0.645 <= 0.65
    h.verdict("ner", "hard_fail", ner("sepsis"))
    blocked = h.gate("ner", ner(" Sepsis "))
    assert (blocked.decision, blocked.support) == ("BLOCK", 3)
    assert blocked.severity == approx(0.99 * 0.645 + 0.15)
    assert blocked.sources == ("verifier",)


def test_gate_reads_live_state_at_the_candidate_event_time():
    h = make()
    for _ in range(3):
        h.verdict("ner", "hard_fail", ner("sepsis"))
    assert h.gate("ner", ner("sepsis"), at=T0 + DAY).decision == "BLOCK"
    assert h.gate("ner", ner("sepsis"), at=T0 + 2 * DAY).decision == "DOWNGRADE"  # 0.789 * 2^-0.4 = 0.598
    assert h.gate("ner", ner("sepsis"), at=T0 + 5 * DAY).decision == "ALLOW"  # 0.394


def test_whitelist_precedes_every_severity_check():
    h = make()
    for _ in range(3):
        h.verdict("ner", "hard_fail", ner("sepsis"))
    h.verdict("ner", "success", ner("sepsis"))
    decision = h.gate("ner", ner("sepsis"))
    assert (decision.decision, decision.rule) == ("ALLOW", "whitelist")


def test_eq4_literal_severity_above_block_threshold_without_support_is_allowed():
    h = make()
    with h.store.transaction() as txn:
        mem = Memory(txn, h.config)
        mem.put_pattern("ner", "sepsis", Pattern(0.9, T0, T0, 1, 0, T0, 1, ""), None)
    decision = h.gate("ner", ner("sepsis"))
    assert (decision.decision, decision.rule) == ("ALLOW", "above_block_without_support")


# -- §4.4: cross-task propagation -------------------------------------------------------------


def test_re_hard_fail_propagates_halved_soft_evidence_to_head_and_tail():
    h = make()
    h.verdict("re", "hard_fail", rel(head="Metformin", tail="type 2 diabetes"))
    mem = h.memory()
    for entity in ("metformin", "type 2 diabetes"):
        pattern = mem.pattern("ner", entity)
        assert pattern.severity == approx(0.3 * 0.25 / 2)
        assert (pattern.count, pattern.kappa) == (1, 1)
    h.verdict("re", "hard_fail", rel(head="metformin", tail="type 2 diabetes"))
    before = 0.3 * 0.25 / 2
    expected = before + (0.985 * before + 0.3 * 0.05 - before) / 2
    assert h.severity("ner", "metformin", T0) == approx(expected)
    assert h.memory().pattern("ner", "metformin").kappa == 2


def test_propagation_skips_entities_outside_the_length_bounds():
    h = make()
    h.verdict("re", "hard_fail", rel(head="ASA", tail="x" * 60))
    h.verdict("qa", "hard_fail", qa(answer="yes, pneumonia,  , " + "y" * 59))
    mem = h.memory()
    assert mem.pattern("ner", "asa") is None
    assert mem.pattern("ner", "x" * 60) is None
    assert mem.pattern("ner", "yes") is None
    assert mem.pattern("ner", "pneumonia").severity == approx(0.2 * 0.25 / 2)
    assert mem.pattern("ner", "y" * 59) is not None


def test_soft_fail_and_success_do_not_propagate():
    h = make()
    h.verdict("re", "soft_downgrade", rel())
    h.verdict("re", "success", rel())
    assert h.memory().pattern("ner", "metformin") is None


def test_propagation_respects_the_cap_of_three_hits():
    h = make(maintenance=False)
    for _ in range(5):
        h.verdict("re", "hard_fail", rel())
    pattern = h.memory().pattern("ner", "metformin")
    assert (pattern.kappa, pattern.count) == (3, 3)


def test_propagation_stops_at_the_severity_zone_guard():
    h = make()
    with h.store.transaction() as txn:
        Memory(txn, h.config).put_pattern("ner", "metformin", Pattern(0.55, T0, T0, 1, 0, T0, 1, ""), None)
    h.verdict("re", "hard_fail", rel())
    assert h.memory().pattern("ner", "metformin").count == 1


def test_ner_hard_fail_preempts_relations_on_that_entity_whatever_the_source():
    h = make()
    h.verdict("ner", "hard_fail", ner("The Patient"), source="rule_based")
    h.verdict("ner", "hard_fail", ner("pain"))  # 4 characters: too short to preempt
    blocked = h.gate("re", rel(head="metformin", tail=" the patient"))
    assert (blocked.decision, blocked.rule) == ("BLOCK", "preempted_tail")
    assert h.gate("re", rel(head="pain")).decision == "ALLOW"
    h.verdict("ner", "success", ner("the patient"))
    assert h.gate("re", rel(head="the patient")).decision == "BLOCK", "a later success does not lift it"
    assert h.snapshot()["preempted_entities"] == ["the patient"]


def test_propagated_evidence_never_preempts():
    h = make()
    h.verdict("re", "hard_fail", rel(head="metformin"))
    assert h.snapshot()["preempted_entities"] == []


# -- §4.7: ontology ---------------------------------------------------------------------------


def test_ontology_violation_and_admission_use_alias_normalised_labels():
    h = make()
    onto = h.engine.ontology
    assert onto.admits("treatment", "alleviates", "symptom")  # ALLEVIATES -> TREATS
    assert onto.admits("Tests", "CONFIRMS", "Diagnosis")
    assert onto.violates("Treatment", "DIAGNOSES", "Diagnosis")
    assert not onto.violates("Anatomy", "DIAGNOSES", "Diagnosis"), "unlisted pairs never violate"
    assert not onto.admits("Anatomy", "TREATS", "Diagnosis")
    assert len(onto.priors) == 29
    assert len(onto.aliases) == 32


def test_ontology_filter_channel_downgrades_then_blocks_the_violating_triple():
    h = make()
    triple = rel(relation="DIAGNOSES")  # Treatment -> Diagnosis does not admit DIAGNOSES
    candidate = parse_event({"kind": "gate", "ts": "2026-05-04T00:00:00Z", "task": "re", "patient_id": "p1",
                             "candidate_id": "x", "payload": triple})  # fmt: skip
    assert isinstance(candidate, GateEvent)
    verdict = filter_verdict(h.engine.ontology, candidate)
    assert verdict is not None and (verdict.source, verdict.verdict) == ("rule_based", "hard_fail")
    assert (verdict.candidate_id, verdict.stage, verdict.reason) == (
        "x:ontology",
        "gatekeeper",
        "Ontology_Mismatch_Treatment",
    )
    assert filter_verdict(h.engine.ontology, replace(candidate, payload=rel())) is None
    violation = {"kind": "verdict", **verdict.model_dump(mode="json", exclude_none=True)}
    violation.pop("candidate_id")  # each send is another candidate's verdict
    severities, decisions = [], []
    for _ in range(6):
        h.send(violation)
        decisions.append(h.gate("re", triple).decision)
        severities.append(h.severity("re", "TREATMENT|DIAGNOSES|DIAGNOSIS", T0))
    assert severities[:2] == approx([0.25, 0.99 * 0.25 + 0.5 * 0.20])
    assert decisions == ["ALLOW", "ALLOW", "DOWNGRADE", "DOWNGRADE", "DOWNGRADE", "BLOCK"]


def test_relation_gate_allows_admitted_triples_whatever_their_severity():
    h = make()
    for _ in range(5):
        h.verdict("re", "hard_fail", rel())
    decision = h.gate("re", rel(relation="treats"))
    assert (decision.decision, decision.rule) == ("ALLOW", "ontology_admitted")


def test_relation_gate_blocks_verifier_fed_patterns_with_support():
    h = make()
    triple = rel(head_type="Anatomy")  # an unlisted pair: neither admitted nor violating
    decisions = []
    for _ in range(3):
        h.verdict("re", "hard_fail", triple)
        decisions.append(h.gate("re", triple).decision)
    # 0.50, then 0.99 * 0.50 + 0.20 = 0.695 (still <= 0.70), then 0.888 with count 3
    assert decisions == ["DOWNGRADE", "DOWNGRADE", "BLOCK"]


def test_relation_successes_do_not_whitelist_the_relation_type():
    h = make()
    triple = rel(head_type="Anatomy")
    h.verdict("re", "success", triple)
    for _ in range(3):
        h.verdict("re", "hard_fail", triple)
    assert h.gate("re", triple).decision == "BLOCK"


# -- §4.8: QA gate (Eq. 7-9) --------------------------------------------------------------------


def test_qa_gate_allows_covered_patients_and_downgrades_uncovered_ones():
    h = make()
    assert h.gate("qa", qa(category="diagnosis")).decision == "DOWNGRADE"
    h.verdict("ner", "success", ner("asthma", "Diagnosis"))
    covered = h.gate("qa", qa(category="Diagnosis"))
    assert (covered.decision, covered.rule) == ("ALLOW", "ner_coverage")
    assert h.gate("qa", qa(category="diagnosis"), patient="p2").decision == "DOWNGRADE"


def test_qa_gate_uses_given_ner_categories_over_its_own_state():
    h = make()
    h.verdict("ner", "success", ner("asthma", "Diagnosis"))
    assert h.gate("qa", qa(category="diagnosis", ner_categories=["Tests"])).decision == "DOWNGRADE"
    assert h.gate("qa", qa(category="tests", ner_categories=["Tests"])).decision == "ALLOW"


def test_qa_gate_ignores_qa_blocklist_severity():
    h = make()
    h.verdict("ner", "success", ner("asthma", "Diagnosis"))
    for _ in range(5):
        h.verdict("qa", "hard_fail", qa())
    decision = h.gate("qa", qa())
    assert decision.decision == "ALLOW"
    assert decision.severity > 0.6 and decision.support == 5


def _fallback_history(h, classified: int, unclassified: int, successes: int) -> None:
    for i in range(classified):
        h.verdict("qa", "hard_fail", qa(f"q{i}", "", "adverse_event", error_class="unsupported"))
    for i in range(unclassified):
        h.verdict("qa", "hard_fail", qa(f"u{i}", "", "adverse_event"))
    for i in range(successes):
        h.verdict("qa", "success", qa(f"s{i % 2}", "", "adverse_event"))


def test_fail_rate_counts_observations_with_the_counting_asymmetry():
    h = make()
    _fallback_history(h, classified=3, unclassified=2, successes=5)
    mem = h.memory()
    assert mem.qa_counts("adverse_event") == (3, 5, 5)

    assert qa_fail_rate(mem, "adverse_event") == approx(3 / 10)


def test_fallback_downgrades_only_when_fail_rate_and_difficulty_both_exceed_thresholds():
    h = make()
    _fallback_history(h, classified=4, unclassified=0, successes=6)  # rate 0.4
    easy = h.gate("qa", qa(category="adverse_event", difficulty=0.3))
    assert (easy.decision, easy.rule) == ("ALLOW", "fallback_below_thresholds")
    hard = h.gate("qa", qa(category="adverse_event", difficulty=0.31))
    assert (hard.decision, hard.rule) == ("DOWNGRADE", "fail_rate_difficulty")


def test_fallback_needs_ten_observations():
    h = make()
    _fallback_history(h, classified=5, unclassified=0, successes=4)
    decision = h.gate("qa", qa(category="outcome_mortality", difficulty=1.0))
    assert decision.rule == "fallback_insufficient_observations"
    assert h.gate("qa", qa(category="adverse_event", difficulty=1.0)).decision == "ALLOW"


def test_difficulty_is_derived_from_upstream_hard_fails_and_ner_yield():
    h = make()
    _fallback_history(h, classified=10, unclassified=0, successes=0)
    h.verdict("ner", "hard_fail", ner("x1 entity"), patient="p9")
    h.verdict("re", "hard_fail", rel(), source="rule_based", patient="p9")
    h.verdict("re", "soft_downgrade", rel(), patient="p9")  # not a rejection
    for name in ("asthma", "fever", "cough", "sepsis"):
        h.verdict("ner", "success", ner(name), patient="p9")

    assert patient_difficulty(h.memory(), "p9") == approx(2 / 6)
    assert h.gate("qa", qa(category="adverse_event"), patient="p9").decision == "DOWNGRADE"
    assert patient_difficulty(h.memory(), "nobody") == 0.0


def test_qa_signature_disambiguates_classified_fails():
    assert qa_signature(" What? ", " Adverse_Event ", "Unsupported") == "qa::adverse_event|unsupported"
    assert qa_signature("Q", "", "contradicted") == "qa::other|contradicted"
    assert qa_signature(" What? ", "x", None) == "what?"
    assert re_signature(" treatment", "treats ", "Diagnosis") == "TREATMENT|TREATS|DIAGNOSIS"


# -- §4.6: maintenance ----------------------------------------------------------------------------


def test_maintenance_prunes_patterns_below_the_floor_at_grid_boundaries():
    h = make()
    h.verdict("ner", "hard_fail", ner("sepsis"))  # 0.5 -> below 0.01 after log2(50) * 5 days = 28.2 days
    h.verdict("ner", "hard_fail", ner("fever"), at=T0 + 20 * DAY)
    h.verdict("ner", "success", ner("cough"), at=T0 + 28 * DAY)
    assert h.memory().pattern("ner", "sepsis") is not None
    h.verdict("ner", "success", ner("cough"), at=T0 + 28.3 * DAY)
    mem = h.memory()
    assert mem.pattern("ner", "sepsis") is None
    assert mem.pattern("ner", "fever") is not None
    assert mem.population("B", "ner") == 1


def test_a_clock_advance_with_no_event_runs_the_maintenance_an_event_then_would_have():

    tasks = dict(DEFAULT_TASKS)
    tasks["ner"] = replace(DEFAULT_TASKS["ner"], cap=2)
    ticked, reference = make(DBPMConfig(tasks=tasks)), make(DBPMConfig(tasks=tasks))
    for h in (ticked, reference):
        for name in ("a", "b", "c", "d"):  # one interval: learnt beyond the cap until the next boundary
            h.verdict("ner", "hard_fail", ner(name), at=T0 + 1)
    assert len(ticked.snapshot()["blocklist"]["ner"]) == 4
    with ticked.store.transaction() as txn:
        ticked.engine.advance(txn, T0 + 60)
    reference.verdict("ner", "success", ner("cough"), at=T0 + 60)  # an event at that time instead
    got, expected = ticked.snapshot(), reference.snapshot()
    assert (got["as_of"], got["blocklist"]) == (expected["as_of"], expected["blocklist"])
    assert len(got["blocklist"]["ner"]) == 2


def test_maintenance_caps_evict_the_lowest_effective_severity():

    tasks = dict(DEFAULT_TASKS)
    tasks["ner"] = replace(DEFAULT_TASKS["ner"], cap=2)
    h = make(DBPMConfig(tasks=tasks))
    h.verdict("ner", "hard_fail", ner("old strong"), at=T0)  # 0.5 at T0 -> 0.25 at +5d
    h.verdict("ner", "soft_downgrade", ner("new weak"), at=T0 + 5 * DAY)  # 0.25 at +5d (ties by name)
    h.verdict("ner", "hard_fail", ner("new strong"), at=T0 + 5 * DAY)  # 0.5
    h.verdict("ner", "success", ner("cough"), at=T0 + 6 * DAY)
    names = [x["signature"] for x in h.snapshot()["blocklist"]["ner"]]
    assert names == ["new strong", "old strong"]


def test_cross_task_counter_decays_one_per_maintenance_boundary():
    h = make()
    for _ in range(3):
        h.verdict("re", "hard_fail", rel())
    mem = h.memory()
    pattern = mem.pattern("ner", "metformin")
    step = h.config.maintenance_interval_s
    assert mem.kappa(pattern, T0) == 3
    assert mem.kappa(pattern, T0 + step) == 2
    assert mem.kappa(pattern, T0 + 10 * step) == 0
    h.verdict("re", "hard_fail", rel(), at=T0 + step)
    assert h.memory().pattern("ner", "metformin").count == 4, "the cap lifted after a quiet boundary"


def test_maintenance_runs_once_per_boundary_and_is_idempotent():
    h = make()
    h.verdict("ner", "hard_fail", ner("sepsis"))
    with h.store.transaction() as txn:
        mem = Memory(txn, h.config)
        maintain(mem, T0 + 40 * DAY)
        before = h.engine.snapshot(txn)
        assert maintain(mem, T0 + 40 * DAY) == 0
        assert h.engine.snapshot(txn) == before


def test_the_task_set_is_open_for_further_tasks():

    summary = TaskParams(0.15, 0.05, 0.03, 5.0, 0.65, 3, 200)
    h = make(DBPMConfig(tasks={**DEFAULT_TASKS, "summary": summary}))
    for _ in range(3):
        h.verdict("summary", "hard_fail", {"entity": "Hallucinated Dose"})
    decision = h.gate("summary", {"entity": "hallucinated dose"})
    assert (decision.decision, decision.task) == ("BLOCK", "summary")
    assert h.snapshot()["blocklist"]["summary"][0]["signature"] == "hallucinated dose"


def test_ontology_loader_reads_a_document_in_the_shipped_format():

    onto = load_ontology(
        "priors:\n  - {head_type: Drug, tail_type: Disease, relations: [cures]}\naliases:\n  HEALS: CURES\n"
    )
    assert onto.admits("drug", "heals", "DISEASE")
    assert onto.violates("Drug", "CAUSES", "Disease")
