"""The operator's memory explorer and pins through HTTP (aiohttp's test client; the memory filled by the real
engine, the topics and the pin publisher faked): the signature page decayed to the moment of viewing with
its trajectory and decisions, the candidate page answering why, the lookup, the pin recorded on the audit
trail before it is published, CSRF, the reason required, the role guard and 503s."""

from __future__ import annotations

import html as html_module
import json
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from processors.dbpm import format_time, parse_event
from processors.dbpm.memory import Memory
from schemas.console import Role
from schemas.dbpm import Candidate, GateDecision, PinAction, Verdict
from schemas.dbpm import Propagation as PropagationRecord
from streams.console import memory
from streams.console.memory import why
from streams.worker.gate import decision_record
from streams.worker.wire import contract_event, pin_record

from .conftest import PASSWORD, Console, csrf_of, sign_in

Client = TestClient[Any, Any]
DAY = timedelta(days=1)
PIN = {"task": "ner", "signature": "fever", "action": "BLOCK", "reason": "r"}
START = datetime.now(UTC).replace(microsecond=0) - 10 * DAY
"""The memory learns ten days before the test runs, so the decay to the moment of viewing shows."""


def _apply(site: Console, obj: dict[str, Any]) -> list[Any]:
    event = parse_event(obj)
    with site.memory.store.transaction() as txn:
        _, out = site.memory.engine.process(txn, event, event.time)
    return out


def _verdict(site: Console, entity: str, at: datetime, source: str = "verifier_mmed", n: int = 0) -> None:
    verdict = Verdict.model_validate({
        "ts": at, "task": "ner", "verdict": "hard_fail", "source": source, "patient_id": "p1",
        "candidate_id": f"v-{entity}-{n}", "payload": {"entity": entity, "category": "Symptoms"},
    })  # fmt: skip
    site.memory.events.append(verdict)
    _apply(site, {"kind": "verdict", **verdict.model_dump(mode="json", exclude_none=True)})


def _gate(site: Console, entity: str, at: datetime, candidate_id: str) -> GateDecision:
    candidate = Candidate.model_validate({
        "ts": at, "task": "ner", "patient_id": "p1", "candidate_id": candidate_id,
        "payload": {"entity": entity, "category": "Symptoms"},
    })  # fmt: skip
    [ruling] = _apply(site, {"kind": "gate", **candidate.model_dump(mode="json", exclude_none=True)})
    decision = decision_record(candidate, ruling, False, site.dbpm.fingerprint())
    site.memory.decisions.append(decision)
    return decision


def _pin(site: Console, entity: str, action: PinAction, at: datetime) -> None:
    record = pin_record("ner", entity, action, "ops", "known verifier false positive", "pin-1", at)
    site.memory.events.append(record)
    _apply(site, {"kind": "verdict", **record.model_dump(mode="json", exclude_none=True)})


@pytest.fixture
def site(console: Console) -> Console:
    """An operator ``ops``, an SME ``sam``; "fever" learnt from four hard fails (one of them the Filter's),
    within four hours ten days ago, its last two candidates BLOCKed, with propagated evidence after them."""
    console.users.add("ops", Role.OPERATOR, PASSWORD)
    console.users.add("sam", Role.SME, PASSWORD)
    hour = timedelta(hours=1)
    _verdict(console, "fever", START, n=1)
    _gate(console, "fever", START + hour / 2, "c-1")
    _verdict(console, "fever", START + 2 * hour, source="rule_based", n=2)
    _verdict(console, "fever", START + 3 * hour, n=3)
    _gate(console, "fever", START + 3 * hour + hour / 2, "c-2")
    _verdict(console, "fever", START + 4 * hour, n=4)
    _gate(console, "fever", START + 4 * hour + hour / 2, "c-3")
    propagated = {
        "ts": START + 5 * DAY, "task": "ner", "signature": "fever", "weight": 0.4, "source": "cross_task_re",
        "origin_task": "re", "origin_signature": "A|B|C", "patient_id": "p2", "origin_partition": 0,
        "origin_offset": 7, "origin_index": 0,
    }  # fmt: skip
    console.memory.events.append(PropagationRecord.model_validate(propagated))
    return console


