"""The decode step turns every record into data: the model, or a failure carrying all a dead letter needs."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.common import DeadLetter, Stage
from schemas.dbpm import Candidate, NerPayload, Verdict, VerdictLabel
from schemas.serde import DecodeReason, SingleObjectSerde
from streams.runtime.dlq import (
    PREFIX_BYTES,
    REASON_MAX_CHARS,
    RECORD_OVERHEAD_BYTES,
    Decoded,
    OutgoingRecord,
    Rejected,
    SourceRecord,
    dead_letter_record,
    decode_record,
    header_map,
)

SERDE = SingleObjectSerde()
TS = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
CANDIDATE = Candidate(ts=TS, task="ner", patient_id="p-1", candidate_id="c-1",
                      payload=NerPayload(entity="fever", category="Symptoms"))  # fmt: skip


def _record(value: bytes | None, offset: int = 7) -> SourceRecord:
    return SourceRecord(
        topic="clingate.dbpm.candidates", partition=3, offset=offset, timestamp_ms=1_777_888_999_000,
        key=b"p-1", value=value, headers=(("trace", b"\x00\xff"), ("empty", None)),
    )  # fmt: skip


def test_a_good_record_decodes_into_its_model():
    outcome = decode_record(SERDE, _record(SERDE.encode(CANDIDATE)), Candidate)
    assert outcome == Decoded(_record(SERDE.encode(CANDIDATE)), CANDIDATE)


def test_unreadable_bytes_fail_at_the_decode_stage():
    outcome = decode_record(SERDE, _record(b"\x13\x37 not avro"), Candidate)
    assert isinstance(outcome, Rejected)
    assert (outcome.stage, outcome.decode_reason) == (Stage.DECODE, DecodeReason.BAD_MAGIC)


def test_a_record_of_the_wrong_schema_fails_at_the_validate_stage():
    verdict = Verdict(ts=TS, task="ner", verdict=VerdictLabel.SUCCESS, source="verifier_mmed",
                      patient_id="p-1", payload=NerPayload(entity="fever", category="Symptoms"))  # fmt: skip
    outcome = decode_record(SERDE, _record(SERDE.encode(verdict)), Candidate)
    assert isinstance(outcome, Rejected)
    assert (outcome.stage, outcome.decode_reason) == (Stage.VALIDATE, DecodeReason.WRONG_SCHEMA)


def test_a_tombstone_on_an_event_topic_is_a_failure_not_a_skip():
    outcome = decode_record(SERDE, _record(None), Candidate)
    assert isinstance(outcome, Rejected)
    assert outcome.error_type == "TombstoneError"
    assert outcome.dead_letter().value is None


def test_the_dead_letter_keeps_the_record_whole_with_reason_and_coordinates():
    failed = decode_record(SERDE, _record(b"{}"), Candidate)
    assert isinstance(failed, Rejected)
    letter = failed.dead_letter()
    assert (letter.topic, letter.partition, letter.offset) == ("clingate.dbpm.candidates", 3, 7)
    assert (letter.key, letter.value) == (b"p-1", b"{}")
    assert [(h.key, h.value) for h in letter.headers] == [("trace", b"\x00\xff"), ("empty", None)]
    assert letter.ts == datetime.fromtimestamp(1_777_888_999, tz=UTC)
    assert letter.expected_schema == "clingate.dbpm.Candidate"
    assert "looks like JSON" in letter.error
    assert SERDE.decode(SERDE.encode(letter), DeadLetter) == letter


def test_the_dead_letter_headers_name_exception_message_and_source_coordinates():
    failed = decode_record(SERDE, _record(b"garbage"), Candidate)
    assert isinstance(failed, Rejected)
    assert header_map(failed.kafka_headers()) == {
        "exception": "SchemaDecodeError",
        "message": failed.reason,
        "topic": "clingate.dbpm.candidates",
        "partition": "3",
        "offset": "7",
        "stage": "decode",
        "reason": "bad_magic",
    }


def test_the_dead_letter_record_goes_to_the_dlq_of_its_source_under_the_original_key():
    failed = decode_record(SERDE, _record(b"garbage"), Candidate)
    assert isinstance(failed, Rejected)
    out = dead_letter_record(SERDE, failed)
    assert (out.topic, out.key) == ("clingate.dbpm.candidates.dlq", b"p-1")
    assert out.headers == failed.kafka_headers()
    assert SERDE.decode(out.value, DeadLetter) == failed.dead_letter()


def test_a_record_without_a_timestamp_gets_the_epoch_not_the_wall_clock():
    record = SourceRecord("t", 0, 0, None, None, b"x")
    failed = decode_record(SERDE, record, Candidate)
    assert isinstance(failed, Rejected)
    assert failed.dead_letter().ts == datetime(1970, 1, 1, tzinfo=UTC)


@settings(max_examples=300, deadline=None)
@given(
    value=st.binary(max_size=200),
    prefix=st.sampled_from([b"", b"\xc3\x01", SERDE.encode(CANDIDATE)[:10]]),
)
def test_any_bytes_become_data_and_a_failure_keeps_them_byte_for_byte(value: bytes, prefix: bytes):
    outcome = decode_record(SERDE, _record(prefix + value), Candidate)
    assert isinstance(outcome, Decoded | Rejected)
    if isinstance(outcome, Rejected):
        letter = SERDE.decode(SERDE.encode(outcome.dead_letter()), DeadLetter)
        assert letter.value == prefix + value


def _failed(key: bytes | None, value: bytes | None, headers: tuple = ()) -> Rejected:
    record = SourceRecord("clingate.fhir.updates", 1, 5, None, key, value, headers)
    failed = decode_record(SERDE, record, Candidate)
    assert isinstance(failed, Rejected)
    return failed


LIMIT = 1_048_588  # the broker's default max.message.bytes, for a DLQ configured without the catalog's


def _letter(out: OutgoingRecord) -> DeadLetter:
    return SERDE.decode(out.value, DeadLetter, topic=out.topic)


def test_a_dead_letter_within_its_topics_limit_is_whole_and_untruncated():
    value = b"v" * (LIMIT // 2)
    out = dead_letter_record(SERDE, _failed(b"k", value), max_bytes=LIMIT)
    assert _letter(out).value == value and not _letter(out).truncations
    assert "truncated" not in header_map(out.headers)


def test_a_value_larger_than_the_dlq_admits_is_cut_with_its_size_and_digest():
    value = bytes(range(256)) * 8192  # 2 MiB
    out = dead_letter_record(SERDE, _failed(b"k", value), max_bytes=LIMIT)
    letter = _letter(out)
    assert out.size <= LIMIT - RECORD_OVERHEAD_BYTES
    assert letter.value == value[:PREFIX_BYTES] and (letter.offset, letter.key) == (5, b"k")
    assert [(t.field, t.size, t.sha256) for t in letter.truncations] == [
        ("value", len(value), hashlib.sha256(value).hexdigest())
    ]
    assert header_map(out.headers)["truncated"] == "true"


def test_a_huge_key_is_cut_in_the_record_key_and_the_dead_letter_alike():
    key, value = b"k" * 700_000, b"v" * 300_000  # the key is in the record twice: 1.7 MB
    out = dead_letter_record(SERDE, _failed(key, value), max_bytes=LIMIT)
    letter = _letter(out)
    assert out.size <= LIMIT - RECORD_OVERHEAD_BYTES
    assert out.key == letter.key == key[:PREFIX_BYTES] and letter.value == value  # the key alone sufficed
    assert [t.field for t in letter.truncations] == ["key"]


def test_many_large_headers_are_cut_largest_first_and_dropped_when_cutting_is_not_enough():
    wide = tuple((f"h{i}", bytes([i]) * (20_000 + i)) for i in range(60))  # 1.2 MB of header values
    letter = _letter(dead_letter_record(SERDE, _failed(b"k", b"v", wide), max_bytes=LIMIT))
    assert letter.truncations[0].field == "headers[59].value"  # the largest first
    assert all(len(h.value or b"") <= 20_059 for h in letter.headers) and len(letter.headers) == 60
    names = tuple((f"{i:06d}" * 2_000, b"") for i in range(100))  # 1.2 MB of header names
    cut = _letter(dead_letter_record(SERDE, _failed(b"k", b"v", names), max_bytes=LIMIT))
    assert cut.headers == () and [t.field for t in cut.truncations] == ["headers"]


def test_a_reason_is_capped_in_the_dead_letter_and_its_header():
    failed = _failed(b"k", b"x")
    long = Rejected(failed.record, failed.stage, "E", "y" * 100_000, None, failed.expected_schema)
    out = dead_letter_record(SERDE, long)
    assert len(_letter(out).error) < REASON_MAX_CHARS + 100
    assert header_map(out.headers)["message"].endswith(f"({100_000 - REASON_MAX_CHARS} more characters)")
