"""What the ordered loop publishes for a record: its outputs, or a dead letter when they cannot be."""

from __future__ import annotations

from schemas.common import Stage
from streams.groups.ordered import fitting, handler_failed
from streams.runtime.core import Output
from streams.runtime.dlq import Rejected, SourceRecord
from topics.catalog import DATA_MAX_MESSAGE_BYTES, DBPM_CANDIDATES, DBPM_NARRATIVES

RECORD = SourceRecord(DBPM_NARRATIVES, 2, 40, None, b"p-1", b"narrative")


def test_outputs_that_fit_their_topics_are_published_as_the_handler_returned_them():
    handled = [Output(DBPM_CANDIDATES, b"p-1", b"x" * 1000), Output(DBPM_CANDIDATES, b"p-1", b"y")]
    assert fitting(RECORD, handled, "clingate.dbpm.Narrative") is handled


def test_an_output_larger_than_its_topic_admits_dead_letters_the_input_at_the_produce_stage():
    handled = [
        Output(DBPM_CANDIDATES, b"p-1", b"y"),
        Output(DBPM_CANDIDATES, b"p-1", b"x" * DATA_MAX_MESSAGE_BYTES),
    ]
    [failed] = fitting(RECORD, handled, "clingate.dbpm.Narrative")
    assert isinstance(failed, Rejected) and failed.record == RECORD
    assert (failed.stage, failed.error_type) == (Stage.PRODUCE, "OutputTooLarge")
    assert DBPM_CANDIDATES in failed.reason


def test_a_handler_error_is_the_records_dead_letter_at_the_process_stage():
    [failed] = handler_failed(RECORD, KeyError("payload"), "clingate.dbpm.Narrative")
    assert isinstance(failed, Rejected)
    assert (failed.stage, failed.error_type, failed.expected_schema) == (
        Stage.PROCESS, "KeyError", "clingate.dbpm.Narrative"
    )  # fmt: skip
