"""The operator's dead letters and the clinician's agent in a real browser: Debian's Chromium, headless,
driven by Playwright, against ``clingate console`` as the command line runs it on the session broker.

Real parts: the broker; ``clingate agent worker`` as the command line runs it (its group started at the
end of the requests topic), answering from the local OpenAI-compatible server in its own process with
scripted answers (``clingate llm serve --backend test --agent-script``); the request runtime
(``clingate worker --role requests``); users made by ``clingate console users add``; ``clingate console
--port 0``; Chromium.

What it shows:

* **Dead letters.** A record that is not an ``AgentRequest`` (its text a script tag) published on
  ``clingate.agent.requests`` is dead-lettered by the agent worker's decode step. An operator opens the
  dead-letter topics, the agent requests' one, and sees the record with its stage, error type and
  original coordinates, its content escaped (no script runs: a dialog would fail the test); on its page
  they ask for its re-drive with a note. The ``redrive`` record is on the audit topic with the note, the
  page says who asked, and the request runtime refuses the request, since the record is still not an
  ``AgentRequest`` (it would only be dead-lettered again): its outcome says so and names the audit
  record, and nothing is written to ``clingate.agent.requests``. (A re-drive carried out, with its
  headers, is in ``tests/integration/test_security_acls.py``.) A clinician gets 403 on the dead-letter
  pages.
* **The agent.** A clinician asks "Check FDA warnings for dofetilide" (the request runtime publishes the
  question the console asked for); the turn page reloads itself until the worker answered, then shows
  the scripted answer, the path, each node's decision in order and the ``check_drug_safety`` call; the
  ``ask`` record is on the audit topic.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Message, Producer

from schemas.common import DeadLetter
from schemas.console import ConsoleRequestOutcome
from schemas.wire import make_serde
from streams.local.process import SOURCE_ROOT, ProcessHandle, eventually, python_module
from streams.replay.kafka import commit_end_offsets
from streams.runtime.kafka_clients import producer_config, read_to_end, reader
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import Settings
from streams.testing.agent_session import demo_questions
from streams.testing.console import (
    add_user,
    audit_trail,
    chromium,
    console_env,
    request_runtime,
    running_console,
    sign_in,
)
from streams.testing.llm_server import ServerProcess
from topics.admin import ensure_topics
from topics.catalog import AGENT_REQUESTS, CONSOLE_REQUEST_OUTCOMES, build_catalog, dlq_name

pytestmark = pytest.mark.integration

QUESTION = next(q for q in demo_questions() if q.query == "Check FDA warnings for dofetilide")
DLQ = dlq_name(AGENT_REQUESTS)


@dataclass(frozen=True)
class Site:
    """The console and the agent worker on the session broker, and the console's users."""

    url: str
    operator: str
    clinician: str


