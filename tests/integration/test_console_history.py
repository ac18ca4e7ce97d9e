"""The console's read-back of its audit trail on a real broker: the first call reads the trail, each later
call only what was recorded since, and the actions come back in the order each person recorded them,
other kinds than the read-back ones left out; a record read by an earlier call is never returned twice."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest

from schemas.console import ConsoleAction
from schemas.wire import make_serde
from streams.console.audit import Action, KafkaAuditTrail
from streams.console.history import KafkaHistory
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import Settings
from topics.admin import ensure_topics
from topics.catalog import build_catalog

pytestmark = pytest.mark.integration


def _action(user: str, action: Action, target: str, outcome: str = "ok") -> ConsoleAction:
    return ConsoleAction(
        action_id=uuid.uuid4().hex, event_time=datetime.now(UTC), user=user, role="operator",
        action=action.value, target=target, detail="{}", outcome=outcome,
    )  # fmt: skip


def test_the_history_reads_the_trail_then_only_what_was_recorded_since(kafka_bootstrap: str) -> None:
    ensure_topics(admin_client(kafka_bootstrap), build_catalog(Settings().topic_partitions))
    serde = make_serde(None)
    run = uuid.uuid4().hex[:8]
    ops, dr = f"ops-{run}", f"dr-{run}"
    trail = KafkaAuditTrail(kafka_bootstrap, serde)
    history = KafkaHistory(kafka_bootstrap, serde)

    async def mine(kinds: set[Action]) -> list[tuple[str, str, str]]:
        found = await history.actions(kinds)
        return [(a.user, a.target, a.outcome) for a in found if a.user in (ops, dr)]

    async def main() -> None:
        await trail.record(_action(ops, Action.SIGN_IN, "/login"))
        await trail.record(_action(ops, Action.REDRIVE, "a.dlq[0]@1"))
        await trail.record(_action(dr, Action.ASK, "turn-1"))
        assert await mine({Action.REDRIVE}) == [(ops, "a.dlq[0]@1", "ok")]
        await trail.record(_action(ops, Action.REDRIVE, "a.dlq[0]@1", "refused"))
        await trail.record(_action(dr, Action.ASK, "turn-2"))
        assert await mine({Action.REDRIVE}) == [(ops, "a.dlq[0]@1", "ok"), (ops, "a.dlq[0]@1", "refused")]
        assert await mine({Action.ASK}) == [(dr, "turn-1", "ok"), (dr, "turn-2", "ok")]
        both = await mine({Action.REDRIVE, Action.ASK})
        assert sorted(both) == sorted([*await mine({Action.REDRIVE}), *await mine({Action.ASK})])
        with pytest.raises(ValueError, match="read back"):
            await history.actions({Action.SIGN_IN})

    try:
        asyncio.run(main())
    finally:
        trail.close()
