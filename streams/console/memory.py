"""The operator's memory explorer: what the DBPM memory holds about a signature and why a candidate was
decided as it was; and the operator's pins.

What holds:

* **Lookup** (``/memory``): a task and a signature as typed, normalised by the engine's own signature rules
  (:func:`processors.dbpm.signatures.signature_payload`: an entity in any case, ``a|b|c`` relation types),
  or a candidate id pasted.
* **Signature page** (``/memory/signature?task=&signature=``): the blocklist pattern's severity with the
  lazy decay of Eq. 5 applied at the moment of viewing (the console's clock: the page shows "now", not the
  memory's last event time), its count, cross-task hits (κ, decayed as the memory decays it), when it was
  last seen and the sources its record says built it; the whitelist entry's confidence and count; the pin.
  The trajectory lists every verdict, pin and propagated evidence of the signature still on the topics in
  event-time order, each with its source, its verdict, its Table 4 weight (``DBPMConfig.weight``) and the
  severity the next decision of the signature saw after it (the decision's own ``severity``: what the gate
  read, not a recomputation): the latest :data:`TRAJECTORY_SHOWN` of them, with the total. Above that
  table, the same severity as a chart over event time (:func:`severity_chart`): the severity each decision
  of the signature read, the latest :data:`SEVERITY_DRAWN` decisions that read one, with the task's BLOCK
  and DOWNGRADE thresholds across them, drawn as the demo's report draws its charts
  (:mod:`streams.charts`: matplotlib's inline SVG with no style, nothing the page's
  Content-Security-Policy would have to allow). The decisions
  of the signature follow, newest first, the first :data:`DECISIONS_SHOWN` of them with the total count
  by decision.
* **Candidate page** (``/memory/candidate/<id>``): its decision, rule, severity, multiplier, provenance,
  configuration fingerprint, coverage and payload, and one plain-language line (:func:`why`) built from the
  rule, the provenance and the configuration's thresholds only, linking to the signature page.
* **Pin** (``POST /memory/pin``): ALLOW, BLOCK or UNPIN a signature with a reason (required, up to
  :data:`REASON_MAX` characters). The action is recorded on the audit trail (action ``pin``, target
  ``task|signature``) before the pin is published (:func:`streams.worker.wire.pin_record`; its ``pin_id``
  is the audit record's ``action_id``, its ``operator`` the signed-in user); nothing is published when
  that record is not acknowledged, and a pin Kafka did not acknowledge answers 503 and is recorded on the
  trail as refused. The memory's writer of the signature applies it (:mod:`processors.dbpm.pins`); the
  page then shows the pin once the memory has committed it. A signature whose pin would decide nothing
  (:func:`processors.dbpm.pins.unpinnable`: a QA error-class one) has no pin form, and its pin is refused
  (400), nothing recorded.

Every page is the operator role's only.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

from aiohttp import web
from markupsafe import Markup

from processors.dbpm import DBPMConfig
from processors.dbpm.config import OPERATOR_PIN
from processors.dbpm.memory import Memory, Pattern, Pin, WhiteEntry, source_names
from processors.dbpm.pins import read_pin_provenance, unpinnable
from processors.dbpm.signatures import signature, signature_payload
from schemas.console import Role
from schemas.dbpm import GateDecision, PinAction, Verdict
from schemas.dbpm import Propagation as PropagationRecord
from state import RamStore
from streams.charts import Series, line_chart
from streams.console.audit import Action, Outcome, audit, record_refusal
from streams.console.auth import requires
from streams.console.delivery import NotAcknowledged
from streams.console.memorylog import MemorySource, PinPublisher, SignatureLog, memory_keys
from streams.console.pages import PageLink, render, segment
from streams.console.sessions import SESSION
from streams.worker.wire import pin_record

PAGE = PageLink("/memory", "Memory explorer", frozenset({Role.OPERATOR}))

TASKS = ("ner", "re", "qa")
"""The tasks the gate decides, so the tasks a signature can be looked up and pinned in."""
DECISIONS_SHOWN = 50
"""The most decisions a signature page lists (newest first); the total is counted."""
TRAJECTORY_SHOWN = 50
"""The most trajectory events a signature page lists (the latest, in event-time order); the total is
counted. A signature the verifier keeps failing has thousands in 30 days of topic."""
SEVERITY_DRAWN = 500
"""The most decisions the severity chart draws (the latest): enough to see the signature's course, few
enough for a page that loads at once."""
REASON_MAX = 500
"""The longest reason a pin takes."""
_ACTIONS = frozenset(a.value for a in PinAction)


@dataclass(frozen=True)
class Explorer:
    """What the explorer reads, where it publishes pins, and the workers' DBPM configuration (decay,
    weights, thresholds: ``CLINGATE_DBPM_*`` as the workers have them)."""

    source: MemorySource
    publisher: PinPublisher
    config: DBPMConfig


EXPLORER = web.AppKey("memory_explorer", Explorer)


@dataclass(frozen=True)
class Step:
    """One event of a signature's trajectory."""

    ts: datetime
    kind: str
    """``verdict``, ``pin`` or ``propagation``."""
    source: str
    verdict: str
    """The verdict label; a pin's action."""
    weight: float | None
    """The Table 4 weight the update operator gave it (None: a pin, never weighed)."""
    detail: str
    seen: GateDecision | None = None
    """The first decision of the signature after it, before the next event (None: no such decision)."""


