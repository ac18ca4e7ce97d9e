"""The poison suite's strategies (``streams.testing.poison``): every kind of bad record they promise, each
one bad for its topic's runtime, and the same records for the same seed."""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processors.dbpm import parse_time
from schemas.common import DeadLetter, Header, Stage, Truncation
from schemas.dbpm import Candidate, NerPayload, Verdict, VerdictLabel
from schemas.fhir import FhirUpdate
from schemas.serde import SchemaDecodeError
from schemas.wire import make_serde
from streams.testing.poison import (
    CLINGATE_HEADERS,
    DEFAULT_KINDS,
    KEY_CHECKED,
    Kind,
    OversizeShape,
    Record,
    TopicSamples,
    bad_record,
    check_letter,
    draw,
    draw_balanced,
    expected_error,
    interleave,
    samples_for,
    schema_pool,
)
from streams.testing.worker import comparison_engine
from streams.worker.keys import TICK_HEADER, verdict_key
from streams.worker.wire import contract_event
from topics.catalog import DBPM_CANDIDATES, DBPM_VERDICTS, FHIR_UPDATES

SERDE = make_serde(None)
TS = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
DRAWN = [kind for kind in Kind if kind is not Kind.TOO_LARGE]
"""The kinds the strategies draw (a record too large for its outputs is built with the good ones)."""
SMALL = (OversizeShape(4096), OversizeShape(4096, key=512), OversizeShape(4096, header=256))
"""Oversized shapes small enough for many examples (the suite's are megabytes)."""


def _good() -> dict[str, list[Record]]:
    """A few good records of three topics: one without a key check, two with (different runtimes)."""
    engine = comparison_engine()
    candidates, verdicts, updates = [], [], []
    for i in range(5):
        payload = NerPayload(entity=f"entity {i}", category="Diagnosis")
        candidate = Candidate(ts=TS, task="ner", patient_id=f"p-{i}", candidate_id=f"c-{i}", payload=payload)
        candidates.append(Record(DBPM_CANDIDATES, b"p-%d" % i, SERDE.encode(candidate), ident=f"c-{i}"))
        verdict = Verdict(
            ts=TS,
            task="ner",
            verdict=VerdictLabel.HARD_FAIL,
            source="verifier_mmed",
            patient_id=f"p-{i}",
            payload=payload,
        )
        key = verdict_key(engine, contract_event(verdict))  # type: ignore[arg-type]
        verdicts.append(Record(DBPM_VERDICTS, key, SERDE.encode(verdict), ident=f"v-{i}"))
        observation = {
            "resourceType": "Observation",
            "id": f"o-{i}",
            "status": "final",
            "code": {"text": "Heart rate"},
            "subject": {"reference": f"Patient/p-{i}"},
        }
        update = FhirUpdate(
            ts=TS + timedelta(hours=i),
            patient_id=f"p-{i}",
            resource_type="Observation",
            resource=json.dumps(observation),
        )
        updates.append(Record(FHIR_UPDATES, b"p-%d" % i, SERDE.encode(update), ident=f"u-{i}"))
    return {DBPM_CANDIDATES: candidates, DBPM_VERDICTS: verdicts, FHIR_UPDATES: updates}


GOOD = _good()
POOL = schema_pool(GOOD, SERDE)
SAMPLES = {topic: samples_for(topic, records, POOL, SERDE) for topic, records in GOOD.items()}


def _valid_values(samples: TopicSamples) -> set[bytes]:
    return {value for _, value in samples.valid}


def _decodes(samples: TopicSamples, value: bytes) -> bool:
    return not samples.rejects(value)


def _assert_bad(record: Record, samples: TopicSamples) -> None:
    """The property every bad record has: its runtime's first failing check makes it a dead letter."""
    error = expected_error(record)
    if error == "BadWatermark":
        assert record.topic == DBPM_VERDICTS
        assert any(name == TICK_HEADER for name, _ in record.headers)
    elif error == "TombstoneError":
        assert record.value is None
    elif error == "KeyMismatch":
        assert record.topic in KEY_CHECKED and record.value is not None and _decodes(samples, record.value)
        assert (record.key, record.value) not in samples.valid
    else:
        assert error == "SchemaDecodeError" and record.value is not None and samples.rejects(record.value)