async def _page(client: Client, path: str, user: str = "ops", **params: str) -> tuple[int, str]:
    await sign_in(client, user)
    response = await client.get(path, params=params, allow_redirects=False)
    return response.status, html_module.unescape(await response.text())


def test_the_signature_page_shows_the_severity_decayed_to_now_the_trajectory_and_the_decisions(
    site: Console,
) -> None:
    before = datetime.now(UTC).timestamp()
    status, html = site.run(lambda c: _page(c, "/memory/signature", task="ner", signature=" Fever "))
    after = datetime.now(UTC).timestamp()
    assert status == 200
    mem = Memory(site.memory.store.transaction(), site.dbpm)
    pattern = mem.pattern("ner", "fever")
    assert pattern is not None and pattern.count == 4
    shown = float(re.search(r'data-severity="([0-9.]+)"', html).group(1))  # type: ignore[union-attr]
    # Decayed to the page's own moment, somewhere within the request (shown to 6 decimals).
    decayed = (mem.severity("ner", pattern, after), mem.severity("ner", pattern, before))
    assert decayed[0] - 1e-6 <= shown <= decayed[1] + 1e-6
    assert shown < pattern.severity, "decayed since the last verdict, ten days before the viewing"
    assert "verifier, rule_based" in html, "the sources the record says built it"
    rows = re.findall(r'<tr data-kind="(\w+)">(.*?)</tr>', html, flags=re.S)
    assert [kind for kind, _ in rows] == ["verdict", "verdict", "verdict", "verdict", "propagation"]
    cells = [re.findall(r"<td>(.*?)</td>", row, flags=re.S) for _, row in rows]
    assert [(c[2], c[3], c[4]) for c in cells] == [
        ("verifier_mmed", "hard_fail", str(site.dbpm.weight("verifier_mmed"))),
        ("rule_based", "hard_fail", str(site.dbpm.weight("rule_based"))),
        ("verifier_mmed", "hard_fail", str(site.dbpm.weight("verifier_mmed"))),
        ("verifier_mmed", "hard_fail", str(site.dbpm.weight("verifier_mmed"))),
        ("cross_task_re", "soft_downgrade", "0.4"),
    ]
    decisions = {d.candidate_id: d for d in site.memory.decisions}
    seen = [re.search(r'candidate/([\w-]+)">([0-9.]+|none)</a> \((\w+)\)', c[5]) for c in cells]
    assert [m.groups() if m else None for m in seen] == [
        ("c-1", f"{decisions['c-1'].severity:.4f}", decisions["c-1"].decision.value), None,
        ("c-2", f"{decisions['c-2'].severity:.4f}", decisions["c-2"].decision.value),
        ("c-3", f"{decisions['c-3'].severity:.4f}", "BLOCK"), None,
    ]  # fmt: skip
    assert re.findall(r'<tr data-candidate="([\w-]+)">', html) == ["c-3", "c-2", "c-1"], "newest first"
    assert "3 decision(s)" in html


def test_the_signature_page_charts_the_severity_each_decision_read_over_time_above_the_trajectory(
    site: Console,
) -> None:
    status, html = site.run(lambda c: _page(c, "/memory/signature", task="ner", signature="fever"))
    assert status == 200
    chart = re.search(r'<div class="chart severity-chart">.*?(<svg .*?</svg>)', html, flags=re.S)
    assert chart is not None and html.index("severity-chart") < html.index('class="board trajectory"')
    svg = ET.fromstring(chart.group(1))
    assert " style=" not in chart.group(1) and "<style" not in chart.group(1), "the page's CSP refuses both"
    lines = [
        group.find("{http://www.w3.org/2000/svg}path")
        for group in svg.iter()
        if group.get("class") == "series"
    ]
    assert [e.attrib["stroke"] for e in lines if e is not None] == list(memory.SEVERITY_COLOURS.values())
    points, block = (_points(e.attrib["d"]) for e in lines[:2] if e is not None)
    xs, ys = [x for x, _ in points], [y for _, y in points]
    assert len(points) == 3 and xs == sorted(xs), "one point per decision (c-1, c-2, c-3), in time order"
    severities = [d.severity for d in sorted(site.memory.decisions, key=lambda d: d.ts)]
    # a higher severity is drawn higher up (smaller y)
    assert sorted(range(3), key=lambda i: ys[i]) == sorted(range(3), key=lambda i: -(severities[i] or 0.0))
    assert [x for x, _ in block] == [xs[0], xs[-1]] and block[0][1] == block[1][1], "the threshold's span"
    labels = [t.text for t in svg.iter() if t.tag.endswith("text")]
    assert f"BLOCK threshold {site.dbpm.tasks['ner'].block_threshold}" in labels


