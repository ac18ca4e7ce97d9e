"""The operator's memory explorer in a real browser (Debian's Chromium, headless, Playwright) against
``clingate console`` and a real ``clingate worker`` of one app id on the session broker.

What it shows: the worker's memory learns from live verdicts of an entity (three of the verifier's hard
fails and one of the Filter's) until the gate BLOCKs a candidate of it; an operator pastes that candidate's
id into the explorer and sees why (rule ``block``, the severity, the sources) and, through its link, the
signature's page (the severity decayed to now, a chart of the severity its decisions read over event time
with the trajectory's table below it, the four verdicts in its trajectory, the decision); a clinician
signed in gets 403 on the explorer; the operator pins the signature ALLOW with a reason, and the
next candidate the gate decides is ALLOWed by rule ``operator_pin`` with the operator's name and the pin's
id (the audit record's) in its provenance: the pin travels as a request the request runtime
(``clingate worker --role requests`` of the same app id) checks and publishes. Each action is on the audit
topic.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streams.console.memory import SEVERITY_COLOURS
from streams.testing.console import (
    add_user,
    audit_trail,
    chromium,
    console_env,
    request_runtime,
    rgb,
    running_console,
    sign_in,
)
from streams.testing.worker import COMPARISON_ENV, LiveGate

pytestmark = pytest.mark.integration


def test_an_operator_finds_why_a_candidate_was_blocked_and_pins_it_and_a_clinician_cannot_open_the_explorer(
    kafka_bootstrap: str,
    start_workers: Callable[..., Any],
    tmp_path: Path,
) -> None:
    chromium_of = chromium()
    app_id, _ = start_workers(1, **COMPARISON_ENV)
    with request_runtime(kafka_bootstrap, app_id, tmp_path / "requests"):
        run = uuid.uuid4().hex[:8]
        operator, clinician = f"ops-{run}", f"dr-{run}"
        env = {**console_env(kafka_bootstrap, tmp_path / "users.json"), "CLINGATE_APP_ID": app_id}
        add_user(env, operator, "operator")
        add_user(env, clinician, "clinician")
        gate = LiveGate(kafka_bootstrap, f"Fever-{run}", f"p-{run}")
        sig = f"fever-{run}"
        try:
            for source in ("verifier_mmed", "rule_based", "verifier_mmed", "verifier_mmed"):
                gate.verdict("hard_fail", source)
            blocked = gate.until(lambda d: d.decision.value == "BLOCK")[-1]
            assert (blocked.rule, blocked.signature) == ("block", sig)

            with running_console(env, tmp_path / "console.log") as url, chromium_of as browser:
                page = browser.new_context().new_page()
                assert sign_in(page, url, operator, "/memory").status == 200
                page.fill("input[name=candidate]", blocked.candidate_id)
                with page.expect_navigation():
                    page.click("button[name=find-candidate]")
                why = page.locator("p.why").inner_text()
                assert why.startswith("BLOCK by rule block: its signature's severity was ")
                assert "verifier, rule_based" in why
                assert page.locator("dd.rule").inner_text() == "block"
                page.screenshot(path=str(tmp_path / "candidate.png"), full_page=True)

                page.click("a.signature")
                assert page.locator("dd.count").inner_text() == "4"
                severity = page.locator("div.severity-chart svg .series > path").first
                path = severity.get_attribute("d") or ""
                xs = [float(x) for x in re.findall(r"[ML] (-?[\d.]+) ", path)]
                assert xs and xs == sorted(xs), "in event-time order"
                stroke = severity.evaluate("path => getComputedStyle(path).stroke")
                assert stroke == rgb(SEVERITY_COLOURS["severity"]), "its colour under the page's CSP"
                chart_box = page.locator("div.severity-chart svg").bounding_box()
                table_box = page.locator("table.trajectory").bounding_box()
                assert chart_box and table_box and chart_box["height"] > 100
                assert chart_box["y"] + chart_box["height"] <= table_box["y"], (
                    "the table stays below the chart"
                )
                assert page.locator("table.trajectory tr[data-kind=verdict]").count() == 4
                assert page.locator(f"tr[data-candidate='{blocked.candidate_id}']").count() == 1
                page.select_option("select[name=action]", "ALLOW")
                page.fill("input[name=reason]", "benign on this ward")
                with page.expect_navigation() as navigation:
                    page.click("button[name=pin]")
                assert navigation.value.status == 200 and "Pin ALLOW recorded." in page.content()
                page.screenshot(path=str(tmp_path / "signature.png"), full_page=True)

                other = browser.new_context().new_page()
                assert sign_in(other, url, clinician, "/").status == 200
                refused = other.goto(url + "/memory")
                assert refused is not None and refused.status == 403
                assert "not for the clinician role" in other.content()

            *_, pinned = gate.until(lambda d: d.rule == "operator_pin")
        finally:
            gate.close()

    records = audit_trail(kafka_bootstrap, {operator, clinician})
    [pin] = [a for a in records[operator] if a.action == "pin"]
    assert (pin.target, pin.outcome) == (f"ner|{sig}", "ok")
    assert (pinned.decision.value, pinned.signature) == ("ALLOW", sig)
    assert pinned.provenance[:3] == ("operator_pin", f"pin_id={pin.action_id}", f"pinned_by={operator}")
    assert "pin_reason=benign on this ward" in pinned.provenance
    assert [(a.action, a.target, a.outcome) for a in records[clinician]] == [
        ("sign-in", "/login", "ok"), ("access-denied", "/memory", "refused"),
    ]  # fmt: skip
