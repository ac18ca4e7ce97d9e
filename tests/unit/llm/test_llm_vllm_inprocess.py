"""In-process vLLM: current structured-outputs parameters, answers judged like the HTTP client's.

vllm is not installed here: a stand-in ``vllm`` package with the two classes the backend touches
records how they are constructed (the engine itself is replaced by a scripted ``chat``).
"""

from __future__ import annotations

import asyncio
import sys
import types
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from streams.llm import CALL_PROFILES, CallType, FailureKind, LlmFailed, LlmOk
from streams.llm.lint import UnregisteredResponseModelError, json_schema_of
from streams.llm.schemas import NerExtraction, NerVerdict, QaVerdict, ReVerdict
from streams.llm.serve.vllm_inprocess import (
    EngineConfig,
    VllmInProcess,
    sampling_kwargs,
    sampling_params,
    structured_outputs_config,
)


@dataclass
class FakeStructuredOutputsParams:
    json: Any = None
    disable_any_whitespace: bool = False


@dataclass
class FakeSamplingParams:
    temperature: float = 1.0
    max_tokens: int | None = 16
    structured_outputs: FakeStructuredOutputsParams | None = None


@pytest.fixture
def fake_vllm(monkeypatch):
    vllm = types.ModuleType("vllm")
    vllm.SamplingParams = FakeSamplingParams
    sp = types.ModuleType("vllm.sampling_params")
    sp.StructuredOutputsParams = FakeStructuredOutputsParams
    vllm.sampling_params = sp
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sp)


@dataclass
class Output:
    text: str
    finish_reason: str
    token_ids: list[int] = field(default_factory=lambda: [1, 2, 3])


@dataclass
class RequestOutput:
    outputs: list[Output]
    prompt_token_ids: list[int] = field(default_factory=lambda: [9] * 7)


class ScriptedEngine:
    """Answers each conversation with the next scripted (text, finish_reason); records the calls."""

    def __init__(self, *answers: tuple[str, str]) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[list[list[dict[str, str]]], Any]] = []

    def chat(self, conversations, sampling_params, use_tqdm=True):
        self.calls.append((conversations, sampling_params))
        return [RequestOutput([Output(*self.answers.pop(0))]) for _ in conversations]


USER = [{"role": "user", "content": "Note: aspirin 100 mg daily. Candidate: aspirin. Verdict?"}]


@pytest.mark.parametrize("call_type", list(CallType))
def test_sampling_settings_come_from_the_call_table_with_the_linted_schema(call_type):
    kwargs = sampling_kwargs(call_type, NerVerdict)
    profile = CALL_PROFILES[call_type]
    assert (kwargs["temperature"], kwargs["max_tokens"]) == (profile.temperature, profile.max_tokens)
    expected = {"json": json_schema_of(NerVerdict), "disable_any_whitespace": True}
    assert kwargs["structured_outputs"] == expected


def test_sampling_params_use_structured_outputs_never_guided_decoding(fake_vllm):
    params = sampling_params(CallType.RE_VERDICT, ReVerdict)
    assert isinstance(params, FakeSamplingParams)
    assert params.temperature == 0.0 and params.max_tokens == 60
    assert params.structured_outputs == FakeStructuredOutputsParams(json_schema_of(ReVerdict), True)
    assert not any("guided" in name for name in vars(params))


def test_unregistered_models_are_refused_before_any_engine_work():
    from pydantic import BaseModel

    class Free(BaseModel):
        text: str

    with pytest.raises(UnregisteredResponseModelError):
        sampling_kwargs(CallType.OPERATIONAL, Free)


def test_engine_defaults_follow_the_paper_and_the_served_structured_outputs_config():
    kwargs = EngineConfig("meta-llama/Llama-3.3-70B-Instruct").llm_kwargs()
    assert kwargs["tensor_parallel_size"] == 2 and kwargs["max_model_len"] == 8192
    assert kwargs["max_num_seqs"] == 256 and kwargs["gpu_memory_utilization"] == 0.90
    assert kwargs["dtype"] == "bfloat16" and kwargs["enable_chunked_prefill"] is True
    assert kwargs["structured_outputs_config"] == {"backend": "xgrammar", "disable_any_whitespace": True}


def test_a_batch_is_judged_like_the_http_client_in_input_order(fake_vllm):
    engine = ScriptedEngine(
        ('{"verdict":"FAIL","error_class":"unsupported"}', "stop"),
        ('{"verdict":"PA', "length"),
        ('{"verdict":"MAYBE"}', "stop"),
        ("not json", "stop"),
    )
    backend = VllmInProcess(engine, model_name="verifier")
    results = backend.call_batch(CallType.QA_VERDICT, QaVerdict, [USER] * 4)
    first, truncated, invalid, garbage = results
    assert isinstance(first, LlmOk) and first.value == QaVerdict(verdict="FAIL", error_class="unsupported")
    assert first.model == "verifier" and first.prompt_tokens == 7 and first.completion_tokens == 3
    assert isinstance(truncated, LlmFailed) and truncated.kind is FailureKind.TRUNCATED
    assert all(isinstance(r, LlmFailed) and r.kind is FailureKind.INVALID_OUTPUT for r in (invalid, garbage))
    assert all("MAYBE" not in r.operator_detail for r in results if isinstance(r, LlmFailed))
    conversations, params = engine.calls[0]
    assert conversations == [USER] * 4 and params.max_tokens == 60


