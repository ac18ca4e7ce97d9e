"""The step machine's routing against the spec's graph: §3's diagram edges, node by node.

:data:`processors.agent.graph.EDGES` declares every move between nodes. Here: §3's edges are all in it,
the moves it adds are exactly the three the package docstring gives, every declared move is taken by
some scripted turn (so the table is the routing, not a wish list), and every turn starts at
INPUT_ASSEMBLY and ends in SYNTHESIZE (§3's ``IN`` and ``OUT``). Where the spec is beside the clone
(``../shared/seeds``), §3's Mermaid diagram is also read: its sub-nodes folded into their nodes, its
edges are the ones written here.
"""

from __future__ import annotations

import re

from agent_harness import (
    DOFETILIDE_SAFETY,
    assess,
    fail,
    intent,
    ok,
    retry,
    run,
    say,
    select,
    tool_step,
)
from agent_harness import args as arguments

from processors.agent.graph import EDGES
from processors.agent.state import AgentState, Event, NodeName
from tests.seeds import AGENT_SPEC, needs_agent_spec

SECTION_3: frozenset[tuple[NodeName, NodeName]] = frozenset(
    {
        ("INPUT_ASSEMBLY", "INTENT_CLASSIFY"),
        ("INTENT_CLASSIFY", "SYNTHESIZE"),  # DIRECT
        ("INTENT_CLASSIFY", "TOOL_SELECT"),  # TOOL_NEEDED
        ("TOOL_SELECT", "TOOL_EXECUTE"),
        ("TOOL_EXECUTE", "RESULT_CLASSIFY"),
        ("RESULT_CLASSIFY", "DETERMINISTIC_ROUTER"),
        ("DETERMINISTIC_ROUTER", "SYNTHESIZE"),  # done, max steps; §4.6: ask_user
        ("DETERMINISTIC_ROUTER", "ERROR_HANDLER"),  # error
        ("DETERMINISTIC_ROUTER", "TOOL_SELECT"),  # more tools needed
        ("ERROR_HANDLER", "TOOL_SELECT"),  # retry_same / retry_different_args
        ("ERROR_HANDLER", "SYNTHESIZE"),  # ask_user, skip
    }
)
"""§3's diagram between the graph's nodes (sub-nodes folded, start and end aside)."""

ADDED: frozenset[tuple[NodeName, NodeName]] = frozenset(
    {
        ("TOOL_EXECUTE", "ERROR_HANDLER"),  # invalid arguments are not executed
        ("TOOL_EXECUTE", "DETERMINISTIC_ROUTER"),  # a duplicate call stops before execution
        ("TOOL_SELECT", "SYNTHESIZE"),  # an invalid stage-1 answer with nothing to fall back on
    }
)
"""The moves the package adds to §3 (package docstring, "Flow and path")."""

CHART = {"medications": ["metformin"]}
ONE_SMITH = {"matches": [{"patient_id": "abc-123"}]}
TWO_WILSONS = {"matches": [{"patient_id": "a-100"}, {"patient_id": "b-200"}]}
SMITH = "Find patient John Smith and check his chart"
FOUND_SMITH = [
    intent("TOOL_NEEDED", "search_patient"),
    *tool_step("search_patient", {"name": "John Smith"}, ONE_SMITH),
]
AMIODARONE = [select("check_drug_safety"), arguments(drug_name="amiodarone")]
TURNS: dict[str, tuple[str, list[Event]]] = {
    "direct": ("What is hypertension?", [intent("DIRECT"), say("Raised blood pressure.")]),
    "single tool": (
        "Check FDA warnings for dofetilide",
        [intent("TOOL_NEEDED", "check_drug_safety"),
         *tool_step("check_drug_safety", {"drug_name": "dofetilide"}, DOFETILIDE_SAFETY), say("TdP risk.")],
    ),
    "two tools": (
        SMITH,
        [*FOUND_SMITH, *tool_step("get_patient_chart", {"patient_id": "abc-123"}, CHART), say("Metformin.")],
    ),
    "retry then done": (
        "Check FDA warnings for amiodarone",
        [intent("TOOL_NEEDED", "check_drug_safety"), *AMIODARONE, fail("timeout"), assess("error_retryable"),
         retry("retry_same"), ok({"boxed_warning": "Pulmonary toxicity"}), assess("success_rich"),
         say("Pulmonary toxicity.")],
    ),
    "several matches ask": (
        "Search for patient James Wilson",
        [intent("TOOL_NEEDED", "search_patient"),
         *tool_step("search_patient", {"name": "James Wilson"}, TWO_WILSONS), say("Which one do you mean?")],
    ),
    "invalid arguments ask": (
        "Show John Smith's chart",
        [intent("TOOL_NEEDED", "get_patient_chart"), select("get_patient_chart"),
         arguments(patient_id="John Smith"), say("Which patient ID?")],
    ),
    "duplicate stop": (
        SMITH,
        [*FOUND_SMITH, select("search_patient"), arguments(name="John Smith"), say("John Smith is abc-123.")],
    ),
    "no tool to select": (
        "Check FDA warnings for dofetilide",
        [intent("TOOL_NEEDED"), say("not json"), say("The information could not be retrieved.")],
    ),
}  # fmt: skip
"""Scripted turns that between them take every route of the step machine."""


def _moves(state: AgentState) -> set[tuple[NodeName, NodeName]]:
    return set(zip(state.path, state.path[1:], strict=False))


def test_every_section_3_edge_is_declared_and_the_additions_are_the_three_documented() -> None:
    assert set(EDGES) >= SECTION_3
    assert set(EDGES) - SECTION_3 == ADDED
    assert all(EDGES[edge].startswith("§3") for edge in SECTION_3)
    assert all(EDGES[edge].startswith("added:") for edge in ADDED)


def test_the_scripted_turns_take_every_declared_move_and_no_other() -> None:
    taken: set[tuple[NodeName, NodeName]] = set()
    for name, (query, events) in TURNS.items():
        state, response = run(query, events)
        assert (state.path[0], state.path[-1]) == ("INPUT_ASSEMBLY", "SYNTHESIZE"), name
        assert response.answer == state.final_response, name
        taken |= _moves(state)
    assert taken == set(EDGES)


def _section_3_edges(text: str) -> set[tuple[str, str]]:
    """§3's Mermaid edges with each sub-node folded into its node (``IN``/``OUT``: start and end)."""
    start = text.index("## 3. Graph Diagram")
    diagram = re.search(r"```mermaid\n(.*?)```", text[start:], re.DOTALL)
    assert diagram is not None
    nodes = {
        "IA": "INPUT_ASSEMBLY", "IC": "INTENT_CLASSIFY", "TS": "TOOL_SELECT", "TE": "TOOL_EXECUTE",
        "RC": "RESULT_CLASSIFY", "EH": "ERROR_HANDLER", "DR": "DETERMINISTIC_ROUTER", "SY": "SYNTHESIZE",
        "IN": "START", "OUT": "END",
    }  # fmt: skip
    edges = set()
    for source, target in re.findall(
        r"^\s*(\w+)\s+--(?:\s+\"[^\"]*\"\s+--)?>\s+(\w+)", diagram.group(1), re.M
    ):
        a, b = (nodes[name.split("_")[0]] for name in (source, target))
        if a != b:
            edges.add((a, b))
    return edges


@needs_agent_spec
def test_the_section_3_edges_are_the_specs() -> None:
    expected = {*SECTION_3, ("START", "INPUT_ASSEMBLY"), ("SYNTHESIZE", "END")}
    assert _section_3_edges(AGENT_SPEC.read_text(encoding="utf-8")) == expected
