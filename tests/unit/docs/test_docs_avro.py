"""Each docs model's ``model_dump(mode="json")`` is a valid Avro datum of its schema and reads back equal."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path

import fastavro
import pytest
from docs_examples import EXAMPLES, example, judge_with

from processors.docs.arbiter import run
from processors.docs.packet import ground_truth
from schemas.base import AvroModel
from schemas.docs import (
    ClassificationRequest,
    Disposition,
    DocumentBundle,
    DocumentType,
    GroundTruth,
    Review,
    ReviewDecision,
    ReviewPacket,
)
from schemas.registry import load_registry

AVRO_DIR = Path(__file__).resolve().parents[3] / "schemas" / "avro" / "docs"
MODELS: list[type[AvroModel]] = [ClassificationRequest, Disposition, ReviewPacket, Review, GroundTruth]


def _round_trip(model: AvroModel) -> None:
    # The standalone form: the file alone may use types defined in other files of the area.
    schema = load_registry().for_model(type(model)).current.parsed
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, model.model_dump(mode="json"))
    buffer.seek(0)
    assert type(model).model_validate(fastavro.schemaless_reader(buffer, schema, schema)) == model


@pytest.mark.parametrize("model", MODELS)
def test_schema_full_name_is_the_models_avro_name(model):
    schema = json.loads((AVRO_DIR / f"{model.__name__}.avsc").read_text())
    assert f"{schema['namespace']}.{schema['name']}" == model.avro_name


def _instances(config, key: str) -> list[AvroModel]:
    request = example(key, production_label=DocumentType.OTHER)
    finished = run(request, config, judge_with() if config.llm_enabled else None)
    out: list[AvroModel] = [request, finished.disposition]
    if finished.packet is not None:
        correction = Review(
            doc_id=request.doc_id,
            ts=datetime(2026, 1, 1, tzinfo=UTC),
            reviewer="sme",
            decision=ReviewDecision.CORRECTS,
            corrected_dominant_type=DocumentType.OTHER,
            corrected_mixture=list(request.classification.document_mixture),
            notes="n",
        )
        packet, truth = ground_truth(finished.packet, correction)
        out += [finished.packet, packet, correction, truth]
    return out


@pytest.mark.parametrize("key", sorted(EXAMPLES))
def test_every_model_round_trips_through_fastavro(rules_only, with_llm, key):
    for config in (rules_only, with_llm):
        for instance in _instances(config, key):
            _round_trip(instance)


def test_a_bundle_with_a_page_gap_is_schema_invalid():
    data = example("clean").bundle.model_dump(mode="json")
    data["pages"] = data["pages"][:-1]
    with pytest.raises(ValueError, match=r"numbered 1\.\.8"):
        DocumentBundle.model_validate(data)
