"""The operator's dead-letter pages through HTTP (aiohttp's test client, fakes for the dead-letter topics
and the request topic): every dead-letter topic with its count, a topic's records newest first with the
reason and the coordinates, hostile content escaped, the re-drive of one record (audited first, then asked
for as a request naming the dead letter, its source topic, the operator and the audit record), and every
refusal: no note, a dead letter cut to fit, one without a value, one already re-driven, no CSRF token,
another role, and a request Kafka does not acknowledge. What the request runtime produces of a request
is in ``tests/unit/streams/test_console_requests.py``."""

from __future__ import annotations

import html as html_module
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from schemas.common import DeadLetter, Header, Truncation
from schemas.console import ConsoleRequestOutcome, Role
from schemas.fhir import FhirUpdate
from schemas.wire import make_serde
from streams.console.audit import Action
from streams.console.dead_letter_queues import PAGE_OFFSETS, Letter
from streams.console.dead_letters import preview
from streams.console.history import asked
from streams.runtime.dlq import Rejected, SourceRecord, decode_record
from topics.catalog import CLINICAL_DRAFTS, FHIR_UPDATES, dlq_name

from .conftest import PASSWORD, Console, csrf_of, sign_in

Client = TestClient[Any, Any]
DLQ = dlq_name(FHIR_UPDATES)
WRITTEN = datetime(2026, 5, 4, 9, 30, tzinfo=UTC)
BAD_VALUE = b'{"patient_id": "PT-TEST-010", not avro}'


def dead_letter(offset: int, *, value: bytes | None = BAD_VALUE, **update: Any) -> Letter:
    """The dead letter the decode step makes of a malformed FHIR update (source partition 2, offset
    ``100 + offset``), at ``offset`` of the FHIR updates' dead-letter topic; ``update`` changes its fields."""
    record = SourceRecord(FHIR_UPDATES, 2, 100 + offset, 1_777_000_000_000, b"PT-TEST-010", value,
                          (("traceparent", b"00-abc-01"), ("empty", None)))  # fmt: skip
    failed = decode_record(make_serde(None), record, FhirUpdate)
    assert isinstance(failed, Rejected)
    letter = failed.dead_letter().model_copy(update=update)
    return Letter(DLQ, 0, offset, WRITTEN + timedelta(minutes=offset), letter)


@pytest.fixture
def site(console: Console) -> Console:
    """The console with an operator ``op`` and three dead letters of the FHIR updates, one of the drafts."""
    console.users.add("op", Role.OPERATOR, PASSWORD)
    console.dead_letters.letters = [dead_letter(0), dead_letter(1), dead_letter(2)]
    draft = dead_letter(0).letter
    assert draft is not None
    console.dead_letters.letters.append(
        Letter(dlq_name(CLINICAL_DRAFTS), 0, 0, WRITTEN, draft.model_copy(update={"topic": CLINICAL_DRAFTS}))
    )
    return console


def _page(path: str) -> Any:
    async def scenario(client: Client) -> tuple[int, str]:
        await sign_in(client, "op")
        page = await client.get(path)
        return page.status, await page.text()

    return scenario


def test_the_index_lists_every_dead_letter_topic_with_its_count_and_newest_time(site: Console) -> None:
    status, html = site.run(_page("/dead-letters"))
    assert status == 200
    rows = dict(re.findall(r'<tr data-topic="([^"]+)" data-records="(\d+)">', html))
    assert rows[DLQ] == "3" and rows[dlq_name(CLINICAL_DRAFTS)] == "1"
    assert rows[dlq_name("clingate.agent.requests")] == "0" and len(rows) >= 10, "every DLQ of the catalog"
    assert (WRITTEN + timedelta(minutes=2)).isoformat() in html, "the newest record's time"


def test_a_topic_lists_its_dead_letters_newest_first_with_reason_and_coordinates(site: Console) -> None:
    status, html = site.run(_page(f"/dead-letters/{DLQ}"))
    assert status == 200
    assert re.findall(r'<tr data-offset="(\d+)">', html) == ["2", "1", "0"]
    row = html[html.index('data-offset="1"') :].split("</tr>")[0]
    assert "decode" in row and "SchemaDecodeError" in row
    assert f"{FHIR_UPDATES}[2]@101" in row, "the original coordinates"
    assert "clingate.fhir.FhirUpdate" in row, "the expected schema"
    assert BAD_VALUE.decode() in html_module.unescape(row), "the value as text"
    assert "older" not in html


