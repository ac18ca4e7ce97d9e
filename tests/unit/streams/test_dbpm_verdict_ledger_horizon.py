"""The verdict ledger's horizon and the verdict topic's retention are the same span.

A duplicate can only be re-delivered while its original's topic still holds the re-issued call's
input; the engine forgets a candidate's verdict after ``verdict_dedupe_horizon_s`` of event time
(:mod:`processors.dbpm.ledger`). The two are set in different layers (processors never import the
topic catalog), so this test keeps them from drifting apart.
"""

from __future__ import annotations

from processors.dbpm import DBPMConfig
from topics.catalog import CATALOG, DBPM_VERDICTS


def test_the_dedupe_horizon_is_the_verdict_topics_retention():
    assert DBPMConfig().verdict_dedupe_horizon_s * 1000 == CATALOG.get(DBPM_VERDICTS).retention_ms