def test_an_engine_exception_is_a_typed_failure_for_every_call(fake_vllm):
    class Broken:
        def chat(self, conversations, sampling_params, use_tqdm=True):
            raise RuntimeError("CUDA error: out of memory")

    results = VllmInProcess(Broken(), model_name="m").call_batch(
        CallType.NER_EXTRACTION, NerExtraction, [USER, USER]
    )
    assert [r.kind for r in results] == [FailureKind.UNAVAILABLE] * 2
    assert all("out of memory" not in r.message for r in results)


def test_call_has_the_client_signature_and_runs_off_the_event_loop(fake_vllm):
    backend = VllmInProcess(ScriptedEngine(('{"verdict":"PASS"}', "stop")), model_name="m")
    result = asyncio.run(backend.call(CallType.NER_VERDICT, NerVerdict, USER))
    assert isinstance(result, LlmOk) and result.value == NerVerdict(verdict="PASS")


def test_load_without_vllm_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(RuntimeError, match="gpu extra"):
        VllmInProcess.load(EngineConfig("m"))


def test_outlines_is_selectable_and_never_asked_for_compact_json(fake_vllm):
    config = EngineConfig("google/medgemma-1.5-4b-it", structured_outputs_backend="outlines")
    assert config.llm_kwargs()["structured_outputs_config"] == {"backend": "outlines"}
    assert config.disable_any_whitespace is False
    assert structured_outputs_config("xgrammar") == {"backend": "xgrammar", "disable_any_whitespace": True}
    params = sampling_params(CallType.NER_VERDICT, NerVerdict, disable_any_whitespace=False)
    assert params.structured_outputs == FakeStructuredOutputsParams(json_schema_of(NerVerdict), False)
    with pytest.raises(ValueError, match="xgrammar"):
        EngineConfig("m", structured_outputs_backend="guidance")  # type: ignore[arg-type]


class FakeLLM:
    """``vllm.LLM`` stand-in: records its arguments, answers every call with a valid verdict."""

    made: ClassVar[list[dict[str, Any]]] = []
    answer: ClassVar[str] = '{"verdict":"FAIL"}'

    def __init__(self, **kwargs: Any) -> None:
        FakeLLM.made.append(kwargs)

    def chat(self, conversations, sampling_params, use_tqdm=True):
        return [RequestOutput([Output(FakeLLM.answer, "stop")]) for _ in conversations]


@pytest.fixture
def fake_engine(fake_vllm, monkeypatch):
    monkeypatch.setattr(sys.modules["vllm"], "LLM", FakeLLM, raising=False)
    monkeypatch.setattr(FakeLLM, "made", [])
    return FakeLLM


def test_vllm_check_loads_the_engine_with_the_chosen_backend_and_checks_each_verdict_type(fake_engine):
    from typer.testing import CliRunner

    from streams.cli.llm import app

    args = ["--model", "google/medgemma-1.5-4b-it", "--structured-outputs-backend", "outlines"]
    result = CliRunner().invoke(app, ["vllm-check", *args, "--tensor-parallel-size", "1"])
    assert result.exit_code == 0, result.output
    [kwargs] = fake_engine.made
    assert kwargs["structured_outputs_config"] == {"backend": "outlines"}
    assert kwargs["model"] == "google/medgemma-1.5-4b-it" and kwargs["tensor_parallel_size"] == 1
    lines = result.output.splitlines()
    assert [line.split(":")[0] for line in lines[:3]] == ["ner_verdict", "re_verdict", "qa_verdict"]
    assert all(": ok " in line for line in lines[:3])


def test_vllm_check_fails_on_an_invalid_answer_and_without_vllm(fake_engine, monkeypatch):
    from typer.testing import CliRunner

    from streams.cli.llm import app

    monkeypatch.setattr(fake_engine, "answer", '{"verdict":"MAYBE"}')
    failed = CliRunner().invoke(app, ["vllm-check", "--model", "m"])
    assert failed.exit_code == 1 and "invalid_output" in failed.output.lower()
    assert fake_engine.made[0]["structured_outputs_config"]["backend"] == "xgrammar"
    monkeypatch.setitem(sys.modules, "vllm", None)
    missing = CliRunner().invoke(app, ["vllm-check", "--model", "m"])
    assert missing.exit_code == 2 and "gpu extra" in missing.output
    unknown = CliRunner().invoke(app, ["vllm-check", "--model", "m", "--structured-outputs-backend", "x"])
    assert unknown.exit_code == 2
