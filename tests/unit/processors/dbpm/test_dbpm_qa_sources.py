"""The five QA signal sources of the QA gate (§4.8, §6.3, Table 11): the default reads NER coverage and
decides as before; each of the other four, when selected, follows its rule on small hand-made inputs."""

from __future__ import annotations

import json

import pytest
from dbpm_harness import DAY, T0, Harness, make, ner, qa, rel

from processors.dbpm import BadEvent, DBPMConfig, parse_event
from processors.dbpm.ablation import PAPER_QA_SOURCES, QaSignalStats
from processors.dbpm.config import (
    QA_SIGNAL_DIFFICULTY,
    QA_SIGNAL_FAIL_MASS,
    QA_SIGNAL_FAIL_RATE,
    QA_SIGNAL_NER_COVERAGE,
    QA_SIGNAL_PARSE_FAILURE,
    QA_SIGNALS,
)
from processors.dbpm.gates import category_fail_mass, dual_bucket_fail_rate
from processors.dbpm.signatures import qa_category
from schemas.dbpm import Candidate
from schemas.serde import SingleObjectSerde
from streams.runtime.dlq import SourceRecord
from streams.worker.wire import CandidateRecord, decode_candidate
from tests.replay_example import EXAMPLE, example_events, needs_example
from topics.catalog import DBPM_CANDIDATES

DX = "What is the diagnosis?"
TX = "What treatment was given?"


def _source(signal: str) -> Harness:
    return Harness(DBPMConfig(qa_signal=signal))


def test_the_default_source_is_ner_coverage_and_an_unknown_source_is_refused() -> None:
    assert DBPMConfig().qa_signal == QA_SIGNAL_NER_COVERAGE
    assert QA_SIGNALS == ("fail_mass", "parse_failure", "fail_rate", "difficulty", "ner_coverage")
    assert [paper.signal for paper in PAPER_QA_SOURCES] == list(QA_SIGNALS)
    with pytest.raises(ValueError, match="qa_signal"):
        DBPMConfig(qa_signal="verifier_mood")


@needs_example
def test_the_default_configuration_decides_the_replay_example_as_the_example_does() -> None:
    h = make()
    got = [ruling.to_json() for obj in example_events() for ruling in h.send(obj)]
    lines = (EXAMPLE / "decisions.jsonl").read_text(encoding="utf-8").splitlines()
    assert got == [json.loads(line) for line in lines]


def test_the_default_gate_reads_coverage_then_the_fallback_whatever_the_variant_inputs_say() -> None:
    h = make()
    for error_class in ("unsupported", "contradicted"):
        h.verdict("qa", "hard_fail", qa(DX, error_class=error_class))
    covered = h.gate("qa", qa(DX, ner_categories=["Diagnosis"], parse_failed=True, difficulty=0.9))
    assert (covered.decision, covered.rule, covered.sources) == (
        "ALLOW",
        "ner_coverage",
        ("ner_coverage_given",),
    )
    missing = h.gate("qa", qa(DX, ner_categories=[], parse_failed=True))
    assert (missing.decision, missing.rule) == ("DOWNGRADE", "ner_coverage_missing")
    unmapped = h.gate("qa", qa("Any adverse event?", category="adverse_event", difficulty=0.9))
    assert (unmapped.decision, unmapped.rule) == ("ALLOW", "fallback_insufficient_observations")
    assert unmapped.sources == ("fail_rate", "difficulty_given")


def test_fail_mass_sums_the_categorys_error_class_severities_and_tags_above_its_threshold() -> None:
    h = _source(QA_SIGNAL_FAIL_MASS)
    h.verdict("qa", "hard_fail", qa(DX, error_class="unsupported"))
    h.verdict("qa", "hard_fail", qa(DX, error_class="unsupported"))  # 0.99 * 0.5 + 0.15 = 0.645
    h.verdict("qa", "hard_fail", qa(DX, category="diagnosis_extra", error_class="contradicted"))
    assert category_fail_mass(h.memory(), "diagnosis", T0) == pytest.approx(0.645)
    below = h.gate("qa", qa(DX, ner_categories=[]))
    assert (below.decision, below.rule, below.sources) == (
        "ALLOW",
        "fail_mass_below_threshold",
        ("fail_mass",),
    )
    h.verdict("qa", "hard_fail", qa(DX, error_class="contradicted"))  # + 0.5: 1.145 > 1.0
    assert h.gate("qa", qa(DX, ner_categories=["diagnosis"])).rule == "fail_mass", (
        "the category, not the pair"
    )
    assert h.gate("qa", qa(TX, category="treatment")).decision == "ALLOW"
    later = h.gate("qa", qa(DX), at=T0 + 10 * DAY)  # one QA half-life: 0.57 of mass left
    assert later.decision == "ALLOW"


def test_parse_failure_tags_exactly_the_pairs_whose_flag_is_set() -> None:
    h = _source(QA_SIGNAL_PARSE_FAILURE)
    flagged = h.gate("qa", qa(DX, parse_failed=True, ner_categories=["diagnosis"]))
    assert (flagged.decision, flagged.rule, flagged.sources) == (
        "DOWNGRADE",
        "parse_failed",
        ("parse_failure",),
    )
    assert h.gate("qa", qa(DX, parse_failed=False, ner_categories=[])).rule == "parse_flag_unset"
    assert h.gate("qa", qa(DX)).decision == "ALLOW", "an absent flag is unset"
    gate = {
        "kind": "gate",
        "ts": "2026-05-04T00:00:00Z",
        "task": "qa",
        "patient_id": "p1",
        "candidate_id": "c",
    }
    with pytest.raises(BadEvent, match="parse_failed"):
        parse_event({**gate, "payload": qa(DX, parse_failed="yes")})


