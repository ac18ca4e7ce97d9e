"""``clingate agent ask`` and ``clingate agent replay`` as a user runs them, against the local model
server answering from a script (``clingate llm serve --backend test --agent-script``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from streams.data import CLINICAL
from streams.local.process import SOURCE_ROOT
from streams.testing.agent_session import demo_questions
from streams.testing.llm_server import ServerProcess

QUESTIONS = {q.query: q for q in demo_questions()}


def _clingate(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streams.cli", *args], cwd=SOURCE_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_ask_prints_the_contract_json_and_its_recording_replays(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({q: v.answers for q, v in QUESTIONS.items()}), encoding="utf-8")
    record = tmp_path / "turn.json"
    prescription = "Prescribe warfarin 5 mg daily for PT-DEMO-0003"
    bundle = tmp_path / "patient.json"
    bundle.write_text(
        (CLINICAL / "PT-TEST-010.json").read_text("utf-8").replace("PT-TEST-010", "PT-DEMO-0003")
    )
    with ServerProcess.start("test", args=["--agent-script", str(script)]) as server:
        env = {**os.environ, "CLINGATE_LLM_URL": server.base_url, "CLINGATE_LLM_MODEL": server.model}
        asked = _clingate(
            env, "agent", "ask", "Check FDA warnings for dofetilide", "--json", "--record", str(record)
        )
        proposed = _clingate(env, "agent", "ask", prescription, "--patient-bundle", str(bundle))
    assert asked.returncode == 0, asked.stderr
    turn = json.loads(asked.stdout)
    assert set(turn) == {"answer", "clarification", "path", "tool_calls", "llm_calls"}
    assert turn["tool_calls"] == [
        {"tool": "check_drug_safety", "args": {"drug_name": "dofetilide"}, "outcome": "success"}
    ]
    assert (turn["llm_calls"], turn["clarification"]) == (5, None)
    assert turn["path"][0] == "INPUT_ASSEMBLY" and turn["path"][-1] == "SYNTHESIZE"
    assert proposed.returncode == 0, proposed.stderr
    assert "proposal" in proposed.stdout and "MedicationRequest (draft)" in proposed.stdout
    replayed = _clingate({**os.environ}, "agent", "replay", str(record), "--json")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert json.loads(replayed.stdout)["reproduced"] is True


def test_ask_without_a_model_server_says_how_to_configure_one() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLINGATE_LLM")}
    done = _clingate(env, "agent", "ask", "What is hypertension?")
    assert done.returncode == 2 and "CLINGATE_LLM_URL" in done.stderr
