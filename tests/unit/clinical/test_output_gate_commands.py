"""``clingate clinical gate-draft`` and ``clingate clinical route`` print the output-gates contract's JSON,
byte for byte the same for the same input, and refuse what the contract does not describe (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from streams import cli

DRAFT = (
    "## HOLD DIGOXIN\n\nDiscontinue warfarin if INR exceeds 4.0.\n"
    'Evidence: [CRG: digoxin label — "Toxicity is more likely with hypokalemia. ... Monitor electrolytes."]\n'
)
EVIDENCE = {"packets": [{"source": "digoxin label", "text": "Toxicity is more likely with hypokalemia."}]}


def _run(*arguments: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli.app, ["clinical", *arguments])
    return result.exit_code, result.stdout, result.stderr


def test_gate_draft_prints_the_contract_record_the_same_every_time(tmp_path: Path) -> None:
    (tmp_path / "draft.md").write_text(DRAFT, encoding="utf-8")
    (tmp_path / "evidence.json").write_text(json.dumps(EVIDENCE), encoding="utf-8")
    arguments = [
        "gate-draft",
        "--draft",
        str(tmp_path / "draft.md"),
        "--evidence",
        str(tmp_path / "evidence.json"),
    ]
    code, first, _ = _run(*arguments)
    assert code == 0
    assert _run(*arguments)[1] == first
    record = json.loads(first)
    assert record["lint"]["transforms"] == [
        {"rule": "hold-header", "before": "HOLD DIGOXIN", "after": "DIGOXIN HOLD CONSIDERATION"}
    ]
    assert record["citations"]["ellipsis_trimmed"] == 1 and record["restored"] is False
    (tmp_path / "gated.md").write_text(record["draft"], encoding="utf-8")
    again = json.loads(_run("gate-draft", "--draft", str(tmp_path / "gated.md"), "--evidence",
                            str(tmp_path / "evidence.json"))[1])  # fmt: skip
    assert again["draft"] == record["draft"]


def test_gate_draft_restores_the_previous_draft_of_a_shrunk_revision(tmp_path: Path) -> None:
    (tmp_path / "previous.md").write_text("The approved care plan. " * 100, encoding="utf-8")
    (tmp_path / "draft.md").write_text("I cannot do that.", encoding="utf-8")
    (tmp_path / "evidence.json").write_text('{"packets": []}', encoding="utf-8")
    code, out, _ = _run("gate-draft", "--draft", str(tmp_path / "draft.md"), "--evidence",
                        str(tmp_path / "evidence.json"), "--previous", str(tmp_path / "previous.md"),
                        "--revision", "1")  # fmt: skip
    assert code == 0
    record = json.loads(out)
    assert record["restored"] is True and record["draft"] == "The approved care plan. " * 100


def test_route_prints_the_contract_record(tmp_path: Path) -> None:
    audit = {"violations": ["Rule 4.3: parametric leakage in the dosing", "[PARSER WARNING] truncated"]}
    (tmp_path / "audit.json").write_text(json.dumps(audit), encoding="utf-8")
    code, out, _ = _run("route", "--audit", str(tmp_path / "audit.json"), "--revision", "0")
    assert code == 0
    record = json.loads(out)
    assert record["route"] == "CLL_REVISION" and record["blocking_count"] == 1
    assert [v["bucket"] for v in record["violations"]] == ["REVISION_REQUIRED", "PARSER_WARNING"]


def test_route_applies_the_cds_backstop_to_an_audit_that_lists_no_violation(tmp_path: Path) -> None:
    audit = {"violations": [], "cds_compliant": False}
    (tmp_path / "audit.json").write_text(json.dumps(audit), encoding="utf-8")
    code, out, _ = _run("route", "--audit", str(tmp_path / "audit.json"), "--revision", "1")
    assert code == 0
    record = json.loads(out)
    assert (record["route"], record["overrides"], record["violations"]) == (
        "CLL_REVISION",
        ["cds_backstop"],
        [],
    )


def test_an_audit_that_is_not_json_or_not_the_contract_is_refused(tmp_path: Path) -> None:
    (tmp_path / "audit.json").write_text("Verdict: MODIFICATION_REQUIRED", encoding="utf-8")
    code, _, err = _run("route", "--audit", str(tmp_path / "audit.json"), "--revision", "0")
    assert code == 2 and "is not JSON" in err
    (tmp_path / "audit.json").write_text('{"violations": "Rule 4.3"}', encoding="utf-8")
    code, _, err = _run("route", "--audit", str(tmp_path / "audit.json"), "--revision", "0")
    assert code == 2 and '"violations" list' in err


def test_evidence_without_packets_is_refused(tmp_path: Path) -> None:
    (tmp_path / "draft.md").write_text("text", encoding="utf-8")
    (tmp_path / "evidence.json").write_text('{"packets": [{"source": "x"}]}', encoding="utf-8")
    code, _, err = _run("gate-draft", "--draft", str(tmp_path / "draft.md"), "--evidence",
                        str(tmp_path / "evidence.json"))  # fmt: skip
    assert code == 2 and 'packet 0 must have string "source" and "text"' in err
