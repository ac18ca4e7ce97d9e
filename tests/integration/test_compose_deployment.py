"""The compose deployment (deploy/compose) runs on the images built here and loses nothing.

Scenario (:mod:`streams.demo.compose`): three SASL_SSL brokers, the provisioning one-shots, two
workers, the docs worker, the LLM groups and Prometheus come up on this checkout's images, each
process as its own principal; the demo's DBPM narratives, FHIR timeline with golden bundles and
reviews, and classification requests are published as ``clingate-upstream`` while a broker container
is killed and started again. Read as ``clingate-downstream``: every candidate decided once, the clinical
assessments the pure processor's, each once, every document's disposition the rules-only arbiter's,
once; Prometheus scrapes every clingate process.
"""

from __future__ import annotations

import pytest

from streams.demo.compose import rehearse, unavailable
from streams.runtime.settings import get_settings

REASON = unavailable(get_settings())

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(900),
    pytest.mark.skipif(REASON is not None, reason=f"the compose deployment cannot run here: {REASON}"),
]


def test_the_compose_deployment_carries_the_demo_streams_through_a_broker_kill() -> None:
    result = rehearse()
    print(result.figures)
    assert result.failures == []