@dataclass(frozen=True)
class SignatureView:
    """A signature page's content (module docstring)."""

    task: str
    signature: str
    now: datetime
    pattern: Pattern | None
    severity: float
    kappa: int
    white: WhiteEntry | None
    pin: Pin | None
    built_by: tuple[str, ...]
    """The sources the pattern's record says contributed to it."""
    by_source: list[tuple[str, str, int]]
    """(source, verdict, count) of the signature's events on the topics."""
    trajectory: list[Step]
    """The latest :data:`TRAJECTORY_SHOWN` events, in event-time order."""
    events: int
    """How many events of the signature are on the topics."""
    decisions: list[GateDecision]
    """The newest :data:`DECISIONS_SHOWN` decisions, newest first."""
    severities: list[tuple[float, float]]
    """(event time, severity read) of the latest :data:`SEVERITY_DRAWN` decisions that read a severity,
    in event-time order."""
    decision_counts: dict[str, int]
    unreadable: int


def normalised(task: str, typed: str) -> str:
    """The signature ``typed`` names in ``task``, by the engine's rules.

    Raises:
        ValueError: ``task`` is not a gated task, or ``typed`` names no signature of it.
    """
    if task not in TASKS:
        raise ValueError(f"the task is one of {', '.join(TASKS)}")
    return signature(task, signature_payload(task, typed))


def _step(event: Verdict | PropagationRecord, config: DBPMConfig) -> Step:
    if isinstance(event, PropagationRecord):
        detail = f"from {event.origin_task} {event.origin_signature} (patient {event.patient_id})"
        return Step(event.ts, "propagation", event.source, "soft_downgrade", event.weight, detail)
    if event.pin is not None:
        detail = f"{event.pin.operator}: {event.pin.reason} (pin {event.pin.pin_id})"
        return Step(event.ts, "pin", event.source, event.pin.action.value, None, detail)
    detail = f"candidate {event.candidate_id}" if event.candidate_id else f"patient {event.patient_id}"
    return Step(event.ts, "verdict", event.source, event.verdict.value, config.weight(event.source), detail)


def trajectory(log_: SignatureLog, config: DBPMConfig) -> list[Step]:
    """The signature's events in event-time order, each with the first decision after it (module
    docstring)."""
    steps = sorted((_step(e, config) for e in log_.events), key=lambda s: s.ts)
    decisions = sorted(log_.decisions, key=lambda d: d.ts)
    out, d = [], 0
    for i, step in enumerate(steps):
        following = steps[i + 1].ts if i + 1 < len(steps) else None
        while d < len(decisions) and decisions[d].ts < step.ts:
            d += 1
        seen = None
        if d < len(decisions) and (following is None or decisions[d].ts < following):
            seen = decisions[d]
        out.append(Step(step.ts, step.kind, step.source, step.verdict, step.weight, step.detail, seen))
    return out