def test_older_dead_letters_are_a_page_further(site: Console) -> None:
    site.dead_letters.letters = [dead_letter(n) for n in range(PAGE_OFFSETS + 5)]
    _, html = site.run(_page(f"/dead-letters/{DLQ}"))
    shown = re.findall(r'<tr data-offset="(\d+)">', html)
    assert len(shown) == PAGE_OFFSETS and shown[0] == str(PAGE_OFFSETS + 4)
    older = re.search(r'class="older" href="([^"]+)"', html)
    assert older is not None
    _, html = site.run(_page(f"/dead-letters/{DLQ}" + html_module.unescape(older.group(1))))
    assert re.findall(r'<tr data-offset="(\d+)">', html) == ["4", "3", "2", "1", "0"]


def test_hostile_dead_letter_content_is_escaped(site: Console) -> None:
    hostile = dead_letter(
        0, value=b"<img src=x onerror=alert(1)>", error="<script>alert(2)</script>",
        headers=(Header(key="<b>k</b>", value=b"<i>v</i>"),), expected_schema="<u>s</u>",
    )  # fmt: skip
    site.dead_letters.letters = [hostile]
    for path in (f"/dead-letters/{DLQ}", f"/dead-letters/{DLQ}/0/0"):
        _, html = site.run(_page(path))
        assert "<script>" not in html and "<img src=x" not in html and "<u>s</u>" not in html
        assert (
            "&lt;script&gt;alert(2)&lt;/script&gt;" in html and "&lt;img src=x onerror=alert(1)&gt;" in html
        )
    assert "<b>k</b>" not in html and "&lt;b&gt;k&lt;/b&gt;" in html and "&lt;i&gt;v&lt;/i&gt;" in html


def test_the_record_page_shows_all_of_it_and_the_redrive_form(site: Console) -> None:
    binary = dead_letter(1, value=b"\x00\xff\xfe" + b"x" * 70_000)
    site.dead_letters.letters = [binary]
    status, html = site.run(_page(f"/dead-letters/{DLQ}/0/1"))
    assert status == 200
    assert "SchemaDecodeError" in html and f"{FHIR_UPDATES}[2]@101" in html
    assert "00 ff fe 78" in html and "70003 bytes, not UTF-8 (hex), only the first 65536 shown" in html
    assert "traceparent" in html and "00-abc-01" in html, "every header"
    assert "nothing: the dead letter is whole" in html
    assert 'name="note"' in html and f"Re-drive to {FHIR_UPDATES}" in html


def _redrive(path: str, note: str | None = "schema fixed upstream", *, twice: bool = False) -> Any:
    async def scenario(client: Client) -> list[tuple[int, str, str]]:
        await sign_in(client, "op")
        answers = []
        for _ in range(2 if twice else 1):
            token = csrf_of(await (await client.get(f"/dead-letters/{DLQ}")).text())
            form = {"csrf_token": token} | ({} if note is None else {"note": note})
            response = await client.post(path, data=form, allow_redirects=False)
            answers.append((response.status, response.headers.get("Location", ""), await response.text()))
        return answers

    return scenario


def test_a_redrive_is_audited_first_then_asked_for_as_a_request_naming_the_dead_letter(
    site: Console,
) -> None:
    [(status, location, _)] = site.run(_redrive(f"/dead-letters/{DLQ}/0/1", " schema fixed upstream "))
    assert status == 303 and location == f"/dead-letters/{DLQ}/0/1"
    [sent] = site.requests.produced
    [action] = [a for a in site.trail.records if a.action == "redrive"]
    assert action in sent.audited, "recorded before it was asked for"
    assert (action.user, action.role, action.target, action.outcome) == (
        "op",
        "operator",
        f"{DLQ}[0]@1",
        "ok",
    )
    assert json.loads(action.detail) == {
        "topic": FHIR_UPDATES, "partition": 2, "offset": 101, "note": "schema fixed upstream",
    }  # fmt: skip
    request = sent.request
    assert (request.request_id, request.user, request.role, request.action) == (
        action.action_id, "op", "operator", "redrive",
    )  # fmt: skip
    assert (request.target, request.topic) == (f"{DLQ}[0]@1", FHIR_UPDATES)
    assert request.note == "schema fixed upstream"
    assert request.key is None and request.value is None, "the runtime produces the dead letter's own bytes"
    assert request.event_time == action.event_time

    _, html = site.run(_page(f"/dead-letters/{DLQ}/0/1"))
    assert f"Re-drive to {FHIR_UPDATES} asked by op at {action.event_time.isoformat()}" in html
    assert 'name="note"' not in html, "no second re-drive offered"
    _, listing = site.run(_page(f"/dead-letters/{DLQ}"))
    row = listing[listing.index('data-offset="1"') :].split("</tr>")[0]
    assert "re-drive asked by op at" in row


def test_a_dead_letter_already_redriven_is_refused_and_not_produced_again(site: Console) -> None:
    first, second = site.run(_redrive(f"/dead-letters/{DLQ}/0/1", twice=True))
    assert first[0] == 303 and second[0] == 409 and "Already re-driven by op" in second[2]
    assert len(site.requests.produced) == 1
    assert len([a for a in site.trail.records if a.action == "redrive"]) == 1


