"""Create and inspect the catalog's topics on any cluster, idempotently.

:func:`ensure_topics` creates what is missing and reports, per topic, ``CREATED``, ``EXISTS`` or
``EXISTS_DIFFERENT_CONFIG``; it never alters or deletes an existing topic (changing partitions
re-keys data and changing retention may drop it: that is an operator's decision, so we only
report). :func:`inspect_topics` reports the same comparison without creating anything
(``MISSING`` for absent topics).

Compared: the partition count, the replication factor, and the topic configs clingate sets
(:attr:`TopicSpec.configs`). Other configs the cluster may have (e.g. ``segment.bytes``) are not
ours and are ignored. ``cleanup.policy`` is compared as a set (``compact,delete`` equals
``delete,compact``).

Both take an ``AdminClient`` (:func:`streams.runtime.kafka_config.admin_client` builds one with the process's
security settings): the catalog knows topics, not how to reach a cluster.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata, ConfigResource, NewTopic, ResourceType

from topics.catalog import TopicSpec

DEFAULT_TIMEOUT_S = 30.0


class TopicStatus(StrEnum):
    """How a topic on the cluster relates to its spec."""

    CREATED = "CREATED"
    EXISTS = "EXISTS"
    EXISTS_DIFFERENT_CONFIG = "EXISTS_DIFFERENT_CONFIG"
    MISSING = "MISSING"


@dataclass(frozen=True)
class TopicReport:
    """The outcome for one topic; ``differences`` reads ``what: cluster=X, catalog=Y``."""

    spec: TopicSpec
    outcome: TopicStatus
    differences: tuple[str, ...] = ()


def _normalise(name: str, value: str) -> str:
    if name == "cleanup.policy":
        return ",".join(sorted(part.strip() for part in value.split(",")))
    return value


def _read_state(
    admin: AdminClient, specs: list[TopicSpec], timeout: float
) -> tuple[ClusterMetadata, dict[str, dict[str, str]]]:
    """Metadata and configs of ``specs``, retried while a new topic is not visible everywhere yet.

    A topic just created (by us or a concurrent creator) is committed by the controller before the
    broker's metadata cache has it; for that short window the broker answers UNKNOWN_TOPIC_OR_PART.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            metadata = admin.list_topics(timeout=timeout)
            if any(spec.name not in metadata.topics or metadata.topics[spec.name].error for spec in specs):
                raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
            resources = [ConfigResource(ResourceType.TOPIC, spec.name) for spec in specs]
            futures = admin.describe_configs(resources, request_timeout=timeout) if resources else {}
            configs = {
                resource.name: {name: entry.value for name, entry in future.result(timeout=timeout).items()}
                for resource, future in futures.items()
            }
            return metadata, configs
        except KafkaException as error:
            if error.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _differences(admin: AdminClient, specs: list[TopicSpec], timeout: float) -> dict[str, tuple[str, ...]]:
    metadata, configs_by_name = _read_state(admin, specs, timeout)
    result: dict[str, tuple[str, ...]] = {}
    for spec in specs:
        topic = metadata.topics[spec.name]
        found: list[str] = []
        if len(topic.partitions) != spec.partitions:
            found.append(f"partitions: cluster={len(topic.partitions)}, catalog={spec.partitions}")
        replication = min((len(p.replicas) for p in topic.partitions.values()), default=0)
        if replication != spec.replication:
            found.append(f"replication: cluster={replication}, catalog={spec.replication}")
        actual = configs_by_name[spec.name]
        for name, wanted in spec.configs.items():
            have = actual.get(name)
            if have is None or _normalise(name, have) != _normalise(name, wanted):
                found.append(f"{name}: cluster={have}, catalog={wanted}")
        result[spec.name] = tuple(found)
    return result


def _existing(admin: AdminClient, timeout: float) -> set[str]:
    return set(admin.list_topics(timeout=timeout).topics)


def inspect_topics(
    admin: AdminClient, specs: Iterable[TopicSpec], timeout: float = DEFAULT_TIMEOUT_S
) -> list[TopicReport]:
    """Compare the cluster with ``specs`` without changing anything.

    Args:
        admin: Client of the cluster.
        specs: The topics to check.
        timeout: Seconds per broker request.

    Returns:
        One report per spec, in order: EXISTS, EXISTS_DIFFERENT_CONFIG or MISSING.
    """
    specs = list(specs)
    existing = _existing(admin, timeout)
    present = [spec for spec in specs if spec.name in existing]
    differences = _differences(admin, present, timeout)
    return [_report(spec, differences.get(spec.name), TopicStatus.MISSING) for spec in specs]


def _report(spec: TopicSpec, differences: tuple[str, ...] | None, absent: TopicStatus) -> TopicReport:
    if differences is None:
        return TopicReport(spec, absent)
    status = TopicStatus.EXISTS_DIFFERENT_CONFIG if differences else TopicStatus.EXISTS
    return TopicReport(spec, status, differences)


def ensure_topics(
    admin: AdminClient, specs: Iterable[TopicSpec], timeout: float = DEFAULT_TIMEOUT_S
) -> list[TopicReport]:
    """Create every missing topic of ``specs``; report on those that already exist.

    Safe to run concurrently with another creator: a topic that appears between the check and
    the create is reported as existing and compared like any other.

    Args:
        admin: Client of the cluster.
        specs: The topics to ensure.
        timeout: Seconds per broker request.

    Returns:
        One report per spec, in order: CREATED, EXISTS or EXISTS_DIFFERENT_CONFIG.

    Raises:
        KafkaException: The cluster refused a creation for another reason than "already exists".
    """
    specs = list(specs)
    existing = _existing(admin, timeout)
    missing = [spec for spec in specs if spec.name not in existing]
    new_topics = [
        NewTopic(spec.name, num_partitions=spec.partitions, replication_factor=spec.replication,
                 config=spec.configs)
        for spec in missing
    ]  # fmt: skip
    created: set[str] = set()
    futures = admin.create_topics(new_topics, request_timeout=timeout) if new_topics else {}
    for name, future in futures.items():
        try:
            future.result(timeout=timeout)
        except KafkaException as error:
            if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        else:
            created.add(name)
    to_compare = [spec for spec in specs if spec.name not in created]
    differences = _differences(admin, to_compare, timeout)
    return [_report(spec, differences.get(spec.name), TopicStatus.CREATED) for spec in specs]