def signature_view(
    task: str, sig: str, log_: SignatureLog, config: DBPMConfig, now: datetime
) -> SignatureView:
    """The signature page of ``sig`` from what the topics hold, decayed to ``now``."""
    store = RamStore()
    with store.transaction() as txn:
        for key in memory_keys(task, sig):
            if (value := log_.records.get(key)) is not None:
                txn.set(key, value)
    mem = Memory(store.transaction(), config)
    pattern = mem.pattern(task, sig)
    at = now.timestamp()
    counts = Counter(
        (s.source, s.verdict) for s in (_step(e, config) for e in log_.events) if s.kind != "pin"
    )
    newest = sorted(log_.decisions, key=lambda d: d.ts, reverse=True)
    read = [(d.ts.timestamp(), d.severity) for d in reversed(newest) if d.severity is not None]
    return SignatureView(
        task, sig, now, pattern, mem.severity(task, pattern, at), mem.kappa(pattern, at),
        mem.white(task, sig), mem.pin(task, sig), source_names(pattern.sources) if pattern else (),
        [(source, verdict, n) for (source, verdict), n in sorted(counts.items())],
        trajectory(log_, config)[-TRAJECTORY_SHOWN:], len(log_.events), newest[:DECISIONS_SHOWN],
        read[-SEVERITY_DRAWN:], dict(sorted(Counter(d.decision.value for d in log_.decisions).items())),
        log_.unreadable,
    )  # fmt: skip


SEVERITY_COLOURS = {"severity": "#1f77b4", "block": "#d62728", "downgrade": "#ff7f0e"}
"""The chart's line colours: the severity, and the BLOCK and DOWNGRADE thresholds."""


def severity_chart(view: SignatureView, config: DBPMConfig) -> Markup:
    """The severity each decision of ``view``'s signature read, over event time, with the task's BLOCK
    and DOWNGRADE thresholds as lines across the same span (a chart that says "no data" when no decision
    read a severity)."""
    points = view.severities
    series = [Series("severity a decision read", points, SEVERITY_COLOURS["severity"])]
    if points:
        span = (points[0][0], points[-1][0])
        block, down = config.tasks[view.task].block_threshold, config.downgrade_threshold
        series += [
            Series(f"BLOCK threshold {block}", [(t, block) for t in span], SEVERITY_COLOURS["block"]),
            Series(f"DOWNGRADE threshold {down}", [(t, down) for t in span], SEVERITY_COLOURS["downgrade"]),
        ]
    title = f"severity of {view.task} {view.signature} at each decision"
    # Markup: the SVG goes into the page as it is; line_chart escapes every text it draws.
    return Markup(line_chart(title, series, "severity", "event time", time=True))