@pytest.mark.parametrize("note", [None, "", "   ", "x" * 2001])
def test_a_redrive_without_a_note_is_refused(site: Console, note: str | None) -> None:
    [(status, _, html)] = site.run(_redrive(f"/dead-letters/{DLQ}/0/1", note))
    assert status == 400 and "Say what was fixed" in html
    assert not site.requests.produced and not [a for a in site.trail.records if a.action == "redrive"]


@pytest.mark.parametrize(
    ("letter", "says"),
    [
        (dead_letter(1, truncations=(Truncation(field="value", size=9_000_000, sha256="ab" * 32),)),
         "not whole (its value were cut"),
        (dead_letter(1, value=None), "has no value"),
        (dead_letter(1, topic=CLINICAL_DRAFTS), f"names {CLINICAL_DRAFTS}, not the source"),
    ],
)  # fmt: skip
def test_a_dead_letter_that_is_not_whole_has_no_value_or_another_source_is_refused(
    site: Console, letter: Letter, says: str
) -> None:
    site.dead_letters.letters = [letter]
    [(status, _, html)] = site.run(_redrive(f"/dead-letters/{DLQ}/0/1"))
    assert status == 409 and says in html
    assert not site.requests.produced and not [a for a in site.trail.records if a.action == "redrive"]
    _, page = site.run(_page(f"/dead-letters/{DLQ}/0/1"))
    assert says in page and 'name="note"' not in page, "the page says why, and offers no form"


def test_a_redrive_kafka_does_not_acknowledge_is_a_503_audited_as_refused_and_may_be_done_again(
    site: Console,
) -> None:
    site.requests.down = True
    [(status, _, html)] = site.run(_redrive(f"/dead-letters/{DLQ}/0/1"))
    assert status == 503 and "was not done" in html
    assert [(a.action, a.outcome) for a in site.trail.records if a.action == "redrive"] == [
        ("redrive", "ok"), ("redrive", "refused"),
    ]  # fmt: skip
    assert asked(Action.REDRIVE, site.trail.records, {}) == {}
    site.requests.down = False
    [(status, _, _)] = site.run(_redrive(f"/dead-letters/{DLQ}/0/1"))
    assert status == 303 and len(site.requests.produced) == 1


def test_a_redrive_whose_audit_record_is_not_acknowledged_is_not_produced(site: Console) -> None:
    async def scenario(client: Client) -> int:
        await sign_in(client, "op")
        token = csrf_of(await (await client.get(f"/dead-letters/{DLQ}")).text())
        site.trail.down = True
        form = {"csrf_token": token, "note": "fixed"}
        return (await client.post(f"/dead-letters/{DLQ}/0/1", data=form, allow_redirects=False)).status

    assert site.run(scenario) == 503 and not site.requests.produced


def test_a_redrive_without_the_csrf_token_is_refused(site: Console) -> None:
    async def scenario(client: Client) -> None:
        await sign_in(client, "op")
        for token in (None, "forged"):
            form = {"note": "fixed"} | ({} if token is None else {"csrf_token": token})
            response = await client.post(f"/dead-letters/{DLQ}/0/1", data=form, allow_redirects=False)
            assert response.status == 403

    site.run(scenario)
    assert not site.requests.produced
    assert [a.action for a in site.trail.records if a.outcome == "refused"] == ["csrf-refused"] * 2


def test_a_clinician_gets_403_on_the_dead_letter_pages(site: Console) -> None:
    async def scenario(client: Client) -> None:
        await sign_in(client, "dr")
        for path in ("/dead-letters", f"/dead-letters/{DLQ}", f"/dead-letters/{DLQ}/0/1"):
            response = await client.get(path, allow_redirects=False)
            assert response.status == 403 and "SchemaDecodeError" not in await response.text()
        token = csrf_of(await (await client.get("/")).text())
        form = {"csrf_token": token, "note": "fixed"}
        assert (await client.post(f"/dead-letters/{DLQ}/0/1", data=form, allow_redirects=False)).status == 403
        assert 'href="/dead-letters"' not in await (await client.get("/")).text()

    site.run(scenario)
    assert not site.requests.produced
    assert len([a for a in site.trail.records if a.action == "access-denied"]) == 4


def test_unknown_topics_and_records_are_404_and_an_unreadable_topic_503(site: Console) -> None:
    assert site.run(_page(f"/dead-letters/{FHIR_UPDATES}"))[0] == 404, "not a dead-letter topic"
    assert site.run(_page(f"/dead-letters/{DLQ}/0/99"))[0] == 404
    site.dead_letters.down = True
    status, html = site.run(_page("/dead-letters"))
    assert status == 503 and "could not be read from Kafka" in html


