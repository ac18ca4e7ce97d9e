"""The draft gate (processors/drafts): content preservation, lint, citation fidelity, idempotence.

Cases from the PharmMesh supplement's activation records (ESC-025, ESC-028, ESC-029; Supplementary
Table 4) and the output-gates contract.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from processors.drafts import Evidence, gate_draft
from processors.drafts.citations import cut_at_ellipsis
from processors.drafts.rules import gate_rules

DIGOXIN = Evidence(
    "digoxin label",
    "Toxicity is more likely with hypokalemia. Check serum potassium regularly. Monitor electrolytes.",
)
WARFARIN = Evidence(
    "warfarin label",
    "Bleeding is the major risk of warfarin therapy. Warfarin raises bleeding risk in older adults. "
    "An INR above four increases the chance of major bleeding.",
)
PACKETS = [DIGOXIN, WARFARIN]


def test_a_refusal_shorter_than_half_the_approved_draft_is_rejected_and_the_draft_restored() -> None:
    approved = "## DIGOXIN HOLD CONSIDERATION\n" + "The care plan in full. " * 400
    refusal = "I cannot revise this plan as requested; the audit findings are unclear. " * 6
    result = gate_draft(refusal, PACKETS, previous=approved, revision=1)
    assert result.restored and result.draft == approved
    assert result.contract()["citations"]["checked"] == 0
    assert result.contract()["lint"] == {"transforms": [], "imperative_warnings": []}


def test_a_revision_of_half_the_previous_length_or_more_is_kept() -> None:
    previous = "x" * 100
    assert not gate_draft("y" * 50, [], previous=previous, revision=1).restored
    assert gate_draft("y" * 49, [], previous=previous, revision=1).restored
    assert not gate_draft("y" * 10, [], previous=previous, revision=0).restored, "revision 0 has no previous"


def test_an_all_caps_drug_header_becomes_advisory_and_other_headers_stay() -> None:
    draft = "## HOLD DIGOXIN\nSTOP WARFARIN:\n## Hold digoxin\nHOLD\n## DIGOXIN MUST BE HELD\n"
    result = gate_draft(draft, [])
    assert result.draft == (
        "## DIGOXIN HOLD CONSIDERATION\nWARFARIN DISCONTINUATION CONSIDERATION:\n## Hold digoxin\nHOLD\n"
        "## DIGOXIN MAY NEED TO BE HELD\n"
    )
    assert [t.rule for t in result.transforms] == ["hold-header", "stop-header", "modal-must-be"]
    assert result.transforms[0].before == "HOLD DIGOXIN"


def test_the_modal_rewrite_keeps_the_case_of_a_markdown_heading() -> None:
    result = gate_draft("### Digoxin MUST BE held\nWarfarin must be held.\n", [])
    assert result.draft == "### Digoxin MAY NEED TO BE held\nWarfarin must be held.\n"


def test_imperatives_are_warned_at_the_three_positions_and_never_change_the_draft() -> None:
    draft = (
        "Discontinue warfarin if INR exceeds 4.0 per protocol. Monitor potassium daily.\n"
        "Plan: hold furosemide tonight.\n- Administer potassium chloride.\n"
        "The team may stop it. Assess renal function.\n"
    )
    result = gate_draft(draft, [])
    assert result.draft == draft
    found = [(w.verb, w.position) for w in result.warnings]
    assert found == [("discontinue", "sentence_start"), ("hold", "post_colon"), ("administer", "post_bullet")]
    assert result.warnings[0].excerpt == "Discontinue warfarin if INR exceeds 4.0 ..."


def test_quoted_evidence_is_not_scanned_for_imperatives() -> None:
    draft = '[CRG: digoxin label — "Discontinue digoxin at the first sign of toxicity."]\n'
    assert gate_draft(draft, []).warnings == []


def test_lint_runs_on_revision_0_only() -> None:
    result = gate_draft("## HOLD DIGOXIN\nHold warfarin.\n", [], previous=None, revision=1)
    assert result.transforms == [] and result.warnings == []


def test_an_ellipsis_quote_is_trimmed_to_its_last_sentence() -> None:
    draft = '[CRG: digoxin label — "Toxicity is more likely with hypokalemia. Check ... electrolytes."]'
    result = gate_draft(draft, PACKETS)
    assert result.draft == '[CRG: digoxin label — "Toxicity is more likely with hypokalemia."]'
    assert (result.citations.ellipsis_trimmed, result.citations.checked) == (1, 1)


def test_an_ellipsis_with_no_sentence_end_before_it_is_not_cut() -> None:
    rules = gate_rules().citations
    assert cut_at_ellipsis("Toxicity is more … likely", rules) is None
    assert cut_at_ellipsis("Ends here...", rules) is None, "a trailing ellipsis is not mid-quote"
    assert cut_at_ellipsis("One. Two … three", rules) == "One."


def test_a_misattributed_quote_is_logged_not_blocked() -> None:
    draft = 'See [CRG: digoxin label — "Warfarin raises bleeding risk"].'
    result = gate_draft(draft, PACKETS)
    assert result.draft == draft
    [observation] = result.citations.observations
    assert (observation.kind, observation.cited_source, observation.found_in) == (
        "wrong_attribution", "digoxin label", "warfarin label",
    )  # fmt: skip


def test_a_paraphrase_loses_its_quotation_marks_and_an_invention_is_observed() -> None:
    draft = (
        '[CRG: warfarin label - "INR above four increases the chance of major bleeding events strongly"] '
        '[CRG: digoxin label — "Digoxin cures heart failure."]'
    )
    result = gate_draft(draft, PACKETS)
    assert result.draft.startswith(
        "[CRG: warfarin label - INR above four increases the chance of major bleeding events strongly] "
    )
    assert result.citations.paraphrase_converted == 1
    assert [o.kind for o in result.citations.observations] == ["fabricated_quote"]


def test_every_citation_counts_once_and_the_json_follows_the_contract() -> None:
    draft = (
        '[CRG: digoxin label — "Monitor electrolytes."] [CRG: warfarin label — "Bleeding is the major risk '
        'of warfarin therapy."] [CRG: digoxin label — "Warfarin raises bleeding risk"]'
    )
    record = gate_draft(draft, PACKETS).contract()
    assert list(record) == ["revision", "draft", "restored", "lint", "citations"]
    citations = record["citations"]
    assert list(citations) == [
        "checked",
        "verified",
        "ellipsis_trimmed",
        "paraphrase_converted",
        "observations",
    ]
    assert citations["checked"] == 3 == citations["verified"] + len(citations["observations"])


# Drafts made of the pieces the gate acts on: headers, imperative and monitoring sentences, citations that
# are verified, trimmed, paraphrased, misattributed or invented, in any order.
PIECES = st.sampled_from([
    "## HOLD DIGOXIN", "STOP WARFARIN:", "## Warfarin MUST BE held", "Discontinue warfarin today.",
    "Plan: hold furosemide.", "- Administer potassium.", "Monitor potassium.",
    '[CRG: digoxin label — "Monitor electrolytes."]',
    '[CRG: digoxin label — "Toxicity is more likely with hypokalemia. Check ... daily."]',
    '[CRG: warfarin label - "INR above four increases the chance of major bleeding events"]',
    '[CRG: digoxin label — "Warfarin raises bleeding risk"]', '[CRG: nobody — "Invented text."]',
    "Plain prose with a number 4.0 and e.g. an abbreviation.",
])  # fmt: skip


@given(st.lists(PIECES, max_size=12), st.sampled_from(["\n", " ", "\n\n"]))
def test_the_gate_is_idempotent_and_deterministic(pieces: list[str], joiner: str) -> None:
    draft = joiner.join(pieces)
    first = gate_draft(draft, PACKETS)
    again = gate_draft(first.draft, PACKETS)
    assert again.draft == first.draft
    assert (
        again.transforms == []
        and again.citations.ellipsis_trimmed == again.citations.paraphrase_converted == 0
    )
    assert json.dumps(gate_draft(draft, PACKETS).contract()) == json.dumps(first.contract())