@pytest.mark.parametrize("topic", sorted(SAMPLES))
@pytest.mark.parametrize("kind", DRAWN)
def test_every_kind_is_drawn_bad_for_its_topic(topic: str, kind: Kind) -> None:
    """Scenario: twenty records of one kind for one topic. Each is of that kind and bad for the
    topic's runtime, with the defect the kind names."""
    samples = SAMPLES[topic]
    records = draw(bad_record(samples, (kind,), SMALL), 20, seed=3)
    valid = _valid_values(samples)
    for record in records:
        assert (record.topic, record.kind) == (topic, kind)
        _assert_bad(record, samples)
        value = record.value
        if kind is Kind.RANDOM_BYTES:
            assert value is not None and value not in valid
        elif kind is Kind.TRUNCATION:
            assert value is not None and any(v.startswith(value) and len(value) < len(v) for v in valid)
        elif kind is Kind.BIT_FLIP:
            assert value is not None
            flips = [
                sum(bin(a ^ b).count("1") for a, b in zip(value, v, strict=True))
                for v in valid
                if len(v) == len(value)
            ]
            assert 1 in flips, "not one bit away from a valid record"
        elif kind is Kind.OTHER_SCHEMA:
            assert value in samples.others
        elif kind is Kind.OVERSIZE:
            assert value is not None and len(value) == 4096
            shape_key = len(record.key or b"") == 512
            shape_header = record.headers == () or len(record.headers[0][1] or b"") == 256
            assert shape_key or shape_header
        elif kind is Kind.GARBAGE_HEADERS:
            names = [name for name, _ in record.headers]
            assert set(CLINGATE_HEADERS) <= set(names)
        elif kind is Kind.BAD_KEY:
            right_keys = {key for key, v in samples.valid if v == value}
            assert record.key not in right_keys
            if topic in KEY_CHECKED:
                assert value in valid  # a valid value under a wrong key
        elif kind is Kind.TOMBSTONE:
            assert value is None


@given(data=st.data())
def test_any_bad_record_of_any_kind_is_bad(data: st.DataObject) -> None:
    """Property: whatever the strategy draws, for any topic and kinds, is bad for that topic's runtime,
    and garbage in a ``clingate-watermark`` header is never an ISO time (a tick would be a good record)."""
    topic = data.draw(st.sampled_from(sorted(SAMPLES)))
    kinds = data.draw(st.lists(st.sampled_from(DRAWN), min_size=1, unique=True))
    record = data.draw(bad_record(SAMPLES[topic], kinds, SMALL))
    assert record.kind in kinds
    _assert_bad(record, SAMPLES[topic])
    for name, value in record.headers:
        if name == TICK_HEADER and value is not None:
            with pytest.raises(ValueError):  # BadEvent, UnicodeDecodeError
                parse_time(value.decode())


def test_garbage_headers_on_verdicts_keep_a_valid_verdict_and_elsewhere_break_the_value() -> None:
    """Scenario: every clingate header with garbage. On the verdict topic the watermark header alone
    makes a valid verdict under its right key bad (BadWatermark); on other topics, where the headers are
    ignored, the value is broken too (SchemaDecodeError)."""
    verdicts = draw(bad_record(SAMPLES[DBPM_VERDICTS], (Kind.GARBAGE_HEADERS,)), 10, seed=5)
    assert {expected_error(r) for r in verdicts} == {"BadWatermark"}
    assert all((r.key, r.value) in SAMPLES[DBPM_VERDICTS].valid for r in verdicts)
    candidates = draw(bad_record(SAMPLES[DBPM_CANDIDATES], (Kind.GARBAGE_HEADERS,)), 10, seed=5)
    assert {expected_error(r) for r in candidates} == {"SchemaDecodeError"}


def test_bad_keys_are_key_mismatches_where_the_key_is_checked() -> None:
    """Scenario: wrong keys. On the verdict and FHIR topics (the key decides state ownership) the value
    stays valid and the dead letter says KeyMismatch; on candidates the value is broken instead."""
    for topic in (DBPM_VERDICTS, FHIR_UPDATES):
        records = draw(bad_record(SAMPLES[topic], (Kind.BAD_KEY,)), 10, seed=9)
        assert {expected_error(r) for r in records if not r.headers} <= {"KeyMismatch"}
        assert all(r.value in _valid_values(SAMPLES[topic]) for r in records)
    records = draw(bad_record(SAMPLES[DBPM_CANDIDATES], (Kind.BAD_KEY,)), 10, seed=9)
    assert {expected_error(r) for r in records} == {"SchemaDecodeError"}


