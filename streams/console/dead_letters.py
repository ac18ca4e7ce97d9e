"""The operator's dead-letter pages: every dead-letter topic with its count, a topic's records newest
first, one record whole, and its re-drive to the topic it came from.

What holds:

* **What is shown.** Each dead letter with the reason (stage, error type, error), the original record's
  coordinates (topic, partition, offset), the schema the stage expected, and the original key, value and
  headers as a safe preview (:func:`preview`: UTF-8 text when the bytes are text, else hex, cut to a
  bound that says how much it left out), and every cut the dead-letter route made to fit its topic
  (``truncations``). Everything is text to the templates: a hostile value or reason is escaped.
* **A re-drive** asks for one dead letter to be produced again to the partition of its source topic it
  came from (keyed as it was, with its value and its headers), after its cause was fixed; the operator
  says what was fixed (a note, required). It is recorded on the audit trail first (action ``redrive``, the
  target the dead letter's coordinates, the source coordinates and the note in ``detail``); only once that
  is acknowledged is the request published (:mod:`streams.console.requests`, with the audit record's id):
  the console's principal may not write the source topic. The request runtime checks it again (the dead
  letter, the operator's role, the record's schema, its source record) and produces it with the
  :data:`~streams.requests.check.REDRIVE_PREFIX` headers naming the dead letter, the operator, the time
  and the audit record, or refuses it, and records the outcome on ``clingate.console.request-outcomes``.
  A request Kafka does not acknowledge answers 503 and is recorded again as ``refused``. Downstream, the
  record is processed as any other: one that is still bad is dead-lettered again, under new coordinates.
* **Refused re-drives** (nothing produced, nothing recorded): a dead letter that is not whole (a field was
  cut to fit: the original is only at its source coordinates, until the source topic's retention), one
  without a value (a tombstone), one whose source is not the topic its dead-letter topic belongs to, one
  already re-driven (409); a missing note (400). "Already re-driven" is read from the audit trail and the
  request runtime's outcomes (:func:`streams.console.history.asked`): a dead letter's re-drive was asked
  for when the last ``redrive`` record of some person on it is ``ok``, unless the runtime refused that
  request (then it may be asked for again once what the refusal names is fixed; the record's page shows
  the refusal). One console asks for one request at a time (:data:`~streams.console.requests.ASKING`
  around the check and the request), so two operators' clicks cannot both pass the check; the runtime
  refuses a second re-drive of a dead letter whatever asks for it.
* **Coordinates are Kafka's numbers**: a partition and an offset are ASCII digits below Kafka's bounds
  (:data:`PARTITION_BOUND`, :data:`OFFSET_BOUND`), in the path (else 404: no such dead letter) as in the
  query (``?partition=``, ``?before=``: else 400), so that no request reaches Kafka with a number it cannot
  take (``²`` is a digit to ``str.isdigit`` and none to ``int``; 5,000 digits are too many for ``int``).
"""

from __future__ import annotations

import binascii
from dataclasses import dataclass

from aiohttp import web

from schemas.console import ConsoleAction, ConsoleRequest, ConsoleRequestOutcome, Role
from streams.console.audit import Action, Outcome, audit, record_refusal
from streams.console.auth import requires
from streams.console.dead_letter_queues import DEAD_LETTERS, Letter
from streams.console.delivery import NotAcknowledged
from streams.console.history import HISTORY, asked
from streams.console.pages import PageLink, render
from streams.console.requests import ASKING, REQUESTS
from streams.requests.check import DEAD_LETTER_QUEUES, REDRIVE_PREFIX, REFUSED, RequestAction

PAGE = PageLink("/dead-letters", "Dead letters", frozenset({Role.OPERATOR}))

NOTE_MAX = 2000
"""The longest note a re-drive takes."""
LIST_PREVIEW_BYTES = 256
"""Bytes of a key, value or header a list page shows."""
RECORD_PREVIEW_BYTES = 64 * 1024
"""Bytes of a key, value or header a record page shows."""

PARTITION_BOUND = 2**31
"""Partitions are below this (Kafka's int32)."""
OFFSET_BOUND = 2**63
"""Offsets are below this (Kafka's int64)."""


