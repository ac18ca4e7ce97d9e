"""Operator pins: an operator decides a signature's candidates ALLOW or BLOCK, outside the paper's memory.

A pin is an event on the verdict stream with a source of its own, ``operator_pin``
(:class:`~processors.dbpm.events.PinEvent`), so that it is ordered with the verdicts of its signature,
applied by that signature's one writer, recorded in the memory's changelog and replayed like them. It is
not a verdict: the update operator never sees it. It changes no severity, confidence, count, κ,
propagation, patient counter, clock or source weight (Table 4 has no ``operator_pin`` row); it is one
record of its own (``O`` task NUL signature, :mod:`.memory`), which the snapshot of the replay contract
does not list. A later pin of the signature replaces it; an ``UNPIN`` deletes it, and the gate decides as
the memory has learnt again.

The gate (:meth:`~processors.dbpm.engine.DBPMEngine.decide`) asks for a pin first, for every task: a
pinned signature's candidate is decided as pinned, with rule ``operator_pin``, whatever the memory holds
(a preempted relation head included), and the flag policy does not apply (the pin is the operator's
decision, not the memory's). The decision still reports the signature's learnt severity and support at
that instant, and its provenance names the pin: ``operator_pin`` and the ``key=value`` entries of
:func:`pin_provenance` (who, when, why, the pin's id), which :func:`read_pin_provenance` reads back.
"""

from __future__ import annotations

from processors.dbpm.config import OPERATOR_PIN, PIN_BLOCK, QA, UNPIN
from processors.dbpm.events import GateEvent, PinEvent, format_time
from processors.dbpm.gates import ALLOW, BLOCK, GateRuling
from processors.dbpm.memory import Memory, Pin
from processors.dbpm.signatures import is_qa_class, signature

#: The ``key=value`` provenance entries of a pin, in the order they are written.
PIN_FIELDS = ("pin_id", "pinned_by", "pinned_at", "pin_reason")


def unpinnable(task: str, sig: str) -> str | None:
    """Why a pin of ``sig`` of ``task`` would decide nothing (None: it decides the signature's
    candidates): the gate asks for the pin of a candidate's own signature, and no candidate is gated under
    a QA error-class signature."""
    if task == QA and is_qa_class(sig):
        return (
            "a QA error-class signature groups failed verdicts by class and no candidate is gated under it, "
            "so a pin of it would decide nothing: pin the question instead"
        )
    return None


def apply_pin(mem: Memory, event: PinEvent) -> None:
    """Record ``event``'s pin of its signature, or delete the signature's pin for an ``UNPIN``."""
    if event.action == UNPIN:
        mem.delete_pin(event.task, event.signature)
        return
    pin = Pin(event.action, event.time, event.operator, event.reason, event.pin_id)
    mem.put_pin(event.task, event.signature, pin)


def pin_provenance(pin: Pin) -> tuple[str, ...]:
    """The provenance of a decision made by ``pin``: the source, then who, when, why and the pin's id."""
    values = (pin.pin_id, pin.operator, format_time(pin.time), pin.reason)
    return (OPERATOR_PIN, *(f"{name}={value}" for name, value in zip(PIN_FIELDS, values, strict=True)))


def read_pin_provenance(provenance: tuple[str, ...] | list[str]) -> dict[str, str] | None:
    """The pin entries of a decision's provenance by name (:data:`PIN_FIELDS`), None if no pin made it."""
    if OPERATOR_PIN not in provenance:
        return None
    found = {}
    for entry in provenance:
        name, _, value = entry.partition("=")
        if name in PIN_FIELDS:
            found[name] = value
    return found


def gate_pinned(mem: Memory, event: GateEvent, now: float) -> GateRuling | None:
    """The decision of ``event`` if its signature is pinned (module docstring), else None."""
    sig = signature(event.task, event.payload)
    pin = mem.pin(event.task, sig)
    if pin is None:
        return None
    pattern = mem.pattern(event.task, sig)
    severity = None if pattern is None else mem.severity(event.task, pattern, now)
    decision = BLOCK if pin.action == PIN_BLOCK else ALLOW
    return GateRuling(
        event.candidate_id, decision, OPERATOR_PIN, event.task, sig, severity,
        0 if pattern is None else pattern.count, 0.0 if decision == BLOCK else 1.0, pin_provenance(pin),
    )  # fmt: skip