def _points(path: str) -> list[tuple[float, float]]:
    """The points of an SVG line's path (``M x y L x y ...``), in the order it joins them."""
    numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", path)]
    return list(zip(numbers[::2], numbers[1::2], strict=True))


def test_a_signature_no_decision_read_a_severity_of_shows_a_chart_that_says_so(site: Console) -> None:
    site.memory.decisions.clear()
    status, html = site.run(lambda c: _page(c, "/memory/signature", task="ner", signature="fever"))
    assert status == 200 and re.search(r'severity-chart">.*?>no data</text>', html, flags=re.S)


def test_a_long_trajectory_lists_its_latest_events_and_counts_them_all(
    site: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory, "TRAJECTORY_SHOWN", 2)
    status, html = site.run(lambda c: _page(c, "/memory/signature", task="ner", signature="fever"))
    assert status == 200 and "5 event(s) on the topics; the latest 2 are listed." in html
    assert re.findall(r'<tr data-kind="(\w+)">', html) == ["verdict", "propagation"]


def test_the_candidate_page_says_why_it_was_blocked_and_links_its_signature(site: Console) -> None:
    status, html = site.run(lambda c: _page(c, "/memory/candidate/c-3"))
    assert status == 200
    decision = next(d for d in site.memory.decisions if d.candidate_id == "c-3")
    line = re.search(r'<p class="why" data-decision="BLOCK">(.*?)</p>', html, flags=re.S).group(1)  # type: ignore[union-attr]
    assert line == why(decision, site.dbpm)
    assert line.startswith("BLOCK by rule block: its signature's severity was ")
    assert (
        f"{decision.severity:.3f}" in line
        and f"above the block threshold {site.dbpm.tasks['ner'].block_threshold}" in line
    )
    assert "verifier, rule_based" in line
    assert 'href="/memory/signature?task=ner&signature=fever"' in html
    assert "<dt>entity</dt><dd>fever</dd>" in html
    assert site.run(lambda c: _page(c, "/memory/candidate/nobody"))[0] == 404


def test_the_lookup_goes_to_the_signature_or_the_candidate_and_refuses_what_names_nothing(
    site: Console,
) -> None:
    async def scenario(client: Client) -> list[tuple[int, str]]:
        await sign_in(client, "ops")
        out = []
        for params in (
            {"candidate": " c-3 "},
            {"task": "ner", "signature": " FEVER "},
            {"task": "re", "signature": "treatment|treats"},
            {"task": "summary", "signature": "x"},
        ):
            response = await client.get("/memory", params=params, allow_redirects=False)
            out.append((response.status, response.headers.get("Location", await response.text())))
        return out

    candidate, signature, relation, task = site.run(scenario)
    assert candidate == (302, "/memory/candidate/c-3")
    assert signature == (302, "/memory/signature?task=ner&signature=fever")
    assert relation[0] == 400 and "HEAD_TYPE|RELATION|TAIL_TYPE" in relation[1]
    assert task[0] == 400 and "the task is one of ner, re, qa" in task[1]