@dataclass(frozen=True)
class Preview:
    """Bytes shown safely: as text when they are UTF-8, else as hex; at most a bound of them."""

    kind: str
    """``text``, ``hex`` or ``none`` (no bytes: a null key, value or header)."""
    shown: str
    size: int
    """Bytes in all."""
    limit: int
    """Bytes shown at most."""

    @property
    def cut(self) -> bool:
        """Only the first :attr:`limit` bytes are shown."""
        return self.size > self.limit


def preview(data: bytes | None, limit: int) -> Preview:
    """``data`` as a :class:`Preview` of at most ``limit`` bytes."""
    if data is None:
        return Preview("none", "", 0, limit)
    head = data[:limit]
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return Preview("hex", binascii.hexlify(head, " ").decode(), len(data), limit)
    return Preview("text", head.decode("utf-8", "ignore"), len(data), limit)


async def _redriven(
    request: web.Request,
) -> tuple[dict[str, ConsoleAction], dict[str, ConsoleRequestOutcome]]:
    """The re-drives asked for and not refused (:func:`~streams.console.history.asked`), and the runtime's
    outcomes by id."""
    history = request.app[HISTORY]
    outcomes = await history.outcomes()
    return asked(Action.REDRIVE, await history.actions({Action.REDRIVE}), outcomes), outcomes


def refusal(item: Letter, redriven: ConsoleAction | None) -> str | None:
    """Why ``item`` cannot be re-driven (None: it can)."""
    letter = item.letter
    if letter is None:
        return f"This record is not a dead letter ({item.unreadable}): there is nothing to re-drive."
    if letter.truncations:
        cut = ", ".join(t.field for t in letter.truncations)
        return (
            f"This dead letter is not whole (its {cut} were cut to fit the dead-letter topic), so it is not "
            f"re-driven: the original is whole only at {letter.topic}[{letter.partition}]@{letter.offset}, "
            "while that topic keeps it."
        )
    if letter.value is None:
        return "This dead letter has no value (the original was a tombstone): there is nothing to re-drive."
    if letter.topic != DEAD_LETTER_QUEUES[item.topic]:
        return f"This dead letter names {letter.topic}, not the source of {item.topic}: it is not re-driven."
    if redriven is not None:
        return f"Already re-driven by {redriven.user} at {redriven.event_time.isoformat()}."
    return None


def number(text: str, bound: int) -> int | None:
    """``text`` as a number below ``bound`` if it is one written in ASCII digits (None: it is not)."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(bound)):
        return None
    value = int(text)
    return value if value < bound else None


def _no_queue(request: web.Request) -> web.Response:
    message = f"{request.match_info['topic']} is not a dead-letter topic of the catalog."
    return render(request, "error.html", status=404, title="No such dead-letter topic", message=message)


def _no_letter(request: web.Request, coordinates: str | None) -> web.Response:
    where = "these coordinates" if coordinates is None else coordinates
    return render(request, "error.html", status=404, title="No such dead letter",
                  message=f"There is no record at {where}.")  # fmt: skip


def _coordinates(request: web.Request) -> tuple[int, int] | None:
    """The partition and offset of the path (None: numbers Kafka has no such record at)."""
    partition = number(request.match_info["partition"], PARTITION_BOUND)
    offset = number(request.match_info["offset"], OFFSET_BOUND)
    return None if partition is None or offset is None else (partition, offset)


@requires(*PAGE.roles)
async def queues_page(request: web.Request) -> web.StreamResponse:
    """``GET /dead-letters``: every dead-letter topic, its record count and its newest record's time."""
    queues = await request.app[DEAD_LETTERS].queues()
    return render(request, "dead_letters.html", title=PAGE.title, queues=queues)


@requires(*PAGE.roles)
async def queue_page(request: web.Request) -> web.StreamResponse:
    """``GET /dead-letters/{topic}[?partition=P&before=O]``: a window of a topic's records, newest first
    (400: ``partition`` or ``before`` is not a partition or an offset)."""
    topic = request.match_info["topic"]
    if topic not in DEAD_LETTER_QUEUES:
        return _no_queue(request)
    partition = number(request.query.get("partition", "0"), PARTITION_BOUND)
    before = request.query.get("before")
    end = None if before is None else number(before, OFFSET_BOUND)
    if partition is None or (before is not None and end is None):
        return render(request, "error.html", status=400, title="Bad request",
                      message="partition and before are a partition number and an offset.")  # fmt: skip
    page = await request.app[DEAD_LETTERS].page(topic, partition, end)
    redriven, _ = await _redriven(request)
    return render(
        request, "dead_letter_queue.html", title=topic, page=page, source=DEAD_LETTER_QUEUES[topic],
        redriven=redriven, preview=preview, limit=LIST_PREVIEW_BYTES,
    )  # fmt: skip