def test_draws_are_the_same_for_a_seed_and_differ_between_seeds() -> None:
    """Scenario: the same strategy drawn twice with one seed, once with another."""
    strategy = bad_record(SAMPLES[FHIR_UPDATES], DEFAULT_KINDS, SMALL)
    first, again, other = draw(strategy, 40, 11), draw(strategy, 40, 11), draw(strategy, 40, 12)
    assert first == again
    assert first != other
    assert len(first) == 40


def test_balanced_draws_feed_every_kind() -> None:
    """Scenario: 20 bad records of a topic, balanced: every default kind is there, none more than one
    apart from another, and again the same for the same seed."""
    records = draw_balanced(SAMPLES[DBPM_VERDICTS], 20, seed=4)
    counts = Counter(r.kind for r in records)
    assert set(counts) == set(DEFAULT_KINDS)
    assert max(counts.values()) - min(counts.values()) <= 1
    assert records == draw_balanced(SAMPLES[DBPM_VERDICTS], 20, seed=4)


def test_oversized_records_can_reach_the_topic_limit() -> None:
    """Scenario: an oversized record shaped near the 8 MiB limit, and one with a 2 MiB key. Their sizes
    are the shapes' and the serde refuses their values (padded valid records or random bytes)."""
    shapes = (
        OversizeShape(8 * 1024 * 1024 - 65536),
        OversizeShape(6 * 1024 * 1024 - 65536, key=2 * 1024 * 1024),
    )
    records = draw(bad_record(SAMPLES[DBPM_CANDIDATES], (Kind.OVERSIZE,), shapes), 4, seed=1)
    for record in records:
        assert record.value is not None and SAMPLES[DBPM_CANDIDATES].rejects(record.value)
        assert 6 * 1024 * 1024 - 65536 <= record.size <= 8 * 1024 * 1024 - 65536 + 64


def test_interleaving_keeps_the_good_records_in_order() -> None:
    """Scenario: good records interleaved with bad ones: the good ones keep their order (a patient's,
    a signature's), every record appears once."""
    good = [Record(FHIR_UPDATES, b"k", b"%d" % i, ident=str(i)) for i in range(30)]
    bad = [Record(FHIR_UPDATES, b"k", b"bad", kind=Kind.TRUNCATION) for _ in range(20)]
    mixed = interleave(good, bad, random.Random(2))
    assert [r for r in mixed if r.kind is None] == good
    assert len(mixed) == 50 and mixed[:20] != good[:20]


def _letter(record: Record, **changes: object) -> DeadLetter:
    letter = DeadLetter(
        ts=TS,
        topic=record.topic,
        partition=0,
        offset=1,
        stage=Stage.DECODE,
        error_type=expected_error(record),
        error="bad_magic: not Avro",
        key=record.key,
        value=record.value,
        headers=tuple(Header(key=k, value=v) for k, v in record.headers),
    )
    return letter.model_copy(update=changes)


def test_a_dead_letter_is_checked_byte_for_byte_and_by_error_type() -> None:
    """Scenario: the dead letter of a bad record as the runtimes write it passes; one with another error
    type, another value, a header lost or a wrong truncation does not; a cut value with the original's
    size and SHA-256 passes."""
    record = Record(
        FHIR_UPDATES, b"p-1", b"\x00" * 3000, (("clingate-gate", None), ("x", b"y")), Kind.RANDOM_BYTES
    )
    assert check_letter(record, _letter(record)) is None
    assert check_letter(record, _letter(record, error_type="KeyMismatch")) is not None
    assert check_letter(record, _letter(record, value=b"\x00" * 2999)) is not None
    assert check_letter(record, _letter(record, headers=(Header(key="x", value=b"y"),))) is not None
    assert (
        check_letter(
            record,
            _letter(record, headers=(Header(key="clingate-gate", value=b""), Header(key="x", value=b"y"))),
        )
        is not None
    )
    digest = hashlib.sha256(record.value or b"").hexdigest()
    cut = _letter(
        record,
        value=(record.value or b"")[:1024],
        truncations=(Truncation(field="value", size=3000, sha256=digest),),
    )
    assert check_letter(record, cut) is None
    wrong = cut.model_copy(update={"truncations": (Truncation(field="value", size=3001, sha256=digest),)})
    assert check_letter(record, wrong) is not None


def test_the_serde_oracle_refuses_what_it_cannot_decode() -> None:
    """The samples' oracle is the serde itself: valid values decode, broken ones raise."""
    samples = SAMPLES[DBPM_CANDIDATES]
    _key, value = samples.valid[0]
    assert not samples.rejects(value) and samples.rejects(value[:-1])
    with pytest.raises(SchemaDecodeError):
        SERDE.decode(value[:-1], Candidate)
