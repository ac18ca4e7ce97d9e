"""The DBPM memory agent: :class:`~streams.worker.dbpm.MemoryHandler` on a transactional table loop.

The memory's writers form the consumer group :func:`memory_group` over the co-partitioned
``clingate.dbpm.verdicts``, ``clingate.dbpm.propagations`` and ``clingate.dbpm.dispatches``; each
member runs a :class:`~streams.worker.tableloop.TableLoop`, which commits a batch's propagations, dead
letters and changelog group in one Kafka transaction, then its input offsets. The changelog topic
(:func:`~streams.worker.dbpm.memory_changelog`, one partition per memory partition) is created when it
is missing.
"""

from __future__ import annotations

from functools import partial

from processors.dbpm import DBPMEngine
from schemas.wire import make_serde
from streams.runtime.metrics import DbpmMetrics
from streams.runtime.settings import Settings
from streams.worker.dbpm import MEMORY_INPUTS, MemoryHandler, memory_changelog
from streams.worker.tableloop import TableLoop, build_table_loop
from topics.catalog import DBPM_DISPATCHES


def memory_group(app_id: str) -> str:
    """The consumer group of the memory writers of the workers of ``app_id``."""
    return f"{app_id}-memory"


def build_memory(settings: Settings, bootstrap: str, metrics: DbpmMetrics, engine: DBPMEngine) -> TableLoop:
    """The memory loop of a worker (stores and transactional id under ``<worker datadir>/memory``);
    ``engine`` is the worker's (:func:`~streams.worker.dbpm.dbpm_engine`)."""
    serde = make_serde(settings.schema_registry_url)
    handler = MemoryHandler(engine, serde, metrics)
    loop = build_table_loop(
        settings, bootstrap, memory_group(settings.app_id), MEMORY_INPUTS, memory_changelog(settings.app_id),
        handler, serde, "memory", metrics.loops,
    )  # fmt: skip
    handler.dispatches_read = partial(loop.read_to_end, DBPM_DISPATCHES)
    return loop