@pytest.mark.parametrize("flag", [True, False, None])
def test_the_parse_failure_flag_travels_on_the_candidate_topic_as_written(flag: bool | None) -> None:
    """A QA candidate's flag reads back from ``clingate.dbpm.candidates`` as written (unset stays absent), so
    a worker's gate decides a flagged pair as the in-process engine does."""
    payload = qa(DX, ner_categories=["diagnosis"], **({} if flag is None else {"parse_failed": flag}))
    candidate = Candidate.model_validate(
        {
            "ts": "2026-05-04T00:00:00Z",
            "task": "qa",
            "patient_id": "p1",
            "candidate_id": "c1",
            "payload": payload,
        }
    )
    serde = SingleObjectSerde()
    value = serde.encode(candidate, topic=DBPM_CANDIDATES)
    decoded = decode_candidate(serde, SourceRecord(DBPM_CANDIDATES, 0, 0, None, b"p1", value))
    assert isinstance(decoded, CandidateRecord) and decoded.event.payload == payload
    ruling = _source(QA_SIGNAL_PARSE_FAILURE).gate("qa", decoded.event.payload)
    assert ruling.rule == ("parse_failed" if flag else "parse_flag_unset")


def test_fail_rate_counts_fails_per_pair_and_successes_per_template() -> None:
    h = _source(QA_SIGNAL_FAIL_RATE)
    none = h.gate("qa", qa(DX))
    assert (none.decision, none.rule) == ("ALLOW", "fail_rate_insufficient_observations")
    for _ in range(20):
        h.verdict("qa", "success", qa(DX))
    h.verdict("qa", "hard_fail", qa(DX, error_class="unsupported"))
    # 1 fail in 21 pairs, but 20 successes of one template count once: 1 / (1 + 1).
    assert dual_bucket_fail_rate(h.memory(), "diagnosis") == pytest.approx(0.5)
    tagged = h.gate("qa", qa(DX, ner_categories=["diagnosis"]))
    assert (tagged.decision, tagged.rule, tagged.sources) == (
        "DOWNGRADE",
        "fail_rate",
        ("fail_rate_dual_bucket",),
    )
    for question in ("What was diagnosed first?", "Which diagnosis was confirmed?"):
        h.verdict("qa", "success", qa(question))
    assert dual_bucket_fail_rate(h.memory(), "diagnosis") == pytest.approx(0.25)
    assert h.gate("qa", qa(DX)).rule == "fail_rate_below_threshold"


def test_difficulty_tags_when_the_dual_bucket_rate_and_the_patient_difficulty_both_exceed_0_30() -> None:
    h = _source(QA_SIGNAL_DIFFICULTY)
    assert h.gate("qa", qa(DX, difficulty=0.9)).rule == "difficulty_insufficient_observations"
    h.verdict("qa", "success", qa(DX))
    h.verdict("qa", "hard_fail", qa(DX, error_class="unsupported"))  # rate 0.5
    hard = h.gate("qa", qa(DX, difficulty=0.5, ner_categories=["diagnosis"]))
    assert (hard.decision, hard.rule, hard.sources) == (
        "DOWNGRADE", "fail_rate_difficulty", ("fail_rate_dual_bucket", "difficulty_given"),
    )  # fmt: skip
    assert h.gate("qa", qa(DX, difficulty=0.3)).rule == "difficulty_below_thresholds"
    # Without a given difficulty, Eq. 8 from the memory: 1 RE rejection, 1 NER yield -> 0.5.
    h.verdict("re", "hard_fail", rel(), patient="p2")
    h.verdict("ner", "success", ner("asthma"), patient="p2")
    remembered = h.gate("qa", qa(DX), patient="p2")
    assert remembered.decision == "DOWNGRADE" and remembered.sources[1] == "difficulty"
    assert h.gate("qa", qa(DX), patient="p3").decision == "ALLOW"


def test_a_variants_tag_goes_through_the_flag_policy_like_any_qa_tag() -> None:
    h = Harness(DBPMConfig(qa_signal=QA_SIGNAL_PARSE_FAILURE).with_flags(qa_hard_block=True))
    ruling = h.gate("qa", qa(DX, parse_failed=True))
    assert (ruling.decision, ruling.policy) == ("BLOCK", ("qa_hard_block",))


def test_signal_stats_count_what_the_sources_read_on_verifier_pairs() -> None:
    stats = QaSignalStats()
    pairs = [
        (qa(DX, difficulty=0.1, parse_failed=True), "success", "verifier_mmed"),
        (qa(DX, difficulty=0.5), "hard_fail", "verifier_mmed"),
        (qa(TX, category="treatment", difficulty=0.2), "success", "verifier_mmed"),
        (qa(TX, category="treatment", difficulty=0.9), "hard_fail", "rule_based"),  # not a verifier
    ]
    for k, (payload, verdict, source) in enumerate(pairs):
        head = {"ts": "2026-05-04T00:00:00Z", "task": "qa", "patient_id": "p1"}
        gate = parse_event({**head, "kind": "gate", "candidate_id": f"c{k}", "payload": payload})
        said = {**head, "kind": "verdict", "verdict": verdict, "source": source, "payload": qa()}
        stats.pair(gate, parse_event(said))  # type: ignore[arg-type]
    out = stats.to_json()
    assert (out["qa_pairs"], out["parse_flagged"]) == (3, 1)
    assert out["difficulty"]["PASS"] == {
        "median": pytest.approx(0.15),
        "mean": pytest.approx(0.15),
        "q3": 0.2,
    }
    assert out["difficulty_above_threshold"] == {"PASS": 0.0, "FAIL": 1.0}
    assert out["category_fail_rates"] == {qa_category("diagnosis"): 0.5, "treatment": 0.0}
    assert out["category_fail_rate_spread"] == 0.5
