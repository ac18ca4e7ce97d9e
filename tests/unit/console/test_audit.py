"""The Kafka audit trail refuses an action whose record is not acknowledged in time, and librdkafka gives
the record up then (it is never delivered after its action was refused)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from schemas.console import ConsoleAction
from schemas.wire import make_serde
from streams.console import delivery
from streams.console.audit import AuditUnavailable, KafkaAuditTrail


def test_a_record_no_broker_acknowledges_raises_audit_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery, "ACK_TIMEOUT_S", 0.5)
    trail = KafkaAuditTrail("127.0.0.1:1", make_serde(None))  # nothing listens on port 1
    action = ConsoleAction(
        action_id="a-1", event_time=datetime(2026, 5, 4, tzinfo=UTC), user="ph", role="pharmacist",
        action="sign-in", target="/login", detail="{}", outcome="ok",
    )  # fmt: skip
    try:
        with pytest.raises(AuditUnavailable, match=r"not acknowledged: .*timed out"):
            asyncio.run(trail.record(action))
    finally:
        trail.close()
