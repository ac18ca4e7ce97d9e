"""The DBPM memory as small records in an ordered key-value store (layout, codecs, lazy decay).

Why records and not one document. The paper's reference keeps the whole memory in one JSON file and
rewrites it every 200 events, so the cost of an event grows with the memory. Here every pattern,
whitelist entry, preempted entity and patient counter is its own key, and an event touches a constant
number of them: per-event cost is O(1) in the number of stored signatures (constraint C1, §3.3), and
the store can hold millions of signatures.

Lazy, exact wall-clock decay (Eq. 5). A pattern stores its severity *at a reference time* and never a
decayed copy. Its effective severity at event time t is ``sev * 2 ** (-(t - ref) / h_t)``, computed
on read. Reading, saving or pruning therefore never decays twice, and no result depends on how often
state is saved. An update first takes the effective severity at the event time, applies Eq. 3 to it
and stores the result with the event time as the new reference. An event older than a record's
reference time decays nothing (``t - ref`` is clamped at 0) and leaves the reference unchanged.

Eviction index. Caps evict the lowest *effective* severity. With one half-life per task,
``log2(eff(t)) = log2(sev) + ref / h - t / h``, so ordering patterns by the time-invariant key
``log2(sev) + ref / h`` orders them by effective severity at every instant t. Each pattern has a live
index entry under that key (8 order-preserving bytes, then the signature to break ties); pruning walks
the index from the bottom until the first entry at or above the floor and eviction pops from the
bottom, so maintenance costs O(log n + k) for k removed (or stale, see :meth:`Memory.index_walk`)
entries, never a scan. (Key precision is ~1e-12 in log2 units for present-day timestamps; patterns
that close in severity may be ordered by signature instead.)

Values are fixed-layout ``struct`` records (a pattern is 39 bytes plus its QA category): measured
against JSON lists on this engine's pattern record, packing plus unpacking is ~15x faster and the
value ~40% smaller, and it needs no extra dependency.

Counts are kept incrementally: the population of each (table, task) and, for QA, the per-category
observation counts of Eq. 7, so reports, caps and the QA fallback never scan the memory.

Key layout (first byte = table; task names and signatures are UTF-8):

==================================  =========================================================
``B`` task NUL signature            blocklist pattern: severity, ref time, last seen, count,
                                    κ, κ ref time, source bits, then the QA category (UTF-8)
``W`` task NUL signature            whitelist entry: confidence, last seen, count, QA category
``O`` task NUL signature            an operator's pin (:mod:`.pins`): action, time, operator,
                                    reason, pin id (a JSON list)
``I`` task NUL order8 signature     eviction index (empty value)
``L`` task NUL                      eviction index low-water mark (order8 <= every index key)
``P`` entity                        NER-to-RE preemption set: when last preempted
``D`` patient                       patient counters: upstream hard fails, NER yield (Eq. 8)
``C`` len16 patient category        a patient's accepted NER category (empty value)
``T`` patient                       when the patient's ``D``/``C`` records were last written
``X`` kind order8(time) key         retention index of ``W``, ``P`` and ``T`` records by their
                                    last-seen time (empty value; :mod:`.retention`)
``Q`` category                      QA category counts: classified fails, fails, successes
``N`` table task                    population of a table for a task; ``NP``, ``NT``: preempted
                                    entities and patients held; ``NX`` kind: records expired
``Mclock``                          latest event time applied, last maintenance boundary index
``V`` / ``E``                       verdict ledger and its expiry index (:mod:`.ledger`)
==================================  =========================================================

Size: :class:`Memory` owns this key layout and these record codecs (the verdict ledger,
:mod:`.ledger`, keeps its own ``V``/``E`` records beside them); the layout, the codecs, the eviction
index and the incremental counts change together, so they stay in one module with it.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator, Mapping
from typing import NamedTuple, Protocol

from processors.dbpm.config import QA, RULE_BASED, DBPMConfig
from processors.dbpm.signatures import is_qa_class
from state.base import prefix_end

_BLOCK = struct.Struct("<dddIHdB")
_WHITE = struct.Struct("<ddI")
_PAIR = struct.Struct("<QQ")
_TRIPLE = struct.Struct("<QQQ")
_COUNT = struct.Struct("<Q")
_TIME = struct.Struct("<d")
_CLOCK = struct.Struct("<dq")
_LEN16 = struct.Struct("<H")
_ORDER = struct.Struct(">Q")
_SIGN = 1 << 63
_MASK = (1 << 64) - 1

_META_CLOCK = b"Mclock"

#: Retention kinds (:mod:`.retention`), each its table's first key byte: whitelist entries, preempted
#: entities, patients' last writes.
KIND_WHITE = b"W"
KIND_PREEMPTED = b"P"
KIND_PATIENT = b"T"
_NO_TICK = -(1 << 63)

#: Source-provenance bits of a pattern (which kinds of signal contributed to it).
SOURCE_VERIFIER = 1
SOURCE_RULE_BASED = 2
SOURCE_CROSS_TASK = 4
SOURCE_SELF = 8
SOURCE_OTHER = 16
_SOURCE_NAMES = (
    (SOURCE_VERIFIER, "verifier"),
    (SOURCE_RULE_BASED, "rule_based"),
    (SOURCE_CROSS_TASK, "cross_task"),
    (SOURCE_SELF, "verifier_self"),
    (SOURCE_OTHER, "other"),
)


def source_bit(source: str) -> int:
    """The provenance bit of a Table 4 source label."""
    if source == "verifier_mmed":
        return SOURCE_VERIFIER
    if source == RULE_BASED:
        return SOURCE_RULE_BASED
    if source.startswith("cross_task"):
        return SOURCE_CROSS_TASK
    if source == "verifier_self":
        return SOURCE_SELF
    return SOURCE_OTHER


def source_names(bits: int) -> tuple[str, ...]:
    """The names of the provenance bits set in ``bits``, in a fixed order."""
    return tuple(name for bit, name in _SOURCE_NAMES if bits & bit)


class KeyValue(Protocol):
    """What the engine needs from its state: a :class:`state.base.Transaction` satisfies it."""

    def get(self, key: bytes) -> bytes | None: ...
    def exists(self, key: bytes) -> bool: ...
    def set(self, key: bytes, value: bytes) -> None: ...
    def delete(self, key: bytes) -> None: ...
    def iter_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]: ...
    def iter_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]: ...


class Pattern(NamedTuple):
    """A blocklist pattern (§4.3): severity at ``ref_time``, observations, κ and provenance."""

    severity: float
    ref_time: float
    last_seen: float
    count: int
    kappa: int
    kappa_ref: float
    sources: int
    category: str


class WhiteEntry(NamedTuple):
    """A whitelist entry (§4.3): confidence, observations, last seen, QA category."""

    confidence: float
    last_seen: float
    count: int
    category: str


class Pin(NamedTuple):
    """An operator's pin of a signature (:mod:`.pins`): its candidates are decided ``action``."""

    action: str
    time: float
    operator: str
    reason: str
    pin_id: str


