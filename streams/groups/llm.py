"""What the two LLM consumer groups share: metered calls, client settings, running a group.

The DBPM loop on Kafka, end to end::

    clingate.dbpm.narratives --generator group--> clingate.dbpm.candidates --gate (clingate worker)-->
    clingate.dbpm.decisions + clingate.dbpm.to-verify --verifier group--> clingate.dbpm.verdicts
    (--memory writer--> memory) + clingate.dbpm.verified

* ``clingate generator`` (:mod:`streams.groups.generator`, group ``CLINGATE_GENERATOR_GROUP_ID``);
* ``clingate worker`` (the DBPM gate, :mod:`streams.worker.gateloop`, and the memory writer,
  :mod:`streams.worker.memory`);
* ``clingate verifier`` (:mod:`streams.groups.verifier`, group ``CLINGATE_VERIFIER_GROUP_ID``).

Each group is a confluent-kafka consumer group of its own running :class:`streams.groups.ordered.OrderedLoop`,
and scales by starting more processes with the same group id. LLM servers come from
``CLINGATE_LLM_URL`` / ``CLINGATE_GENERATOR_URL`` / ``CLINGATE_VERIFIER_URL`` and the ``_MODEL``
variables (:mod:`streams.llm.config`); with a role off, the group refuses to start and says which
variables turn it on (every call would otherwise dead-letter its record).

Running the loop programmatically (for the demo and the tests; every argument has a settings default)::

    import asyncio
    from streams.groups.generator import run_generator
    from streams.groups.verifier import run_verifier
    from streams.runtime.settings import get_settings

    async def main(bootstrap: str) -> None:
        settings = get_settings()          # CLINGATE_LLM_URL and CLINGATE_LLM_MODEL set
        stop = asyncio.Event()             # set it to stop both groups (outputs so far committed)
        await asyncio.gather(
            run_generator(bootstrap, settings, stop=stop),
            run_verifier(bootstrap, settings, stop=stop),
        )

Both also take ``client=`` (an :class:`~streams.llm.LlmClient` of your own, e.g. pointing at
:mod:`streams.llm.serve.testserver`; the caller then closes it), ``metrics=`` (a :class:`LlmGroupMetrics`,
e.g. :func:`new_metrics`, to read the counters) and ``max_in_flight=``; ``run_generator`` takes
``vocabulary=`` (``DrugVocabulary.empty()`` skips the ~2 s dictionary load). Each returns its stopped
:class:`~streams.groups.ordered.OrderedLoop` (``processed`` counts records). Start each group at the end
of its input topics with :func:`streams.replay.kafka.commit_end_offsets` if older records are not its to
process.

Or from the command line, next to ``clingate worker``: ``clingate generator`` and ``clingate verifier``
(each serves ``/metrics`` on its own port, ``CLINGATE_GENERATOR_METRICS_PORT`` /
``CLINGATE_VERIFIER_METRICS_PORT``).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry
from pydantic import BaseModel

from schemas.common import Stage
from schemas.serde import Serde
from schemas.wire import make_serde
from streams.groups.metrics import LlmGroupMetrics
from streams.groups.ordered import Handler, OrderedLoop, consumer_config, transactional_producer
from streams.llm import CallType, ChatMessage, LlmClient, LlmFailed, LlmOk, Role
from streams.llm.config import resolve_role
from streams.runtime.core import BatchCore
from streams.runtime.dlq import PRODUCER_LIMITS, Rejected, SourceRecord
from streams.runtime.kafka_clients import ensure_catalog, producer_config
from streams.runtime.metrics import serve
from streams.runtime.progress import ProgressLog
from streams.runtime.settings import Settings

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)


class RoleDisabledError(RuntimeError):
    """The group's LLM role has no server: set the variables the message names."""


@dataclass(frozen=True, slots=True)
class MeteredLlm:
    """The LLM client of one group, counting every call and its latency."""

    client: LlmClient
    metrics: LlmGroupMetrics
    group: str

    async def call(
        self, call_type: CallType, model: type[M], messages: Sequence[ChatMessage]
    ) -> LlmOk[M] | LlmFailed:
        """Make one call (see :meth:`LlmClient.call`) and record its outcome and latency."""
        result = await self.client.call(call_type, model, messages)
        self.metrics.llm.observe(self.group, result)
        return result


def llm_failure(record: SourceRecord, expected_schema: str, failures: Sequence[LlmFailed]) -> Rejected:
    """The dead letter of a record whose LLM work failed (stage ``process``).

    The error type names the failure kinds (``LlmFailed:timeout``); the reason carries the
    clinician-safe message and the operator detail of each failed call (never model output).
    """
    kinds = sorted({f.kind.value for f in failures})
    reason = "; ".join(f"{f.call_type}: {f.kind}: {f.message} ({f.operator_detail})" for f in failures)
    return Rejected(record, Stage.PROCESS, f"LlmFailed:{','.join(kinds)}", reason, None, expected_schema)


def require_role(client: LlmClient, settings: Settings, role: Role) -> None:
    """Raise :class:`RoleDisabledError` when ``client`` has no server for ``role`` (the settings say why)."""
    if not client.enabled(role):
        raise RoleDisabledError(resolve_role(settings, role).status)


async def run_loop(
    bootstrap: str,
    *,
    group_id: str,
    topics: Sequence[str],
    handler: Handler,
    expected_schema: str,
    max_in_flight: int,
    session_timeout_s: float,
    metrics: LlmGroupMetrics,
    group: str,
    serde: Serde,
    stop: asyncio.Event,
) -> OrderedLoop:
    """Run one group member until ``stop`` is set; return its loop (counters) when it stopped."""
    core = BatchCore(
        group_id, consumer_config(bootstrap, group_id, session_timeout_s),
        transactional_producer(producer_config(bootstrap, **PRODUCER_LIMITS), group_id), serde, metrics.loops,
    )  # fmt: skip
    progress = ProgressLog(bootstrap, group_id, topics)
    gauge = metrics.in_flight.labels(group)
    loop = OrderedLoop(
        core, topics, handler, max_in_flight, expected_schema, progress, on_in_flight=gauge.set
    )
    try:
        await loop.run(stop)
    finally:
        progress.close()
    return loop


def new_metrics() -> LlmGroupMetrics:
    """Metrics on a fresh registry (one per group member)."""
    return LlmGroupMetrics(CollectorRegistry())


def default_serde(settings: Settings) -> Serde:
    """The process serde the settings describe."""
    return make_serde(settings.schema_registry_url)


def run_until_signalled(
    runner: Callable[..., Awaitable[OrderedLoop]],
    bootstrap: str,
    settings: Settings,
    metrics_port: int,
    **kwargs: Any,
) -> OrderedLoop:
    """Run one group member (``run_generator`` / ``run_verifier``) until SIGINT or SIGTERM.

    Ensures the catalog topics exist where this process is meant to create them
    (:func:`~streams.runtime.kafka_clients.ensure_catalog`) and serves ``/metrics`` on ``metrics_port``
    (0: not served).
    """
    ensure_catalog(settings, bootstrap)
    metrics = new_metrics()
    if metrics_port:
        serve(metrics.registry, metrics_port, settings.metrics_host)

    async def main() -> OrderedLoop:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        return await runner(bootstrap, settings, stop=stop, metrics=metrics, **kwargs)

    return asyncio.run(main())