def _post_pin(form: dict[str, str], user: str = "ops", token: str | None = "page") -> Any:
    async def scenario(client: Client) -> tuple[int, str]:
        await sign_in(client, user)
        page = await client.get("/memory/signature", params={"task": "ner", "signature": "fever"})
        data = dict(form)
        if token == "page":
            data["csrf_token"] = csrf_of(await page.text())
        elif token is not None:
            data["csrf_token"] = token
        response = await client.post("/memory/pin", data=data, allow_redirects=False)
        return response.status, response.headers.get("Location", await response.text())

    return scenario


def test_a_pin_is_audited_then_published_as_the_operators_pin_of_the_signature(site: Console) -> None:
    form = {"task": "ner", "signature": "Fever", "action": "ALLOW", "reason": " benign in this ward "}
    status, location = site.run(_post_pin(form))
    assert (status, location) == (303, "/memory/signature?task=ner&signature=fever&pinned=ALLOW")
    [(pin, trail)] = site.pins.published
    [audited] = [a for a in trail if a.action == "pin"]
    assert (audited.user, audited.role, audited.target, audited.outcome) == (
        "ops",
        "operator",
        "ner|fever",
        "ok",
    )
    assert json.loads(audited.detail) == {"pin": "ALLOW", "reason": "benign in this ward"}
    assert pin.pin is not None and pin.source == "operator_pin"
    assert (pin.pin.action, pin.pin.operator, pin.pin.reason, pin.pin.pin_id) == (
        PinAction.ALLOW, "ops", "benign in this ward", audited.action_id,
    )  # fmt: skip
    event = contract_event(pin)
    assert (event.task, event.signature, event.action) == ("ner", "fever", "ALLOW")  # type: ignore[union-attr]
    assert format_time(pin.ts.timestamp()) == format_time(audited.event_time.timestamp())


def test_a_pinned_signature_shows_its_pin_and_its_candidates_say_the_pin_decided_them(site: Console) -> None:
    _pin(site, "fever", PinAction.ALLOW, START + 6 * DAY)
    _gate(site, "fever", START + 7 * DAY, "c-4")
    status, html = site.run(lambda c: _page(c, "/memory/signature", task="ner", signature="fever"))
    assert status == 200
    assert "ALLOW by ops: known verifier false positive (pin pin-1)" in html
    assert re.findall(r'<tr data-kind="(\w+)">', html)[-2:] == ["propagation", "pin"]
    _, candidate = site.run(lambda c: _page(c, "/memory/candidate/c-4"))
    assert "ALLOW by rule operator_pin: operator ops pinned ner signature 'fever' to ALLOW at " in candidate
    assert "because “known verifier false positive” (pin pin-1)" in candidate


@pytest.mark.parametrize(
    "form",
    [
        {"task": "ner", "signature": "fever", "action": "BLOCK", "reason": "   "},
        {"task": "ner", "signature": "fever", "action": "BLOCK"},
        {"task": "ner", "signature": "fever", "action": "MAYBE", "reason": "r"},
        {"task": "ner", "signature": "fever", "action": "BLOCK", "reason": "x" * 501},
    ],
)
def test_a_pin_without_a_reason_or_an_action_is_refused_and_nothing_is_recorded(
    site: Console, form: dict[str, str]
) -> None:
    status, body = site.run(_post_pin(form))
    assert status == 400 and "give a reason" in body
    assert not site.pins.published and not [a for a in site.trail.records if a.action == "pin"]


def test_a_qa_error_class_signature_shows_no_pin_form_and_its_pin_is_refused(site: Console) -> None:
    sig = "qa::medication|dose_error"
    status, html = site.run(lambda c: _page(c, "/memory/signature", task="qa", signature=sig))
    assert status == 200 and "cannot be pinned" in html and 'name="pin"' not in html
    form = {"task": "qa", "signature": sig, "action": "BLOCK", "reason": "r"}
    status, body = site.run(_post_pin(form))
    assert status == 400 and "Not pinned: a QA error-class signature" in html_module.unescape(body)
    assert not site.pins.published and not [a for a in site.trail.records if a.action == "pin"]


