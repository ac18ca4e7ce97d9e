"""Invariants of the whole arbiter over perturbed classifications of the 8-page example."""

from __future__ import annotations

import io

import fastavro
from docs_examples import example, judge_with
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.docs.arbiter import MAX_RETRIES, run
from schemas.docs import ArbiterDecision, ClassificationRequest, Disposition, Severity
from schemas.registry import load_registry

_SCHEMA = load_registry().for_model(Disposition).current.parsed
_share = st.floats(min_value=0.0, max_value=1.0, allow_nan=False).map(lambda x: round(x, 3))


@st.composite
def perturbed(draw: st.DrawFn) -> ClassificationRequest:
    request = example("clean")
    c = request.classification
    segments = []
    for segment in c.segments:
        classes = [
            x.model_copy(
                update={
                    "segment_share": draw(st.sampled_from([x.segment_share, draw(_share)])),
                    "confidence": draw(st.sampled_from([x.confidence, 1.3])),
                }
            )
            for x in segment.classifications
        ]
        segments.append(
            segment.model_copy(
                update={
                    "classifications": classes,
                    "segment_page_count": draw(st.sampled_from([segment.segment_page_count, 2])),
                    "end_page": draw(st.sampled_from([segment.end_page, segment.end_page + 1])),
                }
            )
        )
    mixture = [
        e.model_copy(update={"overall_share": draw(st.sampled_from([e.overall_share, 0.3]))})
        for e in c.document_mixture
    ]
    changed = c.model_copy(
        update={
            "segments": segments,
            "document_mixture": mixture,
            "number_of_segments": draw(st.sampled_from([2, 3])),
            "vendor_signals": draw(st.sampled_from([[], ["LabCorp"]])),
        }
    )
    return request.model_copy(update={"classification": changed})


@settings(max_examples=80, deadline=None)
@given(perturbed(), st.booleans())
def test_every_disposition_is_consistent_replayable_and_valid_avro(rules_only, with_llm, request, llm):
    config, judge = (with_llm, judge_with()) if llm else (rules_only, None)
    finished = run(request, config, judge)
    disposition = finished.disposition
    assert run(request, config, judge) == finished  # same input, same decision
    assert 1 <= len(disposition.attempts) <= MAX_RETRIES + 1
    assert (finished.packet is not None) is (disposition.decision is ArbiterDecision.ESCALATE_TO_SME)
    if disposition.decision is ArbiterDecision.AUTO_ACCEPT:
        assert all(i.severity is Severity.MINOR for i in disposition.issues)
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, _SCHEMA, disposition.model_dump(mode="json"))
    buffer.seek(0)
    assert Disposition.model_validate(fastavro.schemaless_reader(buffer, _SCHEMA, _SCHEMA)) == disposition
