"""The serde's wire formats and its one error type, with a reason for each way bytes can fail."""

from __future__ import annotations

import json
import struct
from datetime import UTC, datetime

import avro.schema
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from fastavro.schema import fingerprint, to_parsing_canonical_form

from schemas.dbpm import Candidate, NerPayload, RePayload, Verdict, VerdictLabel
from schemas.registry import load_registry
from schemas.registry_serde import ConfluentRegistrySerde
from schemas.serde import (
    SINGLE_OBJECT_MAGIC,
    DecodeReason,
    SchemaDecodeError,
    SchemaEncodeError,
    SingleObjectSerde,
)
from schemas.wire import make_serde

SERDE = SingleObjectSerde()
TS = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
CANDIDATE = Candidate(
    ts=TS, task="re", patient_id="p-000123", candidate_id="c-000123-re-0007",
    payload=RePayload(head="metformin", head_type="Treatment", relation="TREATS",
                      tail="type 2 diabetes", tail_type="Diagnosis"),
)  # fmt: skip
VERDICT = Verdict(
    ts=TS, task="ner", verdict=VerdictLabel.HARD_FAIL, source="verifier_mmed", patient_id="p-000123",
    payload=NerPayload(entity="patient", category="Diagnosis"),
)  # fmt: skip


def _reason(data: bytes, expected: type = Candidate) -> DecodeReason:
    with pytest.raises(SchemaDecodeError) as caught:
        SERDE.decode(data, expected)
    return caught.value.reason


@pytest.mark.parametrize("entry", list(load_registry().entries.values()), ids=lambda e: e.full_name)
def test_fingerprint_is_the_crc64_avro_of_the_canonical_form_as_both_libraries_compute_it(entry):
    reference = avro.schema.parse(json.dumps(entry.current.schema))
    assert entry.current.fingerprint == reference.fingerprint("CRC-64-AVRO")
    assert entry.current.fingerprint.hex() == fingerprint(
        to_parsing_canonical_form(entry.current.parsed), "CRC-64-AVRO"
    )
    assert entry.current.canonical_form == reference.canonical_form


def test_single_object_header_is_magic_then_little_endian_fingerprint():
    data = SERDE.encode(CANDIDATE)
    entry = load_registry().for_model(Candidate)
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == entry.current.fingerprint
    rabin = int.from_bytes(entry.current.fingerprint, "little")
    assert struct.pack("<Q", rabin) == data[2:10]


def test_replay_contract_example_decodes_to_the_same_fields():
    line = {"ts": "2026-05-04T10:00:01Z", "task": "re", "patient_id": "p-000123",
            "candidate_id": "c-000123-re-0007",
            "payload": {"head": "metformin", "head_type": "Treatment", "relation": "TREATS",
                        "tail": "type 2 diabetes", "tail_type": "Diagnosis"}}  # fmt: skip
    candidate = Candidate.model_validate(line)
    decoded = SERDE.decode(SERDE.encode(candidate), Candidate).model_dump(mode="json", exclude_none=True)
    assert decoded == line


def test_bytes_without_the_marker_are_bad_magic():
    assert _reason(b"\x00\x00\x00\x00\x01" + b"x" * 20) is DecodeReason.BAD_MAGIC
    assert _reason(b'{"task": "ner"}') is DecodeReason.BAD_MAGIC
    assert _reason(b"") is DecodeReason.BAD_MAGIC


def test_json_is_named_as_json_in_the_reason():
    with pytest.raises(SchemaDecodeError, match="looks like JSON"):
        SERDE.decode(json.dumps(CANDIDATE.model_dump(mode="json")).encode(), Candidate)


def test_an_unknown_fingerprint_is_unknown_schema():
    assert _reason(SINGLE_OBJECT_MAGIC + b"\x01" * 8 + b"\x00") is DecodeReason.UNKNOWN_SCHEMA


def test_a_record_of_another_schema_is_wrong_schema_and_names_both():
    names = r"expected clingate\.dbpm\.Candidate.*clingate\.dbpm\.Verdict"
    with pytest.raises(SchemaDecodeError, match=names) as e:
        SERDE.decode(SERDE.encode(VERDICT), Candidate)
    assert e.value.reason is DecodeReason.WRONG_SCHEMA
    assert e.value.writer == "clingate.dbpm.Verdict"


def test_without_an_expected_model_the_writer_schema_decides():
    assert SERDE.decode(SERDE.encode(VERDICT)) == VERDICT


@pytest.mark.parametrize("cut", [3, 10, 11, 20, -1])
def test_truncated_bytes_are_malformed(cut):
    assert _reason(SERDE.encode(CANDIDATE)[:cut]) is DecodeReason.MALFORMED


def test_trailing_garbage_is_malformed():
    assert _reason(SERDE.encode(CANDIDATE) + b"\x00garbage") is DecodeReason.MALFORMED


def test_a_datum_the_model_rejects_is_invalid():
    entry = load_registry().for_model(Candidate)
    datum = {**CANDIDATE.model_dump(mode="json"), "task": "ner"}  # RE payload under task ner
    import io

    import fastavro

    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, entry.current.parsed, datum)
    data = SINGLE_OBJECT_MAGIC + entry.current.fingerprint + buffer.getvalue()
    with pytest.raises(SchemaDecodeError, match="task 'ner' carries a NerPayload") as e:
        SERDE.decode(data, Candidate)
    assert e.value.reason is DecodeReason.INVALID


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
def test_a_value_the_schema_cannot_carry_fails_encoding_with_a_typed_error():
    from schemas.common import DeadLetter, Stage

    letter = DeadLetter.model_construct(  # bypasses validation, as a buggy producer might
        ts=TS,
        topic="t",
        partition="two",
        offset=0,
        stage=Stage.DECODE,
        error_type="E",
        error="e",
        key=None,
        value=None,
        headers=(),
        expected_schema=None,
    )
    with pytest.raises(SchemaEncodeError):
        SERDE.encode(letter)


def test_registry_wire_format_is_magic_zero_and_the_registered_schema_id():
    client = SchemaRegistryClient.new_client({"url": "mock://wire-format"})
    serde = ConfluentRegistrySerde(client)
    data = serde.encode(CANDIDATE, topic="clingate.dbpm.candidates")
    registered = client.get_latest_version("clingate.dbpm.candidates-value")
    assert data[0] == 0
    assert int.from_bytes(data[1:5], "big") == registered.schema_id
    assert serde.decode(data, Candidate, topic="clingate.dbpm.candidates") == CANDIDATE


def test_registry_wire_format_rejects_single_object_bytes_and_foreign_schemas():
    serde = ConfluentRegistrySerde(SchemaRegistryClient.new_client({"url": "mock://foreign"}))
    with pytest.raises(SchemaDecodeError) as bad:
        serde.decode(SERDE.encode(CANDIDATE), Candidate, topic="t")
    assert bad.value.reason is DecodeReason.BAD_MAGIC
    verdict_bytes = serde.encode(VERDICT, topic="t")
    with pytest.raises(SchemaDecodeError) as wrong:
        serde.decode(verdict_bytes, Candidate, topic="t")
    assert wrong.value.reason is DecodeReason.WRONG_SCHEMA


def test_make_serde_picks_the_format_from_the_registry_url():
    assert isinstance(make_serde(None), SingleObjectSerde)
    assert isinstance(make_serde("mock://selected"), ConfluentRegistrySerde)