def decayed(severity: float, ref_time: float, now: float, half_life_s: float) -> float:
    """Eq. 5 evaluated lazily: ``severity * 2 ** (-(now - ref_time) / h)``, no growth backwards."""
    elapsed = now - ref_time
    if elapsed <= 0.0:
        return severity
    return severity * 2.0 ** (-elapsed / half_life_s)


def order8(value: float) -> bytes:
    """``value`` as 8 bytes whose byte order is the numeric order (every double but NaN, negatives too)."""
    (bits,) = _ORDER.unpack(struct.pack(">d", value))
    return _ORDER.pack((bits ^ _MASK) if bits & _SIGN else (bits | _SIGN))


def order_key(severity: float, ref_time: float, half_life_s: float, slack: float = 0.0) -> bytes:
    """The time-invariant eviction order ``log2(sev) + ref / h`` (+ ``slack``) as 8 order-preserving bytes."""
    return order8(math.log2(severity) + ref_time / half_life_s + slack if severity > 0.0 else -math.inf)


def half_lives(config: DBPMConfig) -> dict[str, float]:
    """Per-task wall-clock half-lives of Eq. 5 in seconds."""
    return {task: p.half_life_days * 86400.0 for task, p in config.tasks.items()}


def _tag(task: str) -> bytes:
    return task.encode() + b"\x00"