_RULES = {
    "whitelist": "its signature is on the {task} whitelist: a verifier judged it a success",
    "no_evidence": "the memory held no evidence about its signature",
    "block": "its signature's severity was {severity} in the {task} blocklist, above the block threshold "
    "{block} with at least {support} observations (Eq. 4); the evidence came from {sources}",
    "downgrade_band": "its signature's severity was {severity}, above the downgrade threshold {down} and "
    "at most the block threshold {block} (Eq. 4); the evidence came from {sources}",
    "above_block_without_support": "its signature's severity was {severity}, above the block threshold "
    "{block}, but with fewer than {support} observations, which Eq. 4 ALLOWs",
    "below_band": "its signature's severity was {severity}, at or below the downgrade threshold {down}",
    "preempted_head": "its head entity was preempted: a NER hard fail on it blocks every relation naming "
    "it (§4.4)",
    "preempted_tail": "its tail entity was preempted: a NER hard fail on it blocks every relation naming "
    "it (§4.4)",
    "ontology_admitted": "the ontology admits this relation between these entity types",
    "ner_coverage": "the patient has an accepted NER fact of the category the question needs (Eq. 9)",
    "ner_coverage_missing": "the patient has no accepted NER fact of the category the question needs (Eq. 9)",
    "fail_rate_difficulty": "the question's category fails often (Eq. 7) and the patient is difficult "
    "(Eq. 8)",
    "fallback_insufficient_observations": "its question's category has too few observations to judge",
    "fallback_below_thresholds": "its question's category fail rate or the patient's difficulty is low",
    "disabled": "DBPM is switched off: every candidate is ALLOWed",
}
_POLICY = {
    "qa_hard_block": "the QA hard-block policy turned a DOWNGRADE into a BLOCK",
    "three_tier_off": "with three tiers off a DOWNGRADE became an ALLOW",
    "ontology_tag_only": "the ontology tag-only policy turned a BLOCK into a DOWNGRADE",
    "downgrade_first": "the DOWNGRADE-first policy turned a BLOCK into a DOWNGRADE",
    "barrier_timeout": "the gate decided without waiting longer for the memory (barrier timeout)",
}


def why(decision: GateDecision, config: DBPMConfig) -> str:
    """Why the gate decided ``decision`` as it did, in one sentence, from its rule, provenance and the
    configuration's thresholds."""
    provenance = list(decision.provenance)
    pin = read_pin_provenance(provenance)
    head = f"{decision.decision.value} by rule {decision.rule}: "
    if pin is not None:
        return head + (
            f"operator {pin.get('pinned_by')} pinned {decision.task} signature {decision.signature!r} to "
            f"{decision.decision.value} at {pin.get('pinned_at')}, because “{pin.get('pin_reason')}” "
            f"(pin {pin.get('pin_id')}); the memory's own evidence was not consulted."
        )
    params = config.tasks.get(decision.task)
    sources = [p for p in provenance if p not in _POLICY and p != OPERATOR_PIN]
    text = _RULES.get(decision.rule, f"rule {decision.rule}").format(
        task=decision.task,
        severity="none" if decision.severity is None else f"{decision.severity:.3f}",
        block="?" if params is None else params.block_threshold,
        support="?" if params is None else params.min_support,
        down=config.downgrade_threshold,
        sources=", ".join(sources) or "no recorded source",
    )
    policies = [_POLICY[p] for p in provenance if p in _POLICY]
    return head + text + "".join(f"; then {p}" for p in policies) + "."


def _signature_url(request: web.Request, task: str, sig: str, **extra: str) -> str:
    return str(request.app.router["memory-signature"].url_for().with_query(task=task, signature=sig, **extra))


@requires(*PAGE.roles)
async def lookup_page(request: web.Request) -> web.StreamResponse:
    """``GET /memory``: the lookup form; with ``candidate`` or ``task`` and ``signature``, their page."""
    candidate = request.query.get("candidate", "").strip()
    task, typed = request.query.get("task", "ner"), request.query.get("signature", "")
    if candidate:
        raise web.HTTPFound(f"{PAGE.path}/candidate/{segment(candidate)}")
    if typed:
        try:
            raise web.HTTPFound(_signature_url(request, task, normalised(task, typed)))
        except ValueError as exc:
            return _lookup(request, 400, task, typed, str(exc))
    return _lookup(request, 200, task, typed, "")


def _lookup(request: web.Request, status: int, task: str, typed: str, error: str) -> web.Response:
    return render(
        request,
        "memory.html",
        status=status,
        title=PAGE.title,
        tasks=TASKS,
        task=task,
        typed=typed,
        error=error,
    )


