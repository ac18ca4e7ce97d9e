"""``clingate bench console --hostile``'s short form on the session broker: a console of its own, every
attack of the hostile client replayed with small counts, and each held. The forged Kafka write needs the
console's credentials on a secured cluster, which the session broker is not: it is reported as not run here
(``tests/integration/test_security_acls.py`` proves the broker refuses it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.bench.hostile import SHORT, hostile_bench

pytestmark = pytest.mark.integration


def test_the_hostile_client_finds_every_attack_held(kafka_bootstrap: str, tmp_path: Path) -> None:
    attacks = hostile_bench(kafka_bootstrap, tmp_path, SHORT)
    assert [a.name for a in attacks] == [
        "sign-in flood", "lockout campaign", "name spray", "swapped name and password",
        "CSRF-failing post flood", "anonymous session flood", "malformed requests", "ids with '/'",
        "software versions", "weak passwords", "forged Kafka write",
    ]  # fmt: skip
    assert not [a for a in attacks if a.held is False], "\n".join(f"{a.name}: {a.detail}" for a in attacks)
    forged = attacks[-1]
    assert forged.held is None and "no Kafka credentials" in forged.detail
