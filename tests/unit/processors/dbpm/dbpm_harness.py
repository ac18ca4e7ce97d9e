"""A small harness for DBPM engine tests: build contract events, run them, read the memory."""

from __future__ import annotations

from processors.dbpm import DBPMConfig, DBPMEngine, GateRuling, format_time, load_ontology, parse_event
from processors.dbpm.memory import Memory
from state import RamStore

DAY = 86400.0
T0 = 1_777_852_800.0  # 2026-05-04T00:00:00Z


def iso(seconds: float) -> str:
    return format_time(seconds)


class Harness:
    """Runs events through one engine over one in-memory store, one transaction per event."""

    def __init__(self, config: DBPMConfig) -> None:
        self.config = config
        self.engine = DBPMEngine(config, load_ontology())
        self.store = RamStore()
        self._n = 0

    def send(self, obj: dict) -> list[GateRuling]:
        event = parse_event(obj, tuple(self.config.tasks))
        with self.store.transaction() as txn:
            _, out = self.engine.process(txn, event, event.time)
        return out

    def verdict(
        self, task: str, verdict: str, payload: dict, *, at: float = T0, source: str = "verifier_mmed",
        patient: str = "p1",
    ) -> None:  # fmt: skip
        self.send({"kind": "verdict", "ts": iso(at), "task": task, "verdict": verdict, "source": source,
                   "patient_id": patient, "payload": payload})  # fmt: skip

    def gate(self, task: str, payload: dict, *, at: float = T0, patient: str = "p1") -> GateRuling:
        self._n += 1
        (decision,) = self.send({"kind": "gate", "ts": iso(at), "task": task, "patient_id": patient,
                                 "candidate_id": f"c{self._n}", "payload": payload})  # fmt: skip
        return decision

    def memory(self) -> Memory:
        return Memory(self.store.transaction(), self.config)

    def severity(self, task: str, sig: str, at: float) -> float:
        mem = self.memory()
        return mem.severity(task, mem.pattern(task, sig), at)

    def snapshot(self) -> dict:
        return self.engine.snapshot(self.store.transaction())


def ner(entity: str, category: str = "Diagnosis") -> dict:
    return {"entity": entity, "category": category}


def rel(head: str = "metformin", relation: str = "TREATS", tail: str = "type 2 diabetes",
        head_type: str = "Treatment", tail_type: str = "Diagnosis") -> dict:  # fmt: skip
    return {"head": head, "head_type": head_type, "relation": relation, "tail": tail, "tail_type": tail_type}


def qa(question: str = "What is the diagnosis?", answer: str = "asthma", category: str = "diagnosis",
       **extra: object) -> dict:  # fmt: skip
    return {"question": question, "answer": answer, "category": category, **extra}


def make(config: DBPMConfig | None = None, **flags: bool) -> Harness:
    """A harness on ``config`` (default: the paper's) with some flags changed."""
    base = config if config is not None else DBPMConfig()
    return Harness(base.with_flags(**flags) if flags else base)
