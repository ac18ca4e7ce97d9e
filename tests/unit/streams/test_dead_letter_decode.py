"""The decode step turns every record into data: the model, or a failure carrying all a dead letter needs."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.common import DeadLetter, Stage
from schemas.dbpm import Candidate, NerPayload, Verdict, VerdictLabel
from schemas.serde import DecodeReason, SingleObjectSerde
from streams.dlq import Decoded, DecodeFailed, SourceRecord, decode_record, header_map

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
    assert isinstance(outcome, DecodeFailed)
    assert (outcome.stage, outcome.decode_reason) == (Stage.DECODE, DecodeReason.BAD_MAGIC)


def test_a_record_of_the_wrong_schema_fails_at_the_validate_stage():
    verdict = Verdict(ts=TS, task="ner", verdict=VerdictLabel.SUCCESS, source="verifier_mmed",
                      patient_id="p-1", payload=NerPayload(entity="fever", category="Symptoms"))  # fmt: skip
    outcome = decode_record(SERDE, _record(SERDE.encode(verdict)), Candidate)
    assert isinstance(outcome, DecodeFailed)
    assert (outcome.stage, outcome.decode_reason) == (Stage.VALIDATE, DecodeReason.WRONG_SCHEMA)


def test_a_tombstone_on_an_event_topic_is_a_failure_not_a_skip():
    outcome = decode_record(SERDE, _record(None), Candidate)
    assert isinstance(outcome, DecodeFailed)
    assert outcome.error_type == "TombstoneError"
    assert outcome.dead_letter().value is None


def test_the_dead_letter_keeps_the_record_whole_with_reason_and_coordinates():
    failed = decode_record(SERDE, _record(b"{}"), Candidate)
    assert isinstance(failed, DecodeFailed)
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
    assert isinstance(failed, DecodeFailed)
    assert header_map(failed.kafka_headers()) == {
        "exception": "SchemaDecodeError",
        "message": failed.reason,
        "topic": "clingate.dbpm.candidates",
        "partition": "3",
        "offset": "7",
        "stage": "decode",
        "reason": "bad_magic",
    }


def test_a_record_without_a_timestamp_gets_the_epoch_not_the_wall_clock():
    record = SourceRecord("t", 0, 0, None, None, b"x")
    failed = decode_record(SERDE, record, Candidate)
    assert isinstance(failed, DecodeFailed)
    assert failed.dead_letter().ts == datetime(1970, 1, 1, tzinfo=UTC)


@settings(max_examples=300, deadline=None)
@given(
    value=st.binary(max_size=200),
    prefix=st.sampled_from([b"", b"\xc3\x01", SERDE.encode(CANDIDATE)[:10]]),
)
def test_any_bytes_become_data_and_a_failure_keeps_them_byte_for_byte(value: bytes, prefix: bytes):
    outcome = decode_record(SERDE, _record(prefix + value), Candidate)
    assert isinstance(outcome, Decoded | DecodeFailed)
    if isinstance(outcome, DecodeFailed):
        letter = SERDE.decode(SERDE.encode(outcome.dead_letter()), DeadLetter)
        assert letter.value == prefix + value