@pytest.mark.parametrize(
    ("path", "status"),
    [
        (f"/dead-letters/{DLQ}?partition=²", 400),  # a digit to str.isdigit, none to int
        (f"/dead-letters/{DLQ}?before=²", 400),
        (f"/dead-letters/{DLQ}?partition=-1", 400),
        (f"/dead-letters/{DLQ}?partition=2147483648", 400),  # beyond Kafka's int32
        (f"/dead-letters/{DLQ}?before=9223372036854775808", 400),  # beyond Kafka's int64
        (f"/dead-letters/{DLQ}?before=" + "9" * 5000, 400),
        (f"/dead-letters/{DLQ}/0/" + "9" * 5000, 404),  # more digits than int() reads
        (f"/dead-letters/{DLQ}/2147483648/0", 404),
        (f"/dead-letters/{DLQ}/²/0", 404),
        (f"/dead-letters/{DLQ}/0/9223372036854775807", 404),
    ],
)
def test_a_partition_or_offset_kafka_cannot_take_is_a_4xx_never_a_500(
    site: Console, path: str, status: int
) -> None:
    assert site.run(_page(path))[0] == status


def test_a_redrive_of_coordinates_kafka_cannot_take_is_a_404(site: Console) -> None:
    async def scenario(client: Client) -> int:
        await sign_in(client, "op")
        form = {"csrf_token": csrf_of(await (await client.get("/")).text()), "note": "fixed"}
        return (await client.post(f"/dead-letters/{DLQ}/0/" + "9" * 5000, data=form)).status

    assert site.run(scenario) == 404
    assert not site.requests.produced and [a.action for a in site.trail.records] == ["sign-in"]


def test_preview_shows_text_as_text_and_other_bytes_as_hex_within_its_bound() -> None:
    assert (preview(None, 4).kind, preview(None, 4).cut) == ("none", False)
    text = preview("été!".encode(), 4)
    assert (text.kind, text.shown, text.size, text.cut) == ("text", "ét", 6, True)
    raw = preview(b"\xff\x00ab", 3)
    assert (raw.kind, raw.shown, raw.size, raw.cut) == ("hex", "ff 00 61", 4, True)


def _action(user: str, outcome: str = "ok", target: str = f"{DLQ}[0]@0") -> Any:
    from schemas.console import ConsoleAction

    return ConsoleAction(
        action_id=f"{user}-{outcome}", event_time=WRITTEN, user=user, role="operator", action="redrive",
        target=target, detail="{}", outcome=outcome,
    )  # fmt: skip


def test_a_dead_letter_is_redriven_when_some_persons_last_redrive_of_it_is_ok() -> None:
    assert set(asked(Action.REDRIVE, [_action("a"), _action("a", "refused")], {})) == set()
    later = [_action("a"), _action("a", "refused"), _action("b")]
    assert set(asked(Action.REDRIVE, later, {})) == {f"{DLQ}[0]@0"}
    assert set(asked(Action.REDRIVE, [_action("a", "refused"), _action("a")], {})) == {f"{DLQ}[0]@0"}


def test_dead_letters_are_the_decode_steps() -> None:
    letter = dead_letter(0).letter
    assert isinstance(letter, DeadLetter) and letter.stage.value == "decode" and letter.key == b"PT-TEST-010"


def _outcome(request_id: str, outcome: str, reason: str = "") -> ConsoleRequestOutcome:
    return ConsoleRequestOutcome(
        request_id=request_id, event_time=WRITTEN, user="op", action="redrive", target=f"{DLQ}[0]@1",
        topic=FHIR_UPDATES, partition=2 if outcome == "ok" else None, outcome=outcome, reason=reason,
    )  # fmt: skip


def test_the_page_shows_what_the_request_runtime_did_and_a_refused_redrive_may_be_asked_again(
    site: Console,
) -> None:
    [(status, _, _)] = site.run(_redrive(f"/dead-letters/{DLQ}/0/1"))
    [first] = [a for a in site.trail.records if a.action == "redrive"]
    site.trail.request_outcomes.append(_outcome(first.action_id, "refused", "its value is not a FhirUpdate"))
    _, page = site.run(_page(f"/dead-letters/{DLQ}/0/1"))
    assert "refused the re-drive op asked for" in page and "its value is not a FhirUpdate" in page
    assert 'name="note"' in page, "a refused re-drive may be asked for again"
    [(status, _, _)] = site.run(_redrive(f"/dead-letters/{DLQ}/0/1"))
    assert status == 303 and len(site.requests.produced) == 2
    second = site.requests.produced[1].request
    site.trail.request_outcomes.append(_outcome(second.request_id, "ok"))
    _, page = site.run(_page(f"/dead-letters/{DLQ}/0/1"))
    assert f"re-drove it to {FHIR_UPDATES}[2]" in page and 'name="note"' not in page