@requires(*PAGE.roles)
async def letter_page(request: web.Request) -> web.StreamResponse:
    """``GET /dead-letters/{topic}/{partition}/{offset}``: one dead letter whole, and the re-drive form."""
    return await _letter(request)


async def _letter(
    request: web.Request, *, status: int = 200, error: str = "", note: str = ""
) -> web.Response:
    topic = request.match_info["topic"]
    if topic not in DEAD_LETTER_QUEUES:
        return _no_queue(request)
    coordinates = _coordinates(request)
    if coordinates is None:
        return _no_letter(request, None)
    partition, offset = coordinates
    item = await request.app[DEAD_LETTERS].letter(topic, partition, offset)
    if item is None:
        return _no_letter(request, f"{topic}[{partition}]@{offset}")
    asked, outcomes = await _redriven(request)
    redriven = asked.get(item.coordinates)
    outcome = None if redriven is None else outcomes.get(redriven.action_id)
    declined = [o for o in outcomes.values() if o.target == item.coordinates and o.outcome == REFUSED]
    return render(
        request, "dead_letter.html", status=status, title=item.coordinates, item=item,
        source=DEAD_LETTER_QUEUES[topic], redriven=redriven, outcome=outcome, declined=declined[-1:],
        refused=refusal(item, redriven),
        error=error, note=note, preview=preview, limit=RECORD_PREVIEW_BYTES, note_max=NOTE_MAX,
        redrive_prefix=REDRIVE_PREFIX,
    )  # fmt: skip


@requires(*PAGE.roles)
async def redrive(request: web.Request) -> web.StreamResponse:
    """``POST /dead-letters/{topic}/{partition}/{offset}``: ask for the dead letter's re-drive (module
    docstring), then back to its page."""
    topic = request.match_info["topic"]
    coordinates = _coordinates(request)
    if topic not in DEAD_LETTER_QUEUES or coordinates is None:
        return await _letter(request)
    partition, offset = coordinates
    note = str((await request.post()).get("note", "")).strip()
    if not note or len(note) > NOTE_MAX:
        return await _letter(
            request,
            status=400,
            note=note,
            error=f"Say what was fixed (a note of 1 to {NOTE_MAX} characters).",
        )
    async with request.app[ASKING]:
        item = await request.app[DEAD_LETTERS].letter(topic, partition, offset)
        if item is None:
            return await _letter(request)
        redriven = (await _redriven(request))[0].get(item.coordinates)
        refused = refusal(item, redriven)
        if refused is not None:
            return await _letter(request, status=409, error=refused, note=note)
        letter = item.letter
        assert letter is not None and letter.value is not None  # refusal() said so
        source = {"topic": letter.topic, "partition": letter.partition, "offset": letter.offset}
        action = await audit(
            request, Action.REDRIVE, Outcome.OK, target=item.coordinates, note=note, **source
        )
        ask = ConsoleRequest(
            request_id=action.action_id, event_time=action.event_time, user=action.user,
            role=action.role or "", action=RequestAction.REDRIVE, target=item.coordinates,
            topic=letter.topic, note=note,
        )  # fmt: skip
        try:
            await request.app[REQUESTS].send(ask)
        except NotAcknowledged:
            await record_refusal(
                request, Action.REDRIVE, target=item.coordinates, reason="not acknowledged", **source
            )
            raise
    raise web.HTTPSeeOther(str(request.rel_url))  # its own page, the path as it came (encoded)


def add_routes(app: web.Application) -> None:
    """The operator's dead-letter pages."""
    app.router.add_get(PAGE.path, queues_page)
    app.router.add_get(PAGE.path + "/{topic}", queue_page)
    app.router.add_get(PAGE.path + "/{topic}/{partition:[0-9]+}/{offset:[0-9]+}", letter_page)
    app.router.add_post(PAGE.path + "/{topic}/{partition:[0-9]+}/{offset:[0-9]+}", redrive)