@pytest.fixture(scope="module")
def site(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The scripted model server, an agent worker and a console with an operator and a clinician."""
    directory = tmp_path_factory.mktemp("console-operations")
    ensure_topics(admin_client(kafka_bootstrap), build_catalog(Settings().topic_partitions))
    run = uuid.uuid4().hex[:8]
    group = f"clingate-console-it-{run}-agent"
    commit_end_offsets(kafka_bootstrap, group, [AGENT_REQUESTS])
    script = directory / "script.json"
    script.write_text(json.dumps({QUESTION.query: QUESTION.answers}), encoding="utf-8")
    server = ServerProcess.start("test", args=["--agent-script", str(script)])
    agent_env = {
        **os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "CLINGATE_APP_ID": f"clingate-it-{run}",
        "CLINGATE_AGENT_GROUP_ID": group, "CLINGATE_LLM_URL": server.base_url,
        "CLINGATE_LLM_MODEL": server.model, "CLINGATE_CONSUMER_SESSION_TIMEOUT_S": "6",
    }  # fmt: skip
    argv = python_module("streams.cli", "agent", "worker", "--metrics-port", "0")
    agent = ProcessHandle("agent", argv, env=agent_env, cwd=SOURCE_ROOT, log=directory / "agent.log").start()
    try:
        env = console_env(kafka_bootstrap, directory / "users.json")
        operator, clinician = f"op-{run}", f"dr-{run}"
        add_user(env, operator, "operator")
        add_user(env, clinician, "clinician")
        with (
            request_runtime(kafka_bootstrap, agent_env["CLINGATE_APP_ID"], directory / "requests"),
            running_console(env, directory / "console.log") as url,
        ):
            yield Site(url, operator, clinician)
    finally:
        agent.stop(grace_s=30)
        server.stop()


def _records(bootstrap: str, topic: str, key: bytes) -> list[Message]:
    """The records of ``topic`` keyed ``key``, each partition's in order."""
    consumer = reader(bootstrap, "console-test-records")
    try:
        return [m for m in read_to_end(consumer, {topic: {}}, 30) if m.key() == key]
    finally:
        consumer.close()


def test_an_operator_redrives_a_dead_letter_the_agent_worker_made_and_a_clinician_is_refused(
    kafka_bootstrap: str, site: Site, tmp_path: Path
) -> None:
    serde = make_serde(None)
    key = f"conv-{uuid.uuid4().hex[:8]}".encode()
    value = b"<script>alert(1)</script> is not an AgentRequest " + key
    producer = Producer(producer_config(kafka_bootstrap))
    producer.produce(AGENT_REQUESTS, key=key, value=value, headers=[("origin", b"browser-test")])
    assert producer.flush(30) == 0
    [dead] = eventually("the worker's dead letter", lambda: _records(kafka_bootstrap, DLQ, key), poll_s=0.5)
    letter = serde.decode(dead.value(), DeadLetter, topic=DLQ)
    coordinates = f"{DLQ}[{dead.partition()}]@{dead.offset()}"
    original = f"{AGENT_REQUESTS}[{letter.partition}]@{letter.offset}"

    with chromium() as browser:
        page = browser.new_context().new_page()
        page.on("dialog", lambda dialog: pytest.fail(f"a script ran: {dialog.message}"))
        assert sign_in(page, site.url, site.operator, "/dead-letters").status == 200
        row = page.locator(f"tr[data-topic='{DLQ}']")
        assert int(row.get_attribute("data-records") or 0) >= 1
        page.click(f"a[href='/dead-letters/{DLQ}']")
        listed = page.locator(f"tr[data-offset='{dead.offset()}']")
        text = listed.inner_text()
        assert "decode" in text and "SchemaDecodeError" in text and original in text
        assert "<script>alert(1)</script>" in text, "the value shown as text, not run"
        page.click(f"a[href='/dead-letters/{DLQ}/{dead.partition()}/{dead.offset()}']")
        assert original in page.locator("dd.original").inner_text()
        assert "origin" in page.locator("table.headers").inner_text()
        page.fill("textarea[name=note]", "the requests' producer fixed")
        with page.expect_navigation() as navigation:
            page.click("button[name=redrive]")
        assert navigation.value.status == 200
        assert f"by {site.operator}" in page.locator("p.redriven").inner_text()
        page.screenshot(path=str(tmp_path / "dead-letter.png"), full_page=True)

        other = browser.new_context().new_page()
        assert sign_in(other, site.url, site.clinician, "/").status == 200
        refused = other.goto(site.url + "/dead-letters")
        assert refused is not None and refused.status == 403 and DLQ not in other.content()

    [action] = [
        a for a in audit_trail(kafka_bootstrap, {site.operator})[site.operator] if a.action == "redrive"
    ]
    assert (action.target, action.outcome) == (coordinates, "ok")
    assert json.loads(action.detail)["note"] == "the requests' producer fixed"
    [outcome] = eventually(
        "the request runtime's outcome",
        lambda: [
            o for m in _records(kafka_bootstrap, CONSOLE_REQUEST_OUTCOMES, coordinates.encode())
            if (o := serde.decode(m.value(), ConsoleRequestOutcome, topic=CONSOLE_REQUEST_OUTCOMES))
            .request_id == action.action_id
        ],
        poll_s=0.5,
    )  # fmt: skip
    assert (outcome.outcome, outcome.user, outcome.topic) == ("refused", site.operator, AGENT_REQUESTS)
    assert "not a clingate.agent.AgentRequest" in outcome.reason
    assert [m.offset() for m in _records(kafka_bootstrap, AGENT_REQUESTS, key)] == [letter.offset]


def test_a_clinician_asks_the_agent_and_sees_the_answer_the_path_and_each_decision(
    kafka_bootstrap: str, site: Site, tmp_path: Path
) -> None:
    with chromium() as browser:
        page = browser.new_context().new_page()
        assert sign_in(page, site.url, site.clinician, "/agent").status == 200
        page.fill("textarea[name=query]", QUESTION.query)
        with page.expect_navigation() as navigation:
            page.click("button[name=ask]")
        assert navigation.value.status == 200 and "/agent/turn/" in page.url
        turn = page.url.rsplit("/", 1)[1]
        page.wait_for_selector("dd.answer", timeout=120_000)  # the page reloads itself until answered
        assert page.locator("dd.answer").inner_text().strip() == QUESTION.answers[-1]
        path = page.locator("dd.path").inner_text()
        assert path.startswith("INPUT_ASSEMBLY → INTENT_CLASSIFY → TOOL_SELECT") and path.endswith(
            "SYNTHESIZE"
        )
        rows = page.locator("table.decisions tbody tr")
        nodes = [rows.nth(i).get_attribute("data-node") for i in range(rows.count())]
        steps = [rows.nth(i).get_attribute("data-step") for i in range(rows.count())]
        assert steps == [str(i) for i in range(len(steps))] and set(path.split(" → ")) <= set(nodes)
        decisions = [rows.nth(i).locator("td.node-decision").inner_text() for i in range(rows.count())]
        assert all(decision.strip() for decision in decisions)
        call = page.locator("tr[data-tool='check_drug_safety']").inner_text()
        assert "dofetilide" in call and "success" in call
        assert page.locator("dd.llm-calls").inner_text() == "5"
        page.screenshot(path=str(tmp_path / "agent-turn.png"), full_page=True)
        page.goto(site.url + "/agent")
        assert QUESTION.query in page.locator(f"tr[data-turn='{turn}']").inner_text()

    asked = [
        (a.action, a.target, a.outcome)
        for a in audit_trail(kafka_bootstrap, {site.clinician})[site.clinician]
    ]
    assert ("ask", turn, "ok") in asked