@requires(*PAGE.roles)
async def signature_page(request: web.Request) -> web.StreamResponse:
    """``GET /memory/signature?task=&signature=``: the signature page (module docstring)."""
    task, typed = request.query.get("task", ""), request.query.get("signature", "")
    try:
        sig = normalised(task, typed)
    except ValueError as exc:
        return _lookup(request, 400, task, typed, str(exc))
    return await _signature(request, task, sig)


async def _signature(
    request: web.Request, task: str, sig: str, *, status: int = 200, error: str = ""
) -> web.Response:
    explorer = request.app[EXPLORER]
    log_ = await explorer.source.signature(task, sig)
    view = signature_view(task, sig, log_, explorer.config, datetime.now(UTC))
    pinned = request.query.get("pinned")
    confirmation = f"Pin {pinned} recorded." if pinned in _ACTIONS else ""
    return render(
        request, "memory_signature.html", status=status, title=f"{task} signature {sig}", view=view,
        severity_chart=severity_chart(view, explorer.config),
        params=explorer.config.tasks[task], config=explorer.config, actions=list(PinAction),
        reason_max=REASON_MAX, error=error, confirmation=confirmation, unpinnable=unpinnable(task, sig),
    )  # fmt: skip


@requires(*PAGE.roles)
async def candidate_page(request: web.Request) -> web.StreamResponse:
    """``GET /memory/candidate/{candidate_id}``: the decision of one candidate and why (404: none)."""
    candidate_id = request.match_info["candidate_id"]
    explorer = request.app[EXPLORER]
    decision = await explorer.source.decision(candidate_id)
    if decision is None:
        message = f"No decision of candidate {candidate_id} is on clingate.dbpm.decisions."
        return render(request, "error.html", status=404, title="No such decision", message=message)
    return render(
        request, "memory_candidate.html", title=f"Candidate {candidate_id}", d=decision,
        why=why(decision, explorer.config),
        signature_url=_signature_url(request, decision.task, decision.signature),
        payload=decision.candidate.payload.model_dump(mode="json", exclude_none=True),
    )  # fmt: skip


@requires(*PAGE.roles)
async def pin(request: web.Request) -> web.StreamResponse:
    """``POST /memory/pin``: record the pin on the audit trail, publish it, back to the signature page."""
    form = await request.post()
    task, typed = str(form.get("task", "")), str(form.get("signature", ""))
    action_field, reason = str(form.get("action", "")), str(form.get("reason", "")).strip()
    try:
        sig = normalised(task, typed)
    except ValueError as exc:
        return _lookup(request, 400, task, typed, str(exc))
    refused = unpinnable(task, sig)
    if refused is not None:
        return await _signature(request, task, sig, status=400, error=f"Not pinned: {refused}.")
    if action_field not in _ACTIONS or not reason or len(reason) > REASON_MAX or not reason.isprintable():
        error = f"Choose ALLOW, BLOCK or UNPIN and give a reason (one line, up to {REASON_MAX} characters)."
        return await _signature(request, task, sig, status=400, error=error)
    action = PinAction(action_field)
    target = f"{task}|{sig}"
    record = await audit(request, Action.PIN, Outcome.OK, target=target, pin=action.value, reason=reason)
    operator = request[SESSION].user
    pinned = pin_record(task, sig, action, operator, reason, record.action_id, record.event_time)
    try:
        await request.app[EXPLORER].publisher.publish(pinned)
    except NotAcknowledged:
        await record_refusal(
            request, Action.PIN, target=target, reason="not acknowledged", pin_id=record.action_id
        )
        raise
    raise web.HTTPSeeOther(_signature_url(request, task, sig, pinned=action.value))


def add_routes(app: web.Application, explorer: Explorer) -> None:
    """The memory explorer's pages, around ``explorer``."""
    app[EXPLORER] = explorer
    app.router.add_get(PAGE.path, lookup_page)
    app.router.add_get(PAGE.path + "/signature", signature_page, name="memory-signature")
    app.router.add_get(PAGE.path + "/candidate/{candidate_id}", candidate_page)
    app.router.add_post(PAGE.path + "/pin", pin)