def test_a_pin_without_the_csrf_token_is_refused(site: Console) -> None:
    form = {"task": "ner", "signature": "fever", "action": "BLOCK", "reason": "r"}
    for token in (None, "forged"):
        assert site.run(_post_pin(form, token=token))[0] == 403
    assert not site.pins.published
    assert [a.action for a in site.trail.records if a.outcome == "refused"] == ["csrf-refused"] * 2


@pytest.mark.parametrize("user", ["dr", "ph", "sam"])
def test_the_other_roles_get_403_on_every_memory_page_and_the_pin(site: Console, user: str) -> None:
    async def scenario(client: Client) -> None:
        await sign_in(client, user)
        for path in ("/memory", "/memory/signature?task=ner&signature=fever", "/memory/candidate/c-3"):
            response = await client.get(path, allow_redirects=False)
            assert response.status == 403 and "fever" not in await response.text()
        home = await (await client.get("/")).text()
        assert 'href="/memory"' not in home
        form = {
            "csrf_token": csrf_of(home),
            "task": "ner",
            "signature": "fever",
            "action": "ALLOW",
            "reason": "r",
        }
        assert (await client.post("/memory/pin", data=form, allow_redirects=False)).status == 403

    site.run(scenario)
    assert not site.pins.published
    assert len([a for a in site.trail.records if a.action == "access-denied"]) == 4


def test_the_operators_home_links_the_explorer(site: Console) -> None:
    status, html = site.run(lambda c: _page(c, "/"))
    assert status == 200 and 'href="/memory"' in html


def test_a_pin_kafka_does_not_acknowledge_is_a_503_and_audited_as_refused(site: Console) -> None:
    site.pins.down = True
    status, body = site.run(
        _post_pin({"task": "ner", "signature": "fever", "action": "BLOCK", "reason": "r"})
    )
    assert status == 503 and "so it was not done" in body
    assert [(a.action, a.outcome) for a in site.trail.records if a.action == "pin"] == [
        ("pin", "ok"), ("pin", "refused"),
    ]  # fmt: skip


def test_a_pin_the_audit_trail_does_not_take_is_not_published(site: Console) -> None:
    async def scenario(client: Client) -> int:
        await sign_in(client, "ops")
        page = await client.get("/memory/signature", params={"task": "ner", "signature": "fever"})
        site.trail.down = True
        form = {"csrf_token": csrf_of(await page.text()), "task": "ner", "signature": "fever",
                "action": "BLOCK", "reason": "r"}  # fmt: skip
        return (await client.post("/memory/pin", data=form, allow_redirects=False)).status

    assert site.run(scenario) == 503
    assert not site.pins.published


def test_the_pages_answer_503_when_the_topics_cannot_be_read(site: Console) -> None:
    site.memory.down = True
    assert site.run(lambda c: _page(c, "/memory/signature", task="ner", signature="fever"))[0] == 503
    assert site.run(lambda c: _page(c, "/memory/candidate/c-3"))[0] == 503
    assert site.run(lambda c: _page(c, "/memory"))[0] == 200, "the lookup form reads nothing"


def test_a_candidate_id_with_slashes_is_one_path_segment_from_the_lookup_and_the_signature_page(
    site: Console,
) -> None:
    hour = timedelta(hours=1)
    _gate(site, "fever", START + 6 * hour, "../../dead-letters")

    async def scenario(client: Client) -> tuple[str, list[str], int]:
        await sign_in(client, "ops")
        candidate = {"candidate": "../../dead-letters"}
        lookup = await client.get("/memory", params=candidate, allow_redirects=False)
        fever = {"task": "ner", "signature": "fever"}
        signature = await (await client.get("/memory/signature", params=fever)).text()
        links = re.findall(r'href="(/memory/candidate/[^"]*dead[^"]*)"', signature)
        return lookup.headers["Location"], links, (await client.get(links[0])).status

    location, links, status = site.run(scenario)
    assert location == "/memory/candidate/..%2F..%2Fdead-letters"
    assert set(links) == {location} and status == 200