class Memory:
    """Typed access to the DBPM records of one state transaction (no caching: reads are live).

    Every method reads or writes through the passed-in key-value object only; a Memory holds no
    state of its own, so creating one per event is free and a gate always sees the latest write.
    """

    __slots__ = ("_half_life_s", "config", "kv")

    def __init__(
        self, kv: KeyValue, config: DBPMConfig, half_lives_s: Mapping[str, float] | None = None
    ) -> None:
        """Bind ``config`` to ``kv``; the per-task half-lives in seconds may be precomputed by the caller."""
        self.kv = kv
        self.config = config
        self._half_life_s = half_lives_s if half_lives_s is not None else half_lives(config)

    # -- blocklist ---------------------------------------------------------------------------

    def half_life_s(self, task: str) -> float:
        """The task's wall-clock half-life in seconds (Eq. 5)."""
        return self._half_life_s[task]

    def pattern(self, task: str, sig: str) -> Pattern | None:
        """The blocklist pattern of ``sig`` on ``task`` as stored (not decayed), or None."""
        raw = self.kv.get(b"B" + _tag(task) + sig.encode())
        if raw is None:
            return None
        return Pattern(*_BLOCK.unpack_from(raw), raw[_BLOCK.size :].decode())

    def severity(self, task: str, pattern: Pattern | None, now: float) -> float:
        """The effective severity B(σ, t) at ``now`` (0 for an absent pattern)."""
        if pattern is None:
            return 0.0
        return decayed(pattern.severity, pattern.ref_time, now, self._half_life_s[task])

    def kappa(self, pattern: Pattern | None, now: float) -> int:
        """The effective cross-task hit counter κ: minus one per maintenance boundary since raised.

        Without maintenance κ never decays (``--no-maintenance``).
        """
        if pattern is None:
            return 0
        if not self.config.flags.maintenance or pattern.kappa == 0:
            return pattern.kappa
        interval = self.config.maintenance_interval_s
        crossed = math.floor(now / interval) - math.floor(pattern.kappa_ref / interval)
        return max(0, pattern.kappa - max(0, crossed))

    def put_pattern(self, task: str, sig: str, new: Pattern, old: Pattern | None) -> None:
        """Store ``new`` over ``old`` (as read in this transaction), keeping index and counts in step.

        The old index entry is left in place (it becomes stale, see :meth:`index_walk`).
        """
        sig_bytes = sig.encode()
        tag = _tag(task)
        if old is None:
            self._bump(b"NB" + tag, 1)
        self.kv.set(b"B" + tag + sig_bytes, _BLOCK.pack(*new[:7]) + new.category.encode())
        order = order_key(new.severity, new.ref_time, self._half_life_s[task])
        self.kv.set(b"I" + tag + order + sig_bytes, b"")
        low = self.kv.get(b"L" + tag)
        if low is None or order < low:
            self.kv.set(b"L" + tag, order)
        if task == QA:
            delta = new.count - (old.count if old is not None else 0)
            classified = delta if is_qa_class(sig) else 0
            self._bump_qa(new.category, classified, delta, 0)

    def delete_pattern(self, task: str, sig: str, old: Pattern) -> None:
        """Remove a pattern (pruning, eviction) with its current index entry and counts."""
        sig_bytes = sig.encode()
        tag = _tag(task)
        self.kv.delete(b"B" + tag + sig_bytes)
        self.kv.delete(
            b"I" + tag + order_key(old.severity, old.ref_time, self._half_life_s[task]) + sig_bytes
        )
        self._bump(b"NB" + tag, -1)
        if task == QA:
            self._bump_qa(old.category, -old.count if is_qa_class(sig) else 0, -old.count, 0)

    def index_walk(self, task: str) -> Iterator[tuple[bytes, bytes, str, Pattern | None]]:
        """Index entries of ``task`` from the low-water mark up: ``(key, order8, signature, pattern)``.

        ``pattern`` is None for a *stale* entry (its pattern was updated to another key or removed);
        the caller may delete stale keys. The caller MUST NOT write while consuming the iterator.

        Why stale entries: deleting the old entry on every update would leave a RocksDB tombstone
        among the live entries, and each maintenance walk would wade through all of them, a cost that
        grows with the stream's history. With the paper's constants an update does not lower a
        pattern's key (the new severity is at least the effective one and the reference time only
        moves forward), so stale entries sit below their pattern's live entry; maintenance walks from
        the bottom, deletes the stale ones it meets (their tombstones then lie below the low-water
        mark, which seeks skip) and reaches every stale entry once its key falls under the prune
        limit. Correctness does not rely on that order, only the cost does.
        """
        prefix = b"I" + _tag(task)
        skip = len(prefix) + _ORDER.size
        half_life = self._half_life_s[task]
        low = self.low_water(task)
        start = prefix if low is None else prefix + low
        for key, _ in self.kv.iter_range(start, prefix_end(prefix)):
            order = key[len(prefix) : skip]
            sig = key[skip:].decode()
            pattern = self.pattern(task, sig)
            if pattern is not None and order_key(pattern.severity, pattern.ref_time, half_life) != order:
                pattern = None
            yield key, order, sig, pattern

    def lowest(self, task: str) -> Iterator[tuple[str, Pattern]]:
        """Live patterns of ``task`` in ascending effective severity (ties: signature), lazily."""
        for _, _, sig, pattern in self.index_walk(task):
            if pattern is not None:
                yield sig, pattern

    def above(self, task: str, floor: float, now: float) -> Iterator[tuple[str, Pattern]]:
        """Live patterns of ``task`` whose effective severity at ``now`` exceeds ``floor``, via the index.

        The index key orders patterns by effective severity at every instant, so the patterns above
        ``floor`` at ``now`` are exactly the live entries from ``order_key(floor, now, h)`` up: the walk
        costs the patterns above the floor plus the stale entries among them (see :meth:`index_walk`),
        not the whole memory. Order: ascending effective severity.
        """
        prefix = b"I" + _tag(task)
        skip = len(prefix) + _ORDER.size
        half_life = self._half_life_s[task]
        start = prefix + order_key(floor, now, half_life)
        for key, _ in self.kv.iter_range(start, prefix_end(prefix)):
            sig = key[skip:].decode()
            pattern = self.pattern(task, sig)
            order = key[len(prefix) : skip]
            if pattern is None or order_key(pattern.severity, pattern.ref_time, half_life) != order:
                continue  # stale entry
            if self.severity(task, pattern, now) > floor:
                yield sig, pattern

    def low_water(self, task: str) -> bytes | None:
        """The task's index low-water mark: at or below every index entry (None: no entry yet)."""
        return self.kv.get(b"L" + _tag(task))

    def set_low_water(self, task: str, order: bytes | None = None) -> None:
        """Raise the task's index low-water mark to ``order`` (default: its lowest index entry).

        The mark MUST stay at or below every index entry (puts lower it), so walks seek straight
        past the deleted region below it. Maintenance passes the order of the first entry it kept.
        """
        if order is None:
            first = next(self.index_walk(task), None)
            if first is None:
                return
            order = first[1]
        self.kv.set(b"L" + _tag(task), order)

    def patterns(self, task: str, starting: str = "") -> Iterator[tuple[str, Pattern]]:
        """The patterns of ``task`` whose signature starts with ``starting`` (default: all), in
        signature order (reports, exports, and a QA category's error-class patterns)."""
        prefix = b"B" + _tag(task)
        for key, raw in self.kv.iter_prefix(prefix + starting.encode()):
            yield key[len(prefix) :].decode(), Pattern(*_BLOCK.unpack_from(raw), raw[_BLOCK.size :].decode())

    # -- whitelist ---------------------------------------------------------------------------

    def is_whitelisted(self, task: str, sig: str) -> bool:
        """σ ∈ W_t: the signature has a whitelist entry on ``task``."""
        return self.kv.exists(b"W" + _tag(task) + sig.encode())

    def white(self, task: str, sig: str) -> WhiteEntry | None:
        """The whitelist entry of ``sig`` on ``task``, or None."""
        raw = self.kv.get(b"W" + _tag(task) + sig.encode())
        if raw is None:
            return None
        return WhiteEntry(*_WHITE.unpack_from(raw), raw[_WHITE.size :].decode())

    def put_white(self, task: str, sig: str, new: WhiteEntry, old: WhiteEntry | None) -> None:
        """Store a whitelist entry, keeping counts and its retention index entry in step."""
        name = _tag(task) + sig.encode()
        if old is None:
            self._bump(b"NW" + _tag(task), 1)
        self._reindex(KIND_WHITE, name, None if old is None else old.last_seen, new.last_seen)
        self.kv.set(b"W" + name, _WHITE.pack(*new[:3]) + new.category.encode())
        if task == QA:
            self._bump_qa(new.category, 0, 0, new.count - (old.count if old is not None else 0))

    def whites(self, task: str) -> Iterator[tuple[str, WhiteEntry]]:
        """All whitelist entries of ``task`` in signature order."""
        prefix = b"W" + _tag(task)
        for key, raw in self.kv.iter_prefix(prefix):
            yield (
                key[len(prefix) :].decode(),
                WhiteEntry(*_WHITE.unpack_from(raw), raw[_WHITE.size :].decode()),
            )

    # -- operator pins (:mod:`.pins`) -----------------------------------------------------------

    def pin(self, task: str, sig: str) -> Pin | None:
        """The operator's pin of ``sig`` on ``task``, or None."""
        raw = self.kv.get(b"O" + _tag(task) + sig.encode())
        if raw is None:
            return None
        action, time, operator, reason, pin_id = json.loads(raw)
        return Pin(action, time, operator, reason, pin_id)

    def put_pin(self, task: str, sig: str, pin: Pin) -> None:
        """Pin ``sig`` on ``task`` (replacing its pin, if any)."""
        self.kv.set(b"O" + _tag(task) + sig.encode(), json.dumps(list(pin)).encode())

    def delete_pin(self, task: str, sig: str) -> None:
        """Remove the pin of ``sig`` on ``task`` (nothing if it has none)."""
        self.kv.delete(b"O" + _tag(task) + sig.encode())

    # -- counts ------------------------------------------------------------------------------

    def population(self, table: str, task: str) -> int:
        """Number of records of ``table`` (``"B"`` blocklist, ``"W"`` whitelist) for ``task``."""
        raw = self.kv.get(b"N" + table.encode() + _tag(task))
        return 0 if raw is None else _COUNT.unpack(raw)[0]

    def _bump(self, key: bytes, delta: int) -> None:
        raw = self.kv.get(key)
        self.kv.set(key, _COUNT.pack((0 if raw is None else _COUNT.unpack(raw)[0]) + delta))

    def qa_counts(self, category: str) -> tuple[int, int, int]:
        """Eq. 7 inputs of a QA category: classified-fail count, all-fail count, success count."""
        raw = self.kv.get(b"Q" + category.encode())
        return (0, 0, 0) if raw is None else _TRIPLE.unpack(raw)

    def _bump_qa(self, category: str, classified: int, fails: int, successes: int) -> None:
        key = b"Q" + category.encode()
        a, b, c = self.qa_counts(category)
        self.kv.set(key, _TRIPLE.pack(a + classified, b + fails, c + successes))

    # -- preemption set (§4.4) ----------------------------------------------------------------

    def is_preempted(self, entity_sig: str) -> bool:
        """The entity signature is in the NER-to-RE preemption set."""
        return self.kv.exists(b"P" + entity_sig.encode())

    def preempt(self, entity_sig: str, now: float) -> None:
        """Add an entity signature to the preemption set, or renew it, at event time ``now`` (§4.4)."""
        self._touch(KIND_PREEMPTED, entity_sig.encode(), now)

    def preempted(self) -> Iterator[str]:
        """The preemption set in signature order."""
        for key, _ in self.kv.iter_prefix(b"P"):
            yield key[1:].decode()

    # -- per-patient state (Eq. 8, Eq. 9) -----------------------------------------------------

    def patient_counts(self, patient_id: str) -> tuple[int, int]:
        """(upstream hard fails, NER yield) of a patient, the inputs of Eq. 8."""
        raw = self.kv.get(b"D" + patient_id.encode())
        return (0, 0) if raw is None else _PAIR.unpack(raw)

    def add_patient_counts(self, patient_id: str, rejections: int, yields: int) -> None:
        """Add to a patient's Eq. 8 counters."""
        rej, yld = self.patient_counts(patient_id)
        self.kv.set(b"D" + patient_id.encode(), _PAIR.pack(rej + rejections, yld + yields))

    def touch_patient(self, patient_id: str, now: float) -> None:
        """Record that the patient's records were written at event time ``now`` (their retention clock)."""
        self._touch(KIND_PATIENT, patient_id.encode(), now)

    def _category_key(self, patient_id: str, category: str) -> bytes:
        pid = patient_id.encode()
        return b"C" + _LEN16.pack(len(pid)) + pid + category.encode()

    def add_patient_category(self, patient_id: str, category: str) -> None:
        """Record an accepted NER category (normalised lower-case) for a patient."""
        self.kv.set(self._category_key(patient_id, category), b"")

    def has_patient_category(self, patient_id: str, category: str) -> bool:
        """The patient has an accepted NER fact in ``category`` (normalised lower-case)."""
        return self.kv.exists(self._category_key(patient_id, category))

    def patient_categories(self, patient_id: str) -> tuple[str, ...]:
        """The patient's accepted NER categories (normalised lower-case), sorted."""
        prefix = self._category_key(patient_id, "")
        # Categories are UTF-8, which never holds the byte 0xff; the length field keeps other ids out.
        keys = self.kv.iter_range(prefix, prefix + b"\xff")
        return tuple(sorted({k[len(prefix) :].decode() for k, _ in keys}))

    # -- retention (:mod:`.retention`) ----------------------------------------------------------

    def _touch(self, table: bytes, name: bytes, now: float) -> None:
        """Set the last-seen time of a ``P`` or ``T`` record to ``now`` unless it is already later,
        counting a new record and moving its retention index entry."""
        raw = self.kv.get(table + name)
        last = None if raw is None else _TIME.unpack(raw)[0]
        if last is None:
            self._bump(b"N" + table, 1)
        elif now <= last:
            return
        self._reindex(table, name, last, now)
        self.kv.set(table + name, _TIME.pack(now))

    def _reindex(self, kind: bytes, name: bytes, old: float | None, new: float) -> None:
        if old == new:
            return
        if old is not None:
            self.kv.delete(b"X" + kind + order8(old) + name)
        self.kv.set(b"X" + kind + order8(new) + name, b"")

    def last_seen_before(self, kind: bytes, cutoff: float) -> list[bytes]:
        """The names (key without its table byte) of ``kind``'s records last seen before ``cutoff``."""
        start = b"X" + kind
        skip = len(start) + _ORDER.size
        return [key[skip:] for key, _ in self.kv.iter_range(start, start + order8(cutoff))]

    def expire(self, kind: bytes, name: bytes) -> None:
        """Delete a record of ``kind`` found by :meth:`last_seen_before`, its index entry and its counts.

        A patient's expiry deletes its ``D`` counters and every accepted category ``C`` with it.
        """
        if kind == KIND_WHITE:
            raw = self.kv.get(b"W" + name)
            if raw is None:
                return
            last = _WHITE.unpack_from(raw)[1]
            self.kv.delete(b"W" + name)
            self._bump(b"NW" + name[: name.index(b"\x00") + 1], -1)
        else:
            raw = self.kv.get(kind + name)
            if raw is None:
                return
            (last,) = _TIME.unpack(raw)
            self.kv.delete(kind + name)
            self._bump(b"N" + kind, -1)
            if kind == KIND_PATIENT:
                self.kv.delete(b"D" + name)
                prefix = b"C" + _LEN16.pack(len(name)) + name
                for key, _ in list(self.kv.iter_range(prefix, prefix + b"\xff")):
                    self.kv.delete(key)
        self.kv.delete(b"X" + kind + order8(last) + name)
        self._bump(b"NX" + kind, 1)

    def held(self, table: bytes) -> int:
        """How many records of ``table`` are held: ``b"P"`` preempted entities, ``b"T"`` patients."""
        raw = self.kv.get(b"N" + table)
        return 0 if raw is None else _COUNT.unpack(raw)[0]

    def expired(self, kind: bytes) -> int:
        """How many records of ``kind`` retention has deleted so far."""
        raw = self.kv.get(b"NX" + kind)
        return 0 if raw is None else _COUNT.unpack(raw)[0]

    # -- metadata -----------------------------------------------------------------------------

    def clock(self) -> tuple[float | None, int | None]:
        """``(as_of, tick)``: the latest event time applied and the last maintenance boundary index.

        Both live in one record so the per-event bookkeeping is one read and at most one write.
        """
        raw = self.kv.get(_META_CLOCK)
        if raw is None:
            return None, None
        as_of, tick = _CLOCK.unpack(raw)
        return (None if math.isnan(as_of) else as_of), (None if tick == _NO_TICK else tick)

    def set_clock(self, as_of: float | None, tick: int | None) -> None:
        """Record the latest event time and the last maintenance boundary index."""
        self.kv.set(
            _META_CLOCK, _CLOCK.pack(math.nan if as_of is None else as_of, _NO_TICK if tick is None else tick)
        )
