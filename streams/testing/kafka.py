"""A real Kafka broker for a test, a benchmark or the demo, chosen three ways.

:func:`provide_broker` gives a bootstrap address:

1. ``KAFKA_BOOTSTRAP_SERVERS`` is set: that cluster is used as it is.
2. Else a Docker engine answers a ping and clingate's Kafka image is built (``make images``,
   :mod:`streams.local.images`): a :class:`~streams.local.broker.LocalKafka` runs its broker in a
   container of that image (:func:`~streams.local.images.kafka_image`).
3. Else a :class:`~streams.local.broker.LocalKafka` runs the same broker natively, from Maven Central
   jars.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from streams.local.broker import LocalKafka
from streams.local.images import kafka_image
from streams.runtime.settings import Settings


@dataclass(frozen=True)
class Broker:
    """A broker handed out by :func:`provide_broker`.

    ``local`` is set for a broker started here (native or in a container), so that a test can stop,
    kill or restart it.
    """

    bootstrap: str
    origin: Literal["environment", "testcontainers", "native"]
    local: LocalKafka | None = None


@contextlib.contextmanager
def provide_broker(settings: Settings, directory: Path, containers: bool = True) -> Iterator[Broker]:
    """Give a running broker for the duration of the block: env var, else Docker, else native.

    Args:
        settings: Supplies ``kafka_bootstrap_servers`` and the cache ``home``.
        directory: Where the broker keeps its data (use a fresh temporary directory for a throw-away
            broker).
        containers: False: never a container (the demo runs the native broker, needing no Docker).

    Yields:
        The broker; one started here is stopped when the block exits.
    """
    if settings.kafka_bootstrap_servers:
        yield Broker(settings.kafka_bootstrap_servers, "environment")
        return
    image = kafka_image(settings) if containers else None
    local = LocalKafka(directory, home=settings.home, repository=settings.maven_repository, image=image)
    bootstrap = local.start()
    try:
        yield Broker(bootstrap, "native" if image is None else "testcontainers", local)
    finally:
        local.stop()
